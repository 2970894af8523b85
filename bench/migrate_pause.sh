#!/usr/bin/env bash
# The pause of a migration over loopback: a process holding SIZE MiB (mem_writer, not writing)
# under `paladin run`, moved by `paladin migrate` to a `paladin receive` on this machine. Prints
# the migrate command's summary line (pause and its phases). Root; CRIU from scripts/criu.sh.
# Pass two builds' binaries to alternate them (A/B on a noisy machine).
#
#   bench/migrate_pause.sh [SIZE_MIB=2048] [ROUNDS=1] PALADIN [PALADIN...]
set -uo pipefail
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
  PALADIN_RUN_DIR=$dir/dest "$1" receive --listen 7411 >"$dir/receive.log" 2>&1 &
  local receiver=$!
  sleep 1
  PALADIN_RUN_DIR=$dir/run "$1" migrate moving --peer 127.0.0.1:7411 >"$dir/migrate.log" 2>&1
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
