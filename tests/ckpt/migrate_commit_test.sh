#!/usr/bin/env bash
# The direct migration's commit under every fault (docs/formats/migrate.md, "Exploring the
# steps"): `paladin migrate` to a `paladin receive` on loopback, and at each step of the protocol
# a SIGKILL of either side or the loss of each message. Every 100 ms the job's copies are sampled
# (running, stopped). Each scenario must end with exactly one running copy, on the side the state
# machine says, the job's numbers continuing with no gap; never two copies running at once; no
# stopped copy left behind. Prints a table of step x fault -> end state.
#
#   migrate_commit_test.sh PALADIN [SCENARIO...]
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
close_inherited_fds

work=$(mktemp -d /tmp/paladin-migrate-commit.XXXXXX)
export PALADIN_TOKEN=migrate-commit-token
cleanup() {
  pkill -KILL -f "$work/count.py" 2>/dev/null
  pkill -KILL -f "migrate-keeper $work/" 2>/dev/null
  pkill -KILL -f "receive --listen [0-9]* --dir $work/" 2>/dev/null
  sleep 0.5
  remove_move_cgroups "$work"
  rm -rf "$work"
}
trap cleanup EXIT
write_counter "$work/count.py" 16

cat >"$work/sample.py" <<'PY'
import os, sys, time
pattern, stop = sys.argv[1].encode(), sys.argv[2]
me = str(os.getpid())  # its own command line names the job too
PF_EXITING, SIGKILL_BIT = 0x4, 1 << 8


def dying(pid, flags):
    """A copy being killed tears down its memory in state R or D for a while on a busy machine (a
    stopped one too: SIGKILL wakes it only to die); it runs none of its own code."""
    if flags & PF_EXITING:
        return True
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith(("SigPnd:", "ShdPnd:")) and
                       int(line.split()[1], 16) & SIGKILL_BIT for line in f)
    except (OSError, ValueError, IndexError):
        return True  # gone meanwhile


while not os.path.exists(stop):
    running = stopped = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ")
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        state = stat[stat.rindex(")") + 2]
        if pattern not in cmd or not comm.startswith("python") or state in "ZX":
            continue
        if state not in "Tt" and dying(pid, int(stat[stat.rindex(")") + 2:].split()[6])):
            continue
        if state in "Tt":
            stopped += 1
        else:
            running += 1
    print(running, stopped, flush=True)
    time.sleep(0.1)
PY

# The job's own processes (not the launcher or timeout, whose command lines mention it too), with
# their state letter: "PID STATE" per line.
job_procs() {
  local p state
  for p in $(pgrep -f "$work/count.py $1"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == python* ]] || continue
    grep -q sample.py "/proc/$p/cmdline" 2>/dev/null && continue  # the sampler
    state=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) || continue
    [[ -n $state && $state != Z && $state != X ]] && echo "$p $state"
  done
}
running() { job_procs "$1" | awk '$2 != "T" && $2 != "t"' | wc -l; }
stopped() { job_procs "$1" | awk '$2 == "T" || $2 == "t"' | wc -l; }
last() { tail -1 "$1" 2>/dev/null || echo 0; }
no_gap() { awk 'NR != $1 { bad = 1; exit } END { exit bad }' "$1"; }

