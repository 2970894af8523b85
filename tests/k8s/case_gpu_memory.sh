#!/usr/bin/env bash
# The node's GPU memory advertised by `paladin k8s node` as paladin.io/gpu-memory (read from the
# emulated NVML: 2 GPUs of 8 GiB): a pod asking for 1Gi is admitted and runs; one asking for more
# than the node has stays Pending with the scheduler's reason; a ResourceQuota on the resource
# refuses a pod past it; a bad node name is refused naming it.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, PALADIN, EMUCUDA, NODE, K8S_NODE_FLAGS.
set -euo pipefail
CASE=gpu_memory
# shellcheck source=tests/k8s/caselib.sh
source "$(dirname "${BASH_SOURCE[0]}")/caselib.sh"
if [[ -z ${K8S_NODE_FLAGS:-} ]]; then
  echo "gpu_memory: SKIP: needs the test cluster's credentials to patch a Node's status"
  exit 77
fi
read -ra flags <<<"$K8S_NODE_FLAGS"
emu=$(mktemp -d)
trap 'rm -rf "$emu"' EXIT
node_cmd() {
  PALADIN_EMU_GPUS=2x8GiB PALADIN_EMU_STATE=$emu/state "$PALADIN" k8s node --nvml "$EMUCUDA" \
    "${flags[@]}" "$@"
}

# Refused input first: nothing reaches the API server.
rc=0
out=$(node_cmd --node 'Bad_Node' 2>&1) || rc=$?
[[ $rc == 2 && $out == *"node name 'Bad_Node'"* ]] || fail "bad node name: rc $rc, '$out'"

out=$(node_cmd --node "$NODE")
echo "gpu_memory: $out"
[[ $out == *"paladin.io/gpu-memory = 17179869184 (16 GiB, from 2 GPU(s)"* ]] || fail "advertised: $out"
got=$("$KUBECTL" get node "$NODE" -o jsonpath='{.status.allocatable.paladin\.io/gpu-memory}')
[[ $got == 17179869184 ]] || fail "node allocatable paladin.io/gpu-memory is '$got'"

pod() {  # pod NAME GPU_MEMORY
  k apply -f - <<YAML >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: ["--mib", "16", "--host-mib", "1"]
    resources:
      limits: {paladin.io/gpu-memory: $2}
YAML
}
pod fits 1Gi
pod too-big 17Gi
k wait --for=jsonpath='{.status.phase}'=Running pod/fits --timeout=60s >/dev/null
echo "gpu_memory: pod fits (1Gi) Running"
for ((i = 0; i < 150; i++)); do
  reason=$(k get pod too-big -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}')
  [[ $reason == Unschedulable ]] && break
  sleep 0.2
done
[[ $reason == Unschedulable ]] || fail "pod too-big: PodScheduled reason '$reason'"
message=$(k get pod too-big -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
[[ $message == *"Insufficient paladin.io/gpu-memory"* ]] || fail "pod too-big: '$message'"
[[ $(k get pod too-big -o jsonpath='{.status.phase}') == Pending ]] || fail "too-big not Pending"
echo "gpu_memory: pod too-big (17Gi) Pending: $message"
k delete pod fits too-big --wait=true --timeout=30s >/dev/null

# A namespace's quota on the resource, enforced by the API server at admission.
k create quota gpu --hard=requests.paladin.io/gpu-memory=2Gi >/dev/null
for ((i = 0; i < 50; i++)); do
  [[ -n $(k get quota gpu -o jsonpath='{.status.hard}') ]] && break
  sleep 0.2
done
pod under-quota 2Gi
rc=0
out=$(pod over-quota 1Gi 2>&1) || rc=$?
[[ $rc != 0 && $out == *"exceeded quota: gpu"* ]] || fail "over-quota pod admitted: rc $rc, '$out'"
echo "gpu_memory: quota 2Gi: pod of 2Gi admitted, one more of 1Gi refused (${out#*forbidden: })"
k delete pod under-quota --wait=true --timeout=30s >/dev/null
