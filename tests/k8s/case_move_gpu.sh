#!/usr/bin/env bash
# A GPU pod moved to another GPU of its node by `paladin k8s move POD --gpu N`: pod `gpu` (the
# demo workload, 2Gi of paladin.io/gpu-memory, RuntimeClass paladin, placed by Paladin's
# scheduler) is moved from its emulated GPU to the other one. Its GPU state goes through the
# driver's checkpoint API before CRIU and is restored onto the target GPU after; the replacement
# `gpu-m1` is bound there by Paladin's scheduler. Checked: the workload goes on from the
# generation it had reached, its device memory verified, on the target GPU's UUID; NVML counts
# its memory on the target GPU and none of it on the old one; the old pod is gone; a sampler
# (every 100 ms, the host's /proc) never sees two copies.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, CLUSTER_DIR, PALADIN, EMUCUDA, NODE,
# K8S_NODE_FLAGS, MOVE_FLAGS.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
k() { "$KUBECTL" -n "$NS" "$@"; }
fail() {
  echo "move_gpu: FAIL: $*"
  exit 1
}
if [[ -z ${CLUSTER_DIR:-} ]]; then
  echo "move_gpu: SKIP: moves a pod with runc and CRIU on the node itself (the test cluster only)"
  exit 77
fi
CRIU_DIR=${PALADIN_CRIU_DIR:-/opt/paladin/criu}
[[ -x $CRIU_DIR/criu ]] || { echo "move_gpu: SKIP: no CRIU in $CRIU_DIR (scripts/criu.sh)"; exit 77; }
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
work=$(mktemp -d)
sampler_pid=''
cleanup() {
  [[ -z $sampler_pid ]] || kill "$sampler_pid" 2>/dev/null || true
  paladin_stop
  rm -rf "$work"
}
trap cleanup EXIT
paladin_start 19445
read -ra api <<<"$K8S_NODE_FLAGS"
read -ra move <<<"$MOVE_FLAGS"
export PALADIN_EMU_GPUS=$PALADIN_EMU_GPUS_SPEC PALADIN_EMU_STATE=$CLUSTER_DIR/paladin/emu/state
gpus() { "$PALADIN" k8s gpus --nvml "$EMUCUDA"; }
# GPU N's memory used by pid P, in bytes (0 when NVML does not list it there).
used_by() { gpus | awk -v g="$1" -v p="$2" '$1 == "gpu" && $2 == g && $3 == "pid" && $4 == p { print $6; f = 1 } END { if (!f) print 0 }'; }
uuid_of() { gpus | awk -v g="$1" '$1 == "gpu" && $2 == g && $4 == "used" { print $3 }'; }
# workload_pid VAR WHEN: sets VAR to the pid of the one process running the workload; fails
# naming every such process and its parent when there is not exactly one.
workload_pid() {
  local pids p
  pids=$(pgrep -f -- "$MARK" || true)
  if [[ $(wc -w <<<"$pids") != 1 ]]; then
    for p in $pids; do
      ps -o pid=,ppid=,stat=,etimes=,args= -p "$p" || true
      ps -o pid=,stat=,args= -p "$(ps -o ppid= -p "$p" || echo 0)" | sed 's/^/  parent: /' || true
    done >"$work/pids.seen"
    fail "$(wc -w <<<"$pids") processes run the workload $2:" $'\n'"$(cat "$work/pids.seen")"
  fi
  printf -v "$1" %s "$pids"
}

"$KUBECTL" apply -f - >/dev/null <<YAML
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: paladin}
handler: paladin
YAML
# Arguments no other process on the machine has: the sampler counts this workload's copies. A
# pattern for pgrep -f whose first character is bracketed, so that it does not match the
# command line of another pgrep looking for it (the sampler runs beside the other checks).
MARK='[-]-mib 64 --host-mib 3 --every-ms 90'
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: gpu}
spec:
  runtimeClassName: paladin
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: ["--mib", "64", "--host-mib", "3", "--every-ms", "90"]
    resources:
      limits: {paladin.io/gpu-memory: 2Gi}
YAML
k wait --for=jsonpath='{.status.phase}'=Running pod/gpu --timeout=60s >/dev/null ||
  fail "pod gpu not Running: $(k get pod gpu -o jsonpath='{.status}')"
last_gen() { k logs "$1" 2>/dev/null | sed -n 's/^gen \([0-9]*\) ok .*/\1/p' | tail -1; }
for ((i = 0; i < 100; i++)); do
  [[ $(last_gen gpu) -ge 5 ]] 2>/dev/null && break
  sleep 0.2
