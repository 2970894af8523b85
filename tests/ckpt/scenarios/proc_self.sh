# shellcheck shell=bash
# Checkpoint scenario proc_self: A job reading /proc/self (its own /proc in its own mount namespace)
# sees its namespace pid, as getpid() does, and only its own processes, before and after a restore;
# under paladin-workload-init (pid 2), through two restores.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

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
