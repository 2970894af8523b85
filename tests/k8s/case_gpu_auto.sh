#!/usr/bin/env bash
# `paladin.io/gpu-memory: auto` (docs/kubernetes.md, design 7): pods of one class (the namespace's
# team research, the demo workload's image) annotated auto, with no GPU memory asked, are sized by
# Paladin's webhook asking Paladin's server. The first has no history: the default 4 GiB. Its use
# is measured on the node (paladin k8s node --usage) and reported with it by the scheduler
# (PUT /v1/pods); the second is then sized from that peak x 1.2. With the server stopped, a third
# is still admitted, at the webhook's default, its annotation saying why.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, PALADIN, EMUCUDA, NODE, K8S_NODE_FLAGS,
# CLUSTER_DIR.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CASE=gpu_auto
# shellcheck source=tests/k8s/caselib.sh
source "$(dirname "${BASH_SOURCE[0]}")/caselib.sh"
if [[ -z ${K8S_NODE_FLAGS:-} || -z ${CLUSTER_DIR:-} ]]; then
  echo "gpu_auto: SKIP: runs Paladin's server and webhook on this machine, for the test cluster only"
  exit 77
fi
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
work=$(mktemp -d)
cleanup() {
  paladin_stop
  rm -rf "$work"
}
trap cleanup EXIT
read -ra api <<<"$K8S_NODE_FLAGS"

# A server of its own on this machine (step 4 stops it), not the one case_installed installs.
start_server "$work/server" || fail "no server"
url=$SERVER_URL
token_file=$SERVER_TOKEN_FILE
"$KUBECTL" label namespace "$NS" paladin.io/team=research >/dev/null
PALADIN_WEBHOOK_FLAGS="--paladin-server $url --paladin-token-file $token_file ${api[*]}" \
  PALADIN_SCHEDULER_FLAGS="--paladin-server $url --paladin-token-file $token_file" \
  paladin_start 19453

paladin_tenant
TENANT=(--as paladin-test-tenant)

# auto_pod NAME: the demo workload holding 512 MiB, its size left to Paladin, created by a tenant.
auto_pod() {
  k "${TENANT[@]}" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  annotations: {paladin.io/gpu-memory: auto}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: ["--mib", "512", "--host-mib", "1", "--every-ms", "200"]
YAML
}
# limit POD: its container's paladin.io/gpu-memory in MiB (the API server writes a quantity in
# its canonical form: 4096Mi comes back as 4Gi).
limit() {
  local q
  q=$(k get pod "$1" -o jsonpath='{.spec.containers[0].resources.limits.paladin\.io/gpu-memory}')
  case $q in
    *Gi) echo "$((${q%Gi} * 1024))Mi" ;;
    *) echo "$q" ;;
  esac
}
sized() { k get pod "$1" -o jsonpath='{.metadata.annotations.paladin\.io/gpu-memory-sized}'; }
class=research/$(basename "${IMAGE%%[:@]*}")

# 1. No history for the class: the server's default, 4 GiB.
auto_pod first
[[ $(limit first) == 4096Mi ]] || fail "first: limit '$(limit first)', expected 4096Mi"
[[ $(sized first) == "4096Mi, Paladin's server, class $class: no history for $class: the default 4 GiB" ]] ||
  fail "first: sized '$(sized first)'"
echo "gpu_auto: first: $(sized first)"
k wait --for=jsonpath='{.status.phase}'=Running pod/first --timeout=60s >/dev/null ||
  fail "first not Running: $(k get pod first -o jsonpath='{.status.conditions}')"

# 2. Its use measured on the node and reported by the scheduler: the class's history.
sizing() {
  curl -sf -H "Authorization: Bearer $(cat "$token_file")" \
    "$url/v1/sizing?team=research&command=${class#research/}"
}
for ((i = 0; i < 50; i++)); do
  out=$(PALADIN_EMU_GPUS=$PALADIN_EMU_GPUS_SPEC PALADIN_EMU_STATE=$CLUSTER_DIR/paladin/emu/state \
    "$PALADIN" k8s node --node "$NODE" --nvml "$EMUCUDA" --usage "${api[@]}" 2>&1) ||
    fail "paladin k8s node --usage: $out"
  used=$(k get pod first -o jsonpath='{.metadata.annotations.paladin\.io/gpu-memory-used}')
  [[ $used =~ ^[0-9]+$ ]] && ((used >= 512 << 20)) && [[ $(sizing) == *'"from":"history"'* ]] && break
  sleep 0.3
done
answer=$(sizing) || fail "GET /v1/sizing failed"
[[ $answer == *'"from":"history"'* && $answer == *'"pods":1'* ]] ||
  fail "the server did not learn first's peak ($used bytes measured): $answer"
peak=$(grep -o '"peak_bytes":[0-9]*' <<<"$answer" | cut -d: -f2)
bytes=$(grep -o '"bytes":[0-9]*' <<<"$answer" | cut -d: -f2)
((peak >= 512 << 20 && peak < 4 << 30)) || fail "peak $peak: expected first's 512 MiB and its context"
echo "gpu_auto: first measured at $used bytes; the server's sizing: $answer"

# 3. A second pod of the class: sized from first's peak x 1.2, rounded up to a MiB.
auto_pod second
expected=$(((bytes + (1 << 20) - 1) >> 20))Mi
[[ $(limit second) == "$expected" ]] || fail "second: limit '$(limit second)', expected $expected"
[[ $(sized second) == "$expected, Paladin's server, class $class: highest peak of $class's 1 earlier pod "* ]] ||
  fail "second: sized '$(sized second)'"
echo "gpu_auto: second: $(sized second)"
k wait --for=jsonpath='{.status.phase}'=Running pod/second --timeout=60s >/dev/null ||
  fail "second not Running: $(k get pod second -o jsonpath='{.status.conditions}')"
[[ $(k get pod second -o jsonpath='{.metadata.annotations.paladin\.io/gpu}') =~ ^[0-9]+$ ]] ||
  fail "second not placed by Paladin"

# 4. The server down: a third is admitted anyway (failurePolicy Fail refuses nothing), at the
#    webhook's default, saying why.
stop_server
auto_pod third
[[ $(limit third) == 4096Mi ]] || fail "third: limit '$(limit third)', expected 4096Mi"
[[ $(sized third) == "4096Mi, the webhook's default 4 GiB: Paladin's server not asked (Paladin's server "* ]] ||
  fail "third: sized '$(sized third)'"
echo "gpu_auto: third, the server down: $(sized third)"

# A user cannot write the record of the sizing (nor a size in the annotation).
if out=$(k "${TENANT[@]}" apply -f - 2>&1 <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: forged
  annotations: {paladin.io/gpu-memory: auto, paladin.io/gpu-memory-sized: "1Mi, trust me"}
spec:
  containers: [{name: demo, image: $IMAGE, resources: {limits: {paladin.io/gpu-memory: 1Mi}}}]
YAML
); then
  fail "a pod with a forged paladin.io/gpu-memory-sized was admitted"
fi
[[ $out == *"paladin.io/gpu-memory-sized] set: only Paladin sets it"* ]] || fail "forged: $out"
k delete pod first second third --wait=true --timeout=30s >/dev/null
echo "gpu_auto: a forged sizing record refused: ${out##*: Paladin: }"
