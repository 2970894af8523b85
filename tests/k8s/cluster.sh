#!/usr/bin/env bash
# A throwaway one-node Kubernetes cluster on this machine, for the `k8s` tests and for trying
# Paladin on Kubernetes by hand: a PKI made with openssl, etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, containerd and a kubelet, all on 127.0.0.1, with a CNI
# bridge that routes nothing off the machine. Runs from the prefix scripts/k8s.sh installs.
#
#   cluster.sh up DIR [--nodes 2]   start it; DIR/kubeconfig is the admin's (prints the export)
#   cluster.sh down DIR               stop all it started and put back the host state it changed
#   cluster.sh lose-node2 DIR         kill the second node as a machine dies (kubelet, containerd,
#                                     shims, pods; SIGKILL, the API server not told)
#   cluster.sh return-node2 DIR       start its containerd and kubelet again; waits until Ready
#
# --nodes 2 adds a second node on the same machine: a kubelet of its own (node `127.0.0.2`, an
# address the API server dials by name with no resolver involved, its own ports, root folder and
# cgroup root `/paladin-node2`) and a containerd of its own (DIR/node2: root, state, socket,
# runc root, checkpoint images), pods on the same bridge in the upper half of the subnet. It is
# tainted `paladin.io/second-node:NoSchedule`, so only pods that tolerate it (or name it) land
# there and the one-node cases are unaffected.
#
# `up` writes the host state it is about to change to DIR/host-state first (the sysctls the
# kubelet forces, the folders, cgroups and network link that appear); `down` reads it, stops
# every process it started, unmounts, removes what was not there before and restores the
# sysctls. `down` is idempotent and works after a failed or half-done `up` (call it from a trap).
# One cluster per machine: the kubelet's sysctls and cgroups are the host's. Needs root.
#
# Environment: PALADIN_K8S_PREFIX (default /opt/paladin/k8s); PALADIN_K8S_PORT_BASE (default
# 16443): etcd, apiserver, controller-manager, scheduler and kubelet listen on BASE..BASE+6, the
# second node's kubelet on BASE+7 and BASE+8.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PREFIX=${PALADIN_K8S_PREFIX:-/opt/paladin/k8s}
BASE=${PALADIN_K8S_PORT_BASE:-16443}
ETCD_PORT=$BASE ETCD_PEER_PORT=$((BASE + 1)) API_PORT=$((BASE + 2)) KCM_PORT=$((BASE + 3))
SCHED_PORT=$((BASE + 4)) KUBELET_PORT=$((BASE + 5)) KUBELET_HEALTH_PORT=$((BASE + 6))
NODE=localhost
NODE2=127.0.0.2 KUBELET2_PORT=$((BASE + 7)) KUBELET2_HEALTH_PORT=$((BASE + 8))
NODE2_CGROUP=paladin-node2
NODE2_TAINT=paladin.io/second-node
NODES=1
BRIDGE=pladk8s0
POD_SUBNET=10.217.0.0/24
SERVICE_RANGE=10.217.1.0/24
SERVICE_IP=10.217.1.1
PAUSE_IMAGE=paladin.local/pause:1
# What the kubelet changes on the host: it forces these sysctls (protectKernelDefaults off), and
# it, containerd and the CNI plugins create these folders whatever their configured roots.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward)
HOST_DIRS=(/var/lib/kubelet /var/log/containers /var/log/pods /run/containerd /var/lib/cni
  /run/kubernetes /etc/cni /opt/cni /opt/containerd /var/lib/containerd /etc/kubernetes /run/netns)
DAEMONS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet)

