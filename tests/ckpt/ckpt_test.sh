#!/usr/bin/env bash
# Checkpoint/restore end to end, in the pattern of CRIU's ZDTM tests: start a workload with
# `paladin run`, let it build up state, `paladin checkpoint` it (which stops it), check that it is
# gone, `paladin restore` it, and check that it continued from where it was (not from the start)
# with its state intact. One scenario a run:
#
#   threads        a 4-thread program, 64 MiB per thread, self-verifying per step
#   python_file    CPython appending to a file it keeps open across the checkpoint
#   quota_no_cuda  the same under a GPU-memory quota, never touching CUDA (no GPU state to restore)
#   pipe           bash running `seq | python3 consumer`: numbers through a full pipe
#   gpu_remap      device memory on emulated GPU 0, restored onto GPU 1 (--gpu-map)
#   gpu_quota      the same under a GPU-memory quota: the quota's counts move with the job
#   bad_input      corrupted, truncated and incompatible images; unknown job; bad --gpu-map
#   leave_running  --leave-running: the job keeps going, and the image restores later
#   unprivileged   the threads program started as the node agent starts it, as nobody (under
#                  paladin-workload-init), checkpointed, gone, restored, still nobody, continued
#   tcp_listen     `python3 -m http.server` on a loopback port: answers on it again after restore
#   tcp_internal   two processes of the job with a loopback TCP connection between them, numbers
#                  sent and checked both ways: the same connection continues after restore
#   udp            a UDP socket answering pings: answers on the same port after restore
#   tcp_outside    an echo server with a client outside the job connected at the checkpoint:
#                  the client sees a reset, the job sees its connection end, and the restored
#                  server serves a new client (docs/ckpt.md, "Sockets")
#   stopped        two counting processes, one stopped (SIGSTOP) by the job itself: after a
#                  --leave-running checkpoint and after a restore the stopped one is still stopped
#                  (state T, its count still) and the other runs; woken by hand, it continues its
#                  count. Then the same with the stopped process as paladin-workload-init's child
#                  (the init must not pass Paladin's resume on to it), and through the node
#                  lease's fence (the lease runs out, then is renewed)
#   proc_self      a job reading /proc/self (its own /proc in its own mount namespace) sees its
#                  namespace pid, as getpid() does, and only its own processes, before and after
#                  a restore; under paladin-workload-init (pid 2), through two restores
#   sysv_ipc       System V shared memory (1 MiB pattern), a semaphore and a message queue in the
#                  job's own IPC namespace: invisible to the host, intact after a restore
#   sysv_ipc_migrate  the same job moved by `paladin migrate` to a `paladin receive` in a mount
#                  and IPC namespace of its own (a second node): the objects travel, checked by
#                  the job and with ipcs inside its namespace; the host's holds none of them
#   restored_cgroup  a restored job is back in its cgroup, its record names it, and once the job
#                  ends (killed, then a second restore that exits by itself) the group is gone;
#                  groups another program made on a cgroup v1 host while the job ran, gone
#                  before the restore, are not made again by it (they are not in its image)
#
# Usage: ckpt_test.sh SCENARIO PALADIN CKPT_THREADS CKPT_GPU [CKPT_START_AS]
# Needs root (PID namespaces, CRIU) and CRIU (scripts/criu.sh); exits 77 (skipped) without them.
# Each run has its own run directory and emulated GPUs under a temporary folder, removed at the
# end with every process the test started (KEEP_WORK=1 keeps the folder).
set -u

SCENARIO=$1
PALADIN=$(realpath "$2")
THREADS=$(realpath "$3")
GPU=$(realpath "$4")
START_AS=${5:+$(realpath "$5")}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cli/testlib.sh"
source "$HERE/ckptlib.sh"

LIMIT=120 # seconds for any one paladin command

if ((EUID != 0)); then
  echo "SKIP: checkpoint/restore needs root (PID namespaces, CRIU)"
  exit 77
fi
# The move's scenario mounts a tmpfs over the run base: in a mount namespace of this run's own,
# so that no job of another test, started meanwhile, takes that mount into its own namespace
# (and then cannot be dumped or restored once it is gone: docs/ckpt.md, "Known limits").
if [[ $SCENARIO == sysv_ipc_migrate && -z ${PALADIN_CKPT_OWN_MOUNTS:-} ]]; then
  PALADIN_CKPT_OWN_MOUNTS=1 exec unshare --mount --propagation private -- bash "$0" "$@"
fi
skip_without_criu
# (See the descriptor check of the threads scenario.)
close_inherited_fds

work=$(mktemp -d "/tmp/paladin-ckpt-$SCENARIO.XXXXXX")
work=$(realpath "$work")
export PALADIN_RUN_DIR=$work/run
export PALADIN_EMU_STATE=$work/emu.state
unset PALADIN_EMU_GPUS PALADIN_QUOTA_REGION PALADIN_GPU_MEM PALADIN_CUDA_DRIVER PALADIN_LIB_DIR \
  PALADIN_EMU_CTX_OVERHEAD PALADIN_EMU_DRIVER_VERSION LD_PRELOAD CUDA_VISIBLE_DEVICES
