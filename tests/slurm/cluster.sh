#!/usr/bin/env bash
# A throwaway single-node SLURM cluster (Debian 12: slurm-wlm 22.05 + munge 0.5) for integration
# tests. Everything lives under one work directory and talks over 127.0.0.1 (the daemons still
# listen on all addresses, on random high ports: see CommunicationParameters below); run as root.
#
#   source tests/slurm/cluster.sh
#   slurm_start WORKDIR ['required /path/paladin_spank.so socket=/x/agent.sock']  # 0 once idle
#   sbatch --wrap 'hostname'    # SLURM_CONF is exported, so the client commands find the cluster
#   slurm_stop                  # cancels the jobs, stops the daemons; safe to call twice
#
# Layout: WORKDIR/etc (slurm.conf, plugstack.conf), WORKDIR/munge (key, socket, seed),
# WORKDIR/state/{ctld,d}, WORKDIR/log, WORKDIR/run (pid files), WORKDIR/tmp.
# After slurm_start: SLURM_CONF, SLURM_TEST_DIR and SLURM_TEST_NODE (the node's name) are set.
#
# Settings that matter here (no systemd, no cgroups): proctrack/linuxproc and task/none keep
# slurmd away from cgroups; cred_expire (AuthInfo) is short because a requeued job may not start
# again until that many seconds have passed (default 120).

# How long slurm_start waits for the node to become idle, in seconds.
SLURM_TEST_START_TIMEOUT=${SLURM_TEST_START_TIMEOUT:-60}
# Step credential lifetime, and so the delay before a requeued job can run again (Slurm minimum: 5).
SLURM_TEST_CRED_EXPIRE=${SLURM_TEST_CRED_EXPIRE:-5}

# True when nothing listens on TCP port $1 on this machine.
_slurm_port_free() {
  if command -v ss >/dev/null 2>&1; then
    [ -z "$(ss -Htan "( sport = :$1 )" 2>/dev/null)" ]
  else
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}

# Prints two free consecutive ports (slurmctld, slurmd) from a random base in 20000-59999.
_slurm_pick_ports() {
  local p
  for _ in $(seq 1 50); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    if _slurm_port_free "$p" && _slurm_port_free $((p + 1)); then
      echo "$p $((p + 1))"
      return 0
    fi
  done
  return 1
}

# Prints the pid in pid file $1 if that process is alive.
_slurm_live_pid() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(tr -dc '0-9' <"$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# Waits up to $2 seconds for pid $1 to exit.
_slurm_wait_gone() {
  local pid=$1 tries=$(( $2 * 10 ))
  while kill -0 "$pid" 2>/dev/null && [ "$tries" -gt 0 ]; do
    sleep 0.1
    tries=$((tries - 1))
  done
  ! kill -0 "$pid" 2>/dev/null
}

# Stops the daemons in the given pid files: SIGTERM to all, then SIGKILL to those still there
# after 15 s. Missing or stale pid files are fine.
_slurm_kill_pidfiles() {
  local f pid pids=()
  for f in "$@"; do
    if pid=$(_slurm_live_pid "$f"); then
      kill -TERM "$pid" 2>/dev/null
      pids+=("$pid")
    fi
  done
  for pid in "${pids[@]}"; do
    if ! _slurm_wait_gone "$pid" 15; then
      echo "slurm_stop: pid $pid ignored SIGTERM, killing" >&2
      kill -KILL "$pid" 2>/dev/null
      _slurm_wait_gone "$pid" 5 || echo "slurm_stop: pid $pid survived SIGKILL" >&2
    fi
  done
  rm -f "$@"
}

# Prints the pids of processes named $1 whose environment holds SLURM_CONF=$2, i.e. started by
# this cluster's daemons (slurmstepd inherits slurmd's environment).
_slurm_pids_with_conf() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(cat 2>/dev/null "$p/comm")" = "$1" ] || continue
    if tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "SLURM_CONF=$2"; then
      echo "${p#/proc/}"
    fi
  done
}

