#!/usr/bin/env bash
# Idle connections on the agent's local socket (local_socket_flood.py says how), against a real
# `paladin server` and `paladin agent` (root, emulated GPU). Needs root and setpriv (exits 77
# without).
#
# usage: local_socket_flood_test.sh PALADIN
set -uo pipefail

PALADIN=$(readlink -f "${1:?usage: local_socket_flood_test.sh PALADIN}")
[[ $(id -u) == 0 ]] || { echo "SKIP: needs root"; exit 77; }
PY=/usr/bin/python3  # the system's: nobody cannot run a python under root's home
[[ -x $PY ]] || { echo "SKIP: $PY is not installed"; exit 77; }
command -v setpriv >/dev/null || { echo "SKIP: setpriv is not installed"; exit 77; }

source "$(dirname "$0")/seclib.sh"
sec_scratch sockflood
chmod 0755 "$TMP"
cp "$(dirname "$0")/local_socket_flood.py" "$TMP/" && chmod 0644 "$TMP/local_socket_flood.py"
sec_start_server "$TMP/server"
SOCK=$TMP/agent.sock
"$PALADIN" agent --server "$URL" --token-file "$AGENT_TOKEN_FILE" --name node-a \
  --data "$TMP/agent" --emulated-gpus 1x16GiB --local-socket "$SOCK" \
  --migrate-port $((20000 + RANDOM % 20000)) >"$TMP/agent.log" 2>&1 &
SEC_PIDS+=($!)
for _ in $(seq 300); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || { echo "FAIL: the agent made no socket" >&2; cat "$TMP/agent.log" >&2; exit 1; }

"$PY" "$TMP/local_socket_flood.py" main "$SOCK" "$URL" "$ADMIN"
rc=$?
if ((rc != 0)); then
  echo "--- the agent's log:" >&2
  tail -30 "$TMP/agent.log" >&2
fi
exit $rc
