#!/usr/bin/env bash
# The web dashboard in a real browser: starts `paladin server` and one `paladin agent` with two
# emulated GPUs, submits two jobs of two teams through the API, waits until they run, then loads
# the dashboard in headless Chromium and checks, from the DOM, that the running jobs' names,
# states, nodes and quota/used bytes are what the API says at about the same time; that every
# node and GPU is shown (emulated ones named as such); that the selected job's usage chart is
# drawn; that a team token's view holds nothing of the other team's job; that a refused token is
# shown as an error; and that the page as served loads nothing from elsewhere. It saves a
# screenshot (dashboard.png, and dashboard-team.png) in $PALADIN_BROWSER_OUT (default: the
# current directory) and prints their paths.
#
# Usage: browser_test.sh PALADIN_BINARY
# Exits 77 (skipped) when no Chromium (or curl, python3) is installed.
# KEEP_WORK=1 keeps the scratch folder (logs, DOM dumps) for a look after a failure.
set -euo pipefail

readonly PALADIN=${1:?usage: browser_test.sh PALADIN_BINARY}
HERE=$(cd "$(dirname "$0")" && pwd)
readonly HERE
OUT_DIR=${PALADIN_BROWSER_OUT:-$PWD}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
readonly OUT_DIR

CHROMIUM=${CHROMIUM:-}
if [[ -z $CHROMIUM ]]; then
  for c in chromium chromium-browser google-chrome-stable google-chrome; do
    if command -v "$c" >/dev/null 2>&1; then CHROMIUM=$(command -v "$c"); break; fi
  done
fi
if [[ -z $CHROMIUM ]]; then
  echo "SKIP: no chromium (or chromium-browser, google-chrome) on PATH"
  exit 77
fi
for tool in curl python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then echo "SKIP: no $tool"; exit 77; fi
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/paladin-browser.XXXXXX")
chmod 755 "$WORK"  # the workloads run as nobody and must reach their run folders
readonly WORK
SERVER_PID=""
AGENT_PID=""
URL=""
ADMIN=""
JOBS=()
FAILED=0

log() { printf '%s\n' "$*"; }
pass() { log "ok: $*"; }
fail() { log "FAIL: $*"; FAILED=$((FAILED + 1)); }
die() {  # to stderr: it may run inside $(...)
  {
    log "FAIL: $*"
    for f in server.log agent.log; do
      if [[ -s $WORK/$f ]]; then log "--- last lines of $f ---"; tail -n 25 "$WORK/$f"; fi
    done
  } >&2
  exit 1
}

# http TOKEN METHOD PATH [BODY]: sets HTTP_STATUS and HTTP_BODY; never fails the script.
HTTP_STATUS=0
HTTP_BODY=""
http() {
  local token=$1 method=$2 path=$3 body=${4:-} out
  local args=(-sS --max-time 20 -X "$method" -H "Authorization: Bearer $token" -o "$WORK/http.body"
              -w '%{http_code}')
  if [[ -n $body ]]; then args+=(-H 'Content-Type: application/json' --data-binary "$body"); fi
  out=$(curl "${args[@]}" "$URL$path" 2>"$WORK/http.err") || out=000
  HTTP_STATUS=$out
  HTTP_BODY=$(cat "$WORK/http.body" 2>/dev/null || true)
}
# json EXPR: evaluates the Python expression EXPR with d = the JSON in HTTP_BODY.
json() {
  python3 -c 'import json, sys; d = json.loads(sys.stdin.read()); v = eval(sys.argv[1]); print("" if v is None else v)' \
    "$1" <<<"$HTTP_BODY"
}

