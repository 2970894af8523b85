#!/usr/bin/env bash
# k8s: nodes 2
# A GPU pod moved to the second node's other GPU by `paladin k8s move POD --node NODE2 --gpu 1`:
# pod `ngpu` (the demo workload, 2Gi of paladin.io/gpu-memory, 64 MiB of device memory,
# RuntimeClass paladin, placed by Paladin on the first node's GPU 0) has its GPU state
# checkpointed through the driver, then CRIU; the image is carried into the second node's folder;
# Paladin's scheduler binds `ngpu-m1` to NODE2/1 (paladin.io/move-to), the second node's runtime
# restores it and the mover restores its GPU state onto GPU 1 (the second node's runc state,
# --to-runc-root). Checked: the workload goes on from the generation it had reached, its device
# memory verified, on GPU 1's UUID; the old pod is gone; the 100 ms sampler never sees two copies.
# Both nodes' emulated GPUs are this machine's (one state folder): the second node publishes the
# same two GPUs, and its annotation is removed at the end so later cases see one GPU node.
# Env (tests/k8s/k8s_test.sh): as case_move_gpu, and NODE2, NODE2_MOVE_FLAGS.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CASE=move_node_gpu
source "$(dirname "${BASH_SOURCE[0]}")/caselib.sh"
if [[ -z ${CLUSTER_DIR:-} || -z ${NODE2:-} ]]; then
  echo "move_node_gpu: SKIP: moves a pod between the test cluster's two nodes (cluster.sh --nodes 2)"
  exit 77
fi
CRIU_DIR=${PALADIN_CRIU_DIR:-/opt/paladin/criu}
[[ -x $CRIU_DIR/criu ]] || { echo "move_node_gpu: SKIP: no CRIU in $CRIU_DIR (scripts/criu.sh)"; exit 77; }
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
work=$(mktemp -d)
sampler_pid=''
cleanup() {
  [[ -z $sampler_pid ]] || kill "$sampler_pid" 2>/dev/null || true
  "$KUBECTL" annotate node "$NODE2" paladin.io/gpus- >/dev/null 2>&1 || true
  paladin_stop
  rm -rf "$work"
}
trap cleanup EXIT
paladin_start 19447
read -ra api <<<"$K8S_NODE_FLAGS"
read -ra move <<<"$MOVE_FLAGS $NODE2_MOVE_FLAGS"
export PALADIN_EMU_GPUS=$PALADIN_EMU_GPUS_SPEC PALADIN_EMU_STATE=$CLUSTER_DIR/paladin/emu/state

runtime_class
# The workload's arguments as a pgrep -f pattern (caselib.sh).
MARK='[-]-mib 64 --host-mib 3 --every-ms 93'
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: ngpu}
spec:
  runtimeClassName: paladin
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: ["--mib", "64", "--host-mib", "3", "--every-ms", "93"]
    resources:
      limits: {paladin.io/gpu-memory: 2Gi}
YAML
k wait --for=jsonpath='{.status.phase}'=Running pod/ngpu --timeout=60s >/dev/null ||
  fail "pod ngpu not Running: $(k get pod ngpu -o jsonpath='{.status}')"
[[ $(k get pod ngpu -o jsonpath='{.spec.nodeName}/{.metadata.annotations.paladin\.io/gpu}') == "$NODE/0" ]] ||
  fail "pod ngpu is not on $NODE/0: $(k get pod ngpu -o jsonpath='{.spec.nodeName}/{.metadata.annotations}')"
# Only now the second node's GPUs: Paladin's scheduler could place ngpu there otherwise.
"$PALADIN" k8s node --node "$NODE2" --nvml "$EMUCUDA" "${api[@]}" >/dev/null
for ((i = 0; i < 100; i++)); do
  [[ $(last_gen ngpu) -ge 5 ]] 2>/dev/null && break
  sleep 0.2
done
[[ $(last_gen ngpu) -ge 5 ]] 2>/dev/null || fail "pod ngpu: no fifth generation: $(k logs ngpu | tail -3)"
to_uuid=$(uuid_of 1)

sampler >"$work/samples" &
sampler_pid=$!
k logs -f ngpu >"$work/old.log" 2>/dev/null &

"$PALADIN" k8s move -n "$NS" ngpu --node "$NODE2" --gpu 1 --driver "$EMUCUDA" --nvml "$EMUCUDA" \
  "${move[@]}" "${api[@]}" >"$work/move.log" 2>&1 || fail "paladin k8s move: $(tail -5 "$work/move.log")"
sed 's/^/move_node_gpu:   /' "$work/move.log"
first=''
for ((i = 0; i < 100; i++)); do
  first=$(k logs ngpu-m1 2>/dev/null | sed -n 's/^gen \([0-9]*\) ok .*/\1/p' | head -1)
  [[ -n $first ]] && break
  sleep 0.05
done
gen_before=$(sed -n 's/^gen \([0-9]*\) ok .*/\1/p' "$work/old.log" | tail -1)
[[ -n $first ]] || fail "pod ngpu-m1 prints no generation: $(k logs ngpu-m1 | tail -3)"
! grep -q '^started:' <<<"$(k logs ngpu-m1)" || fail "pod ngpu-m1 started its workload afresh"
((first > gen_before && first <= gen_before + 2)) ||
  fail "pod ngpu-m1 went on at generation $first; pod ngpu had reached $gen_before"
[[ $(k get pod ngpu-m1 -o jsonpath='{.spec.nodeName}/{.metadata.annotations.paladin\.io/gpu}') == "$NODE2/1" ]] ||
  fail "pod ngpu-m1 is not on $NODE2/1: $(k get pod ngpu-m1 -o jsonpath='{.spec.nodeName} {.metadata.annotations}')"
sleep 1
! grep -q MISMATCH <<<"$(k logs ngpu-m1)" || fail "pod ngpu-m1: $(k logs ngpu-m1 | grep -m1 MISMATCH)"
[[ $(last_gen ngpu-m1) -gt $first ]] || fail "pod ngpu-m1 does not advance past generation $first"
[[ $(k logs ngpu-m1 | tail -1) == *"$to_uuid"* ]] ||
  fail "pod ngpu-m1 does not run on GPU 1 ($to_uuid): $(k logs ngpu-m1 | tail -1)"
k wait --for=delete pod/ngpu --timeout=30s >/dev/null 2>&1 || fail "pod ngpu still exists"
kill "$sampler_pid"
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=''
max=$(sort -n "$work/samples" | tail -1)
samples=$(wc -l <"$work/samples")
[[ $max == 1 ]] || fail "$max copies of the workload at once (of $samples samples): $(cat "$work/samples.seen" 2>/dev/null)"
echo "move_node_gpu: ngpu on $NODE/0 -> ngpu-m1 on $NODE2/1, generation $gen_before -> $first," \
  "then $(last_gen ngpu-m1), device memory verified on $to_uuid; $(tail -1 "$work/move.log");" \
  "at most 1 copy in $samples samples; pod ngpu deleted"
k delete pod ngpu-m1 --wait=true --timeout=30s >/dev/null
