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
if [[ -z ${CLUSTER_DIR:-} || -z ${NODE2:-} ]]; then
  echo "move_node: SKIP: moves a pod between the test cluster's two nodes (cluster.sh --nodes 2)"
  exit 77
fi
CRIU_DIR=${PALADIN_CRIU_DIR:-/opt/paladin/criu}
[[ -x $CRIU_DIR/criu ]] || { echo "move_node: SKIP: no CRIU in $CRIU_DIR (scripts/criu.sh)"; exit 77; }
# Arguments no other process on the machine has: the sampler counts this workload's copies. A
# pattern for pgrep -f whose first character is bracketed, so that it does not match the
# command line of another pgrep looking for it (the sampler runs beside the other checks).
MARK='[-]-mib 24 --host-mib 3 --every-ms 91'

runtime_class
# No toleration of the second node's taint: the stock scheduler puts it on the first.
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: old}
spec:
  runtimeClassName: paladin
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: ["--mib", "24", "--host-mib", "3", "--every-ms", "91"]
YAML

work=$(mktemp -d)
sampler_pid=''
cleanup() {
  [[ -z $sampler_pid ]] || kill "$sampler_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# Each sample: how many copies; when more than one, which processes (in samples.seen).
sampler >"$work/samples" &
sampler_pid=$!

k wait --for=jsonpath='{.status.phase}'=Running pod/old --timeout=60s >/dev/null ||
  fail "pod old not Running"
[[ $(k get pod old -o jsonpath='{.spec.nodeName}') == "$NODE" ]] ||
  fail "pod old runs on $(k get pod old -o jsonpath='{.spec.nodeName}'), not $NODE"
for ((i = 0; i < 100; i++)); do
  [[ $(last_gen old) -ge 5 ]] 2>/dev/null && break
  sleep 0.2
done
[[ $(last_gen old) -ge 5 ]] 2>/dev/null || fail "pod old: no fifth generation: $(k logs old | tail -3)"

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
k logs -f old >"$work/old.log" 2>/dev/null &
t0=$(date +%s%N)
"$PALADIN" k8s move -n "$NS" old --name new --node "$NODE2" "${flags[@]}" "${to[@]}" \
  >"$work/move" 2>&1 || fail "paladin k8s move: $(tail -5 "$work/move")"
sed 's/^/move_node:   /' "$work/move"
gen_before=$(sed -n 's/^gen \([0-9]*\) ok .*/\1/p' "$work/old.log" | tail -1)
summary=$(tail -1 "$work/move")
first=''
for ((i = 0; i < 100; i++)); do
  first=$(k logs new 2>/dev/null | sed -n 's/^gen \([0-9]*\) ok .*/\1/p' | head -1)
  [[ -n $first ]] && break
  sleep 0.05
done
t2=$(date +%s%N)
k wait --for=delete pod/old --timeout=30s >/dev/null 2>&1 || true
[[ -n $first ]] || fail "pod new prints no generation: $(k logs new | tail -3)"
[[ $(k get pod new -o jsonpath='{.spec.nodeName}') == "$NODE2" ]] ||
  fail "pod new is on node '$(k get pod new -o jsonpath='{.spec.nodeName}')', not $NODE2"
# The restored process is the second kubelet's: its cgroups are under that node's root.
new_pid=$(pgrep -f -- "$MARK" | head -1)
grep -q "/$NODE2_CGROUP/kubepods" "/proc/$new_pid/cgroup" ||
  fail "the restored process $new_pid is not in node $NODE2's cgroups: $(grep memory "/proc/$new_pid/cgroup")"
! grep -q '^started:' <<<"$(k logs new)" || fail "pod new started its workload afresh: $(k logs new | head -2)"
if ((first <= gen_before || first > gen_before + 2)); then
  fail "pod new went on at generation $first; pod old had reached $gen_before"
fi
sleep 1
! grep -q MISMATCH <<<"$(k logs new)" || fail "pod new: $(k logs new | grep -m1 MISMATCH)"
[[ $(last_gen new) -gt $first ]] || fail "pod new does not advance past generation $first"
k get pod old >/dev/null 2>&1 && fail "pod old still exists"
kill "$sampler_pid"
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=''
max=$(sort -n "$work/samples" | tail -1)
samples=$(wc -l <"$work/samples")
[[ $max == 1 ]] || fail "$max copies of the workload at once (of $samples samples): $(cat "$work/samples.seen")"
echo "move_node: old on $NODE -> new on $NODE2, generation $gen_before -> $first, then" \
  "$(last_gen new), memory verified; ${summary#*: }; $(((t2 - t0) / 1000000)) ms until the" \
  "new pod's first generation; at most 1 copy in $samples samples; pod old deleted"

# --- the drain back ---------------------------------------------------------------------------
# `paladin k8s drain NODE2 --to NODE`, run on the second node: it is cordoned and `new`, its one
# pod of the RuntimeClass, moves back to the first node as `new-m1`, again exactly once.
: >"$work/samples.seen"
sampler >"$work/samples" &
sampler_pid=$!
read -ra drain <<<"$K8S_NODE_FLAGS $NODE2_DRAIN_FLAGS"
k logs -f new >"$work/new.log" 2>/dev/null &
"$PALADIN" k8s drain "$NODE2" --to "$NODE" "${drain[@]}" >"$work/drain" 2>&1 || {
  "$KUBECTL" uncordon "$NODE2" >/dev/null 2>&1 || true
  fail "paladin k8s drain: $(tail -5 "$work/drain")"
}
"$KUBECTL" uncordon "$NODE2" >/dev/null
sed 's/^/move_node:   /' "$work/drain"
gen_before=$(sed -n 's/^gen \([0-9]*\) ok .*/\1/p' "$work/new.log" | tail -1)
first=''
for ((i = 0; i < 100; i++)); do
  first=$(k logs new-m1 2>/dev/null | sed -n 's/^gen \([0-9]*\) ok .*/\1/p' | head -1)
  [[ -n $first ]] && break
  sleep 0.05
done
k wait --for=delete pod/new --timeout=30s >/dev/null 2>&1 || true
[[ -n $first ]] || fail "pod new-m1 prints no generation: $(k logs new-m1 | tail -3)"
[[ $(k get pod new-m1 -o jsonpath='{.spec.nodeName}') == "$NODE" ]] ||
  fail "pod new-m1 is on node '$(k get pod new-m1 -o jsonpath='{.spec.nodeName}')', not $NODE"
grep -q "drained $NODE2: 1 pod(s) moved to $NODE" "$work/drain" || fail "drain: $(tail -1 "$work/drain")"
if ((first <= gen_before || first > gen_before + 2)); then
  fail "pod new-m1 went on at generation $first; pod new had reached $gen_before"
fi
sleep 1
! grep -q MISMATCH <<<"$(k logs new-m1)" || fail "pod new-m1: $(k logs new-m1 | grep -m1 MISMATCH)"
[[ $(last_gen new-m1) -gt $first ]] || fail "pod new-m1 does not advance past generation $first"
k get pod new >/dev/null 2>&1 && fail "pod new still exists"
kill "$sampler_pid"
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=''
max=$(sort -n "$work/samples" | tail -1)
samples=$(wc -l <"$work/samples")
[[ $max == 1 ]] || fail "drain: $max copies of the workload at once (of $samples samples): $(cat "$work/samples.seen")"
echo "move_node: drained $NODE2: new -> new-m1 on $NODE, generation $gen_before -> $first," \
  "memory verified; $(tail -1 "$work/drain"); at most 1 copy in $samples samples"
k delete pod new-m1 --wait=true --timeout=30s >/dev/null
