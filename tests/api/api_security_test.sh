#!/usr/bin/env bash
# The API's security, end to end: a real `paladin server` on loopback (no agent, so jobs stay
# pending), two teams with a token each, and
#   1. no token (or a wrong one) -> 401 with a JSON error, through curl and the CLI (exit 3);
#   2. team A cannot see or touch team B's job: not in ps, and show, logs, cancel, migrate,
#      explain, usage each refused (404/403), through curl and the CLI; not in /metrics, /v1/nodes,
#      /v1/events; team A cannot use admin or agent endpoints;
#   3. a few hundred malformed or hostile requests (bad JSON, a body over 1 MiB, wrong types,
#      negative sizes, path tricks, %2e%2e, very long ids, unicode, NUL bytes) each get a 4xx
#      with a JSON {"error": ...};
#   4. afterwards the server still answers /healthz and both jobs are still there, untouched.
#
# usage: api_security_test.sh PALADIN
set -uo pipefail

PALADIN=${1:?usage: api_security_test.sh PALADIN}
PALADIN=$(readlink -f "$PALADIN")
for tool in curl jq python3; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed"; exit 0; }
done

failures=0
checks=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
  checks=$((checks + 1))
}
pass() {
  checks=$((checks + 1))
  [[ -n ${VERBOSE:-} ]] && echo "ok: $*"
  return 0
}

