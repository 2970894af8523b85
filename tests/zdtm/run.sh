#!/usr/bin/env bash
# CRIU's ZDTM static tests through Paladin's path: what CRIU's harness (test/zdtm.py) does for a
# static test, with `paladin run`, `paladin checkpoint` and `paladin restore` in place of its own
# calls to CRIU. For each test of the list:
#
#   1. start it under `paladin run` (its root is zdtm_init, which stays in the foreground for the
#      daemonizing test: see zdtm_init.cc), with the environment zdtm.py gives it, and wait
#      until it writes its pidfile (it is ready: its state is set up);
#   2. `paladin checkpoint` the job (which stops it) and check that `paladin run` ended;
#   3. `paladin restore` the image;
#   4. SIGTERM the restored job's root (zdtm_init passes it to the test, which then checks that
#      its state survived), wait for the job to end, and read the test's verdict (PASS) from
#      its .out file.
#
# A test passes when its verdict is PASS. A test that fails and is not an expected failure is run
# once more, and the summary counts those passed on a second try. The run fails when a test fails
# twice that the expected-failures file does not name, or when a test it names passes (the file stays honest),
# unless it is named there as flaky.
#
# Usage: run.sh PALADIN ZDTM_INIT CACHE LIST EXPECTED [TEST...]
#   CACHE     the folder fetch_build.sh built CRIU's tests in
#   LIST      the tests to run, one a line (# comments)
#   EXPECTED  "TEST  reason" lines: the tests of LIST that cannot pass here, and why; a reason
#             that starts with "[flaky]" names a test that fails only at times (a race), whose
#             pass is then no surprise
#   TEST...   run only these (of LIST or not); the summary and verdict cover only them
# Environment: ZDTM_NOCKPT=1 runs each test under `paladin run` without the checkpoint, which
# tells a test that fails here anyway from one the checkpoint breaks (for a measurement; the
# expected-failures file is not checked then). ZDTM_MIGRATE=1 moves each test with `paladin
# migrate` in place of steps 2 and 3: to a `paladin receive` (a fresh port a test) that runs as
# a second node would (node2.sh): in network, mount and IPC namespaces of its own, reached over a
# veth pair, with a tmpfs of its own over the run base (the same path: a restore places the job
# in its node's run base) and its own copy of the tests' folder (the source has one too); step 4
# then signals the test where it now runs and reads its verdict there.
# ZDTM_MIGRATE=shared runs the receiver in the host's namespaces instead (which tells a failure of
# the second node's set-up from one of the move). A test of LIST whose line names "same-files"
# after it (migrate_tests.txt) is moved that way under ZDTM_MIGRATE=1 too: to a receiver on this
# machine, on the source's own files, as between two nodes that share a file system.
# KEEP_WORK=1 keeps the images and logs.
# Needs root and CRIU; exits 77 (skipped) without them or without the built tests.
set -u

PALADIN=$(realpath "$1")
INIT=$(realpath "$2")
CACHE=$3
LIST=$4
EXPECTED=$5
shift 5

NODE2=$(dirname "$(realpath "$0")")/node2.sh
source "$(dirname "$(realpath "$0")")/../ckpt/ckptlib.sh"
WAIT_POLL_S=0.05 # wait_until's
node2= # the second node of a move (node2.sh), while it runs
same_files= # the last move's receiver runs here, on the same files (ZDTM_MIGRATE=shared, same-files)
files= # the tests' folder as the job sees it: $STATIC, or the second node's copy after a move
LIMIT=120     # seconds for any one paladin command
MOVE_LIMIT=45 # seconds for a `paladin receive` (ZDTM_MIGRATE)

if ((EUID != 0)); then
  echo "SKIP: the ZDTM tests need root (PID namespaces, CRIU)"
  exit 77