mkdir -p "$PALADIN_RUN_DIR"

roots=()     # host pids of job roots (original and restored) to kill at the end
launchers=() # background `paladin run`s
groups=()    # cgroups paladin made (NAME-PID)
mounts=()    # file systems the test mounted on the host

cleanup() {
  local p
  kill_trees "${roots[@]}"
  for p in "${launchers[@]}"; do
    wait_until 10 eval "! kill -0 $p 2>/dev/null" || kill -9 "$p" 2>/dev/null
  done
  wait 2>/dev/null
  local g d
  for g in "${groups[@]}"; do
    for d in /sys/fs/cgroup/paladin/"$g" /sys/fs/cgroup/*/paladin/"$g"; do
      [[ -d $d ]] && wait_until 5 rmdir "$d" 2>/dev/null
    done
  done
  for d in "${mounts[@]}"; do umount -l "$d" 2>/dev/null; done
  if [[ -z ${KEEP_WORK:-} ]]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

# --- jobs -------------------------------------------------------------------------------------

# checkpoint IMAGE [ARGS...]: sets ck_rc and ck_out (stdout and stderr).
checkpoint() {
  local image=$1
  shift
  ck_rc=0
  ck_out=$(timeout "$LIMIT" "$PALADIN" checkpoint "$job_name" --out "$image" "$@" 2>&1) || ck_rc=$?
}

# restore IMAGE [ARGS...]: sets rs_rc, rs_out, and job_pid to the restored root.
restore() {
  rs_rc=0
  rs_out=$(timeout "$LIMIT" "$PALADIN" restore "$@" 2>&1) || rs_rc=$?
  local pid
  pid=$(sed -n 's/^restored .* as pid \([0-9]*\):.*/\1/p' <<<"$rs_out")
  if [[ -n $pid ]]; then
    job_pid=$pid
    roots+=("$pid")
  fi
}

# expect_checkpointed WHAT IMAGE PID...: after a checkpoint that stops the job, the command said
# so, every process of the tree (PIDs) is gone, paladin run ended with exit 0 naming the image,
# the job record says checkpointed, and the image verifies.
expect_checkpointed() {
  local what=$1 image=$2
  shift 2
  if ((ck_rc != 0)) || crashed "$ck_out"; then
    fail "$what: paladin checkpoint exit $ck_rc: $ck_out"
    return 1
  fi
  if ! grep -q "to $image: .*job stopped" <<<"$ck_out"; then
    fail "$what: paladin checkpoint did not say the job stopped: $ck_out"
  fi
  if ! wait_until 10 none_alive "$@"; then
    fail "$what: still running 10 s after the checkpoint: $(comms "$@")"
    return 1
  fi
  if ! wait_until 30 eval "! kill -0 $launcher 2>/dev/null"; then
    fail "$what: paladin run still running 30 s after its job was checkpointed"
    return 1
  fi
  local rc=0
  wait "$launcher" || rc=$?
  if ((rc != 0)) || ! grep -q "was checkpointed to $image" "$work/$job_name.run.err"; then
    fail "$what: paladin run exit $rc after the checkpoint: $(cat "$work/$job_name.run.err")"
  fi
  local state
  state=$(job_field state)
  [[ $state == checkpointed ]] || fail "$what: the job record says '$state', not checkpointed"
  local verify
  verify=$(timeout "$LIMIT" "$PALADIN" image verify "$image" 2>&1) ||
    fail "$what: the fresh image does not verify: $verify"
  pass "$what: checkpointed, every process gone, paladin run exited 0, image verifies"
}

# expect_restored WHAT: paladin restore said so and the restored root runs.
expect_restored() {
  local what=$1
  if ((rs_rc != 0)) || crashed "$rs_out" || ! alive "$job_pid"; then
    fail "$what: paladin restore exit $rs_rc: $rs_out"
    return 1
  fi
  local state
  state=$(job_field state)
  [[ $state == running ]] || fail "$what: the job record says '$state' after the restore"
  # Restored into a PID namespace of its own again: pid 1 there.
  local nspid
  nspid=$(awk '/^NSpid:/ { print $NF }' "/proc/$job_pid/status")
  [[ $nspid == 1 ]] || fail "$what: the restored root is pid $nspid in its namespace, not 1"
  pass "$what: restored as pid $job_pid"
}

lines_at_least() { (($(wc -l <"$1") >= $2)); }

# --- scenarios --------------------------------------------------------------------------------

last_step() { awk -v t="$1" '$1 == "thread" && $2 == t { s = $4 } END { print s + 0 }' "$log"; }
threads_at() {
  local t
  for t in 0 1 2 3; do (($(last_step $t) >= $1)) || return 1; done
}

