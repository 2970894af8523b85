#!/usr/bin/env bash
# Post-copy moves with CRIU's lazy pages on loopback, driven the way Paladin's migration is to
# drive them (docs/lazy_migration.md), with the patched CRIU of scripts/criu.sh --patched-lazy:
#   dump --lazy-pages --leave-stopped (the source stops and serves its pages), lazy-pages (the
#   destination's page puller), restore --lazy-pages; then the release rule:
#     dump exit 0, destination alive   -> every page arrived: kill the stopped source
#     dump exit 0, destination dead    -> resume the source (SIGCONT)
#     dump failed                      -> kill the destination, then resume the source
#     dump gone (the source's machine) -> kill the destination; recover from the last checkpoint
# Cases: no fault; the destination killed, the lazy-pages daemon killed (the page stream cut)
# and the dump killed with its source, each while pages are still in flight. After each:
# exactly the expected copy runs (never two: a failed transfer leaves the source stopped until
# the destination is gone), and the survivor's memory and generations are verified
# (lazy_mem.py check; after a resume at the source, from the point it resumed).
#
#   lazy_faults_test.sh [CRIU]      (default: $PALADIN_CRIU_LAZY or /opt/paladin/criu-lazy/criu)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
CRIU=${1:-${PALADIN_CRIU_LAZY:-/opt/paladin/criu-lazy/criu}}
MIB=512
if ((EUID != 0)); then
  echo "SKIP: post-copy moves need root (PID namespaces, CRIU, userfaultfd)"
  exit 77
fi
if [[ ! -x $CRIU ]] || ! grep -qs 'criu-patches' "$CRIU"; then
  echo "SKIP: no CRIU with Paladin's patches at $CRIU (scripts/criu.sh --patched-lazy)"
  exit 77
fi
source "$HERE/../cli/testlib.sh"
source "$HERE/ckptlib.sh"
close_inherited_fds

work=$(mktemp -d /tmp/paladin-lazy-test.XXXXXX)
port=$(free_port)
started=()
cleanup() {
  for p in "${started[@]}"; do kill -9 "$p" 2>/dev/null; done
  if ((failures == 0)); then rm -rf "$work"; else echo "logs kept in $work"; fi
}
trap cleanup EXIT
ready() { [[ $(timeout 60 head -c1 "$1" | wc -c) -eq 1 ]]; }

# move CASE: one move with the fault CASE (none, destination, lazyd, source).
move() {
  local case=$1 d=$work/$1 src new dump lazyd drc lrc outcome want
  mkdir -p "$d/img"
  unshare --pid --fork setsid /usr/bin/python3 "$HERE/lazy_mem.py" run $MIB "$d/out" 0.05 \
    </dev/null >/dev/null 2>&1 &
  started+=($!)
  for _ in $(seq 300); do [[ -s $d/out ]] && break; sleep 0.1; done
  sleep 1
  src=$(pgrep -P "${started[-1]}")
  started+=("$src")
  mkfifo "$d/dump.ready" "$d/lazy.ready"
  "$CRIU" dump -t "$src" -D "$d/img" --lazy-pages --leave-stopped --address 127.0.0.1 \
    --port $port --status-fd 3 -o dump.log -v3 3>"$d/dump.ready" &
  dump=$!
  started+=("$dump")
  ready "$d/dump.ready" || { fail "$case: the dump never served its pages"; return; }
  "$CRIU" lazy-pages --page-server --address 127.0.0.1 --port $port -D "$d/img" \
    --status-fd 3 -o lazy.log -v3 3>"$d/lazy.ready" &
  lazyd=$!
  started+=("$lazyd")
  ready "$d/lazy.ready" || { fail "$case: lazy-pages never started"; return; }
  "$CRIU" restore -D "$d/img" --lazy-pages -d --pidfile "$d/pid" -o restore.log -v3 ||
    { fail "$case: restore failed"; return; }
  new=$(cat "$d/pid")
  started+=("$new")
  # The fault lands while pages are in flight: once the background transfer has begun (its first
  # chunk asked for in lazy.log; the whole of it takes about a second here).
  for _ in $(seq 500); do
    grep -Eq 'Read [0-9a-f]+ [0-9]{3,} pages' "$d/img/lazy.log" 2>/dev/null && break
    sleep 0.01
  done
  if [[ $case != none ]] && ! alive "$dump"; then
    fail "$case: the transfer ended before the fault could be injected"
    return
  fi
  case $case in
    destination) kill -9 "$new" ;;
    lazyd) kill -9 "$lazyd" ;;
    source)
      kill -9 "$dump" "$src"
      # A killed process of this size may take seconds to exit on a loaded machine (its memory
      # freed first): wait for it, up to 30 s, so that the outcome below sees it gone.
      for _ in $(seq 3000); do alive "$src" || break; sleep 0.01; done
      ;;
  esac
  wait "$dump"
  drc=$?
  wait "$lazyd"
  lrc=$?
  # The rule. A failed dump must have left the source stopped: two copies never run at once.
  if ((drc == 0)) && alive "$new"; then
    kill -9 "$src"
    outcome=moved
  elif ((drc == 0)); then
    kill -CONT "$src"
    outcome=resumed
  elif alive "$src"; then
    [[ $(ps -o stat= -p "$src") == T* ]] || fail "$case: a failed transfer resumed the source"
    kill -9 "$new" 2>/dev/null
    kill -CONT "$src"
    outcome=resumed
  else
    kill -9 "$new" 2>/dev/null
    outcome=lost
  fi
  case $case in
    none) want=moved ;;
    destination | lazyd) want=resumed ;;
    source) want=lost ;;
  esac
  [[ $outcome == "$want" ]] || fail "$case: $outcome (dump exit $drc, lazy-pages exit $lrc), \
wanted $want"
  sleep 0.3
  local running=0 survivor=""
  alive "$src" && running=$((running + 1)) && survivor=$src
  alive "$new" && running=$((running + 1)) && survivor=$new
  if [[ $want == lost ]]; then
    ((running == 0)) || fail "$case: $running copies run, wanted none (recovery from a checkpoint)"
    ((lrc != 0)) || fail "$case: lazy-pages ended with success without its source"
    echo "ok: $case: dump exit $drc, lazy-pages exit $lrc, no copy left: recover from checkpoint"
    return
  fi
  ((running == 1)) || { fail "$case: $running copies run, wanted one"; return; }
  kill -USR1 "$survivor"
  for _ in $(seq 200); do grep -q '^full' "$d/out" && break; sleep 0.05; done
  kill -9 "$survivor"
  local how=()
  [[ $want == resumed ]] && how=(--after-rewind)
  if check=$(python3 "$HERE/lazy_mem.py" check $MIB "$d/out" "${how[@]}" 2>&1) &&
     grep -q ', 1 full-memory' <<<"$check"; then
    echo "ok: $case: $outcome (dump exit $drc, lazy-pages exit $lrc); ${check//$'\n'/; }"
  else
    fail "$case: $check"
  fi
}

for c in none destination lazyd source; do move $c; done
echo "lazy_faults: 4 cases, $failures failed"
((failures == 0))