stop_pid() {  # PID NAME: SIGTERM, then SIGKILL after 10 s
  local pid=$1 i
  [[ -n $pid ]] || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "note: $2 ($pid) ignored SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$? id i pid left
  set +e
  trap - EXIT
  # The workloads run in PID namespaces of their own and ignore SIGTERM: cancel them through
  # the API first, so the agent kills them.
  if [[ -n $URL && -n $ADMIN ]]; then
    for id in "${JOBS[@]}"; do http "$ADMIN" POST "/v1/jobs/$id/cancel" "{}"; done
    for ((i = 0; i < 50 && ${#JOBS[@]} > 0; i++)); do
      left=0
      for id in "${JOBS[@]}"; do
        http "$ADMIN" GET "/v1/jobs/$id"
        case $(json 'd.get("state")' 2>/dev/null) in
          cancelled | succeeded | failed | "") ;;
          *) left=1 ;;
        esac
      done
      ((left)) || break
      sleep 0.2
    done
    # The agent hears of a cancel in its next heartbeat (1 s); its --kill-on-exit covers the rest.
    ((${#JOBS[@]} > 0)) && sleep 2.5
  fi
  stop_pid "$AGENT_PID" agent
  stop_pid "$SERVER_PID" server
  # Anything of ours still alive (a workload the agent did not get to): each job carries
  # BROWSER_TEST_MARK=$WORK in its environment.
  while read -r pid; do
    [[ -n $pid && $pid != "$$" ]] || continue
    log "note: killing leftover workload process $pid"
    kill -KILL "$pid" 2>/dev/null
  done < <(grep -lsaF "BROWSER_TEST_MARK=$WORK" /proc/[0-9]*/environ 2>/dev/null |
           sed -n 's|^/proc/\([0-9]*\)/environ$|\1|p')
  if [[ ${KEEP_WORK:-0} == 1 || $rc -ne 0 ]]; then
    log "scratch folder kept: $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# chrome OUTFILE URL [extra flags...]: --dump-dom into OUTFILE (or a screenshot with flags).
chrome() {
  local outfile=$1 url=$2
  shift 2
  local profile
  profile=$(mktemp -d "$WORK/chrome.XXXXXX")
  timeout -k 5 120 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --no-first-run --no-default-browser-check --disable-extensions --disable-background-networking \
    --enable-logging=stderr --user-data-dir="$profile" --window-size=1400,900 --virtual-time-budget=8000 \
    "$@" "$url" >"$outfile" 2>>"$WORK/chrome.log"
}

# --- the server ---

mkdir -p "$WORK/server"
"$PALADIN" server --listen 127.0.0.1:0 --data "$WORK/server" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for ((i = 0; i < 300; i++)); do
  [[ -s $WORK/server/server.url && -s $WORK/server/admin.token ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || die "paladin server exited early"
  sleep 0.1
done
[[ -s $WORK/server/server.url ]] || die "paladin server wrote no server.url in 30 s"
URL=$(tr -d '[:space:]' <"$WORK/server/server.url")
URL=${URL%/}
ADMIN=$(tr -d '[:space:]' <"$WORK/server/admin.token")
pass "server at $URL"

curl -sS --max-time 10 -D "$WORK/page.headers" -o "$WORK/page.html" "$URL/" ||
  die "GET / failed"
if grep -qi '^content-type: *text/html' "$WORK/page.headers"; then
  pass "GET / is text/html"
else
  fail "GET / content type: $(grep -i '^content-type' "$WORK/page.headers" || echo none)"
fi
python3 "$HERE/dom_check.py" page "$WORK/page.html" || FAILED=$((FAILED + 1))

# --- teams, a team token, the agent ---


http "$ADMIN" PUT /v1/teams/vision '{"max_gpus": 4, "priority": 0}'
[[ $HTTP_STATUS == 200 || $HTTP_STATUS == 201 ]] || die "PUT /v1/teams/vision: $HTTP_STATUS $HTTP_BODY"
http "$ADMIN" PUT /v1/teams/nlp '{"max_gpus": 4, "priority": 0}'
[[ $HTTP_STATUS == 200 || $HTTP_STATUS == 201 ]] || die "PUT /v1/teams/nlp: $HTTP_STATUS $HTTP_BODY"
http "$ADMIN" POST /v1/tokens '{"scope": "team:vision", "name": "browser-test"}'
[[ $HTTP_STATUS == 201 ]] || die "POST /v1/tokens: $HTTP_STATUS $HTTP_BODY"
VISION=$(json 'd["token"]')

"$PALADIN" agent --server "$URL" --token-file "$WORK/server/agent.token" --name node-a \
  --data "$WORK/a" --emulated-gpus 2x80GiB --migrate-port "$(python3 "$HERE/../free_port.py" 2)" --kill-on-exit \
  >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
for ((i = 0; i < 300; i++)); do
  kill -0 "$AGENT_PID" 2>/dev/null || die "paladin agent exited early"
  http "$ADMIN" GET /v1/nodes
  if [[ $HTTP_STATUS == 200 ]] &&
     [[ $(json '[(n["state"], len(n["gpus"])) for n in d["nodes"] if n["name"] == "node-a"]') == "[('alive', 2)]" ]]; then
    break
  fi
  sleep 0.2
done
[[ $(json '[(n["state"], len(n["gpus"])) for n in d["nodes"] if n["name"] == "node-a"]') == "[('alive', 2)]" ]] ||
  die "node-a is not alive with 2 GPUs after 60 s: $HTTP_BODY"
pass "agent node-a registered with 2 GPUs"

# --- two jobs of two teams ---

submit() {  # NAME TEAM -> prints the id
  local body
  body=$(python3 -c 'import json, sys; print(json.dumps({"name": sys.argv[1], "team": sys.argv[2],
    "command": ["sleep", "600"], "gpu_mem": "1GiB", "env": {"BROWSER_TEST_MARK": sys.argv[3]}}))' \
    "$1" "$2" "$WORK")
  http "$ADMIN" POST /v1/jobs "$body"
  [[ $HTTP_STATUS == 201 ]] || die "POST /v1/jobs ($1): $HTTP_STATUS $HTTP_BODY"
  json 'd["id"]'
}
JOB_A=$(submit browser-vision-job vision)
JOBS+=("$JOB_A")
JOB_B=$(submit browser-nlp-job nlp)
JOBS+=("$JOB_B")
pass "submitted $JOB_A (vision) and $JOB_B (nlp)"

for ((i = 0; i < 450; i++)); do
  running=0
  for id in "$JOB_A" "$JOB_B"; do
    http "$ADMIN" GET "/v1/jobs/$id"
    [[ $(json 'd.get("state")') == running ]] && running=$((running + 1))
  done
  ((running == 2)) && break
  sleep 0.2
done
if ((running != 2)); then
  for id in "$JOB_A" "$JOB_B"; do
    http "$ADMIN" GET "/v1/jobs/$id"
    log "$id: $HTTP_BODY"
  done
  die "the jobs do not both run after 90 s"
fi
pass "both jobs run"
sleep 2  # a few heartbeats: measured use and usage samples

# --- the admin view, against the API at about the same time (retried: values move) ---

snapshot() {  # SUFFIX
  http "$ADMIN" GET /v1/jobs
  printf '%s' "$HTTP_BODY" >"$WORK/jobs.$1.json"
  http "$ADMIN" GET /v1/summary
  printf '%s' "$HTTP_BODY" >"$WORK/summary.$1.json"
}
admin_ok=0
for attempt in 1 2 3; do
  snapshot before
  chrome "$WORK/admin.dom.html" "$URL/#token=$ADMIN" --dump-dom || log "note: chromium exited $?"
  snapshot after
  http "$ADMIN" GET /v1/nodes
  printf '%s' "$HTTP_BODY" >"$WORK/nodes.json"
  if python3 "$HERE/dom_check.py" admin "$WORK/admin.dom.html" "$WORK/jobs.before.json" \
       "$WORK/jobs.after.json" --summary "$WORK/summary.before.json" "$WORK/summary.after.json" \
       --nodes "$WORK/nodes.json" >"$WORK/admin.check" 2>&1; then
    admin_ok=1
    break
  fi
  log "note: attempt $attempt: the admin view differs from the API:"
  grep -E '^(FAIL|Traceback)' "$WORK/admin.check" || tail -n 5 "$WORK/admin.check"
done
cat "$WORK/admin.check"
((admin_ok)) || fail "the admin view does not match the API"
python3 "$HERE/dom_check.py" absent "$WORK/admin.dom.html" "$ADMIN" || fail "the admin token leaks into the page"

# --- a selected job: its usage chart ---

chrome "$WORK/job.dom.html" "$URL/#token=$ADMIN&job=$JOB_A" --dump-dom || log "note: chromium exited $?"
python3 "$HERE/dom_check.py" chart "$WORK/job.dom.html" "$JOB_A" || fail "the job view"

# --- a team token sees its own job only ---

chrome "$WORK/team.dom.html" "$URL/#token=$VISION" --dump-dom || log "note: chromium exited $?"
python3 "$HERE/dom_check.py" team "$WORK/team.dom.html" "$JOB_A" "$JOB_B" browser-nlp-job ||
  fail "the team view"

# --- a refused token ---

chrome "$WORK/bad.dom.html" "$URL/#token=pal_not_a_token" --dump-dom || log "note: chromium exited $?"
python3 "$HERE/dom_check.py" badtoken "$WORK/bad.dom.html" || fail "the refused-token view"

# --- screenshots ---

shot() {  # FILE URL
  rm -f "$1"
  chrome /dev/null "$2" --screenshot="$1" --hide-scrollbars || log "note: chromium exited $?"
  if [[ -s $1 ]] && [[ $(head -c 8 "$1" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] &&
     (($(stat -c %s "$1") > 10000)); then
    pass "screenshot: $1 ($(stat -c %s "$1") bytes)"
  else
    fail "no screenshot in $1"
  fi
}
shot "$OUT_DIR/dashboard.png" "$URL/#token=$ADMIN&job=$JOB_A"
shot "$OUT_DIR/dashboard-team.png" "$URL/#token=$VISION"

# --- no script errors in any of the loads ---

if grep -E 'CONSOLE.*Uncaught' "$WORK/chrome.log"; then
  fail "the page threw script errors (above)"
else
  pass "no uncaught script errors in $(grep -c 'CONSOLE' "$WORK/chrome.log" || true) console lines"
fi

if ((FAILED)); then
  log "FAILED: $FAILED check group(s); logs in $WORK"
  exit 1
fi
log "PASS: the dashboard shows what the API says (screenshot: $OUT_DIR/dashboard.png)"
