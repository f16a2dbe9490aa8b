#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) into build-fuzz with clang,
# ASan and UBSan, and fuzzes each target in turn, one process at a time:
#
#   scripts/fuzz.sh [--runs N] [--time S] [--build-dir DIR] [--no-build]
#                   [--build-only] [--fresh] [TARGET...]
#
# TARGET: config recfile checkpoint safetensors idx textcls (default: all). Each runs
# for N executions (-runs, default 1000000) or S seconds (-max_total_time,
# default 3600), whichever comes first, from the seeds in
# tests/fuzz/corpus/TARGET, the inputs of bugs found before in
# tests/fuzz/regress/TARGET and what earlier runs found (DIR/fuzz-corpus/
# TARGET; --fresh uses a temporary one instead, as the ctest runs do).
#
# Any crash, sanitizer report (UBSan aborts too), leak, input that takes over
# 2 s (-timeout=2: a hang), or use of more than 2 GB (-rss_limit_mb) fails the
# run: the script stops at the first failing target and exits 1, leaving the
# input in DIR/fuzz-artifacts/ and the log in DIR/fuzz-logs/TARGET.log. To
# replay one: DIR/tests/fuzz/fuzz_TARGET FILE. A target stopped by the time
# limit before N executions is not a failure; the summary says so.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

runs=1000000
seconds=3600
dir=build-fuzz
build=1
run=1
fresh=0
targets=()
all=(config recfile checkpoint safetensors idx textcls)
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --time) seconds=$2; shift 2 ;;
    --build-dir) dir=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --build-only) run=0; shift ;;
    --fresh) fresh=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    -*) echo "fuzz: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz: unknown target '$t' (${all[*]})" >&2; exit 2; }
done

if ((build)); then
  cc=$(command -v clang-14 || command -v clang || true)
  if [ -z "$cc" ]; then
    echo "fuzz: clang is not installed (scripts/setup.sh installs clang-14 and libclang-rt-14-dev)" >&2
    exit 1
  fi
  # RelWithDebInfo: -O2 -g, the usual trade between speed and readable reports
  cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPT_FUZZ=ON \
    -DPT_CUDA=OFF -DPT_WERROR=ON > /dev/null
  cmake --build "$dir" --target fuzz -j 2
fi
((run)) || exit 0
dir=$(cd "$dir" && pwd)

# Input size limits: a little over the largest seed of each target, so the
# fuzzer can grow an input without spending its time on huge ones.
declare -A max_len=([config]=4096 [recfile]=8192 [checkpoint]=8192 [safetensors]=8192 [idx]=4096
                   [textcls]=4096)

# The targets rewrite their files at every execution: on tmpfs, not on a disk
# file system (ext4 flushes a truncated and rewritten file at close, which
# makes the file targets some 40 times slower).
base=${TMPDIR:-/tmp}
[ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm
scratch=$(mktemp -d "$base/pt_fuzz_XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$dir/fuzz-artifacts" "$dir/fuzz-logs"
summary=()
for t in "${targets[@]}"; do
  bin=$dir/tests/fuzz/fuzz_$t
  [ -x "$bin" ] || { echo "fuzz: $bin is not built (run without --no-build)" >&2; exit 1; }
  if ((fresh)); then corpus=$scratch/corpus-$t; else corpus=$dir/fuzz-corpus/$t; fi
  mkdir -p "$corpus" "$scratch/tmp-$t"
  log=$dir/fuzz-logs/$t.log
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="$repo/tests/fuzz/$t.dict")
  # the seeds, and the inputs of bugs found before (they must stay fixed)
  seeds=("$repo/tests/fuzz/corpus/$t")
  [ -d "tests/fuzz/regress/$t" ] && seeds+=("$repo/tests/fuzz/regress/$t")
  echo "fuzz: $t: up to $runs executions or $seconds s (log: $log)"
  rc=0
  # detect_leaks: LeakSanitizer after every input; the suppressions name only
  # third-party libraries (Open MPI, hwloc, OpenBLAS), as in scripts/test.sh.
  TMPDIR=$scratch/tmp-$t \
  ASAN_OPTIONS=detect_leaks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS="suppressions=$repo/tests/lsan_third_party.supp:print_suppressions=0" \
    "$bin" -runs="$runs" -max_total_time="$seconds" -timeout=2 -rss_limit_mb=2048 \
      -max_len="${max_len[$t]}" "${dict[@]}" -print_final_stats=1 \
      -artifact_prefix="$dir/fuzz-artifacts/$t-" "$corpus" "${seeds[@]}" > "$log" 2>&1 || rc=$?
  done_line=$(grep -a -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  if ((rc)) || [ -z "$done_line" ]; then
    echo "fuzz: $t FAILED (exit status $rc); the end of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  execs=$(sed -E 's/^#([0-9]+).*/\1/' <<< "$done_line")
  note=""
  ((execs >= runs)) || note="  (stopped by the ${seconds} s limit before $runs executions)"
  summary+=("$t: $done_line$note")
  echo "fuzz: $t: $done_line$note"
done
echo "fuzz: all passed"
printf '  %s\n' "${summary[@]}"
