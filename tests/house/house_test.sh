#!/usr/bin/env bash
# The house rules (house_rules.sh) hold over the sources, and the checker finds each kind of
# violation when one is planted: SQL outside persistence, a state compared with a string, a wire
# key spelled outside api/wire.h.
#
# Usage: house_test.sh SOURCE_DIR
set -euo pipefail

readonly SRC=${1:?usage: house_test.sh SOURCE_DIR}
readonly RULES=$(dirname "$0")/house_rules.sh
WORK=$(mktemp -d)
readonly WORK
trap 'rm -rf "$WORK"' EXIT
failed=0

if out=$(bash "$RULES" "$SRC" 2>&1); then
  echo "PASS: the sources keep the house rules ($out)"
else
  echo "FAIL: the sources break the house rules:"
  echo "$out"
  failed=1
fi

mkdir -p "$WORK/include/paladin/api" "$WORK/src/cli"
cp "$SRC/include/paladin/api/wire.h" "$WORK/include/paladin/api/"
cat > "$WORK/src/cli/planted.cc" <<'CC'
void Planted(Json& j, Store& db) {
  db.Run("SELECT id FROM jobs");
  if (j.state == "running") j["quota_bytes"] = 1;
}
CC
out=$(bash "$RULES" "$WORK" 2>&1) && rc=0 || rc=$?
for rule in "house rule 1 (SQL" "house rule 2 (a state" 'house rule 3 (wire key "quota_bytes"'; do
  if ((rc != 0)) && grep -qF "$rule" <<<"$out"; then
    echo "PASS: a planted violation is found: $rule"
  else
    echo "FAIL: a planted violation is not found: $rule (exit $rc):"
    echo "$out"
    failed=1
  fi
done
exit "$failed"
