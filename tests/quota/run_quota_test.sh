#!/usr/bin/env bash
# `paladin run` end to end on emulated GPUs: the GPU-memory quota as a workload sees it through
# the driver API (functions found with dlsym and with cuGetProcAddress), shared by the workload's
# processes, for every kind of allocation, growing on demand, the errors for bad input, and the
# usage log.
#
# Usage: run_quota_test.sh PALADIN QUOTA_CLIENT BUILD_DIR
# Each scenario gets its own emulated GPUs (PALADIN_EMU_STATE) and run directory.
set -u

PALADIN=$1
CLIENT=$2
BUILD=$3
source "$(dirname "$0")/../cli/testlib.sh"

for lib in libpaladin-cuda.so libpaladin-nvml.so libpaladin-emucuda.so; do
  if [[ ! -f $BUILD/$lib ]]; then
    echo "FAIL: $BUILD/$lib is missing (build the paladin-cuda, paladin-nvml and paladin-emucuda targets)"
    exit 1
  fi
done

work=$(mktemp -d /tmp/paladin-quota-test.XXXXXX)
trap 'rm -rf "$work"' EXIT

unset PALADIN_QUOTA_REGION PALADIN_GPU_MEM PALADIN_CUDA_DRIVER PALADIN_CTX_OVERHEAD \
  PALADIN_EMU_GPUS PALADIN_EMU_DRIVER_VERSION PALADIN_LIB_DIR LD_PRELOAD CUDA_VISIBLE_DEVICES
export PALADIN_EMU_CTX_OVERHEAD=64MiB

MiB=$((1 << 20))
GiB=$((1 << 30))
C=$((64 * MiB)) # what a context costs on an emulated GPU (PALADIN_EMU_CTX_OVERHEAD)
Q=$GiB          # the quota of most scenarios
EMU=1x4GiB      # their emulated GPU: larger than the quota

# run_case NAME PALADIN-RUN-ARGS...
# Runs `paladin run ARGS` with its own emulated GPUs and run directory (under $work/NAME). Sets
# $dir, $out (stdout), $err (stderr) and $rc.
run_case() {
  local name=$1
  shift
  dir=$work/$name
  mkdir -p "$dir"
  rc=0
  PALADIN_EMU_STATE=$dir/emu.state PALADIN_RUN_DIR=$dir/run \
    timeout 60 "$PALADIN" run "$@" >"$dir/out" 2>"$dir/err" || rc=$?
  out=$(<"$dir/out")
  err=$(<"$dir/err")
}

# A paladin run that ended normally (the workload exited 0, nothing crashed); false (after a FAIL)
# otherwise.
ran_ok() {
  local what=$1
  if ((rc == 124)); then
    fail "$what: still running after 60 s; stdout: $out; stderr: $err"
  elif ((rc != 0)) || crashed "$err"; then
    fail "$what: exit $rc; stdout: $out; stderr: $err"
  else
    return 0
  fi
  return 1
}

