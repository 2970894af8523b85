#!/usr/bin/env bash
# The GPU part of a checkpoint and a restore of a job of several CUDA processes, their driver
# calls one after another (PALADIN_GPU_CALLS_AT_ONCE=1, the way Paladin did them before) against
# side by side (the default), alternated in one run on the same job. The job: PROCS copies of
# tests/ckpt/ckpt_gpu, each holding MIB MiB of device memory, on the emulated driver made to take
# the time the real driver took on an H200 (docs/emucuda.md, "The checkpoint API": checkpoint
# 1.6 GB/s, restore 4.6 GB/s per process, ../shared/DESIGN.md). Every restore is checked: each
# process goes on and its device memory verifies at every generation.
#
#   bench/gpu_procs_pause.sh [PALADIN] [CKPT_GPU] [PROCS] [MIB] [ROUNDS]
#       (defaults: build/release/paladin, build/release/tests/ckpt/ckpt_gpu, 4, 256, 3)
#
# It prints, per round and way, Paladin's own phase times ("gpu checkpoint", "criu dump", "gpu
# restore", "criu restore") and the pause (the checkpoint's and the restore's wall time), then
# the means and the ratio side by side / one after another. What it does not measure: whether a
# real GPU's driver runs two processes' checkpoints at one process's rate each (not measured: no
# GPU here). Environment: CKPT_RATE (1600MB), RESTORE_RATE (4600MB), IMAGE_DIR (/dev/shm, where
# the images go). Needs root. Leaves nothing running.
set -euo pipefail
PALADIN=$(realpath "${1:-build/release/paladin}")
CKPT_GPU=$(realpath "${2:-build/release/tests/ckpt/ckpt_gpu}")
PROCS=${3:-4}
MIB=${4:-256}
ROUNDS=${5:-3}
CKPT_RATE=${CKPT_RATE:-1600MB}
RESTORE_RATE=${RESTORE_RATE:-4600MB}
IMAGE_DIR=${IMAGE_DIR:-/dev/shm}
if [[ $(id -u) != 0 ]]; then
  echo "gpu_procs_pause: needs root (PID namespaces, CRIU)" >&2
  exit 2
fi
[[ -x $PALADIN && -x $CKPT_GPU ]] || {
  echo "gpu_procs_pause: no $PALADIN or $CKPT_GPU (build them first)" >&2
  exit 2
}
WORK=$(mktemp -d /var/tmp/gpu_procs_pause.XXXXXX)
IMAGE=$(mktemp -d "$IMAGE_DIR/gpu_procs_pause.XXXXXX")
export PALADIN_RUN_DIR=$WORK/run
unset PALADIN_GPU_CALLS_AT_ONCE PALADIN_EMU_GPUS PALADIN_QUOTA_REGION PALADIN_GPU_MEM
mkdir -p "$PALADIN_RUN_DIR"
job_pid=
cleanup() {
  local rc=$?
  [[ -n $job_pid ]] && kill -9 -- "-$job_pid" "$job_pid" 2>/dev/null
  pkill -9 -f "$CKPT_GPU --mib $MIB --every-ms" 2>/dev/null || true
  rm -rf "$IMAGE"
  if ((rc == 0)); then rm -rf "$WORK"; else echo "gpu_procs_pause: logs kept in $WORK" >&2; fi
}
trap cleanup EXIT

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# phase OUT NAME: the seconds Paladin's summary line gives phase NAME ("gpu checkpoint 0.35 s").
phase() { sed -n "s/.*[:,] $2 \([0-9.]*\) s.*/\1/p" <<<"$1" | tail -1; }
gens() { awk '$1 == "gen" { n[$10] = $2 } END { for (p in n) print p, n[p] }' "$1"; }
# went_on LOG CUTS: every process printed 3 generations past its cut, with none out of sequence.
went_on() {
  local log=$1 cuts=$2 deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do
    if awk -v cuts="$cuts" 'BEGIN { n = split(cuts, c, " "); for (i = 1; i < n; i += 2) want[c[i]] = c[i + 1] + 3 }
        $1 == "gen" { g[$10] = $2 }
        END { for (p in want) if (g[p] < want[p]) exit 1 }' "$log"; then
      break
    fi
    sleep 0.2
  done
  if grep -qE '^(MISMATCH|ERROR)' "$log" ||
    ! awk '$1 == "gen" && $2 != ++n[$10] { exit 1 }' "$log" ||
    ((SECONDS >= deadline)); then
    echo "gpu_procs_pause: the restored job did not go on verified: $(tail -3 "$log")" >&2
    return 1
  fi
}

