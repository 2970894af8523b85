#!/usr/bin/env bash
# Hostile files and sizes (issue: the smaller findings): a trace path that is /dev/zero, a FIFO,
# a directory or a socket is refused by name at once (never read without bound, never blocking,
# never "an empty file"); a size of a fraction of a byte is refused rather than taken as a 1-byte
# quota, at the CLI and at the API. Each refusal must come within 20 s with a non-zero exit and a
# message naming the problem.
#
# usage: hostile_input_test.sh PALADIN DATA
set -uo pipefail

PALADIN=$(readlink -f "${1:?usage: hostile_input_test.sh PALADIN DATA}")
DATA=$(readlink -f "${2:?usage: hostile_input_test.sh PALADIN DATA}")
source "$(dirname "$0")/seclib.sh"
sec_scratch hostile

# expect_refused WHAT PATTERN -- ARGS...: paladin ARGS fails (exit 1-127) within 20 s and says
# PATTERN.
expect_refused() {
  local what=$1 pattern=$2
  shift 3
  local out rc=0
  out=$(timeout 20 "$PALADIN" "$@" 2>&1) || rc=$?
  if [[ $rc == 0 || $rc -ge 124 ]]; then
    fail "$what: exit $rc (expected a refusal): ${out:0:300}"
    tally tried
  elif ! grep -qiE -- "$pattern" <<<"$out"; then
    fail "$what: the message does not say '$pattern': ${out:0:300}"
    tally tried
  else
    tally refused
  fi
}

mkfifo "$TMP/fifo"
mkdir "$TMP/dir"
python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])" "$TMP/sock"
PODS=$(ls "$DATA"/*pod_list_default*.csv 2>/dev/null | head -1)
NODES=$(ls "$DATA"/*node_list*.csv 2>/dev/null | head -1)
for bad in /dev/zero "$TMP/fifo" "$TMP/dir" "$TMP/sock" /dev/null; do
  case $bad in
    /dev/zero) why="character device" ;;
    */fifo) why="FIFO" ;;
    */dir) why="directory" ;;
    */sock) why="socket" ;;
    /dev/null) why="character device" ;;
  esac
  if [[ -n $NODES ]]; then
    expect_refused "sim fgd --pods $bad" "$why" -- sim fgd --nodes "$NODES" --pods "$bad" \
      --out "$TMP/out" --seeds 1 --quiet
  fi
  if [[ -n $PODS ]]; then
    expect_refused "sim fgd --nodes $bad" "$why" -- sim fgd --nodes "$bad" --pods "$PODS" \
      --out "$TMP/out" --seeds 1 --quiet
  fi
  expect_refused "predict eval --usage $bad" "$why|not a directory|cannot" -- predict eval \
    --usage "$bad" --out "$TMP/out"
done

# Sizes: a fraction of a byte is not a size.
expect_refused "run --gpu-mem 0.0000001" "gpu-mem" -- run --gpu-mem 0.0000001 \
  --emulated-gpus 1x1GiB -- /bin/true
sec_start_server "$TMP/server"
for size in '"0.0000001"' '"0.5"' '"0.5B"' '-1' '"-1GiB"' '"1e3"' '"0x10"' '"inf"' '"nan"'; do
  code=$(curl -s -o "$TMP/body" -w '%{http_code}' --max-time 20 -X POST \
    -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
    --data-binary "{\"team\": \"t\", \"command\": [\"/bin/true\"], \"gpu_mem\": $size}" \
    "$URL/v1/jobs")
  if [[ $code == 400 ]] && grep -q gpu_mem "$TMP/body"; then
    tally refused
  else
    fail "gpu_mem $size: answered $code: $(head -c 200 "$TMP/body")"
    tally tried
  fi
done
expect_refused "submit --gpu-mem 0.0000001" "gpu-mem" -- submit --gpu-mem 0.0000001 \
  --server "$URL" --token "$ADMIN" --team t -- /bin/true
curl -sf --max-time 10 "$URL/healthz" >/dev/null || fail "/healthz does not answer afterwards"

sec_report "hostile files and sizes"
