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
  - each step's global gradient norm before clipping (the logged grad_norm
    against torch's clip_grad_norm_), relative: Adam's update hardly moves
    when one tensor's gradient is off by a constant factor;
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

All of it three times. First in evaluation form, dropout 0 on both sides (set
explicitly: model.dropout's auto would take the config.json's 0.1): parity
with torch's own dropout is impossible, its masks come from torch's RNG.
Then in BERT's training form, model.dropout and model.attention_dropout 0.1:
pipetrain's masks are a pure function of (run.seed, step, example id, unit,
site, element) (nn/dropout.h), which this script computes again in numpy and
the torch reference applies where Hugging Face's BertModel and
BertForSequenceClassification apply dropout (bert.py's dropper), for the
examples pipetrain logged at each step (run.log_samples); so the losses and
every tensor after 5 steps check the places, the masks and the 1 / (1 - p)
scaling, and the exported config.json must say 0.1. Last, the training form
again on a small BERT of random weights whose sizes are off the multiples
the kernels tile over (hidden 40 in 5 heads of 8, intermediate 72, 2
layers), batches of 9 in 3 micro-batches, context 19, 2 threads, peak lr
3e-3 (its weights move by several percent in the 5 steps).

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

STEPS, TOL, CLASSES = 5, 1e-4, 4
# the real model's phases: batches of 8 in 2 micro-batches, 1 thread, context 24
MINILM_SHAPE = dict(batch=8, context=24, micro=2, threads=1)
HP = dict(lr=1e-4, min_lr=1e-5, warmup=2, wd=0.01, clip=1.0, b1=0.9, b2=0.999, eps=1e-8)
LABELS = ["acts", "gospel", "law", "psalm"]  # sorted: class index = position


def make_data(vocab, rng, n, context):
    """n (label, text, ids) with 1 to 40 whole-vocabulary words"""
    words = [(i, w) for i, w in enumerate(vocab) if re.fullmatch(r"[a-z]{3,12}", w) and i > 1000]
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 41))
        pick = [words[j] for j in rng.integers(0, len(words), k)]
        ids = [cls] + [i for i, _ in pick][:context - 2] + [sep]
        out.append((int(rng.integers(0, CLASSES)), " ".join(w for _, w in pick), ids))
    return out


def write_tsv(path, rows):
    with open(path, "w") as f:
        for label, text, _ in rows:
            f.write("%s\t%s\n" % (LABELS[label], text))


def padded(rows, context):
    ids = np.zeros((len(rows), context), np.int64)
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


def hidden_checks(when, ours, theirs, context):
    """pipetrain's hidden states [n, context, d] against torch's unpadded ones:
    the [CLS] position of every example, and every real position"""
    if ours.shape != (len(theirs), context, theirs[0].shape[1]):
        sys.exit("pipetrain's hidden states have shape %s, not [%d, %d, %d]"
                 % (ours.shape, len(theirs), context, theirs[0].shape[1]))
    real = np.concatenate([ours[i, :len(h)] for i, h in enumerate(theirs)])
    return {"%s [CLS] hidden states (torch unpadded)" % when: rel(ours[:, 0], np.stack([h[0] for h in theirs])),
            "%s hidden states, all %d real positions" % (when, len(real)): rel(real, np.concatenate(theirs))}


# ------------------------------------------------ pipetrain's dropout masks
# nn/dropout.h written again in numpy: a mask is a pure function of (run.seed,
# the step, the example's id, the unit, the site, the element), so the torch
# side can make pipetrain's masks itself and apply them where it applies
# dropout.
M64 = (1 << 64) - 1
GAMMA = 0x9e3779b97f4a7c15


def mix(z):
    """splitmix64's finaliser on uint64 arrays (or a Python int)"""
    if isinstance(z, int):
        z &= M64
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
        return z ^ (z >> 31)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return z ^ (z >> np.uint64(31))


def drop_key(seed, step, unit, site):
    h = mix(seed ^ 0x6a09e667f3bcc909)
    h = mix(h + GAMMA * (step + 1))
    return mix(h + GAMMA * (unit * 16 + site + 1))


def drop_mask(key, ids, shape, p):
    """[len(ids), *shape] float32 multipliers: 1 / (1 - p) where kept, 0 where dropped"""
    n = int(np.prod(shape))
    e = np.arange(1, n + 1, dtype=np.uint64)
    thr = np.uint64(int(p * 4294967296.0))
    keep = np.float32(1.0 / (1.0 - p))
    out = np.empty((len(ids), n), np.float32)
    with np.errstate(over="ignore"):
        for b, i in enumerate(ids):
            row = np.uint64(mix(key + GAMMA * (int(i) + 1)))
            bits = mix(row + np.uint64(GAMMA) * e) >> np.uint64(32)
            out[b] = np.where(bits >= thr, keep, np.float32(0))
    return torch.tensor(out.reshape((len(ids),) + tuple(shape)))


