#!/usr/bin/env bash
# k8s: nodes 2
# A node lost, its pods back on the other node from their last checkpoint: pod `lost` (the demo
# workload verifying its memory, RuntimeClass paladin) runs on the second node; `paladin k8s
# checkpoint` (the node's periodic checkpoint, two passes) checkpoints it there, left running, and
# sends each image over the network to the first node's mover (`--to-mover`), which puts it in the
# first node's image folder and, after the second pass, removes the first. `paladin k8s recover NODE2 --to NODE` is refused while the second
# node is alive. Then the second node dies (cluster.sh lose-node2: its kubelet, containerd, shims
# and the workload SIGKILLed) and its Paladin data (its image folder) is deleted; `paladin k8s
# recover --watch` (the automatic mode, running on the first node since before the loss) counts
# it lost once its lease is old, deletes pod `lost` at once and creates `lost-m1` on the first
# node, restored from the checkpoint. Checked: the
# workload goes on from the checkpoint's generation (not from where it died, not afresh), its
# memory verified; a second recover changes nothing; the second node comes back (its containerd
# and kubelet started again) and pod `lost` does not: a sampler (every 100 ms, the host's /proc)
# never sees two copies from the checkpoint to the end.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, CLUSTER_DIR, PALADIN, K8S_NODE_FLAGS,
# MOVE_FLAGS, NODE, NODE2, NODE2_CHECKPOINT_FLAGS.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CASE=recover_node
source "$here/caselib.sh"
need_cluster 2 "loses the test cluster's second node (cluster.sh --nodes 2)"
workload '--mib 20 --host-mib 3 --every-ms 97'
logs_pid='' watch_pid='' node2_lost=0 carrier_pid=''
cleanup() {
  [[ -z $carrier_pid ]] || kill "$carrier_pid" 2>/dev/null || true
  [[ -z $watch_pid ]] || kill "$watch_pid" 2>/dev/null || true
  [[ -z $logs_pid ]] || kill "$logs_pid" 2>/dev/null || true
  # The second node back for what follows, whatever happened here.
  [[ $node2_lost == 0 ]] || bash "$here/cluster.sh" return-node2 "$CLUSTER_DIR" >/dev/null 2>&1 || true
}
on_exit=cleanup

runtime_class
lost_pod_on_node2

# --- the periodic checkpoint (two passes), on the second node -----------------------------------
# Its images go over the network, as between machines: the first node's mover takes them on
# 127.0.0.1 (--carry-listen, nothing else: no Paladin server), the checkpointer knows it by
# address only (--to-mover), not by folder; after the second pass the first image is removed
# there.
read -ra api <<<"$K8S_NODE_FLAGS"
carry_at=127.0.0.1:19462
read -ra mv <<<"$MOVE_FLAGS"
carrier_start "$work/carrier.log" --node "$NODE" "${mv[@]}" --carry-listen "$carry_at"
carrier_pid=$CARRIER
read -ra ckpt <<<"${NODE2_CHECKPOINT_FLAGS% --to-images *} --to-mover $carry_at --key $CLUSTER_DIR/conf/move.key"
# Where the images go, said wrongly: two places, a node without the movers' port, a node whose
# mover is not found (no mover pods here): refused or a pass that takes nothing, saying why; and
# the checkpointer's own node as the recovery node: nothing taken.
read -ra ckpt_base <<<"${NODE2_CHECKPOINT_FLAGS% --to-images *} --key $CLUSTER_DIR/conf/move.key"
refused_ckpt() { # EXPECTED EXIT FLAGS...: the checkpointer exits EXIT saying EXPECTED
  local expected=$1 want=$2 out rc=0
  shift 2
  out=$("$PALADIN" k8s checkpoint --node "$NODE2" "${api[@]}" "${ckpt_base[@]}" "$@" 2>&1) || rc=$?
  [[ $rc == "$want" && $out == *"$expected"* ]] || fail "checkpoint $*: exit $rc, not $want saying '$expected': $out"
  [[ $out != *"taken "* ]] || fail "checkpoint $*: took an image: $out"
}
refused_ckpt "give one of --to-images, --to-mover and --to-mover-node" 2 \
  --to-images "$CLUSTER_DIR/checkpoints" --to-mover-node "$NODE"
