#!/usr/bin/env bash
# Bad input and failure (issue 18, must-show 6), with Paladin's webhook and scheduler running on
# this machine (paladin_lib.sh):
# - malformed or unknown Paladin fields are refused naming the field: a GPU-memory limit that is
#   no quantity or negative (the API server), one past what any GPU could be (the webhook),
#   paladin.io/gpu-memory written as an annotation, a paladin.io/ key Paladin does not know, a
#   priority past its range; a pod of a ReplicaSet gets the same as the ReplicaSet's event;
# - a GPU pod naming another scheduler is refused (it would escape the packer and the quotas),
#   one naming the default scheduler gets Paladin's;
# - with Paladin's scheduler down, a GPU pod is admitted and waits Pending while a pod asking for
#   no GPU memory runs; with Paladin's server unreachable, the GPU pod stays Pending with that
#   reason; once the scheduler is back (and reaches what it needs), the pod is placed.
# A pod asking for more than any GPU has: case_placement (Paladin's reason) and case_gpu_memory
# (the stock scheduler's).
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, PALADIN, EMUCUDA, NODE, K8S_NODE_FLAGS,
# CLUSTER_DIR.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CASE=bad_input
# shellcheck source=tests/k8s/caselib.sh
source "$(dirname "${BASH_SOURCE[0]}")/caselib.sh"
if [[ -z ${K8S_NODE_FLAGS:-} || -z ${CLUSTER_DIR:-} ]]; then
  echo "bad_input: SKIP: runs Paladin's webhook on this machine, for the test cluster only"
  exit 77
fi
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
trap paladin_stop EXIT
paladin_start 19445
paladin_tenant
events() { k get events --field-selector "involvedObject.name=$1" -o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}'; }
# wait_event NAME REASON: the message of NAME's first event of REASON.
wait_event() {
  local i got
  for ((i = 0; i < 100; i++)); do
    got=$(events "$1" | grep -m1 "^$2: " || true)
    [[ -n $got ]] && { echo "${got#*: }"; return 0; }
    sleep 0.1
  done
  fail "$1: no $2 event; events: $(events "$1")"
}

# refused NAME MEM ANNOTATIONS EXPECTED: a tenant's GPU pod is refused, the message naming it.
tried=0
refused() {
  local rc=0 out
  out=$(gpu_pod "$1" "$2" "$3" --as paladin-test-tenant 2>&1) || rc=$?
  tried=$((tried + 1))
  [[ $rc != 0 && $out == *"$4"* ]] || fail "pod $1 ($2, {$3}): rc $rc, '$out', expected '$4'"
  [[ -z $(k get pod "$1" --ignore-not-found -o name) ]] || fail "pod $1 exists"
  echo "bad_input: $1 refused: ${out##*denied the request: }"
}
# --- malformed or unknown fields ---------------------------------------------------------------
refused lots lots "" "quantities must match the regular expression"
# The mutating webhook is asked before the API server validates the pod.
refused negative -1Gi "" "Paladin: spec.containers[0].resources.limits[paladin.io/gpu-memory]: quantity '-1Gi': negative"
refused huge 5Ei "" "Paladin: spec.containers[0].resources.limits[paladin.io/gpu-memory]: quantity '5Ei': out of range"
refused as-annotation 1Gi '"paladin.io/gpu-memory": "4Gi"' \
  "metadata.annotations[paladin.io/gpu-memory] set: GPU memory is asked in a container's resources.limits[paladin.io/gpu-memory]"
refused unknown 1Gi '"paladin.io/colour": "blue"' \
  "metadata.annotations[paladin.io/colour] set: not an annotation Paladin knows"
refused priority 1Gi '"paladin.io/priority": "99999999999"' \
  "metadata.annotations[paladin.io/priority]: '99999999999' is not an integer in [-1000000, 1000000]"
# A controller's pod: the ReplicaSet says why in its own event.
k apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs}
spec:
  replicas: 1
  selector: {matchLabels: {app: rs}}
  template:
    metadata: {labels: {app: rs}, annotations: {paladin.io/priority: "urgent"}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: demo, image: $IMAGE, imagePullPolicy: IfNotPresent, resources: {limits: {paladin.io/gpu-memory: 1Gi}}}
