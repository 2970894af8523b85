# shellcheck shell=bash
# Checkpoint scenario sysv_ipc_migrate: The same job moved by `paladin migrate` to a `paladin
# receive` in a mount and IPC namespace of its own (a second node): the objects travel, checked by
# the job and with ipcs inside its namespace; the host's holds none of them.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

# It mounts a tmpfs over the run base: the harness runs it in a mount namespace of its own.
SCENARIO_OWN_MOUNTS=1

# ipc_inside PID: seen with ipcs inside PID's IPC namespace, ns_job.py's objects are there: the
# 1 MiB segment, the semaphore and the queue holding its message (the job takes the message out
# and puts it back every 20 ms: the caller retries).
ipc_inside() {
  local shm sem msq
  shm=$(nsenter -t "$1" -i ipcs -m | awk 'tolower($1) == "0x504c4431" && $5 == 1048576' | wc -l)
  sem=$(nsenter -t "$1" -i ipcs -s | awk 'tolower($1) == "0x504c4431" && $5 == 1' | wc -l)
  msq=$(nsenter -t "$1" -i ipcs -q | awk 'tolower($1) == "0x504c4431" && $6 == 1' | wc -l)
  ((shm == 1 && sem == 1 && msq == 1))
}

# The same job moved by `paladin migrate` to a second "node": a `paladin receive` on loopback in
# a mount and IPC namespace of its own, with a tmpfs of its own over the run base (the same path,
# as nodes share it; nothing of the source's run directory there). The run base here is a tmpfs
# too: nodes are set up alike, and a job sees the mounts it started with, bound again from the
# restoring node's at the same paths, over that node's root file system (docs/ckpt.md, "What a
# job sees"), so a mount only the second node has would not be where the moved job writes its
# logs. The objects must travel in the image: nothing of them is left in, or taken from, the
# host's IPC namespace.
scenario_sysv_ipc_migrate() {
  if ! mount -t tmpfs -o mode=0755 paladin-node1 "$PALADIN_RUN_DIR"; then
    fail "sysv_ipc_migrate: cannot mount a tmpfs over the run base $PALADIN_RUN_DIR"
    return
  fi
  mounts+=("$PALADIN_RUN_DIR")
  start_job nsipc -- python3 "$HERE/ns_job.py" ipc || return
  if ! wait_until 30 ipc_at_least 20; then
    fail "sysv_ipc_migrate: the job did not check its IPC objects 20 times in 30 s:" \
      "$(tail -3 "$log") $(tail -3 "$run_dir/stderr.log")"
    return
  fi
  own_namespaces sysv_ipc_migrate
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  export PALADIN_TOKEN=sysv-ipc-migrate-$$
  local port=$((20000 + RANDOM % 12000))
  # shellcheck disable=SC2016 # expanded by the receiver's shell
  timeout "$LIMIT" unshare --mount --ipc --propagation private -- bash -c \
    'mount -t tmpfs -o mode=0755 paladin-node2 "$PALADIN_RUN_DIR" && exec "$@"' receiver \
    "$PALADIN" receive --listen "$port" --dir "$work/in" >"$work/recv.out" 2>&1 &
  local receiver=$!
  launchers+=("$receiver")
  if ! wait_until 10 eval "ss -Hltn 'sport = :$port' | grep -q ."; then
    fail "sysv_ipc_migrate: paladin receive does not listen on $port: $(cat "$work/recv.out")"
    return
  fi
  local receiver_ipc
  receiver_ipc=$(readlink "/proc/$(pgrep -P "$receiver" -x paladin || echo "$receiver")/ns/ipc")
  local cut
  cut=$(last_ipc)
  local out rc=0
  out=$(timeout "$LIMIT" "$PALADIN" migrate "$job_name" --peer "127.0.0.1:$port" --mode image 2>&1) || rc=$?
  local there
  there=$(sed -n 's/^moved .* (pid \([0-9]*\) there).*/\1/p' <<<"$out")
  if ((rc != 0)) || [[ -z $there ]] || crashed "$out"; then
    fail "sysv_ipc_migrate: paladin migrate exit $rc: $out; receive: $(cat "$work/recv.out")"
    return
  fi
  roots+=("$there")
  job_pid=$there
  if ! wait_until 10 none_alive "${before[@]}"; then
    fail "sysv_ipc_migrate: the source's copy still runs after the move: $(comms "${before[@]}")"
  fi
  if ! wait_until 30 eval "! kill -0 $launcher 2>/dev/null"; then
    fail "sysv_ipc_migrate: paladin run still running here 30 s after the job moved"
  fi
  wait_until 30 eval "! kill -0 $receiver 2>/dev/null" ||
    fail "sysv_ipc_migrate: paladin receive still running 30 s after the move"
  # The moved job writes into the second node's copy of its log, which only its descriptor
  # reaches from here.
  local moved_log=/proc/$job_pid/fd/1
  if [[ $(stat -L -c %d:%i "$moved_log" 2>/dev/null) == "$(stat -c %d:%i "$log")" ]]; then
    fail "sysv_ipc_migrate: the moved job writes the source's log: the two sides share a run directory"
  else
    pass "sysv_ipc_migrate: moved as pid $job_pid, writing the second node's own copy of its log"
  fi
  log=$moved_log
  if ! wait_until 30 ipc_at_least $((cut + 20)); then
    fail "sysv_ipc_migrate: no 20 more checks in 30 s after the move (cut at $cut): $(tail -3 "$log")"
    return
  fi
  local bad
  bad=$(awk '$1 == "BAD" { print; exit } $1 == "ipc" && $3 == "ok" && $2 != ++n { print "ipc " $2 " where " n " was due"; exit }' "$log")
  if [[ -n $bad ]]; then
    fail "sysv_ipc_migrate: $bad (cut at $cut)"
  else
    pass "sysv_ipc_migrate: the 1 MiB segment's bytes, the semaphore and the queued message are" \
      "intact after the move (checks 1..$(last_ipc), cut at $cut)"
  fi
  own_namespaces "sysv_ipc_migrate (moved)"
  local job_ipc
  job_ipc=$(readlink "/proc/$job_pid/ns/ipc")
  [[ $job_ipc != "$receiver_ipc" ]] ||
    fail "sysv_ipc_migrate: the moved job shares the receiver's IPC namespace ($job_ipc)"
  # Seen from inside the moved job's IPC namespace: one object of each kind under its key, the
  # segment 1 MiB; and none of them in the host's.
  if wait_until 5 ipc_inside "$job_pid"; then
    pass "sysv_ipc_migrate: inside the moved job's IPC namespace: the 1 MiB segment, the" \
      "semaphore and the queue with its message (key 0x504c4431)"
  else
    fail "sysv_ipc_migrate: inside the moved job's IPC namespace, not one 1 MiB segment, one" \
      "semaphore and one queue holding one message under key 0x504c4431:" \
      "$(nsenter -t "$job_pid" -i ipcs -a 2>&1 | grep -v '^$' | tr -s ' \n' ' ')"
  fi
  if ipcs -a 2>/dev/null | grep -qi 0x504c4431; then
    fail "sysv_ipc_migrate: the host's IPC namespace holds the job's objects: $(ipcs -a | grep -i 0x504c4431)"
  else
    pass "sysv_ipc_migrate: the host's IPC namespace holds none of the job's objects"
  fi
}
