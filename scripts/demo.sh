#!/usr/bin/env bash
# Sets up the machine, builds pipetrain and trains the demo ViT on
# Fashion-MNIST (configs/vit_fmnist.yaml), then evaluates the final checkpoint.
# Extra arguments are passed to `pipetrain train` (e.g. --set train.epochs=2).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
rm -rf runs/vit_fmnist
time ./build/pipetrain train configs/vit_fmnist.yaml "$@"
./build/pipetrain eval configs/vit_fmnist.yaml
