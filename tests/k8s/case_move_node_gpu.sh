#!/usr/bin/env bash
# k8s: nodes 2
# A GPU pod moved to the second node's other GPU by `paladin k8s move POD --node NODE2 --gpu 1`:
# pod `ngpu` (the demo workload, 2Gi of paladin.io/gpu-memory, 64 MiB of device memory,
# RuntimeClass paladin, placed by Paladin on the first node's GPU 0) has its GPU state
# checkpointed through the driver, then CRIU; the image is sent over the network to the second
# node's mover (`--carry-listen` on 127.0.0.2; a move to an address where none listens is refused
# before the checkpoint), which puts it in that node's folder;
# Paladin's scheduler binds `ngpu-m1` to NODE2/1 (paladin.io/move-to), the second node's runtime
# restores it and, on that node itself (`paladin k8s gpu-restore`, as on another machine: the
# mover is given no --to-runc-root), its GPU state onto GPU 1. Checked: the workload goes on from the generation it had reached, its device
# memory verified, on GPU 1's UUID; the old pod is gone; the 100 ms sampler never sees two copies.
# Then the second node is drained through Paladin's server (`paladin pods drain NODE2 --to NODE`,
# the admin's token; a team's is refused): the server asks a move of ngpu-m1, and one pass of
# the second node's mover (`paladin k8s mover`) cordons the node and moves it back to the first
# node as ngpu-m2, again with its GPU state, exactly once; the ledger says done, a drain's move.
# Last, research moves ngpu-m2 back to the second node through the server, and the first node's
# mover is killed just after the checkpoint: its next pass sends the image to the second node's
# mover and finishes it.
# Both nodes' emulated GPUs are this machine's (one state folder): the second node publishes the
# same two GPUs, and its annotation is removed at the end so later cases see one GPU node.
# Env (tests/k8s/k8s_test.sh): as case_move_gpu, and NODE2, NODE2_MOVE_FLAGS, NODE2_MOVER_FLAGS.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CASE=move_node_gpu
source "$here/caselib.sh"
need_cluster 2 "moves a pod between the test cluster's two nodes (cluster.sh --nodes 2)"
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
carrier=
cleanup() {
  if [[ -n $carrier ]]; then kill "$carrier" 2>/dev/null || true; fi
  "$KUBECTL" annotate node "$NODE2" paladin.io/gpus- >/dev/null 2>&1 || true
  "$KUBECTL" uncordon "$NODE2" >/dev/null 2>&1 || true
  paladin_stop
}
on_exit=cleanup
# Paladin's server, to which the scheduler reports the pods it places (the drain below).
start_server "$work/server" || fail "no server"
url=$SERVER_URL admin=$(cat "$SERVER_TOKEN_FILE")
"$KUBECTL" label namespace "$NS" paladin.io/team=research >/dev/null
PALADIN_SCHEDULER_FLAGS="--paladin-server $url --paladin-token-file $SERVER_TOKEN_FILE" \
  paladin_start 19447
read -ra api <<<"$K8S_NODE_FLAGS"
# The second node's mover takes images on 127.0.0.2 (--carry-listen), as another machine's would:
# the first move and the last one send theirs to it over the network; the drain carries into the
# first node's folder (NODE2_MOVER_FLAGS' --node-images), the other way there is.
carry_at=127.0.0.2:19461
read -ra mover <<<"$NODE2_MOVER_FLAGS"
carrier_start "$work/carrier.log" --node "$NODE2" --driver "$EMUCUDA" --nvml "$EMUCUDA" \
  "${mover[@]}" --carry-listen "$carry_at" --every 600 --paladin-server "$url" \
  --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}"
carrier=$CARRIER
read -ra move <<<"$MOVE_FLAGS --to-mover $carry_at"
read -ra move_flags <<<"$MOVE_FLAGS"
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

# No mover at the address given: refused before anything is checkpointed.
out=$("$PALADIN" k8s move -n "$NS" ngpu --node "$NODE2" --gpu 1 --driver "$EMUCUDA" --nvml "$EMUCUDA" \
  "${move_flags[@]}" --to-mover 127.0.0.2:19463 "${api[@]}" 2>&1) && fail "a move to no mover went on: $out"
