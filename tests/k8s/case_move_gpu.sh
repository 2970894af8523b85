#!/usr/bin/env bash
# A GPU pod moved to another GPU of its node by `paladin k8s move POD --gpu N`: pod `gpu` (the
# demo workload, 2Gi of paladin.io/gpu-memory, RuntimeClass paladin, placed by Paladin's
# scheduler) is moved from its emulated GPU to the other one. Its GPU state goes through the
# driver's checkpoint API before CRIU and is restored onto the target GPU after; the replacement
# `gpu-m1` is bound there by Paladin's scheduler. Checked: the workload goes on from the
# generation it had reached, its device memory verified, on the target GPU's UUID; NVML counts
# its memory on the target GPU and none of it on the old one; the old pod is gone; a sampler
# (every 100 ms, the host's /proc) never sees two copies. Then `paladin k8s move` is killed just
# after the checkpoint of a move back, and `paladin k8s move --resume` finishes it from the image.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, CLUSTER_DIR, PALADIN, EMUCUDA, NODE,
# K8S_NODE_FLAGS, MOVE_FLAGS.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CASE=move_gpu
source "$here/caselib.sh"
need_cluster 1 "moves a pod with runc and CRIU on the node itself (the test cluster only)"
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
on_exit=paladin_stop
paladin_start 19445
read -ra api <<<"$K8S_NODE_FLAGS"
read -ra move <<<"$MOVE_FLAGS"
export PALADIN_EMU_GPUS=$PALADIN_EMU_GPUS_SPEC PALADIN_EMU_STATE=$CLUSTER_DIR/paladin/emu/state
gpus() { "$PALADIN" k8s gpus --nvml "$EMUCUDA"; }
# GPU N's memory used by pid P, in bytes (0 when NVML does not list it there).
used_by() { gpus | awk -v g="$1" -v p="$2" '$1 == "gpu" && $2 == g && $3 == "pid" && $4 == p { print $6; f = 1 } END { if (!f) print 0 }'; }

runtime_class
workload '--mib 64 --host-mib 3 --every-ms 90'
demo_pod gpu '' 'paladin.io/gpu-memory: 2Gi'
wait_running gpu
wait_gen gpu 5
from=$(k get pod gpu -o jsonpath='{.metadata.annotations.paladin\.io/gpu}')
to=$((1 - from))
from_uuid=$(uuid_of "$from") to_uuid=$(uuid_of "$to")
workload_pid old_pid "before the move"
[[ $(k logs gpu | tail -1) == *"$from_uuid"* ]] ||
  fail "pod gpu does not run on GPU $from ($from_uuid): $(k logs gpu | tail -1)"
old_used=$(used_by "$from" "$old_pid")
((old_used >= 64 << 20)) || fail "NVML counts $old_used bytes of pid $old_pid on GPU $from, not its 64 MiB"
echo "move_gpu: pod gpu on GPU $from ($from_uuid), pid $old_pid using $((old_used >> 20)) MiB there"

# Moves refused before anything changes, each saying why: the GPU it is on, a GPU the node lacks,
# another node, a pod that does not exist, a GPU without room for it (pod `full`, 7Gi, which only
# the other GPU can hold), and no GPU given while the packer would keep it where it is.
refused=0
marks_before=$(find "$CLUSTER_DIR/checkpoints" -maxdepth 2 | wc -l)
refuse() { # EXPECTED ARGS...
  local expected=$1 out rc=0
  shift
  out=$("$PALADIN" k8s move -n "$NS" "$@" --driver "$EMUCUDA" --nvml "$EMUCUDA" "${move[@]}" \
    "${api[@]}" 2>&1) || rc=$?
  [[ $rc != 0 && $out == *"$expected"* ]] || fail "paladin k8s move $*: rc $rc, '$out' (expected '$expected')"
  refused=$((refused + 1))
}
refuse "is on GPU $from already" gpu --gpu "$from"
refuse "has no GPU 7" gpu --gpu 7
refuse "needs node other-node's image folder (--to-images)" gpu --gpu "$to" --node other-node
refuse "not found" nosuchpod --gpu "$to"
gpu_pod full 7Gi '' >/dev/null
for ((i = 0; i < 100; i++)); do
  [[ $(k get pod full -o jsonpath='{.metadata.annotations.paladin\.io/gpu}') == "$to" ]] && break
  sleep 0.1
done
refuse "the move's target $NODE/$to has 1 GiB free, 2 GiB asked (left running as it was)" gpu --gpu "$to"
# No GPU given: the packer's choice, with `full` on the other GPU its own: nothing to move.
refuse "is on GPU $from, where Paladin's packer would place it now: nothing to move" gpu
k delete pod full --wait=true --timeout=30s >/dev/null
marks_after=$(find "$CLUSTER_DIR/checkpoints" -maxdepth 2 | wc -l)
[[ $(k get pod gpu -o jsonpath='{.status.phase}') == Running && $marks_after == "$marks_before" ]] ||
  fail "a refused move changed something: pod gpu $(k get pod gpu -o jsonpath='{.status.phase}')," \
    "images and marks $marks_before -> $marks_after"
