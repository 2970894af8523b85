"""The tests' one rule for a listener's port: P with P..P+COUNT-1 free now, random, below the
kernel's ephemeral range (ip_local_port_range). Every outgoing connection on the machine takes its
local port from that range, so a port there that was free when chosen may be taken by one before
the listener binds it (an agent's move listener then fails with "Address already in use").

As a module: free_port(count). As a program: `python3 tests/free_port.py [COUNT]` prints P
(tests/cli/testlib.sh's free_port, the browser test)."""
import random
import socket
import sys


def free_port(count=1):
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    if low <= 12000:
        low = 32768
    for _ in range(200):
        port = random.randrange(10000, low - count)
        socks = []
        try:
            for p in range(port, port + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("", p))  # every address: a listener on any of them counts
            return port
        except OSError:
            pass
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {count} free port(s) in 10000-{low}")


if __name__ == "__main__":
    try:
        print(free_port(int(sys.argv[1]) if len(sys.argv) > 1 else 1))
    except (RuntimeError, ValueError) as e:
        sys.exit(f"free_port: {e}")
