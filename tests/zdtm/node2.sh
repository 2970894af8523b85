#!/usr/bin/env bash
# The second node of run.sh's moves (ZDTM_MIGRATE=1): started by run.sh under
# `unshare --net --mount --ipc --propagation private`, it gives this node what a second machine
# has of its own, then runs CMD (the `paladin receive`) and stays, so that run.sh can read what
# the job moved here writes (its verdict) through /proc/PID/root while the job ends.
#
#   - a tmpfs over the run base (a restore places the job in its node's run base);
#   - a copy of the tests' folder taken now, in a tmpfs at the same path: the job's FIFO, locked
#     file and output are this node's own files after the move, as with a file system that the
#     nodes replicate (the source's stopped copy holds the source's);
#   - a network namespace reached from the source over a veth pair (run.sh moves IFACE in and
#     the source sends the job to ADDR): the addresses and ports of the job's connections are
#     free here while the source's stopped copy still holds them there.
#
# Usage: node2.sh STATE STATIC IFACE ADDR LIMIT CMD...
#   STATE   a file prefix: STATE.pid gets this shell's pid once it waits for IFACE, STATE.rc the
#           exit status of CMD
#   LIMIT   seconds CMD may run
set -u

state=$1 static=$2 iface=$3 addr=$4 limit=$5
shift 5

fail() {
  echo "node2: $*" >&2
  echo 1 >"$state.rc"
  exit 1
}

mount -t tmpfs -o mode=0755 paladin-node2 "$PALADIN_RUN_DIR" || fail "no tmpfs over the run base"
orig=$(mktemp -d /tmp/paladin-node2.XXXXXX)
mount --bind "$static" "$orig" || fail "cannot bind $static"
mount -t tmpfs -o mode=0755 paladin-files2 "$static" || fail "no tmpfs over $static"
cp -a "$orig/." "$static/" || fail "cannot copy $static"
umount "$orig" && rmdir "$orig"
ip link set lo up || fail "no loopback"

echo $$ >"$state.pid"
for ((i = 0; i < 200; i++)); do
  ip link show "$iface" >/dev/null 2>&1 && break
  sleep 0.05
done
if ! ip addr add "$addr/30" dev "$iface" || ! ip link set "$iface" up; then
  fail "cannot set up $iface"
fi

timeout "$limit" "$@"
echo $? >"$state.rc"
# run.sh kills this once it has read the verdict.
exec sleep 3600
