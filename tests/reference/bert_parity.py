#!/usr/bin/env python3
"""PyTorch parity of fine-tuning the pretrained all-MiniLM-L6-v2 (bert).

pipetrain and the PyTorch reference (bert.py, written independently of
pipetrain) start from the same weights: the real all-MiniLM-L6-v2 encoder that
scripts/setup.sh unpacks into datasets/minilm, plus one random classifier for
4 labels. Both train 5 AdamW steps on the same batches of 8 (no shuffling,
global-norm clipping active, warm-up + cosine schedule, weight decay, 2
micro-batches on the pipetrain side, model.context 24 so that texts are both
truncated and padded). Compared, float32 on both sides:
  - the loss of every step (the first is the pretrained forward pass);
  - the test logits, pipetrain's from batches of mixed lengths padded to 24,
    torch's from each example run alone at its own length, with no padding
    (so the padding mask is checked across implementations);
  - the test examples' final hidden states (the encoder's output, what enters
    the head: `pipetrain eval --hidden`), torch's again from each example
    alone and unpadded: the [CLS] position of every example, and every real
    (non-pad) position of every example; pipetrain's positions from the first
    [PAD] on are padding and not compared;
  - the test logits and hidden states also at step 0, from the pretrained
    weights (`pipetrain eval --init`), which checks that the Hugging Face
    checkpoint loads into the same model before any training;
  - every tensor of the model after the 5 steps, from `pipetrain export`'s
    Hugging Face directory under transformers' names;
each as max|pipetrain - torch| / max|torch| over the tensor, against 1e-4.

Why 1e-4: float32 rounding differs between two implementations by a few 1e-7
per op; through 6 post-LN layers and 5 Adam steps (whose division by sqrt(v)
amplifies differences in near-zero gradients) that leaves about 1e-5.

As in parity.py, the key biases are checked by what is true of them: adding a
constant to every key adds the same number to a row of scores, which softmax
ignores, so their true gradient is 0 and what either side computes is rounding
noise that Adam turns into moves of up to lr per step; they must stay within
5 lr of their start on both sides.

The texts are made of whole lower-case words of the vocabulary separated by
spaces, whose WordPiece ids are the words' own lines of vocab.txt, so both
sides agree on the ids without a tokenizer here (tokenize/ has its own parity
test against Hugging Face's).

usage: bert_parity.py PIPETRAIN_BINARY MINILM_DIR
"""
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bert as B  # noqa: E402
import model as M  # noqa: E402
from parity import rel, sh  # noqa: E402
import st  # noqa: E402

STEPS, TOL, BATCH, CONTEXT, CLASSES = 5, 1e-4, 8, 24, 4
HP = dict(lr=1e-4, min_lr=1e-5, warmup=2, wd=0.01, clip=1.0, b1=0.9, b2=0.999, eps=1e-8)
LABELS = ["acts", "gospel", "law", "psalm"]  # sorted: class index = position


def make_data(vocab, rng, n):
    """n (label, text, ids) with 1 to 40 whole-vocabulary words"""
    words = [(i, w) for i, w in enumerate(vocab) if re.fullmatch(r"[a-z]{3,12}", w) and i > 1000]
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 41))
        pick = [words[j] for j in rng.integers(0, len(words), k)]
        ids = [cls] + [i for i, _ in pick][:CONTEXT - 2] + [sep]
        out.append((int(rng.integers(0, CLASSES)), " ".join(w for _, w in pick), ids))
    return out


def write_tsv(path, rows):
    with open(path, "w") as f:
        for label, text, _ in rows:
            f.write("%s\t%s\n" % (LABELS[label], text))


def padded(rows):
    ids = np.zeros((len(rows), CONTEXT), np.int64)
    for r, (_, _, x) in enumerate(rows):
        ids[r, :len(x)] = x
    return torch.tensor(ids), torch.tensor([label for label, _, _ in rows])


def alone(ref, rows):
    """torch's logits [n, classes] and final hidden states (a list of [len, d]),
    each example run alone at its own length, with no padding"""
    with torch.no_grad():
        logits = np.stack([ref(torch.tensor([ids]))[0].numpy() for _, _, ids in rows])
        hidden = [ref.hidden(torch.tensor([ids]))[0][0].numpy() for _, _, ids in rows]
    return logits, hidden