command=""
for ((i = 0; i < PROCS; i++)); do command+="\"$CKPT_GPU\" --mib $MIB --every-ms 100 & "; done
command+="wait"
gib=$(((PROCS * (MIB + 256) + 1023) / 1024 + 1))

declare -A sum
printf '%-5s %-14s %10s %9s %9s %9s %9s %9s\n' round way gpu_ckpt_s dump_s ckpt_s gpu_rest_s restore_s pause_s
for ((round = 1; round <= ROUNDS; round++)); do
  for at_once in 1 8; do
    way=$([[ $at_once == 1 ]] && echo "one_by_one" || echo "side_by_side")
    name=gp$round$at_once
    # Emulated GPUs of its own: the last job's device memory is not counted on them.
    export PALADIN_EMU_STATE=$WORK/$name.emu.state
    (cd "$WORK" && PALADIN_EMU_CHECKPOINT_RATE=$CKPT_RATE PALADIN_EMU_RESTORE_RATE=$RESTORE_RATE \
      exec timeout 900 "$PALADIN" run --name "$name" --emulated-gpus "1x${gib}GiB" -- sh -c "$command") \
      >"$WORK/$name.out" 2>&1 &
    log=
    for ((t = 0; t < 600; t++)); do
      log=$(ls "$PALADIN_RUN_DIR"/"$name"-*/stdout.log 2>/dev/null | head -1) || true
      [[ -n $log && $(gens "$log" | awk '$2 >= 3' | wc -l) == "$PROCS" ]] && break
      sleep 0.1
    done
    [[ $(gens "$log" | awk '$2 >= 3' | wc -l) == "$PROCS" ]] || {
      echo "gpu_procs_pause: $PROCS processes did not start: $(tail -5 "$WORK/$name.out")" >&2
      exit 1
    }
    rm -rf "$IMAGE/image"
    t0=$(now)
    ck=$(PALADIN_GPU_CALLS_AT_ONCE=$at_once "$PALADIN" checkpoint "$name" --out "$IMAGE/image" 2>&1) || {
      echo "gpu_procs_pause: checkpoint failed: $ck" >&2
      exit 1
    }
    t1=$(now)
    cuts=$(gens "$log" | tr '\n' ' ')
    rs=$(PALADIN_GPU_CALLS_AT_ONCE=$at_once "$PALADIN" restore "$IMAGE/image" 2>&1) || {
      echo "gpu_procs_pause: restore failed: $rs" >&2
      exit 1
    }
    t2=$(now)
    job_pid=$(sed -n 's/^restored .* as pid \([0-9]*\):.*/\1/p' <<<"$rs")
    went_on "$log" "$cuts"
    kill -9 -- "$job_pid" 2>/dev/null || true
    pkill -9 -f "$CKPT_GPU --mib $MIB --every-ms" 2>/dev/null || true
    job_pid=
    wait 2>/dev/null || true
    gc=$(phase "$ck" "gpu checkpoint")
    dump=$(phase "$ck" "criu dump")
    gr=$(phase "$rs" "gpu restore")
    cks=$(since "$t0" "$t1")
    rss=$(since "$t1" "$t2")
    pause=$(since "$t0" "$t2")
    printf '%-5s %-14s %10s %9s %9s %9s %9s %9s\n' "$round" "$way" "$gc" "$dump" "$cks" "$gr" "$rss" "$pause"
    for k in gc:$gc gr:$gr pause:$pause; do
      sum[$way.${k%%:*}]=$(awk -v a="${sum[$way.${k%%:*}]:-0}" -v b="${k#*:}" 'BEGIN { print a + b }')
    done
  done
done
echo
echo "$PROCS processes x $MIB MiB (+ a 256 MiB context each), emulated checkpoint $CKPT_RATE/s, restore $RESTORE_RATE/s, $ROUNDS rounds:"
for k in gc:"gpu checkpoint" gr:"gpu restore" pause:"pause (checkpoint + restore)"; do
  awk -v a="${sum[one_by_one.${k%%:*}]}" -v b="${sum[side_by_side.${k%%:*}]}" -v r="$ROUNDS" -v what="${k#*:}" \
    'BEGIN { printf "  %-30s one by one %6.2f s, side by side %6.2f s: %.2fx\n", what, a / r, b / r, b / a }'
done
