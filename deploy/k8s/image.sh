#!/usr/bin/env bash
# The image of Paladin's components in a cluster (scheduler, webhook, node): the `paladin`
# program with the shared libraries it links, and the interposers and emulated driver that the
# node copies into its library folder, written as an OCI layout tarball by tests/k8s/oci_image.sh
# (no registry, no image tool). Load it on each node (`ctr -n k8s.io images import OUT.tar`) or
# push it to a registry of yours and name it in the kustomization (`kustomize edit set image`).
#
#   deploy/k8s/image.sh BUILD_DIR OUT.tar [NAME:TAG]   (default paladin.local/paladin:dev)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $# -ge 2 ]] || { sed -n '/^#   deploy/p' "$0" >&2; exit 2; }
build=$1 out=$2 name=${3:-paladin.local/paladin:dev}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Without debug information (a debug build's `paladin` is ten times the size).
strip --strip-debug -o "$work/paladin" "$build/paladin"
files=(-f "$work/paladin:/usr/local/bin/paladin")
for lib in libpaladin-cuda.so libpaladin-nvml.so libpaladin-emucuda.so paladin-gpu-call; do
  # Where `paladin` looks for them: BIN/../lib/paladin (quota::FindLibraries,
  # ckpt::FindHelperProgram).
  files+=(-f "$build/$lib:/usr/local/lib/paladin/$lib")
done
"$here/../../tests/k8s/oci_image.sh" -o "$out" -n "$name" "${files[@]}" -- /usr/local/bin/paladin
