#!/usr/bin/env bash
# The quota interposer on a real NVIDIA GPU (one run, a few minutes). Needs a machine with an
# NVIDIA driver, python3 with torch, and Paladin built (release preset, or BUILD_DIR). Writes its
# logs under OUT_DIR (default: a temp dir) and ends with a PASS/FAIL summary.
#
#   scripts/gpu_check_quota.sh [BUILD_DIR] [OUT_DIR]
#
# Checks: PyTorch under a 10 GiB quota sees 10 GiB in torch.cuda.mem_get_info, gets a clean
# OutOfMemoryError past it and trains below it, with the default caching allocator and with
# PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync; two workloads under 20 GiB quotas side by
# side on one GPU, neither able to exceed its share; the interposer's count within 5% of NVML's
# per-process figure for each workload holding at least 1 GiB; the driver-API scenarios of the
# CI tests on the real driver; the interposer's overhead (bench/interposer_overhead.sh); NVML
# accepts the node agent's Xid/ECC event registration on every GPU (`paladin doctor`).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
OUT=${2:-$(mktemp -d)}
mkdir -p "$OUT"
PALADIN=$BUILD/paladin
CLIENT=$BUILD/tests/quota/quota_client
TORCH=tests/gpu/torch_quota.py
export PALADIN_RUN_DIR=$OUT/run
passed=0
failed=0
result() {  # result OK|FAIL WHAT
  if [[ $1 == OK ]]; then passed=$((passed + 1)); echo "PASS $2"; else failed=$((failed + 1)); echo "FAIL $2"; fi
}

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"

echo "== GPU health events (NVML Xid/ECC registration, as the node agent's watcher does it)"
"$PALADIN" doctor >"$OUT/doctor.txt" 2>&1
cat "$OUT/doctor.txt"
grep -q '^OK  *gpu health .*xid' "$OUT/doctor.txt" && result OK "NVML health events registered" ||
  result FAIL "NVML health events not registered (see doctor.txt)"

echo "== PyTorch under a 10 GiB quota"
for conf in "" "backend:cudaMallocAsync"; do
  tag=${conf:-native}
  PYTORCH_CUDA_ALLOC_CONF=$conf timeout 240 "$PALADIN" run --name "torch-$tag" --gpu-mem 10GiB \
    -- python3 "$TORCH" probe 10 >"$OUT/probe-$tag.log" 2>&1
  rc=$?
  cat "$OUT/probe-$tag.log"
  [[ $rc == 0 ]] && result OK "PyTorch probe ($tag)" || result FAIL "PyTorch probe ($tag), exit $rc"
done

echo "== two workloads under 20 GiB quotas on one GPU"
for i in 1 2; do
  timeout 240 "$PALADIN" run --name "side-$i" --gpu-mem 20GiB --usage-log "$OUT/usage-$i.csv" \
    --usage-every 0.5 -- python3 "$TORCH" hold 16 8 20 >"$OUT/side-$i.log" 2>&1 &
  pids[$i]=$!
done
for i in 1 2; do
  wait "${pids[$i]}"
  rc=$?
  cat "$OUT/side-$i.log"
  [[ $rc == 0 ]] && result OK "workload $i kept within its 20 GiB share" ||
    result FAIL "workload $i (exit $rc)"
done

echo "== interposer count vs NVML (rows with at least 1 GiB counted)"
for i in 1 2; do
  worst=$(awk -F, 'NR > 1 && $4 >= 1073741824 && $7 != "" {
      d = ($4 - $7) / $7; if (d < 0) d = -d; if (d > w) w = d; n++ }
      END { if (n == 0) print "none"; else printf "%.4f %d", w, n }' "$OUT/usage-$i.csv")
  echo "workload $i: worst |counted - nvml| / nvml and samples: $worst"
  if [[ $worst != none ]] && awk -v w="${worst%% *}" 'BEGIN { exit !(w <= 0.05) }'; then
    result OK "workload $i count within 5% of NVML"
  else
    result FAIL "workload $i count vs NVML: $worst"
  fi
done

echo "== driver API on the real driver"
if [[ -x $CLIENT ]]; then
  for mode in --dlsym --proc-address; do
    out=$(timeout 60 "$PALADIN" run --gpu-mem 4GiB -- "$CLIENT" "$mode" init info alloc 3GiB \
      alloc 2GiB info 2>&1)
    echo "$out" >"$OUT/client$mode.log"
    echo "$out"
    if grep -q "alloc 3221225472 ok" <<<"$out" && grep -q "alloc 2147483648 error 2" <<<"$out"; then
      result OK "driver API refused at the quota ($mode)"
    else
      result FAIL "driver API at the quota ($mode)"
    fi
  done
else
  result FAIL "no $CLIENT (build the tests)"
fi

echo "== overhead"
bash bench/interposer_overhead.sh "$BUILD" 5 | tee "$OUT/overhead.txt"

echo "== summary: $passed passed, $failed failed (logs in $OUT)"
[[ $failed == 0 ]]