[[ $out == *"the destination node's mover does not answer at 127.0.0.2:19463"*"(pod $NS/ngpu left running)"* ]] ||
  fail "a move to no mover: $out"
[[ -n $(k get pod ngpu -o jsonpath='{.status.containerStatuses[0].state.running}') ]] ||
  fail "pod ngpu stopped after a refused move"

sampler_start
"$KUBECTL" -n "$NS" logs -f ngpu >"$work/old.log" 2>/dev/null &

"$PALADIN" k8s move -n "$NS" ngpu --node "$NODE2" --gpu 1 --driver "$EMUCUDA" --nvml "$EMUCUDA" \
  "${move[@]}" "${api[@]}" >"$work/move.log" 2>&1 || fail "paladin k8s move: $(tail -5 "$work/move.log")"
sed 's/^/move_node_gpu:   /' "$work/move.log"
grep -q "carrying the image to node $NODE2's mover at $carry_at" "$work/move.log" ||
  fail "the image did not go to the second node's mover: $(tail -3 "$work/move.log")"
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

# --- the second node drained through Paladin's server -------------------------------------------
as() { # TOKEN ARGS...: paladin ARGS against the case's server with TOKEN
  local t=$1
  shift
  "$PALADIN" "$@" --server "$url" --token "$t"
}
for ((i = 0; i < 50; i++)); do
  [[ $(as "$admin" pods --json | jq -r --arg ns "$NS" \
    '.pods[] | select(.namespace == $ns and .name == "ngpu-m1") | "\(.phase) \(.node)"') == "Running $NODE2" ]] && break
  sleep 0.2
done
research=$(as "$admin" tokens create --scope team:research) || fail "paladin tokens create"
out=$(as "$research" pods drain "$NODE2" --to "$NODE" --no-wait 2>&1) &&
  fail "a team's token drained a node: $out"
[[ $out == *"token may not POST /v1/pods/drain"* ]] || fail "a team's drain: '$out'"
out=$(as "$admin" pods drain "$NODE2" --to "$NODE" --no-wait) || fail "pods drain: $out"
echo "$out" | sed 's/^/move_node_gpu:   /'
[[ $out == *"1 pod move(s) to $NODE requested, 0 pod(s) left"* ]] || fail "pods drain: $out"
id=$(as "$admin" pods moves --json | jq -r '.moves[0].id')
uuid_before=$(k logs ngpu-m1 | tail -1)
sampler_start
"$KUBECTL" -n "$NS" logs -f ngpu-m1 >"$work/m1.log" 2>/dev/null &
read -ra mover <<<"$NODE2_MOVER_FLAGS"
"$PALADIN" k8s mover --node "$NODE2" --driver "$EMUCUDA" --nvml "$EMUCUDA" "${mover[@]}" \
  --paladin-server "$url" --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" \
  >"$work/mover.log" 2>&1 || fail "paladin k8s mover: $(tail -5 "$work/mover.log")"
sed 's/^/move_node_gpu:   /' "$work/mover.log"
grep -q "drains node $NODE2: cordoning it" "$work/mover.log" || fail "the mover did not cordon $NODE2"
[[ $(k get node "$NODE2" -o jsonpath='{.spec.unschedulable}') == true ]] || fail "$NODE2 is not cordoned"
grep -q "1 move(s) taken" "$work/mover.log" || fail "the mover took no move"
first=$(first_gen ngpu-m2)
gen_before=$(gens "$work/m1.log" | tail -1)
[[ $(k get pod ngpu-m2 -o jsonpath='{.spec.nodeName}') == "$NODE" ]] ||
  fail "pod ngpu-m2 is on '$(k get pod ngpu-m2 -o jsonpath='{.spec.nodeName}')', not $NODE"
went_on ngpu-m2 "$first" "$gen_before" $((gen_before + 2))
k wait --for=delete pod/ngpu-m1 --timeout=30s >/dev/null 2>&1 || fail "pod ngpu-m1 still exists"
sampler_stop drain
got=$(as "$admin" pods moves --json |
  jq -r --argjson id "$id" '.moves[] | select(.id == $id) | "\(.state) \(.new_name) \(.to_node) \(.drain) \(.asked_by)"')
