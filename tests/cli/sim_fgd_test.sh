#!/usr/bin/env bash
# End to end checks of `paladin sim fgd`: the same run twice gives byte-identical output files
# of the documented shape, and bad input gives a clear error and a non-zero exit, never a crash.
#
# Usage: sim_fgd_test.sh PALADIN_BINARY DATA_DIR
# Every check runs; the script fails at the end if any did.
set -euo pipefail

readonly PALADIN=${1:?usage: sim_fgd_test.sh PALADIN_BINARY DATA_DIR}
readonly DATA=${2:?usage: sim_fgd_test.sh PALADIN_BINARY DATA_DIR}/alibaba-gpu-2023
readonly NODES=$DATA/openb_node_list_gpu_node.csv
readonly PODS=$DATA/openb_pod_list_default.csv

WORK=$(mktemp -d)
readonly WORK
trap 'rm -rf "$WORK"' EXIT

# shellcheck source=tests/cli/testlib.sh
source "$(dirname "$0")/testlib.sh"

# --- help ---

help_rc=0
help_out=$("$PALADIN" sim fgd --help 2>&1) || help_rc=$?
if ((help_rc == 0)) && grep -qF -- '--nodes' <<<"$help_out"; then
  pass "sim fgd --help lists --nodes"
else
  fail "sim fgd --help: exit $help_rc; output: $help_out"
fi

# --- the same run twice: byte-identical files ---

run_sim() {
  local out_dir=$1 rc=0
  "$PALADIN" sim fgd --nodes "$NODES" --pods "$PODS" --policies FGD,BestFit --seeds 42 \
    --quiet --out "$out_dir" >"$out_dir.log" 2>&1 || rc=$?
  if ((rc != 0)) || crashed "$(cat "$out_dir.log")"; then
    fail "sim fgd into $out_dir: exit $rc; output: $(cat "$out_dir.log")"
    return 1
  fi
}

readonly DIR1=$WORK/run1 DIR2=$WORK/run2
if run_sim "$DIR1" && run_sim "$DIR2"; then
  for f in allocation.csv fragmentation.csv summary.csv allocation.svg; do
    if [[ ! -s $DIR1/$f ]]; then
      fail "$f is missing or empty"
    elif cmp -s "$DIR1/$f" "$DIR2/$f"; then
      pass "$f is byte-identical across runs"
    else
      fail "$f differs between two runs with the same seed"
    fi
  done

  header=$(head -n 1 "$DIR1/allocation.csv")
  [[ $header == "policy,seed,arrived_pct,alloc_pct" ]] && pass "allocation.csv header" ||
    fail "allocation.csv header is '$header'"
  rows=$(($(wc -l <"$DIR1/allocation.csv") - 1))
  # Two policies x one seed x arrived 0..130 %.
  ((rows == 2 * 131)) && pass "allocation.csv has 262 data rows" ||
    fail "allocation.csv has $rows data rows, expected 262"
  for policy in FGD BestFit; do
    n=$(grep -c "^$policy,42," "$DIR1/allocation.csv" || true)
    ((n == 131)) && pass "allocation.csv has 131 rows for $policy" ||
      fail "allocation.csv has $n rows for $policy, expected 131"
  done

  header=$(head -n 1 "$DIR1/fragmentation.csv")
  [[ $header == "policy,seed,arrived_pct,frag_ratio_pct" ]] && pass "fragmentation.csv header" ||
    fail "fragmentation.csv header is '$header'"

  # The chart is well-formed: one complete polyline per policy in each of its two panels (the
  # whole run and the zoom), and a closing tag.
  polylines=$(grep -c '<polyline' "$DIR1/allocation.svg" || true)
  complete=$(grep -cE '<polyline [^>]*points="[0-9., ]*"/>$' "$DIR1/allocation.svg" || true)
  if ((polylines == 4 && complete == 4)) && [[ $(tail -n 1 "$DIR1/allocation.svg") == "</svg>" ]]
  then
    pass "allocation.svg has two complete curves"
  else
    fail "allocation.svg: $polylines polylines, $complete of them complete (want 4 and 4);" \
      "the first one ends: ...$(grep -m1 '<polyline' "$DIR1/allocation.svg" | tail -c 160)"
  fi
