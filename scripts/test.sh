#!/usr/bin/env bash
# Sets up the machine, builds pipetrain and runs the whole test suite: every
# ctest test of the normal build, then the tests labelled `sanitize` again
# under AddressSanitizer + UndefinedBehaviorSanitizer, then a short run of
# each fuzz target (label `fuzz`, in build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."

# ctest in build dir $1 with the rest as its options. When tests fail, the
# lines of their output that say what failed are printed again at the end,
# where a log cut in the middle (as CI's summaries are) still shows them.
run_ctest() {
  local dir=$1
  shift
  if ctest --test-dir "$dir" --output-on-failure "$@"; then return 0; fi
  echo "== what failed, from $dir/Testing/Temporary/LastTest.log:"
  grep -a -E -A3 '\bFAIL(ED)?\b|^ +[0-9]+\. [^ ]+:[0-9]+ +- |Assertion|ERROR: AddressSanitizer|runtime error' \
    "$dir/Testing/Temporary/LastTest.log" | cut -c1-300 | head -n 80 || true
  return 1
}
scripts/setup.sh
scripts/build.sh build
run_ctest build -j 2
scripts/build.sh build-asan -DPT_SANITIZE=address -DPT_CUDA=OFF
# Open MPI, hwloc and OpenBLAS keep allocations until exit by design; their
# leaks are suppressed by library name (tests/lsan_third_party.supp), ours are not.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  LSAN_OPTIONS="suppressions=$PWD/tests/lsan_third_party.supp:fast_unwind_on_malloc=0:print_suppressions=0" \
  run_ctest build-asan -j 2 -L sanitize
# The fuzz targets (clang, ASan + UBSan; fails here if clang is missing):
# a short run of each from its seeds and past bugs' inputs, one at a time.
# scripts/fuzz.sh without --build-only runs the long ones.
scripts/fuzz.sh --build-only
run_ctest build-fuzz -j 1 -L fuzz
echo "test: all passed"