fi
# A move mounts a tmpfs over the run base: in a mount namespace of this run's own, so that no job
# of another test, started meanwhile, takes that mount into its own namespace (docs/ckpt.md,
# "Known limits").
if [[ -n ${ZDTM_MIGRATE:-} && $ZDTM_MIGRATE != shared && -z ${PALADIN_ZDTM_OWN_MOUNTS:-} ]]; then
  PALADIN_ZDTM_OWN_MOUNTS=1 exec unshare --mount --propagation private -- \
    bash "$0" "$PALADIN" "$INIT" "$CACHE" "$LIST" "$EXPECTED" "$@"
fi
skip_without_criu
STATIC=$(cat "$CACHE/static-dir" 2>/dev/null)
if [[ -z $STATIC || ! -d $STATIC ]]; then
  echo "SKIP: CRIU's ZDTM tests are not built in $CACHE (tests/zdtm/fetch_build.sh)"
  exit 77
fi

# ctest's own descriptors would be inherited by the test and make its image depend on them.
close_inherited_fds

work=$(mktemp -d /tmp/paladin-zdtm.XXXXXX)
export PALADIN_RUN_DIR=$work/run
mkdir -p "$PALADIN_RUN_DIR"
unset LD_PRELOAD PALADIN_EMU_GPUS CUDA_VISIBLE_DEVICES
results=$CACHE/results.txt
tag=zdtm
if [[ -n ${ZDTM_MIGRATE:-} ]]; then
  results=$CACHE/results-migrate.txt
  tag=zdtm-migrate
  export PALADIN_TOKEN=zdtm-migrate-$$
  port=$((20000 + RANDOM % 12000))
  # The source node's run base is a tmpfs too, as the receiver's: a job sees the mounts it
  # started with, bound again at a restore from the restoring node's at the same paths over its
  # root file system, so a mount only the receiver had would not be where the job's logs are.
  if [[ $ZDTM_MIGRATE != shared ]]; then
    if ! mount -t tmpfs -o mode=0755 paladin-node1 "$PALADIN_RUN_DIR"; then
      echo "$tag: cannot mount a tmpfs over the run base $PALADIN_RUN_DIR"
      exit 1
    fi
    trap 'umount -l "$PALADIN_RUN_DIR"' EXIT
    # The tests' folder is a copy in a tmpfs on each node (node2.sh makes the receiver's), as
    # two machines have a file system each: a FIFO or a locked file of the source is then not
    # the one the moved job finds at the same path.
    orig=$work/static-orig
    mkdir -p "$orig"
    if ! mount --bind "$STATIC" "$orig" || ! mount -t tmpfs -o mode=0755 paladin-files1 "$STATIC" ||
      ! cp -a "$orig/." "$STATIC/"; then
      echo "$tag: cannot give the source a copy of $STATIC in a tmpfs"
      exit 1
    fi
    umount "$orig"
    trap 'umount -l "$STATIC"; umount -l "$PALADIN_RUN_DIR"' EXIT
  fi
fi
: >"$results"

