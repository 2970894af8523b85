#!/usr/bin/env bash
# Fetches CRIU's source of the installed CRIU's version (Debian's source package, from the mirror
# this machine's apt already uses, through a private sources list: /etc/apt is left alone) into
# CACHE and builds its ZDTM test library and the static tests of LIST there. Idempotent: a cache
# that already holds the source and the built tests is only brought up to date by make.
#
#   tests/zdtm/fetch_build.sh CACHE LIST
#
# Prints where the static tests are into CACHE/static-dir. Exits 77 (the caller skips) when the
# source cannot be had: no CRIU, no Debian mirror in the apt configuration, no network, or no
# source package of that version; 1 when the source is there but the library does not build.
# A listed test that does not build is reported here and fails in run.sh.
set -euo pipefail
CACHE=$1
LIST=$2
SUITE=forky # the suite scripts/criu.sh installs CRIU from
mkdir -p "$CACHE"
CACHE=$(realpath "$CACHE")

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

criu=${PALADIN_CRIU:-/opt/paladin/criu/criu}
[[ -x $criu ]] || criu=$(command -v criu || true)
[[ -n $criu ]] || skip "no CRIU (install it with scripts/criu.sh)"
version=$("$criu" --version 2>/dev/null | sed -n 's/^Version: *\([0-9.]*\).*/\1/p')
[[ -n $version ]] || skip "cannot tell the version of $criu"
src=$CACHE/criu-$version

if [[ ! -f $src/test/zdtm/lib/Makefile ]]; then
  # The mirror this machine already uses for Debian, found as scripts/criu.sh finds it.
  mirror=$(
    { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}'
      cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; break } }'
    } | grep -v -- '-security' | grep -E '/debian/?$' | head -1 || true)
  [[ -n $mirror ]] || skip "no Debian mirror in /etc/apt/sources.list*; cannot fetch CRIU's source"
  apt=$CACHE/apt
  rm -rf "$apt"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/src"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $SUITE main" \
    >"$apt/sources.list"
  APT=(-o Dir::Etc::sourcelist="$apt/sources.list" -o Dir::Etc::sourceparts=-
    -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache" -o APT::Get::List-Cleanup=0
    -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  echo "zdtm: fetching CRIU $version's source from Debian $SUITE ($mirror)"
  apt-get -qq "${APT[@]}" update || skip "cannot read Debian $SUITE's source index from $mirror"
  # The source package of this upstream version (Debian revision any), newest first.
  deb_version=$(apt-cache "${APT[@]}" showsrc criu 2>/dev/null |
    sed -n "s/^Version: \(\([0-9]*:\)\?${version//./\\.}-.*\)/\1/p" | sort -rV | head -1)
  [[ -n $deb_version ]] || skip "Debian $SUITE has no source package of CRIU $version"
  # Only the upstream tarball: the tests are CRIU's own, which Debian ships as released. Its
  # SHA-256 comes from the signed index apt has just checked; apt-helper verifies the download.
  read -r uri file _ hash < <(apt-get "${APT[@]}" source --print-uris "criu=$deb_version" |
    grep -E "\.orig\.tar\.[a-z0-9]+' " | tr -d "'")
  [[ -n ${uri:-} && $hash == SHA256:* ]] || skip "no upstream tarball listed for criu $deb_version"
  /usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file "$uri" "$apt/src/$file" \
    "$hash" >/dev/null || skip "cannot download $file"
  rm -rf "$src.new"
  mkdir -p "$src.new"
  tar -xf "$apt/src/$file" -C "$src.new" --strip-components=1
  rm -rf "$src"
  mv "$src.new" "$src"
  rm -rf "$apt"
fi

static=$src/test/zdtm/static
# make's jobserver of a caller (ctest under make) would not reach here; use the machine.
unset MAKEFLAGS MFLAGS
echo "zdtm: building CRIU $version's ZDTM library and tests in $static"
if ! make -s -C "$src/test/zdtm/lib" -j"$(nproc)" >"$CACHE/build-lib.log" 2>&1; then
  tail -20 "$CACHE/build-lib.log" >&2
  echo "zdtm: CRIU's ZDTM library does not build (log: $CACHE/build-lib.log)" >&2
  exit 1
fi
mapfile -t tests < <(sed -e 's/#.*//' "$LIST" | awk 'NF { print $1 }')
make -s -k -C "$static" -j"$(nproc)" "${tests[@]}" >"$CACHE/build-static.log" 2>&1 || true
missing=()
for t in "${tests[@]}"; do [[ -x $static/$t ]] || missing+=("$t"); done
if ((${#missing[@]} > 0)); then
  echo "zdtm: not built (log: $CACHE/build-static.log): ${missing[*]}" >&2
fi
# zdtm.py runs tests not marked suid as an ordinary user, who writes its files here.
chmod a+w "$static"
echo "$static" >"$CACHE/static-dir"
echo "zdtm: $((${#tests[@]} - ${#missing[@]})) of ${#tests[@]} listed tests built"
