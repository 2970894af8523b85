#!/usr/bin/env bash
# Pause of a loopback move with CRIU: a plain dump to disk and restore, then a post-copy move
# (dump --lazy-pages, lazy-pages daemon, restore --lazy-pages) of the same process, in one run,
# for each size. The workload (tests/ckpt/lazy_mem.py) holds SIZE MiB of distinct pages and
# writes a line every PERIOD seconds with its own clock; after both moves it writes a CRC of all
# its memory and lazy_mem.py check replays every generation: memory verified, none repeated or
# skipped.
#
#   bench/lazy_pause.sh [SIZE_MIB...]        (default: 200 1024)
#
# pause  = the moved process's first new line - the start of the dump (what a client sees)
# gap    = that line - the source's last line (the frozen time as the process sees it, within
#          one PERIOD)
# total  = the start of the dump - the source's release (post-copy: the dump, run with
#          --leave-stopped, exits only after the destination has every page; the script then
#          checks that the destination lives and kills the stopped source)
# Environment: CRIU (plain; default /opt/paladin/criu/criu), CRIU_LAZY (a CRIU that can serve
# lazy pages here and has scripts/criu-patches; default /opt/paladin/criu-lazy/criu, from
# scripts/criu.sh --patched-lazy), PERIOD (0.05), VERBOSITY (CRIU's -v, 3; 4 slows the transfer),
# PORT (27503). Needs root. Leaves nothing running; its files go to a temporary folder on disk.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CRIU=${CRIU:-/opt/paladin/criu/criu}
CRIU_LAZY=${CRIU_LAZY:-/opt/paladin/criu-lazy/criu}
PERIOD=${PERIOD:-0.05}
PORT=${PORT:-27503}
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(200 1024)
WORK=$(mktemp -d /var/tmp/lazy_pause.XXXXXX)
started=()  # pids this script started, ended on exit
cleanup() {
  local rc=$?
  for p in "${started[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if ((rc == 0)); then rm -rf "$WORK"; else echo "lazy_pause: logs kept in $WORK" >&2; fi
}
trap cleanup EXIT

now() { date +%s.%N; }
last_gen() { awk '$1 == "gen" {g = $2} END {print g + 0}' "$1"; }
# Waits for a line of generation > $2 in file $1 and prints its timestamp.
first_after() {
  local deadline=$((SECONDS + 120)) line
  while ((SECONDS < deadline)); do
    line=$(awk -v g="$2" '$1 == "gen" && $2 > g {print $6; exit}' "$1")
    [[ -n $line ]] && { echo "$line"; return; }
    sleep 0.01
  done
  echo "lazy_pause: no new line after generation $2 in $1" >&2
  return 1
}
last_t() { awk -v g="$2" '$1 == "gen" && $2 == g {print $6}' "$1"; }
since() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", b - a}'; }
# CRIU's --status-fd: one byte (a NUL, which `read` would drop) once it serves, EOF if it failed.
ready() { [[ $(timeout 120 head -c1 "$1" | wc -c) -eq 1 ]]; }
# Waits until the pid (not a child of this shell) is gone.
wait_gone() { while kill -0 "$1" 2>/dev/null; do sleep 0.01; done; }

