#!/usr/bin/env bash
# Installs CRIU 4.2 into a private prefix from Debian forky's packages, without touching the
# system's apt sources or installed packages, and writes a wrapper that runs it through the
# prefix's own dynamic loader and libraries. Debian 12's CRIU 3.17 fails on current kernels, and
# 4.1 (Debian 13) cannot dump a process holding an inet socket on Linux 6.16 or newer (the kernel
# refuses SO_PASSCRED there, which CRIU before 4.2 reads on every socket). Idempotent: a prefix
# that already runs CRIU 4.2 or newer is left alone; an older one is replaced.
#
#   scripts/criu.sh [PREFIX]     (default: $PALADIN_CRIU_PREFIX or /opt/paladin/criu)
#   scripts/criu.sh --patched-lazy [PREFIX]   CRIU 4.2.1 built with scripts/criu-patches for
#       post-copy moves (scripts/criu_lazy.sh; default /opt/paladin/criu-lazy)
#
# Paladin finds CRIU at $PALADIN_CRIU, else PREFIX/criu, else `criu` on the PATH (docs/ckpt.md).
set -euo pipefail
if [[ ${1:-} == --patched-lazy ]]; then
  shift
  exec bash "$(dirname "$0")/criu_lazy.sh" "$@"
fi
PREFIX=${1:-${PALADIN_CRIU_PREFIX:-/opt/paladin/criu}}
PREFIX=${PREFIX%/}
WRAPPER=$PREFIX/criu
SUITE=forky
# 4.2 or newer (the first version that dumps inet sockets on Linux 6.16+).
NEEDED='^Version: (4\.([2-9]|[1-9][0-9])|[5-9]|[1-9][0-9])'

if [[ -x $WRAPPER ]] && "$WRAPPER" --version 2>/dev/null | grep -Eq "$NEEDED"; then
  echo "criu: $("$WRAPPER" --version | head -1) in $PREFIX"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "criu: run as root or install sudo" >&2; exit 1; }
  SUDO=sudo
fi

# shellcheck source=scripts/lib/debian.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs"
echo "criu: fetching CRIU and its libraries from Debian $SUITE"
debian_apt_init "$work/apt" "$SUITE"
APT=("${DEBIAN_APT[@]}")
# criu and everything it depends on, recursively (Depends and Pre-Depends only; virtual
# packages, printed in <angle brackets>, are provided by one of the real ones listed).
mapfile -t packages < <(apt-cache "${APT[@]}" depends --recurse --no-recommends --no-suggests \
  --no-conflicts --no-breaks --no-replaces --no-enhances criu | grep -E '^[a-z0-9]' | sort -u)
(cd "$work/debs" && apt-get -qq "${APT[@]}" download "${packages[@]}")

# The prefix is replaced whole: refuse a folder that is not one of ours (or empty).
if [[ -e $PREFIX ]] && [[ -n $(ls -A "$PREFIX") ]] && ! grep -qs 'scripts/criu.sh' "$WRAPPER"; then
  echo "criu: $PREFIX holds something else than a CRIU of scripts/criu.sh; choose another" >&2
  exit 1
fi
# Unpacked next to the prefix and checked there, then swapped in: a CRIU already running from
# the old prefix keeps its files, and a failed fetch leaves the old prefix as it was.
stage=$PREFIX.new.$$
old=$PREFIX.old.$$
$SUDO rm -rf "$stage"
$SUDO mkdir -p "$stage"
for deb in "$work"/debs/*.deb; do $SUDO dpkg-deb -x "$deb" "$stage"; done
loader_in() {
  local l
  for l in "$1/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \
           "$1/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"; do
    [[ -e $l ]] && { echo "$l"; return; }
  done
}
libs_in() { echo "$1/lib/x86_64-linux-gnu:$1/usr/lib/x86_64-linux-gnu"; }
loader=$(loader_in "$stage")
[[ -n $loader ]] || { echo "criu: no dynamic loader among the fetched packages" >&2; exit 1; }
# Every library CRIU loads must come from the prefix (its libc may be newer than the system's).
deps=$("$loader" --library-path "$(libs_in "$stage")" --list "$stage/usr/sbin/criu")
if grep -q 'not found' <<<"$deps" || [[ -n $(grep '=>' <<<"$deps" | grep -v "=> $stage/") ]]; then
  echo "criu: libraries missing from the prefix:" >&2
  grep -v "=> $stage/" <<<"$deps" | grep '=>' >&2
  $SUDO rm -rf "$stage"
  exit 1
fi
version=$("$loader" --library-path "$(libs_in "$stage")" "$stage/usr/sbin/criu" --version | head -1)
if ! grep -Eq "$NEEDED" <<<"$version"; then
  echo "criu: Debian $SUITE has CRIU '$version'; 4.2 or newer is needed" >&2
  $SUDO rm -rf "$stage"
  exit 1
fi

loader=${loader/#$stage/$PREFIX}
$SUDO tee "$stage/criu" >/dev/null <<WRAP
#!/bin/sh
# CRIU from Debian $SUITE, run through its own loader and libraries (scripts/criu.sh).
exec "$loader" --library-path "$(libs_in "$PREFIX")" "$PREFIX/usr/sbin/criu" "\$@"
WRAP
$SUDO chmod 755 "$stage/criu"
if [[ -e $PREFIX ]]; then $SUDO mv "$PREFIX" "$old"; fi
$SUDO mv "$stage" "$PREFIX"
$SUDO rm -rf "$old"
echo "criu: $("$WRAPPER" --version | head -1) installed in $PREFIX"
