#!/usr/bin/env bash
# A job's mount namespace follows the host's mounts (docs/ckpt.md, "What a job sees"): its mounts
# are slaves of the host's shared ones. In a mount namespace of this test's own, a shared tmpfs
# with a submount stands for the host's mounts that come and go (containerd's sandbox mounts on a
# Kubernetes node):
#
#   1. a job starts and sees the submount; the host unmounts it: it is gone in the job too;
#   2. the host mounts another one: it appears in the job;
#   3. the job is checkpointed and restored (CRIU declares the masters external and gives them
#      back): the restored job's mounts are still slaves of the host's, and a mount the host
#      removes after the restore leaves the restored job too.
#
#   mount_propagation_test.sh PALADIN
set -u
PALADIN=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cli/testlib.sh"
source "$HERE/ckptlib.sh"
if ((EUID != 0)); then
  echo "SKIP: needs root (mount namespaces, CRIU)"
  exit 77
fi
skip_without_criu
# Everything below mounts in a namespace of its own: nothing of it reaches the machine's.
if [[ -z ${PALADIN_MOUNT_TEST_NS:-} ]]; then
  PALADIN_MOUNT_TEST_NS=1 exec unshare --mount --propagation private -- bash "$0" "$@"
fi
close_inherited_fds

work=$(mktemp -d /tmp/paladin-mount-prop.XXXXXX)
roots=()
cleanup() {
  local p
  for p in "${roots[@]}"; do kill_trees "$p"; done
  umount -l "$host" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
host=$work/host
mkdir -p "$host" "$work/run" "$work/cwd"
mount -t tmpfs paladin-prop "$host" && mount --make-shared "$host" || {
  echo "SKIP: cannot make a shared tmpfs here"
  exit 77
}
mkdir "$host/sandbox1" "$host/sandbox2"
mount -t tmpfs paladin-prop-1 "$host/sandbox1"
export PALADIN_RUN_DIR=$work/run

# mounts PID: the job's mounts under $host ("PATH[ master:N]" a line).
mounts() {
  awk -v h="$host" '$5 == h || index($5, h "/") == 1 {
    t = ""; for (i = 7; i <= NF && $i != "-"; i++) if ($i ~ /^master:/) t = " " $i
    print $5 t }' "/proc/$1/mountinfo" 2>/dev/null
}
has() { grep -qx -- "$2\( master:[0-9]*\)\?" <<<"$(mounts "$1")"; }

(cd "$work/cwd" && exec timeout 300 "$PALADIN" run --name prop -- sleep 600) \
  >"$work/run.out" 2>&1 &
launcher=$!
record=
wait_until 15 eval "record=\$(ls $work/run/prop-*/job.json 2>/dev/null) && [[ -n \$record ]]"
pid=$(sed -n 's/.*"pid": \([0-9]*\).*/\1/p' "$record" 2>/dev/null)
if [[ -z $pid ]]; then
  fail "the job did not start: $(cat "$work/run.out")"
  exit 1
fi
roots+=("$pid")

if ! has "$pid" "$host/sandbox1"; then
  fail "the job does not see the host's mount at its start: $(mounts "$pid")"
elif ! grep -q "^$host master:" <<<"$(mounts "$pid")"; then
  fail "the job's copy of a shared host mount is not its slave: $(mounts "$pid")"
else
  pass "the job sees the host's mounts, as slaves: $(mounts "$pid" | tr '\n' ';')"
fi
umount "$host/sandbox1"
mount -t tmpfs paladin-prop-2 "$host/sandbox2"
if has "$pid" "$host/sandbox1" || ! has "$pid" "$host/sandbox2"; then
  fail "the job does not follow the host's mounts (sandbox1 gone, sandbox2 new): $(mounts "$pid")"
else
  pass "a mount the host removes leaves the job, one it adds appears there"
fi

out=$("$PALADIN" checkpoint prop --out "$work/img" 2>&1) || fail "checkpoint: $out"
wait "$launcher" 2>/dev/null
out=$("$PALADIN" restore "$work/img" 2>&1) || fail "restore: $out"
new=$(sed -n 's/^restored .* as pid \([0-9]*\):.*/\1/p' <<<"$out")
if [[ -z $new ]]; then
  fail "no restored job: $out"
  exit 1
fi
roots+=("$new")
if ! grep -q "^$host/sandbox2 master:" <<<"$(mounts "$new")"; then
  fail "the restored job's mounts are not slaves of the host's: $(mounts "$new")"
else
  umount "$host/sandbox2"
  if has "$new" "$host/sandbox2"; then
    fail "a mount the host removed after the restore stays in the restored job: $(mounts "$new")"
  else
    pass "checkpointed and restored; the restored job still follows the host's mounts"
  fi
fi
echo "mount_propagation: $failures failure(s)"
((failures == 0))
