#!/usr/bin/env python3
"""PyTorch parity of whole models (ViT and causal GPT).

pipetrain and the reference model (model.py) start from the same safetensors
weights and train 5 AdamW steps on the same batches (no shuffling, global-norm
clipping active, warm-up + cosine schedule, weight decay, 1 to 3 micro-batches on the
pipetrain side); then both compute logits on the test split. Compared, float32
on both sides: the loss of every step, the logits, and every parameter after
the 5 steps, each as max|pipetrain - torch| / max|torch| over the tensor; and
each step's global gradient norm before clipping (pipetrain's logged
grad_norm, torch's clip_grad_norm_) relative to torch's. Adam's update hardly
moves when one tensor's gradient is off by a constant factor, so the weights
alone would not show it (a head bias counted twice passed them with clipping
off); the norm does. And each block's gradient norm, as the auto freeze
policy takes it: one decision after the last step (it freezes nothing that
trains) logs every block's mean norm per step, against torch's. One case's
5 steps cross two epochs with clipping above every norm, so Adam's step
count must run on across epochs and the clip must leave the gradients alone;
one GPT case trains with train.grad_clip 0, no clipping.

Tolerance 1e-4: float32 rounding differs between two implementations by a few
1e-7 per op; through ~20 layers of ops and 5 Adam steps (which divide by
sqrt(v), amplifying small gradient differences of near-zero gradients) the
largest observed deviation is reported, and must stay below 1e-4.

One slice is compared differently: the key part of every qkv.bias. Adding a
constant b_k to all keys adds q.b_k to a whole row of scores, which softmax
ignores, so its true gradient is identically zero; computed in float32 it is
rounding noise (~1e-9 against ~1e-2 for the query bias), and Adam divides that
noise by its own magnitude, moving those entries by up to ~lr per step in a
direction neither implementation can agree on. For those entries the test
checks what is true instead: on both sides they stay within STEPS * lr of their
initial values.

usage: parity.py PIPETRAIN_BINARY [WORKDIR]
"""
import gzip
import math
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
import st  # noqa: E402

STEPS, TOL = 5, 1e-4
MEAN, STD = 0.2860, 0.3530
HP = dict(lr=3e-3, min_lr=1e-4, warmup=2, wd=0.1, clip=0.5, b1=0.9, b2=0.999, eps=1e-8)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write("command failed: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
        sys.exit(1)
    return r.stdout


def write_idx(path, arr):
    magic = 0x803 if arr.ndim == 3 else 0x801
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">I", magic))
        f.write(struct.pack(">" + "I" * arr.ndim, *arr.shape))
        f.write(arr.astype(np.uint8).tobytes())


