#!/usr/bin/env python3
"""Freezing during training is exact and resumable.

Two small models, each 6 epochs of 16 steps with a freeze decision after
every epoch (schedule policy, alpha 1/2: 2, 3, 4 of 4 blocks):
  vit   a ViT (dim 32, 4 blocks) on 512 synthetic images, batch 32;
  bert  a BERT classifier (dim 32, 4 blocks, context 16) on 256 synthetic
        labelled texts of 1 to 20 words over an 18-word vocabulary, batch 16:
        most examples are padded, by different amounts, and some are cut, so
        the padding mask (which every BERT unit takes from the batch's
        tokens) goes through the cache, the stages and the resume;
  bert_dropout  the same BERT with dropout 0.1 (hidden states and attention
        probabilities): frozen units run without it (the cache holds what
        they compute), trainable ones with masks from the examples' ids and
        the step, whichever stage runs them and after a resume.
For each:
  - cache on against cache off, one process: bit-identical per-step losses and
    final weights (the cache returns exactly what the prefix computes);
  - K = 2 stages under mpirun, cache off and on, against K = 1: within 1e-5
    relative (the re-partition after every decision moves units between the
    ranks; in practice bit-identical);
  - D = 2 replicas with the cache: the epochs' cache counts are the job's
    (both replicas'), as one process's;
  - killed after the checkpoint of step 40 (between decisions, 2 blocks
    frozen) and resumed:
    identical to the run that never stopped, for cache off and on (a resumed
    job starts with an empty cache and refills it); the first epoch line
    after the resume says it covers steps 41-48 (since_step 40);
  - freeze.start 0 (the first decision before training, and before the
    first layout, which is laid out for it): K = 2 within 1e-5 of K = 1;
  - a re-plan that fails (one process; K = 2 with the cache): the run exits
    1 with the checkpoint of the decision's step, saved before the re-plan
    with the decision's frozen blocks, and resumes into the run that never
    failed, bit for bit;
  - the auto policy logs every decision with the per-block norms behind it,
    never freezes beyond the schedule's bound, and a resumed auto run makes
    the same decisions;
  - the cache counts: after the prefix stops growing, whole epochs are served
    from the cache, and with decisions in the middle of epochs every example
    that went through the frozen prefix is counted.

usage: test_freeze_training.py PIPETRAIN MPIEXEC"""
import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

TOL = 1e-5
COMMON = """
train: {{batch: {batch}, epochs: 6, lr: 0.003, eval_every: 1, eval_examples: 64, checkpoint_every: 8}}
pipeline: {{microbatches: 2}}
freeze: {{policy: schedule, alpha: 0.5, every: 1, start: 1}}
"""
# name: (the model and data sections, examples, batch); 16 steps per epoch each
MODELS = {
    "vit": ("""run: {{seed: 5, threads: 1}}
model: {{kind: vit, dim: 32, layers: 4, heads: 2, patch: 4, classes: 10}}
data: {{kind: synthetic_images, image_size: 16, synthetic_examples: 512}}""", 512, 32),
    "bert": ("""run: {{seed: 5, threads: 1}}
model: {{kind: bert, dim: 32, layers: 4, heads: 2, mlp_hidden: 64, context: 16, positions: 16,
        vocab: {vocab}, classes: 3}}
data: {{{data}}}""", 256, 16),
}
MODELS["bert_dropout"] = (MODELS["bert"][0].replace("classes: 3}}", "classes: 3, dropout: 0.1,\n"
                                                    "        attention_dropout: 0.1}}"),
                          256, 16)
failures = []


def expect(cond, what):
    print("  %s: %s" % ("ok" if cond else "FAIL", what), flush=True)
    if not cond:
        failures.append(what)


def records(run_dir, event):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["event"] == event]


