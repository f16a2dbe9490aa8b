#!/usr/bin/env python3
"""Rank 0 profiles the units while the other ranks wait for the costs: a
wait that run.timeout_s bounds, as every wait for another rank is. The
whole profile of a large model takes minutes (every unit at two micro-batch
sizes, at least 4 runs each), longer than the default 600 s for a large
enough model on the CPU, and the other ranks gave up on rank 0 as one that
"stopped answering" while it was timing its units. Now rank 0 tells them
after each unit, so only one unit's timing has to fit in run.timeout_s.

Checked on 2 ranks with a ViT of 242 small units (d = 160) whose profile
takes several seconds, under run.timeout_s = 3: it profiles, plans and
trains. The profile it records says how long the timing took at least
(each unit's forward and backward at two sizes, 3 timed runs each): that
must exceed the limit, or the run tested nothing. The units are small
enough that one unit's timing (a warm-up and at least 3 timed runs at each
of two sizes) stays far below 3 s on a loaded machine: with d = 512 a unit
took about 1.2 s unloaded and over 3 s when the ranks shared the cores with
another test's processes.

usage: test_profile_wait.py PIPETRAIN MPIEXEC"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

CONFIG = """run: {{dir: {run}, seed: 5, threads: 1, timeout_s: 3}}
model: {{kind: vit, dim: 160, layers: 120, heads: 8, patch: 7}}
data: {{kind: synthetic_images, synthetic_examples: 64}}
train: {{batch: 32, epochs: 1, max_steps: 1, eval_every: 0, eval_examples: 4}}
pipeline: {{cores: 2}}
"""


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
        if not ok:
            print("FAILED: 1 check")
            return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("profile wait: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