die() {
  echo "cluster: $*" >&2
  exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- the PKI -----------------------------------------------------------------------------------
# ECDSA P-256 keys (fast to make); certificates valid 2 days, signed by a CA made for DIR only.
new_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }
# new_cert NAME SUBJECT USAGE [SAN]: NAME.key and NAME.crt in the PKI folder.
new_cert() {
  local pki=$D/pki name=$1 subject=$2 usage=$3 san=${4:-}
  new_key "$pki/$name.key"
  {
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -z $san ]] || echo "subjectAltName=$san"
  } >"$pki/$name.ext"
  openssl req -new -key "$pki/$name.key" -subj "$subject" 2>/dev/null |
    openssl x509 -req -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
      -days 2 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
}
make_pki() {
  local pki=$D/pki
  mkdir -p "$pki"
  new_key "$pki/ca.key"
  openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=paladin-test-cluster-ca" -days 2 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$pki/ca.crt" 2>/dev/null
  new_cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  new_cert apiserver-kubelet "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  new_cert admin "/O=system:masters/CN=paladin-test-admin" clientAuth
  new_cert controller-manager "/CN=system:kube-controller-manager" clientAuth
  new_cert scheduler "/CN=system:kube-scheduler" clientAuth
  new_cert kubelet "/O=system:nodes/CN=system:node:$NODE" clientAuth
  new_cert kubelet-serving "/CN=$NODE" serverAuth "DNS:$NODE,IP:127.0.0.1"
  if ((NODES == 2)); then
    new_cert kubelet2 "/O=system:nodes/CN=system:node:$NODE2" clientAuth
    new_cert kubelet2-serving "/CN=$NODE2" serverAuth "IP:$NODE2"
  fi
  new_key "$pki/sa.key"
  openssl ec -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  chmod 600 "$pki"/*.key
}
# write_kubeconfig FILE CERT: a kubeconfig for the apiserver with the client certificate CERT.
write_kubeconfig() {
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: paladin-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $D/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $D/pki/$2.crt
    client-key: $D/pki/$2.key
contexts:
- name: paladin-test
  context: {cluster: paladin-test, user: $2, namespace: default}
current-context: paladin-test
KC
}

# --- configuration -----------------------------------------------------------------------------
write_configs() {
  mkdir -p "$D/conf"
  # The nodes' move key (one for the cluster, so that a move between nodes restores with the
  # destination's key): only paladin k8s move, which reads it here, makes restore tokens.
  (umask 077 && openssl rand -hex 32 >"$D/conf/move.key")
  # As Paladin's own checkpoints (docs/ckpt.md, "Sockets"): nftables where CRIU can, else no lock.
  local lock=skip
  if "${PALADIN_CRIU_DIR:-/opt/paladin/criu}/criu" check --feature nftables >/dev/null 2>&1; then
    lock=nftables
  fi
  echo "network-lock $lock" >"$D/conf/criu.conf"
  local kc
  for kc in admin controller-manager scheduler kubelet; do write_kubeconfig "$D/conf/$kc.kubeconfig" "$kc"; done
  cp "$D/conf/admin.kubeconfig" "$D/kubeconfig"
  if ((NODES == 1)); then
    write_node_configs "$D" "$KUBELET_PORT" "$KUBELET_HEALTH_PORT" 127.0.0.1 kubelet "" ""
  else
    # One bridge, one subnet: each node's IPAM hands out its own half of it.
    write_node_configs "$D" "$KUBELET_PORT" "$KUBELET_HEALTH_PORT" 127.0.0.1 kubelet "" \
      '"rangeStart": "10.217.0.2", "rangeEnd": "10.217.0.127", '
    write_kubeconfig "$D/conf/kubelet2.kubeconfig" kubelet2
    # Its lease lasts 8 s (renewed every 2 s) rather than 40: a recovery counts it lost sooner
    # once it is killed (case_recover_node), never while it lives.
    write_node_configs "$D/node2" "$KUBELET2_PORT" "$KUBELET2_HEALTH_PORT" "$NODE2" kubelet2 \
      $'cgroupRoot: /'"$NODE2_CGROUP"$'\nregisterWithTaints: [{key: '"$NODE2_TAINT"', effect: NoSchedule}]'$'\nnodeLeaseDurationSeconds: 8' \
      '"rangeStart": "10.217.0.128", "rangeEnd": "10.217.0.254", '
  fi
}

# write_node_configs ND PORT HEALTH_PORT ADDRESS CERT KUBELET_EXTRA IPAM_RANGE: one node's
# containerd, CNI and kubelet configuration and its RuntimeClass launcher, every folder under ND.
write_node_configs() {
  local nd=$1 port=$2 hport=$3 addr=$4 cert=$5 extra=$6 range=$7
  mkdir -p "$nd/conf" "$nd/cni/net.d" "$nd/cni/ipam" "$nd/bin" "$nd/checkpoints/moved" "$nd/pods"
  # The RuntimeClass `paladin`'s runtime: runc, CRIU from Paladin's prefix, images in ND.
  cat >"$nd/bin/paladin-runc" <<SH
#!/bin/sh
export PALADIN_RUNC=$PREFIX/bin/runc PALADIN_K8S_IMAGES=$nd/checkpoints
export PALADIN_CRIU_DIR=\${PALADIN_CRIU_DIR:-/opt/paladin/criu} PALADIN_CRIU_CONFIG=$D/conf/criu.conf
export PALADIN_K8S_MOVE_KEY=$D/conf/move.key
# What the tests add (tests/k8s/k8s_test.sh): Paladin's binary and driver for GPU state.
[ ! -r $D/conf/paladin-runc.env ] || . $D/conf/paladin-runc.env
exec bash $(cd "$here/../.." && pwd)/scripts/paladin-runc.sh "\$@"
SH
  chmod +x "$nd/bin/paladin-runc"
  # restrict_oom_score_adj: this machine lacks CAP_SYS_RESOURCE, so runc cannot lower a
  # process's OOM score (the pause container asks for -998); the CRI then never asks it to.
  # Every root and state folder lives in ND, the network namespaces too.
  cat >"$nd/conf/containerd.toml" <<TOML
version = 2
root = "$nd/containerd/root"
state = "$nd/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$nd/containerd/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$nd/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$PREFIX/bin/runc"
        Root = "$nd/containerd/runc"
        SystemdCgroup = false
    # Paladin's RuntimeClass: runc behind paladin-runc, which restores a moved pod's container
    # from its checkpoint image; the pod's paladin.io/ annotations reach the OCI config.
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.paladin]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = ["paladin.io/*"]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.paladin.options]
        BinaryName = "$nd/bin/paladin-runc"
        Root = "$nd/containerd/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$PREFIX/cni"
    conf_dir = "$nd/cni/net.d"
TOML
  # No gateway on the bridge, no masquerading, no routes: pods reach each other on this machine
  # and nothing else; nothing is routed off the machine.
  cat >"$nd/cni/net.d/10-paladin.conflist" <<CNI
{"cniVersion": "1.0.0", "name": "paladin-test", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": "$nd/cni/ipam", "ranges": [[{${range}"subnet": "$POD_SUBNET"}]]}}]}
CNI
  # cgroups are v1 here (failCgroupV1: false); no iptables (makeIPTablesUtilChains: false);
  # eviction thresholds low enough for a shared build machine.
  cat >"$nd/conf/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $addr
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $hport
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $D/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $D/pki/$cert-serving.crt
tlsPrivateKeyFile: $D/pki/$cert-serving.key
containerRuntimeEndpoint: unix://$nd/containerd/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
podLogsDir: $nd/pods
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: /etc/resolv.conf
$extra
YAML
}

# --- processes ---------------------------------------------------------------------------------
# start NAME ARGS...: runs PREFIX/bin/NAME in a session of its own, logging to DIR/logs/NAME.log.
# NAME.2 runs the same binary for the second node (its own log and pid file).
start() {
  local name=$1
  shift
  PATH=$PREFIX/bin:$PATH setsid "$PREFIX/bin/${name%.2}" "$@" >>"$D/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$D/run/$name.pid"
}
# The pid in DIR/run/NAME.pid when that process still runs NAME (a pid is never trusted blindly:
# it may have been reused by someone else's process).
live_pid() {
  local f=$D/run/$1.pid pid
  [[ -f $f ]] || return 1
  pid=$(cat "$f")
  [[ $pid =~ ^[0-9]+$ ]] && [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */"${1%.2}" ]] && echo "$pid"
}
# stop NAME: SIGTERM, up to 10 s, then SIGKILL; adds "NAME SECONDS" to STOPPED.
STOPPED=()
stop() {
  local pid t0
  t0=$(now)
  pid=$(live_pid "$1") || return 0
  stop_pid "$pid"
  STOPPED+=("${1#kube-} $(since "$t0")")
}
# A process that ended is gone, also while a zombie that its new parent has yet to reap.
gone() { [[ ! -d /proc/$1 ]] || [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == Z ]]; }
stop_pid() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    gone "$pid" && return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    gone "$pid" && return 0
    sleep 0.1
  done
}
kubectl_() { "$PREFIX/bin/kubectl" --kubeconfig "$D/kubeconfig" "$@"; }
# wait_for SECONDS WHAT COMMAND...: retries COMMAND every 0.2 s.
wait_for() {
  local until=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= until)); then
      echo "cluster: $what not reached in time; logs in $D/logs" >&2
      return 1
    fi
    sleep 0.2
  done
}
port_open() { (: >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# --- host state --------------------------------------------------------------------------------
save_host_state() {
  local s d c
  {
    for s in "${SYSCTLS[@]}"; do echo "sysctl $s $(sysctl -n "$s")"; done
    for d in "${HOST_DIRS[@]}"; do [[ -e $d ]] || echo "absent $d"; done
    for c in /sys/fs/cgroup/*/; do
      [[ -e ${c}kubepods ]] || echo "cgroup ${c}kubepods"
      ((NODES == 1)) || [[ -e ${c}$NODE2_CGROUP ]] || echo "cgroup ${c}$NODE2_CGROUP"
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 || echo "link $BRIDGE"
  } >"$D/host-state.tmp"
  mv "$D/host-state.tmp" "$D/host-state"
}

up() {
  local t0 p
  t0=$(now)
  [[ $(id -u) -eq 0 ]] || die "needs root (it runs a kubelet)"
  for p in "${DAEMONS[@]}" kubectl ctr runc containerd-shim-runc-v2; do
    [[ -x $PREFIX/bin/$p ]] || die "$PREFIX/bin/$p missing: run scripts/k8s.sh first"
  done
  [[ ! -e $D/host-state ]] || die "$D holds a cluster already (run: $0 down $D)"
  # Another kubelet on this machine would fight ours over the same cgroups and sysctls.
  # One that a cluster just brought down may still be ending (or a zombie not yet reaped).
  local i
  for p in $(pgrep -x kubelet || true); do
    for ((i = 0; i < 100; i++)); do
      gone "$p" && break
      sleep 0.1
    done
    gone "$p" || die "a kubelet (pid $p) already runs on this machine"
  done
  local ports=($ETCD_PORT $ETCD_PEER_PORT $API_PORT $KCM_PORT $SCHED_PORT $KUBELET_PORT $KUBELET_HEALTH_PORT)
  ((NODES == 1)) || ports+=($KUBELET2_PORT $KUBELET2_HEALTH_PORT)
  for p in "${ports[@]}"; do
    ! port_open "$p" || die "port $p on 127.0.0.1 is taken (set PALADIN_K8S_PORT_BASE)"
  done
  mkdir -p "$D/logs" "$D/run" "$D/pods"
  save_host_state
  make_pki
  write_configs
  ((NODES == 1)) || make_node2_cgroups
  echo "cluster: PKI and configuration in $(since "$t0") s"

  start etcd --name paladin-test --data-dir "$D/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "paladin-test=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls ""
  # containerd meanwhile: it does not need the apiserver.
  start containerd --config "$D/conf/containerd.toml"
  ((NODES == 1)) || start containerd.2 --config "$D/node2/conf/containerd.toml"
  wait_for 20 "etcd listening" port_open "$ETCD_PORT"
  local pki=$D/pki
  start kube-apiserver --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --cert-dir "$D/run/apiserver" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" --kubelet-certificate-authority "$pki/ca.crt" \
    --kubelet-client-certificate "$pki/apiserver-kubelet.crt" --kubelet-client-key "$pki/apiserver-kubelet.key" \
    --kubelet-preferred-address-types Hostname \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range "$SERVICE_RANGE" --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction --allow-privileged=true --profiling=false
  wait_for 60 "apiserver ready" kubectl_ get --raw /readyz
  echo "cluster: apiserver ready at $(since "$t0") s"
  local kc
  for kc in controller-manager scheduler; do
    local port=$KCM_PORT
    [[ $kc == scheduler ]] && port=$SCHED_PORT
    local extra=()
    [[ $kc == controller-manager ]] && extra=(--service-account-private-key-file "$pki/sa.key"
      --root-ca-file "$pki/ca.crt" --use-service-account-credentials=true
      --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key")
    start "kube-$kc" --kubeconfig "$D/conf/$kc.kubeconfig" \
      --authentication-kubeconfig "$D/conf/$kc.kubeconfig" --authorization-kubeconfig "$D/conf/$kc.kubeconfig" \
      --bind-address 127.0.0.1 --secure-port "$port" --leader-elect=false --profiling=false "${extra[@]}"
  done

  mkdir -p "$D/images"
  gcc -static -Os -o "$D/images/pause" "$here/pause.c"
  "$here/oci_image.sh" -o "$D/images/pause.tar" -n "$PAUSE_IMAGE" -f "$D/images/pause:/pause" -- /pause >/dev/null
  wait_for 20 "containerd socket" test -S "$D/containerd/containerd.sock"
  import_image "$D/images/pause.tar"
  start kubelet --config "$D/conf/kubelet.yaml" --kubeconfig "$D/conf/kubelet.kubeconfig" \
    --root-dir "$D/kubelet" --hostname-override "$NODE"
  if ((NODES == 2)); then
    wait_for 20 "containerd socket of node 2" test -S "$D/node2/containerd/containerd.sock"
    import_image "$D/images/pause.tar" "$D/node2"
    start_kubelet2
  fi
  wait_for 60 "node $NODE registered" kubectl_ get node "$NODE"
  wait_for 60 "node $NODE Ready" kubectl_ wait --for=condition=Ready "node/$NODE" --timeout=1s
  if ((NODES == 2)); then
    wait_for 60 "node $NODE2 registered" kubectl_ get node "$NODE2"
    wait_for 60 "node $NODE2 Ready" kubectl_ wait --for=condition=Ready "node/$NODE2" --timeout=1s
  fi
  # Pods are refused until the namespace's default ServiceAccount exists.
  wait_for 30 "default ServiceAccount" kubectl_ get serviceaccount default
  local ready="node $NODE Ready"
  ((NODES == 1)) || ready="nodes $NODE and $NODE2 Ready"
  echo "cluster: up in $(since "$t0") s ($ready); export KUBECONFIG=$D/kubeconfig"
}

start_kubelet2() {
  start kubelet.2 --config "$D/node2/conf/kubelet.yaml" --kubeconfig "$D/conf/kubelet2.kubeconfig" \
    --root-dir "$D/node2/kubelet" --hostname-override "$NODE2"
}

# --- the second node lost, and back -------------------------------------------------------------
# lose-node2: as a machine that died: its kubelet, containerd, shims and pods' processes killed
# at once (SIGKILL, no grace), nothing told to the API server. Its folders stay (the case deletes
# what it means to).
lose_node2() {
  local pid i a
  [[ -f $D/host-state ]] || die "no cluster in $D"
  for a in kubelet.2 containerd.2; do
    pid=$(live_pid "$a") && kill -KILL "$pid" 2>/dev/null || true
  done
  for pid in $(shim_pids 2); do kill -KILL "$pid" 2>/dev/null || true; done
  for ((i = 0; i < 3; i++)); do
    for pid in $(find /sys/fs/cgroup/*/"$NODE2_CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u); do
      kill -KILL "$pid" 2>/dev/null || true
    done
    sleep 0.1
  done
  for a in kubelet.2 containerd.2; do
    for ((i = 0; i < 50; i++)); do
      live_pid "$a" >/dev/null || break
      sleep 0.1
    done
  done
  echo "cluster: node $NODE2 lost (kubelet, containerd, shims and pods killed)"
}
# return-node2: its containerd and kubelet started again, as after a reboot; waits until Ready.
return_node2() {
  local pid
  [[ -f $D/host-state ]] || die "no cluster in $D"
  pid=$(live_pid kubelet.2) && die "node $NODE2's kubelet runs (pid $pid)"
  start containerd.2 --config "$D/node2/conf/containerd.toml"
  wait_for 20 "containerd socket of node 2" "$PREFIX/bin/ctr" --address "$D/node2/containerd/containerd.sock" version
  start_kubelet2
  wait_for 60 "node $NODE2 Ready" kubectl_ wait --for=condition=Ready "node/$NODE2" --timeout=1s
  echo "cluster: node $NODE2 back and Ready"
}

# import_image TAR [ND]: loads an OCI layout tarball into a node's containerd (CRI namespace);
# ND is the node's folder, DIR for the first node.
import_image() {
  "$PREFIX/bin/ctr" --address "${2:-$D}/containerd/containerd.sock" -n k8s.io images import \
    "$1" >/dev/null
}

# The second node's cgroup root in every hierarchy (the kubelet wants it to exist): its kubepods
# live under it, apart from the first node's. A new cpuset cgroup starts empty; it gets the root's.
make_node2_cgroups() {
  local c
  for c in /sys/fs/cgroup/*/; do mkdir -p "${c}$NODE2_CGROUP"; done
  if [[ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]]; then
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$NODE2_CGROUP/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$NODE2_CGROUP/cpuset.mems"
  fi
}

# --- down --------------------------------------------------------------------------------------
# Every process in the kubepods cgroups this cluster created: the pods' containers.
pod_pids() {
  local c
  while read -r c; do
    [[ -n $c && -d $c ]] && find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null
  done < <(awk '$1 == "cgroup" {print $2}' "$D/host-state") | sort -u
}
# The containerd shims of this cluster (they outlive containerd by design); `shim_pids 2`: the
# second node's only.
shim_pids() {
  local p re="$D(/node2)?"
  [[ ${1:-} != 2 ]] || re="$D/node2"
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/exe" 2>/dev/null) == */containerd-shim-runc-v2 ]] || continue
    tr '\0' ' ' <"$p/cmdline" 2>/dev/null |
      grep -qE -- "-address $re/containerd/containerd.sock( |$)" &&
      echo "${p#/proc/}"
  done
}
# rmdir only, deepest first: a cgroup that still holds a process stays, and is reported. A killed
# process leaves its cgroup a moment after it is gone from cgroup.procs, hence the retries.
remove_cgroup() {
  local i
  for ((i = 0; i < 50; i++)); do
    [[ -d $1 ]] || return 0
    find "$1" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ -d $1 ]] || return 0
    sleep 0.1
  done
  echo "cluster: $1 still holds processes: $(find "$1" -name cgroup.procs -exec cat {} + | tr '\n' ' ')" >&2
  return 1
}
unmount_under() {
  local m
  # Deepest first; a busy one is detached.
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done < <(awk -v d="$1/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r)
}

down() {
  local t0 kind a b pid i left=0
  t0=$(now)
  [[ $(id -u) -eq 0 ]] || die "needs root"
  if [[ ! -f $D/host-state ]]; then
    echo "cluster: nothing to put back in $D"
    return 0
  fi
  stop kubelet
  stop kubelet.2
  # The pods' processes first, then their shims, then the daemons.
  for ((i = 0; i < 3; i++)); do
    for pid in $(pod_pids); do kill -KILL "$pid" 2>/dev/null || true; done
    sleep 0.1
  done
  for pid in $(shim_pids); do kill -KILL "$pid" 2>/dev/null || true; done
  for a in containerd containerd.2 kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$a"; done
  unmount_under "$D"
  while read -r kind a b; do
    case $kind in
      absent) unmount_under "$a" ;;
    esac
  done <"$D/host-state"
  while read -r kind a b; do
    case $kind in
      sysctl) sysctl -qw "$a=$b" || { echo "cluster: could not put back $a=$b" >&2; left=1; } ;;
      absent) rm -rf "$a" ;;
      link) ip link delete "$a" 2>/dev/null || true ;;
      cgroup) remove_cgroup "$a" || left=1 ;;
    esac
  done <"$D/host-state"
  if [[ $left == 1 ]]; then
    # host-state stays: `down` again retries what is left.
    echo "cluster: down in $(since "$t0") s, but the host is not all put back (see above)" >&2
    return 1
  fi
  rm -rf "$D/containerd" "$D/kubelet" "$D/etcd" "$D/run" "$D/node2/containerd" "$D/node2/kubelet"
  mv "$D/host-state" "$D/host-state.restored"
  echo "cluster: down in $(since "$t0") s; host state put back (stopped in s: ${STOPPED[*]})"
}

usage() { sed -n '/^#   cluster.sh up/,/^#   cluster.sh return-node2/p' "$0" >&2; exit 2; }
[[ $# -ge 2 && ($1 == up || $1 == down || $1 == lose-node2 || $1 == return-node2) ]] || usage
if [[ $# -eq 4 && $1 == up && $3 == --nodes && ($4 == 1 || $4 == 2) ]]; then
  NODES=$4
elif [[ $# -ne 2 ]]; then
  usage
fi
mkdir -p "$2"
D=$(cd "$2" && pwd)
"${1//-/_}"
