#!/usr/bin/env bash
# Distributed jobs in one process tree through checkpoint, restore and a move (docs/distributed.md),
# one scenario a run:
#
#   ddp  a two-rank torch.distributed DDP training loop (ddp_train.py: gloo over loopback TCP,
#        torch.multiprocessing.spawn, fixed seeds and data) under `paladin run`, run to its end
#        once for the reference losses; run again, checkpointed mid-run (the job stops), restored,
#        finished; run a third time and moved by `paladin migrate` to a `paladin receive` set up as
#        a second node (mount, IPC and network namespaces of its own, reached over a veth pair).
#        Every step's all-reduced loss, the last one included, must be the reference's to the bit,
#        each step printed once.
#   posix_shm  a 1 MiB POSIX shared-memory segment and a named semaphore of Python's
#        multiprocessing: in the job's own /dev/shm, not the host's; two checkpoints leaving it
#        running (CRIU's link remap of the semaphore must not fail the second), then one that
#        stops it; restored, the segment's bytes, counter and semaphore continue
#   mpi  a two-rank Open MPI job (mpi_job.c, built here with mpicc; `mpirun -np 2` as root, Open
#        MPI's defaults: its shared-memory transport in the job's own /dev/shm) checkpointed
#        mid-run, restored, finished: its rounds continue in order, each exchange checked, and its
#        total is the closed form's.
#
# Usage: distributed_test.sh SCENARIO PALADIN
# Needs root and CRIU, plus Debian's python3-torch (ddp) or openmpi-bin and libopenmpi-dev (mpi);
# exits 77 (skipped) without them (scripts/deps.sh --tests installs the packages).
set -u

SCENARIO=$1
PALADIN=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cli/testlib.sh"
source "$HERE/ckptlib.sh"

LIMIT=120 # seconds for any one paladin command
# The system's Python, whose packages hold torch (a python3 earlier on PATH may not).
PY=/usr/bin/python3

if ((EUID != 0)); then
  echo "SKIP: checkpoint/restore needs root (PID namespaces, CRIU)"
  exit 77
fi
skip_without_criu
case $SCENARIO in
  ddp)
    if ! "$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
      echo "SKIP: no torch with gloo for $PY (apt-get install python3-torch)"
      exit 77
    fi
    ;;
  posix_shm) ;;
  mpi)
    if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
      echo "SKIP: no Open MPI (apt-get install openmpi-bin libopenmpi-dev)"
      exit 77
    fi
    ;;
  *)
    echo "unknown scenario $SCENARIO" >&2
    exit 2
    ;;
esac
# The move mounts a tmpfs over the run base: in a mount namespace of this run's own, so that no
# job of another test takes it into its namespace (docs/ckpt.md, "Known limits").
if [[ -z ${PALADIN_CKPT_OWN_MOUNTS:-} ]]; then
  PALADIN_CKPT_OWN_MOUNTS=1 exec unshare --mount --propagation private -- bash "$0" "$@"
fi
close_inherited_fds

work=$(realpath "$(mktemp -d "/tmp/paladin-dist-$SCENARIO.XXXXXX")")
export PALADIN_RUN_DIR=$work/run
mkdir -p "$PALADIN_RUN_DIR"
roots=()     # host pids of job roots (original and restored)
launchers=() # background commands
netns=       # the second node's network namespace, once made
netnses=()   # every second node's network namespace made so far