def perturbed_init(model, seed):
    """Reference init plus noise, so LayerNorm weights are not 1 and biases not 0."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def recorded(shape):
    """What the weights' metadata says of the model, as `pipetrain export`
    writes it: model.init_from checks it against the config."""
    return {"model.heads": str(shape["heads"]), "model.ln_eps": "1e-05"}


def torch_train(model, batches, loss_fn, clip):
    decay = [p for n, p in model.named_parameters() if M.decays(n, p)]
    other = [p for n, p in model.named_parameters() if not M.decays(n, p)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": HP["wd"]},
                             {"params": other, "weight_decay": 0.0}],
                            lr=HP["lr"], betas=(HP["b1"], HP["b2"]), eps=HP["eps"])
    sched = M.lr_scheduler(opt, HP["min_lr"], HP["warmup"], STEPS, "cosine")
    losses, counts, norms, blocks = [], [], [], []
    named = list(model.named_parameters())
    layers = 1 + max(int(n.split(".")[1]) for n, _ in named if n.startswith("blocks."))
    for step, (x, y) in enumerate(batches):
        out = model(x)
        loss = loss_fn(out, y)
        # training accuracy as pipetrain logs it: rows whose highest logit
        # (the first on a tie, as torch's argmax) is the target
        counts.append((int((out.argmax(-1) == y).sum()), y.numel()))
        opt.zero_grad()
        loss.backward()
        # each block's gradient norm (its attention's and MLP's parameters), as
        # the auto freeze policy takes it: before clipping
        blocks.append([math.sqrt(sum(float((p.grad.double() ** 2).sum()) for n, p in named
                                     if n.startswith("blocks.%d." % b))) for b in range(layers)])
        # (train.grad_clip 0 is no clipping; torch's max_norm 0 would zero them)
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                          clip if clip > 0 else math.inf)))
        opt.step()
        sched.step()
        losses.append(loss.item())
    # the auto policy's one decision, after the last step, reports each
    # block's mean norm per step over the run
    return losses, counts, norms, [sum(col) / len(blocks) for col in zip(*blocks)]


def check_block_norms(name, logged, ref):
    """The auto policy's input: the one decision's per-block norms (mean per
    step of each block's gradient norm) against torch's, each relative."""
    if len(logged) != 1 or len(logged[0]) != len(ref):
        return ["freeze decisions %s, expected one of %d blocks" % (logged, len(ref))]
    err = max(abs(a - b) / b for a, b in zip(logged[0], ref))
    print("%s: block gradient norms pipetrain %s, torch %s (rel err %.2e)" % (
        name, " ".join("%.6f" % v for v in logged[0]), " ".join("%.6f" % v for v in ref), err))
    return [] if err <= TOL else ["block gradient norms"]


def check_train_accuracy(name, accs, counts):
    """Each step's train_accuracy against torch's count on the same batch.
    A row may flip where its two highest logits tie to within the two
    sides' rounding (about 1e-6 here), so one row a step may differ; a wrong
    count (another denominator, rows of another micro-batch missed) moves
    it by more."""
    if len(accs) != len(counts):
        return ["train_accuracy: %d steps logged, %d trained" % (len(accs), len(counts))]
    off = [abs(a * n - c) for a, (c, n) in zip(accs, counts)]
    print("%s: train accuracy pipetrain %s" % (name, " ".join("%.4f" % a for a in accs)))
    print("%s: train accuracy torch     %s" % (name, " ".join("%.4f" % (c / n) for c, n in counts)))
    return [] if max(off) <= 1 + 1e-6 else ["train_accuracy differs by %.1f rows" % max(off)]


def pipetrain_run(binary, work, config):
    cfg = os.path.join(work, "config.yaml")
    with open(cfg, "w") as f:
        f.write(config)
    sh([binary, "train", cfg])
    run_dir = os.path.join(work, "run")
    ckpt = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[-1]
    ckpt = os.path.join(run_dir, "checkpoints", ckpt)
    sh([binary, "export", ckpt, os.path.join(work, "final.safetensors")])
    sh([binary, "eval", cfg, "--checkpoint", ckpt, "--logits", os.path.join(work, "logits.safetensors")])
    steps = [r for r in map(json.loads, open(os.path.join(run_dir, "metrics.jsonl")))
             if r["event"] == "step"]
    return ([r["loss"] for r in steps], st.load(os.path.join(work, "final.safetensors")),
            st.load(os.path.join(work, "logits.safetensors"))["logits"],
            [r["train_accuracy"] for r in steps], [r["grad_norm"] for r in steps],
            [r["norms"] for r in map(json.loads, open(os.path.join(run_dir, "metrics.jsonl")))
             if r["event"] == "freeze"])


def common_config(work, shape):
    return f"""
run: {{dir: "{work}/run", seed: 3, threads: {shape['threads']}}}
train:
  batch: {shape['batch']}
  epochs: {-(-STEPS // shape.get('epoch_steps', STEPS))}
  max_steps: {STEPS}
  lr: {HP['lr']}
  min_lr: {HP['min_lr']}
  schedule: cosine
  warmup_steps: {HP['warmup']}
  weight_decay: {HP['wd']}
  grad_clip: {shape.get('clip', HP['clip'])}
  eval_every: 0
pipeline: {{microbatches: {shape['micro']}}}
# one decision, after the last step: it freezes nothing that trains, and
# logs the per-block gradient norms the auto policy decides on
freeze: {{policy: auto, unit: step, start: {STEPS}, every: 1}}
model:
  init_from: "{work}/init.safetensors"
"""


def key_bias_slices(params, dim):
    """qkv.bias tensors split into (q and v entries, k entries)"""
    out = {}
    for k, v in params.items():
        if k.endswith("attn.qkv.bias"):
            out[k] = (np.concatenate([v[:dim], v[2 * dim:]]), v[dim:2 * dim])
    return out


def norms_err(ours, theirs):
    """The largest of the steps' |ours - theirs| / theirs (1 when the step
    counts differ)."""
    if len(ours) != len(theirs):
        return 1.0
    return max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(ours, theirs))


def compare(name, losses, params, logits, ref_losses, ref_model, ref_logits, init, dim, norms,
            ref_norms):
    worst, bad = 0.0, []
    loss_err = rel(losses, ref_losses)
    logit_err = rel(logits, ref_logits)
    norm_err = norms_err(norms, ref_norms)
    print("%s: step losses pipetrain %s" % (name, " ".join("%.6f" % v for v in losses)))
    print("%s: step losses torch     %s" % (name, " ".join("%.6f" % v for v in ref_losses)))
    print("%s: grad norms pipetrain  %s" % (name, " ".join("%.6f" % v for v in norms)))
    print("%s: grad norms torch      %s" % (name, " ".join("%.6f" % v for v in ref_norms)))
    print("%s: loss rel err %.2e, logits rel err %.2e, grad norm rel err %.2e" % (
        name, loss_err, logit_err, norm_err))
    for key, err in (("losses", loss_err), ("logits", logit_err), ("grad norms", norm_err)):
        worst = max(worst, err)
        if not err <= TOL:
            bad.append(key)
    ref_params = {k: v.detach().numpy() for k, v in ref_model.state_dict().items()}
    if set(ref_params) != set(params):
        print("%s: tensor names differ: %s" % (name, sorted(set(ref_params) ^ set(params))))
        return 1.0, ["names"]
    ours, theirs, start = (key_bias_slices(p, dim) for p in (params, ref_params, init))
    perr = {}
    for k in ref_params:
        if k in ours:  # q and v entries against the tolerance, k entries against the drift bound
            perr[k + "[q,v]"] = rel(ours[k][0], theirs[k][0])
            drift = max(np.max(np.abs(ours[k][1] - start[k][1])), np.max(np.abs(theirs[k][1] - start[k][1])))
            if not drift <= STEPS * HP["lr"]:
                bad.append(k + "[k] drift %.2e" % drift)
        else:
            perr[k] = rel(params[k], ref_params[k])
    wk = max(perr, key=perr.get)
    print("%s: %d parameter tensors, worst rel err %.2e (%s)" % (name, len(perr), perr[wk], wk))
    worst = max(worst, perr[wk])
    bad += [k for k, e in perr.items() if not e <= TOL]
    return worst, bad


# Shapes: the first of each kind is the original case; the others move every
# size the kernels tile over off the demo's multiples (head widths 4 to 64,
# token counts 17 to 64, odd batches and micro-batch splits that do not
# divide, 1 to 3 threads), so a tile edge, a remainder loop or a thread split
# that is wrong only away from round sizes shows up as a parity failure.
VIT_SHAPES = [
    dict(dim=32, layers=2, heads=2, mlp=64, size=16, patch=4, batch=16, micro=2, threads=1),
    dict(dim=48, layers=3, heads=4, mlp=136, size=20, patch=5, batch=12, micro=3, threads=2),
    dict(dim=128, layers=1, heads=2, mlp=200, size=28, patch=7, batch=7, micro=1, threads=3),
    dict(dim=20, layers=2, heads=5, mlp=52, size=12, patch=3, batch=9, micro=2, threads=2),
    # 2 steps an epoch, so the 5 cross two epochs (Adam's bias correction
    # counts every update, not the epoch's); clipping at 10, above every
    # norm here, so it must leave the gradients alone
    dict(dim=32, layers=2, heads=2, mlp=64, size=16, patch=4, batch=8, micro=2, threads=1,
         epoch_steps=2, clip=10.0),
]
GPT_SHAPES = [
    dict(dim=32, layers=2, heads=2, mlp=64, context=16, batch=8, micro=2, threads=1),
    dict(dim=40, layers=3, heads=5, mlp=72, context=23, batch=6, micro=3, threads=2),
    dict(dim=96, layers=1, heads=3, mlp=384, context=64, batch=3, micro=1, threads=3),
    # train.grad_clip 0: no clipping at all (the gradients as they are)
    dict(dim=32, layers=2, heads=2, mlp=64, context=16, batch=8, micro=2, threads=1, clip=0.0),
]


def shape_name(kind, shape):
    return kind + "(" + ",".join("%s=%s" % kv for kv in shape.items()) + ")"


def vit_case(binary, work, shape):
    rng = np.random.default_rng(0)
    size, batch, dim = shape["size"], shape["batch"], shape["dim"]
    # epoch_steps: the training split holds that many batches, so the 5
    # steps cross epochs (the same batches again, unshuffled): Adam's step
    # count and the schedule run on across them
    per_epoch = shape.get("epoch_steps", STEPS)
    n_train, n_test = per_epoch * batch, 24
    images = rng.integers(0, 256, (n_train + n_test, size, size), dtype=np.uint8)
    labels = rng.integers(0, 10, n_train + n_test).astype(np.uint8)
    for split, sl in (("train", slice(0, n_train)), ("test", slice(n_train, None))):
        write_idx(os.path.join(work, split + "-images.gz"), images[sl])
        write_idx(os.path.join(work, split + "-labels.gz"), labels[sl])
    torch.manual_seed(0)
    ref = M.PipetrainViT(dim, shape["layers"], shape["heads"], shape["mlp"], 1, size, shape["patch"], 10)
    init = perturbed_init(ref, 1)
    st.save(os.path.join(work, "init.safetensors"), init, recorded(shape))
    config = common_config(work, shape) + f"""
  kind: vit
  dim: {dim}
  layers: {shape['layers']}
  heads: {shape['heads']}
  mlp_hidden: {shape['mlp']}
  patch: {shape['patch']}
  classes: 10
data:
  kind: idx
  shuffle: false
  mean: {MEAN}
  std: {STD}
  train_images: "{work}/train-images.gz"
  train_labels: "{work}/train-labels.gz"
  test_images: "{work}/test-images.gz"
  test_labels: "{work}/test-labels.gz"
"""
    losses, params, logits, accs, norms, block_norms = pipetrain_run(binary, work, config)
    x = torch.tensor(((images / 255.0 - MEAN) / STD).astype(np.float32)).unsqueeze(1)
    y = torch.tensor(labels.astype(np.int64))
    batches = [(x[(i % per_epoch) * batch:(i % per_epoch + 1) * batch],
                y[(i % per_epoch) * batch:(i % per_epoch + 1) * batch]) for i in range(STEPS)]
    ref_losses, counts, ref_norms, ref_blocks = torch_train(ref, batches, F.cross_entropy,
                                                            shape.get("clip", HP["clip"]))
    with torch.no_grad():
        ref_logits = ref(x[n_train:]).numpy()
    bad_blocks = check_block_norms(shape_name("vit", shape), block_norms, ref_blocks)
    worst, bad = compare(shape_name("vit", shape), losses, params, logits, ref_losses, ref,
                         ref_logits, init, dim, norms, ref_norms)
    return worst, bad + bad_blocks + check_train_accuracy(shape_name("vit", shape), accs, counts)


def gpt_case(binary, work, shape):
    rng = np.random.default_rng(1)
    words = [b"the ", b"and ", b"lord ", b"said ", b"unto ", b"them ", b"light ", b"was ", b"good. "]
    context, batch, dim, test_fraction = shape["context"], shape["batch"], shape["dim"], 0.25
    need = int((STEPS * batch + 8) * context / (1 - test_fraction)) + 2
    text = b""
    while len(text) < max(3000, need):
        text += b"".join(words[i] for i in rng.integers(0, len(words), 700))
    text = text[:max(3000, need)]
    with open(os.path.join(work, "text.txt"), "wb") as f:
        f.write(text)
    torch.manual_seed(0)
    ref = M.PipetrainGPT(dim, shape["layers"], shape["heads"], shape["mlp"], 256, context)
    init = perturbed_init(ref, 2)
    st.save(os.path.join(work, "init.safetensors"), init, recorded(shape))
    config = common_config(work, shape) + f"""
  kind: gpt
  dim: {dim}
  layers: {shape['layers']}
  heads: {shape['heads']}
  mlp_hidden: {shape['mlp']}
  context: {context}
data:
  kind: text
  shuffle: false
  text: "{work}/text.txt"
  test_fraction: {test_fraction}
sample: {{length: 0}}
"""
    losses, params, logits, accs, norms, block_norms = pipetrain_run(binary, work, config)
    cut = int(len(text) * (1 - test_fraction))

    def examples(split):
        n = (len(split) - 1) // context
        a = np.frombuffer(split, dtype=np.uint8).astype(np.int64)
        xs = np.stack([a[i * context:i * context + context] for i in range(n)])
        ys = np.stack([a[i * context + 1:i * context + context + 1] for i in range(n)])
        return torch.tensor(xs), torch.tensor(ys)

    xtr, ytr = examples(text[:cut])
    xte, _ = examples(text[cut:])
    batches = [(xtr[i * batch:(i + 1) * batch], ytr[i * batch:(i + 1) * batch]) for i in range(STEPS)]

    def lm_loss(logits, y):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    ref_losses, counts, ref_norms, ref_blocks = torch_train(ref, batches, lm_loss, shape.get("clip", HP["clip"]))
    with torch.no_grad():
        ref_logits = ref(xte).reshape(-1, 256).numpy()
    bad_blocks = check_block_norms(shape_name("gpt", shape), block_norms, ref_blocks)
    worst, bad = compare(shape_name("gpt", shape), losses, params, logits, ref_losses, ref,
                         ref_logits, init, dim, norms, ref_norms)
    return worst, bad + bad_blocks + check_train_accuracy(shape_name("gpt", shape), accs, counts)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    torch.set_num_threads(1)
    worst, failures = 0.0, []
    cases = [("vit", vit_case, s) for s in VIT_SHAPES] + [("gpt", gpt_case, s) for s in GPT_SHAPES]
    for kind, case, shape in cases:
        with tempfile.TemporaryDirectory(prefix="pt-parity-") as work:
            w, bad = case(binary, work, shape)
            worst = max(worst, w)
            failures += ["%s:%s" % (shape_name(kind, shape), b) for b in bad]
    print("worst relative error over all compared tensors: %.2e (tolerance %.0e)" % (worst, TOL))
    if failures:
        print("FAILED: " + ", ".join(failures))
        sys.exit(1)
    print("parity: passed")


if __name__ == "__main__":
    main()
