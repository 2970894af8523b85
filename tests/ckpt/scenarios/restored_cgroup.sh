# shellcheck shell=bash
# Checkpoint scenario restored_cgroup: A restored job is back in its cgroup, its record names it,
# and once the job ends (killed, then a second restore that exits by itself) the group is gone;
# groups another program made on a cgroup v1 host while the job ran, gone before the restore, are
# not made again by it (they are not in its image).
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

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
