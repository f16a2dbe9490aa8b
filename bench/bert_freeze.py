#!/usr/bin/env python3
"""Freezing while fine-tuning a pretrained BERT: the fine-tuning demo
(configs/bert_finetune.yaml, the real all-MiniLM-L6-v2, 8 parts of the KJV
Bible) on a fixed subset of datasets/kjv_books.tsv, trained without freezing
and with each freeze setting, one after the other in this run of the script:

  baseline            freeze.policy none
  schedule a, cache   freeze.policy schedule at each alpha of --alphas, cache on
  auto, cache         freeze.policy auto (bound: --auto-alpha), cache on
  schedule a, no cache  the same as the cache-on run at --nocache-alpha, cache
                      off: what the cache adds (same bits, less time)
  bottom d from start for each d of --bottom: the embedding and the first d
                      blocks frozen before the first step (freeze.start 0,
                      freeze.max_depth d), the rest trained throughout, cache
                      on: the usual way of fine-tuning with a frozen bottom
  staged a:e for each of --staged: the schedule at alpha a with its first
                      decision before the first step and the next ones every
                      e epochs (freeze.start 0, freeze.every e), cache on: a
                      frozen bottom from the start, then more of the encoder
                      once the top has adapted (alpha 0.5, every 3: the bottom
                      3 blocks, then 5 after epoch 3)

Freeze decisions (but the bottom-d runs') come after epoch --start and every
--every epochs after it.
Everything else is the demo config: same data order, same learning-rate
schedule (linear warm-up and decay over the run's steps) with the peak
learning rate --lr in every run (the demo config's is 5e-5); freezing only
removes work. --freeze-lr gives the freezing runs a peak learning rate of
their own (the baseline keeps --lr): fewer blocks train in them, and a
larger step might make up for it; their names then say it. Each run evaluates on the whole test subset after every epoch
(train.eval_every 1, train.eval_examples 0; with the cache on, the frozen
prefix of the test verses is cached too) and saves one checkpoint, at the end
(train.checkpoint_every is set past the run's last step).

Data: --train verses for training and --test other verses for evaluation,
drawn from datasets/kjv_books.tsv by seed --data-seed, stratified: every
label gets its share of the file's verses (largest remainders), so both
subsets have the file's class proportions. Verses longer than
model.context - 2 word pieces are cut; the script counts them with
pipetrain's own tokenizer (tokenize_dump of the same build) and prints it.

For every run: the wall time of the whole process (start-up, training,
evaluations, the final checkpoint), the test accuracy after each epoch at the
wall time its line appeared on pipetrain's stderr, the final accuracy and its
difference to the baseline's in points, the time at which it first reached the
baseline's final accuracy (the same number of correct test verses, or more),
the end-to-end speedup (baseline's wall time over the run's) and each epoch's
time with its frozen blocks and cache hits. It says whether any run meets
issue 12's target: at least 2.5x end-to-end at no more than 0.3 point below
the baseline's accuracy.

--holdout all also evaluates each run's final checkpoint on every verse of
the file in neither subset (25,102 with the default subsets; `pipetrain eval
--logits`, after the run and outside its wall time; --holdout N: N of them,
drawn by --data-seed) and judges the target by that accuracy: 1,000 test
verses measure an accuracy near 70% only to about 1.4 points, far coarser
than the target's 0.3. Each run's difference to the baseline there comes
with the standard error of a paired difference (the same verses:
sqrt(b + c - (b - c)^2 / n) / n, b and c the verses only one of the two gets
right): an error over verses, for one training run of each; it says nothing
of the spread between training seeds. (The file repeats 119 verse texts, 389
rows in all, so a few held-out verses have their text, not always their
label, in the training subset.)

--seeds S1,S2,...: every run once for each training seed (run.seed: the
classifier's start, the order of the batches and the dropout masks; the
subsets stay those of --data-seed), each compared with the baseline of its
own seed. After each seed's table comes one across the seeds: for each
setting the mean speedup, its difference to the baseline for each seed (on
the held-out verses with --holdout, else on the test verses), their mean,
and standard errors of that mean: over the seeds (sd / sqrt(seeds): how far
a training run moves with its seed), over the held-out verses (each verse's
difference averaged over the seeds: how far another draw of verses would
move it) and both combined; the target is then judged by the means, and a
mean within 2 combined SE of the limit is said to be so. (The default is
the config's seed, 1, alone.)

--plot PNG draws test accuracy against wall time, one line per run (with
several --seeds, the first seed's runs), with
matplotlib from a venv the script makes once (build/venv-bench beside the
binary, or --venv; Debian's python has no matplotlib); it is made before
the first run, and the script stops if that fails. --out DIR keeps the data
subsets, each run's metrics.jsonl and log, results.json and table.md.

--quick: 256 training and 128 test verses, 4 epochs (so that at alpha 0.7
an epoch reads the cache), context 16, every run the other options ask for
(the staged runs only with --staged, which is empty by default): a smoke
test of every path in a minute or two (its accuracies mean nothing). The full run (the defaults) takes about 25 minutes
on the 2-core development machine.

usage: bert_freeze.py PIPETRAIN [--train 5000] [--test 1000] [--epochs 6]
                      [--context 32] [--threads 2] [--lr 5e-5] [--freeze-lr LR]
                      [--alphas 0.33,0.5,0.7]
                      [--auto-alpha 0.5] [--nocache-alpha 0.5] [--bottom 2,4]
                      [--staged A:E,...] [--start 1]
                      [--every 1] [--data-seed 1] [--seeds 1] [--holdout N|all] [--out DIR]
                      [--plot PNG]
                      [--venv DIR] [--quick]"""