fi

# --- paladin against FGD with --bounds: paired.csv, bounds.csv and what stdout says ---

readonly DIR3=$WORK/bounds
bounds_rc=0
"$PALADIN" sim fgd --nodes "$NODES" --pods "$PODS" --policies FGD,paladin --seeds 42 --bounds \
  --quiet --out "$DIR3" >"$DIR3.out" 2>"$DIR3.err" || bounds_rc=$?
if ((bounds_rc != 0)) || crashed "$(cat "$DIR3.out" "$DIR3.err")"; then
  fail "sim fgd --policies FGD,paladin --bounds: exit $bounds_rc; output: $(cat "$DIR3.out" "$DIR3.err")"
else
  pass "sim fgd --policies FGD,paladin --bounds exits 0"

  header=$(head -n 1 "$DIR3/paired.csv" 2>/dev/null || true)
  [[ $header == "policy,baseline,arrived_pct,mean_gap,ci95,min_gap,seeds" ]] &&
    pass "paired.csv header" || fail "paired.csv header is '$header'"
  # One row per summary point (90, 100, 110, 130 % arrived), paladin against FGD on 1 seed.
  for pct in 90 100 110 130; do
    n=$(grep -cE "^paladin,FGD,$pct,-?[0-9]+\.[0-9]+,[0-9]+\.[0-9]+,-?[0-9]+\.[0-9]+,1$" \
      "$DIR3/paired.csv" || true)
    ((n == 1)) && pass "paired.csv has the row for $pct% arrived" ||
      fail "paired.csv has $n well-formed rows for $pct% arrived, expected 1: $(cat "$DIR3/paired.csv")"
  done
  rows=$(($(wc -l <"$DIR3/paired.csv") - 1))
  ((rows == 4)) && pass "paired.csv has 4 data rows" ||
    fail "paired.csv has $rows data rows, expected 4"

  header=$(head -n 1 "$DIR3/bounds.csv" 2>/dev/null || true)
  [[ $header == "seed,upper_bound_pct,offline_sorted_paladin_pct" ]] &&
    pass "bounds.csv header" || fail "bounds.csv header is '$header'"
  rows=$(($(wc -l <"$DIR3/bounds.csv") - 1))
  row=$(sed -n 2p "$DIR3/bounds.csv")
  # One seed: 42,UB,OFFLINE with 0 <= OFFLINE <= UB <= 100 (the bound caps any placement).
  if ((rows == 1)) && [[ $row =~ ^42,([0-9]+\.[0-9]+),([0-9]+\.[0-9]+)$ ]] &&
    awk -v ub="${BASH_REMATCH[1]}" -v off="${BASH_REMATCH[2]}" \
      'BEGIN { exit !(off >= 0 && off <= ub + 1e-9 && ub <= 100 + 1e-9) }'; then
    pass "bounds.csv has one row for seed 42 with offline <= bound <= 100"
  else
    fail "bounds.csv: $rows data rows, second line '$row'"
  fi

  for phrase in "paired by seed" "Room above" \
    "published (FGD artifact, mean of its 10 runs) vs this run"; do
    grep -qF -- "$phrase" "$DIR3.out" && pass "stdout says '$phrase'" ||
      fail "stdout lacks '$phrase'; stdout: $(cat "$DIR3.out")"
  done
  # The bundled trace is in the published table: FGD gets a row there; paladin is ours only.
  if grep -qE '^FGD +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[-+][0-9]+\.[0-9]+ ' \
    <(sed -n '/^published (FGD artifact/,/^$/p' "$DIR3.out"); then
    pass "the published comparison has a row for FGD"
  else
    fail "the published comparison lacks a row for FGD; stdout: $(cat "$DIR3.out")"
  fi
  if grep -q '^paladin ' <<<"$(sed -n '/^published (FGD artifact/,/^$/p' "$DIR3.out")"; then
    fail "the published comparison lists paladin, which the FGD artifact never ran"
  else
    pass "the published comparison leaves paladin out"
  fi
