"""A job with one process stopped (SIGSTOP) by the job itself, for the checkpoint tests' `stopped`
scenario: the interpreter forks a child and both count, one line every 20 ms ("parent N" and
"child N", through one unbuffered stdout). Once both have counted to 10, one of them is stopped:

  child  the parent stops the child (a job whose root is the interpreter: pid 1 of the job's
         namespace cannot be stopped from inside it)
  self   the parent stops itself (under paladin-workload-init it is the init's child, pid 2)

and the other goes on counting; "stopped PID" says which (its pid in the job's namespace). A
process that runs again continues its own count, so a restart would show as "... 1" again.

Usage: python3 stopped_job.py child|self
"""
import os
import signal
import sys
import time


def count(name, until=None):
    n = 0
    while until is None or n < until:
        n += 1
        os.write(1, b"%s %d\n" % (name.encode(), n))
        time.sleep(0.02)
    return n


def main():
    mode = sys.argv[1]
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(ready_r)
        n = count("child", 10)
        os.write(ready_w, b"x")
        os.close(ready_w)
        while True:
            n += 1
            os.write(1, b"child %d\n" % n)
            time.sleep(0.02)
    os.close(ready_w)
    n = count("parent", 10)
    os.read(ready_r, 1)
    if mode == "child":
        os.kill(child, signal.SIGSTOP)
        os.write(1, b"stopped %d\n" % child)
    else:
        os.write(1, b"stopped %d\n" % os.getpid())
        os.kill(os.getpid(), signal.SIGSTOP)
    while True:
        n += 1
        os.write(1, b"parent %d\n" % n)
        time.sleep(0.02)


main()
