"""One rank of a two-rank gang, for gang_test.py: the env:// rendezvous (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) over plain TCP, then STEPS steps over the one connection between the
ranks, each an exchange whose result depends on every earlier one, so a step lost, repeated or
taken from another run shows in the final value. Rank 0 listens on MASTER_ADDR:MASTER_PORT,
rank 1 connects (for up to a minute, while the routes appear).

  gang_rank.py STEPS SLEEP_S [--tag TAG]      (TAG: only for the test to find its processes)

Printed (flushed):
  rank R of 2 src SOURCE_ADDRESS ifname IFNAME     (the address its packets leave with)
  rank 0 saw rank 1 from PEER_ADDRESS              (rank 0)
  rank 1 was seen from PEER_ADDRESS                (rank 1)
  step N VALUE                                     (rank 0, every step)
  final VALUE                                      (both ranks)
"""
import os
import socket
import sys
import time

MOD = (1 << 61) - 1


def mix(value, step, mine, theirs):
    return (value * 1000003 + step * 7919 + mine * 31 + theirs) % MOD


def expected(steps):
    """The final value of an uninterrupted run."""
    value = 0
    for step in range(1, steps + 1):
        a, b = (value + 1) % 9973, (value + 2) % 9973
        value = mix(value, step, a, b)
    return value


def recv_line(conn):
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            raise ConnectionError("the other rank closed the connection")
        data += chunk
    return data.decode().strip()


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    sleep_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    master = os.environ["MASTER_ADDR"]
    port = int(os.environ["MASTER_PORT"])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((master, port))
        print(f"rank {rank} of {world} src {probe.getsockname()[0]} "
              f"ifname {os.environ.get('GLOO_SOCKET_IFNAME', '')}", flush=True)
    if rank == 0:
        with socket.socket() as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((master, port))
            listener.listen(1)
            conn, peer = listener.accept()
        said = recv_line(conn)
        print(f"rank 0 saw {said} from {peer[0]}", flush=True)
        conn.sendall((peer[0] + "\n").encode())
    else:
        deadline = time.time() + 60
        while True:
            try:
                conn = socket.create_connection((master, port), timeout=5)
                conn.settimeout(None)
                break
            except OSError as e:
                if time.time() > deadline:
                    print(f"rank {rank}: cannot reach {master}:{port}: {e}", flush=True)
                    sys.exit(1)
                time.sleep(0.2)
        conn.sendall(f"rank {rank}\n".encode())
        print(f"rank {rank} was seen from {recv_line(conn)}", flush=True)
    value = 0
    for step in range(1, steps + 1):
        mine = (value + 1 + rank) % 9973
        conn.sendall(f"{step} {mine}\n".encode())
        got_step, theirs = (int(x) for x in recv_line(conn).split())
        if got_step != step:
            print(f"MISMATCH: step {step} met the other rank's step {got_step}", flush=True)
            sys.exit(1)
        a, b = (mine, theirs) if rank == 0 else (theirs, mine)
        value = mix(value, step, a, b)
        if rank == 0:
            print(f"step {step} {value}", flush=True)
        time.sleep(sleep_s)
    if steps:
        print(f"final {value}", flush=True)
        if value != expected(steps):
            print(f"MISMATCH: final {value} != {expected(steps)}", flush=True)
            sys.exit(1)
    conn.close()
    # Stay a moment, so that the test sees the routes while the gang runs.
    time.sleep(float(os.environ.get("GANG_RANK_LINGER_S", "0")))


if __name__ == "__main__":
    main()