def hidden_checks(when, ours, theirs):
    """pipetrain's hidden states [n, CONTEXT, d] against torch's unpadded ones:
    the [CLS] position of every example, and every real position"""
    if ours.shape != (len(theirs), CONTEXT, theirs[0].shape[1]):
        sys.exit("pipetrain's hidden states have shape %s, not [%d, %d, %d]"
                 % (ours.shape, len(theirs), CONTEXT, theirs[0].shape[1]))
    real = np.concatenate([ours[i, :len(h)] for i, h in enumerate(theirs)])
    return {"%s [CLS] hidden states (torch unpadded)" % when: rel(ours[:, 0], np.stack([h[0] for h in theirs])),
            "%s hidden states, all %d real positions" % (when, len(real)): rel(real, np.concatenate(theirs))}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, minilm = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    torch.set_num_threads(1)
    cfg = json.load(open(os.path.join(minilm, "config.json")))
    vocab = open(os.path.join(minilm, "vocab.txt"), encoding="utf-8").read().split("\n")[:cfg["vocab_size"]]
    rng = np.random.default_rng(4)
    train, test = make_data(vocab, rng, STEPS * BATCH), make_data(vocab, rng, 12)
    pretrained = st.load(os.path.join(minilm, "model.safetensors"))
    d = cfg["hidden_size"]
    head = {"head.fc.weight": (rng.standard_normal((CLASSES, d)) * 0.05).astype(np.float32),
            "head.fc.bias": (rng.standard_normal(CLASSES) * 0.05).astype(np.float32)}

    with tempfile.TemporaryDirectory(prefix="pt-bert-parity-") as work:
        init = os.path.join(work, "init")
        os.makedirs(init)
        shutil.copy(os.path.join(minilm, "config.json"), init)
        st.save(os.path.join(init, "model.safetensors"),
                {**{k: v for k, v in pretrained.items() if k != "embeddings.position_ids"}, **head})
        write_tsv(os.path.join(work, "train.tsv"), train)
        write_tsv(os.path.join(work, "test.tsv"), test)
        config = f"""
run: {{dir: "{work}/run", seed: 3, threads: 1}}
model:
  kind: bert
  dim: {d}
  layers: {cfg['num_hidden_layers']}
  heads: {cfg['num_attention_heads']}
  mlp_hidden: {cfg['intermediate_size']}
  vocab: {cfg['vocab_size']}
  positions: {cfg['max_position_embeddings']}
  context: {CONTEXT}
  classes: {CLASSES}
  init_from: "{init}"
data:
  kind: text_classification
  train_file: "{work}/train.tsv"
  test_file: "{work}/test.tsv"
  vocab: "{minilm}/vocab.txt"
  shuffle: false
train:
  batch: {BATCH}
  epochs: 1
  max_steps: {STEPS}
  lr: {HP['lr']}
  min_lr: {HP['min_lr']}
  schedule: cosine
  warmup_steps: {HP['warmup']}
  weight_decay: {HP['wd']}
  grad_clip: {HP['clip']}
  eval_every: 0
pipeline: {{microbatches: 2}}
"""
        path = os.path.join(work, "config.yaml")
        open(path, "w").write(config)
        init_out = os.path.join(work, "init_logits.safetensors"), os.path.join(work, "init_hidden.safetensors")
        sh([binary, "eval", path, "--init", "--logits", init_out[0], "--hidden", init_out[1]])
        sh([binary, "train", path])
        run = os.path.join(work, "run")
        ckpt = os.path.join(run, "checkpoints", sorted(os.listdir(os.path.join(run, "checkpoints")))[-1])
        sh([binary, "export", ckpt, os.path.join(work, "export")])
        sh([binary, "eval", path, "--checkpoint", ckpt, "--logits", os.path.join(work, "logits.safetensors"),
            "--hidden", os.path.join(work, "hidden.safetensors")])
        losses = [r["loss"] for r in map(json.loads, open(os.path.join(run, "metrics.jsonl")))
                  if r["event"] == "step"]
        ours = st.load(os.path.join(work, "export", "model.safetensors"))
        logits = st.load(os.path.join(work, "logits.safetensors"))["logits"]
        hidden = st.load(os.path.join(work, "hidden.safetensors"))["hidden"]
        init_logits = st.load(init_out[0])["logits"]
        init_hidden = st.load(init_out[1])["hidden"]
        exported_cfg = json.load(open(os.path.join(work, "export", "config.json")))

    ref = B.BertClassifier(cfg["vocab_size"], cfg["max_position_embeddings"], cfg.get("type_vocab_size", 2), d,
                           cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["intermediate_size"],
                           CLASSES, cfg.get("layer_norm_eps", 1e-12))
    start = {k: torch.tensor(v) for k, v in pretrained.items() if k in ref.state_dict()}
    start.update({k: torch.tensor(v) for k, v in head.items()})
    missing = set(ref.state_dict()) - set(start)
    if missing:
        sys.exit("the reference has tensors the checkpoint lacks: %s" % sorted(missing))
    ref.load_state_dict(start)
    ref_init_logits, ref_init_hidden = alone(ref, test)
    decay = [p for n, p in ref.named_parameters() if B.decays(n, p)]
    other = [p for n, p in ref.named_parameters() if not B.decays(n, p)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": HP["wd"]},
                             {"params": other, "weight_decay": 0.0}],
                            lr=HP["lr"], betas=(HP["b1"], HP["b2"]), eps=HP["eps"])
    sched = M.lr_scheduler(opt, HP["min_lr"], HP["warmup"], STEPS, "cosine")
    ref_losses = []
    for s in range(STEPS):
        x, y = padded(train[s * BATCH:(s + 1) * BATCH])
        loss = F.cross_entropy(ref(x), y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), HP["clip"])
        opt.step()
        sched.step()
        ref_losses.append(loss.item())
    ref_logits, ref_hidden = alone(ref, test)
    with torch.no_grad():
        batched = ref(padded(test)[0]).numpy()

    failures = []
    print("step losses pipetrain %s" % " ".join("%.6f" % v for v in losses))
    print("step losses torch     %s" % " ".join("%.6f" % v for v in ref_losses))
    checks = {"losses": rel(losses, ref_losses),
              "step 0 test logits (torch unpadded)": rel(init_logits, ref_init_logits),
              **hidden_checks("step 0", init_hidden, ref_init_hidden),
              "step %d test logits (torch unpadded)" % STEPS: rel(logits, ref_logits),
              **hidden_checks("step %d" % STEPS, hidden, ref_hidden),
              "torch padded against torch unpadded": rel(batched, ref_logits)}
    theirs = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    if set(theirs) != set(ours):
        failures.append("tensor names differ: %s" % sorted(set(theirs) ^ set(ours)))
    perr = {}
    for k in sorted(set(theirs) & set(ours)):
        if k.endswith("attention.self.key.bias"):
            drift = max(np.max(np.abs(ours[k] - pretrained[k])), np.max(np.abs(theirs[k] - pretrained[k])))
            if not drift <= STEPS * HP["lr"]:
                failures.append("%s drifted %.2e" % (k, drift))
            continue
        perr[k] = rel(ours[k], theirs[k])
    worst = max(perr, key=perr.get)
    checks["worst of %d tensors (%s)" % (len(perr), worst)] = perr[worst]
    for k, e in perr.items():
        if not e <= TOL:
            failures.append("%s %.2e" % (k, e))
    for name, e in checks.items():
        print("%-60s rel err %.2e" % (name, e))
        if not e <= TOL and not name.startswith("worst"):
            failures.append(name)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                "max_position_embeddings"):
        if exported_cfg.get(key) != cfg[key]:
            failures.append("exported config.json %s %s, not %s" % (key, exported_cfg.get(key), cfg[key]))
    if failures:
        print("FAILED: " + "; ".join(failures))
        sys.exit(1)
    print("bert parity: passed (tolerance %.0e)" % TOL)


if __name__ == "__main__":
    main()
