#!/usr/bin/env python3
"""Training throughput of a GPT-2-small-shaped model on one GPU: pipetrain's
CUDA backend in bf16 against PyTorch on the same machine, same model, batch
and sequence length, measured in one run.

Model: 12 blocks, d=768, 12 heads, MLP 3072, context T=1024, pre-LN, erf GELU.
pipetrain's GPT is byte-level, so the vocabulary is 256 (GPT-2's is 50257):
the embedding and LM head are tiny and the parameter count is ~86M, not 124M.
The PyTorch side is the same architecture (tests/reference/model.py,
PipetrainGPT), on CUDA with bf16 autocast and AdamW (fused when this torch has
it), eager and torch.compile'd; that reference spells attention out (it was
written for torch 1.13), so the "+sdpa" rows replace its attention with
F.scaled_dot_product_attention (FlashAttention when available) for a second,
stronger baseline.

Both sides do the same step: forward, cross-entropy over all T positions,
backward, global-norm clipping at 1.0, AdamW. pipetrain runs `pipetrain train`
on synthetic text (run.device cuda, run.precision bf16); its rate comes from
the step timestamps in its metrics file after the warm-up steps. PyTorch's
rate is timed with CUDA synchronisation around the timed steps.

Model FLOPs per token (the PaLM convention, causal masking not discounted):
    6 * N  +  12 * L * T * d
N = all parameters (embeddings included), L = 12 blocks, T = 1024, d = 768.
MFU = tokens/s * FLOPs per token / peak, with the dense bf16 tensor-core peak
of the GPU from this table (by the name nvidia-smi reports):
    H100 SXM (HBM3) 989.4 TFLOPS, H100 PCIe 756, H100 NVL 835, H200 989.4,
    A100 312; other GPUs: MFU not reported.

usage: gpt2_gpu.py [PIPETRAIN_BINARY] [--batch 16] [--steps 30] [--warmup 10]
                   [--no-torch] [--no-compile]
Run from anywhere; it needs no network. Without a CUDA-capable torch it says
so and reports pipetrain alone.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
L, D, H, T, V = 12, 768, 12, 1024, 256
HIDDEN = 4 * D

PEAKS = [  # (substrings that must all appear in the name, TFLOPS), first match wins
    (("H200",), 989.4),
    (("H100", "PCIE"), 756.0),
    (("H100", "NVL"), 835.0),
    (("H100",), 989.4),  # SXM: "NVIDIA H100 80GB HBM3"
    (("A100",), 312.0),
]


def param_count():
    per_block = (2 * D) + (3 * D * D + 3 * D) + (D * D + D) + (2 * D) + (HIDDEN * D + HIDDEN) + (D * HIDDEN + D)
    return V * D + T * D + L * per_block + 2 * D + V * D  # embeddings, blocks, final LN, LM head (no bias)


def flops_per_token():
    return 6 * param_count() + 12 * L * T * D


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, check=True).stdout
        return out.strip().splitlines()[0].strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        return None


def peak_for(name):
    if not name:
        return None
    up = name.upper()
    for keys, tflops in PEAKS:
        if all(k in up for k in keys):
            return tflops * 1e12
    return None


def write_config(cfg, run_dir, batch, steps, layers=L):
    """The benchmark's pipetrain config (bench/gpu_kernels.py uses it too)."""
    with open(cfg, "w") as f:
        f.write(f"""# written by bench/gpt2_gpu.py
run:
  dir: {run_dir}
  seed: 1
  device: cuda
  precision: bf16
  metrics: true
model:
  kind: gpt
  dim: {D}
  layers: {layers}
  heads: {H}
  mlp_hidden: {HIDDEN}
  context: {T}
data:
  kind: synthetic_text
  synthetic_examples: {max(16, (steps + 4) * batch)}
train:
  batch: {batch}
  epochs: 1
  max_steps: {steps}
  lr: 0.0006
  schedule: constant
  warmup_steps: 0
  weight_decay: 0.1
  grad_clip: 1.0
  log_every: 10
  eval_every: 0
  eval_examples: {batch}
sample:
  length: 0
""")


