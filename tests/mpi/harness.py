"""Shared helpers of the multi-rank tests: run pipetrain (under mpirun for
several ranks, oversubscribed, one thread per rank), read its metrics and its
exported weights, compare runs.

The tests run from the repository root (the demo configs use paths relative
to it) and write only into their own temporary directories."""
import json
import os
import re
import struct
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")


class Tools:
    def __init__(self, argv):
        if len(argv) < 3:
            sys.exit("usage: %s PIPETRAIN MPIEXEC" % argv[0])
        self.pipetrain, self.mpiexec = os.path.abspath(argv[1]), argv[2]

    def command(self, ranks, args):
        base = [self.pipetrain] + args
        if ranks == 1:
            return base
        return [self.mpiexec, "--oversubscribe", "-np", str(ranks), "-x", "PIPETRAIN_TEST_FAULT"] + base

    def run(self, ranks, args, env=None, timeout=600, check=True):
        """returns (exit status, seconds, stdout + stderr)"""
        start = time.time()
        r = subprocess.run(self.command(ranks, args), cwd=ROOT, env=dict(ENV, **(env or {})),
                           capture_output=True, text=True, timeout=timeout)
        out = r.stdout + r.stderr
        if check and r.returncode != 0:
            sys.stderr.write("FAILED (%d): %s\n%s\n" % (r.returncode, " ".join(args), out))
            sys.exit(1)
        return r.returncode, time.time() - start, out

    def export(self, checkpoint, path):
        self.run(1, ["export", checkpoint, path])
        return load_safetensors(path)


def export_weights(pipetrain, checkpoint, path):
    """pipetrain export of a checkpoint, loaded as {name: float32 array}."""
    subprocess.run([pipetrain, "export", checkpoint, path], check=True, capture_output=True,
                   env=ENV)
    return load_safetensors(path)


def our_segments():
    """This user's cache segments in /dev/shm, as {name: the pid of the job's
    rank 0} (the name is pipetrain-UID-PID-TIME-nNODE)."""
    prefix = "pipetrain-%d-" % os.getuid()
    out = {}
    for n in os.listdir("/dev/shm"):
        if n.startswith(prefix):
            pid = n[len(prefix):].split("-")[0]
            out[n] = int(pid) if pid.isdigit() else 0
    return out


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return pid > 0


def segments_left(before):
    """The cache segments that appeared since `before` (our_segments()) and
    whose job's rank 0 is gone: those the runs in between left behind. Other
    jobs on the machine (the suite runs tests side by side) may hold
    segments of their own meanwhile; theirs have a live rank 0. A name is
    looked for again once its rank 0 is seen gone: a job that took its name
    off and ended between the listing and the look at its pid left nothing."""
    return sorted(n for n, pid in our_segments().items() if n not in before and not alive(pid)
                  and os.path.lexists(os.path.join("/dev/shm", n)))


def sets(**kv):
    out = []
    for k, v in kv.items():
        out += ["--set", "%s=%s" % (k.replace("__", "."), v)]
    return out


# the words of the small BERT cases' texts (whole words of their vocabulary)
BERT_WORDS = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth", "was",
              "without", "form", "void", "darkness", "upon", "face", "of", "deep", "spirit"]


def bert_data(directory, train, test, seed, words=20):
    """Writes a small BERT case's files into directory: vocab.txt ([PAD],
    [UNK], [CLS], [SEP], then BERT_WORDS) and train.tsv / test.tsv of
    `label<TAB>text` lines (labels a, b, c; texts of 1 to `words` words, so
    that at a context of 16 or so most examples are padded, by different
    amounts, and some are cut). Returns the YAML of the data section's keys
    and the vocabulary's size, for model.vocab."""
    import random
    rnd = random.Random(seed)
    paths = {k: os.path.join(directory, k) for k in ("vocab.txt", "train.tsv", "test.tsv")}
    with open(paths["vocab.txt"], "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + BERT_WORDS) + "\n")
    for name, count in (("train.tsv", train), ("test.tsv", test)):
        with open(paths[name], "w") as f:
            for _ in range(count):
                f.write("%s\t%s\n" % (rnd.choice("abc"), " ".join(
                    rnd.choice(BERT_WORDS) for _ in range(rnd.randint(1, words)))))
    data = 'kind: text_classification, train_file: "%s", test_file: "%s", vocab: "%s"' % (
        paths["train.tsv"], paths["test.tsv"], paths["vocab.txt"])
    return data, 4 + len(BERT_WORDS)


def load_safetensors(path):
    if os.path.isdir(path):  # a bert export: a Hugging Face model directory
        path = os.path.join(path, "model.safetensors")
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    return {k: np.frombuffer(body[e["data_offsets"][0]:e["data_offsets"][1]], dtype=np.float32)
            for k, e in header.items() if k != "__metadata__"}


def step_losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r["loss"] for r in map(json.loads, f) if r["event"] == "step"]


def latest_checkpoint(run_dir):
    root = os.path.join(run_dir, "checkpoints")
    done = [d for d in sorted(os.listdir(root)) if os.path.exists(os.path.join(root, d, "manifest"))]
    return os.path.join(root, done[-1])


def events(run_dir, kind):
    """metrics.jsonl's records of one event kind ("step", "replan", ...)."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["event"] == kind]


def samples(run_dir):
    """{rank: {epoch: [ids]}}: the examples each rank's replica trained
    (run.log_samples: samples-rank<R>.jsonl, written by first stages)."""
    out = {}
    for name in os.listdir(run_dir):
        m = re.fullmatch(r"samples-rank(\d+)\.jsonl", name)
        if m:
            with open(os.path.join(run_dir, name)) as f:
                for rec in map(json.loads, f):
                    out.setdefault(int(m.group(1)), {}).setdefault(rec["epoch"], []).extend(rec["ids"])
    return out


def samples_by_epoch(run_dir):
    """{epoch: [ids]} over every rank."""
    out = {}
    for by_epoch in samples(run_dir).values():
        for epoch, ids in by_epoch.items():
            out.setdefault(epoch, []).extend(ids)
    return out


def nrel(a, b):
    """Normwise relative difference ||a - b|| / ||b||."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def compare_runs(name, base_losses, base_weights, losses, weights, tol):
    """worst relative error of losses and weights; prints a line; returns (worst, identical)"""
    worst = rel(losses, base_losses) if len(losses) == len(base_losses) else float("inf")
    identical = losses == base_losses
    for k, v in base_weights.items():
        worst = max(worst, rel(weights[k], v))
        identical &= bool(np.array_equal(weights[k], v))
    status = "ok" if worst <= tol else "FAIL"
    print("  %-46s worst rel err %.2e%s  %s" % (name, worst, " (bit-identical)" if identical else "", status),
          flush=True)
    return worst, identical
