#!/usr/bin/env bash
# paladin against FGD on every pod-list variant of the trace (24), 10 seeds each, paired by seed,
# with the room left above (a valid upper bound and an offline packer). Needs the full trace set:
#   bench/fgd_variants.sh /path/to/alibaba-gpu-2023 [build/release]
set -euo pipefail
DIR="${1:?usage: $0 TRACE_DIR [BUILD_DIR]}"
BIN="${2:-build/release}/paladin"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
printf "%-28s %7s %8s %8s %14s %9s %8s %8s\n" trace FGD paladin gap "95% CI" smallest bound offline
for f in "$DIR"/openb_pod_list_*.csv; do
  t=$(basename "$f" .csv)
  "$BIN" sim fgd --nodes "$DIR/openb_node_list_gpu_node.csv" --pods "$f" --policies FGD,paladin \
    --seeds 42-51 --bounds --quiet --published '' --out "$OUT/$t" >/dev/null 2>"$OUT/err" ||
    { cat "$OUT/err" >&2; exit 1; }
  fgd=$(awk -F, '$1=="FGD"{print $9}' "$OUT/$t/summary.csv")
  pal=$(awk -F, '$1=="paladin"{print $9}' "$OUT/$t/summary.csv")
  read -r gap ci mn <<<"$(awk -F, '$3==130{print $4, $5, $6}' "$OUT/$t/paired.csv")"
  read -r ub off <<<"$(awk -F, 'NR>1{u+=$2; o+=$3; n++} END{printf "%.2f %.2f", u/n, o/n}' \
    "$OUT/$t/bounds.csv")"
  printf "%-28s %7.2f %8.2f %+8.2f %14s %+9.2f %8s %8s\n" "$t" "$fgd" "$pal" "$gap" \
    "[$(awk -v g="$gap" -v c="$ci" 'BEGIN{printf "%+.2f,%+.2f", g-c, g+c}')]" "$mn" "$ub" "$off"
done