def run_pipetrain(binary, batch, steps, warmup, work):
    run_dir = os.path.join(work, "pipetrain-run")
    cfg = os.path.join(work, "gpt2_small_bf16.yaml")
    write_config(cfg, run_dir, batch, steps)
    proc = subprocess.run([binary, "train", cfg], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("pipetrain train failed (%d):\n%s\n%s" % (proc.returncode, proc.stdout[-4000:],
                                                                   proc.stderr[-4000:]))
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    steps_rows = [r for r in rows if r.get("event") == "step"]
    if len(steps_rows) < warmup + 2:
        raise RuntimeError("pipetrain logged %d steps, need more than %d" % (len(steps_rows), warmup + 1))
    t0, t1 = steps_rows[warmup - 1]["time_s"], steps_rows[-1]["time_s"]
    timed = len(steps_rows) - warmup
    return {"tokens_per_s": timed * batch * T / (t1 - t0), "step_ms": 1000 * (t1 - t0) / timed,
            "loss": steps_rows[-1]["loss"]}


def torch_available():
    try:
        import torch
    except ImportError as e:
        return None, "torch is not importable (%s)" % e
    if not torch.cuda.is_available():
        return None, "torch %s is importable but has no CUDA device" % torch.__version__
    return torch, None


def run_torch(torch, batch, steps, warmup, compiled, sdpa):
    import math
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import model as M

    torch.manual_seed(1)
    dev = torch.device("cuda")
    net = M.PipetrainGPT(D, L, H, HIDDEN, V, T)

    def attn_reference(self, x):
        # the reference's math, with its causal mask made on x's device
        B, Tn, C = x.shape
        hd = C // self.heads
        q, k, v = self.qkv(self.ln(x)).view(B, Tn, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        if self.causal:
            att = att.masked_fill(torch.ones(Tn, Tn, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        return x + self.proj((att.softmax(-1) @ v).transpose(1, 2).reshape(B, Tn, C))

    def attn_sdpa(self, x):
        B, Tn, C = x.shape
        hd = C // self.heads
        q, k, v = self.qkv(self.ln(x)).view(B, Tn, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return x + self.proj(y.transpose(1, 2).reshape(B, Tn, C))

    for blk in net.blocks:
        blk.attn.forward = (attn_sdpa if sdpa else attn_reference).__get__(blk.attn)
    net = net.to(dev)
    # GPTEmbed builds its positions on the CPU; keep them on the device
    net.embed.forward = (lambda self, tok: self.tok(tok) + self.pos(torch.arange(tok.shape[1], device=tok.device))
                         ).__get__(net.embed)
    decay = [p for n, p in net.named_parameters() if M.decays(n, p)]
    other = [p for n, p in net.named_parameters() if not M.decays(n, p)]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=6e-4, fused=True)
        fused = True
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(groups, lr=6e-4)
        fused = False
    step_fn_model = torch.compile(net) if compiled else net
    tokens = torch.randint(0, V, (batch, T + 1), device=dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = step_fn_model(x)
            loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps - warmup):
        loss = step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    timed = steps - warmup
    out = {"tokens_per_s": timed * batch * T / elapsed, "step_ms": 1000 * elapsed / timed,
           "loss": float(loss.item()), "fused_adamw": fused}
    del net, opt, step_fn_model
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipetrain", nargs="?", default=os.path.join(ROOT, "build-gpu", "pipetrain"))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    if args.steps <= args.warmup + 1:
        ap.error("--steps must exceed --warmup + 1")

    name = gpu_name()
    peak = peak_for(name)
    fpt = flops_per_token()
    print("GPU: %s" % (name or "unknown (nvidia-smi gave no name)"))
    print("peak dense bf16: %s" % ("%.1f TFLOPS" % (peak / 1e12) if peak else "not in the table: MFU not reported"))
    print("model: GPT-2-small shape, byte-level (vocab 256): L=%d d=%d heads=%d T=%d, %.1fM parameters"
          % (L, D, H, T, param_count() / 1e6))
    print("FLOPs per token: 6*N + 12*L*T*d = %.3f GFLOP" % (fpt / 1e9))
    print("batch %d x %d tokens, %d steps, the first %d not timed" % (args.batch, T, args.steps, args.warmup))

    results = []
    with tempfile.TemporaryDirectory(prefix="pt-gpt2-") as work:
        try:
            results.append(("pipetrain cuda-bf16", run_pipetrain(os.path.abspath(args.pipetrain), args.batch,
                                                                 args.steps, args.warmup, work)))
        except Exception as e:  # report and go on to PyTorch
            print("pipetrain: FAILED: %s" % e)
    torch = None
    if not args.no_torch:
        torch, why = torch_available()
        if torch is None:
            print("PyTorch: %s; reporting pipetrain alone" % why)
    if torch is not None:
        variants = [("eager", False, False), ("eager+sdpa", False, True)]
        if not args.no_compile and hasattr(torch, "compile"):
            variants += [("compile", True, False), ("compile+sdpa", True, True)]
        for label, compiled, sdpa in variants:
            try:
                r = run_torch(torch, args.batch, args.steps, args.warmup, compiled, sdpa)
                results.append(("torch %s %s%s" % (torch.__version__, label, "" if r["fused_adamw"] else
                                                   " (AdamW unfused)"), r))
            except Exception as e:
                print("torch %s: FAILED: %s" % (label, str(e).splitlines()[0] if str(e) else type(e).__name__))
                torch.cuda.empty_cache()

    base = next((r["tokens_per_s"] for n, r in results if n.startswith("pipetrain")), None)
    print()
    print("| implementation | tokens/s | ms/step | MFU | final loss | pipetrain / this |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n, r in results:
        mfu = "%.1f%%" % (100 * r["tokens_per_s"] * fpt / peak) if peak else "n/a"
        ratio = "%.2f" % (base / r["tokens_per_s"]) if base else "n/a"
        print("| %s | %.0f | %.1f | %s | %.4f | %s |" % (n, r["tokens_per_s"], r["step_ms"], mfu, r["loss"], ratio))
    print("(final loss: pipetrain trains on a stream of synthetic text, PyTorch repeats one random batch and"
          " memorises it; the column shows that each side trains, the two are not comparable)")
    if not base:
        sys.exit(1)


if __name__ == "__main__":
    main()
