#!/usr/bin/env bash
# Static checks: clang-format (no diff allowed) and clang-tidy (the .clang-tidy profile; any
# warning fails). Needs a build tree with compile_commands.json (default build/debug).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build/debug}"
files=$(git ls-files '*.cc' '*.h' 2>/dev/null || find include src tests bench -name '*.cc' -o -name '*.h')
clang-format --dry-run --Werror $files
echo "lint: clang-format clean ($(echo "$files" | wc -w) files)"
# One clang-tidy per core, four files each (lint is the longest test of CI).
out=$(echo "$files" | tr ' ' '\n' | grep '^src/.*\.cc$' |
  xargs -P "$(nproc)" -n 4 clang-tidy -p "$BUILD" --quiet 2>&1 | grep -E "warning:|error:" || true)
if [ -n "$out" ]; then
  echo "$out"
  echo "lint: clang-tidy reported the above" >&2
  exit 1
fi
echo "lint: clang-tidy clean"
