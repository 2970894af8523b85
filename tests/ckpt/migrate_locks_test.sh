#!/usr/bin/env bash
# `paladin migrate` of a job that holds file locks (an flock and a POSIX lock) to a `paladin
# receive` on this machine, on the same files: what two nodes sharing a file system see. The
# source's stopped copy is let go before the destination restores (else the restore would wait
# for its locks), so a move that fails after that must restore the job at the source from its
# image. Each scenario must end with exactly one copy running, holding both locks, its numbers
# continuing with no gap; at no moment may two copies run (sampled every 50 ms).
#
#   moved         the move commits: the job runs at the destination with its locks
#   refused       the destination's answer to RESTORE is lost (it drops its copy): the job is
#                 restored at the source from its image
#   dst_dies      the destination dies once it has restored (its keeper drops the copy and says
#                 aborted when asked): the source hears no answer to RESUME, asks, and restores
#   src_dies      the source dies once the destination has restored: the source's keeper
#                 restores the job from its image once the destination dropped its copy
#
#   migrate_locks_test.sh PALADIN [SCENARIO...]
set -u
PALADIN=$(realpath "$1")
shift
only=("$@")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cli/testlib.sh"
source "$HERE/ckptlib.sh"
if ((EUID != 0)); then
  echo "SKIP: migration needs root (PID namespaces, CRIU)"
  exit 77
fi
skip_without_criu
close_inherited_fds

work=$(mktemp -d /tmp/paladin-migrate-locks.XXXXXX)
export PALADIN_TOKEN=migrate-locks-token
started=() # pids of what this test started in the background
cleanup() {
  local p
  for p in $(job_pids) "${started[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in $(pgrep -f "migrate-keeper $work/"); do kill -9 "$p" 2>/dev/null; done
  sleep 0.5
  remove_move_cgroups "$work"
  rm -rf "$work"
}
[[ -n ${KEEP_WORK:-} ]] || trap cleanup EXIT

# The job: an flock on flock.lock, a POSIX lock on posix.lock, then 1, 2, 3, ... appended to
# counts.txt every 20 ms.
cat >"$work/locker.py" <<'PY'
import fcntl, sys, time
d = sys.argv[1]
a = open(d + "/flock.lock", "w")
fcntl.flock(a, fcntl.LOCK_EX)
b = open(d + "/posix.lock", "w")
fcntl.lockf(b, fcntl.LOCK_EX)
n = 0
with open(d + "/counts.txt", "a") as f:
    while True:
        n += 1
        f.write(f"{n}\n")
        f.flush()
        time.sleep(0.02)
PY

# The job's own processes (python), not the launchers whose command lines name it too.
job_pids() {
  local p
  for p in $(pgrep -f "$work/locker.py ${1:-}"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == python* ]] && echo "$p"
  done
}
running_copies() {
  local p n=0 state
  for p in $(job_pids "$1"); do
    state=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    state=${state##*) }
    [[ ${state:0:1} != [TtZX] ]] && n=$((n + 1))
  done
  echo "$n"
}
one_running() { (($(running_copies "$1") == 1)); }
last() { tail -1 "$1" 2>/dev/null || echo 0; }
counted_past() { (($(last "$2") > $1)); }
no_gap() { awk 'NR != $1 { bad = 1; exit } END { exit bad }' "$1"; }
# locked DIR: both of the job's locks are held by someone (an attempt to take them fails).
locked() {
  ! flock -n "$1/flock.lock" true &&
    ! python3 -c 'import fcntl, sys
f = open(sys.argv[1], "a")
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)' "$1/posix.lock" 2>/dev/null
}