table=()
count=0
# scenario NAME STEP FAULT EXPECT(moved|stayed) MIGRATE_FAULT RECEIVE_FAULT
scenario() {
  local name=$1 step=$2 fault=$3 expect=$4 mfault=$5 rfault=$6
  if ((${#only[@]} > 0)) && [[ " ${only[*]} " != *" $name "* ]]; then return 0; fi
  count=$((count + 1))
  local dir=$work/$name counts=$work/$name/counts.txt
  mkdir -p "$dir"
  port=$(free_port 2)
  PALADIN_RUN_DIR=$dir/src timeout 300 "$PALADIN" run --name "$name" -- \
    python3 "$work/count.py" "$counts" >"$dir/run.out" 2>&1 &
  for _ in $(seq 100); do (($(last "$counts") > 20)) && break; sleep 0.1; done
  local pid_before
  pid_before=$(job_procs "$counts" | awk '{print $1}')
  # The sampler: "running stopped" every 100 ms until told to stop (one process: a shell loop
  # that forks per sample cannot keep the pace on a busy machine).
  python3 "$work/sample.py" "$work/count.py $counts" "$dir/stop-sampling" >"$dir/samples" &
  local sampler=$!
  env PALADIN_MIGRATE_FAULT="$rfault" PALADIN_RUN_DIR="$dir/src" timeout 300 "$PALADIN" receive \
    --listen $port --dir "$dir/in" --command-timeout 5 --answer-for 20 >"$dir/recv.out" 2>&1 &
  local receiver=$!
  sleep 0.3
  local rc=0
  # One node: a restore writes only into the node's run directory, so both sides share it.
  env PALADIN_MIGRATE_FAULT="$mfault" PALADIN_RUN_DIR="$dir/src" timeout 300 "$PALADIN" migrate \
    "$name" --peer 127.0.0.1:$port --mode image --outcome-timeout 60 >"$dir/migrate.out" 2>&1 || rc=$?
  # Settled: one copy running and none stopped, for 2 s in a row (up to 150 s: a destination
  # that lost its source waits --command-timeout, a source that cannot reach a dead destination
  # retries for a minute).
  local stable_since=-1 until=$((SECONDS + 150)) r s
  while ((SECONDS < until)); do
    r=$(running "$counts")
    s=$(stopped "$counts")
    if ((r == 1 && s == 0)); then
      ((stable_since < 0)) && stable_since=$SECONDS
      ((SECONDS - stable_since >= 2)) && break
    else
      stable_since=-1
    fi
    sleep 0.1
  done
  touch "$dir/stop-sampling"
  wait $sampler 2>/dev/null
  local at
  at=$(last "$counts")
  sleep 1
  r=$(running "$counts")
  s=$(stopped "$counts")
  local most samples
  most=$(awk 'BEGIN { m = 0 } $1 > m { m = $1 } END { print m }' "$dir/samples")
  samples=$(wc -l <"$dir/samples")
  local where=stayed
  [[ $(job_procs "$counts" | awk '{print $1}') != "$pid_before" ]] && where=moved
  local end="$r running, $s stopped, $where"
  local verdict=ok
  if ((most > 1)); then
    fail "$name: $most copies ran at once (samples: $samples)"
    verdict=FAIL
  elif ((r != 1 || s != 0)); then
    fail "$name: ends with $r running and $s stopped copies (want 1 and 0)"
    verdict=FAIL
  elif (($(last "$counts") <= at)); then
    fail "$name: the job does not progress (stuck at $at)"
    verdict=FAIL
  elif ! no_gap "$counts"; then
    fail "$name: the job's numbers have a gap or a repeat: lost or duplicated work"
    verdict=FAIL
  elif [[ $where != "$expect" ]]; then
    fail "$name: the job $where (want $expect)"
    verdict=FAIL
  else
    pass "$name: $end; at most $most running in $samples samples"
  fi
  if [[ $verdict == FAIL ]]; then
    echo "--- migrate (exit $rc):"; cat "$dir/migrate.out"
    echo "--- receive:"; cat "$dir/recv.out"
    for k in $(find "$dir" -name '*.keeper.log'); do
      [[ -e $k ]] && { echo "--- $k:"; cat "$k"; }
    done
  fi
  table+=("$(printf '%-22s %-34s %-28s %-5s %s' "$step" "$fault" "$end" "$most" "$verdict")")
  pkill -KILL -f "$work/count.py $counts" 2>/dev/null
  kill $receiver 2>/dev/null
  pkill -KILL -f "migrate-keeper $dir/" 2>/dev/null
  wait $receiver 2>/dev/null
  return 0
}

#        name             step                  fault                          expect  migrate's fault             receive's fault
scenario plain            "-"                   "none"                         moved   ""                          ""
scenario src-checkpoint   "after checkpoint"    "source SIGKILLed"             stayed  crash:src-after-checkpoint  ""
scenario src-transfer     "after transfer"      "source SIGKILLed"             stayed  crash:src-after-transfer    ""
scenario src-restore      "after RESTORE"       "source SIGKILLed"             stayed  crash:src-after-restore     ""
scenario src-decided      "RESUME recorded"     "source SIGKILLed before send" stayed  crash:src-before-resume     ""
scenario src-resume       "after RESUME"        "source SIGKILLed"             moved   crash:src-after-resume      ""
scenario dst-image        "after image"         "destination SIGKILLed"        stayed  ""                          crash:dst-after-image
scenario dst-restore      "after RESTORE"       "destination SIGKILLed"        stayed  ""                          crash:dst-after-restore
scenario dst-commit       "after commit"        "destination SIGKILLed"        moved   ""                          crash:dst-after-commit
scenario lost-restore     "RESTORE"             "message lost"                 stayed  drop:RESTORE                ""
scenario lost-restore-ok  "RESTORE's answer"    "message lost"                 stayed  ""                          drop:RESTORE-answer
scenario lost-resume      "RESUME"              "message lost"                 stayed  drop:RESUME                 ""
scenario lost-resume-ok   "RESUME's answer"     "message lost"                 moved   ""                          drop:RESUME-answer
scenario lost-bye         "BYE"                 "message lost"                 moved   drop:BYE                    ""

echo
printf '%-22s %-34s %-28s %-5s %s\n' "step" "fault" "end state" "max" "result"
for row in "${table[@]}"; do echo "$row"; done
echo "migrate_commit: $count scenario(s), $failures failure(s)"
((failures == 0))
