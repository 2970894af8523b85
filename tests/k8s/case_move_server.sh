#!/usr/bin/env bash
# A pod moved through Paladin's server (docs/kubernetes.md, "Moves through Paladin's server"):
# team research's token asks the server to move its GPU pod `gpu` (the demo workload, 2Gi,
# RuntimeClass paladin, placed by Paladin's scheduler, which reports it to the server) to the
# node's other GPU; another team's token is told the pod does not exist and asks nothing; the
# node's mover (`paladin k8s mover`, one pass) takes the move once and carries it out as
# `paladin k8s move` does. Checked: the move is requested, then done in the server's ledger with
# the replacement's name and GPU; the workload goes on from the generation it had reached, its
# memory verified, on the target GPU; the old pod is gone; a sampler never sees two copies; the
# pods' events say who asked (Moving) and where it went (Moved); a second pass takes nothing; a
# move left taken by a mover stopped before it made the replacement is failed by the next pass,
# the pod running on where it was; a move whose mover was killed just after the checkpoint is
# finished from its image by the next pass, the workload going on from its generation.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, CLUSTER_DIR, PALADIN, EMUCUDA, NODE,
# K8S_NODE_FLAGS, MOVE_FLAGS.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CASE=move_server
source "$here/caselib.sh"
need_cluster 1 "moves a pod with runc and CRIU on the node itself (the test cluster only)"
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
on_exit=paladin_stop
read -ra api <<<"$K8S_NODE_FLAGS"
read -ra move <<<"$MOVE_FLAGS"
export PALADIN_EMU_GPUS=$PALADIN_EMU_GPUS_SPEC PALADIN_EMU_STATE=$CLUSTER_DIR/paladin/emu/state

start_server "$work/server" || fail "no server"
url=$SERVER_URL admin=$(cat "$SERVER_TOKEN_FILE")
"$KUBECTL" label namespace "$NS" paladin.io/team=research >/dev/null
PALADIN_SCHEDULER_FLAGS="--paladin-server $url --paladin-token-file $SERVER_TOKEN_FILE" \
  paladin_start 19446
token() { "$PALADIN" tokens create --scope "team:$1" --server "$url" --token "$admin"; }
research=$(token research) || fail "paladin tokens create --scope team:research"
other=$(token other) || fail "paladin tokens create --scope team:other"
as() { # TOKEN ARGS...: paladin ARGS against the case's server with TOKEN
  local t=$1
  shift
  "$PALADIN" "$@" --server "$url" --token "$t"
}

runtime_class
workload '--mib 64 --host-mib 3 --every-ms 90'
demo_pod gpu '' 'paladin.io/gpu-memory: 2Gi'
wait_running gpu
wait_gen gpu 5
from=$(k get pod gpu -o jsonpath='{.metadata.annotations.paladin\.io/gpu}')
to=$((1 - from))
to_uuid=$(uuid_of "$to")
# The server has the pod Running once the scheduler's next pass reports it.
for ((i = 0; i < 50; i++)); do
  [[ $(as "$research" pods --json | jq -r --arg ns "$NS" \
    '.pods[] | select(.namespace == $ns and .name == "gpu") | .phase') == Running ]] && break
  sleep 0.2
done

# Another team: the pod does not exist for it, and nothing is asked.
out=$(as "$other" pods move "$NS/gpu" --gpu "$to" --no-wait 2>&1) &&
  fail "team other's token moved research's pod: $out"
[[ $out == *"no pod $NS/gpu"* ]] || fail "team other's move: '$out' (expected 'no pod $NS/gpu')"
[[ $(as "$admin" pods moves --json | jq '.moves | length') == 0 ]] ||
  fail "a move was recorded for team other: $(as "$admin" pods moves)"
echo "move_server: team other's token: $out"

# research asks; no mover runs yet, so the move waits in the ledger, and a second ask is refused.
out=$(as "$research" pods move "$NS/gpu" --gpu "$to" --no-wait) || fail "pods move: $out"
echo "move_server: $out"
[[ $out == *requested* ]] || fail "research's move is not requested: $out"
id=$(as "$research" pods moves --json | jq -r '.moves[0].id')
out=$(as "$research" pods move "$NS/gpu" --to "$NODE/$to" --no-wait 2>&1) &&
  fail "a second move of gpu was taken: $out"
