#!/usr/bin/env bash
# Speed of the dynamic simulation on the full default trace at load 1.0: each configuration alone
# (one thread), then all five together (all cores). The FGD+request run is the baseline the others
# are compared with (same process, same machine, same minute).
#
#   bench/dynamic_speed.sh USAGE_DIR [build dir]
set -euo pipefail
USAGE="${1:?usage: bench/dynamic_speed.sh USAGE_DIR [build dir]}"
BIN="${2:-build/release}/paladin"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
base=""
for cfg in FGD+request FGD+vpa paladin+request paladin+paladin paladin+paladin+rebalance; do
  start=$(date +%s.%N)
  "$BIN" sim dynamic --usage "$USAGE" --loads 1.0 --seeds 42 --configs "$cfg" --jobs 1 --quiet \
    --out "$OUT/$cfg" >/dev/null 2>&1
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  [ -z "$base" ] && base=$secs
  printf '%-27s %6.1f s   %5.2fx FGD+request\n' "$cfg" "$secs" "$(echo "$secs / $base" | bc -l)"
done
start=$(date +%s.%N)
"$BIN" sim dynamic --usage "$USAGE" --loads 1.0 --seeds 42 --quiet --out "$OUT/all" >/dev/null 2>&1
printf '%-27s %6.1f s   (all cores)\n' "all five" "$(echo "$(date +%s.%N) - $start" | bc)"
