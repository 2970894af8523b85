#!/usr/bin/env bash
# The server's HTTP front against hostile clients, on loopback, in one run of `paladin server`:
#   1. GET /healthz p50/p99 with no other client, then with SLOW clients connected that each send
#      a request head one byte every 0.5 s (reconnecting when the server cuts them at the head
#      deadline): the ratio of the two p99s;
#   2. the server's RSS idle, and its peak (VmHWM) while STREAMS clients each try to send a
#      STREAM_MIB chunked body to POST /v1/jobs without a token (each is refused from its head:
#      what it got through before the 401 is printed too).
# Pass two builds' binaries to compare them (an old one reads the whole body: keep STREAM_MIB
# small for it).
#
#   [SLOW=200] [STREAMS=20] [STREAM_MIB=1024] [THREADS=16] bench/http_slow_clients.sh PALADIN...
#
# Release build, 2-core build machine shared with other builds (load ~14), 2026-12-01:
#   cmake --preset release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
#   cmake --build --preset release --target paladin
#   bench/http_slow_clients.sh build/release/paladin
# --http-threads 16: /healthz p99 idle 5.2 ms, with 200 slow clients 1.3 ms (ratio 0.25; a
# second run 8.3 / 6.2 ms, 0.74); RSS idle 12.6 MiB, peak while 20 clients stream 1 GiB chunked
# without a token +0.1 MiB. THREADS=2: p99 6.6 / 8.5 ms (1.27), peak +0.5 MiB. More in
# docs/server.md, "The HTTP front".
set -uo pipefail
[[ $# -gt 0 ]] || set -- build/release/paladin
SLOW=${SLOW:-200}
STREAMS=${STREAMS:-20}
STREAM_MIB=${STREAM_MIB:-1024}
THREADS=${THREADS:-16}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

for paladin in "$@"; do
  dir=$(mktemp -d /tmp/paladin-http-bench.XXXXXX)
  "$paladin" server --listen 127.0.0.1:0 --data "$dir/data" --http-threads "$THREADS" \
    >"$dir/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do [[ -s $dir/data/server.url ]] && break; sleep 0.1; done
  echo "== $paladin (--http-threads $THREADS)"
  python3 - "$(cat "$dir/data/server.url")" "$pid" "$SLOW" "$STREAMS" "$STREAM_MIB" <<'PY'
import socket, sys, threading, time

url, pid, slow, streams, stream_mib = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:])
host, port = url[len("http://"):].rsplit(":", 1)
port = int(port)

def vm(field):
    for line in open("/proc/%d/status" % pid):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0

def healthz_latencies(n):
    out = []
    for _ in range(n):
        start = time.perf_counter()
        try:
            s = socket.create_connection((host, port), timeout=30)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while s.recv(4096):
                pass
            s.close()
            out.append(time.perf_counter() - start)
        except OSError:
            out.append(30.0)
        time.sleep(0.005)
    return sorted(out)

def pct(xs, p):
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000

time.sleep(0.5)
idle = healthz_latencies(1000)

stop = threading.Event()
cut = [0]

def slow_client():
    s = None
    while not stop.is_set():
        try:
            if s is None:
                s = socket.create_connection((host, port), timeout=5)
                s.sendall(b"GET /v1/jobs HTTP/1.1\r\n")
            s.sendall(b"X")
        except OSError:
            cut[0] += 1
            if s is not None:
                s.close()
            s = None
        stop.wait(0.5)
    if s is not None:
        s.close()

threads = [threading.Thread(target=slow_client) for _ in range(slow)]
for t in threads:
    t.start()
time.sleep(2)
loaded = healthz_latencies(1000)
stop.set()
for t in threads:
    t.join()
print("healthz idle:      p50 %.2f ms  p99 %.2f ms" % (pct(idle, 50), pct(idle, 99)))
print("healthz %d slow:  p50 %.2f ms  p99 %.2f ms  (slow clients cut and reconnected: %d)" %
      (slow, pct(loaded, 50), pct(loaded, 99), cut[0]))
print("p99 ratio, slow/idle: %.2f" % (pct(loaded, 99) / pct(idle, 99)))

time.sleep(1)
idle_rss = vm("VmRSS")
try:
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")
except OSError:
    pass
accepted = [0] * streams
answers = [b""] * streams

def stream(k):
    s = socket.create_connection((host, port), timeout=30)
    s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    piece = b"%x\r\n" % (1 << 20) + b"a" * (1 << 20) + b"\r\n"
    try:
        for _ in range(stream_mib):
            s.sendall(piece)
            accepted[k] += 1 << 20
    except OSError:
        pass
    try:
        s.settimeout(2)
        answers[k] = s.recv(64)
    except OSError:
        pass
    s.close()

start = time.time()
ts = [threading.Thread(target=stream, args=(k,)) for k in range(streams)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("RSS idle %.1f MiB; peak while %d clients stream %d MiB chunked without a token: %.1f MiB "
      "(+%.1f MiB); they got %.1f MiB through in all, in %.1f s; answers: %s" %
      (idle_rss, streams, stream_mib, vm("VmHWM"), vm("VmHWM") - idle_rss,
       sum(accepted) / 2**20, time.time() - start,
       sorted(set(a.split(b"\r\n")[0].decode("latin-1") for a in answers))))
PY
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -rf "$dir"
done
