#!/usr/bin/env bash
# The quota interposer's overhead: allocation/free latency and kernel-launch rate through the
# interposer (under `paladin run`) against the same driver without it, alternating the two
# several times in one run and reporting the median of each and their ratio.
#
#   bench/interposer_overhead.sh [BUILD_DIR] [PAIRS]
#
# On a machine with an NVIDIA GPU both sides use the real driver; elsewhere, the emulated driver
# (where the absolute numbers mean little but the ratio still shows what the interposer adds).
set -euo pipefail
BUILD=${1:-build/release}
PAIRS=${2:-5}
PALADIN=$BUILD/paladin
CALLS=$BUILD/bench/cuda_calls
for f in "$PALADIN" "$CALLS" "$BUILD/libpaladin-emucuda.so"; do
  [[ -e $f ]] || { echo "missing $f: build first (cmake --build --preset release)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PALADIN_EMU_STATE=$work/emu.state PALADIN_RUN_DIR=$work/run

# The plain side: libcuda.so.1 is the real driver if one loads, else the emulated driver.
plain_lib=$work/plain
mkdir -p "$plain_lib"
if ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1 '; then
  driver=real
  plain_env=()
else
  driver=emulated
  ln -s "$(realpath "$BUILD/libpaladin-emucuda.so")" "$plain_lib/libcuda.so.1"
  plain_env=(env LD_LIBRARY_PATH="$plain_lib" PALADIN_EMU_GPUS=1x80GiB)
fi
emulated_flag=()
[[ $driver == emulated ]] && emulated_flag=(--emulated-gpus 1x80GiB)

declare -A plain interposed
for ((i = 0; i < PAIRS; i++)); do
  while read -r name value _; do plain[$name]+="$value "; done < <("${plain_env[@]}" "$CALLS")
  while read -r name value _; do interposed[$name]+="$value "; done < <(
    "$PALADIN" run --gpu-mem 70GiB "${emulated_flag[@]}" -- "$CALLS" 2>/dev/null)
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "driver: $driver; $PAIRS alternating pairs; median of each"
printf '%-20s %14s %14s %8s\n' measure plain interposed ratio
for name in alloc_free_1MiB alloc_free_256MiB launch_rate; do
  p=$(median <<<"${plain[$name]}")
  q=$(median <<<"${interposed[$name]}")
  printf '%-20s %14s %14s %8.3f\n' "$name" "$p" "$q" "$(awk -v a="$q" -v b="$p" 'BEGIN{print a/b}')"
done
echo "(alloc_free: ns per cuMemAlloc+cuMemFree pair, ratio = interposed/plain, aim <= 1.5;"
echo " launch_rate: launches per second, ratio = interposed/plain, aim >= 0.98)"