[[ $out == *"has move $id requested already"* ]] || fail "second ask: '$out'"
[[ $(as "$other" pods moves --json | jq '.moves | length') == 0 ]] ||
  fail "team other sees research's move: $(as "$other" pods moves)"

# One pass at a time on a node: while another holds the node's pass lock (in its image folder),
# a pass does nothing.
images=$(sed -n 's/.*--images \([^ ]*\).*/\1/p' <<<"$MOVE_FLAGS")
mkdir -p "$images"
: >"$images/mover.lock"
chmod 600 "$images/mover.lock"
exec {lockfd}<"$images/mover.lock"
flock -x "$lockfd"
"$PALADIN" k8s mover --node "$NODE" --driver "$EMUCUDA" --nvml "$EMUCUDA" "${move[@]}" \
  --paladin-server "$url" --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" \
  >"$work/mover0.log" 2>&1 || fail "paladin k8s mover (locked out): $(tail -3 "$work/mover0.log")"
exec {lockfd}<&-
grep -q "another mover of this node is in a pass" "$work/mover0.log" && grep -q "0 move(s) taken" "$work/mover0.log" ||
  fail "a pass ran while another held the node's lock: $(cat "$work/mover0.log")"
[[ $(as "$research" pods moves --json | jq -r '.moves[0].state') == requested ]] ||
  fail "the locked-out pass touched the move"
echo "move_server: a pass while another holds the node's lock: $(grep -o 'another mover.*' "$work/mover0.log")"

sampler_start
"$KUBECTL" -n "$NS" logs -f gpu >"$work/old.log" 2>/dev/null &
# --- the node's mover, one pass ----------------------------------------------------------------
"$PALADIN" k8s mover --node "$NODE" --driver "$EMUCUDA" --nvml "$EMUCUDA" "${move[@]}" \
  --paladin-server "$url" --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" \
  >"$work/mover.log" 2>&1 || fail "paladin k8s mover: $(tail -5 "$work/mover.log")"
sed 's/^/move_server:   /' "$work/mover.log"
grep -q "1 move(s) taken" "$work/mover.log" || fail "the mover took no move"
first=$(first_gen gpu-m1)
gen_before=$(gens "$work/old.log" | tail -1)
went_on gpu-m1 "$first" "$gen_before" $((gen_before + 2))
[[ $(k get pod gpu-m1 -o jsonpath='{.metadata.annotations.paladin\.io/gpu}') == "$to" ]] ||
  fail "pod gpu-m1 is not on GPU $to"
[[ $(k logs gpu-m1 | tail -1) == *"$to_uuid"* ]] ||
  fail "pod gpu-m1 does not run on GPU $to ($to_uuid): $(k logs gpu-m1 | tail -1)"
k wait --for=delete pod/gpu --timeout=30s >/dev/null 2>&1 || fail "pod gpu still exists"
sampler_stop

# The ledger: done, with the replacement and where it went, as research reads it.
got=$(as "$research" pods moves --json |
  jq -r --argjson id "$id" '.moves[] | select(.id == $id) | "\(.state) \(.new_name) \(.to_node)/\(.to_gpu) \(.asked_by) \(.mover)"')
[[ $got == "done gpu-m1 $NODE/$to team:research $NODE" ]] || fail "the ledger says '$got'"
as "$research" pods moves | sed 's/^/move_server:   /'
# The events: who asked, on the old pod; where it came from, on the new one.
events() { k get events --field-selector "involvedObject.name=$1,reason=$2" -o jsonpath='{.items[*].message}'; }
[[ $(events gpu Moving) == *"asked through Paladin's server by team:research"* ]] ||
  fail "no Moving event on gpu: $(events gpu Moving)"
[[ $(events gpu-m1 Moved) == *"restored from pod $NS/gpu"* ]] ||
  fail "no Moved event on gpu-m1: $(events gpu-m1 Moved)"
echo "move_server: events: gpu: $(events gpu Moving); gpu-m1: $(events gpu-m1 Moved)"

