#!/usr/bin/env bash
# clang-tidy, with the repository's .clang-tidy, on the .cc files a change
# touches (scripts/test.sh runs it after the sanitizer build).
#
#   bash scripts/tidy.sh [BASE]
#
# The files: the .cc files changed between BASE and HEAD, and for a changed
# header the .cc file of the same name in the same top-level folder
# (fastpath/include/weir/fastpath/config.h -> fastpath/src/config.cc), keeping
# only those in compile_commands.json. BASE defaults to the merge-base with
# origin/main, else HEAD~1; when BASE is HEAD itself (a run on main) or does
# not exist (a one-commit or shallow clone), the files HEAD's own commit
# changed. Every warning is an error (.clang-tidy): exits non-zero on any
# finding, or when clang-tidy cannot parse a file.
#
# Environment: WEIR_TIDY_BUILD_DIR, a configured and built CMake build with
# CMAKE_EXPORT_COMPILE_COMMANDS=ON (default: $WEIR_BUILD_ROOT/fuzz, i.e.
# ./build-ci/fuzz; clang-tidy needs its generated headers, not its objects);
# WEIR_JOBS (default: nproc files at a time); CLANG_TIDY (default: clang-tidy).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd -P)
BUILD_DIR=${WEIR_TIDY_BUILD_DIR:-${WEIR_BUILD_ROOT:-$ROOT/build-ci}/fuzz}
JOBS=${WEIR_JOBS:-$(nproc)}
CLANG_TIDY=${CLANG_TIDY:-clang-tidy}
start=$(date +%s)

db="$BUILD_DIR/compile_commands.json"
if [ ! -f "$db" ]; then
  echo "tidy: no $db (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)" >&2
  exit 2
fi

base=${1:-}
if [ -z "$base" ]; then
  if git rev-parse -q --verify 'origin/main^{commit}' >/dev/null; then
    base=$(git merge-base origin/main HEAD)
  else
    base=HEAD~1
  fi
fi
if git rev-parse -q --verify "$base^{commit}" >/dev/null &&
  [ "$(git rev-parse "$base^{commit}")" != "$(git rev-parse HEAD)" ]; then
  echo "tidy: files changed between $base and HEAD"
  changed=$(git diff --name-only --diff-filter=d "$base" HEAD --)
else
  echo "tidy: $base is HEAD or does not exist; files changed by HEAD's commit"
  changed=$(git show --name-only --diff-filter=d --format= HEAD --)
fi

# Changed paths -> the .cc files to check, that compile_commands.json lists.
mapfile -t files < <(
  printf '%s\n' "$changed" | python3 -c '
import json, os, sys
root, db = sys.argv[1], sys.argv[2]
listed = {os.path.realpath(os.path.join(e["directory"], e["file"])) for e in json.load(open(db))}
chosen, skipped = [], []
for path in filter(None, (line.strip() for line in sys.stdin)):
    stem, ext = os.path.splitext(path)
    if ext == ".cc":
        candidates = [os.path.join(root, path)]
    elif ext == ".h":
        # the .cc of the same name under the same top-level folder
        top, name = path.split("/")[0] + "/", os.path.basename(stem) + ".cc"
        candidates = sorted(f for f in listed
                            if f.startswith(os.path.join(root, top)) and os.path.basename(f) == name)
    else:
        continue
    for f in candidates:
        f = os.path.realpath(f)
        if f in listed:
            chosen.append(os.path.relpath(f, root))
        elif ext == ".cc":
            skipped.append(path)
for path in skipped:
    print("tidy: not in compile_commands.json, skipped: " + path, file=sys.stderr)
for f in sorted(set(chosen)):
    print(f)
' "$ROOT" "$db"
)
if [ "${#files[@]}" -eq 0 ]; then
  echo "tidy: no .cc file to check ($(($(date +%s) - start)) s)"
  exit 0
fi
echo "tidy: checking ${#files[@]} file(s), $JOBS at a time, with $BUILD_DIR/compile_commands.json:"
printf '  %s\n' "${files[@]}"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
tidy_one() {  # tidy_one <index> <file>: output in $out/<index>.log, status in .rc
  "$CLANG_TIDY" -p "$BUILD_DIR" --quiet "$2" >"$out/$1.log" 2>&1
  echo $? >"$out/$1.rc"
}
for i in "${!files[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  tidy_one "$i" "${files[$i]}" &
done
wait

bad=()
for i in "${!files[@]}"; do
  rc=$(cat "$out/$i.rc" 2>/dev/null || echo 1)
  if [ "$rc" -ne 0 ]; then
    echo "--- ${files[$i]}: clang-tidy exit $rc"
    # clang's own "N warnings generated." lines are noise next to the findings
    grep -v '^[0-9]* warnings\? \(and [0-9]* errors\? \)\?generated\.$' "$out/$i.log"
    bad+=("${files[$i]}")
  fi
done
echo "tidy: ${#files[@]} file(s) checked in $(($(date +%s) - start)) s; ${#bad[@]} with findings"
[ "${#bad[@]}" -eq 0 ]
