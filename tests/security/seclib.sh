# Shared by the security label's shell tests: a scratch folder, a `paladin server` on loopback,
# and the tally every test prints at its end ("security: WHAT: tried N, refused N").
# Needs PALADIN (the binary) set by the caller. The tests that speak to a node agent's local socket
# as other uids also start an agent (sec_start_agent) and run python scripts (sec_run_py).

SEC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

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

# sec_need_agent_tools: exits 77 (skipped) unless the test runs as root with the system's python
# and setpriv (to speak to the agent's socket as other uids); sets PY to that python (nobody
# cannot run a python under root's home).
sec_need_agent_tools() {
  [[ $(id -u) == 0 ]] || { echo "SKIP: needs root"; exit 77; }
  PY=/usr/bin/python3
  [[ -x $PY ]] || { echo "SKIP: $PY is not installed"; exit 77; }
  command -v setpriv >/dev/null || { echo "SKIP: setpriv is not installed"; exit 77; }
}

# sec_start_agent: `paladin agent` node-a for the server of sec_start_server, one emulated GPU,
# its data in $TMP/agent and its local socket at SOCK (set here); fails the test with the
# agent's log when no socket appears.
sec_start_agent() {
  SOCK=$TMP/agent.sock
  "$PALADIN" agent --server "$URL" --token-file "$AGENT_TOKEN_FILE" --name node-a \
    --data "$TMP/agent" --emulated-gpus 1x16GiB --local-socket "$SOCK" \
    --migrate-port $((20000 + RANDOM % 12000)) >"$TMP/agent.log" 2>&1 &
  SEC_PIDS+=($!)
  local _
  for _ in $(seq 300); do [[ -S $SOCK ]] && break; sleep 0.1; done
  [[ -S $SOCK ]] || { echo "FAIL: the agent made no socket" >&2; cat "$TMP/agent.log" >&2; exit 1; }
}

# sec_copy_scripts FILE...: copies FILEs of this folder and agent_socket.py (which they import)
# into $TMP, readable by every uid.
sec_copy_scripts() {
  local f
  for f in "$@" agent_socket.py; do
    cp "$SEC_DIR/$f" "$TMP/" && chmod 0644 "$TMP/$f"
  done
}

# sec_run_py SCRIPT ARGS...: runs $TMP/SCRIPT with PY, and shows the end of the agent's log when
# it fails; returns its status.
sec_run_py() {
  local rc=0
  "$PY" "$TMP/$1" "${@:2}" || rc=$?
  if ((rc != 0)); then
    echo "--- the agent's log:" >&2
    tail -30 "$TMP/agent.log" >&2
  fi
  return $rc
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