# Taken once: a second pass finds nothing to do.
"$PALADIN" k8s mover --node "$NODE" --driver "$EMUCUDA" --nvml "$EMUCUDA" "${move[@]}" \
  --paladin-server "$url" --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" \
  >"$work/mover2.log" 2>&1 || fail "paladin k8s mover (2): $(tail -3 "$work/mover2.log")"
grep -q "0 move(s) taken" "$work/mover2.log" || fail "second pass: $(cat "$work/mover2.log")"
echo "move_server: gpu -> gpu-m1 (move $id asked by team:research), GPU $from -> $to, generation" \
  "$gen_before -> $first, then $(last_gen gpu-m1), memory verified on $to_uuid; at most 1 copy" \
  "in $SAMPLES samples; pod gpu deleted; a second pass took nothing"

# A mover stopped in the middle of a move: move 2 (gpu-m1 back to GPU $from) is taken in the
# node's name (as a mover does) and never finished; the next pass, holding the node's lock (so
# no other pass is in flight), settles it at once: no replacement
# was made and gpu-m1 runs where it was, so the move fails saying so, and nothing changes.
out=$(as "$research" pods move "$NS/gpu-m1" --gpu "$from" --no-wait) || fail "pods move gpu-m1: $out"
id2=$(as "$research" pods moves --json | jq -r '.moves[0].id')
curl -sf -X POST -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
  -d "{\"mover\": \"$NODE\"}" "$url/v1/pod-moves/$id2/take" >/dev/null || fail "take move $id2"
g1=$(last_gen gpu-m1)
"$PALADIN" k8s mover --node "$NODE" --driver "$EMUCUDA" --nvml "$EMUCUDA" \
  "${move[@]}" --paladin-server "$url" --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" \
  >"$work/mover3.log" 2>&1 || fail "paladin k8s mover (3): $(tail -3 "$work/mover3.log")"
sed 's/^/move_server:   /' "$work/mover3.log"
got=$(as "$research" pods moves --json | jq -r --argjson id "$id2" '.moves[] | select(.id == $id) | "\(.state): \(.message)"')
[[ $got == "failed: its mover was stopped before the replacement was made: pod $NS/gpu-m1 runs where it was and nothing moved (ask again)" ]] ||
  fail "the leftover move $id2: '$got'"
sleep 0.5
[[ $(k get pod gpu-m1 -o jsonpath='{.status.phase}') == Running && $(last_gen gpu-m1) -gt $g1 ]] ||
  fail "pod gpu-m1 does not run on after the leftover was settled"
k get pod gpu-m2 >/dev/null 2>&1 && fail "a pod gpu-m2 was made"
echo "move_server: a leftover move (taken, never finished) settled by the next pass: $got"

# A mover killed after it checkpointed gpu-m1's GPU state, before the dump: the workload's GPU
# calls wait on the locked state. The next pass finds the container running and undoes the move:
# the GPU state is given back (restored and unlocked) and the workload goes on where it was,
# its device memory verified.
out=$(as "$research" pods move "$NS/gpu-m1" --gpu "$from" --no-wait) || fail "pods move gpu-m1: $out"
id4=$(as "$research" pods moves --json | jq -r '.moves[0].id')
PALADIN_K8S_MOVE_FAULT=crash:after-gpu-checkpoint "$PALADIN" k8s mover --node "$NODE" \
  --driver "$EMUCUDA" --nvml "$EMUCUDA" "${move[@]}" --paladin-server "$url" \
  --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" >"$work/mover6.log" 2>&1 &&
  fail "the mover went on past its fault: $(tail -3 "$work/mover6.log")"
grep -q "checkpointing the GPU state" "$work/mover6.log" || fail "the mover stopped before the GPU checkpoint"
g_locked=$(last_gen gpu-m1)
sleep 1
g_still=$(last_gen gpu-m1)
"$PALADIN" k8s mover --node "$NODE" --driver "$EMUCUDA" --nvml "$EMUCUDA" "${move[@]}" \
  --paladin-server "$url" --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" \
  >"$work/mover7.log" 2>&1 || fail "paladin k8s mover (7): $(tail -3 "$work/mover7.log")"
