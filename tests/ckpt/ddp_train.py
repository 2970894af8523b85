"""A two-rank torch.distributed DDP training loop (gloo over loopback TCP), both ranks in one
process tree, the way a user starts one with torch.multiprocessing.spawn. Deterministic: fixed
seeds, fixed data, one thread per rank, so the loss of every step is the same bits in every
uninterrupted run. For distributed_test.sh:

  ddp_train.py STEPS SLEEP_S [MiB] [--tag TAG]

With RANK in the environment, this process is that one rank alone, as torchrun starts each
(gang_net_test.sh: one rank per node): RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
GLOO_SOCKET_IFNAME come from the environment.

Each rank builds the same small model (seed 0) and its own fixed shard of a synthetic regression
set (seed 1000 + rank); every step is a forward and backward pass, DDP's gradient all-reduce and
an SGD step, then the loss is all-reduced and rank 0 prints

  step N LOSS_HEX

(float.hex(): every bit), flushed, and sleeps SLEEP_S so a checkpoint can land mid-run. At the
end rank 0 prints "final LOSS_HEX" and both ranks exit 0. MiB (default 0) makes each rank also
hold that much memory, touched, so the benchmark can size the job.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

WORLD = 2


def rank_main(rank, steps, sleep_s, mib, port):
    torch.set_num_threads(1)
    if port is not None:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
    # Gloo otherwise takes the address the host name resolves to; the ranks talk over loopback.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # A cut while this rank joins the rendezvous interrupts its connect to the store, which
    # torch 1.13 reports as an error rather than retrying (docs/distributed.md, "Not supported
    # yet"): join again, as newer torch versions do.
    for attempt in range(5):
        try:
            dist.init_process_group("gloo", rank=rank, world_size=WORLD)
            break
        except RuntimeError as e:
            if "Interrupted system call" not in str(e) or attempt == 4:
                raise
            print("rank %d: joining again after: %s" % (rank, e), file=sys.stderr, flush=True)
    ballast = bytearray(mib << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = (i >> 12) % 251
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    ddp = DistributedDataParallel(model)
    data = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(64, 16, generator=data)
    y = x.sum(dim=1, keepdim=True).sin()
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        total = loss.detach().double().clone()
        dist.all_reduce(total)
        mean = total.item() / WORLD
        if rank == 0:
            print("step %d %s" % (step, mean.hex()), flush=True)
        time.sleep(sleep_s)
    if rank == 0:
        print("final %s" % mean.hex(), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    args = sys.argv[1:]
    if "--tag" in args:  # a test's mark on the command line (tests/e2e/gang_test.py), unused
        at = args.index("--tag")
        del args[at:at + 2]
    steps = int(args[0])
    sleep_s = float(args[1])
    mib = int(args[2]) if len(args) > 2 else 0
    if "RANK" in os.environ:
        if int(os.environ["WORLD_SIZE"]) != WORLD:
            sys.exit("WORLD_SIZE must be %d" % WORLD)
        rank_main(int(os.environ["RANK"]), steps, sleep_s, mib, None)
        return
    # A free port for the rendezvous (the ranks' own connections are made through it), by the
    # tests' one rule (tests/free_port.py: below the ephemeral range, from which an outgoing
    # connection could take it while the ranks start, before rank 0 listens).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from free_port import free_port

    port = free_port()
    mp.spawn(rank_main, args=(steps, sleep_s, mib, port), nprocs=WORLD, join=True)


if __name__ == "__main__":
    main()
