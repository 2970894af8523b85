# shellcheck shell=bash
# Checkpoint scenario pipe: Bash running `seq | python3 consumer`: numbers through a full pipe.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

last_got() { awk '$1 == "got" { n = $2 } END { print n + 0 }' "$log"; }

got_at_least() { (($(last_got) >= $1)); }

scenario_pipe() {
  start_job pipe -- bash -c "seq 1 1000000000 | python3 '$HERE/pipe_consumer.py'" || return
  if ! wait_until 60 got_at_least 500; then
    fail "pipe: fewer than 500 numbers through the pipe in 60 s: $(tail -3 "$log")"
    return
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  local shape
  shape=$(comms "${before[@]}")
  [[ $shape == "bash python3 seq " ]] || fail "pipe: the tree is '$shape', not bash, python3, seq"
  checkpoint "$work/image"
  expect_checkpointed pipe "$work/image" "${before[@]}" || return
  local cut
  cut=$(last_got)
  # The producer is far ahead of the consumer: the pipe was full when dumped.
  [[ -s $work/image/pipes-data.img ]] || fail "pipe: the image holds no pipe data"

  restore "$work/image"
  expect_restored pipe || return
  if ! wait_until 60 got_at_least $((cut + 500)); then
    fail "pipe: no 500 more numbers in 60 s after the restore (cut at $cut, now $(last_got)):" \
      "$(tail -3 "$log")"
    return
  fi
  if grep -qE '^(GAP|EOF)' "$log"; then
    fail "pipe: the consumer saw $(grep -m1 -E '^(GAP|EOF)' "$log")"
  fi
  local bad
  bad=$(awk '$1 == "got" && $2 != ++n { print "got " $2 " where " n " was due"; exit }' "$log")
  if [[ -n $bad ]]; then
    fail "pipe: numbers out of sequence across the restore: $bad (cut at $cut)"
  else
    pass "pipe: numbers 1..$(last_got) arrived in sequence, continued after $cut"
  fi
  local -a after
  read -ra after <<<"$(tree "$job_pid")"
  [[ $(comms "${after[@]}") == "$shape" ]] ||
    fail "pipe: the restored tree is '$(comms "${after[@]}")', not '$shape'"
}