sed 's/^/move_server:   /' "$work/mover7.log"
grep -q "giving back the GPU state of pid" "$work/mover7.log" || fail "the next pass gave no GPU state back"
got=$(as "$research" pods moves --json | jq -r --argjson id "$id4" '.moves[] | select(.id == $id) | "\(.state): \(.message)"')
[[ $got == "failed: its mover was stopped before the replacement was made: pod $NS/gpu-m1 runs where it was and nothing moved (ask again)" ]] ||
  fail "the move stopped after the GPU checkpoint: '$got'"
went_on gpu-m1 "$((g_still + 1))" "$g_still" $((g_still + 3))
k get pod gpu-m2 >/dev/null 2>&1 && fail "a pod gpu-m2 was made"
echo "move_server: a mover killed after the GPU checkpoint: generation $g_locked then $g_still a" \
  "second later (its GPU calls waiting); the next pass gave the GPU state back: gpu-m1 went on" \
  "to $(last_gen gpu-m1), memory verified; $got"

# A mover killed just after the checkpoint (PALADIN_K8S_MOVE_FAULT): gpu-m1's process is in the
# image and nothing runs it (its container may not start again); the move stays taken. The next
# pass finishes it from the image: gpu-m2 on GPU $from goes on from the generation gpu-m1 had
# reached, the old pod is deleted, never two copies.
out=$(as "$research" pods move "$NS/gpu-m1" --gpu "$from" --no-wait) || fail "pods move gpu-m1: $out"
id3=$(as "$research" pods moves --json | jq -r '.moves[0].id')
sampler_start
"$KUBECTL" -n "$NS" logs -f gpu-m1 >"$work/m1.log" 2>/dev/null &
PALADIN_K8S_MOVE_FAULT=crash:after-checkpoint "$PALADIN" k8s mover --node "$NODE" --driver "$EMUCUDA" \
  --nvml "$EMUCUDA" "${move[@]}" --paladin-server "$url" --paladin-token-file "$SERVER_TOKEN_FILE" \
  "${api[@]}" >"$work/mover4.log" 2>&1 && fail "the mover went on past its fault: $(tail -3 "$work/mover4.log")"
sed 's/^/move_server:   /' "$work/mover4.log"
grep -q "checkpointing container" "$work/mover4.log" || fail "the mover stopped before the checkpoint"
[[ $(as "$research" pods moves --json | jq -r --argjson id "$id3" '.moves[] | select(.id == $id) | .state') == taken ]] ||
  fail "move $id3 is not left taken by the stopped mover"
for ((i = 0; i < 100; i++)); do
  [[ -z $(k get pod gpu-m1 -o jsonpath='{.status.containerStatuses[0].state.running}') ]] && break
  sleep 0.1
done
"$PALADIN" k8s mover --node "$NODE" --driver "$EMUCUDA" --nvml "$EMUCUDA" \
  "${move[@]}" --paladin-server "$url" --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" \
  >"$work/mover5.log" 2>&1 || fail "paladin k8s mover (5): $(tail -3 "$work/mover5.log")"
sed 's/^/move_server:   /' "$work/mover5.log"
got=$(as "$research" pods moves --json | jq -r --argjson id "$id3" '.moves[] | select(.id == $id) | "\(.state) \(.new_name) \(.to_gpu): \(.message)"')
[[ $got == "done gpu-m2 $from: finished by the next pass of its mover from the checkpoint image "* ]] ||
  fail "the move left after its checkpoint: '$got'"
went_on_from gpu-m2 gpu-m1 "$work/m1.log"
[[ $(k logs gpu-m2 | tail -1) == *"$(uuid_of "$from")"* ]] ||
  fail "pod gpu-m2 does not run on GPU $from: $(k logs gpu-m2 | tail -1)"
sampler_stop
echo "move_server: a mover killed after the checkpoint: the next pass finished move $id3 from" \
  "its image: gpu-m1 -> gpu-m2 on GPU $from, generation $BEFORE -> $FIRST, then" \
  "$(last_gen gpu-m2), memory verified; at most 1 copy in $SAMPLES samples; ${got#*: }"
k delete pod gpu-m2 --wait=true --timeout=30s >/dev/null
