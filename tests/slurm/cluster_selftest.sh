#!/usr/bin/env bash
# Self-test of tests/slurm/cluster.sh: starts a cluster in a temporary directory, runs a batch job
# to completion, two jobs at once, a requeue and a cancel, stops the cluster and checks that
# nothing it started is left. Run as root. Exit 0 when all checks pass.
# SLURM_TEST_KEEP=1 keeps the work directory (logs) afterwards.
set -u

if [ "$(id -u)" -ne 0 ]; then
  echo "cluster_selftest: needs root" >&2
  exit 1
fi
unset SLURM_TEST_DIR  # never stop a cluster this test did not start

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=cluster.sh
source "$here/cluster.sh"
# shellcheck source=tests/cli/testlib.sh
source "$here/../cli/testlib.sh" # fail, pass, failures

work=$(mktemp -d /tmp/paladin-slurm.XXXXXX)
chmod 0755 "$work"  # munged wants every directory above its socket to be searchable by all

cleanup() {
  slurm_stop
  if [ "${SLURM_TEST_KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT


# Field $2 (e.g. JobState, Restarts, StdOut) of job $1, from scontrol.
job_field() {
  scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# Waits up to $3 seconds for job $1 to reach state $2.
wait_state() {
  for _ in $(seq 1 $(($3 * 5))); do
    [ "$(job_field "$1" JobState)" = "$2" ] && return 0
    sleep 0.2
  done
  return 1
}

# Waits up to $3 seconds for file $1 to contain a line matching $2.
wait_line() {
  for _ in $(seq 1 $(($3 * 5))); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

# Pids of live processes whose environment says SLURM_JOB_ID=$1.
job_pids() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "SLURM_JOB_ID=$1" && echo "${p#/proc/}"
  done
}

# Pids of live processes (other than this shell) named munged, slurm* (slurmctld, slurmd,
# slurmstepd, slurmscriptd, the batch script slurm_script) or sleep (the jobs) whose environment
# holds this cluster's SLURM_CONF=$1.
cluster_pids() {
  local p comm
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$$" ] && continue
    comm=$(cat "$p/comm" 2>/dev/null) || continue
    case $comm in munged | slurm* | sleep) ;; *) continue ;; esac
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "SLURM_CONF=$1" && echo "${p#/proc/}"
  done
}

# --- slurm_stop before any start, and after a start that failed half-way ---------------------
slurm_stop && pass "slurm_stop with nothing started"
mkdir -p "$work/fakebin"
printf '#!/bin/sh\nexit 1\n' >"$work/fakebin/slurmd"
chmod +x "$work/fakebin/slurmd"
if PATH="$work/fakebin:$PATH" slurm_start "$work/half" 2>/dev/null; then
  fail "slurm_start succeeded without a slurmd"
else
  half_conf=$SLURM_CONF
  [ -n "$(cluster_pids "$half_conf")" ] || fail "half-way start left no daemons to stop (test is moot)"
  slurm_stop
  slurm_stop
  left=$(cluster_pids "$half_conf")
  if [ -z "$left" ]; then pass "slurm_stop after a half-way start"; else fail "left after half-way start: $left"; fi
fi

# --- start --------------------------------------------------------------------------------------
# There is no SPANK plugin to load here; a comment line shows that the line lands in the file
# (an "optional" line naming a missing plugin works too, but every client command then complains).
plug="# paladin selftest: no plugin"
t0=$(date +%s.%N)
if ! slurm_start "$work/cluster" "$plug"; then
  fail "slurm_start"
  exit 1
fi
pass "slurm_start in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s ($SLURM_TEST_NODE, $(grep -o 'CPUs=[0-9]*' "$SLURM_CONF"))"
conf=$SLURM_CONF
started=$(cat "$work/cluster/run/"*.pid)
if [ "$(cat "$work/cluster/etc/plugstack.conf")" = "$plug" ] &&
  scontrol show config | grep -qx "PlugStackConfig *= $work/cluster/etc/plugstack.conf"; then
  pass "plugstack.conf holds the line and is the one Slurm uses"
else
  fail "plugstack: $(cat "$work/cluster/etc/plugstack.conf"); $(scontrol show config | grep PlugStack)"
fi
mkdir -p "$work/jobs"
cd "$work/jobs" || exit 1

# --- a batch job runs to completion and writes its output --------------------------------------
j=$(sbatch --parsable --wrap 'echo hello; sleep 2')
if wait_state "$j" COMPLETED 30; then
  out=$(job_field "$j" StdOut)
  if grep -qx hello "$out" 2>/dev/null; then pass "job $j COMPLETED, $out says hello"; else fail "job $j output $out lacks hello"; fi
else
  fail "job $j not COMPLETED (state $(job_field "$j" JobState))"
fi

# --- srun from this shell -------------------------------------------------------------------
got=$(timeout 30 srun -n1 hostname -s 2>&1)
if [ "$got" = "$(hostname -s)" ]; then pass "srun hostname"; else fail "srun hostname: $got"; fi

# --- two 1-CPU jobs run at the same time; scancel ends one of them -----------------------------
a=$(sbatch --parsable -n1 --wrap 'sleep 10')
b=$(sbatch --parsable -n1 --wrap 'sleep 10')
both=0
for _ in $(seq 1 75); do
  if [ "$(job_field "$a" JobState)" = RUNNING ] && [ "$(job_field "$b" JobState)" = RUNNING ]; then both=1; break; fi
  sleep 0.2
done
if [ "$both" = 1 ]; then pass "jobs $a and $b RUNNING at once"; else
  fail "jobs $a and $b not RUNNING together ($(job_field "$a" JobState) $(job_field "$b" JobState))"
fi
[ -n "$(job_pids "$a")" ] || fail "no processes found for running job $a"
scancel "$a"
if wait_state "$a" CANCELLED 15; then
  # The job's processes go with it (KillWait=5 bounds how long they may take).
  for _ in $(seq 1 50); do [ -z "$(job_pids "$a")" ] && break; sleep 0.2; done
  if [ -z "$(job_pids "$a")" ]; then pass "scancel $a: CANCELLED, processes gone"; else fail "job $a processes left: $(job_pids "$a")"; fi
else
  fail "job $a not CANCELLED after scancel ($(job_field "$a" JobState))"
fi
[ "$(job_field "$b" JobState)" = RUNNING ] || fail "job $b not RUNNING after cancelling $a"
scancel "$b"

# --- scontrol requeue: back to PENDING, then a second run with SLURM_RESTART_COUNT=1 -----------
# The same job twice, once with the default output mode and once with --open-mode=append.
for mode in default append; do
  opts=()
  [ "$mode" = append ] && opts=(--open-mode=append)
  # shellcheck disable=SC2016 # expanded by the job
  j=$(sbatch --parsable "${opts[@]}" -o "$work/jobs/requeue-$mode-%j.out" \
    --wrap 'echo "run restart_count=${SLURM_RESTART_COUNT-unset}"; sleep 60')
  out=$work/jobs/requeue-$mode-$j.out
  if ! wait_line "$out" 'restart_count=' 20; then
    fail "requeue($mode): first run of $j printed nothing ($(job_field "$j" JobState))"
    scancel "$j"
    continue
  fi
  echo "   requeue($mode): first run printed: $(cat "$out")"
  t0=$(date +%s.%N)
  scontrol requeue "$j" || fail "scontrol requeue $j"
  if wait_state "$j" PENDING 15; then
    pass "requeue($mode): $j PENDING (Reason=$(job_field "$j" Reason), BeginTime=$(job_field "$j" EligibleTime))"
  else
    fail "requeue($mode): $j never PENDING ($(job_field "$j" JobState))"
  fi
  if wait_state "$j" RUNNING 60 && wait_line "$out" 'restart_count=1' 10; then
    secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
    pass "requeue($mode): $j running again ${secs} s after the requeue, Restarts=$(job_field "$j" Restarts)"
  else
    fail "requeue($mode): $j did not run again ($(job_field "$j" JobState)); output: $(cat "$out" 2>/dev/null)"
  fi
  if [ "$(grep -c 'restart_count=' "$out")" -ge 2 ]; then
    echo "   requeue($mode): output file appended: $(tr '\n' '|' <"$out")"
  else
    echo "   requeue($mode): output file truncated: $(tr '\n' '|' <"$out")"
  fi
  scancel "$j"
done

# --- stop: nothing this cluster started is left, a running job included ------------------------
j=$(sbatch --parsable --wrap 'sleep 300')
wait_state "$j" RUNNING 20 || fail "job $j not RUNNING before slurm_stop"
scancel_pending=$(squeue -h -o %A | tr '\n' ' ')
t0=$(date +%s.%N)
slurm_stop
pass "slurm_stop in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s (jobs left to cancel: ${scancel_pending:-none})"
slurm_stop || fail "second slurm_stop"
for pid in $started; do
  if kill -0 "$pid" 2>/dev/null; then fail "daemon pid $pid still alive"; fi
done
left=$(cluster_pids "$conf")
if [ -z "$left" ]; then pass "no munged/slurm*/job processes left"; else
  fail "left: $(for p in $left; do printf '%s(%s) ' "$p" "$(cat "/proc/$p/comm" 2>/dev/null)"; done)"
fi

if [ "$failures" -eq 0 ]; then echo "cluster_selftest: PASS"; else echo "cluster_selftest: $failures FAILED"; fi
[ "$failures" -eq 0 ]
