# shellcheck shell=bash
# Checkpoint scenario unprivileged: The threads program started as the node agent starts it, as
# nobody (under paladin-workload-init), checkpointed, gone, restored, still nobody, continued.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

# The real uid of host pid PID.
uid_of() { awk '/^Uid:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }

scenario_unprivileged() {
  local nobody=65534
  if [[ -z $START_AS ]]; then
    echo "SKIP: unprivileged needs ckpt_start_as (argument 5)"
    exit 77
  fi
  # The workload's user must reach its program: a copy where it can.
  chmod 755 "$work"
  mkdir -p "$work/bin"
  cp "$THREADS" "$work/bin/ckpt_threads"
  chmod 755 "$work/bin" "$work/bin/ckpt_threads"
  # CRIU reads the rlimits of another user's process only with CAP_SYS_RESOURCE. Where root lacks
  # it (Docker, some sandboxed VMs), paladin preloads libpaladin-criu-rlimit.so (next to it in the
  # build tree) into CRIU and says so: the checkpoint below checks that it did.
  local cap lacks_resource=0
  cap=$(awk '/^CapEff:/ { print $2 }' "/proc/$$/status")
  if ((((16#$cap >> 24) & 1) == 0)); then
    lacks_resource=1
    echo "note: root lacks CAP_SYS_RESOURCE here: paladin should preload libpaladin-criu-rlimit.so"
  fi

  start_under_init unprivileged unpriv $nobody $nobody \
    "$work/bin/ckpt_threads" --threads 4 --mib 64 --pause-ms 20 || return

  # paladin-workload-init (root) is pid 1 of the namespace, the program (nobody) its child, pid 2.
  check_tree() {
    local when=$1 child
    child=$(pgrep -P "$job_pid" | head -1)
    if [[ $(cat "/proc/$job_pid/comm" 2>/dev/null) == paladin-workloa* &&
      $(uid_of "$job_pid") == 0 && $(ns_pid "$job_pid") == 1 && -n $child &&
      $(cat "/proc/$child/comm" 2>/dev/null) == ckpt_threads && $(uid_of "$child") == "$nobody" &&
      $(ns_pid "$child") == 2 ]]; then
      pass "unprivileged: $when: paladin-workload-init is pid 1 as root, the program pid 2 as nobody"
    else
      fail "unprivileged: $when: root $job_pid ($(cat "/proc/$job_pid/comm" 2>/dev/null), uid" \
        "$(uid_of "$job_pid"), ns pid $(ns_pid "$job_pid")), child ${child:-none}" \
        "($(cat "/proc/$child/comm" 2>/dev/null), uid $(uid_of "$child"), ns pid $(ns_pid "$child"))"
    fi
  }
  if ! wait_until 60 threads_at 5; then
    fail "unprivileged: not every thread reached step 5 in 60 s: $(tail -5 "$log")" \
      "$(cat "$run_dir/stderr.log")"
    return
  fi
  check_tree "started"
  if [[ $(readlink "/proc/$job_pid/fd/10") == "$work/lease" ]] &&
    ! ls -l "/proc/$(pgrep -P "$job_pid" | head -1)/fd" 2>/dev/null | grep -q "$work/lease"; then
    pass "unprivileged: the init holds the node lease, the program does not"
  else
    fail "unprivileged: the init's descriptor 10 is '$(readlink "/proc/$job_pid/fd/10")'," \
      "not the lease $work/lease (or the program holds it too)"
  fi

  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  if ((ck_rc != 0)) || crashed "$ck_out" || ! grep -q "job stopped" <<<"$ck_out"; then
    fail "unprivileged: paladin checkpoint exit $ck_rc: $ck_out"
    return
  fi
  if ((lacks_resource)); then
    if grep -q "lacks CAP_SYS_RESOURCE.*libpaladin-criu-rlimit.so" <<<"$ck_out"; then
      pass "unprivileged: without CAP_SYS_RESOURCE, paladin preloaded libpaladin-criu-rlimit.so"
    else
      fail "unprivileged: paladin checkpoint did not say it preloads the rlimit library: $ck_out"
    fi
  fi
  if ! wait_until 10 none_alive "${before[@]}"; then
    fail "unprivileged: still running 10 s after the checkpoint: $(comms "${before[@]}")"
    return
  fi
  [[ $(job_field state) == checkpointed ]] ||
    fail "unprivileged: the job record says '$(job_field state)', not checkpointed"
  local verify
  verify=$(timeout "$LIMIT" "$PALADIN" image verify "$work/image" 2>&1) ||
    fail "unprivileged: the image does not verify: $verify"
  pass "unprivileged: checkpointed, every process gone, image verifies"
  if grep -q "\"lease\": \"$work/lease\"" "$work/image/manifest.json"; then
    pass "unprivileged: the manifest names the lease the init held"
  else
    fail "unprivileged: the manifest does not name the lease: $(grep lease "$work/image/manifest.json")"
  fi
  local -a cut
  local t top=0
  for t in 0 1 2 3; do
    cut[t]=$(last_step $t)
    ((cut[t] > top)) && top=${cut[t]}
  done

  restore "$work/image"
  expect_restored unprivileged || return
  check_tree "restored"
  # Restored where no agent leads it: the init's lease is /dev/null (no fence), and the job runs.
  if [[ $(readlink "/proc/$job_pid/fd/10") == /dev/null ]]; then
    pass "unprivileged: restored outside an agent, the init holds /dev/null in the lease's place"
  else
    fail "unprivileged: the restored init's descriptor 10 is '$(readlink "/proc/$job_pid/fd/10")'"
  fi
  threads_went_on unprivileged || return

  # The restored job still ends as a job: SIGTERM to its root reaches the program, and the root
  # exits with the program's status (128 + 15).
  local root=$job_pid
  kill -TERM "$root"
  if wait_until 10 eval "! alive $root"; then
    pass "unprivileged: SIGTERM to the restored root ended the job"
  else
    fail "unprivileged: the restored job still runs 10 s after SIGTERM to its root"
  fi
}