def pipetrain_dropper(seed, p_hidden, p_attn):
    """A dropper for bert.BertClassifier with pipetrain's masks; set .step and
    .ids (the batch's examples' ids) before each forward."""
    class Dropper:
        step, ids = 0, []

        def __call__(self, unit, site, x):
            attn = x.dim() == 4  # the probabilities [B, H, T, T]; every other site is hidden
            p = p_attn if attn else p_hidden
            if p == 0:
                return x
            return x * drop_mask(drop_key(seed, self.step, unit, site), self.ids, x.shape[1:], p)
    return Dropper()


# ----------------------------------------------------------------- one phase

def run_pipetrain(binary, work, init, minilm, cfg, d, train, test, dropout, shape):
    """pipetrain's side: eval --init, 5 steps, export, eval of the checkpoint"""
    write_tsv(os.path.join(work, "train.tsv"), train)
    write_tsv(os.path.join(work, "test.tsv"), test)
    config = f"""
run: {{dir: "{work}/run", seed: 3, threads: {shape['threads']}, log_samples: true}}
model:
  kind: bert
  dim: {d}
  layers: {cfg['num_hidden_layers']}
  heads: {cfg['num_attention_heads']}
  mlp_hidden: {cfg['intermediate_size']}
  vocab: {cfg['vocab_size']}
  positions: {cfg['max_position_embeddings']}
  context: {shape['context']}
  classes: {CLASSES}
  init_from: "{init}"
  dropout: {dropout[0]}
  attention_dropout: {dropout[1]}
data:
  kind: text_classification
  train_file: "{work}/train.tsv"
  test_file: "{work}/test.tsv"
  vocab: "{minilm}/vocab.txt"
  shuffle: false
train:
  batch: {shape['batch']}
  epochs: 1
  max_steps: {STEPS}
  lr: {shape.get('lr', HP['lr'])}
  min_lr: {HP['min_lr']}
  schedule: cosine
  warmup_steps: {HP['warmup']}
  weight_decay: {HP['wd']}
  grad_clip: {HP['clip']}
  eval_every: 0
pipeline: {{microbatches: {shape['micro']}}}
"""
    path = os.path.join(work, "config.yaml")
    open(path, "w").write(config)
    out = {}
    init_out = os.path.join(work, "init_logits.safetensors"), os.path.join(work, "init_hidden.safetensors")
    sh([binary, "eval", path, "--init", "--logits", init_out[0], "--hidden", init_out[1]])
    sh([binary, "train", path])
    run = os.path.join(work, "run")
    ckpt = os.path.join(run, "checkpoints", sorted(os.listdir(os.path.join(run, "checkpoints")))[-1])
    sh([binary, "export", ckpt, os.path.join(work, "export")])
    sh([binary, "eval", path, "--checkpoint", ckpt, "--logits", os.path.join(work, "logits.safetensors"),
        "--hidden", os.path.join(work, "hidden.safetensors")])
    steps = [r for r in map(json.loads, open(os.path.join(run, "metrics.jsonl"))) if r["event"] == "step"]
    out["losses"] = [r["loss"] for r in steps]
    out["grad_norms"] = [r["grad_norm"] for r in steps]
    out["samples"] = [r["ids"] for r in map(json.loads, open(os.path.join(run, "samples-rank0.jsonl")))]
    out["weights"] = st.load(os.path.join(work, "export", "model.safetensors"))
    out["logits"] = st.load(os.path.join(work, "logits.safetensors"))["logits"]
    out["hidden"] = st.load(os.path.join(work, "hidden.safetensors"))["hidden"]
    out["init_logits"] = st.load(init_out[0])["logits"]
    out["init_hidden"] = st.load(init_out[1])["hidden"]
    out["config"] = json.load(open(os.path.join(work, "export", "config.json")))
    # the classifier's rows are the training file's labels in byte order
    out["labels"] = {str(i): name for i, name in enumerate(sorted({LABELS[r[0]] for r in train}))}
    return out