cleanup() {
  local p
  kill_trees "${roots[@]}"
  for p in "${launchers[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  local d
  for d in /sys/fs/cgroup/paladin/dist-* /sys/fs/cgroup/*/paladin/dist-*; do
    [[ -d $d ]] && rmdir "$d" 2>/dev/null
  done
  for d in "${netnses[@]}"; do ip netns delete "$d" 2>/dev/null; done
  umount -l "$PALADIN_RUN_DIR" 2>/dev/null
  if [[ -z ${KEEP_WORK:-} ]]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

last_step() { awk '$1 == "step" { s = $2 } END { print s + 0 }' "${1:-$log}" 2>/dev/null; }
at_step() { (($(last_step) >= $1)); }
finished() { grep -q '^final ' "${1:-$log}" 2>/dev/null; }

# checkpoint_mid WHAT STEP: waits for STEP, then `paladin checkpoint` stops the job into
# $work/WHAT.img; every process of its tree must be gone after it.
checkpoint_mid() {
  local what=$1 step=$2
  if ! wait_until 60 at_step "$step"; then
    fail "$what: not at step $step in 60 s: $(tail -3 "$log") $(tail -3 "$run_dir/stderr.log")"
    return 1
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  local out rc=0
  out=$(timeout "$LIMIT" "$PALADIN" checkpoint "$job_name" --out "$work/$what.img" 2>&1) || rc=$?
  if ((rc != 0)) || crashed "$out"; then
    fail "$what: paladin checkpoint exit $rc: $out"
    return 1
  fi
  if ! wait_until 10 none_alive "${before[@]}"; then
    fail "$what: the job still runs 10 s after its checkpoint"
    return 1
  fi
  cut=$(last_step)
  pass "$what: checkpointed at step $cut (${#before[@]} processes), every process gone"
}

# restore_and_finish WHAT: `paladin restore` of $work/WHAT.img; waits for the job to end.
restore_and_finish() {
  local what=$1 out rc=0
  out=$(timeout "$LIMIT" "$PALADIN" restore "$work/$what.img" 2>&1) || rc=$?
  local pid
  pid=$(sed -n 's/^restored .* as pid \([0-9]*\):.*/\1/p' <<<"$out")
  if ((rc != 0)) || [[ -z $pid ]] || crashed "$out"; then
    fail "$what: paladin restore exit $rc: $out"
    return 1
  fi
  roots+=("$pid")
  job_pid=$pid
  if ! wait_until 120 eval "! alive $pid"; then
    fail "$what: the restored job did not end in 120 s: $(tail -3 "$log")"
    return 1
  fi
  pass "$what: restored as pid $pid, ran to its end"
}

# --- ddp ----------------------------------------------------------------------------------------

STEPS=16
SLEEP_S=0.2

# same_losses WHAT LOG: the step lines of LOG are 1..STEPS, each once, with the reference's losses,
# and its final loss is the reference's.
same_losses() {
  local what=$1 file=$2 steps
  steps=$(grep '^step ' "$file" | tr '\n' ' ')
  if [[ $steps != "$ref_steps" ]]; then
    fail "$what: the steps differ from the uninterrupted run's (cut at $cut):" \
      "$(diff <(grep '^step ' "$file") <(tr ' ' '\n' <<<"$ref_steps" | paste -d' ' - - - | grep .) | head -6)"
    return 1
  fi
  local final
  final=$(awk '$1 == "final" { print $2 }' "$file")
  if [[ $final != "$ref_final" ]]; then
    fail "$what: final loss $final, uninterrupted $ref_final"
    return 1
  fi
  pass "$what: steps 1..$STEPS each once, every all-reduced loss bit-identical to the" \
    "uninterrupted run's; final $final (cut at $cut)"
}

