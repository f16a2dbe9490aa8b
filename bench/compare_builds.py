#!/usr/bin/env python3
"""Two builds of pipetrain on the same training steps, alternating: what a
change to the kernels is worth end to end, measured in one run.

Each round runs `pipetrain train` once with build A and once with build B
(in alternating order, A first in odd rounds), on one of:
  demo   the demo ViT (configs/vit_fmnist.yaml)
  wide   the wide ViT of bench/torch_speed.py (d 256, 4 blocks, 8 heads,
         patch 4, MLP 4d)
  bert   configs/bert_finetune.yaml: the pretrained MiniLM (scripts/setup.sh
         must have run), batch 32
and takes the median of the step times (`step_s` in metrics.jsonl) after
the first --warmup steps. The ratio A / B of each round is printed (above 1:
B is faster), then the median of the rounds' ratios. On a shared or
virtual machine the speed of a whole run moves by 10-30% from minute to
minute; a round's two runs are seconds apart, so its ratio is steadier than
either time, and the median over rounds is steadier still.

usage: compare_builds.py BINARY_A BINARY_B [--model bert|demo|wide]
                         [--threads 1] [--rounds 5] [--steps 20] [--warmup 3]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_speed as TS  # noqa: E402  (the models and their command)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command(binary, model, threads, steps, run_dir):
    return TS.pipetrain_cmd(binary, "minilm" if model == "bert" else model, threads, steps, run_dir)


def median_step(binary, args, work):
    run_dir = os.path.join(work, "run")
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = command(binary, args.model, args.threads, args.warmup + args.steps, run_dir)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode:
        sys.exit("compare_builds: %s failed (exit %d):\n%s" % (" ".join(cmd), p.returncode,
                                                                p.stderr[-3000:]))
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        steps = [r["step_s"] for r in map(json.loads, f) if r.get("event") == "step"]
    if len(steps) <= args.warmup:
        sys.exit("compare_builds: %s ran %d steps" % (binary, len(steps)))
    return statistics.median(steps[args.warmup:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--model", default="bert", choices=["bert", "demo", "wide"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0 or args.threads < 1:
        sys.exit("compare_builds: --rounds, --steps and --threads must be positive")
    for b in (args.a, args.b):
        if not os.access(b, os.X_OK):
            sys.exit("compare_builds: %s is not an executable" % b)
    print("model %s, %d thread(s), %d rounds of %d timed steps (after %d)" % (
        args.model, args.threads, args.rounds, args.steps, args.warmup))
    print("| round | A ms/step | B ms/step | A / B |")
    print("| --- | --- | --- | --- |")
    ratios = []
    with tempfile.TemporaryDirectory(prefix="compare_builds.") as work:
        for r in range(args.rounds):
            order = ("a", "b") if r % 2 == 0 else ("b", "a")
            t = {}
            for side in order:
                t[side] = median_step(getattr(args, side), args, work)
            ratios.append(t["a"] / t["b"])
            print("| %d | %.1f | %.1f | %.3f |" % (r + 1, 1e3 * t["a"], 1e3 * t["b"], ratios[-1]),
                  flush=True)
    print("median of the rounds' A / B: %.3f (min %.3f, max %.3f)" % (
        statistics.median(ratios), min(ratios), max(ratios)))


if __name__ == "__main__":
    main()
