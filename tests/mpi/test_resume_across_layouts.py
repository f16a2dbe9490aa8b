#!/usr/bin/env python3
"""A checkpoint saved with one pipeline layout resumes with any other.

Checkpoints are keyed by unit, not by rank, so a run stopped at step 8 with
K stages and resumed with K' stages must end at step 16 with the same
weights and per-step losses as a run that never stopped (1e-5 relative; in
practice bit-identical). Covered: 2 -> 1, 1 -> 4, 4 -> 2, 3 -> 1 and back 1 -> 3.

A resume on another number of ranks with pipeline.profile: the checkpoint's
own measurements (2 ranks) do not fit 3 ranks, so the given profile of 3
ranks is planned from (it used to be ignored for measuring again): the
resumed run's profile.json holds that file's unit costs, and two such
resumes are bit-identical.

The same resume when the checkpoint has a frozen prefix and the given
profile is of another world too: refused naming pipeline.profile, on every
rank (it was taken for the planner's no-layout-fits and planned without
costs).

Another directory's checkpoint resumed on 2 stages whose save in run.dir
fails on rank 1 (which writes its own units): run.dir's own step moved to
abandoned/ first, and RUN_DIR/resuming, written by rank 0, names the
checkpoint until the save is done; the next `auto` on 2 stages resumes it
(before: run.dir held no checkpoint, and auto started fresh), and ends with
the losses and bits of the resume whose save never failed.

A go-back on 2 ranks while another process reads the step it moves to
abandoned/: rank 0 waits for the read, busy to rank 1's question, and rank
1 waits on under a run.timeout_s shorter than that wait.

usage: test_resume_across_layouts.py PIPETRAIN MPIEXEC"""
import fcntl
import glob
import json
import os
import shutil
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

CONFIG = "configs/vit_fmnist.yaml"
TOL = 1e-5
COMMON = dict(train__eval_examples=64, train__checkpoint_every=8, pipeline__microbatches=4, run__threads=1)


def profile_beside_checkpoint(tools, work):
    auto = dict(COMMON, pipeline__microbatches="auto")
    saved = os.path.join(work, "saved-on-2")
    tools.run(2, ["train", CONFIG] + h.sets(run__dir=saved, train__max_steps=8, **auto))
    measured = os.path.join(work, "measured-on-3")
    tools.run(3, ["train", CONFIG] + h.sets(run__dir=measured, train__max_steps=1, **auto))
    given = os.path.join(measured, "profile.json")
    runs = []
    for name in ("resumed-a", "resumed-b"):
        run_dir = os.path.join(work, name)
        shutil.copytree(os.path.join(saved, "checkpoints"), os.path.join(run_dir, "checkpoints"))
        _, _, out = tools.run(3, ["train", CONFIG] + h.sets(run__dir=run_dir, train__max_steps=16,
                                                             train__resume="auto",
                                                             pipeline__profile=given, **auto))
        if "planning from pipeline.profile's" not in out:
            print("FAIL profile beside a checkpoint: no note of planning from pipeline.profile:\n"
                  + out[-2000:])
            return ["profile beside checkpoint"]
        with open(given) as f, open(os.path.join(run_dir, "profile.json")) as g:
            want, got = json.load(f)["costs"], json.load(g)["costs"]
        if want != got:
            print("FAIL profile beside a checkpoint: %s planned from other unit costs than %s"
                  % (name, given))
            return ["profile beside checkpoint"]
        runs.append((h.step_losses(run_dir), tools.export(h.latest_checkpoint(run_dir), run_dir + ".st")))
    (la, wa), (lb, wb) = runs
    if la != lb or any(not (wa[k] == wb[k]).all() for k in wa):
        print("FAIL profile beside a checkpoint: two resumes from pipeline.profile differ")
        return ["profile beside checkpoint"]
    print("ok   a resume on 3 ranks of a 2-rank checkpoint plans from pipeline.profile, bit-identical twice")
    return []


def frozen_checkpoint_other_world_profile(tools, work):
    freeze = dict(COMMON, pipeline__microbatches="auto", freeze__policy="schedule",
                  freeze__unit="step", freeze__start=4, freeze__every=4, cache__enabled="true")
    saved = os.path.join(work, "frozen-on-2")
    tools.run(2, ["train", CONFIG] + h.sets(run__dir=saved, train__max_steps=8, **freeze))
    run_dir = os.path.join(work, "frozen-on-3")
    given = os.path.join(saved, "profile.json")  # measured on 2 ranks, as the checkpoint's own
    rc, _, out = tools.run(3, ["train", CONFIG] + h.sets(
        run__dir=run_dir, train__max_steps=16, pipeline__profile=given,
        train__resume=h.latest_checkpoint(saved), **freeze), timeout=300, check=False)
    want = ["pipeline.profile", "measured on another world", "2 ranks, this run has 3"]
    if rc == 0 or any(w not in out for w in want) or "resumed at step" in out:
        print("FAIL a frozen checkpoint resumed on 3 ranks with a 2-rank pipeline.profile: "
              "exit %d, expected a refusal naming %s:\n%s" % (rc, want, out[-2000:]))
        return ["frozen checkpoint, profile of another world"]
    print("ok   a frozen checkpoint on 3 ranks refuses a 2-rank pipeline.profile")
    return []