# kill_job ROOT: SIGKILL to every process of the job left over (a failed test).
kill_job() {
  local -a pids
  read -ra pids <<<"$(tree "$1")"
  ((${#pids[@]} == 0)) && return
  kill -9 "${pids[@]}" 2>/dev/null
  local p
  for p in "${pids[@]}"; do wait_until 10 eval "! alive $p"; done
}

# desc TEST KEY: a field of the test's .desc (a Python literal), empty when absent.
desc() {
  [[ -f $STATIC/$1.desc ]] || return 0
  python3 -c 'import ast, sys
d = ast.literal_eval(open(sys.argv[1]).read())
print(d.get(sys.argv[2], ""))' "$STATIC/$1.desc" "$2" 2>/dev/null
}

# first_error TEXT: the line of TEXT that says what went wrong first.
first_error() {
  local line text
  # Paladin's note that CRIU reads resource limits through a preloaded helper is not an error.
  text=$(grep -v 'lacks CAP_SYS_RESOURCE' <<<"$1")
  set -- "${text:-$1}"
  line=$(grep -m1 -E '^ *Error \(' <<<"$1")
  [[ -n $line ]] || line=$(grep -m1 -E 'Error|error|FAIL|refus|cannot|Cannot' <<<"$1")
  [[ -n $line ]] || line=$(head -1 <<<"$1")
  tr -s ' \t' ' ' <<<"$line" | cut -c1-240
}

verdict_of() { # TEST: the test's own words, from its .out (or .out.inprogress)
  local f
  for f in "$files/$1.out" "$files/$1.out.inprogress"; do
    if [[ -f $f ]]; then
      tail -c 2000 "$f" | tr -s ' \t\n' ' ' | cut -c1-240
      return
    fi
  done
  echo "no .out file"
}

# ipc_ids: "KIND:ID" of every SysV IPC object of this IPC namespace. A job has no IPC namespace
# of its own, so what a failed test leaves behind would make the next run of it fail at start
# (EEXIST); run_one removes what appeared while its test ran.
ipc_ids() {
  local kind
  for kind in shm msg sem; do
    awk -v k="$kind" 'NR > 1 { print k ":" $2 }' "/proc/sysvipc/$kind" 2>/dev/null
  done
}

ipc_cleanup() { # BEFORE: the ipc_ids output from before the test
  local id
  while read -r id; do
    [[ -z $id ]] && continue
    case ${id%%:*} in
      shm) ipcrm -m "${id#*:}" 2>/dev/null ;;
      msg) ipcrm -q "${id#*:}" 2>/dev/null ;;
      sem) ipcrm -s "${id#*:}" 2>/dev/null ;;
    esac
  done < <(comm -13 <(sort <<<"$1") <(ipc_ids | sort))
}

# node2_stop: ends the second node of the last move (node2.sh), if any.
node2_stop() {
  [[ -n $node2 ]] || return 0
  kill "$node2" 2>/dev/null
  wait "$node2" 2>/dev/null
  ip link del "pzh$port" 2>/dev/null
  node2=
}

# node2_done: true once the receiver of the last move (node2.sh, or `paladin receive` itself when
# ZDTM_MIGRATE=shared) has ended.
node2_done() {
  if [[ -z $same_files ]]; then [[ -s $work/node2.rc ]]; else ! kill -0 "$node2"; fi 2>/dev/null
}