def run_torch(cfg, d, pretrained, head, train, test, dropout, samples, shape):
    """torch's side of the same; with dropout, pipetrain's masks for the ids
    pipetrain logged at each step"""
    ref = B.BertClassifier(cfg["vocab_size"], cfg["max_position_embeddings"], cfg.get("type_vocab_size", 2), d,
                           cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["intermediate_size"],
                           CLASSES, cfg.get("layer_norm_eps", 1e-12))
    start = {k: torch.tensor(v) for k, v in pretrained.items() if k in ref.state_dict()}
    start.update({k: torch.tensor(v) for k, v in head.items()})
    missing = set(ref.state_dict()) - set(start)
    if missing:
        sys.exit("the reference has tensors the checkpoint lacks: %s" % sorted(missing))
    ref.load_state_dict(start)
    out = {}
    out["init_logits"], out["init_hidden"] = alone(ref, test)
    decay = [p for n, p in ref.named_parameters() if B.decays(n, p)]
    other = [p for n, p in ref.named_parameters() if not B.decays(n, p)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": HP["wd"]},
                             {"params": other, "weight_decay": 0.0}],
                            lr=shape.get("lr", HP["lr"]), betas=(HP["b1"], HP["b2"]), eps=HP["eps"])
    sched = M.lr_scheduler(opt, HP["min_lr"], HP["warmup"], STEPS, "cosine")
    dropper = pipetrain_dropper(3, *dropout) if any(dropout) else None
    losses, norms = [], []
    batch, context = shape["batch"], shape["context"]
    for s in range(STEPS):
        ids = list(range(s * batch, (s + 1) * batch))  # no shuffling: file order
        if samples[s] != ids:
            sys.exit("pipetrain's step %d took examples %s, not %s" % (s + 1, samples[s], ids))
        x, y = padded([train[i] for i in ids], context)
        if dropper:
            dropper.step, dropper.ids = s, ids
        ref.dropper = dropper
        loss = F.cross_entropy(ref(x), y)
        ref.dropper = None  # evaluation form from here
        opt.zero_grad()
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(ref.parameters(), HP["clip"])))
        opt.step()
        sched.step()
        losses.append(loss.item())
    out["losses"] = losses
    out["grad_norms"] = norms
    out["logits"], out["hidden"] = alone(ref, test)
    with torch.no_grad():
        out["batched"] = ref(padded(test, context)[0]).numpy()
    out["weights"] = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    return out


def compare(label, ours, theirs, pretrained, cfg, shape):
    """the checks of one phase; returns its failures"""
    failures = []
    print("%s: step losses pipetrain %s" % (label, " ".join("%.6f" % v for v in ours["losses"])))
    print("%s: step losses torch     %s" % (label, " ".join("%.6f" % v for v in theirs["losses"])))
    # each step's gradient norm before clipping, relative to torch's: the
    # weights after Adam's steps hardly show a gradient off by a factor
    if len(ours["grad_norms"]) != len(theirs["grad_norms"]):
        failures.append("%s: %d gradient norms logged, %d steps" % (label, len(ours["grad_norms"]),
                                                                    len(theirs["grad_norms"])))
    norm_err = max([abs(a - b) / max(abs(b), 1e-30) for a, b in zip(ours["grad_norms"], theirs["grad_norms"])]
                   or [1.0])
    checks = {"losses": rel(ours["losses"], theirs["losses"]),
              "gradient norms before clipping": norm_err,
              "step 0 test logits (torch unpadded)": rel(ours["init_logits"], theirs["init_logits"]),
              **hidden_checks("step 0", ours["init_hidden"], theirs["init_hidden"], shape["context"]),
              "step %d test logits (torch unpadded)" % STEPS: rel(ours["logits"], theirs["logits"]),
              **hidden_checks("step %d" % STEPS, ours["hidden"], theirs["hidden"], shape["context"]),
              "torch padded against torch unpadded": rel(theirs["batched"], theirs["logits"])}
    mine, ref = ours["weights"], theirs["weights"]
    if set(ref) != set(mine):
        failures.append("tensor names differ: %s" % sorted(set(ref) ^ set(mine)))
    perr = {}
    for k in sorted(set(ref) & set(mine)):
        if k.endswith("attention.self.key.bias"):
            drift = max(np.max(np.abs(mine[k] - pretrained[k])), np.max(np.abs(ref[k] - pretrained[k])))
            if not drift <= STEPS * shape.get("lr", HP["lr"]):
                failures.append("%s drifted %.2e" % (k, drift))
            continue
        perr[k] = rel(mine[k], ref[k])
    worst = max(perr, key=perr.get)
    checks["worst of %d tensors (%s)" % (len(perr), worst)] = perr[worst]
    for k, e in perr.items():
        if not e <= TOL:
            failures.append("%s %s %.2e" % (label, k, e))
    for name, e in checks.items():
        print("%s: %-60s rel err %.2e" % (label, name, e))
        if not e <= TOL and not name.startswith("worst"):
            failures.append("%s %s" % (label, name))
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                "max_position_embeddings"):
        if ours["config"].get(key) != cfg[key]:
            failures.append("exported config.json %s %s, not %s" % (key, ours["config"].get(key), cfg[key]))
    if ours["config"].get("id2label") != ours["labels"]:
        failures.append("exported config.json id2label %s, not %s" % (ours["config"].get("id2label"),
                                                                     ours["labels"]))
    if ours["config"].get("label2id") != {v: int(k) for k, v in ours["labels"].items()}:
        failures.append("exported config.json label2id %s" % ours["config"].get("label2id"))
    return failures


