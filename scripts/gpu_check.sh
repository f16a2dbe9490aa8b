#!/usr/bin/env bash
# Checks pipetrain's CUDA backend on a machine with a GPU, without network:
# builds with CUDA into build-gpu/ (warnings as errors, CUDA architecture from
# the GPU), runs the tests labelled gpu (and emu, the CPU emulation of the same
# kernels), the op tests again under compute-sanitizer when it is installed,
# and bench/gpt2_gpu.py. Everything goes to LOGDIR:
#   nvidia-smi.txt, build.log, ctest-gpu.log, ctest-emu.log,
#   sanitizer-{memcheck,racecheck,synccheck}.log, bench.txt, summary.txt
# Exit status: 0 all passed; 1 build or a test failed; 2 usage; 3 tests passed
# but the benchmark failed.
#
# usage: scripts/gpu_check.sh [--prebuilt] LOGDIR
#        (PYTHON=... picks the interpreter for the benchmark, python3 by
#        default; it needs torch with CUDA for the PyTorch half of the
#        comparison). --prebuilt: build-gpu/ is already there (made elsewhere
#        and moved with scripts/gpu_bundle.sh); no configure, no build.
set -uo pipefail
prebuilt=0
if [ "${1:-}" = "--prebuilt" ]; then
    prebuilt=1
    shift
fi
if [ $# -ne 1 ]; then
    echo "usage: $0 [--prebuilt] LOGDIR" >&2
    exit 2
fi
mkdir -p "$1" || exit 2
LOG=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
SUMMARY="$LOG/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

{ date; uname -a; nvidia-smi; nvidia-smi -q; nvcc --version; } > "$LOG/nvidia-smi.txt" 2>&1
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
arch=${arch:-90}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
note "GPU: ${name:-none found by nvidia-smi}, CUDA architecture $arch"

# build
if [ $prebuilt -eq 1 ]; then
    if [ ! -x build-gpu/tests/gpu/test_cuda_arena ] || [ ! -x build-gpu/pipetrain ]; then
        note "build: --prebuilt, but build-gpu/ holds no CUDA build"
        exit 1
    fi
    note "build: prebuilt ($(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' build-gpu/CMakeCache.txt))"
elif ! { cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DPT_WERROR=ON -DPT_CUDA=ON \
             -DCMAKE_CUDA_ARCHITECTURES="$arch" &&
       cmake --build build-gpu -j "$(nproc)"; } > "$LOG/build.log" 2>&1; then
    note "build: FAILED (see build.log)"
    exit 1
fi
if [ $prebuilt -eq 0 ] && ! grep -q "CUDA backend: on" "$LOG/build.log"; then
    note "build: the CUDA backend was not compiled in (see build.log)"
    exit 1
fi
[ $prebuilt -eq 0 ] && note "build: ok"

status=0
# the GPU tests; -V keeps every test's own listing in the log
if ctest --test-dir build-gpu -L gpu -V --timeout 3600 > "$LOG/ctest-gpu.log" 2>&1; then
    note "ctest -L gpu: passed"
else
    note "ctest -L gpu: FAILED (see ctest-gpu.log)"
    status=1
fi
# (the CUDA backend's tests print "skipped: no GPU (reason)" when they cannot open it)
if grep -q "skipped: no GPU (" "$LOG/ctest-gpu.log"; then
    note "ctest -L gpu: tests SKIPPED (no usable GPU seen by the tests: see ctest-gpu.log)"
    status=1
fi
if ctest --test-dir build-gpu -L emu --output-on-failure > "$LOG/ctest-emu.log" 2>&1; then
    note "ctest -L emu: passed"
else
    note "ctest -L emu: FAILED (see ctest-emu.log)"
    status=1
fi

# shared-memory races, out-of-bounds accesses and barrier misuse in the
# kernels, on the smaller shapes (PT_TEST_SMALL)
if command -v compute-sanitizer > /dev/null 2>&1; then
    for tool in memcheck racecheck synccheck; do
        if PT_TEST_SMALL=1 compute-sanitizer --tool "$tool" --error-exitcode 99 \
               build-gpu/tests/gpu/test_cuda_ops > "$LOG/sanitizer-$tool.log" 2>&1; then
            note "compute-sanitizer $tool: clean"
        else
            note "compute-sanitizer $tool: FAILED (see sanitizer-$tool.log)"
            status=1
        fi
    done
else
    note "compute-sanitizer: not installed; skipped"
fi

if "${PYTHON:-python3}" bench/gpt2_gpu.py build-gpu/pipetrain > "$LOG/bench.txt" 2>&1; then
    note "bench: ok"
    sed -n '/^| implementation/,$p' "$LOG/bench.txt" | tee -a "$SUMMARY"
else
    note "bench: FAILED (see bench.txt)"
    [ $status -eq 0 ] && status=3
fi
note "logs: $LOG"
exit $status
