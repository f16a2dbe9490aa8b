#!/usr/bin/env bash
# Sets up the machine, builds pipetrain and trains the demo ViT on
# Fashion-MNIST (configs/vit_fmnist.yaml), then evaluates the final checkpoint.
# Extra arguments are passed to `pipetrain train` (e.g. --set train.epochs=2).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
# the demo starts fresh; an earlier run's directory is kept, moved aside
if [ -e runs/vit_fmnist ]; then
    kept="runs/vit_fmnist.before-$(date +%Y%m%d-%H%M%S)"
    mv runs/vit_fmnist "$kept"
    echo "demo: moved the earlier runs/vit_fmnist to $kept"
fi
time ./build/pipetrain train configs/vit_fmnist.yaml "$@"
./build/pipetrain eval configs/vit_fmnist.yaml
