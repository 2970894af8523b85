#!/usr/bin/env bash
# `paladin migrate` between two directories on loopback (`paladin receive` on the same machine),
# with injected faults. Whatever happens, no run loses the job or runs it twice: afterwards
# exactly one copy runs (here or there) and the numbers it writes continue with no gap.
#
#   migrate_test.sh PALADIN
set -u
PALADIN=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cli/testlib.sh"
source "$HERE/ckptlib.sh"
# Where to is said, never guessed from the job's name: --peer HOST:PORT for a direct move,
# --to NODE[/GPU] for a server's job.
expect_error "migrate without a destination" "--to NODE" "--peer HOST:PORT" -- migrate somejob
expect_error "migrate --to HOST:PORT" "use --peer 127.0.0.1:7411" -- migrate somejob \
  --to 127.0.0.1:7411
if ((EUID != 0)); then
  echo "SKIP: migration needs root (PID namespaces, CRIU)"
  exit 77
fi
close_inherited_fds

work=$(mktemp -d /tmp/paladin-migrate-test.XXXXXX)
export PALADIN_TOKEN=migrate-test-token
# Everything the test started goes, including the cgroups of the jobs (and of their restored
# copies). A job is pid 1 of its namespace and ignores SIGTERM: SIGKILL.
cleanup() {
  pkill -KILL -f "$work/count.py" 2>/dev/null
  # This run's receivers only: other tests' run beside this one (tests/CMakeLists.txt).
  pkill -KILL -f "receive --listen [0-9]* --dir $work/" 2>/dev/null
  sleep 0.5
  remove_move_cgroups "$work"
  rm -rf "$work"
}
trap cleanup EXIT
# The job (64 MiB, so that the image spans several transfer chunks).
write_counter "$work/count.py" 64

# The job's own processes (not the launcher or timeout, whose command lines mention it too).
job_pids() {
  local p
  for p in $(pgrep -f "$work/count.py $1"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == python* ]] && echo "$p"
  done
}
copies() { job_pids "$1" | wc -l; }
last() { tail -1 "$1" 2>/dev/null || echo 0; }
no_gap() { awk 'NR != $1 { bad = 1; exit } END { exit bad }' "$1"; }

# scenario NAME EXPECT(moved|stayed) [env for migrate] -- [env for receive]
scenario() {
  local name=$1 expect=$2
  shift 2
  local -a menv=() renv=()
  while [[ $# -gt 0 && $1 != -- ]]; do menv+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  renv=("$@")
  local dir=$work/$name counts=$work/$name/counts.txt
  mkdir -p "$dir"
  port=$(free_port 2)
  PALADIN_RUN_DIR=$dir/src timeout 120 "$PALADIN" run --name "$name" -- \
    python3 "$work/count.py" "$counts" >"$dir/run.out" 2>&1 &
  for _ in $(seq 100); do (($(last "$counts") > 20)) && break; sleep 0.1; done
  local pid_before
  pid_before=$(job_pids "$counts")
  # The destination has the source's run base, as two nodes do: a restore writes only into its
  # own node's run base, and the job keeps its paths.
  env "${renv[@]}" PALADIN_RUN_DIR="$dir/src" timeout 120 "$PALADIN" receive --listen $port \
    --dir "$dir/in" >"$dir/recv.out" 2>&1 &
  local receiver=$!
  wait_listening $port || echo "the receiver does not listen on $port: $(cat "$dir/recv.out")" >&2
  local out rc=0
  out=$(env "${menv[@]}" PALADIN_RUN_DIR="$dir/src" timeout 120 "$PALADIN" migrate "$name" \
    --peer 127.0.0.1:$port --mode image 2>&1) || rc=$?
  # A receiver whose sender gave up (a refused token, say) would wait for another: stop it.
  [[ $expect == moved ]] || kill $receiver 2>/dev/null
  wait $receiver 2>/dev/null
  local at
  at=$(last "$counts")
  sleep 1
  local n
  n=$(copies "$counts")
  if ((n != 1)); then
    fail "$name: $n copies of the job run after the move (want exactly 1); migrate: $out"
  elif (($(last "$counts") <= at)); then
    fail "$name: the job does not progress after the move (stuck at $at); migrate: $out"
  elif ! no_gap "$counts"; then
    fail "$name: the job's numbers have a gap or a repeat: lost or duplicated work"
  elif [[ $expect == moved ]]; then
    if ((rc != 0)) || [[ $(job_pids "$counts") == "$pid_before" ]]; then
      fail "$name: expected the job to move (exit $rc): $out; receive: $(cat "$dir/recv.out")"
    else
      pass "$name: moved, one copy running, numbers continue ($at -> $(last "$counts"))"
    fi
  else
    if ((rc == 0)) || [[ $(job_pids "$counts") != "$pid_before" ]] ||
      ! grep -q "resumed here" <<<"$out"; then
      fail "$name: expected the move to fail and the job to resume here (exit $rc): $out"
    else
      pass "$name: refused, the job resumed here: $(grep -o '[^:]*; the job resumed here' <<<"$out" | head -1)"
    fi
  fi
  pkill -KILL -f "$work/count.py $counts" 2>/dev/null
  return 0
}

scenario plain moved
scenario dropped moved PALADIN_TRANSFER_FAULT=drop-after:2 --
scenario corrupted stayed PALADIN_MIGRATE_FAULT=corrupt-image --
scenario refused stayed -- PALADIN_TRANSFER_FAULT=refuse
scenario badtoken stayed PALADIN_TOKEN=wrong-token --
echo "migrate: $failures failure(s)"
((failures == 0))