# threads_went_on WHAT: after a restore of ckpt_threads cut at steps cut[] (the caller's), each
# thread gets 5 steps past step $top, every buffer matches its step, the steps run on with no
# gap or repeat, and the sums printed right after the cut and at top+5 are those of the buffers
# due then. Returns 1 when the threads do not get there.
threads_went_on() {
  if ! wait_until 60 threads_at $((top + 5)); then
    fail "$1: not every thread got 5 steps past step $top in 60 s after the restore" \
      "(steps now: $(for t in 0 1 2 3; do echo -n "$(last_step $t) "; done)): $(tail -3 "$log")"
    return 1
  fi
  if grep -q MISMATCH "$log"; then
    fail "$1: a buffer did not match its step: $(grep -m1 MISMATCH "$log")"
  fi
  # Every thread's steps run 1, 2, 3, ... through the checkpoint: none restarted, none skipped.
  local gaps
  gaps=$(awk '$1 == "thread" { if ($4 != last[$2] + 1) print "thread " $2 ": step " $4 \
    " after " last[$2] + 0; last[$2] = $4 }' "$log")
  if [[ -n $gaps ]]; then
    fail "$1: steps not consecutive across the restore: $(head -3 <<<"$gaps")"
  else
    pass "$1: every thread continued from its step (cut at ${cut[*]}), none restarted"
  fi
  # The sums it printed are those of the buffers it should hold at those steps.
  local step line want bad=0
  for t in 0 1 2 3; do
    for step in $((cut[t] + 1)) $((top + 5)); do
      line=$(awk -v t=$t -v s=$step '$1 == "thread" && $2 == t && $4 == s { print $6 }' "$log")
      want=$("$THREADS" --checksum 64 $t $step)
      if [[ $line != "$want" ]]; then
        fail "$1: thread $t step $step sum '$line', expected $want"
        bad=1
      fi
    done
  done
  ((bad == 0)) && pass "$1: buffer sums after the restore match their steps"
  return 0
}

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
# Under a GPU-memory quota on the emulated driver, but never touching CUDA: the image holds no
# GPU state, and the restore must not wait for a process to answer the driver for one.
scenario_quota_no_cuda() {
  python_file_scenario quota_no_cuda --gpu-mem 512MiB --emulated-gpus 1x4GiB
}

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

# The same under a GPU-memory quota: the interposer's counts travel with the job (cuMemGetInfo
# reports the same quota-relative free memory on the new GPU as before on the old one).
scenario_gpu_quota() { remap_scenario gpu_quota --gpu-mem 512MiB; }

scenario_bad_input() {
  # A copy of the workload under a name of its own, so that a process it starts can be found.
  local marker=$work/bad-input-workload.py
  cp "$HERE/seq_writer.py" "$marker"
  start_job badinput -- python3 "$marker" - --every-ms 20 || return
  if ! wait_until 60 lines_at_least "$log" 10; then
    fail "bad_input: the workload wrote nothing in 60 s: $(cat "$work/badinput.run.err")"
    return
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  local good=$work/good
  checkpoint "$good"
  expect_checkpointed bad_input "$good" "${before[@]}" || return

  local inspect criu_version
  inspect=$(timeout "$LIMIT" "$PALADIN" image inspect "$good" 2>&1)
  criu_version=$(timeout "$LIMIT" "$PALADIN" doctor 2>/dev/null |
    awk '$1 == "OK" && $2 == "criu" { print $3 }')
  if grep -q "^workload: *badinput " <<<"$inspect" && [[ -n $criu_version ]] &&
    grep -qE "^criu: +$criu_version( |\$)" <<<"$inspect"; then
    pass "bad_input: image inspect names the workload and CRIU $criu_version"
  else
    fail "bad_input: image inspect lacks the workload's name or CRIU '$criu_version': $inspect"
  fi

  local pages size
  local -a found=("$good"/pages-*.img)
  pages=${found[0]##*/}
  size=$(stat -c %s "$good/$pages")
  cp -a "$good" "$work/flipped"
  python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2]) // 2); b = f.read(1); f.seek(-1, 1); f.write(bytes([b[0] ^ 0xFF]))' \
    "$work/flipped/$pages" "$size"
  expect_error "bad_input: verify, one byte of $pages flipped" "$pages at offset" XXH3-128 \
    corrupted -- \
    image verify "$work/flipped"
  cp -a "$good" "$work/truncated"
  truncate -s $((size - 1)) "$work/truncated/$pages"
  expect_error "bad_input: verify, $pages truncated" "$pages" "$((size - 1)) bytes" \
    "the manifest says $size" -- image verify "$work/truncated"
  cp -a "$good" "$work/nomanifest"
  rm "$work/nomanifest/manifest.json"
  expect_error "bad_input: verify, no manifest" "no manifest" -- image verify "$work/nomanifest"
  cp -a "$good" "$work/v99"
  python3 -c 'import json, sys
