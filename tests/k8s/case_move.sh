#!/usr/bin/env bash
# A running pod moved with its process state by `paladin k8s move old --name new`: pod `old` (the
# demo workload, RuntimeClass paladin) is checkpointed with runc and CRIU, pod `new` (same spec,
# annotations paladin.io/restore-from and its token) starts as the restored process through
# paladin-runc, and `old` is deleted. The workload goes
# on from the generation it had reached, its memory verified; a sampler (every 100 ms, the host's
# /proc) sees at most one copy of it at any instant; the old pod is gone.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, CLUSTER_DIR, PALADIN, K8S_NODE_FLAGS, MOVE_FLAGS.
set -euo pipefail
k() { "$KUBECTL" -n "$NS" "$@"; }
fail() {
  echo "move: FAIL: $*"
  exit 1
}
if [[ -z ${CLUSTER_DIR:-} ]]; then
  echo "move: SKIP: moves a pod with runc and CRIU on the node itself (the test cluster only)"
  exit 77
fi
CRIU_DIR=${PALADIN_CRIU_DIR:-/opt/paladin/criu}
[[ -x $CRIU_DIR/criu ]] || { echo "move: SKIP: no CRIU in $CRIU_DIR (scripts/criu.sh)"; exit 77; }
# Arguments no other process on the machine has: the sampler counts this workload's copies. A
# pattern for pgrep -f whose first character is bracketed, so that it does not match the
# command line of another pgrep looking for it (the sampler runs beside the other checks).
ARGS='"--mib", "24", "--host-mib", "3", "--every-ms", "90"'
MARK='[-]-mib 24 --host-mib 3 --every-ms 90'

"$KUBECTL" apply -f - >/dev/null <<YAML
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: paladin}
handler: paladin
YAML
pod() { # NAME [ANNOTATIONS]
  k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  annotations: {${2:-}}
spec:
  runtimeClassName: paladin
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: [$ARGS]
YAML
}
last_gen() { k logs "$1" 2>/dev/null | sed -n 's/^gen \([0-9]*\) ok .*/\1/p' | tail -1; }

sampler_out=$(mktemp)
sampler() {
  while :; do
    pgrep -c -f -- "$MARK" || true
    sleep 0.1
  done
}
sampler >"$sampler_out" &
sampler_pid=$!
trap 'kill $sampler_pid 2>/dev/null || true; rm -f "$sampler_out"*' EXIT

pod old
k wait --for=jsonpath='{.status.phase}'=Running pod/old --timeout=60s >/dev/null ||
  fail "pod old not Running"
for ((i = 0; i < 100; i++)); do
  [[ $(last_gen old) -ge 5 ]] 2>/dev/null && break
  sleep 0.2
done
[[ $(last_gen old) -ge 5 ]] 2>/dev/null || fail "pod old: no fifth generation: $(k logs old | tail -3)"

# --- the move ---------------------------------------------------------------------------------
read -ra flags <<<"$K8S_NODE_FLAGS $MOVE_FLAGS"
# The old pod's log until its container exits (the mover deletes the pod, and its log with it).
k logs -f old >"$sampler_out.old" 2>/dev/null &
t0=$(date +%s%N)
"$PALADIN" k8s move -n "$NS" old --name new "${flags[@]}" >"$sampler_out.move" 2>&1 ||
  fail "paladin k8s move: $(tail -5 "$sampler_out.move")"
sed 's/^/move:   /' "$sampler_out.move"
gen_before=$(sed -n 's/^gen \([0-9]*\) ok .*/\1/p' "$sampler_out.old" | tail -1)
ckpt_ms=$(sed -n 's/.*checkpoint \([0-9]*\) ms.*/\1/p' "$sampler_out.move")
first=''
for ((i = 0; i < 100; i++)); do
  first=$(k logs new 2>/dev/null | sed -n 's/^gen \([0-9]*\) ok .*/\1/p' | head -1)
  [[ -n $first ]] && break
  sleep 0.05
done
t2=$(date +%s%N)
k wait --for=delete pod/old --timeout=30s >/dev/null 2>&1 || true
[[ -n $first ]] || fail "pod new prints no generation: $(k logs new | tail -3)"
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
max=$(sort -n "$sampler_out" | tail -1)
samples=$(wc -l <"$sampler_out")
[[ $max == 1 ]] || fail "$max copies of the workload at once (of $samples samples)"
echo "move: old -> new, generation $gen_before -> $first, then $(last_gen new), memory verified;" \
  "checkpoint $ckpt_ms ms, paused $(((t2 - t0) / 1000000)) ms until the new pod's" \
  "first generation; at most 1 copy in $samples samples; pod old deleted"
k delete pod new --wait=true --timeout=30s >/dev/null
