"""Workloads holding sockets, for ckpt_test.sh's socket scenarios. Each prints what it does to
stdout (the job's log), one line per event, flushed:

  pair   a parent listening on loopback and its child connected to it: the child sends
         numbers 1, 2, ... every 10 ms, the parent answers each with its double, and each side
         checks what it gets ("conn LOCAL PEER" once, then "echo N"; "BAD ..." on a mismatch).
  udp    a UDP socket on loopback ("udp PORT") answering "ping N" with "pong N".
  echo   a TCP server on loopback ("listen PORT") echoing each client's lines back; says
         "accepted PEER" and, when a client's connection ends, "ended PEER: WHY".
  client PORT   not a job: the outside peer of `echo`, sending "N" every 50 ms and checking
         the echo ("conn LOCAL" once, then "echo N"); when the connection fails, "error ERRNO"
         (e.g. "error ECONNRESET"), or "closed" when it ends without an error, and exits.
"""
import errno
import os
import socket
import sys
import threading
import time


def say(line):
    print(line, flush=True)


def pair():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    if os.fork() == 0:
        server.close()
        conn = socket.create_connection(("127.0.0.1", port))
        files = conn.makefile("rw")
        say("conn %s:%d %s:%d" % (conn.getsockname() + conn.getpeername()))
        n = 0
        while True:
            n += 1
            files.write("%d\n" % n)
            files.flush()
            answer = files.readline()
            if answer != "%d\n" % (2 * n):
                say("BAD echo of %d: %r" % (n, answer))
                os._exit(1)
            say("echo %d" % n)
            time.sleep(0.01)
    conn, _ = server.accept()
    server.close()
    files = conn.makefile("rw")
    expected = 0
    for line in files:
        expected += 1
        if line != "%d\n" % expected:
            say("BAD number %r where %d was due" % (line, expected))
            os._exit(1)
        files.write("%d\n" % (2 * expected))
        files.flush()
    say("BAD: the child closed the connection")


def udp():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    say("udp %d" % sock.getsockname()[1])
    while True:
        data, peer = sock.recvfrom(512)
        if data.startswith(b"ping "):
            sock.sendto(b"pong " + data[5:], peer)


def serve(conn, peer):
    say("accepted %s:%d" % peer)
    try:
        files = conn.makefile("rwb")
        for line in files:
            files.write(line)
            files.flush()
        why = "closed by the peer"
    except OSError as e:
        why = "%s (errno %d)" % (e.strerror, e.errno)
    say("ended %s:%d: %s" % (peer + (why,)))


def echo():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    say("listen %d" % server.getsockname()[1])
    while True:
        conn, peer = server.accept()
        threading.Thread(target=serve, args=(conn, peer), daemon=True).start()


def client():
    conn = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    say("conn %s:%d" % conn.getsockname())
    files = conn.makefile("rw")
    n = 0
    try:
        while True:
            n += 1
            files.write("%d\n" % n)
            files.flush()
            answer = files.readline()
            if not answer:
                say("closed")
                return
            if answer != "%d\n" % n:
                say("BAD echo of %d: %r" % (n, answer))
                return
            say("echo %d" % n)
            time.sleep(0.05)
    except OSError as e:
        say("error %s" % errno.errorcode.get(e.errno, str(e.errno)))


{"pair": pair, "udp": udp, "echo": echo, "client": client}[sys.argv[1]]()
