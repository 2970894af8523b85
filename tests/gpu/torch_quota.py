"""PyTorch under Paladin's GPU-memory quota: what a framework sees and does.

Run under `paladin run --gpu-mem Q -- python3 torch_quota.py MODE ...` by
scripts/gpu_check_quota.sh. Prints "PASS <what>" or "FAIL <what>: <why>" lines and exits 1 if
any check failed.

  probe QUOTA_GIB     mem_get_info shows the quota; training below it works; an allocation past
                      it raises torch.cuda.OutOfMemoryError (not a generic CUDA error)
  hold GIB SECONDS QUOTA_GIB
                      holds GIB for SECONDS (so the launcher's usage log samples it), then shows
                      that growing past QUOTA_GIB is refused
"""
import os
import sys
import time

import torch

GIB = 1 << 30
failures = 0


def check(ok, what, why=""):
    global failures
    if ok:
        print(f"PASS {what}", flush=True)
    else:
        failures += 1
        print(f"FAIL {what}: {why}", flush=True)


def allocator():
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "native") or "native"


def train(steps=200):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(512, 1024, device="cuda")
    y = torch.randint(0, 10, (512,), device="cuda")
    first = last = None
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
    return first, last


def probe(quota_gib):
    free, total = torch.cuda.mem_get_info()
    check(total == quota_gib * GIB, f"mem_get_info total is the quota [{allocator()}]",
          f"total {total / GIB:.2f} GiB, quota {quota_gib} GiB")
    check(0 < free <= total, f"mem_get_info free within the quota [{allocator()}]",
          f"free {free / GIB:.2f} GiB")
    first, last = train()
    check(last < first, f"training below the quota [{allocator()}]",
          f"loss {first:.3f} -> {last:.3f}")
    held = []
    error = None
    try:
        for _ in range(int(quota_gib * 4) + 8):  # 256 MiB steps, well past the quota
            held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError as e:
        error = e
    except RuntimeError as e:  # a generic CUDA error is what the check must not see
        check(False, f"OutOfMemoryError past the quota [{allocator()}]", f"{type(e).__name__}: {e}")
        return
    got = len(held) * 256 / 1024
    check(error is not None, f"OutOfMemoryError past the quota [{allocator()}]",
          f"allocated {got:.2f} GiB without an error")
    check(got <= quota_gib, f"held at most the quota before the error [{allocator()}]",
          f"held {got:.2f} GiB under a {quota_gib} GiB quota")
    del held
    torch.cuda.empty_cache()
    first, last = train(50)
    check(last < first, f"training resumes after the refusal [{allocator()}]",
          f"loss {first:.3f} -> {last:.3f}")
    print(f"INFO allocator={allocator()} held_before_oom_gib={got:.2f}", flush=True)


def hold(gib, seconds, quota_gib):
    block = torch.ones(int(gib * GIB) // 4, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    print(f"INFO holding {gib} GiB", flush=True)
    time.sleep(seconds)
    try:
        extra = torch.empty(int((quota_gib - gib + 1) * GIB), dtype=torch.uint8, device="cuda")
        check(False, "growing past the quota is refused", f"got {extra.numel() / GIB:.2f} GiB more")
    except torch.cuda.OutOfMemoryError:
        check(True, "growing past the quota is refused")
    check(bool(block[0].item() == 1.0), "held memory intact")


def main():
    if not torch.cuda.is_available():
        print("FAIL torch.cuda.is_available() is False", flush=True)
        return 1
    mode = sys.argv[1]
    if mode == "probe":
        probe(float(sys.argv[2]))
    elif mode == "hold":
        hold(float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
    else:
        print(f"unknown mode {mode}", file=sys.stderr)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
