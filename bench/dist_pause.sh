#!/usr/bin/env bash
# The pause of a two-rank distributed job's checkpoint against a single process holding the same
# memory, in one run (docs/distributed.md): the two ranks in one tree, and as a gang (each rank its
# own `paladin run` in a rank network of its own, checkpointed by a coordinated cut). Root; CRIU
# (scripts/criu.sh); Debian's python3-torch.
#
#   bench/dist_pause.sh PALADIN MEM_WRITER [MIB_PER_RANK=256] [ROUNDS=3]
#
# The distributed job: tests/ckpt/ddp_train.py (two gloo ranks under torch.multiprocessing.spawn,
# their established loopback connections, a TCP store) with MIB_PER_RANK of touched memory per
# rank. Its first checkpoint's image says how much memory CRIU dumps (its pages-*.img files); the
# single process is bench's mem_writer holding that much. Each round starts one of each and
# checkpoints it with `paladin checkpoint` (which stops it; alternating which goes first), and
# records
#   frozen  CRIU's own frozen time (stats-dump: from freezing the tree to its resume), the pause
#   wall    the whole `paladin checkpoint` command (sockets, manifest, hashing included)
# and prints the medians and the ratios distributed / single. The gang (two rank networks on this
# host, 10.232.0.1 and .2, `paladin rank-net create`; each rank ddp_train.py alone from RANK,
# WORLD_SIZE, MASTER_ADDR/PORT, GLOO_SOCKET_IFNAME=pal0, MIB_PER_RANK each) is cut as the fleet cuts
# a gang: `paladin freeze` of both, then `paladin checkpoint` of each (which kills it); its frozen
# and wall figures are both the cut's wall time, from the first freeze to the end of the last dump.
set -uo pipefail
PALADIN=$(realpath "$1")
MEM_WRITER=$(realpath "$2")
MIB=${3:-256}
ROUNDS=${4:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
((EUID == 0)) || { echo "dist_pause: needs root" >&2; exit 1; }

work=$(mktemp -d /var/tmp/paladin-dist-pause.XXXXXX)
export PALADIN_RUN_DIR=$work/run
mkdir -p "$PALADIN_RUN_DIR"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  sleep 0.5
  "$PALADIN" rank-net destroy pause-r0 >/dev/null 2>&1
  "$PALADIN" rank-net destroy pause-r1 >/dev/null 2>&1
  for p in /sys/fs/cgroup/paladin/pause-* /sys/fs/cgroup/*/paladin/pause-*; do
    [[ -d $p ]] && rmdir "$p" 2>/dev/null
  done
  [[ -n ${KEEP_WORK:-} ]] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT

# frozen_ms IMAGE: CRIU's frozen time of the dump (stats-dump: a 4-byte magic pair, a 4-byte
# size, then StatsEntry{dump = 1: DumpStatsEntry{frozen_time = 2 (microseconds)}}).
frozen_ms() {
  "$PY" - "$1/stats-dump" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
def fields(buf):
    i = 0
    while i < len(buf):
        key = 0; shift = 0
        while True:
            b = buf[i]; i += 1; key |= (b & 0x7f) << shift; shift += 7
            if b < 0x80: break
        if key & 7 == 0:
            v = 0; shift = 0
            while True:
                b = buf[i]; i += 1; v |= (b & 0x7f) << shift; shift += 7
                if b < 0x80: break
            yield key >> 3, v
        elif key & 7 == 2:
            n = 0; shift = 0
            while True:
                b = buf[i]; i += 1; n |= (b & 0x7f) << shift; shift += 7
                if b < 0x80: break
            yield key >> 3, buf[i:i + n]; i += n
        else:
            raise SystemExit("unexpected wire type")
size = struct.unpack("<I", data[8:12])[0]
dump = dict(fields(data[12:12 + size]))[1]
print("%.1f" % (dict(fields(dump))[2] / 1000.0))
PY
}

# start NAME COMMAND...: a job under paladin run (with $RUN_FLAGS); waits for its record's pid.
RUN_FLAGS=()
start() {
  local name=$1
  shift
  mkdir -p "$work/cwd-$name"
  (cd "$work/cwd-$name" && exec "$PALADIN" run --name "$name" "${RUN_FLAGS[@]}" -- "$@") \
    >"$work/$name.out" 2>&1 &
  pids+=($!)
  disown $!
  local i
  for ((i = 0; i < 300; i++)); do
    [[ -n $(find "$PALADIN_RUN_DIR" -maxdepth 2 -path "*/$name-*/job.json") ]] && return 0
    sleep 0.1
  done
  echo "dist_pause: $name did not start: $(cat "$work/$name.out")" >&2
  exit 1
}

# ready NAME WORD: the job's log has WORD.
ready() {
  local i
  for ((i = 0; i < 600; i++)); do
    grep -q "$2" "$PALADIN_RUN_DIR"/"$1"-*/stdout.log 2>/dev/null && return 0
    sleep 0.1
  done
  echo "dist_pause: $1 not ready: $(tail -3 "$PALADIN_RUN_DIR"/"$1"-*/stderr.log)" >&2
  exit 1
}