[[ $got == "done ngpu-m2 $NODE true admin" ]] || fail "the ledger says '$got'"
"$KUBECTL" uncordon "$NODE2" >/dev/null
to_gpu=$(k get pod ngpu-m2 -o jsonpath='{.metadata.annotations.paladin\.io/gpu}')
echo "move_node_gpu: $NODE2 drained through Paladin's server: ngpu-m1 -> ngpu-m2 on $NODE/$to_gpu," \
  "generation" \
  "$gen_before -> $first, then $(last_gen ngpu-m2), device memory verified (was: $uuid_before," \
  "now: $(k logs ngpu-m2 | tail -1)); at most 1 copy in $SAMPLES samples; ledger: $got"

# --- a move to the other node whose mover is killed after the checkpoint -------------------------
# research moves ngpu-m2 to the second node through the server; the first node's mover is killed
# just after the checkpoint (PALADIN_K8S_MOVE_FAULT), the image still in the first node's folder;
# its next pass carries it and finishes the move: ngpu-m3 on the second node, from the same
# generation, its device memory verified, never two copies. The image goes over the network, as
# between machines: the second node's mover takes it on 127.0.0.2 (--carry-listen), the first
# node's knows it by address only (--node-movers), not by folder.
out=$(as "$research" pods move "$NS/ngpu-m2" --to "$NODE2" --no-wait) || fail "pods move ngpu-m2: $out"
id=$(as "$admin" pods moves --json | jq -r '.moves[0].id')
read -ra mover <<<"$MOVE_FLAGS --node-movers $NODE2=$carry_at"
sampler_start
"$KUBECTL" -n "$NS" logs -f ngpu-m2 >"$work/m2.log" 2>/dev/null &
PALADIN_K8S_MOVE_FAULT=crash:after-checkpoint "$PALADIN" k8s mover --node "$NODE" \
  --driver "$EMUCUDA" --nvml "$EMUCUDA" "${mover[@]}" --paladin-server "$url" \
  --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" >"$work/mover2.log" 2>&1 &&
  fail "the mover went on past its fault: $(tail -3 "$work/mover2.log")"
sed 's/^/move_node_gpu:   /' "$work/mover2.log"
for ((i = 0; i < 100; i++)); do
  [[ -z $(k get pod ngpu-m2 -o jsonpath='{.status.containerStatuses[0].state.running}') ]] && break
  sleep 0.1
done
"$PALADIN" k8s mover --node "$NODE" --driver "$EMUCUDA" --nvml "$EMUCUDA" "${mover[@]}" \
  --paladin-server "$url" --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" \
  >"$work/mover3.log" 2>&1 || fail "paladin k8s mover (3): $(tail -5 "$work/mover3.log")"
sed 's/^/move_node_gpu:   /' "$work/mover3.log"
grep -q "carrying the image to node $NODE2's mover at $carry_at" "$work/mover3.log" ||
  fail "the next pass did not carry the image"
kill "$carrier" 2>/dev/null
wait "$carrier" 2>/dev/null || true
sed 's/^/move_node_gpu:   /' "$work/carrier.log"
[[ $(grep -c "carry: move-.* received into $CLUSTER_DIR/node2/checkpoints/move-" "$work/carrier.log") == 2 ]] ||
  fail "the second node's mover did not receive both images: $(tail -3 "$work/carrier.log")"
got=$(as "$admin" pods moves --json |
  jq -r --argjson id "$id" '.moves[] | select(.id == $id) | "\(.state) \(.new_name) \(.to_node): \(.message)"')
[[ $got == "done ngpu-m3 $NODE2: finished by the next pass of its mover from the checkpoint image "* ]] ||
  fail "the move left after its checkpoint: '$got'"
[[ $(k get pod ngpu-m3 -o jsonpath='{.spec.nodeName}') == "$NODE2" ]] || fail "pod ngpu-m3 is not on $NODE2"
went_on_from ngpu-m3 ngpu-m2 "$work/m2.log"
sampler_stop "the finished move"
echo "move_node_gpu: a mover killed after the checkpoint of a move to $NODE2: its next pass carried" \
  "the image over the network to $NODE2's mover and finished it: ngpu-m2 -> ngpu-m3 on $NODE2, generation $BEFORE -> $FIRST," \
  "then $(last_gen ngpu-m3), device memory verified; at most 1 copy in $SAMPLES samples"

