#!/usr/bin/env python3
"""Training throughput of the demo ViT (d=64, 6 blocks, 4 heads, patch 7,
batch 128, Fashion-MNIST) in pipetrain and in PyTorch, same threads, same
batch, measured in one run. The two are run alternately, REPEATS times each,
and the best samples/s of each is kept, so a burst of load from other users of
a shared machine does not decide the ratio.

pipetrain's number is its own trainer (`pipetrain train`, data staging
included), timed from its metrics file over the steps after the warm-up;
PyTorch's is the reference model in an eager training loop on preloaded
tensors (bench/torch_vit.py). Debian's torch runs its own OpenMP pool and calls
a pthread OpenBLAS, which oversubscribe the cores when both get T threads; with
T > 1 the PyTorch side is run under three thread settings and keeps its best,
so the comparison is against PyTorch at its best on this machine.

usage: vit_speed.py PIPETRAIN_BINARY [--threads 1,2] [--steps 200] [--repeats 2]
Run with Debian's /usr/bin/python3 (it needs torch)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
WARMUP, BATCH = 20, 128


def pipetrain(binary, threads, steps, work):
    run_dir = os.path.join(work, "run-%d" % threads)
    subprocess.run(["rm", "-rf", run_dir], check=True)
    cmd = [binary, "train", os.path.join(ROOT, "configs", "vit_fmnist.yaml"),
           "--set", "run.dir=" + run_dir, "--set", "run.threads=%d" % threads,
           "--set", "train.max_steps=%d" % steps, "--set", "train.epochs=1",
           "--set", "train.eval_every=0", "--set", "train.eval_examples=128",
           "--set", "train.batch=%d" % BATCH]
    subprocess.run(cmd, check=True, capture_output=True)
    rows = [r for r in map(json.loads, open(os.path.join(run_dir, "metrics.jsonl"))) if r["event"] == "step"]
    t0, t1 = rows[WARMUP - 1]["time_s"], rows[steps - 1]["time_s"]
    return (steps - WARMUP) * BATCH / (t1 - t0)


def torch_settings(threads):
    base = {"OMP_NUM_THREADS": str(threads)}
    if threads == 1:
        return [base]
    return [base, dict(base, OPENBLAS_NUM_THREADS="1"), dict(base, OMP_WAIT_POLICY="passive")]


def torch_side(threads, steps):
    """best samples/s over the thread settings, and the setting that gave it"""
    best = (0.0, "")
    for setting in torch_settings(threads):
        env = dict(os.environ, **setting)
        out = subprocess.run([sys.executable, os.path.join(HERE, "torch_vit.py"), str(threads), str(steps),
                              str(WARMUP), str(BATCH), DATA], check=True, capture_output=True,
                             text=True, env=env).stdout
        rate = json.loads(out)["samples_per_s"]
        if rate > best[0]:
            best = (rate, " ".join("%s=%s" % kv for kv in sorted(setting.items())))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipetrain")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    binary = os.path.abspath(args.pipetrain)
    print("ViT d=64 L=6 H=4 patch 7, batch %d, %d timed steps, best of %d alternating runs"
          % (BATCH, args.steps - WARMUP, args.repeats))
    print("| threads | pipetrain samples/s | PyTorch %s samples/s | ratio | PyTorch's best setting |"
          % __import__("torch").__version__)
    print("| --- | --- | --- | --- | --- |")
    ratios = []
    with tempfile.TemporaryDirectory(prefix="pt-bench-") as work:
        for threads in (int(t) for t in args.threads.split(",")):
            ours, theirs = 0.0, (0.0, "")
            for _ in range(args.repeats):
                ours = max(ours, pipetrain(binary, threads, args.steps, work))
                theirs = max(theirs, torch_side(threads, args.steps))
            ratios.append(ours / theirs[0])
            print("| %d | %.0f | %.0f | %.2f | %s |" % (threads, ours, theirs[0], ours / theirs[0], theirs[1]),
                  flush=True)
    print("min ratio %.2f" % min(ratios))


if __name__ == "__main__":
    main()
