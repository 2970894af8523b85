#!/usr/bin/env bash
# Builds CRIU 4.2.1 from Debian forky's source package with Paladin's patches
# (scripts/criu-patches/*.patch) and installs it into its own prefix, never over the CRIU of
# scripts/criu.sh. Needed for post-copy moves (criu dump/restore --lazy-pages) on machines whose
# root lacks CAP_SYS_RESOURCE: there the stock page server fails at the first page it serves
# (docs/lazy_migration.md says why). The build tools come from the machine's own Debian release,
# unpacked into a scratch folder: the system's apt sources and installed packages are untouched.
#
#   scripts/criu_lazy.sh [PREFIX]      (default: /opt/paladin/criu-lazy)
#   scripts/criu.sh --patched-lazy [PREFIX]   (the same)
#
# Use it with PALADIN_CRIU=PREFIX/criu, or run PREFIX/criu by hand. Idempotent: a prefix whose
# CRIU already carries these patches (its wrapper names their hash) is left alone.
set -euo pipefail
cd "$(dirname "$0")"
PATCHES=$PWD/criu-patches
PREFIX=${1:-/opt/paladin/criu-lazy}
PREFIX=${PREFIX%/}
WRAPPER=$PREFIX/criu
SUITE=forky
VERSION=4.2.1
patch_hash=$(cat "$PATCHES"/*.patch | sha256sum | cut -c1-16)

if [[ -x $WRAPPER ]] && grep -qs "patches $patch_hash" "$WRAPPER" &&
   "$WRAPPER" --version 2>/dev/null | grep -q "^Version: $VERSION"; then
  echo "criu_lazy: CRIU $VERSION with patches $patch_hash in $PREFIX"
  exit 0
fi
if [[ -e $PREFIX ]] && [[ -n $(ls -A "$PREFIX") ]] &&
   ! grep -qs 'scripts/criu_lazy.sh' "$WRAPPER"; then
  echo "criu_lazy: $PREFIX holds something else than a CRIU of scripts/criu_lazy.sh" >&2
  exit 1
fi
[[ $(id -u) -eq 0 ]] || { echo "criu_lazy: run as root" >&2; exit 1; }
for tool in apt-get dpkg-deb make gcc patch; do
  command -v $tool >/dev/null || { echo "criu_lazy: $tool is needed" >&2; exit 1; }
done
# CRIU builds its TLS only where it finds GnuTLS (without it, silently none). Paladin's moves no
# longer use it (the page relays seal the stream, docs/lazy_migration.md), but patches 0008 and
# 0009 change that code: the build keeps it, as it was tested.
if [[ ! -e /usr/include/gnutls/gnutls.h ]]; then
  echo "criu_lazy: GnuTLS's headers are needed (Debian: libgnutls28-dev): patches 0008 and 0009" \
    "change CRIU's TLS code" >&2
  exit 1
fi

# The mirror this machine already uses for Debian (never a hard-coded host).
# shellcheck source=scripts/lib/debian.sh
source "$PWD/lib/debian.sh"
mirror=$(debian_mirror)
[[ -n $mirror ]] || { echo "criu_lazy: no Debian mirror in /etc/apt/sources.list*" >&2; exit 1; }
release=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[[ -n $release ]] || { echo "criu_lazy: no VERSION_CODENAME in /etc/os-release" >&2; exit 1; }
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
apt_for() {  # apt options with private lists and a one-line sources file of its own
  local dir=$work/apt-$1
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  echo "$2" >"$dir/sources.list"
  APT=(-o Dir::Etc::sourcelist="$dir/sources.list" -o Dir::Etc::sourceparts=-
    -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache" -o APT::Get::List-Cleanup=0
    -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  apt-get -qq "${APT[@]}" update
}

echo "criu_lazy: fetching CRIU $VERSION's source from Debian $SUITE ($mirror)"
apt_for src "deb-src [signed-by=$keyring] $mirror $SUITE main"
mkdir -p "$work/src"
# Only the upstream tarball is used (Debian's own changes are packaging). apt checks each file
# against the signed index and keeps only those that match; a mirror missing the .debian.tar
# still yields the tarball.
(cd "$work/src" && apt-get -qq "${APT[@]}" source --download-only criu >/dev/null 2>&1) || true
orig=$(ls "$work"/src/criu_"$VERSION".orig.tar.* 2>/dev/null | head -1 || true)
[[ -n $orig ]] || { echo "criu_lazy: Debian $SUITE has no criu $VERSION source" >&2; exit 1; }
tar -xf "$orig" -C "$work/src"
tree=$work/src/criu-$VERSION
for p in "$PATCHES"/*.patch; do
  patch -d "$tree" -p1 --quiet --forward <"$p" ||
    { echo "criu_lazy: $p does not apply" >&2; exit 1; }
done

echo "criu_lazy: fetching the build tools from Debian $release into a scratch folder"
apt_for bin "deb [signed-by=$keyring] $mirror $release main"
sysroot=$work/sysroot
mkdir -p "$work/debs" "$sysroot"
(cd "$work/debs" && apt-get -qq "${APT[@]}" download libprotobuf-c-dev libprotobuf-c1 \
  protobuf-c-compiler libprotoc32 libprotobuf32 libprotobuf-dev protobuf-compiler libnl-3-dev \
  libnl-3-200 libnet1-dev libnet1 libbsd-dev libbsd0 libmd-dev libmd0 libcap-dev libcap2 uuid-dev \
  libuuid1 libnftables-dev libnftables1 libnftnl11 libmnl0 libjansson4 libxtables12 libgmp10)
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$sysroot"; done
libdirs="$sysroot/usr/lib/x86_64-linux-gnu:$sysroot/lib/x86_64-linux-gnu"

echo "criu_lazy: building (a few minutes on 2 cores)"
(
  cd "$tree"
  export PATH=$sysroot/usr/bin:$PATH LD_LIBRARY_PATH=$libdirs
  # The compiler's own search paths: CRIU's feature probes (nftables') compile without
  # USERCFLAGS.
  export C_INCLUDE_PATH=$sysroot/usr/include LIBRARY_PATH=$libdirs
  export PKG_CONFIG_PATH=$sysroot/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=$sysroot
  # CRIU's images/Makefile compiles descriptor.proto from /usr/include; make it here first.
  mkdir -p images/google/protobuf
  protoc --proto_path="$sysroot/usr/include" --c_out=images \
    "$sysroot/usr/include/google/protobuf/descriptor.proto"
  # -L goes with the compiler flags: CRIU's library probe links with them, and LDFLAGS on the
  # command line would replace the flags its parasite blobs are linked with.
  make -j"$(nproc)" USERCFLAGS="-I$sysroot/usr/include -L${libdirs//:/ -L}" criu \
    >"$work/make.log" 2>&1 || { tail -30 "$work/make.log" >&2; exit 1; }
)

stage=$PREFIX.new.$$
rm -rf "$stage"
mkdir -p "$stage/sbin" "$stage/lib"
cp "$tree/criu/criu" "$stage/sbin/criu"
# Libraries the binary needs that the system lacks travel with it from the scratch folder, and
# then those they need (a library found only once its parent is there: libnftables' libnftnl).
for _ in 1 2 3; do
  while read -r lib; do
    for d in ${libdirs//:/ }; do
      [[ -e $d/$lib ]] && { cp -L "$d/$lib" "$stage/lib/"; break; }
    done
  done < <(LD_LIBRARY_PATH=$stage/lib ldd "$stage/sbin/criu" | awk '$3 == "not" {print $1}')
done
if grep -q 'not found' <<<"$(LD_LIBRARY_PATH=$stage/lib ldd "$stage/sbin/criu")"; then
  echo "criu_lazy: libraries missing:" >&2
  LD_LIBRARY_PATH=$stage/lib ldd "$stage/sbin/criu" | grep 'not found' >&2
  rm -rf "$stage"
  exit 1
fi
cat >"$stage/criu" <<WRAP
#!/bin/sh
# CRIU $VERSION from Debian $SUITE's source with scripts/criu-patches (patches $patch_hash),
# built by scripts/criu_lazy.sh.
LD_LIBRARY_PATH=$PREFIX/lib
export LD_LIBRARY_PATH
exec "$PREFIX/sbin/criu" "\$@"
WRAP
chmod 755 "$stage/criu"
grep -q "^Version: $VERSION" <<<"$(LD_LIBRARY_PATH=$stage/lib "$stage/sbin/criu" --version)" ||
  { echo "criu_lazy: the built CRIU does not run" >&2; rm -rf "$stage"; exit 1; }
grep -q libgnutls <<<"$(LD_LIBRARY_PATH=$stage/lib ldd "$stage/sbin/criu")" ||
  { echo "criu_lazy: the built CRIU has no TLS (GnuTLS not found)" >&2; rm -rf "$stage"; exit 1; }
# Its network lock must be scripts/criu.sh's (nftables): a job whose connections CRIU keeps is
# dumped by this binary too (post-copy and streaming moves).
grep -q libnftables <<<"$(LD_LIBRARY_PATH=$stage/lib ldd "$stage/sbin/criu")" ||
  { echo "criu_lazy: the built CRIU has no nftables network lock" >&2; rm -rf "$stage"; exit 1; }
rm -rf "$PREFIX.old.$$"
if [[ -e $PREFIX ]]; then mv "$PREFIX" "$PREFIX.old.$$"; fi
mv "$stage" "$PREFIX"
rm -rf "$PREFIX.old.$$"
echo "criu_lazy: $("$WRAPPER" --version | head -1) with patches $patch_hash installed in $PREFIX"
