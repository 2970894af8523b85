# shellcheck shell=bash
# Checkpoint scenario tcp_listen: `python3 -m http.server` on a loopback port: answers on it again
# after restore.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

http_get() {
  python3 -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:%s/hello.txt" % sys.argv[1],
                                        timeout=5).read().decode())' "$1" 2>/dev/null
}

http_answers() { [[ $(http_get "$1") == "$2" ]]; }

scenario_tcp_listen() {
  mkdir -p "$work/www"
  local content="paladin $RANDOM$RANDOM"
  echo "$content" >"$work/www/hello.txt"
  local port
  port=$(free_port)
  start_job http -- python3 -m http.server --bind 127.0.0.1 --directory "$work/www" "$port" ||
    return
  if ! wait_until 30 http_answers "$port" "$content"; then
    fail "tcp_listen: the server does not answer on port $port: $(tail -3 "$run_dir/stderr.log")"
    return
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  expect_checkpointed tcp_listen "$work/image" "${before[@]}" || return
  if http_get "$port" >/dev/null; then
    fail "tcp_listen: something answers on port $port while the job is checkpointed"
  fi
  restore "$work/image"
  expect_restored tcp_listen || return
  if wait_until 10 http_answers "$port" "$content"; then
    pass "tcp_listen: the restored server answers on port $port with the same page"
  else
    fail "tcp_listen: the restored server does not answer on port $port: $rs_out"
  fi
}
