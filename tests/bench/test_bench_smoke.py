#!/usr/bin/env python3
"""The bench/ scripts still run: each in its smallest mode, against the
binary under test, must exit 0 and print the table and the ratio against
its baseline that its docstring promises. Their numbers are not checked
(a smoke run measures nothing); what this catches is a script left behind
by a change of the binary's output, metrics or flags.

Run here: torch_speed (--quick --no-pypi, the demo ViT and the MiniLM
fine-tuning: nothing is downloaded), op_breakdown --quick, compare_builds (the binary against
itself), pipeline_speed (K = 1 and 2), bert_freeze on 128 verses for 2 epochs (the
baseline, one schedule and a frozen bottom, for 2 training seeds, each also evaluated on 64
held-out verses, the freezing runs at a peak learning rate of their own; needs datasets/ from scripts/setup.sh, as torch_speed's
minilm does; its --quick takes a minute). Left
out for their length or their needs: freeze_speed, elastic_ablation,
steady_speed (minutes even in their quick modes), gpt2_gpu and gpu_kernels
(a GPU).

usage: test_bench_smoke.py PIPETRAIN"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable  # Debian's python3, which has its torch
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    bench = os.path.join(ROOT, "bench")
    tmp = tempfile.TemporaryDirectory(prefix="pt-bench-smoke-")
    work = tmp.name
    cases = [
        ("torch_speed", [PY, os.path.join(bench, "torch_speed.py"), binary, "--quick", "--no-pypi",
                         "--models", "demo,minilm"],
         [r"\| demo \| 1 \| 305034 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|",
          r"\| minilm \| 1 \| 22568456 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|", r"min ratio [0-9.]+"]),
        ("op_breakdown", [PY, os.path.join(bench, "op_breakdown.py"), binary, "--quick"],
         [r"\| op \| shape \| calls/step", r"\| linear_fwd \|"]),
        ("compare_builds", [PY, os.path.join(bench, "compare_builds.py"), binary, binary, "--model", "demo",
                            "--threads", "1", "--rounds", "1", "--steps", "2", "--warmup", "1"],
         [r"median of the rounds' A / B: [0-9.]+"]),
        ("pipeline_speed", [PY, os.path.join(bench, "pipeline_speed.py"), binary, "--stages", "1,2",
                            "--steps", "8"],
         [r"\n\| 1 \| [0-9.]+ \| 1\.000 \|", r"\n\| 2 \| [0-9.]+ / [0-9.]+ \| [0-9.]+ \|"]),
        ("bert_freeze", [PY, os.path.join(bench, "bert_freeze.py"), binary, "--train", "128", "--test", "64",
                         "--epochs", "2", "--context", "16", "--alphas", "0.5", "--auto-alpha", "",
                         "--nocache-alpha", "", "--bottom", "2", "--threads", "1", "--holdout", "64",
                         "--seeds", "1,2", "--lr", "5e-5", "--freeze-lr", "1e-4",
                         "--out", os.path.join(work, "bert_freeze")],
         [r"\| baseline \(no freezing\) \| [0-9.]+% \| 1\.00x \|", r"\| 0\.5 \| [0-9.]+% \| [0-9.]+x \|",
          r"held-out verses: accuracy [0-9.]+% \(64 verses",
          r"\| [0-9.]+% \| \+0\.00 \(0\.00\) \|\n\| schedule 0\.5, cache, lr 1e-4 \|.*\| [0-9.]+% \| [-+][0-9.]+ \([0-9.]+\) \|",
          r"target \(>= 2\.5x end to end, <= 0\.3 point below the baseline's accuracy on the held-out verses",
          r"training seed 2 \(run\.seed\):",
          r"across 2 training seeds \(1, 2\), each run against the baseline of its seed:",
          r"\| bottom 2 frozen from the start, cache, lr 1e-4 \| [0-9.]+x \| [-+][0-9.]+ [-+][0-9.]+ \| [-+][0-9.]+ \| "
          r"[0-9.]+ \| [0-9.]+ \| [0-9.]+ \|",
          r"target across the seeds \(>= 2\.5x mean speedup, mean difference <= 0\.3 point below the baseline, "
          r"held out; SE: both\)"]),
    ]
    failed = []
    for name, cmd, wants in cases:
        t0 = time.time()
        r = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
        missing = [w for w in wants if not re.search(w, r.stdout)]
        if name == "bert_freeze" and r.returncode == 0:
            missing += seeds_differ(os.path.join(work, "bert_freeze", "results.json"))
            missing += peak_lrs(os.path.join(work, "bert_freeze"))
        ok = r.returncode == 0 and not missing
        print("%s %-15s %5.1f s%s" % ("ok  " if ok else "FAIL", name, time.time() - t0,
                                      "" if ok else "  exit %d, missing %s" % (r.returncode, missing)),
              flush=True)
        if not ok:
            print(r.stdout[-3000:] + r.stderr[-3000:])
            failed.append(name)
    tmp.cleanup()
    if failed:
        sys.exit("FAILED: " + ", ".join(failed))
    print("bench smoke: passed")


def seeds_differ(results):
    """bert_freeze --seeds 1,2 trained each setting under both seeds: the two
    baselines' test losses differ (the seed reached pipetrain), and every run
    says its seed. What is wrong, as a list."""
    with open(results) as f:
        runs = json.load(f)["runs"]
    base = {r["seed"]: [e["loss"] for e in r["evals"]] for r in runs if r["setting"] == "baseline"}
    wrong = []
    if sorted(base) != [1, 2] or sorted(r["seed"] for r in runs) != [1, 1, 1, 2, 2, 2]:
        wrong.append("runs of seeds 1 and 2 in results.json (got %s)" % [r["seed"] for r in runs])
    elif base[1] == base[2]:
        wrong.append("baselines of seeds 1 and 2 with different test losses (both %s)" % base[1])
    return wrong


def peak_lrs(out):
    """bert_freeze --lr 5e-5 --freeze-lr 1e-4: every freezing run stepped at
    twice its seed's baseline's learning rate, step by step (the step records'
    lr in each run's metrics.jsonl: the same schedule, another peak). What is
    wrong, as a list."""
    wrong, lrs = [], {}
    with open(os.path.join(out, "results.json")) as f:
        runs = json.load(f)["runs"]
    for r in runs:
        with open(os.path.join(out, "runs", r["slug"], "metrics.jsonl")) as f:
            lrs[r["slug"]] = [json.loads(l)["lr"] for l in f if '"event": "step"' in l]
    for r in runs:
        base = lrs[[b["slug"] for b in runs if b["setting"] == "baseline" and b["seed"] == r["seed"]][0]]
        want = base if r["setting"] == "baseline" else [2 * x for x in base]
        got = lrs[r["slug"]]
        if not got or len(got) != len(want) or any(abs(a - b) > 1e-9 * b for a, b in zip(got, want)):
            wrong.append("%s stepped at lr %s, not %s" % (r["slug"], got[:4], want[:4]))
    return wrong


if __name__ == "__main__":
    main()

