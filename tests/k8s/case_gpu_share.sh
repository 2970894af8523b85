#!/usr/bin/env bash
# Pods sharing one emulated GPU under Paladin (its webhook and scheduler, paladin_lib.sh), with
# nothing of Paladin's in their image: two pods asking for 2Gi each run side by side on GPU 0;
# a third asking for 1Gi whose workload then allocates past it gets CUDA_ERROR_OUT_OF_MEMORY in
# its own log, and its neighbours keep verifying generations.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, PALADIN, EMUCUDA, NODE, K8S_NODE_FLAGS,
# CLUSTER_DIR.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
k() { "$KUBECTL" -n "$NS" "$@"; }
fail() {
  echo "gpu_share: FAIL: $*"
  exit 1
}
if [[ -z ${K8S_NODE_FLAGS:-} || -z ${CLUSTER_DIR:-} ]]; then
  echo "gpu_share: SKIP: runs Paladin's webhook on this machine, for the test cluster only"
  exit 77
fi
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
trap paladin_stop EXIT
paladin_start 19443

DEMO_ARGS='"--mib", "512", "--host-mib", "1", "--every-ms", "200"' gpu_pod a 2Gi "" >/dev/null
DEMO_ARGS='"--mib", "512", "--host-mib", "1", "--every-ms", "200"' gpu_pod b 2Gi "" >/dev/null
# 256 MiB, then 1 GiB more at its third generation: past its 1Gi.
DEMO_ARGS='"--mib", "256", "--host-mib", "1", "--every-ms", "200", "--grow-mib", "1024", "--grow-at", "3"' \
  gpu_pod c 1Gi "" >/dev/null
for p in a b; do
  k wait --for=jsonpath='{.status.phase}'=Running "pod/$p" --timeout=60s >/dev/null ||
    fail "pod $p not Running: $(k get pod "$p" -o jsonpath='{.status.conditions}')"
done
for p in a b c; do
  [[ $(k get pod "$p" -o jsonpath='{.spec.schedulerName}') == paladin ]] || fail "pod $p: not Paladin's"
  gpu=$(k get pod "$p" -o jsonpath='{.metadata.annotations.paladin\.io/gpu}')
  [[ $gpu == 0 ]] || fail "pod $p on GPU '$gpu', expected 0 (all fit there)"
done
echo "gpu_share: a, b and c placed on $NODE/0: $(k get pod a -o jsonpath='{.metadata.annotations.paladin\.io/placement}')"

# c: refused by the interposer in its own container, and only c.
for ((i = 0; i < 150; i++)); do
  [[ $(k get pod c -o jsonpath='{.status.phase}') == Failed ]] && break
  sleep 0.2
done
log_c=$(k logs c 2>&1)
[[ $log_c == *CUDA_ERROR_OUT_OF_MEMORY* ]] || fail "no CUDA_ERROR_OUT_OF_MEMORY in c's log: $log_c"
echo "gpu_share: c: $(grep -m1 CUDA_ERROR_OUT_OF_MEMORY <<<"$log_c")"
echo "gpu_share: c: $(grep -m1 '^OOM' <<<"$log_c")"

# a and b: the same emulated GPU (one UUID), still verifying after c's refusal.
last_gen() { k logs "$1" | grep '^gen ' | tail -1 | awk '{print $2}'; }
uuid() { k logs "$1" | grep -m1 '^gen ' | awk '{print $6}'; }
[[ -n $(uuid a) && $(uuid a) == "$(uuid b)" ]] || fail "a on '$(uuid a)', b on '$(uuid b)'"
for p in a b; do
  [[ $(k logs "$p") != *CUDA_ERROR_OUT_OF_MEMORY* ]] || fail "pod $p was refused memory"
done
ga=$(last_gen a) gb=$(last_gen b)
sleep 1.5
ga2=$(last_gen a) gb2=$(last_gen b)
((ga2 > ga && gb2 > gb)) || fail "neighbours stalled: a $ga -> $ga2, b $gb -> $gb2"
for p in a b; do
  [[ $(k get pod "$p" -o jsonpath='{.status.phase}') == Running ]] || fail "pod $p not Running"
done
echo "gpu_share: a and b share $(uuid a) and run on: a gen $ga -> $ga2, b gen $gb -> $gb2"
k delete pod a b c --wait=true --timeout=30s >/dev/null
