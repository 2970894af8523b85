#!/usr/bin/env bash
# k8s: nodes 2
# A GPU pod moved to the second node's other GPU by `paladin k8s move POD --node NODE2 --gpu 1`:
# pod `ngpu` (the demo workload, 2Gi of paladin.io/gpu-memory, 64 MiB of device memory,
# RuntimeClass paladin, placed by Paladin on the first node's GPU 0) has its GPU state
# checkpointed through the driver, then CRIU; the image is carried into the second node's folder;
# Paladin's scheduler binds `ngpu-m1` to NODE2/1 (paladin.io/move-to), the second node's runtime
# restores it and, on that node itself (`paladin k8s gpu-restore`, as on another machine: the
# mover is given no --to-runc-root), its GPU state onto GPU 1. Checked: the workload goes on from the generation it had reached, its device
# memory verified, on GPU 1's UUID; the old pod is gone; the 100 ms sampler never sees two copies.
# Both nodes' emulated GPUs are this machine's (one state folder): the second node publishes the
# same two GPUs, and its annotation is removed at the end so later cases see one GPU node.
# Env (tests/k8s/k8s_test.sh): as case_move_gpu, and NODE2, NODE2_MOVE_FLAGS.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CASE=move_node_gpu
source "$here/caselib.sh"
need_cluster 2 "moves a pod between the test cluster's two nodes (cluster.sh --nodes 2)"
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
cleanup() {
  "$KUBECTL" annotate node "$NODE2" paladin.io/gpus- >/dev/null 2>&1 || true
  paladin_stop
}
on_exit=cleanup
paladin_start 19447
read -ra api <<<"$K8S_NODE_FLAGS"
read -ra move <<<"$MOVE_FLAGS $NODE2_MOVE_FLAGS"
export PALADIN_EMU_GPUS=$PALADIN_EMU_GPUS_SPEC PALADIN_EMU_STATE=$CLUSTER_DIR/paladin/emu/state

runtime_class
workload '--mib 64 --host-mib 3 --every-ms 93'
demo_pod ngpu '' 'paladin.io/gpu-memory: 2Gi'
wait_running ngpu
[[ $(k get pod ngpu -o jsonpath='{.spec.nodeName}/{.metadata.annotations.paladin\.io/gpu}') == "$NODE/0" ]] ||
  fail "pod ngpu is not on $NODE/0: $(k get pod ngpu -o jsonpath='{.spec.nodeName}/{.metadata.annotations}')"
# Only now the second node's GPUs: Paladin's scheduler could place ngpu there otherwise.
"$PALADIN" k8s node --node "$NODE2" --nvml "$EMUCUDA" "${api[@]}" >/dev/null
wait_gen ngpu 5
to_uuid=$(uuid_of 1)

sampler_start
"$KUBECTL" -n "$NS" logs -f ngpu >"$work/old.log" 2>/dev/null &

"$PALADIN" k8s move -n "$NS" ngpu --node "$NODE2" --gpu 1 --driver "$EMUCUDA" --nvml "$EMUCUDA" \
  "${move[@]}" "${api[@]}" >"$work/move.log" 2>&1 || fail "paladin k8s move: $(tail -5 "$work/move.log")"
sed 's/^/move_node_gpu:   /' "$work/move.log"
grep -q "restored onto GPU 1 by node $NODE2's runtime" "$work/move.log" ||
  fail "the second node's runtime did not restore the GPU state: $(tail -3 "$work/move.log")"
first=$(first_gen ngpu-m1)
gen_before=$(gens "$work/old.log" | tail -1)
[[ $(k get pod ngpu-m1 -o jsonpath='{.spec.nodeName}/{.metadata.annotations.paladin\.io/gpu}') == "$NODE2/1" ]] ||
  fail "pod ngpu-m1 is not on $NODE2/1: $(k get pod ngpu-m1 -o jsonpath='{.spec.nodeName} {.metadata.annotations}')"
went_on ngpu-m1 "$first" "$gen_before" $((gen_before + 2))
[[ $(k logs ngpu-m1 | tail -1) == *"$to_uuid"* ]] ||
  fail "pod ngpu-m1 does not run on GPU 1 ($to_uuid): $(k logs ngpu-m1 | tail -1)"
k wait --for=delete pod/ngpu --timeout=30s >/dev/null 2>&1 || fail "pod ngpu still exists"
sampler_stop
echo "move_node_gpu: ngpu on $NODE/0 -> ngpu-m1 on $NODE2/1, generation $gen_before -> $first," \
  "then $(last_gen ngpu-m1), device memory verified on $to_uuid; $(tail -1 "$work/move.log");" \
  "at most 1 copy in $SAMPLES samples; pod ngpu deleted"
k delete pod ngpu-m1 --wait=true --timeout=30s >/dev/null