printf '%-6s %-9s %8s %8s %8s  %s\n' MiB move pause_s gap_s total_s notes
for mib in "${SIZES[@]}"; do
  d=$WORK/$mib
  mkdir -p "$d/plain" "$d/lazy"
  out=$d/out
  unshare --pid --fork setsid /usr/bin/python3 "$HERE/../tests/ckpt/lazy_mem.py" run "$mib" "$out" \
    "$PERIOD" </dev/null >/dev/null 2>&1 &
  started+=($!)
  ushare=$!
  for _ in $(seq 600); do [[ -s $out ]] && break; sleep 0.1; done
  sleep 1
  pid=$(pgrep -P "$ushare")
  started+=("$pid")

  # Plain: the whole image to disk, the source killed by the dump, then a restore.
  t0=$(now)
  "$CRIU" dump -t "$pid" -D "$d/plain" -o dump.log -v${VERBOSITY:-3}
  t_dumped=$(now)
  g=$(last_gen "$out")  # the source's last line: the dump killed it
  "$CRIU" restore -D "$d/plain" -d --pidfile "$d/plain/pid" -o restore.log -v${VERBOSITY:-3}
  pid=$(cat "$d/plain/pid")
  started+=("$pid")
  t1=$(first_after "$out" "$g")
  printf '%-6s %-9s %8s %8s %8s  %s\n' "$mib" plain "$(since "$t0" "$t1")" \
    "$(since "$(last_t "$out" "$g")" "$t1")" "$(since "$t0" "$t_dumped")" \
    "image $(du -sm "$d/plain" | cut -f1) MiB; total = dump (source killed at its end)"
  sleep 1

  # Post-copy: the dump keeps the memory and serves it; the restore starts without it.
  rm -f "$d/dump.ready" "$d/lazy.ready"
  mkfifo "$d/dump.ready" "$d/lazy.ready"
  t0=$(now)
  "$CRIU_LAZY" dump -t "$pid" -D "$d/lazy" --lazy-pages --address 127.0.0.1 --port "$PORT" \
    --leave-stopped --status-fd 3 -o dump.log -v${VERBOSITY:-3} 3>"$d/dump.ready" &
  dump=$!
  started+=("$dump")
  ready "$d/dump.ready" || { echo "lazy_pause: the dump never served" >&2; exit 1; }
  t_served=$(now)
  g=$(last_gen "$out")  # the source's last line: it stays frozen while it serves its pages
  "$CRIU_LAZY" lazy-pages --page-server --address 127.0.0.1 --port "$PORT" -D "$d/lazy" \
    --status-fd 3 -o lazy.log -v${VERBOSITY:-3} 3>"$d/lazy.ready" &
  lazyd=$!
  started+=("$lazyd")
  ready "$d/lazy.ready" || { echo "lazy_pause: lazy-pages never ready" >&2; exit 1; }
  "$CRIU_LAZY" restore -D "$d/lazy" --lazy-pages -d --pidfile "$d/lazy/pid" -o restore.log \
    -v${VERBOSITY:-3}
  t_restored=$(now)
  newpid=$(cat "$d/lazy/pid")
  started+=("$newpid")
  t1=$(first_after "$out" "$g")
  src_alive_at_resume=no
  kill -0 "$pid" 2>/dev/null && src_alive_at_resume=yes
  # The release rule of a post-copy move: the dump ends with success once the lazy-pages daemon
  # says it is done; with the destination still alive every page has reached it, and only then
  # is the stopped source killed (else it would be resumed: docs/lazy_migration.md).
  wait "$dump" || { echo "lazy_pause: the lazy dump failed: $d/lazy/dump.log" >&2; exit 1; }
  kill -0 "$newpid" || { echo "lazy_pause: the moved copy died during the transfer" >&2; exit 1; }
  kill -9 "$pid"
  t_released=$(now)
  wait_gone "$pid"
  wait "$lazyd" || true
  transferred=$(grep -c 'Lazy pages transfer finished successfully' "$d/lazy/dump.log" || true)
  printf '%-6s %-9s %8s %8s %8s  %s\n' "$mib" post-copy "$(since "$t0" "$t1")" \
    "$(since "$(last_t "$out" "$g")" "$t1")" "$(since "$t0" "$t_released")" \
    "served after $(since "$t0" "$t_served") s, restore returned at $(since "$t0" "$t_restored") s;\
 source alive when the copy resumed: $src_alive_at_resume;\
 dump says all pages sent: $([[ $transferred -gt 0 ]] && echo yes || echo no)"

  # Every page of the moved copy, then every generation since the start, checked.
  kill -USR1 "$newpid"
  for _ in $(seq 600); do grep -q '^full' "$out" && break; sleep 0.05; done
  kill -9 "$newpid"
  python3 "$HERE/../tests/ckpt/lazy_mem.py" check "$mib" "$out" | sed "s/^/$mib MiB /"
  rm -rf "$d"
done
