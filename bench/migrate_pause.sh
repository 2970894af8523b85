#!/usr/bin/env bash
# The pause of a migration over loopback: a process holding SIZE MiB (mem_writer, not writing)
# under `paladin run`, moved by `paladin migrate` to a `paladin receive` on this machine. Prints
# the migrate command's summary line (pause and its phases). Root; CRIU from scripts/criu.sh.
# Pass two builds' binaries to alternate them (A/B on a noisy machine).
#
#   bench/migrate_pause.sh [SIZE_MIB=2048] [ROUNDS=1] PALADIN [PALADIN...]
#
# --both moves the same workload (tests/ckpt/lazy_mem.py: SIZE MiB of distinct pages, a line
# every 50 ms, rewriting REWRITE_PCT percent of its pages a second, 5 by default) several ways in one run, for each size, each a fresh job to a `paladin receive` of
# its own (the moved job's record reads "moved" at a shared run base), and verifies each moved
# job's memory and every generation:
#   image            `paladin migrate --mode image`: dump to a local image, then send it
#   stream           `--mode stream`: streaming pre-copy, the dump straight into the
#                    destination's page server through the sealed page relays (kept in memory
#                    there)
#   post-copy        `--mode post-copy` (the CRIU of scripts/criu_lazy.sh), its page stream
#                    sealed by the relays
#   plain-post-copy  `--lazy --lazy-plain` (only with BOTH_PLAIN=1): post-copy, the relays
#                    carrying the pages in clear
# (MODES="post-copy" moves by the listed modes only)
# and, as the baseline, a plain copy of SIZE MiB from one process's memory into another's over a
# loopback TCP connection (python sockets, no hashing, no disk). Prints each move's pause
# (paladin's: from stopping the job to its resuming there) and total (until the source is
# released: the end of the migrate command), the plain copy's time, and the ratios: stream
# pause / plain copy, post-copy total / plain copy, image pause / plain copy, and each larger
# size's post-copy pause against the first size's.
#
#   bench/migrate_pause.sh --both PALADIN [SIZE_MIB...]     (default sizes: 256 1024)
set -uo pipefail
if [[ ${1:-} == --both ]]; then
  PALADIN=$(realpath "$2")
  shift 2
  SIZES=("$@")
  [[ ${#SIZES[@]} -gt 0 ]] || SIZES=(256 1024)
  HERE=$(cd "$(dirname "$0")" && pwd)
  export PALADIN_TOKEN=paladin-bench-token-0123456789
  port=$((20000 + RANDOM % 20000))
  REWRITE_PCT=${REWRITE_PCT:-5}
  echo "the workload rewrites ${REWRITE_PCT}% of its memory per second"
  printf '%-6s %-15s %8s %8s  %s\n' MiB move pause_s total_s notes
  for mib in "${SIZES[@]}"; do
    dir=$(mktemp -d /var/tmp/paladin-migrate-both.XXXXXX)
    declare -A pause total
    read -ra modes <<<"${MODES:-image stream post-copy}"
    [[ -n ${BOTH_PLAIN:-} ]] && modes+=(plain-post-copy)
    copy=$(python3 "$HERE/plain_copy.py" "$mib")
    printf '%-6s %-15s %8s %8s  %s\n' "$mib" plain-copy "$copy" "$copy" \
      "$mib MiB from one process's memory into another's over loopback TCP"
    for mode in "${modes[@]}"; do
      out=$dir/out-$mode
      name=both-$mode
      PALADIN_RUN_DIR=$dir/run "$PALADIN" run --name "$name" -- \
        python3 "$HERE/../tests/ckpt/lazy_mem.py" run "$mib" "$out" 0.05 --rewrite "$REWRITE_PCT" >"$dir/job-$mode.out" 2>&1 &
      for _ in $(seq 600); do [[ -s $out ]] && break; sleep 0.1; done
      sleep 1
      port=$((port + 3))
      flags=()
      receive_flags=()
      [[ $mode == image ]] && flags=(--mode image)
      [[ $mode == stream ]] && flags=(--mode stream)
      [[ $mode == post-copy ]] && flags=(--mode post-copy)
      [[ $mode == plain-post-copy ]] && flags=(--lazy --lazy-plain) && receive_flags=(--lazy-plain)
      PALADIN_RUN_DIR=$dir/run "$PALADIN" receive --listen $port --dir "$dir/in-$mode" \
        "${receive_flags[@]}" >"$dir/receive-$mode.log" 2>&1 &
      sleep 0.5
      t0=$(date +%s.%N)
      PALADIN_RUN_DIR=$dir/run "$PALADIN" migrate "$name" --peer 127.0.0.1:$port "${flags[@]}" \
        >"$dir/migrate-$mode.log" 2>&1
      rc=$?
      t1=$(date +%s.%N)
      line=$(grep '^moved' "$dir/migrate-$mode.log")
      if ((rc != 0)) || [[ -z $line ]]; then
        echo "$mib MiB $mode: the move failed: $(tail -1 "$dir/migrate-$mode.log")" >&2
      else
        pause[$mode]=$(sed -n 's/.*pause \([0-9.]*\) s.*/\1/p' <<<"$line")
        total[$mode]=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
        printf '%-6s %-15s %8s %8s  %s\n' "$mib" "$mode" "${pause[$mode]}" "${total[$mode]}" \
          "$(sed 's/.*): //' <<<"$line" | cut -c1-200)"
      fi
      job=$(pgrep -f "lazy_mem.py run $mib $out" | while read -r p; do
        [[ $(cat /proc/$p/comm 2>/dev/null) == python* ]] && echo "$p"; done | head -1)
      if [[ -n $job ]]; then
        kill -USR1 "$job"
        for _ in $(seq 600); do grep -q '^full' "$out" && break; sleep 0.05; done
        kill -9 "$job"
        python3 "$HERE/../tests/ckpt/lazy_mem.py" check "$mib" "$out" | sed "s/^/$mib MiB $mode /"
      fi
      wait 2>/dev/null
    done
    ratio() {  # ratio WHAT A B: A / B
      [[ -n $2 && -n $3 ]] &&
        awk -v m="$mib" -v w="$1" -v a="$2" -v b="$3" \
          'BEGIN {printf "%-6s %-15s %7.2fx  %s\n", m, "ratio", a / b, w}'
    }
    ratio "stream pause / plain copy" "${pause[stream]:-}" "$copy"
    ratio "stream total / plain copy" "${total[stream]:-}" "$copy"
    ratio "post-copy pause / plain copy" "${pause[post-copy]:-}" "$copy"
    ratio "post-copy total / plain copy" "${total[post-copy]:-}" "$copy"
    ratio "image pause / plain copy" "${pause[image]:-}" "$copy"
    ratio "stream pause / image pause" "${pause[stream]:-}" "${pause[image]:-}"
    ratio "post-copy pause: sealed / plain" "${pause[post-copy]:-}" "${pause[plain-post-copy]:-}"
    # The aim that the pause not grow with memory: each size's post-copy pause against the
    # first (smallest) size's of this run.
    if [[ -n ${pause[post-copy]:-} ]]; then
      if [[ -z ${first_mib:-} ]]; then
        first_mib=$mib first_pause=${pause[post-copy]}
      else
        ratio "post-copy pause / its ${first_mib} MiB pause" "${pause[post-copy]}" "$first_pause"
      fi
    fi
    unset pause total
    [[ -n ${KEEP:-} ]] && echo "kept $dir" || rm -rf "$dir"
  done
  exit 0
fi
SIZE=${1:-2048}
ROUNDS=${2:-1}
shift 2 || true
[[ $# -gt 0 ]] || set -- build/release/paladin
WRITER=$(dirname "$1")/bench/mem_writer
[[ -x $WRITER ]] || { echo "missing $WRITER: build first (cmake --build --preset release)" >&2; exit 1; }
export PALADIN_TOKEN=paladin-bench-token-0123456789

move() {  # move PALADIN
  local dir
  dir=$(mktemp -d /var/tmp/paladin-migrate-bench.XXXXXX)
  PALADIN_RUN_DIR=$dir/run "$1" run --name moving -- "$WRITER" "$SIZE" 0 >"$dir/job.out" 2>&1 &
  for _ in $(seq 300); do grep -q ready "$dir/job.out" 2>/dev/null && break; sleep 0.2; done
  # One run base for both ends (one machine), the destination's images in a folder of its own.
  PALADIN_RUN_DIR=$dir/run "$1" receive --listen 7411 --dir "$dir/in" >"$dir/receive.log" 2>&1 &
  local receiver=$!
  sleep 1
  PALADIN_RUN_DIR=$dir/run "$1" migrate moving --peer 127.0.0.1:7411 --mode image >"$dir/migrate.log" 2>&1
  grep -E "pause|error|refus" "$dir/migrate.log" | tail -n 1
  sleep 1
  pkill -f "$WRITER $SIZE 0" 2>/dev/null
  kill "$receiver" 2>/dev/null
  wait 2>/dev/null
  [[ -n ${KEEP:-} ]] && echo "kept $dir" || rm -rf "$dir"
}

for ((round = 1; round <= ROUNDS; ++round)); do
  for paladin in "$@"; do
    echo "== round $round: $paladin"
    move "$paladin"
  done
done
