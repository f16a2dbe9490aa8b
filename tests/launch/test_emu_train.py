#!/usr/bin/env python3
"""The trainer on the CUDA backend, run on the CPU emulation of CUDA
(pipetrain_emu: launch/main.c linked with the emulated objects of
nn/cuda_*.cu ahead of pt_nn, tests/gpu/CMakeLists.txt), so that the host
code taken only when the backend's memory is not host memory runs in CI:
the frozen prefix's staging of cached rows through host buffers
(train/prefix.c: downloads of computed groups, one upload per run of
consecutive hits, one upload of a group's shallower entries), and
checkpoints written from and read back into device memory, and a
pipeline's transfers between stages through host memory.

Every case trains a tiny model with run.device cuda (fp32, and bf16:
run.precision bf16, bf16 activations, so the cache holds 2-byte rows) that
freezes its 2 blocks one at a time by the schedule policy (decisions after
steps 3 and 6, in the middle of 4-step epochs), and evaluates the whole
test split after every epoch:

  cache on = off   the same loss, learning rate and gradient norm at every
                   step, the same test loss and accuracy at every
                   evaluation, the same final unit files (parameters and
                   AdamW moments) and exported weights. The cache-on run
                   must show the cache used as the comparison needs it:
                   hits, examples computed after the first epoch (batches
                   split between cached and computed rows), entries of
                   depth 1 advanced to depth 2 from the cache after the
                   second decision (training and evaluation alike: the
                   evaluation after it finds no entry at depth 2 and the
                   next one finds all), evaluations served from the cache.
  resumed          from the cache-on run's checkpoints of steps 3 and 6
                   (freeze decisions) and 9 (mid-epoch; in bf16 from step
                   6 only, to save time), each in a fresh run directory
                   with an empty cache: the same steps after the resume
                   point, the same evaluations, the same final files as
                   the run that never stopped.
  two stages       a pipeline of 2 stages (2 ranks under mpirun, no NCCL on
                   the emulation, so activations and gradients cross
                   between stages through host memory, and the re-plans at
                   the decisions move units through it) with the cache on:
                   the same steps, evaluations and exported weights as one
                   process with the cache off (ViT, fp32; skipped where no
                   mpirun is given in PT_MPIEXEC).

ViT on synthetic images, and BERT on text-classification files of its own
(texts padded by different amounts and cut) with dropout 0.1 on the hidden
states and the attention probabilities, in 2 micro-batches a step.

What this checks is the host side, not a GPU's arithmetic: on the
emulation every op gives a row the same bits whatever its batch-mates (the
emulated cuBLASLt is a reference product, one sum per element in order of
k), so cached and recomputed rows are equal and any difference is a row
lost, misplaced or stale on its way between the device and the cache. On a
GPU cuBLASLt picks its algorithm per shape, and cache on need not equal off
(docs/ARCHITECTURE.md, "Freezing and the cache").

The emulation runs every kernel's threads one after another on one CPU
thread, so the models are tiny (width 16, 2 blocks, 32 examples).

usage: test_emu_train.py PIPETRAIN_EMU_BINARY
"""
import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # nothing written into the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_util as U  # noqa: E402
import test_cache_exact as C  # noqa: E402
from cli_util import check  # noqa: E402

STEPS = 16
RESUME_AT = {"fp32": (3, 6, 9), "bf16": (6,)}
DROPOUT = "0.1"


def base(h, kind, precision):
    k = {
        "run.seed": "1", "run.threads": "1", "run.device": "cuda", "run.precision": precision,
        "model.kind": kind, "model.dim": "16", "model.layers": "2", "model.heads": "2",
        "train.batch": "8", "train.max_steps": str(STEPS), "train.epochs": "1000",
        "train.lr": "0.01", "train.warmup_steps": "2",
        "train.eval_every": "1", "train.eval_examples": "0", "train.log_every": "1000",
        "train.checkpoint_every": "3", "train.keep_checkpoints": "100",
        "freeze.policy": "schedule", "freeze.unit": "step", "freeze.start": "3",
        "freeze.every": "3", "freeze.alpha": "0.5",
    }
    if kind == "vit":
        k.update({"model.patch": "4", "model.classes": "4", "data.kind": "synthetic_images",
                  "data.image_size": "8", "data.synthetic_examples": "32"})
    else:
        k.update({"model.context": "17", "model.positions": "20", "model.classes": "3",
                  "data.kind": "text_classification", "pipeline.microbatches": "2",
                  "model.dropout": DROPOUT, "model.attention_dropout": DROPOUT})
        k.update(U.bert_files(h, 32, 7))
    return k


def evals(run_dir):
    return [(e["step"], e["test_loss"], e["test_accuracy"], e["examples"])
            for e in C.evals_of(run_dir)]