done
[[ $(last_gen gpu) -ge 5 ]] 2>/dev/null || fail "pod gpu: no fifth generation: $(k logs gpu | tail -3)"
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
# another node, a pod that does not exist.
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
marks_after=$(find "$CLUSTER_DIR/checkpoints" -maxdepth 2 | wc -l)
[[ $(k get pod gpu -o jsonpath='{.status.phase}') == Running && $marks_after == "$marks_before" ]] ||
  fail "a refused move changed something: pod gpu $(k get pod gpu -o jsonpath='{.status.phase}')," \
    "images and marks $marks_before -> $marks_after"
echo "move_gpu: $refused moves refused before anything changed (same GPU, no such GPU, another node without its image folder, no such pod)"

sampler() {
  local n
  while :; do
    n=$(pgrep -c -f -- "$MARK" || true)
    echo "$n"
    ((n <= 1)) || { date +%T.%N; pgrep -a -f -- "$MARK"; } >>"$work/samples.seen"
    sleep 0.1
  done
}
sampler >"$work/samples" &
sampler_pid=$!
k logs -f gpu >"$work/old.log" 2>/dev/null &

# --- the move ---------------------------------------------------------------------------------
t0=$(date +%s%N)
"$PALADIN" k8s move -n "$NS" gpu --gpu "$to" --driver "$EMUCUDA" --nvml "$EMUCUDA" \
  "${move[@]}" "${api[@]}" >"$work/move.log" 2>&1 || fail "paladin k8s move: $(tail -5 "$work/move.log")"
sed 's/^/move_gpu:   /' "$work/move.log"
first=''
for ((i = 0; i < 100; i++)); do
  first=$(k logs gpu-m1 2>/dev/null | sed -n 's/^gen \([0-9]*\) ok .*/\1/p' | head -1)
  [[ -n $first ]] && break
  sleep 0.05
done
t2=$(date +%s%N)
gen_before=$(sed -n 's/^gen \([0-9]*\) ok .*/\1/p' "$work/old.log" | tail -1)
[[ -n $first ]] || fail "pod gpu-m1 prints no generation: $(k logs gpu-m1 | tail -3)"
! grep -q '^started:' <<<"$(k logs gpu-m1)" || fail "pod gpu-m1 started its workload afresh"
((first > gen_before && first <= gen_before + 2)) ||
  fail "pod gpu-m1 went on at generation $first; pod gpu had reached $gen_before"
[[ $(k get pod gpu-m1 -o jsonpath='{.metadata.annotations.paladin\.io/gpu}') == "$to" ]] ||
  fail "pod gpu-m1 is not bound to GPU $to: $(k get pod gpu-m1 -o jsonpath='{.metadata.annotations}')"
k get events --field-selector involvedObject.name=gpu-m1,reason=Scheduled -o jsonpath='{.items[*].message}' |
  grep -q "$NODE/$to as paladin k8s move asked" || fail "no Scheduled event naming $NODE/$to for gpu-m1"
sleep 1
! grep -q MISMATCH <<<"$(k logs gpu-m1)" || fail "pod gpu-m1: $(k logs gpu-m1 | grep -m1 MISMATCH)"
[[ $(last_gen gpu-m1) -gt $first ]] || fail "pod gpu-m1 does not advance past generation $first"
[[ $(k logs gpu-m1 | tail -1) == *"$to_uuid"* ]] ||
  fail "pod gpu-m1 does not run on GPU $to ($to_uuid): $(k logs gpu-m1 | tail -1)"
workload_pid new_pid "after the move"
new_used=$(used_by "$to" "$new_pid")
((new_used >= 64 << 20)) || fail "NVML counts $new_used bytes of pid $new_pid on GPU $to, not its 64 MiB"
[[ $(used_by "$from" "$new_pid") == 0 && $(used_by "$from" "$old_pid") == 0 ]] ||
  fail "NVML still counts the workload on GPU $from: $(gpus)"
k wait --for=delete pod/gpu --timeout=30s >/dev/null 2>&1 || fail "pod gpu still exists"
kill "$sampler_pid"
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=''
max=$(sort -n "$work/samples" | tail -1)
samples=$(wc -l <"$work/samples")
[[ $max == 1 ]] || fail "$max copies of the workload at once (of $samples samples):" $'\n'"$(cat "$work/samples.seen")"
echo "move_gpu: gpu -> gpu-m1, GPU $from -> $to, generation $gen_before -> $first, then" \
  "$(last_gen gpu-m1), memory verified on $to_uuid; NVML: pid $new_pid $((new_used >> 20)) MiB on" \
  "GPU $to, nothing on GPU $from; paused $(((t2 - t0) / 1000000)) ms until the first generation" \
  "(with the mover's own start); at most 1 copy in $samples samples; pod gpu deleted"
k delete pod gpu-m1 --wait=true --timeout=30s >/dev/null
