#!/usr/bin/env bash
# The `k8s` tests: one throwaway cluster (tests/k8s/cluster.sh) brought up, every case run
# against it in a namespace of its own, the cluster brought down, and the host checked to be as
# it was (sysctls, folders, cgroups, network link, processes, mounts), also when a case failed.
#
#   k8s_test.sh DEMO_WORKLOAD EMUCUDA_LIB PALADIN [CASE...]   (default: every case_*.sh here)
#
# Where the toolkit (../shared/k8s, or PALADIN_K8S_TOOLKIT) is absent and KUBECONFIG names a
# cluster, the cases run there instead, from the image PALADIN_K8S_TEST_IMAGE (docs/kubernetes.md
# says how to make it); with neither it exits 77, which ctest reports as skipped.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$(dirname "$here")")
[[ $# -ge 3 ]] || { echo "usage: $0 DEMO_WORKLOAD EMUCUDA_LIB PALADIN [CASE...]" >&2; exit 2; }
args=("$@")
demo=$1 emucuda=$2 paladin=$3
paladin_exe=$(readlink -f "$paladin")
shift 3
cases=("$@")
if [[ ${#cases[@]} -eq 0 ]]; then
  for c in "$here"/case_*.sh; do cases+=("$(basename "$c" .sh)"); done
fi
PREFIX=${PALADIN_K8S_PREFIX:-/opt/paladin/k8s}
TOOLKIT=${PALADIN_K8S_TOOLKIT:-$(dirname "$repo")/shared/k8s}
t0=$SECONDS

own_cluster=1
if [[ ! -f $TOOLKIT/bin/SHA256SUMS ]]; then
  if [[ -z ${KUBECONFIG:-} ]]; then
    echo "k8s: SKIP: these tests need the Kubernetes toolkit (none at $TOOLKIT; see PALADIN_K8S_TOOLKIT)" \
      "to start a cluster of their own, or KUBECONFIG naming yours (docs/kubernetes.md)"
    exit 77
  fi
  if [[ -z ${PALADIN_K8S_TEST_IMAGE:-} ]] || ! command -v kubectl >/dev/null; then
    echo "k8s: SKIP: with KUBECONFIG, set PALADIN_K8S_TEST_IMAGE to the test image your nodes" \
      "can run and put kubectl on the PATH (docs/kubernetes.md)"
    exit 77
  fi
  own_cluster=0
fi
if [[ $own_cluster == 1 && $(id -u) -ne 0 ]]; then
  echo "k8s: SKIP: starting a test cluster needs root (it runs a kubelet)"
  exit 77
fi
# The cluster's mounts (containerd's sandbox and root file systems, the kubelet's volumes) are
# made in a mount namespace of this run's own: a job that another test starts meanwhile copies
# the host's mounts into its own namespace, and one that went away before its next dump or
# restore fails it (docs/ckpt.md, "Known limits"). So the cluster runs beside the tests that run
# jobs (tests/CMakeLists.txt, "Host mounts"). Its nodes' commands (--host-mounts) enter the
# namespace of the shim that started their pod: this one.
if [[ $own_cluster == 1 && -z ${PALADIN_K8S_OWN_MOUNTS:-} ]]; then
  PALADIN_K8S_OWN_MOUNTS=1 exec unshare --mount --propagation private -- bash "$0" "${args[@]}"
fi

# --- the host as it was ------------------------------------------------------------------------
# Taken here, independently of cluster.sh's own record, so a bug there shows as a failure.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward)
HOST_PATHS=(/var/lib/kubelet /var/log/containers /var/log/pods /run/containerd /var/lib/cni
  /run/kubernetes /etc/cni /opt/cni /opt/containerd /var/lib/containerd /etc/kubernetes)
host_state() {
  local s p
  for s in "${SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")"; done
  for p in "${HOST_PATHS[@]}" /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/paladin-node2; do [[ -e $p ]] && echo "exists $p"; done
  # The cluster's bridge (cluster.sh's BRIDGE); the pods' veths go with their namespaces.
  ip link show pladk8s0 >/dev/null 2>&1 && echo "link pladk8s0"
  # Processes running a binary of the prefix: a daemon, a shim or a runc left behind.
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/exe" 2>/dev/null) == "$PREFIX"/* ]] && echo "process ${p#/proc/} $(readlink "$p/exe")"
    # Paladin's scheduler or webhook that a case started and did not stop.
    [[ $(readlink "$p/exe" 2>/dev/null) == "$paladin_exe" ]] &&
      tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q '^[^ ]* k8s ' && echo "process ${p#/proc/} paladin k8s"
  done
  true
}

if [[ $own_cluster == 1 ]]; then
  rc=0
  bash "$repo/scripts/k8s.sh" "$PREFIX" || rc=$?
  [[ $rc == 0 ]] || { [[ $rc == 77 ]] && echo "k8s: SKIP: no toolkit"; exit "$rc"; }
  # A cluster of an earlier run killed before its trap ran (ctest's timeout, SIGKILL): put the
  # host back first. Only one whose test is gone: a live one belongs to a run in progress (and
  # `up` refuses then), and a cluster a user started by hand has no owner file.
  for stale in /tmp/paladin-k8s.*/host-state; do
    [[ -f $stale ]] || continue
    sd=$(dirname "$stale")
    owner=$(cat "$sd/owner" 2>/dev/null) || continue
    tr '\0' ' ' <"/proc/$owner/cmdline" 2>/dev/null | grep -q k8s_test.sh && continue
    echo "k8s: putting back the host state of an interrupted run in $sd"
    bash "$here/cluster.sh" down "$sd" || true
    rm -rf "$sd"
  done
  before=$(host_state)
  DIR=$(mktemp -d /tmp/paladin-k8s.XXXXXX)
  echo $$ >"$DIR/owner"
  finish() {
    local rc=$? after
    trap - EXIT INT TERM
    if ! bash "$here/cluster.sh" down "$DIR"; then
      echo "k8s: FAIL: cluster.sh down failed"
      rc=1
    fi
    after=$(host_state)
    if [[ $before != "$after" ]]; then
      echo "k8s: FAIL: the host is not as it was before the cluster:"
      diff <(echo "$before") <(echo "$after") | sed 's/^/k8s:   /'
      rc=1
    else
      echo "k8s: host state as before the cluster (sysctls, folders, cgroups, links, processes)"
    fi
    [[ $rc != 0 ]] || rm -rf "$DIR"
    [[ $rc == 0 ]] || echo "k8s: logs kept in $DIR/logs"
    echo "k8s: wall time $((SECONDS - t0)) s"
    exit "$rc"
  }
  trap finish EXIT
  trap 'exit 130' INT TERM
  # A second node only when a case asks for it (a line `# k8s: nodes 2`): the cases share one
  # bring-up either way, and the second node is tainted, so the others never land there.
  nodes=1
  for c in "${cases[@]}"; do
    grep -qx '# k8s: nodes 2' "$here/$c.sh" && nodes=2
  done
  bash "$here/cluster.sh" up "$DIR" --nodes "$nodes"
  export KUBECONFIG=$DIR/kubeconfig
  KUBECTL=$PREFIX/bin/kubectl
  IMAGE=paladin.local/demo-workload:test
  "$here/oci_image.sh" -o "$DIR/images/demo.tar" -n "$IMAGE" \
    -f "$demo:/usr/local/bin/paladin-demo-workload" -f "$emucuda:/usr/lib/paladin/libcuda.so.1" \
    -e LD_LIBRARY_PATH=/usr/lib/paladin -- /usr/local/bin/paladin-demo-workload
  "$PREFIX/bin/ctr" --address "$DIR/containerd/containerd.sock" -n k8s.io images import \
    "$DIR/images/demo.tar" >/dev/null
  if [[ $nodes == 2 ]]; then
    "$PREFIX/bin/ctr" --address "$DIR/node2/containerd/containerd.sock" -n k8s.io images import \
      "$DIR/images/demo.tar" >/dev/null
  fi
  # The RuntimeClass's runtime restores a moved or recovered GPU pod's GPU state on its node
  # itself (scripts/paladin-runc.sh): Paladin's binary and the emulated driver, with the cases'
  # emulated GPUs and their state (tests/k8s/paladin_lib.sh).
  cat >"$DIR/conf/paladin-runc.env" <<ENV
export PALADIN_K8S_PALADIN=$paladin_exe PALADIN_K8S_DRIVER=$(readlink -f "$emucuda")
export PALADIN_K8S_NVML=$(readlink -f "$emucuda")
export PALADIN_EMU_GPUS=$(sed -n 's/^PALADIN_EMU_GPUS_SPEC=//p' "$here/paladin_lib.sh")
export PALADIN_EMU_STATE=$DIR/paladin/emu/state
ENV
  # `paladin k8s node` reaches the API server as the cluster's admin.
  server=$("$KUBECTL" config view -o jsonpath='{.clusters[0].cluster.server}')
  pki=$DIR/pki
  export CLUSTER_DIR=$DIR NODE=localhost K8S_NODE_FLAGS="--server $server --ca-cert $pki/ca.crt --client-cert $pki/admin.crt --client-key $pki/admin.key"
  # paladin k8s move, run on the node: the cluster's runc, its state folder, CRIU, the images
  # and the key of the RuntimeClass paladin (cluster.sh).
  export MOVE_FLAGS="--runc $PREFIX/bin/runc --runc-root $DIR/containerd/runc/k8s.io --criu-dir ${PALADIN_CRIU_DIR:-/opt/paladin/criu} --images $DIR/checkpoints --key $DIR/conf/move.key"
  if [[ $nodes == 2 ]]; then
    # The second node (cluster.sh): its name, its cgroup root, and where a move to it carries
    # the image and finds the restored container.
    export NODE2=127.0.0.2 NODE2_CGROUP=paladin-node2
    # No --to-runc-root: the second node's runtime restores a GPU pod's GPU state itself, as on
    # another machine, where the mover cannot reach the node's processes.
    export NODE2_MOVE_FLAGS="--to-images $DIR/node2/checkpoints"
    # paladin k8s drain run on the second node, its pods moved to the first.
    # paladin k8s checkpoint run on the second node, its images into the first node's folder
    # (where paladin k8s recover, run on the first node, finds them once the second is lost).
    export NODE2_CHECKPOINT_FLAGS="--runc $PREFIX/bin/runc --runc-root $DIR/node2/containerd/runc/k8s.io --criu-dir ${PALADIN_CRIU_DIR:-/opt/paladin/criu} --images $DIR/node2/checkpoints --to-images $DIR/checkpoints"
    export NODE2_DRAIN_FLAGS="--runc $PREFIX/bin/runc --runc-root $DIR/node2/containerd/runc/k8s.io --criu-dir ${PALADIN_CRIU_DIR:-/opt/paladin/criu} --images $DIR/node2/checkpoints --key $DIR/conf/move.key --to-images $DIR/checkpoints --to-runc-root $DIR/containerd/runc/k8s.io"
    # paladin k8s mover run on the second node: moves asked through Paladin's server (a drain)
    # carry their images into the first node's folder.
    export NODE2_MOVER_FLAGS="--runc $PREFIX/bin/runc --runc-root $DIR/node2/containerd/runc/k8s.io --criu-dir ${PALADIN_CRIU_DIR:-/opt/paladin/criu} --images $DIR/node2/checkpoints --key $DIR/conf/move.key --node-images $NODE=$DIR/checkpoints"
  fi
else
  KUBECTL=$(command -v kubectl)
  IMAGE=$PALADIN_K8S_TEST_IMAGE
fi
export KUBECTL IMAGE PALADIN="$paladin" EMUCUDA="$emucuda"

# --- the cases ---------------------------------------------------------------------------------
passed=0 failed=0 skipped=0
for c in "${cases[@]}"; do
  ns=paladin-test-${c#case_}
  ns=${ns//_/-}
  "$KUBECTL" create namespace "$ns" >/dev/null
  ct=$SECONDS
  rc=0
  NS=$ns bash "$here/$c.sh" || rc=$?
  if [[ $rc == 0 ]]; then
    echo "k8s: PASS $c ($((SECONDS - ct)) s)"
    passed=$((passed + 1))
  elif [[ $rc == 77 ]]; then
    echo "k8s: SKIP $c"
    skipped=$((skipped + 1))
  else
    echo "k8s: FAIL $c ($((SECONDS - ct)) s)"
    "$KUBECTL" -n "$ns" get pods -o wide 2>&1 | sed 's/^/k8s:   /' || true
    "$KUBECTL" -n "$ns" get events 2>&1 | tail -20 | sed 's/^/k8s:   /' || true
    failed=$((failed + 1))
  fi
  "$KUBECTL" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
done
echo "k8s: $passed passed, $failed failed, $skipped skipped"
[[ $failed == 0 ]]
