# shellcheck shell=bash
# Checkpoint scenario bad_input: Corrupted, truncated and incompatible images; unknown job; bad
# --gpu-map.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

scenario_bad_input() {
  # A copy of the workload under a name of its own, so that a process it starts can be found.
  local marker=$work/bad-input-workload.py
  cp "$HERE/seq_writer.py" "$marker"
  start_job badinput -- python3 "$marker" - --every-ms 20 || return
  if ! wait_until 60 lines_at_least "$log" 10; then
    fail "bad_input: the workload wrote nothing in 60 s: $(cat "$work/badinput.run.err")"
    return
  fi
  local -a before
  read -ra before <<<"$(tree "$job_pid")"
  local good=$work/good
  checkpoint "$good"
  expect_checkpointed bad_input "$good" "${before[@]}" || return

  local inspect criu_version
  inspect=$(timeout "$LIMIT" "$PALADIN" image inspect "$good" 2>&1)
  criu_version=$(timeout "$LIMIT" "$PALADIN" doctor 2>/dev/null |
    awk '$1 == "OK" && $2 == "criu" { print $3 }')
  if grep -q "^workload: *badinput " <<<"$inspect" && [[ -n $criu_version ]] &&
    grep -qE "^criu: +$criu_version( |\$)" <<<"$inspect"; then
    pass "bad_input: image inspect names the workload and CRIU $criu_version"
  else
    fail "bad_input: image inspect lacks the workload's name or CRIU '$criu_version': $inspect"
  fi

  local pages size
  local -a found=("$good"/pages-*.img)
  pages=${found[0]##*/}
  size=$(stat -c %s "$good/$pages")
  cp -a "$good" "$work/flipped"
  python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2]) // 2); b = f.read(1); f.seek(-1, 1); f.write(bytes([b[0] ^ 0xFF]))' \
    "$work/flipped/$pages" "$size"
  expect_error "bad_input: verify, one byte of $pages flipped" "$pages at offset" XXH3-128 \
    corrupted -- \
    image verify "$work/flipped"
  cp -a "$good" "$work/truncated"
  truncate -s $((size - 1)) "$work/truncated/$pages"
  expect_error "bad_input: verify, $pages truncated" "$pages" "$((size - 1)) bytes" \
    "the manifest says $size" -- image verify "$work/truncated"
  cp -a "$good" "$work/nomanifest"
  rm "$work/nomanifest/manifest.json"
  expect_error "bad_input: verify, no manifest" "no manifest" -- image verify "$work/nomanifest"
  cp -a "$good" "$work/v99"
  python3 -c 'import json, sys
m = json.load(open(sys.argv[1])); m["version"] = 99; json.dump(m, open(sys.argv[1], "w"))' \
    "$work/v99/manifest.json"
  expect_error "bad_input: verify, format version 99" "version 99" -- image verify "$work/v99"
  expect_error "bad_input: inspect, format version 99" "version 99" -- image inspect "$work/v99"

  # A restore refuses a damaged image and starts nothing.
  local image
  for image in flipped truncated v99; do
    expect_error "bad_input: restore of the $image image" "refusing to restore" -- \
      restore "$work/$image"
  done
  sleep 0.5
  local started
  started=$(pgrep -f -- "$marker")
  if [[ -n $started ]]; then
    local -a strays
    read -ra strays <<<"$started"
    roots+=("${strays[@]}")
    fail "bad_input: a refused restore started the workload anyway: pid(s) $started"
  else
    pass "bad_input: the refused restores started nothing"
  fi
  [[ $(job_field state) == checkpointed ]] ||
    fail "bad_input: the job record says '$(job_field state)' after the refused restores"

  expect_error "bad_input: checkpoint of an unknown job" "no job nosuchjob" -- \
    checkpoint nosuchjob --out "$work/nosuchjob"
  [[ ! -e $work/nosuchjob ]] || fail "bad_input: checkpoint of an unknown job left $work/nosuchjob"
  local out rc=0
  out=$(timeout "$LIMIT" "$PALADIN" restore "$good" --gpu-map garbage 2>&1) || rc=$?
  if ((rc == 2)) && grep -q -- "--gpu-map 'garbage'" <<<"$out"; then
    pass "bad_input: --gpu-map garbage is refused (exit 2)"
  else
    fail "bad_input: --gpu-map garbage: exit $rc (expected 2): $out"
  fi
  started=$(pgrep -f -- "$marker")
  [[ -z $started ]] || fail "bad_input: --gpu-map garbage started the workload: $started"

  # After all that, the intact image still restores and the workload continues.
  local cut
  cut=$(wc -l <"$log")
  restore "$good"
  expect_restored bad_input || return
  if wait_until 30 lines_at_least "$log" $((cut + 10)) &&
    [[ -z $(awk '$0 != "line " NR { print NR; exit }' "$log") ]]; then
    pass "bad_input: the intact image restores and continues after line $cut"
  else
    fail "bad_input: the intact image's workload did not continue from line $cut:" \
      "$(tail -3 "$log")"
  fi
}
