#!/usr/bin/env bash
# Paladin's own pod annotations (paladin.io/gpu, gpu-memory-bytes, restore-from, ...: all but
# paladin.io/priority) decide a pod's GPU and what the scheduler books for it: only Paladin may
# write them. A tenant (a user with the ClusterRole edit in the namespace, not Paladin's identity)
# tries, through the API server and Paladin's webhook: a GPU pod claiming gpu-memory-bytes 1000Gi,
# a pod asking for no GPU memory that presets its node and a GPU with 1000Gi booked on it, a GPU
# pod naming its node, a pod naming an image to restore, and on its own running GPU pod
# `kubectl annotate --overwrite` of gpu-memory-bytes and gpu and their removal. Each is refused
# naming the annotation or field, and the pod is as it was. Then the scheduler's books: two pods
# that Paladin's own identity lets through (no GPU memory asked, a node preset, 1000Gi claimed on
# GPU 0 and on GPU 1) book nothing, and a pod asking for 7Gi of an 8 GiB GPU is placed.
# Prints "security: paladin annotations: tried N, refused N".
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, PALADIN, EMUCUDA, NODE, K8S_NODE_FLAGS,
# CLUSTER_DIR.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CASE=annotation_trust
# shellcheck source=tests/k8s/caselib.sh
source "$(dirname "${BASH_SOURCE[0]}")/caselib.sh"
if [[ -z ${K8S_NODE_FLAGS:-} || -z ${CLUSTER_DIR:-} ]]; then
  echo "annotation_trust: SKIP: runs Paladin's webhook on this machine, for the test cluster only"
  exit 77
fi
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
trap paladin_stop EXIT
paladin_start 19446
paladin_tenant
TENANT=(--as paladin-test-tenant)

# A pod that asks for no GPU memory, Paladin's scheduler named, its node preset (never
# scheduled), with ANNOTATIONS. restartPolicy Always: it never ends as Failed, which the
# scheduler would stop counting.
squatter() { # NAME ANNOTATIONS [kubectl flags...]
  local name=$1 annotations=$2
  shift 2
  k apply "$@" -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $name
  annotations: {$annotations}
spec:
  schedulerName: paladin
  nodeName: $NODE
  terminationGracePeriodSeconds: 1
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: ["--mib", "1", "--host-mib", "1", "--every-ms", "1000"]
YAML
}

tried=0 refused=0
# attempt WHAT EXPECTED COMMAND...: COMMAND (as the tenant) must fail with EXPECTED in its error.
attempt() {
  local what=$1 expected=$2 out rc=0
  shift 2
  tried=$((tried + 1))
  out=$("$@" 2>&1) || rc=$?
  if [[ $rc != 0 && $out == *"$expected"* ]]; then
    refused=$((refused + 1))
    echo "annotation_trust: refused ($what): $(grep -o 'Paladin: .*' <<<"$out" | head -1 | cut -c1-170)"
  else
    echo "annotation_trust: NOT refused ($what): rc=$rc: $(tail -2 <<<"$out")"
  fi
}

# --- at creation -------------------------------------------------------------------------------
attempt "a GPU pod claiming gpu-memory-bytes 1000Gi" "metadata.annotations[paladin.io/gpu-memory-bytes] set" \
  gpu_pod claim 1Gi "paladin.io/gpu-memory-bytes: 1000Gi" "${TENANT[@]}"
attempt "no GPU memory asked, its node preset, GPU 0 with 1000Gi" "metadata.annotations[paladin.io/gpu" \
  squatter squat "paladin.io/gpu: \"0\", paladin.io/gpu-memory-bytes: 1000Gi" "${TENANT[@]}"
attempt "a GPU pod naming its node" "spec.nodeName '$NODE'" bash -c "
  '$KUBECTL' -n '$NS' --as paladin-test-tenant apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata: {name: named}
spec:
  nodeName: $NODE
  restartPolicy: Never
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    resources: {limits: {paladin.io/gpu-memory: 1Gi}}
YAML"
attempt "a pod naming an image to restore" "metadata.annotations[paladin.io/restore-from] set" \
  squatter restorer "paladin.io/restore-from: move-0-x, paladin.io/restore-token: \"00\"" "${TENANT[@]}"
for p in claim squat named restorer; do
  [[ -z $(k get pod "$p" --ignore-not-found -o name) ]] || fail "pod $p exists"
done

# --- on a running pod of its own (kubectl annotate: an UPDATE) ---------------------------------
gpu_pod own 1Gi "" "${TENANT[@]}" >/dev/null
k wait --for=jsonpath='{.status.phase}'=Running pod/own --timeout=60s >/dev/null || fail "pod own not Running"
before=$(k get pod own -o jsonpath='{.metadata.annotations}')
attempt "annotate --overwrite gpu-memory-bytes=1" "metadata.annotations[paladin.io/gpu-memory-bytes] changed" \
  k "${TENANT[@]}" annotate --overwrite pod own paladin.io/gpu-memory-bytes=1
attempt "annotate --overwrite gpu=1" "metadata.annotations[paladin.io/gpu] changed" \
  k "${TENANT[@]}" annotate --overwrite pod own paladin.io/gpu=1
attempt "annotate gpu- (removed)" "metadata.annotations[paladin.io/gpu] removed" \
  k "${TENANT[@]}" annotate pod own paladin.io/gpu-
attempt "annotate move-to" "metadata.annotations[paladin.io/move-to] set" \
  k "${TENANT[@]}" annotate pod own paladin.io/move-to="$NODE/1"
[[ $(k get pod own -o jsonpath='{.metadata.annotations}') == "$before" ]] ||
  fail "pod own's annotations changed: $before -> $(k get pod own -o jsonpath='{.metadata.annotations}')"
# What a tenant may still do: its own labels and annotations, and paladin.io/priority.
k "${TENANT[@]}" annotate pod own team.example/owner=alice paladin.io/priority=3 >/dev/null ||
  fail "the tenant cannot annotate its pod with its own keys"
echo "security: paladin annotations: tried $tried, refused $refused"
[[ $refused == "$tried" ]] || fail "$((tried - refused)) of $tried not refused"
k delete pod own --wait=true --timeout=30s >/dev/null

# --- the scheduler's books: the request, not the annotation --------------------------------------
# Paladin's own identity (the admin here) passes the webhook's annotation check: these two stand
# for pods that got such annotations past it. Neither asks for GPU memory, so neither is booked.
squatter squat0 "paladin.io/gpu: \"0\", paladin.io/gpu-memory-bytes: 1000Gi" >/dev/null
squatter squat1 "paladin.io/gpu: \"1\", paladin.io/gpu-memory-bytes: 1000Gi" >/dev/null
gpu_pod big 7Gi "" "${TENANT[@]}" >/dev/null
for ((i = 0; i < 100; i++)); do
  [[ -n $(k get pod big -o jsonpath='{.spec.nodeName}') ]] && break
  sleep 0.2
done
[[ -n $(k get pod big -o jsonpath='{.spec.nodeName}') ]] ||
  fail "pod big (7Gi) not placed beside pods claiming 1000Gi they never asked for: $(k get events --field-selector involvedObject.name=big -o jsonpath='{.items[-1:].message}')"
echo "annotation_trust: big (7Gi) placed: $(k get pod big -o jsonpath='{.metadata.annotations.paladin\.io/placement}')"
k delete pod squat0 squat1 big --wait=false >/dev/null
