"""The baseline of bench/migrate_pause.sh --both: SIZE MiB from one process's memory into
another's over a loopback TCP connection, no hashing, no disk. Prints the seconds it took.

  python3 bench/plain_copy.py SIZE_MIB
"""
import socket
import sys
import threading
import time

n = int(sys.argv[1]) << 20
src = bytearray(n)  # touched, as a job's memory is, a MiB at a time (no second copy)
pattern = bytes(range(256)) * 4096
for i in range(0, n, len(pattern)):
    src[i:i + len(pattern)] = pattern
dst = memoryview(bytearray(n))  # the destination's memory, allocated before the clock starts
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)


def receive():
    c, _ = srv.accept()
    got = 0
    while got < n:
        r = c.recv_into(dst[got:], min(n - got, 1 << 22))
        if r == 0:
            break
        got += r
    c.close()


t = threading.Thread(target=receive)
t.start()
t0 = time.time()
s = socket.create_connection(srv.getsockname())
s.sendall(src)
s.close()
t.join()
print(f"{time.time() - t0:.2f}")