def run_phase(binary, minilm, label, cfg, pretrained, head, dropout, shape, vocab_dir, rng):
    """one phase: pipetrain and torch from the same weights; returns (failures, pipetrain's side)"""
    vocab = open(os.path.join(vocab_dir, "vocab.txt"), encoding="utf-8").read().split("\n")[:cfg["vocab_size"]]
    train = make_data(vocab, rng, STEPS * shape["batch"], shape["context"])
    test = make_data(vocab, rng, 12, shape["context"])
    d = cfg["hidden_size"]
    with tempfile.TemporaryDirectory(prefix="pt-bert-parity-") as work:
        init = os.path.join(work, "init")
        os.makedirs(init)
        with open(os.path.join(init, "config.json"), "w") as f:
            json.dump(cfg, f)
        st.save(os.path.join(init, "model.safetensors"),
                {**{k: v for k, v in pretrained.items() if k != "embeddings.position_ids"}, **head})
        ours = run_pipetrain(binary, work, init, vocab_dir, cfg, d, train, test, dropout, shape)
    theirs = run_torch(cfg, d, pretrained, head, train, test, dropout, ours["samples"], shape)
    return compare(label, ours, theirs, pretrained, cfg, shape), ours


def odd_bert(minilm_cfg, rng):
    """A small BERT from random weights whose sizes are off every multiple the
    kernels tile over: hidden 40 in 5 heads of 8, intermediate 72, 2 layers;
    the config and tensors as Hugging Face would write them"""
    cfg = dict(minilm_cfg, hidden_size=40, num_hidden_layers=2, num_attention_heads=5, intermediate_size=72,
               max_position_embeddings=40, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    torch.manual_seed(5)
    ref = B.BertClassifier(cfg["vocab_size"], cfg["max_position_embeddings"], cfg.get("type_vocab_size", 2), 40,
                           2, 5, 72, CLASSES, cfg.get("layer_norm_eps", 1e-12))
    weights = {}
    for k, v in ref.state_dict().items():
        if k.startswith("head."):
            continue
        base = 1.0 if k.endswith("LayerNorm.weight") else 0.0
        weights[k] = (base + 0.1 * rng.standard_normal(tuple(v.shape))).astype(np.float32)
    return cfg, weights


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, minilm = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    torch.set_num_threads(1)
    cfg = json.load(open(os.path.join(minilm, "config.json")))
    rng = np.random.default_rng(7)
    pretrained = st.load(os.path.join(minilm, "model.safetensors"))
    d = cfg["hidden_size"]
    head = {"head.fc.weight": (rng.standard_normal((CLASSES, d)) * 0.05).astype(np.float32),
            "head.fc.bias": (rng.standard_normal(CLASSES) * 0.05).astype(np.float32)}

    failures = []
    # evaluation form (dropout 0: the config.json's 0.1 would be auto's), then
    # BERT's training form with pipetrain's masks on both sides
    for label, dropout in (("no dropout", (0, 0)), ("dropout 0.1", (0.1, 0.1))):
        bad, ours = run_phase(binary, minilm, label, cfg, pretrained, head, dropout, MINILM_SHAPE, minilm,
                              np.random.default_rng(4))
        failures += bad
        if label == "dropout 0.1":
            exported = tuple(ours["config"].get(k) for k in ("hidden_dropout_prob",
                                                              "attention_probs_dropout_prob"))
            if exported != dropout:
                failures.append("exported config.json dropout %s, not %s" % (exported, dropout))
            if rel(ours["losses"], phase0_losses) < 1e-3:
                failures.append("dropout did not change the step losses")
        phase0_losses = ours["losses"]
    # the same checks on a BERT of odd sizes, with dropout, batches of 9 in 3
    # micro-batches of 3, context 19 (more texts cut and padded), 2 threads;
    # lr 3e-3, so that 5 steps move its random weights by several percent
    odd_cfg, odd_weights = odd_bert(cfg, rng)
    odd_head = {"head.fc.weight": (rng.standard_normal((CLASSES, 40)) * 0.05).astype(np.float32),
                "head.fc.bias": (rng.standard_normal(CLASSES) * 0.05).astype(np.float32)}
    bad, _ = run_phase(binary, minilm, "odd sizes, dropout 0.1", odd_cfg, odd_weights, odd_head, (0.1, 0.1),
                       dict(batch=9, context=19, micro=3, threads=2, lr=3e-3), minilm, np.random.default_rng(6))
    failures += bad
    if failures:
        print("FAILED: " + "; ".join(failures))
        sys.exit(1)
    print("bert parity: passed (tolerance %.0e)" % TOL)


if __name__ == "__main__":
    main()
