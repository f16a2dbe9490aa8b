#!/usr/bin/env python3
"""Training throughput (samples/s) of pipetrain against PyTorch on the CPU,
same model, same batch, same threads, measured in one run.

Columns:
  pipetrain        `pipetrain train` (its data staging included), timed from
                   its metrics file over the steps after the warm-up
  torch eager      current PyTorch from PyPI (pinned, --torch; installed by
                   this script into a venv it makes once, --venv), eager
  torch compile    the same with torch.compile of the loss (forward and
                   backward; the default mode). Compilation happens in the
                   warm-up steps and is not timed: only the steps after the
                   warm-up are
  torch 1.13       Debian's python3-torch (/usr/bin/python3), eager; left
                   out when that Python has no torch

Both PyTorch 2 columns keep the better of two attention variants (three for
minilm, below): the
reference model's own (matmul, softmax, matmul) and
F.scaled_dot_product_attention. For demo and wide every PyTorch side trains the reference model
(tests/reference/model.py, checked against pipetrain by tests/reference/
parity.py: pre-LN, erf GELU, CLS head, same initialisation scheme) with
AdamW (betas 0.9, 0.999, eps 1e-8, weight decay 0.05 on matrix weights only;
PyTorch 2's fused CPU kernel), gradient clipping at norm 1 and pipetrain's
cosine schedule with warm-up, on Fashion-MNIST batches drawn in a shuffled
order from tensors in memory. The parameter counts of both sides are printed
and the run stops if they differ.

Models:
  demo   configs/vit_fmnist.yaml: d 64, 6 blocks, 4 heads, patch 7, MLP 4d
  wide   d 256, 4 blocks, 8 heads, patch 4, MLP 4d (matrix products take
         most of a step); pipetrain gets the same config with --set overrides
both at batch 128 on Fashion-MNIST (/usr/share/datasets/fashion-mnist).
  minilm configs/bert_finetune.yaml: fine-tuning the pretrained
         all-MiniLM-L6-v2 (d 384, 6 blocks, 12 heads, MLP 1536; datasets/
         from scripts/setup.sh) on the KJV parts, batch 32, context 64,
         dropout 0.1 (hidden states and attention probabilities, as the
         model's config.json says), AdamW with weight decay 0.01, clipping at
         norm 1, linear warm-up over 50 steps and decay, every side starting
         from the same pretrained weights. The PyTorch sides train
         tests/reference/bert.py (checked against pipetrain by tests/reference/
         bert_parity.py) on 4096 verses drawn from datasets/kjv_books.tsv by a
         fixed seed, cut and padded to 64 ids by pipetrain's own tokenizer
         (tests/tokenize/tokenize_dump beside the binary), in a shuffled
         order; pipetrain reads the whole file (its 90% training split, in its
         own order). Every side computes all 64 positions of every verse, the
         padding included (masked out of attention and pooling). The PyTorch
         2 columns try three models: the reference with its own attention,
         the reference with F.scaled_dot_product_attention and the padding
         mask, and Hugging Face's BertModel (transformers, pinned and
         installed into the venv with torch when minilm is asked for; its
         default attention) with the same mean-pooling head.

Thread settings: OMP_NUM_THREADS and torch.set_num_threads are the thread
count; with more than one thread each PyTorch column is also tried under other
settings (Debian's torch calls a pthread OpenBLAS beside its own OpenMP pool,
which oversubscribe the cores unless OPENBLAS_NUM_THREADS=1; OpenMP's
spinning waits) and keeps its best. Which variant and setting a column uses is
chosen in a selection round (every candidate once, on fewer steps) before the
timed rounds; then the four columns run alternately, --repeats rounds, and
the medians are reported, with the ratio of pipetrain to the best current
PyTorch column per (model, threads) and the smallest such ratio.

--quick runs every path (each column, each attention variant, the default
thread setting) once on a few steps, at 1 thread unless --threads says
otherwise: a smoke test of the script, whose numbers mean little. The first run needs the network for the venv (pip,
about 5 GB with PyTorch's CUDA dependencies); later runs reuse it.
--no-pypi leaves the two PyPI columns out (no venv, nothing downloaded):
pipetrain against Debian's torch alone, the ratio against that; with
--quick, a smoke test that runs offline.

With --canary, one bench/core_canary per CPU (bench/core_canary.c says
what it measures; bench/canary.py runs them) runs through the whole script, and each (model, threads)
also prints the cores' clock (the canaries' FMA GFLOP/s) during each
column's timed steps: the machine's clock moves by tens of percent over
minutes, and the columns' rounds alternate but do not run at once.

usage: torch_speed.py PIPETRAIN_BINARY [--threads 1,2] [--models demo,wide]
                      [--repeats 3] [--venv DIR] [--torch VERSION] [--quick]
                      [--no-pypi] [--canary [CORE_CANARY]]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import canary  # noqa: E402  (bench/canary.py)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
DEBIAN_PYTHON = "/usr/bin/python3"
TORCH_PIN = "2.15.0"  # the newest torch on PyPI when this script was written
TRANSFORMERS_PIN = "5.25.0"  # likewise transformers, for the minilm model's third variant
MINILM = os.path.join(ROOT, "datasets", "minilm")
KJV_BOOKS = os.path.join(ROOT, "datasets", "kjv_books.tsv")
BERT_VERSES, BERT_CONTEXT = 4096, 64
BATCH = 128  # the ViTs'; minilm's is its own

# ViT: dim, layers, heads, patch (MLP 4 * dim); steps: (warm-up, timed) per run
MODELS = {
    "demo": {"dim": 64, "layers": 6, "heads": 4, "patch": 7, "steps": (20, 100)},
    "wide": {"dim": 256, "layers": 4, "heads": 8, "patch": 4, "steps": (5, 15)},
    "minilm": {"bert": True, "steps": (3, 12), "batch": 32},
}
QUICK_STEPS = {"demo": (3, 5), "wide": (2, 2), "minilm": (1, 2)}


# ------------------------------------------------------------------ worker
# Runs under the PyTorch being measured (venv or Debian's Python): trains
# and prints one JSON line. Only this part imports torch.

def idx_file(path):
    import gzip
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = np.frombuffer(raw[4:4 + 4 * ndim], dtype=">u4")
    return np.frombuffer(raw[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)


def sdpa_forward(self, x):
    """Attn.forward of tests/reference/model.py through F.scaled_dot_product_attention"""
    import torch.nn.functional as F
    B, T, C = x.shape
    q, k, v = self.qkv(self.ln(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
    return x + self.proj(y.transpose(1, 2).reshape(B, T, C))


def timed_training(job, model, decays, weight_decay, lr, schedule, x, y, batch_size):
    """Trains model on batches of (x, y) in a fixed shuffled order with AdamW
    (weight decay on the parameters decays(name, p) names), clipping at norm
    1 and pipetrain's learning-rate schedule (min_lr, warm-up, total steps,
    kind), the loss compiled in job's compile mode; prints the JSON line of
    the steps after the warm-up."""
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import model as M
    named = list(model.named_parameters())
    fused = {"fused": True} if hasattr(torch, "compile") else {}  # PyTorch 2
    opt = torch.optim.AdamW([{"params": [p for n, p in named if decays(n, p)], "weight_decay": weight_decay},
                             {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.999), eps=1e-8, **fused)
    warmup, steps = job["warmup"], job["steps"]
    sched = M.lr_scheduler(opt, *schedule)

    def loss_of(xb, yb):
        return F.cross_entropy(model(xb), yb)

    step_loss = torch.compile(loss_of) if job["mode"] == "compile" else loss_of
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1))
    started = time.perf_counter()
    for step in range(warmup + steps):
        if step == warmup:
            warm_s = time.perf_counter() - started
            start, t0 = time.perf_counter(), time.monotonic()
        i = step * batch_size % (len(x) - batch_size)
        batch = order[i:i + batch_size]
        loss = step_loss(x.index_select(0, batch), y.index_select(0, batch))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    last = loss.item()
    elapsed, t1 = time.perf_counter() - start, time.monotonic()
    print(json.dumps({"samples_per_s": steps * batch_size / elapsed, "loss": last, "warmup_s": warm_s,
                      "window": [t0, t1],
                      "params": sum(p.numel() for p in model.parameters()),
                      "torch": torch.__version__}))


def worker(job):
    if MODELS[job["model"]].get("bert"):
        bert_worker(job)
        return
    import types
    import numpy as np
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import model as M

    torch.set_num_threads(job["threads"])
    images = idx_file(os.path.join(DATA, "train-images-idx3-ubyte.gz"))
    labels = idx_file(os.path.join(DATA, "train-labels-idx1-ubyte.gz"))
    x = torch.tensor(((images / 255.0 - 0.2860) / 0.3530).astype(np.float32)).unsqueeze(1)
    y = torch.tensor(labels.astype(np.int64))
    m = MODELS[job["model"]]
    torch.manual_seed(1)
    model = M.PipetrainViT(m["dim"], m["layers"], m["heads"], 4 * m["dim"], 1, 28, m["patch"], 10)
    if job["attention"] == "sdpa":
        for b in model.blocks:
            b.attn.forward = types.MethodType(sdpa_forward, b.attn)
    timed_training(job, model, M.decays, 0.05, 0.002, (2e-5, 300, 12 * (len(x) // BATCH), "cosine"), x, y, BATCH)


def bert_sdpa_forward(self, x, key_ok, drop=None, unit=0):
    """Layer.forward of tests/reference/bert.py with its attention through
    F.scaled_dot_product_attention (the padding mask, dropout on the
    probabilities inside it)"""
    import torch.nn.functional as F
    B, T, C = x.shape
    hd = C // self.heads
    s = self.attention.self

    def split(t):
        return t.view(B, T, self.heads, hd).transpose(1, 2)

    y = F.scaled_dot_product_attention(split(s.query(x)), split(s.key(x)), split(s.value(x)),
                                       attn_mask=key_ok[:, None, None, :],
                                       dropout_p=self.p_attn if self.training else 0.0)
    y = y.transpose(1, 2).reshape(B, T, C)
    o = self.attention.output
    x = o.LayerNorm(x + drop(unit, 1, o.dense(y)))
    h = F.gelu(self.intermediate.dense(x))
    return self.output.LayerNorm(x + drop(unit + 1, 0, self.output.dense(h)))


def bert_model(variant, cfg, classes):
    """the model of a minilm job, from the pretrained weights, in training
    form: (module, its loss of (ids, labels))"""
    import types
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import bert as B
    import st
    p_hidden, p_attn = cfg["hidden_dropout_prob"], cfg["attention_probs_dropout_prob"]
    d = cfg["hidden_size"]
    if variant == "transformers":
        from transformers import BertModel

        class HF(nn.Module):
            """Hugging Face's encoder, pipetrain's head (mean over the real tokens)"""

            def __init__(self):
                super().__init__()
                self.bert = BertModel.from_pretrained(MINILM, add_pooling_layer=False)
                self.fc = nn.Linear(d, classes)

            def forward(self, ids):
                ok = ids != 0
                ok[:, 0] = True
                h = self.bert(input_ids=ids, attention_mask=ok.long()).last_hidden_state
                m = ok.to(h.dtype)[..., None]
                return self.fc(F.dropout((h * m).sum(1) / m.sum(1), p_hidden, self.training))

        model = HF()
    else:
        model = B.BertClassifier(cfg["vocab_size"], cfg["max_position_embeddings"], cfg["type_vocab_size"], d,
                                 cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["intermediate_size"],
                                 classes, cfg["layer_norm_eps"])
        weights = {k[5:] if k.startswith("bert.") else k: torch.from_numpy(v)
                   for k, v in st.load(os.path.join(MINILM, "model.safetensors")).items()}
        own = model.state_dict()
        missing, _ = model.load_state_dict({k: v for k, v in weights.items() if k in own}, strict=False)
        if sorted(missing) != ["head.fc.bias", "head.fc.weight"]:  # only the new classifier starts afresh
            sys.exit("the pretrained weights leave more than the classifier untouched: %s" % missing)

        def dropper(unit, site, x):
            return F.dropout(x, p_attn if unit % 2 == 1 and unit < 2 * len(model.encoder.layer) and site == 0
                             else p_hidden, model.training)

        model.dropper = dropper
        if variant == "sdpa":
            for layer in model.encoder.layer:
                layer.p_attn = p_attn
                layer.forward = types.MethodType(bert_sdpa_forward, layer)
    model.train()
    return model


def bert_worker(job):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import bert as B
    torch.set_num_threads(job["threads"])
    with open(job["data"]) as f:
        data = json.load(f)
    ids = torch.zeros(len(data["ids"]), BERT_CONTEXT, dtype=torch.long)
    for i, row in enumerate(data["ids"]):
        ids[i, :len(row)] = torch.tensor(row)
    y = torch.tensor(data["labels"])
    with open(os.path.join(MINILM, "config.json")) as f:
        cfg = json.load(f)
    torch.manual_seed(1)
    model = bert_model(job["attention"], cfg, len(data["names"]))
    timed_training(job, model, B.decays, 0.01, 5e-5, (0.0, 50, len(ids) // MODELS["minilm"]["batch"], "linear"),
                   ids, y, MODELS["minilm"]["batch"])


# ------------------------------------------------------------------ driver

def ensure_venv(venv, version, base_python, transformers=None):
    """The venv's Python, with torch==version in it, and transformers==transformers
    unless that is None (made and installed once)."""
    py = os.path.join(venv, "bin", "python")
    probe = ("import torch, numpy; print(torch.__version__.split('+')[0])\n"
             "try:\n import transformers; print(transformers.__version__)\n"
             "except ImportError:\n print('none')")

    def versions():
        r = subprocess.run([py, "-c", probe], capture_output=True, text=True)
        return r.stdout.split() if r.returncode == 0 else []

    if not os.path.isfile(py):
        print("making %s (%s -m venv)" % (venv, base_python), flush=True)
        subprocess.run([base_python, "-m", "venv", venv], check=True)

    def fits():
        have = versions()
        return have[:1] == [version] and (transformers is None or have[1:] == [transformers])

    if fits():
        return py
    packages = ["torch==" + version, "numpy"] + (["transformers==" + transformers] if transformers else [])
    print("installing %s into %s (once; large)" % (", ".join(packages), venv), flush=True)
    subprocess.run([py, "-m", "pip", "install", "--quiet"] + packages, check=True)
    if not fits():
        sys.exit("the venv has torch and transformers %s, not %s and %s" % (versions(), version, transformers))
    return py


def has_torch(python):
    return os.path.isfile(python) and subprocess.run(
        [python, "-c", "import torch, numpy"], capture_output=True).returncode == 0


def batch_of(model):
    return MODELS[model].get("batch", BATCH)


def pipetrain_cmd(binary, model, threads, total_steps, run_dir, *sets):
    """`pipetrain train` of the model's demo config (with a ViT's overrides), sets added"""
    m = MODELS[model]
    if m.get("bert"):
        cmd = [binary, "train", os.path.join(ROOT, "configs", "bert_finetune.yaml"),
               "--set", "run.dir=" + run_dir, "--set", "run.threads=%d" % threads,
               "--set", "train.max_steps=%d" % total_steps, "--set", "train.epochs=1",
               "--set", "train.eval_every=0", "--set", "train.eval_examples=32",
               "--set", "train.batch=%d" % m["batch"], "--set", "model.context=%d" % BERT_CONTEXT,
               "--set", "train.log_every=1000"]
        return cmd + [a for s in sets for a in ("--set", s)]
    cmd = [binary, "train", os.path.join(ROOT, "configs", "vit_fmnist.yaml"),
           "--set", "run.dir=" + run_dir, "--set", "run.threads=%d" % threads,
           "--set", "train.max_steps=%d" % total_steps, "--set", "train.epochs=1",
           "--set", "train.eval_every=0", "--set", "train.eval_examples=128",
           "--set", "train.batch=%d" % BATCH, "--set", "model.dim=%d" % m["dim"],
           "--set", "model.layers=%d" % m["layers"], "--set", "model.heads=%d" % m["heads"],
           "--set", "model.patch=%d" % m["patch"], "--set", "model.mlp_hidden=0"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def pipetrain_run(binary, model, threads, warmup, steps, work, env, clocked=False):
    run_dir = os.path.join(work, "run-%s-%d" % (model, threads))
    subprocess.run(["rm", "-rf", run_dir], check=True)
    total = warmup + steps
    cmd = pipetrain_cmd(binary, model, threads, total, run_dir)
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        # with clocked, the run's time_s placed on time.monotonic (polls during the warm-up)
        offset = canary.first_step_clock(p, run_dir) if clocked else None
        p.wait()
        out.seek(0)
        text = out.read()
    if p.returncode:
        sys.exit("pipetrain failed (%s):\n%s" % (" ".join(cmd), text[-3000:]))
    params = int(re.search(r"pipetrain: (?:vit|bert), (\d+) parameters", text).group(1))
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [r for r in map(json.loads, f) if r["event"] == "step"]
    # time_s of step s is when it ended: the window is steps warmup+1 .. total
    t0, t1 = rows[warmup - 1]["time_s"], rows[total - 1]["time_s"]
    window = [offset + t0, offset + t1] if offset is not None else None
    return {"samples_per_s": steps * batch_of(model) / (t1 - t0), "params": params, "window": window}


def torch_run(python, job, setting):
    env = dict(os.environ, OMP_NUM_THREADS=str(job["threads"]), **setting)
    r = subprocess.run([python, os.path.abspath(__file__), "--worker", json.dumps(job)],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit("PyTorch run failed (%s %s):\n%s" % (python, json.dumps(job), r.stderr[-3000:]))
    return json.loads(r.stdout.strip().splitlines()[-1])


def settings(threads, debian):
    """environment settings a PyTorch column tries at this thread count"""
    if threads == 1:
        return [{}]
    if debian:
        return [{}, {"OPENBLAS_NUM_THREADS": "1"}, {"OMP_WAIT_POLICY": "passive"}]
    return [{}, {"OMP_WAIT_POLICY": "passive"}]


def words(setting):
    return " ".join("%s=%s" % kv for kv in sorted(setting.items())) or "default"


class Column:
    """one PyTorch side: its Python, mode and candidates (attention, setting)"""

    def __init__(self, name, python, mode, attentions, debian):
        self.name, self.python, self.mode = name, python, mode
        self.attentions, self.debian = attentions, debian

    def candidates(self, model, threads):
        extra = ["transformers"] if MODELS[model].get("bert") and not self.debian else []
        return [(a, s) for a in self.attentions + extra for s in settings(threads, self.debian)]

    def run(self, model, threads, warmup, steps, cand, data=None):
        job = {"model": model, "threads": threads, "warmup": warmup, "steps": steps,
               "mode": self.mode, "attention": cand[0], "data": data}
        return torch_run(self.python, job, cand[1])


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(json.loads(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipetrain")
    ap.add_argument("--threads", help="thread counts (default 1,2; --quick: 1)")
    ap.add_argument("--models", default="demo,wide", help="of demo, wide, minilm")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds (the median is reported)")
    ap.add_argument("--venv", help="venv for current PyTorch (default: venv-torch beside the binary)")
    ap.add_argument("--torch", default=TORCH_PIN, help="PyTorch version from PyPI (default %(default)s)")
    ap.add_argument("--base-python", default=DEBIAN_PYTHON, help="Python the venv is made from")
    ap.add_argument("--debian-python", default=DEBIAN_PYTHON, help="Python with Debian's torch")
    ap.add_argument("--quick", action="store_true", help="every path once on a few steps (smoke test)")
    ap.add_argument("--no-pypi", action="store_true",
                    help="leave out the PyPI columns (no venv, nothing downloaded): pipetrain against "
                    "Debian's torch alone, the ratio against it")
    ap.add_argument("--canary", nargs="?", const="", metavar="CORE_CANARY",
                    help="run bench/core_canary on each CPU (default: the one built beside the binary) and "
                    "print the cores' clock (FMA GFLOP/s) during each column's timed steps")
    args = ap.parse_args()
    binary = os.path.abspath(args.pipetrain)
    venv = os.path.abspath(args.venv or os.path.join(os.path.dirname(binary), "venv-torch"))
    models = args.models.split(",")
    threads_list = [int(t) for t in (args.threads or ("1" if args.quick else "1,2")).split(",")]
    for m in models:
        if m not in MODELS:
            sys.exit("unknown model %r (demo, wide, minilm)" % m)
    env, columns = dict(os.environ), []
    if not args.no_pypi:
        new_py = ensure_venv(venv, args.torch, args.base_python,
                             TRANSFORMERS_PIN if any(MODELS[m].get("bert") for m in models) else None)
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(venv, "inductor-cache"))
        os.environ.update(env)  # the workers inherit it: compiled kernels are kept between runs
        columns = [Column("torch %s eager" % args.torch, new_py, "eager", ["naive", "sdpa"], False),
                   Column("torch %s compile" % args.torch, new_py, "compile", ["naive", "sdpa"], False)]
    if has_torch(args.debian_python):
        old = subprocess.run([args.debian_python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
        columns.append(Column("torch %s (Debian)" % old, args.debian_python, "eager", ["naive"], True))
    else:
        print("%s has no torch: the Debian column is left out" % args.debian_python)
    if not columns:
        sys.exit("no PyTorch to compare with (--no-pypi, and %s has no torch)" % args.debian_python)
    repeats = 1 if args.quick else args.repeats
    print("pipetrain %s; %s; batch %s; %s" % (
        binary, "no PyTorch from PyPI (--no-pypi)" if args.no_pypi else
        "PyTorch from PyPI %s (%s)" % (args.torch, venv), ", ".join("%s %d" % (m, batch_of(m)) for m in models),
        "QUICK: one round on a few steps, a smoke test" if args.quick else
        "medians of %d alternating rounds after a selection round" % repeats), flush=True)
    if not args.no_pypi:
        print("torch.compile's compilation runs in the warm-up steps, which are not timed")

    results = []
    with tempfile.TemporaryDirectory(prefix="pt-torch-speed-") as work:
        canaries = None
        if args.canary is not None:
            canaries = canary.Canaries(canary.canary_path(args.canary, binary), work)
        try:
            measure(args, models, threads_list, columns, binary, work, env, repeats, results, canaries)
        finally:
            if canaries:
                canaries.stop()
    report(args, columns, results)


def clock_of(canaries, windows):
    """the median over rounds of the canaries' median FMA GFLOP/s in each timed window, or None"""
    bursts = canaries.bursts()
    got = [canary.during(bursts, w[0], w[1]) for w in windows if w]
    got = [g[0] for g in got if g]
    return statistics.median(got) if got else None


