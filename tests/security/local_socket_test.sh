#!/usr/bin/env bash
# The agent's local socket against a local user who is not the step's (issue: one user could
# make the agent delete another user's SLURM checkpoints). A real `paladin server` and
# `paladin agent` (root, emulated GPU); root registers SLURM step 777.0 and it has a checkpoint on
# disk. Then, as user nobody:
#   - register 777.0 (fresh, which would clear its checkpoints; or as a restart, which would hand
#     out its image), register a step of a job nobody does not run in, a negative gpu_mem;
#   - checkpoint, resume, done and "started" on 777.0 (the last with a run directory of its own);
#   - the root helper's op "step"; list the steps (root's must not show).
# Each is refused with a message, the checkpoint is still there with the same bytes, and the
# agent still answers. Needs root (exits 77 without).
#
# usage: local_socket_test.sh PALADIN
set -uo pipefail

PALADIN=$(readlink -f "${1:?usage: local_socket_test.sh PALADIN}")
source "$(dirname "$0")/seclib.sh"
sec_need_agent_tools

sec_scratch localsock
chmod 0755 "$TMP"
sec_start_server "$TMP/server"
sec_start_agent

# agent_socket.py SOCKET JSON [STAY_S]: one request on the socket; prints the answer.
sec_copy_scripts
as_root() { "$PY" "$TMP/agent_socket.py" "$SOCK" "$1"; }
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$PY" "$TMP/agent_socket.py" "$SOCK" "$1"; }

# Root's step 777.0 and a checkpoint of it on disk.
"$PY" "$TMP/agent_socket.py" "$SOCK" '{"op": "register", "job": 777, "step": "0", "gpu_mem": 1073741824}' \
  600 >"$TMP/registered" &
SEC_PIDS+=($!)
for _ in $(seq 100); do [[ -s $TMP/registered ]] && break; sleep 0.1; done
answer=$(cat "$TMP/registered")
[[ $(jq -r .ok <<<"$answer") == true ]] || { echo "FAIL: root's register: $answer" >&2; exit 1; }
DIR=$(jq -r .checkpoint_dir <<<"$answer")
mkdir -p "$DIR/0000000000001"
echo '{"version": 1}' >"$DIR/0000000000001/manifest.json"
head -c 4096 /dev/urandom >"$DIR/0000000000001/pages-1.img"
before=$(cd "$DIR" && find . -type f -exec sha256sum {} + | sort)

# expect_refused WHAT JSON: nobody's request is answered ok:false with an error.
expect_refused() {
  local answer
  answer=$(as_nobody "$2")
  if [[ $(jq -r '.ok' <<<"$answer" 2>/dev/null) != false ]] ||
    [[ -z $(jq -r '.error // empty' <<<"$answer" 2>/dev/null) ]]; then
    fail "$1: not refused: ${answer:0:300}"
    tally tried
  else
    tally refused
    echo "refused: $1: $(jq -r .error <<<"$answer" | cut -c1-160)"
  fi
}
mkdir -p "$TMP/mine" && echo '{}' >"$TMP/mine/job.json" && chown -R nobody "$TMP/mine"
expect_refused "register another user's step afresh (clears its checkpoints)" \
  '{"op": "register", "job": 777, "step": "0", "gpu_mem": 1024, "restart_count": 0}'
expect_refused "register another user's step as a restart (hands out its image)" \
  '{"op": "register", "job": 777, "step": "0", "gpu_mem": 1024, "restart_count": 1}'
expect_refused "register a step of a job the caller does not run in" \
  '{"op": "register", "job": 778, "step": "batch", "gpu_mem": 1024, "restart_count": 0}'
expect_refused "register with a negative gpu_mem" \
  '{"op": "register", "job": 779, "step": "0", "gpu_mem": -1}'
expect_refused "checkpoint another user's job" '{"op": "checkpoint", "job": 777}'
expect_refused "resume another user's job" '{"op": "resume", "job": 777}'
expect_refused "done on another user's step" '{"op": "done", "key": "777.0", "exit_code": 0}'
expect_refused "started with a run directory of the caller's" \
  "{\"op\": \"started\", \"key\": \"777.0\", \"run_dir\": \"$TMP/mine\"}"
expect_refused "the root helper's op step" '{"op": "step", "job": 777, "step": "0"}'
expect_refused "an unknown op" '{"op": "rm", "path": "/"}'
steps=$(as_nobody '{"op": "steps"}')
if [[ $(jq '.steps | length' <<<"$steps") != 0 ]]; then
  fail "nobody sees root's steps: $steps"
  tally tried
else
  tally refused
fi

after=$(cd "$DIR" && find . -type f -exec sha256sum {} + | sort)
[[ $before == "$after" ]] || fail "step 777.0's checkpoint changed: before [$before] after [$after]"
answer=$(as_root '{"op": "steps"}')
[[ $(jq -r '.steps[0].key' <<<"$answer") == 777.0 ]] || fail "root's step is gone: $answer"

sec_report "local socket"
