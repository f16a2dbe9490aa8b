#!/usr/bin/env bash
# Sets up the machine, builds pipetrain and runs the whole test suite: every
# ctest test of the normal build, then the tests labelled `sanitize` again
# under AddressSanitizer + UndefinedBehaviorSanitizer, then a short run of
# each fuzz target (label `fuzz`, in build-fuzz).
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
# The fuzz targets (clang, ASan + UBSan; fails here if clang is missing):
# a short run of each from its seeds and past bugs' inputs, one at a time.
# scripts/fuzz.sh without --build-only runs the long ones.
scripts/fuzz.sh --build-only
ctest --test-dir build-fuzz --output-on-failure -j 1 -L fuzz
echo "test: all passed"
