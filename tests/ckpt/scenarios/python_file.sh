# shellcheck shell=bash
# Checkpoint scenario python_file: CPython appending to a file it keeps open across the checkpoint.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

# python_file_scenario NAME [PALADIN RUN FLAGS...]
python_file_scenario() {
  local name=$1
  shift
  local data=$work/seq.txt
  start_job pyfile "$@" -- python3 "$HERE/seq_writer.py" "$data" --every-ms 10 || return
  if ! wait_until 60 lines_at_least "$data" 50; then
    fail "$name: fewer than 50 lines in 60 s: $(cat "$work/pyfile.run.err")"
    return
  fi
  local fd
  fd=$(find "/proc/$job_pid/fd" -lname "$data" -printf '%f\n' | head -1)
  [[ -n $fd ]] || fail "$name: the interpreter has no descriptor open on $data"
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  expect_checkpointed "$name" "$work/image" "${before[@]}" || return
  local cut
  cut=$(wc -l <"$data")
  sleep 0.5
  (($(wc -l <"$data") == cut)) || fail "$name: lines appended after the checkpoint"

  restore "$work/image"
  expect_restored "$name" || return
  if ! wait_until 60 lines_at_least "$data" $((cut + 50)); then
    fail "$name: no 50 more lines in 60 s after the restore (cut at $cut, now" \
      "$(wc -l <"$data"))"
    return
  fi
  local bad
  bad=$(awk '$0 != "line " NR { print NR ": " $0; exit }' "$data")
  if [[ -n $bad ]]; then
    fail "$name: the sequence breaks at line $bad (cut at line $cut)"
  else
    pass "$name: lines 1..$(wc -l <"$data") in sequence, continued from line $cut"
  fi
  if [[ -n $fd && $(readlink "/proc/$job_pid/fd/$fd") == "$data" ]]; then
    pass "$name: descriptor $fd is still open on the file after the restore"
  else
    fail "$name: descriptor ${fd:-?} is not open on $data after the restore"
  fi
  [[ $(comms "$job_pid") == "python3 " ]] ||
    fail "$name: the restored process is '$(comms "$job_pid")', not python3"
}

scenario_python_file() { python_file_scenario python_file; }
