#!/usr/bin/env bash
# Installs the Debian 12 packages Paladin builds and tests with. Idempotent: does nothing when
# everything is present. Needs root (or sudo).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build git
  libcli11-dev          # command line
  libssl-dev            # HMAC-SHA256 of the transfer, SHA-256 of older images
  libxxhash-dev         # XXH3-128 chunk digests of images and the transfer
  nlohmann-json3-dev    # image manifests, job records, the API
  libcpp-httplib-dev pkg-config  # the REST API (server, agent, CLI)
  libsqlite3-dev        # the server's state
  libslurm-dev          # paladin_spank.so, the SLURM plugin (SLURM's spank.h)
  libgtest-dev libgmock-dev  # tests
  libbenchmark-dev      # bench/
  clang-format clang-tidy  # scripts/lint.sh
)

# `deps.sh --tests` adds what only the tests need: Chromium, for the dashboard's browser test;
# SLURM's daemons and MUNGE, for the SLURM integration test (tests/slurm); the headers CRIU's
# ZDTM tests include (tests/zdtm builds them from CRIU's source); PyTorch and Open MPI, for the
# distributed jobs' checkpoint tests; Go with sprig and yaml.v3, for chart_render, the stand-in
# for `helm template` that the build makes for tests/k8s/chart_test.sh (25 packages, 88 MB
# downloaded, ~390 MB installed, ~20 s to install on a 2-core machine).
if [ "${1:-}" = "--tests" ]; then
  PACKAGES+=(chromium curl python3 slurmctld slurmd slurm-client munge)
  PACKAGES+=(libaio-dev libcap-dev xz-utils)
  PACKAGES+=(openssl)  # tests/k8s: the test cluster's throwaway PKI
  # tests/k8s/chart_render: the Helm chart rendered and compared with deploy/k8s (k8s_chart)
  PACKAGES+=(golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev)
  # tests/ckpt/distributed_test.sh: a torch.distributed (gloo) job and an Open MPI one
  PACKAGES+=(python3-torch openmpi-bin libopenmpi-dev)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "deps: missing ${missing[*]}; run as root or install sudo" >&2
    exit 1
  fi
fi
echo "deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