# scenario NAME EXPECT(moved|back) SAID [env for migrate] -- [env for receive]
# SAID: what the migrate command's output must say.
scenario() {
  local name=$1 expect=$2 said=$3
  shift 3
  if ((${#only[@]} > 0)) && [[ " ${only[*]} " != *" $name "* ]]; then return 0; fi
  local -a menv=() renv=()
  while [[ $# -gt 0 && $1 != -- ]]; do menv+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  renv=("$@")
  local dir=$work/$name
  local counts=$dir/counts.txt
  mkdir -p "$dir/cwd"
  export PALADIN_RUN_DIR=$dir/src
  port=$(free_port 2)
  (cd "$dir/cwd" && exec timeout 120 "$PALADIN" run --name "$name" -- \
    python3 "$work/locker.py" "$dir") >"$dir/run.out" 2>&1 &
  started+=($!)
  wait_until 15 counted_past 20 "$counts"
  local before
  before=$(job_pids "$dir")
  if [[ -z $before ]] || ! locked "$dir"; then
    fail "$name: the job did not start with its locks: $(cat "$dir/run.out")"
    return 0
  fi
  # Never two copies running: sampled until the scenario ends.
  (
    max=0
    while [[ ! -e $dir/stop ]]; do
      n=$(running_copies "$dir")
      ((n > max)) && max=$n && echo "$max" >"$dir/max"
      sleep 0.05
    done
  ) &
  local sampler=$!
  env "${renv[@]}" timeout 60 "$PALADIN" receive --listen "$port" --dir "$dir/in" \
    --command-timeout 20 --answer-for 15 >"$dir/recv.out" 2>&1 &
  local receiver=$!
  started+=("$receiver")
  wait_until 10 eval "ss -Hltn 'sport = :$port' | grep -q ."
  local out rc=0
  out=$(env "${menv[@]}" timeout 90 "$PALADIN" migrate "$name" --peer "127.0.0.1:$port" --mode image \
    --outcome-timeout 30 2>&1) || rc=$?
  # A source that died: its keeper restores the job here.
  if [[ $name == src_dies ]]; then
    wait_until 40 eval "grep -qs 'restored the job here\|failed' '$dir'/src/*/*.keeper.log"
    out+=$'\n'$(cat "$dir"/src/*/*.migration.keeper.log 2>/dev/null)
  fi
  wait "$receiver" 2>/dev/null
  local at after
  at=$(last "$counts")
  sleep 1
  touch "$dir/stop"
  wait "$sampler" 2>/dev/null
  after=$(job_pids "$dir")
  local copies max
  copies=$(wc -w <<<"$after")
  max=$(cat "$dir/max" 2>/dev/null || echo 0)
  if ((max > 1)); then
    fail "$name: $max copies of the job ran at once; migrate: $out"
  elif ((copies != 1)); then
    fail "$name: $copies copies of the job after the move (want exactly 1); migrate: $out;" \
      "receive: $(cat "$dir/recv.out")"
  elif [[ $after == "$before" ]]; then
    fail "$name: the job's pid did not change ($after): it was not moved or restored; $out"
  elif (($(last "$counts") <= at)); then
    fail "$name: the job does not progress after the move (stuck at $at); migrate: $out"
  elif ! no_gap "$counts"; then
    fail "$name: the job's numbers have a gap or a repeat: lost or duplicated work"
  elif ! locked "$dir"; then
    fail "$name: the job's file locks are not held after the move; migrate: $out"
  elif ! grep -q -- "$said" <<<"$out"; then
    fail "$name: the output does not say '$said': $out"
  elif [[ $expect == moved ]] && ((rc != 0)); then
    fail "$name: expected the job to move (exit $rc): $out; receive: $(cat "$dir/recv.out")"
  elif [[ $expect == back && $name != src_dies ]] && ((rc == 0)); then
    fail "$name: expected the move to fail: $out"
  else
    pass "$name: one copy, holding its locks, numbers continue ($at -> $(last "$counts")):" \
      "$(grep -m1 -o -- "$said[^;]*" <<<"$out")"
  fi
  local p
  for p in $after; do kill -9 "$p" 2>/dev/null; done
  return 0
}

scenario moved moved "file lock(s): its stopped copy here goes"
scenario refused back "restored here from its image" -- PALADIN_MIGRATE_FAULT=drop:RESTORE-answer
scenario dst_dies back "restored here from its image" -- PALADIN_MIGRATE_FAULT=crash:dst-after-restore
scenario src_dies back "restored the job here from its image" \
  PALADIN_MIGRATE_FAULT=crash:src-after-restore --
echo "migrate_locks: $failures failure(s)"
((failures == 0))
