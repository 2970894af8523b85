#!/usr/bin/env bash
# k8s: nodes 2
# A GPU pod of a lost node back on the other node's GPU from its last checkpoint: pod `lgpu` (the
# demo workload, 2Gi of paladin.io/gpu-memory, 48 MiB of device memory, RuntimeClass paladin) is
# placed by Paladin on the second node's GPU 0 (the first node's GPUs unpublished meanwhile);
# `paladin k8s checkpoint` on the second node locks and checkpoints its GPU state through the
# driver, dumps it with CRIU left running, and gives the GPU state back; the second node is lost
# (cluster.sh lose-node2) and its image folder deleted. Meanwhile pod `fill` (7Gi, no toleration
# of the second node's taint, so on the first node) holds one of the first node's GPUs, so the
# GPU lgpu had (0) has no room for it there: `paladin k8s recover` asks Paladin's packer, which
# chooses the other GPU, deletes `lgpu`, creates `lgpu-m1` (paladin.io/move-to localhost/G,
# bound there by Paladin's scheduler), whose restore by the first node's runtime puts its GPU
# state back on that GPU (`paladin k8s gpu-restore`, on the node itself). Checked: it goes
# on from the checkpoint's generation, its device memory verified on that GPU's UUID; the
# sampler never sees two copies; the second node comes back without it. Both nodes' emulated
# GPUs are this machine's (one state folder).
# Env (tests/k8s/k8s_test.sh): as case_recover_node, and EMUCUDA.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CASE=recover_node_gpu
source "$here/caselib.sh"
need_cluster 2 "loses the test cluster's second node (cluster.sh --nodes 2)"
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
logs_pid='' node2_lost=0
read -ra api <<<"$K8S_NODE_FLAGS"
cleanup() {
  [[ -z $logs_pid ]] || kill "$logs_pid" 2>/dev/null || true
  [[ $node2_lost == 0 ]] || bash "$here/cluster.sh" return-node2 "$CLUSTER_DIR" >/dev/null 2>&1 || true
  "$KUBECTL" annotate node "$NODE2" paladin.io/gpus- >/dev/null 2>&1 || true
  "$KUBECTL" -n "$NS" delete pod fill --wait=false >/dev/null 2>&1 || true
  "$PALADIN" k8s node --node "$NODE" --nvml "$EMUCUDA" "${api[@]}" >/dev/null 2>&1 || true
  paladin_stop
}
on_exit=cleanup
paladin_start 19448
export PALADIN_EMU_GPUS=$PALADIN_EMU_GPUS_SPEC PALADIN_EMU_STATE=$CLUSTER_DIR/paladin/emu/state

runtime_class
# Only the second node's GPUs published while the pod is placed: the packer puts it there.
"$PALADIN" k8s node --node "$NODE2" --nvml "$EMUCUDA" "${api[@]}" >/dev/null
"$KUBECTL" annotate node "$NODE" paladin.io/gpus- >/dev/null
workload '--mib 48 --host-mib 3 --every-ms 89'
demo_pod lgpu '  tolerations: [{key: paladin.io/second-node, operator: Exists, effect: NoSchedule}]' \
  'paladin.io/gpu-memory: 2Gi'
wait_running lgpu
[[ $(k get pod lgpu -o jsonpath='{.spec.nodeName}/{.metadata.annotations.paladin\.io/gpu}') == "$NODE2/0" ]] ||
  fail "pod lgpu is not on $NODE2/0: $(k get pod lgpu -o jsonpath='{.spec.nodeName}/{.metadata.annotations}')"
"$PALADIN" k8s node --node "$NODE" --nvml "$EMUCUDA" "${api[@]}" >/dev/null
"$KUBECTL" -n "$NS" logs -f lgpu >"$work/lgpu.log" 2>/dev/null &
logs_pid=$!
gpu_pod fill 7Gi '' >/dev/null
for ((i = 0; i < 100; i++)); do
  fill_at=$(k get pod fill -o jsonpath='{.spec.nodeName}/{.metadata.annotations.paladin\.io/gpu}')
  [[ $fill_at == */[0-9]* ]] && break
  sleep 0.1
