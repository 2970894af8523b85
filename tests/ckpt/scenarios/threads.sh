# shellcheck shell=bash
# Checkpoint scenario threads: A 4-thread program, 64 MiB per thread, self-verifying per step.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

scenario_threads() {
  # A descriptor of the caller's that is not close-on-exec, holding a file lock (as under
  # flock(1)): the workload must not get it, and the checkpoint (whose CRIU probe runs first in
  # this run base) must not fail on it.
  local extra
  exec {extra}>"$work/caller-descriptor"
  flock "$extra"
  start_job threads -- "$THREADS" --threads 4 --mib 64 --pause-ms 20 || return
  if ! wait_until 60 threads_at 5; then
    fail "threads: not every thread reached step 5 in 60 s: $(tail -5 "$log")"
    return
  fi
  local tasks
  tasks=$(find "/proc/$job_pid/task" -mindepth 1 -maxdepth 1 | wc -l)
  ((tasks == 5)) || fail "threads: $tasks threads before the checkpoint, expected 5"
  local fds
  fds=$(find "/proc/$job_pid/fd" -mindepth 1 -printf '%f -> %l\n' | sort -n | tr '\n' ' ')
  if [[ $(find "/proc/$job_pid/fd" -mindepth 1 -printf '%f ' | tr ' ' '\n' | sort -n |
    tr '\n' ' ') == "0 1 2 " ]]; then
    pass "threads: the workload holds only stdin, stdout and stderr"
  else
    fail "threads: the workload holds descriptors beyond 0, 1, 2 (inherited from paladin run or" \
      "its caller, they tie the image to files outside the job): $fds"
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  exec {extra}>&-
  expect_checkpointed threads "$work/image" "${before[@]}" || return
  local -a cut
  local t top=0
  for t in 0 1 2 3; do
    cut[t]=$(last_step $t)
    ((cut[t] > top)) && top=${cut[t]}
  done
  local size
  size=$(stat -c %s "$log")
  sleep 1
  (($(stat -c %s "$log") == size)) || fail "threads: the log still grows after the checkpoint"

  restore "$work/image"
  expect_restored threads || return
  threads_went_on threads || return
  tasks=$(find "/proc/$job_pid/task" -mindepth 1 -maxdepth 1 | wc -l)
  ((tasks == 5)) || fail "threads: $tasks threads after the restore, expected 5"
}
