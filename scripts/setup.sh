#!/usr/bin/env bash
# Installs every Debian package pipetrain needs (build tools, Open MPI, hwloc,
# libyaml, CUnit, OpenBLAS, jansson, OpenSSL's libcrypto (SHA-256), zlib, the two data sets, PyTorch for the reference
# tests, clang-14 with libFuzzer and OpenMP for the fuzz targets, iproute2 for
# the simulated hosts of tests/multinode) and writes the KJV text to
# datasets/kjv.txt. Non-interactive and safe
# to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config
  libopenmpi-dev openmpi-bin libhwloc-dev libyaml-dev libcunit1-dev
  libopenblas-openmp-dev zlib1g-dev libjansson-dev libssl-dev
  clang-14 libclang-rt-14-dev libomp-14-dev
  dataset-fashion-mnist bible-kjv
  python3-torch python3-numpy
  iproute2
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "setup: installing ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The byte-level language model's default corpus: the whole King James Bible.
mkdir -p datasets
if [ ! -s datasets/kjv.txt ]; then
  bible -l10000 "gen1:1-rev22:21" > datasets/kjv.txt.tmp
  mv datasets/kjv.txt.tmp datasets/kjv.txt
fi
echo "setup: done"
