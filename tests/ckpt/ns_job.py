"""What a job sees of itself, for the checkpoint tests (docs/ckpt.md, "What a job sees"):

  self  every 20 ms "self N GETPID STAT_PID LINK_PID PROCS": getpid(), the pid in /proc/self/stat,
        the pid /proc/self names, and how many processes /proc lists (its own /proc: only the
        job's). A restored job continues N.
  ipc   System V IPC of the job's own namespace: a 1 MiB shared memory segment filled with a
        pattern, a semaphore set to 4242 and a message queue holding one message, all under the
        key 0x504c4431; every 20 ms "ipc N ok", or "BAD ..." naming what changed.

Usage: python3 ns_job.py self|ipc
"""
import ctypes
import os
import sys
import time

IPC_CREAT = 0o1000
IPC_EXCL = 0o2000
IPC_NOWAIT = 0o4000
SETVAL = 16
GETVAL = 12
KEY = 0x504C4431
SIZE = 1 << 20


def say(text):
    os.write(1, (text + "\n").encode())


def watch_self():
    n = 0
    while True:
        n += 1
        with open("/proc/self/stat") as f:
            stat_pid = f.read().split()[0]
        link_pid = os.readlink("/proc/self")
        procs = sum(1 for name in os.listdir("/proc") if name.isdigit())
        say("self %d %d %s %s %d" % (n, os.getpid(), stat_pid, link_pid, procs))
        time.sleep(0.02)


def pattern():
    block = bytes((i * 7 + 3) & 0xFF for i in range(4096))
    return block * (SIZE // len(block))


class MsgBuf(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 32)]


def watch_ipc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    shm = libc.shmget(KEY, SIZE, IPC_CREAT | IPC_EXCL | 0o600)
    sem = libc.semget(KEY, 1, IPC_CREAT | IPC_EXCL | 0o600)
    msq = libc.msgget(KEY, IPC_CREAT | IPC_EXCL | 0o600)
    if shm < 0 or sem < 0 or msq < 0:
        say("BAD create: errno %d" % ctypes.get_errno())
        return 1
    addr = libc.shmat(shm, None, 0)
    want = pattern()
    ctypes.memmove(addr, want, SIZE)
    libc.semctl(sem, 0, SETVAL, ctypes.c_int(4242))
    msg = MsgBuf(7, b"paladin")
    libc.msgsnd(msq, ctypes.byref(msg), 32, 0)
    say("ipc created shm %d sem %d msq %d" % (shm, sem, msq))
    n = 0
    while True:
        n += 1
        got = ctypes.string_at(addr, SIZE)
        if got != want:
            at = next(i for i in range(SIZE) if got[i] != want[i])
            say("BAD shm: byte %d differs" % at)
        if libc.semctl(sem, 0, GETVAL) != 4242:
            say("BAD sem: value %d" % libc.semctl(sem, 0, GETVAL))
        out = MsgBuf()
        if libc.msgrcv(msq, ctypes.byref(out), 32, 7, IPC_NOWAIT) < 0 or out.mtext != b"paladin":
            say("BAD msq: no message (errno %d)" % ctypes.get_errno())
        else:
            libc.msgsnd(msq, ctypes.byref(out), 32, 0)
        say("ipc %d ok" % n)
        time.sleep(0.02)


if sys.argv[1] == "self":
    watch_self()
else:
    sys.exit(watch_ipc())