m = json.load(open(sys.argv[1])); m["version"] = 99; json.dump(m, open(sys.argv[1], "w"))' \
    "$work/v99/manifest.json"
  expect_error "bad_input: verify, format version 99" "version 99" -- image verify "$work/v99"
  expect_error "bad_input: inspect, format version 99" "version 99" -- image inspect "$work/v99"

  # A restore refuses a damaged image and starts nothing.
  local image
  for image in flipped truncated v99; do
    expect_error "bad_input: restore of the $image image" "refusing to restore" -- \
      restore "$work/$image"
  done
  sleep 0.5
  local started
  started=$(pgrep -f -- "$marker")
  if [[ -n $started ]]; then
    local -a strays
    read -ra strays <<<"$started"
    roots+=("${strays[@]}")
    fail "bad_input: a refused restore started the workload anyway: pid(s) $started"
  else
    pass "bad_input: the refused restores started nothing"
  fi
  [[ $(job_field state) == checkpointed ]] ||
    fail "bad_input: the job record says '$(job_field state)' after the refused restores"

  expect_error "bad_input: checkpoint of an unknown job" "no job nosuchjob" -- \
    checkpoint nosuchjob --out "$work/nosuchjob"
  [[ ! -e $work/nosuchjob ]] || fail "bad_input: checkpoint of an unknown job left $work/nosuchjob"
  local out rc=0
  out=$(timeout "$LIMIT" "$PALADIN" restore "$good" --gpu-map garbage 2>&1) || rc=$?
  if ((rc == 2)) && grep -q -- "--gpu-map 'garbage'" <<<"$out"; then
    pass "bad_input: --gpu-map garbage is refused (exit 2)"
  else
    fail "bad_input: --gpu-map garbage: exit $rc (expected 2): $out"
  fi
  started=$(pgrep -f -- "$marker")
  [[ -z $started ]] || fail "bad_input: --gpu-map garbage started the workload: $started"

  # After all that, the intact image still restores and the workload continues.
  local cut
  cut=$(wc -l <"$log")
  restore "$good"
  expect_restored bad_input || return
  if wait_until 30 lines_at_least "$log" $((cut + 10)) &&
    [[ -z $(awk '$0 != "line " NR { print NR; exit }' "$log") ]]; then
    pass "bad_input: the intact image restores and continues after line $cut"
  else
    fail "bad_input: the intact image's workload did not continue from line $cut:" \
      "$(tail -3 "$log")"
  fi
}

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
}

# The pid, in its own namespace, of host pid PID (the last NSpid entry), and its real uid.
ns_pid() { awk '/^NSpid:/ { print $NF }' "/proc/$1/status" 2>/dev/null; }
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

# --- sockets (socket_job.py; docs/ckpt.md, "Sockets") --------------------------------------

# log_value WORD FILE: the second field of FILE's first line that starts with WORD.
log_value() { awk -v w="$1" '$1 == w { print $2; exit }' "$2"; }

http_get() {
  python3 -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:%s/hello.txt" % sys.argv[1],
                                        timeout=5).read().decode())' "$1" 2>/dev/null
}
http_answers() { [[ $(http_get "$1") == "$2" ]]; }

scenario_tcp_listen() {
  mkdir -p "$work/www"
  local content="paladin $RANDOM$RANDOM"
  echo "$content" >"$work/www/hello.txt"
  local port
  port=$(free_port)
  start_job http -- python3 -m http.server --bind 127.0.0.1 --directory "$work/www" "$port" ||
    return
  if ! wait_until 30 http_answers "$port" "$content"; then
    fail "tcp_listen: the server does not answer on port $port: $(tail -3 "$run_dir/stderr.log")"
    return
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  expect_checkpointed tcp_listen "$work/image" "${before[@]}" || return
  if http_get "$port" >/dev/null; then
    fail "tcp_listen: something answers on port $port while the job is checkpointed"
  fi
  restore "$work/image"
  expect_restored tcp_listen || return
  if wait_until 10 http_answers "$port" "$content"; then
    pass "tcp_listen: the restored server answers on port $port with the same page"
  else
    fail "tcp_listen: the restored server does not answer on port $port: $rs_out"
  fi
}

last_echo() { awk '$1 == "echo" { n = $2 } END { print n + 0 }' "$log"; }
echo_at_least() { (($(last_echo) >= $1)); }

