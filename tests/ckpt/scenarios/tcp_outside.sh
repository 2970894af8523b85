# shellcheck shell=bash
# Checkpoint scenario tcp_outside: An echo server with a client outside the job connected at the
# checkpoint: the client sees a reset, the job sees its connection end, and the restored server
# serves a new client (docs/ckpt.md, "Sockets").
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

scenario_tcp_outside() {
  start_job echo -- python3 "$HERE/socket_job.py" echo || return
  wait_until 30 grep -q '^listen ' "$log" || {
    fail "tcp_outside: the server is not listening after 30 s: $(tail -3 "$run_dir/stderr.log")"
    return
  }
  local port
  port=$(log_value listen "$log")
  local client_out=$work/client.out
  python3 "$HERE/socket_job.py" client "$port" >"$client_out" 2>&1 &
  launchers+=($!)
  if ! wait_until 30 grep -q '^echo 5$' "$client_out"; then
    fail "tcp_outside: the outside client got no 5 echoes: $(tail -3 "$client_out")"
    return
  fi
  local client
  client=$(log_value conn "$client_out")
  # A checkpoint failing at this step leaves the job as it was: its record says running, its
  # processes are not frozen (the outside client keeps getting echoes), a later one works.
  ck_rc=0
  ck_out=$(PALADIN_CKPT_FAULT=close-peers timeout "$LIMIT" "$PALADIN" checkpoint "$job_name" \
    --out "$work/failed" 2>&1) || ck_rc=$?
  local state echoes
  state=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["state"])' \
    "$run_dir/job.json")
  echoes=$(grep -c '^echo ' "$client_out")
  if ((ck_rc != 0)) && [[ $state == running ]] &&
    wait_until 10 bash -c "(( \$(grep -c '^echo ' '$client_out') > $((echoes + 5)) ))"; then
    pass "tcp_outside: a checkpoint failing at the outside connections leaves the job running"
  else
    fail "tcp_outside: after a failed checkpoint (rc $ck_rc) the record says '$state', echoes" \
      "$echoes -> $(grep -c '^echo ' "$client_out"): $ck_out"
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  if ! grep -q "closing the connection 127.0.0.1:$port -> $client to a peer outside the job" \
    <<<"$ck_out"; then
    fail "tcp_outside: the checkpoint did not say it closes the outside connection: $ck_out"
  fi
  expect_checkpointed tcp_outside "$work/image" "${before[@]}" || return
  if wait_until 10 grep -q '^error ECONNRESET$' "$client_out"; then
    pass "tcp_outside: the outside client saw a reset at the checkpoint"
  else
    fail "tcp_outside: the outside client did not see a reset: $(tail -2 "$client_out")"
  fi
  restore "$work/image"
  expect_restored tcp_outside || return
  if wait_until 10 grep -q "^ended $client: " "$log"; then
    pass "tcp_outside: the job saw its connection end: $(grep "^ended $client: " "$log")"
  else
    fail "tcp_outside: the restored job does not say its connection to $client ended: $(tail -3 "$log")"
  fi
  local second=$work/client2.out
  timeout 10 python3 "$HERE/socket_job.py" client "$port" >"$second" 2>&1 &
  launchers+=($!)
  if wait_until 10 grep -q '^echo 5$' "$second"; then
    pass "tcp_outside: the restored server echoes a new client on port $port"
  else
    fail "tcp_outside: a new client gets no echoes from port $port: $(tail -2 "$second")"
  fi
}
