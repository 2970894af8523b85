#!/usr/bin/env bash
# `paladin migrate --lazy` (post-copy) to a `paladin receive` on loopback, with the patched CRIU
# of scripts/criu_lazy.sh. The job (tests/ckpt/lazy_mem.py: MIB MiB of distinct pages, a line
# every 50 ms) resumes at the destination before its memory has arrived; then:
#   moved        no fault: the source is released once every page arrived; one copy, there
#   destination  the destination's copy killed while pages are in flight: the job resumes at the
#                source (what it did there is lost); one copy, here
#   puller       the destination's `criu lazy-pages` killed (the page stream cut): the
#                destination's copy is killed first, then the job resumes at the source
#   relay-cut    the link between the two page relays cut once while pages are in flight
#                (PALADIN_MIGRATE_FAULT=cut:page-relay at the receiver): the destination's relay
#                connects again, the stream goes on where it stopped, and the move completes
#   attack-plain, attack-stranger, attack-nocert, attack-idle
#                a client without the move's relay secret (page_attacker.py: a page request in
#                clear, TLS with a certificate of its own, TLS without one, a connection that says
#                nothing) connects to the source's page relay again and again from before the
#                dump until the move ends: it gets none of the job's memory, and the move
#                completes (the relay refuses it without giving it the page server). `attack`
#                names all four
#   plain        the source serves its pages in clear (--lazy-plain) to a receiver that does not
#                allow it: refused, the job resumes at the source
# Every move but `plain` runs its page stream sealed by the page relays (keys of the move); in
# `moved` an attacker also tries the port once the destination runs the job. After each, exactly one copy
# runs and its memory and generations are verified (lazy_mem.py check; after a resume at the
# source, from the point it resumed).
#
#   migrate_lazy_test.sh PALADIN [CASE...]      (default: all nine)
set -u
PALADIN=$(realpath "$1")
shift
CASES=("$@")
((${#CASES[@]} > 0)) || CASES=(moved destination puller relay-cut attack plain)
expanded=()
for c in "${CASES[@]}"; do
  if [[ $c == attack ]]; then
    expanded+=(attack-plain attack-stranger attack-nocert attack-idle)
  else
    expanded+=("$c")
  fi
done
CASES=("${expanded[@]}")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cli/testlib.sh"
source "$HERE/ckptlib.sh"
expect_error "migrate --lazy without --peer" "give --peer HOST:PORT" -- migrate somejob --lazy \
  --to node-b
if ((EUID != 0)); then
  echo "SKIP: post-copy moves need root (PID namespaces, CRIU, userfaultfd)"
  exit 77
fi
LAZY=${PALADIN_CRIU_LAZY:-/opt/paladin/criu-lazy/criu}
if ! grep -qs 'criu-patches' "$LAZY"; then
  echo "SKIP: no CRIU with Paladin's patches at $LAZY (bash scripts/criu_lazy.sh builds it)"
  exit 77
fi
close_inherited_fds

MIB=512
work=$(mktemp -d /tmp/paladin-migrate-lazy-test.XXXXXX)
export PALADIN_TOKEN=migrate-lazy-test-token
cleanup() {
  local p
  for p in $(pgrep -f "lazy_mem.py run $MIB $work/"); do kill -9 "$p" 2>/dev/null; done
  for p in "${receivers[@]}" "${attackers[@]}"; do kill -9 "$p" 2>/dev/null; done
  if ((failures == 0)) && [[ -z ${KEEP:-} ]]; then rm -rf "$work"; else echo "logs kept in $work"; fi
}
receivers=()
attackers=()
trap cleanup EXIT
# The attacker's own certificate: well-formed, self-signed, just not this move's.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=stranger -days 1 \
  -keyout "$work/stranger.key" -out "$work/stranger.crt" >/dev/null 2>&1 ||
  fail "cannot make the attacker's certificate"
attack_tried=0
attack_refused=0
# attack_start DIR PORT [MODE...]: an attacker on PORT until DIR/stop exists.
attack_start() {
  python3 "$HERE/page_attacker.py" 127.0.0.1 "$2" "$1/stop" "$work/stranger.crt" \
    "$work/stranger.key" "${@:3}" >"$1/attacker.out" 2>&1 &
  attackers+=($!)
}
# attack_end DIR: stops it; counts what it tried and what it got; fails on any memory.
attack_end() {
  touch "$1/stop"
  wait "${attackers[-1]}" 2>/dev/null
  local summary connected got refused_tcp
  summary=$(grep '^attacker:' "$1/attacker.out")
  read -r connected got refused_tcp < <(sed -E 's/[^0-9]+/ /g' <<<"$summary")
  if [[ -z $summary ]]; then
    fail "the attacker did not finish: $(tail -3 "$1/attacker.out")"
    return
  fi
  # Counted: the connections the page server's port took (those refused by TCP, once it serves
  # the puller and has closed its port, are in the line below only).
  attack_tried=$((attack_tried + connected))
  attack_refused=$((attack_refused + connected - got))
  ((got == 0)) || fail "a client without the move's keys got the job's memory: $summary"
  echo "  $summary"
}

# The job's own processes: those holding its output file open. Not by command line: a copy
# restored with lazy pages has its arguments in memory that may not have arrived yet.
job_pids() {
  local p
  for p in $(pgrep python3); do
    [[ $(ps -o stat= -p "$p") != Z* ]] || continue
    for f in /proc/"$p"/fd/*; do
      [[ $(readlink "$f" 2>/dev/null) == "$1" ]] && echo "$p" && break
    done
  done
}
running() { job_pids "$1" | while read -r p; do [[ $(ps -o stat= -p "$p") != T* ]] && echo "$p"; done; }

# move CASE: one move with the fault CASE (moved, destination, puller, attack-*, plain).
move() {
  local case=$1 d=$work/$1
  local plain=()
  [[ $case == plain ]] && plain=(--lazy-plain)
  mkdir -p "$d" "$d/tmp" # TMPDIR of both sides: nothing of the move may stay there
  port=$(free_port 3) # the receiver takes PORT and PORT+1, the page server PORT+2
  PALADIN_RUN_DIR=$d/base timeout 300 "$PALADIN" run --name "$case" -- \
    python3 "$HERE/lazy_mem.py" run $MIB "$d/out" 0.05 >"$d/run.out" 2>&1 &
  for _ in $(seq 300); do [[ -s $d/out ]] && break; sleep 0.1; done
  sleep 1
  local src
  src=$(job_pids "$d/out")
  # The destination has the source's run base, as in migrate_test.sh: a restore writes only into
  # its own node's run base, and the job keeps its paths.
  local fault=()
  [[ $case == relay-cut ]] && fault=(PALADIN_MIGRATE_FAULT=cut:page-relay)
  env "${fault[@]}" TMPDIR=$d/tmp PALADIN_RUN_DIR=$d/base timeout 300 "$PALADIN" receive \
    --listen $port --dir "$d/in" >"$d/recv.out" 2>&1 &
  local receiver=$!
  receivers+=("$receiver")
  wait_listening $port || fail "$case: the receiver does not listen on $port: $(cat "$d/recv.out")"
  [[ $case == attack-* ]] && attack_start "$d" $((port + 2)) "${case#attack-}"
  TMPDIR=$d/tmp PALADIN_RUN_DIR=$d/base timeout 300 "$PALADIN" migrate "$case" --peer 127.0.0.1:$port --lazy \
    "${plain[@]}" >"$d/migrate.out" 2>&1 &
  local migrate=$!
  if [[ $case == moved ]]; then
    for _ in $(seq 600); do grep -q 'runs at the destination' "$d/migrate.out" && break; sleep 0.01; done
    attack_start "$d" $((port + 2))
  elif [[ $case == destination || $case == puller ]]; then
    for _ in $(seq 600); do grep -q 'runs at the destination' "$d/migrate.out" && break; sleep 0.01; done
    # The rest of the pages takes about half a second: the source's page server (its lazy dump)
    # is stopped, so that the fault lands while pages are still owed, then let go once it has.
    local server
    server=$(pgrep -f -- "dump .*$d/.*--lazy-pages --ps-socket ")
    [[ -n $server ]] || fail "$case: the source's page server (its lazy dump) is not running"
    [[ -n $server ]] && kill -STOP $server
    sleep 0.2
    if grep -q '^moved' "$d/migrate.out"; then
      fail "$case: every page arrived before the fault could be injected"
    fi
    local victim
    case $case in
      destination) victim=$(running "$d/out" | grep -vx "$src") ;;
      puller) victim=$(pgrep -f "lazy-pages --page-server --ps-socket [0-9]+ -D $d/") ;;
    esac
    [[ -n $victim ]] || fail "$case: nothing to kill (the destination's copy or its page puller)"
    kill -9 $victim 2>/dev/null
    sleep 0.2
    [[ -n $server ]] && kill -CONT $server 2>/dev/null
  fi
  wait $migrate
  local rc=$?
  [[ $case == moved || $case == attack-* ]] && attack_end "$d"
  wait $receiver 2>/dev/null
  sleep 0.5
  local out copies survivor
  out=$(grep -v 'lacks CAP_SYS_RESOURCE' "$d/migrate.out")
  copies=$(job_pids "$d/out" | wc -l)
  survivor=$(running "$d/out")
  if ((copies != 1)) || [[ -z $survivor ]]; then
    fail "$case: $copies copies of the job (want exactly 1, running; migrate exit $rc): $out"
    return
  fi
  local how=()
  if [[ $case == attack-* || $case == relay-cut ]]; then
    # The page server is reached only through the relay, which takes a link only from the
    # holder of the move's secret: a stranger no longer fails the move; a cut link is made again.
    if ((rc != 0)) || [[ $survivor == "$src" ]] || ! grep -q '^moved .* post-copy: pause' <<<"$out"; then
      fail "$case: expected the job to move (exit $rc): $out; receive: $(tail -5 "$d/recv.out")"
      return
    fi
    if [[ $case == relay-cut ]]; then
      grep -q 'cutting the link after' "$d/recv.out" || fail "$case: the fault was not injected"
      grep -q "link was cut 1 time(s) and made again" <<<"$out" ||
        fail "$case: the source does not say the page stream was cut and made again: $out"
      grep -q 'was made again after' "$d/recv.out" ||
        fail "$case: the receiver does not say the link was made again: $(cat "$d/recv.out")"
    fi
  elif [[ $case == plain ]]; then
    if ((rc == 0)) || [[ $survivor != "$src" ]] || ! grep -q 'lazy-plain' <<<"$out"; then
      fail "$case: a receiver without --lazy-plain took a plain page stream (exit $rc): $out"
      return
    fi
  elif [[ $case == moved ]]; then
    grep -q 'through the page relays, sealed' "$d/recv.out" ||
      fail "$case: the receiver did not pull sealed: $(cat "$d/recv.out")"
    if [[ -n $(ls -A "$d/tmp") ]]; then
      fail "$case: the move left files behind: $(ls -A "$d/tmp")"
    fi
    if ((rc != 0)) || [[ $survivor == "$src" ]] || ! grep -q '^moved .* post-copy: pause' <<<"$out"; then
      fail "$case: expected the job to move (exit $rc): $out; receive: $(cat "$d/recv.out")"
      return
    fi
  else
    if ((rc == 0)) || [[ $survivor != "$src" ]] || ! grep -q 'the job resumed here' <<<"$out"; then
      fail "$case: expected the job to resume at the source (exit $rc): $out"
      return
    fi
    how=(--after-rewind)
  fi
  kill -USR1 "$survivor"
  for _ in $(seq 200); do grep -q '^full' "$d/out" && break; sleep 0.05; done
  kill -9 "$survivor"
  local check
  if check=$(python3 "$HERE/lazy_mem.py" check $MIB "$d/out" "${how[@]}" 2>&1) &&
    grep -q ', 1 full-memory' <<<"$check"; then
    pass "$case: $(tail -1 <<<"$out" | cut -c1-220); ${check//$'\n'/; }"
  else
    fail "$case: memory not verified: $check"
  fi
}

for c in "${CASES[@]}"; do move "$c"; done
echo "security: lazy page stream: tried $attack_tried, refused $attack_refused"
echo "migrate_lazy: ${#CASES[@]} cases, $failures failed"
((failures == 0))
