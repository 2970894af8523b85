#!/usr/bin/env python3
"""The CPU time each thread on this machine spent while a command ran: which stage of a pipeline
(a move's dumping CRIU, its page relays, the puller, the workload) is the one that bounds it.

    bench/thread_cpu.py [--every SECONDS] [--top N] -- COMMAND [ARGS...]

Runs COMMAND and samples /proc/*/task/*/stat every SECONDS (default 0.05) meanwhile. Prints
COMMAND's own output, then the wall time and, for each thread, its user+system CPU seconds used
between the first and the last sample, with its process's command line and its name (the
kernel's 15-character `comm`), the largest first (the top N, default 25). A thread that ends between two samples loses
at most one interval of what it used; the sampling itself costs a few percent of one core.
Exits with COMMAND's exit code.
"""
import os
import subprocess
import sys
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")


def threads():
    """{(pid, tid): (process command line, thread comm, cpu ticks)} for every thread now."""
    seen = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                process = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            if not process:
                with open(f"/proc/{pid}/comm") as f:
                    process = "[" + f.read().strip() + "]"
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            # The thread's name is in parentheses and may hold spaces: the fields follow the last ')'.
            name = stat[stat.find("(") + 1:stat.rfind(")")]
            fields = stat[stat.rfind(")") + 2:].split()
            seen[(int(pid), int(tid))] = (process, name, int(fields[11]) + int(fields[12]))
    return seen


def main():
    args = sys.argv[1:]
    every, top = 0.05, 25
    while args and args[0] != "--":
        if args[0] == "--every" and len(args) > 1:
            every = float(args[1])
            args = args[2:]
        elif args[0] == "--top" and len(args) > 1:
            top = int(args[1])
            args = args[2:]
        else:
            sys.exit(__doc__)
    if not args or len(args) < 2:
        sys.exit(__doc__)
    command = args[1:]
    first = threads()
    last = dict(first)
    done = threading.Event()

    def sample():
        while not done.wait(every):
            for key, value in threads().items():
                last[key] = value

    sampler = threading.Thread(target=sample, daemon=True)
    began = time.monotonic()
    sampler.start()
    code = subprocess.call(command)
    wall = time.monotonic() - began
    done.set()
    sampler.join()
    for key, value in threads().items():
        last[key] = value
    used = []
    for key, (process, name, ticks) in last.items():
        spent = ticks - (first[key][2] if key in first else 0)
        if spent > 0 and key[0] != os.getpid():
            used.append((spent, key, process, name))
    used.sort(reverse=True)
    print(f"\nthread_cpu: {wall:.2f} s wall, {sum(u[0] for u in used) / TICK:.2f} CPU-s in all "
          f"({os.cpu_count()} CPUs); the busiest threads:")
    for spent, (pid, tid), process, name in used[:top]:
        print(f"  {spent / TICK:7.2f} s  {pid:>7}/{tid:<7} {name:<16} {process[:90]}")
    return code


if __name__ == "__main__":
    sys.exit(main())