refused_ckpt "--to-mover-node needs --carry-port" 2 --to-mover-node "$NODE"
refused_ckpt "the recovery node's mover: node $NODE has no running mover to send the image to" 1 \
  --to-mover-node "$NODE" --carry-port 19462 --mover-pods "$NS/app=no-such-mover"
# On the recovery node itself: nothing taken (its images would be lost with it), and no error.
refused_ckpt "node $NODE2 is the recovery node (--to-mover-node): its pods' images would be lost with it; none taken" 0 \
  --to-mover-node "$NODE2" --carry-port 19462
echo "recover_node: the checkpointer's destination given twice, by node without a port, by a node without a mover: refused; on the recovery node itself: nothing taken"
sampler_start
for pass in 1 2; do
  g_before=$(last_gen lost)  # the second pass's image is the one recovered
  "$PALADIN" k8s checkpoint --node "$NODE2" "${api[@]}" "${ckpt[@]}" >"$work/ckpt" 2>&1 ||
    fail "paladin k8s checkpoint: $(tail -5 "$work/ckpt")"
  sed 's/^/recover_node:   /' "$work/ckpt"
  grep -q "^checkpointed 1 pod(s) of $NODE2 into the mover at $carry_at, 0 left, $((pass - 1)) older image(s) removed" "$work/ckpt" ||
    fail "checkpoint (pass $pass): $(tail -1 "$work/ckpt")"
  older=${image:-}
  image=$(sed -n 's/^taken [^ ]* \(recover-[^ ]*\).*/\1/p' "$work/ckpt")
done
g_after=$(last_gen lost)
[[ -f $CLUSTER_DIR/checkpoints/$image/owner ]] || fail "no image $image in the first node's folder"
[[ ! -e $CLUSTER_DIR/checkpoints/$older ]] || fail "the older image $older is still in the first node's folder"
[[ ! -e $CLUSTER_DIR/node2/checkpoints/$image ]] || fail "the image was left in the second node's folder"
kill "$carrier_pid" 2>/dev/null || true
wait "$carrier_pid" 2>/dev/null || true
carrier_pid=''
sed 's/^/recover_node:   /' "$work/carrier.log"
[[ $(grep -c "carry: recover-.* received into $CLUSTER_DIR/checkpoints/recover-" "$work/carrier.log") == 2 ]] ||
  fail "the first node's mover did not receive both images: $(tail -3 "$work/carrier.log")"
# Left running: it goes on past the checkpoint.
for ((i = 0; i < 50; i++)); do
  [[ $(last_gen lost) -ge $((g_after + 8)) ]] 2>/dev/null && break
  sleep 0.2
done
[[ $(k get pod lost -o jsonpath='{.status.phase}') == Running ]] || fail "pod lost stopped after its checkpoint"
[[ $(last_gen lost) -ge $((g_after + 8)) ]] || fail "pod lost does not go on after its checkpoint (at $(last_gen lost))"

# --- refused while the node is alive ------------------------------------------------------------
read -ra mv <<<"$MOVE_FLAGS"
if "$PALADIN" k8s recover "$NODE2" --to "$NODE" "${api[@]}" "${mv[@]}" >"$work/refused" 2>&1; then
  fail "recover of a live node was not refused: $(cat "$work/refused")"
fi
grep -q "is not lost" "$work/refused" || fail "the refusal does not say the node is not lost: $(cat "$work/refused")"
[[ $(k get pod lost -o jsonpath='{.status.phase}') == Running ]] || fail "pod lost stopped after a refused recover"

# --- the node lost ------------------------------------------------------------------------------
"$PALADIN" k8s recover --watch 0.5 --to "$NODE" --lost-after 4 "${api[@]}" "${mv[@]}" >"$work/watch" 2>&1 &
watch_pid=$!
sleep 1
grep -qE '^(recovered|left|error|recover:)' "$work/watch" && fail "paladin k8s recover --watch acted while every node is alive: $(cat "$work/watch")"
lose_node2 recover_node
t0=$lost_at
g_died=$(died_gen lost "$work/lost.log")
pgrep -f -- "$MARK" >/dev/null && fail "the workload still runs after its node was lost: $(pgrep -a -f -- "$MARK")"

