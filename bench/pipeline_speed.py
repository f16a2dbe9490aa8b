#!/usr/bin/env python3
"""Pipeline efficiency on the demo ViT (d=64, 6 blocks, batch 128): measured
step time against the ideal, and stage imbalance after balancing.

For each K it trains under `mpirun -np K` (one thread per rank) with
run.rank_metrics on, and reads every rank's per-step timings:
  stage compute   CPU seconds of the stage's forward and backward actions per
                  step (process CPU time, so a rank that is descheduled while
                  computing is not charged for the wait)
  imbalance       max / mean stage compute (the planner's prediction beside it)
  ideal step      total compute / K, stretched by the fill-drain bubble:
                  (sum of stage compute / K) * (M + K - 1) / M
  measured step   wall time of a step (the slowest rank's)
On a machine with fewer cores than ranks the ranks time-share cores, so the
wall-clock step cannot beat total compute / cores; that floor is printed too,
and `wall/cpu` (compute wall time over compute CPU time, ~1 when a rank has
its core to itself) shows how much of the wall time is time-sharing.

usage: pipeline_speed.py PIPETRAIN [--stages 1,2,4] [--micro 8] [--steps 40]"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
WARMUP = 5


def run(binary, K, M, steps, work, what):
    run_dir = os.path.join(work, "k%d" % K)
    args = [binary, what, os.path.join(ROOT, "configs", "vit_fmnist.yaml"),
            "--set", "run.dir=" + run_dir, "--set", "pipeline.stages=%d" % K,
            "--set", "pipeline.microbatches=%d" % M, "--set", "run.threads=1",
            "--set", "run.rank_metrics=true", "--set", "train.max_steps=%d" % steps,
            "--set", "train.eval_examples=128"]
    cmd = args if K == 1 else ["mpirun", "--oversubscribe", "-np", str(K)] + args
    out = subprocess.run(cmd, cwd=ROOT, env=ENV, check=True, capture_output=True, text=True).stdout
    return run_dir, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipetrain")
    ap.add_argument("--stages", default="1,2,4")
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    if args.steps <= WARMUP:
        ap.error("--steps %d: the first %d steps are warm-up, not timed; give more" % (args.steps, WARMUP))
    binary = os.path.abspath(args.pipetrain)
    cores = os.cpu_count()
    M = args.micro
    print("demo ViT, batch 128, M = %d micro-batches, 1f1b, one thread per rank, %d cores, "
          "steps %d..%d timed" % (M, cores, WARMUP + 1, args.steps))
    print("| K | stage compute (ms, CPU) | imbalance | planned imbalance | ideal step (ms) | "
          "measured step (ms) | measured / ideal | floor total/cores (ms) | wall/cpu |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="pt-pipebench-") as work:
        for K in (int(k) for k in args.stages.split(",")):
            _, plan = run(binary, K, M, args.steps, work, "plan")
            m = re.search(r"imbalance max/mean stage compute = ([0-9.]+)", plan)
            # one stage is balanced by definition (the planner profiles nothing then)
            planned = float(m.group(1)) if m else (1.0 if K == 1 else float("nan"))
            run_dir, _ = run(binary, K, M, args.steps, work, "train")
            stages, walls, ratio = {}, {}, []
            for name in os.listdir(run_dir):
                if not name.startswith("metrics-rank"):
                    continue
                rows = [json.loads(l) for l in open(os.path.join(run_dir, name))][WARMUP:]
                s = rows[0]["stage"]
                stages[s] = statistics.mean(r["compute_cpu_s"] for r in rows)
                for r in rows:
                    walls[r["step"]] = max(walls.get(r["step"], 0), r["step_wall_s"])
                ratio.append(statistics.mean(r["compute_wall_s"] / max(r["compute_cpu_s"], 1e-9) for r in rows))
            comp = [stages[s] for s in sorted(stages)]
            total = sum(comp)
            imbalance = max(comp) / (total / K)
            ideal = total / K * (M + K - 1) / M
            step = statistics.median(walls.values())
            floor = total / min(K, cores)
            print("| %d | %s | %.3f | %.3f | %.1f | %.1f | %.2f | %.1f | %.2f |" % (
                K, " / ".join("%.1f" % (1e3 * c) for c in comp), imbalance, planned, 1e3 * ideal,
                1e3 * step, step / ideal, 1e3 * max(floor, ideal), statistics.mean(ratio)), flush=True)


if __name__ == "__main__":
    main()
