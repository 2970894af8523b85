"""POSIX shared memory and a named semaphore, the way Python's multiprocessing (and so PyTorch's
launchers) holds them, for distributed_test.sh's posix_shm scenario:

  posix_shm_job.py

A 1 MiB multiprocessing.shared_memory segment (a file in /dev/shm, kept by name) with a pattern,
and a lock of the spawn context (a named POSIX semaphore: glibc maps a temporary file, links it
under the semaphore's name and removes the temporary name). Every 50 ms: take the lock, check
the whole pattern, bump the segment's counter, release; prints "shm N ok" (N the counter) or
"BAD ..." and exits 1. Prints "names SEGMENT" once so the test can look for it on the host.
"""
import multiprocessing as mp
import sys
import time
from multiprocessing import shared_memory

SIZE = 1 << 20


def pattern(i):
    return (i * 131 + 7) % 251


def main():
    lock = mp.get_context("spawn").Lock()
    seg = shared_memory.SharedMemory(create=True, size=SIZE)
    buf = seg.buf
    expected = bytes(pattern(i) for i in range(256)) * (SIZE // 256)
    buf[8:SIZE] = expected[8:]
    print("names %s" % seg.name, flush=True)
    n = 0
    while True:
        with lock:
            if bytes(buf[8:SIZE]) != expected[8:]:
                print("BAD pattern at count %d" % n, flush=True)
                sys.exit(1)
            stored = int.from_bytes(buf[0:8], "little")
            if stored != n:
                print("BAD counter %d where %d was due" % (stored, n), flush=True)
                sys.exit(1)
            n += 1
            buf[0:8] = n.to_bytes(8, "little")
        print("shm %d ok" % n, flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    main()
