#!/usr/bin/env bash
# End to end checks of `paladin predict eval` and `paladin sim dynamic` on the bundled data: the
# documented files with the documented headers, byte-identical across two runs, and bad input
# refused with a clear error and a non-zero exit, never a crash.
#
# Usage: predict_dynamic_test.sh PALADIN_BINARY DATA_DIR
set -euo pipefail

readonly PALADIN=${1:?usage: predict_dynamic_test.sh PALADIN_BINARY DATA_DIR}
readonly DATA=${2:?usage: predict_dynamic_test.sh PALADIN_BINARY DATA_DIR}
readonly NODES=$DATA/alibaba-gpu-2023/openb_node_list_gpu_node.csv
readonly USAGE=$DATA/alibaba-genai-2026-pod-usage

WORK=$(mktemp -d)
readonly WORK
trap 'rm -rf "$WORK"' EXIT

# Refusals may take a while under the sanitizers.
LIMIT_S=${LIMIT_S:-300}
# shellcheck source=tests/cli/testlib.sh
source "$(dirname "$0")/testlib.sh"

# expect_header FILE HEADER
expect_header() {
  local got
  got=$(head -n 1 "$1" 2>/dev/null || true)
  if [[ $got == "$2" ]]; then pass "$(basename "$1") header"; else fail "$1: header '$got'"; fi
}

# --- predict eval ---

run_eval() {
  local rc=0 out
  out=$("$PALADIN" predict eval --usage "$USAGE" --out "$1" 2>&1) || rc=$?
  if ((rc != 0)) || crashed "$out"; then fail "predict eval: exit $rc: $out"; fi
}
run_eval "$WORK/e1"
run_eval "$WORK/e2"
expect_header "$WORK/e1/predictors.csv" \
  "predictor,resource,windows,median_rel_err,p95_rel_err,under_rate,mean_slack"
for r in gpu_mem host_mem; do
  for p in request peak vpa paladin; do
    if grep -q "^$p,$r," "$WORK/e1/predictors.csv"; then pass "row $p,$r"; else fail "no row $p,$r"; fi
  done
  [[ -s $WORK/e1/tradeoff_$r.svg ]] && pass "tradeoff_$r.svg" || fail "no tradeoff_$r.svg"
done
# request never under-predicts: usage never exceeds the whole GPU or the whole limit.
if awk -F, '$1=="request" && $6!="0.0000"{bad=1} END{exit bad}' "$WORK/e1/predictors.csv"; then
  pass "request under_rate is 0"
else
  fail "request under-predicts: $(cat "$WORK/e1/predictors.csv")"
fi
for f in predictors.csv tradeoff.csv frontier.csv; do
  if cmp -s "$WORK/e1/$f" "$WORK/e2/$f"; then pass "$f identical across runs"; else fail "$f differs"; fi
done
expect_error "unknown predictor" "unknown predictor 'oracle'" "request, peak, vpa, paladin" -- \
  predict eval --usage "$USAGE" --predictors vpa,oracle --out "$WORK/bad"
expect_error "missing usage directory" "cannot open" "pod_gpu_memory_used_bytes_anon.csv" -- \
  predict eval --usage "$WORK/nowhere" --out "$WORK/bad"