# migrate_job TEST NAME: moves the job NAME (its root: $root, its `paladin run`: $launcher) to a
# `paladin receive` on a second node (node2.sh: namespaces and files of its own, reached over a
# veth pair; ZDTM_MIGRATE above), or on this one on the same files (same-files), and sets root to
# the job's pid there and files to its copy of the tests' folder. On failure sets outcome and
# why, kills the job wherever it runs (after a failed move it resumes here), and returns 1.
migrate_job() {
  local t=$1 name=$2 out rc=0 peer=127.0.0.1
  port=$((port + 2)) # the receiver takes PORT and PORT+1
  local -a recv=("$PALADIN" receive --listen "$port" --dir "$work/in-$t-$port")
  same_files=
  [[ $ZDTM_MIGRATE == shared || ${move_to[$t]:-} == same-files ]] && same_files=1
  # A move of a test takes 2-4 s; a restore that blocks is cut sooner than LIMIT, which the
  # migrate command then outlives to resume the job here.
  rm -f "$work/node2.pid" "$work/node2.rc"
  if [[ -z $same_files ]]; then
    peer=10.214.0.2
    recv+=(--bind "$peer")
    unshare --net --mount --ipc --propagation private -- bash "$NODE2" "$work/node2" "$STATIC" \
      "pzn$port" "$peer" "$MOVE_LIMIT" "${recv[@]}" >"$work/$t.recv.out" 2>&1 &
    node2=$!
    if ! wait_until 10 eval "[[ -s $work/node2.pid ]] || ! kill -0 $node2 2>/dev/null" ||
      ! ip link add "pzh$port" type veth peer name "pzn$port" netns "$(cat "$work/node2.pid")" ||
      ! ip addr add 10.214.0.1/30 dev "pzh$port" || ! ip link set "pzh$port" up; then
      outcome=migrate
      why="the second node did not start: $(first_error "$(cat "$work/$t.recv.out")")"
      node2_stop
      kill_job "$root"
      wait "$launcher" 2>/dev/null
      return 1
    fi
  else
    timeout "$MOVE_LIMIT" "${recv[@]}" >"$work/$t.recv.out" 2>&1 &
    node2=$!
  fi
  if ! wait_until 10 eval "nsenter -t $node2 -n ss -Hltn 'sport = :$port' | grep -q . ||
      node2_done" || node2_done; then
    outcome=migrate
    why="paladin receive is not listening on $port: $(first_error "$(cat "$work/$t.recv.out")")"
    node2_stop
    kill_job "$root"
    wait "$launcher" 2>/dev/null
    return 1
  fi
  out=$(timeout "$LIMIT" "$PALADIN" migrate "$name" --peer "$peer:$port" --mode image 2>&1) || rc=$?
  # Both say first that CRIU's resource limits are read through a preloaded helper: not an error.
  local notice='lacks CAP_SYS_RESOURCE'
  out=$(grep -v "$notice" <<<"$out")
  local there
  there=$(sed -n 's/^moved .* (pid \([0-9]*\) there).*/\1/p' <<<"$out")
  if ((rc != 0)) || [[ -z $there ]]; then
    outcome=migrate
    # The migrate command's last line says how the move ended; the receiver's first error why.
    local received
    received=$(grep -v "$notice" "$work/$t.recv.out")
    if grep -q 'Error' <<<"$received"; then
      received=$(first_error "$received")
    else
      received="ended at: $(tail -1 <<<"$received" | cut -c1-200)"
    fi
    why="$(tail -1 <<<"$out" | tr -s ' \t' ' ' | cut -c1-240); receive: $received"
    [[ -n $there ]] && kill_job "$there"
    node2_stop
    kill_job "$root"
    wait "$launcher" 2>/dev/null
    return 1
  fi
  wait_until 30 node2_done
  if [[ -n $same_files ]]; then
    node2_stop
  else
    files=/proc/$node2/root$STATIC
  fi
  root=$there
  if ! wait_until 30 eval "! kill -0 $launcher 2>/dev/null"; then
    outcome=migrate
    why="paladin run still running here 30 s after the job moved"
    kill_job "$root"
    return 1
  fi
  wait "$launcher" 2>/dev/null
  return 0
}

