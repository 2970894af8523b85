# shellcheck shell=bash
# Checkpoint scenario gpu_procs: A job of three processes on the GPU: each one's device memory
# leaves and comes back through a driver call of its own, the three side by side (at most
# PALADIN_GPU_CALLS_AT_ONCE at once; 1: one after another), and every process goes on verified.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

# The emulated driver's calls each take about half a second here (what the real driver's
# checkpoint of 64 MiB and a context would take at about 0.64 GB/s), and write when they ran to
# the job's stderr (docs/emucuda.md, "Checkpoint API").
GPU_PROCS_RATE=640MiB

# gens_of PID: the generations the process that is PID in the job's namespace printed.
gens_of() { awk -v p="$1" '$1 == "gen" && $10 == p { n = $2 } END { print n + 0 }' "$log"; }

# three_printed: three processes of the job have printed a generation.
three_printed() { (($(awk '$1 == "gen" { print $10 }' "$log" | sort -u | wc -l) == 3)); }

# each_at_least N PID...: every one of the processes reached generation N.
each_at_least() {
  local n=$1 p
  shift
  for p in "$@"; do (($(gens_of "$p") >= n)) || return 1; done
}

# call_spans CALL: "FROM TO" for each of the emulated driver's CALL lines in the job's stderr.
call_spans() {
  sed -n "s/^paladin-emucuda: $1 of [0-9]* bytes at [0-9]* bytes\/s ran from \([0-9.]*\) to \([0-9.]*\)$/\1 \2/p" \
    "$run_dir/stderr.log"
}

# side_by_side: the spans on standard input all share a moment (the latest start before the
# earliest end).
side_by_side() { awk 'NR == 1 || $1 > s { s = $1 } NR == 1 || $2 < e { e = $2 } END { exit !(NR > 1 && s < e) }'; }

# one_after_another: no two of the spans on standard input overlap.
one_after_another() { sort -n | awk 'NR > 1 && $1 < e { exit 1 } { e = $2 }'; }

scenario_gpu_procs() {
  local what=gpu_procs
  PALADIN_EMU_CHECKPOINT_RATE=$GPU_PROCS_RATE PALADIN_EMU_RESTORE_RATE=$GPU_PROCS_RATE \
    start_job gpu --emulated-gpus 1x2GiB -- sh -c \
    "\"$GPU\" --mib 64 --every-ms 50 & \"$GPU\" --mib 64 --every-ms 50 & \"$GPU\" --mib 64 --every-ms 50 & wait" ||
    return
  local pids
  if ! wait_until 60 three_printed; then
    fail "$what: three GPU processes did not all print in 60 s: $(tail -3 "$log")" \
      "$(tail -3 "$run_dir/stderr.log")"
    return
  fi
  read -ra pids <<<"$(awk '$1 == "gen" { print $10 }' "$log" | sort -un | tr '\n' ' ')"
  if ! wait_until 60 each_at_least 5 "${pids[@]}"; then
    fail "$what: not every GPU process reached generation 5: $(tail -3 "$log")"
    return
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  expect_checkpointed "$what" "$work/image" "${before[@]}" || return
  if [[ $(grep -c "checkpointing the GPU state of pid" <<<"$ck_out") == 3 ]] &&
    grep -q "checkpointing 3 processes' GPU state, 3 at once" <<<"$ck_out"; then
    pass "$what: the checkpoint took the GPU state of the three processes, three at once"
  else
    fail "$what: paladin checkpoint did not checkpoint three processes' GPU state at once: $ck_out"
  fi
  local spans
  spans=$(call_spans checkpoint)
  if [[ $(wc -l <<<"$spans") == 3 ]] && side_by_side <<<"$spans"; then
    pass "$what: the three driver checkpoints ran side by side"
  else
    fail "$what: the driver's checkpoints did not all run at once: ${spans:-no span in the stderr of the job}"
  fi
  local -A cut
  local p
  for p in "${pids[@]}"; do cut[$p]=$(gens_of "$p"); done

  PALADIN_GPU_CALLS_AT_ONCE=1 restore "$work/image"
  expect_restored "$what" || return
  spans=$(call_spans restore)
  if [[ $(wc -l <<<"$spans") == 3 ]] && one_after_another <<<"$spans"; then
    pass "$what: with PALADIN_GPU_CALLS_AT_ONCE=1 the three driver restores ran one after another"
  else
    fail "$what: PALADIN_GPU_CALLS_AT_ONCE=1: the driver's restores were not one after another:" \
      "${spans:-no span in the stderr of the job}"
  fi
  for p in "${pids[@]}"; do
    if ! wait_until 30 each_at_least $((cut[$p] + 5)) "$p"; then
      fail "$what: process $p made no progress after the restore (generation $(gens_of "$p"), cut" \
        "at ${cut[$p]}); restore said: $rs_out"
      return
    fi
  done
  if grep -qE '^(MISMATCH|ERROR)' "$log"; then
    fail "$what: $(grep -m1 -E '^(MISMATCH|ERROR)' "$log")"
    return
  fi
  local bad=
  for p in "${pids[@]}"; do
    bad+=$(awk -v p="$p" '$1 == "gen" && $10 == p && $2 != ++n { print "process " p ": gen " $2 " where " n " was due"; exit }' "$log")
  done
  if [[ -n $bad ]]; then
    fail "$what: generations out of sequence across the restore: $bad"
  else
    pass "$what: each process's device memory verified at every generation, each went on past its cut"
  fi
}
