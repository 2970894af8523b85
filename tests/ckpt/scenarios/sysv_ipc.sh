# shellcheck shell=bash
# Checkpoint scenario sysv_ipc: System V shared memory (1 MiB pattern), a semaphore and a message
# queue in the job's own IPC namespace: invisible to the host, intact after a restore.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

scenario_sysv_ipc() {
  start_job nsipc -- python3 "$HERE/ns_job.py" ipc || return
  if ! wait_until 30 ipc_at_least 20; then
    fail "sysv_ipc: the job did not check its IPC objects 20 times in 30 s: $(tail -3 "$log")" \
      "$(tail -3 "$run_dir/stderr.log")"
    return
  fi
  own_namespaces sysv_ipc
  if ipcs -a 2>/dev/null | grep -qi 0x504c4431; then
    fail "sysv_ipc: the host sees the job's IPC objects (key 0x504c4431): $(ipcs -a | grep -i 0x504c4431)"
  else
    pass "sysv_ipc: the job's shared memory, semaphore and message queue are not the host's"
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  expect_checkpointed sysv_ipc "$work/image" "${before[@]}" || return
  if compgen -G "$work/image/ipcns-shm-*.img" >/dev/null; then
    pass "sysv_ipc: the image holds the job's shared memory"
  else
    fail "sysv_ipc: the image holds no ipcns-shm image: $(ls "$work/image" | tr '\n' ' ')"
  fi
  local cut
  cut=$(last_ipc)
  restore "$work/image"
  expect_restored sysv_ipc || return
  if ! wait_until 30 ipc_at_least $((cut + 20)); then
    fail "sysv_ipc: no 20 more checks in 30 s after the restore (cut at $cut): $(tail -3 "$log")"
    return
  fi
  local bad
  bad=$(awk '$1 == "BAD" { print; exit } $1 == "ipc" && $3 == "ok" && $2 != ++n { print "ipc " $2 " where " n " was due"; exit }' "$log")
  if [[ -n $bad ]]; then
    fail "sysv_ipc: $bad (cut at $cut)"
  else
    pass "sysv_ipc: the 1 MiB segment's bytes, the semaphore and the queued message are intact" \
      "after the restore (checks 1..$(last_ipc), cut at $cut)"
  fi
  own_namespaces "sysv_ipc (restored)"
}
