#!/usr/bin/env bash
# Fidelity of Paladin's baselines to the FGD artifact's published runs, on every trace the
# artifact published (17), 10 seeds each. Needs the full trace set (not bundled):
#   bench/fgd_fidelity.sh /path/to/alibaba-gpu-2023 [build/release]
# Prints, per trace and policy, published vs ours at 100% and 130% arrived load, and fails if
# any differs by more than 1.0 point.
set -euo pipefail
DIR="${1:?usage: $0 TRACE_DIR [BUILD_DIR]}"
BIN="${2:-build/release}/paladin"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PUB="$ROOT/data/fgd-published/alloc_means.csv"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
TRACES=$(cut -d, -f1 "$PUB" | tail -n +2 | sort -u)
printf "%-28s %-14s %8s %8s %7s %8s %8s %7s\n" trace policy pub@100 ours@100 diff pub@130 ours@130 diff
worst=0
for t in $TRACES; do
  "$BIN" sim fgd --nodes "$DIR/openb_node_list_gpu_node.csv" --pods "$DIR/$t.csv" \
    --policies Random,DotProduct,GpuClustering,GpuPacking,BestFit,FGD --seeds 42-51 --quiet \
    --published '' --out "$OUT/$t" >/dev/null 2>"$OUT/err" || { cat "$OUT/err" >&2; exit 1; }
  while IFS=, read -r policy _ _ _ a100 _ _ _ a130 _ _; do
    [ "$policy" = policy ] && continue
    line=$(grep "^$t,$policy," "$PUB")
    p100=$(echo "$line" | cut -d, -f5)
    p130=$(echo "$line" | cut -d, -f7)
    read -r d100 d130 <<<"$(awk -v a="$a100" -v b="$p100" -v c="$a130" -v d="$p130" \
      'BEGIN{printf "%.2f %.2f", a-b, c-d}')"
    printf "%-28s %-14s %8.2f %8.2f %+7.2f %8.2f %8.2f %+7.2f\n" "$t" "$policy" "$p100" "$a100" \
      "$d100" "$p130" "$a130" "$d130"
    worst=$(awk -v w="$worst" -v x="$d100" -v y="$d130" \
      'BEGIN{x=x<0?-x:x; y=y<0?-y:y; m=w; if(x>m)m=x; if(y>m)m=y; print m}')
  done <"$OUT/$t/summary.csv"
done
echo "largest |ours - published|: $worst points"
awk -v w="$worst" 'BEGIN{exit !(w <= 1.0)}' || { echo "FAIL: beyond 1.0 point"; exit 1; }
