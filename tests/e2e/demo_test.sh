#!/usr/bin/env bash
# The demo's scenario as a test: a server and two agents with emulated GPUs, demo workloads that
# verify their GPU and host memory every step, a quota grown in place, a migration, and a node
# lost (its agent and workloads killed, its data directory deleted first) with its jobs restored
# elsewhere from their last checkpoints. Checks the demo's own verdicts and its JSON summary:
# zero jobs lost, every workload's state verified after its migration and its recovery, quotas
# enforced, accounting consistent with the jobs' lifetimes, workloads run as unprivileged users
# (the agents' default: a uid of its own per job) and checkpointed, moved and restored as such.
#
#   demo_test.sh PALADIN
set -u
PALADIN=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cli/testlib.sh"
if ((EUID != 0)); then
  echo "SKIP: the fleet end to end needs root (PID namespaces, cgroups, CRIU)"
  exit 77
fi
if [[ -z ${PALADIN_CRIU:-} && ! -x /opt/paladin/criu/criu ]] && ! command -v criu >/dev/null; then
  echo "SKIP: no CRIU (install it with scripts/criu.sh)"
  exit 77
fi
for fd in $(ls /proc/$$/fd); do ((fd > 2 && fd != 255)) && eval "exec $fd>&-"; done

work=$(mktemp -d /tmp/paladin-e2e-demo.XXXXXX)
chmod 755 "$work"
cleanup() {
  pkill -KILL -f "$work/fleet/bin/paladin-demo-workload" 2>/dev/null
  pkill -TERM -f "paladin (server|agent) .*$work" 2>/dev/null
  sleep 1
  pkill -KILL -f "paladin (server|agent) .*$work" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

rc=0
timeout 1100 "$PALADIN" demo --json --data "$work/fleet" >"$work/summary.json" 2>"$work/demo.log" ||
  rc=$?
cat "$work/demo.log"
cat "$work/summary.json"
if ((rc != 0)); then
  fail "paladin demo exited $rc"
  for log in "$work"/fleet/logs/*.log; do
    # What went wrong may lie far above the end: each failure's line, then the end.
    echo "--- $log (lines that say failed, error or refused; at most 40)"
    grep -iE 'fail|error|refus' "$log" | head -40
    echo "--- $log (last 40 lines)"
    tail -40 "$log"
  done
fi
if crashed "$(cat "$work/demo.log" "$work"/fleet/logs/*.log 2>/dev/null)"; then
  fail "a sanitizer report in the demo or the services' logs"
fi

check() {  # check PYTHON-EXPRESSION WHAT
  if python3 -c "import json,re,sys; s=json.load(open('$work/summary.json')); sys.exit(0 if ($1) else 1)" \
    2>/dev/null; then
    pass "$2"
  else
    fail "$2 ($1)"
  fi
}
check "s['jobs_submitted'] == 5" "five workloads submitted"
check "s['jobs_lost'] == 0" "no job lost"
check "s['state_verifications_failed'] == 0" "every workload's state verified"
check "s['migrations'] >= 1" "a migration happened"
# The move took a fast path (the GPU job streams its memory; post-copy where no GPU state is
# held) and the summary shows the pause its source measured.
check "re.match(r'[0-9]+[.][0-9]+ s, (stream|post-copy)\\b', s['migration_pause'])" \
  "the migration streamed or moved post-copy, its pause in the summary"
check "s['recoveries'] >= 1" "jobs recovered from checkpoints after the node loss"
check "s['quota_grows'] >= 1" "a quota grew in place"
check "all(v == 'consistent' for v in s['accounting'].values()) and len(s['accounting']) == 2" \
  "team accounting consistent with the jobs' lifetimes"
check "any(j['name'] == 'overreach' and 'refused' in j['verdict'] for j in s['jobs'])" \
  "the quota refused the job that asked for more"
check "all(j['node'] != 'node-a' for j in s['jobs'] if j['name'] != 'overreach')" \
  "nothing runs on the lost node"
check "s['workload_uids'] and 0 not in s['workload_uids']" \
  "the workloads ran as an unprivileged user, after their migration and recovery too"
check "s['ok'] is True and not s['steps_failed']" "every step of the scenario passed"
if grep -q "losing node-a: its agent and workloads killed, its data directory deleted" \
  "$work/demo.log"; then
  pass "the lost node's data directory was deleted before the recovery"
else
  fail "the demo did not report deleting the lost node's data directory"
fi
# SIGKILLed processes may take a moment to leave the process table.
for _ in $(seq 1 20); do
  pgrep -f "$work/fleet/bin/paladin-demo-workload" >/dev/null || break
  sleep 0.25
done
if pgrep -f "$work/fleet/bin/paladin-demo-workload" >/dev/null; then
  fail "workloads still running after the demo"
  ps -o pid,ppid,stat,etime,args -p "$(pgrep -d, -f "$work/fleet/bin/paladin-demo-workload")"
  for log in "$work"/fleet/logs/agent-*.log; do
    echo "--- last lines of $log"
    tail -n 25 "$log"
  done
  pkill -9 -f "$work/fleet/bin/paladin-demo-workload" || true
else
  pass "the demo stopped every workload it started"
fi
((failures == 0)) || exit 1
echo "demo_test: all checks passed"
