"""One request on the node agent's local socket (a JSON line each way), for the security tests
that speak to it: local_socket_flood.py and slurm_stale_pid.py import it, local_socket_test.sh
runs it. The tests copy it next to their scripts into a folder every uid can read.

As a program: agent_socket.py SOCKET JSON [STAY_S] prints the answer's line, then keeps the
connection STAY_S seconds more (as a step's shim stays: the agent forgets steps whose shim is
gone)."""
import json
import socket
import subprocess
import sys
import time


def exchange(sock, text, timeout):
    """Sends `text` and a newline on a new connection to `sock`; returns the connection and the
    answer's bytes (up to its newline, or what came before the agent closed)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock)
    s.sendall(text.encode() + b"\n")
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return s, data


def call(sock, request, timeout):
    """`request` (a dict) as the caller's uid; the answer, parsed."""
    _, data = exchange(sock, json.dumps(request), timeout)
    return json.loads(data.decode())


def call_as(uid, script, sock, request, timeout):
    """`request` as `uid` (and the group of that number, no others): `script` answers it, run
    by the system's python with the arguments `call SOCK JSON`, printing the answer's JSON."""
    out = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                          "/usr/bin/python3", script, "call", sock, json.dumps(request)],
                         capture_output=True, text=True, timeout=timeout)
    return json.loads(out.stdout)


def caller(sock, script, timeout, as_timeout):
    """A `call(request, uid=None)` on `sock`: as the caller's uid (waiting up to `timeout`
    seconds), or as `uid` through `script` (call_as, up to `as_timeout` seconds)."""
    def call_on_socket(request, uid=None):
        if uid is None:
            return call(sock, request, timeout)
        return call_as(uid, script, sock, request, as_timeout)
    return call_on_socket


if __name__ == "__main__":
    connection, answer = exchange(sys.argv[1], sys.argv[2], 30)
    print(answer.decode().strip(), flush=True)
    if len(sys.argv) > 3:
        time.sleep(float(sys.argv[3]))
