"""A client without a move's keys that tries to read a post-copy move's memory from the source's
page server (tests/ckpt/migrate_lazy_test.sh, case attack). Until STOP exists it connects to
HOST:PORT again and again, in turn:
  plain     CRIU's page request in clear (PS_IOV_GET for pid 1's first pages), as the puller would
            send it without TLS;
  stranger  TLS with a certificate and key of its own (CERT, KEY), then the same request;
  nocert    TLS without a client certificate, then the same request;
  idle      connects and says nothing, holding the connection until STOP exists.
It reads whatever comes back for up to 2 s and prints one line per connection that got through
TCP's handshake: "MODE bytes=N memory=yes|no" (memory: the bytes hold a run of lazy_mem.py's
memory pattern, or a whole page), and at the end "attacker: connected N, got-memory M, refused-tcp
R".

  python3 page_attacker.py HOST PORT STOP CERT KEY [MODE...]   (default: all three in turn)
"""
import os
import socket
import ssl
import struct
import sys
import time

PAGE = 4096
PATTERN = bytes(range(16, 48))  # lazy_mem.py's memory is bytes(range(256)) repeated
PS_IOV_GET = 7
PS_TYPE_PID = 1


def request():
    # struct page_server_iov {u32 cmd; u32 nr_pages; u64 vaddr; u64 dst_id}
    dst_id = (1 << 8) | PS_TYPE_PID
    return struct.pack("<IIQQ", PS_IOV_GET, 16, 0x7f0000000000, dst_id)


def drain(sock, deadline):
    got = b""
    while time.time() < deadline and len(got) < 4 * PAGE:
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, ssl.SSLError, OSError):
            break
        if not chunk:
            break
        got += chunk
    return got


def attempt(host, port, mode, cert, key, stop):
    raw = socket.create_connection((host, port), timeout=2)
    deadline = time.time() + 2
    try:
        if mode == "idle":
            while not os.path.exists(stop):
                time.sleep(0.05)
            return drain(raw, time.time() + 0.5)
        if mode == "plain":
            sock = raw
        else:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            if mode == "stranger":
                ctx.load_cert_chain(cert, key)
            sock = ctx.wrap_socket(raw)
        try:
            sock.sendall(request())
        except (ssl.SSLError, OSError):
            pass
        return drain(sock, deadline)
    except (ssl.SSLError, OSError):
        return b""
    finally:
        raw.close()


def main():
    host, port, stop, cert, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    modes = sys.argv[6:] or ["plain", "stranger", "nocert"]
    connected = memory = refused_tcp = 0
    i = 0
    while not os.path.exists(stop):
        mode = modes[i % len(modes)]
        i += 1
        try:
            got = attempt(host, port, mode, cert, key, stop)
        except OSError:
            refused_tcp += 1
            time.sleep(0.005)
            continue
        connected += 1
        leaked = PATTERN in got or len(got) >= PAGE
        memory += leaked
        print(f"{mode} bytes={len(got)} memory={'yes' if leaked else 'no'}", flush=True)
    print(f"attacker: connected {connected}, got-memory {memory}, refused-tcp {refused_tcp}",
          flush=True)


if __name__ == "__main__":
    main()