# Recovered by the automatic mode (started before the loss, on the first node): once the node's
# lease is 8 s old it counts lost (--lost-after 4, but never before the lease's own 8 s).
for ((i = 0; i < 300; i++)); do
  grep -q "^recovered .*lost-m1.*(node $NODE2 lost)" "$work/watch" && break
  grep -q '^error' "$work/watch" && fail "paladin k8s recover --watch: $(grep -m1 '^error' "$work/watch")"
  sleep 0.1
done
grep -q "^recovered .*lost-m1.*(node $NODE2 lost)" "$work/watch" ||
  fail "paladin k8s recover --watch recovered nothing in 30 s: $(tail -3 "$work/watch")"
kill "$watch_pid"
wait "$watch_pid" 2>/dev/null || true
watch_pid=''
sed 's/^/recover_node:   /' "$work/watch"
first=$(first_gen lost-m1)
t1=$(date +%s%N)
[[ -n $first ]] || fail "pod lost-m1 prints no generation: $(k logs lost-m1 | tail -3)"
[[ $(k get pod lost-m1 -o jsonpath='{.spec.nodeName}') == "$NODE" ]] ||
  fail "pod lost-m1 is on node '$(k get pod lost-m1 -o jsonpath='{.spec.nodeName}')', not $NODE"
k get pod lost >/dev/null 2>&1 && fail "pod lost still exists"
! grep -q '^started:' <<<"$(k logs lost-m1)" || fail "pod lost-m1 started its workload afresh: $(k logs lost-m1 | head -2)"
# From the checkpoint: the generation it held then (between g_before and g_after), not the one
# the pod had reached when its node died.
if ((first <= g_before || first > g_after + 1)); then
  fail "pod lost-m1 went on at generation $first; the checkpoint was taken between $g_before and $g_after"
fi
# The logs lag the pod on a loaded machine (case_installed.sh): up to 5 s of generations.
((first < g_died + 5000 / 97)) ||
  fail "pod lost-m1 went on at $first, not before $g_died (+5 s) where its node died"
[[ -z $(ls -A "$CLUSTER_DIR/node2/checkpoints") ]] || fail "the lost node's image folder is not empty"
# Again: nothing new (the pod is gone, the image spent).
"$PALADIN" k8s recover "$NODE2" --to "$NODE" --lost-after 4 "${api[@]}" "${mv[@]}" >"$work/again" 2>&1 ||
  fail "a second recover: $(tail -3 "$work/again")"
grep -q "^recovered 0 pod(s)" "$work/again" || fail "a second recover: $(tail -1 "$work/again")"

# --- the lost node comes back: its pod does not -------------------------------------------------
bash "$here/cluster.sh" return-node2 "$CLUSTER_DIR" | sed 's/^/recover_node:   /'
node2_lost=0
sleep 3
k get pod lost >/dev/null 2>&1 && fail "pod lost is back with its node"
! grep -q MISMATCH <<<"$(k logs lost-m1)" || fail "pod lost-m1: $(k logs lost-m1 | grep -m1 MISMATCH)"
[[ $(last_gen lost-m1) -gt $((first + 5)) ]] || fail "pod lost-m1 does not advance past generation $first"
[[ $(k get pod lost-m1 -o jsonpath='{.status.phase}') == Running ]] || fail "pod lost-m1 is not Running"
sampler_stop
echo "recover_node: lost on $NODE2 checkpointed at generation $g_before-$g_after, died at $g_died;" \
  "lost-m1 on $NODE went on at $first, then $(last_gen lost-m1), memory verified;" \
  "$(((t1 - t0) / 1000000)) ms from the node's loss to the first generation back;" \
  "node $NODE2 returned without it; at most 1 copy in $SAMPLES samples"
k delete pod lost-m1 --wait=true --timeout=30s >/dev/null