# --- a move whose destination stays unreachable: the pod restored where it was ----------------
# research moves ngpu-m3 back to the first node; the second node's mover is killed after the
# checkpoint, and the first node's mover is gone by its next passes: the first leaves the move
# taken (to be tried again), the second, past --finish-within 0, restores ngpu-m4 on the second
# node from the image, the move failed saying so; the workload goes on from the same generation,
# never two copies.
carry1=127.0.0.1:19464
carrier_start "$work/carrier1.log" --node "$NODE" "${move_flags[@]}" --carry-listen "$carry1"
carrier=$CARRIER
out=$(as "$research" pods move "$NS/ngpu-m3" --to "$NODE" --no-wait) || fail "pods move ngpu-m3: $out"
id=$(as "$admin" pods moves --json | jq -r '.moves[0].id')
read -ra mover <<<"${NODE2_MOVER_FLAGS% --node-images *} --node-movers $NODE=$carry1"
sampler_start
"$KUBECTL" -n "$NS" logs -f ngpu-m3 >"$work/m3.log" 2>/dev/null &
PALADIN_K8S_MOVE_FAULT=crash:after-checkpoint "$PALADIN" k8s mover --node "$NODE2" \
  --driver "$EMUCUDA" --nvml "$EMUCUDA" "${mover[@]}" --paladin-server "$url" \
  --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" >"$work/mover4.log" 2>&1 &&
  fail "the mover went on past its fault: $(tail -3 "$work/mover4.log")"
kill "$carrier" 2>/dev/null
wait "$carrier" 2>/dev/null || true
carrier=
# A pass within --finish-within (300 s by default): the move stays taken, for the next pass.
"$PALADIN" k8s mover --node "$NODE2" --driver "$EMUCUDA" --nvml "$EMUCUDA" "${mover[@]}" \
  --paladin-server "$url" --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" \
  >"$work/mover4b.log" 2>&1 || fail "paladin k8s mover (4b): $(tail -5 "$work/mover4b.log")"
sed 's/^/move_node_gpu:   /' "$work/mover4b.log"
grep -q "move $id: finishing it failed (.*does not answer at $carry1.*); the next pass tries again" \
  "$work/mover4b.log" || fail "an unreachable destination: $(tail -2 "$work/mover4b.log")"
got=$(as "$admin" pods moves --json | jq -r --argjson id "$id" '.moves[] | select(.id == $id) | .state')
[[ $got == taken ]] || fail "the move is $got after a pass that could not reach its destination"
# Past it: restored where it was.
"$PALADIN" k8s mover --node "$NODE2" --driver "$EMUCUDA" --nvml "$EMUCUDA" "${mover[@]}" \
  --finish-within 0 --paladin-server "$url" --paladin-token-file "$SERVER_TOKEN_FILE" \
  "${api[@]}" >"$work/mover5.log" 2>&1 || fail "paladin k8s mover (5): $(tail -5 "$work/mover5.log")"
sed 's/^/move_node_gpu:   /' "$work/mover5.log"
got=$(as "$admin" pods moves --json |
  jq -r --argjson id "$id" '.moves[] | select(.id == $id) | "\(.state): \(.message)"')
[[ $got == "failed: could not be finished on "*"the pod was restored where it was instead, as $NS/ngpu-m4 on $NODE2/"* ]] ||
  fail "an unreachable destination, given up: '$got'"
[[ $(k get pod ngpu-m4 -o jsonpath='{.spec.nodeName}') == "$NODE2" ]] || fail "pod ngpu-m4 is not on $NODE2"
went_on_from ngpu-m4 ngpu-m3 "$work/m3.log"
sampler_stop "the pod restored where it was"
echo "move_node_gpu: a move to $NODE whose destination stayed unreachable after the checkpoint:" \
  "ngpu-m3 restored where it was as ngpu-m4 on $NODE2, generation $BEFORE -> $FIRST, then" \
  "$(last_gen ngpu-m4), device memory verified; at most 1 copy in $SAMPLES samples; ledger: ${got%%:*}"
k delete pod ngpu-m4 --wait=true --timeout=30s >/dev/null
