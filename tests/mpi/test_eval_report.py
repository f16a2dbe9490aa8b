#!/usr/bin/env python3
"""`pipetrain eval`'s figures by class against the logits it writes.

A small BERT (3 labels, and a fourth class without one; padded texts)
trained for a few steps, and the demo
ViT's initial weights on Fashion-MNIST's 10,000 test images: `eval --logits
L --report R`, then from L alone (numpy's argmax: the first of the highest
logits, as the cross-entropy op counts a hit) and the test file's labels the
confusion matrix, which must equal R's count for count, and each class's
precision, recall and F1 and their macro and weighted means as
scikit-learn's classification_report defines them (0 where a count under
them is 0; the means over classes that have examples or predictions),
within 1e-12 (the same double arithmetic, in another order). Then:
- the same counts from 2 ranks as 2 pipeline stages and as 2 replicas (an
  example's logits do not depend on its batch, so the counts are the
  same integers), and from 2 replicas over the first 57 test examples 2 at
  a time (shares of 28 and 29: the longer takes a round more);
- a run with train.eval_examples 25 (of 60) logs as its final
  evaluation's macro_f1 the one of the first 25 rows of eval's logits of the
  final checkpoint;
- the table eval prints names each class (the labels; Fashion-MNIST's
  names);
- a gpt's --report, and --report naming --logits' file, are refused with
  exit 2 and write nothing.

usage: test_eval_report.py PIPETRAIN MPIEXEC"""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

TOL = 1e-12


def expected(logits, targets, classes):
    pred = np.argmax(logits, axis=1)
    conf = np.zeros((classes, classes), dtype=np.int64)
    for t, p in zip(targets, pred):
        conf[t, p] += 1
    figs = []
    for k in range(classes):
        tp, support, predicted = conf[k, k], conf[k, :].sum(), conf[:, k].sum()
        prec = tp / predicted if predicted else 0.0
        rec = tp / support if support else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        figs.append((int(support), int(predicted), int(tp), prec, rec, f1))
    seen = [f for f in figs if f[0] or f[1]]
    macro = [sum(f[i] for f in seen) / len(seen) for i in (3, 4, 5)]
    weighted = [sum(f[i] * f[0] for f in seen) / sum(f[0] for f in seen) for i in (3, 4, 5)]
    return conf, figs, macro, weighted, len(seen)


def compare(what, report, logits, targets, classes, names):
    fails = []
    conf, figs, macro, weighted, seen = expected(logits, targets, classes)
    got = np.array(report["confusion"], dtype=np.int64)
    if got.shape != conf.shape or not (got == conf).all():
        fails.append("%s: confusion\n%s\nfrom the logits\n%s" % (what, got, conf))
    for k, (c, f) in enumerate(zip(report["classes"], figs)):
        if (c["class"], c["name"]) != (k, names[k]):
            fails.append("%s: class %d is %r %r, expected %r" % (what, k, c["class"], c["name"], names[k]))
        if (c["examples"], c["predicted"], c["correct"]) != f[:3]:
            fails.append("%s: class %d counts %r, expected %r" % (
                what, k, (c["examples"], c["predicted"], c["correct"]), f[:3]))
        for key, want in zip(("precision", "recall", "f1"), f[3:]):
            if abs(c[key] - want) > TOL:
                fails.append("%s: class %d %s %r, expected %r" % (what, k, key, c[key], want))
    m = report["macro_avg"]
    for key, want in zip(("precision", "recall", "f1"), macro):
        if abs(m[key] - want) > TOL:
            fails.append("%s: macro %s %r, expected %r" % (what, key, m[key], want))
    w = report["weighted_avg"]
    if m["classes"] != seen or any(abs(w[k] - want) > TOL for k, want in zip(("precision", "recall", "f1"),
                                                                           weighted)):
        fails.append("%s: macro over %r classes, weighted %r; expected %r, %r" % (
            what, m["classes"], w, seen, weighted))
    acc = float(np.trace(conf)) / len(targets)
    if abs(report["test_accuracy"] - acc) > TOL or report["examples"] != len(targets):
        fails.append("%s: accuracy %r of %r examples, the counts give %r of %r" % (
            what, report["test_accuracy"], report["examples"], acc, len(targets)))
    # the classes must not all fall in one cell, or the comparison says little
    if np.count_nonzero(conf) < 2:
        fails.append("%s: every example in one cell of the confusion matrix\n%s" % (what, conf))
    return fails


