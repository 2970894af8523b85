#!/usr/bin/env bash
# A process tree joined by a pipe moved by `paladin migrate` in each mode, to a `paladin receive`
# on loopback: Bash running `seq | python3 pipe_consumer.py`, the consumer checking that each
# number is one more than the last and writing "got N" to a file, slower than `seq` writes, so
# the pipe is full when the tree stops. Modes:
#   image      the tree dumped to a local image, the image sent (the default path)
#   stream     streaming pre-copy: the memory goes from the dump straight to the destination
#   post-copy  the tree resumes there at once and pulls its memory from its stopped copy here
#              (only with the patched CRIU of scripts/criu_lazy.sh)
# After each move exactly one copy of the tree runs, there (not here), it is still Bash, Python
# and seq, and the consumer's numbers run on in sequence across the move: no number lost or
# repeated in the pipe, no restart.
#
#   migrate_pipe_test.sh PALADIN [MODE...]      (default: all three; post-copy only when patched)
set -u
PALADIN=$(realpath "$1")
shift
MODES=("$@")
LAZY=${PALADIN_CRIU_LAZY:-/opt/paladin/criu-lazy/criu}
if ((${#MODES[@]} == 0)); then
  MODES=(image stream)
  if grep -qs 'criu-patches' "$LAZY"; then
    MODES+=(post-copy)
  else
    echo "post-copy not tried: no CRIU with Paladin's patches at $LAZY (bash scripts/criu_lazy.sh)"
  fi
fi
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cli/testlib.sh"
source "$HERE/ckptlib.sh"
if ((EUID != 0)); then
  echo "SKIP: migration needs root (PID namespaces, CRIU)"
  exit 77
fi
skip_without_criu
close_inherited_fds

work=$(mktemp -d /tmp/paladin-migrate-pipe-test.XXXXXX)
export PALADIN_TOKEN=migrate-pipe-test-token
receivers=()
cleanup() {
  local p
  for p in $(pgrep -f "$work/"); do kill -9 "$p" 2>/dev/null; done
  for p in "${receivers[@]}"; do kill -9 "$p" 2>/dev/null; done
  sleep 0.3
  remove_move_cgroups "$work"
  if ((failures == 0)) && [[ -z ${KEEP:-} ]]; then rm -rf "$work"; else echo "logs kept in $work"; fi
}
trap cleanup EXIT

# The consumers writing FILE (those holding it open), and the tree of one: its parent and the
# parent's children, by command name.
consumers() {
  local p f
  for p in $(pgrep -x python3); do
    [[ $(ps -o stat= -p "$p") != Z* ]] || continue
    for f in /proc/"$p"/fd/*; do
      [[ $(readlink "$f" 2>/dev/null) == "$1" ]] && echo "$p" && break
    done
  done
}
tree_shape() {
  local parent
  parent=$(ps -o ppid= -p "$1" | tr -d ' ')
  {
    cat "/proc/$parent/comm"
    for c in $(cat /proc/"$parent"/task/*/children); do cat "/proc/$c/comm"; done
  } 2>/dev/null | sort | tr '\n' ' '
}
last_got() { awk '$1 == "got" { n = $2 } END { print n + 0 }' "$1" 2>/dev/null || echo 0; }
in_sequence() { awk '$1 != "got" || $2 != ++n { bad = 1; exit } END { exit bad }' "$1"; }

move() {
  local mode=$1 d=$work/$1
  mkdir -p "$d" "$d/tmp"
  local got=$d/got.txt port
  port=$(free_port 3) # the receiver takes PORT and PORT+1, a page server PORT+2
  PALADIN_RUN_DIR=$d/base timeout 300 "$PALADIN" run --name "pipe-$mode" -- \
    bash -c "seq 1 1000000000 | python3 '$HERE/pipe_consumer.py' > '$got'" >"$d/run.out" 2>&1 &
  for _ in $(seq 300); do (($(last_got "$got") >= 300)) && break; sleep 0.1; done
  local src shape
  src=$(consumers "$got")
  shape=$(tree_shape "$src")
  if [[ -z $src || $shape != "bash python3 seq " ]]; then
    fail "$mode: the tree did not start as bash, python3, seq (consumer '$src', tree '$shape'):" \
      "$(cat "$d/run.out")"
    return
  fi
  TMPDIR=$d/tmp PALADIN_RUN_DIR=$d/base timeout 300 "$PALADIN" receive --listen "$port" \
    --dir "$d/in" >"$d/recv.out" 2>&1 &
  local receiver=$!
  receivers+=("$receiver")
  wait_listening "$port" || fail "$mode: the receiver does not listen on $port: $(cat "$d/recv.out")"
  local out rc=0
  out=$(TMPDIR=$d/tmp PALADIN_RUN_DIR=$d/base timeout 300 "$PALADIN" migrate "pipe-$mode" \
    --peer "127.0.0.1:$port" --mode "$mode" 2>&1) || rc=$?
  wait "$receiver" 2>/dev/null
  local cut
  cut=$(last_got "$got")
  local said
  case $mode in
    image) said='^moved ' ;;
    stream) said='^moved .* streaming pre-copy: pause' ;;
    post-copy) said='^moved .* post-copy: pause' ;;
  esac
  out=$(grep -v 'lacks CAP_SYS_RESOURCE' <<<"$out")
  if ((rc != 0)) || ! grep -q "$said" <<<"$out"; then
    fail "$mode: the tree did not move (exit $rc): $out; receive: $(cat "$d/recv.out")"
    return
  fi
  # Some more numbers through the pipe at the destination.
  for _ in $(seq 300); do (($(last_got "$got") >= cut + 300)) && break; sleep 0.1; done
  local now copies there
  now=$(last_got "$got")
  copies=$(consumers "$got" | wc -l)
  there=$(consumers "$got")
  if ((copies != 1)); then
    fail "$mode: $copies copies of the tree's consumer run after the move (want exactly 1): $out"
  elif [[ $there == "$src" ]]; then
    fail "$mode: the move was reported but the source's copy runs (pid $src): $out"
  elif [[ $(ps -o stat= -p "$there") == T* ]]; then
    fail "$mode: the moved copy is stopped: $out"
  elif [[ $(tree_shape "$there") != "$shape" ]]; then
    fail "$mode: the moved tree is '$(tree_shape "$there")', not '$shape'"
  elif ((now < cut + 300)); then
    fail "$mode: fewer than 300 numbers through the pipe in 30 s after the move ($cut -> $now)"
  elif grep -qE '^(GAP|EOF)' "$got"; then
    fail "$mode: the consumer saw $(grep -m1 -E '^(GAP|EOF)' "$got") across the move"
  elif ! in_sequence "$got"; then
    fail "$mode: the numbers are out of sequence across the move (moved at $cut)"
  else
    pass "$mode: $(grep '^moved' <<<"$out" | head -1 | cut -c1-160); numbers 1..$now in sequence" \
      "through the pipe, $cut before the move"
  fi
  for p in $(consumers "$got"); do
    pkill -KILL -P "$(ps -o ppid= -p "$p" | tr -d ' ')" 2>/dev/null
  done
  return 0
}

for m in "${MODES[@]}"; do move "$m"; done
echo "migrate_pipe: ${#MODES[@]} modes, $failures failed"
((failures == 0))
