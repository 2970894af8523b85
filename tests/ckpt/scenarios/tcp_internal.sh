# shellcheck shell=bash
# Checkpoint scenario tcp_internal: Two processes of the job with a loopback TCP connection between
# them, numbers sent and checked both ways: the same connection continues after restore.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

last_echo() { awk '$1 == "echo" { n = $2 } END { print n + 0 }' "$log"; }

echo_at_least() { (($(last_echo) >= $1)); }

scenario_tcp_internal() {
  start_job pair -- python3 "$HERE/socket_job.py" pair || return
  if ! wait_until 60 echo_at_least 100; then
    fail "tcp_internal: fewer than 100 round trips in 60 s: $(tail -3 "$log") $(tail -3 "$run_dir/stderr.log")"
    return
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  expect_checkpointed tcp_internal "$work/image" "${before[@]}" || return
  grep -q "closing the connection" <<<"$ck_out" &&
    fail "tcp_internal: the checkpoint closed a connection inside the job: $ck_out"
  compgen -G "$work/image/tcp-stream-*.img" >/dev/null ||
    fail "tcp_internal: the image holds no TCP connection state (tcp-stream-*.img)"
  local cut
  cut=$(last_echo)
  restore "$work/image"
  expect_restored tcp_internal || return
  if ! wait_until 60 echo_at_least $((cut + 200)); then
    fail "tcp_internal: no 200 more round trips in 60 s after the restore (cut at $cut, now" \
      "$(last_echo)): $(tail -3 "$log") $(tail -3 "$run_dir/stderr.log")"
    return
  fi
  local bad
  bad=$(awk '$1 == "BAD" { print; exit } $1 == "echo" && $2 != ++n { print "echo " $2 " where " n " was due"; exit }' "$log")
  if [[ -n $bad ]]; then
    fail "tcp_internal: $bad (cut at $cut)"
  elif (($(grep -c '^conn ' "$log") != 1)); then
    fail "tcp_internal: the child connected more than once: $(grep '^conn ' "$log")"
  else
    pass "tcp_internal: one connection, numbers 1..$(last_echo) sent and doubled both ways in" \
      "sequence across the restore (cut at $cut)"
  fi
}