fi

# --- bad input: a clear error, a non-zero exit, no crash ---

readonly BAD_OUT=$WORK/bad-out

truncated=$WORK/truncated_pods.csv
{
  head -n 3 "$PODS"
  echo "openb-pod-9999,1000,2048"
} >"$truncated"
expect_error "a pods CSV with a truncated row" "truncated_pods.csv:4" "truncated" -- \
  sim fgd --nodes "$NODES" --pods "$truncated" --policies BestFit --seeds 1 --out "$BAD_OUT"

missing=$WORK/missing_column.csv
head -n 3 "$PODS" | cut -d, -f1-4 >"$missing"
expect_error "a pods CSV without the gpu_milli column" "missing_column.csv" \
  "missing column 'gpu_milli'" -- \
  sim fgd --nodes "$NODES" --pods "$missing" --policies BestFit --seeds 1 --out "$BAD_OUT"

unknown_model=$WORK/unknown_model.csv
{
  head -n 2 "$PODS"
  echo "openb-pod-9999,1000,2048,1,500,NoSuchGPU,LS,Running,0,1,0"
} >"$unknown_model"
expect_error "an unknown GPU model in gpu_spec" "unknown_model.csv:3" "gpu_spec" "NoSuchGPU" -- \
  sim fgd --nodes "$NODES" --pods "$unknown_model" --policies BestFit --seeds 1 --out "$BAD_OUT"

expect_error "--policies Bogus" "Bogus" "Random" "FGD" "BestFit" "paladin" -- \
  sim fgd --nodes "$NODES" --pods "$PODS" --policies Bogus --seeds 1 --out "$BAD_OUT"

expect_error "--seeds 9-3" "--seeds" "9-3" -- \
  sim fgd --nodes "$NODES" --pods "$PODS" --policies BestFit --seeds 9-3 --out "$BAD_OUT"

# The largest seed as both ends of a range is one seed; the bad policy after it is then refused.
# (The parser must not step its loop counter past the top of the range.)
LIMIT_S=3 expect_error "--seeds ending at 2^64-1" "Bogus" -- \
  sim fgd --nodes "$NODES" --pods "$PODS" --policies Bogus \
  --seeds 18446744073709551615-18446744073709551615 --out "$BAD_OUT"

expect_error "a nonexistent --nodes path" "$WORK/no-such-nodes.csv" -- \
  sim fgd --nodes "$WORK/no-such-nodes.csv" --pods "$PODS" --policies BestFit --seeds 1 \
  --out "$BAD_OUT"

# --- the rebalancer: a POLICY+rebalance run beside each policy, and rebalance.csv ---

reb_rc=0
"$PALADIN" sim fgd --nodes "$NODES" --pods "$PODS" --policies BestFit --seeds 42 --ratio 0.9 \
  --rebalance --quiet --out "$WORK/reb" >"$WORK/reb.log" 2>&1 || reb_rc=$?
if ((reb_rc != 0)) || crashed "$(cat "$WORK/reb.log")"; then
  fail "sim fgd --rebalance: exit $reb_rc: $(cat "$WORK/reb.log")"
elif ! grep -q '^BestFit+rebalance,' "$WORK/reb/summary.csv"; then
  fail "sim fgd --rebalance: no BestFit+rebalance row in summary.csv"
elif [[ $(head -n 1 "$WORK/reb/rebalance.csv") != \
  "policy,seeds,alloc_130_gain,alloc_130_gain_ci95,moves_mean,admitted_mean" ]]; then
  fail "sim fgd --rebalance: rebalance.csv header: $(head -n 1 "$WORK/reb/rebalance.csv")"
else
  pass "sim fgd --rebalance writes the rebalanced run and rebalance.csv"
fi

if ((failures > 0)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all checks passed"
