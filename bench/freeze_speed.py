#!/usr/bin/env python3
"""Freezing on one process: the demo ViT on Fashion-MNIST for the same number
of epochs without freezing and with each freeze setting, with and without the
activation cache. Prints, for every run, the wall time of each epoch with the
number of frozen blocks, the final test accuracy and the end-to-end speedup
(the baseline's wall time over the run's, both measured here, in this run of
the script, one after the other); then an alpha sweep laid out like
PipeTransformer's table (accuracy, speedup).

Everything else is the demo config (configs/vit_fmnist.yaml): same data order,
same learning-rate schedule; freezing only removes work. A sweep setting that
already ran above (schedule 1/3, cache on) is reported from that run.

The README's two measurements: the demo's 12 epochs (the defaults), and a
longer run, `--epochs 24 --start 9`, where the bottom blocks have settled
before they freeze.

usage: freeze_speed.py PIPETRAIN [--epochs 12] [--start 3] [--every 1]
                       [--max-depth 0] [--threads 2] [--quick | --sweep-only]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(binary, work, name, epochs, threads, extra):
    run_dir = os.path.join(work, name)
    args = [binary, "train", os.path.join(ROOT, "configs", "vit_fmnist.yaml"),
            "--set", "run.dir=" + run_dir, "--set", "train.epochs=%d" % epochs,
            "--set", "run.threads=%d" % threads, "--set", "train.eval_every=0"]
    for k, v in extra.items():
        args += ["--set", "%s=%s" % (k, v)]
    start = time.time()
    subprocess.run(args, cwd=ROOT, check=True, capture_output=True, text=True)
    wall = time.time() - start
    recs = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    epochs_t = [(r["epoch_time_s"], r["frozen_blocks"], r["cache_hits"]) for r in recs if r["event"] == "epoch"]
    acc = [r["test_accuracy"] for r in recs if r["event"] == "eval"][-1]
    return wall, acc, epochs_t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipetrain")
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--start", type=int, default=3)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--max-depth", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="only baseline, schedule 1/3 with and without cache")
    ap.add_argument("--sweep-only", action="store_true", help="only baseline and the alpha sweep")
    args = ap.parse_args()
    binary = os.path.abspath(args.pipetrain)
    common = {"freeze.start": args.start, "freeze.every": args.every, "freeze.max_depth": args.max_depth}
    runs = [("no freezing", {})]
    for policy, alpha in [("schedule", "0.3333333333"), ("auto", "0.3333333333")]:
        for cache in ("false", "true"):
            label = "auto (bound 1/3)" if policy == "auto" else "schedule 1/3"
            runs.append(("%s, cache %s" % (label, "on" if cache == "true" else "off"),
                         dict(common, **{"freeze.policy": policy, "freeze.alpha": alpha, "cache.enabled": cache})))
    sweep = [("1/5", "0.2"), ("1/4", "0.25"), ("1/3", "0.3333333333"), ("2/5", "0.4"), ("1/2", "0.5")]
    if args.quick:
        runs = runs[:3]
        sweep = []
    if args.sweep_only:
        runs = runs[:1]
    print("demo ViT, Fashion-MNIST, %d epochs, %d threads; decisions after epoch %d, then every %d; "
          "max_depth %s" % (args.epochs, args.threads, args.start, args.every, args.max_depth or "all"))
    results = {}
    runs_extra = dict(runs)
    with tempfile.TemporaryDirectory(prefix="pt-freezebench-") as work:
        for i, (name, extra) in enumerate(runs):
            results[name] = run(binary, work, "run%d" % i, args.epochs, args.threads, extra)
            wall, acc, ep = results[name]
            base = results["no freezing"][0]
            print("\n%s: %.1f s, test accuracy %.2f%%, speedup %.2fx" % (name, wall, 100 * acc, base / wall))
            print("  epoch times (s) [frozen blocks]: " +
                  " ".join("%.1f[%d]" % (t, d) for t, d, _ in ep), flush=True)
        if sweep:
            print("\nalpha sweep (schedule policy, cache on):")
            print("| alpha | test accuracy | speedup |")
            print("| --- | --- | --- |")
            base_wall, base_acc, _ = results["no freezing"]
            print("| baseline (no freezing) | %.2f%% | 1.00x |" % (100 * base_acc))
            for label, alpha in sweep:
                extra = dict(common, **{"freeze.policy": "schedule", "freeze.alpha": alpha, "cache.enabled": "true"})
                same = [r for n, r in results.items() if runs_extra.get(n) == extra]
                if same:  # this setting already ran above: the same run, not measured twice
                    wall, acc, ep = same[0]
                else:
                    wall, acc, ep = run(binary, work, "alpha-" + alpha, args.epochs, args.threads, extra)
                print("| %s | %.2f%% | %.2fx |" % (label, 100 * acc, base_wall / wall), flush=True)


if __name__ == "__main__":
    main()