def foreign_save_fails_on_rank1(tools, work, straight):
    two = dict(COMMON, pipeline__stages=2)
    other = os.path.join(work, "other-history")
    tools.run(2, ["train", CONFIG] + h.sets(run__dir=other, train__max_steps=8, train__lr=0.002, **two))
    ref = other + "-ref"
    shutil.copytree(other, ref)
    from_ckpt = os.path.join(straight, "checkpoints", "step_%010d" % 8)
    tools.run(2, ["train", CONFIG] + h.sets(run__dir=ref, train__max_steps=12, train__resume=from_ckpt,
                                             **two))
    rc, _, out = tools.run(2, ["train", CONFIG] + h.sets(run__dir=other, train__max_steps=12,
                                                          train__resume=from_ckpt, **two),
                           env={"PIPETRAIN_TEST_FAULT": "1:8:error:checkpoint-writing"}, check=False)
    marker = os.path.join(other, "resuming")
    if rc != 1 or not os.path.isfile(marker):
        print("FAIL a resume whose save fails on rank 1: exit %d, %s %s:\n%s"
              % (rc, marker, "there" if os.path.isfile(marker) else "missing", out[-2000:]))
        return ["foreign save failing on rank 1"]
    _, _, out = tools.run(2, ["train", CONFIG] + h.sets(run__dir=other, train__max_steps=12,
                                                         train__resume="auto", **two))
    if "resumed at step 8" not in out or os.path.exists(marker):
        print("FAIL auto after the failed save did not resume the other run's step 8 (or left %s):\n%s"
              % (marker, out[-2000:]))
        return ["foreign save failing on rank 1"]
    la, wa = h.step_losses(ref), tools.export(h.latest_checkpoint(ref), ref + ".st")
    lb, wb = h.step_losses(other), tools.export(h.latest_checkpoint(other), other + ".st")
    if la != lb or len(la) != 12 or any(not (wa[k] == wb[k]).all() for k in wa):
        print("FAIL auto after the failed save differs from the resume whose save did not fail")
        return ["foreign save failing on rank 1"]
    print("ok   another directory's checkpoint whose save fails on rank 1: auto resumes it, bit-identical")
    return []


def go_back_while_read_short_timeout(tools, work):
    """A resume of step 4 on 2 ranks whose later step 8 another process
    reads (it holds the manifest for 8 s from before the start): rank 0
    waits for the read to end before it moves step 8 to abandoned/, and
    says it is busy while it waits, so rank 1, waiting for it under a
    run.timeout_s of 3 s, waits on. Rank 1 used to give up after the
    timeout ("rank 0 is in no wait")."""
    quick = dict(COMMON, train__checkpoint_every=4)
    run_dir = os.path.join(work, "go-back-while-read")
    tools.run(2, ["train", CONFIG] + h.sets(run__dir=run_dir, train__max_steps=8, **quick))
    step = lambda s: os.path.join(run_dir, "checkpoints", "step_%010d" % s)
    fd = os.open(os.path.join(step(8), "manifest"), os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    timer = threading.Timer(8, os.close, (fd,))
    timer.start()
    try:
        rc, seconds, out = tools.run(2, ["train", CONFIG] + h.sets(
            run__dir=run_dir, train__max_steps=10, train__resume=step(4), run__timeout_s=3,
            **quick), check=False)
    finally:
        timer.join()
    moved = glob.glob(os.path.join(run_dir, "abandoned", "after-step_0000000004.*", "step_%010d" % 8))
    if rc != 0 or "1 later checkpoint" not in out or len(moved) != 1 or seconds < 8:
        print("FAIL go-back while read: exit %d after %.1f s, step 8 moved to %s:\n%s"
              % (rc, seconds, moved, out[-2000:]))
        return ["go-back while read"]
    return []


def main():
    tools = h.Tools(sys.argv)
    failures = []
    with tempfile.TemporaryDirectory(prefix="pt-resume-") as work:
        straight = os.path.join(work, "straight")
        tools.run(1, ["train", CONFIG] + h.sets(run__dir=straight, train__max_steps=16, **COMMON))
        base = (h.step_losses(straight), tools.export(h.latest_checkpoint(straight), straight + ".st"))
        for first, second in ((2, 1), (1, 4), (4, 2), (3, 1), (1, 3)):
            run_dir = os.path.join(work, "k%d-k%d" % (first, second))
            tools.run(first, ["train", CONFIG] + h.sets(run__dir=run_dir, train__max_steps=8,
                                                         pipeline__stages=first, **COMMON))
            tools.run(second, ["train", CONFIG] + h.sets(run__dir=run_dir, train__max_steps=16,
                                                          train__resume="auto", pipeline__stages=second,
                                                          **COMMON))
            got = (h.step_losses(run_dir), tools.export(h.latest_checkpoint(run_dir), run_dir + ".st"))
            worst, _ = h.compare_runs("K=%d to step 8, then K=%d to 16" % (first, second), base[0], base[1],
                                      got[0], got[1], TOL)
            if not worst <= TOL:
                failures.append("%d->%d" % (first, second))
        failures += profile_beside_checkpoint(tools, work)
        failures += frozen_checkpoint_other_world_profile(tools, work)
        failures += foreign_save_fails_on_rank1(tools, work, straight)
        failures += go_back_while_read_short_timeout(tools, work)
    if failures:
        sys.exit("FAILED: " + ", ".join(failures))
    print("resume across layouts: passed")


if __name__ == "__main__":
    main()
