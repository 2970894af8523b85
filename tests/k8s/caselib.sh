# Sourced by every case: `k` (kubectl in the case's namespace) and `fail`; and what the cases that
# move or recover a running pod of the demo workload (case_move*.sh, case_recover_node*.sh)
# share. A case sets CASE (the name its lines start with) before sourcing; those cases then call
# need_cluster, workload (which sets ARGS and MARK) and keep their
# scratch files in $work, which need_cluster makes and the EXIT trap removes; a case with more to
# undo sets `on_exit` to a function of its own, which the trap runs first.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, CLUSTER_DIR, PALADIN, EMUCUDA, NODE2.
# shellcheck shell=bash

k() { "$KUBECTL" -n "$NS" "$@"; }
fail() {
  echo "$CASE: FAIL: $*"
  exit 1
}

sampler_pid=''
on_exit=''
case_cleanup() {
  [[ -z $on_exit ]] || "$on_exit"
  [[ -z $sampler_pid ]] || kill "$sampler_pid" 2>/dev/null || true
  rm -rf "$work"
}

# need_cluster NODES WHAT: skips the case (exit 77, saying it WHAT) unless it runs in the test
# cluster (with its second node when NODES is 2) and CRIU is installed; then makes $work.
need_cluster() {
  if [[ -z ${CLUSTER_DIR:-} || ($1 == 2 && -z ${NODE2:-}) ]]; then
    echo "$CASE: SKIP: $2"
    exit 77
  fi
  local criu=${PALADIN_CRIU_DIR:-/opt/paladin/criu}
  [[ -x $criu/criu ]] || { echo "$CASE: SKIP: no CRIU in $criu (scripts/criu.sh)"; exit 77; }
  work=$(mktemp -d)
  trap case_cleanup EXIT
}

# runtime_class: the RuntimeClass `paladin` (paladin-runc), under which a pod can be moved.
runtime_class() {
  "$KUBECTL" apply -f - >/dev/null <<YAML
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: paladin}
handler: paladin
YAML
}

# workload "ARGS": the demo workload's arguments for this case's pods, which no other process on
# the machine has: ARGS, and MARK, a pgrep -f pattern of them whose first character is bracketed,
# so that it does not match the command line of another pgrep looking for it (the sampler runs
# beside the other checks).
workload() {
  ARGS=$1
  MARK="[${ARGS:0:1}]${ARGS:1}"
}

# demo_pod NAME [SPEC] [LIMITS]: creates pod NAME of the demo workload (ARGS) under the
# RuntimeClass paladin; SPEC: more lines of its spec (YAML, two spaces in); LIMITS: its
# container's resource limits (a YAML flow mapping's inside).
demo_pod() {
  local args
  args=$(sed 's/[^ ][^ ]*/"&"/g; s/ /, /g' <<<"$ARGS")
  k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  runtimeClassName: paladin
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
${2:-}
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: [$args]
    resources: {limits: {${3:-}}}
YAML
}

# wait_running POD: fails unless POD runs within 60 s.
wait_running() {
  k wait --for=jsonpath='{.status.phase}'=Running "pod/$1" --timeout=60s >/dev/null ||
    fail "pod $1 not Running: $(k get pod "$1" -o jsonpath='{.status}')"
}

# gens FILE: the generations a log verified, in order.
gens() { sed -n 's/^gen \([0-9]*\) ok .*/\1/p' "$1"; }

