#!/usr/bin/env python3
"""Every update's learning rate equals torch.optim.lr_scheduler's.

For each schedule kind (constant, cosine, linear), several warm-up lengths
(none, 1, 3, as long as the run, longer than it) and min_lr 0 and > 0, a
short pipetrain run logs the rate of every update in metrics.jsonl; the same
schedule built from torch's LinearLR / ConstantLR / CosineAnnealingLR /
SequentialLR (tests/reference/model.py: lr_scheduler) and stepped once per
update gives the reference. Tolerance 1e-12 relative: torch computes the
rates recursively (each from the previous one), pipetrain in closed form,
and the two differ by a few ulps; anything else is a different schedule.
Also checked: the peak rate is used by exactly one update (when the run has
a warm-up of 2 or more steps and a decay; with 1, torch uses it twice), and no
update uses min_lr (the decay ends one past the last update, as torch's does).

usage: lr_schedule.py PIPETRAIN_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402

STEPS, BASE = 12, 0.01
CONFIG = """run: {{dir: {run}, threads: 1, seed: 2}}
model: {{kind: vit, dim: 8, layers: 1, heads: 2, patch: 7}}
data: {{kind: synthetic_images, synthetic_examples: 96}}
train: {{batch: 8, epochs: 1, lr: {base}, min_lr: {min_lr}, schedule: {kind}, warmup_steps: {warmup},
         eval_every: 0, eval_examples: 8}}
"""


def torch_rates(kind, warmup, min_lr):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=BASE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SequentialLR's own deprecation chatter
        sched = M.lr_scheduler(opt, min_lr, warmup, STEPS, kind)
        rates = []
        for _ in range(STEPS):
            rates.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
    return rates


def pipetrain_rates(binary, work, kind, warmup, min_lr):
    run = os.path.join(work, "%s-%d-%g" % (kind, warmup, min_lr))
    cfg = run + ".yaml"
    with open(cfg, "w") as f:
        f.write(CONFIG.format(run=run, base=BASE, min_lr=min_lr, kind=kind, warmup=warmup))
    p = subprocess.run([binary, "train", cfg], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("pipetrain failed (%d):\n%s" % (p.returncode, p.stderr))
    with open(os.path.join(run, "metrics.jsonl")) as f:
        steps = [r for r in map(json.loads, f) if r["event"] == "step"]
    return [r["lr"] for r in steps]


def main():
    binary = os.path.abspath(sys.argv[1])
    failures, cases = [], 0
    with tempfile.TemporaryDirectory(prefix="pt-lr-") as work:
        for kind in ("constant", "cosine", "linear"):
            for warmup in (0, 1, 3, STEPS, STEPS + 5):
                for min_lr in (0.0, 0.001):
                    if kind == "constant" and min_lr:
                        continue
                    cases += 1
                    want = torch_rates(kind, warmup, min_lr)
                    got = pipetrain_rates(binary, work, kind, warmup, min_lr)
                    what = "%s, warm-up %d, min_lr %g" % (kind, warmup, min_lr)
                    if len(got) != STEPS:
                        failures.append("%s: %d updates logged" % (what, len(got)))
                        continue
                    for s, (g, w) in enumerate(zip(got, want)):
                        if abs(g - w) > 1e-12 * abs(w):
                            failures.append("%s: update %d uses %.17g, torch %.17g" % (what, s, g, w))
                            break
                    if kind != "constant" and 1 < warmup < STEPS:
                        peak = sum(1 for g in got if abs(g - BASE) <= 1e-12 * BASE)
                        if peak != 1:
                            failures.append("%s: %d updates at the peak rate" % (what, peak))
                    if kind != "constant" and warmup < STEPS and min(got) <= min_lr:
                        failures.append("%s: an update uses min_lr" % what)
    for f in failures:
        print("FAIL", f)
    print("%d schedules, %d failed" % (cases, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