done
[[ $fill_at == "$NODE/"[01] ]] || fail "pod fill is not on a GPU of $NODE: '$fill_at'"
to_gpu=$((1 - ${fill_at##*/}))
wait_gen lgpu 4
to_uuid=$(uuid_of "$to_gpu")

sampler_start
read -ra ckpt <<<"$NODE2_CHECKPOINT_FLAGS"
g_before=$(last_gen lgpu)
"$PALADIN" k8s checkpoint --node "$NODE2" --driver "$EMUCUDA" --nvml "$EMUCUDA" "${api[@]}" \
  "${ckpt[@]}" >"$work/ckpt" 2>&1 || fail "paladin k8s checkpoint: $(tail -5 "$work/ckpt")"
g_after=$(last_gen lgpu)
sed 's/^/recover_node_gpu:   /' "$work/ckpt"
grep -q "^checkpointed 1 pod(s) of $NODE2" "$work/ckpt" || fail "checkpoint: $(tail -1 "$work/ckpt")"
for ((i = 0; i < 50; i++)); do
  [[ $(last_gen lgpu) -ge $((g_after + 8)) ]] 2>/dev/null && break
  sleep 0.2
done
[[ $(last_gen lgpu) -ge $((g_after + 8)) ]] || fail "pod lgpu does not go on after its checkpoint (at $(last_gen lgpu))"
! grep -q MISMATCH <<<"$(k logs lgpu)" || fail "pod lgpu after its checkpoint: $(k logs lgpu | grep -m1 MISMATCH)"

lose_node2 recover_node_gpu
g_died=$(died_gen lgpu "$work/lgpu.log")
read -ra mv <<<"$MOVE_FLAGS"
ok=0
for ((i = 0; i < 40; i++)); do
  if "$PALADIN" k8s recover "$NODE2" --to "$NODE" --lost-after 4 --driver "$EMUCUDA" --nvml "$EMUCUDA" \
    "${api[@]}" "${mv[@]}" >"$work/recover" 2>&1; then
    ok=1
    break
  fi
  grep -q "is not lost" "$work/recover" || fail "paladin k8s recover: $(tail -5 "$work/recover")"
  sleep 0.5
done
[[ $ok == 1 ]] || fail "node $NODE2 never counted lost: $(tail -1 "$work/recover")"
sed 's/^/recover_node_gpu:   /' "$work/recover"
grep -q "GPU state of $NS/lgpu-m1 restored by node $NODE's runtime" "$work/recover" ||
  fail "the first node's runtime did not restore the GPU state: $(tail -3 "$work/recover")"
first=$(first_gen lgpu-m1)
[[ -n $first ]] || fail "pod lgpu-m1 prints no generation: $(k logs lgpu-m1 | tail -3)"
[[ $(k get pod lgpu-m1 -o jsonpath='{.spec.nodeName}/{.metadata.annotations.paladin\.io/gpu}') == "$NODE/$to_gpu" ]] ||
  fail "pod lgpu-m1 is not on $NODE/$to_gpu (pod fill on $fill_at): $(k get pod lgpu-m1 -o jsonpath='{.spec.nodeName} {.metadata.annotations}')"
grep -q "GPU chosen: $NODE/$to_gpu by Paladin's packer" "$work/recover" ||
  fail "recover does not say the packer chose $NODE/$to_gpu: $(grep -m1 'GPU chosen' "$work/recover")"
k get pod lgpu >/dev/null 2>&1 && fail "pod lgpu still exists"
! grep -q '^started:' <<<"$(k logs lgpu-m1)" || fail "pod lgpu-m1 started its workload afresh"
if ((first <= g_before || first > g_after + 1)); then
  fail "pod lgpu-m1 went on at generation $first; the checkpoint was taken between $g_before and $g_after"
fi
# The logs lag the pod on a loaded machine (case_installed.sh): up to 5 s of generations.
((first < g_died + 5000 / 89)) ||
  fail "pod lgpu-m1 went on at $first, not before $g_died (+5 s) where its node died"

bash "$here/cluster.sh" return-node2 "$CLUSTER_DIR" | sed 's/^/recover_node_gpu:   /'
node2_lost=0
sleep 1
k get pod lgpu >/dev/null 2>&1 && fail "pod lgpu is back with its node"
! grep -q MISMATCH <<<"$(k logs lgpu-m1)" || fail "pod lgpu-m1: $(k logs lgpu-m1 | grep -m1 MISMATCH)"
[[ $(last_gen lgpu-m1) -gt $first ]] || fail "pod lgpu-m1 does not advance past generation $first"
[[ $(k logs lgpu-m1 | tail -1) == *"$to_uuid"* ]] ||
  fail "pod lgpu-m1 does not run on GPU $to_gpu ($to_uuid): $(k logs lgpu-m1 | tail -1)"
sampler_stop
echo "recover_node_gpu: lgpu on $NODE2/0 checkpointed at generation $g_before-$g_after, died at" \
  "$g_died; lgpu-m1 on $NODE/$to_gpu (the packer's choice, fill on $fill_at) went on at $first, then $(last_gen lgpu-m1), device memory" \
  "verified on $to_uuid; at most 1 copy in $SAMPLES samples"
k delete pod lgpu-m1 fill --wait=true --timeout=30s >/dev/null
