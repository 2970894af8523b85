"""One rank of a gang, for gang_test.py: the rendezvous the way torch.distributed's env:// does
it, over plain TCP. Rank 0 listens on MASTER_ADDR:MASTER_PORT; every other rank connects (for up
to a minute, while the routes appear) and says its rank; rank 0 answers each with the address the
connection came from. Each rank prints what it saw and exits 0:

  rank R of W src SOURCE_ADDRESS            (the address its packets leave with)
  rank 0 saw rank R from PEER_ADDRESS       (rank 0 only)
  rank R was seen from PEER_ADDRESS         (other ranks)
"""
import os
import socket
import sys
import time

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
        listener.listen(world)
        for _ in range(world - 1):
            conn, peer = listener.accept()
            with conn:
                said = conn.recv(64).decode().strip()
                print(f"rank 0 saw {said} from {peer[0]}", flush=True)
                conn.sendall(peer[0].encode())
else:
    deadline = time.time() + 60
    while True:
        try:
            conn = socket.create_connection((master, port), timeout=5)
            break
        except OSError as e:
            if time.time() > deadline:
                print(f"rank {rank}: cannot reach {master}:{port}: {e}", flush=True)
                sys.exit(1)
            time.sleep(0.2)
    with conn:
        conn.sendall(f"rank {rank}".encode())
        print(f"rank {rank} was seen from {conn.recv(64).decode()}", flush=True)
# Stay a moment, so that the test sees the routes while the gang runs.
time.sleep(float(os.environ.get("GANG_RANK_LINGER_S", "3")))
