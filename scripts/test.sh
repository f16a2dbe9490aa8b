#!/usr/bin/env bash
# Sets up the machine, builds pipetrain and runs the whole test suite: every
# ctest test of the normal build, then the tests labelled `sanitize` again
# under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
ctest --test-dir build --output-on-failure -j 2
scripts/build.sh build-asan -DPT_SANITIZE=address -DPT_CUDA=OFF
# Open MPI, hwloc and OpenBLAS keep allocations until exit by design; their
# leaks are suppressed by library name (tests/lsan_third_party.supp), ours are not.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  LSAN_OPTIONS="suppressions=$PWD/tests/lsan_third_party.supp:fast_unwind_on_malloc=0:print_suppressions=0" \
  ctest --test-dir build-asan --output-on-failure -j 2 -L sanitize
echo "test: all passed"