# A second node on this machine: its own network namespace (loopback up, a veth pair to this one),
# mount and IPC namespaces, and tmpfs's of its own over the run base and /dev/shm. Its own network is what lets the moved
# ranks' loopback connections exist while the source's stopped copy still holds the same
# addresses and ports. Sets peer (HOST:PORT) and receiver.
start_receiver() {
  netns=paladin-dist-$$-${#netnses[@]}
  netnses+=("$netns")
  local a=pdist$$a${#netnses[@]} b=pdist$$b${#netnses[@]} net=10.$((200 + RANDOM % 50)).$((RANDOM % 250)).
  ip netns add "$netns" &&
    ip link add "${a:0:15}" type veth peer name "${b:0:15}" netns "$netns" &&
    ip addr add "${net}1/30" dev "${a:0:15}" && ip link set "${a:0:15}" up &&
    ip -n "$netns" addr add "${net}2/30" dev "${b:0:15}" &&
    ip -n "$netns" link set "${b:0:15}" up && ip -n "$netns" link set lo up || {
    fail "migrate: cannot set up a network namespace for the second node"
    return 1
  }
  local port=$((20000 + RANDOM % 12000))
  peer=${net}2:$port
  # shellcheck disable=SC2016 # expanded by the receiver's shell
  timeout "$LIMIT" nsenter --net="/run/netns/$netns" unshare --mount --ipc --propagation private \
    -- bash -c 'mount -t tmpfs -o mode=0755 paladin-node2 "$PALADIN_RUN_DIR" &&
      mount -t tmpfs -o mode=1777 paladin-node2-shm /dev/shm && exec "$@"' \
    receiver "$PALADIN" receive --listen "$port" --bind "${net}2" --dir "$work/in-$netns" \
    >"$work/recv.out" 2>&1 &
  receiver=$!
  launchers+=("$receiver")
  if ! wait_until 10 eval "ip netns exec $netns ss -Hltn 'sport = :$port' | grep -q ."; then
    fail "migrate: paladin receive does not listen on $port: $(cat "$work/recv.out")"
    return 1
  fi
}

scenario_ddp() {
  local train=("$PY" "$HERE/ddp_train.py" "$STEPS" "$SLEEP_S")
  local started=$SECONDS
  start_job dist-ref --keep-run-dir -- "${train[@]}" || return
  if ! wait_until 120 eval "! alive $job_pid"; then
    fail "ddp: the uninterrupted run did not end in 120 s: $(tail -3 "$log")"
    return
  fi
  wait "$launcher"
  if ! finished; then
    fail "ddp: the uninterrupted run did not finish: $(tail -5 "$log") $(tail -5 "$run_dir/stderr.log")"
    return
  fi
  ref_steps=$(grep '^step ' "$log" | tr '\n' ' ')
  ref_final=$(awk '$1 == "final" { print $2 }' "$log")
  pass "ddp: uninterrupted run, $STEPS steps in $((SECONDS - started)) s, final loss $ref_final"

  # Checkpoint, kill (the checkpoint stops the job), restore, finish.
  start_job dist-ckpt -- "${train[@]}" || return
  checkpoint_mid ddp-checkpoint 5 || return
  grep -q "closing the connection" "$work/dist-ckpt.run.err" &&
    fail "ddp-checkpoint: a connection between the ranks was closed"
  restore_and_finish ddp-checkpoint || return
  # The restore writes the job's log back where it was, and the job continues it.
  same_losses "ddp checkpoint/restore" "$log"

  # A checkpoint that leaves the job running: the connections between the ranks go on (CRIU's
  # hold on them, repair mode and its network lock, is let go), and the run ends as the
  # uninterrupted one did.
  start_job dist-keep --keep-run-dir -- "${train[@]}" || return
  if ! wait_until 60 at_step 4; then
    fail "ddp-keep: not at step 4 in 60 s: $(tail -3 "$log")"
    return
  fi
  local out rc=0
  out=$(timeout "$LIMIT" "$PALADIN" checkpoint "$job_name" --out "$work/ddp-keep.img" \
    --leave-running 2>&1) || rc=$?
  if ((rc != 0)) || crashed "$out"; then
    fail "ddp-keep: paladin checkpoint --leave-running exit $rc: $out"
    return
  fi
  cut=$(last_step)
  if ! wait_until 120 eval "! alive $job_pid"; then
    fail "ddp-keep: the job did not end in 120 s after checkpoint --leave-running at step $cut" \
      "(last: $(last_step)): $(tail -2 "$log")"
    return
  fi
  wait "$launcher"
  same_losses "ddp checkpoint --leave-running" "$log"

  # A move to a second node, and a post-copy one (its memory pulled after it runs there) where
  # the patched CRIU is here: the ranks' connections travel in both.
  if ! mount -t tmpfs -o mode=0755 paladin-node1 "$PALADIN_RUN_DIR"; then
    fail "ddp migrate: cannot mount a tmpfs over the run base"
    return
  fi
  export PALADIN_TOKEN=dist-test-$$
  ddp_move "ddp migrate" dist-move --mode image || return
  if grep -qs 'criu-patches' "${PALADIN_CRIU_LAZY:-/opt/paladin/criu-lazy/criu}"; then
    ddp_move "ddp migrate --lazy" dist-lazy --lazy
  else
    echo "SKIP: ddp migrate --lazy: no CRIU with Paladin's patches (bash scripts/criu_lazy.sh)"
  fi
}

# ddp_move WHAT NAME [MIGRATE-FLAGS...]: runs the training as job NAME, moves it at step 5 to a
# new second node and checks that it ends there with the uninterrupted run's losses. Its steps
# are slower than the other runs' (the losses do not depend on the pause between steps): a move
# on a loaded machine takes several seconds, and the moved job must still be running once it is
# there.
MOVE_SLEEP_S=1
ddp_move() {
  local what=$1 name=$2
  shift 2
  local train=("$PY" "$HERE/ddp_train.py" "$STEPS" "$MOVE_SLEEP_S")
  start_job "$name" -- "${train[@]}" || return
  start_receiver || return
  if ! wait_until 60 at_step 5; then
    fail "$what: not at step 5 in 60 s: $(tail -3 "$log")"
    return
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  local out rc=0
  out=$(timeout "$LIMIT" "$PALADIN" migrate "$job_name" --peer "$peer" "$@" 2>&1) || rc=$?
  local there
  there=$(sed -n 's/^moved .* (pid \([0-9]*\) there).*/\1/p' <<<"$out")
  if ((rc != 0)) || [[ -z $there ]] || crashed "$out"; then
    fail "$what: paladin migrate exit $rc: $out; receive: $(cat "$work/recv.out")"
    return
  fi
  roots+=("$there")
  # The moved job writes the second node's copy of its log, reachable from here through its
  # descriptor only: held open so that it can be read once the job has ended. Opened first, as
  # the job runs on meanwhile and may end while the source's copy is waited for.
  local moved_log
  exec {moved_log}<"/proc/$there/fd/1" || {
    fail "$what: cannot open the moved job's log"
    return
  }
  cut=$(last_step)
  wait_until 10 none_alive "${before[@]}" || fail "$what: the source's copy still runs"
  local job_net node_net
  job_net=$(readlink "/proc/$there/ns/net")
  node_net=$(stat -L -c 'net:[%i]' "/run/netns/$netns")
  [[ $job_net == "$node_net" ]] ||
    fail "$what: the moved job is in network namespace $job_net, not the second node's $node_net"
  pass "$what: moved at step $cut as pid $there"
  if ! wait_until 120 eval "! alive $there"; then
    fail "$what: the moved job did not end in 120 s"
    return
  fi
  cat <&"$moved_log" >"$work/$name.moved.log"
  exec {moved_log}<&-
  same_losses "$what" "$work/$name.moved.log"
}

# --- posix_shm ----------------------------------------------------------------------------------

shm_count() { awk '$1 == "shm" { n = $2 } END { print n + 0 }' "$log"; }
shm_at_least() { (($(shm_count) >= $1)); }

scenario_posix_shm() {
  start_job dist-shm -- "$PY" "$HERE/posix_shm_job.py" || return
  if ! wait_until 30 shm_at_least 5; then
    fail "posix_shm: fewer than 5 checks in 30 s: $(tail -3 "$log") $(tail -3 "$run_dir/stderr.log")"
    return
  fi
  local segment
  segment=$(awk '$1 == "names" { print $2 }' "$log")
  if [[ -e /dev/shm/$segment ]]; then
    fail "posix_shm: the job's segment $segment is in the host's /dev/shm"
  else
    pass "posix_shm: the job's segment $segment is in its own /dev/shm, not the host's"
  fi
  # Twice leaving it running: CRIU's link remap of the semaphore must not fail the second dump.
  local round out rc
  for round in 1 2; do
    rc=0
    out=$(timeout "$LIMIT" "$PALADIN" checkpoint "$job_name" --out "$work/shm-running-$round.img" \
      --leave-running 2>&1) || rc=$?
    if ((rc != 0)) || crashed "$out"; then
      fail "posix_shm: checkpoint --leave-running ($round) exit $rc: $out"
      return
    fi
    local at
    at=$(shm_count)
    if ! wait_until 10 shm_at_least $((at + 5)); then
      fail "posix_shm: no 5 more checks after checkpoint --leave-running ($round): $(tail -2 "$log")"
      return
    fi
  done
  pass "posix_shm: two checkpoints leaving it running, the job went on after each"
  if ! wait_until 10 shm_at_least $(($(shm_count) + 3)); then
    fail "posix_shm: stalled"
    return
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  rc=0
  out=$(timeout "$LIMIT" "$PALADIN" checkpoint "$job_name" --out "$work/shm.img" 2>&1) || rc=$?
  if ((rc != 0)) || crashed "$out" || ! wait_until 10 none_alive "${before[@]}"; then
    fail "posix_shm: checkpoint exit $rc: $out"
    return
  fi
  cut=$(shm_count)
  rc=0
  out=$(timeout "$LIMIT" "$PALADIN" restore "$work/shm.img" 2>&1) || rc=$?
  local pid
  pid=$(sed -n 's/^restored .* as pid \([0-9]*\):.*/\1/p' <<<"$out")
  if ((rc != 0)) || [[ -z $pid ]]; then
    fail "posix_shm: paladin restore exit $rc: $out"
    return
  fi
  roots+=("$pid")
  if ! wait_until 20 shm_at_least $((cut + 20)); then
    fail "posix_shm: no 20 more checks after the restore (cut at $cut): $(tail -3 "$log")"
    return
  fi
  local bad
  bad=$(awk '$1 == "BAD" { print; exit } $1 == "shm" && $2 != ++n { print "check " $2 " where " n " was due"; exit }' "$log")
  if [[ -n $bad ]]; then
    fail "posix_shm: $bad (cut at $cut)"
  else
    pass "posix_shm: the 1 MiB segment's bytes, its counter and the named semaphore continue" \
      "after the restore (checks 1..$(shm_count), cut at $cut)"
  fi
  if compgen -G "/dev/shm/link_remap.*" >/dev/null || [[ -e /dev/shm/$segment ]]; then
    fail "posix_shm: the host's /dev/shm holds the job's files: $(ls /dev/shm)"
  fi
}

# --- mpi ----------------------------------------------------------------------------------------

scenario_mpi() {
  if ! mpicc -O2 -o "$work/mpi_job" "$HERE/mpi_job.c" 2>"$work/mpicc.err"; then
    fail "mpi: mpicc: $(cat "$work/mpicc.err")"
    return
  fi
  local steps=30
  start_job dist-mpi -- env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --allow-run-as-root -np 2 --oversubscribe "$work/mpi_job" "$steps" 200 || return
  checkpoint_mid mpi-checkpoint 8 || return
  restore_and_finish mpi-checkpoint || return
  local bad
  bad=$(awk '$1 == "BAD" { print; exit } $1 == "step" && $2 != ++n { print "step " $2 " where " n " was due"; exit }' "$log")
  local final
  final=$(grep '^final ' "$log")
  if [[ -n $bad ]]; then
    fail "mpi: $bad (cut at $cut)"
  elif [[ -z $final ]] || ! awk '{ exit !($2 == $4) }' <<<"$final"; then
    fail "mpi: no matching final line: '$final': $(tail -3 "$log") $(tail -3 "$run_dir/stderr.log")"
  else
    pass "mpi: rounds 1..$steps in order, each exchange checked; $final (cut at $cut)"
  fi
}

started_at=$SECONDS
"scenario_$SCENARIO"
echo "$SCENARIO: $((SECONDS - started_at)) s, $failures failure(s)"
((failures == 0))
