#!/usr/bin/env bash
# The transfer's integrity cost, before and after XXH3, on the same bytes in one run:
#   plain  : the pages file copied over one loopback TCP connection into a file, nothing hashed
#            (the baseline);
#   before : an image of format 1 (SHA-256 per file) written and sent by a Paladin of transfer
#            protocol 1 (SHA-256 per chunk at both ends, the whole image hashed again at commit);
#   after  : an image of format 2 (XXH3-128 per 8 MiB chunk) written and sent by this Paladin
#            (the manifest's digests sent as they are, each chunk hashed once on arrival, nothing
#            read again at commit; protocol 3: every frame sealed with AES-128-GCM).
# Each row: the manifest pass (what a checkpoint does after its dump), `image send` to a receiver
# on loopback, and the two together; best of ROUNDS, the contenders interleaved.
# BEFORE_FORMAT=2 gives the older Paladin a format 2 image too: the two protocols on the same
# image (e.g. protocol 2, unsealed, against protocol 3, sealed).
#
#   bench/transfer_integrity.sh OLD_PALADIN NEW_PALADIN IMAGE_MANIFEST [MiB=1024] [ROUNDS=3]
#                               [STREAMS=2] [DIR=/dev/shm/paladin-xfer-integrity]
# OLD_PALADIN: a `paladin` built before protocol 2 (e.g. from the commit before it); NEW_PALADIN
# and IMAGE_MANIFEST (bench/image_manifest) from the same build. On tmpfs the CPU is the limit.
set -euo pipefail
OLD=$1
NEW=$2
MANIFEST=$3
MIB=${4:-1024}
ROUNDS=${5:-3}
STREAMS=${6:-2}
DIR=${7:-/dev/shm/paladin-xfer-integrity}
BF=${BEFORE_FORMAT:-1}
if [[ $BF == 1 ]]; then before="before: SHA-256 (format 1, proto 1)"; else
  before="before: format $BF, OLD_PALADIN's proto"; fi
export PALADIN_TOKEN=bench-token
rm -rf "$DIR"
mkdir -p "$DIR/src"
trap 'rm -rf "$DIR"' EXIT
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (b < a ? b : a) }'; }

head -c $((MIB << 20)) /dev/urandom >"$DIR/src/pages-1.img"
head -c 4096 /dev/urandom >"$DIR/src/core-1.img"

# plain: the pages over loopback into a file.
plain_copy() {
  python3 - "$DIR/src/pages-1.img" "$DIR/copy" <<'PY'
import socket, sys, threading, time
src, dst = sys.argv[1], sys.argv[2]
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
def receive():
    c, _ = srv.accept()
    with open(dst, "wb") as out:
        while True:
            b = c.recv(1 << 20)
            if not b:
                break
            out.write(b)
    c.close()
start = time.monotonic()
t = threading.Thread(target=receive)
t.start()
s = socket.create_connection(srv.getsockname())
with open(src, "rb") as f:
    s.sendfile(f)
s.close()
t.join()
print("%.3f" % (time.monotonic() - start))
PY
}

# image VERSION: a fresh copy of the files with a manifest of that format; prints the pass's time.
image() {
  rm -rf "$DIR/img$1"
  mkdir -p "$DIR/img$1"
  cp "$DIR/src/"*.img "$DIR/img$1/"
  "$MANIFEST" "$DIR/img$1" "$1"
}

# send PALADIN VERSION: receive and send the image of that format; prints the send's time.
send() {
  local paladin=$1 out=$DIR/out$2 log=$DIR/receiver$2.log port="" t0 t1
  rm -rf "$out"
  "$paladin" image receive --listen 0 --out "$out" --once 2>"$log" &
  local pid=$!
  for _ in $(seq 100); do
    port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\),.*/\1/p' "$log")
    [[ -n $port ]] && break
    sleep 0.1
  done
  [[ -n $port ]] || { echo "receiver did not start: $(cat "$log")" >&2; exit 1; }
  t0=$(now)
  "$paladin" image send "$DIR/img$2" "127.0.0.1:$port" --streams "$STREAMS" 2>"$DIR/send$2.log" ||
    { echo "send failed: $(cat "$DIR/send$2.log")" >&2; exit 1; }
  t1=$(now)
  wait "$pid"
  elapsed "$t0" "$t1"
}

plain=1e9 m1=1e9 m2=1e9 s1=1e9 s2=1e9
for _ in $(seq "$ROUNDS"); do
  plain=$(min "$plain" "$(plain_copy)")
  m1=$(min "$m1" "$(image "$BF")")
  s1=$(min "$s1" "$(send "$OLD" "$BF")")
  m2=$(min "$m2" "$(image 2)")
  s2=$(min "$s2" "$(send "$NEW" 2)")
done

echo "image of $MIB MiB + 4 KiB on $(df --output=fstype "$DIR" | tail -1) ($DIR), loopback," \
     "--streams $STREAMS, $(nproc) CPUs, best of $ROUNDS"
awk -v before="$before" -v mib="$MIB" -v p="$plain" -v m1="$m1" -v s1="$s1" -v m2="$m2" -v s2="$s2" 'BEGIN {
  printf "%-34s %9s %9s %9s %11s %9s\n", "", "manifest", "send", "both", "send MiB/s", "vs plain"
  printf "%-34s %9s %8.2fs %9s %11.0f %8.2fx\n", "plain copy (no hash)", "-", p, "-", mib / p, 1
  printf "%-34s %8.2fs %8.2fs %8.2fs %11.0f %8.2fx\n", before,
         m1, s1, m1 + s1, mib / s1, p / s1
  printf "%-34s %8.2fs %8.2fs %8.2fs %11.0f %8.2fx\n", "after: format 2, proto 3 (sealed)",
         m2, s2, m2 + s2, mib / s2, p / s2
  printf "after / before: manifest %.2fx faster, send %.2fx faster, both %.2fx faster\n",
         m1 / m2, s1 / s2, (m1 + s1) / (m2 + s2)
}'
