#!/usr/bin/env bash
# Installs CRIU 4.x into a private prefix from Debian 13's packages (Debian 12's CRIU 3.17 fails on
# current kernels), without touching the system's apt sources or installed packages, and writes
# a wrapper that runs it through the prefix's own dynamic loader. Idempotent.
#
#   scripts/criu.sh [PREFIX]     (default: $PALADIN_CRIU_PREFIX or /opt/paladin/criu)
#
# Paladin finds CRIU at $PALADIN_CRIU, else PREFIX/criu, else `criu` on the PATH (docs/ckpt.md).
set -euo pipefail
PREFIX=${1:-${PALADIN_CRIU_PREFIX:-/opt/paladin/criu}}
WRAPPER=$PREFIX/criu
SUITE=trixie
PACKAGES=(criu libcompel1 libc6 libbsd0 libmd0 libgnutls30t64 libnet1 libnftables1 libnftnl11
  libmnl0 libjansson4 libxtables12 libnl-3-200 libprotobuf-c1 libuuid1 libidn2-0 libunistring5
  libtasn1-6 libnettle8t64 libhogweed6t64 libgmp10 libp11-kit0 libffi8 libedit2)

if [[ -x $WRAPPER ]] && "$WRAPPER" --version 2>/dev/null | grep -q '^Version: 4'; then
  echo "criu: $("$WRAPPER" --version | head -1) in $PREFIX"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "criu: run as root or install sudo" >&2; exit 1; }
  SUDO=sudo
fi

# The mirror this machine already uses for Debian (never a hard-coded host): the first http(s)
# URI of a Debian source in deb822 or one-line format.
mirror=$(
  { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}'
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; break } }'
  } | grep -v -- '-security' | grep -E '/debian/?$' | head -1 || true)
if [[ -z $mirror ]]; then
  echo "criu: no Debian mirror found in /etc/apt/sources.list*; cannot fetch CRIU 4" >&2
  exit 1
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
echo "deb [signed-by=$keyring] $mirror $SUITE main" >"$work/sources.list"
APT=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=-
  -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o APT::Get::List-Cleanup=0
  -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
echo "criu: fetching CRIU and its libraries from Debian $SUITE ($mirror)"
apt-get -qq "${APT[@]}" update
(cd "$work/debs" && apt-get -qq "${APT[@]}" download "${PACKAGES[@]}")

$SUDO mkdir -p "$PREFIX"
for deb in "$work"/debs/*.deb; do $SUDO dpkg-deb -x "$deb" "$PREFIX"; done
libs="$PREFIX/lib/x86_64-linux-gnu:$PREFIX/usr/lib/x86_64-linux-gnu"
loader=$PREFIX/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
[[ -e $loader ]] || loader=$PREFIX/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
$SUDO tee "$WRAPPER" >/dev/null <<WRAP
#!/bin/sh
# CRIU from Debian $SUITE, run through its own loader and libraries (scripts/criu.sh).
exec "$loader" --library-path "$libs" "$PREFIX/usr/sbin/criu" "\$@"
WRAP
$SUDO chmod 755 "$WRAPPER"
echo "criu: $("$WRAPPER" --version | head -1) installed in $PREFIX"