def check_device(run_dir, precision):
    """The run trained on the (emulated) CUDA backend it was given."""
    with open(os.path.join(run_dir, "profile.json")) as f:
        backend = json.load(f)["backend"]
    want = "cuda-bf16" if precision == "bf16" else "cuda"
    check(backend == want, "%s: trained on backend %r, not %r", run_dir, backend, want)


def check_advanced(run_dir):
    """Freezing grew the prefix twice, and entries of depth 1 were advanced
    to depth 2 from the cache: in training (the epoch after the second
    decision served hits and computed examples) and in evaluation (the
    first evaluation after it found no entry at depth 2, the next found all
    of them)."""
    ev = C.freeze_events(run_dir)
    check(ev[:2] == [(3, 0, 1), (6, 1, 2)], "%s: freeze decisions (step, old, new) %s; "
          "wanted 0 -> 1 at step 3, 1 -> 2 at step 6", run_dir, ev[:4])
    e = C.evals_of(run_dir)
    hits = [(x["step"], x["cache_hits"], x["examples"]) for x in e]
    check(len(e) >= 3 and e[0]["step"] < 6 < e[1]["step"] and e[1]["cache_hits"] == 0
          and e[2]["cache_hits"] == e[2]["examples"] > 0,
          "%s: evaluations (step, hits, examples) %s: wanted one at depth 1, one advancing "
          "its entries after step 6, one served whole from the cache", run_dir, hits)


def case(kind, precision):
    def t(h):
        k = base(h, kind, precision)
        on = C.on_equals_off(h, k, "run", STEPS)
        check_device(on, precision)
        check_device(h.path("run-off"), precision)
        check_advanced(on)
        if kind == "bert":
            C.check_dropout(on, DROPOUT, STEPS)
        want, want_evals = C.steps_of(on), evals(on)
        for s in RESUME_AT[precision]:
            name = "resumed-%d" % s
            run_dir = C.train(h, name, C.keys(h.path(name), k, True),
                              "train.resume=" + U.ckpt(on, s))
            what = "resumed at step %d, cache on" % s
            C.same_steps(want, C.steps_of(run_dir), what, first=s + 1)
            got = evals(run_dir)
            check(got == [e for e in want_evals if e[0] > s], "%s: evaluations %s, wanted %s",
                  what, got, want_evals)
            C.same_final(h, on, run_dir, STEPS, what)
    t.__name__ = "test_%s_%s" % (kind, precision)
    return t


