"""Deterministic PyTorch training for the checkpoint GPU check: prints the loss every 10 steps as
an exact hex float, holds HOLD_GIB more GPU memory, and paces itself (STEP_S per step) so a
checkpoint lands mid-run. `python3 torch_train.py STEPS HOLD_GIB STEP_S`."""
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402

steps, hold_gib, step_s = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
held = torch.ones(int(hold_gib * (1 << 30)) // 4, device="cuda")
model = torch.nn.Sequential(
    torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x = torch.randn(1024, 512, device="cuda")
y = torch.randint(0, 10, (1024,), device="cuda")
for step in range(1, steps + 1):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item().hex()}", flush=True)
    time.sleep(step_s)
assert held[0].item() == 1.0
print(f"final {loss.item().hex()}", flush=True)
