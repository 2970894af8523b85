#!/usr/bin/env bash
# Ranks with their own network over simulated hosts (docs/distributed.md, "Ranks with their own
# network"), one scenario a run:
#
#   net   three hosts (network namespaces on a bridge); `paladin rank-net create` makes a rank
#         network (its own namespace, a stable address) on host A and one on host B, twice (no
#         error, nothing doubled), with routes between the hosts; `paladin run --net-ns` starts a
#         server in A's rank and a client in B's, which talk over the ranks' addresses; hostile
#         names, addresses and namespace files are refused; `paladin rank-net destroy` (twice)
#         leaves nothing behind.
#   gang  two gloo DDP ranks (ddp_train.py --rank, started alone as torchrun would), rank 0 in a
#         rank network on host A and rank 1 on host B, each under `paladin run`; run to the end
#         once for the reference losses; then, in one run: (a) a coordinated checkpoint (both
#         frozen by `paladin freeze` before either is dumped), both killed by it, both restored;
#         (b) a coordinated checkpoint that leaves both stopped, then both thawed; (c) rank 1 moved
#         to host C (gang frozen, rank 1 dumped and killed, its rank network made again on C with
#         the same address, restored there, the routes switched to C, the gang thawed). Every
#         step's all-reduced loss must be the reference's to the bit, each step printed once.
#
# Usage: gang_net_test.sh SCENARIO PALADIN
# Needs root, iproute2, CRIU with its nftables network lock (gang) and Debian's python3-torch
# (gang); exits 77 (skipped) without them.
set -u

SCENARIO=$1
PALADIN=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cli/testlib.sh"
source "$HERE/ckptlib.sh"

LIMIT=120 # seconds for any one paladin command
PY=/usr/bin/python3

if ((EUID != 0)); then
  echo "SKIP: rank networks need root"
  exit 77
fi
if ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then
  echo "SKIP: no ip (iproute2) or nsenter"
  exit 77
fi
case $SCENARIO in
  net) ;;
  gang)
    skip_without_criu
    if ! "$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
      echo "SKIP: no torch with gloo for $PY (apt-get install python3-torch)"
      exit 77
    fi
    ;;
  *)
    echo "unknown scenario $SCENARIO" >&2
    exit 2
    ;;
esac
close_inherited_fds

work=$(realpath "$(mktemp -d "/tmp/paladin-gang-$SCENARIO.XXXXXX")")
export PALADIN_RUN_DIR=$work/run
mkdir -p "$PALADIN_RUN_DIR"
roots=()     # host pids of job roots (original and restored)
launchers=() # background commands
groups=()
tag=pg$$               # names of this run's namespaces
sw=$tag-sw             # the bridge's namespace
hosts=(a b c)          # host X is namespace $tag-X with address $net.0.N on the bridge
net=10.$((100 + RANDOM % 100))
rank_nets=("$tag-r0" "$tag-r1")
rank_addrs=("$net.1.10" "$net.1.11")