import argparse
import glob
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "bert_finetune.yaml")
DATA = os.path.join(ROOT, "datasets", "kjv_books.tsv")
VOCAB = os.path.join(ROOT, "datasets", "minilm", "vocab.txt")
sys.dont_write_bytecode = True  # nothing written into the repository
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import st  # noqa: E402  (tests/reference/st.py: safetensors in numpy, for --holdout's logits)

MATPLOTLIB = "3.10.8"
TARGET_SPEEDUP, TARGET_POINTS = 2.5, 0.3
# pipetrain's line after each evaluation (README, "Reading the output")
EVAL_LINE = re.compile(r"^eval\s+step (?P<step>\d+) \((?:end of|in) epoch (?P<epoch>\d+) of \d+\): "
                       r"test loss \S+, accuracy (?P<accuracy>[0-9.]+)%(?:, macro-F1 \S+)? "
                       r"\((?P<examples>\d+) examples\)")


def fail(msg):
    sys.exit("bert_freeze: " + msg)


# ------------------------------------------------------------------ data

def read_verses(path):
    verses = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                label, text = line.split("\t", 1)
                verses.append((label, text))
    return verses


def shares(sizes, total, want):
    """want items split over classes of these sizes in proportion, by largest remainders."""
    exact = [want * s / total for s in sizes]
    got = [int(math.floor(e)) for e in exact]
    for i in sorted(range(len(sizes)), key=lambda i: (got[i] - exact[i], i))[:want - sum(got)]:
        got[i] += 1
    return got


def stratified_split(verses, n_train, n_test, seed):
    """Disjoint training and test subsets, each with the file's class proportions."""
    by_label = {}
    for v in verses:
        by_label.setdefault(v[0], []).append(v)
    labels = sorted(by_label)
    sizes = [len(by_label[l]) for l in labels]
    tr, te = shares(sizes, len(verses), n_train), shares(sizes, len(verses), n_test)
    rng = random.Random(seed)
    train, test = [], []
    for l, a, b in zip(labels, tr, te):
        pool = list(by_label[l])
        rng.shuffle(pool)
        train += pool[:a]
        test += pool[a:a + b]
    rng.shuffle(train)
    rng.shuffle(test)
    return train, test, {l: (a, b) for l, a, b in zip(labels, tr, te)}


def write_tsv(path, verses):
    with open(path, "w", encoding="utf-8") as f:
        for label, text in verses:
            f.write("%s\t%s\n" % (label, text))


def token_lengths(binary, verses, work):
    """Ids per verse ([CLS] pieces [SEP], uncut) by pipetrain's tokenizer, or None."""
    dump = os.path.join(os.path.dirname(binary), "tests", "tokenize", "tokenize_dump")
    if not os.access(dump, os.X_OK):
        return None
    lines = os.path.join(work, "lines.txt")
    with open(lines, "w", encoding="utf-8") as f:
        for _, text in verses:
            f.write(text + "\n")
    p = subprocess.run([dump, VOCAB, lines, "0"], capture_output=True, text=True)
    os.remove(lines)
    if p.returncode != 0:
        fail("tokenize_dump failed:\n" + p.stderr)
    n = [len(l.split()) for l in p.stdout.splitlines()]
    return n if len(n) == len(verses) else None


