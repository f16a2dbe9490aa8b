#!/usr/bin/env bash
# Configures and builds pipetrain into build/ (or the directory given), with
# warnings as errors. Extra arguments go to cmake, e.g. -DPT_SANITIZE=address.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DPT_WERROR=ON "$@" > /dev/null
cmake --build "$dir" -j "$(nproc)"
