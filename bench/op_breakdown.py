#!/usr/bin/env python3
"""Where a training step of pipetrain's CPU backend goes: the time and
GFLOP/s of every op (forward, backward, optimizer) against the cores' FMA
peak, for the two models of bench/torch_speed.py (demo: d 64, 6 blocks, 4
heads, patch 7; wide: d 256, 4 blocks, 8 heads, patch 4; batch 128,
Fashion-MNIST) at 1 and 2 threads.

Each case is one `pipetrain train` with run.profile_ops true (see the README:
a timing layer in front of the backend's ops, only when asked). The run's
first 3 steps are not timed; its op table (RUN_DIR/op_profile-rank0.json) is
printed per op and shape, then summed by kind and phase. FLOPs and bytes are
nominal (products 2mnk, elementwise arithmetic as written, each operand moved
once); the peak is measured by pipetrain with an FMA micro-kernel at the run's
thread count, as the output says. The last two columns are the op's fastest
single call (one shape per row): against the mean they tell a slow kernel
from a machine that slowed some calls (a VM's steal, a sibling thread). Residual adds have no op of their own: they
are fused into the linear forward (+res) and the LayerNorm backward (+res).

usage: op_breakdown.py PIPETRAIN_BINARY [--threads 1,2] [--models demo,wide]
                       [--steps N] [--quick]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_speed as TS  # noqa: E402  (the models and the pipetrain command)

UNTIMED = 3  # the run's first steps, which run.profile_ops does not time
STEPS = {"demo": 30, "wide": 6}
QUICK_STEPS = {"demo": 5, "wide": 2}

KINDS = [  # (kind, ops)
    ("matmul (linear)", ("linear_fwd", "linear_bwd", "linear_bwd_mul")),
    ("attention", ("attention_fwd", "attention_bwd", "attention_first_fwd",
                   "attention_first_bwd")),
    ("layernorm", ("layernorm_fwd", "layernorm_bwd")),
    ("gelu", ("gelu_fwd", "gelu_bwd")),
    ("dropout (bert)", ("dropout",)),
    ("softmax + loss", ("cross_entropy",)),
    ("embed / patch / CLS", ("patchify", "vit_assemble_fwd", "vit_assemble_bwd", "token_embed_fwd",
                             "token_embed_bwd", "copy_rows", "mean_pool_fwd", "mean_pool_bwd")),
    ("optimizer (AdamW, clip, zero grads)", ("adamw", "sumsq", "scale", "zero")),
    ("host copies", ("upload", "download", "copy", "par_from_f32", "par_to_f32", "act_from_f32",
                     "act_to_f32")),
]


def phase(op):
    if op in ("adamw", "sumsq", "scale", "zero"):
        return "optimizer"
    if op.endswith("_bwd") or op == "linear_bwd_mul":
        return "backward"
    if op.endswith("_fwd") or op in ("patchify", "cross_entropy", "copy_rows"):
        return "forward"  # cross_entropy also writes dlogits; copy_rows also copies dz back
    return "other"


def kind(op):
    for k, ops in KINDS:
        if op in ops:
            return k
    return "other"


def fmt_row(cells):
    return "| " + " | ".join(cells) + " |"


def report(p, label):
    step, peak = p["step_s"], p["peak_flops"]
    print("### %s: %.2f ms per step, %.1f%% of it inside ops; peak %.1f GFLOP/s (%s)" % (
        label, 1e3 * step, 100 * p["ops_s"] / step, 1e-9 * peak, p["peak_how"]))
    print()

    def cols(t, f, b):
        g = f / t * 1e-9 if t > 0 else 0.0
        return ["%.3f" % (1e3 * t), "%.1f" % (100 * t / step), "%.2f" % g,
                "%.1f" % (100e9 * g / peak) if f else "", "%.2f" % (b / t * 1e-9) if t > 0 else ""]

    def fastest(o):
        """GFLOP/s and % of peak of the op's fastest call (one shape, one
        FLOP count a call): what it does when nothing slows it. Not for a
        row of calls of several sizes (shape `all`): its FLOPs a call are
        an average, and the fastest call is of the smallest size."""
        if not o["flops_per_step"] or not o.get("best_call_s") or o["shape"] == "all":
            return ["", ""]
        g = o["flops_per_step"] / o["calls_per_step"] / o["best_call_s"] * 1e-9
        return ["%.2f" % g, "%.1f" % (100e9 * g / peak)]

    print(fmt_row(["op", "shape", "calls/step", "ms/step", "% of step", "GFLOP/s", "% of peak",
                   "GB/s", "fastest call GFLOP/s", "its % of peak"]))
    print(fmt_row(["---"] * 10))
    for o in p["ops"]:
        print(fmt_row([o["op"], o["shape"], "%g" % o["calls_per_step"]] +
                      cols(o["s_per_step"], o["flops_per_step"], o["bytes_per_step"]) +
                      fastest(o)))
    print(fmt_row(["(outside ops)", "", ""] + ["%.3f" % (1e3 * (step - p["ops_s"])),
                                              "%.1f" % (100 * (step - p["ops_s"]) / step), "", "", "",
                                              "", ""]))
    print()
    sums = {}
    for o in p["ops"]:
        key = (kind(o["op"]), phase(o["op"]))
        s = sums.setdefault(key, [0.0, 0.0, 0.0])
        s[0] += o["s_per_step"]
        s[1] += o["flops_per_step"]
        s[2] += o["bytes_per_step"]
    print(fmt_row(["kind", "phase", "ms/step", "% of step", "GFLOP/s", "% of peak", "GB/s"]))
    print(fmt_row(["---"] * 7))
    for (k, ph), (t, f, b) in sorted(sums.items(), key=lambda kv: -kv[1][0]):
        print(fmt_row([k, ph] + cols(t, f, b)))
    by_phase = {}
    for (_, ph), (t, _, _) in sums.items():
        by_phase[ph] = by_phase.get(ph, 0.0) + t
    print()
    print("by phase (ms/step): " + ", ".join("%s %.3f" % (ph, 1e3 * t) for ph, t in sorted(
        by_phase.items(), key=lambda kv: -kv[1])) + ", outside ops %.3f" % (1e3 * (step - p["ops_s"])))
    print(flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipetrain")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default="demo,wide")
    ap.add_argument("--steps", type=int, help="timed steps per run (default: demo %d, wide %d)" % (
        STEPS["demo"], STEPS["wide"]))
    ap.add_argument("--quick", action="store_true", help="a few steps per run (smoke test)")
    args = ap.parse_args()
    binary = os.path.abspath(args.pipetrain)
    with tempfile.TemporaryDirectory(prefix="pt-op-breakdown-") as work:
        for model in args.models.split(","):
            if model not in TS.MODELS or TS.MODELS[model].get("bert"):
                sys.exit("unknown model %r (demo, wide)" % model)
            steps = args.steps or (QUICK_STEPS if args.quick else STEPS)[model]
            for threads in (int(t) for t in args.threads.split(",")):
                run_dir = os.path.join(work, "%s-%d" % (model, threads))
                cmd = TS.pipetrain_cmd(binary, model, threads, UNTIMED + steps, run_dir,
                                       "run.profile_ops=true")
                subprocess.run(cmd, check=True, capture_output=True)
                with open(os.path.join(run_dir, "op_profile-rank0.json")) as f:
                    p = json.load(f)
                m = TS.MODELS[model]
                report(p, "%s (d %d, %d blocks, %d heads, patch %d, batch %d), %d thread%s, %d steps" % (
                    model, m["dim"], m["layers"], m["heads"], m["patch"], TS.BATCH, threads,
                    "" if threads == 1 else "s", p["steps"]))


if __name__ == "__main__":
    main()