scenario_tcp_internal() {
  start_job pair -- python3 "$HERE/socket_job.py" pair || return
  if ! wait_until 60 echo_at_least 100; then
    fail "tcp_internal: fewer than 100 round trips in 60 s: $(tail -3 "$log") $(tail -3 "$run_dir/stderr.log")"
    return
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  expect_checkpointed tcp_internal "$work/image" "${before[@]}" || return
  grep -q "closing the connection" <<<"$ck_out" &&
    fail "tcp_internal: the checkpoint closed a connection inside the job: $ck_out"
  compgen -G "$work/image/tcp-stream-*.img" >/dev/null ||
    fail "tcp_internal: the image holds no TCP connection state (tcp-stream-*.img)"
  local cut
  cut=$(last_echo)
  restore "$work/image"
  expect_restored tcp_internal || return
  if ! wait_until 60 echo_at_least $((cut + 200)); then
    fail "tcp_internal: no 200 more round trips in 60 s after the restore (cut at $cut, now" \
      "$(last_echo)): $(tail -3 "$log") $(tail -3 "$run_dir/stderr.log")"
    return
  fi
  local bad
  bad=$(awk '$1 == "BAD" { print; exit } $1 == "echo" && $2 != ++n { print "echo " $2 " where " n " was due"; exit }' "$log")
  if [[ -n $bad ]]; then
    fail "tcp_internal: $bad (cut at $cut)"
  elif (($(grep -c '^conn ' "$log") != 1)); then
    fail "tcp_internal: the child connected more than once: $(grep '^conn ' "$log")"
  else
    pass "tcp_internal: one connection, numbers 1..$(last_echo) sent and doubled both ways in" \
      "sequence across the restore (cut at $cut)"
  fi
}

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

scenario_tcp_outside() {
  start_job echo -- python3 "$HERE/socket_job.py" echo || return
  wait_until 30 grep -q '^listen ' "$log" || {
    fail "tcp_outside: the server is not listening after 30 s: $(tail -3 "$run_dir/stderr.log")"
    return
  }
  local port
  port=$(log_value listen "$log")
  local client_out=$work/client.out
  python3 "$HERE/socket_job.py" client "$port" >"$client_out" 2>&1 &
  launchers+=($!)
  if ! wait_until 30 grep -q '^echo 5$' "$client_out"; then
    fail "tcp_outside: the outside client got no 5 echoes: $(tail -3 "$client_out")"
    return
  fi
  local client
  client=$(log_value conn "$client_out")
  # A checkpoint failing at this step leaves the job as it was: its record says running, its
  # processes are not frozen (the outside client keeps getting echoes), a later one works.
  ck_rc=0
  ck_out=$(PALADIN_CKPT_FAULT=close-peers timeout "$LIMIT" "$PALADIN" checkpoint "$job_name" \
    --out "$work/failed" 2>&1) || ck_rc=$?
  local state echoes
  state=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["state"])' \
    "$run_dir/job.json")
  echoes=$(grep -c '^echo ' "$client_out")
  if ((ck_rc != 0)) && [[ $state == running ]] &&
    wait_until 10 bash -c "(( \$(grep -c '^echo ' '$client_out') > $((echoes + 5)) ))"; then
    pass "tcp_outside: a checkpoint failing at the outside connections leaves the job running"
  else
    fail "tcp_outside: after a failed checkpoint (rc $ck_rc) the record says '$state', echoes" \
      "$echoes -> $(grep -c '^echo ' "$client_out"): $ck_out"
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  if ! grep -q "closing the connection 127.0.0.1:$port -> $client to a peer outside the job" \
    <<<"$ck_out"; then
    fail "tcp_outside: the checkpoint did not say it closes the outside connection: $ck_out"
  fi
  expect_checkpointed tcp_outside "$work/image" "${before[@]}" || return
  if wait_until 10 grep -q '^error ECONNRESET$' "$client_out"; then
    pass "tcp_outside: the outside client saw a reset at the checkpoint"
  else
    fail "tcp_outside: the outside client did not see a reset: $(tail -2 "$client_out")"
  fi
  restore "$work/image"
  expect_restored tcp_outside || return
  if wait_until 10 grep -q "^ended $client: " "$log"; then
    pass "tcp_outside: the job saw its connection end: $(grep "^ended $client: " "$log")"
  else
    fail "tcp_outside: the restored job does not say its connection to $client ended: $(tail -3 "$log")"
  fi
  local second=$work/client2.out
  timeout 10 python3 "$HERE/socket_job.py" client "$port" >"$second" 2>&1 &
  launchers+=($!)
  if wait_until 10 grep -q '^echo 5$' "$second"; then
    pass "tcp_outside: the restored server echoes a new client on port $port"
  else
    fail "tcp_outside: a new client gets no echoes from port $port: $(tail -2 "$second")"
  fi
}

# --- stopped processes (stopped_job.py) -------------------------------------------------------

last_count() { awk -v w="$1" '$1 == w { n = $2 } END { print n + 0 }' "$log"; }
count_at_least() { (($(last_count "$1") >= $2)); }

# host_of ROOT NSPID: the host pid of the process of ROOT's tree that is NSPID in its namespace.
host_of() {
  local p
  for p in $(tree "$1"); do
    if [[ $(ns_pid "$p") == "$2" ]]; then
      echo "$p"
      return
    fi
  done
}

state_of() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return
  stat=${stat##*) }
  echo "${stat:0:1}"
}

