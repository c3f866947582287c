#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this through the README's
# test command). Idempotent: re-running reuses the build directories.
#
#   1. install Debian packages (scripts/install-deps.sh)
#   2. clang-format check
#   3. Release build (the packages' build type), -Werror; every CTest test:
#      unit, fuzz-corpus replays, benchmark smoke runs, black-box integration
#      tests with the real binaries
#   4. one clang build with ASan+UBSan and libFuzzer's coverage hooks: the
#      unit tests under the sanitizers, and the libFuzzer targets from the
#      same objects; then clang-tidy (.clang-tidy's checks, scripts/tidy.sh)
#      on the .cc files changed since origin/main (else HEAD~1), with that
#      build's compile_commands.json
#   5. ThreadSanitizer build; the concurrency stress tests under it
#   6. every fuzz target for WEIR_FUZZ_SECONDS each
#
# Environment: WEIR_FUZZ_SECONDS (default 15), WEIR_STRESS_SECONDS (default 10),
# WEIR_REQUIRE_ALL (default 1: skips for a missing tool or privilege fail),
# WEIR_JOBS (default: nproc), WEIR_BUILD_ROOT (default: ./build-ci).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${WEIR_JOBS:-$(nproc)}
FUZZ_SECONDS=${WEIR_FUZZ_SECONDS:-15}
export WEIR_STRESS_SECONDS=${WEIR_STRESS_SECONDS:-10}
# Every tool is installed and the suite runs as root: a test that would be
# skipped for a missing tool or privilege fails (weirtest.requires).
export WEIR_REQUIRE_ALL=${WEIR_REQUIRE_ALL:-1}
BUILD_ROOT=${WEIR_BUILD_ROOT:-$ROOT/build-ci}
passed=0
failed=0
failed_stages=()

# Every build goes through ccache when it is there (install-deps installs it):
# a re-run, or a run from another clone of the same sources, recompiles only
# what changed. Paths are hashed relative to the checkout, so clones in
# different folders share the cache.
CCACHE_ARGS=()
if command -v ccache >/dev/null 2>&1; then
  CCACHE_ARGS=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-20G}"
fi

stage() { printf '\n===== %s =====\n' "$*"; }
record() {  # record <name> <exit status>
  if [ "$2" -eq 0 ]; then
    passed=$((passed + 1))
    echo "stage passed: $1"
  else
    failed=$((failed + 1))
    failed_stages+=("$1")
    echo "stage FAILED: $1 (exit $2)"
  fi
}

stage "install dependencies"
bash scripts/install-deps.sh || { echo "dependency installation failed"; exit 1; }

stage "clang-format"
files=$(git ls-files '*.cc' '*.h' 2>/dev/null || find . -path ./build\* -prune -o \( -name '*.cc' -o -name '*.h' \) -print)
# shellcheck disable=SC2086
clang-format --dry-run --Werror $files
record clang-format $?

stage "Release build (-Werror) and all tests"
# Release is what the packages ship (-O2 -DNDEBUG, CMakeLists.txt);
# RelWithDebInfo, a developer's default, compiles the same code with debug
# information added, so this one build serves both.
cmake -S . -B "$BUILD_ROOT/main" -G Ninja "${CCACHE_ARGS[@]}" -DCMAKE_BUILD_TYPE=Release -DWEIR_WERROR=ON >/dev/null &&
  cmake --build "$BUILD_ROOT/main" -j "$JOBS" &&
  ctest --test-dir "$BUILD_ROOT/main" --output-on-failure -j "$JOBS"
record "main build and tests" $?

unit_targets="$(cd tests && ls */*_test.cc | sed -E 's|^([a-z_]+)/([a-z_]+)\.cc$|\1_\2|')"
fuzz_targets=$(ls tests/fuzz/*_fuzz.cc | xargs -n1 basename | sed 's/\.cc$//')

stage "sanitizer build (clang, ASan+UBSan): unit tests and libFuzzer targets"
# One set of objects for both: every object carries ASan, UBSan and
# libFuzzer's coverage hooks (WEIR_FUZZ); the unit tests link gtest's main,
# the fuzz targets libFuzzer's. The daemons and tools are exercised by the
# main stage's integration tests.
# shellcheck disable=SC2086
# Debug at -O1: assertions on, for the tests and the fuzzers alike.
CC=clang CXX=clang++ cmake -S . -B "$BUILD_ROOT/fuzz" -G Ninja "${CCACHE_ARGS[@]}" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 -DWEIR_FUZZ=ON -DWEIR_BUILD_BENCH=OFF -DWEIR_BUILD_TESTS=ON \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null &&
  cmake --build "$BUILD_ROOT/fuzz" -j "$JOBS" --target $unit_targets $fuzz_targets
fuzz_build=$?
record "sanitizer build" $fuzz_build
if [ $fuzz_build -eq 0 ]; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$BUILD_ROOT/fuzz" --output-on-failure -j "$JOBS" -L unit -E 'node_links_without_sqlite|bench_smoke'
  record "unit tests under ASan+UBSan" $?
  stage "clang-tidy on the changed files"
  WEIR_TIDY_BUILD_DIR="$BUILD_ROOT/fuzz" WEIR_JOBS="$JOBS" bash scripts/tidy.sh
  record "clang-tidy" $?
fi

stress_tests=$(cd tests && ls */*stress_test.cc 2>/dev/null | sed -E 's|^([a-z]+)/([a-z_]+)\.cc$|\1_\2|')
if [ -n "$stress_tests" ]; then
  stage "ThreadSanitizer build and stress tests"
  # shellcheck disable=SC2086
  cmake -S . -B "$BUILD_ROOT/tsan" -G Ninja "${CCACHE_ARGS[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEIR_TSAN=ON -DWEIR_WERROR=ON \
    -DWEIR_BUILD_BENCH=OFF >/dev/null &&
    cmake --build "$BUILD_ROOT/tsan" -j "$JOBS" --target $stress_tests &&
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
      ctest --test-dir "$BUILD_ROOT/tsan" --output-on-failure -R stress
  record "thread sanitizer stress tests" $?
fi

stage "libFuzzer targets, ${FUZZ_SECONDS}s each"
if [ $fuzz_build -eq 0 ]; then
  # One target per core at a time (each fuzzer is single-threaded); the
  # results are printed in order once all have run.
  fuzz_out=$(mktemp -d)
  fuzz_one() {  # fuzz_one <name>: output in $fuzz_out/<name>.log, status in .rc
    local name=$1 bin work
    bin=$(find "$BUILD_ROOT/fuzz" -type f -name "$name" -perm -u+x | head -n 1)
    work=$(mktemp -d)
    cp -r "tests/fuzz/corpus/$name/." "$work/" 2>/dev/null
    (cd "$work" && "$bin" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=4096 \
      -print_final_stats=1 "$work" 2>&1 | tail -n 12) >"$fuzz_out/$name.log"
    echo $? >"$fuzz_out/$name.rc"
    rm -rf "$work"
  }
  for name in $fuzz_targets; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    fuzz_one "$name" &
  done
  wait
  for name in $fuzz_targets; do
    echo "--- fuzz $name"
    cat "$fuzz_out/$name.log"
    record "fuzz $name" "$(cat "$fuzz_out/$name.rc" 2>/dev/null || echo 1)"
  done
  rm -rf "$fuzz_out"
fi

stage "summary"
for s in "${failed_stages[@]}"; do echo "failed: $s"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
