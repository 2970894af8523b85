#!/usr/bin/env bash
# Static checks: clang-format (no diff allowed) and clang-tidy (the .clang-tidy profile; any
# warning fails). Needs a build tree with compile_commands.json (default build/debug).
#
# clang-tidy is the longest check of CI, so its clean verdicts are kept by content:
# scripts/tidy_clean.txt lists a key per source file found clean (scripts/tidy_keys.py: a hash of
# clang-tidy's version, the profile, the compile command and every file the compiler read for it,
# system headers included). A file whose key is listed is not checked again; every other file is,
# and the list is rewritten with the current keys of the files now known clean. Commit the list
# with your change to spare CI the work; a stale or missing list only makes lint slower.
# PALADIN_LINT_ALL=1 checks every file whatever the list says. A build in unity mode (the debug
# preset) names batches of files in compile_commands.json: tidy_keys.py gives clang-tidy each file's
# own command (the same as without batches) in a compile_commands.json of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build/debug}"
files=$(git ls-files '*.cc' '*.h' 2>/dev/null || find include src tests bench -name '*.cc' -o -name '*.h')
clang-format --dry-run --Werror $files
echo "lint: clang-format clean ($(echo "$files" | wc -w) files)"

CLEAN=scripts/tidy_clean.txt
mapfile -t sources < <(echo "$files" | tr ' ' '\n' | grep '^src/.*\.cc$')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 scripts/tidy_keys.py --commands "$work" . "$BUILD" "${sources[@]}" >"$work/keys"
todo=()
while read -r key file; do
  if [[ -z ${PALADIN_LINT_ALL:-} && $key != - ]] && grep -qxF "$key $file" "$CLEAN" 2>/dev/null; then
    continue
  fi
  todo+=("$file")
done <"$work/keys"
echo "lint: clang-tidy on ${#todo[@]} of ${#sources[@]} files (the others are unchanged since" \
  "found clean: $CLEAN)"
# One clang-tidy per core, a file each: its own output says whether that file is clean.
if ((${#todo[@]} > 0)); then
  # shellcheck disable=SC2016 # expanded by the inner shell
  printf '%s\n' "${todo[@]}" | xargs -P "$(nproc)" -I{} sh -c \
    'out="$3/$(echo "$2" | tr / _).out"; clang-tidy -p "$1" --quiet "$2" >"$out" 2>&1; echo $? >"$out.rc"' \
    sh "$work" {} "$work"
fi
bad=()
for file in "${todo[@]}"; do
  out=$work/$(echo "$file" | tr / _).out
  if grep -qE "warning:|error:" "$out"; then
    grep -E "warning:|error:" "$out"
    bad+=("$file")
  elif [[ $(cat "$out.rc" 2>/dev/null) != 0 ]]; then
    echo "$file: clang-tidy failed (exit $(cat "$out.rc" 2>/dev/null)): $(tail -3 "$out")"
    bad+=("$file")
  fi
done
# The list keeps the current key of every file now known clean.
{
  echo "# clang-tidy found these files clean with these inputs (scripts/lint.sh, scripts/tidy_keys.py)."
  while read -r key file; do
    [[ $key == - ]] && continue
    [[ " ${bad[*]} " == *" $file "* ]] && continue
    echo "$key $file"
  done <"$work/keys"
} >"$work/clean"
cp "$work/clean" "$CLEAN"
if ((${#bad[@]} > 0)); then
  echo "lint: clang-tidy reported the above in ${#bad[@]} file(s)" >&2
  exit 1
fi
echo "lint: clang-tidy clean"