# check_stopped WHAT WHEN NSPID STOPPED RUNNING: the job's process NSPID is stopped (state T) and
# its count (STOPPED) stands still while the other's (RUNNING) goes on.
check_stopped() {
  local what=$1 when=$2 ns=$3 stopped=$4 running=$5 host
  host=$(host_of "$job_pid" "$ns")
  if [[ -z $host ]]; then
    fail "$what: $when: no process is pid $ns of the job's namespace"
    return 1
  fi
  local c r
  c=$(last_count "$stopped")
  r=$(last_count "$running")
  sleep 1
  if [[ $(state_of "$host") == T ]] && (($(last_count "$stopped") == c)) &&
    (($(last_count "$running") >= r + 10)); then
    pass "$what: $when: pid $ns (host $host) is still stopped at $stopped $c, $running runs on"
  else
    fail "$what: $when: pid $ns (host $host) is in state '$(state_of "$host")', $stopped" \
      "$c -> $(last_count "$stopped"), $running $r -> $(last_count "$running") in 1 s"
    return 1
  fi
}

# stopped_rounds WHAT NSPID STOPPED RUNNING: a --leave-running checkpoint, a checkpoint and a
# restore, each leaving stopped what was stopped; then the stopped one is woken by hand.
stopped_rounds() {
  local what=$1 ns=$2 stopped=$3 running=$4
  check_stopped "$what" "before the checkpoint" "$ns" "$stopped" "$running" || return
  checkpoint "$work/image-$what-live" --leave-running
  if ((ck_rc != 0)) || crashed "$ck_out"; then
    fail "$what: paladin checkpoint --leave-running exit $ck_rc: $ck_out"
    return
  fi
  check_stopped "$what" "after a --leave-running checkpoint" "$ns" "$stopped" "$running" || return
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image-$what"
  if ((ck_rc != 0)) || ! wait_until 10 none_alive "${before[@]}"; then
    fail "$what: paladin checkpoint exit $ck_rc, or the job still runs: $ck_out"
    return
  fi
  local recorded
  recorded=$(python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["workload"].get("stopped"))' "$work/image-$what/manifest.json")
  [[ $recorded == "[$ns]" ]] ||
    fail "$what: the manifest records the stopped processes as $recorded, not [$ns]"
  restore "$work/image-$what"
  if ((rs_rc != 0)) || ! alive "$job_pid"; then
    fail "$what: paladin restore exit $rs_rc: $rs_out"
    return
  fi
  check_stopped "$what" "after the restore" "$ns" "$stopped" "$running" || return
  local host c
  host=$(host_of "$job_pid" "$ns")
  c=$(last_count "$stopped")
  kill -CONT "$host"
  if wait_until 10 count_at_least "$stopped" $((c + 10)); then
    pass "$what: woken by hand after the restore, $stopped continues its count from $c"
  else
    fail "$what: $stopped did not count on after SIGCONT (at $(last_count "$stopped"), state" \
      "$(state_of "$host"))"
  fi
  local bad
  bad=$(awk -v w="$stopped" '$1 == w && $2 != ++n { print w " " $2 " where " n " was due"; exit }' \
    "$log")
  [[ -z $bad ]] || fail "$what: $bad: the restored $stopped restarted or skipped"
}

scenario_stopped() {
  start_job stopped -- python3 "$HERE/stopped_job.py" child || return
  if ! wait_until 30 grep -q '^stopped ' "$log"; then
    fail "stopped: the job stopped nothing in 30 s: $(tail -3 "$run_dir/stderr.log")"
    return
  fi
  stopped_rounds stopped "$(log_value stopped "$log")" child parent

  # Under paladin-workload-init (a root job with a lease, as the node agent starts them): the
  # interpreter, the init's child, stops itself.
  start_under_init stopped stopinit 0 0 python3 "$HERE/stopped_job.py" self || return
  if ! wait_until 30 grep -q '^stopped ' "$log"; then
    fail "stopped: the job under the init stopped nothing in 30 s: $(tail -3 "$run_dir/stderr.log")"
    return
  fi
  local ns
  ns=$(log_value stopped "$log")
  [[ $ns == 2 ]] || fail "stopped: under the init the interpreter is pid $ns, not 2"
  # The node's fence (docs/agent.md, "Fencing") stops the whole job when its lease runs out and
  # continues it once renewed: what the job had stopped itself stays stopped.
  check_stopped stopped_init "before the fence" "$ns" parent child || return
  local child p
  for p in $(tree "$job_pid"); do
    if [[ $(ns_pid "$p") != 1 && $(ns_pid "$p") != "$ns" ]]; then child=$p; fi
  done
  write_lease "$work/lease" -1
  if wait_until 5 is_stopped "$child"; then
    pass "stopped_init: the lease ran out: the init stopped the running process too"
  else
    fail "stopped_init: the lease ran out 5 s ago and the child (host ${child:-?}) is in state" \
      "'$(state_of "$child")'"
  fi
  write_lease "$work/lease" 3600
  if wait_until 5 eval "! is_stopped '$child'"; then
    check_stopped stopped_init "after the fence was lifted" "$ns" parent child
  else
    fail "stopped_init: the lease was renewed 5 s ago and the child (host $child) is still stopped"
  fi
  stopped_rounds stopped_init "$ns" parent child
}

