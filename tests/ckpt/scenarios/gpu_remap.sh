# shellcheck shell=bash
# Checkpoint scenario gpu_remap: Device memory on emulated GPU 0, restored onto GPU 1 (--gpu-map).
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

# The emulated GPUs of this test's device file, as "BYTES BYTES ...": read from its header
# (docs/emucuda.md, "Device file layout"), since loading the driver to ask could change them.
emu_devices() {
  python3 -c 'import struct, sys
d = open(sys.argv[1], "rb").read(1432)
n = struct.unpack_from("<I", d, 20)[0]
print(" ".join(str(struct.unpack_from("<Q", d, 24 + 88 * i + 80)[0]) for i in range(n)))' \
    "$PALADIN_EMU_STATE" 2>/dev/null
}

last_gen() { awk '$1 == "gen" { n = $2 } END { print n + 0 }' "$log"; }

gen_at_least() { (($(last_gen) >= $1)); }

# remap_scenario WHAT [paladin run flags...]: the GPU workload moved from GPU 0 to GPU 1.
remap_scenario() {
  local what=$1
  shift
  start_job gpu --emulated-gpus 2x1GiB "$@" -- "$GPU" --mib 64 --every-ms 50 || return
  if ! wait_until 60 gen_at_least 5; then
    fail "$what: the GPU workload did not reach generation 5 in 60 s: $(tail -3 "$log")" \
      "$(cat "$work/gpu.run.err")"
    return
  fi
  local u0 u1 free_before
  u0=$(awk '$1 == "device" && $2 == 0 { print $3 }' "$log")
  u1=$(awk '$1 == "device" && $2 == 1 { print $3 }' "$log")
  free_before=$(awk '$1 == "gen" { f = $8 } END { print f }' "$log")
  if [[ -z $u0 || -z $u1 || $u0 == "$u1" ]]; then
    fail "$what: expected two emulated GPUs, the workload saw: $(grep '^device' "$log")"
    return
  fi
  grep -q "^gen .* dev 0 $u0 " "$log" || fail "$what: the context is not on GPU 0 ($u0)"
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  expect_checkpointed "$what" "$work/image" "${before[@]}" || return
  local cut
  cut=$(last_gen)
  local gib=$((1 << 30)) devices
  devices=$(emu_devices)
  if [[ $devices == "$gib $gib" ]]; then
    pass "$what: the emulated GPUs are still 2 x 1 GiB after the checkpoint"
  else
    fail "$what: after the checkpoint the emulated GPUs are '$devices' bytes, not 2 x 1 GiB" \
      "(someone re-initialised $PALADIN_EMU_STATE with other devices)"
  fi
  local inspect
  inspect=$(timeout "$LIMIT" "$PALADIN" image inspect "$work/image" 2>&1)
  if grep -q '^gpu: *emulated' <<<"$inspect" && grep -q "$u0" <<<"$inspect"; then
    pass "$what: the image records the emulated GPU the job held memory on"
  else
    fail "$what: image inspect does not name the GPU the job held memory on ($u0): $inspect"
  fi

  restore "$work/image" --gpu-map "$u0=$u1"
  expect_restored "$what" || return
  if ! grep -q "restoring the GPU state of pid" <<<"$rs_out"; then
    fail "$what: paladin restore exited $rs_rc without restoring any GPU state: $rs_out"
  fi
  devices=$(emu_devices)
  [[ $devices == "$gib $gib" ]] ||
    fail "$what: after the restore the emulated GPUs are '$devices' bytes, not 2 x 1 GiB"
  if ! wait_until 30 gen_at_least $((cut + 5)); then
    fail "$what: the restored job made no progress in 30 s (generation $(last_gen), cut at" \
      "$cut; its GPU state was not restored and unlocked?); restore said: $rs_out"
    return
  fi
  if grep -qE '^(MISMATCH|ERROR)' "$log"; then
    fail "$what: $(grep -m1 -E '^(MISMATCH|ERROR)' "$log")"
  fi
  local bad
  bad=$(awk '$1 == "gen" && $2 != ++n { print "gen " $2 " where " n " was due"; exit }' "$log")
  if [[ -n $bad ]]; then
    fail "$what: generations out of sequence across the restore: $bad (cut at $cut)"
  else
    pass "$what: device memory verified intact at every generation, continued after $cut"
  fi
  local after
  after=$(awk -v c="$cut" '$1 == "gen" && $2 > c' "$log")
  if grep -q " dev 0 $u0 " <<<"$after" || ! grep -q " dev 0 $u1 " <<<"$after"; then
    fail "$what: after the restore the context is not on GPU 1 ($u1): $(tail -1 <<<"$after")"
  else
    pass "$what: after the restore the context reports GPU 1 ($u1)"
  fi
  # A GPU job has a /proc of its own PID namespace like every job: before and after the restore
  # /proc/self/stat names the pid getpid() returns, a small one, not its host pid.
  local foreign
  foreign=$(awk '$1 == "gen" && ($10 != $12 || $10 > 1000) { print; exit }' "$log")
  if [[ -n $foreign ]] || ! grep -q '^gen .* pid [0-9]* proc [0-9]*$' "$log"; then
    fail "$what: the GPU job does not see its own pid in /proc: ${foreign:-no pid in $(grep -m1 "^gen" "$log")}"
  else
    pass "$what: the GPU job sees its own pid in /proc ($(awk '$1 == "gen" { p = $10 } END { print p }' "$log")) before and after the restore"
  fi
  # GPU 1 is as large as GPU 0: it must now count what the job held there.
  local free_after
  free_after=$(tail -1 <<<"$after" | awk '{ print $8 }')
  if [[ $free_after != "$free_before" ]]; then
    fail "$what: cuMemGetInfo free is $free_after after the restore, $free_before before" \
      "(the job's memory is not counted on its new GPU)"
  else
    pass "$what: the job's memory is counted on its new GPU"
  fi
}

scenario_gpu_remap() { remap_scenario gpu_remap; }
