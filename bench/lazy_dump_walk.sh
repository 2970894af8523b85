#!/usr/bin/env bash
# The frozen part of a lazy dump that grows with memory (docs/lazy_migration.md, "The page-map
# walk without pipes"): a tests/ckpt/lazy_mem.py process holding MIB MiB is dumped with
# `criu dump --lazy-pages -v4` until its page server starts (then both are killed: nothing is
# restored), and CRIU's own log gives the time from the start of the memory dump to the page
# server, the whole dump's, and how many times it resized a page-pipe pipe. Each CRIU named is
# run in turn, RUNS times, so that two builds are compared under the same load. Root; a CRIU
# with Paladin's lazy-pages patches (scripts/criu_lazy.sh).
#
#   bash bench/lazy_dump_walk.sh MIB RUNS CRIU...     e.g. 8192 3 /opt/paladin/criu-lazy/criu
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
(($# >= 3)) || { echo "usage: $0 MIB RUNS CRIU..." >&2; exit 2; }
mib=$1 runs=$2
shift 2
work=$(mktemp -d /tmp/paladin-dump-walk.XXXXXX)
job='' dump=''
cleanup() {
  [[ -z $dump ]] || kill "$dump" 2>/dev/null || true
  [[ -z $job ]] || kill -9 "$job" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# stamp FILE PATTERN: the seconds of CRIU's first log line matching PATTERN
stamp() { sed -n "/$2/{s/^(\([0-9.]*\)).*/\1/p;q}" "$1"; }

printf '%-28s %6s  %-22s %-10s %s\n' criu MiB memory-dump-to-server whole-dump pipe-resizes
for ((r = 0; r < runs; r++)); do
  for criu in "$@"; do
    d=$work/$r-$(basename "$(dirname "$criu")")
    mkdir -p "$d"
    setsid python3 "$here/../tests/ckpt/lazy_mem.py" run "$mib" "$d/out" 0.5 </dev/null >/dev/null 2>&1 &
    for ((i = 0; i < 600; i++)); do [[ -s $d/out ]] && break; sleep 0.1; done
    job=$(pgrep -f "lazy_mem.py run $mib $d/out" | head -1)
    [[ -n $job ]] || { echo "the workload did not start" >&2; exit 1; }
    port=$((27000 + RANDOM % 2000))
    "$criu" dump -t "$job" --lazy-pages --port "$port" --address 127.0.0.1 -D "$d" -v4 -o dump.log \
      --shell-job &
    dump=$!
    for ((i = 0; i < 600; i++)); do grep -qs "Starting page server" "$d/dump.log" && break; sleep 0.1; done
    kill "$dump" 2>/dev/null || true
    wait "$dump" 2>/dev/null || true
    dump=''
    kill -9 "$job" 2>/dev/null || true
    wait 2>/dev/null || true
    job=''
    mem=$(stamp "$d/dump.log" "Private vmas")
    served=$(stamp "$d/dump.log" "Starting lazy pages server")
    [[ -n $mem && -n $served ]] || { echo "$criu: no page server in $d/dump.log" >&2; exit 1; }
    printf '%-28s %6s  %-22s %-10s %s\n' "$(basename "$(dirname "$criu")")" "$mib" \
      "$(awk -v a="$mem" -v b="$served" 'BEGIN { printf "%.3f s", b - a }')" \
      "$(awk -v b="$served" 'BEGIN { printf "%.3f s", b }')" "$(grep -c "Grow pipe" "$d/dump.log")"
    rm -rf "$d"
  done
done
