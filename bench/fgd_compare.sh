#!/usr/bin/env bash
# The full comparison the README quotes: 7 policies x 10 seeds on the default trace, timed, with
# one FGD run timed alone for the per-run figure. Usage: bench/fgd_compare.sh [build dir]
set -euo pipefail
BIN="${1:-build/release}/paladin"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
echo "== one FGD run (seed 42), one thread"
/usr/bin/time -f "   wall %e s, max RSS %M KiB" "$BIN" sim fgd --policies FGD --seeds 42 --jobs 1 \
  --quiet --out "$OUT/one" >/dev/null
echo "== 7 policies x 10 seeds, all cores"
/usr/bin/time -f "   wall %e s, max RSS %M KiB" "$BIN" sim fgd --seeds 42-51 --quiet --out "$OUT/all"
