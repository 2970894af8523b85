#!/usr/bin/env bash
# Checkpoint/restore on a real NVIDIA GPU (one run, a few minutes; root, CRIU from
# scripts/criu.sh or $PALADIN_CRIU, nvcc and python3 with torch). Writes logs under OUT_DIR and
# ends with a PASS/FAIL summary and each phase's time.
#
#   scripts/gpu_check_ckpt.sh [BUILD_DIR] [OUT_DIR]
#
# Checks: a CUDA program holding 4 GiB and one holding 16 GiB survive checkpoint -> kill ->
# restore with their device memory verified after; a deterministic PyTorch training run
# checkpointed at about step 100 and restored ends with a loss bit-identical to an uninterrupted
# run's.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
OUT=${2:-$(mktemp -d)}
mkdir -p "$OUT"
PALADIN=$(realpath "$BUILD/paladin")
export PALADIN_RUN_DIR=$OUT/run
passed=0
failed=0
result() { if [[ $1 == OK ]]; then passed=$((passed + 1)); echo "PASS $2"; else failed=$((failed + 1)); echo "FAIL $2"; fi; }
# wait_for FILE PATTERN SECONDS
wait_for() { for _ in $(seq $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
"$PALADIN" doctor | tee "$OUT/doctor.txt"
nvcc -O2 -o "$OUT/hold" tests/gpu/hold.cu || { echo "FAIL nvcc"; exit 1; }

for gib in 4 16; do
  echo "== CUDA program holding $gib GiB"
  name=hold$gib
  "$PALADIN" run --name "$name" --gpu-mem $((gib + 2))GiB -- "$OUT/hold" "$gib" >"$OUT/$name.run" 2>&1 &
  wait_for "$OUT/$name.run" "step 3 ok" 120 || { result FAIL "$name did not start"; continue; }
  timeout 600 "$PALADIN" checkpoint "$name" --out "$OUT/img-$name" 2>&1 | tee "$OUT/$name.ckpt"
  before=$(grep -c "ok" "$OUT"/run/"$name"-*/stdout.log)
  timeout 600 "$PALADIN" restore "$OUT/img-$name" 2>&1 | tee "$OUT/$name.restore"
  sleep 5
  after=$(grep -c "ok" "$OUT"/run/"$name"-*/stdout.log)
  if ((after > before)) && ! grep -q MISMATCH "$OUT"/run/"$name"-*/stdout.log; then
    result OK "$name resumed with its device memory verified ($before -> $after steps)"
  else
    result FAIL "$name after restore ($before -> $after steps)"
  fi
  pkill -f "$OUT/hold $gib" || true
done

echo "== PyTorch, deterministic, checkpointed at about step 100 of 300"
python3 tests/gpu/torch_train.py 300 8 0.02 >"$OUT/train-reference.log" 2>&1
"$PALADIN" run --name train --gpu-mem 16GiB -- python3 "$(realpath tests/gpu/torch_train.py)" 300 8 0.02 \
  >"$OUT/train.run" 2>&1 &
wait_for "$OUT/train.run" "step 100 " 300
timeout 600 "$PALADIN" checkpoint train --out "$OUT/img-train" 2>&1 | tee "$OUT/train.ckpt"
timeout 600 "$PALADIN" restore "$OUT/img-train" 2>&1 | tee "$OUT/train.restore"
log=$(ls "$OUT"/run/train-*/stdout.log)
wait_for "$log" final 300
ref=$(grep final "$OUT/train-reference.log")
got=$(grep final "$log")
echo "reference: $ref; checkpointed run: $got"
[[ -n $ref && $ref == "$got" ]] && result OK "PyTorch loss bit-identical after checkpoint/restore" ||
  result FAIL "PyTorch loss differs ($ref vs $got)"

echo "== phase times"
grep -h "checkpointed\|restored" "$OUT"/*.ckpt "$OUT"/*.restore
echo "== summary: $passed passed, $failed failed (logs in $OUT)"
[[ $failed == 0 ]]