def check_model(tools, work, model):
    """Every check of the docstring for one model of MODELS."""
    text, examples, batch = MODELS[model]
    work = os.path.join(work, model)
    os.mkdir(work)
    data, vocab = h.bert_data(work, examples, 64, seed=16) if model.startswith("bert") else ("", 0)
    config = os.path.join(work, "tiny.yaml")
    with open(config, "w") as f:
        f.write(text.format(data=data, vocab=vocab) + COMMON.format(batch=batch))

    def train(name, ranks=1, **kv):
        run_dir = os.path.join(work, name)
        tools.run(ranks, ["train", config] + h.sets(run__dir=run_dir, **kv))
        return run_dir, h.step_losses(run_dir), tools.export(h.latest_checkpoint(run_dir), run_dir + ".st")

    print("%s: cache on against cache off, one process" % model, flush=True)
    off_dir, off_loss, off_w = train("k1-off", cache__enabled="false")
    on_dir, on_loss, on_w = train("k1-on", cache__enabled="true")
    _, same = h.compare_runs("%s cache on vs off" % model, off_loss, off_w, on_loss, on_w, 0.0)
    expect(same, "%s: cache on is bit-identical to cache off" % model)
    expect(len(off_loss) == 96, "%s: 6 epochs of 16 steps (%d steps)" % (model, len(off_loss)))
    depths = [r["depth"] for r in records(off_dir, "freeze")]
    expect(depths == [2, 3, 4, 4, 4, 4], "%s: schedule depths per decision: %s" % (model, depths))
    epochs = records(on_dir, "epoch")
    expect(epochs[-1]["cache_hits"] == examples and epochs[-2]["cache_hits"] == examples,
           "%s: the last epochs are served from the cache (%s hits)"
           % (model, [e["cache_hits"] for e in epochs]))

    print("%s: K = 2 against K = 1" % model, flush=True)
    def counts(run_dir):
        return [(e["cache_hits"], e["prefix_computed"]) for e in records(run_dir, "epoch")]
    k2 = {}
    for cache in ("false", "true"):
        k2_dir, loss, w = k2[cache] = train("k2-" + cache, 2, pipeline__stages=2, cache__enabled=cache)
        worst, _ = h.compare_runs("%s K=2 cache %s vs K=1" % (model, cache), off_loss, off_w, loss, w, TOL)
        expect(worst <= TOL, "%s: K=2 with cache %s within %.0e of K=1" % (model, cache, TOL))
        # every example that went through the frozen prefix is counted once,
        # as served whole by the cache or as computed, whatever the layout;
        # with the cache off all of them as computed, as one process counts
        # (stage 0 running the prefix itself counted none; a cache capped
        # short of the prefix, to leave units for stage 1, counted hits)
        one = counts(on_dir if cache == "true" else off_dir)
        two = counts(k2_dir)
        expect([a + b for a, b in two] == [a + b for a, b in one],
               "%s: K=2 cache %s counts every example of the frozen prefix once: (hits, "
               "computed) %s, one process %s" % (model, cache, two, one))
        if cache == "false":
            expect(two == one, "%s: K=2 cache off counts %s, one process %s" % (model, two, one))

    # freeze.start 0: the first decision (2 blocks) comes before the first
    # layout, which is laid out for it (no re-plan at step 0)
    print("%s: freeze.start 0, K = 2 against K = 1" % model, flush=True)
    s01_dir, s01_loss, s01_w = train("start0-k1", cache__enabled="true", freeze__start=0)
    s02_dir, loss, w = train("start0-k2", 2, pipeline__stages=2, cache__enabled="true",
                             freeze__start=0)
    worst, _ = h.compare_runs("%s freeze.start 0, K=2 vs K=1" % model, s01_loss, s01_w, loss, w, TOL)
    expect(worst <= TOL, "%s: freeze.start 0, K=2 within %.0e of K=1" % (model, TOL))
    for name, run_dir in (("K=1", s01_dir), ("K=2", s02_dir)):
        first = records(run_dir, "freeze")[0]
        replans = [e["step"] for e in records(run_dir, "replan")]
        expect((first["step"], first["old_depth"], first["depth"]) == (0, 0, 2) and 0 not in replans,
               "%s, freeze.start 0, %s: decision 1 at step 0 freezes 2 blocks (%s), no re-plan at "
               "step 0 (re-plans at %s)" % (model, name, first, replans))

    # 2 replicas: each serves its half of the batch from the node's cache;
    # the epoch's counts are the job's, as one process counts them (the
    # numbers of replicas against one process: mpi_pipeline_equivalence,
    # mpi_elastic)
    print("%s: D = 2, the cache's counts" % model, flush=True)
    d2_dir, _, _ = train("d2-true", 2, pipeline__stages=1, pipeline__replicas=2, cache__enabled="true")
    counts = [(e["cache_hits"], e["prefix_computed"]) for e in records(d2_dir, "epoch")]
    serial = [(e["cache_hits"], e["prefix_computed"]) for e in records(on_dir, "epoch")]
    expect(counts == serial, "%s: D=2's epoch counts (hits, computed) are the job's, as one "
           "process's: %s against %s" % (model, counts, serial))

    print("%s: stop and resume across decisions" % model, flush=True)
    for cache in ("false", "true"):
        run_dir = os.path.join(work, "resume-" + cache)
        tools.run(1, ["train", config] + h.sets(run__dir=run_dir, cache__enabled=cache),
                  env={"PIPETRAIN_TEST_FAULT": "0:41:crash"}, check=False)
        tools.run(1, ["train", config] + h.sets(run__dir=run_dir, cache__enabled=cache,
                                                 train__resume="auto"))
        loss = h.step_losses(run_dir)
        w = tools.export(h.latest_checkpoint(run_dir), run_dir + ".st")
        _, same = h.compare_runs("%s resumed at step 40, cache %s" % (model, cache), off_loss, off_w,
                                 loss, w, 0.0)
        expect(same, "%s: resumed run (cache %s) is bit-identical to the straight one" % (model, cache))
        # the epoch line at step 48 covers the 8 steps the resumed run trained
        # (its time and counts began at the resume), and says so
        line = [e for e in records(run_dir, "epoch") if e["step"] == 48][-1]
        expect(line["since_step"] == 40 and
               line["cache_hits"] + line["prefix_computed"] == 8 * batch and
               [e["since_step"] for e in records(run_dir, "epoch") if e["step"] > 48] == [48, 64, 80],
               "%s, cache %s: the first epoch line after the resume covers steps 41-48 and says so, "
               "the later ones whole epochs: %s" % (model, cache, line))

    print("%s: a re-plan that fails" % model, flush=True)
    # decision 2 (step 32, 3 blocks) fails on rank 0 once it is planned,
    # before anything moves; a checkpoint is due at that step (every 8
    # steps). It is saved before the re-plan, with the decision's freeze
    # state: the run loses no step, and resumes (laying out the 3 frozen
    # blocks from the start) into the run that never failed
    for ranks, cache, (_, ref_loss, ref_w) in ((1, "false", (off_dir, off_loss, off_w)),
                                              (2, "true", k2["true"])):
        sets = dict(cache__enabled=cache, pipeline__stages=ranks)
        run_dir = os.path.join(work, "replan-failed-%d-%s" % (ranks, cache))
        rc, _, out = tools.run(ranks, ["train", config] + h.sets(run__dir=run_dir, **sets),
                               env={"PIPETRAIN_TEST_FAULT": "0:32:error:replan"}, check=False)
        expect(rc == 1 and "re-planning after freezing 3 blocks: injected fault at step 32" in out,
               "%s, %d rank(s), cache %s: the re-plan's failure ends the run, exit 1, naming it "
               "(exit %d)\n%s" % (model, ranks, cache, rc, out[-1500:]))
        newest = h.latest_checkpoint(run_dir)
        _, _, shown = tools.run(1, ["inspect", newest])
        frozen = json.loads(shown)["frozen_blocks"]
        expect(newest.endswith("step_0000000032") and frozen == 3,
               "%s, %d rank(s), cache %s: the checkpoint of the failed decision's step holds its 3 "
               "frozen blocks (newest %s, %s frozen)" % (model, ranks, cache, newest, frozen))
        tools.run(ranks, ["train", config] + h.sets(run__dir=run_dir, train__resume="auto", **sets))
        loss = h.step_losses(run_dir)
        w = tools.export(h.latest_checkpoint(run_dir), run_dir + ".st")
        _, same = h.compare_runs("%s %d rank(s) resumed after a failed re-plan" % (model, ranks),
                                 ref_loss, ref_w, loss, w, 0.0)
        expect(same, "%s, %d rank(s), cache %s: resumed after the failed re-plan, bit-identical to "
               "the run that never failed" % (model, ranks, cache))

    print("%s: cache counts with decisions in the middle of epochs" % model, flush=True)
    # decisions every 6 steps from step 4, epochs of 16 steps: every epoch
    # has a re-plan (which replaces the prefix source) in its middle
    run_dir = os.path.join(work, "mid-epoch")
    tools.run(1, ["train", config] + h.sets(run__dir=run_dir, cache__enabled="true",
                                            freeze__unit="step", freeze__start=4, freeze__every=6))
    counts = [e["cache_hits"] + e["prefix_computed"] for e in records(run_dir, "epoch")]
    # epoch 0 has a frozen prefix from step 4 on: its last 12 steps of 16;
    # every later epoch all of its examples
    expect(counts == [12 * batch] + [examples] * 5,
           "%s: every sample that went through the frozen prefix is counted, however many re-plans "
           "the epoch had: %s" % (model, counts))

    print("%s: auto policy" % model, flush=True)
    auto = dict(freeze__policy="auto", freeze__alpha="0.5", cache__enabled="true")
    auto_dir, auto_loss, auto_w = train("auto", **auto)
    decisions = records(auto_dir, "freeze")
    expect(len(decisions) == 6, "%s: one logged decision per epoch" % model)
    expect(all(len(d.get("norms", [])) == 4 and len(d.get("rates", [])) == 4 for d in decisions[1:]),
           "%s: decisions after the first carry 4 block norms and change rates" % model)
    expect(all(d["depth"] <= math.ceil(4 * (1 - 0.5 ** d["decision"]) - 1e-9) for d in decisions),
           "%s: never beyond the progressive bound: %s"
           % (model, [(d["decision"], d["depth"]) for d in decisions]))
    run_dir = os.path.join(work, "auto-resume")
    tools.run(1, ["train", config] + h.sets(run__dir=run_dir, **auto),
              env={"PIPETRAIN_TEST_FAULT": "0:57:crash"}, check=False)
    tools.run(1, ["train", config] + h.sets(run__dir=run_dir, train__resume="auto", **auto))
    loss = h.step_losses(run_dir)
    w = tools.export(h.latest_checkpoint(run_dir), run_dir + ".st")
    _, same = h.compare_runs("%s auto, resumed at step 56" % model, auto_loss, auto_w, loss, w, 0.0)
    expect(same, "%s: a resumed auto run makes the same decisions (bit-identical)" % model)


