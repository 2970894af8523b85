# shellcheck shell=bash
# Checkpoint scenario udp: A UDP socket answering pings: answers on the same port after restore.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

# udp_ping PORT N: "pong N" from PORT within a few tries.
udp_ping() {
  python3 -c 'import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
for _ in range(5):
    s.sendto(b"ping " + sys.argv[2].encode(), ("127.0.0.1", int(sys.argv[1])))
    try:
        if s.recv(512) == b"pong " + sys.argv[2].encode():
            sys.exit(0)
    except OSError:
        pass
sys.exit(1)' "$1" "$2"
}

scenario_udp() {
  start_job udp -- python3 "$HERE/socket_job.py" udp || return
  wait_until 30 grep -q '^udp ' "$log" || {
    fail "udp: the job bound no socket in 30 s: $(tail -3 "$run_dir/stderr.log")"
    return
  }
  local port
  port=$(log_value udp "$log")
  udp_ping "$port" 1 || {
    fail "udp: no pong from port $port"
    return
  }
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  expect_checkpointed udp "$work/image" "${before[@]}" || return
  restore "$work/image"
  expect_restored udp || return
  if udp_ping "$port" 2; then
    pass "udp: the restored job answers on UDP port $port"
  else
    fail "udp: no pong from port $port after the restore"
  fi
}