# expect_lines WHAT LINE...: every LINE, in this order, is a whole line of $out.
expect_lines() {
  local what=$1
  shift
  local -a lines
  mapfile -t lines <<<"$out"
  local line pos=0 found
  for line in "$@"; do
    found=0
    while ((pos < ${#lines[@]})); do
      pos=$((pos + 1))
      if [[ ${lines[pos - 1]} == "$line" ]]; then
        found=1
        break
      fi
    done
    if ((!found)); then
      fail "$what: expected the line '$line' (in this order); stdout: $out; stderr: $err"
      return 1
    fi
  done
  return 0
}

# expect_count WHAT N LINE: LINE is a whole line of $out exactly N times.
expect_count() {
  local n
  n=$(grep -cxF -- "$3" <<<"$out")
  if [[ $n != "$2" ]]; then
    fail "$1: expected '$3' $2 time(s), got $n; stdout: $out; stderr: $err"
    return 1
  fi
  return 0
}

# expect_err WHAT TEXT...: $err contains every TEXT.
expect_err() {
  local what=$1
  shift
  local text
  for text in "$@"; do
    if ! grep -qF -- "$text" <<<"$err"; then
      fail "$what: stderr lacks '$text'; stderr: $err"
      return 1
    fi
  done
  return 0
}

# The lines the interposer wrote on stderr.
shim_lines() { grep -c '^paladin-cuda: ' <<<"$err"; }

# --- a. refused at the quota ------------------------------------------------------------------
# The primary context costs C (measured through the emulated NVML): Q - C is exactly what is left.
under=$((Q - C))
for mode in --dlsym --proc-address; do
  what="a: quota enforced at Q-C ($mode)"
  run_case "a$mode" --gpu-mem 1GiB --emulated-gpus $EMU -- \
    "$CLIENT" $mode init alloc $under free 0 alloc $((under + 2 * MiB)) alloc $((under + 1)) \
    alloc $under alloc 1
  ran_ok "$what" &&
    expect_lines "$what" "init ok" "alloc $under ok" "free 0 ok" \
      "alloc $((under + 2 * MiB)) error 2" "alloc $((under + 1)) error 2" "alloc $under ok" \
      "alloc 1 error 2" &&
    expect_err "$what" "paladin-cuda: cuMemAlloc of" "refused" "allocation(s) refused past the quota" &&
    pass "$what"
done

# --- b. the processes of one workload share the quota ---------------------------------------------
# Process A holds X (+ its context), then process B asks for Y (+ its context).
X=$((256 * MiB))
fits=$((Q - X - 2 * C))
two_processes='"$0" --dlsym init alloc $1 touch $3/A waitfor $3/B &
"$0" --proc-address waitfor $3/A init alloc $2 touch $3/B
wait'
for Y in $fits $((fits + 2 * MiB)); do
  what="b: two processes, X=$X Y=$Y"
  run_case "b$Y" --gpu-mem 1GiB --emulated-gpus $EMU -- bash -c "$two_processes" "$CLIENT" $X $Y \
    "$work/b$Y"
  expected="ok"
  ((Y > fits)) && expected="error 2"
  ran_ok "$what" && expect_lines "$what" "alloc $X ok" "alloc $Y $expected" && pass "$what"
done

what="b: a process's bytes come back when it exits"
run_case b-exit --gpu-mem 1GiB --emulated-gpus $EMU -- bash -c \
  '"$0" init alloc $1 && "$0" init alloc $1' "$CLIENT" $under
ran_ok "$what" && expect_count "$what" 2 "alloc $under ok" && pass "$what"

what="b: a killed process's bytes are reclaimed"
run_case b-kill --gpu-mem 1GiB --emulated-gpus $EMU -- bash -c \
  '"$0" init alloc $1 touch $2/held sleep 60000 & victim=$!
"$0" waitfor $2/held >/dev/null && kill -9 $victim
"$0" init alloc $1' "$CLIENT" $under "$work/b-kill"
ran_ok "$what" && expect_count "$what" 2 "alloc $under ok" && pass "$what"

# The quota is per GPU: a process on each of two GPUs may each use all of it.
what="b: the quota is per GPU"
run_case b-pergpu --gpu-mem 1GiB --emulated-gpus 2x4GiB -- bash -c \
  'CUDA_VISIBLE_DEVICES=0 "$0" init alloc $1 touch $2/A waitfor $2/B &
CUDA_VISIBLE_DEVICES=1 "$0" waitfor $2/A init alloc $1 alloc 1 touch $2/B
wait' "$CLIENT" $under "$work/b-pergpu"
ran_ok "$what" && expect_count "$what" 2 "alloc $under ok" && expect_lines "$what" "alloc 1 error 2" &&
  pass "$what"

# --- c. every kind of allocation is counted ---------------------------------------------------------
# Each holds 512 MiB, so a 512 MiB cuMemAlloc no longer fits (C + 1 GiB > Q); freeing it makes room.
half=$((512 * MiB))
for mode in --dlsym --proc-address; do
  for kind in "async $half:freeasync" "vmm $half:vmmfree" "array 16384 8192:arrayfree" \
    "managed $half:free" "pitch 65536 8192:free"; do
    take=${kind%%:*}
    give=${kind#*:}
    what="c: ${take%% *} is counted ($mode)"
    # managed and pitched memory are the first entry of the cuMemAlloc list (a refused alloc
    # adds none).
    # shellcheck disable=SC2086 # $take is a step and its arguments
    run_case "c-${take%% *}$mode" --gpu-mem 1GiB --emulated-gpus $EMU -- \
      "$CLIENT" $mode init $take alloc $half $give 0 alloc $half
    ran_ok "$what" &&
      expect_lines "$what" "init ok" "$take ok" "alloc $half error 2" "$give 0 ok" "alloc $half ok" &&
      pass "$what"
  done

  # With a high release threshold the pool keeps freed memory: still counted, but trimmed when
  # an allocation needs it.
  what="c: pool cache counted, trimmed on demand ($mode)"
  run_case "c-pool$mode" --gpu-mem 1GiB --emulated-gpus $EMU -- \
    "$CLIENT" $mode init threshold 4GiB async $half freeasync 0 info alloc $((768 * MiB))
  ran_ok "$what" &&
    expect_lines "$what" "threshold $((4 * GiB)) ok" "async $half ok" "freeasync 0 ok" \
      "info free $((Q - C - half)) total $Q" "alloc $((768 * MiB)) ok" &&
    pass "$what"
done

# VMM memory whose handle is released while mapped lives until it is unmapped: still counted.
for mode in --dlsym --proc-address; do
  what="c: vmm released while mapped is still counted ($mode)"
  run_case "c-vmmearly$mode" --gpu-mem 1GiB --emulated-gpus $EMU -- \
    "$CLIENT" $mode init vmmearly $half alloc $half vmmunmap 0 alloc $half
  ran_ok "$what" &&
    expect_lines "$what" "vmmearly $half ok" "alloc $half error 2" "vmmunmap 0 ok" "alloc $half ok" &&
    pass "$what"
done

# The per-thread-default-stream variants (cuMemAllocAsync_ptsz, cuMemFreeAsync_ptsz).
for mode in --dlsym --proc-address; do
  what="c: async is counted (--ptds $mode)"
  run_case "c-ptds$mode" --gpu-mem 1GiB --emulated-gpus $EMU -- \
    "$CLIENT" --ptds $mode init async $half alloc $half freeasync 0 alloc $half
  ran_ok "$what" &&
    expect_lines "$what" "async $half ok" "alloc $half error 2" "freeasync 0 ok" "alloc $half ok" &&
    pass "$what"
done

# A pool that holds nothing (released at the threshold, or trimmed) is charged nothing.
what="c: an empty pool is charged nothing"
run_case c-emptypool --gpu-mem 1GiB --emulated-gpus $EMU -- \
  "$CLIENT" init async $half freeasync 0 info threshold 4GiB async $half freeasync 1 trim 0 info
ran_ok "$what" &&
  expect_lines "$what" "freeasync 0 ok" "info free $((Q - C)) total $Q" "trim 0 ok" \
    "info free $((Q - C)) total $Q" &&
  pass "$what"

# --- d. free returns the budget -----------------------------------------------------------------
for mode in --dlsym --proc-address; do
  what="d: free returns the budget ($mode)"
  run_case "d$mode" --gpu-mem 1GiB --emulated-gpus $EMU -- \
    "$CLIENT" $mode init alloc $under free 0 alloc $under free 1 alloc $((64 * MiB)) fill 2 check 2
  ran_ok "$what" &&
    expect_lines "$what" "alloc $under ok" "free 0 ok" "alloc $under ok" "free 1 ok" \
      "alloc $((64 * MiB)) ok" "fill 2 ok" "check 2 ok" &&
    pass "$what"
done

# Destroying a context gives back its overhead and the memory allocated in it.
what="d: cuCtxDestroy gives back the context and its memory"
run_case d-ctx --gpu-mem 1GiB --emulated-gpus $EMU -- \
  "$CLIENT" init ctx current 0 alloc $half info current primary ctxfree 0 info alloc $under
ran_ok "$what" &&
  expect_lines "$what" "alloc $half ok" "info free $((Q - 2 * C - half)) total $Q" "ctxfree 0 ok" \
    "info free $((Q - C)) total $Q" "alloc $under ok" &&
  pass "$what"

what="d: releasing the primary context gives back it and its memory"
run_case d-release --gpu-mem 1GiB --emulated-gpus $EMU -- \
  "$CLIENT" init alloc $half release init info alloc $under
ran_ok "$what" &&
  expect_lines "$what" "alloc $half ok" "release ok" "init ok" "info free $((Q - C)) total $Q" \
    "alloc $under ok" &&
  pass "$what"

# An allocation the quota admits but the GPU refuses counts nothing, not even in the peak.
what="d: a driver refusal counts nothing"
run_case d-driver --gpu-mem 2GiB --emulated-gpus 1x1GiB -- "$CLIENT" init alloc $((1536 * MiB)) nvml
ran_ok "$what" &&
  expect_lines "$what" "alloc $((1536 * MiB)) error 2" "nvml free $((GiB - C)) used $C total $((2 * GiB))" &&
  pass "$what"
what="d: a driver refusal does not raise the peak"
ran_ok "$what" && expect_err "$what" "peak 64 MiB of 2 GiB" && pass "$what"

# --- e. cuMemGetInfo (and NVML) report the quota ---------------------------------------------------
for mode in --dlsym --proc-address; do
  what="e: cuMemGetInfo reports the quota ($mode)"
  run_case "e$mode" --gpu-mem 1GiB --emulated-gpus $EMU -- \
    "$CLIENT" $mode init info alloc $((256 * MiB)) info free 0 info ctx info ctxfree 0 info \
    alloc 1 info nvml
  # A byte is counted as the 2 MiB the driver maps for it.
  ran_ok "$what" &&
    expect_lines "$what" "info free $((Q - C)) total $Q" \
      "info free $((Q - C - 256 * MiB)) total $Q" "free 0 ok" "info free $((Q - C)) total $Q" \
      "ctx ok" "info free $((Q - 2 * C)) total $Q" "ctxfree 0 ok" "info free $((Q - C)) total $Q" \
      "alloc 1 ok" "info free $((Q - C - 2 * MiB)) total $Q" \
      "nvml free $((Q - C - 2 * MiB)) used $((C + 2 * MiB)) total $Q" &&
    pass "$what"
done

# --- f. the quota grows on demand up to --gpu-mem-max while the GPU has room ---------------------------
what="f: growth lets a refused allocation through"
run_case f-grow --gpu-mem 512MiB --gpu-mem-max 2GiB --emulated-gpus $EMU -- \
  "$CLIENT" init alloc $((900 * MiB)) info
# Short by C + 900 MiB - 512 MiB = 452 MiB, grown in 256 MiB steps: to 1 GiB.
ran_ok "$what" &&
  expect_lines "$what" "alloc $((900 * MiB)) ok" "info free $((GiB - C - 900 * MiB)) total $GiB" &&
  expect_err "$what" "quota grown from 512 MiB to 1 GiB" "quota grown 1 time(s)" &&
  pass "$what"

# On a 1 GiB GPU: short by 452 MiB, and the GPU has 960 MiB free: grown to 1 GiB, which fits.
what="f: growth up to what the GPU has"
run_case f-small --gpu-mem 512MiB --gpu-mem-max 4GiB --emulated-gpus 1x1GiB -- \
  "$CLIENT" init alloc $((900 * MiB))
ran_ok "$what" && expect_lines "$what" "alloc $((900 * MiB)) ok" &&
  expect_err "$what" "quota grown from 512 MiB to 1 GiB" && pass "$what"

# Short by C + 1.5 GiB - 512 MiB = 1088 MiB; the 1 GiB GPU has 960 MiB free.
what="f: no growth past what the GPU has free"
run_case f-full --gpu-mem 512MiB --gpu-mem-max 4GiB --emulated-gpus 1x1GiB -- \
  "$CLIENT" init alloc $((1536 * MiB)) info
ran_ok "$what" &&
  expect_lines "$what" "alloc $((1536 * MiB)) error 2" "info free $((512 * MiB - C)) total $((512 * MiB))" &&
  expect_err "$what" "quota not grown" &&
  pass "$what"

# --- f. raising the quota of a running job (paladin resize) lets a blocked allocation succeed ----
what="f: paladin resize raises the quota mid-run"
mkdir -p "$work/f-resize"
(
  for _ in $(seq 300); do [[ -e $work/f-resize/blocked ]] && break; sleep 0.1; done
  PALADIN_RUN_DIR=$work/f-resize/run timeout 30 "$PALADIN" resize resized --gpu-mem 2GiB \
    >"$work/f-resize/resize.out" 2>&1
  touch "$work/f-resize/raised"
) &
run_case f-resize --name resized --gpu-mem 1GiB --emulated-gpus $EMU -- \
  "$CLIENT" init alloc $((Q - C)) alloc $((256 * MiB)) touch "$work/f-resize/blocked" \
  waitfor "$work/f-resize/raised" alloc $((256 * MiB)) info
wait
ran_ok "$what" &&
  expect_lines "$what" "alloc $((Q - C)) ok" "alloc $((256 * MiB)) error 2" \
    "alloc $((256 * MiB)) ok" "info free $((2 * GiB - Q - 256 * MiB)) total $((2 * GiB))" &&
  grep -q "resized: GPU-memory quota 1 GiB -> 2 GiB" "$work/f-resize/resize.out" &&
  pass "$what" || fail "$what: resize said: $(cat "$work/f-resize/resize.out")"

# --- g. bad input -------------------------------------------------------------------------------
# A flag the launcher refuses: one line, exit 2, nothing run.
refused() {
  local what=$1 pattern=$2
  shift 2
  run_case "g-$(tr -c 'a-z0-9' - <<<"$what")" "$@" -- touch "$work/ran"
  if ((rc != 2)) || crashed "$err"; then
    fail "$what: exit $rc (expected 2); stderr: $err"
  elif [[ -e $work/ran ]]; then
    fail "$what: the command ran"
  elif [[ $(wc -l <<<"$err") != 1 ]]; then
    fail "$what: expected one line on stderr: $err"
  else
    expect_err "$what" "$pattern" && pass "$what"
  fi
  rm -f "$work/ran"
}
refused "g: --gpu-mem abc" "--gpu-mem 'abc': not a size" --gpu-mem abc
refused "g: --gpu-mem -1" "--gpu-mem '-1'" --gpu-mem -1
refused "g: --gpu-mem 0" "--gpu-mem '0'" --gpu-mem 0
refused "g: --gpu-mem-max abc" "--gpu-mem-max 'abc'" --gpu-mem 1GiB --gpu-mem-max abc
refused "g: --gpu-mem-max below --gpu-mem" "--gpu-mem-max 512 MiB is below --gpu-mem 1 GiB" \
  --gpu-mem 1GiB --gpu-mem-max 512MiB
refused "g: --gpu-mem-max without --gpu-mem" "needs --gpu-mem" --gpu-mem-max 1GiB
# The emulated driver says what is wrong with the spec; paladin run says it gives no GPU.
what="g: --emulated-gpus 2xbanana"
run_case g-banana --gpu-mem 1GiB --emulated-gpus 2xbanana -- touch "$work/ran"
if ((rc != 2)) || crashed "$err" || [[ -e $work/ran ]]; then
  fail "$what: exit $rc (expected 2), ran: $([[ -e $work/ran ]] && echo yes || echo no); stderr: $err"
else
  expect_err "$what" "--emulated-gpus '2xbanana' gives no GPU" && pass "$what"
fi
rm -f "$work/ran"

# A workload whose region is missing: one line naming it, every allocation refused, no crash.
what="g: PALADIN_QUOTA_REGION names a missing file"
run_case g-noregion --gpu-mem 1GiB --emulated-gpus $EMU -- \
  env PALADIN_QUOTA_REGION="$work/no-such.region" "$CLIENT" init alloc 2MiB
if ran_ok "$what" && grep -qE ' error 2$' <<<"$out"; then
  if [[ $(shim_lines) != 1 ]] || ! grep -q "^paladin-cuda: .*$work/no-such.region" <<<"$err"; then
    fail "$what: expected exactly one paladin-cuda line naming the region; stderr: $err"
  else
    pass "$what"
  fi
else
  fail "$what: expected the GPU to be refused (error 2); stdout: $out; stderr: $err"
fi

what="g: PALADIN_GPU_MEM=notasize without a region"
run_case g-notasize --gpu-mem 1GiB --emulated-gpus $EMU -- \
  env -u PALADIN_QUOTA_REGION PALADIN_GPU_MEM=notasize "$CLIENT" init alloc 2MiB
if ran_ok "$what" && grep -qE ' error 2$' <<<"$out"; then
  if [[ $(shim_lines) != 1 ]] || ! grep -qF "paladin-cuda: PALADIN_GPU_MEM='notasize'" <<<"$err"; then
    fail "$what: expected exactly one paladin-cuda line naming PALADIN_GPU_MEM; stderr: $err"
  else
    pass "$what"
  fi
else
  fail "$what: expected the GPU to be refused (error 2); stdout: $out; stderr: $err"
fi

what="g: PALADIN_GPU_MEM without a region is enforced in the process"
run_case g-gpumem --gpu-mem 1GiB --emulated-gpus $EMU -- \
  env -u PALADIN_QUOTA_REGION PALADIN_GPU_MEM=1GiB "$CLIENT" init alloc $under alloc 1 info
ran_ok "$what" &&
  expect_lines "$what" "alloc $under ok" "alloc 1 error 2" "info free 0 total $Q" &&
  pass "$what"

# A driver older than the function: CUDA_ERROR_NOT_SUPPORTED and one line naming it.
what="g: driver 11.0 lacks cuMemAllocAsync"
run_case g-oldriver --gpu-mem 1GiB --emulated-gpus $EMU -- \
  env PALADIN_EMU_DRIVER_VERSION=11000 "$CLIENT" --dlsym init async 2MiB async 2MiB alloc 2MiB
if ran_ok "$what" &&
  expect_lines "$what" "init ok" "async $((2 * MiB)) error 801" "async $((2 * MiB)) error 801" \
    "alloc $((2 * MiB)) ok"; then
  if [[ $(shim_lines) != 1 ]] || ! grep -q '^paladin-cuda: cuMemAllocAsync' <<<"$err"; then
    fail "$what: expected exactly one paladin-cuda line naming cuMemAllocAsync; stderr: $err"
  else
    pass "$what"
  fi
fi

# --- h. the usage log -----------------------------------------------------------------------------
what="h: --usage-log"
held=$((256 * MiB))
run_case h --gpu-mem 1GiB --emulated-gpus $EMU --usage-log "$work/h-usage.csv" --usage-every 0.1 \
  -- "$CLIENT" init alloc $held touch "$work/h-held" sleep 1500
header=time_s,gpu_uuid,quota_bytes,counted_bytes,counted_peak_bytes,context_bytes,nvml_bytes,sm_util_pct,host_rss_bytes,cpu_seconds,refusals,grows,processes
if ran_ok "$what"; then
  if [[ ! -s $work/h-usage.csv ]]; then
    fail "$what: no CSV written"
  elif [[ $(head -1 "$work/h-usage.csv") != "$header" ]]; then
    fail "$what: header is '$(head -1 "$work/h-usage.csv")'"
  else
    # A row while the allocation was held: quota, counted = allocation + context, context, NVML.
    row=$(awk -F, -v q=$Q -v c=$((held + C)) -v ctx=$C \
      'NR > 1 && $3 == q && $4 == c && $6 == ctx && $7 != "" && $13 >= 1' "$work/h-usage.csv" |
      head -1)
    if [[ -z $row ]]; then
      fail "$what: no row with counted_bytes $((held + C)), context_bytes $C and nvml_bytes: $(cat "$work/h-usage.csv")"
    elif ! awk -F, '{ exit !($7 ~ /^[0-9]+$/ && $5 >= $4 && $2 ~ /^GPU-/) }' <<<"$row"; then
      fail "$what: malformed row: $row"
    elif [[ $(cut -d, -f7 <<<"$row") != $((held + C)) ]]; then
      fail "$what: nvml_bytes $(cut -d, -f7 <<<"$row") differs from what the workload holds ($((held + C))): $row"
    else
      pass "$what"
    fi
    # The peak is what the workload held at most (not the context estimate admitted before the
    # context was measured).
    what="h: counted_peak_bytes is the most the workload held"
    peak=$(awk -F, 'NR > 1 && $5 > m { m = $5 } END { print m + 0 }' "$work/h-usage.csv")
    if [[ $peak != $((held + C)) ]]; then
      fail "$what: counted_peak_bytes reached $peak, the workload held at most $((held + C)): $(cat "$work/h-usage.csv")"
    else
      pass "$what"
    fi
  fi
fi

# --- the run directory -------------------------------------------------------------------------------
what="run dir: kept with --keep-run-dir, removed otherwise"
run_case rundir --gpu-mem 1GiB --emulated-gpus $EMU --keep-run-dir --run-dir "$work/rundir/kept" -- \
  "$CLIENT" init
if ran_ok "$what"; then
  missing=""
  for f in quota.region lib/libcuda.so.1 lib/libnvidia-ml.so.1 lib/libpaladin-cuda-next.so.1 \
    lib/libpaladin-nvml-next.so.1; do
    [[ -e $work/rundir/kept/$f ]] || missing+=" $f"
  done
  run_case rundir2 --gpu-mem 1GiB --emulated-gpus $EMU -- "$CLIENT" init
  if [[ -n $missing ]]; then
    fail "$what: the kept run dir lacks$missing"
  elif ran_ok "$what" && [[ -n $(ls -A "$work/rundir2/run" 2>/dev/null) ]]; then
    fail "$what: left behind: $(ls -A "$work/rundir2/run")"
  else
    pass "$what"
  fi
fi

what="a command that cannot run"
run_case norun --gpu-mem 1GiB --emulated-gpus $EMU -- "$work/no-such-program"
if ((rc != 127)) || crashed "$err"; then
  fail "$what: exit $rc (expected 127); stderr: $err"
else
  expect_err "$what" "cannot run $work/no-such-program" && pass "$what"
fi

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all quota scenarios passed"
