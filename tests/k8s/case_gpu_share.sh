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

gpu_share_checks gpu_share