# Prints the log tails, for a start that failed.
_slurm_dump_logs() {
  local f
  for f in "$1"/log/*.log; do
    [ -f "$f" ] || continue
    echo "----- tail $f -----" >&2
    tail -n 40 "$f" >&2
  done
}

slurm_start() {
  if [ $# -lt 1 ] || [ -z "$1" ]; then
    echo "usage: slurm_start WORKDIR [PLUGSTACK_LINE]" >&2
    return 2
  fi
  local dir d plug=${2:-} node hwline hw ports ctld_port d_port threads select_params mem state=
  mkdir -p "$1" || return 1
  dir=$(cd "$1" && pwd) || return 1
  # munged insists that every directory above its socket is searchable by all.
  d=$dir
  while d=$(dirname "$d") && [ "$d" != / ]; do
    if [ "$(( 0$(stat -c %a "$d") & 1 ))" = 0 ]; then
      echo "slurm_start: $d is not searchable by others (o+x), munged would refuse it" >&2
      return 1
    fi
  done
  # munged also wants the directories holding its socket searchable by all (mktemp -d is 0700) and
  # not writable by group or others.
  chmod 0755 "$dir" || return 1
  mkdir -p "$dir"/{etc,munge,log,run,tmp,state/ctld,state/d} || return 1
  chmod 0755 "$dir/munge" || return 1
  SLURM_TEST_DIR=$dir
  export SLURM_TEST_DIR

  node=$(hostname -s)
  # The hardware line, e.g. "CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1",
  # so slurmd's registration matches; memory is not scheduled, so a small RealMemory will do.
  hwline=$(slurmd -C 2>/dev/null | head -n 1)
  hw=$(grep -o 'CPUs=.*ThreadsPerCore=[0-9]*' <<<"$hwline")
  [ -n "$hw" ] || hw="CPUs=$(nproc)"
  mem=$(grep -o 'RealMemory=[0-9]*' <<<"$hwline" | cut -d= -f2)
  if [ -z "$mem" ] || [ "$mem" -gt 1024 ]; then mem=1024; fi
  # CR_Core hands out whole cores; with hyperthreads a 1-CPU job would take two CPUs, so there
  # CR_CPU keeps one job per CPU.
  threads=$(grep -o 'ThreadsPerCore=[0-9]*' <<<"$hw" | cut -d= -f2)
  select_params=CR_Core
  if [ -n "$threads" ] && [ "$threads" -gt 1 ]; then select_params=CR_CPU; fi

  if [ "$SLURM_TEST_CRED_EXPIRE" -lt 5 ]; then
    echo "slurm_start: cred_expire below 5 is ignored by Slurm (it falls back to 120); using 5" >&2
    SLURM_TEST_CRED_EXPIRE=5
  fi
  ports=$(_slurm_pick_ports) || { echo "slurm_start: no free ports" >&2; return 1; }
  read -r ctld_port d_port <<<"$ports"

  cat >"$dir/etc/slurm.conf" <<EOF
# Written by tests/slurm/cluster.sh: a single-node test cluster on 127.0.0.1.
ClusterName=paladintest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket.2,cred_expire=$SLURM_TEST_CRED_EXPIRE
StateSaveLocation=$dir/state/ctld
SlurmdSpoolDir=$dir/state/d
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$dir/tmp
PlugStackConfig=$dir/etc/plugstack.conf
# No cgroups, no accounting, no MPI, no mail.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
# Not set: CommunicationParameters=NoInAddrAny,NoCtldInAddrAny would bind the daemons to the
# address the host name resolves to, which is 127.0.0.1 only where /etc/hosts says so.
SelectType=select/cons_tres
SelectTypeParameters=$select_params
SchedulerType=sched/backfill
# Schedule every second, not every 30/60 s: a requeued job becomes eligible at its BeginTime with
# no event to wake the scheduler; and batch jobs would otherwise wait up to 3 s after submission.
SchedulerParameters=bf_interval=1,sched_interval=1,batch_sched_delay=0
JobRequeue=1
ReturnToService=2
# Short timeouts: a test cluster should notice things quickly.
KillWait=5
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
Waittime=0
NodeName=$node NodeAddr=127.0.0.1 $hw RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
  if [ -n "$plug" ]; then
    printf '%s\n' "$plug" >"$dir/etc/plugstack.conf"
  else
    : >"$dir/etc/plugstack.conf"
  fi
  SLURM_CONF=$dir/etc/slurm.conf
  export SLURM_CONF
  SLURM_TEST_NODE=$node
  export SLURM_TEST_NODE

  # munge: own key, socket, pid, log and seed files.
  if [ ! -s "$dir/munge/munge.key" ]; then
    if command -v mungekey >/dev/null 2>&1; then
      mungekey -c -k "$dir/munge/munge.key" || return 1
    else
      dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none || return 1
    fi
  fi
  chmod 0400 "$dir/munge/munge.key"
  munged --socket="$dir/munge/munge.socket.2" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" </dev/null >>"$dir/log/munged.log" 2>&1 || {
    echo "slurm_start: munged failed" >&2
    _slurm_dump_logs "$dir"
    return 1
  }

  # The daemons fork and write their pid files; their stdio goes to the logs, not to our pipes.
  slurmctld -f "$SLURM_CONF" </dev/null >>"$dir/log/slurmctld.out" 2>&1 || {
    echo "slurm_start: slurmctld failed" >&2
    _slurm_dump_logs "$dir"
    return 1
  }
  slurmd -f "$SLURM_CONF" </dev/null >>"$dir/log/slurmd.out" 2>&1 || {
    echo "slurm_start: slurmd failed" >&2
    _slurm_dump_logs "$dir"
    return 1
  }

  for _ in $(seq 1 $((SLURM_TEST_START_TIMEOUT * 2))); do
    state=$(sinfo -h -n "$node" -o %T 2>/dev/null)
    [ "$state" = idle ] && return 0
    sleep 0.5
  done
  echo "slurm_start: node $node not idle after ${SLURM_TEST_START_TIMEOUT}s (state: ${state:-none})" >&2
  _slurm_dump_logs "$dir"
  return 1
}

slurm_stop() {
  local dir=${SLURM_TEST_DIR:-} conf ids pid pids
  [ -n "$dir" ] && [ -d "$dir" ] || return 0
  conf=$dir/etc/slurm.conf

  # Cancel the jobs while the daemons are up, so slurmstepd kills the job processes.
  if _slurm_live_pid "$dir/run/slurmctld.pid" >/dev/null; then
    ids=$(SLURM_CONF=$conf squeue -h -o %A 2>/dev/null)
    if [ -n "$ids" ]; then
      # shellcheck disable=SC2086 # one job id per word
      SLURM_CONF=$conf scancel $ids 2>/dev/null
      for _ in $(seq 1 40); do
        [ -z "$(SLURM_CONF=$conf squeue -h -o %A -t R,CG,S 2>/dev/null)" ] && break
        sleep 0.5
      done
    fi
  fi

  _slurm_kill_pidfiles "$dir/run/slurmd.pid" "$dir/run/slurmctld.pid"

  # Left-over step daemons (and what they run), should a job have outlived the cancel.
  pids=$(_slurm_pids_with_conf slurmstepd "$conf")
  for pid in $pids; do
    pkill -KILL -P "$pid" 2>/dev/null
    kill -KILL "$pid" 2>/dev/null
  done

  _slurm_kill_pidfiles "$dir/run/munged.pid"
  return 0
}