# ------------------------------------------------------------------ runs

def settings(args):
    freeze = {"freeze.start": args.start, "freeze.every": args.every, "freeze.unit": "epoch"}
    runs = [("baseline (no freezing)", "baseline", {"freeze.policy": "none"})]
    for a in args.alphas:
        runs.append(("schedule %s, cache" % a, "schedule-%s-cache" % a,
                     dict(freeze, **{"freeze.policy": "schedule", "freeze.alpha": a, "cache.enabled": "true"})))
    if args.auto_alpha:
        a = args.auto_alpha
        runs.append(("auto (bound %s), cache" % a, "auto-%s-cache" % a,
                     dict(freeze, **{"freeze.policy": "auto", "freeze.alpha": a, "cache.enabled": "true"})))
    if args.nocache_alpha:
        a = args.nocache_alpha
        runs.append(("schedule %s, no cache" % a, "schedule-%s-nocache" % a,
                     dict(freeze, **{"freeze.policy": "schedule", "freeze.alpha": a, "cache.enabled": "false"})))
    for d in args.bottom:
        # the schedule's first bound (alpha 0.9: all blocks) capped at d, decided before step 1
        runs.append(("bottom %d frozen from the start, cache" % d, "bottom-%d-cache" % d,
                     {"freeze.policy": "schedule", "freeze.alpha": 0.9, "freeze.start": 0,
                      "freeze.every": 1, "freeze.unit": "epoch", "freeze.max_depth": d,
                      "cache.enabled": "true"}))
    for a, e in args.staged:
        runs.append(("schedule %s from the start, every %d epoch%s, cache" % (a, e, "s" if e > 1 else ""), "staged-%s-%d-cache" % (a, e),
                     {"freeze.policy": "schedule", "freeze.alpha": a, "freeze.start": 0, "freeze.every": e,
                      "freeze.unit": "epoch", "cache.enabled": "true"}))
    if args.freeze_lr is not None and float(args.freeze_lr) != float(args.lr):
        runs[1:] = [("%s, lr %s" % (name, args.freeze_lr), slug, dict(extra, **{"train.lr": args.freeze_lr}))
                    for name, slug, extra in runs[1:]]
    return runs


def train(args, binary, work, files, slug, extra, cache_gib, seed):
    run_dir = os.path.join(work, "runs", slug)
    shutil.rmtree(run_dir, ignore_errors=True)
    sets = {"run.dir": run_dir, "run.seed": seed, "run.threads": args.threads, "data.train_file": files[0],
            "data.test_file": files[1], "model.context": args.context, "train.epochs": args.epochs,
            "train.max_steps": 0,  # the whole epochs, whatever the config stops at
            "train.eval_every": 1, "train.eval_examples": 0,
            "train.checkpoint_every": 10**15, "train.lr": args.lr, "train.keep_checkpoints": 1,
            # one process: one stage, one replica, one micro-batch in every run
            "pipeline.stages": 1, "pipeline.replicas": 1, "pipeline.microbatches": 1,
            "cache.memory_gib": cache_gib,
            "model.dropout": args.dropout, "model.attention_dropout": args.dropout}
    sets.update(extra)
    cmd = [binary, "train", CONFIG]
    for k, v in sets.items():
        cmd += ["--set", "%s=%s" % (k, v)]
    log_lines, evals = [], []
    start = time.monotonic()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         bufsize=1)
    for line in p.stdout:
        t = time.monotonic() - start
        log_lines.append("%9.3f %s" % (t, line.rstrip("\n")))
        m = EVAL_LINE.match(line)
        if m:
            evals.append(t)
            print("    %6.1f s  epoch %s: test accuracy %s%%" % (t, m.group("epoch"), m.group("accuracy")),
                  flush=True)
        elif line.startswith("freeze decision"):
            print("    %6.1f s  %s" % (t, line.strip()), flush=True)
    rc = p.wait()
    wall = time.monotonic() - start
    with open(os.path.join(run_dir if os.path.isdir(run_dir) else work, "log.txt"), "w") as f:
        f.write("\n".join(log_lines) + "\n")
    if rc != 0:
        fail("%s exited %d:\n%s" % (" ".join(cmd), rc, "\n".join(log_lines[-30:])))
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        recs = [json.loads(l) for l in f]
    ev = [r for r in recs if r["event"] == "eval"]
    if len(ev) != len(evals):
        fail("%s: %d eval records in metrics.jsonl but %d eval lines on stderr" % (slug, len(ev), len(evals)))
    epochs = [{"epoch": r["epoch"], "seconds": r["epoch_time_s"], "frozen": r["frozen_blocks"],
               "cache_hits": r["cache_hits"], "prefix_computed": r["prefix_computed"]}
              for r in recs if r["event"] == "epoch"]
    steps = [r for r in recs if r["event"] == "step"]
    held = holdout_eval(args, binary, work, cmd, run_dir, files) if len(files) > 2 else None
    shutil.rmtree(os.path.join(run_dir, "checkpoints"), ignore_errors=True)  # 100s of MB, not needed
    return {"wall": wall, "steps": len(steps), "holdout": held,
            "evals": [{"time": t, "epoch": r["epoch"], "accuracy": r["test_accuracy"],
                       "correct": int(round(r["test_accuracy"] * r["examples"])), "examples": r["examples"],
                       "loss": r["test_loss"]} for t, r in zip(evals, ev)],
            "epochs": epochs}


