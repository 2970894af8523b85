#!/usr/bin/env bash
# Node tokens through the CLI, against a real `paladin server --node-tokens-only` and real
# `paladin agent`s (root, emulated GPUs): the server makes no fleet-wide agent token and refuses to
# make one; `paladin tokens create --scope agent:node-a` makes node-a's, which `paladin agent
# --token-file` uses unchanged as node-a, while an agent calling itself node-b with it never
# registers (the 403 naming node-a is in its log). Needs root (exits 77 without).
#
# usage: agent_tokens_cli_test.sh PALADIN
set -uo pipefail

PALADIN=$(readlink -f "${1:?usage: agent_tokens_cli_test.sh PALADIN}")
[[ $(id -u) == 0 ]] || { echo "SKIP: needs root"; exit 77; }

source "$(dirname "$0")/seclib.sh"
sec_scratch agenttokens
DATA=$TMP/server
"$PALADIN" server --listen 127.0.0.1:0 --data "$DATA" --node-tokens-only >"$DATA.log" 2>&1 &
SEC_PIDS+=($!)
for _ in $(seq 300); do [[ -s $DATA/server.url && -s $DATA/admin.token ]] && break; sleep 0.1; done
URL=$(head -n1 "$DATA/server.url" 2>/dev/null)
export PALADIN_TOKEN
PALADIN_TOKEN=$(head -n1 "$DATA/admin.token" 2>/dev/null)
[[ -n $URL && -n $PALADIN_TOKEN ]] || { echo "FAIL: no server; its log:" >&2; cat "$DATA.log" >&2; exit 1; }

# No fleet-wide token: none on disk, and none to be made.
[[ -e $DATA/agent.token ]] && fail "--node-tokens-only made $DATA/agent.token"
if timeout 60 "$PALADIN" tokens create --scope agent --server "$URL" >"$TMP/out" 2>"$TMP/err"; then
  tally allowed
  fail "a fleet-wide agent token was made: $(cat "$TMP/out")"
elif grep -q "agent:NODE" "$TMP/err"; then
  tally refused
else
  tally allowed
  fail "refused without naming node tokens: $(cat "$TMP/err")"
fi

(umask 077; timeout 60 "$PALADIN" tokens create --scope agent:node-a --name node-a --server "$URL" \
  >"$TMP/node-a.token" 2>"$TMP/err") || { echo "FAIL: tokens create: $(cat "$TMP/err")" >&2; exit 1; }
grep -q '^pal_' "$TMP/node-a.token" || { echo "FAIL: no secret on stdout" >&2; exit 1; }

start_agent() {  # NAME: an agent with node-a's token calling itself NAME
  "$PALADIN" agent --server "$URL" --token-file "$TMP/node-a.token" --name "$1" \
    --data "$TMP/agent-$1" --emulated-gpus 1x16GiB --migrate-port $((20000 + RANDOM % 12000)) \
    >"$TMP/agent-$1.log" 2>&1 &
  SEC_PIDS+=($!)
}
nodes() { timeout 30 "$PALADIN" nodes --json --server "$URL" 2>/dev/null; }
start_agent node-a
start_agent node-b
for _ in $(seq 300); do
  nodes | grep -q '"name": "node-a"' && grep -q "cannot register" "$TMP/agent-node-b.log" && break
  sleep 0.1
done
if nodes | grep -q '"name": "node-a"'; then
  echo "node-a registered with its own token"
else
  fail "node-a did not register with its token; its log: $(tail -5 "$TMP/agent-node-a.log")"
fi
sleep 2  # node-b keeps trying meanwhile
if nodes | grep -q '"name": "node-b"'; then
  tally allowed
  fail "node-a's token registered node-b"
elif grep "cannot register" "$TMP/agent-node-b.log" | grep -q "node-a"; then
  tally refused
else
  tally allowed
  fail "node-b's refusal does not name node-a: $(tail -5 "$TMP/agent-node-b.log")"
fi
sec_report "agent tokens (CLI)"