# run_one TEST: sets outcome (PASS, or the stage that failed) and why.
run_one() {
  local t=$1
  outcome=FAIL
  why=
  files=$STATIC
  if [[ ! -x $STATIC/$t ]]; then
    why="not built"
    return
  fi
  (cd "$STATIC" && make -s --no-print-directory "$t.cleanout" >/dev/null 2>&1)
  rm -f "$STATIC/$t.pid" "$STATIC/$t.out" "$STATIC/$t.out.inprogress"
  local cmdline
  cmdline=$(cd "$STATIC" && make -s -n --no-print-directory "$t.pid" 2>/dev/null | tail -1)
  local -a argv
  read -ra argv <<<"$cmdline"
  if [[ ${argv[0]:-} != "./$t" ]]; then
    why="cannot tell its command line from the Makefile: '$cmdline'"
    return
  fi
  # As zdtm.py does: a test not marked suid drops to these ids, in a folder it may write.
  local -a env=(TMPDIR=/tmp ZDTM_THREAD_BOMB=5)
  if [[ " $(desc "$t" flags) " != *" suid "* ]]; then
    env+=(ZDTM_UID=18943 ZDTM_GID=58467 "ZDTM_GROUPS=27495 48244")
  fi
  # zdtm.py allows 30 s (or the .desc's timeout) for each step; every test of the list that
  # passes here is ready and done in under 5 s, so a shorter default keeps a hung test from
  # eating the suite's time.
  local timeout
  timeout=$(desc "$t" timeout)
  timeout=${timeout:-15}

  # A test that sets ZDTM_NOREAP keeps a zombie that its namespace's init must not reap.
  local -a init=("$INIT")
  if grep -qs ZDTM_NOREAP "$STATIC/$t.c"; then init+=(--no-reap); fi

  local name=zdtm-$t image=$work/img-$t
  # The subshell waits (bash would exec a last command): a `paladin run` that ends by a signal,
  # as it does when its job is killed, is then reported into the log, not on the terminal.
  (
    cd "$STATIC" && env "${env[@]}" timeout 600 "$PALADIN" run --name "$name" -- \
      "${init[@]}" "$t.pid" "${argv[@]}"
    exit $?
  ) >"$work/$t.run.out" 2>"$work/$t.run.err" &
  local launcher=$!
  if ! wait_until "$timeout" eval "[[ -s $STATIC/$t.pid ]] || ! kill -0 $launcher 2>/dev/null"; then
    outcome=start
    why="not ready after $timeout s"
  elif [[ ! -s $STATIC/$t.pid ]]; then
    outcome=start
    why="ended before it was ready: $(verdict_of "$t") $(tail -2 "$work/$t.run.err" | tr '\n' ' ')"
  fi
  local run_dir root=0
  run_dir=$(find "$PALADIN_RUN_DIR" -mindepth 1 -maxdepth 1 -name "$name-*" | head -1)
  [[ -n $run_dir ]] && root=${run_dir##*-}
  if [[ $outcome == start ]]; then
    if ((root > 0)); then kill_job "$root"; else kill_job "$launcher"; fi
    wait "$launcher" 2>/dev/null
    return
  fi

  if [[ -n ${ZDTM_MIGRATE:-} ]]; then
    migrate_job "$t" "$name" || return 0
  elif [[ -z ${ZDTM_NOCKPT:-} ]]; then
    local out rc=0
    out=$(timeout "$LIMIT" "$PALADIN" checkpoint "$name" --out "$image" 2>&1) || rc=$?
    if ((rc != 0)); then
      outcome=checkpoint
      why=$(first_error "$out")
      kill_job "$root"
      wait "$launcher" 2>/dev/null
      return
    fi
    if ! wait_until 30 eval "! kill -0 $launcher 2>/dev/null"; then
      outcome=checkpoint
      why="paladin run still running 30 s after the checkpoint"
      kill_job "$root"
      return
    fi
    wait "$launcher" 2>/dev/null
    rc=0
    out=$(timeout "$LIMIT" "$PALADIN" restore "$image" 2>&1) || rc=$?
    root=$(sed -n 's/^restored .* as pid \([0-9]*\):.*/\1/p' <<<"$out")
    if ((rc != 0)) || [[ -z $root ]]; then
      outcome=restore
      why=$(first_error "$out")
      [[ -n $root ]] && kill_job "$root"
      return
    fi
  fi

  # zdtm.py's stop: SIGTERM, then the test's verdict once it has ended.
  kill -TERM "$root" 2>/dev/null
  if ! wait_until "$((timeout * 2 / 3))" eval "! alive $root"; then
    outcome=verify
    why="still running $((timeout * 2 / 3)) s after SIGTERM: $(verdict_of "$t")"
    kill_job "$root"
  elif [[ -f $files/$t.out ]] && tail -c 2000 "$files/$t.out" | grep -qw PASS; then
    outcome=PASS
  else
    outcome=verify
    why=$(verdict_of "$t")
  fi
  node2_stop
  [[ -n ${ZDTM_NOCKPT:-} ]] && wait "$launcher" 2>/dev/null
  return 0
}

# cgroup_cleanup TEST: removes Paladin's cgroups of the test's job (CRIU leaves the restored
# job's behind), so that a run leaves none.
cgroup_cleanup() {
  local g
  for g in /sys/fs/cgroup/paladin/"zdtm-$1"-* /sys/fs/cgroup/*/paladin/"zdtm-$1"-*; do
    [[ -d $g ]] && wait_until 5 rmdir "$g" 2>/dev/null
  done
  return 0
}

# Where each test of LIST moves (ZDTM_MIGRATE=1): the word after its name, "same-files" or none
# (the second node).
declare -A move_to=()
while read -r t where _; do
  [[ -n $t ]] && move_to[$t]=$where
done < <(sed -e 's/#.*//' "$LIST")

declare -A expected=()
while read -r t reason; do
  [[ -z $t || $t == \#* ]] && continue
  expected[$t]=$reason
done <"$EXPECTED"

tests=("$@")
if ((${#tests[@]} == 0)); then
  mapfile -t tests < <(sed -e 's/#.*//' "$LIST" | awk 'NF { print $1 }')
fi

# attempt TEST: one run of the test, then the clean-up of what it left.
attempt() {
  local ipc_before
  ipc_before=$(ipc_ids)
  run_one "$1"
  ipc_cleanup "$ipc_before"
  cgroup_cleanup "$1"
}

total=0 passed=0 xfail=0 unexpected=0 retried=0
start=$SECONDS
for t in "${tests[@]}"; do
  t0=$SECONDS
  attempt "$t"
  # A test that should pass and failed gets one more try: on a busy machine a race in the test
  # or in the host (a mount that came and went) is not the checkpoint's fault. The first failure
  # stays in the results and the summary counts it.
  if [[ $outcome != PASS && -z ${expected[$t]+x} && -z ${ZDTM_NOCKPT:-} ]]; then
    first="$outcome${why:+: $why}"
    attempt "$t"
    if [[ $outcome == PASS ]]; then
      retried=$((retried + 1))
      printf '%s\n' "$t: failed once: $first" >>"$results"
      echo "$tag: $t: failed once, passed on the second try (first: $first)"
    fi
  fi
  total=$((total + 1))
  line="$t: $outcome${why:+: $why}"
  printf '%s\n' "$line" >>"$results"
  if [[ -n ${ZDTM_NOCKPT:-} ]]; then
    [[ $outcome == PASS ]] && passed=$((passed + 1))
    echo "$tag: $line ($((SECONDS - t0)) s)"
  elif [[ $outcome == PASS && -z ${expected[$t]+x} ]]; then
    passed=$((passed + 1))
    echo "$tag: $t: PASS ($((SECONDS - t0)) s)"
  elif [[ $outcome == PASS && ${expected[$t]} == "[flaky]"* ]]; then
    passed=$((passed + 1))
    echo "$tag: $t: PASS this time ($((SECONDS - t0)) s; fails at times: ${expected[$t]})"
  elif [[ $outcome == PASS ]]; then
    passed=$((passed + 1))
    unexpected=$((unexpected + 1))
    echo "$tag: UNEXPECTED PASS: $t (expected to fail: ${expected[$t]}); remove it from" \
      "$(basename "$EXPECTED")"
  elif [[ -n ${expected[$t]+x} ]]; then
    xfail=$((xfail + 1))
    echo "$tag: $t: expected failure at $outcome (${expected[$t]}): $why"
  else
    unexpected=$((unexpected + 1))
    echo "$tag: FAIL: $t at $outcome: $why"
  fi
done

if [[ -n ${ZDTM_MIGRATE:-} && $ZDTM_MIGRATE != shared ]]; then
  umount -l "$PALADIN_RUN_DIR"
  trap - EXIT
fi
if [[ -z ${KEEP_WORK:-} ]]; then rm -rf "$work"; else echo "kept $work"; fi
echo "$tag: results in $results ($((SECONDS - start)) s)"
if [[ -n ${ZDTM_NOCKPT:-} ]]; then
  echo "$tag (no checkpoint): $total tests, $passed passed, $((total - passed)) failed"
  exit 0
fi
echo "$tag: $total tests, $passed passed ($retried on a second try), $xfail expected failures," \
  "$unexpected unexpected"
((unexpected == 0))
