#!/usr/bin/env bash
# A team's environment at submit, end to end against a real `paladin server` on loopback (no
# agent: jobs stay pending): each variable that steers the loader or glibc, each one Paladin
# sets, and each malformed name or value is refused with a 400 whose error names the variable;
# no job is created by any of them, the server keeps answering, and an ordinary environment is
# accepted (the CLI's --env refuses the same way).
#
# usage: env_api_test.sh PALADIN
set -uo pipefail

PALADIN=$(readlink -f "${1:?usage: env_api_test.sh PALADIN}")
for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed"; exit 0; }
done

source "$(dirname "$0")/seclib.sh"
sec_scratch envapi
sec_start_server "$TMP/data"
timeout 60 "$PALADIN" quota alpha --gpus 2 --gpu-mem 80GiB --server "$URL" --token "$ADMIN" \
  >/dev/null || { echo "FAIL: paladin quota alpha" >&2; exit 1; }
TEAM=$(timeout 60 "$PALADIN" tokens create --scope team:alpha --name alpha --server "$URL" \
  --token "$ADMIN")
[[ $TEAM == pal_* ]] || { echo "FAIL: no team token ($TEAM)" >&2; exit 1; }

jobs_now() {
  curl -s --max-time 20 -H "Authorization: Bearer $ADMIN" "$URL/v1/jobs" | jq 'length'
}

# submit_env ENV-JSON: POSTs a job with that "env"; sets $code and $body.
submit_env() {
  # Through a file: a value over 128 KiB cannot be one argument of a command.
  printf '{"command": ["/bin/true"], "gpu_mem": "1GiB", "env": %s}' "$1" >"$TMP/request"
  code=$(curl -s -o "$TMP/body" -w '%{http_code}' --max-time 20 -X POST \
    -H "Authorization: Bearer $TEAM" -H 'Content-Type: application/json' \
    --data-binary "@$TMP/request" "$URL/v1/jobs")
  body=$(tr -d '\0' <"$TMP/body")
}

before=$(jobs_now)
# expect_refused NAME-IN-ERROR ENV-JSON
expect_refused() {
  local name=$1 env=$2
  submit_env "$env"
  if [[ $code != 400 ]]; then
    fail "env ${env:0:80}: answered $code (expected 400): ${body:0:200}"
    tally tried
  elif ! jq -e --arg n "$name" '.error | type == "string" and contains($n)' <<<"$body" \
    >/dev/null 2>&1; then
    fail "env ${env:0:80}: the error does not name '$name': ${body:0:200}"
    tally tried
  else
    tally refused
  fi
}

for v in LD_PRELOAD LD_AUDIT LD_LIBRARY_PATH LD_BIND_NOW LD_DEBUG LD_PROFILE LD_ORIGIN_PATH \
  LD_USE_LOAD_BIAS GCONV_PATH GETCONF_DIR GLIBC_TUNABLES HOSTALIASES LOCALDOMAIN LOCPATH \
  MALLOC_TRACE NIS_PATH NLSPATH RESOLV_HOST_CONF RES_OPTIONS TZDIR PALADIN_QUOTA_REGION \
  PALADIN_EMU_STATE PALADIN_JOB PALADIN_WORKLOAD_INIT CUDA_VISIBLE_DEVICES \
  CUDA_MPS_PIPE_DIRECTORY; do
  expect_refused "$v" "{\"OK\": \"1\", \"$v\": \"/tmp/evil.so\"}"
done
expect_refused "is not a variable name" '{"A=B": "x"}'
expect_refused "is not a variable name" '{"": "x"}'
expect_refused "is not a variable name" '{"1X": "x"}'
expect_refused "is not a variable name" '{"A B": "x"}'
expect_refused "is not a variable name" '{"LD_PRELOAD\u0000": "x"}'
expect_refused "NUL" '{"A": "x\u0000LD_PRELOAD=/tmp/evil.so"}'
expect_refused "expected a string" '{"A": 1}'
expect_refused "expected an object" '["LD_PRELOAD=/tmp/evil.so"]'
big=$(head -c 140000 /dev/zero | tr '\0' x)
expect_refused "bytes" "{\"BIG\": \"$big\"}"

after=$(jobs_now)
[[ $before == "$after" ]] || fail "refused submits created jobs: $before before, $after after"
curl -sf --max-time 10 "$URL/healthz" >/dev/null || fail "/healthz does not answer afterwards"

# What jobs do use is accepted; a refused variable is refused through the CLI too.
submit_env '{"PYTHONPATH": "/opt/lib", "TMPDIR": "/scratch", "WANDB_API_KEY": "a=b=c"}'
if [[ $code != 201 && $code != 200 ]]; then
  fail "an ordinary env was refused: $code ${body:0:200}"
fi
out=$(timeout 60 "$PALADIN" submit --gpu-mem 1GiB --env LD_PRELOAD=/tmp/evil.so --server "$URL" \
  --token "$TEAM" -- /bin/true 2>&1)
rc=$?
if [[ $rc == 0 || $out != *LD_PRELOAD* ]]; then
  fail "paladin submit --env LD_PRELOAD=...: exit $rc, said: ${out:0:300}"
  tally tried
else
  tally refused
fi

sec_report "env at submit"