def main():
    tools = h.Tools(sys.argv)
    fails = []
    with tempfile.TemporaryDirectory(prefix="pt-report-") as work:
        data, vocab = h.bert_data(work, 96, 60, seed=11)
        cfg = os.path.join(work, "bert.yaml")
        run = os.path.join(work, "run")
        with open(cfg, "w") as f:
            f.write("run: {dir: \"%s\", seed: 5, threads: 1}\n"
                    "model: {kind: bert, dim: 32, layers: 2, heads: 2, mlp_hidden: 64, context: 16, "
                    "vocab: %d, classes: 4}\n"
                    "data: {%s}\n"
                    "train: {batch: 16, epochs: 2, lr: 0.003, warmup_steps: 2, eval_examples: 25}\n"
                    % (run, vocab, data))
        print("bert: train, then eval --logits --report", flush=True)
        tools.run(1, ["train", cfg])
        with open(os.path.join(work, "test.tsv")) as f:
            labels = [line.split("\t")[0] for line in f if line.strip()]
        names = sorted(set(labels))
        targets = [names.index(x) for x in labels]
        names.append("(class 3, no label)")  # model.classes 4 for 3 labels
        logits_path, report_path = os.path.join(work, "l.st"), os.path.join(work, "r.json")
        _, _, out = tools.run(1, ["eval", cfg, "--logits", logits_path, "--report", report_path])
        logits = h.load_safetensors(logits_path)["logits"].reshape(len(targets), 4)
        with open(report_path) as f:
            report = json.load(f)
        fails += compare("bert", report, logits, targets, 4, names)
        for name in names[:3]:
            if not any(line.split()[-1:] == [name] for line in out.splitlines()):
                fails.append("bert: eval's table has no line for class %r:\n%s" % (name, out))
        with open(os.path.join(run, "metrics.jsonl")) as f:
            evals = [r for r in map(json.loads, f) if r["event"] == "eval"]
        # the run's evaluations take the first 25 test examples (the final
        # one: the final weights, those eval read)
        first = expected(logits[:25], targets[:25], 4)[2][2]
        if not evals or abs(evals[-1].get("macro_f1", -1) - first) > TOL or evals[-1]["examples"] != 25:
            fails.append("bert: the run's last eval logged %r; the first 25 test logits give macro "
                         "F1 %r" % (evals[-1:], first))

        # (the replicas named: the planner could leave rank 1 idle instead)
        for tag, stages in (("2 stages", 2), ("2 replicas", 1)):
            print("bert: eval on %s" % tag, flush=True)
            other = os.path.join(work, "r-%d.json" % stages)
            tools.run(2, ["eval", cfg, "--report", other] +
                      h.sets(pipeline__stages=stages, pipeline__replicas=3 - stages))
            with open(other) as f:
                got = json.load(f)
            if got["confusion"] != report["confusion"]:
                fails.append("bert on %s: confusion %r, one process %r" % (
                    tag, got["confusion"], report["confusion"]))

        # 57 test examples on 2 replicas (shares of 28 and 29) in rounds of
        # 2: the longer share takes one round more than the shorter
        print("bert: eval of 57 examples on 2 replicas, 2 at a time", flush=True)
        odd = os.path.join(work, "test57.tsv")
        with open(os.path.join(work, "test.tsv")) as f, open(odd, "w") as g:
            g.writelines(f.readlines()[:57])
        odd_report = os.path.join(work, "r-57.json")
        tools.run(2, ["eval", cfg, "--report", odd_report] +
                  h.sets(pipeline__stages=1, pipeline__replicas=2, train__batch=4, data__test_file=odd))
        with open(odd_report) as f:
            fails += compare("bert, 57 on 2 replicas", json.load(f), logits[:57], targets[:57], 4, names)

        # under ASan a narrow one-block model of the demo's kind: the same
        # code and counts over the same 10,000 images, where the demo's own
        # width took most of the sanitized suite's time (200 s)
        narrow = ({"model__dim": 32, "model__heads": 2, "model__layers": 1}
                  if os.environ.get("PT_TEST_SANITIZED") == "1" else {})
        print("vit: the demo's initial weights on Fashion-MNIST%s"
              % (" (narrowed under ASan)" if narrow else ""), flush=True)
        vit_logits, vit_report = os.path.join(work, "vl.st"), os.path.join(work, "vr.json")
        _, _, out = tools.run(1, ["eval", "configs/vit_fmnist.yaml", "--init", "--logits", vit_logits,
                                  "--report", vit_report] + h.sets(run__dir=os.path.join(work, "vit"),
                                                                   run__threads=1, **narrow))
        import gzip
        with gzip.open("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz") as f:
            vit_targets = list(f.read()[8:])
        vl = h.load_safetensors(vit_logits)["logits"].reshape(len(vit_targets), 10)
        with open(vit_report) as f:
            rep = json.load(f)
        fmnist = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                  "Sneaker", "Bag", "Ankle boot"]
        fails += compare("vit", rep, vl, vit_targets, 10, fmnist)
        if "Ankle boot" not in out:
            fails.append("vit: eval's table does not name Fashion-MNIST's classes:\n%s" % out)

        print("refused: gpt, and --report on --logits' file", flush=True)
        gpt_report = os.path.join(work, "g.json")
        rc, _, out = tools.run(1, ["eval", "configs/gpt_kjv.yaml", "--init", "--report", gpt_report] +
                               h.sets(run__dir=os.path.join(work, "gpt"), run__threads=1), check=False)
        if rc != 2 or "--report" not in out or os.path.exists(gpt_report):
            fails.append("gpt --report: exit %d, wrote %s:\n%s" % (rc, os.path.exists(gpt_report), out))
        same = os.path.join(work, "same.out")
        rc, _, out = tools.run(1, ["eval", cfg, "--logits", same, "--report", same], check=False)
        if rc != 2 or "same file" not in out or os.path.exists(same):
            fails.append("--report on --logits' file: exit %d:\n%s" % (rc, out))
    if fails:
        sys.exit("FAILED:\n" + "\n".join(fails))
    print("eval report: passed")


if __name__ == "__main__":
    main()
