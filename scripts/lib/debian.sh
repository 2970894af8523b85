# shellcheck shell=bash
# Sourced by scripts that install packages of another Debian suite into a private prefix
# (scripts/criu.sh, scripts/k8s.sh) without touching the system's apt sources, lists or
# installed packages. Needs bash, apt-get and apt-cache.
#
#   debian_mirror                  the Debian mirror this machine already uses, or nothing
#   debian_apt_init WORK SUITE...  a private apt state in WORK reading SUITEs from that mirror;
#                                  sets DEBIAN_APT, the options to give apt-get and apt-cache
#   debian_download DIR PKG...     downloads PKGs (NAME or NAME/SUITE) as .deb files into DIR

# The first http(s) URI of a Debian source in deb822 or one-line format (never a hard-coded
# host: the project names no package registry).
debian_mirror() {
  { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}'
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; break } }'
  } | grep -v -- '-security' | grep -E '/debian/?$' | head -1 || true
}

debian_apt_init() {
  local work=$1 mirror suite
  shift
  mirror=$(debian_mirror)
  if [[ -z $mirror ]]; then
    echo "debian: no Debian mirror found in /etc/apt/sources.list*" >&2
    return 1
  fi
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
  : >"$work/sources.list"
  for suite in "$@"; do
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" \
      >>"$work/sources.list"
  done
  DEBIAN_APT=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=-
    -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o APT::Get::List-Cleanup=0
    -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  echo "debian: reading Debian $* from $mirror"
  apt-get -qq "${DEBIAN_APT[@]}" update
}

debian_download() {
  local dir=$1
  shift
  mkdir -p "$dir"
  (cd "$dir" && apt-get -qq "${DEBIAN_APT[@]}" download "$@")
}