def mpirun(h, apps, timeout):
    """Runs mpirun (PT_MPIEXEC) on apps, a list of (ranks, argv), one process
    group each (":" between them); returns its Result, checked for sanitizer
    reports."""
    cmd = [os.environ["PT_MPIEXEC"], "--oversubscribe"]
    for i, (ranks, argv) in enumerate(apps):
        cmd += ([":"] if i else []) + ["-np", str(ranks)] + argv
    env = dict(U.sanitizer_env(), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1")
    try:
        p = subprocess.run(cmd, cwd=h.dir, capture_output=True, text=True, errors="replace",
                           timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise U.Failure("timed out: %s\n%s" % (" ".join(cmd), U.tail(str(e.stderr or ""))))
    r = U.Result(cmd, p.returncode, p.stdout, p.stderr)
    U.no_sanitizer(r)
    return r


def mpi_train(h, name, k, ranks):
    """Trains k under `ranks` ranks of mpirun (PT_MPIEXEC); returns its run directory."""
    cfg = U.write_config(h, name + ".yaml", k)
    mpirun(h, [(ranks, [h.binary, "train", cfg])], 300).expect(0, "training " + name)
    return k["run.dir"]


def test_vit_fp32_two_stages(h):
    if not os.environ.get("PT_MPIEXEC"):
        return "skipped: no mpirun (PT_MPIEXEC)"
    # 3 blocks, frozen 1 then 2 (alpha 0.3, at most 2): on 2 stages the
    # cache holds the frozen prefix whole at depth 2 (8 units, at most 6
    # cached; with 2 blocks it stops a unit short of depth 2's 5, and no
    # evaluation counts as served whole)
    k = dict(base(h, "vit", "fp32"), **{"pipeline.microbatches": "2", "model.layers": "3",
                                        "freeze.alpha": "0.3", "freeze.max_depth": "2"})
    one = C.train(h, "one", C.keys(h.path("one"), k, False))
    two = mpi_train(h, "two", C.keys(h.path("two"), k, True, **{
        "pipeline.stages": "2", "pipeline.elastic": "false"}), 2)
    check_device(two, "fp32")
    with open(os.path.join(two, "profile.json")) as f:
        check(json.load(f)["ranks"] == 2, "%s: not a run of 2 ranks", two)
    C.check_cache_use(two, True)
    check_advanced(two)
    C.same_steps(C.steps_of(one), C.steps_of(two), "2 stages, cache on vs 1 process, cache off")
    check(evals(one) == evals(two), "2 stages vs 1 process: evaluations %s vs %s", evals(two),
          evals(one))
    check(C.export(h, U.ckpt(one, STEPS), "one") == C.export(h, U.ckpt(two, STEPS), "two"),
          "2 stages vs 1 process: exported weights differ")


def test_mixed_devices_refused(h):
    """run.device auto resolves on each rank: a rank with a GPU (the
    emulated one, rank 0: local rank 0 has device 0) beside one without
    (the CPU build) is one job on two kinds of device, each rank planning
    from its own device's memory. Refused before run.dir is made, naming
    the config line, the key and a rank of each kind; run.device cpu on the
    same two ranks trains."""
    cpu = os.path.abspath(os.environ["PT_CPU_BINARY"]) if os.environ.get("PT_CPU_BINARY") else None
    if not os.environ.get("PT_MPIEXEC") or not cpu:
        return "skipped: no mpirun (PT_MPIEXEC) or CPU binary (PT_CPU_BINARY)"
    k = dict(base(h, "vit", "fp32"), **{"run.device": "auto", "pipeline.stages": "2",
                                         "freeze.policy": "none", "train.max_steps": "2"})
    for device, rc in (("auto", 2), ("cpu", 0)):
        run_dir = h.path("mixed-" + device)
        cfg = U.write_config(h, "mixed-%s.yaml" % device,
                             dict(k, **{"run.dir": run_dir, "run.device": device}))
        r = mpirun(h, [(1, [h.binary, "train", cfg]), (1, [cpu, "train", cfg])], 120)
        r.expect(rc, "run.device %s on a rank with a GPU and one without" % device)
        if rc:
            line = [l for l in r.err.splitlines() if l.startswith(U.ERROR_PREFIX)]
            check(len(line) == 1, "one error line wanted\n%s", r.describe())
            for want in ("mixed-auto.yaml:", "run.device: auto", "rank 0", "cuda backend",
                         "rank 1", "cpu backend", "run.device cpu"):
                check(want in line[0], "error line lacks %r: %s", want, line[0])
            check(not os.path.exists(run_dir), "%s made by a refused run", run_dir)


def test_gpu_memory_is_the_limit(h):
    """Without pipeline.memory_gib a GPU run plans for the GPU's memory (the
    emulation's, PT_CUDA_EMU_MEMORY_MIB), less 1 GiB and a tenth of it (at
    most half), not the node's RAM: one process of a ViT whose weights with
    gradients and moments take 1.5 GiB is refused on a GPU of 2 GiB (1 GiB
    to plan for), naming model.dim and the GPU, and is planned there under
    pipeline.memory_gib 4, and on an 80 GB GPU (one micro-batch: nothing to
    time). Under mpirun (2
    ranks on the one emulated GPU) a model of 48 MiB needs 2 stages on
    GPUs of 64 MiB (32 to plan for), and one stage with 2 replicas on 80
    GB; the run notes once that its transfers go through host memory, the
    ranks sharing a GPU."""
    k = dict(base(h, "vit", "fp32"), **{"freeze.policy": "none", "train.max_steps": "2",
                                         "model.dim": "1024", "model.layers": "8",
                                         "model.heads": "8", "pipeline.microbatches": "1",
                                         "run.dir": h.path("big")})
    cfg = U.write_config(h, "big.yaml", k)
    small = {"PT_CUDA_EMU_MEMORY_MIB": "2048"}
    r = h.run(["plan", cfg], env=small).expect(2, "a 1.5 GiB model on a GPU of 2 GiB")
    for want in ("big.yaml:", "model.dim: 1024", "1.5 GiB", "more than the 1 GiB",
                 "the GPU's memory less the CUDA backend's reserve"):
        check(want in r.err, "refusal lacks %r\n%s", want, r.describe())
    h.run(["plan", cfg, "--set", "pipeline.memory_gib=4"], env=small).expect(0, "memory_gib 4")
    h.run(["plan", cfg], env={"PT_CUDA_EMU_MEMORY_MIB": None}).expect(0, "on an 80 GB GPU")
    if not os.environ.get("PT_MPIEXEC"):
        return "skipped in part: no mpirun (PT_MPIEXEC)"
    k.update({"model.dim": "256", "model.layers": "4", "pipeline.microbatches": "auto",
              "run.dir": h.path("mid")})
    cfg = U.write_config(h, "mid.yaml", k)
    want = {"64": "layout: K = 2 stages x D = 1 replica", "": "layout: K = 1 stage x D = 2 replicas"}
    for mib, layout in want.items():
        os.environ["PT_CUDA_EMU_MEMORY_MIB"] = mib  # mpirun passes the environment on
        try:
            r = mpirun(h, [(2, [h.binary, "plan", cfg])], 300)
        finally:
            del os.environ["PT_CUDA_EMU_MEMORY_MIB"]
        r.expect(0, "plan on 2 ranks of %s MiB GPUs" % (mib or "81559"))
        check(layout in r.out, "GPUs of %s MiB: wanted %r\n%s", mib or "81559", layout,
              r.describe())
        note = ("through host memory over MPI: ranks of a node share a GPU (NCCL needs one GPU "
                "per rank)")
        check(r.err.count(note) == 1, "the host-transfer note %d times, wanted once\n%s",
              r.err.count(note), r.describe())


def test_no_gpu_and_failed_gpu(h):
    """What the backend's opening found decides the exit status and the
    words (launch/setup.c on PT_ENODEV). No GPU to use (the driver finds
    none, or no driver): run.device cuda is a setting to change, exit 2
    naming the config line and the key, and auto trains on the CPU without
    a word. A GPU that is there and fails to open (PT_CUDA_EMU_DEVICES
    broken): cuda is a device failure, exit 1, and auto trains on the CPU
    with a note giving the GPU's error."""
    k = dict(base(h, "vit", "fp32"), **{"freeze.policy": "none", "train.max_steps": "1",
                                         "train.checkpoint_every": "0", "train.eval_every": "0"})
    for devices, rc, said in (("none", 2, "no CUDA device: cudaGetDeviceCount found 0 devices"),
                              ("nodriver", 2, "no CUDA device: cudaGetDeviceCount returned"),
                              ("broken", 1, "cudaSetDevice(0) returned")):
        for device in ("cuda", "auto"):
            name = "%s-%s" % (devices, device)
            cfg = U.write_config(h, name + ".yaml", dict(k, **{"run.dir": h.path(name), "run.device": device}))
            r = h.run(["train", cfg], env={"PT_CUDA_EMU_DEVICES": devices})
            if device == "cuda":
                r.expect(rc, name)
                line = [l for l in r.err.splitlines() if l.startswith(U.ERROR_PREFIX)]
                check(len(line) == 1 and re.search(r"%s\.yaml:\d+: run\.device is cuda: " % name, line[0])
                      and said in line[0], "%s: one error line naming the file, line, key and %r\n%s",
                      name, said, r.describe())
            else:
                r.expect(0, name)
                with open(os.path.join(h.path(name), "profile.json")) as f:
                    backend = json.load(f)["backend"]
                check(backend == "cpu", "%s: trained on backend %r, not the CPU", name, backend)
                noted = "run.device is auto, and the GPU cannot be used (%s" % said
                check((noted in r.err) == (rc == 1) and ("GPU cannot be used" in r.err) == (rc == 1),
                      "%s: the note on the GPU %s\n%s", name, "missing" if rc == 1 else "given",
                      r.describe())


def test_resume_under_other_precision_notes_it(h):
    """A checkpoint saved in fp32 resumed in bf16 (or back) trains on, with
    a note naming run.precision: the steps from there round otherwise than
    the saved run's would have. The same precision gets no note."""
    k = dict(base(h, "vit", "fp32"), **{"freeze.policy": "none", "train.max_steps": "6"})
    first = C.train(h, "first", C.keys(h.path("first"), k, False), "train.max_steps=3")
    for name, was, now in (("same", "fp32", "fp32"), ("bf16", "fp32", "bf16")):
        run_dir = h.path(name)
        cfg = U.write_config(h, name + ".yaml", C.keys(run_dir, dict(k, **{"run.precision": now}),
                                                       False))
        r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(first, 3)]).expect(0, name)
        noted = "another run.precision than it was saved with (run.precision %s -> %s)" % (was, now)
        check((noted in r.err) == (was != now) and ("run.precision" in r.err) == (was != now),
              "resumed %s checkpoint in %s: note %s\n%s", was, now,
              "missing" if was != now else "given", r.describe())
        check_device(run_dir, now)


TESTS = [case("vit", "fp32"), case("bert", "fp32"), case("vit", "bf16"), case("bert", "bf16"),
         test_vit_fp32_two_stages, test_mixed_devices_refused, test_gpu_memory_is_the_limit,
         test_resume_under_other_precision_notes_it, test_no_gpu_and_failed_gpu]

if __name__ == "__main__":
    sys.exit(U.main(TESTS, sys.argv, workers=2))
