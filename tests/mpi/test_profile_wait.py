#!/usr/bin/env python3
"""Rank 0 profiles the units while the other ranks wait for the costs: a
wait that run.timeout_s bounds, as every wait for another rank is. The
whole profile of a large model takes minutes (every unit at two micro-batch
sizes, at least 4 runs each), longer than the default 600 s for a large
enough model on the CPU, and the other ranks gave up on rank 0 as one that
"stopped answering" while it was timing its units. Now rank 0 tells them
after each unit, so only one unit's timing has to fit in run.timeout_s.

Checked on 2 ranks with a ViT of 402 small units (d = 160) whose profile
takes several seconds, under run.timeout_s = 3: it profiles, plans and
trains. The profile it records says how long the timing took at least
(each unit's forward and backward at two sizes, 3 timed runs each): that
must exceed the limit, or the run tested nothing. The units are small
enough that one unit's timing (a warm-up and at least 3 timed runs at each
of two sizes) stays far below 3 s on a loaded machine: with d = 512 a unit
took about 1.2 s unloaded and over 3 s when the ranks shared the cores with
another test's processes.

The same for an evaluation: ranks that evaluate nothing (an idle rank
beside a one-rank layout; with --logits, every replica but replica 0)
waited for the whole test pass in one agreement, and gave up on the others
once it took longer than run.timeout_s. Now every rank agrees once per
round of micro-batches. Checked on 2 ranks under run.timeout_s = 3: a
training run whose final evaluation of 10,000 test images takes several
seconds with rank 1 idle, then `eval --logits` of that checkpoint on 2
replicas; the pass alone (one process, all the test images against 8 of
them) must take longer than the limit, or the run tested nothing.

usage: test_profile_wait.py PIPETRAIN MPIEXEC"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

CONFIG = """run: {{dir: {run}, seed: 5, threads: 1, timeout_s: 3}}
model: {{kind: vit, dim: 160, layers: 200, heads: 8, patch: 7}}
data: {{kind: synthetic_images, synthetic_examples: 64}}
train: {{batch: 32, epochs: 1, max_steps: 1, eval_every: 0, eval_examples: 4}}
pipeline: {{cores: 2}}
"""

EVAL_CONFIG = """run: {{dir: {run}, seed: 5, threads: 1, timeout_s: 3}}
model: {{kind: vit, dim: 96, layers: 6, heads: 4, patch: 4}}
data: {{kind: synthetic_images, synthetic_examples: 40000}}
train: {{batch: 8, epochs: 1, max_steps: 2, eval_every: 0}}
pipeline: {{stages: 1, replicas: 1, microbatches: 1}}
"""


def eval_waits(tools, work):
    """The checks of an evaluation longer than run.timeout_s; failures."""
    run_dir = os.path.join(work, "eval-run")
    config = os.path.join(work, "e.yaml")
    with open(config, "w") as f:
        f.write(EVAL_CONFIG.format(run=run_dir))
    failed = 0
    rc, took, out = tools.run(2, ["train", config], check=False, timeout=600)
    ok = rc == 0 and "(10000 examples)" in out
    print("  %s: 2 ranks, rank 1 idle, train and evaluate 10,000 test images under run.timeout_s = 3 "
          "(%d, %.1f s)%s" % ("ok" if ok else "FAIL", rc, took, "" if ok else "\n" + out[-2000:]))
    failed += not ok
    logits = os.path.join(work, "logits.safetensors")
    rc, took, out = tools.run(2, ["eval", config, "--set", "pipeline.replicas=2", "--logits", logits],
                              check=False, timeout=600)
    ok = rc == 0 and os.path.isfile(logits)
    print("  %s: eval --logits on 2 replicas, replica 1 evaluating nothing (%d, %.1f s)%s"
          % ("ok" if ok else "FAIL", rc, took, "" if ok else "\n" + out[-2000:]))
    failed += not ok
    # the pass alone: training's evaluation of all the test images against
    # one of 8, one process each
    times = []
    for n in (0, 8):
        extra = ["--set", "train.eval_examples=%d" % n] if n else []
        rc, took, out = tools.run(1, ["train", config, "--set", "run.dir=" + run_dir + "-%d" % n] + extra,
                                  check=False, timeout=600)
        times.append(took if rc == 0 else float("nan"))
    ok = times[0] - times[1] > 3
    print("  %s: the pass alone took %.1f s, past run.timeout_s = 3" % ("ok" if ok else "FAIL",
                                                                        times[0] - times[1]))
    return failed + (not ok)


def main():
    tools = h.Tools(sys.argv)
    work = tempfile.mkdtemp(prefix="pt-profile-wait-")
    try:
        run_dir = os.path.join(work, "run")
        config = os.path.join(work, "c.yaml")
        with open(config, "w") as f:
            f.write(CONFIG.format(run=run_dir))
        rc, took, out = tools.run(2, ["train", config], check=False, timeout=600)
        ok = rc == 0 and os.path.isfile(os.path.join(run_dir, "profile.json"))
        print("  %s: 2 ranks profile and train under run.timeout_s = 3 (%d, %.1f s)%s"
              % ("ok" if ok else "FAIL", rc, took, "" if ok else "\n" + out[-2000:]))
        if ok:
            with open(os.path.join(run_dir, "profile.json")) as f:
                units = json.load(f)["costs"]["units"]
            least = 3 * sum(sum(u["fwd"]) + sum(u["bwd"]) for u in units)
            ok = least > 3
            print("  %s: the profile took at least %.1f s, past run.timeout_s = 3"
                  % ("ok" if ok else "FAIL", least))
        failed = (not ok) + eval_waits(tools, work)
        if failed:
            print("FAILED: %d check%s" % (failed, "" if failed == 1 else "s"))
            return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("profile wait: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
