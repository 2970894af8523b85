#!/usr/bin/env bash
# Installs what a one-node Kubernetes test cluster needs into a private prefix, without touching
# the system's apt sources or installed packages: etcd 3.5 and containerd 1.7 from Debian 13's
# packages (Debian 12 has etcd 3.4, too old for Kubernetes 1.34, and containerd 1.6), runc and
# the CNI plugins from Debian 12's (Debian 13's runc needs a newer glibc), and the Kubernetes
# v1.34.2 binaries unpacked from the project's toolkit (../shared/k8s/bin/*.xz, checked against
# its SHA256SUMS). Idempotent: a prefix installed from the same toolkit is left alone.
#
#   scripts/k8s.sh [PREFIX]   (default: $PALADIN_K8S_PREFIX or /opt/paladin/k8s)
#
# The toolkit is $PALADIN_K8S_TOOLKIT, else ../shared/k8s beside the repository. Without it this
# exits 77 (what the `k8s` tests read as "skipped"): run the tests against your own cluster with
# KUBECONFIG instead (docs/kubernetes.md). tests/k8s/cluster.sh runs a cluster from the prefix.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PREFIX=${1:-${PALADIN_K8S_PREFIX:-/opt/paladin/k8s}}
PREFIX=${PREFIX%/}
TOOLKIT=${PALADIN_K8S_TOOLKIT:-$(dirname "$(dirname "$here")")/shared/k8s}
KUBE_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
# NAME/SUITE: which Debian suite each package comes from (see above for why).
PACKAGES=(etcd-server/trixie containerd/trixie runc/bookworm containernetworking-plugins/bookworm)
STAMP=.paladin-k8s

if [[ ! -f $TOOLKIT/bin/SHA256SUMS ]]; then
  echo "k8s: no Kubernetes toolkit at $TOOLKIT (set PALADIN_K8S_TOOLKIT to one);" \
    "without it, run the k8s tests against your own cluster with KUBECONFIG (docs/kubernetes.md)" >&2
  exit 77
fi
want=$(
  cat "$TOOLKIT/bin/SHA256SUMS"
  printf '%s\n' "${PACKAGES[@]}"
)
if [[ -f $PREFIX/$STAMP ]] && [[ $(cat "$PREFIX/$STAMP") == "$want" ]]; then
  echo "k8s: installed in $PREFIX"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "k8s: run as root to install into $PREFIX" >&2
  exit 1
fi
# The prefix is replaced whole: refuse a folder that is not one of ours (or empty).
if [[ -e $PREFIX ]] && [[ -n $(ls -A "$PREFIX") ]] && [[ ! -f $PREFIX/$STAMP ]]; then
  echo "k8s: $PREFIX holds something else than an install of scripts/k8s.sh; choose another" >&2
  exit 1
fi

# shellcheck source=scripts/lib/debian.sh
source "$here/lib/debian.sh"
work=$(mktemp -d)
stage=$PREFIX.new.$$
old=$PREFIX.old.$$
trap 'rm -rf "$work" "$stage"' EXIT
debian_apt_init "$work/apt" trixie bookworm
debian_download "$work/debs" "${PACKAGES[@]}"
mkdir -p "$stage/root" "$stage/bin"
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$stage/root"; done

# Relative links, so that the staged folder keeps working once renamed to PREFIX.
link() { ln -s "../root/$2" "$stage/bin/$1"; }
link etcd usr/bin/etcd
link containerd usr/bin/containerd
link ctr usr/bin/ctr
link containerd-shim-runc-v2 usr/bin/containerd-shim-runc-v2
link runc usr/sbin/runc
ln -s root/usr/lib/cni "$stage/cni"
for b in etcd containerd ctr containerd-shim-runc-v2 runc; do
  if ! out=$("$stage/bin/$b" --version 2>&1 </dev/null) && ! out=$("$stage/bin/$b" -v 2>&1); then
    echo "k8s: $b from Debian does not run here: $out" >&2
    exit 1
  fi
done
[[ -x $stage/cni/bridge && -x $stage/cni/host-local && -x $stage/cni/loopback ]] || {
  echo "k8s: the CNI plugins (bridge, host-local, loopback) are missing from the package" >&2
  exit 1
}

echo "k8s: unpacking Kubernetes from $TOOLKIT"
for b in "${KUBE_BINS[@]}"; do
  xz -dc "$TOOLKIT/bin/$b.xz" >"$stage/bin/$b"
  chmod 755 "$stage/bin/$b"
done
if ! (cd "$stage/bin" && sha256sum --quiet -c "$TOOLKIT/bin/SHA256SUMS"); then
  echo "k8s: the unpacked binaries do not match $TOOLKIT/bin/SHA256SUMS" >&2
  exit 1
fi
printf '%s\n' "$want" >"$stage/$STAMP"

if [[ -e $PREFIX ]]; then mv "$PREFIX" "$old"; fi
mv "$stage" "$PREFIX"
rm -rf "$old"
echo "k8s: $("$PREFIX/bin/kubelet" --version), etcd $("$PREFIX/bin/etcd" --version |
  awk '/etcd Version/ {print $3}'), $("$PREFIX/bin/containerd" --version | awk '{print $3}')," \
  "runc $("$PREFIX/bin/runc" --version | awk 'NR==1 {print $3}') installed in $PREFIX"