TMP=$(mktemp -d /tmp/paladin-apisec.XXXXXX)
DATA=$TMP/data
SERVER_PID=
cleanup() {
  if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The CLI must not pick up the caller's server or token.
unset PALADIN_SERVER PALADIN_TOKEN
export PALADIN_HOME=$TMP/home
mkdir -p "$PALADIN_HOME" "$DATA"

# --- the server ---
"$PALADIN" server --listen 127.0.0.1:0 --data "$DATA" >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 300); do
  [[ -s $DATA/server.url && -s $DATA/admin.token ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
if [[ ! -s $DATA/server.url || ! -s $DATA/admin.token ]]; then
  echo "FAIL: paladin server wrote no $DATA/server.url and admin.token; its log:" >&2
  cat "$TMP/server.log" >&2
  exit 1
fi
URL=$(head -n1 "$DATA/server.url")
ADMIN=$(head -n1 "$DATA/admin.token")
AGENT=$(head -n1 "$DATA/agent.token" 2>/dev/null)
for _ in $(seq 100); do
  curl -s -o /dev/null "$URL/healthz" && break
  sleep 0.1
done
echo "server at $URL (pid $SERVER_PID)"

# http METHOD PATH TOKEN [BODY]: sets $code and $body (the path is sent as written).
http() {
  local method=$1 path=$2 token=$3 data=${4-}
  local -a args=(-s --path-as-is -o "$TMP/body" -w '%{http_code}' -X "$method" --max-time 20)
  [[ -n $token ]] && args+=(-H "Authorization: Bearer $token")
  if [[ $# -ge 4 ]]; then
    args+=(-H 'Content-Type: application/json' --data-binary "$data")
  fi
  code=$(curl "${args[@]}" "$URL$path")
  body=$(tr -d '\0' <"$TMP/body" 2>/dev/null)
}

json_error() { jq -e 'type == "object" and (.error | type == "string" and length > 0)' \
  <<<"$body" >/dev/null 2>&1; }

# expect_http WHAT CODES METHOD PATH TOKEN [BODY]: the status is one of CODES ("401" or
# "403|404") and a 4xx comes with a JSON error.
expect_http() {
  local what=$1 codes=$2
  shift 2
  http "$@"
  if [[ ! $code =~ ^($codes)$ ]]; then
    fail "$what: $1 $2 answered $code (expected $codes): ${body:0:200}"
  elif [[ $code == 4* ]] && ! json_error; then
    fail "$what: $1 $2 answered $code without a JSON error: ${body:0:200}"
  else
    pass "$what"
  fi
}

# cli WHAT EXPECTED-EXIT TOKEN ARGS...: runs paladin against the server; sets $out.
cli() {
  local what=$1 expected=$2 token=$3
  shift 3
  local rc=0
  out=$(timeout 60 "$PALADIN" "$@" --server "$URL" --token "$token" 2>&1) || rc=$?
  if [[ ! $rc =~ ^($expected)$ ]]; then
    fail "$what: paladin $* exited $rc (expected $expected): ${out:0:300}"
    return 1
  fi
  pass "$what"
}

# --- setup through the CLI: two teams, a token each, a job each ---
cli "quota alpha" 0 "$ADMIN" quota alpha --gpus 2 --gpu-mem 80GiB
cli "quota beta" 0 "$ADMIN" quota beta --gpus 2 --gpu-mem 80GiB
TA=$(timeout 60 "$PALADIN" tokens create --scope team:alpha --name alpha-ci --server "$URL" \
  --token "$ADMIN" 2>"$TMP/err")
TB=$(timeout 60 "$PALADIN" tokens create --scope team:beta --name beta-ci --server "$URL" \
  --token "$ADMIN" 2>>"$TMP/err")
if [[ $TA != pal_* || $TB != pal_* ]]; then
  echo "FAIL: paladin tokens create gave '$TA' and '$TB': $(cat "$TMP/err")" >&2
  exit 1
fi
JA=$(timeout 60 "$PALADIN" submit --name train-a --gpu-mem 1GiB --server "$URL" --token "$TA" \
  -- sleep 1000 2>"$TMP/err")
JB=$(timeout 60 "$PALADIN" submit --name train-b --gpu-mem 1GiB --server "$URL" --token "$TB" \
  --env SECRET=beta-only -- sleep 1000 2>>"$TMP/err")
if [[ ! $JA =~ ^j-[0-9]+$ || ! $JB =~ ^j-[0-9]+$ ]]; then
  echo "FAIL: paladin submit gave '$JA' and '$JB': $(cat "$TMP/err")" >&2
  exit 1
fi
echo "team alpha: job $JA; team beta: job $JB"

# --- 1. authentication ---
for path in /v1/jobs "/v1/jobs/$JA" "/v1/jobs/$JB/logs" /v1/nodes /v1/teams /v1/tokens \
  /v1/events /v1/summary /v1/move-costs /metrics; do
  expect_http "no token" 401 GET "$path" ""
  expect_http "unknown token" 401 GET "$path" "pal_0000000000000000000000000000000000000000"
done
expect_http "no token: submit" 401 POST /v1/jobs "" '{"command": ["true"]}'
expect_http "no token: cancel" 401 POST "/v1/jobs/$JB/cancel" "" '{}'
expect_http "no token: register" 401 POST /v1/agents/register "" '{"name": "x"}'
for header in "Bearer" "Bearer " "Basic $(printf 'admin:admin' | base64)" "bearer $ADMIN" \
  "Bearer $ADMIN$ADMIN" "Bearer ${ADMIN:0:20}" "Token $ADMIN"; do
  code=$(curl -s -o "$TMP/body" -w '%{http_code}' -H "Authorization: $header" "$URL/v1/jobs")
  body=$(tr -d '\0' <"$TMP/body")
  if [[ $header == "bearer $ADMIN" && $code == 200 ]]; then
    pass "lower-case bearer scheme accepted (RFC 7235: the scheme is case-insensitive)"
  elif [[ $code != 401 ]] || ! json_error; then
    fail "Authorization '${header:0:30}...' answered $code: ${body:0:200}"
  else
    pass "bad Authorization header"
  fi
done
# The digest the server stores is not a token.
DIGEST=$(printf '%s' "$ADMIN" | sha256sum | cut -d' ' -f1)
expect_http "the token's digest is no token" 401 GET /v1/jobs "$DIGEST"
expect_http "the token's digest is no token" 401 GET /v1/jobs "pal_$DIGEST"
# The CLI: no token anywhere -> exit 3 and a message that says so.
rc=0
out=$(timeout 60 "$PALADIN" ps --server "$URL" 2>&1) || rc=$?
if [[ $rc == 3 && $out == *"paladin ps:"* ]]; then pass "CLI without a token"; else
  fail "paladin ps without a token exited $rc: $out"; fi
cli "CLI with a bad token" 3 pal_nope ps
# A revoked token stops working at once.
TR=$(timeout 60 "$PALADIN" tokens create --scope team:alpha --name short-lived --server "$URL" \
  --token "$ADMIN" 2>/dev/null)
TR_ID=$(timeout 60 "$PALADIN" tokens list --json --server "$URL" --token "$ADMIN" |
  jq -r '.tokens[] | select(.name == "short-lived") | .id')
expect_http "token before revoke" 200 GET /v1/jobs "$TR"
cli "tokens revoke" 0 "$ADMIN" tokens revoke "$TR_ID"
expect_http "revoked token" 401 GET /v1/jobs "$TR"
# Token secrets never appear in listings.
http GET /v1/tokens "$ADMIN"
if [[ $code == 200 && $body != *"$TA"* && $body != *"$ADMIN"* && $body != *pal_* ]]; then
  pass "tokens list shows no secrets"
else
  fail "GET /v1/tokens ($code) shows a secret or failed: ${body:0:300}"
fi

# --- 2. team isolation ---
http GET /v1/jobs?all=1 "$TA"
if [[ $code == 200 && $body == *"$JA"* && $body != *"$JB"* ]]; then pass "team A lists its own job only"
else fail "team A's GET /v1/jobs ($code): ${body:0:300}"; fi
http GET "/v1/jobs?all=1&team=beta" "$TA"
if [[ $code != 200 || $body != *"$JB"* ]]; then pass "team A cannot list with team=beta"
else fail "team A's GET /v1/jobs?team=beta shows $JB"; fi
expect_http "team A: show B's job" "403|404" GET "/v1/jobs/$JB" "$TA"
expect_http "team A: B's logs" "403|404" GET "/v1/jobs/$JB/logs?stream=stdout" "$TA"
expect_http "team A: B's stderr" "403|404" GET "/v1/jobs/$JB/logs?stream=stderr&tail=10" "$TA"
expect_http "team A: B's usage" "403|404" GET "/v1/jobs/$JB/usage" "$TA"
expect_http "team A: explain B's job" "403|404" GET "/v1/jobs/$JB/explain" "$TA"
expect_http "team A: cancel B's job" "403|404" POST "/v1/jobs/$JB/cancel" "$TA" '{}'
expect_http "team A: migrate B's job" "403|404" POST "/v1/jobs/$JB/migrate" "$TA" '{"to": "node-x"}'
expect_http "team A: checkpoint B's job" "403|404" POST "/v1/jobs/$JB/checkpoint" "$TA" '{}'
expect_http "team A: resume B's job" "403|404" POST "/v1/jobs/$JB/resume" "$TA" '{}'
# 404 and not 403: a team cannot learn that another team's job exists.
http GET "/v1/jobs/$JB" "$TA"
ghost=$(printf 'j-%06d' 999999)
http GET "/v1/jobs/$ghost" "$TA"
ghost_code=$code
http GET "/v1/jobs/$JB" "$TA"
if [[ $code == "$ghost_code" ]]; then pass "B's job looks like no job to team A"
else fail "team A gets $code for B's job but $ghost_code for no job: existence leaks"; fi
http GET "/v1/events?job=$JB" "$TA"
if [[ $code == 4* || ($code == 200 && $body != *"$JB"*) ]]; then pass "team A: B's events"
else fail "team A sees B's events ($code): ${body:0:300}"; fi
http GET /v1/events "$TA"
if [[ $code == 200 && $body != *"$JB"* ]]; then pass "team A: all events hide B's job"
else fail "team A's GET /v1/events ($code) shows $JB: ${body:0:300}"; fi
http GET /metrics "$TA"
if [[ $code == 200 && $body != *"$JB"* && $body != *'team="beta"'* ]]; then pass "team A: /metrics"
else fail "team A's /metrics ($code) shows team beta or $JB: ${body:0:300}"; fi
http GET /v1/nodes "$TA"
if [[ $code == 200 && $body != *"$JB"* ]]; then pass "team A: /v1/nodes"
else fail "team A's /v1/nodes ($code) shows $JB: ${body:0:300}"; fi
http GET /v1/teams "$TA"
if [[ $code == 200 && $(jq -r '[.teams[].name] | join(",")' <<<"$body") == alpha ]]; then
  pass "team A sees only its team"
else fail "team A's GET /v1/teams ($code): ${body:0:300}"; fi
http GET /v1/summary "$TA"
if [[ $code == 200 && $body != *"$JB"* ]]; then pass "team A: summary"
else fail "team A's GET /v1/summary ($code): ${body:0:300}"; fi
# Admin-only and agent-only endpoints.
expect_http "team A: list tokens" 403 GET /v1/tokens "$TA"
expect_http "team A: the fleet's measured moves" 403 GET /v1/move-costs "$TA"
if cli "admin: paladin move-costs" 0 "$ADMIN" move-costs &&
  [[ $out != "from,to,gpu_bytes,host_bytes,pause_s" ]]; then
  fail "paladin move-costs with no move yet printed more than the CSV header: ${out:0:300}"
fi
cli "team A: paladin move-costs refused" "[1-9]" "$TA" move-costs
expect_http "team A: make an admin token" 403 POST /v1/tokens "$TA" '{"scope": "admin"}'
expect_http "team A: make a token for B" 403 POST /v1/tokens "$TA" '{"scope": "team:beta"}'
expect_http "team A: revoke a token" "403|404" DELETE /v1/tokens/1 "$TA"
expect_http "team A: raise its quota" 403 PUT /v1/teams/alpha "$TA" '{"max_gpus": 64}'
expect_http "team A: change B's quota" "403|404" PUT /v1/teams/beta "$TA" '{"max_gpus": 0}'
expect_http "team A: drain" "403|404" POST /v1/nodes/node-a/drain "$TA" '{}'
expect_http "team A: inject a fault" "403|404" POST /v1/nodes/node-a/gpus/0/fault "$TA" \
  '{"kind": "xid", "code": 79}'
expect_http "team A: register as an agent" 403 POST /v1/agents/register "$TA" \
  '{"name": "evil", "address": "127.0.0.1", "migrate_port": 7100, "gpus": [], "jobs": []}'
expect_http "team A: heartbeat" "403|404" POST /v1/agents/node-a/heartbeat "$TA" '{"gpus": [], "jobs": []}'
expect_http "team A: commit a migration" "403|404" POST /v1/migrations/1/commit "$TA" '{}'
if [[ -n $AGENT ]]; then
  expect_http "agent token: list jobs" 403 GET /v1/jobs "$AGENT"
  expect_http "agent token: submit" 403 POST /v1/jobs "$AGENT" '{"command": ["true"]}'
  expect_http "agent token: tokens" 403 GET /v1/tokens "$AGENT"
fi
# Submitting as another team: either refused or charged to the caller's own team.
http POST /v1/jobs "$TA" '{"name": "sneaky", "team": "beta", "command": ["true"], "gpu_mem": "1GiB"}'
if [[ $code == 4* ]] && json_error; then pass "team A cannot submit as B"
elif [[ $code == 201 && $(jq -r .team <<<"$body") == alpha ]]; then
  pass "team A's submit as B is charged to A"
  http POST "/v1/jobs/$(jq -r .id <<<"$body")/cancel" "$TA" '{}'
else fail "team A submitting as beta answered $code: ${body:0:300}"; fi

# The CLI, as team A.
cli "CLI ps as A" 0 "$TA" ps --all
if [[ $out == *"$JA"* && $out != *"$JB"* ]]; then pass "CLI ps as A"; else
  fail "paladin ps as team A: $out"; fi
cli "CLI ps --team beta as A" "0|1|3" "$TA" ps --all --team beta
[[ $out != *"$JB"* ]] && pass "CLI ps --team beta" || fail "paladin ps --team beta as A: $out"
cli "CLI show B's job as A" 1 "$TA" show "$JB"
[[ $out == "paladin show: "* ]] && pass "CLI show message" || fail "paladin show said: $out"
cli "CLI logs of B's job as A" 1 "$TA" logs "$JB"
cli "CLI stderr of B's job as A" 1 "$TA" logs --stderr --tail 5 "$JB"
cli "CLI cancel B's job as A" "1|3" "$TA" cancel "$JB"
cli "CLI migrate B's job as A" "1|3" "$TA" job migrate "$JB" --to node-x --no-wait
cli "CLI checkpoint B's job as A" "1|3" "$TA" job checkpoint "$JB" --no-wait
cli "CLI resume B's job as A" "1|3" "$TA" job resume "$JB" --no-wait
cli "CLI explain B's job as A" 1 "$TA" explain "$JB"
cli "CLI events as A" "0|1" "$TA" events --job "$JB" --json
[[ $out != *"\"$JB\""* || $out == *error* ]] && pass "CLI events" || fail "paladin events as A: $out"
cli "CLI nodes as A" 0 "$TA" nodes --json
[[ $out != *"$JB"* ]] && pass "CLI nodes" || fail "paladin nodes as A shows $JB"
cli "CLI top as A" 0 "$TA" top --once
[[ $out != *"$JB"* ]] && pass "CLI top" || fail "paladin top as A shows $JB"
cli "CLI quota as A" 3 "$TA" quota alpha --gpus 64
cli "CLI tokens create as A" 3 "$TA" tokens create --scope admin
cli "CLI drain as A" "1|3" "$TA" drain node-a
# B still sees its job, with its secret environment untouched by A's attempts.
cli "CLI show as B" 0 "$TB" show "$JB"
[[ $out == *"pending"* ]] && pass "B's job still pending" || fail "B's job after A's attempts: $out"

# --- 3. malformed and hostile requests ---
# Each line of the fuzzer's output is a failure; its last line is "checked N".
python3 - "$URL" "$ADMIN" "$TA" "$JA" "$JB" >"$TMP/fuzz.out" 2>"$TMP/fuzz.err" <<'PY'
import json, socket, sys, urllib.parse

url, admin, team_a, job_a, job_b = sys.argv[1:6]
host, port = urllib.parse.urlsplit(url).hostname, urllib.parse.urlsplit(url).port
checked = 0

def raw(method, path, token=None, body=None, headers=None, content_type="application/json"):
    """Sends one request as bytes (paths unnormalised, NULs allowed); returns (status, body)."""
    if isinstance(path, str):
        path = path.encode("utf-8", "surrogateescape")
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogateescape")
    lines = [method.encode() + b" " + path + b" HTTP/1.1", b"Host: " + host.encode(),
             b"Connection: close"]
    if token:
        lines.append(b"Authorization: Bearer " + token.encode())
    if body is not None:
        lines.append(b"Content-Type: " + content_type.encode())
        lines.append(b"Content-Length: " + str(len(body)).encode())
    for h in headers or []:
        lines.append(h if isinstance(h, bytes) else h.encode())
    head = b"\r\n".join(lines) + b"\r\n\r\n"
    s = socket.create_connection((host, port), timeout=20)
    data = b""
    try:
        s.sendall(head)
        if body:
            # A server may answer (413) before reading a large body, and close.
            try:
                s.sendall(body)
            except (BrokenPipeError, ConnectionResetError):
                pass
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        return None, "no answer within 20 s"
    finally:
        s.close()
    if not data:
        return None, "connection closed without an answer"
    head, _, rest = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ")[1])
    except (IndexError, ValueError):
        return None, "not HTTP: %r" % data[:100]
    if b"transfer-encoding: chunked" in head.lower():
        out = b""
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            n = int(size_line.split(b";")[0], 16)
            if n == 0:
                break
            out += rest[:n]
            rest = rest[n + 2:]
        rest = out
    return status, rest.decode("utf-8", "replace")

def expect_4xx(what, method, path, token=None, body=None, **kw):
    global checked
    checked += 1
    status, text = raw(method, path, token, body, **kw)
    shown = repr(path)[:80] + (" " + repr(body)[:60] if body is not None else "")
    if status is None or not 400 <= status < 500:
        print("%s: %s %s answered %s: %s" % (what, method, shown, status, text[:200]))
        return
    try:
        j = json.loads(text)
        ok = isinstance(j, dict) and isinstance(j.get("error"), str) and j["error"]
    except ValueError:
        ok = False
    if not ok:
        print("%s: %s %s answered %d without a JSON error: %r" % (what, method, shown, status,
                                                                  text[:200]))

# Bodies for POST /v1/jobs that are not JSON, not an object, or have fields of the wrong type.
bad_jobs = [
    "", "{", "}", "{]", "nul", "null", "[]", "\"job\"", "123", "true", "{\"command\": [\"x\"]} junk",
    "{\"command\": [\"x\"],}", "{'command': ['x']}", "{\"command\": [\"x\"]", b"\xef\xbb\xbf{",
    "\x00{\"command\": [\"x\"]}", "{\"command\": \"x\"}", "{\"command\": []}",
    "{\"command\": [1, 2]}", "{\"command\": [null]}", "{\"command\": {\"a\": 1}}",
    "{\"command\": null}", "{}", "{\"name\": \"x\"}",
    "{\"command\": [\"x\"], \"gpus\": \"one\"}", "{\"command\": [\"x\"], \"gpus\": -1}",
    "{\"command\": [\"x\"], \"gpus\": 0}", "{\"command\": [\"x\"], \"gpus\": 1.5}",
    "{\"command\": [\"x\"], \"gpus\": 1e300}", "{\"command\": [\"x\"], \"gpus\": 99999999999999999999}",
    "{\"command\": [\"x\"], \"gpus\": [1]}",
    "{\"command\": [\"x\"], \"priority\": \"high\"}", "{\"command\": [\"x\"], \"priority\": {}}",
    "{\"command\": [\"x\"], \"gpu_mem\": -1}", "{\"command\": [\"x\"], \"gpu_mem\": \"-8GiB\"}",
    "{\"command\": [\"x\"], \"gpu_mem\": \"8XB\"}", "{\"command\": [\"x\"], \"gpu_mem\": \"lots\"}",
    "{\"command\": [\"x\"], \"gpu_mem\": 1e30}", "{\"command\": [\"x\"], \"gpu_mem\": true}",
    "{\"command\": [\"x\"], \"gpu_mem\": \"9999999TiB\"}", "{\"command\": [\"x\"], \"gpu_mem\": [8]}",
    "{\"command\": [\"x\"], \"gpu_mem\": \"0x10\"}", "{\"command\": [\"x\"], \"gpu_mem\": \"NaN\"}",
    "{\"command\": [\"x\"], \"gpu_mem\": -0.5}", "{\"command\": [\"x\"], \"gpu_mem_max\": \"abc\"}",
    "{\"command\": [\"x\"], \"gpu_mem_max\": -5}", "{\"command\": [\"x\"], \"env\": \"A=1\"}",
    "{\"command\": [\"x\"], \"env\": [\"A=1\"]}", "{\"command\": [\"x\"], \"env\": {\"A\": 1}}",
    "{\"command\": [\"x\"], \"env\": {\"A\": null}}", "{\"command\": [\"x\"], \"name\": 5}",
    "{\"command\": [\"x\"], \"name\": \"" + "n" * 5000 + "\"}",
    "{\"command\": [\"x\"], \"name\": \"../../etc/passwd\"}",
    "{\"command\": [\"x\"], \"name\": \"a\\u0000b\"}",
    "{\"command\": [\"x\"], \"name\": \"<script>\"}",
    "{\"command\": [\"x\"], \"name\": \"\\ud800\"}",
    "[" * 100000 + "]" * 100000, "{\"a\":" * 50000 + "1" + "}" * 50000,
    # Raw bytes that are not UTF-8, inside and outside strings.
    b"\xff\xfe\xfd", b"{\"command\": [\"\xff\"]}", b"{\"command\": [\"x\"], \"name\": \"\xc3\x28\"}",
    b"{\"command\": [\"\xed\xa0\x80\"]}", b"{\"command\": [\"\xc0\xaf\"]}",
]
for body in bad_jobs:
    expect_4xx("bad job body", "POST", "/v1/jobs", admin, body)
    expect_4xx("bad job body as a team", "POST", "/v1/jobs", team_a, body)
# The team field is the admin's only (a team token may be refused or charged to its own team).
for team in ["\"../beta\"", "7", "\"t\\u00e9am\"", "\"" + "t" * 300 + "\""]:
    expect_4xx("bad team field", "POST", "/v1/jobs", admin,
               "{\"command\": [\"x\"], \"team\": " + team + "}")
expect_4xx("JSON as text/plain", "POST", "/v1/jobs", team_a, "{\"command\": 5}",
           content_type="text/plain")

# Over 1 MiB: 413, whether or not it is valid JSON.
big = "{\"command\": [\"x\"], \"name\": \"" + "a" * (2 << 20) + "\"}"
expect_4xx("body over 1 MiB", "POST", "/v1/jobs", admin, big)
expect_4xx("body over 1 MiB, no token", "POST", "/v1/jobs", None, big)
expect_4xx("body over 1 MiB to a team", "PUT", "/v1/teams/alpha", admin, "[" + "1," * (1 << 20) + "1]")
expect_4xx("Content-Length lies (huge)", "POST", "/v1/jobs", admin, None,
           headers=["Content-Type: application/json", "Content-Length: 99999999999"])
expect_4xx("Content-Length negative", "POST", "/v1/jobs", admin, None,
           headers=["Content-Type: application/json", "Content-Length: -5"])

# Paths that try to climb out of a job to endpoints team A may not use, or name odd jobs.
long_id = "j-" + "0" * 5000
tricks = [
    "/v1/jobs/../tokens", "/v1/jobs/%2e%2e/tokens", "/v1/jobs/%2E%2E/tokens",
    "/v1/jobs/..%2ftokens", "/v1/jobs/..%2Ftokens", "/v1/jobs/%2e%2e%2ftokens",
    "/v1/jobs/%252e%252e/tokens", "/v1/jobs/..;/tokens", "/v1/jobs/.%2e/tokens",
    "/v1/jobs/" + job_a + "/../../tokens", "/v1/jobs/" + job_a + "/..%2f..%2ftokens",
    "/v1//tokens", "//v1/tokens", "/v1/./tokens", "/v1/tokens/", "/v1/TOKENS", "/V1/tokens",
    "/v1/jobs/" + job_a + "/../" + job_b, "/v1/jobs/" + job_a + "%2f..%2f" + job_b,
    "/v1/jobs/" + job_a + "/..%2f" + job_b, "/v1/jobs/%2e%2e/" + job_b,
    "/v1/jobs/" + job_b + "%00", "/v1/jobs/" + job_b + "\x00", "/v1/jobs/" + job_b + "%20",
    "/v1/jobs/" + job_b + "/", "/v1/jobs/ " + job_b, "/v1/jobs/" + job_b.upper(),
    "/v1/jobs/" + job_b.replace("j-", "j-0"), "/v1/jobs/" + job_b + "?team=beta",
    "/v1/jobs/" + job_b + "#x", "/v1/jobs/" + job_b + "/logs/../explain",
    "/v1/jobs/" + long_id, "/v1/jobs/j-" + "9" * 40, "/v1/jobs/j-%ff%fe", "/v1/jobs/j-\u2203",
    b"/v1/jobs/j-\xff", b"/v1/jobs/\xc0\xae\xc0\xae/tokens", "/v1/jobs/%00", "/v1/jobs/-1", "/v1/jobs/j--1", "/v1/jobs/j-1e3",
    "/v1/jobs/*", "/v1/jobs/%", "/v1/jobs/%zz", "/v1/teams/../tokens",
    "/v1/nodes/../../etc/passwd", "/v1/nodes/..%2f..%2fetc%2fpasswd/drain",
    "/v1/agents/../tokens", "/v1/migrations/1/../../tokens", "/metrics/../v1/tokens",
    "/healthz/../v1/tokens", "/dashboard.js/../v1/tokens", "/../../../../etc/passwd",
    "/v1/jobs/" + job_b + "/logs?stream=../../etc/passwd", "/v1/no-such-endpoint",
    "/v1/" + "a/" * 3000, "/" + "%2e%2e/" * 500 + "etc/passwd",
]
for path in tricks:
    expect_4xx("path trick", "GET", path, team_a)
for path in tricks[:30]:
    as_bytes = path if isinstance(path, bytes) else path.encode("utf-8")
    expect_4xx("path trick (POST)", "POST", as_bytes + b"/cancel", team_a, "{}")
    expect_4xx("path trick (DELETE)", "DELETE", path, team_a)

# Query parameters of the wrong type or out of range.
for query in ["tail=-1", "tail=abc", "tail=99999999999999999999999", "tail=1e9",
              "stream=stdin", "stream=../../etc/passwd", "stream=%00", "stream=stdout%00stderr"]:
    expect_4xx("bad logs query", "GET", "/v1/jobs/" + job_a + "/logs?" + query, team_a)
for query in ["since=abc", "since=-1e999", "job=../tokens", "job=%00"]:
    status, text = raw("GET", "/v1/events?" + query, team_a)
    checked += 1
    if status is None or status >= 500 or (status == 200 and job_b in text):
        print("bad events query %s answered %s: %s" % (query, status, text[:200]))

# Bodies of the wrong shape for the other endpoints.
for body in ["", "{", "[]", "{\"to\": 5}", "{\"to\": null}", "{\"to\": \"node-x\", \"gpu\": \"a\"}",
             "{\"to\": \"node-x\", \"gpu\": -1}", "{\"to\": \"../x\"}", "{\"to\": \"" + "n" * 5000 + "\"}",
             "{\"to\": \"node\\u0000x\"}"]:
    expect_4xx("bad migrate body", "POST", "/v1/jobs/" + job_a + "/migrate", admin, body)
for name, body in [("alpha", "{\"max_gpus\": \"many\"}"), ("alpha", "{\"max_gpus\": -1}"),
                   ("alpha", "{\"max_gpu_mem\": \"-1GiB\"}"), ("alpha", "{\"max_gpu_mem\": \"lots\"}"),
                   ("alpha", "{\"priority\": \"top\"}"), ("alpha", "[1]"), ("alpha", "{"),
                   ("..", "{\"max_gpus\": 1}"), ("%2e%2e", "{\"max_gpus\": 1}"),
                   ("a%2fb", "{\"max_gpus\": 1}"), ("t%C3%A9am", "{\"max_gpus\": 1}"),
                   ("a" * 200, "{\"max_gpus\": 1}"), ("%00", "{\"max_gpus\": 1}"),
                   ("-x", "{\"max_gpus\": 1}"), ("a%20b", "{\"max_gpus\": 1}")]:
    expect_4xx("bad team", "PUT", "/v1/teams/" + name, admin, body)
for body in ["{}", "{\"scope\": \"root\"}", "{\"scope\": \"team:\"}", "{\"scope\": \"team:../x\"}",
             "{\"scope\": 5}", "{\"scope\": \"admin \"}", "{\"scope\": \"team:a\\u0000b\"}",
             "{\"scope\": \"team:" + "t" * 300 + "\"}", "{\"scope\": \"admin\", \"name\": 5}", "[", "nul"]:
    expect_4xx("bad token request", "POST", "/v1/tokens", admin, body)
for tid in ["abc", "-1", "99999999999999999999", "%00", "1;DROP TABLE tokens"]:
    expect_4xx("bad token id", "DELETE", "/v1/tokens/" + tid, admin)
for body in ["", "{", "[]", "{\"name\": 5}", "{\"name\": \"../x\", \"gpus\": []}",
             "{\"name\": \"n\", \"gpus\": \"x\"}", "{\"name\": \"n\", \"gpus\": [{\"index\": \"a\"}]}",
             "{\"name\": \"n\", \"gpus\": [{\"index\": 0, \"memory_bytes\": -1}]}"]:
    expect_4xx("bad register", "POST", "/v1/agents/register", admin, body)
expect_4xx("heartbeat from no node", "POST", "/v1/agents/no-such-node/heartbeat", admin,
           "{\"gpus\": [], \"jobs\": []}")
expect_4xx("commit of no migration", "POST", "/v1/migrations/999999/commit", admin, "{}")
expect_4xx("commit of a bad id", "POST", "/v1/migrations/abc/commit", admin, "{}")
for body in ["{}", "{\"kind\": 5}", "{\"kind\": \"xid\", \"code\": \"x\"}"]:
    expect_4xx("fault on no node", "POST", "/v1/nodes/no-such-node/gpus/0/fault", admin, body)
expect_4xx("drain no node", "POST", "/v1/nodes/no-such-node/drain", admin, "{}")
expect_4xx("a pending job cannot migrate", "POST", "/v1/jobs/" + job_a + "/migrate", admin,
           "{\"to\": \"node-x\"}")

# Methods and headers.
for method in ["DELETE", "PATCH", "PUT"]:
    expect_4xx("method " + method, method, "/v1/jobs/" + job_a, team_a, "{}")
expect_4xx("a 10 KiB token", "GET", "/v1/jobs", "pal_" + "a" * 10240)
expect_4xx("a token with a NUL", "GET", "/v1/jobs", None,
           headers=[b"Authorization: Bearer " + admin.encode() + b"\x00x"])
expect_4xx("two Authorization headers, one bad", "GET", "/v1/tokens", None,
           headers=["Authorization: Bearer " + team_a, "Authorization: Bearer " + admin + "x"])
print("checked %d" % checked)
PY
fuzz_failures=$(grep -vc '^checked ' "$TMP/fuzz.out")
fuzz_checked=$(sed -n 's/^checked //p' "$TMP/fuzz.out")
if [[ -z $fuzz_checked ]]; then
  fail "the hostile-request run did not finish: $(tail -5 "$TMP/fuzz.err")"
else
  grep -v '^checked ' "$TMP/fuzz.out" | head -40 | sed 's/^/FAIL: hostile: /' >&2
  ((fuzz_failures > 40)) && echo "FAIL: ... and $((fuzz_failures - 40)) more" >&2
  failures=$((failures + fuzz_failures))
  checks=$((checks + fuzz_checked))
  echo "hostile requests: $fuzz_checked sent, $fuzz_failures answered wrongly"
fi

# --- 4. the server is still up and kept what it should ---
if ! kill -0 "$SERVER_PID" 2>/dev/null; then
  fail "the server died; the end of its log: $(tail -20 "$TMP/server.log")"
fi
expect_http "healthz afterwards" 200 GET /healthz ""
for job in "$JA" "$JB"; do
  http GET "/v1/jobs/$job" "$ADMIN"
  if [[ $code == 200 && $(jq -r .state <<<"$body") == pending ]]; then pass "$job kept"
  else fail "$job after the hostile requests ($code): ${body:0:300}"; fi
done
http GET "/v1/jobs/$JB" "$TB"
[[ $(jq -r .team <<<"$body") == beta ]] && pass "B's job is B's" || fail "B's job: ${body:0:300}"
cli "ps as admin afterwards" 0 "$ADMIN" ps
[[ $out == *"$JA"* && $out == *"$JB"* ]] && pass "both jobs listed" || fail "admin ps: $out"
cli "teams afterwards" 0 "$ADMIN" teams --json
[[ $(jq -r '[.teams[].name] | sort | join(",")' <<<"$out" 2>/dev/null) == *alpha*beta* ]] &&
  pass "teams kept" || fail "teams afterwards: $out"
expect_http "team A's token still works" 200 GET /v1/jobs "$TA"
expect_http "no token is still refused" 401 GET /v1/jobs ""

if grep -qE 'Sanitizer|runtime error:' "$TMP/server.log"; then
  fail "the server's log has a sanitizer report: $(grep -m3 -E 'Sanitizer|runtime error:' "$TMP/server.log")"
fi

echo "api_security: $checks checks, $failures failed"
((failures == 0))
