#!/usr/bin/env bash
# Pods sharing one emulated GPU under Paladin (its webhook and scheduler, paladin_lib.sh), with
# nothing of Paladin's in their image: two pods asking for 2Gi each run side by side on GPU 0;
# a third asking for 1Gi whose workload then allocates past it gets CUDA_ERROR_OUT_OF_MEMORY in
# its own log, and its neighbours keep verifying generations; the node measures what a and b hold.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, PALADIN, EMUCUDA, NODE, K8S_NODE_FLAGS,
# CLUSTER_DIR.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CASE=gpu_share
# shellcheck source=tests/k8s/caselib.sh
source "$(dirname "${BASH_SOURCE[0]}")/caselib.sh"
if [[ -z ${K8S_NODE_FLAGS:-} || -z ${CLUSTER_DIR:-} ]]; then
  echo "gpu_share: SKIP: runs Paladin's webhook on this machine, for the test cluster only"
  exit 77
fi
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
trap paladin_stop EXIT
paladin_start 19443
# Each pod's GPU memory measured on its node (paladin k8s node --usage): NVML's processes (host
# pids), their pods from their cgroups, the sums in the pods' annotation
# paladin.io/gpu-memory-used: a and b each hold their 512 MiB (and the context), under their 2Gi.
gpu_share_more() {
  local out p used api
  read -ra api <<<"$K8S_NODE_FLAGS"
  out=$(PALADIN_EMU_GPUS=$PALADIN_EMU_GPUS_SPEC PALADIN_EMU_STATE=$CLUSTER_DIR/paladin/emu/state \
    "$PALADIN" k8s node --node "$NODE" --nvml "$EMUCUDA" --usage "${api[@]}" 2>&1) ||
    fail "paladin k8s node --usage: $out"
  for p in a b; do
    used=$(k get pod "$p" -o jsonpath='{.metadata.annotations.paladin\.io/gpu-memory-used}')
    [[ $used =~ ^[0-9]+$ ]] && ((used >= 512 << 20 && used <= 2 << 30)) ||
      fail "pod $p: paladin.io/gpu-memory-used '$used', expected its 512 MiB to 2 GiB: $out"
  done
  echo "gpu_share: measured on the node: $(grep -o "$NS/a uses .*" <<<"$out");" \
    "$(grep -o "$NS/b uses .*" <<<"$out")"
}

gpu_share_checks gpu_share
