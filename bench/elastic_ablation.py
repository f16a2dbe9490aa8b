#!/usr/bin/env python3
"""PipeTransformer's ablation, on this machine: the demo ViT on Fashion-MNIST
on 2 ranks under a per-device memory limit that makes the unfrozen model
need a 2-stage pipeline, trained five ways, one after the other in this run
of the script:

  baseline            no freezing: K = 2 stages, 1 replica, all the way
  freeze only         freezing, the layout kept (re-partitioned only)
  freeze + cache      the frozen prefix's output from the activation cache
  freeze + elastic    the layout planned again at each decision: the
                      pipeline compresses and freed ranks become replicas
  freeze + elastic + cache

For each: wall time of the whole run (evaluation included), final test
accuracy on all 10 000 test images, the time it took to reach the baseline's
final accuracy, the speedup (baseline's wall time over the run's), each
epoch's time and samples/s with the layout it ran (K x D) and the frozen
blocks, and the measured time of every layout transition. Then the gradient
all-reduce of 2 replicas of the unfrozen model, with and without overlap
(bucketed during the last backward, or after it): per-step seconds in all and
left exposed.

--hosts runs the same on 2 simulated hosts x 2 ranks (tests/multinode/hosts.sh)
with their link capped at --link (default 1gbit): the baseline is then 2
replicas of the 2-stage pipeline, one per host (at the default limit 1 x 4
does not fit, whatever the link; at a larger --memory-gib a much faster
link can make 1 x 4 win: `pipetrain plan` says which), and elastic runs can
grow to 4 replicas across the hosts.

usage: elastic_ablation.py PIPETRAIN [--epochs 8] [--start 3] [--alpha 0.333]
                           [--memory-gib auto|GIB] [--hosts] [--link 1gbit] [--skip-local]

The default limit (auto) is found by bisection (to 0.1%, a few seconds a
try with `pipetrain plan`) before each set of runs, and printed: the largest
under which no single stage holds the unfrozen model with its micro-batches
in flight on that many ranks, so the baseline is a pipeline with as much
memory per stage as that allows (the script stops if no layout fits there).
It is found for 2 ranks and again for the 4 of --hosts, because the count
includes a replica's share of the step staged in host memory, so the two
limits can differ (they need not). A fixed number would
follow the planner's memory count, which changes as the backend's buffers
do: 0.00524 GiB, the default until 54267ac, fit no layout at all once the
count took in each thread's scratch."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
HOSTS = os.path.join(ROOT, "tests", "multinode", "hosts.sh")


def configs(args):
    freeze = {"freeze.policy": "schedule", "freeze.alpha": args.alpha, "freeze.start": args.start,
              "freeze.every": 1}
    fixed = {"pipeline.elastic": "false"}
    return [
        ("baseline (no freezing)", dict(fixed)),
        ("freeze only", dict(freeze, **fixed, **{"cache.enabled": "false"})),
        ("freeze + cache", dict(freeze, **fixed, **{"cache.enabled": "true"})),
        ("freeze + elastic", dict(freeze, **{"cache.enabled": "false"})),
        ("freeze + elastic + cache", dict(freeze, **{"cache.enabled": "true"})),
    ]


def command(args, ranks, run_dir, extra, on_hosts):
    cmd = [os.path.abspath(args.pipetrain), "train", os.path.join(ROOT, "configs", "vit_fmnist.yaml"),
           "--set", "run.dir=" + run_dir, "--set", "train.epochs=%d" % args.epochs,
           "--set", "run.threads=1", "--set", "train.eval_every=1",
           "--set", "pipeline.memory_gib=%s" % args.memory_gib]
    for k, v in extra.items():
        cmd += ["--set", "%s=%s" % (k, v)]
    if on_hosts:
        return [HOSTS, "run", "--", "-np", str(ranks), "-x", "OMP_NUM_THREADS"] + cmd
    return ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd


def plan(args, ranks, memory_gib, on_hosts, env):
    """`pipetrain plan` of the unfrozen model on `ranks` ranks, launched as
    the training runs are (`command`), under memory_gib: (its layout line,
    whether a 1-stage layout fits), or None when no layout fits (exit 2)."""
    with tempfile.TemporaryDirectory(prefix="pt-ablation-plan-") as work:
        chosen, args.memory_gib = args.memory_gib, "%.6g" % memory_gib
        try:
            cmd = command(args, ranks, os.path.join(work, "run"),
                          {"pipeline.cores": 2} if on_hosts else {}, on_hosts)
        finally:
            args.memory_gib = chosen
        cmd[cmd.index("train")] = "plan"
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode == 2 and "no pipeline layout fits" in p.stdout + p.stderr:
        return None
    if p.returncode != 0:
        sys.exit("pipetrain plan failed (%d):\n%s" % (p.returncode, (p.stdout + p.stderr)[-4000:]))
    layout = next((line for line in p.stdout.splitlines() if line.startswith("layout:")), "")
    one_stage = layout.startswith("layout: K = 1 stage") or re.search(r"K = 1 x D = \d+, M", p.stdout)
    return layout, bool(one_stage)


def pipeline_limit(args, ranks, on_hosts, env):
    """The largest pipeline.memory_gib, to 0.1%, under which no 1-stage
    layout of the unfrozen model fits on `ranks` ranks, and the plan there,
    which must be a pipeline of at least 2 stages."""
    lo, hi = 0.0005, 0.05
    top, bottom = plan(args, ranks, hi, on_hosts, env), plan(args, ranks, lo, on_hosts, env)
    if top is None or not top[1]:
        sys.exit("one stage does not fit even in %g GiB" % hi)
    if bottom is not None and bottom[1]:
        sys.exit("one stage fits already in %g GiB" % lo)
    while hi / lo > 1.001:
        mid = (lo * hi) ** 0.5
        r = plan(args, ranks, mid, on_hosts, env)
        if r is not None and r[1]:
            hi = mid
        else:
            lo = mid
    r = plan(args, ranks, lo, on_hosts, env)
    if r is None:
        sys.exit("on %d ranks no layout fits below %.6g GiB, where one stage does" % (ranks, hi))
    if r[1] or not re.match(r"layout: K = ([2-9]|\d\d+) stages", r[0]):
        sys.exit("at %.6g GiB the plan is not a pipeline of 2 or more stages: %s" % (lo, r[0]))
    return "%.6g" % lo, r[0]


def records(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def train(args, work, name, ranks, extra, on_hosts, env):
    run_dir = os.path.join(work, name.replace(" ", "_").replace("+", "").replace("(", "").replace(")", ""))
    start = time.time()
    p = subprocess.run(command(args, ranks, run_dir, extra, on_hosts), cwd=ROOT, env=env,
                       capture_output=True, text=True)
    wall = time.time() - start
    if p.returncode != 0:
        sys.exit("%s failed (%d):\n%s" % (name, p.returncode, (p.stdout + p.stderr)[-4000:]))
    recs = records(run_dir)
    step_time = {r["step"]: r["time_s"] for r in recs if r["event"] == "step"}
    evals = [(step_time.get(r["step"], 0.0), r["test_accuracy"]) for r in recs if r["event"] == "eval"]
    epochs = [r for r in recs if r["event"] == "epoch"]
    replans = [r for r in recs if r["event"] == "replan"]
    return {"wall": wall, "acc": evals[-1][1], "evals": evals, "epochs": epochs, "replans": replans}


def overlap_measure(args, work, ranks, on_hosts, env):
    """Seconds per step of the all-reduce (in all, exposed) for K = 1 x D =
    ranks of the unfrozen model, with and without overlap."""
    out = {}
    for overlap in ("true", "false"):
        run_dir = os.path.join(work, "overlap-" + overlap)
        extra = {"pipeline.stages": 1, "pipeline.replicas": ranks, "pipeline.microbatches": 4,
                 "pipeline.overlap": overlap, "train.max_steps": 60, "train.eval_every": 0,
                 "train.eval_examples": 128, "pipeline.memory_gib": 0}
        cmd = command(args, ranks, run_dir, extra, on_hosts)
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        steps = [r for r in records(run_dir) if r["event"] == "step"][10:]  # after warm-up
        out[overlap] = (sum(r["allreduce_s"] for r in steps) / len(steps),
                        sum(r["allreduce_exposed_s"] for r in steps) / len(steps),
                        steps[0]["allreduce_bytes"])
    return out


def report(title, results, overlap):
    base = results["baseline (no freezing)"]
    print("\n## %s\n" % title)
    print("| run | wall (s) | test accuracy | time to baseline accuracy (s) | speedup |")
    print("| --- | --- | --- | --- | --- |")
    for name, r in results.items():
        reach = next((t for t, a in r["evals"] if a >= base["acc"]), None)
        print("| %s | %.1f | %.2f%% | %s | %.2fx |" % (name, r["wall"], 100 * r["acc"],
                                                  "%.1f" % reach if reach is not None else "not reached",
                                                  base["wall"] / r["wall"]))
    print("\nper epoch: seconds, samples/s, layout K x D, frozen blocks")
    for name, r in results.items():
        cells = ["%.1f s %.0f/s %dx%d [%d]" % (e["epoch_time_s"], 60000 / max(e["epoch_time_s"], 1e-9) // 1,
                                              e["stages"], e["replicas"], e["frozen_blocks"])
                 for e in r["epochs"]]
        print("- %s: %s" % (name, ", ".join(cells)))
    print("\ntransitions (re-plans after a freeze decision):")
    for name, r in results.items():
        for t in r["replans"]:
            print("- %s, step %d: %dx%d (M %d) -> %dx%d (M %d), %.2f MiB moved in %.3f s" % (
                name, t["step"], t["old"]["stages"], t["old"]["replicas"], t["old"]["micro"],
                t["new"]["stages"], t["new"]["replicas"], t["new"]["micro"], t["bytes_moved"] / 2**20,
                t["seconds"]))
    if overlap:
        print("\ngradient all-reduce of the unfrozen model, K = 1, %.2f MiB per rank and step:"
              % (overlap["true"][2] / 2**20))
        for k, label in (("true", "with overlap"), ("false", "without overlap")):
            print("- %s: %.1f ms per step in all, %.1f ms exposed" % (label, 1e3 * overlap[k][0],
                                                                   1e3 * overlap[k][1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipetrain")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--start", type=int, default=3)
    ap.add_argument("--alpha", default="0.3333333333")
    ap.add_argument("--memory-gib", default="auto")
    ap.add_argument("--hosts", action="store_true")
    ap.add_argument("--link", default="1gbit")
    ap.add_argument("--skip-local", action="store_true")
    args = ap.parse_args()
    auto = args.memory_gib == "auto"

    def choose_limit(ranks, on_hosts, env):
        if auto:
            args.memory_gib, layout = pipeline_limit(args, ranks, on_hosts, env)
            print("memory limit on %d ranks: %s GiB per rank, the largest under which one stage "
                  "does not fit (%s)" % (ranks, args.memory_gib, layout), flush=True)

    print("demo ViT, Fashion-MNIST, %d epochs, freeze schedule alpha %s from epoch %s, memory limit %s"
          % (args.epochs, args.alpha, args.start,
             "per rank count (below)" if auto else args.memory_gib + " GiB per rank"), flush=True)
    with tempfile.TemporaryDirectory(prefix="pt-ablation-", dir=os.environ.get("TMPDIR", "/tmp")) as work:
        if not args.skip_local:
            choose_limit(2, False, ENV)
            results = {}
            for name, extra in configs(args):
                results[name] = train(args, work, name, 2, extra, False, ENV)
                print("  %s: %.1f s, %.2f%%" % (name, results[name]["wall"], 100 * results[name]["acc"]),
                      flush=True)
            report("2 ranks on this machine, memory limit %s GiB" % args.memory_gib, results,
                   overlap_measure(args, work, 2, False, ENV))
        if args.hosts:
            env = dict(ENV, MNH_NAME="ptab%d" % os.getpid(), MNH_SLOTS="2")
            subprocess.run([HOSTS, "up", "2"], env=env, check=True)
            try:
                subprocess.run([HOSTS, "shape", args.link], env=env, check=True)
                choose_limit(4, True, env)  # on the hosts, as the runs below
                results = {}
                for name, extra in configs(args):
                    results[name] = train(args, work, "hosts-" + name, 4, dict(extra, **{"pipeline.cores": 2}),
                                          True, env)
                    print("  hosts, %s: %.1f s, %.2f%%" % (name, results[name]["wall"],
                                                          100 * results[name]["acc"]), flush=True)
                report("2 hosts x 2 ranks, link capped at %s, memory limit %s GiB" % (args.link, args.memory_gib),
                       results,
                       overlap_measure(args, work, 4, True, env))
            finally:
                subprocess.run([HOSTS, "down"], env=env)


if __name__ == "__main__":
    main()
