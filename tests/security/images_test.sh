#!/usr/bin/env bash
# Hostile checkpoint images (label security). A real job is checkpointed into a good image; each
# attack copies it, makes one hostile change (a manifest path with `..` or absolute, a symlink out
# of the image to a file or a directory, a FIFO, a device, a file swapped or added after the
# manifest, log and region targets outside the run directory, a writable image, a run directory
# its job's user has booby-trapped) and runs `paladin image verify` and `paladin restore` on it
# under a time limit. Each must refuse with a message that names what is wrong, write nothing
# outside the run directory, change no file outside (a sentinel's SHA-256 before and after) and
# start nothing. The good image still verifies and restores afterwards.
#
#   images_test.sh PALADIN SEQ_WRITER
# Needs root and CRIU (exit 77 without them).
set -u
PALADIN=$(realpath "$1")
SEQ_WRITER=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cli/testlib.sh"
source "$HERE/../ckpt/ckptlib.sh"
LIMIT_S=30

if ((EUID != 0)); then
  echo "SKIP: restore needs root (PID namespaces, CRIU)"
  exit 77
fi
skip_without_criu
close_inherited_fds

work=$(realpath "$(mktemp -d /tmp/paladin-sec-images.XXXXXX)")
export PALADIN_RUN_DIR=$work/run
mkdir -p "$PALADIN_RUN_DIR" "$work/outside/dir"
marker=$work/sec-image-workload.py
cp "$SEQ_WRITER" "$marker"
launcher=