declare -A frozen wall
# measure NAME ROUND: a checkpoint that stops the job (a dump that leaves a job with connections
# between its processes running is not usable yet: docs/distributed.md); appends to frozen[NAME]
# and wall[NAME], sets dumped (bytes of memory pages in the image).
measure() {
  local image=$work/img-$1-$2 t0 t1
  t0=$(date +%s%N)
  if ! "$PALADIN" checkpoint "$1" --out "$image" >"$work/ck.out" 2>&1; then
    echo "dist_pause: checkpoint of $1 failed: $(cat "$work/ck.out")" >&2
    exit 1
  fi
  t1=$(date +%s%N)
  frozen[$1]+="$(frozen_ms "$image") "
  wall[$1]+="$(((t1 - t0) / 1000000)) "
  dumped=$(cat "$image"/pages-*.img | wc -c)
  rm -rf "$image" "$PALADIN_RUN_DIR"/"$1"-*
}

median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

ddp() {
  start pause-ddp "$PY" "$HERE/../tests/ckpt/ddp_train.py" 100000 0.05 "$MIB"
  ready pause-ddp '^step 3 '
}
one() {
  start pause-one "$MEM_WRITER" "$total_mib" 0
  ready pause-one ready
}
gang() {
  local r
  for r in 0 1; do
    "$PALADIN" rank-net create "pause-r$r" --address "10.232.0.$((r + 1))" >/dev/null || exit 1
  done
  for r in 0 1; do
    RUN_FLAGS=(--net-ns "pause-r$r")
    start "pause-gang$r" env "RANK=$r" WORLD_SIZE=2 MASTER_ADDR=10.232.0.1 MASTER_PORT=29581 \
      GLOO_SOCKET_IFNAME=pal0 "$PY" "$HERE/../tests/ckpt/ddp_train.py" 100000 0.05 "$MIB"
  done
  RUN_FLAGS=()
  ready pause-gang0 '^step 3 '
}
# measure_gang ROUND: the coordinated cut (both frozen, then each dumped and killed).
measure_gang() {
  local t0 t1 r
  t0=$(date +%s%N)
  for r in 0 1; do
    "$PALADIN" freeze "pause-gang$r" >"$work/ck.out" 2>&1 ||
      { echo "dist_pause: freeze of rank $r failed: $(cat "$work/ck.out")" >&2; exit 1; }
  done
  for r in 0 1; do
    "$PALADIN" checkpoint "pause-gang$r" --out "$work/img-gang$r-$1" >"$work/ck.out" 2>&1 ||
      { echo "dist_pause: checkpoint of rank $r failed: $(cat "$work/ck.out")" >&2; exit 1; }
  done
  t1=$(date +%s%N)
  frozen[pause-gang]+="$(((t1 - t0) / 1000000)) "
  wall[pause-gang]+="$(((t1 - t0) / 1000000)) "
  rm -rf "$work"/img-gang*-"$1" "$PALADIN_RUN_DIR"/pause-gang*
  for r in 0 1; do "$PALADIN" rank-net destroy "pause-r$r" >/dev/null; done
}

# A first distributed job sizes the single process.
ddp
measure pause-ddp 0
frozen[pause-ddp]=
wall[pause-ddp]=
total_mib=$((dumped >> 20))
echo "distributed: 2 ranks x $MIB MiB (+ torch), CRIU dumps $total_mib MiB; single: mem_writer $total_mib MiB"
# Each round checkpoints a fresh job of each kind, alternating which goes first.
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then order=(ddp one gang); else order=(gang one ddp); fi
  for kind in "${order[@]}"; do
    "$kind"
    if [[ $kind == gang ]]; then measure_gang "$r"; else measure "pause-$kind" "$r"; fi
  done
done
printf '%-12s %12s %12s  %s\n' job frozen_ms wall_ms 'rounds (frozen ms)'
for name in pause-ddp pause-gang pause-one; do
  printf '%-12s %12s %12s  %s\n' "$name" "$(median "${frozen[$name]}")" "$(median "${wall[$name]}")" \
    "${frozen[$name]}"
done
awk -v fd="$(median "${frozen[pause-ddp]}")" -v fo="$(median "${frozen[pause-one]}")" \
  -v wd="$(median "${wall[pause-ddp]}")" -v wo="$(median "${wall[pause-one]}")" \
  'BEGIN { printf "ratio distributed/single: frozen %.2f, wall %.2f\n", fd / fo, wd / wo }'
awk -v g="$(median "${frozen[pause-gang]}")" -v fo="$(median "${frozen[pause-one]}")" \
  -v wo="$(median "${wall[pause-one]}")" \
  'BEGIN { printf "ratio gang cut/single: against frozen %.2f, against wall %.2f\n", g / fo, g / wo }'
