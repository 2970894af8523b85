#!/usr/bin/env bash
# Writes a one-layer OCI image as an OCI layout tarball (oci-layout, index.json and blobs named
# by their sha256: a manifest, a config and an uncompressed tar layer), for
# `ctr -n k8s.io images import`. No registry, no image tool: the test cluster's pause image and
# the images of Paladin's workloads in the `k8s` tests are made with it.
#
#   oci_image.sh -o OUT.tar -n NAME:TAG [-f SRC:DEST]... [-d DIR] [-e KEY=VALUE]... -- CMD [ARG]...
#
#   -f SRC:DEST   the file SRC at DEST in the image, and with it, for a dynamically linked
#                 program or library, every shared library `ldd` finds for it (at the same path
#                 as on this machine, the dynamic loader included)
#   -d DIR        DIR's contents at the image's root
#   -e KEY=VALUE  an environment variable of the image
#   CMD...        the image's entrypoint
# The layer is reproducible: same inputs, same digest.
set -euo pipefail
usage() {
  sed -n '/^#   oci_image.sh/,/^# The layer/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
out="" name="" files=() dirs=() envs=("PATH=/usr/local/bin:/usr/bin:/bin")
while getopts "o:n:f:d:e:" opt; do
  case $opt in
    o) out=$OPTARG ;;
    n) name=$OPTARG ;;
    f) files+=("$OPTARG") ;;
    d) dirs+=("$OPTARG") ;;
    e) envs+=("$OPTARG") ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ -n $out && -n $name && $# -gt 0 ]] || usage
[[ $name == *:* ]] || { echo "oci_image: image name '$name' has no :TAG" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root" "$work/layout/blobs/sha256"

# Copies FILE to the same path under the image's root, following links.
put() {
  mkdir -p "$root$(dirname "$2")"
  cp -L "$1" "$root$2"
}
for spec in "${files[@]}"; do
  src=${spec%%:*} dest=${spec#*:}
  [[ -f $src && $dest == /* && $spec == *:* ]] || {
    echo "oci_image: -f $spec: want an existing file and an absolute path, SRC:DEST" >&2
    exit 2
  }
  put "$src" "$dest"
  chmod a+rX "$root$dest"
  # ldd prints "name => /path (addr)" for libraries and "/path (addr)" for the loader; a static
  # program makes it fail, and has nothing to add.
  if libs=$(ldd "$src" 2>/dev/null); then
    while read -r lib; do
      [[ -f $lib ]] && put "$lib" "$lib"
    done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$libs")
  fi
done
for dir in "${dirs[@]}"; do
  [[ -d $dir ]] || { echo "oci_image: -d $dir: not a directory" >&2; exit 2; }
  cp -a "$dir/." "$root/"
done

# Writes stdin as a blob; prints its digest and size.
blob() {
  local tmp=$work/blob digest
  cat >"$tmp"
  digest=$(sha256sum "$tmp" | cut -d' ' -f1)
  mv "$tmp" "$work/layout/blobs/sha256/$digest"
  echo "sha256:$digest $(stat -c %s "$work/layout/blobs/sha256/$digest")"
}
json_list() {
  local sep="" s
  printf '['
  for s in "$@"; do
    s=${s//\\/\\\\}
    printf '%s"%s"' "$sep" "${s//\"/\\\"}"
    sep=,
  done
  printf ']'
}

read -r layer layer_size < <(tar -C "$root" --sort=name --mtime=@0 --owner=0 --group=0 \
  --numeric-owner --format=gnu -cf - . | blob)
read -r config config_size < <(printf '{"architecture":"amd64","os":"linux","config":{"Env":%s,"Entrypoint":%s},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
  "$(json_list "${envs[@]}")" "$(json_list "$@")" "$layer" | blob)
read -r manifest manifest_size < <(printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
  "$config" "$config_size" "$layer" "$layer_size" | blob)
printf '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest" "$manifest_size" "$name" "${name##*:}" >"$work/layout/index.json"
tar -C "$work/layout" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$out" \
  oci-layout index.json blobs
echo "oci_image: $name ($manifest, layer $((layer_size / 1024)) KiB) in $out"
