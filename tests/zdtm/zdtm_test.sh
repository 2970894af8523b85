#!/usr/bin/env bash
# The ctest entry of the ZDTM suite (label zdtm): fetches and builds CRIU's tests of the list
# (fetch_build.sh), then runs them through Paladin (run.sh). Exits 77 (skipped), saying why, when
# not root, without CRIU, or when CRIU's source cannot be fetched.
#
#   zdtm_test.sh PALADIN ZDTM_INIT CACHE [TEST...]
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PALADIN=$1
INIT=$2
CACHE=$3
shift 3
if ((EUID != 0)); then
  echo "SKIP: the ZDTM tests need root (PID namespaces, CRIU)"
  exit 77
fi
rc=0
bash "$HERE/fetch_build.sh" "$CACHE" "$HERE/tests.txt" || rc=$?
if ((rc != 0)); then exit "$rc"; fi
exec bash "$HERE/run.sh" "$PALADIN" "$INIT" "$CACHE" "$HERE/tests.txt" \
  "$HERE/expected_failures.txt" "$@"
