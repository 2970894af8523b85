#!/usr/bin/env bash
# k8s: nodes 2
# A running pod moved to the cluster's second node by `paladin k8s move old --node NODE2`: pod
# `old` (the demo workload, RuntimeClass paladin, on the first node) is checkpointed there with
# runc and CRIU, the image is carried into the second node's image folder, and pod `new` (bound
# to the second node, annotations paladin.io/restore-from and its token) starts as the restored
# process through the second node's containerd and paladin-runc; `old` is deleted. Checked: the
# workload goes on from the generation it had reached, its memory verified, in a process of the
# second kubelet's cgroups; a sampler (every 100 ms, the host's /proc, which sees both nodes)
# never sees two copies; the old pod is gone. A move to the other node without its image folder
# is refused first, the pod left running. Then `paladin k8s drain NODE2 --to NODE` moves it
# back the same way (the second node cordoned meanwhile, uncordoned after).
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, CLUSTER_DIR, PALADIN, K8S_NODE_FLAGS,
# MOVE_FLAGS, NODE, NODE2, NODE2_CGROUP, NODE2_MOVE_FLAGS, NODE2_DRAIN_FLAGS.
set -euo pipefail
CASE=move_node
source "$(dirname "${BASH_SOURCE[0]}")/caselib.sh"
need_cluster 2 "moves a pod between the test cluster's two nodes (cluster.sh --nodes 2)"
workload '--mib 24 --host-mib 3 --every-ms 91'

runtime_class
# No toleration of the second node's taint: the stock scheduler puts it on the first.
demo_pod old
sampler_start
wait_running old
[[ $(k get pod old -o jsonpath='{.spec.nodeName}') == "$NODE" ]] ||
  fail "pod old runs on $(k get pod old -o jsonpath='{.spec.nodeName}'), not $NODE"
wait_gen old 5

read -ra flags <<<"$K8S_NODE_FLAGS $MOVE_FLAGS"
read -ra to <<<"$NODE2_MOVE_FLAGS"
# Refused before anything changes: the image would have nowhere to go.
if "$PALADIN" k8s move -n "$NS" old --node "$NODE2" "${flags[@]}" >"$work/refused" 2>&1; then
  fail "a move to $NODE2 without its image folder was not refused"
fi
grep -q -- '--to-images' "$work/refused" || fail "the refusal does not name --to-images: $(cat "$work/refused")"
[[ $(k get pod old -o jsonpath='{.status.phase}') == Running ]] || fail "pod old stopped after a refused move"

# --- the move ---------------------------------------------------------------------------------
# The old pod's log until its container exits (the mover deletes the pod, and its log with it).
"$KUBECTL" -n "$NS" logs -f old >"$work/old.log" 2>/dev/null &
t0=$(date +%s%N)
"$PALADIN" k8s move -n "$NS" old --name new --node "$NODE2" "${flags[@]}" "${to[@]}" \
  >"$work/move" 2>&1 || fail "paladin k8s move: $(tail -5 "$work/move")"
sed 's/^/move_node:   /' "$work/move"
gen_before=$(gens "$work/old.log" | tail -1)
summary=$(tail -1 "$work/move")
first=$(first_gen new)
t2=$(date +%s%N)
k wait --for=delete pod/old --timeout=30s >/dev/null 2>&1 || true
[[ $(k get pod new -o jsonpath='{.spec.nodeName}') == "$NODE2" ]] ||
  fail "pod new is on node '$(k get pod new -o jsonpath='{.spec.nodeName}')', not $NODE2"
# The restored process is the second kubelet's: its cgroups are under that node's root.
workload_pid new_pid "after the move"
grep -q "/$NODE2_CGROUP/kubepods" "/proc/$new_pid/cgroup" ||
  fail "the restored process $new_pid is not in node $NODE2's cgroups: $(grep memory "/proc/$new_pid/cgroup")"
went_on new "$first" "$gen_before" $((gen_before + 2))
k get pod old >/dev/null 2>&1 && fail "pod old still exists"
sampler_stop
echo "move_node: old on $NODE -> new on $NODE2, generation $gen_before -> $first, then" \
  "$(last_gen new), memory verified; ${summary#*: }; $(((t2 - t0) / 1000000)) ms until the" \
  "new pod's first generation; at most 1 copy in $SAMPLES samples; pod old deleted"

# --- the drain back ---------------------------------------------------------------------------
# `paladin k8s drain NODE2 --to NODE`, run on the second node: it is cordoned and `new`, its one
# pod of the RuntimeClass, moves back to the first node as `new-m1`, again exactly once.
sampler_start
read -ra drain <<<"$K8S_NODE_FLAGS $NODE2_DRAIN_FLAGS"
"$KUBECTL" -n "$NS" logs -f new >"$work/new.log" 2>/dev/null &
"$PALADIN" k8s drain "$NODE2" --to "$NODE" "${drain[@]}" >"$work/drain" 2>&1 || {
  "$KUBECTL" uncordon "$NODE2" >/dev/null 2>&1 || true
  fail "paladin k8s drain: $(tail -5 "$work/drain")"
}
"$KUBECTL" uncordon "$NODE2" >/dev/null
sed 's/^/move_node:   /' "$work/drain"
gen_before=$(gens "$work/new.log" | tail -1)
first=$(first_gen new-m1)
k wait --for=delete pod/new --timeout=30s >/dev/null 2>&1 || true
[[ $(k get pod new-m1 -o jsonpath='{.spec.nodeName}') == "$NODE" ]] ||
  fail "pod new-m1 is on node '$(k get pod new-m1 -o jsonpath='{.spec.nodeName}')', not $NODE"
grep -q "drained $NODE2: 1 pod(s) moved to $NODE" "$work/drain" || fail "drain: $(tail -1 "$work/drain")"
went_on new-m1 "$first" "$gen_before" $((gen_before + 2))
k get pod new >/dev/null 2>&1 && fail "pod new still exists"
sampler_stop drain
echo "move_node: drained $NODE2: new -> new-m1 on $NODE, generation $gen_before -> $first," \
  "memory verified; $(tail -1 "$work/drain"); at most 1 copy in $SAMPLES samples"
k delete pod new-m1 --wait=true --timeout=30s >/dev/null
