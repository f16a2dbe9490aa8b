#!/usr/bin/env python3
"""Where a GPU training step's time goes: every CUDA kernel of pipetrain's
step on the GPT-2-small-shaped model of bench/gpt2_gpu.py (d=768, 12 heads,
T=1024, batch 16, bf16), timed by Nsight Compute (ncu), one metric
(gpu__time_duration.sum), GPU clocks left as they are.

ncu runs every kernel alone, so launch gaps and overlap are not in these
figures: their sum is the step's kernel time, not its wall time (compare with
bench/gpt2_gpu.py's ms/step). Two runs, of 1 and of 1 + STEPS training steps,
are profiled; the kernels' time in the second minus the first, over STEPS,
is one step's, without start-up, the first step's one-off work or the final
evaluation. Kernels are grouped by name (template arguments kept, parameters
dropped). With fewer blocks than GPT-2's 12 (the default is 2, to keep the
profiled runs short) the per-block kernels weigh less against the embedding,
head and optimizer kernels than they do at 12.

usage: gpu_kernels.py [PIPETRAIN] [--layers 2] [--steps 2] [--top 25]
Needs ncu on PATH and a GPU; about a minute at the defaults on an H100.
"""
import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt2_gpu  # noqa: E402  (the benchmark's model and config)

BATCH = 16


def kernel_times(binary, work, layers, steps):
    """{kernel name: (launches, total ns)} of one profiled run of `steps` steps."""
    cfg = os.path.join(work, "cfg-%d.yaml" % steps)
    gpt2_gpu.write_config(cfg, os.path.join(work, "run-%d" % steps), BATCH, steps, layers)
    cmd = ["ncu", "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
           "--print-summary", "per-kernel", binary, "train", cfg]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit("ncu failed (%d):\n%s\n%s" % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(lines))
    if not rows:
        raise SystemExit("ncu printed no kernel table:\n%s" % proc.stdout[-3000:])
    head, out = rows[0], {}
    for r in rows[1:]:
        d = dict(zip(head, r))
        if d.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = re.sub(r"\(.*$", "", d["Kernel Name"]).strip()
        n = int(d["Invocations"].replace(",", ""))
        ns = n * float(d["Average"].replace(",", ""))
        c, t = out.get(name, (0, 0.0))
        out[name] = (c + n, t + ns)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipetrain", nargs="?", default=os.path.join(os.path.dirname(HERE), "build-gpu", "pipetrain"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2, help="steps measured (the profiled runs take 1 and 1 + this)")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if args.layers < 1 or args.steps < 1:
        ap.error("--layers and --steps must be at least 1")
    if not shutil.which("ncu"):
        sys.exit("gpu_kernels: needs ncu (Nsight Compute) on PATH")
    with tempfile.TemporaryDirectory(prefix="pt-gpu-kernels-") as work:
        one = kernel_times(os.path.abspath(args.pipetrain), work, args.layers, 1)
        more = kernel_times(os.path.abspath(args.pipetrain), work, args.layers, 1 + args.steps)
    step = {}
    for name, (n, ns) in more.items():
        n0, ns0 = one.get(name, (0, 0.0))
        if n > n0:
            step[name] = ((n - n0) / args.steps, (ns - ns0) / args.steps)
    total = sum(ns for _, ns in step.values())
    print("GPT-2-small shape (d=768, 12 heads, T=1024, MLP 3072), %d blocks, batch %d, bf16: "
          "kernel time of one training step %.2f ms (sum over kernels, each run alone)"
          % (args.layers, BATCH, total / 1e6))
    print()
    print("| kernel | launches/step | ms/step | share |")
    print("| --- | --- | --- | --- |")
    for name, (n, ns) in sorted(step.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print("| %s | %.0f | %.3f | %.1f%% |" % (name, n, ns / 1e6, 100 * ns / total))


if __name__ == "__main__":
    main()
