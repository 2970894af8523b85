#!/usr/bin/env bash
# `paladin image send` / `paladin image receive` end to end, as two processes on loopback:
# a plain transfer, a token file, a wrong token, a dropped connection (resumed), a refusing
# destination, and an unfinished image. Usage: transfer_cli_test.sh PALADIN
set -euo pipefail
PALADIN="$1"
TMP=$(mktemp -d)
RECEIVER_PID=""
cleanup() {
  if [ -n "$RECEIVER_PID" ]; then kill "$RECEIVER_PID" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# An image-like directory without CRIU: files and a manifest written by hand.
make_image() {
  local dir="$1"
  mkdir -p "$dir/logs"
  head -c $((20 << 20)) /dev/urandom >"$dir/pages-1.img"
  head -c 3000 /dev/urandom >"$dir/core-1.img"
  printf 'step 1\n' >"$dir/logs/stdout.log"
  local files="" sep="" f
  for f in core-1.img logs/stdout.log pages-1.img; do
    files+="$sep{\"path\": \"$f\", \"size\": $(stat -c %s "$dir/$f"), \"sha256\": \"$(sha256sum "$dir/$f" | cut -d' ' -f1)\"}"
    sep=", "
  done
  cat >"$dir/manifest.json" <<JSON
{"format": "paladin-image", "version": 1, "created_unix": 1796000000,
 "workload": {"name": "cli-test", "command": ["sleep", "1"], "cwd": "/", "pid": 1, "run_dir": "",
              "logs": [], "log_targets": [], "region": ""},
 "host": {"hostname": "h", "kernel": "6.1", "arch": "x86_64"},
 "criu": {"version": "4.1.1", "no_breakpoints": false},
 "gpu": {"driver": "", "mode": "", "emu_state": "", "emu_gpus": "", "gpus": []},
 "files": [$files]}
JSON
}

# Starts a receiver (extra arguments passed on) and sets PORT from its first line. The log is
# made before the receiver starts: its background redirection may open it after the first read.
start_receiver() {
  local log="$1"
  shift
  : >"$log"
  "$PALADIN" image receive --listen 0 "$@" 2>>"$log" &
  RECEIVER_PID=$!
  for _ in $(seq 100); do
    PORT=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\),.*/\1/p' "$log")
    [ -n "$PORT" ] && return 0
    sleep 0.1
  done
  fail "the receiver did not start: $(cat "$log")"
}

# Waits for the receiver; its exit status lands in RECEIVER_RC.
wait_receiver() {
  RECEIVER_RC=0
  wait "$RECEIVER_PID" || RECEIVER_RC=$?
  RECEIVER_PID=""
}

make_image "$TMP/img"
"$PALADIN" image verify "$TMP/img" >/dev/null || fail "the hand-written test image does not verify"
export PALADIN_TOKEN=cli-s3cret

echo "== plain transfer"
start_receiver "$TMP/recv1.log" --out "$TMP/out1" --once
"$PALADIN" image send "$TMP/img" "127.0.0.1:$PORT" --streams 3 2>"$TMP/send1.log" ||
  fail "send failed: $(cat "$TMP/send1.log")"
wait_receiver
[ "$RECEIVER_RC" = 0 ] || fail "receiver exit $RECEIVER_RC: $(cat "$TMP/recv1.log")"
for f in manifest.json pages-1.img core-1.img logs/stdout.log; do
  cmp "$TMP/img/$f" "$TMP/out1/$f" || fail "$f differs"
done
"$PALADIN" image verify "$TMP/out1" >/dev/null || fail "the received image does not verify"
grep -q 'MiB/s' "$TMP/send1.log" || fail "no throughput line: $(cat "$TMP/send1.log")"
grep -q 'received .*verified' "$TMP/recv1.log" || fail "no receipt line: $(cat "$TMP/recv1.log")"

echo "== token file, and a wrong token"
printf 'from-a-file\n' >"$TMP/token"
start_receiver "$TMP/recv2.log" --out "$TMP/out2" --token-file "$TMP/token"
rc=0
PALADIN_TOKEN=wrong "$PALADIN" image send "$TMP/img" "127.0.0.1:$PORT" 2>"$TMP/send2.log" || rc=$?
[ "$rc" = 1 ] || fail "a wrong token gave exit $rc"
grep -q 'authentication failed' "$TMP/send2.log" || fail "no refusal: $(cat "$TMP/send2.log")"
[ ! -e "$TMP/out2/manifest.json" ] || fail "a refused sender left a manifest"
"$PALADIN" image send "$TMP/img" "127.0.0.1:$PORT" --token-file "$TMP/token" 2>"$TMP/send2b.log" ||
  fail "send with the token file failed: $(cat "$TMP/send2b.log")"
cmp "$TMP/img/pages-1.img" "$TMP/out2/pages-1.img" || fail "pages-1.img differs"
kill "$RECEIVER_PID"
wait_receiver

echo "== dropped connections resume"
start_receiver "$TMP/recv3.log" --out "$TMP/out3" --once
PALADIN_TRANSFER_FAULT=drop-after:2 "$PALADIN" image send "$TMP/img" "127.0.0.1:$PORT" \
  --streams 2 2>"$TMP/send3.log" || fail "send with drops failed: $(cat "$TMP/send3.log")"
wait_receiver
[ "$RECEIVER_RC" = 0 ] || fail "receiver exit $RECEIVER_RC"
grep -q ' [1-9][0-9]* reconnections' "$TMP/send3.log" || fail "no reconnection: $(cat "$TMP/send3.log")"
cmp "$TMP/img/pages-1.img" "$TMP/out3/pages-1.img" || fail "pages-1.img differs after a resume"

echo "== a refusing destination"
PALADIN_TRANSFER_FAULT=refuse start_receiver "$TMP/recv5.log" --out "$TMP/out5" --once
rc=0
"$PALADIN" image send "$TMP/img" "127.0.0.1:$PORT" 2>"$TMP/send5.log" || rc=$?
wait_receiver
[ "$rc" = 1 ] || fail "a refused send gave exit $rc"
grep -q 'destination refused' "$TMP/send5.log" || fail "no refusal: $(cat "$TMP/send5.log")"
[ "$RECEIVER_RC" = 1 ] || fail "the refusing receiver exited $RECEIVER_RC"
[ ! -e "$TMP/out5/manifest.json" ] || fail "a refused image has a manifest"

echo "== an unfinished image is not sent"
mkdir -p "$TMP/unfinished"
echo x >"$TMP/unfinished/pages-1.img"
rc=0
"$PALADIN" image send "$TMP/unfinished" 127.0.0.1:1 2>"$TMP/send6.log" || rc=$?
[ "$rc" = 1 ] || fail "an unfinished image gave exit $rc"
grep -q 'not a finished image' "$TMP/send6.log" || fail "$(cat "$TMP/send6.log")"
echo "transfer_cli: all passed"