echo "move_gpu: $refused moves refused before anything changed (same GPU, no such GPU, another node without its image folder, no such pod, no room, already where the packer would put it)"

sampler_start
"$KUBECTL" -n "$NS" logs -f gpu >"$work/old.log" 2>/dev/null &

# --- the move ---------------------------------------------------------------------------------
t0=$(date +%s%N)
"$PALADIN" k8s move -n "$NS" gpu --gpu "$to" --driver "$EMUCUDA" --nvml "$EMUCUDA" \
  "${move[@]}" "${api[@]}" >"$work/move.log" 2>&1 || fail "paladin k8s move: $(tail -5 "$work/move.log")"
sed 's/^/move_gpu:   /' "$work/move.log"
first=$(first_gen gpu-m1)
t2=$(date +%s%N)
gen_before=$(gens "$work/old.log" | tail -1)
[[ $(k get pod gpu-m1 -o jsonpath='{.metadata.annotations.paladin\.io/gpu}') == "$to" ]] ||
  fail "pod gpu-m1 is not bound to GPU $to: $(k get pod gpu-m1 -o jsonpath='{.metadata.annotations}')"
grep -q "$NODE/$to as paladin k8s move asked" <<<"$(k get events -o jsonpath='{.items[*].message}' \
  --field-selector involvedObject.name=gpu-m1,reason=Scheduled)" || fail "no Scheduled event naming $NODE/$to for gpu-m1"
went_on gpu-m1 "$first" "$gen_before" $((gen_before + 2))
[[ $(k logs gpu-m1 | tail -1) == *"$to_uuid"* ]] ||
  fail "pod gpu-m1 does not run on GPU $to ($to_uuid): $(k logs gpu-m1 | tail -1)"
workload_pid new_pid "after the move"
new_used=$(used_by "$to" "$new_pid")
((new_used >= 64 << 20)) || fail "NVML counts $new_used bytes of pid $new_pid on GPU $to, not its 64 MiB"
[[ $(used_by "$from" "$new_pid") == 0 && $(used_by "$from" "$old_pid") == 0 ]] ||
  fail "NVML still counts the workload on GPU $from: $(gpus)"
k wait --for=delete pod/gpu --timeout=30s >/dev/null 2>&1 || fail "pod gpu still exists"
sampler_stop
echo "move_gpu: gpu -> gpu-m1, GPU $from -> $to, generation $gen_before -> $first, then" \
  "$(last_gen gpu-m1), memory verified on $to_uuid; NVML: pid $new_pid $((new_used >> 20)) MiB on" \
  "GPU $to, nothing on GPU $from; paused $(((t2 - t0) / 1000000)) ms until the first generation" \
  "(with the mover's own start); at most 1 copy in $SAMPLES samples; pod gpu deleted"

# `paladin k8s move` killed just after the checkpoint (PALADIN_K8S_MOVE_FAULT): gpu-m1 is in its
# image, nothing runs it. The same command with --resume finishes the move from the image:
# gpu-m2 on GPU $from, from the same generation, never two copies.
sampler_start
"$KUBECTL" -n "$NS" logs -f gpu-m1 >"$work/m1.log" 2>/dev/null &
back=(-n "$NS" gpu-m1 --gpu "$from" --driver "$EMUCUDA" --nvml "$EMUCUDA" "${move[@]}" "${api[@]}")
PALADIN_K8S_MOVE_FAULT=crash:after-checkpoint "$PALADIN" k8s move "${back[@]}" >"$work/killed.log" 2>&1 &&
  fail "paladin k8s move went on past its fault: $(tail -3 "$work/killed.log")"
for ((i = 0; i < 100; i++)); do
  [[ -z $(k get pod gpu-m1 -o jsonpath='{.status.containerStatuses[0].state.running}') ]] && break
  sleep 0.1
done
"$PALADIN" k8s move --resume "${back[@]}" >"$work/resume.log" 2>&1 ||
  fail "paladin k8s move --resume: $(tail -5 "$work/resume.log")"
sed 's/^/move_gpu:   /' "$work/resume.log"
grep -q "^moved $NS/gpu-m1 -> $NS/gpu-m2, $NODE/$to -> $NODE/$from: finished from its checkpoint image" "$work/resume.log" ||
  fail "paladin k8s move --resume: $(tail -1 "$work/resume.log")"
went_on_from gpu-m2 gpu-m1 "$work/m1.log"
sampler_stop "the resumed move"
echo "move_gpu: paladin k8s move killed after the checkpoint, then --resume: gpu-m1 -> gpu-m2," \
  "GPU $to -> $from, generation $BEFORE -> $FIRST, then $(last_gen gpu-m2), memory verified;" \
  "at most 1 copy in $SAMPLES samples"
k delete pod gpu-m2 --wait=true --timeout=30s >/dev/null