# died_gen POD FOLLOWED: the last generation POD's workload verified before its node, the
# second, was lost: the larger of what FOLLOWED (a `kubectl logs -f` copy, which lags the
# workload on a loaded machine) and the node's own copy of the pod's log (containerd writes it
# on the node's disk, which outlives the node's processes) have.
died_gen() {
  local followed on_disk
  followed=$(gens "$2" | tail -1)
  on_disk=$(cat "$CLUSTER_DIR/node2/pods/${NS}_$1_"*/*/*.log 2>/dev/null |
    sed -n 's/^[^ ]* std[a-z]* [FP] gen \([0-9]*\) ok .*/\1/p' | tail -1)
  echo $((${followed:-0} > ${on_disk:-0} ? ${followed:-0} : ${on_disk:-0}))
}

# last_gen POD: the last generation POD's workload verified ('' before its first).
last_gen() { k logs "$1" 2>/dev/null | sed -n 's/^gen \([0-9]*\) ok .*/\1/p' | tail -1; }

# lost_pod_on_node2: pod `lost` (the case's workload) on the second node, running, past
# generation 4, its log followed into $work/lost.log from the start ($logs_pid: once the node is
# lost the API server can no longer reach it).
lost_pod_on_node2() {
  demo_pod lost '  nodeName: "'"$NODE2"'"
  tolerations: [{key: paladin.io/second-node, operator: Exists, effect: NoSchedule}]'
  wait_running lost
  # kubectl itself, not k: $! must be what a kill stops (k would leave its kubectl behind).
  "$KUBECTL" -n "$NS" logs -f lost >"$work/lost.log" 2>/dev/null &
  logs_pid=$!
  wait_gen lost 4
}

# lose_node2 PREFIX: the second node lost (cluster.sh lose-node2, its lines under PREFIX) and its
# Paladin data deleted with it; then the follower of a pod's log ($logs_pid) stopped. Sets
# node2_lost=1 for the case's cleanup, which brings the node back, and lost_at (ns) to when the
# node was gone.
lose_node2() {
  # shellcheck disable=SC2034 # the case's cleanup reads them
  node2_lost=1
  bash "$here/cluster.sh" lose-node2 "$CLUSTER_DIR" | sed "s/^/$1:   /"
  lost_at=$(date +%s%N)
  rm -rf "${CLUSTER_DIR:?}/node2/checkpoints"/*
  sleep 0.3
  kill "$logs_pid" 2>/dev/null || true
  wait "$logs_pid" 2>/dev/null || true
  logs_pid=''
}

# wait_gen POD N: fails unless POD's workload verifies generation N within 20 s.
wait_gen() {
  local i
  for ((i = 0; i < 100; i++)); do
    [[ $(last_gen "$1") -ge $2 ]] 2>/dev/null && return
    sleep 0.2
  done
  fail "pod $1: no generation $2: $(k logs "$1" | tail -3)"
}

# first_gen POD: the first generation POD's workload verified, waiting up to 5 s for it ('' if
# none by then).
first_gen() {
  local i first=''
  for ((i = 0; i < 100; i++)); do
    first=$(k logs "$1" 2>/dev/null | sed -n 's/^gen \([0-9]*\) ok .*/\1/p' | head -1)
    [[ -n $first ]] && break
    sleep 0.05
  done
  echo "$first"
}

# went_on POD FIRST FROM TO: fails unless POD's restored workload went on (not afresh) at
# generation FIRST, within (FROM, TO], and, a second later, verified its memory and advanced.
went_on() {
  local pod=$1 first=$2
  [[ -n $first ]] || fail "pod $pod prints no generation: $(k logs "$pod" | tail -3)"
  ! grep -q '^started:' <<<"$(k logs "$pod")" ||
    fail "pod $pod started its workload afresh: $(k logs "$pod" | head -2)"
  ((first > $3 && first <= $4)) || fail "pod $pod went on at generation $first, not in ($3, $4]"
  sleep 1
  ! grep -q MISMATCH <<<"$(k logs "$pod")" || fail "pod $pod: $(k logs "$pod" | grep -m1 MISMATCH)"
  [[ $(last_gen "$pod") -gt $first ]] || fail "pod $pod does not advance past generation $first"
}

# carrier_start LOG ARGS...: `paladin k8s mover ARGS...` (with --carry-listen) in the background,
# its output in LOG, once it takes other nodes' images; sets CARRIER to its pid.
carrier_start() {
  local log=$1 i
  shift
  "$PALADIN" k8s mover "$@" >"$log" 2>&1 &
  CARRIER=$!
  for ((i = 0; i < 100; i++)); do
    grep -q "taking other nodes' images" "$log" && return 0
    sleep 0.1
  done
  kill "$CARRIER" 2>/dev/null || true
  fail "the mover does not take images: $(tail -3 "$log")"
}

# went_on_from NEW OLD OLD_LOG: pod NEW goes on from the last generation OLD logged (OLD_LOG, its
# `kubectl logs -f`), as went_on checks, and pod OLD is gone; sets FIRST and BEFORE (those two
# generations) for the case's summary.
went_on_from() {
  FIRST=$(first_gen "$1")
  BEFORE=$(gens "$3" | tail -1)
  went_on "$1" "$FIRST" "$BEFORE" $((BEFORE + 2))
  k wait --for=delete "pod/$2" --timeout=30s >/dev/null 2>&1 || fail "pod $2 still exists"
}

# uuid_of G: the UUID of the emulated node's GPU G (PALADIN_EMU_GPUS and _STATE exported).
uuid_of() { "$PALADIN" k8s gpus --nvml "$EMUCUDA" | awk -v g="$1" '$1 == "gpu" && $2 == g && $4 == "used" { print $3 }'; }

# sampler: every 100 ms, how many copies of the workload run (the host's /proc sees both nodes);
# when more than one, the time and the copies go to $work/samples.seen.
sampler() {
  local n
  while :; do
    n=$(pgrep -c -f -- "$MARK" || true)
    echo "$n"
    ((n <= 1)) || { date +%T.%N; pgrep -a -f -- "$MARK"; } >>"$work/samples.seen"
    sleep 0.1
  done
}

# sampler_start: the sampler from now, into $work/samples.
sampler_start() {
  : >"$work/samples.seen"
  sampler >"$work/samples" &
  sampler_pid=$!
}

# sampler_stop [WHAT]: stops the sampler; fails (naming WHAT) if it ever saw two copies; sets
# SAMPLES to the number of samples it took.
sampler_stop() {
  kill "$sampler_pid"
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=''
  local max
  max=$(sort -n "$work/samples" | tail -1)
  SAMPLES=$(wc -l <"$work/samples")
  [[ $max == 1 ]] ||
    fail "${1:+$1: }$max copies of the workload at once (of $SAMPLES samples): $(cat "$work/samples.seen")"
}

# workload_pid VAR WHEN: sets VAR to the pid of the one process running the workload; fails
# naming every such process and its parent when there is not exactly one.
workload_pid() {
  local pids p
  pids=$(pgrep -f -- "$MARK" || true)
  if [[ $(wc -w <<<"$pids") != 1 ]]; then
    for p in $pids; do
      ps -o pid=,ppid=,stat=,etimes=,args= -p "$p" || true
      ps -o pid=,stat=,args= -p "$(ps -o ppid= -p "$p" || echo 0)" | sed 's/^/  parent: /' || true
    done >"$work/pids.seen"
    fail "$(wc -w <<<"$pids") processes run the workload $2:" $'\n'"$(cat "$work/pids.seen")"
  fi
  printf -v "$1" %s "$pids"
}
