#!/usr/bin/env bash
# Idle connections on the agent's local socket (local_socket_flood.py says how), against a real
# `paladin server` and `paladin agent` (root, emulated GPU). Needs root and setpriv (exits 77
# without).
#
# usage: local_socket_flood_test.sh PALADIN
set -uo pipefail

PALADIN=$(readlink -f "${1:?usage: local_socket_flood_test.sh PALADIN}")
source "$(dirname "$0")/seclib.sh"
sec_need_agent_tools

sec_scratch sockflood
chmod 0755 "$TMP"
sec_copy_scripts local_socket_flood.py
sec_start_server "$TMP/server"
sec_start_agent

sec_run_py local_socket_flood.py main "$SOCK" "$URL" "$ADMIN"