def holdout_eval(args, binary, work, train_cmd, run_dir, files):
    """`pipetrain eval` of the run's final checkpoint on the held-out verses
    (files[2]), after the run and not timed: {"accuracy", "correct": a string
    of 0 and 1, one per held-out verse in file order}."""
    ckpts = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "step_*")))
    if not ckpts:
        fail("%s: no checkpoint to evaluate on the held-out verses" % run_dir)
    logits = os.path.join(work, "holdout-logits.safetensors")
    cmd = [binary, "eval"] + train_cmd[2:] + ["--set", "data.test_file=" + files[2],
                                              "--checkpoint", ckpts[-1], "--logits", logits]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode:
        fail("%s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stderr[-3000:]))
    z = st.load(logits)["logits"]
    os.remove(logits)
    names = sorted({label for label, _ in read_verses(files[0])}, key=lambda l: l.encode())
    labels = [names.index(label) for label, _ in read_verses(files[2])]
    if len(labels) != len(z):
        fail("%d held-out verses but %d rows of logits" % (len(labels), len(z)))
    correct = "".join("1" if int(row.argmax()) == y else "0" for row, y in zip(z, labels))
    acc = correct.count("1") / len(correct)
    print("    held-out verses: accuracy %.2f%% (%d verses; evaluated after the run, not timed)"
          % (100 * acc, len(correct)), flush=True)
    return {"accuracy": acc, "correct": correct}


# ------------------------------------------------------------------ report

def summarise(results):
    base = results[0]
    b_final = base["evals"][-1]
    for r in results:
        final = r["evals"][-1]
        r["accuracy"] = final["accuracy"]
        r["points"] = 100.0 * (final["accuracy"] - b_final["accuracy"])
        r["speedup"] = base["wall"] / r["wall"]
        reach = next((e["time"] for e in r["evals"] if e["correct"] >= b_final["correct"]), None)
        r["time_to_baseline"] = reach
        judged = r["points"]
        if base.get("holdout") and r.get("holdout"):
            # held-out accuracy, and the standard error of the paired difference
            # (the same verses: b verses only the run gets right, c only the baseline)
            a, c0 = r["holdout"]["correct"], base["holdout"]["correct"]
            n = len(a)
            b = sum(x == "1" and y == "0" for x, y in zip(a, c0))
            c = sum(x == "0" and y == "1" for x, y in zip(a, c0))
            r["holdout_points"] = judged = 100.0 * (b - c) / n
            r["holdout_se"] = 100.0 * math.sqrt(max(b + c - (b - c) ** 2 / n, 0.0)) / n
        r["meets_target"] = (r is not base and r["speedup"] >= TARGET_SPEEDUP and
                             judged >= -TARGET_POINTS - 1e-9)
    b_reach = base["time_to_baseline"]
    for r in results:
        t = r["time_to_baseline"]
        r["tta_speedup"] = b_reach / t if t else None


def table(results):
    held = all(r.get("holdout_points") is not None for r in results)
    out = ["| run | wall (s) | test accuracy | vs baseline (points) | time to baseline accuracy (s) | "
           "speedup (end to end) | speedup (to baseline accuracy) |" +
           (" held-out accuracy | vs baseline, held out (points, paired SE) |" if held else ""),
           "| --- | --- | --- | --- | --- | --- | --- |" + (" --- | --- |" if held else "")]
    for r in results:
        t = r["time_to_baseline"]
        out.append("| %s | %.1f | %.2f%% | %+.2f | %s | %.2fx | %s |" % (
            r["name"], r["wall"], 100 * r["accuracy"], r["points"], "%.1f" % t if t is not None else "never",
            r["speedup"], "%.2fx" % r["tta_speedup"] if r["tta_speedup"] else "-") +
            (" %.2f%% | %+.2f (%.2f) |" % (100 * r["holdout"]["accuracy"], r["holdout_points"], r["holdout_se"])
             if held else ""))
    return out


def details(results):
    out = ["per run: test accuracy after each epoch at wall time (s); epoch training time (s) "
           "[frozen blocks, cache hits]"]
    for r in results:
        acc = " ".join("%.2f%%@%.0f" % (100 * e["accuracy"], e["time"]) for e in r["evals"])
        ep = " ".join("%.1f[%d,%d]" % (e["seconds"], e["frozen"], e["cache_hits"]) for e in r["epochs"])
        out.append("- %s: %s; epochs %s" % (r["name"], acc, ep))
    return out


def sweep(results, alphas):
    out = ["| alpha | test accuracy | speedup |", "| --- | --- | --- |",
           "| baseline (no freezing) | %.2f%% | 1.00x |" % (100 * results[0]["accuracy"])]
    for r in results:
        if r["setting"].startswith("schedule-") and r["setting"].endswith("-cache"):
            out.append("| %s | %.2f%% | %.2fx |" % (r["alpha"], 100 * r["accuracy"], r["speedup"]))
    return out


def verdict(results):
    met = [r for r in results if r["meets_target"]]
    held = all(r.get("holdout_points") is not None for r in results)
    head = "target (>= %.1fx end to end, <= %.1f point below the baseline's accuracy%s): " % (
        TARGET_SPEEDUP, TARGET_POINTS, " on the held-out verses" if held else "")

    def points(r):
        return r["holdout_points"] if held else r["points"]

    if met:
        return head + "met by " + ", ".join("%s (%.2fx, %+.2f points)" % (r["name"], r["speedup"], points(r))
                                            for r in met)
    return head + "NOT met by any run (" + "; ".join(
        "%s %.2fx, %+.2f points" % (r["name"], r["speedup"], points(r)) for r in results[1:]) + ")"


def across_seeds(by_seed):
    """The table across training seeds, and its verdict: for each setting the
    mean speedup, the difference to its seed's baseline for each seed (held
    out where every run has it), their mean, and two standard errors of that
    mean: over the seeds (sample sd / sqrt(seeds): how far a run moves with
    its seed, on these verses) and over the held-out verses (each verse's
    difference averaged over the seeds, sd / sqrt(verses): how far another
    draw of verses would move it), with both combined (root of the sum of
    squares)."""
    seeds = list(by_seed)
    first = by_seed[seeds[0]]
    held = all(r.get("holdout_points") is not None for rs in by_seed.values() for r in rs)
    where = "held out" if held else "test verses"
    out = ["across %d training seeds (%s), each run against the baseline of its seed:" % (
               len(seeds), ", ".join(str(x) for x in seeds)), "",
           "| run | speedup (mean) | vs baseline, %s, by seed (points) | mean (points) | SE over seeds | "
           "SE over verses | SE, both |" % where,
           "| --- | --- | --- | --- | --- | --- | --- |"]
    summary = []
    for i, r0 in enumerate(first):
        runs = [by_seed[x][i] for x in seeds]
        if i == 0:
            out.append("| %s | 1.00x | | | | | |" % r0["name"])
            continue
        speed = sum(r["speedup"] for r in runs) / len(runs)
        pts = [r["holdout_points"] if held else r["points"] for r in runs]
        mean = sum(pts) / len(pts)
        sd = math.sqrt(sum((p - mean) ** 2 for p in pts) / (len(pts) - 1)) if len(pts) > 1 else 0.0
        se_seed = sd / math.sqrt(len(pts))
        se_verse = None
        if held:
            rows = [(r["holdout"]["correct"], by_seed[x][0]["holdout"]["correct"]) for r, x in zip(runs, seeds)]
            n = len(rows[0][0])
            d = [sum(int(a[v]) - int(b[v]) for a, b in rows) / len(rows) for v in range(n)]
            m = sum(d) / n
            se_verse = 100.0 * math.sqrt(sum((x - m) ** 2 for x in d) / n) / math.sqrt(n)
        se = math.sqrt(se_seed ** 2 + (se_verse or 0.0) ** 2)
        out.append("| %s | %.2fx | %s | %+.2f | %.2f | %s | %.2f |" % (
            r0["name"], speed, " ".join("%+.2f" % p for p in pts), mean, se_seed,
            "%.2f" % se_verse if se_verse is not None else "-", se))
        summary.append((r0["name"], speed, mean, se))
    met = [x for x in summary if x[1] >= TARGET_SPEEDUP and x[2] >= -TARGET_POINTS - 1e-9]
    head = ("target across the seeds (>= %.1fx mean speedup, mean difference <= %.1f point below the "
            "baseline, %s; SE: both): " % (TARGET_SPEEDUP, TARGET_POINTS, where))
    if met:
        line = head + "met by " + ", ".join(
            "%s (%.2fx, %+.2f points, SE %.2f%s)" % (x + (", within 2 SE of the limit: not decided"
                                                           if x[2] + TARGET_POINTS < 2 * x[3] else "",))
            for x in met)
    else:
        line = head + "NOT met by any setting (" + "; ".join(
            "%s %.2fx, %+.2f (SE %.2f%s)" % (x + (", within 2 SE of the limit" if x[1] >= TARGET_SPEEDUP and
                                                   -TARGET_POINTS - x[2] < 2 * x[3] else "",))
            for x in summary) + ")"
    return out + ["", line]


# ------------------------------------------------------------------ plot

def ensure_venv(venv):
    py = os.path.join(venv, "bin", "python")
    check = "import matplotlib, sys; sys.exit(matplotlib.__version__ != %r)" % MATPLOTLIB
    if os.path.exists(py) and subprocess.run([py, "-c", check], capture_output=True).returncode == 0:
        return py
    print("making the venv %s with matplotlib %s (once)" % (venv, MATPLOTLIB), flush=True)
    r = subprocess.run([sys.executable, "-m", "venv", "--clear", venv], capture_output=True, text=True)
    if r.returncode:
        fail("--plot: cannot make the venv %s (Debian: apt-get install python3-venv):\n%s%s"
             % (venv, r.stdout, r.stderr))
    r = subprocess.run([py, "-m", "pip", "install", "--quiet", "matplotlib==" + MATPLOTLIB],
                       capture_output=True, text=True)
    if r.returncode:
        fail("--plot: pip install matplotlib==%s into %s failed:\n%s%s" % (MATPLOTLIB, venv, r.stdout, r.stderr))
    if subprocess.run([py, "-c", check], capture_output=True).returncode:
        fail("--plot: matplotlib %s does not import in %s" % (MATPLOTLIB, venv))
    return py


def render(results_json, png):
    """Runs in the venv: test accuracy against wall time, one line per run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(results_json) as f:
        res = json.load(f)
    runs = [r for r in res["runs"] if r["seed"] == res["runs"][0]["seed"]]  # the first seed's
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for i, r in enumerate(runs):
        xs = [e["time"] for e in r["evals"]]
        ys = [100 * e["accuracy"] for e in r["evals"]]
        style = dict(color="black", linewidth=2.2) if i == 0 else dict(linewidth=1.4)
        line, = ax.plot(xs, ys, marker="o", markersize=4,
                        label="%s: %.2f%%, %.2fx" % (r["name"], ys[-1], r["speedup"]), **style)
        # after the last evaluation the run still saves its checkpoint and exits: its end is the x
        ax.plot([xs[-1], r["wall"]], [ys[-1], ys[-1]], color=line.get_color(), linestyle="--",
                linewidth=0.8)
        ax.plot([r["wall"]], [ys[-1]], marker="x", color=line.get_color(), markersize=6)
    b = 100 * runs[0]["accuracy"]
    ax.axhline(b, color="black", linestyle=":", linewidth=1)
    ax.axhspan(b - TARGET_POINTS, b, color="green", alpha=0.12, label="within %.1f point of the baseline" % TARGET_POINTS)
    ax.set_xlabel("wall time since the process started (s); x: the run's end")
    ax.set_ylabel("test accuracy (%)")
    ax.set_xlim(left=0)
    ax.set_title("\n".join(textwrap.wrap(res["title"], 100)), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(png)


# ------------------------------------------------------------------ main

def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--render":  # the script itself, in the venv
        render(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipetrain")
    ap.add_argument("--train", type=int, default=5000, help="training verses")
    ap.add_argument("--test", type=int, default=1000, help="test verses")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--context", type=int, default=32, help="model.context in tokens, [CLS] and [SEP] included")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", default="5e-5", help="train.lr (the peak learning rate) of every run")
    ap.add_argument("--freeze-lr", help="train.lr of the freezing runs (default: --lr)")
    ap.add_argument("--dropout", default="auto",
                    help="model.dropout and model.attention_dropout (auto: MiniLM's 0.1, the demo's; "
                         "0: the evaluation form, as the README's learning-rate sweep was measured)")
    ap.add_argument("--alphas", default="0.33,0.5,0.7", help="schedule alphas, cache on")
    ap.add_argument("--auto-alpha", default="0.5", help="the auto policy's bound ('' = no auto run)")
    ap.add_argument("--nocache-alpha", default="0.5", help="a schedule run without the cache ('' = none)")
    ap.add_argument("--bottom", default="2,4", help="runs with this many blocks frozen from the start ('' = none)")
    ap.add_argument("--staged", default="", help="ALPHA:EVERY,...: schedule runs decided from the start, "
                    "then every EVERY epochs ('' = none)")
    ap.add_argument("--start", type=int, default=1, help="first freeze decision after this many epochs")
    ap.add_argument("--every", type=int, default=1, help="then one every this many epochs")
    ap.add_argument("--data-seed", type=int, default=1, help="seed of the training and test subsets")
    ap.add_argument("--seeds", default="1", help="training seeds (run.seed): every run once for each")
    ap.add_argument("--holdout", default="",
                    help="N or all: also evaluate each run's final checkpoint on N verses (all: every "
                    "verse) in neither subset, after the run and not timed, and judge the target by those")
    ap.add_argument("--out", help="keep subsets, metrics, logs, results.json and table.md here")
    ap.add_argument("--plot", help="write a PNG of test accuracy against wall time")
    ap.add_argument("--venv", help="venv for matplotlib (default: venv-bench beside the binary)")
    ap.add_argument("--quick", action="store_true", help="tiny smoke run of every path")
    args = ap.parse_args()
    if args.quick:
        args.train, args.test, args.epochs, args.context = 256, 128, 4, 16
    args.alphas = [a.strip() for a in args.alphas.split(",") if a.strip()]
    args.bottom = [int(d) for d in args.bottom.split(",") if d.strip()]
    try:
        if args.holdout and args.holdout != "all" and int(args.holdout) < 1:
            raise ValueError
        args.staged = [(a.split(":")[0].strip(), int(a.split(":")[1])) for a in args.staged.split(",") if a.strip()]
        float(args.lr)
        if args.freeze_lr is not None:
            float(args.freeze_lr)
        args.seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        if (not args.seeds or len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0
                or max(args.seeds) > 9.2e18):  # run.seed's range (pipetrain keys)
            raise ValueError
    except (ValueError, IndexError):
        fail("--staged wants ALPHA:EVERY[,ALPHA:EVERY...], --lr and --freeze-lr numbers, --holdout N (1 or more) or all, "
             "and --seeds distinct integers from 0 to 9.2e18")
    binary = os.path.abspath(args.pipetrain)
    if not os.access(binary, os.X_OK):
        fail("%s is not an executable" % binary)
    for path in (DATA, VOCAB, os.path.join(ROOT, "datasets", "minilm", "model.safetensors")):
        if not os.path.exists(path):
            fail("%s is missing (bash scripts/setup.sh writes it)" % path)
    plot = os.path.abspath(args.plot) if args.plot else None
    if plot:  # before the runs: a missing matplotlib must not cost a whole benchmark
        venv_py = ensure_venv(os.path.abspath(args.venv or os.path.join(os.path.dirname(binary), "venv-bench")))

    verses = read_verses(DATA)
    if args.train + args.test > len(verses):
        fail("--train + --test = %d, more than the %d verses" % (args.train + args.test, len(verses)))
    train_v, test_v, per_label = stratified_split(verses, args.train, args.test, args.data_seed)

    out = os.path.abspath(args.out) if args.out else None
    tmp = None
    if out:
        os.makedirs(out, exist_ok=True)
        work = out
    else:
        tmp = tempfile.TemporaryDirectory(prefix="pt-bertfreeze-", dir=os.environ.get("TMPDIR", "/tmp"))
        work = tmp.name
    files = (os.path.join(work, "train.tsv"), os.path.join(work, "test.tsv"))
    write_tsv(files[0], train_v)
    write_tsv(files[1], test_v)
    if args.holdout:
        taken = {id(v) for v in train_v + test_v}
        rest = [v for v in verses if id(v) not in taken]
        if args.holdout != "all":
            random.Random(args.data_seed).shuffle(rest)
            rest = rest[:int(args.holdout)]
        if not rest:
            fail("--holdout: no verse is left outside the training and test subsets")
        files += (os.path.join(work, "holdout.tsv"),)
        write_tsv(files[2], rest)

    lengths = token_lengths(binary, train_v + test_v, work)
    batch = 32  # configs/bert_finetune.yaml
    steps = args.epochs * (args.train // batch)  # a last partial batch is dropped
    # cached activations: one context x 384 float32 row block per verse (training and test), with room to spare
    cache_gib = max(1, math.ceil(1.5 * (args.train + args.test) * args.context * 384 * 4 / 2**30))
    lr = (args.lr if args.freeze_lr is None or float(args.freeze_lr) == float(args.lr)
          else "%s (freezing runs %s)" % (args.lr, args.freeze_lr))
    title = ("all-MiniLM-L6-v2 on KJV parts: %d train / %d test verses, context %d, %d epochs, peak lr %s, "
             "%d threads; freezing decided after epoch %d, then every %d (but the runs decided from the start)"
             % (args.train, args.test, args.context, args.epochs, lr, args.threads, args.start, args.every))
    print(title)
    print("subsets (stratified by label, seed %d): %s" % (args.data_seed, ", ".join(
        "%s %d/%d" % (l, a, b) for l, (a, b) in sorted(per_label.items()))))
    if lengths:
        cut = sum(n > args.context for n in lengths)
        print("verses cut at context %d (more than %d word pieces): %d of %d (%.1f%%); median %d ids, longest %d"
              % (args.context, args.context - 2, cut, len(lengths), 100.0 * cut / len(lengths),
                 sorted(lengths)[len(lengths) // 2], max(lengths)))
    else:
        print("verses cut at context %d: not counted (no tokenize_dump beside the binary)" % args.context)
    print("%d optimizer steps of batch %d; config %s otherwise" % (steps, batch, os.path.relpath(CONFIG, ROOT)),
          flush=True)

    by_seed = {}
    lines = ["", title]
    for seed in args.seeds:
        results = by_seed[seed] = []
        for name, setting, extra in settings(args):
            slug = "%s-seed%d" % (setting, seed) if len(args.seeds) > 1 else setting
            print("\n%s%s:" % (name, ", seed %d" % seed if len(args.seeds) > 1 else ""), flush=True)
            r = train(args, binary, work, files, slug, extra, cache_gib, seed)
            r.update(name=name, slug=slug, setting=setting, seed=seed, alpha=extra.get("freeze.alpha"), settings=extra)
            results.append(r)
            ep = r["epochs"]
            rate = args.train / ep[0]["seconds"] if ep and ep[0]["seconds"] > 0 else 0
            print("  %.1f s in all, final test accuracy %.2f%%, %.2fx against the baseline; first epoch %.1f s "
                  "(%.1f verses/s)" % (r["wall"], 100 * r["evals"][-1]["accuracy"], results[0]["wall"] / r["wall"],
                                       ep[0]["seconds"] if ep else 0, rate), flush=True)
        summarise(results)
        if len(args.seeds) > 1:
            lines += ["", "training seed %d (run.seed):" % seed]
        lines += [""] + table(results) + [""] + details(results)
        if any(r["setting"].startswith("schedule-") and r["setting"].endswith("-cache") for r in results):
            lines += ["", "alpha sweep (schedule policy, cache on):", ""] + sweep(results, args.alphas)
        lines += ["", verdict(results)]
    if len(args.seeds) > 1:
        lines += [""] + across_seeds(by_seed)
    results = [r for rs in by_seed.values() for r in rs]
    text = "\n".join(lines)
    print(text, flush=True)

    res_path = os.path.join(work, "results.json")
    with open(res_path, "w") as f:
        json.dump({"title": title, "args": {k: v for k, v in vars(args).items()}, "runs": results}, f, indent=1)
    if out:
        with open(os.path.join(out, "table.md"), "w") as f:
            f.write(text + "\n")
    if plot:
        r = subprocess.run([venv_py, os.path.abspath(__file__), "--render", res_path, plot],
                           capture_output=True, text=True)
        if r.returncode:
            fail("plotting failed:\n%s%s" % (r.stdout, r.stderr))
        print("\nplot: %s" % plot)
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