YAML
message=$(wait_event rs FailedCreate)
[[ $message == *"metadata.annotations[paladin.io/priority]: 'urgent' is not an integer"* ]] ||
  fail "ReplicaSet rs: event '$message'"
tried=$((tried + 1))
echo "bad_input: ReplicaSet rs: FailedCreate: ${message##*denied the request: }"
k delete replicaset rs --wait=false >/dev/null

# --- a GPU pod naming another scheduler --------------------------------------------------------
sched_pod() {  # sched_pod NAME SCHEDULER [kubectl flags]
  local name=$1 scheduler=$2
  shift 2
  k apply "$@" -f - <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $name}
spec:
  schedulerName: $scheduler
  restartPolicy: Never
  containers:
  - {name: demo, image: $IMAGE, imagePullPolicy: IfNotPresent, resources: {limits: {paladin.io/gpu-memory: 1Gi}}}
YAML
}
rc=0
out=$(sched_pod other my-scheduler --as paladin-test-tenant 2>&1) || rc=$?
tried=$((tried + 1))
[[ $rc != 0 && $out == *"Paladin: spec.schedulerName 'my-scheduler': a pod asking for paladin.io/gpu-memory is placed by Paladin's scheduler"* ]] ||
  fail "GPU pod of another scheduler: rc $rc, '$out'"
echo "bad_input: other refused: ${out##*denied the request: }"
got=$(sched_pod default default-scheduler --as paladin-test-tenant --dry-run=server -o jsonpath='{.spec.schedulerName}')
[[ $got == paladin ]] || fail "GPU pod naming default-scheduler got schedulerName '$got'"
echo "bad_input: a GPU pod naming default-scheduler gets schedulerName $got"
echo "bad_input: malformed or misplaced fields: tried $tried, refused $tried"

# --- Paladin's scheduler down, then its server unreachable -------------------------------------
read -ra flags <<<"$K8S_NODE_FLAGS"
work=$CLUSTER_DIR/paladin-$NS
kill "${paladin_pids[1]}"
wait "${paladin_pids[1]}" 2>/dev/null || true
gpu_pod waits 1Gi "" >/dev/null
k run plain --image="$IMAGE" --restart=Never -- --mib 16 --host-mib 1 --every-ms 200 >/dev/null
k wait --for=jsonpath='{.status.phase}'=Running pod/plain --timeout=60s >/dev/null ||
  fail "pod plain (no GPU memory) not Running with Paladin's scheduler down"
sleep 2
[[ $(k get pod waits -o jsonpath='{.status.phase}') == Pending && -z $(k get pod waits -o jsonpath='{.spec.nodeName}') ]] ||
  fail "GPU pod waits was placed with Paladin's scheduler down"
echo "bad_input: scheduler down: GPU pod waits Pending (schedulerName $(k get pod waits -o jsonpath='{.spec.schedulerName}')," \
  "events: '$(events waits | tr '\n' ' ')'), pod plain Running"
# The scheduler back, but Paladin's server (the teams' quotas) unreachable: Pending, with why.
echo "token-of-nobody" >"$work/token"
"$PALADIN" k8s scheduler --interval 0.3 --paladin-server http://127.0.0.1:9 \
  --paladin-token-file "$work/token" "${flags[@]}" >"$work/scheduler-noserver.log" 2>&1 &
paladin_pids+=($!)
message=$(wait_event waits FailedScheduling)
[[ $message == *"its quota cannot be checked"* ]] || fail "pod waits: reason '$message'"
[[ -z $(k get pod waits -o jsonpath='{.spec.nodeName}') ]] || fail "pod waits placed unchecked"
echo "bad_input: server unreachable: waits Pending: $message"
kill "${paladin_pids[-1]}"
wait "${paladin_pids[-1]}" 2>/dev/null || true
"$PALADIN" k8s scheduler --interval 0.3 "${flags[@]}" >"$work/scheduler-back.log" 2>&1 &
paladin_pids+=($!)
message=$(wait_event waits Scheduled)
k wait --for=jsonpath='{.status.phase}'=Running pod/waits --timeout=60s >/dev/null ||
  fail "pod waits not Running once Paladin's scheduler is back"
echo "bad_input: scheduler back: waits $message"
[[ $(k get pod plain -o jsonpath='{.status.phase}') == Running ]] || fail "pod plain stopped"
k delete pod --all --wait=false >/dev/null
