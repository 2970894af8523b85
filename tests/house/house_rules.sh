#!/usr/bin/env bash
# The house rules that a grep can check (ARCHITECTURE.md, "House rules"), over the sources:
#   1. SQL only in the server's persistence (src/server/persistence.cc) and its store
#      (src/server/store.cc, the schema's versions and transactions).
#   2. No state, step or phase compared with a string literal: states are enums with one name
#      table each, decoded once where their text comes in.
#   3. Every key of the JSON that Paladin's programs exchange is spelled once, in the wire header
#      (include/paladin/api/wire.h, api::key): a key with an underscore in its name is written
#      as a string literal nowhere else.
# A violation is printed as FILE:LINE: TEXT with the rule it breaks; the exit code is the count.
#
# Usage: house_rules.sh SOURCE_DIR
set -euo pipefail

readonly ROOT=${1:?usage: house_rules.sh SOURCE_DIR}
cd "$ROOT"
bad=0

# report RULE < grep -n output
report() {
  local rule=$1 line
  while IFS= read -r line; do
    echo "house rule $rule: $line"
    bad=$((bad + 1))
  done
}

# 1. SQL.
report "1 (SQL outside the server's persistence)" < <(
  grep -rnE '"[[:space:]]*(SELECT |INSERT INTO|UPDATE [a-z_]+ SET|DELETE FROM|CREATE (TABLE|INDEX)|ALTER TABLE|DROP TABLE|BEGIN( IMMEDIATE)?"|COMMIT"|ROLLBACK")' \
    src include | grep -vE '^src/server/(persistence|store)\.cc:' || true)

# 2. States compared as strings. Two places read a word that is not Paladin's state: a Kubernetes
#    pod's phase, read by api::PodPhaseEnded and api::PodPhaseRunning only; and a fault-injection
#    point's name (the server's crash points, PALADIN_SERVER_FAULT=crash-at:STEP, named by the
#    tests).
report "2 (a state compared with a string)" < <(
  grep -rnE '\b[A-Za-z_.>-]*(state|step|phase|State|Step|Phase)[A-Za-z_]*(\(\))? *(==|!=) *"|"[A-Za-z_]+" *(==|!=) *[A-Za-z_.>-]*(state|step|phase|State|Step|Phase)' \
    src include |
    grep -vE '^src/server/control\.cc:[0-9]+:  if \(step != "before_commit"\)|^src/api/wire_pods\.cc:[0-9]+:bool PodPhase(Ended|Running)\(' ||
    true)

# 3. Wire keys.
readonly WIRE=include/paladin/api/wire.h
mapfile -t keys < <(sed -n 's/.*inline constexpr[^=]*= "\([a-z0-9]*_[a-z0-9_]*\)";.*/\1/p' "$WIRE" | sort -u)
if ((${#keys[@]} == 0)); then
  echo "house rule 3: no api::key constants found in $WIRE"
  bad=$((bad + 1))
fi
# Other formats may use the same words for their own fields, each decoded in one place: the
# checkpoint image's manifest and job record (src/ckpt/image.cc, workload.cc;
# docs/formats/image.md), a direct move's state file (src/migrate/state.cc, KEY=VALUE lines) and
# the prediction reports' CSV columns (src/cli/predict.cc), the measured moves' CSV columns
# (src/trace/move_costs.cc; docs/formats/move_costs.md); the server's counters are named in its
# store (Count("NAME")), not on the wire. A comment may name a key.
readonly OTHER_FORMATS='^(src/ckpt/image\.cc|src/ckpt/workload\.cc|src/migrate/state\.cc|src/cli/predict\.cc|src/trace/move_costs\.cc):'
for key in "${keys[@]}"; do
  report "3 (wire key \"$key\" spelled outside $WIRE)" < <(
    grep -rnF "\"$key\"" src include | grep -v "^$WIRE:" | grep -vE "$OTHER_FORMATS" |
      awk -v k="\"$key\"" '{ text = $0; sub(/^[^:]*:[0-9]+:/, "", text);
                              if (index(text, "Count(" k)) next;
                              c = index(text, "//"); if (c == 0 || index(text, k) < c) print }' ||
      true)
done

echo "house rules: ${#keys[@]} wire keys checked; $bad violation(s)"
exit $((bad > 0))
