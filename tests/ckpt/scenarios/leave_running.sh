# shellcheck shell=bash
# Checkpoint scenario leave_running: --leave-running: the job keeps going, and the image restores
# later. Then its log swapped for a link to a file only root may read (as a job that owns its run
# directory could): the checkpoint refuses to copy it, puts nothing of that file in the image, and
# the job runs on.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

scenario_leave_running() {
  start_job leaverun --keep-run-dir -- python3 "$HERE/seq_writer.py" - --every-ms 10 || return
  if ! wait_until 60 lines_at_least "$log" 30; then
    fail "leave_running: the workload wrote nothing in 60 s: $(cat "$work/leaverun.run.err")"
    return
  fi
  local original=$job_pid
  checkpoint "$work/image" --leave-running
  if ((ck_rc != 0)) || ! grep -q "left running" <<<"$ck_out"; then
    fail "leave_running: paladin checkpoint exit $ck_rc: $ck_out"
    return
  fi
  local at
  at=$(wc -l <"$log")
  if wait_until 10 lines_at_least "$log" $((at + 20)) && alive "$original" &&
    kill -0 "$launcher" 2>/dev/null && [[ $(job_field state) == running ]]; then
    pass "leave_running: the job runs on after the checkpoint (pid $original)"
  else
    fail "leave_running: the job did not run on after the checkpoint (alive: $(alive "$original" &&
      echo yes || echo no), record: $(job_field state)): $(tail -2 "$log")"
  fi
  local verify
  verify=$(timeout "$LIMIT" "$PALADIN" image verify "$work/image" 2>&1) ||
    fail "leave_running: the image does not verify: $verify"
  local cut
  cut=$(wc -l <"$work/image/logs/stdout.log")

  local -a tree_now
  read -ra tree_now <<<"$(tree "$original")"
  kill -9 "${tree_now[@]}"
  wait_until 10 none_alive "${tree_now[@]}" || fail "leave_running: the original survived SIGKILL"
  wait_until 30 eval "! kill -0 $launcher 2>/dev/null" || fail "leave_running: paladin run hangs"

  restore "$work/image"
  expect_restored leave_running || return
  # The restore puts the log back as it was at the checkpoint; the job continues from there.
  if ! wait_until 30 lines_at_least "$log" $((cut + 30)); then
    fail "leave_running: no 30 more lines in 30 s after the restore (cut at $cut):" \
      "$(tail -2 "$log")"
    return
  fi
  local bad
  bad=$(awk '$0 != "line " NR { print NR ": " $0; exit }' "$log")
  if [[ -n $bad ]]; then
    fail "leave_running: the restored job's log breaks at line $bad (cut at $cut; a repeated" \
      "line means the image's copy of the log holds output written after the dump)"
  else
    pass "leave_running: the image restores and continues after line $cut"
  fi

  local secret=$work/root-only
  echo "PALADIN-SECRET-$RANDOM" >"$secret"
  chmod 600 "$secret"
  mv "$log" "$log.real"
  ln -s "$secret" "$log"
  checkpoint "$work/hostile" --leave-running
  local at_hostile
  at_hostile=$(wc -l <"$log.real")
  if ((ck_rc != 0)) && grep -q "stdout.log: it is a symbolic link" <<<"$ck_out" &&
    ! grep -rqs "PALADIN-SECRET" "$work/hostile" &&
    wait_until 10 lines_at_least "$log.real" $((at_hostile + 10)); then
    pass "leave_running: a log swapped for a link is not copied into the image, and the job runs on"
  else
    fail "leave_running: the swapped log: exit $ck_rc: $ck_out; secret in the image:" \
      "$(grep -rls "PALADIN-SECRET" "$work/hostile" 2>/dev/null | head -3)"
  fi
  rm -f "$log"
  mv "$log.real" "$log"
}
