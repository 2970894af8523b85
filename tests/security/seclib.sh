# Shared by the security label's shell tests: a scratch folder, a `paladin server` on loopback,
# and the tally every test prints at its end ("security: WHAT: tried N, refused N").
# Needs PALADIN (the binary) set by the caller.

tried=0
refused=0
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
# One attack tried; `refused` when it was.
tally() {
  tried=$((tried + 1))
  if [[ $1 == refused ]]; then refused=$((refused + 1)); fi
}

SEC_PIDS=()
# sec_scratch NAME: a scratch folder in $TMP, removed with every process started through this
# library when the test exits; the CLI gets a home of its own there (no caller's server or token).
sec_scratch() {
  TMP=$(mktemp -d "/tmp/paladin-$1.XXXXXX")
  trap sec_cleanup EXIT
  unset PALADIN_SERVER PALADIN_TOKEN
  export PALADIN_HOME=$TMP/home
  mkdir -p "$PALADIN_HOME"
}
sec_cleanup() {
  local p
  for p in "${SEC_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${SEC_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$TMP"
}

# sec_start_server DIR: `paladin server` on 127.0.0.1 with its data in DIR; sets URL, ADMIN and
# AGENT_TOKEN_FILE, or fails the test with the server's log.
sec_start_server() {
  local dir=$1
  "$PALADIN" server --listen 127.0.0.1:0 --data "$dir" >"$dir.log" 2>&1 &
  SEC_PIDS+=($!)
  local _
  for _ in $(seq 300); do
    [[ -s $dir/server.url && -s $dir/admin.token && -s $dir/agent.token ]] && break
    sleep 0.1
  done
  URL=$(head -n1 "$dir/server.url" 2>/dev/null)
  ADMIN=$(head -n1 "$dir/admin.token" 2>/dev/null)
  AGENT_TOKEN_FILE=$dir/agent.token
  if [[ -z $URL || -z $ADMIN ]]; then
    echo "FAIL: paladin server did not start; its log:" >&2
    cat "$dir.log" >&2
    exit 1
  fi
}

# sec_report WHAT: prints the tally and the verdict; the test's exit status.
sec_report() {
  echo "security: $1: tried $tried, refused $refused"
  if ((failures > 0)); then
    echo "$1: $failures failure(s)" >&2
    return 1
  fi
  echo "$1: all passed"
}
