# Shared by the checkpoint end-to-end scripts (tests/ckpt/*_test.sh, tests/zdtm/run.sh,
# tests/security/images_test.sh): CRIU's presence, the caller's descriptors, processes seen from
# the host's /proc, and jobs started with `paladin run`. Sourced after tests/cli/testlib.sh
# where fail is needed (start_job); start_job also needs PALADIN, work and PALADIN_RUN_DIR.

# skip_without_criu: exits 77 (skipped) when there is no CRIU to run.
skip_without_criu() {
  if [[ -z ${PALADIN_CRIU:-} && ! -x /opt/paladin/criu/criu ]] && ! command -v criu >/dev/null; then
    echo "SKIP: no CRIU (install it with scripts/criu.sh)"
    exit 77
  fi
}

# close_inherited_fds: closes the descriptors inherited from the caller (ctest passes its own
# log file): the workloads would inherit them too and make their images depend on files that
# change. Bash keeps its script on 255, close-on-exec.
close_inherited_fds() {
  local fd
  for fd in "/proc/$$/fd/"*; do
    fd=${fd##*/}
    if ((fd > 2 && fd != 255)); then eval "exec $fd>&-"; fi
  done
}

# --- processes --------------------------------------------------------------------------------

# alive PID: the process exists and is not a zombie (a restored job's parent is init, which may
# be slow to reap it).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z && ${stat:0:1} != X ]]
}

