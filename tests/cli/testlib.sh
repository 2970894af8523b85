# Shared by the CLI end-to-end scripts: check bookkeeping and the refusal check.
# Needs PALADIN (the binary) set by the caller; counts failures in $failures.

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
pass() { echo "ok: $*"; }

# A sanitizer report means a crash even when the exit code is small (ASan exits with 1).
crashed() { grep -qE 'Sanitizer|runtime error:' <<<"$1"; }

# expect_error WHAT PATTERN... -- ARGS...
# Runs paladin with ARGS and expects a refusal within LIMIT_S seconds (default 120): a non-zero
# exit below 128 (not killed by a signal), no sanitizer report, and every PATTERN in what it
# printed.
expect_error() {
  local what=$1
  shift
  local -a patterns=()
  while [[ $1 != -- ]]; do
    patterns+=("$1")
    shift
  done
  shift
  local out rc=0 limit=${LIMIT_S:-120}
  out=$(timeout "$limit" "$PALADIN" "$@" 2>&1) || rc=$?
  if ((rc == 124)); then
    fail "$what: still running after $limit s"
    return
  fi
  if ((rc == 0)); then
    fail "$what: exited 0; output: $out"
    return
  fi
  if ((rc >= 128)) || crashed "$out"; then
    fail "$what: crashed (exit $rc); output: $out"
    return
  fi
  local p
  for p in "${patterns[@]}"; do
    if ! grep -qF -- "$p" <<<"$out"; then
      fail "$what: output lacks '$p'; output: $out"
      return
    fi
  done
  pass "$what (exit $rc)"
}

# check_sh CONDITION WHAT: passes or fails WHAT by a shell expression.
check_sh() {
  if eval "$1"; then pass "$2"; else
    fail "$2"
    return 1
  fi
}

# wait_for SECONDS CONDITION: polls a shell expression every 0.5 s until it holds (0) or the time
# is up (1).
wait_for() {
  local seconds=$1 condition=$2
  for _ in $(seq 1 $((seconds * 2))); do
    eval "$condition" && return 0
    sleep 0.5
  done
  return 1
}

# free_port [COUNT]: a TCP port P with P..P+COUNT-1 free now, for a test's listeners, by the
# tests' one rule (tests/free_port.py: random, below the kernel's ephemeral range).
free_port() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/../free_port.py" "${1:-1}"
}
