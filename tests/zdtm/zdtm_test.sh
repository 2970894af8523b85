#!/usr/bin/env bash
# The ctest entry of the ZDTM suite (label zdtm): fetches and builds CRIU's tests of the list
# (fetch_build.sh), then runs them through Paladin (run.sh). Exits 77 (skipped), saying why, when
# not root, without CRIU, or when CRIU's source cannot be fetched.
#
#   zdtm_test.sh [--migrate] PALADIN ZDTM_INIT CACHE [TEST...]
#
# --migrate: the sample of migrate_tests.txt, each moved by `paladin migrate` to a receiver in
# namespaces of its own, or on the same files for a test marked same-files (run.sh, ZDTM_MIGRATE),
# in place of a checkpoint and restore, checked against migrate_expected_failures.txt.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
LIST=$HERE/tests.txt
EXPECTED=$HERE/expected_failures.txt
if [[ ${1:-} == --migrate ]]; then
  shift
  LIST=$HERE/migrate_tests.txt
  EXPECTED=$HERE/migrate_expected_failures.txt
  export ZDTM_MIGRATE=${ZDTM_MIGRATE:-1}
fi
PALADIN=$1
INIT=$2
CACHE=$3
shift 3
if ((EUID != 0)); then
  echo "SKIP: the ZDTM tests need root (PID namespaces, CRIU)"
  exit 77
fi
rc=0
bash "$HERE/fetch_build.sh" "$CACHE" "$LIST" || rc=$?
if ((rc != 0)); then exit "$rc"; fi
exec bash "$HERE/run.sh" "$PALADIN" "$INIT" "$CACHE" "$LIST" \
  "$EXPECTED" "$@"