# tree ROOT: ROOT and every live process below it, host pids.
tree() {
  local table p
  local -a queue=("$1") out=()
  table=$(ps -eo pid=,ppid=)
  while ((${#queue[@]} > 0)); do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    alive "$p" || continue
    out+=("$p")
    mapfile -t -O "${#queue[@]}" queue < <(awk -v pp="$p" '$2 == pp { print $1 }' <<<"$table")
  done
  echo "${out[@]}"
}

none_alive() {
  local p
  for p in "$@"; do
    if alive "$p"; then return 1; fi
  done
  return 0
}

# comms PID...: the processes' command names, sorted, on one line.
comms() {
  local p
  for p in "$@"; do cat "/proc/$p/comm" 2>/dev/null; done | sort | tr '\n' ' '
}

# wait_until SECONDS COMMAND...: polls COMMAND every WAIT_POLL_S seconds (default 0.1); false
# when it never succeeded.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  while ! "$@"; do
    ((SECONDS >= deadline)) && return 1
    sleep "${WAIT_POLL_S:-0.1}"
  done
  return 0
}

# wait_listening PORT: true once something listens on TCP PORT here (within 10 s): a receiver
# started in the background is ready for a move (a fixed sleep lost that race on a busy machine).
wait_listening() {
  wait_until 10 eval "ss -Hltn 'sport = :$1' | grep -q ."
}

# kill_trees ROOT...: SIGKILL to every process of the trees under ROOTs; waits up to 10 s until
# they are gone.
kill_trees() {
  local root p pids=()
  local -a some
  for root in "$@"; do
    read -ra some <<<"$(tree "$root")"
    pids+=("${some[@]}")
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait_until 10 none_alive "${pids[@]}"
}

# --- jobs -------------------------------------------------------------------------------------

# job_field KEY: a field of $run_dir/job.json (python: $PY, else python3 on PATH).
job_field() {
  "${PY:-python3}" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
    "$run_dir/job.json" "$1" 2>/dev/null
}

# start_job NAME [RUN-ARGS...] -- COMMAND...
# Starts `paladin run --name NAME ...` in the background and waits for its job record. Sets
# job_name, launcher, run_dir, log (the workload's stdout.log) and job_pid (host pid of its root);
# adds the launcher to launchers, the root to roots and the run directory's name (its cgroup's)
# to groups.
start_job() {
  job_name=$1
  shift
  # In a folder of its own: CRIU's parasite creates proc.crtools in the working directory of a
  # task whose /proc is not its namespace's, so two dumps of jobs sharing one collide (EEXIST).
  mkdir -p "$work/cwd-$job_name"
  (cd "$work/cwd-$job_name" && exec timeout 600 "$PALADIN" run --name "$job_name" "$@") \
    >"$work/$job_name.run.out" 2>"$work/$job_name.run.err" &
  launcher=$!
  launchers+=("$launcher")
  job_pid=0
  run_dir=
  local i
  for ((i = 0; i < 300; i++)); do
    run_dir=$(find "$PALADIN_RUN_DIR" -mindepth 1 -maxdepth 1 -name "$job_name-*" | head -1)
    if [[ -n $run_dir && -f $run_dir/job.json ]]; then
      job_pid=$(job_field pid)
      ((job_pid > 0)) && break
    fi
    sleep 0.05
  done
  if ((job_pid <= 0)); then
    fail "$job_name: paladin run wrote no job record in 15 s: $(cat "$work/$job_name.run.err")"
    return 1
  fi
  roots+=("$job_pid")
  groups+=("$(basename "$run_dir")")
  log=$run_dir/stdout.log
}

# start_under_init WHAT NAME UID GID CMD...: starts job NAME (CMD, as UID:GID) under
# paladin-workload-init with a node lease, as the node agent starts its jobs (ckpt_start_as,
# START_AS; the init holds the lease on descriptor 10); sets job_name, run_dir, job_pid and log
# as start_job does. Returns 1 when it could not: a note when there is no START_AS, a failure
# (naming WHAT) otherwise.
start_under_init() {
  local what=$1 out
  job_name=$2
  if [[ -z $START_AS ]]; then
    echo "note: no ckpt_start_as (argument 5): the round under paladin-workload-init is skipped"
    return 1
  fi
  # Found next to paladin in the build tree; ckpt_start_as is elsewhere.
  PALADIN_WORKLOAD_INIT=$(dirname "$PALADIN")/paladin-workload-init
  export PALADIN_WORKLOAD_INIT
  mkdir -p "$work/cwd-$job_name"
  out=$(cd "$work/cwd-$job_name" && PALADIN_TEST_LEASE="$work/lease" "$START_AS" "$job_name" \
    "$3" "$4" -- "${@:5}" 2>&1) || {
    fail "$what: ckpt_start_as failed: $out"
    return 1
  }
  run_dir=$(find "$PALADIN_RUN_DIR" -mindepth 1 -maxdepth 1 -name "$job_name-*" | head -1)
  job_pid=$(job_field pid)
  if [[ -z $run_dir ]] || ! ((job_pid > 0)); then
    fail "$what: no job record after ckpt_start_as: $out"
    return 1
  fi
  roots+=("$job_pid")
  groups+=("$(basename "$run_dir")")
  log=$run_dir/stdout.log
  grep -q "init 1" <<<"$out" || fail "$what: not started under paladin-workload-init: $out"
}

# --- moves (migrate_test.sh, migrate_commit_test.sh) -----------------------------------------

# write_counter PATH MIB: writes the python job PATH, which touches MIB MiB of memory (what its
# image holds) and then appends 1, 2, 3, ... to the file it is given, a line every 20 ms.
write_counter() {
  cat >"$1" <<PY
import sys, time
ballast = bytearray($2 << 20)
for i in range(0, len(ballast), 4096):
    ballast[i] = i % 251
n = 0
with open(sys.argv[1], "a") as f:
    while True:
        n += 1
        f.write(f"{n}\n")
        f.flush()
        time.sleep(0.02)
PY
}

# remove_move_cgroups WORK: removes the (empty) cgroups that the job records of the moves under
# WORK name (WORK/*/src/*/job.json and WORK/*/dst/*/job.json: the jobs and their restored copies).
remove_move_cgroups() {
  local record group dir
  for record in "$1"/*/src/*/job.json "$1"/*/dst/*/job.json; do
    [[ -e $record ]] || continue
    group=$(sed -n 's/.*"cgroup": "\(.*\)".*/\1/p' "$record")
    [[ -n $group ]] || continue
    for dir in /sys/fs/cgroup/*/paladin/"$group" /sys/fs/cgroup/paladin/"$group"; do
      [[ -d $dir ]] && rmdir "$dir" 2>/dev/null
    done
  done
}