MANY_STAGES = """run: {{dir: {run}, seed: 5, threads: 1}}
model: {{kind: vit, dim: 32, layers: 12, heads: 2, patch: 7}}
data: {{kind: synthetic_images, synthetic_examples: 64}}
train: {{batch: 8, epochs: 3, eval_every: 1, eval_examples: 16}}
freeze: {{policy: schedule, alpha: 0.9, start: 1}}
pipeline: {{cores: 8, stages: 8, replicas: 1, microbatches: 8, memory_gib: 0.0008}}
cache: {{enabled: {cache}}}
"""


def cache_on_many_stages_under_memory(tools, work):
    """8 stages under a pipeline.memory_gib that holds the whole model in
    training; after 1 epoch 11 of its 12 blocks freeze. With the cache off
    the stages share the frozen blocks. With it on, the cached prefix rides
    in front of stage 0, its parameters there (stage 0 computes what the
    cache misses), and all of it (18 units, as many as leave the 7 other
    stages one each) was more than stage 0 may hold: the re-plan refused
    every layout and the run ended, exit 1. The cache now serves the most
    frozen units that fit, and the stages run the others forward only: the
    run with the cache on is bit-identical to the one with it off, and its
    re-plans say how many units the cache serves."""
    print("8 stages under a memory limit, cache on and off", flush=True)
    got = {}
    for cache in ("false", "true"):
        run_dir = os.path.join(work, "many-stages-" + cache)
        config = os.path.join(work, "many-stages-%s.yaml" % cache)
        with open(config, "w") as f:
            f.write(MANY_STAGES.format(run=run_dir, cache=cache))
        rc, _, out = tools.run(8, ["train", config], check=False)
        expect(rc == 0, "8 stages, cache %s: trained (exit %d)\n%s" % (cache, rc, out[-1500:]))
        if rc != 0:
            return
        got[cache] = (run_dir, h.step_losses(run_dir),
                      tools.export(h.latest_checkpoint(run_dir), run_dir + ".st"))
    (_, off_loss, off_w), (on_dir, on_loss, on_w) = got["false"], got["true"]
    _, same = h.compare_runs("8 stages, cache on vs off", off_loss, off_w, on_loss, on_w, 0.0)
    expect(same and len(on_loss) == 24, "8 stages under the memory limit: cache on bit-identical "
           "to cache off over %d steps" % len(on_loss))
    # the cache serves fewer than the 18 units it may (a hit counts only where
    # it serves every frozen unit: none here)
    depths = [r["depth"] for r in records(on_dir, "freeze")]
    cached = [(r["frozen_units"], r["cached_units"]) for r in records(on_dir, "replan")]
    expect(depths[:1] == [11] and cached and all(0 < c < 18 for _, c in cached),
           "8 stages, cache on: 11 blocks frozen at the first decision (%s), and the cache serves "
           "some of the frozen units, fewer than 18, at every re-plan ((frozen, cached) %s)"
           % (depths, cached))
    # every example of the last epoch had its first units from the cache
    # (the epoch before filled it), none whole
    last = records(on_dir, "epoch")[-1]
    expect((last["cache_hits"], last["prefix_computed"], last["cache_part_hits"]) == (0, 64, 64),
           "8 stages, cache on: the last epoch's examples served in part by the cache: (hits, "
           "computed, served in part) %s" % ((last["cache_hits"], last["prefix_computed"],
                                              last["cache_part_hits"]),))
    off_last = records(got["false"][0], "epoch")[-1]
    expect(off_last["cache_part_hits"] == 0, "8 stages, cache off: nothing served in part (%s)"
           % off_last["cache_part_hits"])
    off_cached = [r["cached_units"] for r in records(got["false"][0], "replan")]
    expect(off_cached and not any(off_cached), "8 stages, cache off: no units cached at its "
           "re-plans (%s)" % off_cached)


def main():
    tools = h.Tools(sys.argv)
    with tempfile.TemporaryDirectory(prefix="pt-freeze-") as work:
        cache_on_many_stages_under_memory(tools, work)
        for model in MODELS:
            check_model(tools, work, model)
    if failures:
        sys.exit("FAILED: %d checks" % len(failures))
    print("freeze training: passed")


if __name__ == "__main__":
    main()
