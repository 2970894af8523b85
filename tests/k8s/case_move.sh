#!/usr/bin/env bash
# A running pod moved with its process state by `paladin k8s move old --name new`: pod `old` (the
# demo workload, RuntimeClass paladin) is checkpointed with runc and CRIU, pod `new` (same spec,
# annotations paladin.io/restore-from and its token) starts as the restored process through
# paladin-runc, and `old` is deleted. The workload goes
# on from the generation it had reached, its memory verified; a sampler (every 100 ms, the host's
# /proc) sees at most one copy of it at any instant; the old pod is gone.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, CLUSTER_DIR, PALADIN, K8S_NODE_FLAGS, MOVE_FLAGS.
set -euo pipefail
CASE=move
source "$(dirname "${BASH_SOURCE[0]}")/caselib.sh"
need_cluster 1 "moves a pod with runc and CRIU on the node itself (the test cluster only)"
workload '--mib 24 --host-mib 3 --every-ms 90'

runtime_class
sampler_start
demo_pod old
wait_running old
wait_gen old 5

# --- the move ---------------------------------------------------------------------------------
read -ra flags <<<"$K8S_NODE_FLAGS $MOVE_FLAGS"
# The old pod's log until its container exits (the mover deletes the pod, and its log with it).
"$KUBECTL" -n "$NS" logs -f old >"$work/old.log" 2>/dev/null &
t0=$(date +%s%N)
"$PALADIN" k8s move -n "$NS" old --name new "${flags[@]}" >"$work/move" 2>&1 ||
  fail "paladin k8s move: $(tail -5 "$work/move")"
sed 's/^/move:   /' "$work/move"
gen_before=$(gens "$work/old.log" | tail -1)
ckpt_ms=$(sed -n 's/.*checkpoint \([0-9]*\) ms.*/\1/p' "$work/move")
first=$(first_gen new)
t2=$(date +%s%N)
k wait --for=delete pod/old --timeout=30s >/dev/null 2>&1 || true
went_on new "$first" "$gen_before" $((gen_before + 2))
k get pod old >/dev/null 2>&1 && fail "pod old still exists"
sampler_stop
echo "move: old -> new, generation $gen_before -> $first, then $(last_gen new), memory verified;" \
  "checkpoint $ckpt_ms ms, paused $(((t2 - t0) / 1000000)) ms until the new pod's" \
  "first generation; at most 1 copy in $SAMPLES samples; pod old deleted"
k delete pod new --wait=true --timeout=30s >/dev/null