cleanup() {
  pkill -KILL -f -- "$marker" 2>/dev/null
  [[ -n $launcher ]] && kill -9 "$launcher" 2>/dev/null
  sleep 0.3
  local d
  for d in "$PALADIN_RUN_DIR"/*; do
    [[ -d $d ]] || continue
    for g in /sys/fs/cgroup/paladin/"${d##*/}" /sys/fs/cgroup/*/paladin/"${d##*/}"; do
      [[ -d $g ]] && rmdir "$g" 2>/dev/null
    done
  done
  if [[ -z ${KEEP_WORK:-} ]]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

# --- the good image -----------------------------------------------------------------------------
(cd "$work" && exec timeout 300 "$PALADIN" run --name secimg -- python3 "$marker" - --every-ms 20) \
  >"$work/run.out" 2>"$work/run.err" &
launcher=$!
run_dir=
for _ in $(seq 300); do
  run_dir=$(find "$PALADIN_RUN_DIR" -mindepth 1 -maxdepth 1 -name 'secimg-*' | head -1)
  [[ -n $run_dir && -s $run_dir/stdout.log ]] && (($(wc -l <"$run_dir/stdout.log") >= 10)) && break
  sleep 0.1
done
if [[ -z $run_dir ]] || (($(wc -l <"$run_dir/stdout.log") < 10)); then
  echo "FAIL: the workload did not start: $(cat "$work/run.err")"
  exit 1
fi
good=$work/good
out=$(timeout 120 "$PALADIN" checkpoint secimg --out "$good" 2>&1) || {
  echo "FAIL: checkpoint of the good job: $out"
  exit 1
}
wait "$launcher" 2>/dev/null
launcher=
out=$(timeout 60 "$PALADIN" image verify "$good" 2>&1) || {
  echo "FAIL: the good image does not verify: $out"
  exit 1
}
pass "the good image verifies: $out"

# --- what must not change -----------------------------------------------------------------------
printf 'sentinel: must never change\n' >"$work/outside/sentinel.txt"
cp "$run_dir/stdout.log" "$work/outside/dir/stdout.log"
cp "$run_dir/stderr.log" "$work/outside/dir/stderr.log"
snapshot() {
  (cd "$work/outside" && find . -printf '%p %y %s\n' | sort && sha256sum sentinel.txt dir/*)
}
before=$(snapshot)
sentinel=$work/outside/sentinel.txt

tried=0
refused=0

# manifest IMAGE PYTHON: edits IMAGE/manifest.json with PYTHON (m is the manifest; sha(path) and
# size(path) describe a file), as an attacker who rewrites the unauthenticated manifest would.
# An entry given a SHA-256 turns the manifest into format version 1 (still read), every file
# then listed with its SHA-256 in place of its XXH3-128 chunk digests.
manifest() {
  python3 - "$1" "$2" <<'PY'
import hashlib, json, os, sys
image, code = sys.argv[1], sys.argv[2]
path = os.path.join(image, "manifest.json")
m = json.load(open(path))
def sha(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest()
def size(p):
    return os.path.getsize(p)
def entry(rel):
    return next(f for f in m["files"] if f["path"] == rel)
exec(code)
if any("sha256" in f for f in m["files"]):
    m["version"] = 1
    m.pop("chunk_bytes", None)
    for f in m["files"]:
        if "xxh3" in f:
            del f["xxh3"]
            f.setdefault("sha256", sha(os.path.join(image, f["path"])))
json.dump(m, open(path, "w"), indent=2)
PY
}

fresh() {
  img=$work/attack-$1
  rm -rf "$img"
  cp -a "$good" "$img"
}

# unchanged WHAT: nothing outside changed and nothing was started.
unchanged() {
  local now
  now=$(snapshot)
  if [[ $now != "$before" ]]; then
    fail "$1: something outside the run directory changed: $(diff <(echo "$before") <(echo "$now"))"
    return 1
  fi
  if pgrep -f -- "$marker" >/dev/null; then
    fail "$1: the refused image was restored anyway"
    pkill -KILL -f -- "$marker"
    return 1
  fi
  return 0
}

# attack NAME VERIFY-PATTERN RESTORE-PATTERN: `image verify` and `restore` of $img both refuse
# (VERIFY-PATTERN "-" means the image is intact and only the restore can know better).
attack() {
  local name=$1 vpat=$2 rpat=$3 before_failures=$failures
  tried=$((tried + 1))
  if [[ $vpat != - ]]; then
    expect_error "$name: image verify" "$vpat" -- image verify "$img"
  fi
  expect_error "$name: restore" "refusing to restore" "$rpat" -- restore "$img"
  unchanged "$name"
  ((failures == before_failures)) && refused=$((refused + 1))
}

pages=$(cd "$good" && ls pages-*.img | head -1)
core=$(cd "$good" && ls core-*.img | head -1)

# 1-4. Manifest paths that leave the image (with the outside file's true size and hash).
fresh dotdot
manifest "$img" "m['files'].append({'path': '../outside/sentinel.txt', 'size': size('$sentinel'), 'sha256': sha('$sentinel')})"
attack "manifest path ../" "has a '..' component" "has a '..' component"
fresh deep-dotdot
manifest "$img" "m['files'].append({'path': 'logs/../../outside/sentinel.txt', 'size': size('$sentinel'), 'sha256': sha('$sentinel')})"
attack "manifest path logs/../../" "has a '..' component" "has a '..' component"
fresh absolute
manifest "$img" "m['files'].append({'path': '$sentinel', 'size': size('$sentinel'), 'sha256': sha('$sentinel')})"
attack "manifest path absolute" "is absolute" "is absolute"
fresh nul
manifest "$img" "entry('$pages')['path'] = '$pages\\x00../x'"
attack "manifest path with a NUL byte" "NUL byte" "NUL byte"
fresh empty
manifest "$img" "m['files'].append({'path': '', 'size': 0, 'sha256': sha('/dev/null')})"
attack "manifest path empty" "is empty" "is empty"

# 6. A log inside the image is a symlink to a file outside (manifest rewritten to match it).
fresh symlink-file
rm "$img/logs/stdout.log"
ln -s "$sentinel" "$img/logs/stdout.log"
manifest "$img" "entry('logs/stdout.log').update(size=size('$sentinel'), sha256=sha('$sentinel'))"
attack "symlink in the image to a file outside" "logs/stdout.log: a symlink" "logs/stdout.log: a symlink"

# 7. The image's logs folder is a symlink to a folder outside holding matching files.
fresh symlink-dir
rm -r "$img/logs"
ln -s "$work/outside/dir" "$img/logs"
attack "symlinked folder in the image" "logs: a symlink" "logs: a symlink"

# 8. CRIU's parent link pointing out of the image.
fresh parent-link
ln -s "$work/outside/dir" "$img/parent"
attack "parent link out of the image" "parent: a symlink" "parent: a symlink"

# 9-10. FIFOs in place of a listed file and of the manifest: refused, and nothing blocks.
fresh fifo
rm "$img/$pages"
mkfifo "$img/$pages"
attack "FIFO in place of $pages" "$pages: a FIFO" "$pages: a FIFO"
fresh fifo-manifest
rm "$img/manifest.json"
mkfifo "$img/manifest.json"
attack "FIFO in place of manifest.json" "manifest.json: a FIFO" "manifest.json: a FIFO"

# 11-12. Devices: in place of a listed file, and one nobody listed.
fresh device
rm "$img/$core"
mknod "$img/$core" c 1 5 # /dev/zero's numbers
attack "character device in place of $core" "$core: a character device" \
  "$core: a character device"
fresh device-extra
mknod "$img/extra-dev" c 1 3 # /dev/null's numbers
attack "unlisted character device" "extra-dev: a character device" "extra-dev: a character device"

# 13-14. Swapped after the manifest was written: same size, other bytes; and a file added.
fresh swapped
python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    b = f.read(1); f.seek(0); f.write(bytes([b[0] ^ 0xFF]))' "$img/$core"
attack "$core swapped after the manifest" "$core at offset 0: XXH3-128" \
  "$core at offset 0: XXH3-128"
fresh added
cp "$img/$core" "$img/fdinfo-999.img"
attack "file added after the manifest" "fdinfo-999.img: not in the manifest" \
  "fdinfo-999.img: not in the manifest"

# 15-17. Log and region targets outside the run directory.
fresh log-target
manifest "$img" "m['workload']['log_targets'][0] = '$sentinel'"
attack "log target outside the run directory" "workload.log_targets[0]" "workload.log_targets[0]"
fresh log-target-dotdot
manifest "$img" "m['workload']['log_targets'][0] = m['workload']['run_dir'] + '/../../outside/sentinel.txt'"
attack "log target through .." "has a '..' component" "has a '..' component"
fresh region-target
manifest "$img" "m['workload']['region'] = '$sentinel'"
attack "region outside the run directory" "workload.region" "workload.region"

# 18. A whole run directory elsewhere (consistent logs): the image is intact, this node refuses it.
fresh run-dir
manifest "$img" "m['workload']['run_dir'] = '$work/outside/dir'; m['workload']['log_targets'] = ['$work/outside/dir/stdout.log', '$work/outside/dir/stderr.log']"
attack "run directory outside this node's run base" - \
  "workload.run_dir '$work/outside/dir' is not a run directory of this node"

# 19. An emulated GPU state path that is not a state file.
fresh emu-state
manifest "$img" "m['gpu']['emu_state'] = '$sentinel'"
attack "emulated GPU state outside" "gpu.emu_state" "gpu.emu_state"

# 20. An image folder others can write (it could change between verify and CRIU).
fresh writable
chmod 0777 "$img/logs"
attack "image folder writable by others" - "is owned by uid 0 with mode 0777"

# 21-23. The job's own run directory booby-trapped by its user: its log a symlink to the
# sentinel, a hard link to it, its region a symlink. Restored files are written only as regular
# files with one link, never through a symlink.
cp -a "$run_dir" "$work/run-dir.saved"
fresh trap-symlink
mv "$run_dir/stdout.log" "$work/stdout.saved"
ln -s "$sentinel" "$run_dir/stdout.log"
attack "run directory's log is a symlink" - "stdout.log: a symlink"
rm "$run_dir/stdout.log"
fresh trap-hardlink
ln "$sentinel" "$run_dir/stdout.log"
attack "run directory's log is a hard link" - "stdout.log: has 2 links"
rm "$run_dir/stdout.log"
mv "$work/stdout.saved" "$run_dir/stdout.log"
fresh trap-region
printf 'region' >"$img/quota.region"
manifest "$img" "m['workload']['region'] = m['workload']['run_dir'] + '/quota.region'; m['files'].append({'path': 'quota.region', 'size': size('$img/quota.region'), 'sha256': sha('$img/quota.region')})"
ln -s "$sentinel" "$run_dir/quota.region"
attack "run directory's region is a symlink" - "quota.region is a symlink"
rm "$run_dir/quota.region"
fresh trap-fifo
mv "$run_dir/stderr.log" "$work/stderr.saved"
mkfifo "$run_dir/stderr.log"
attack "run directory's log is a FIFO" - "stderr.log: a FIFO"
rm "$run_dir/stderr.log"
mv "$work/stderr.saved" "$run_dir/stderr.log"

# --- the good image still restores --------------------------------------------------------------
out=$(timeout 60 "$PALADIN" image verify "$good" 2>&1) &&
  pass "the good image still verifies after the attacks" ||
  fail "the good image no longer verifies: $out"
rs=$(timeout 120 "$PALADIN" restore "$good" 2>&1)
rc=$?
if ((rc == 0)) && grep -q "^restored secimg as pid" <<<"$rs"; then
  cut=$(wc -l <"$run_dir/stdout.log")
  for _ in $(seq 100); do
    (($(wc -l <"$run_dir/stdout.log") >= cut + 10)) && break
    sleep 0.1
  done
  if (($(wc -l <"$run_dir/stdout.log") >= cut + 10)) &&
    [[ -z $(awk '$0 != "line " NR { print NR; exit }' "$run_dir/stdout.log") ]]; then
    pass "the good image restores and its job continues after line $cut"
  else
    fail "the restored job did not continue: $(tail -2 "$run_dir/stdout.log")"
  fi
else
  fail "the good image did not restore (exit $rc): $rs"
fi
pkill -KILL -f -- "$marker" 2>/dev/null
now=$(snapshot)
[[ $now == "$before" ]] || fail "something outside changed by the end"

echo "images: $failures failure(s)"
echo "security: images: tried $tried, refused $refused"
((failures == 0 && tried == refused))