cleanup() {
  local p h r
  kill_trees "${roots[@]}"
  for p in "${launchers[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  for r in "${rank_nets[@]}"; do
    for h in "${hosts[@]}"; do
      in_host "$h" "$PALADIN" rank-net destroy "$r" >/dev/null 2>&1
    done
    ip netns delete "$r" 2>/dev/null
  done
  for h in "${hosts[@]}"; do ip netns delete "$tag-$h" 2>/dev/null; done
  ip netns delete "$sw" 2>/dev/null
  local d
  for d in /sys/fs/cgroup/paladin/gang-* /sys/fs/cgroup/*/paladin/gang-*; do
    [[ -d $d ]] && rmdir "$d" 2>/dev/null
  done
  if [[ -z ${KEEP_WORK:-} ]]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

# in_host X COMMAND...: COMMAND in host X's network (the file system stays this one's).
in_host() {
  local h=$1
  shift
  nsenter --net="/run/netns/$tag-$h" "$@"
}
host_addr() { case $1 in a) echo "$net.0.1" ;; b) echo "$net.0.2" ;; c) echo "$net.0.3" ;; esac; }

# Three hosts on a bridge: each its own network namespace with eth0 on $net.0.0/24.
make_hosts() {
  ip netns add "$sw" && ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up &&
    ip -n "$sw" link set lo up || return 1
  local h
  for h in "${hosts[@]}"; do
    ip netns add "$tag-$h" &&
      ip -n "$sw" link add "port-$h" type veth peer name eth0 netns "$tag-$h" &&
      ip -n "$sw" link set "port-$h" master br0 && ip -n "$sw" link set "port-$h" up &&
      ip -n "$tag-$h" addr add "$(host_addr "$h")/24" dev eth0 &&
      ip -n "$tag-$h" link set eth0 up && ip -n "$tag-$h" link set lo up || return 1
  done
}

# host_run X NAME [RUN-ARGS...] -- COMMAND...: start_job on host X.
host_run() {
  local h=$1
  shift
  local saved=$PALADIN
  printf '#!/bin/sh\nexec nsenter --net=/run/netns/%s %q "$@"\n' "$tag-$h" "$saved" >"$work/paladin-$h"
  chmod +x "$work/paladin-$h"
  PALADIN=$work/paladin-$h
  start_job "$@"
  local rc=$?
  PALADIN=$saved
  return $rc
}

# rank_net X R: rank network R (0 or 1) on host X, with routes to the other rank from X.
rank_net() {
  local h=$1 r=$2 out rc=0
  out=$(in_host "$h" "$PALADIN" rank-net create "${rank_nets[$r]}" --address "${rank_addrs[$r]}" 2>&1) || rc=$?
  if ((rc != 0)) || crashed "$out"; then
    fail "rank-net create ${rank_nets[$r]} on $h: exit $rc: $out"
    return 1
  fi
}

# route_rank X R Y: on host X, rank R lives on host Y.
route_rank() {
  local out rc=0
  out=$(in_host "$1" "$PALADIN" rank-net route "${rank_addrs[$2]}" --via "$(host_addr "$3")" 2>&1) || rc=$?
  if ((rc != 0)); then
    fail "rank-net route ${rank_addrs[$2]} via host $3 on $1: exit $rc: $out"
    return 1
  fi
}

# --- net ----------------------------------------------------------------------------------------

scenario_net() {
  make_hosts || {
    fail "cannot make the simulated hosts"
    return
  }
  rank_net a 0 && rank_net b 1 && rank_net a 0 && rank_net b 1 || return
  local addrs
  addrs=$(ip -n "${rank_nets[0]}" -o addr show | awk '$3 == "inet" || $3 == "inet6" { print $2, $4 }' | tr '\n' ' ')
  if [[ $addrs != "lo 127.0.0.1/8 pal0 ${rank_addrs[0]}/32 " && $addrs != "lo 127.0.0.1/8 lo ::1/128 pal0 ${rank_addrs[0]}/32 " ]]; then
    fail "net: rank 0's addresses after two creates: '$addrs'"
  else
    pass "net: created twice, rank 0's namespace holds lo and pal0 ${rank_addrs[0]}/32 only"
  fi
  route_rank a 1 b && route_rank b 0 a && route_rank a 1 b || return
  local port=$((20000 + RANDOM % 12000))
  # shellcheck disable=SC2016 # the job's python reads its own arguments
  host_run a gang-server --keep-run-dir --net-ns "${rank_nets[0]}" -- "$PY" -c '
import socket, sys
s = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("listening", flush=True)
c, peer = s.accept()
c.sendall(("hello %s from %s\n" % (peer[0], c.getsockname()[0])).encode())
' "${rank_addrs[0]}" "$port" || return
  local server_log=$log server_pid=$job_pid
  if ! wait_until 20 grep -q listening "$server_log"; then
    fail "net: the server in rank 0's network does not listen: $(cat "$run_dir/stderr.log")"
    return
  fi
  local job_net
  job_net=$(readlink "/proc/$server_pid/ns/net")
  [[ $job_net == "$(stat -L -c 'net:[%i]' "/run/netns/${rank_nets[0]}")" ]] ||
    fail "net: the server is in $job_net, not rank 0's namespace"
  host_run b gang-client --keep-run-dir --net-ns "/run/netns/${rank_nets[1]}" -- "$PY" -c '
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
print(c.makefile().readline().strip(), flush=True)
' "${rank_addrs[0]}" "$port" || return
  local client_log=$log
  if wait_until 20 grep -q hello "$client_log" &&
    grep -qx "hello ${rank_addrs[1]} from ${rank_addrs[0]}" "$client_log"; then
    pass "net: paladin run --net-ns: host B's rank ${rank_addrs[1]} reached host A's ${rank_addrs[0]}: $(cat "$client_log")"
  else
    fail "net: the ranks did not talk: '$(cat "$client_log")' $(cat "$run_dir/stderr.log")"
  fi
  # Hostile input is refused before anything runs.
  local bad
  for bad in "x y" "../x" ".x" "a;b"; do
    expect_error "rank-net create '$bad'" "rank network name" -- rank-net create "$bad" --address 10.9.9.9
  done
  for bad in "10.1.1" "10.1.1.1/8" "10.1.1.1 dev lo"; do
    expect_error "rank-net create --address '$bad'" "is not an IPv4 address" -- rank-net create ok --address "$bad"
  done
  expect_error "rank-net create --address 127.0.0.1" "cannot be a rank's address" -- rank-net create ok --address 127.0.0.1
  expect_error "run --net-ns /etc/hostname" "not a network namespace" -- run --net-ns /etc/hostname -- true
  expect_error "run --rank-address without a name" "needs --net-ns" -- run --rank-address 10.9.9.9 -- true
  # Destroyed twice: nothing left on the hosts.
  local r h
  for r in 0 1; do
    for h in a b a b; do in_host "$h" "$PALADIN" rank-net destroy "${rank_nets[$r]}" >/dev/null || fail "net: destroy ${rank_nets[$r]} on $h"; done
  done
  local left=""
  for r in 0 1; do [[ -e /run/netns/${rank_nets[$r]} ]] && left+=" ${rank_nets[$r]}"; done
  for h in a b; do
    left+=$(in_host "$h" ip -o link show | awk -F': ' '$2 ~ /^pal-/ { printf " %s", $2 }')
    left+=$(in_host "$h" ip route show | awk '/dev pal-/ { printf " [%s]", $0 }')
  done
  if [[ -n $left ]]; then fail "net: left after destroy:$left"; else pass "net: destroy (twice) left no namespace, veth or route"; fi
}

# --- gang ---------------------------------------------------------------------------------------

STEPS=24
SLEEP_S=0.3
last_step() { awk '$1 == "step" { s = $2 } END { print s + 0 }' "$log0" 2>/dev/null; }
at_step() { (($(last_step) >= $1)); }

# start_ranks PREFIX: rank 0 (job PREFIX0) on host A and rank 1 (PREFIX1) on host B, each in its
# rank network; sets log0, pid0 and pid1.
start_ranks() {
  local prefix=$1 port=$((29000 + RANDOM % 1000))
  local -a env=(env RANK=0 WORLD_SIZE=2 MASTER_ADDR="${rank_addrs[0]}" MASTER_PORT="$port"
    GLOO_SOCKET_IFNAME=pal0)
  local train=("$PY" "$HERE/ddp_train.py" "$STEPS" "$SLEEP_S")
  host_run a "${prefix}0" --keep-run-dir --net-ns "${rank_nets[0]}" -- "${env[@]}" "${train[@]}" || return
  log0=$log
  pid0=$job_pid
  env[1]=RANK=1
  host_run b "${prefix}1" --keep-run-dir --net-ns "${rank_nets[1]}" -- "${env[@]}" "${train[@]}" || return
  pid1=$job_pid
}

# same_losses WHAT: rank 0's step lines are 1..STEPS, each once, with the reference's losses,
# and its final loss is the reference's.
same_losses() {
  local what=$1 steps
  steps=$(grep '^step ' "$log0" | tr '\n' ' ')
  if [[ $steps != "$ref_steps" ]]; then
    fail "$what: the steps differ from the uninterrupted run's:" \
      "$(diff <(grep '^step ' "$log0") <(tr ' ' '\n' <<<"$ref_steps" | paste -d' ' - - - | grep .) | head -6)"
    return 1
  fi
  local final
  final=$(awk '$1 == "final" { print $2 }' "$log0")
  if [[ $final != "$ref_final" ]]; then
    fail "$what: final loss $final, uninterrupted $ref_final"
    return 1
  fi
  pass "$what: steps 1..$STEPS each once, every all-reduced loss bit-identical to the" \
    "uninterrupted run's; final $final"
}

# on HOST WHAT COMMAND...: `paladin COMMAND...` on HOST; fails WHAT with its output when it fails.
# Its output is in $out.
on() {
  local h=$1 what=$2 rc=0
  shift 2
  out=$(in_host "$h" timeout "$LIMIT" "$PALADIN" "$@" 2>&1) || rc=$?
  if ((rc != 0)) || crashed "$out"; then
    fail "$what: paladin $* on host $h: exit $rc: $out"
    return 1
  fi
}

# probe HOST ADDRESS: a TCP connection from HOST to port 9 of ADDRESS (nothing listens there):
# "refused" (the rank's network answers), "silent" (nothing comes back in 2 s) or the error.
probe() {
  in_host "$1" "$PY" -c '
import socket, sys
s = socket.socket()
s.settimeout(2)
try:
    s.connect((sys.argv[1], 9))
    print("connected")
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("silent")
except OSError as e:
    print(e)
' "$2"
}

# restored_pid: the pid `paladin restore` printed in $out.
restored_pid() { sed -n 's/^restored .* as pid \([0-9]*\):.*/\1/p' <<<"$out"; }

# job_state NAME: the state in job NAME's record.
job_state() {
  local dir
  dir=$(find "$PALADIN_RUN_DIR" -mindepth 1 -maxdepth 1 -name "$1-*" | head -1)
  "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["state"])' "$dir/job.json"
}

# freeze_gang STEP: once rank 0 is at STEP, both ranks frozen (rank 0 first); both must be stopped.
freeze_gang() {
  if ! wait_until 90 at_step "$1"; then
    fail "gang: not at step $1 in 90 s: $(tail -2 "$log0")"
    return 1
  fi
  on a "freeze rank 0" freeze gang0 && on b "freeze rank 1" freeze gang1 || return
  local p
  for p in $(tree "$pid0") $(tree "$pid1"); do
    [[ $(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null) == T ]] || {
      fail "gang: pid $p is not stopped after the freeze"
      return 1
    }
  done
  cut=$(last_step)
}

scenario_gang() {
  make_hosts || {
    fail "cannot make the simulated hosts"
    return
  }
  rank_net a 0 && rank_net b 1 || return
  route_rank a 1 b && route_rank b 0 a && route_rank c 0 a || return

  local started=$SECONDS
  start_ranks ref || return
  if ! wait_until 150 eval "! alive $pid0 && ! alive $pid1"; then
    fail "gang: the uninterrupted run did not end in 150 s: $(tail -3 "$log0")"
    return
  fi
  if ! grep -q '^final ' "$log0"; then
    fail "gang: the uninterrupted run did not finish: $(tail -3 "$log0") $(tail -3 "$(dirname "$log0")/stderr.log")"
    return
  fi
  ref_steps=$(grep '^step ' "$log0" | tr '\n' ' ')
  ref_final=$(awk '$1 == "final" { print $2 }' "$log0")
  pass "gang: uninterrupted run, rank 0 on host A and rank 1 on host B, $STEPS steps in" \
    "$((SECONDS - started)) s, final loss $ref_final"

  start_ranks gang || return
  local -a before

  # (a) A coordinated checkpoint: both frozen before either is dumped; each dump kills its rank.
  freeze_gang 4 || return
  read -ra before <<<"$(tree "$pid0") $(tree "$pid1")"
  on a "(a) checkpoint rank 0" checkpoint gang0 --out "$work/a0.img" &&
    on b "(a) checkpoint rank 1" checkpoint gang1 --out "$work/a1.img" || return
  if ! wait_until 10 none_alive "${before[@]}"; then
    fail "(a): a rank still runs after its checkpoint"
    return
  fi
  grep -q "closing the connection" <<<"$out" && fail "(a): a connection between the ranks was closed"
  # While the ranks are away their networks answer nothing (CRIU's network lock stays in each
  # until its restore): a peer's segment meets no reset, here a connection attempt gets no refusal.
  local answer
  answer=$(probe a "${rank_addrs[0]}")
  [[ $answer == silent ]] || fail "(a): rank 0's network while it is away: $answer, not silent"
  on a "(a) restore rank 0" restore "$work/a0.img" || return
  pid0=$(restored_pid)
  roots+=("$pid0")
  on b "(a) restore rank 1" restore "$work/a1.img" || return
  pid1=$(restored_pid)
  roots+=("$pid1")
  [[ $(readlink "/proc/$pid1/ns/net") == "$(stat -L -c 'net:[%i]' "/run/netns/${rank_nets[1]}")" ]] ||
    fail "(a): restored rank 1 is not in its rank network"
  answer=$(probe a "${rank_addrs[0]}")
  [[ $answer == refused ]] || fail "(a): rank 0's network after its restore: $answer, not refused (unlocked)"
  pass "(a) coordinated checkpoint at step $cut: both frozen, dumped and killed (rank 0's network" \
    "silent while away, answering again once restored), restored as" \
    "pids $pid0 (host A) and $pid1 (host B)"

  # (b) A coordinated checkpoint that leaves the gang stopped, then thawed.
  freeze_gang 10 || return
  on a "(b) checkpoint rank 0" checkpoint gang0 --out "$work/b0.img" --leave-stopped &&
    on b "(b) checkpoint rank 1" checkpoint gang1 --out "$work/b1.img" --leave-stopped || return
  local s0 s1
  s0=$(job_state gang0)
  s1=$(job_state gang1)
  [[ $s0 == frozen && $s1 == frozen ]] || fail "(b): after the checkpoints the ranks are $s0 and $s1, not frozen"
  on a "(b) thaw rank 0" thaw gang0 && on b "(b) thaw rank 1" thaw gang1 || return
  pass "(b) coordinated checkpoint at step $cut leaving both stopped, both thawed"

  # (c) Rank 1 moved to host C: the gang frozen, rank 1 dumped and killed, its rank network made
  # again on C with the same address (by the restore), restored there; only then the routes to it
  # switched to C (a peer's segment reaching C before the restore would meet no socket there and be
  # answered with a reset); the gang thawed.
  freeze_gang 16 || return
  read -ra before <<<"$(tree "$pid1")"
  on b "(c) checkpoint rank 1" checkpoint gang1 --out "$work/c1.img" || return
  wait_until 10 none_alive "${before[@]}" || {
    fail "(c): rank 1 still runs on host B after its checkpoint"
    return
  }
  on b "(c) destroy rank 1's network on host B" rank-net destroy "${rank_nets[1]}" || return
  on c "(c) restore rank 1 on host C" restore "$work/c1.img" || return
  grep -q "made rank network ${rank_nets[1]}" <<<"$out" || fail "(c): the restore did not make rank 1's network on host C: $out"
  pid1=$(restored_pid)
  roots+=("$pid1")
  route_rank a 1 c && route_rank b 1 c || return
  on a "(c) thaw rank 0" thaw gang0 || return
  [[ $(readlink "/proc/$pid1/ns/net") == "$(stat -L -c 'net:[%i]' "/run/netns/${rank_nets[1]}")" ]] ||
    fail "(c): moved rank 1 is not in its rank network"
  in_host c ip route show "${rank_addrs[1]}/32" | grep -q "dev pal-" ||
    fail "(c): host C does not route ${rank_addrs[1]} to the rank network made there"
  pass "(c) rank 1 moved to host C at step $cut (pid $pid1 there), routes switched, gang thawed"

  if ! wait_until 150 eval "! alive $pid0 && ! alive $pid1"; then
    fail "gang: the ranks did not end in 150 s after the move: $(tail -3 "$log0")"
    return
  fi
  same_losses "gang (a) checkpoint/restore, (b) checkpoint leaving it stopped, (c) rank 1 moved to host C"
}

"scenario_$SCENARIO"
echo "$SCENARIO: $failures failure(s)"
((failures == 0))
