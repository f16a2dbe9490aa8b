#!/usr/bin/env python3
"""mpi_plan_idle: when the plan leaves ranks idle that could have formed
more replicas of its pipeline, `plan` says why, and the reason is the one
its own runners-up show.

It used to give one reason for every such plan, "pipeline.replicas, or too
few examples per step for more", also when neither held: replicas left to
the planner and a batch with examples for all of them, but more replicas
not fitting in pipeline.memory_gib, or predicted slower.

On 5 ranks of one node, a small BERT (whose weights, with their gradients,
moments and the all-reduce's receive buffers, outweigh its activations, so
that more replicas need more memory), planning from one profile (measured
by a 1-step training run, then pinned with pipeline.profile):
  - pipeline.replicas fixed at 2: the reason names pipeline.replicas;
  - one stage and pipeline.microbatches fixed at 6 of a batch of 11: a
    second replica would get 5 examples, so more replicas "would get fewer
    examples than pipeline.microbatches" (not "do not fit in the memory
    limit", which raising the limit would not change);
  - a sweep of memory limits, with the profile's link bandwidth lowered to
    10 MB/s so that stage-to-stage transfers make every pipeline slower
    than one stage: every plan that leaves such ranks idle gives
    a reason its runners-up bear out ("do not fit": every runner-up of the
    same stages with more replicas does not fit, and there is one; "predicted
    slower": one of them is priced slower), and at least one of the limits
    gives "do not fit";
  - the profile's link latency raised to 20 ms, so that every all-reduce
    costs more than the step it saves: more replicas are "predicted slower",
    which the runners-up show.

usage: test_plan_idle.py PIPETRAIN MPIEXEC"""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402

CONFIG = """run: {{dir: {run}, seed: 6, threads: 1}}
model: {{kind: bert, dim: 10, layers: 4, heads: 5, mlp_hidden: 11, context: 7, positions: 9,
        vocab: {vocab}, classes: 3}}
data: {{{data}}}
train: {{batch: 11, epochs: 1, max_steps: 1, eval_every: 0}}
pipeline: {{cores: 5}}
"""
RANKS = 5
OLD = "too few examples per step for more"


def plan(tools, cfg, **kv):
    rc, _, out = tools.run(RANKS, ["plan", cfg] + H.sets(**kv), check=False)
    return rc, out


def reason(out):
    """(chosen replicas, stages, the why line's reason) or None when no
    rank that could form a replica is idle."""
    m = re.search(r"^  why: (\d+) replicas? of the (\d+) the ranks could form: (.*)$", out, re.M)
    lay = re.search(r"^layout: K = (\d+) stages? x D = (\d+)", out, re.M)
    if not m or not lay:
        return None
    return int(lay.group(2)), int(lay.group(1)), m.group(3)


def more_replicas(out, stages, replicas):
    """The runners-up lines of the same stages with more replicas."""
    lines = []
    for line in out.splitlines():
        m = re.match(r"^  K = (\d+) x D = (\d+)", line)
        if m and int(m.group(1)) == stages and int(m.group(2)) > replicas:
            lines.append(line)
    return lines


def consistent(name, out):
    """Failures of the why line against the runners-up; the reason."""
    if OLD in out:
        return ["%s: the old reason:\n%s" % (name, out)], None
    r = reason(out)
    if r is None:
        return [], None
    replicas, stages, why = r
    alts = more_replicas(out, stages, replicas)
    bad = []
    if why.startswith("more do not fit"):
        if not alts or any("does not fit" not in a for a in alts):
            bad.append("%s: says more replicas do not fit, runners-up: %s\n%s" % (name, alts, out))
    elif why.startswith("more would get fewer examples"):
        if not alts or any("micro-batches do not fit a replica's" not in a for a in alts):
            bad.append("%s: says more replicas lack examples, runners-up: %s\n%s" % (name, alts, out))
    elif why.startswith("more are predicted slower (the runners-up above)"):
        if not any("slower" in a for a in alts):
            bad.append("%s: says more replicas are slower, runners-up: %s\n%s" % (name, alts, out))
    return bad, why


def main():
    tools = H.Tools(sys.argv)
    failures = []
    with tempfile.TemporaryDirectory(prefix="pt-plan-idle-") as work:
        cfg = os.path.join(work, "c.yaml")
        data, vocab = H.bert_data(work, 44, 11, seed=3)
        with open(cfg, "w") as f:
            f.write(CONFIG.format(run=os.path.join(work, "measure"), data=data, vocab=vocab))
        tools.run(RANKS, ["train", cfg])  # its profile.json: the plans below use it
        profile = os.path.join(work, "measure", "profile.json")

        rc, out = plan(tools, cfg, pipeline__profile=profile, pipeline__stages="1",
                       pipeline__replicas="2")
        r = reason(out)
        if rc != 0 or r is None or r[2] != "pipeline.replicas fixes the count":
            failures.append("fixed replicas: exit %d, reason %s\n%s" % (rc, r, out))
        print("fixed replicas: %s" % (r,), flush=True)

        rc, out = plan(tools, cfg, pipeline__profile=profile, pipeline__stages="1",
                       pipeline__microbatches="6")
        bad, why = consistent("fixed micro-batches", out)
        failures += bad
        if rc != 0 or why != "more would get fewer examples than pipeline.microbatches (the runners-up above)":
            failures.append("fixed micro-batches: exit %d, reason %s\n%s" % (rc, why, out))
        print("fixed micro-batches: exit %d, %s" % (rc, why), flush=True)

        def pinned(name, **links):
            with open(profile) as f:
                p = json.load(f)
            p["links"].update(links)
            path = os.path.join(work, name + ".json")
            with open(path, "w") as f:
                json.dump(p, f)
            return path

        narrow = pinned("narrow-links", intra_bytes_per_s=1e7)
        seen = set()
        for gib in ("0.00004", "0.00006", "0.00008", "0.0001", "0.00012", "0.00015", "0.0002",
                    "0.0003"):
            rc, out = plan(tools, cfg, pipeline__profile=narrow, pipeline__memory_gib=gib)
            bad, why = consistent("memory %s" % gib, out)
            failures += bad
            if why:
                seen.add(why.split(" (")[0])
            print("memory %s GiB: exit %d, %s" % (gib, rc, why or "no idle rank that could be a replica"),
                  flush=True)
        if "more do not fit in the memory limit" not in seen:
            failures.append("no memory limit of the sweep left replicas out for memory: %s" % seen)

        rc, out = plan(tools, cfg, pipeline__profile=pinned("slow-links", latency_s=0.02))
        bad, why = consistent("slow links", out)
        failures += bad
        if rc != 0 or why != "more are predicted slower (the runners-up above)":
            failures.append("slow links: exit %d, reason %s\n%s" % (rc, why, out))
        print("slow links: exit %d, %s" % (rc, why), flush=True)
    for f in failures:
        print("FAIL: " + f)
    if failures:
        sys.exit(1)
    print("mpi_plan_idle: all passed")


if __name__ == "__main__":
    main()
