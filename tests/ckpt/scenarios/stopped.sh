# shellcheck shell=bash
# Checkpoint scenario stopped: Two counting processes, one stopped (SIGSTOP) by the job itself:
# after a --leave-running checkpoint and after a restore the stopped one is still stopped (state T,
# its count still) and the other runs; woken by hand, it continues its count. Then the same with the
# stopped process as paladin-workload-init's child (the init must not pass Paladin's resume on to
# it), and through the node lease's fence (the lease runs out, then is renewed).
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

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
