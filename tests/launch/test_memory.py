#!/usr/bin/env python3
"""The memory a layout is counted at against what a run takes: a run that a
memory limit (pipeline.memory_gib) lets through must not grow past it.

Frozen blocks count too: their forwards' work area, once per stage, and
the timing of the units, which is sized to fit the limit.

A run's growth is its peak resident set (os.wait4's ru_maxrss) less that of
the same data and command with a model too small to count (the process, the
data set and the code a step runs). The margins are the census's (README,
"Running on several ranks and machines"): a limit 19% above a run's count
lets it through and holds its growth, and the old count was 9% below the
growth of the run that must now be refused.

Usage: test_memory.py PIPETRAIN_BINARY"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import check, main, render, write  # noqa: E402

MiB = 1 << 20


def peak_rss(h, name, keys):
    """(exit status, stderr, peak resident bytes) of `pipetrain train`."""
    cfg = write(h.path(name + ".yaml"), render(keys))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with open(h.path(name + ".err"), "w+") as err:
        p = subprocess.Popen([h.binary, "train", cfg], stdout=subprocess.DEVNULL, stderr=err,
                             env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read()
    return p.returncode, text, usage.ru_maxrss * 1024


def keys_of(h, name, model, **more):
    keys = {"run.dir": h.path("run_" + name), "run.seed": "1", "run.threads": "1",
            "data.synthetic_examples": "64", "train.batch": "16", "train.max_steps": "2",
            "train.eval_examples": "2", "train.log_every": "1"}
    keys.update(model)
    keys.update(more)
    return keys


GPT = {"model.kind": "gpt", "model.dim": "192", "model.layers": "4", "model.heads": "4",
       "model.context": "128", "data.kind": "synthetic_text", "sample.length": "0"}
GPT_TINY = dict(GPT, **{"model.dim": "4", "model.layers": "1", "model.heads": "1"})
VIT = {"model.kind": "vit", "model.dim": "256", "model.layers": "4", "model.heads": "4",
       "model.patch": "4", "model.classes": "10", "data.kind": "synthetic_images",
       "data.image_size": "28"}
VIT_TINY = dict(VIT, **{"model.dim": "4", "model.layers": "1", "model.heads": "1"})


def baseline(h, name, tiny):
    rc, err, rss = peak_rss(h, name + "_base", keys_of(h, name + "_base", tiny, **{
        "train.batch": "1", "train.max_steps": "1", "pipeline.microbatches": "1"}))
    check(rc == 0, "the baseline run failed:\n%s", err[-2000:])
    return rss


def growth_within(h, name, model, tiny, limit_mib, **more):
    """Runs `model` under pipeline.memory_gib = limit_mib MiB: (exit status,
    stderr, growth in bytes or None when refused)."""
    base = baseline(h, name, tiny)
    keys = keys_of(h, name, model, **{"pipeline.memory_gib": "%.6f" % (limit_mib / 1024.0)})
    keys.update(more)
    rc, err, rss = peak_rss(h, name, keys)
    return rc, err, (rss - base) if rc == 0 else None


def test_one_stage_under_its_limit(h):
    # one process, one micro-batch of 16 examples (launch/memory.c's count):
    # the old count (parameters, moments and one micro-batch's saved
    # activations) took this gpt at about 145 MiB and let it through a
    # 150 MiB limit, which it grew past by about 8 MiB; now it is counted at
    # about 159 MiB (the outputs passed between units and the gradient
    # buffers too) and refused, naming train.batch
    rc, err, grew = growth_within(h, "gpt_tight", GPT, GPT_TINY, 150,
                                  **{"pipeline.microbatches": "1"})
    if rc == 0:
        check(grew <= 150 * MiB, "accepted under a 150 MiB limit, but grew by %.1f MiB",
              grew / MiB)
    else:
        check(rc == 2 and "train.batch" in err, "refused, but not naming train.batch (%d):\n%s",
              rc, err[-2000:])
    # a limit with room above the count: it runs, and within it
    rc, err, grew = growth_within(h, "gpt_room", GPT, GPT_TINY, 190,
                                  **{"pipeline.microbatches": "1"})
    check(rc == 0, "refused under 190 MiB, 19%% above its count (%d):\n%s", rc, err[-2000:])
    check(grew <= 190 * MiB, "grew by %.1f MiB under a 190 MiB limit", grew / MiB)
    return "grew %.1f MiB" % (grew / MiB)


def test_planned_under_its_limit(h):
    # one process with the micro-batches left to the planner under a limit
    # (balance/plan.c's count): whatever it picks grows within the limit
    rc, err, grew = growth_within(h, "vit_planned", VIT, VIT_TINY, 90)
    check(rc == 0, "no layout under 90 MiB (%d):\n%s", rc, err[-2000:])
    check(grew <= 90 * MiB, "planned under a 90 MiB limit, but grew by %.1f MiB", grew / MiB)
    return "grew %.1f MiB" % (grew / MiB)


def test_resume_under_its_limit(h):
    # a resume holds what the run it continues held: the checkpoint's unit
    # files (parameters and both moments, 3x the parameters) were mapped
    # and read whole, and sat in the resident set beside the training state
    # (this vit grew by 61.5 MiB fresh and by 97.8 MiB resumed, past a
    # 70 MiB limit the fresh run keeps to)
    base = baseline(h, "vit_resume", VIT_TINY)
    keys = keys_of(h, "vit_resume", VIT, **{"pipeline.memory_gib": "%.6f" % (70 / 1024.0),
                                             "pipeline.microbatches": "1", "train.batch": "4"})
    rc, err, rss = peak_rss(h, "vit_resume_fresh", keys)
    check(rc == 0, "the fresh run failed (%d):\n%s", rc, err[-2000:])
    fresh = rss - base
    check(fresh <= 70 * MiB, "the fresh run grew by %.1f MiB under a 70 MiB limit", fresh / MiB)
    keys.update({"train.max_steps": "3", "train.resume": "auto"})
    rc, err, rss = peak_rss(h, "vit_resume_again", keys)
    check(rc == 0 and "resum" in err.lower(), "the resume failed (%d):\n%s", rc, err[-2000:])
    resumed = rss - base
    check(resumed <= 70 * MiB, "the resume grew by %.1f MiB under a 70 MiB limit (the fresh run "
          "by %.1f MiB)", resumed / MiB, fresh / MiB)
    check(resumed <= fresh + 4 * MiB, "the resume grew by %.1f MiB, the fresh run by %.1f MiB",
          resumed / MiB, fresh / MiB)
    return "fresh %.1f MiB, resumed %.1f MiB" % (fresh / MiB, resumed / MiB)


def whole_model(h, name):
    """(baseline bytes, growth of the vit training all its blocks, keys for
    more runs of it in a run.dir of their own)."""
    base = baseline(h, name, VIT_TINY)
    keys = keys_of(h, name, VIT, **{"pipeline.microbatches": "1", "train.batch": "4"})
    rc, err, rss = peak_rss(h, name + "_whole", keys)
    check(rc == 0, "the run without freezing failed (%d):\n%s", rc, err[-2000:])
    keys["run.dir"] = h.path("run_%s_frozen" % name)
    return base, rss - base, keys


def test_resume_of_frozen_blocks_lays_them_out_alone(h):
    # a checkpoint with all 4 blocks frozen (decisions after steps 1 and 2:
    # 3, then 4): the resume laid the whole model out in training first
    # (parameters, gradients, both moments) and then re-planned for the
    # frozen prefix, holding both stages at once, so it grew by more than a
    # run training the whole model (97.0 MiB against 61.4); laid out for
    # the prefix from the start, it holds the blocks' parameters and the
    # head's training state (40.1 MiB)
    base, whole, keys = whole_model(h, "vit_frozen")
    keys.update({"freeze.policy": "schedule", "freeze.alpha": "0.75", "freeze.unit": "step",
                 "freeze.start": "1"})
    rc, err, _ = peak_rss(h, "vit_frozen_first", keys)
    check(rc == 0, "the freezing run failed (%d):\n%s", rc, err[-2000:])
    keys.update({"train.max_steps": "3", "train.resume": "auto"})
    rc, err, rss = peak_rss(h, "vit_frozen_again", keys)
    check(rc == 0 and "resumed at step 2" in err, "the resume failed (%d):\n%s", rc, err[-2000:])
    resumed = rss - base
    check(resumed <= whole - 10 * MiB, "the resume of 4 frozen blocks of 4 grew by %.1f MiB, a run "
          "training all of them by %.1f MiB", resumed / MiB, whole / MiB)
    return "whole model %.1f MiB, resumed with 4 of 4 frozen %.1f MiB" % (whole / MiB, resumed / MiB)


def events(run_dir, kind):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["event"] == kind]


def test_freezing_before_the_first_step_lays_out_the_frozen_model(h):
    # freeze.start 0 freezes all 4 blocks before the first step (alpha
    # 0.99: the schedule's first bound is 4): the run laid the whole model
    # out in training and re-planned at step 0, holding both (106.6 MiB
    # against 61.9 for the run without freezing); the decision now comes
    # before the first layout, which is the frozen model's (48.7 MiB)
    base, whole, keys = whole_model(h, "vit_opening")
    keys.update({"freeze.policy": "schedule", "freeze.alpha": "0.99", "freeze.start": "0"})
    rc, err, rss = peak_rss(h, "vit_opening_frozen", keys)
    check(rc == 0, "the freezing run failed (%d):\n%s", rc, err[-2000:])
    frozen = rss - base
    decisions = [(e["step"], e["old_depth"], e["depth"]) for e in events(keys["run.dir"], "freeze")]
    check(decisions[:1] == [(0, 0, 4)], "the first decision is not 0 -> 4 at step 0: %s", decisions)
    replans = [e["step"] for e in events(keys["run.dir"], "replan")]
    check(0 not in replans, "a re-plan at step 0 (re-plans at steps %s)", replans)
    check(frozen <= whole - 10 * MiB, "freezing all 4 blocks before the first step grew by %.1f "
          "MiB, training all of them by %.1f MiB", frozen / MiB, whole / MiB)
    return "whole model %.1f MiB, 4 of 4 frozen from the start %.1f MiB" % (whole / MiB,
                                                                           frozen / MiB)


def test_freezing_before_the_first_step_fits_where_the_whole_model_does_not(h):
    # a limit the whole model in training does not fit, but its frozen
    # blocks (no gradients or moments) with the head training do: freeze.start
    # 0 trains under it (it was refused, as the whole model was counted);
    # freeze.start 1 trains the whole model first, and is refused
    keys = keys_of(h, "vit_fits", VIT, **{"pipeline.microbatches": "1", "train.batch": "4",
                                          "pipeline.memory_gib": "%.6f" % (40 / 1024.0),
                                          "freeze.policy": "schedule", "freeze.alpha": "0.99"})
    rc, err, _ = peak_rss(h, "vit_fits_later", dict(keys, **{"freeze.start": "1"}))
    check(rc == 2 and "pipeline.memory_gib" in err, "freeze.start 1 under 40 MiB was not refused "
          "naming the limit (%d):\n%s", rc, err[-2000:])
    keys["run.dir"] = h.path("run_vit_fits_start")
    rc, err, _ = peak_rss(h, "vit_fits_start", dict(keys, **{"freeze.start": "0"}))
    check(rc == 0, "freeze.start 0 under 40 MiB was refused (%d):\n%s", rc, err[-2000:])


def test_frozen_prefix_under_its_limit(h):
    # all 4 blocks frozen before the first step under a limit: every frozen
    # unit's forward had a saved area in every slot of its stage, written
    # on each step, which neither count had (a frozen unit saves nothing for
    # a backward), and the planner's timing of the units took more than the
    # limit too: one stage with one micro-batch grew by 38.8 MiB under
    # 20 MiB, and with the micro-batches planned by 68.3 MiB under 24 MiB
    # and 125.4 under 30. The frozen units' forwards now share one work
    # area, counted once, the prefix source's slot is counted, and the
    # timing is sized to fit: each run is refused, or grows within its limit.
    # (One stage is counted by the planner's own count, which has the stage
    # input buffer the frozen prefix's source fills and the staged batch:
    # 20.2 MiB for frozen_one, which was 19.8 without them; hence 21 MiB.)
    frozen = {"freeze.policy": "schedule", "freeze.alpha": "0.99", "freeze.start": "0"}
    grown = []
    for name, limit, more in (("frozen_one", 21, {"pipeline.microbatches": "1", "train.batch": "4"}),
                              ("frozen_planned", 24, {}), ("frozen_planned_room", 30, {})):
        rc, err, grew = growth_within(h, name, VIT, VIT_TINY, limit, **dict(frozen, **more))
        check(rc == 0 or (rc == 2 and "pipeline.memory_gib" in err),
              "%s under %d MiB: exit %d\n%s", name, limit, rc, err[-2000:])
        if rc == 0:
            check(grew <= limit * MiB, "%s: 4 of 4 blocks frozen under a %d MiB limit, but grew by "
                  "%.1f MiB", name, limit, grew / MiB)
            decisions = [(e["step"], e["depth"]) for e in events(h.path("run_" + name), "freeze")]
            check(decisions[:1] == [(0, 4)], "%s: the first decision is not 4 blocks at step 0: %s",
                  name, decisions)
        grown.append("%s %s" % (name, "refused" if rc else "%.1f MiB of %d" % (grew / MiB, limit)))
    check(not grown[0].endswith("refused"), "one stage of one micro-batch was refused under 21 MiB, "
          "where its count now fits")
    return ", ".join(grown)


def test_gpipe_one_stage_under_its_limit(h):
    # one stage with 4 micro-batches fixed under gpipe keeps all 4 in flight
    # (every forward before the first backward); the single-stage count had
    # one micro-batch's activations, about 64 MiB for this vit, and let it
    # through a 66 MiB limit, which it grew past by about 40 MiB; now it is
    # counted with 4 (about 105 MiB) and refused, naming train.batch; with
    # room it runs within its limit
    gpipe = {"pipeline.microbatches": "4", "pipeline.schedule": "gpipe"}
    rc, err, grew = growth_within(h, "gpipe_tight", VIT, VIT_TINY, 66, **gpipe)
    if rc == 0:
        check(grew <= 66 * MiB, "gpipe with 4 micro-batches accepted under 66 MiB, but grew by "
              "%.1f MiB", grew / MiB)
    else:
        check(rc == 2 and "train.batch" in err, "refused, but not naming train.batch (%d):\n%s",
              rc, err[-2000:])
    rc, err, grew = growth_within(h, "gpipe_room", VIT, VIT_TINY, 120, **gpipe)
    check(rc == 0, "gpipe with 4 micro-batches refused under 120 MiB (%d):\n%s", rc, err[-2000:])
    check(grew <= 120 * MiB, "gpipe with 4 micro-batches grew by %.1f MiB under 120 MiB", grew / MiB)
    return "grew %.1f MiB under 120" % (grew / MiB)


def test_timing_leaves_nothing_behind(h):
    # with the micro-batches planned under a limit, the units are timed
    # first, each at two sizes, their blocks made and freed in turn: glibc's
    # mmap threshold rose to the largest block freed, and the heap kept
    # freed memory under the layout's buffers, so a 512-wide vit (4 blocks
    # frozen before the first step) planned under 59.3 MiB grew by 6 MiB
    # more than the same layout (M = 8) given outright, 68.7 MiB against
    # 62.6; large blocks are now mapped on their own, always
    big = dict(VIT, **{"model.dim": "512"})
    keys = {"freeze.policy": "schedule", "freeze.alpha": "0.99", "freeze.start": "0"}
    base = baseline(h, "timed", VIT_TINY)
    rc, err, rss = peak_rss(h, "timed", keys_of(h, "timed", big, **dict(keys, **{
        "pipeline.memory_gib": "%.6f" % (62.2 / 1024.0)})))
    check(rc == 0, "the planned run failed (%d):\n%s", rc, err[-2000:])
    decisions = [(e["step"], e["depth"]) for e in events(h.path("run_timed"), "freeze")]
    micro = [e["microbatches"] for e in events(h.path("run_timed"), "start")]
    timed = rss - base
    rc, err, rss = peak_rss(h, "untimed", keys_of(h, "untimed", big, **dict(keys, **{
        "pipeline.microbatches": "8"})))
    check(rc == 0, "the run given M = 8 failed (%d):\n%s", rc, err[-2000:])
    untimed = rss - base
    check(decisions[:1] == [(0, 4)], "the first decision is not 4 blocks at step 0: %s", decisions)
    check(micro == [8], "the planned run's micro-batches: %s, not 8 as the run it is compared with",
          micro)
    check(timed <= untimed + 1.5 * MiB, "planned (timed) grew by %.1f MiB, the same layout given "
          "outright by %.1f MiB", timed / MiB, untimed / MiB)
    return "timed %.1f MiB, untimed %.1f MiB" % (timed / MiB, untimed / MiB)


SUGGESTS_M = re.compile(r"allowed: pipeline\.microbatches = (\d+) \(micro-batches of (\d+) examples?\)")
SUGGESTS_CONTEXT = re.compile(r"model\.context: \d+: .*allowed: a context of at most (\d+)$", re.M)
SUGGESTS_PATCH = re.compile(r"model\.patch: \d+ .*allowed: a patch of (\d+) \((\d+) tokens\)", re.M)
SUGGESTS_PLANNED = re.compile(r"pipeline\.memory_gib: .*no pipeline layout fits.*\(train\.batch = (\d+) has one\)")
# a refusal blaming the weights (or a table of them): what it allows
SUGGESTS_SIZES = re.compile(r"(?:parameters take|their table alone holds).*allowed: (.*)$", re.M)


def sizes_named(err):
    """The model sizes a refusal blaming the weights names, [(key, value)],
    and whether it says each is for one example (then a micro-batch count
    or batch is named next); ([], False) when it names none."""
    m = SUGGESTS_SIZES.search(err)
    if not m:
        return [], False
    named = re.findall(r"(model\.(?:dim|layers|context|positions)) = (\d+)", m.group(1))
    return named, "for one example: then more micro-batches" in m.group(1)


SUGGESTS_SHARE = re.compile(r"allowed: at most (\d+) examples? per replica, in micro-batches of one "
                            r"\(pipeline\.microbatches = (\d+)\)")


def test_refusals_suggest_what_fits(h):
    # a one-stage run refused by its memory limit names what fits: the
    # micro-batch count (and the size it makes), or the largest batch in
    # micro-batches of one, or where one example alone does not fit the
    # longest context or the smallest patch whose example does; following
    # it exactly must be accepted, with the layout it named (after a length,
    # the batch may still be refused, by its own key). The micro-batch size
    # it named was once the largest that still needed that count (15 of 16
    # where 8 fit), refused again; a length was not named at all. Swept over
    # models, widths, lengths, batches, schedules, recompute and frozen
    # blocks, at limits that refuse; plan counts as train does. With the
    # micro-batches left to the planner, its refusal names the largest batch
    # it finds a layout for, planned at that batch's own measured sizes.
    # Where the weights are most of it, the widest model.dim or the most
    # model.layers (or for GPT's position table the longest context) named
    # must hold the whole step: they once named no value.
    small_vit = dict(VIT, **{"model.dim": "64", "model.patch": "7"})
    small_gpt = dict(GPT, **{"model.dim": "64", "model.layers": "2", "model.context": "64"})
    frozen = {"freeze.policy": "schedule", "freeze.alpha": "0.5", "freeze.start": "0"}
    cases = []
    for name, model in (("vit", small_vit), ("gpt", small_gpt), ("vit256", VIT)):
        for batch in ("1", "7", "16", "63", "97"):
            for sched in ({}, {"pipeline.schedule": "gpipe"}, {"pipeline.recompute": "true"},
                          frozen):
                for mib in (3, 6, 11, 40):
                    if name == "vit256" and (batch in ("63", "97") or mib < 11):
                        continue  # its weights alone take most of the small limits
                    cases.append((name, model, batch, sched, mib))
    for context in ("1024", "4096", "16384"):
        for mib in (3, 6, 11):
            cases.append(("gpt", dict(small_gpt, **{"model.context": context}), "1", {}, mib))
            cases.append(("gpt", dict(small_gpt, **{"model.context": context}), "4", frozen, mib))
    for patch, size in (("1", "28"), ("2", "28"), ("1", "36"), ("3", "36")):
        for mib in (3, 11, 40):
            vit = dict(small_vit, **{"model.patch": patch, "data.image_size": size})
            cases.append(("vit", vit, "1", {}, mib))
            cases.append(("vit", vit, "2", {"pipeline.schedule": "gpipe"}, mib))
    # micro-batches left to the planner (it profiles, and searches K, D, M):
    # its refusal names the largest batch it finds a layout for
    for name, model in (("vit", small_vit), ("gpt", small_gpt)):
        for sched in ({}, {"pipeline.schedule": "gpipe"}):
            for batch in ("63", "255"):
                for mib in (3.6, 4.0, 6.0):
                    cases.append((name, model, batch, dict(sched, **{"pipeline.microbatches": "auto"}),
                                  mib))
    # the weights alone (or with one example) past the limit: the widest
    # model.dim, the most model.layers, or (the position table) the longest
    # context that hold the step
    for mib in (3, 6, 11):
        for batch in ("1", "16"):
            for sched in ({}, frozen, {"pipeline.schedule": "gpipe"}):
                cases.append(("vit256", dict(VIT, **{"model.layers": "6"}), batch, sched, mib))
        cases.append(("gpt", dict(small_gpt, **{"model.context": "16384"}), "2", {}, mib))
    cases.append(("gpt", dict(small_gpt, **{"model.context": "65536"}), "1", {}, 20))
    said = {"micro": 0, "share": 0, "length": 0, "planned": 0, "size": 0, "size_alone": 0,
            "other": 0}
    for i, (name, model, batch, sched, mib) in enumerate(cases):
        keys = keys_of(h, "s%d" % i, model, **dict({"pipeline.microbatches": "1"}, **dict(sched, **{
            "train.batch": batch, "data.synthetic_examples": "512",
            "pipeline.memory_gib": "%.6f" % (mib / 1024.0)})))
        first = h.run(["plan", write(h.path("s%d.yaml" % i), render(keys))])
        if first.rc == 0:
            continue
        check(first.rc == 2, "%s batch %s %s %d MiB: exit %d\n%s", name, batch, sched, mib,
              first.rc, first.err[-1500:])
        m, share = SUGGESTS_M.search(first.err), SUGGESTS_SHARE.search(first.err)
        planned = SUGGESTS_PLANNED.search(first.err)
        if planned:
            said["planned"] += 1
            keys["train.batch"] = planned.group(1)
            again = h.run(["plan", write(h.path("s%d_followed.yaml" % i), render(keys))])
            check(again.rc == 0, "%s batch %s planned under %.1f MiB: following train.batch = %s "
                  "gave exit %d:\n%s", name, batch, mib, planned.group(1), again.rc, again.err[-1500:])
            # the largest it finds: one more has none
            keys["train.batch"] = str(int(planned.group(1)) + 1)
            more = h.run(["plan", write(h.path("s%d_more.yaml" % i), render(keys))])
            check(more.rc == 2, "%s batch %s planned under %.1f MiB: train.batch = %s named, but %s "
                  "plans too", name, batch, mib, planned.group(1), keys["train.batch"])
            continue
        named, fewer = sizes_named(first.err)
        if named:
            # the weights alone, or with one example: each size named holds
            # the whole configured step (the other sizes as they are), or
            # where it says so one example, and then the micro-batch count
            # or batch the next refusal names
            said["size"] += 1
            said["size_alone"] += fewer
            for key, value in named:
                followed = dict(keys, **{key: value})
                again = h.run(["plan", write(h.path("s%d_followed.yaml" % i), render(followed))])
                if fewer and again.rc == 2:
                    m, share = SUGGESTS_M.search(again.err), SUGGESTS_SHARE.search(again.err)
                    check(m or share, "%s batch %s %s %d MiB: following %s = %s: no micro-batches "
                          "named:\n%s", name, batch, sched, mib, key, value, again.err[-1500:])
                    followed.update({"pipeline.microbatches": m.group(1)} if m else
                                    {"train.batch": share.group(1),
                                     "pipeline.microbatches": share.group(2)})
                    again = h.run(["plan", write(h.path("s%d_then.yaml" % i), render(followed))])
                check(again.rc == 0, "%s batch %s %s %d MiB: following %s = %s (%s) gave exit %d:\n%s",
                      name, batch, sched, mib, key, value, first.err.strip().splitlines()[-1][-300:],
                      again.rc, again.err[-1500:])
            continue
        length = SUGGESTS_CONTEXT.search(first.err) or SUGGESTS_PATCH.search(first.err)
        if length:
            said["length"] += 1
            key = "model.context" if "model.context" in length.group(0)[:14] else "model.patch"
            keys[key] = length.group(1)
            again = h.run(["plan", write(h.path("s%d_followed.yaml" % i), render(keys))])
            check(again.rc == 0 or (again.rc == 2 and ": train.batch: " in again.err),
                  "%s batch %s %s %d MiB: following %s = %s gave exit %d:\n%s", name, batch, sched,
                  mib, key, length.group(1), again.rc, again.err[-1500:])
            continue
        if m:
            said["micro"] += 1
            follow = {"pipeline.microbatches": m.group(1)}
            layout = "M = %s micro-batch%s of up to %s example" % (
                m.group(1), "" if m.group(1) == "1" else "es", m.group(2))
        elif share:
            said["share"] += 1
            check(share.group(1) == share.group(2), "two values: %s", share.group(0))
            follow = {"train.batch": share.group(1), "pipeline.microbatches": share.group(2)}
            layout = "M = %s micro-batch%s of up to 1 example" % (
                share.group(2), "" if share.group(2) == "1" else "es")
        else:
            said["other"] += 1
            continue  # the model or one example alone: no batch to suggest
        keys.update(follow)
        again = h.run(["plan", write(h.path("s%d_followed.yaml" % i), render(keys))])
        check(again.rc == 0 and layout in again.out,
              "%s batch %s %s %d MiB: following %s (%s) gave exit %d:\n%s%s", name, batch, sched,
              mib, follow, first.err.strip().splitlines()[-1][-200:], again.rc,
              again.out[-600:], again.err[-1500:])
    check(said["micro"] >= 10 and said["share"] >= 10 and said["length"] >= 10 and
          said["planned"] >= 4 and said["size"] >= 10, "too few refusals with a suggestion to "
          "follow: %s", said)
    return ("followed %d micro-batch counts, %d batches in micro-batches of one, %d lengths, %d "
            "planned batches and %d model sizes (%d for one example) (%d other refusals)"
            % (said["micro"], said["share"], said["length"], said["planned"], said["size"],
               said["size_alone"], said["other"]))


def test_resume_refusals_keep_the_batch(h):
    # A resume keeps the checkpoint's train.batch (another is refused: the
    # data position counts batches), so a resume refused by its memory limit
    # suggests what a resume can change: micro-batches, more memory, more
    # ranks. It once suggested a train.batch that the resume then refused.
    # Swept over limits, with the micro-batches fixed (checked before
    # planning) and left to the planner; a suggested micro-batch count,
    # followed, resumes. The same limits on a fresh run still suggest a
    # smaller batch (the sweep reaches both kinds of refusal).
    small = dict(VIT, **{"model.dim": "64", "model.patch": "7"})
    keys = keys_of(h, "keep_batch", small, **{"train.batch": "32", "data.synthetic_examples": "128"})
    r = h.run(["train", write(h.path("keep_batch.yaml"), render(keys))])
    check(r.rc == 0, "the run to resume failed:\n%s", r.describe())
    saved = os.path.join(keys["run.dir"], "checkpoints", "step_%010d" % 2)
    said = {"resume": set(), "fresh": set()}
    for mib in (3.5, 3.7, 4.0, 4.3, 5.0, 6.0, 9.0, 12.0):
        for micro in ("1", "2", "auto"):
            for kind in ("resume", "fresh"):
                name = "keep_batch_%s_%s_%s" % (kind, mib, micro)
                more = {"run.dir": h.path("run_" + name), "train.max_steps": "3",
                        "pipeline.memory_gib": "%.6f" % (mib / 1024.0),
                        "pipeline.microbatches": micro}
                if kind == "resume":
                    more["train.resume"] = saved
                cfg = write(h.path(name + ".yaml"), render(dict(keys, **more)))
                r = h.run(["train", cfg])
                check(r.rc in (0, 2), "%s: exit %d\n%s", name, r.rc, r.describe())
                if r.rc == 0:
                    continue
                err = r.err
                batch = re.search(r"train\.batch = \d+ has one|smaller batch|smaller model or batch", err)
                if kind == "fresh":
                    said["fresh"].add(bool(batch))
                    continue
                check(not batch, "%s suggests another train.batch:\n%s", name, err)
                # (a refusal of the weights names model sizes, the checkpoint's)
                check("a resume keeps the checkpoint's" in err or
                      "the model's sizes are the checkpoint's" in err,
                      "%s: no word of what the resume keeps:\n%s", name, err)
                m = re.search(r"allowed: pipeline\.microbatches = (\d+) \(micro-batches of", err)
                said["resume"].add("micro" if m else "other")
                if m:
                    more["pipeline.microbatches"] = m.group(1)
                    more["run.dir"] += "_followed"
                    cfg = write(h.path(name + "_followed.yaml"), render(dict(keys, **more)))
                    r = h.run(["train", cfg])
                    check(r.rc == 0 and "resumed at step 2" in r.err,
                          "%s: its suggestion, pipeline.microbatches = %s, refused:\n%s", name,
                          m.group(1), r.describe())
    check(said["resume"] == {"micro", "other"} and True in said["fresh"],
          "the sweep missed a kind of refusal: %s", said)
    return "resume refusals %s" % sorted(said["resume"])


def test_plan_of_a_resume_is_that_resume(h):
    # `plan` of a config that train would resume plans that resume: for the
    # checkpoint's frozen blocks (without gradients or moments), from the
    # measurements it carries. It planned the whole model in training, so
    # under a limit only the frozen model fits it refused a resume that
    # train then ran, and elsewhere it printed another layout. Swept over
    # limits: plan and train agree on refusing, and on the layout.
    small = dict(VIT, **{"model.dim": "64", "model.patch": "7"})
    keys = keys_of(h, "plan_resume", small, **{
        "train.batch": "32", "data.synthetic_examples": "128", "train.max_steps": "4",
        "freeze.policy": "schedule", "freeze.alpha": "0.5", "freeze.unit": "step",
        "freeze.start": "1", "freeze.every": "1", "freeze.max_depth": "3"})
    r = h.run(["train", write(h.path("plan_resume.yaml"), render(keys))])
    check(r.rc == 0, "the run to resume failed:\n%s", r.describe())
    saved = os.path.join(keys["run.dir"], "checkpoints", "step_%010d" % 4)
    with open(os.path.join(keys["run.dir"], "metrics.jsonl")) as f:
        depth = [json.loads(l) for l in f if '"freeze"' in l][-1]
    kinds = set()
    for mib in (0.5, 0.8, 1.0, 1.3, 1.6, 2.0, 2.8, 3.6, 0):
        more = {"run.dir": h.path("run_plan_resume_%s" % mib), "train.max_steps": "5",
                "train.resume": saved, "pipeline.memory_gib": "%.6f" % (mib / 1024.0)}
        cfg = write(h.path("plan_resume_%s.yaml" % mib), render(dict(keys, **more)))
        plan = h.run(["plan", cfg])
        train = h.run(["train", cfg])
        check(plan.rc == train.rc and plan.rc in (0, 2), "at %s MiB plan exits %d, train %d:\n%s\n%s",
              mib, plan.rc, train.rc, plan.describe(), train.describe())
        if plan.rc:
            kinds.add("refused")
            continue
        kinds.add("planned")
        want = re.search(r"K = (\d+) stages? x D = (\d+) replicas?, M = (\d+)", train.err)
        got = re.search(r"layout: K = (\d+) stages? x D = (\d+) replicas?, M = (\d+)", plan.out)
        check(want and got and want.groups() == got.groups(), "at %s MiB plan lays out %s, train %s",
              mib, got and got.groups(), want and want.groups())
    check(kinds == {"refused", "planned"}, "the sweep reached only %s (frozen at the checkpoint: %s)",
          kinds, depth)
    return "plan and train agree at 9 limits"


def test_micro_batch_count_named_is_the_fewest(h):
    # the micro-batch count a refusal names is the fewest that fit: every
    # count between the configured one and it is refused. Fitting does not
    # grow with the count (M micro-batches of ceil(share / M) examples
    # stage M ceil(share / M) of them), and a bisection alone named 49
    # micro-batches of 2 where 33 of 3 fit, and 17 and 47 where 14 and 43
    # did (these cases).
    small_vit = dict(VIT, **{"model.dim": "64", "model.patch": "7"})
    frozen = {"freeze.policy": "schedule", "freeze.alpha": "0.5", "freeze.start": "0"}
    said = []
    for i, (batch, sched, mib) in enumerate((("97", {}, 4.5), ("97", frozen, 4.5),
                                             ("513", frozen, 9.0))):
        keys = keys_of(h, "few%d" % i, small_vit, **dict(sched, **{
            "pipeline.microbatches": "1", "train.batch": batch, "data.synthetic_examples": "1024",
            "pipeline.memory_gib": "%.6f" % (mib / 1024.0)}))
        first = h.run(["plan", write(h.path("few%d.yaml" % i), render(keys))])
        m = SUGGESTS_M.search(first.err)
        check(first.rc == 2 and m, "batch %s %s %.1f MiB: no micro-batch count named (exit %d):\n%s",
              batch, sched, mib, first.rc, first.err[-1500:])
        named = int(m.group(1))
        fit = []
        for k in range(2, named + 1):
            again = h.run(["plan", write(h.path("few%d_%d.yaml" % (i, k)),
                                         render(dict(keys, **{"pipeline.microbatches": str(k)})))])
            check(again.rc in (0, 2), "batch %s, %d micro-batches: exit %d:\n%s", batch, k, again.rc,
                  again.err[-1500:])
            if again.rc == 0:
                fit.append(k)
        check(fit[:1] == [named], "batch %s %s %.1f MiB: named %d micro-batches, and these fit: %s",
              batch, sched, mib, named, fit)
        said.append("%s: %d" % (batch, named))
    return "fewest named: " + ", ".join(said)


def test_refusals_of_weights_name_only_sizes_the_config_owns(h):
    # where the weights blame the model, the sizes named are the config's to
    # change: for an evaluation of the initial weights (every block frozen,
    # the head not: a wider model than training's) the widest model.dim
    # and the most model.layers, each of which then evaluates; for a resume
    # and an evaluation of a checkpoint, whose sizes are the checkpoint's,
    # no size at all (the checkpoint would refuse it), only more stages
    small = dict(VIT, **{"model.dim": "64", "model.layers": "6", "model.patch": "7"})
    keys = keys_of(h, "given", small, **{"train.batch": "4", "train.max_steps": "1",
                                          "pipeline.microbatches": "1"})
    cfg = write(h.path("given.yaml"), render(keys))
    trained = h.run(["train", cfg])
    check(trained.rc == 0, "training the checkpoint failed (%d):\n%s", trained.rc, trained.err[-1500:])
    tight = dict(keys, **{"pipeline.memory_gib": "%.6f" % (1.0 / 1024)})
    tight_cfg = write(h.path("given_tight.yaml"), render(tight))
    named = []
    for args in (["eval", tight_cfg, "--init"], ["plan", tight_cfg]):
        first = h.run(args)
        sizes, fewer = sizes_named(first.err)
        check(first.rc == 2 and sizes, "%s under 1 MiB: exit %d, no model size named:\n%s", args[0],
              first.rc, first.err[-1500:])
        for key, value in sizes:
            if fewer:
                continue
            again = h.run([args[0], write(h.path("given_%s.yaml" % value), render(dict(tight, **{key: value})))]
                          + args[2:])
            check(again.rc == 0, "%s: following %s = %s gave exit %d:\n%s", args[0], key, value,
                  again.rc, again.err[-1500:])
            named.append("%s %s = %s" % (args[0], key, value))
    resume = write(h.path("given_resume.yaml"), render(dict(
        tight, **{"train.max_steps": "2", "train.resume": "auto"})))
    # (plan too: it plans a fresh start, but train would take the checkpoint)
    for args in (["eval", tight_cfg], ["train", resume], ["plan", resume]):
        r = h.run(args)
        check(r.rc == 2 and "(the model's sizes are the checkpoint's)" in r.err and
              not sizes_named(r.err)[0],
              "%s of a checkpoint under 1 MiB: exit %d, and a size named or the checkpoint's not "
              "said:\n%s", args[0], r.rc, r.err[-1500:])
    # one example too long for a checkpoint whose context (GPT's position
    # table) or patch (ViT's patch embedding) is fixed: no length named
    for name, model in (("gpt", dict(GPT, **{"model.dim": "16", "model.layers": "1",
                                             "model.context": "2048"})),
                        ("vit", dict(VIT, **{"model.dim": "16", "model.layers": "1",
                                             "model.patch": "1"}))):
        keys = keys_of(h, "long_" + name, model, **{"train.batch": "1", "train.max_steps": "1",
                                                     "pipeline.microbatches": "1"})
        trained = h.run(["train", write(h.path("long_%s.yaml" % name), render(keys))])
        check(trained.rc == 0, "training %s failed (%d):\n%s", name, trained.rc, trained.err[-1500:])
        again = write(h.path("long_%s_resume.yaml" % name), render(dict(keys, **{
            "train.max_steps": "2", "train.resume": "auto", "pipeline.memory_gib": "0.01"})))
        for cmd in ("train", "eval", "plan"):
            r = h.run([cmd, again])
            check(r.rc == 2 and "(the model's sizes are the checkpoint's)" in r.err and
                  "a context of at most" not in r.err and "a patch of" not in r.err,
                  "%s of a %s checkpoint one example of which is past the limit: exit %d, a length "
                  "named or the checkpoint's not said:\n%s", cmd, name, r.rc, r.err[-1500:])
    return "followed " + ", ".join(named)


def test_sizes_named_respect_other_keys(h):
    # a size named is one the other keys allow: no fewer blocks than
    # freeze.max_depth (and "or fewer" only above it), no context shorter
    # than GPT's sample.prompt and the byte it draws; each then plans,
    # after the micro-batches the next refusal names where it says so
    # (a reviewer found "model.layers = 3 or fewer" under max_depth 3, and
    # a context of 8 that sample.prompt's 12 bytes refuse)
    cases = [("layers", dict(GPT, **{"model.dim": "256", "model.layers": "6", "model.heads": "256",
                                     "model.context": "16", "freeze.policy": "schedule",
                                     "freeze.max_depth": "3"}), "1", 0.045),
             ("prompt", dict(GPT, **{"model.dim": "16", "model.layers": "1", "model.heads": "1",
                                     "model.context": "4096", "sample.length": "200",
                                     "sample.prompt": "And God said"}), "2", 0.0003)]
    followed = []
    for name, model, batch, gib in cases:
        keys = keys_of(h, "respect_" + name, model, **{"train.batch": batch, "pipeline.microbatches": "1",
                                                       "pipeline.memory_gib": "%g" % gib})
        first = h.run(["plan", write(h.path("respect_%s.yaml" % name), render(keys))])
        named, fewer = sizes_named(first.err)
        check(first.rc == 2 and named, "%s: exit %d, no size named:\n%s", name, first.rc,
              first.err[-1500:])
        layers = [v for k, v in named if k == "model.layers"]
        if name == "layers":
            check(layers and int(layers[0]) >= 3 and
                  ("model.layers = %s or fewer" % layers[0] in first.err) == (int(layers[0]) > 3),
                  "%s: blocks named below freeze.max_depth 3, or 'or fewer' where none are: %s",
                  name, first.err.strip().splitlines()[-1][-400:])
        for key, value in named:
            if key == "model.context":
                check(int(value) >= len("And God said") + 1, "%s: a context of %s is shorter than "
                      "the prompt and a byte", name, value)
            again_keys = dict(keys, **{key: value})
            again = h.run(["plan", write(h.path("respect_%s_%s.yaml" % (name, value)),
                                         render(again_keys))])
            if fewer and again.rc == 2:
                m, share = SUGGESTS_M.search(again.err), SUGGESTS_SHARE.search(again.err)
                check(m or share, "%s: following %s = %s: nothing named next:\n%s", name, key, value,
                      again.err[-1500:])
                again_keys.update({"pipeline.microbatches": m.group(1)} if m else
                                  {"train.batch": share.group(1), "pipeline.microbatches": share.group(2)})
                again = h.run(["plan", write(h.path("respect_%s_%s_then.yaml" % (name, value)),
                                             render(again_keys))])
            check(again.rc == 0, "%s: following %s = %s gave exit %d:\n%s", name, key, value,
                  again.rc, again.err[-1500:])
            followed.append("%s %s = %s" % (name, key, value))
    return "followed " + ", ".join(followed)


if __name__ == "__main__":
    sys.exit(main([test_one_stage_under_its_limit, test_planned_under_its_limit,
                   test_resume_under_its_limit, test_resume_of_frozen_blocks_lays_them_out_alone,
                   test_freezing_before_the_first_step_lays_out_the_frozen_model,
                   test_freezing_before_the_first_step_fits_where_the_whole_model_does_not,
                   test_frozen_prefix_under_its_limit, test_gpipe_one_stage_under_its_limit,
                   test_timing_leaves_nothing_behind, test_refusals_suggest_what_fits,
                   test_resume_refusals_keep_the_batch, test_plan_of_a_resume_is_that_resume,
                   test_micro_batch_count_named_is_the_fewest,
                   test_refusals_of_weights_name_only_sizes_the_config_owns,
                   test_sizes_named_respect_other_keys],
                  sys.argv, workers=1))