mkdir -p "$WORK/badusage"
cp "$USAGE"/*.csv "$WORK/badusage/"
sed -i '3s/^[^,]*,[^,]*,/1662858720.0,lots,/' "$WORK/badusage/pod_gpu_memory_used_bytes_anon.csv"
expect_error "a bad usage row" "pod_gpu_memory_used_bytes_anon.csv:3" "field 'value'" -- \
  predict eval --usage "$WORK/badusage" --out "$WORK/bad"

# --- predict eval --folds: out of sample ---

run_cv() {
  local rc=0 out
  out=$("$PALADIN" predict eval --usage "$USAGE" --folds 3 --seed 5 --bootstrap 200 \
    --out "$1" 2>&1) || rc=$?
  if ((rc != 0)) || crashed "$out"; then fail "predict eval --folds: exit $rc: $out"; fi
}
run_cv "$WORK/cv1"
run_cv "$WORK/cv2"
expect_header "$WORK/cv1/cv_predictors.csv" \
  "predictor,resource,fold,windows,median_rel_err,p95_rel_err,under_rate,mean_slack,under_rate_lo,under_rate_hi,mean_slack_lo,mean_slack_hi"
expect_header "$WORK/cv1/cv_tradeoff.csv" \
  "predictor,resource,knob,value,fold,windows,under_rate,mean_slack,under_rate_lo,under_rate_hi,mean_slack_lo,mean_slack_hi"
expect_header "$WORK/cv1/cv_frontier.csv" "resource,max_under_rate,predictor,fold,mean_slack,lo,hi"
expect_header "$WORK/cv1/calibration.csv" \
  "resource,target_under_rate,windows,under_rate,under_rate_lo,under_rate_hi,mean_slack,within_1_5x"
expect_header "$WORK/cv1/folds.csv" "resource,pod,fold"
expect_header "$WORK/cv1/cv_windows.csv" \
  "predictor,resource,pod,fold,origin_s,phase,forecast,peak,slack"
expect_header "$WORK/cv1/cv_phases.csv" \
  "predictor,resource,phase,windows,under_rate,mean_slack,slack_share"
# Every held-out window of paladin's defaults is in cv_windows.csv, and the phases' windows add up.
for r in gpu_mem host_mem; do
  want=$(awk -F, -v r="$r" '$1 == "paladin" && $2 == r && $3 == "pooled" { print $4 }' \
    "$WORK/cv1/cv_predictors.csv")
  got=$(awk -F, -v r="$r" '$1 == "paladin" && $2 == r' "$WORK/cv1/cv_windows.csv" | wc -l)
  by_phase=$(awk -F, -v r="$r" '$1 == "paladin" && $2 == r { n += $4 } END { print n + 0 }' \
    "$WORK/cv1/cv_phases.csv")
  if [[ $want == "$got" && $want == "$by_phase" ]]; then
    pass "cv_windows/cv_phases: $got $r windows"
  else
    fail "$r: $want windows pooled, $got in cv_windows.csv, $by_phase in cv_phases.csv"
  fi
done
for f in cv_predictors.csv cv_tradeoff.csv cv_frontier.csv calibration.csv folds.csv \
  cv_windows.csv cv_phases.csv; do
  if cmp -s "$WORK/cv1/$f" "$WORK/cv2/$f"; then pass "$f identical across runs"; else fail "$f differs"; fi
done
for r in gpu_mem host_mem; do
  for p in request peak vpa paladin; do
    if grep -q "^$p,$r,pooled," "$WORK/cv1/cv_predictors.csv"; then
      pass "pooled row $p,$r"
    else
      fail "no pooled row $p,$r"
    fi
  done
done
# Folds never share a pod: each pod once per resource, in a fold 0-2, and in the same fold in
# both resources' files.
if awk -F, 'NR > 1 { k = $1 "," $2; if (k in seen || $3 < 0 || $3 > 2) bad = 1; seen[k] = 1
                     if ($2 in fold && fold[$2] != $3) bad = 1; fold[$2] = $3 }
            END { exit bad }' "$WORK/cv1/folds.csv"; then
  pass "folds never share a pod"
else
  fail "a pod in two folds: $(cat "$WORK/cv1/folds.csv")"
fi
expect_error "one fold" "--folds must be 0 (in sample) or 2 to 100" -- \
  predict eval --usage "$USAGE" --folds 1 --out "$WORK/bad"
expect_error "a target of 0" "--target-gpu must be in (0, 1)" -- \
  predict eval --usage "$USAGE" --folds 2 --target-gpu 0 --out "$WORK/bad"
expect_error "negative young windows" "--paladin-young-windows must be 0 to 1000" -- \
  predict eval --usage "$USAGE" --folds 2 --paladin-young-windows -1 --out "$WORK/bad"
expect_error "a growth threshold below 1" "--paladin-growth-ratio must be in [1, 10]" -- \
  predict eval --usage "$USAGE" --folds 2 --paladin-growth-ratio 0.9 --out "$WORK/bad"
# --pods-from: only the pods whose id begins with one of the characters (the halves of
# docs/predictors.md), in both resources' files; none is an error naming the flag.
# The bundled pods' ids all begin with 0: three of them are renamed to begin with f.
mkdir -p "$WORK/renamed"
for f in pod_memory_util_anon.csv pod_gpu_memory_used_bytes_anon.csv; do
  sed -E 's/,0(0800b6d2|3dc06083|5d1c1aea)/,f\1/' "$USAGE/$f" >"$WORK/renamed/$f"
done
"$PALADIN" predict eval --usage "$WORK/renamed" --folds 2 --bootstrap 10 --no-sweep \
  --pods-from f --out "$WORK/half" >/dev/null 2>&1
pods=$(tail -n +2 "$WORK/half/folds.csv" | cut -d, -f2 | sort -u | tr '\n' ' ')
if [[ $pods == "f0800b6d2cabe5b9ce855ec9eab6e9ff f3dc060838ef05053bdea6d483cde7e5 f5d1c1aea3ae65f6666bb406277c202b " ]]; then
  pass "--pods-from f: the three pods whose id begins with f, no other"
else
  fail "--pods-from f scored '$pods'"
fi
expect_error "--pods-from matching no pod" "--pods-from xyz: no pod of" -- \
  predict eval --usage "$USAGE" --pods-from xyz --out "$WORK/bad"

# --- sim dynamic, on the first 1,500 pods of the default list ---

head -n 1501 "$DATA/alibaba-gpu-2023/openb_pod_list_default.csv" >"$WORK/pods.csv"
run_dyn() {
  local rc=0 out
  out=$("$PALADIN" sim dynamic --nodes "$NODES" --pods "$WORK/pods.csv" --usage "$USAGE" \
    --loads 1.0,1.5 --seeds 42 --quiet --out "$1" 2>&1) || rc=$?
  if ((rc != 0)) || crashed "$out"; then fail "sim dynamic: exit $rc: $out"; fi
}
run_dyn "$WORK/d1"
run_dyn "$WORK/d2"
expect_header "$WORK/d1/dynamic.csv" \
  "config,load,seed,completed_gpu_hours,jobs_completed,queue_mean_s,queue_p99_s,jct_mean_s,gpu_active_pct,mem_alloc_gib_h,mem_used_gib_h,oom_per_1k_job_h,migrations,migration_downtime_s"
rows=$(($(wc -l <"$WORK/d1/dynamic.csv") - 1))
if ((rows == 10)); then pass "dynamic.csv: 5 configs x 2 loads"; else fail "dynamic.csv has $rows rows"; fi
for f in dynamic.csv timeseries.csv queue_load1.00.svg memory_load1.50.svg; do
  [[ -s $WORK/d1/$f ]] || fail "no $f"
done
for f in dynamic.csv timeseries.csv; do
  if cmp -s "$WORK/d1/$f" "$WORK/d2/$f"; then pass "$f identical across runs"; else fail "$f differs"; fi
done
# Sizing by request never kills a job: usage never exceeds the request.
if awk -F, '$1 ~ /\+request$/ && $12 != "0.000"{bad=1} END{exit bad}' "$WORK/d1/dynamic.csv"; then
  pass "request configs have no OOM"
else
  fail "OOM under request sizing: $(cat "$WORK/d1/dynamic.csv")"
fi
# --move-costs: a fleet's measured moves (paladin move-costs) set what the simulated moves cost.
cat >"$WORK/moves.csv" <<'CSV'
from,to,gpu_bytes,host_bytes,pause_s
node-a,node-b,42949672960,0,95.5
node-b,node-a,21474836480,0,48.25
"rack 1, node-c",node-a,64424509440,1073741824,140
CSV
rc=0
out=$("$PALADIN" sim dynamic --nodes "$NODES" --pods "$WORK/pods.csv" --usage "$USAGE" \
  --configs paladin+paladin+rebalance --loads 1.0 --seeds 42 --quiet --move-costs "$WORK/moves.csv" \
  --out "$WORK/measured" 2>&1) || rc=$?
if ((rc == 0)) && grep -q "moves cost by 3 measured moves ($WORK/moves.csv)" <<<"$out" &&
  [[ -s $WORK/measured/dynamic.csv ]]; then
  pass "sim dynamic --move-costs: the moves costed by the 3 measured moves"
else
  fail "sim dynamic --move-costs: exit $rc: $out"
fi
printf 'from,to,gpu_bytes,host_bytes,pause_s\nnode-a,node-b,1,0,-2\n' >"$WORK/badmoves.csv"
expect_error "a measured move with a negative pause" "badmoves.csv:2: field 'pause_s'" -- \
  sim dynamic --move-costs "$WORK/badmoves.csv" --out "$WORK/bad"
expect_error "load out of range" "--loads: '3'" -- sim dynamic --loads 1,3 --out "$WORK/bad"
expect_error "sim dynamic with one fold" "--folds must be 0 (one model learning online) or 2 to 100" -- \
  sim dynamic --folds 1 --out "$WORK/bad"
expect_error "unknown config" "unknown 'FGD+magic'" "paladin+paladin+rebalance" -- \
  sim dynamic --configs FGD+magic --out "$WORK/bad"
expect_error "pods without times and no time source" "has no time columns" -- \
  sim dynamic --pods "$DATA/alibaba-gpu-2023/openb_pod_list_multigpu20.csv" \
  --times-from "$DATA/alibaba-gpu-2023/openb_pod_list_multigpu20.csv" --out "$WORK/bad"

if ((failures > 0)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all checks passed"