def bert_data(binary, work):
    """BERT_VERSES verses of datasets/kjv_books.tsv (drawn by a fixed seed) as
    pipetrain's tokenizer makes them, cut at BERT_CONTEXT ids ([CLS] ... [SEP]),
    with their labels: a JSON file in work for the minilm workers."""
    import random
    dump = os.path.join(os.path.dirname(binary), "tests", "tokenize", "tokenize_dump")
    for need in (KJV_BOOKS, os.path.join(MINILM, "model.safetensors"), dump):
        if not os.path.exists(need):
            sys.exit("minilm needs %s (datasets/: bash scripts/setup.sh; tokenize_dump: the build "
                     "of the binary)" % need)
    with open(KJV_BOOKS, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t", 1) for line in f if line.strip()]
    rows = random.Random(1).sample(rows, min(BERT_VERSES, len(rows)))
    lines = os.path.join(work, "verses.txt")
    with open(lines, "w", encoding="utf-8") as f:
        f.writelines(text + "\n" for _, text in rows)
    p = subprocess.run([dump, os.path.join(MINILM, "vocab.txt"), lines, str(BERT_CONTEXT)],
                       capture_output=True, text=True)
    ids = [[int(t) for t in line.split()] for line in p.stdout.splitlines()]
    if p.returncode or len(ids) != len(rows):
        sys.exit("tokenize_dump failed:\n" + p.stderr[-2000:])
    names = sorted({label for label, _ in rows})
    path = os.path.join(work, "minilm-data.json")
    with open(path, "w") as f:
        json.dump({"ids": ids, "labels": [names.index(label) for label, _ in rows], "names": names}, f)
    return path


def measure(args, models, threads_list, columns, binary, work, env, repeats, results, canaries):
    """the selection and timed rounds of every (model, threads), into results"""
    for model in models:
        warmup, steps = QUICK_STEPS[model] if args.quick else MODELS[model]["steps"]
        data = bert_data(binary, work) if MODELS[model].get("bert") else None
        for threads in threads_list:
            chosen, noted = {}, []
            for col in columns:
                cands = col.candidates(model, threads)
                if args.quick:  # every attention variant, the default setting
                    chosen[col.name] = [c for c in cands if not c[1]]
                    continue
                if len(cands) == 1:
                    chosen[col.name] = cands
                    continue
                # selection: every candidate once on half the timed steps
                rates = [(col.run(model, threads, warmup, max(steps // 2, 2), c, data)["samples_per_s"], i)
                         for i, c in enumerate(cands)]
                best = max(rates)[1]
                chosen[col.name] = [cands[best]]
                noted.append("%s: %s" % (col.name, ", ".join(
                    "%s/%s %s" % (c[0], words(c[1]), rate_text(r)) for (r, _), c in zip(rates, cands))))
            rates = {"pipetrain": []}
            rates.update({c.name: [] for c in columns})
            windows = {k: [] for k in rates}
            params = {}
            for _ in range(repeats):
                p = pipetrain_run(binary, model, threads, warmup, steps, work, env, canaries is not None)
                rates["pipetrain"].append(p["samples_per_s"])
                windows["pipetrain"].append(p["window"])
                params["pipetrain"] = p["params"]
                for col in columns:
                    # quick: every candidate once, the best kept
                    best = None
                    for c in chosen[col.name]:
                        t = col.run(model, threads, warmup, steps, c, data)
                        params[col.name] = t["params"]
                        if best is None or t["samples_per_s"] > best["samples_per_s"]:
                            best = t
                    rates[col.name].append(best["samples_per_s"])
                    windows[col.name].append(best.get("window"))
            if len(set(params.values())) != 1:
                sys.exit("parameter counts differ for %s: %s" % (model, params))
            med = {k: statistics.median(v) for k, v in rates.items()}
            best_new = max(med[c.name] for c in ([c for c in columns if not c.debian] or columns))
            results.append((model, threads, params["pipetrain"], med, best_new,
                            {k: chosen[k][0] for k in chosen}, noted))
            print("%s, %d thread%s: %s parameters each; %s" % (
                model, threads, "" if threads == 1 else "s", params["pipetrain"],
                ", ".join("%s %s" % (k, rate_text(v)) for k, v in med.items())), flush=True)
            for n in noted:
                print("  selection (samples/s): " + n, flush=True)
            if canaries:
                clocks = {k: clock_of(canaries, w) for k, w in windows.items()}
                print("  the cores' clock during the timed steps (canary FMA GFLOP/s, median of the rounds): "
                      + ", ".join("%s %s" % (k, "%.1f" % v if v else "-") for k, v in clocks.items()),
                      flush=True)


def rate_text(r):
    """samples/s to 3 significant digits or more: no decimals from 100 up"""
    return ("%.0f" if r >= 100 else "%.1f") % r


def report(args, columns, results):
    heads = ["pipetrain"] + [c.name for c in columns]
    print()
    print("| model | threads | params | " + " | ".join(h + " samples/s" for h in heads) +
          " | pipetrain / best torch %s |" % ("(Debian)" if args.no_pypi else args.torch))
    print("|" + " --- |" * (len(heads) + 4))
    ratios = []
    for model, threads, n, med, best_new, chose, _ in results:
        ratios.append(med["pipetrain"] / best_new)
        print("| %s | %d | %d | %s | %.2f |" % (model, threads, n, " | ".join(
            rate_text(med[h]) for h in heads), ratios[-1]))
    print()
    if not args.quick:
        for model, threads, _, _, _, chose, _ in results:
            print("%s, %d thread%s: %s" % (model, threads, "" if threads == 1 else "s", "; ".join(
                "%s: %s attention, %s" % (k, a, words(s)) for k, (a, s) in chose.items())))
    print("min ratio %.2f" % min(ratios))


if __name__ == "__main__":
    main()