is_stopped() { [[ -n $1 && $(state_of "$1") == T ]]; }

# write_lease FILE SECONDS: the node lease (include/paladin/ckpt/fence.h) with a deadline SECONDS
# from now (negative: already past), written in place as the agent writes it.
write_lease() {
  python3 -c 'import struct, sys, time
d = time.clock_gettime_ns(time.CLOCK_BOOTTIME) + int(float(sys.argv[2]) * 1e9)
with open(sys.argv[1], "r+b") as f:
    f.write(b"PLDLEASE" + struct.pack("<QQ", d, d ^ 0xa5c3e1f00f1e3c5a))' "$1" "$2"
}

# --- the job's own namespaces (ns_job.py; docs/ckpt.md, "What a job sees") ---------------------

last_self() { awk '$1 == "self" { l = $0 } END { print l }' "$log"; }
self_at_least() { (($(awk '$1 == "self" { n = $2 } END { print n + 0 }' "$log") >= $1)); }

# check_self WHAT WHEN PID PROCS: the job's last lines since line CUT say getpid(), /proc/self/stat
# and /proc/self all give PID, and /proc lists at most PROCS processes.
check_self() {
  local what=$1 when=$2 want=$3 procs=$4 from=$5 bad
  bad=$(awk -v from="$from" -v p="$want" -v most="$procs" '$1 == "self" && $2 > from &&
    ($3 != p || $4 != p || $5 != p || $6 > most) { print; exit }' "$log")
  if [[ -z $bad ]]; then
    pass "$what: $when: getpid(), /proc/self/stat and /proc/self all say $want; /proc lists" \
      "only the job's processes ($(last_self | awk '{ print $6 }'))"
  else
    fail "$what: $when: '$bad' (self N GETPID STAT LINK PROCS; expected pid $want, at most" \
      "$procs processes)"
  fi
}

own_namespaces() {
  local what=$1 ns
  for ns in mnt ipc; do
    if [[ $(readlink "/proc/$job_pid/ns/$ns") == "$(readlink "/proc/$$/ns/$ns")" ]]; then
      fail "$what: the job shares the host's $ns namespace"
      return 1
    fi
  done
  pass "$what: the job has its own mount and IPC namespaces"
}

# self_rounds WHAT PID PROCS ROUNDS: checkpoint and restore ROUNDS times, checking what the job
# sees of itself each time.
self_rounds() {
  local what=$1 want=$2 procs=$3 rounds=$4 round cut=0
  if ! wait_until 30 self_at_least 20; then
    fail "$what: the job wrote no 20 lines in 30 s: $(tail -3 "$run_dir/stderr.log")"
    return 1
  fi
  check_self "$what" started "$want" "$procs" 0
  own_namespaces "$what"
  for ((round = 1; round <= rounds; round++)); do
    local -a before
    read -ra before <<<"$(tree "$job_pid")"
    checkpoint "$work/image-$what-$round"
    if ((ck_rc != 0)) || ! wait_until 10 none_alive "${before[@]}"; then
      fail "$what: checkpoint $round: exit $ck_rc: $ck_out"
      return 1
    fi
    cut=$(awk '$1 == "self" { n = $2 } END { print n + 0 }' "$log")
    restore "$work/image-$what-$round"
    expect_restored "$what (round $round)" || return 1
    if ! wait_until 30 self_at_least $((cut + 20)); then
      fail "$what: no 20 more lines in 30 s after restore $round (cut at $cut)"
      return 1
    fi
    check_self "$what" "after restore $round" "$want" "$procs" "$cut"
    own_namespaces "$what (round $round)"
  done
  local gaps
  gaps=$(awk '$1 == "self" && $2 != ++n { print "self " $2 " where " n " was due"; exit }' "$log")
  [[ -z $gaps ]] || fail "$what: $gaps: the job restarted"
}

scenario_proc_self() {
  start_job nsself -- python3 "$HERE/ns_job.py" self || return
  # The host file system stays visible: the job runs the test's script from it.
  self_rounds proc_self 1 1 1 || return
  start_under_init proc_self nsinit 0 0 python3 "$HERE/ns_job.py" self || return
  # Twice: the first restore hands the init its lease from outside the job's mounts (CRIU's
  # --inherit-fd), which it must open again inside them for the second dump to succeed.
  self_rounds proc_self_init 2 2 2
}

last_ipc() { awk '$1 == "ipc" && $3 == "ok" { n = $2 } END { print n + 0 }' "$log"; }
ipc_at_least() { (($(last_ipc) >= $1)); }

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
  out=$(timeout "$LIMIT" "$PALADIN" migrate "$job_name" --peer "127.0.0.1:$port" 2>&1) || rc=$?
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

# --- the restored job's cgroup ------------------------------------------------------------------

# group_dirs NAME: the job's group's directories that exist (v2, or the v1 controllers).
group_dirs() {
  local d
  for d in /sys/fs/cgroup/paladin/"$1" /sys/fs/cgroup/*/paladin/"$1"; do
    [[ -d $d ]] && echo "$d"
  done
}
group_gone() { [[ -z $(group_dirs "$1") ]]; }

scenario_restored_cgroup() {
  if [[ $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null) == "" && ! -d /sys/fs/cgroup/memory ]]; then
    echo "SKIP: no cgroup hierarchy"
    exit 77
  fi
  # Writes a line every 10 ms until $work/stop exists, then ends by itself.
  start_job cgjob -- python3 -c 'import os, sys, time
n = 0
while not os.path.exists(sys.argv[1]):
    n += 1
    print("line", n, flush=True)
    time.sleep(0.01)' "$work/stop" || return
  local group
  group=$(job_field cgroup)
  if [[ -z $group || -z $(group_dirs "$group") ]]; then
    fail "restored_cgroup: paladin run made no cgroup ('$group')"
    return
  fi
  wait_until 30 lines_at_least "$log" 20 || fail "restored_cgroup: the job wrote nothing"
  # Groups another program makes on a cgroup v1 host while the job runs, with a process in them,
  # and removes before the restore (a kubelet's pods), at the root of every hierarchy but
  # cpuset's (a cpuset group takes no process before its CPUs are set): not the job's, so not in
  # its image: the restore neither fails on their absence nor makes them again.
  local -a foreign=()
  local h sleeper=''
  if [[ ! -f /sys/fs/cgroup/cgroup.controllers ]]; then
    sleep 600 &
    sleeper=$!
    for h in /sys/fs/cgroup/*/; do
      [[ -f $h/cgroup.procs && $h != */cpuset/ ]] || continue
      mkdir -p "${h}paladin-foreign-$$/pod" 2>/dev/null || continue
      foreign+=("${h}paladin-foreign-$$")
      echo "$sleeper" >"${h}paladin-foreign-$$/pod/cgroup.procs" 2>/dev/null
    done
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  checkpoint "$work/image"
  expect_checkpointed restored_cgroup "$work/image" "${before[@]}" || return
  [[ -z $sleeper ]] || { kill "$sleeper"; wait "$sleeper"; } 2>/dev/null
  for h in "${foreign[@]}"; do rmdir "$h/pod" "$h"; done
  wait_until 10 group_gone "$group" ||
    fail "restored_cgroup: paladin run left $group behind at the checkpoint: $(group_dirs "$group")"

  local round
  for round in killed exits; do
    restore "$work/image"
    expect_restored "restored_cgroup ($round)" || return
    local root=$job_pid again=()
    for h in "${foreign[@]}"; do
      [[ -d $h ]] && again+=("$h") && find "$h" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    if ((${#again[@]} > 0)); then
      fail "restored_cgroup ($round): the restore made again groups that were never the job's:" \
        "${again[*]}"
    elif ((${#foreign[@]} > 0)); then
      pass "restored_cgroup ($round): ${#foreign[@]} groups another program had while the job" \
        "ran, gone before the restore, were not made again"
    fi
    if [[ -n $(group_dirs "$group") ]] && grep -q ":/paladin/$group\$" "/proc/$root/cgroup" &&
      [[ $(job_field cgroup) == "$group" ]]; then
      pass "restored_cgroup ($round): the restored job is in its group $group, its record names it"
    else
      fail "restored_cgroup ($round): restored into '$(grep paladin "/proc/$root/cgroup" | head -1)'," \
        "record '$(job_field cgroup)', dirs '$(group_dirs "$group")', expected $group"
    fi
    if [[ $round == killed ]]; then
      kill -9 "$root"
    else
      touch "$work/stop"
    fi
    if ! wait_until 10 eval "! alive $root"; then
      fail "restored_cgroup ($round): the job did not end"
      return
    fi
    if wait_until 15 group_gone "$group"; then
      pass "restored_cgroup ($round): once the restored job ended, its group is gone"
    else
      fail "restored_cgroup ($round): its group is still there 15 s after the restored job ended:" \
        "$(group_dirs "$group")"
    fi
  done
}

case $SCENARIO in
  threads | python_file | quota_no_cuda | pipe | gpu_remap | gpu_quota | bad_input | leave_running | \
    unprivileged | tcp_listen | tcp_internal | udp | tcp_outside | stopped | restored_cgroup | proc_self | \
    sysv_ipc | sysv_ipc_migrate) ;;
  *)
    echo "unknown scenario $SCENARIO" >&2
    exit 2
    ;;
esac
started_at=$SECONDS
"scenario_$SCENARIO"
echo "$SCENARIO: $((SECONDS - started_at)) s, $failures failure(s)"
((failures == 0))
