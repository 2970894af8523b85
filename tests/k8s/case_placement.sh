#!/usr/bin/env bash
# Placement by Paladin's packer on the node's two emulated GPUs of 8 GiB, pods created one after
# another: 6Gi, 4Gi, 2Gi and 3Gi land where the packer puts them (the tightest GPU that fits:
# 0, 1, 0, 1), each with a Scheduled event naming the GPU and the policy. Then what stays Pending
# and why: 2Gi more (no GPU has 2 GiB free), 17Gi (more than any GPU has), a malformed
# paladin.io/priority (refused by the webhook, or an event, naming the field). For each, `paladin k8s
# explain` names the same node/GPU and placement, or the same reason, as the pod's event. With
# Paladin's webhook down, a GPU pod is refused at creation and a pod asking for no GPU memory is not
# affected.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, PALADIN, EMUCUDA, NODE, K8S_NODE_FLAGS,
# CLUSTER_DIR.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CASE=placement
# shellcheck source=tests/k8s/caselib.sh
source "$(dirname "${BASH_SOURCE[0]}")/caselib.sh"
if [[ -z ${K8S_NODE_FLAGS:-} || -z ${CLUSTER_DIR:-} ]]; then
  echo "placement: SKIP: runs Paladin's webhook on this machine, for the test cluster only"
  exit 77
fi
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
trap paladin_stop EXIT
paladin_start 19444

events() { k get events --field-selector "involvedObject.name=$1" -o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}'; }
# wait_event POD REASON: the message of POD's first event of REASON.
wait_event() {
  local i got
  for ((i = 0; i < 100; i++)); do
    got=$(events "$1" | grep -m1 "^$2: " || true)
    [[ -n $got ]] && { echo "${got#*: }"; return 0; }
    sleep 0.1
  done
  fail "pod $1: no $2 event; events: $(events "$1")"
}

# explain POD: `paladin k8s explain` of it, with the scheduler's API flags; row OUT KEY: a row's value.
read -ra api_flags <<<"$K8S_NODE_FLAGS"
explain() { "$PALADIN" k8s explain "$1" -n "$NS" "${api_flags[@]}" 2>&1 || fail "paladin k8s explain $1 failed"; }
row() { sed -n "s/^$2: *//p" <<<"$1" | head -1; }
# explained_like_event POD EVENT_REASON MESSAGE: explain's state and its placement or reason
# agree with the event the scheduler gave the pod.
explained_like_event() {
  local out state
  out=$(explain "$1")
  state=$(row "$out" state)
  if [[ $2 == Scheduled ]]; then
    [[ $state == placed && $3 == "placed on $(row "$out" placement): "* ]] ||
      fail "explain $1: state '$state', placement '$(row "$out" placement)'; event '$3'"
  else
    [[ $state == pending && $(row "$out" reason) == "$3" ]] ||
      fail "explain $1: state '$state', reason '$(row "$out" reason)'; event '$3'"
  fi
  [[ $(row "$out" event) == "$2: $3" ]] || fail "explain $1: event row '$(row "$out" event)'"
  sed "s/^/placement: explain $1: /" <<<"$out"
}

expected=(p1:6Gi:0 p2:4Gi:1 p3:2Gi:0 p4:3Gi:1)
for e in "${expected[@]}"; do
  IFS=: read -r name mem want <<<"$e"
  gpu_pod "$name" "$mem" "" >/dev/null
  message=$(wait_event "$name" Scheduled)
  got=$(k get pod "$name" -o jsonpath='{.metadata.annotations.paladin\.io/gpu}')
  node=$(k get pod "$name" -o jsonpath='{.spec.nodeName}')
  [[ $got == "$want" && $node == "$NODE" ]] || fail "pod $name ($mem) on $node/$got, expected $NODE/$want: $message"
  [[ $message == *"placed on $NODE/$want by Paladin's packer"* ]] || fail "pod $name: event '$message'"
  echo "placement: $name ($mem): $message"
  explained_like_event "$name" Scheduled "$message"
done

# pending reason POD MEM ANNOTATIONS EXPECTED_SUBSTRING
pending() {
  gpu_pod "$1" "$2" "$3" >/dev/null
  local message
  message=$(wait_event "$1" FailedScheduling)
  [[ $message == *"$4"* ]] || fail "pod $1: reason '$message', expected '$4'"
  [[ $(k get pod "$1" -o jsonpath='{.status.phase}') == Pending && -z $(k get pod "$1" -o jsonpath='{.spec.nodeName}') ]] ||
    fail "pod $1 is not Pending"
  local cond
  cond=$(k get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
  [[ $cond == "$message" ]] || fail "pod $1: PodScheduled says '$cond'"
  echo "placement: $1 ($2) Pending: $message"
  explained_like_event "$1" FailedScheduling "$message"
}
pending full 2Gi "" "no GPU has 2 GiB free: the most free is 1 GiB on $NODE/1"
pending too-big 17Gi "" "asks for 17 GiB of GPU memory, more than any GPU has (the largest: 8 GiB on $NODE/0)"
# A malformed annotation: the webhook refuses the pod at creation, naming the field; a pod that
# names Paladin as its scheduler without passing the webhook gets the same as an event.
rc=0
out=$(gpu_pod bad-priority 1Gi '"paladin.io/priority": "high"' 2>&1) || rc=$?
[[ $rc != 0 && $out == *"metadata.annotations[paladin.io/priority]: 'high' is not an integer"* ]] ||
  fail "bad paladin.io/priority admitted: rc $rc, '$out'"
echo "placement: bad-priority refused at creation: ${out##*denied the request: }"
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: direct, annotations: {paladin.io/priority: "high"}}
spec:
  schedulerName: paladin
  containers: [{name: demo, image: $IMAGE, imagePullPolicy: IfNotPresent}]
YAML
message=$(wait_event direct FailedScheduling)
[[ $message == *"metadata.annotations[paladin.io/priority]: 'high' is not an integer"* ]] ||
  fail "pod direct: reason '$message'"
echo "placement: direct (schedulerName paladin, no webhook) Pending: $message"
explained_like_event direct FailedScheduling "$message"

# Paladin down: its pods are refused at creation (failurePolicy Fail), other pods are untouched.
paladin_stop
paladin_register_webhook 19444
trap '"$KUBECTL" delete mutatingwebhookconfiguration "paladin-$NS" --ignore-not-found >/dev/null 2>&1 || true' EXIT
rc=0
out=$(gpu_pod down 1Gi "" 2>&1) || rc=$?
[[ $rc != 0 && $out == *gpu-pods.paladin.io* ]] || fail "GPU pod with Paladin down: rc $rc, '$out'"
echo "placement: with Paladin down a GPU pod is refused: ${out##*: }"
k run plain --image="$IMAGE" --restart=Never --dry-run=server -o name >/dev/null ||
  fail "a pod asking for no GPU memory was refused with Paladin down"
echo "placement: with Paladin down a pod asking for no GPU memory is admitted"
k delete pod --all --wait=false >/dev/null
