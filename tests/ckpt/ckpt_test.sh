#!/usr/bin/env bash
# Checkpoint/restore end to end, in the pattern of CRIU's ZDTM tests: start a workload with
# `paladin run`, let it build up state, `paladin checkpoint` it (which stops it), check that it is
# gone, `paladin restore` it, and check that it continued from where it was (not from the start)
# with its state intact.
#
# This is the harness; the scenarios lie beside it, one file each in scenarios/NAME.sh (its header
# says what it checks): the workload it starts, its steps and its checks, as a function
# scenario_NAME built from the steps and checks defined here (start_job, checkpoint, restore,
# expect_checkpointed, expect_restored, and the checks that several scenarios share) and in
# ckptlib.sh and ../cli/testlib.sh. A scenario that must run in a mount namespace of its own sets
# SCENARIO_OWN_MOUNTS=1. A new scenario is a new file there: tests/ckpt/CMakeLists.txt makes a
# ctest ckpt_NAME of each.
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
if [[ ! $SCENARIO =~ ^[a-z_]+$ || ! -f $HERE/scenarios/$SCENARIO.sh ]]; then
  echo "unknown scenario '$SCENARIO'; the scenarios:" \
    "$(cd "$HERE/scenarios" && ls -- *.sh | sed 's/\.sh$//' | tr '\n' ' ')" >&2
  exit 2
fi
SCENARIO_OWN_MOUNTS=
source "$HERE/scenarios/$SCENARIO.sh"

LIMIT=120 # seconds for any one paladin command

if ((EUID != 0)); then
  echo "SKIP: checkpoint/restore needs root (PID namespaces, CRIU)"
  exit 77
fi
# A scenario that mounts a tmpfs over the run base (sysv_ipc_migrate's move) runs in a mount
# namespace of this run's own, so that no job of another test, started meanwhile, takes that mount
# into its own namespace (and then cannot be dumped or restored once it is gone: docs/ckpt.md,
# "Known limits").
if [[ -n $SCENARIO_OWN_MOUNTS && -z ${PALADIN_CKPT_OWN_MOUNTS:-} ]]; then
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
  PALADIN_EMU_CTX_OVERHEAD PALADIN_EMU_DRIVER_VERSION PALADIN_EMU_CHECKPOINT_RATE \
  PALADIN_EMU_RESTORE_RATE PALADIN_GPU_CALLS_AT_ONCE LD_PRELOAD CUDA_VISIBLE_DEVICES
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

# --- checks that several scenarios share -------------------------------------------------------

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

# The pid, in its own namespace, of host pid PID (the last NSpid entry).
ns_pid() { awk '/^NSpid:/ { print $NF }' "/proc/$1/status" 2>/dev/null; }

# log_value WORD FILE: the second field of FILE's first line that starts with WORD.
log_value() { awk -v w="$1" '$1 == w { print $2; exit }' "$2"; }

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

last_ipc() { awk '$1 == "ipc" && $3 == "ok" { n = $2 } END { print n + 0 }' "$log"; }

ipc_at_least() { (($(last_ipc) >= $1)); }

started_at=$SECONDS
if ! declare -F "scenario_$SCENARIO" >/dev/null; then
  echo "FAIL: $HERE/scenarios/$SCENARIO.sh defines no scenario_$SCENARIO (does it parse?)"
  exit 1
fi
"scenario_$SCENARIO"
echo "$SCENARIO: $((SECONDS - started_at)) s, $failures failure(s)"
((failures == 0))
