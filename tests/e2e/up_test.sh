#!/usr/bin/env bash
# `paladin up`, a fleet of one, as its user meets it: it starts a server and one agent, writes the
# CLI's configuration so that `paladin submit`/`ps`/`logs` need no flags, runs a submitted job as
# an unprivileged user under its quota, stops cleanly on SIGTERM leaving the job running, and a
# second `paladin up` on the same data re-adopts it; the job moves to the node's other GPU
# (`paladin job migrate --to NODE/GPU`), and back when an Xid injected into that GPU (through the
# emulated NVML's events, `paladin fault`) marks it unhealthy, its memory verified throughout.
# The fleet serves HTTPS (`paladin up --tls-cert --tls-key`, a self-signed certificate made
# here): the agent and the CLI reach it through TLS, and plain HTTP gets no answer.
# Stops everything it started.
#
#   up_test.sh PALADIN DEMO_WORKLOAD
set -u
PALADIN=$(realpath "$1")
WORKLOAD=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cli/testlib.sh"
if ((EUID != 0)); then
  echo "SKIP: a fleet on this machine needs root (PID namespaces, cgroups)"
  exit 77
fi
for fd in $(ls /proc/$$/fd); do ((fd > 2 && fd != 255)) && eval "exec $fd>&-"; done

work=$(mktemp -d /tmp/paladin-e2e-up.XXXXXX)
chmod 755 "$work"
export PALADIN_HOME=$work/home
up_pid=""
cleanup() {
  [[ -n $up_pid ]] && kill -TERM "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null
  pkill -KILL -f "$WORKLOAD --tag up-test" 2>/dev/null
  pkill -KILL -f "paladin (server|agent) .*$work" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
job_field() {
  "$PALADIN" show "$1" --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin).get('$2'))" 2>/dev/null
}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=up-test \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$work/tls.key" -out "$work/tls.crt" 2>/dev/null
start_up() {
  "$PALADIN" up --data "$work/up" --listen 127.0.0.1:0 --emulated-gpus 2x4GiB \
    --tls-cert "$work/tls.crt" --tls-key "$work/tls.key" >>"$work/up.log" 2>&1 &
  up_pid=$!
  wait_for 90 "grep -q 'ready' '$work/up.log'"
}

if start_up; then
  pass "paladin up started a server and an agent"
else
  fail "paladin up did not get ready"
  tail -n 30 "$work/up.log" "$work"/up/logs/*.log
  exit 1
fi
check_sh "[[ -s $PALADIN_HOME/client.json ]]" "it wrote the CLI's configuration"
url=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['url'])" "$PALADIN_HOME/client.json")
check_sh "[[ $url == https://127.0.0.1:* ]]" "the fleet serves HTTPS ($url)"
check_sh "! curl -s -m 5 'http://${url#https://}/healthz' >/dev/null 2>&1" "plain HTTP gets no answer"
id=$("$PALADIN" submit --team demo --gpu-mem 512MiB --json -- \
  "$WORKLOAD" --tag up-test --mib 64 --every-ms 200 |
  python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")
check_sh "[[ $id == j-* ]]" "paladin submit with no server flags submitted $id"
if wait_for 60 "[[ \$(job_field $id state) == running ]]"; then
  pass "the job runs"
else
  fail "the job did not start: $("$PALADIN" show "$id" 2>&1)"
fi
wait_for 30 "'$PALADIN' logs $id 2>/dev/null | grep -q '^gen 5 ok'"
check_sh "'$PALADIN' logs $id | grep -q '^gen 5 ok'" "its logs show it verifying its memory"
check_sh "'$PALADIN' ps | grep -q '$id'" "paladin ps lists it"
wpid=$(pgrep -f "^$WORKLOAD --tag up-test" | head -1)
uid=$(awk '/^Uid:/ {print $2}' /proc/"$wpid"/status 2>/dev/null)
check_sh "[[ -n '$uid' && '$uid' != 0 ]]" "the workload runs as an unprivileged user (uid $uid)"

kill -TERM "$up_pid"
wait "$up_pid"
up_rc=$?
up_pid=""
check_sh "((up_rc == 0))" "SIGTERM stops paladin up with exit 0"
check_sh "! pgrep -f 'paladin (server|agent) .*$work' >/dev/null" "its server and agent are gone"
check_sh "kill -0 $wpid 2>/dev/null" "the job runs on without them"

if start_up; then
  pass "a second paladin up on the same data started"
else
  fail "the second paladin up did not get ready"
fi
wait_for 60 "[[ \$(job_field $id state) == running ]] && '$PALADIN' logs $id 2>/dev/null | tail -n 1 | grep -q '^gen'"
check_sh "[[ \$(job_field $id state) == running ]]" "the job is still running under the new agent"
check_sh "[[ \$(pgrep -f '^$WORKLOAD --tag up-test' | head -1) == $wpid ]]" "the same process, re-adopted"
before=$("$PALADIN" logs "$id" | grep -o '^gen [0-9]*' | tail -1 | awk '{print $2}')
sleep 2
after=$("$PALADIN" logs "$id" | grep -o '^gen [0-9]*' | tail -1 | awk '{print $2}')
check_sh "((after > before))" "its logs keep coming (gen $before -> $after)"
last_gen() { "$PALADIN" logs "$id" | grep -o '^gen [0-9]*' | tail -1 | awk '{print $2}'; }
node=$(job_field "$id" node)
from=$(job_field "$id" gpu)
to=$((1 - from))
gen_before=$(last_gen)
check_sh "'$PALADIN' job migrate $id --to $node/$to >/dev/null" \
  "paladin job migrate moves it to the node's other GPU ($node/$from -> $node/$to)"
check_sh "[[ \$(job_field $id gpu) == $to && \$(job_field $id state) == running ]]" "it runs on GPU $to"
"$PALADIN" fault "$node/$to" --kind xid --code 48 >/dev/null
wait_for 20 "'$PALADIN' nodes --json | grep -q 'xid 48'"
check_sh "'$PALADIN' nodes --json | grep -q 'xid 48'" "an injected Xid 48 marks GPU $to unhealthy"
if wait_for 60 "[[ \$(job_field $id gpu) == $from && \$(job_field $id state) == running ]]"; then
  pass "the job moved off the unhealthy GPU, back to $node/$from"
else
  fail "the job did not leave the unhealthy GPU: $("$PALADIN" show "$id" 2>&1 | tail -n 5)"
fi
wait_for 30 "(( \$(last_gen) > gen_before + 5 ))"
check_sh "(( \$(last_gen) > gen_before + 5 ))" "its generations went on across both moves ($gen_before -> $(last_gen))"
check_sh "! '$PALADIN' logs $id | grep -q MISMATCH" "its GPU memory verified after each move"
check_sh "[[ \$(job_field $id epoch) -ge 3 ]]" "two moves, two new epochs"
"$PALADIN" cancel "$id" >/dev/null
wait_for 30 "[[ \$(job_field $id state) == cancelled ]]"
check_sh "[[ \$(job_field $id state) == cancelled ]]" "paladin cancel ends it"
check_sh "! pgrep -f '$WORKLOAD --tag up-test' >/dev/null" "its process is gone"
kill -TERM "$up_pid"
wait "$up_pid"
up_pid=""
check_sh "! pgrep -f 'paladin (server|agent) .*$work' >/dev/null" "nothing of the fleet is left running"
((failures == 0)) || {
  tail -n 40 "$work/up.log" "$work"/up/logs/*.log
  exit 1
}
echo "up_test: all checks passed"
