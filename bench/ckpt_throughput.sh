#!/usr/bin/env bash
# Checkpoint benchmarks (root; CRIU from scripts/criu.sh):
#  1. dump and restore throughput of a process holding SIZE MiB, as a ratio of the raw sequential
#     write and read speed of the same directory (dd with fdatasync; reads after dropping caches);
#  2. the pause of a checkpoint of that process while it rewrites 5% of its memory per second,
#     without and with pre-dumps (the pause is the final dump: the job is frozen during it).
#
#   bench/ckpt_throughput.sh [BUILD_DIR] [DIR] [SIZE_MIB]
set -euo pipefail
BUILD=${1:-build/release}
DIR=${2:-/var/tmp/paladin-bench}
SIZE=${3:-2048}
PALADIN=$BUILD/paladin
WRITER=$BUILD/bench/mem_writer
for f in "$PALADIN" "$WRITER"; do
  [[ -x $f ]] || { echo "missing $f: build first (cmake --build --preset release)" >&2; exit 1; }
done
rm -rf "$DIR"
mkdir -p "$DIR"
export PALADIN_RUN_DIR=$DIR/run
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
now() { date +%s.%N; }

echo "== raw speed of $DIR ($SIZE MiB)"
t0=$(now); dd if=/dev/zero of="$DIR/raw" bs=1M count="$SIZE" conv=fdatasync status=none; t1=$(now)
drop_caches
t2=$(now); dd if="$DIR/raw" of=/dev/null bs=1M status=none; t3=$(now)
rm -f "$DIR/raw"
raw_write=$(awk -v s="$SIZE" -v t="$(seconds "$t0" "$t1")" 'BEGIN { printf "%.0f", s / t }')
raw_read=$(awk -v s="$SIZE" -v t="$(seconds "$t2" "$t3")" 'BEGIN { printf "%.0f", s / t }')
echo "write ${raw_write} MiB/s, read ${raw_read} MiB/s"

# start NAME PCT: a mem_writer job; waits until its memory is touched.
start() {
  "$PALADIN" run --name "$1" -- "$WRITER" "$SIZE" "$2" >"$DIR/$1.out" 2>&1 &
  for _ in $(seq 300); do grep -q ready "$DIR/$1.out" 2>/dev/null && return; sleep 0.1; done
  echo "$1 did not start" >&2; exit 1
}
phase() { grep -o "$1 [0-9.]* s" | awk '{print $(NF-1)}'; }

echo "== dump and restore throughput"
start static 0
t0=$(now)
out=$("$PALADIN" checkpoint static --out "$DIR/img-static" 2>/dev/null)
sync; t1=$(now)
echo "$out"
image_mib=$(du -sm "$DIR/img-static" | cut -f1)
dump_s=$(seconds "$t0" "$t1")
drop_caches
t0=$(now)
"$PALADIN" restore "$DIR/img-static" 2>/dev/null
t1=$(now)
restore_s=$(seconds "$t0" "$t1")
pkill -f "mem_writer $SIZE 0" || true
dump_rate=$(awk -v s="$image_mib" -v t="$dump_s" 'BEGIN { printf "%.0f", s / t }')
restore_rate=$(awk -v s="$image_mib" -v t="$restore_s" 'BEGIN { printf "%.0f", s / t }')
printf 'checkpoint (whole command, incl. manifest hashing and sync): %s MiB in %s s = %s MiB/s, %.2f x raw write\n' \
  "$image_mib" "$dump_s" "$dump_rate" "$(awk -v a="$dump_rate" -v b="$raw_write" 'BEGIN{print a/b}')"
printf 'restore (whole command, incl. verify, cold cache): %s MiB in %s s = %s MiB/s, %.2f x raw read\n' \
  "$image_mib" "$restore_s" "$restore_rate" "$(awk -v a="$restore_rate" -v b="$raw_read" 'BEGIN{print a/b}')"

echo "== pause with 5%/s of memory rewritten"
if grep -q 'pre-dumps.*unavailable' <<<"$("$PALADIN" doctor 2>/dev/null)"; then
  echo "pre-dumps are unavailable on this kernel (no dirty-memory tracking): not measured"
  rm -rf "$DIR"
  exit 0
fi
for pre in 0 2; do
  start "busy$pre" 5
  sleep 2
  out=$("$PALADIN" checkpoint "busy$pre" --out "$DIR/img-busy$pre" --pre-dump "$pre" 2>/dev/null)
  echo "$out"
  pause=$(phase "criu dump" <<<"$out")
  echo "pre-dumps $pre: pause (final dump) $pause s"
  eval "pause$pre=$pause"
done
printf 'pre-dumps cut the pause %.1f x\n' "$(awk -v a="$pause0" -v b="$pause2" 'BEGIN{print a/b}')"
rm -rf "$DIR"
