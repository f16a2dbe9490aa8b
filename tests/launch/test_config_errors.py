#!/usr/bin/env python3
"""Bad configurations and bad command lines are refused cleanly.

Every case runs `pipetrain train` (or eval / plan) on a tiny synthetic config
with one thing wrong and checks: exit status 2; exactly one line on stderr,
starting "pipetrain: error: "; for problems in the YAML file, FILE:LINE of the
offending key; the key's name; the allowed values or range for a bad value,
or a "did you mean" hint for a misspelt key; and that nothing was written
(no run directory, the test's directory unchanged). A positive control
checks that the untouched base config trains, so the cases fail for their own
reason. Input built to be slow (deep nesting, a huge file, many anchors)
must also be refused fast: within a CPU second of a plainly bad config.
Problems found after the config was read (the data, the ranks, memory, the
weights) still name the file, the line and the key. Every integer key of
`pipetrain keys` is tried at both ends of its range and one past each.

usage: test_config_errors.py PIPETRAIN_BINARY
"""
import gzip
import json
import os
import shutil
import signal
import math
import random
import re
import stat
import struct
import subprocess
import sys
import threading
import time
import zlib

sys.dont_write_bytecode = True  # nothing written into the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_util as U  # noqa: E402
from cli_util import check  # noqa: E402


def base(h, kind="vit", **keys):
    """Tiny config that trains 2 steps if it is (wrongly) accepted."""
    return U.tiny(kind, h.path("run"), **{"train.max_steps": "2", "train.epochs": "1", **keys})


class Case:
    def __init__(self, name, changes=None, kind="vit", raw=None, sets=(), blame=None, line=None,
                 needles=(), cmd="train", strict=True, setup=None, config_name="bad.yaml",
                 fast=False, absent=(), timeout=None):
        self.name, self.changes, self.kind, self.raw = name, changes or {}, kind, raw
        self.sets, self.blame, self.line, self.needles = list(sets), blame, line, list(needles)
        self.cmd, self.strict, self.setup, self.config_name = cmd, strict, setup, config_name
        self.fast, self.absent = fast, list(absent)  # absent: words the message must not hold
        # fast: within FAST_MARGIN_S of a plainly bad config; timeout: the
        # seconds a case may take at all (for checks made after start-up)
        self.timeout = timeout or (20 if fast else 120)


# How much more CPU time than a plainly bad config a refusal may take
# (start-up is most of both); before the YAML limits, 100,000 levels of
# nesting took 46 s. CPU time, not the clock: the clock also counts the other
# tests running beside this one.
FAST_MARGIN_S = 1.0


def timed_run(h, args, timeout):
    """h.run, also returning the user + system seconds the binary (and what
    it starts) spent, measured by a wrapper process of its own so that other
    tests' processes are not counted."""
    code = ("import json, resource, subprocess, sys\n"
            "p = subprocess.run(sys.argv[1:], capture_output=True, stdin=subprocess.DEVNULL)\n"
            "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "print(json.dumps([p.returncode, p.stdout.decode(errors='replace'),"
            " p.stderr.decode(errors='replace'), u.ru_utime + u.ru_stime]))\n")
    cmd = [h.binary] + [str(a) for a in args]
    # a process group of its own: a timeout kills the binary too, not only
    # the wrapper (an orphan would go on taking a core from the other tests)
    p = subprocess.Popen([sys.executable, "-c", code] + cmd, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=U.sanitizer_env(), cwd=h.dir,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise U.Failure("timed out after %ss: %s" % (timeout, " ".join(cmd)))
    check(p.returncode == 0, "timing wrapper failed: %s", stderr[-2000:])
    rc, out, err, cpu = json.loads(stdout)
    r = U.Result(cmd, rc, out, err)
    U.no_sanitizer(r)
    return r, cpu


_usual = []
_usual_lock = threading.Lock()


def usual_cpu(h):
    """CPU seconds of refusing a plainly bad config (measured once)."""
    with _usual_lock:
        if not _usual:
            plain = U.write(h.path("plain.yaml"), U.render(base(h, **{"colour.red": "1"})))
            r, cpu = timed_run(h, ["train", plain], 60)
            r.expect(2, "the plainly bad config")
            os.remove(plain)
            _usual.append(cpu)
        return _usual[0]


def run_case(h, c):
    extra = c.setup(h) if c.setup else {}
    keys = base(h, c.kind)
    for k, v in c.changes.items():
        keys[k] = v.format(**extra) if isinstance(v, str) else v
    text = U.render(keys)
    if c.raw:
        text = c.raw(text)
    cfg = h.path(c.config_name)
    if c.config_name not in ("missing.yaml", "adir"):
        U.write(cfg, text)
    before = U.snapshot(h.dir)
    args = [c.cmd, cfg]
    for s in c.sets:
        args += ["--set", s.format(**extra)] if not s.startswith("--") else [s.format(**extra)]
    if c.fast:
        usual = usual_cpu(h)
        t0 = time.time()
        r, spent = timed_run(h, args, c.timeout)
        elapsed = time.time() - t0
    else:
        r = h.run(args, timeout=c.timeout)
    r.expect(2, "bad input")
    needles = [n.format(cfg=cfg, **extra) for n in c.needles]
    if c.blame:
        needles.append("%s:%d: " % (cfg, U.line_of(text, c.blame)))
        needles.append(c.blame)
    if c.line:
        needles.append("%s:%d: " % (cfg, c.line(text) if callable(c.line) else c.line))
    line = r.one_error(*needles, strict=c.strict)
    for a in c.absent:
        check(a not in line, "error line mentions %r:\n  %s", a, line)
    check(not os.path.exists(h.path("run")), "a refused config created run.dir %s\n%s",
          h.path("run"), r.describe())
    U.same_snapshot(before, U.snapshot(h.dir), "the test directory")
    check(r.out == "", "a refused config printed on stdout: %r", r.out[:300])
    if c.fast:
        check(spent < usual + FAST_MARGIN_S,
              "refusing took %.2f CPU seconds (%.1fs on the clock), more than %.1f over the %.2f "
              "of a plainly bad config", spent, elapsed, FAST_MARGIN_S, usual)


def files(h):
    """Existing input files for the cases that need some."""
    for n in ("a.gz", "b.gz", "c.gz"):
        U.write(h.path(n), "not really idx")
    os.mkdir(h.path("adir"))
    return {"dir": h.dir, "missing": h.path("no-such-file"), "adir": h.path("adir")}


def garbage_weights(h):
    out = files(h)
    out["garbage"] = U.write(h.path("garbage.safetensors"), "this is not a safetensors file\n")
    return out


def short_text(h):
    out = files(h)
    out["short"] = U.write(h.path("short.txt"), "In the beginning\n")
    return out


def idx_file(path, count, side=None, labels=None):
    """A plain (not gzip'd) IDX file: images (count of side x side) or labels."""
    if labels is not None:
        return U.write(path, struct.pack(">II", 0x801, len(labels)) + bytes(labels), "wb")
    pixels = bytes((i * 37) % 256 for i in range(count * side * side))
    return U.write(path, struct.pack(">IIII", 0x803, count, side, side) + pixels, "wb")


def idx_data(h):
    """40 training and 12 test images of 8x8 with labels 0..3; test images of
    12x12; and labels with a 9 at example 5."""
    out = files(h)
    out["ti"] = idx_file(h.path("train-images"), 40, 8)
    out["tl"] = idx_file(h.path("train-labels"), 40, labels=[i % 4 for i in range(40)])
    out["vi"] = idx_file(h.path("test-images"), 12, 8)
    out["vl"] = idx_file(h.path("test-labels"), 12, labels=[i % 4 for i in range(12)])
    out["vi12"] = idx_file(h.path("test-images-12"), 12, 12)
    # a header of 4 images of 16384x16384 (1 GiB of pixels, 4 GiB as floats)
    # over 64 bytes: model.patch is checked against the header, before any
    # pixel is read (a gzip'd file this size could hold them all)
    out["vi_huge"] = U.write(h.path("test-images-huge"),
                             struct.pack(">IIII", 0x803, 4, 16384, 16384) + bytes(64), "wb")
    # a header of 2^31 - 1 images of 28x28 (6 TiB as floats) over 64 bytes:
    # a gzip'd file of megabytes can declare that and inflate it all
    out["ti_many"] = U.write(h.path("train-images-many"),
                             struct.pack(">IIII", 0x803, (1 << 31) - 1, 28, 28) + bytes(64), "wb")
    out["tl_many"] = U.write(h.path("train-labels-many"),
                             struct.pack(">II", 0x801, (1 << 31) - 1) + bytes(64), "wb")
    out["tl9"] = idx_file(h.path("train-labels-9"), 40, labels=[9 if i == 5 else i % 4
                                                                for i in range(40)])
    return out


def textcls_files(h):
    """Labelled texts for data.kind text_classification: 40 good lines of 2
    labels (TSV and JSONL), files with a bad line 3 or 2, a test file with a
    label the training file lacks, a .csv, a small vocabulary and a bad one."""
    out = files(h)
    good = "".join("%s\tthe verse %d\n" % ("law" if i < 20 else "wisdom", i) for i in range(40))
    out["tsv"] = U.write(h.path("train.tsv"), good)
    out["three"] = U.write(h.path("three.tsv"), good + "psalms\tthe end\n")
    out["bad_tsv"] = U.write(h.path("bad.tsv"), "law\tthe\nwisdom\tthe\nno tab here\n")
    out["bad_jsonl"] = U.write(h.path("bad.jsonl"), '{"text": "the", "label": "law"}\n'
                                                    '{"text": "the", "label": 1.5}\n')
    out["stranger"] = U.write(h.path("stranger.tsv"), "law\tthe\n\nprophets\tthe\n")
    # a third column: an export's id, under a header that names it
    out["header3"] = U.write(h.path("header3.tsv"), "label\ttext\tid\n" + "".join(
        "%s\t%d\n" % (l, i) for i, l in enumerate(good.splitlines())))
    out["columns"] = U.write(h.path("columns.tsv"), "law\tthe\nwisdom\tthe verse\t7\n")
    out["sst2"] = U.write(h.path("sst2.tsv"), "sentence\tlabel\nthe verse\t1\nthe\t0\n")
    # no header, the columns the other way round: every label occurs once
    out["swapped"] = U.write(h.path("swapped.tsv"), "".join(
        "the verse %d\t%d\n" % (i, i % 2) for i in range(6)))
    out["csv"] = U.write(h.path("train.csv"), "law,the verse\n")
    # gzip'd under a .tsv name: said so (it was refused for a carriage
    # return somewhere in the compressed bytes)
    out["gz_tsv"] = U.write(h.path("gz.tsv"), gzip.compress(good.encode(), mtime=0), "wb")
    out["utf16_jsonl"] = U.write(h.path("utf16.jsonl"),
                                 '{"text": "a b", "label": "x"}\n'.encode("utf-16"), "wb")
    out["vocab"] = U.write(h.path("vocab.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\nverse\n")
    out["bad_vocab"] = U.write(h.path("bad-vocab.txt"), "[PAD]\n\n[CLS]\n[SEP]\n[UNK]\n")
    # a JSON text of newlines only is as empty as a TSV one
    out["newlines_jsonl"] = U.write(h.path("newlines.jsonl"), '{"text": "the", "label": "law"}\n'
                                    '{"text": "\\n\\r\\n ", "label": "law"}\n')
    # a line of 64 MiB where a token goes: refused after its first MiB, not read whole
    with open(h.path("long-vocab.txt"), "wb") as fh:
        fh.write(b"[PAD]\n[UNK]\n[CLS]\n")
        fh.truncate(fh.tell() + (64 << 20))
    out["long_vocab"] = h.path("long-vocab.txt")
    out["bom_vocab"] = U.write(h.path("bom-vocab.txt"),
                               "\ufeff[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\nverse\n")
    return out


def long_missing_path(h):
    """textcls_files, and a vocabulary path of 800 bytes that is not there."""
    out = textcls_files(h)
    head = os.path.join(h.dir, "no-such-dir")
    out["long_missing"] = head + "/" + "v" * (800 - len(head) - 1)
    return out


TEXTCLS = {"data.kind": "text_classification", "data.train_file": "{tsv}",
           "data.vocab": "{vocab}"}


IDX = {"data.kind": "idx", "data.train_images": "{ti}", "data.train_labels": "{tl}",
       "data.test_images": "{vi}", "data.test_labels": "{vl}", "data.image_size": None}


def without_section(section):
    """Drops a section (its header and indented lines) from rendered YAML."""
    def drop(text):
        out, skip = [], False
        for line in text.splitlines(True):
            if not line.startswith(" "):
                skip = line.startswith(section + ":")
            if not skip:
                out.append(line)
        return "".join(out)
    return drop


def last_line(text):
    return len(text.splitlines())


def line_with(needle):
    return lambda text: next(i for i, l in enumerate(text.splitlines(), 1) if needle in l)


def dup(text):
    return text.replace("  lr: 0.003\n", "  lr: 0.003\n  lr: 0.005\n", 1)


def append(extra):
    return lambda text: text + extra


def inserted_under(section, extra):
    return lambda text: text.replace("%s:\n" % section, "%s:\n%s" % (section, extra), 1)


DEEP = 100000  # levels of nesting: 200 KB of brackets


def block_nest(text):
    """1000 levels of block mappings, one per line, under a new section."""
    return text + "pipeline:\n" + "".join(" " * (i + 1) + "a:\n" for i in range(1000))


def padded(size):
    """The config with comment lines after it, `size` bytes in all."""
    def pad(text):
        out, left = [text], size - len(text)
        while left > 0:
            n = min(left, 80)
            out.append("#" * (n - 1) + "\n" if n > 1 else "\n")
            left -= n
        return "".join(out)
    return pad


def line_of_byte(at):
    return lambda text: text[:at].count("\n") + 1


RANGE_DIM = "allowed: an integer from 1 to 65536"
CASES = [
    # ---- keys that do not exist
    Case("unknown_section", {"colour.red": "1"}, blame="colour.red",
         needles=["unknown key", "colour.red", "pipetrain keys"]),
    Case("unknown_key", {"model.colour": "red"}, blame="model.colour",
         needles=["unknown key", "model.colour"]),
    Case("misspelt_key", {"model.haeds": "2"}, blame="model.haeds",
         needles=["did you mean 'model.heads'"]),
    Case("misspelt_section", {"trian.warmup_steps": "2"}, blame="trian.warmup_steps",
         needles=["did you mean 'train.warmup_steps'"]),
    # a suggestion up to 3 edits away, none from 4
    Case("misspelt_key_3_edits", {"train.lrate": "0.1"}, blame="train.lrate",
         needles=["did you mean 'train.lr'"]),
    Case("unknown_key_4_edits", {"train.lrxyzw": "0.1"}, blame="train.lrxyzw",
         needles=["unknown key 'train.lrxyzw'"], absent=["did you mean"]),
    # an unknown name over an empty mapping has no key to refuse: the name
    # is (it set nothing and passed; a megabyte of them took minutes, these
    # 600 KB about 50 s; now 0.2 s, and 4 s under ASan alone, 20 s beside the
    # suite's other tests and two more jobs: hence a loose clock limit)
    Case("unknown_empty_section", raw=append("colour: {}\n"), line=last_line,
         needles=["unknown key 'colour' (an empty section)", "pipetrain keys"]),
    Case("misspelt_empty_section", raw=append("trian:\n  lr: {}\n"), line=line_with("  lr: {}"),
         needles=["unknown key 'trian.lr' (an empty section)"]),
    Case("misspelt_empty_section_top", raw=append("trian: {}\n"), line=last_line,
         needles=["did you mean section 'train'"]),
    Case("megabyte_of_empty_sections",
         raw=lambda t: t + "".join("k%x: {}\n" % i for i in range(60000)),
         line=line_with("k0: {}"), needles=["unknown key 'k0'"], timeout=60),
    # an empty key joined its keys to the section above, unseen
    Case("empty_key_top", raw=append('"":\n  sample.length: 3\n'), line=line_with('"":'),
         needles=["an empty key"]),
    Case("empty_key_in_section", raw=inserted_under("train", '  "": 3\n'), line=line_with('  "": 3'),
         needles=["an empty key under train"]),
    # a key written whole at the top is the key; set both ways, it is set twice
    Case("whole_key_and_section", raw=append("train.lr: 0.1\n"), line=last_line,
         needles=["train.lr: set twice"]),
    Case("key_without_section", raw=append("lr: 0.1\n"), line=last_line,
         needles=["'lr'", "did you mean 'train.lr'"]),
    Case("section_is_a_scalar", raw=append("pipeline: 4\n"), line=last_line, needles=["pipeline"]),
    Case("mapping_where_value_expected",
         raw=lambda t: t.replace("  lr: 0.003\n", "  lr:\n    value: 0.1\n"),
         line=line_with("value:"), needles=["train.lr"]),
    Case("flow_mapping_where_value_expected", {"train.lr": "{{value: 0.1}}"}, blame="train.lr",
         needles=["train.lr: expected one value, got '(a mapping)'", "allowed: a number >= 1e-38"],
         absent=["unknown key"]),
    # ---- the activation cache
    Case("cache_with_flip", {"freeze.policy": "schedule", "cache.enabled": "true", "data.hflip": "true"},
         blame="cache.enabled", needles=["augmentation", "data.hflip"]),
    Case("cache_with_crop", {"freeze.policy": "schedule", "cache.enabled": "true", "data.crop_pad": "2"},
         blame="cache.enabled", needles=["augmentation", "data.crop_pad"]),
    Case("cache_disk_dir_missing", {"freeze.policy": "schedule", "cache.enabled": "true",
                                    "cache.disk_dir": "/nonexistent/dir", "cache.disk_gib": "1"},
         blame="cache.disk_dir",
         needles=["not a directory"]),
    # a directory whose permissions let root in but that makes no file
    # (the disk tier's file failed to be made at the cache's start, exit 1)
    Case("cache_disk_dir_proc", {"freeze.policy": "schedule", "cache.enabled": "true",
                                 "cache.disk_dir": "/proc", "cache.disk_gib": "1"},
         blame="cache.disk_dir", needles=["'/proc'"]),
    Case("cache_disk_dir_sys", {"freeze.policy": "schedule", "cache.enabled": "true",
                                "cache.disk_dir": "/sys", "cache.disk_gib": "1"},
         blame="cache.disk_dir", needles=["'/sys'"]),
    Case("freeze_alpha_out_of_range", {"freeze.alpha": "1"}, blame="freeze.alpha",
         needles=["allowed: a number > 0 and < 1"]),
    Case("cache_min_depth_above_layers", {"cache.min_depth": "3"}, blame="cache.min_depth",
         needles=["2 blocks", "allowed: 1 to 2"]),
    Case("freeze_max_depth_above_layers", {"freeze.policy": "schedule", "freeze.max_depth": "3"},
         blame="freeze.max_depth", needles=["3, but the model has 2 blocks", "allowed: 0 (all of them) to 2"]),
    Case("freeze_max_depth_above_layers_auto", {"freeze.policy": "auto", "freeze.max_depth": "1024"},
         blame="freeze.max_depth", needles=["1024, but the model has 2 blocks"]),
    Case("cache_min_depth_above_freeze_max_depth", {"freeze.max_depth": "1", "cache.min_depth": "2"},
         blame="cache.min_depth", needles=["freeze.max_depth", "allowed: 1 to 1"]),
    Case("cache_disk_gib_without_dir", {"cache.disk_gib": "1"}, blame="cache.disk_gib",
         needles=["cache.disk_dir", "allowed without cache.disk_dir: 0"]),
    Case("cache_disk_dir_without_gib", {"cache.disk_dir": "{adir}"}, blame="cache.disk_dir",
         needles=["{adir}", "cache.disk_gib is 0"], setup=files),
    Case("cache_that_holds_nothing", {"freeze.policy": "schedule", "cache.enabled": "true",
                                      "cache.memory_gib": "0"}, blame="cache.memory_gib",
         needles=["could hold nothing"]),
    # ---- one stage and fixed micro-batches: nothing is planned, memory is still
    # checked (before any data is made: 20 s is far less than making it takes)
    Case("model_dim_at_its_maximum", {"model.dim": "65536"}, blame="model.dim",
         needles=["parameters take", "allowed: model.dim = ", " or narrower"], timeout=20),
    # micro-batches fixed: nothing to plan, so the model's own keys are blamed
    Case("model_beyond_stage_memory", {"pipeline.memory_gib": "0.000001",
                                       "pipeline.microbatches": "1"}, blame="model.dim",
         needles=["parameters take", "1e-06 GiB one stage may use"]),
    # an evaluation keeps no gradients or moments but the head's (its
    # segment has every block frozen, not the head): the model's counted,
    # or said, would refuse a model that evaluates in the memory it has
    Case("eval_model_beyond_stage_memory", {"pipeline.memory_gib": "0.000001",
                                            "pipeline.microbatches": "1"}, blame="model.dim",
         cmd="eval", sets=["--init"], needles=["parameters take", "with the head's gradients",
                                               "1e-06 GiB one stage may use"],
         absent=["their gradients", "training unit"]),
    # one example's attention probabilities (4,194,305 tokens squared, 1024
    # heads) times a micro-batch of 256 pass 2^64 bytes: sized in size_t
    # they wrapped to 8 TiB, under the 1e6 GiB limit (a reviewer's finding)
    Case("attention_past_size_t", {"data.image_size": "2048", "model.dim": "1024",
                                   "model.heads": "1024", "model.layers": "1", "model.patch": "1",
                                   "train.batch": "256", "data.synthetic_examples": "256",
                                   "pipeline.microbatches": "1", "pipeline.memory_gib": "1000000"},
         cmd="plan", blame="model.patch", needles=["one example's activations take 6.72e+07 GiB"],
         fast=True),
    Case("micro_batch_beyond_stage_memory", {"train.batch": "40", "pipeline.memory_gib": "0.0003",
                                             "pipeline.microbatches": "1"},
         blame="train.batch", needles=["micro-batches of 40 examples",
                                       "allowed: pipeline.microbatches = 4 (micro-batches of 10 examples)"]),
    Case("context_beyond_stage_memory", {"model.context": "4096", "pipeline.memory_gib": "0.01",
                                         "pipeline.microbatches": "1"},
         kind="gpt", blame="model.context", needles=["one example's activations"]),
    # micro-batches left to the planner: a unit that cannot fit even alone
    # with one example is refused before the planner measures anything
    # (which took minutes at long contexts, at every size it measures)
    Case("context_beyond_memory_planned", {"model.context": "16384", "model.positions": "16384",
                                           "pipeline.memory_gib": "0.5"},
         kind="gpt", blame="pipeline.memory_gib",
         needles=["no layout fits: with one example per micro-batch", "on a stage of its own"],
         fast=True),
    Case("image_tokens_beyond_memory", {"data.image_size": "4096"}, blame="model.patch",
         needles=["4096x4096 images into 1048577 tokens"], timeout=20),
    # ---- ranges that follow what the code can do
    # a model whose parameters are mostly one table blames that table's key
    # (it blamed model.dim), and synthetic class prototypes that cannot fit
    # blame model.classes (they blamed data.synthetic_examples: "make the
    # examples smaller")
    Case("memory_in_the_classifier", {"model.classes": "200000", "pipeline.memory_gib": "0.001",
                                      "pipeline.microbatches": "1"},
         blame="model.classes", needles=["200000 classes, 16 wide", "their table alone"]),
    Case("memory_in_the_positions", {"model.context": "65536", "pipeline.memory_gib": "0.01",
                                     "pipeline.microbatches": "1", "train.batch": "1"}, kind="gpt",
         cmd="plan", blame="model.context", needles=["65536 positions", "their table alone",
                                                     "allowed: model.context = ", " or shorter"]),
    Case("memory_in_the_activations", {"model.context": "8192", "pipeline.memory_gib": "0.004",
                                       "pipeline.microbatches": "1", "train.batch": "1"}, kind="gpt",
         cmd="plan", blame="model.context", needles=["one example's activations"],
         absent=["model.vocab", "table"]),
    Case("memory_in_the_class_prototypes", {"model.classes": "1048576", "data.image_size": "4096",
                                            "model.patch": "512"},
         blame="model.classes", needles=["prototype images of 4096x4096 pixels"]),
    Case("top_k_above_the_byte_vocabulary", {"sample.top_k": "257"}, kind="gpt",
         blame="sample.top_k", needles=["allowed: an integer from 0 to 256"]),
    Case("sample_length_above_the_sampler", {"sample.length": "4097"}, kind="gpt",
         blame="sample.length", needles=["allowed: an integer from 0 to 4096"]),
    Case("stages_above_the_planner", {"pipeline.stages": "65"}, blame="pipeline.stages",
         needles=["allowed: an integer from 1 to 64, or auto"]),
    Case("init_std_of_ten", {"model.init_std": "10"}, blame="model.init_std",
         needles=["allowed: a number >= 1e-38 and < 10"]),
    # ---- dropout: a probability in [0, 1) or auto, and only bert has any
    Case("dropout_of_one", {"model.dropout": "1"}, blame="model.dropout",
         needles=["out of range: '1'", "allowed: a number >= 0 and < 1, or auto"]),
    Case("dropout_above_one", {"model.dropout": "1.5"}, blame="model.dropout",
         needles=["out of range: '1.5'", "or auto"]),
    Case("attention_dropout_negative", {"model.attention_dropout": "-0.1"},
         blame="model.attention_dropout",
         needles=["out of range: '-0.1'", "allowed: a number >= 0 and < 1, or auto"]),
    Case("attention_dropout_of_one", {"model.attention_dropout": "1.0"},
         blame="model.attention_dropout", needles=["out of range: '1.0'"]),
    Case("dropout_nan", {"model.dropout": "nan"}, blame="model.dropout",
         needles=["not a number: 'nan'"]),
    Case("dropout_infinite", {"model.attention_dropout": "-inf"}, blame="model.attention_dropout",
         needles=["not a number: '-inf'"]),
    # beyond a double is out of range, not "not a number"; so is a number
    # below a double's smallest (1e-400 would read as 0)
    Case("number_beyond_a_double", {"train.lr": "1e400"}, blame="train.lr",
         needles=["out of range (beyond a double): '1e400'"]),
    Case("number_that_underflows_to_zero", {"train.lr": "1e-400"}, blame="train.lr",
         needles=["out of range (below the smallest double, which would read it as 0): '1e-400'"]),
    Case("underflow_where_zero_is_allowed", {"train.weight_decay": "1e-400"},
         blame="train.weight_decay", needles=["below the smallest double, which would read it as 0): '1e-400'"]),
    Case("dropout_a_word", {"model.dropout": "high"}, blame="model.dropout",
         needles=["not a number: 'high'", "or auto"]),
    Case("dropout_auto_misspelt", {"model.dropout": "Auto"}, blame="model.dropout",
         needles=["not a number: 'Auto'"]),
    Case("dropout_a_list", {"model.dropout": "[0.1, 0.2]"}, blame="model.dropout",
         needles=["model.dropout"]),
    Case("dropout_set_negative", sets=["model.dropout=-0.0001"],
         needles=["--set: model.dropout: out of range: '-0.0001'", "or auto"]),
    Case("dropout_set_one", sets=["model.attention_dropout=1"],
         needles=["--set: model.attention_dropout: out of range: '1'"]),
    Case("dropout_on_vit", {"model.dropout": "0.1"}, blame="model.dropout",
         needles=["0.1, but a vit model", "has no dropout", "allowed with vit: 0 or auto"]),
    Case("attention_dropout_on_gpt", {"model.attention_dropout": "0.2"}, kind="gpt",
         blame="model.attention_dropout",
         needles=["0.2, but a gpt model", "allowed with gpt: 0 or auto"]),
    Case("dropout_on_gpt_by_set", kind="gpt", sets=["model.dropout=0.5"],
         needles=["--set", "model.dropout", "0.5, but a gpt model"]),
    Case("prompt_longer_than_context", {"sample.prompt": '"%s"' % ("x" * 16)}, kind="gpt",
         blame="sample.prompt", needles=["16 bytes", "model.context = 16", "allowed: 1 to 15 bytes"]),
    Case("default_prompt_longer_than_context", {"model.context": "8"}, kind="gpt",
         needles=["(default) sample.prompt: the default prompt, 'And God said', is 12 bytes",
                  "model.context = 8 bytes (", ".yaml:", "allowed: 1 to 7 bytes (set sample.prompt "
                  "to a shorter one, or a longer model.context"]),
    Case("default_prompt_at_context_2", {"model.context": "2"}, kind="gpt",
         needles=["the default prompt", "model.context = 2 bytes (", "allowed: 1 byte (set"]),
    Case("resume_from_a_directory_without_manifest", {"train.resume": "{adir}"},
         blame="train.resume", needles=["{adir}", "not a checkpoint"], setup=files),
    Case("run_dir_is_a_file", {"run.dir": "{dir}/a.gz"}, blame="run.dir",
         needles=["'{dir}/a.gz' is a file"], setup=files),
    Case("run_dir_under_a_file", {"run.dir": "{dir}/a.gz/run"}, blame="run.dir",
         needles=["'{dir}/a.gz' is a file"], setup=files),
    # micro-batches left to the planner: one process is planned only then
    Case("planner_memory_too_small", {"pipeline.stages": "auto", "pipeline.microbatches": "auto",
                                      "pipeline.memory_gib": "1e-5"},
         blame="pipeline.memory_gib", needles=["fits"]),
    # ---- values of the wrong type
    Case("word_for_int", {"model.dim": "sixteen"}, blame="model.dim",
         needles=["sixteen", RANGE_DIM]),
    Case("fraction_for_int", {"model.layers": "2.5"}, blame="model.layers",
         needles=["2.5", "allowed: an integer from 1 to 1024"]),
    Case("quoted_empty_for_int", {"model.dim": '""'}, blame="model.dim", needles=[RANGE_DIM]),
    Case("int_for_bool", {"run.metrics": "1"}, blame="run.metrics",
         needles=["allowed: true or false"]),
    Case("word_for_float", {"train.lr": "fast"}, blame="train.lr",
         needles=["fast", "allowed: a number >= 1e-38 and <= 10"]),
    Case("nan_for_float", {"train.grad_clip": "nan"}, blame="train.grad_clip",
         needles=["allowed: a number >= 0 and <= 1e+06"]),
    Case("inf_for_float", {"data.std": ".inf"}, blame="data.std", needles=["not a number", "allowed: a number >= 1e-06"]),
    # ---- values out of range
    Case("int_below_range", {"model.layers": "0"}, blame="model.layers",
         needles=["out of range", "allowed: an integer from 1 to 1024"]),
    Case("i64_above_range", {"train.batch": "99999999999"}, blame="train.batch",
         needles=["allowed: an integer from 1 to 16777216"]),
    Case("negative_seed", {"run.seed": "-1"}, blame="run.seed", needles=["allowed: an integer from 0"]),
    # epsilons and scales that float32, in which the model computes, turns
    # into 0 or Inf (0/0 in AdamW and LayerNorm, Inf pixels) used to train
    # into NaN and blame the learning rate
    Case("eps_below_float", {"train.eps": "1e-300"}, blame="train.eps",
         needles=["allowed: a number >= 1e-38 and <= 1"]),
    Case("ln_eps_below_float", {"model.ln_eps": "1e-46"}, blame="model.ln_eps",
         needles=["below what float32", "allowed: 0 (the model's default) or 1e-38 to 1"]),
    # a learning rate or initial scale that float32 turns into 0: training
    # that changed no weight while the log gave the rate, logits all 0
    Case("lr_below_float", {"train.lr": "1e-50"}, blame="train.lr",
         needles=["allowed: a number >= 1e-38 and <= 10"]),
    Case("min_lr_below_float", {"train.min_lr": "1e-45"}, blame="train.min_lr",
         needles=["below what float32", "allowed: 0 or 1e-38 to train.lr"]),
    Case("init_std_below_float", {"model.init_std": "1e-50"}, blame="model.init_std",
         needles=["allowed: a number >= 1e-38 and < 10"]),
    # a leading zero: octal to YAML 1.1 (017 is 15), decimal to 1.2 (17);
    # it used to be read as 17 without a word
    Case("leading_zero_int", {"run.threads": "017"}, blame="run.threads",
         needles=["a leading zero", "'017'"]),
    Case("leading_zero_negative", {"pipeline.microbatches": "-08"}, blame="pipeline.microbatches",
         needles=["a leading zero", "'-08'"]),
    Case("leading_zero_float", {"train.lr": "010"}, blame="train.lr",
         needles=["a leading zero", "'010'"]),
    Case("leading_zero_plus", {"run.threads": "+017"}, blame="run.threads",
         needles=["a leading zero", "'+017'"]),
    Case("leading_zero_plus_float", {"train.lr": "+010"}, blame="train.lr",
         needles=["a leading zero", "'+010'"]),
    Case("std_too_small", {"data.std": "1e-40"}, blame="data.std",
         needles=["allowed: a number >= 1e-06 and <= 1000"]),
    Case("huge_int_overflow", {"model.dim": "99999999999999999999999"}, blame="model.dim",
         needles=[RANGE_DIM]),
    Case("float_above_range", {"train.weight_decay": "11"}, blame="train.weight_decay",
         needles=["allowed: a number >= 0 and <= 10"]),
    Case("exclusive_min_alpha_zero", {"freeze.alpha": "0"}, blame="freeze.alpha",
         needles=["allowed: a number > 0 and < 1"]),
    Case("lr_zero", {"train.lr": "0"}, blame="train.lr",
         needles=["allowed: a number >= 1e-38 and <= 10"]),
    Case("exclusive_max_beta1_one", {"train.beta1": "1"}, blame="train.beta1",
         needles=["allowed: a number >= 0 and < 1"]),
    Case("exclusive_max_beta2_one", {"train.beta2": "1.0"}, blame="train.beta2",
         needles=["allowed: a number >= 0 and < 1"]),
    Case("unknown_enum_word", {"train.schedule": "cosin"}, blame="train.schedule",
         needles=["cosin", "allowed: one of constant, cosine, linear"]),
    Case("unknown_data_kind", {"data.kind": "mnist"}, blame="data.kind",
         needles=["fashion_mnist", "synthetic_images"]),
    Case("auto_on_key_without_auto", {"model.layers": "auto"}, blame="model.layers",
         needles=["allowed: an integer from 1 to 1024"]),
    Case("string_too_long", {"sample.prompt": '"%s"' % ("x" * 300)}, blame="sample.prompt",
         needles=["at most 255 bytes"]),
    # strings must survive the YAML a checkpoint stores the config in
    Case("control_character_in_string", {"sample.prompt": '"And\\x01God"'},
         blame="sample.prompt", needles=["not text", "control character"]),
    # ---- YAML structure
    Case("yaml_syntax_tab", raw=inserted_under("train", "\tlr2: 1\n"), needles=["YAML"],
         line=line_with("\t")),
    # libyaml's reader errors (a raw control character, bad UTF-8) name their line too
    Case("yaml_raw_control_character", {"sample.prompt": '"And\x01God"'},
         line=line_with("God"), needles=["YAML syntax error", "control characters"]),
    # a quoted "\0" is a NUL inside the scalar: not a shorter value or key
    Case("nul_in_quoted_value", {"train.lr": '"0.5\\0garbage"'}, blame="train.lr",
         needles=["NUL", "'0.5'"]),
    Case("nul_in_quoted_key", raw=inserted_under("run", '  "seed\\0zzz": 7\n'),
         line=line_with("zzz"), needles=["key holds a NUL"]),
    # after the key it would cut to: not reported as that key set twice
    Case("nul_in_quoted_key_after_it", raw=lambda t: t.replace("  seed: 3\n",
                                                               '  seed: 3\n  "seed\\0zzz": 7\n', 1),
         line=line_with("zzz"), needles=["key holds a NUL"], absent=["twice"]),
    Case("yaml_syntax_unclosed_flow", raw=append("pipeline: {stages: 1\n"), needles=["YAML"]),
    # a value that comes through an alias (*name) is reported on its key's
    # line, not on the line of the anchor (another key's, valid there)
    Case("alias_value_on_its_key_line",
         raw=lambda t: t.replace("  seed: 3\n", "  seed: &n 5000\n", 1) + "freeze:\n  alpha: *n\n",
         blame="freeze.alpha", line=line_with("*n"), needles=["5000", "allowed: a number > 0 and < 1"]),
    # libyaml takes a key past 1024 characters for no key ("could not find
    # expected ':'" on a line that has one): said as what it is
    Case("yaml_key_past_1024", raw=inserted_under("train", "  %s: 1\n" % ("k" * 1100)),
         line=line_with("k" * 1100), needles=["YAML syntax error", "a key of 1100 characters",
                                              "at most 1024"]),
    # counted in characters, not bytes
    Case("yaml_key_past_1024_utf8", raw=append("%s: 1\n" % ("\u00e9" * 1100)),
         line=line_with("\u00e9" * 1100), needles=["a key of 1100 characters", "at most 1024"]),
    Case("duplicate_key", raw=dup, line=line_with("lr: 0.005"),
         needles=["train.lr", "twice"]),
    # the key again through an alias of it: libyaml keeps the anchor's line
    # only, so the message says what the second one is
    Case("duplicate_key_through_an_alias",
         raw=lambda t: t.replace("  seed: 3\n", "  &k seed: 3\n  *k : 4\n", 1),
         line=line_with("&k seed"), needles=["'run.seed' appears twice", "YAML alias (*name) of it"]),
    # ... and through an alias of a value that spells the key
    Case("duplicate_key_through_an_alias_of_a_value",
         raw=append("sample:\n  top_k: 4\n  prompt: &k top_k\n  *k : 5\n"),
         line=line_with("  top_k: 4"), needles=["'sample.top_k' appears twice",
                                               "YAML alias (*name) of it"]),
    Case("list_for_scalar", {"train.lr": "[0.1, 0.2]"}, blame="train.lr",
         needles=["allowed: a number >= 1e-38 and <= 10"]),
    Case("empty_value", {"train.lr": ""}, blame="train.lr",
         needles=["allowed: a number >= 1e-38 and <= 10"]),
    # YAML's null is no value: not a directory named "~" or "null", nor the text "~"
    Case("null_tilde_run_dir", {"run.dir": "~"}, blame="run.dir", needles=["no value (YAML's null)"],
         absent=["must name"]),
    Case("null_word_run_dir", {"run.dir": "null"}, blame="run.dir", needles=["no value (YAML's null)"]),
    Case("null_capital_run_dir", {"run.dir": "Null"}, blame="run.dir",
         needles=["no value (YAML's null)"]),
    Case("null_tilde_prompt", {"sample.prompt": "~"}, kind="gpt", blame="sample.prompt",
         needles=["no value (YAML's null)"]),
    Case("null_seed", {"run.seed": "NULL"}, blame="run.seed", needles=["no value (YAML's null)"]),
    # tags ask for conversions the schema does not make
    Case("tag_binary_run_dir", {"run.dir": "!!binary L3RtcC94"}, blame="run.dir",
         needles=["a YAML tag", "tag:yaml.org,2002:binary"]),
    Case("tag_float_dim", {"model.dim": "!!float 16"}, blame="model.dim", needles=["a YAML tag"]),
    Case("tag_local", {"train.lr": "!custom 0.1"}, blame="train.lr", needles=["a YAML tag", "!custom"]),
    # an explicit !!str is a tag too (the document gives it the implicit one's name)
    Case("tag_explicit_str", {"run.dir": "!!str somewhere"}, blame="run.dir", needles=["a YAML tag"]),
    Case("tag_explicit_str_null", {"run.dir": "!!str null"}, blame="run.dir", needles=["a YAML tag"]),
    Case("tag_nonspecific", {"run.dir": "! somewhere"}, blame="run.dir", needles=["a YAML tag"]),
    Case("tag_on_a_section", raw=lambda t: t.replace("train:\n", "train: !x\n", 1),
         line=line_with("train: !x"), needles=["a YAML tag ('!x')"]),
    Case("tag_on_a_key", raw=inserted_under("train", "  !x lr2: 1\n"), line=line_with("!x lr2"),
         needles=["a YAML tag on the key ('!x')"]),
    Case("top_level_list", raw=lambda t: "- run\n- model\n", line=1, needles=["key: value"]),
    # YAML built to be slow, refused before libyaml builds a document
    Case("nested_flow_lists", raw=append("pipeline: " + "[" * DEEP + "]" * DEEP + "\n"),
         line=last_line, needles=["nested more than 16 levels"], fast=True),
    Case("nested_flow_mappings", raw=append("pipeline: " + "{a: " * DEEP + "1" + "}" * DEEP + "\n"),
         line=last_line, needles=["nested more than 16 levels"], fast=True),
    Case("nested_block_sequences", raw=append("pipeline:\n  " + "- " * DEEP + "x\n"),
         line=last_line, needles=["nested more than 16 levels"], fast=True),
    # the 17th level (root, pipeline, then 15 `a:`) opens 16 lines below `pipeline:`
    Case("nested_block_mappings", raw=block_nest,
         line=lambda t: line_with("pipeline:")(t) + 16, needles=["nested more than 16 levels"],
         fast=True),
    # 16 levels are allowed (root, train, 14 lists): the list is refused as a value instead
    Case("nesting_at_the_limit", raw=lambda t: t.replace("  lr: 0.003\n", "  lr: %s%s\n" % (
        "[" * 14, "]" * 14)), blame="train.lr", needles=["expected one value"], absent=["nested"]),
    Case("nesting_one_past_the_limit", raw=lambda t: t.replace("  lr: 0.003\n", "  lr: %s%s\n" % (
        "[" * 15, "]" * 15)), line=line_with("lr: ["), needles=["nested more than 16 levels"]),
    Case("config_over_1_mib", raw=padded((1 << 20) + 1), line=line_of_byte(1 << 20),
         needles=["larger than 1 MiB (1048576 bytes)"], fast=True),
    Case("config_of_2_mib", raw=padded(2 << 20), line=line_of_byte(1 << 20),
         needles=["larger than 1 MiB"], fast=True),
    Case("many_anchors", raw=append("x: [%s]\n" % ", ".join("&a%d 1" % i for i in range(40000))),
         line=last_line, needles=["more than 64 YAML anchors"], fast=True),
    Case("second_document", raw=append("---\ntrain:\n  lr: 0.1\n"), line=line_with("---"),
         needles=["second YAML document"]),
    Case("empty_second_document", raw=append("---\n"), line=last_line,
         needles=["second YAML document"]),
    # 2^40 walks of an empty mapping through aliases: refused at once, at
    # the empty mapping's unknown name (such names once passed, and the
    # aliases were refused at the first second visit)
    Case("aliases_of_mappings",
         raw=append("l0: &l0 {}\n" + "".join("l%d: &l%d {a: *l%d, b: *l%d}\n" % (i, i, i - 1, i - 1)
                                             for i in range(1, 41))),
         line=line_with("l0:"), needles=["unknown key 'l0' (an empty section)"], fast=True),
    Case("mapping_inside_its_own_anchor", raw=append("sample: &s {prompt: x, more: *s}\n"),
         line=last_line, needles=["sample.more", "aliases (*name) of mappings"]),
    # one error line even when the bad value holds a newline
    Case("newline_in_bad_value", {"train.schedule": '"cos\\nine"'}, blame="train.schedule",
         needles=["train.schedule"]),
    # ---- rules between keys
    Case("heads_do_not_divide_dim", {"model.heads": "3"}, blame="model.heads",
         needles=["model.dim"]),
    Case("patch_does_not_divide_image", {"model.patch": "3"}, blame="model.patch",
         needles=["8"]),
    Case("min_lr_above_lr", {"train.min_lr": "0.01"}, blame="train.min_lr",
         needles=["train.lr"]),
    Case("microbatches_above_batch", {"pipeline.microbatches": "16"},
         blame="pipeline.microbatches", needles=["8"]),
    Case("vit_with_text_data", {"data.kind": "synthetic_text"}, blame="data.kind",
         needles=["model.kind"]),
    Case("gpt_with_image_data", {"model.kind": "gpt"}, blame="data.kind", needles=["model.kind"]),
    Case("gpt_empty_prompt", {"sample.prompt": '""'}, kind="gpt", blame="sample.prompt"),
    # ---- input files
    Case("missing_idx_file",
         {"data.kind": "idx", "data.train_images": "{dir}/a.gz", "data.train_labels": "{dir}/b.gz",
          "data.test_images": "{dir}/c.gz", "data.test_labels": "{missing}"},
         blame="data.test_labels", needles=["{missing}"], setup=files),
    Case("missing_text_file", {"data.kind": "text", "data.text": "{missing}"}, kind="gpt",
         blame="data.text", needles=["{missing}"], setup=files),
    Case("text_file_is_a_directory", {"data.kind": "text", "data.text": "{adir}"}, kind="gpt",
         blame="data.text", needles=["{adir}"], setup=files),
    # text classification: its files are checked before the model kind
    Case("textcls_missing_train_file", {**TEXTCLS, "data.train_file": "{missing}"},
         blame="data.train_file", needles=["{missing}"], absent=["setup.sh"], setup=textcls_files),
    Case("textcls_train_file_is_a_directory", {**TEXTCLS, "data.train_file": "{adir}"},
         blame="data.train_file", needles=["'{adir}' is not a regular file"], setup=textcls_files),
    Case("textcls_train_file_unknown_extension", {**TEXTCLS, "data.train_file": "{csv}"},
         blame="data.train_file", needles=["{csv}: unknown file type",
                                           "allowed: a name ending in .tsv"], setup=textcls_files),
    Case("textcls_test_file_unknown_extension", {**TEXTCLS, "data.test_file": "{dir}/a.gz"},
         blame="data.test_file", needles=["{dir}/a.gz: unknown file type"], setup=textcls_files),
    Case("textcls_missing_test_file", {**TEXTCLS, "data.test_file": "{missing}.jsonl"},
         blame="data.test_file", needles=["{missing}.jsonl"], setup=textcls_files),
    Case("textcls_missing_vocab", {**TEXTCLS, "data.vocab": "{missing}"}, blame="data.vocab",
         needles=["{missing}"], setup=textcls_files),
    # a long path (800 bytes, well within PT_PATH_MAX) quoted in the message
    # keeps the reason after it: the body was cut at 767 bytes, mid-path
    Case("textcls_long_missing_vocab_keeps_reason",
         {**TEXTCLS, "data.vocab": "{long_missing}"}, blame="data.vocab",
         needles=["{long_missing}': No such file or directory"], setup=long_missing_path),
    Case("textcls_default_train_file_missing", {"data.kind": "text_classification"},
         needles=["{cfg}: (default) data.train_file: cannot use 'datasets/kjv_books.tsv'",
                  "(scripts/setup.sh writes it)"]),
    Case("textcls_with_a_vit", TEXTCLS, blame="data.kind",
         needles=["text_classification needs a BERT classifier (model.kind bert",
                  "model.kind is vit", "allowed with vit: fashion_mnist"], setup=textcls_files),
    Case("textcls_with_a_gpt", TEXTCLS, kind="gpt", blame="data.kind",
         needles=["model.kind bert", "model.kind is gpt", "allowed with gpt: text, kjv"],
         setup=textcls_files),
    Case("missing_init_from", {"model.init_from": "{missing}"}, blame="model.init_from",
         needles=["{missing}"], setup=files),
    Case("missing_config_file", config_name="missing.yaml", needles=["{cfg}"]),
    Case("config_is_a_directory", config_name="adir", setup=files, needles=["{cfg}"]),
    # ---- found while building the run (after the YAML was accepted): the
    # message still names where the key it blames was set
    Case("batch_above_dataset", {"train.batch": "1000"}, blame="train.batch",
         needles=["only 40 examples", "allowed for this data: 1 to 40"]),
    Case("augmentation_on_text", {"data.hflip": "true"}, kind="gpt", blame="data.hflip",
         needles=["allowed with text: false"]),
    Case("crop_on_text", {"data.crop_pad": "2"}, kind="gpt", blame="data.crop_pad",
         needles=["allowed with text: 0"]),
    Case("crop_above_image_size", {"data.crop_pad": "9"}, blame="data.crop_pad",
         needles=["allowed: 0 to 8"]),
    # 17 bytes: 15 to train on and 2 to test, so no context fits both (the
    # advice once said 2 to 14, which the test split then refused)
    Case("text_too_short_for_context", {"data.kind": "text", "data.text": "{short}"},
         kind="gpt", blame="model.context",
         needles=["{short}", "allowed for this text: none (a longer text, or another "
                  "data.test_fraction)"], setup=short_text),
    # a fraction too small to move 1 - f off 1: an empty test split, named
    # as the fraction (it was data.text's "split [1, 1) is not a range")
    Case("text_fraction_below_double_precision", {"data.kind": "text", "data.text": "{short}",
                                                  "data.test_fraction": "1e-300"},
         kind="gpt", blame="data.test_fraction", needles=["leaves no part of it for testing"],
         setup=short_text),
    # a test split too short for one example at any context: the fraction's
    # (it was blamed on data.text)
    Case("text_fraction_leaves_too_few_bytes", {"data.kind": "text", "data.text": "{short}",
                                                "data.test_fraction": "1e-5",
                                                "model.context": "4", "sample.length": "0"},
         kind="gpt", blame="data.test_fraction", needles=["{short}", "too few for one example"],
         setup=short_text),
    # half for testing: 8 and 9 bytes, so 2 to 7 (both splits)
    Case("text_too_short_for_context_halves", {"data.kind": "text", "data.text": "{short}",
                                                "data.test_fraction": "0.5"},
         kind="gpt", blame="model.context", needles=["{short}", "allowed for this text: 2 to 7"],
         setup=short_text),
    Case("init_from_not_safetensors", {"model.init_from": "{garbage}"}, blame="model.init_from",
         needles=["{garbage}"], setup=garbage_weights),
    Case("stages_above_ranks", {"pipeline.stages": "2"}, blame="pipeline.stages",
         needles=["node has 1 rank", "allowed here: 1 to 1"]),
    Case("stages_above_units", {"pipeline.stages": "7"}, blame="pipeline.stages",
         needles=["6 units", "allowed: 1 to 6"]),
    Case("stages_above_units_of_one_block", {"pipeline.stages": "5", "model.layers": "1"},
         blame="pipeline.stages", needles=["a model of 1 block (model.layers) has 4 units",
                                           "allowed: 1 to 4"]),
    Case("bf16_on_the_cpu", {"run.precision": "bf16", "run.device": "cpu"}, blame="run.precision",
         needles=["needs a GPU", "allowed on the CPU: fp32"]),
    # a small model (one 256x256 patch; a batch of 1 of 4096 bytes) on data no machine holds
    Case("synthetic_images_beyond_memory", {"data.synthetic_examples": "100000000",
                                            "data.image_size": "256", "model.patch": "256"},
         blame="data.synthetic_examples", needles=["GiB", "allowed:"], timeout=20),
    Case("synthetic_text_beyond_memory", {"data.synthetic_examples": "100000000",
                                          "model.context": "4096", "train.batch": "1"}, kind="gpt",
         blame="data.synthetic_examples", needles=["GiB", "allowed:"], timeout=20),
    Case("classes_below_a_label", {**IDX, "data.train_labels": "{tl9}"}, blame="model.classes",
         needles=["{tl9}", "label 9 (example 5)", "allowed for this data: 10 to 256"],
         setup=idx_data),
    Case("classes_above_idx_bytes", {**IDX, "model.classes": "300"}, blame="model.classes",
         needles=["allowed with data.kind idx: 2 to 256"], setup=idx_data),
    Case("test_images_of_another_size", {**IDX, "data.test_images": "{vi12}"},
         blame="data.test_images", needles=["{vi12}", "12x12", "data.train_images '{ti}'", "8x8"],
         setup=idx_data),
    # (both files named: both hold 8x8 images)
    Case("patch_does_not_divide_idx_images", {**IDX, "model.patch": "3"}, blame="model.patch",
         needles=["8x8", "'{ti}' (data.train_images) and '{vi}' (data.test_images)"],
         setup=idx_data),
    Case("patch_checked_before_the_pixels", {**IDX, "data.test_images": "{vi_huge}",
                                              "model.patch": "7"}, blame="model.patch",
         needles=["16384x16384", "{vi_huge}"], absent=["truncated"], setup=idx_data),
    Case("idx_images_beyond_memory", {**IDX, "data.train_images": "{ti_many}",
                                      "data.train_labels": "{tl_many}",
                                      "data.test_images": "{ti_many}", "data.test_labels": "{tl_many}",
                                      "model.patch": "7"},
         blame="data.train_images", needles=["{ti_many}", "declares 2147483647 images of 28x28",
                                              "GiB, more than"], absent=["truncated"],
         setup=idx_data, fast=True),
    Case("crop_above_idx_image_size", {**IDX, "data.crop_pad": "9"}, blame="data.crop_pad",
         needles=["at most 8"], setup=idx_data),
    Case("idx_file_not_idx", {**IDX, "data.train_labels": "{dir}/a.gz"}, blame="data.train_labels",
         needles=["{dir}/a.gz"], setup=idx_data),
    Case("section_is_a_list", raw=lambda t: without_section("model")(t) + "model: [vit, 16]\n",
         line=last_line, needles=["model: section model must be a mapping of key: value lines",
                                  "a list"], absent=["unknown key"]),
    Case("section_is_a_word", raw=lambda t: without_section("model")(t) + "model: vit\n",
         line=last_line, needles=["section model must be a mapping", "a single value"]),
    Case("section_is_empty", raw=lambda t: without_section("model")(t) + "model:\n",
         line=last_line, needles=["section model must be a mapping", "empty"]),
    Case("empty_run_dir", {"run.dir": '""'}, needles=["run.dir"]),
    # a place that cannot be made is the config's fault (exit 2), not the system's
    Case("run_dir_cannot_be_made", {"run.dir": "/proc/no-such-dir/run"}, blame="run.dir",
         needles=["cannot create directory", "/proc/no-such-dir"]),
    # ---- --set overrides and the command line
    Case("set_unknown_key", sets=["train.lrr=0.1"],
         needles=["--set", "train.lrr", "did you mean 'train.lr'"]),
    Case("set_without_equals", sets=["train.lr"], needles=["--set", "train.lr", "key=value"]),
    Case("set_empty_key", sets=["=3"], needles=["--set", "key=value"]),
    Case("set_string_not_utf8", sets=["run.dir=r\udcff"],
         needles=["--set", "run.dir", "invalid UTF-8"]),
    Case("set_bad_value", sets=["train.batch=0"],
         needles=["--set", "train.batch", "allowed: an integer from 1 to 16777216"]),
    Case("set_a_section", sets=["model=5"], needles=["--set: model: a section", "model.kind="]),
    # white space around a number is refused on both sides alike, and a
    # hexadecimal float (which strtod reads) is not a YAML number
    Case("set_number_leading_space", sets=["train.lr= 0.001"],
         needles=["--set: train.lr: not a number: ' 0.001'"]),
    Case("set_number_trailing_space", sets=["train.lr=0.001 "],
         needles=["--set: train.lr: not a number: '0.001 '"]),
    Case("set_integer_leading_space", sets=["train.batch= 8"],
         needles=["--set: train.batch: not an integer: ' 8'"]),
    Case("set_hex_float", sets=["train.lr=0x1p-10"], needles=["--set: train.lr: not a number"]),
    Case("set_seed_one_past_max", sets=["run.seed=9200000000000000001"],
         needles=["--set: run.seed: out of range", "to 9200000000000000000"]),
    Case("set_equals_form_bad_enum", sets=["--set=pipeline.schedule=zigzag"],
         needles=["--set", "pipeline.schedule", "gpipe, 1f1b"]),
    Case("set_breaks_cross_key_rule", sets=["model.heads=5"],
         needles=["--set", "model.heads", "model.dim"]),
    Case("unexpected_argument", sets=["--bogus"], needles=["unexpected argument '--bogus'"]),
    Case("checkpoint_option_on_train", sets=["--checkpoint"],
         needles=["unexpected argument '--checkpoint'"]),
    Case("eval_with_bad_config", {"model.heads": "3"}, cmd="eval", blame="model.heads"),
    Case("plan_with_bad_config", {"train.schedule": "cosin"}, cmd="plan", blame="train.schedule"),
    # plan refuses what train would: a batch past the training split (plan
    # did not read the training split, or did not look)
    Case("plan_batch_past_the_data", {"train.batch": "1000"}, cmd="plan", blame="train.batch",
         needles=["the training split has only 40 examples"]),
    Case("plan_batch_past_fashion_mnist", {"data.kind": "fashion_mnist", "train.batch": "70000",
                                           "model.classes": "10", "data.image_size": "28",
                                           "model.patch": "7"},
         cmd="plan", blame="train.batch", needles=["the training split has only 60000 examples"]),
    # a batch whose step staging (inputs and targets at once, in host
    # memory) cannot fit: refused naming train.batch, where plan and eval
    # used to exit 1 with "out of memory for batch staging" (here 4 TiB)
    Case("batch_staging_plan", {"train.batch": "16777216", "pipeline.microbatches": "1048576",
                                "data.image_size": "256", "model.patch": "64"}, cmd="plan",
         blame="train.batch", needles=["whose inputs and targets a step holds at once"]),
    Case("batch_staging_eval", {"train.batch": "16777216", "pipeline.microbatches": "1048576",
                                "data.image_size": "256", "model.patch": "64"}, cmd="eval",
         sets=["--init"], blame="train.batch", needles=["whose inputs and targets a step holds at once"]),
    # a batch whose staging cannot fit, refused before the data is made
    # (150,000 sequences of 65,536 tokens took two minutes and 10 GB to make
    # first); under the sanitizers the memory check's head size overflowed
    # an int on the way (32,768 x 65,536)
    Case("batch_staging_before_data", {"data.synthetic_examples": "150000",
                                       "train.batch": "150000", "model.context": "65536",
                                       "pipeline.memory_gib": "1000000", "sample.length": "0"},
         kind="gpt", cmd="plan", blame="train.batch",
         needles=["whose inputs and targets a step holds at once"], fast=True),
    Case("batch_rows_head_size", {"data.synthetic_examples": "32768", "train.batch": "32768",
                                  "model.context": "65536", "sample.length": "0"},
         kind="gpt", cmd="plan", blame="model.context", needles=["one example's activations"]),
]


# ---- every integer key at both ends of the range `pipetrain keys` documents

def integer_ranges(keys_table):
    """[(key, lo, hi)] of the integer keys in the Markdown of `pipetrain keys`."""
    out = []
    for row in keys_table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        m = re.match(r"^an integer from (-?\d+) to (-?\d+)", cells[2])
        if m:
            out.append((cells[0].strip("`"), int(m.group(1)), int(m.group(2))))
    return out


def test_integer_bounds_accepted(h):
    """Every integer key at its documented minimum, and at its maximum, is
    read: YAML and --set with them all fail only at the first cross-key rule,
    the empty run.dir put there on purpose (each bound alone may break a rule
    between keys, such as heads dividing dim; that is not what is tested)."""
    ranges = integer_ranges(h.run(["keys"]).expect(0).out)
    for side in (1, 2):
        keys = base(h, **{"run.dir": '""'})
        keys.update({k: str(b[side - 1]) for k, *b in ranges})
        text = U.render(keys)
        cfg = U.write(h.path("bounds%d.yaml" % side), text)
        r = h.run(["train", cfg]).expect(2, "every integer key at its %s" % ("min", "max")[side - 1])
        r.one_error("%s:%d: run.dir: must name a directory" % (cfg, U.line_of(text, "run.dir")))
        sets = sum((["--set", "%s=%d" % (k, b[side - 1])] for k, *b in ranges), [])
        cfg = U.write(h.path("plain%d.yaml" % side), U.render(base(h, **{"run.dir": '""'})))
        r = h.run(["train", cfg] + sets).expect(2, "--set of every integer key")
        r.one_error("run.dir: must name a directory")
    check(not os.path.exists(h.path("run")), "run.dir created")


def bound_test(key, lo, hi):
    def t(h):
        text = U.render(base(h, **{key: str(hi + 1)}))
        cfg = U.write(h.path("bad.yaml"), text)
        good = U.write(h.path("good.yaml"), U.render(base(h)))
        before = U.snapshot(h.dir)
        allowed = "allowed: an integer from %d to %d" % (lo, hi)
        r = h.run(["train", cfg]).expect(2, "%s one past its maximum" % key)
        r.one_error("%s:%d: %s: out of range: '%d'" % (cfg, U.line_of(text, key), key, hi + 1),
                    allowed)
        r = h.run(["train", good, "--set", "%s=%d" % (key, lo - 1)]).expect(2, "below the minimum")
        r.one_error("--set: %s: out of range: '%d'" % (key, lo - 1), allowed)
        check(not os.path.exists(h.path("run")), "run.dir created")
        U.same_snapshot(before, U.snapshot(h.dir), "the test directory")
    t.__name__ = "test_bounds_" + key.replace(".", "_")
    return t


def bound_tests(binary):
    """One test per integer key that `pipetrain keys` lists."""
    table = subprocess.run([binary, "keys"], capture_output=True, text=True, check=True).stdout
    ranges = integer_ranges(table)
    if len(ranges) < 20:
        sys.exit("found only %d integer keys in `pipetrain keys`:\n%s" % (len(ranges), table))
    return [bound_test(*r) for r in ranges]


def make(case):
    def t(h):
        run_case(h, case)
    t.__name__ = "test_" + case.name
    return t


def test_base_config_trains(h):
    """Positive control: the config every case starts from is valid."""
    cfg = U.write_config(h, "good.yaml", base(h))
    h.run(["train", cfg]).expect(0)
    check(U.checkpoints(h.path("run")), "the base config saved no checkpoint")


def test_boundaries_accepted(h):
    """Positive controls at the edges of what is allowed: data.crop_pad
    equal to the image size, and model.classes 256 with IDX labels (bytes);
    one more of each is refused (CASES)."""
    cfg = U.write_config(h, "crop.yaml", base(h, **{"data.crop_pad": "8", "data.image_size": "8"}))
    h.run(["train", cfg]).expect(0, "data.crop_pad equal to the image size")
    paths = idx_data(h)
    keys = base(h, **{k: v.format(**paths) if isinstance(v, str) else v for k, v in IDX.items()})
    keys.update({"model.classes": "256", "run.dir": h.path("run-idx")})
    cfg = U.write_config(h, "idx256.yaml", keys)
    h.run(["train", cfg]).expect(0, "model.classes 256 with IDX labels")


def test_base_gpt_config_trains(h):
    cfg = U.write_config(h, "good.yaml", base(h, "gpt"))
    h.run(["train", cfg]).expect(0)


def test_yaml_unterminated_quote(h):
    """An unterminated quote: libyaml notices only further on, so the line
    reported is where it gave up; it must still be a line of this file."""
    keys = base(h)
    text = U.render(keys)
    lines = text.splitlines()
    at = U.line_of(text, "model.dim")
    lines[at - 1] = '  dim: "16'  # unterminated quote ...
    lines.insert(at, "  heads: 2")  # ... the scanner runs on
    cfg = U.write(h.path("bad.yaml"), "\n".join(lines) + "\n")
    r = h.run(["train", cfg]).expect(2)
    line = r.one_error("YAML")
    m = re.search(re.escape(cfg) + r":(\d+):", line)
    check(m and 1 <= int(m.group(1)) <= len(lines) + 1, "no FILE:LINE in %r", line)
    check(not os.path.exists(h.path("run")), "run.dir created")


def test_config_of_1_mib_is_read(h):
    """The size limit is on the bytes: a config of exactly 1 MiB (padded with
    comments) is read, and anchors and aliases are still allowed."""
    text = U.render(base(h)).replace("  layers: 2\n", "  layers: &two 2\n")
    text = text.replace("  heads: 2\n", "  heads: *two\n")
    cfg = U.write(h.path("big.yaml"), padded(1 << 20)(text))
    check(os.path.getsize(cfg) == 1 << 20, "padding made %d bytes", os.path.getsize(cfg))
    r = h.run(["plan", cfg]).expect(0, "a config of exactly 1 MiB")
    check("model:" in r.out, "plan printed no model line:\n%s", r.out)


def test_deep_config_in_checkpoint_refused_fast(h):
    """A checkpoint's stored config goes through the same limits as a file."""
    run_dir = h.path("run")
    cfg = U.write(h.path("good.yaml"), U.render(base(h, **{"train.max_steps": "1"})))
    h.run(["train", cfg]).expect(0)
    ck = U.ckpt(run_dir, 1)
    manifest = os.path.join(ck, "manifest")
    magic, version, recs = U.read_recfile(manifest)
    deep = "run:\n  seed: 1\nmodel: " + "[" * DEEP + "]" * DEEP + "\n"
    m = json.loads(dict(recs)["manifest"])  # the config is a string in the JSON manifest
    m["config"] = deep
    U.write_recfile(manifest, magic, version, [("manifest", json.dumps(m).encode())])
    usual = usual_cpu(h)  # of `train`, which starts MPI: more than `export` needs
    before = U.snapshot(h.dir)
    r, spent = timed_run(h, ["export", ck, h.path("w.safetensors")], 20)
    r.expect(2)
    r.one_error(manifest + " (config record):3: ", "nested more than 16 levels", strict=False)
    check(spent < usual + FAST_MARGIN_S, "export took %.2f CPU seconds to refuse the stored config",
          spent)
    U.same_snapshot(before, U.snapshot(h.dir), "the test directory")


def test_init_from_nan_or_inf(h):
    """Weights holding NaN or Inf are refused when they are loaded, naming the
    file and the tensor, not later as a loss of nan."""
    cfg = U.write(h.path("good.yaml"), U.render(base(h, **{"train.max_steps": "1"})))
    h.run(["train", cfg]).expect(0)
    good = h.path("w.safetensors")
    h.run(["export", U.ckpt(h.path("run"), 1), good]).expect(0)
    data = U.read_bytes(good)
    (n,) = struct.unpack("<Q", data[:8])
    begin = 8 + n + json.loads(data[8:8 + n])["blocks.1.mlp.fc1.weight"]["data_offsets"][0]
    for word, value in (("NaN", math.nan), ("Inf", -math.inf)):
        bad = U.write(h.path(word + ".safetensors"),
                      data[:begin + 12] + struct.pack("<f", value) + data[begin + 16:], "wb")
        text = U.render(base(h, **{"model.init_from": bad, "run.dir": h.path("run2")}))
        cfg = U.write(h.path("bad.yaml"), text)
        before = U.snapshot(h.dir)
        r = h.run(["train", cfg]).expect(2, word)
        r.one_error("%s:%d: model.init_from: " % (cfg, U.line_of(text, "model.init_from")),
                    "'%s'" % bad, "'blocks.1.mlp.fc1.weight' holds %s at element 3" % word)
        check(not os.path.exists(h.path("run2")), "refused weights created run.dir")
        U.same_snapshot(before, U.snapshot(h.dir), "the test directory")
    # another shape than the model's: refused from the file's header, before
    # the model is sized (here the memory's refusal would come first)
    text = U.render(base(h, **{"model.init_from": good, "run.dir": h.path("run2"),
                               "model.mlp_hidden": "200000", "pipeline.memory_gib": "0.01"}))
    cfg = U.write(h.path("bad.yaml"), text)
    r = h.run(["train", cfg]).expect(2, "another shape")
    r.one_error("%s:%d: model.init_from: " % (cfg, U.line_of(text, "model.init_from")),
                "'blocks.0.mlp.fc1.weight' has shape", "the model needs [200000, ")
    check(not os.path.exists(h.path("run2")), "refused weights created run.dir")
    # finite weights whose products overflow float32: eval reports no
    # accuracy made from NaN logits, exits 2 and writes no output
    huge = U.write(h.path("huge.safetensors"),
                   data[:begin] + struct.pack("<16f", *([3e38] * 16)) + data[begin + 64:], "wb")
    cfg = U.write(h.path("huge.yaml"), U.render(base(h, **{"model.init_from": huge})))
    out = h.path("huge-logits.st")
    r = h.run(["eval", cfg, "--init", "--logits", out]).expect(2, "overflowing weights")
    r.one_error("the test loss is", "not finite", strict=False)
    check("test accuracy" not in r.out, "an accuracy was reported:\n%s", r.describe())
    check(not os.path.exists(out), "--logits was written from NaN logits")


def st_with_metadata(src, dst, meta):
    """A copy of safetensors file src whose __metadata__ is meta (None: none)."""
    data = U.read_bytes(src)
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    if meta is not None:
        header["__metadata__"] = meta
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return U.write(dst, struct.pack("<Q", len(text)) + text + data[8 + n:], "wb")


def test_init_from_records_heads_and_ln_eps(h):
    """What a vit's or gpt's weights' shapes cannot tell, model.heads and
    model.ln_eps, `export` records in the file's metadata, and
    model.init_from checks it: another value is refused by train, plan and
    eval --init, exit 2, naming that key and the value to set, with nothing
    made (split into other heads, or normalised with another epsilon, the
    same weights compute another function; they loaded silently). The same
    values load, ln_eps also as the default it stands for. Weights that do
    not record them (an older export, or written elsewhere) load with one
    note saying they go unchecked; a recorded value that is not one is
    refused naming model.init_from."""
    for kind, eps in (("vit", None), ("gpt", "3e-07")):
        run = h.path("rec-" + kind)
        keys = {"run.dir": run, "train.max_steps": "1"}
        if eps:
            keys["model.ln_eps"] = eps
        h.run(["train", U.write_config(h, "rec.yaml", base(h, kind, **keys))]).expect(0)
        w = h.path("rec-%s.safetensors" % kind)
        h.run(["export", U.ckpt(run, 1), w]).expect(0)
        data = U.read_bytes(w)
        (n,) = struct.unpack("<Q", data[:8])
        meta = json.loads(data[8:8 + n])["__metadata__"]
        check(meta.get("model.heads") == "2" and meta.get("model.ln_eps") == (eps or "1e-05"),
              "%s export's metadata: %s", kind, meta)
        again = h.path("rec2-" + kind)
        use = dict(base(h, kind), **{"run.dir": again, "model.init_from": w})
        if eps:
            use["model.ln_eps"] = eps
        for key, value, want in (("model.heads", "4", "2"), ("model.heads", "1", "2"),
                                 ("model.ln_eps", "1e-6", eps or "1e-05")):
            text = U.render(dict(use, **{key: value}))
            cfg = U.write(h.path("other.yaml"), text)
            for cmd in (["train", cfg], ["plan", cfg], ["eval", cfg, "--init"]):
                r = h.run(cmd).expect(2, "%s %s: %s %s over recorded %s" % (kind, cmd[0], key, value, want))
                r.one_error("%s:%d: %s: " % (cfg, U.line_of(text, key), key), "'%s'" % w,
                            "their metadata's %s" % key, "set %s: %s" % (key, want))
                check(not os.path.exists(again), "a refused %s made run.dir", cmd[0])
        # the recorded values, and ln_eps as the default it stands for
        same = [{}] if eps else [{}, {"model.ln_eps": "0.00001"}]
        for extra in same:
            r = h.run(["train", U.write_config(h, "same.yaml", dict(use, **extra))]).expect(
                0, "%s: the recorded values %s" % (kind, extra))
            check("model.init_from" not in r.err, "%s: a note on recorded weights:\n%s", kind, r.err)
            shutil.rmtree(again)
        # weights that record neither, or one of them: loaded, with one note
        # naming what goes unchecked; what is recorded is still checked
        said = {"model.heads": "model.heads (2)", "model.ln_eps": "model.ln_eps (%s)" % (eps or "1e-05")}
        for kept in ((), ("model.heads",), ("model.ln_eps",)):
            bare = st_with_metadata(w, h.path("bare-%s.safetensors" % kind),
                                    dict({"format": "pt"}, **{k: meta[k] for k in kept}))
            r = h.run(["train", U.write_config(h, "bare.yaml", dict(use, **{"model.init_from": bare}))]).expect(
                0, "%s weights recording only %s" % (kind, kept))
            unsaid = " and ".join(said[k] for k in ("model.heads", "model.ln_eps") if k not in kept)
            notes = [l for l in r.err.splitlines() if "does not record" in l]
            check(len(notes) == 1 and "does not record the %s of the model" % unsaid in notes[0] and
                  "unchecked" in notes[0] and all(said[k] not in notes[0] for k in kept),
                  "%s recording %s: not one note naming %s:\n%s", kind, kept, unsaid, r.err)
            shutil.rmtree(again)
            for k in kept:  # still checked
                other = {"model.heads": "4", "model.ln_eps": "1e-6"}[k]
                h.run(["plan", U.write_config(h, "bare.yaml", dict(use, **{"model.init_from": bare, k: other}))]).expect(
                    2, "%s recording %s, config %s %s" % (kind, kept, k, other)).one_error(k, "their metadata's " + k)
        # a record that is no value
        for key, value in (("model.heads", "two"), ("model.heads", "0"), ("model.ln_eps", "nan"),
                           ("model.ln_eps", "1e-5x")):
            odd = st_with_metadata(w, h.path("odd.safetensors"), dict(meta, **{key: value}))
            text = U.render(dict(use, **{"model.init_from": odd}))
            cfg = U.write(h.path("odd.yaml"), text)
            r = h.run(["train", cfg]).expect(2, "%s: metadata %s %s" % (kind, key, value))
            r.one_error("%s:%d: model.init_from: " % (cfg, U.line_of(text, "model.init_from")),
                        "its metadata's %s is '%s'" % (key, value))
            check(not os.path.exists(again), "a refused run made run.dir")
        # a resume takes the checkpoint's weights, not model.init_from's, so
        # neither train nor plan of it checks them (an export of another
        # model at that path since)
        resume = dict(base(h, kind), **{"run.dir": run, "train.resume": "auto", "train.max_steps": "2",
                                        "model.init_from": h.path("rec-h4-%s.safetensors" % kind)})
        if eps:
            resume["model.ln_eps"] = eps
        h.run(["train", U.write_config(h, "h4.yaml", dict(resume, **{
            "run.dir": h.path("h4-" + kind), "model.heads": "4", "model.init_from": None, "train.resume": None}))]).expect(0)
        h.run(["export", U.ckpt(h.path("h4-" + kind), 2), resume["model.init_from"]]).expect(0)
        cfg = U.write_config(h, "resume.yaml", resume)
        for cmd in ("plan", "train"):
            h.run([cmd, cfg]).expect(0, "%s of a resume beside an init_from of 4 heads" % cmd)


def test_vocab_shorter_than_model_vocab_noted(h):
    """A data.vocab of fewer tokens than model.vocab trains (a checkpoint
    that pads its embedding keeps rows no token reaches), but one that looks
    cut short gets one note from train and plan, naming the file: more rows
    missing than padding adds (128 or more), or a last line without a
    newline. The words such a file lost are read as [UNK]; it trained
    without a word. An exact vocabulary, one padded by fewer than 128 rows,
    and one whose last line lacks a newline but nothing else, get none."""
    files = U.bert_files(h, 40, 1)
    keys = dict(base(h, "gpt"), **files)
    keys.update({"model.kind": "bert", "model.context": "17", "model.positions": "20",
                 "model.classes": "3", "data.kind": "text_classification", "sample.length": None,
                 "data.synthetic_examples": None})
    whole = open(files["data.vocab"]).read()
    lines = whole.splitlines()
    rows = len(lines)
    cut = "\n".join(lines[:-3]) + "\n" + lines[-3][:3]  # an interrupted copy
    for name, text, model_vocab, noted in (
            ("exact", whole, rows, None), ("padded by 8", whole, rows + 8, None),
            ("padded by 127", whole, rows + 127, None),
            ("no last newline, no row missing", whole.rstrip("\n"), rows, None),
            ("128 rows missing", whole, rows + 128, "more than a padded embedding adds"),
            ("200 rows missing", whole, rows + 200, "more than a padded embedding adds"),
            ("cut inside its last line", cut, rows, "its last line, '%s', has no newline" % lines[-3][:3])):
        vocab = U.write(h.path("v.txt"), text)
        run = h.path("short-run")
        cfg = U.write_config(h, "short.yaml", dict(keys, **{"data.vocab": vocab, "model.vocab": str(model_vocab),
                                                            "run.dir": run}))
        for cmd in ("plan", "train"):
            r = h.run([cmd, cfg]).expect(0, "%s of a vocabulary %s" % (cmd, name))
            notes = [l for l in r.err.splitlines() if "(data.vocab) has" in l]
            if noted:
                check(len(notes) == 1 and noted in notes[0] and "'%s'" % vocab in notes[0] and
                      "fewer than model.vocab (%d)" % model_vocab in notes[0] and
                      "set model.vocab: %d" % (len(text.splitlines())) in notes[0],
                      "%s, vocabulary %s: not one note saying %r:\n%s", cmd, name, noted, r.err)
            else:
                check(not notes, "%s, vocabulary %s: a note:\n%s", cmd, name, r.err)
        shutil.rmtree(run)

def test_profile_refused_with_its_key(h):
    """pipeline.profile: a run's RUN_DIR/profile.json plans a new run alike;
    a file that is not one, is damaged, or was measured for another model or
    world is refused naming the key, the file and what is wrong, before
    run.dir exists."""
    # a memory limit on one rank leaves M to the planner, so the costs are measured
    good_keys = base(h, **{"train.max_steps": "1", "pipeline.memory_gib": "1"})
    cfg = U.write(h.path("good.yaml"), U.render(good_keys))
    h.run(["train", cfg]).expect(0)
    prof_path = h.path("run", "profile.json")
    prof = json.load(open(prof_path))
    check(len(prof["costs"]["units"]) == 6 and prof["ranks"] == 1, "profile.json: %s", prof)
    text = U.render(base(h, **{"train.max_steps": "1", "pipeline.memory_gib": "1",
                               "pipeline.profile": prof_path, "run.dir": h.path("again")}))
    h.run(["train", U.write(h.path("again.yaml"), text)]).expect(0)
    check(json.load(open(h.path("again", "profile.json"))) == prof,
          "a run given a profile did not plan from it")

    def edited(**changes):
        def f(p):
            for path, value in changes.items():
                d, keys = p, path.split(".")
                for k in keys[:-1]:
                    d = d[int(k)] if isinstance(d, list) else d[k]
                d[keys[-1]] = value
            return json.dumps(p)
        return f
    cases = [
        ("not_json", lambda p: '{"format": ', ["line 1"]),
        ("empty", lambda p: "", ["line 1"]),
        ("a_list", lambda p: "[1]", ["must be a JSON object"]),
        ("other_format", edited(format="pipetrain-profile-9"), ["'format'"]),
        ("other_model", edited(**{"model.dim": 64}), ["another model", "model.dim was 64"]),
        ("negative_time", edited(**{"costs.units.2.fwd": [-1.0, 1.0]}), ["'costs.units[2].fwd[0]'"]),
        ("time_as_text", edited(**{"costs.units.0.bwd": ["a", 1.0]}), ["'costs.units[0].bwd[0]'"]),
        ("zero_time", edited(**{"costs.units.3.bwd": [1e-5, 0.0]}),
         ["'costs.units[3].bwd[1]' must be a time of at least 1e-09 seconds"]),
        # below any clock's tick: it vanished from the planner's sums, and
        # plan said nothing was profiled
        ("denormal_time", edited(**{"costs.units.1.fwd": [1e-5, 5e-324]}),
         ["'costs.units[1].fwd[1]' must be a time of at least 1e-09 seconds"]),
        ("one_unit", edited(**{"costs.units": prof["costs"]["units"][:1]}), ["'costs.units'"]),
        ("node_out_of_range", edited(node_of=[5]), ["'node_of[0]'"]),
        ("huge_ranks", edited(ranks=1 << 40), ["'ranks'"]),
        ("backend_not_text", edited(backend=7), ["'backend'"]),
        ("links_missing", edited(links=None), ["'links'"]),
        ("time_huge", edited(**{"costs.units.1.bwd": [1e308, 1.0]}), ["'costs.units[1].bwd[0]'"]),
        ("bytes_huge", edited(**{"costs.boundary_bytes_per_example": 1e300}),
         ["'costs.boundary_bytes_per_example'"]),
        ("negative_zero", edited(**{"links.latency_s": -0.0}), ["'links.latency_s'"]),
        ("ram_missing", edited(ram_bytes_per_rank=None), ["'ram_bytes_per_rank'"]),
        ("other_world_ranks", edited(ranks=2, node_of=[0, 0]), ["measured on another world",
                                                               "2 ranks, this run has 1"]),
        ("other_world_cores", edited(cores=prof["cores"] + 7), ["measured on another world",
                                                                "cores"]),
        ("other_world_threads", edited(threads=prof["threads"] + 1),
         ["measured on another world", "threads"]),
        ("other_batch_sizes", edited(**{"costs.batch": [3, 5]}), ["measured on another world",
                                                                  "micro-batches of 3 and 5"]),
        # the planner divides the times by these sizes
        ("zero_batch_sizes", edited(**{"costs.batch": [0, 0]}), ["measured on another world",
                                                                 "micro-batches of 0 and 0"]),
        # past 16 MiB (a million ranks and 4096 units take about 10): refused
        # unread; 30 MB of empty objects used to take 2.4 GB to parse
        ("too_large", lambda p: json.dumps(p)[:-1] + ', "pad": [' + "{}," * (6 << 20) + "{}]}",
         ["larger than the limit of 16777216 bytes"]),
    ]
    for name, make, needles in cases:
        bad = U.write(h.path("bad-%s.json" % name), make(json.loads(json.dumps(prof))))
        run_dir = h.path("run-" + name)
        text = U.render(base(h, **{"train.max_steps": "1", "pipeline.memory_gib": "1",
                                   "pipeline.profile": bad, "run.dir": run_dir}))
        cfg = U.write(h.path("bad.yaml"), text)
        before = U.snapshot(h.dir)
        r = h.run(["train", cfg]).expect(2, name)
        r.one_error("%s:%d: pipeline.profile: " % (cfg, U.line_of(text, "pipeline.profile")), bad,
                    *needles)
        check(not os.path.exists(run_dir), "%s: a refused profile created run.dir", name)
        U.same_snapshot(before, U.snapshot(h.dir), "the test directory (%s)" % name)
    # a valid profile whose stage-boundary buffers alone outgrow the memory
    # limit: the planner says so in bytes, not with the residue below zero
    big = U.write(h.path("big-boundary.json"),
                  edited(**{"costs.boundary_bytes_per_example": 1e16})(json.loads(json.dumps(prof))))
    text = U.render(base(h, **{"train.max_steps": "1", "pipeline.memory_gib": "1",
                               "pipeline.profile": big, "run.dir": h.path("run-big")}))
    r = h.run(["train", U.write(h.path("big.yaml"), text)]).expect(2, "boundary beyond memory")
    r.one_error("pipeline.memory_gib: 1 GiB per device", "stage-boundary buffers",
                "alone take more", "the unit sizes are pipeline.profile's")
    check("e-300" not in r.err, "a meaningless limit in the message\n%s", r.describe())
    for name, target in (("missing", h.path("nothing.json")), ("a_directory", h.dir)):
        text = U.render(base(h, **{"pipeline.profile": target, "run.dir": h.path("run-" + name)}))
        cfg = U.write(h.path("bad.yaml"), text)
        r = h.run(["train", cfg]).expect(2, name)
        r.one_error("%s:%d: pipeline.profile: " % (cfg, U.line_of(text, "pipeline.profile")), target)


def test_auto_freeze_of_many_blocks_logged_whole(h):
    """The auto policy logs every block's gradient norm and change rate at
    each decision. A 300-block model (the schema allows 1024) once overflowed
    a fixed buffer there (found by ASan; this test runs under it): every
    decision must be one JSON line holding all 300 of each."""
    blocks = 300
    keys = base(h, **{"model.dim": "8", "model.layers": str(blocks), "model.heads": "1",
                      "train.max_steps": "4", "freeze.policy": "auto", "freeze.unit": "step",
                      "freeze.start": "1", "freeze.every": "1", "freeze.alpha": "0.5"})
    cfg = U.write_config(h, "deep.yaml", keys)
    r = h.run(["train", cfg]).expect(0, "%d blocks with the auto freeze policy" % blocks)
    U.no_sanitizer(r)
    with open(os.path.join(h.path("run"), "metrics.jsonl")) as f:
        decisions = [rec for rec in map(json.loads, f) if rec.get("event") == "freeze"]
    check(len(decisions) >= 3, "expected a decision after each of steps 1..4, got %d", len(decisions))
    later = decisions[1:]  # the first decision only records the norms
    check(all(len(d.get("norms", [])) == blocks and len(d.get("rates", [])) == blocks for d in later),
          "decisions do not carry %d norms and rates: %s", blocks,
          [(len(d.get("norms", [])), len(d.get("rates", []))) for d in later])


def test_text_classification_data_errors(h):
    """Problems found when the labelled texts are read (a bad line of a
    training or test file, a TSV header or third column, a test label the
    training file lacks, a bad vocabulary, too few model.classes, a test
    fraction that leaves a split empty) name the config's file, line and
    key, and the data file's line.
    They are read for a BERT classifier (model.kind bert) only: with other
    models text_classification is refused before any file is read (the
    textcls_with_* cases)."""
    table = h.run(["keys"]).expect(0).out
    kinds = next(l for l in table.splitlines() if l.startswith("| `model.kind`")).split("|")[3]
    if "bert" not in kinds:
        return "skipped: model.kind bert does not exist yet"
    f = textcls_files(h)
    cases = [
        ("bad_train_line", {"data.train_file": f["bad_tsv"]}, "data.train_file",
         ["%s:3: no tab" % f["bad_tsv"]]),
        ("bad_train_json", {"data.train_file": f["bad_jsonl"]}, "data.train_file",
         ["%s:2: \"label\" is a real number" % f["bad_jsonl"]]),
        ("bad_test_line", {"data.test_file": f["bad_tsv"]}, "data.test_file",
         ["%s:3: no tab" % f["bad_tsv"]]),
        # a header of three columns, and a third column: refused, not
        # trained as a class 'label' and texts that end in an id
        ("three_column_header", {"data.train_file": f["header3"]}, "data.train_file",
         ["%s:1: a column header ('label<TAB>text')" % f["header3"]]),
        ("third_column_in_test_file", {"data.test_file": f["columns"]}, "data.test_file",
         ["%s:2: 3 tab-separated fields" % f["columns"], "a line is LABEL<TAB>TEXT"]),
        # other names of the columns, and GLUE's SST-2 order (TEXT<TAB>LABEL
        # under a header saying so), which trained every sentence as a class
        ("sst2_header", {"data.train_file": f["sst2"]}, "data.train_file",
         ["%s:1: a column header ('sentence<TAB>label') saying the lines are TEXT<TAB>LABEL"
          % f["sst2"], "swap the columns"]),
        ("unknown_test_label", {"data.test_file": f["stranger"]}, "data.test_file",
         ["%s:3: label 'prophets' is not among the 2 labels" % f["stranger"]]),
        ("bad_vocab", {"data.vocab": f["bad_vocab"]}, "data.vocab",
         ["'%s':2: empty line" % f["bad_vocab"]]),
        ("classes_below_labels", {"data.train_file": f["three"], "model.classes": "2"},
         "model.classes", ["'%s' (data.train_file) has 3 labels" % f["three"],
                           "allowed for this data: 3 to"]),
        ("fraction_leaves_no_test", {"data.test_fraction": "0.01"}, "data.test_fraction",
         ["leaves 0 for testing", f["tsv"]]),
        ("newlines_only_json_text", {"data.train_file": f["newlines_jsonl"]}, "data.train_file",
         ["%s:2: empty text" % f["newlines_jsonl"]]),
        ("train_file_gzipped", {"data.train_file": f["gz_tsv"]}, "data.train_file",
         ["%s: a gzip-compressed file" % f["gz_tsv"], "gunzip"]),
        ("train_file_utf16", {"data.train_file": f["utf16_jsonl"]}, "data.train_file",
         ["%s: a UTF-16 or UTF-32 file" % f["utf16_jsonl"], "read as UTF-8"]),
        ("vocab_line_of_64_mib", {"data.vocab": f["long_vocab"]}, "data.vocab",
         ["'%s':4: token of more than 1048576 bytes (at most 255)" % f["long_vocab"]]),
        ("vocab_with_a_bom", {"data.vocab": f["bom_vocab"]}, "data.vocab",
         ["no [PAD] token", "line 1 starts with a UTF-8 byte order mark"]),
        # [CLS] and [SEP] alone: every example would be no text at all
        ("context_of_two", {"model.context": "2"}, "model.context",
         ["2 leaves no token for the text", "allowed with bert: 3 to 65536"]),
        # BERT's tokens are word pieces: a context too long for the memory
        # blames model.context, as GPT's does (not ViT's model.patch)
        ("context_beyond_stage_memory", {"model.context": "4096", "model.positions": "4096",
                                         "pipeline.memory_gib": "0.01",
                                         "pipeline.microbatches": "1"}, "model.context",
         ["4096: one example's activations take"]),
    ]
    for name, changes, key, needles in cases:
        keys = base(h, "gpt", **{"model.kind": "bert", "data.kind": "text_classification",
                                 "data.train_file": f["tsv"], "data.vocab": f["vocab"],
                                 "model.vocab": "6", **changes})
        text = U.render(keys)
        cfg = U.write(h.path("bad.yaml"), text)
        before = U.snapshot(h.dir)
        r = h.run(["train", cfg]).expect(2, name)
        r.one_error("%s:%d: %s: " % (cfg, U.line_of(text, key), key), *needles)
        check(not os.path.exists(h.path("run")), "%s: run.dir created", name)
        U.same_snapshot(before, U.snapshot(h.dir), "the test directory (%s)" % name)
    # one label: it trains (nothing is wrong with the file), with one note
    with open(f["tsv"]) as src:
        lines = src.read().splitlines(True)
    label = lines[0].split("\t")[0]
    one = U.write(h.path("one-label.tsv"), "".join(l for l in lines if l.split("\t")[0] == label))
    keys = base(h, "gpt", **{"model.kind": "bert", "data.kind": "text_classification",
                             "data.train_file": one, "data.vocab": f["vocab"], "model.vocab": "6"})
    r = h.run(["train", U.write(h.path("one-label.yaml"), U.render(keys))]).expect(0, "one label")
    notes = [l for l in r.err.splitlines() if "has one label" in l]
    check(len(notes) == 1 and one in notes[0] and "'%s'" % label in notes[0],
          "not one note of the single label:\n%s", r.describe())
    # labels a run cannot learn train, with one note each: every label of
    # a file in the other column order occurring once; a label whose
    # examples the data.test_fraction split all took (with 9 of 10
    # examples in the test split, one of the 2 labels has none to train on)
    for name, sets, needles in [
            ("each_label_once", {"data.train_file": f["swapped"], "model.classes": "8",
                                 "train.batch": "2"},
             ["every one of the 6 labels of '%s' (data.train_file) occurs once" % f["swapped"],
              "is it written TEXT<TAB>LABEL?"]),
            ("label_only_in_test",
             {"data.train_file": U.write(h.path("ten.tsv"), "".join(
                 "%s\tthe verse %d\n" % ("law" if i < 5 else "wisdom", i) for i in range(10))),
              "data.test_fraction": "0.9", "train.batch": "1"},
             ["1 of the 2 labels of '%s' (data.train_file)" % h.path("ten.tsv"),
              "has all its examples in the data.test_fraction split"]),
            # the first untrained label in byte order is named: one verse
            # trains, so 3 of the 4 labels have none, and the first of them
            # is hymn, or law where hymn's verse trains (a mutant named the last)
            ("first_untrained_named",
             {"data.train_file": U.write(h.path("nine.tsv"), "".join(
                 "%s\t%s\n" % x for x in (
                     ("law", "the verse"), ("law", "verse"), ("law", "the"), ("psalm", "verse the"),
                     ("wisdom", "the the"), ("hymn", "verse verse"), ("hymn", "the verse the"),
                     ("wisdom", "the verse verse"), ("psalm", "the the the")))),
              "data.test_fraction": "0.89", "train.batch": "1"},
             ["3 of the 4 labels of '%s' (data.train_file) ('" % h.path("nine.tsv"),
              "have all their examples in the data.test_fraction split"]),
            # 4 labels each once (the fewest the note is for), a test file
            # of its own
            ("four_labels_once",
             {"data.train_file": U.write(h.path("four.tsv"), "".join(
                 "the verse %s\t%s\n" % (w, l) for w, l in (("one", "a"), ("two", "b"),
                                                              ("three", "c"), ("four", "d")))),
              "data.test_file": U.write(h.path("four-test.tsv"),
                                        "the verse one\tthe\nthe verse two\tverse\n"),
              "train.batch": "1"},
             ["every one of the 4 labels of '%s' (data.train_file) occurs once" % h.path("four.tsv")])]:
        keys = base(h, "gpt", **{"model.kind": "bert", "data.kind": "text_classification",
                                 "data.vocab": f["vocab"], "model.vocab": "6",
                                 "run.dir": h.path(name), **sets})
        r = h.run(["train", U.write(h.path(name + ".yaml"), U.render(keys))]).expect(0, name)
        notes = [l for l in r.err.splitlines() if "note:" in l and "labels of" in l]
        check(len(notes) == 1 and all(n in notes[0] for n in needles),
              "%s: not the one note %s:\n%s", name, needles, r.describe())
        if name == "first_untrained_named":
            check("('hymn', ...)" in notes[0] or "('law', ...)" in notes[0],
                  "not the first untrained label named: %s", notes[0])
    # how labels became classes: integers in byte order ("10" before "2";
    # negatives: "-1" before "-2") noted naming the first class out of
    # numeric order, none where byte order is numeric order or a label is
    # not an integer as Python writes one ("01", "-0", "+5"); integers of
    # any length compared as integers (20 digits: past 64 bits); a .jsonl
    # file with labels both as integers and as strings noted with the first
    # line of each (1 and "1" one class), none for one of integers alone;
    # `plan` of the same file notes neither
    def labels_run(name, lines, classes, command="train"):
        keys = base(h, "gpt", **{"model.kind": "bert", "data.kind": "text_classification",
                                 "data.vocab": f["vocab"], "model.vocab": "6",
                                 "model.classes": str(classes), "train.batch": "2",
                                 "run.dir": h.path(name + ".run"),
                                 "data.train_file": U.write(h.path(name), "".join(lines))})
        r = h.run([command, U.write(h.path(name + ".yaml"), U.render(keys))]).expect(0, name)
        return [l for l in r.err.splitlines() if "note:" in l and ("by value" in l or "JSON integers" in l)]
    tsv = lambda labels: ["%s\tthe verse %d\n" % (labels[i % len(labels)], i) for i in range(24)]
    jsonl = lambda labels: [json.dumps({"text": "the verse %d" % i, "label": labels[i % len(labels)]})
                            + "\n" for i in range(24)]
    for name, lines, classes, want in [
            ("ints.tsv", tsv(range(12)), 12, "class 2 is label '10', not '2'"),
            ("negative.tsv", tsv([0, -1, -2]), 3, "class 0 is label '-1', not '-2'"),
            ("ints.jsonl", jsonl([3, 1, 20, 100]), 4, "class 1 is label '100', not '3'"),
            ("digits.tsv", tsv(range(10)), 10, None),
            ("leading_zero.tsv", tsv(["01", "2", "10"]), 3, None),
            ("minus_zero.tsv", tsv(["-0", "2", "10"]), 3, None),
            ("plus.tsv", tsv(["+5", "2", "10"]), 3, None),
            ("long.tsv", tsv(["99999999999999999999", "100000000000000000000", "-3", "-25"]), 4,
             "class 2 is label '100000000000000000000', not '99999999999999999999'"),
            ("long_order.tsv", tsv(["-99999999999999999999", "-3", "12345678901234567890"]), 3,
             "class 0 is label '-3', not '-99999999999999999999'"),
            ("mixed.jsonl", jsonl(["1", 0, 1, "0"]), 2, "(first on line 2) and as strings "
                                                        "(first on line 1)"),
            ("strings.jsonl", jsonl(["1", "0"]), 2, None)]:
        notes = labels_run(name, lines, classes)
        if want is None:
            check(not notes, "%s: a note on its labels: %s", name, notes)
        else:
            check(len(notes) == 1 and want in notes[0] and h.path(name) in notes[0],
                  "%s: not the one note with %r: %s", name, want, notes)
    for name, lines in [("ints.tsv", tsv(range(12))), ("mixed.jsonl", jsonl(["1", 0, 1, "0"]))]:
        notes = labels_run("plan-" + name, lines, 12, "plan")
        check(not notes, "plan of %s: a note on its labels: %s", name, notes)
    # a file whose labels all train gets neither note
    check("labels of" not in r_plain_err(h, base, f),
          "a note on the labels of a file whose labels all train")


def r_plain_err(h, base, f):
    """stderr of a run on the 40 lines of 2 labels, split 0.1 (both labels
    keep training examples whatever the split)."""
    keys = base(h, "gpt", **{"model.kind": "bert", "data.kind": "text_classification",
                             "data.train_file": f["tsv"], "data.vocab": f["vocab"],
                             "model.vocab": "6", "run.dir": h.path("plain")})
    return h.run(["train", U.write(h.path("plain.yaml"), U.render(keys))]).expect(0, "plain").err


def test_data_beyond_the_address_space_limit(h):
    """A text or TSV file too big for the memory this process may use (under
    ulimit -v, below the half of the RAM a data file may take) is refused as
    IDX data is: exit 2, naming the key, the file and what is allowed. Both
    exited 1 with "out of memory". The limit is 128 MiB above the smallest
    of a few under which the binary plans the same config on a small file
    (about 256 MiB here: its libraries take most of it); the big files hold
    twice the limit: a gzip'd text of 8 MiB members of zeros, and labelled
    texts whose tokens (4 bytes each, model.context of them) take as much."""
    with open(h.binary, "rb") as f:
        if b"__asan_init" in f.read():
            return "skipped: a sanitizer's runtime reserves more address space than any limit here"
    import zlib

    def limited(mib, cfg, *sets):
        args = [str(a) for a in ["plan", cfg] + [x for s in sets for x in ("--set", s)]]
        p = subprocess.run(["bash", "-c", 'ulimit -v %d && exec "$0" "$@"' % (mib << 10),
                            h.binary] + args, cwd=h.dir, capture_output=True, text=True,
                           errors="replace", timeout=120, env=U.sanitizer_env(),
                           stdin=subprocess.DEVNULL)
        return U.Result([h.binary] + args, p.returncode, p.stdout, p.stderr)

    f = textcls_files(h)
    U.write(h.path("small.txt"), "in the beginning god created the heaven and the earth. " * 64)
    gpt_cfg = U.write(h.path("gpt.yaml"), U.render(base(h, "gpt", **{
        "data.kind": "text", "data.text": "small.txt"})))
    bert_cfg = U.write(h.path("bert.yaml"), U.render(base(h, "gpt", **{
        "model.kind": "bert", "data.kind": "text_classification", "data.train_file": f["tsv"],
        "data.vocab": f["vocab"], "model.vocab": "6", "model.context": "1024",
        "model.positions": "1024"})))
    mib = next((m for m in (256, 384, 512, 768, 1024, 1536)
                if limited(m, gpt_cfg).rc == 0 and limited(m, bert_cfg).rc == 0), None)
    check(mib is not None, "plan fails on small data under every limit up to 1.5 GiB:\n%s",
          limited(1536, gpt_cfg).describe())
    mib += 128  # room for the loaders' first allocations: the data is what does not fit
    with open("/proc/meminfo") as m:
        ram = int(next(l for l in m if l.startswith("MemTotal:")).split()[1]) << 10
    if ram // 2 <= 3 * (mib << 20):
        return "skipped: half the RAM (%d MiB) is not well above twice the limit" % (ram >> 21)
    member = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = member.compress(bytes(8 << 20)) + member.flush()
    with open(h.path("zeros.gz"), "wb") as out:
        out.write(member * (2 * mib // 8))
    lines = 2 * (mib << 20) // (4 * 1024)
    U.write(h.path("big.tsv"), "law\tthe verse\n" * lines)
    for cfg, key, sets, needles in (
            (gpt_cfg, "data.text", ["data.text=zeros.gz"],
             ["zeros.gz: out of memory after reading"]),
            (bert_cfg, "data.train_file", ["data.train_file=big.tsv"],
             ["big.tsv:", ": out of memory after"])):
        r = limited(mib, cfg, *sets).expect(2, "%s under ulimit -v %d MiB" % (key, mib))
        r.one_error("--set: %s: " % key, *needles,
                    "; allowed: data that fits in the memory this process may use")
        check(not os.path.exists(h.path("run")), "%s: run.dir created", key)


def test_tokenizer_config_errors(h):
    """data.lowercase, data.strip_accents and data.split_cjk at auto read the
    tokenizer_config.json beside data.vocab. One that cannot be read (not
    JSON, not an object, a field of another type, a directory, a link to
    nothing, a FIFO, which must not hang the run) is refused naming the file
    and the field, blamed on the key of that field or else the first key
    left at auto (its line when the config sets it, the config's name when
    it is the default), with nothing on disk changed. The file transformers
    writes (an integer beyond 64 bits in it) is read. A key set in the
    config is not looked up: its field may be bad, and with all three set
    the file is not read at all."""
    f = textcls_files(h)
    vdir = h.path("tokvocab")
    os.mkdir(vdir)
    vocab = U.write(os.path.join(vdir, "vocab.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\nverse\n")
    tc = os.path.join(vdir, "tokenizer_config.json")
    cases = [
        ("not_json", '{"do_lower_case": tru', {}, "data.lowercase", [tc, "line 1"]),
        ("not_object", '[true]', {}, "data.lowercase", [tc, "not a JSON object"]),
        ("lowercase_string", '{"do_lower_case": "false"}', {}, "data.lowercase",
         [tc, "do_lower_case: not true or false"]),
        ("strip_number", '{"strip_accents": 0}', {"data.lowercase": "true"},
         "data.strip_accents", [tc, "strip_accents: not true, false or null"]),
        ("cjk_null", '{"tokenize_chinese_chars": null}',
         {"data.lowercase": "false", "data.strip_accents": "false", "data.split_cjk": "auto"},
         "data.split_cjk", [tc, "tokenize_chinese_chars: not true or false"]),
        ("a_directory", None, {}, "data.lowercase", [tc, "not a regular file"]),
        # a cut download of a model: the file meant to be there is not
        ("a_link_to_nothing", "dangling", {}, "data.lowercase", [tc, "a link to nothing"]),
        # the key whose field is bad is blamed, not the first at auto
        ("blames_its_key", '{"do_lower_case": true, "tokenize_chinese_chars": "no"}', {},
         "data.split_cjk", [tc, "tokenize_chinese_chars: not true or false"]),
        ("a_fifo", "fifo", {}, "data.lowercase", [tc, "not a regular file"]),
    ]
    for name, content, changes, key, needles in cases:
        if os.path.isdir(tc):
            os.rmdir(tc)
        elif os.path.lexists(tc):
            os.remove(tc)
        if content is None:
            os.mkdir(tc)
        elif content == "fifo":
            os.mkfifo(tc)
        elif content == "dangling":
            os.symlink(os.path.join(vdir, "no-such-file"), tc)
        else:
            U.write(tc, content)
        keys = base(h, "gpt", **{"model.kind": "bert", "data.kind": "text_classification",
                                 "data.train_file": f["tsv"], "data.vocab": vocab,
                                 "model.vocab": "6", **changes})
        text = U.render(keys)
        cfg = U.write(h.path("bad.yaml"), text)
        before = U.snapshot(h.dir)
        r = h.run(["train", cfg], timeout=60).expect(2, name)
        where = ("%s:%d: " % (cfg, U.line_of(text, key))) if key in changes else \
            "%s: (default) " % cfg
        r.one_error(where + key + ": ", *needles)
        check(not os.path.exists(h.path("run")), "%s: run.dir created", name)
        U.same_snapshot(before, U.snapshot(h.dir), "the test directory (%s)" % name)
    # what transformers' save_pretrained writes: an integer beyond 64 bits
    # (model_max_length when none is known) is no error, nor a \u0000 in a
    # field pipetrain does not read (Python's json writes it)
    os.remove(tc)
    U.write(tc, '{"do_lower_case": false, "model_max_length": 1000000000000000019884624838656, '
                '"chat_template": "a\\u0000b"}')
    keys = base(h, "gpt", **{"model.kind": "bert", "data.kind": "text_classification",
                             "data.train_file": f["tsv"], "data.vocab": vocab, "model.vocab": "6",
                             "run.dir": h.path("saved-run"), "train.checkpoint_every": "2"})
    h.run(["train", U.write(h.path("saved.yaml"), U.render(keys))]).expect(0, "a transformers file")
    ck = sorted(os.listdir(h.path("saved-run/checkpoints")))[-1]
    _, _, recs = U.read_recfile(os.path.join(h.path("saved-run/checkpoints"), ck, "manifest"))
    config = json.loads(dict(recs)["manifest"])["config"]
    check("lowercase: false" in config, "the run did not take do_lower_case false:\n%s", config)
    # a field of a key set in the config is not read, bad or not
    U.write(tc, '{"do_lower_case": 1}')
    keys = base(h, "gpt", **{"model.kind": "bert", "data.kind": "text_classification",
                             "data.train_file": f["tsv"], "data.vocab": vocab, "model.vocab": "6",
                             "data.lowercase": "false", "run.dir": h.path("unread-run")})
    h.run(["train", U.write(h.path("unread.yaml"), U.render(keys))]).expect(0, "a field not read")
    # every key set: the file is not read
    os.remove(tc)
    U.write(tc, "not json at all")
    keys = base(h, "gpt", **{"model.kind": "bert", "data.kind": "text_classification",
                             "data.train_file": f["tsv"], "data.vocab": vocab, "model.vocab": "6",
                             "data.lowercase": "true", "data.strip_accents": "true",
                             "data.split_cjk": "true"})
    h.run(["train", U.write(h.path("set.yaml"), U.render(keys))]).expect(0, "all three set")


def write_st(path, tensors):
    """float32 safetensors from {name: (shape, [values])}"""
    import struct
    from array import array
    header, blobs, off = {}, [], 0
    for name, (shape, values) in tensors.items():
        raw = array("f", values).tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return path


def hf_bert(h, name, cfg_changes=None, drop=(), add=None, reshape=None, nan=None, raw_config=None,
            rename=None):
    """A tiny Hugging Face BERT directory (d 8, 1 layer, 2 heads, vocab 6,
    16 positions) with the given defects; rename(name) gives each tensor's
    name in the file."""
    d, hid, V, P = 8, 16, 6, 16
    cfg = {"model_type": "bert", "hidden_size": d, "num_hidden_layers": 1,
           "num_attention_heads": 2, "intermediate_size": hid, "vocab_size": V,
           "max_position_embeddings": P, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
           "pad_token_id": 0, "hidden_act": "gelu"}
    cfg.update(cfg_changes or {})
    t = {"embeddings.word_embeddings.weight": (V, d), "embeddings.position_embeddings.weight": (P, d),
         "embeddings.token_type_embeddings.weight": (2, d), "embeddings.LayerNorm.weight": (d,),
         "embeddings.LayerNorm.bias": (d,), "pooler.dense.weight": (d, d), "pooler.dense.bias": (d,)}
    L = "encoder.layer.0."
    for part in ("query", "key", "value"):
        t[L + "attention.self.%s.weight" % part] = (d, d)
        t[L + "attention.self.%s.bias" % part] = (d,)
    t.update({L + "attention.output.dense.weight": (d, d), L + "attention.output.dense.bias": (d,),
              L + "attention.output.LayerNorm.weight": (d,), L + "attention.output.LayerNorm.bias": (d,),
              L + "intermediate.dense.weight": (hid, d), L + "intermediate.dense.bias": (hid,),
              L + "output.dense.weight": (d, hid), L + "output.dense.bias": (d,),
              L + "output.LayerNorm.weight": (d,), L + "output.LayerNorm.bias": (d,)})
    for k in drop:
        del t[k]
    t.update(add or {})
    t.update(reshape or {})
    tensors = {}
    for k, shape in t.items():
        n = 1
        for x in shape:
            n *= x
        # values of its own per tensor (seeded by its name, before any
        # rename), so that tensors of one shape swapped on loading give
        # other logits
        rnd = random.Random(zlib.crc32(k.encode()))
        values = [0.01 * rnd.randint(-6, 6) for _ in range(n)]
        if k == nan:
            values[n // 2] = float("nan")
        tensors[rename(k) if rename else k] = (shape, values)
    root = h.path(name)
    os.makedirs(root, exist_ok=True)
    U.write(os.path.join(root, "config.json"), raw_config if raw_config is not None else json.dumps(cfg))
    write_st(os.path.join(root, "model.safetensors"), tensors)
    return root


def hf_bert_keys(f):
    """the model.* and data.* keys of hf_bert's model on textcls_files' data"""
    return {"model.kind": "bert", "model.dim": "8", "model.layers": "1", "model.heads": "2",
            "model.mlp_hidden": "16", "model.vocab": "6", "model.positions": "16",
            "model.context": "8", "model.classes": "2", "data.kind": "text_classification",
            "data.train_file": f["tsv"], "data.vocab": f["vocab"]}


def test_weights_past_memory_with_init_from(h):
    """Weights past pipeline.memory_gib on one stage: with model.init_from the
    model's sizes are its weights', so the refusal names no model.dim or
    model.layers (the load would refuse them) and says whose sizes they
    are; the same model from the seed names the widest model.dim that fits,
    which then plans."""
    f = textcls_files(h)
    keys = dict(hf_bert_keys(f), **{"pipeline.memory_gib": "0.000016", "pipeline.microbatches": "1",
                                    "train.batch": "2"})
    pre = U.render(base(h, "gpt", **dict(keys, **{"model.init_from": hf_bert(h, "good")})))
    r = h.run(["plan", U.write(h.path("pre.yaml"), pre)]).expect(2, "pretrained weights past the limit")
    line = r.one_error("model.dim", "parameters take", "(the model's sizes are model.init_from's)")
    check("model.dim = " not in line and "model.layers = " not in line, "a size named: %s", line)
    seeded = U.render(base(h, "gpt", **keys))
    r = h.run(["plan", U.write(h.path("seeded.yaml"), seeded)]).expect(2, "seeded weights past the limit")
    line = r.one_error("model.dim", "parameters take", "allowed: model.dim = ")
    dim = re.search(r"allowed: model\.dim = (\d+)", line).group(1)
    h.run(["plan", U.write(h.path("narrower.yaml"), U.render(base(h, "gpt", **dict(keys, **{
        "model.dim": dim}))))]).expect(0, "model.dim = %s as the refusal named" % dim)


def test_bert_init_from_refused(h):
    """A Hugging Face BERT for model.init_from: a good one trains; a config.json
    that disagrees with a model.* key blames that key; a missing, extra,
    misshapen or NaN tensor, or a config.json that is not BERT's, blames
    model.init_from and names the tensor or field; a bert model with
    another data kind, or model.vocab unlike data.vocab's size, is refused.
    Nothing is created on a refusal."""
    f = textcls_files(h)
    bert = hf_bert_keys(f)
    good = hf_bert(h, "good")
    text = U.render(base(h, "gpt", **dict(bert, **{"model.init_from": good})))
    h.run(["train", U.write(h.path("good.yaml"), text)]).expect(0, "a good Hugging Face BERT")
    shutil.rmtree(h.path("run"))
    # an embedding padded past the vocabulary (rows no token reaches) trains
    padded = U.render(base(h, "gpt", **dict(bert, **{"model.init_from": hf_bert(h, "v8", {"vocab_size": 8},
                                                                      reshape={"embeddings.word_embeddings.weight": (8, 8)}),
                                                    "model.vocab": "8"})))
    h.run(["train", U.write(h.path("padded.yaml"), padded)]).expect(0, "an embedding of 8 rows, 6 tokens")
    shutil.rmtree(h.path("run"))
    # pad_token_id null (transformers: no padding row) or absent (transformers'
    # default 0) train as 0 does; so does a file without model_type (which
    # BertModel.from_pretrained reads as BERT's), and "gelu_python" (the
    # erf GELU, as "gelu")
    for name, change, drop in (("pad-null", {"pad_token_id": None}, None),
                               ("pad-absent", None, "pad_token_id"),
                               ("no-model-type", None, "model_type"),
                               ("gelu-python", {"hidden_act": "gelu_python"}, None),
                               # \u0000 in a field pipetrain does not read is
                               # valid JSON (Python writes it): read
                               ("nul-unread", {"note": "a\u0000b"}, None),
                               # in a key too (transformers' label2id mirrors
                               # id2label), which jansson cannot hold as it is
                               ("nul-key-unread", {"label2id": {"a\u0000b": 0, "c": 1}}, None),
                               # an integer past 64 bits in a field it does
                               # not read (Python reads it): read
                               ("bigint-unread", {"note": 10 ** 29}, None),
                               # whole numbers written as reals (Python's
                               # int(384.0) is 384): read as integers
                               ("sizes-as-reals", {"hidden_size": 8.0, "pad_token_id": 0.0}, None),
                               # what Python reads as false (`if config.is_decoder:`)
                               # builds the encoder in transformers: read
                               ("encoder-falsy", {"is_decoder": None, "add_cross_attention": 0,
                                                  "note": ""}, None),
                               ("encoder-falsy-text", {"is_decoder": "", "add_cross_attention": []},
                                None)):
        init = hf_bert(h, name, change)
        if drop:
            with open(os.path.join(init, "config.json")) as c:
                cfg = json.load(c)
            del cfg[drop]
            U.write(os.path.join(init, "config.json"), json.dumps(cfg))
        text = U.render(base(h, "gpt", **dict(bert, **{"model.init_from": init})))
        h.run(["train", U.write(h.path(name + ".yaml"), text)]).expect(0, name)
        shutil.rmtree(h.path("run"))
    # a key given twice: its last value, as transformers (Python's json)
    # reads it: trains where the last fits the model, is refused where not
    for name, first, last, rc in (("twice-last-fits", 99, 8, 0), ("twice-last-differs", 8, 99, 2)):
        raw = json.dumps({"hidden_size": first})[:-1] + ", " + json.dumps(dict(
            {"model_type": "bert", "num_hidden_layers": 1, "num_attention_heads": 2,
             "intermediate_size": 16, "vocab_size": 6, "max_position_embeddings": 16},
            hidden_size=last))[1:]
        init = hf_bert(h, name, raw_config=raw)
        text = U.render(base(h, "gpt", **dict(bert, **{"model.init_from": init})))
        r = h.run(["train", U.write(h.path(name + ".yaml"), text)]).expect(rc, name)
        if rc:
            r.one_error("hidden_size", "99", strict=False)
        else:
            shutil.rmtree(h.path("run"))
    no_weights = h.path("no-weights")
    os.makedirs(no_weights)
    shutil.copy(os.path.join(good, "config.json"), no_weights)
    sharded = h.path("sharded")  # save_pretrained's max_shard_size: an index and its shards
    os.makedirs(sharded)
    shutil.copy(os.path.join(good, "config.json"), sharded)
    U.write(os.path.join(sharded, "model.safetensors.index.json"), '{"metadata": {}, "weight_map": {}}\n')
    dangling = h.path("dangling")
    os.makedirs(dangling)
    shutil.copy(os.path.join(good, "config.json"), dangling)
    os.symlink(h.path("nowhere.safetensors"), os.path.join(dangling, "model.safetensors"))
    # a config.json that is there but is no file: refused, not passed over
    # (which would leave its dropout unread)
    config_dir, config_link = h.path("config-dir"), h.path("config-link")
    for d in (config_dir, config_link):
        os.makedirs(d)
        shutil.copy(os.path.join(good, "model.safetensors"), d)
    os.makedirs(os.path.join(config_dir, "config.json"))
    os.symlink(h.path("nowhere.json"), os.path.join(config_link, "config.json"))
    L = "encoder.layer.0."
    cases = [
        ("config_disagrees", hf_bert(h, "wide", {"hidden_size": 16}), {}, "model.dim",
         ["hidden_size 16"]),
        # each size of config.json against its model.* key (the tensors
        # unchanged: the sizes are compared first)
        ("config_layers", hf_bert(h, "layers2", {"num_hidden_layers": 2}), {}, "model.layers",
         ["num_hidden_layers 2"]),
        ("config_heads", hf_bert(h, "heads4", {"num_attention_heads": 4}), {}, "model.heads",
         ["num_attention_heads 4"]),
        ("config_mlp", hf_bert(h, "mlp32", {"intermediate_size": 32}), {}, "model.mlp_hidden",
         ["intermediate_size 32"]),
        ("config_vocab", hf_bert(h, "vocab7", {"vocab_size": 7}), {}, "model.vocab",
         ["vocab_size 7"]),
        ("config_positions", hf_bert(h, "pos32", {"max_position_embeddings": 32}), {},
         "model.positions", ["max_position_embeddings 32"]),
        ("config_type_vocab", hf_bert(h, "types3", {"type_vocab_size": 3}), {"model.type_vocab": "2"},
         "model.type_vocab",
         ["type_vocab_size 3"]),
        ("config_eps", hf_bert(h, "eps", {"layer_norm_eps": 1e-5}), {"model.ln_eps": "1e-12"},
         "model.ln_eps",
         ["layer_norm_eps 1e-05"]),
        ("config_eps_below_float", hf_bert(h, "eps45", {"layer_norm_eps": 1e-45}), {},
         "model.init_from", ["layer_norm_eps: 1e-45 is below what float32", "1e-38 to 1"]),
        ("config_relu", hf_bert(h, "relu", {"hidden_act": "relu"}), {}, "model.init_from",
         ["hidden_act", "relu"]),
        ("config_pad", hf_bert(h, "pad1", {"pad_token_id": 1}), {}, "model.init_from",
         ["pad_token_id is 1", "pads with id 0"]),
        ("config_pad_text", hf_bert(h, "padtext", {"pad_token_id": "0"}), {}, "model.init_from",
         ["pad_token_id: not an integer"]),
        # dropout probabilities that are not one: refused whether auto takes them or not
        ("config_dropout_of_one", hf_bert(h, "drop1", {"hidden_dropout_prob": 1.0}), {},
         "model.init_from", ["hidden_dropout_prob", "must be a number in [0, 1)"]),
        ("config_dropout_negative", hf_bert(h, "dropneg", {"attention_probs_dropout_prob": -0.1}),
         {"model.attention_dropout": "0.1"}, "model.init_from",
         ["attention_probs_dropout_prob", "must be a number in [0, 1)"]),
        ("config_dropout_text", hf_bert(h, "droptext", {"hidden_dropout_prob": "0.1"}),
         {"model.dropout": "0", "model.attention_dropout": "0"}, "model.init_from",
         ["hidden_dropout_prob", "must be a number"]),
        ("config_not_json", hf_bert(h, "notjson", raw_config="{not json"), {}, "model.init_from",
         ["config.json"]),
        ("config_decoder", hf_bert(h, "decoder", {"is_decoder": True}), {}, "model.init_from",
         ["is_decoder: true", "the encoder"]),
        ("config_cross", hf_bert(h, "cross", {"add_cross_attention": True}), {}, "model.init_from",
         ["add_cross_attention: true"]),
        # what Python reads as true makes the decoder: refused showing the value
        ("config_decoder_one", hf_bert(h, "decoder1", {"is_decoder": 1}), {}, "model.init_from",
         ["is_decoder: 1;", "the encoder"]),
        ("config_cross_text", hf_bert(h, "cross-text", {"add_cross_attention": "no"}), {},
         "model.init_from", ['add_cross_attention: "no";']),
        ("config_json_directory", config_dir, {}, "model.init_from",
         ["config.json", "is not a regular file (a directory)"]),
        ("config_json_link_dangling", config_link, {}, "model.init_from",
         ["config.json", "No such file"]),
        ("config_not_bert", hf_bert(h, "gpt2", {"model_type": "gpt2"}), {}, "model.init_from",
         ["model_type", "gpt2"]),
        # a field it reads holding \u0000 is not that text cut short
        ("config_type_nul", hf_bert(h, "type-nul", {"model_type": "bert\u0000x"}), {},
         "model.init_from", ["model_type: a string holding a NUL character"]),
        ("config_act_nul", hf_bert(h, "act-nul", {"hidden_act": "gelu\u0000"}), {},
         "model.init_from", ["hidden_act: a string holding a NUL character"]),
        # (labels are read with a classifier, as a pipetrain export has)
        ("config_label_nul", hf_bert(h, "label-nul", {"id2label": {"0": "law\u0000x",
                                                                 "1": "wisdom"}},
                                     add={"head.fc.weight": (2, 8), "head.fc.bias": (2,)}), {},
         "model.init_from", ["id2label: '0' names a string holding a NUL character"]),
        ("tensor_missing", hf_bert(h, "missing", drop=[L + "output.dense.weight"]), {},
         "model.init_from", ["has no tensor", L + "output.dense.weight"]),
        ("extra_layer", hf_bert(h, "extra", add={"encoder.layer.1.output.dense.bias": (8,)}), {},
         "model.init_from", ["encoder.layer.1.output.dense.bias"]),
        ("misshapen", hf_bert(h, "shape", reshape={L + "attention.self.query.weight": (8, 4)}), {},
         "model.init_from", [L + "attention.self.query.weight", "has shape [8, 4]"]),
        ("nan", hf_bert(h, "nan", nan="embeddings.word_embeddings.weight"), {}, "model.init_from",
         ["embeddings.word_embeddings.weight", "NaN"]),
        # (its config.json agrees with model.vocab: only data.vocab's size differs)
        ("vocab_size", hf_bert(h, "v5", {"vocab_size": 5},
                                reshape={"embeddings.word_embeddings.weight": (5, 8)}),
         {"model.vocab": "5"}, "model.vocab",
         ["has 6 tokens", "allowed: 6 or more"]),
        ("no_weights_file", no_weights, {}, "model.init_from",
         ["model.safetensors", "No such file", "holds its weights as model.safetensors"]),
        ("sharded_weights", sharded, {}, "model.init_from",
         ["model.safetensors", "sharded weights", "max_shard_size"]),
        ("weights_link_dangling", dangling, {}, "model.init_from",
         ["model.safetensors", "No such file"]),
        ("both_spellings", hf_bert(h, "both", add={"embeddings.LayerNorm.gamma": (8,)}), {},
         "model.init_from", ["both", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma"]),
        ("kjv_data", good, {"data.kind": "kjv"}, "data.kind", ["allowed with bert"]),
        # a config.json that agrees with the model.* keys and not with the
        # tensors: the tensors' shapes are read before the model is sized
        # (it used to be built and profiled first: gigabytes and a minute
        # for a large one, or here the memory's refusal)
        ("shapes_past_config", hf_bert(h, "mlp-big", {"intermediate_size": 200000}),
         {"model.mlp_hidden": "200000", "pipeline.memory_gib": "0.01"}, "model.init_from",
         [L + "intermediate.dense.weight", "has shape [16, 8]", "the model needs [200000, 8]"]),
        # checked before the model is sized: not the memory's refusal (nor,
        # without a limit, gigabytes allocated first)
        ("config_disagrees_big", good, {"model.dim": "4096", "model.heads": "2",
                                        "model.mlp_hidden": "16384", "pipeline.memory_gib": "0.01"},
         "model.dim", ["hidden_size 8"]),
    ]
    for name, init, changes, key, needles in cases:
        keys = base(h, "gpt", **dict(bert, **{"model.init_from": init}, **changes))
        text = U.render(keys)
        cfg = U.write(h.path("bad.yaml"), text)
        before = U.snapshot(h.dir)
        r = h.run(["train", cfg]).expect(2, name)
        r.one_error("%s:%d: %s: " % (cfg, U.line_of(text, key), key), *needles)
        check(not os.path.exists(h.path("run")), "%s: run.dir created", name)
        U.same_snapshot(before, U.snapshot(h.dir), "the test directory (%s)" % name)


def test_test_file_is_the_training_file_noted(h):
    """data.test_file naming the training file (text classification), or
    data.test_images the training images (IDX), by its own name or another
    (a link), or a copy of it (the same examples: the data's digests), trains
    with one note that the test figures are on examples it trains on;
    another test file gives none, and so does eval (which evaluates the file
    it is given)."""
    f = textcls_files(h)
    bert = hf_bert_keys(f)
    link = h.path("train-link.tsv")
    os.symlink(f["tsv"], link)
    other = U.write(h.path("other.tsv"), "law\tthe verse 1\nwisdom\tthe verse 2\n")
    copy = shutil.copy(f["tsv"], h.path("copy.tsv"))
    d = {"ti": idx_file(h.path("train-images"), 40, 8),
         "tl": idx_file(h.path("train-labels"), 40, labels=[i % 4 for i in range(40)]),
         "vi": idx_file(h.path("test-images"), 12, 8),
         "vl": idx_file(h.path("test-labels"), 12, labels=[i % 4 for i in range(12)])}
    idx = {"data.kind": "idx", "data.train_images": d["ti"], "data.train_labels": d["tl"],
           "data.test_labels": d["tl"], "data.image_size": None}
    runs = [("textcls_same", "gpt", dict(bert, **{"data.test_file": f["tsv"]}), "data.test_file"),
            ("textcls_link", "gpt", dict(bert, **{"data.test_file": link}), "data.test_file"),
            ("textcls_other", "gpt", dict(bert, **{"data.test_file": other}), None),
            ("textcls_copy", "gpt", dict(bert, **{"data.test_file": copy}), "data.test_file"),
            ("textcls_fraction", "gpt", bert, None),
            ("idx_same", "vit", dict(idx, **{"data.test_images": d["ti"]}), "data.test_images"),
            ("idx_copy", "vit", dict(idx, **{"data.test_images": shutil.copy(d["ti"], h.path("ti-copy"))}),
             "data.test_images"),
            ("idx_other", "vit", dict(idx, **{"data.test_images": d["vi"],
                                             "data.test_labels": d["vl"]}), None)]
    for name, kind, keys, key in runs:
        cfg = U.write(h.path(name + ".yaml"), U.render(dict(base(h, kind, **keys),
                                                            **{"run.dir": h.path("run-" + name)})))
        r = h.run(["train", cfg]).expect(0, name)
        notes = [l for l in r.err.splitlines() if "test figures are on examples it trains on" in l]
        said = "holds the training file's examples" if "copy" in name else "is the training file"
        if key:
            check(len(notes) == 1 and notes[0].startswith("pipetrain: note: %s '" % key) and
                  said in notes[0], "%s: not one note naming %s:\n%s", name, key, r.err)
        else:
            check(not notes, "%s: a note:\n%s", name, r.err)
        r = h.run(["eval", cfg]).expect(0, name + " eval")
        check("trains on" not in r.err, "%s: eval notes it:\n%s", name, r.err)


def test_eval_outputs_spare_init_from(h):
    """eval's --logits, --hidden and --report never land on a file
    model.init_from reads: its config.json, vocab.txt and
    tokenizer_config.json beside its weights (as a directory or as the
    .safetensors file), nor create one of them or a config.json beside
    weights that have none (the next run would read it), nor a
    tokenizer_config.json beside data.vocab. Refused, exit 2, nothing
    touched."""
    f = textcls_files(h)
    bert = hf_bert_keys(f)
    good = hf_bert(h, "good")
    shutil.copy(f["vocab"], os.path.join(good, "vocab.txt"))
    bare = h.path("bare")
    os.makedirs(bare)
    shutil.copy(os.path.join(good, "model.safetensors"), bare)
    weights = os.path.join(good, "model.safetensors")
    tok = h.path("tok")
    shutil.copytree(good, tok)
    tok_config = U.write(os.path.join(tok, "tokenizer_config.json"), '{"do_lower_case": true}')
    cases = [
        ("vocab_of_dir", good, "--hidden", os.path.join(good, "vocab.txt"), "an input"),
        ("vocab_of_file", weights, "--logits", os.path.join(good, "vocab.txt"), "an input"),
        ("config_of_file", weights, "--logits", os.path.join(good, "config.json"), "an input"),
        ("config_of_dir", good, "--hidden", os.path.join(good, "config.json"), "an input"),
        ("config_not_there", os.path.join(bare, "model.safetensors"), "--logits",
         os.path.join(bare, "config.json"), "reads when it is there"),
        ("vocab_not_there", bare, "--hidden", os.path.join(bare, "vocab.txt"), "reads when it is there"),
        # data.vocab's tokenizer_config.json: its data.lowercase (auto) reads it
        ("tokenizer_config_not_there", good, "--logits",
         os.path.join(os.path.dirname(f["vocab"]), "tokenizer_config.json"),
         "reads when it is there"),
        # model.init_from's tokenizer_config.json, which the note on how
        # the model was trained to tokenize reads (it used to be replaced)
        ("init_tokenizer_config_of_dir", tok, "--report", tok_config, "an input"),
        ("init_tokenizer_config_of_file", os.path.join(tok, "model.safetensors"), "--logits",
         tok_config, "an input"),
        ("init_tokenizer_config_not_there", bare, "--report",
         os.path.join(bare, "tokenizer_config.json"), "reads when it is there"),
        ("init_tokenizer_config_not_there_hidden", good, "--hidden",
         os.path.join(good, "tokenizer_config.json"), "reads when it is there"),
    ]
    for name, init, opt, out, why in cases:
        cfg = U.write(h.path("%s.yaml" % name),
                      U.render(base(h, "gpt", **dict(bert, **{"model.init_from": init}))))
        before = U.snapshot(h.dir)
        r = h.run(["eval", cfg, "--init", opt, out]).expect(2, name)
        r.one_error(opt, "'%s'" % out, why, strict=False)
        U.same_snapshot(before, U.snapshot(h.dir), "the test directory (%s)" % name)
    cfg = U.write(h.path("fine.yaml"), U.render(base(h, "gpt", **dict(bert, **{"model.init_from": good}))))
    h.run(["eval", cfg, "--init", "--logits", h.path("logits.st")]).expect(0, "--logits elsewhere")


def test_checkpoint_does_not_read_init_from_weights(h):
    """A checkpoint's weights replace model.init_from's, so eval of a
    checkpoint and a resume never read them: once the run has a checkpoint,
    init_from's weights damaged (a NaN, then the file cut short) refuse
    neither, and both give what they gave before. A fresh run from
    the damaged weights is still refused. Both used to load and check the
    weights first, and refused the checkpoint over a file it does not use."""
    f = textcls_files(h)
    bert = hf_bert_keys(f)
    init = hf_bert(h, "init")
    keys = dict(bert, **{"model.init_from": init, "train.max_steps": "3", "train.epochs": "5"})
    cfg = U.write(h.path("init.yaml"), U.render(base(h, "gpt", **keys)))
    h.run(["train", cfg]).expect(0, "training from init_from")
    run_dir = h.path("run")
    before = h.run(["eval", cfg, "--logits", h.path("before.st")]).expect(0, "eval, init intact")
    with open(h.path("before.st"), "rb") as fh:
        want = fh.read()
    straight = h.path("straight")
    shutil.copytree(run_dir, straight)
    h.run(["train", cfg, "--set", "run.dir=" + straight, "--set", "train.resume=auto",
           "--set", "train.max_steps=5"]).expect(0, "the resume with init_from intact")
    weights = os.path.join(init, "model.safetensors")
    with open(weights, "rb") as fh:
        good = fh.read()
    n = int.from_bytes(good[:8], "little")
    start = json.loads(good[8:8 + n])["embeddings.word_embeddings.weight"]["data_offsets"][0]
    nan = bytearray(good)
    nan[8 + n + start:8 + n + start + 4] = b"\x00\x00\xc0\x7f"
    for damage, data in (("a NaN", bytes(nan)), ("cut short", good[:-1])):
        with open(weights, "wb") as fh:
            fh.write(data)
        out = h.path("logits-%s.st" % damage.replace(" ", "-"))
        r = h.run(["eval", cfg, "--logits", out]).expect(0, "eval, init_from's weights " + damage)
        with open(out, "rb") as fh:
            check(fh.read() == want, "eval's logits with init_from's weights %s differ", damage)
        check(r.out == before.out, "eval with init_from's weights %s said\n%s\nnot\n%s", damage,
              r.out, before.out)
        fresh = h.run(["train", cfg, "--set", "run.dir=" + h.path("fresh")])
        fresh.expect(2, "a fresh run from weights " + damage)
        check("model.init_from" in fresh.err, "the fresh run's refusal names no key:\n%s",
              fresh.describe())
        resumed = h.path("resumed-" + damage.replace(" ", "-"))
        shutil.copytree(run_dir, resumed)
        h.run(["train", cfg, "--set", "run.dir=" + resumed, "--set", "train.resume=auto",
               "--set", "train.max_steps=5"]).expect(0, "a resume, init_from's weights " + damage)
        a, b = U.unit_files(U.ckpt(straight, 5)), U.unit_files(U.ckpt(resumed, 5))
        check(len(a) == len(b) and all([r for r in U.unit_records(x) if r[0] != "checkpoint"] ==
                                       [r for r in U.unit_records(y) if r[0] != "checkpoint"]
                                       for x, y in zip(a, b)),
              "the resume with init_from's weights %s ends otherwise than with them intact", damage)


def changed_while_settling(h, cfg, run_dir, change, *sets):
    """`train CFG --set train.resume=auto` stopped by the test hook
    (SIGSTOP) once it has planned its start from run.dir and locked it;
    change() then alters run.dir; the job, continued, goes on to choose its
    checkpoint under the lock. Returns (the finished process, its stderr)."""
    env = dict(U.sanitizer_env(), PIPETRAIN_TEST_FAULT="0:0:sigstop:settling")
    args = [h.binary, "train", cfg, "--set", "train.resume=auto", "--set", "run.dir=" + run_dir]
    for s in sets:
        args += ["--set", s]
    p = subprocess.Popen(args, cwd=h.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, errors="replace", stdin=subprocess.DEVNULL)
    # the lock is taken once the start is planned, before the hold: this
    # job's own lock line, not an earlier run's
    deadline = time.time() + 60
    lock = os.path.join(run_dir, "lock")
    taken, state = False, None
    while not (taken and state == "T") and time.time() < deadline and p.poll() is None:
        if os.path.exists(lock):
            with open(lock) as fh:
                taken = fh.read().startswith("pid %d on " % p.pid)
        with open("/proc/%d/stat" % p.pid) as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        time.sleep(0.01)
    check(taken and state == "T", "the job never took run.dir's lock and stopped (exit %s)",
          p.poll())
    change()
    os.kill(p.pid, signal.SIGCONT)
    _, err = p.communicate(timeout=120)
    return p, err


def test_planned_start_that_changed_under_the_lock(h):
    """The first layout is planned from run.dir before the job locks it:
    for the frozen blocks of the checkpoint it would resume, or on a fresh
    start for a decision before the first step (freeze.start 0). When run.dir
    changes before the lock settles the start:
    - the checkpoints (4 frozen blocks) it planned for are gone: the job
      started fresh with all 4 blocks frozen (they never trained); it is
      refused, exit 2, naming run.dir, and trains nothing;
    - a fresh start planned with freeze.start 0 finds a checkpoint: it took
      its opening decision for the first decision after the resume (every
      later decision one late); it resumes bit for bit as a plain resume."""
    keys = base(h, "vit", **{"model.layers": "4", "train.epochs": "4", "train.max_steps": "16",
                             "freeze.policy": "schedule", "freeze.alpha": "0.9",
                             "freeze.unit": "step", "freeze.start": "4", "freeze.every": "4",
                             "train.checkpoint_every": "4"})
    cfg = U.write_config(h, "frozen.yaml", keys)
    h.run(["train", cfg, "--set", "run.dir=" + h.path("straight")]).expect(0, "the straight run")
    gone = h.path("gone")
    shutil.copytree(h.path("straight"), gone)
    def remove_checkpoints():
        for name in U.checkpoints(gone):
            shutil.rmtree(os.path.join(gone, "checkpoints", name))
    p, err = changed_while_settling(h, cfg, gone, remove_checkpoints)
    check(p.returncode == 2 and "changed while this job started" in err and gone in err,
          "a planned resume of frozen blocks gone under the lock: exit %d\n%s", p.returncode,
          U.tail(err, 1500))
    check(not os.path.exists(os.path.join(gone, "checkpoints", "step_%010d" % 1)),
          "the refused job trained")
    # freeze.start 0 planned fresh, a checkpoint of step 8 there under the
    # lock; alpha 0.3: decisions at steps 0, 4, 8, 12, 16 freeze 2, 3, 3, 4,
    # 4 blocks, so a decision one late freezes the 4th block 4 steps late
    opening = dict(keys, **{"freeze.start": "0", "freeze.alpha": "0.3"})
    cfg0 = U.write_config(h, "opening.yaml", opening)
    h.run(["train", cfg0, "--set", "run.dir=" + h.path("straight0")]).expect(0, "the straight run")
    came = h.path("came")
    os.makedirs(os.path.join(came, "checkpoints"))
    p, err = changed_while_settling(h, cfg0, came, lambda: shutil.copytree(
        U.ckpt(h.path("straight0"), 8), os.path.join(came, "checkpoints", "step_%010d" % 8)))
    check(p.returncode == 0 and "resumed at step 8" in err,
          "a fresh start that found a checkpoint under the lock: exit %d\n%s", p.returncode,
          U.tail(err, 1500))
    a, b = U.unit_files(U.ckpt(h.path("straight0"), 16)), U.unit_files(U.ckpt(came, 16))
    check(len(a) == len(b) and all([r for r in U.unit_records(x) if r[0] != "checkpoint"] ==
                                   [r for r in U.unit_records(y) if r[0] != "checkpoint"]
                                   for x, y in zip(a, b)),
          "the resume of a checkpoint found under the lock ends otherwise than the straight run")


def test_init_from_loaded_when_the_planned_resume_goes(h):
    """train.resume=auto plans its resume from the newest checkpoint before
    run.dir is locked, and so leaves model.init_from's weights unread; the
    checkpoint is chosen under the lock. When the checkpoints are gone by
    then (removed while the test hook holds the start there), the run starts
    fresh from init_from's weights, not from the seed's: the same bits as a
    fresh run from them."""
    f = textcls_files(h)
    init = hf_bert(h, "init")
    keys = dict(hf_bert_keys(f), **{"model.init_from": init, "train.max_steps": "3",
                                    "train.epochs": "5"})
    cfg = U.write(h.path("init.yaml"), U.render(base(h, "gpt", **keys)))
    h.run(["train", cfg, "--set", "run.dir=" + h.path("fresh")]).expect(0, "a fresh run")
    run_dir = h.path("run")
    h.run(["train", cfg, "--set", "train.max_steps=2"]).expect(0, "the run to resume")
    def remove_checkpoints():
        for name in U.checkpoints(run_dir):  # checkpoints/ itself stays: the job checks it
            shutil.rmtree(os.path.join(run_dir, "checkpoints", name))
    p, err = changed_while_settling(h, cfg, run_dir, remove_checkpoints)
    check(p.returncode == 0 and "starting fresh" in err,
          "the run whose checkpoints went: exit %d\n%s", p.returncode, U.tail(err, 1500))
    a, b = U.unit_files(U.ckpt(h.path("fresh"), 3)), U.unit_files(U.ckpt(run_dir, 3))
    check(len(a) == len(b) and all([r for r in U.unit_records(x) if r[0] != "checkpoint"] ==
                                   [r for r in U.unit_records(y) if r[0] != "checkpoint"]
                                   for x, y in zip(a, b)),
          "the run that found no checkpoint under the lock did not start from init_from's weights")


def test_memory_refusal_says_what_it_compares(h):
    """A batch refused for one stage's memory: what the message says is
    more than the limit is: the activations beside the parameters (with
    their gradients and moments) and the linear layers' working memory.
    It named the activations alone as more than the limit, when they were
    less and the sum was not given."""
    cfg = U.write_config(h, "mem.yaml", base(h, "vit", **{
        "model.dim": "32", "model.heads": "2", "data.synthetic_examples": "64",
        "train.batch": "16", "pipeline.microbatches": "1"}))
    number = r"([0-9.]+(?:e-?[0-9]+)?)"
    # the tiny ViT's 16 examples take about 0.00043 GiB, the rest 0.00041
    for limit in ("0.0006", "0.0008"):
        r = h.run(["plan", cfg, "--set", "pipeline.memory_gib=" + limit]).expect(2, limit)
        m = re.search(r"activations take %s GiB beside the %s GiB of the parameters.*together "
                      r"more than the %s GiB one stage may use" % (number, number, number), r.err)
        check(m is not None, "memory_gib %s: the refusal does not say what it compares:\n%s",
              limit, r.describe())
        if m:
            acts, rest, have = (float(x) for x in m.groups())
            check(acts < have < acts + rest, "memory_gib %s: %g + %g GiB against %g GiB", limit,
                  acts, rest, have)


def test_memory_counts_the_cache(h):
    """The node's RAM a stage may use leaves room for the rank's share of
    the activation cache's shared memory when the cache is on and a freeze
    policy fills it: its pages are RAM too. A ViT of 4097 tokens at d 1024
    has 16 MiB entries, 25,000 examples' worth far past any machine's RAM
    at cache.memory_gib 1e6; the model itself needs about a GiB. It was
    planned as if the cache took nothing (the rank was killed when the
    cache filled); now refused naming the cache, and the same config with
    the cache off, or at 1 GiB, is not refused for memory."""
    cfg = U.write_config(h, "cachemem.yaml", base(h, "vit", **{
        "data.kind": "synthetic_images", "data.image_size": "64", "model.patch": "1",
        "model.dim": "1024", "model.heads": "8", "model.layers": "1",
        "data.synthetic_examples": "20000", "train.batch": "2", "pipeline.microbatches": "1",
        "freeze.policy": "schedule", "cache.enabled": "true", "cache.memory_gib": "1e6"}))
    r = h.run(["plan", cfg]).expect(2, "cache on")
    check("share of the activation cache, cache.memory_gib" in r.err,
          "the refusal does not name the cache:\n%s", r.describe())
    for off in ("cache.enabled=false", "cache.memory_gib=1"):
        h.run(["plan", cfg, "--set", off]).expect(0, off)


def test_key_without_a_value_names_its_line(h):
    """`? dim` (an explicit key with no value) is refused naming the key's
    line: libyaml marks its empty value where the next token starts, which
    named the line after it (a line past the file's end, or another key's)."""
    for text in ("model:\n  ? dim\n", "model:\n  ? dim\n  layers: 2\n", "model:\n  dim:\n"):
        cfg = U.write(h.path("novalue.yaml"), text)
        r = h.run(["plan", cfg]).expect(2, "no value for model.dim: %r" % text)
        r.one_error("%s:2: model.dim: " % cfg)


def test_long_paths_leave_room_for_the_reason(h):
    """A config path of 1,022 bytes, and a data.text of 1,020 bytes that is
    missing: the message still gives the line, the key and what is wrong
    (a 1,024-byte message cut them off: '...bad.yaml:' and nothing after)."""
    cfg = U.write(h.path("bad.yaml"), "model:\n  layers: x\n")
    name = "./" * ((1022 - len("bad.yaml")) // 2) + "bad.yaml"
    r = h.run(["plan", name]).expect(2, "a bad value in a config of a long name")
    r.one_error("bad.yaml:2: model.layers: not an integer: 'x'; allowed: an integer from 1 to 1024",
                strict=False)
    head = h.dir + "/"
    missing = head + "./" * ((1020 - len(head) - len("nope.txt")) // 2) + "nope.txt"
    base_cfg = U.write_config(h, "base.yaml", base(h, "gpt"))
    r = h.run(["plan", base_cfg, "--set", "data.kind=text", "--set", "data.text=" + missing]).expect(
        2, "a missing data.text of a long name")
    r.one_error("data.text", "nope.txt", "No such file or directory", strict=False)


def test_run_dir_real_path_past_path_max(h):
    """A run.dir whose real path, with its checkpoints' files, passes what
    paths may hold (a relative run.dir of two 200-byte names from a working
    directory 3,800 bytes deep): refused at the start, exit 2, naming
    run.dir once. It trained, and then nothing could resolve it to resume
    (`run.dir: run.dir: the real path ... cannot be found`). `plan` refuses
    it alike. A short one in the same place trains and resumes."""
    deep = h.dir
    while len(deep) < 3800:
        deep = os.path.join(deep, "d" * min(200, 3800 - len(deep)))
    os.makedirs(deep)
    cfg = U.write_config(h, "deep.yaml", base(h, "vit", **{"run.dir": "a" * 200 + "/" + "b" * 200}))
    for cmd in ("plan", "train"):  # plan refuses what train would (it planned it)
        r = h.run([cmd, cfg], cwd=deep).expect(2, "%s of a run.dir past PATH_MAX" % cmd)
        line = r.one_error("run.dir", "real path would be", strict=False)
        check(line.count("run.dir") == 1, "run.dir named more than once: %s", line)
        check(not os.path.exists(os.path.join(deep, "a" * 200)), "a refused %s made its run.dir", cmd)
    short = U.write_config(h, "short.yaml", base(h, "vit", **{"run.dir": "r"}))
    h.run(["train", short], cwd=deep).expect(0, "a short run.dir there")
    h.run(["train", short, "--set", "train.resume=auto", "--set", "train.max_steps=3"],
          cwd=deep).expect(0, "its resume")


def test_init_from_tokenizer_note(h):
    """A model whose tokenizer_config.json says do_lower_case false (a cased
    BERT) fed lowercased texts gets one note naming the key and the field:
    from a data.vocab elsewhere (no tokenizer_config.json there: uncased),
    or with data.lowercase set true over the model's own file. With the
    model's own vocab.txt as data.vocab and the keys at auto, the run is
    cased and there is no note; a tokenizer_config.json beside the weights
    that cannot be read is a note, not an error (the run does not read it)."""
    f = textcls_files(h)
    bert = hf_bert_keys(f)
    cased = hf_bert(h, "cased")
    shutil.copy(f["vocab"], os.path.join(cased, "vocab.txt"))
    U.write(os.path.join(cased, "tokenizer_config.json"), '{"do_lower_case": false}')
    own = os.path.join(cased, "vocab.txt")
    for name, changes, want in (
            ("vocab_elsewhere", {}, ["data.lowercase true where it says do_lower_case false",
                                     "data.strip_accents true where it says strip_accents false"]),
            ("lowercase_set", {"data.vocab": own, "data.lowercase": "true"},
             ["data.lowercase true where it says do_lower_case false"]),
            ("own_vocab", {"data.vocab": own}, None)):
        cfg = U.write(h.path("%s.yaml" % name), U.render(base(h, "gpt", **dict(
            bert, **dict(changes, **{"model.init_from": cased})))))
        r = h.run(["eval", cfg, "--init"]).expect(0, name)
        notes = [l for l in r.err.splitlines() if "tokenizes otherwise" in l]
        if want is None:
            check(not notes, "%s: a note where the run tokenizes as the model:\n%s", name,
                  r.describe())
        else:
            check(len(notes) == 1 and all(w in notes[0] for w in want) and
                  os.path.join(cased, "tokenizer_config.json") in notes[0],
                  "%s: not one note naming %s:\n%s", name, want, r.describe())
    U.write(os.path.join(cased, "tokenizer_config.json"), '{"do_lower_case": 0}')
    cfg = U.write(h.path("unreadable.yaml"), U.render(base(h, "gpt", **dict(
        bert, **{"model.init_from": cased}))))
    r = h.run(["eval", cfg, "--init"]).expect(0, "an unreadable tokenizer_config.json beside the weights")
    notes = [l for l in r.err.splitlines() if "cannot be read" in l and "do_lower_case" in l]
    check(len(notes) == 1, "not one note of the unreadable file:\n%s", r.describe())


def test_bert_init_from_legacy_names(h):
    """An older BERT file (bert-base-uncased's among them) names LayerNorm's
    parameters gamma and beta, under "bert.": it loads as transformers loads
    it, to the same logits as the file with today's names."""
    f = textcls_files(h)
    bert = hf_bert_keys(f)
    legacy = lambda k: "bert." + (k[:-len(".weight")] + ".gamma" if "LayerNorm.weight" in k else
                                  k[:-len(".bias")] + ".beta" if "LayerNorm.bias" in k else k)
    logits = {}
    for name, init in (("current", hf_bert(h, "current")),
                       ("legacy", hf_bert(h, "legacy", rename=legacy))):
        cfg = U.write(h.path(name + ".yaml"),
                      U.render(base(h, "gpt", **dict(bert, **{"model.init_from": init}))))
        out = h.path(name + "-logits.safetensors")
        h.run(["eval", cfg, "--init", "--logits", out]).expect(0, name)
        with open(out, "rb") as fh:
            logits[name] = fh.read()
    check(logits["current"] == logits["legacy"], "gamma/beta names give other logits")


def test_init_from_sequence_classifier_note(h):
    """A transformers BertForSequenceClassification (bert.* names and a
    classifier.weight of 3 labels) loads its encoder, not its classifier:
    one note says the classifier starts from run.seed, and the logits are
    those of the same encoder without a classifier in the file (which gets
    no note)."""
    f = textcls_files(h)
    bert = hf_bert_keys(f)
    logits = {}
    for name, add in (("plain", None),
                      ("classifier", {"classifier.weight": (3, 8), "classifier.bias": (3,)})):
        init = hf_bert(h, name, add=add,
                       rename=lambda k: k if k.startswith("classifier.") else "bert." + k)
        cfg = U.write(h.path(name + ".yaml"),
                      U.render(base(h, "gpt", **dict(bert, **{"model.init_from": init}))))
        out = h.path(name + "-logits.safetensors")
        r = h.run(["eval", cfg, "--init", "--logits", out]).expect(0, name)
        notes = [l for l in r.err.splitlines() if "sequence classifier" in l]
        want = 1 if add else 0
        check(len(notes) == want and all("classifier.weight, 3 labels" in n and
                                         "starts from run.seed" in n for n in notes),
              "%s: not %d note of the classifier not loaded:\n%s", name, want, r.describe())
        with open(out, "rb") as fh:
            logits[name] = fh.read()
    check(logits["plain"] == logits["classifier"], "transformers' classifier changed the logits")


def test_jsonl_text_with_nul(h):
    """"\u0000" is valid JSON (json.dumps writes a NUL so): a JSONL text may
    hold one, and the tokenizer drops it as in a TSV text (as Hugging Face
    does), so the logits are those of the text without it."""
    f = textcls_files(h)
    logits = {}
    for name, nul in (("plain", ""), ("nul", "\\u0000")):
        lines = "".join('{"text": "the%s verse %d", "label": "%s"}\n'
                        % (nul, i, "law" if i % 2 else "wisdom") for i in range(20))
        data = U.write(h.path(name + ".jsonl"), lines)
        keys = base(h, "gpt", **{"model.kind": "bert", "data.kind": "text_classification",
                                 "data.train_file": data, "data.vocab": f["vocab"],
                                 "model.vocab": "6"})
        cfg = U.write(h.path(name + ".yaml"), U.render(keys))
        out = h.path(name + "-logits.safetensors")
        h.run(["eval", cfg, "--init", "--logits", out]).expect(0, name)
        with open(out, "rb") as fh:
            logits[name] = fh.read()
    check(logits["plain"] == logits["nul"], "a NUL in a JSON text changed the logits")


def test_bert_dropout_auto(h):
    """model.dropout and model.attention_dropout at auto: a Hugging Face
    BERT's config.json gives them (hidden_dropout_prob,
    attention_probs_dropout_prob; transformers' 0.1 where it has none), a
    value in the config wins, a bert from scratch has 0; `plan` prints what
    they came to (each as set, to its last digit), the checkpoint records it
    and `export` writes it back into config.json."""
    f = textcls_files(h)
    bert = hf_bert_keys(f)
    said = hf_bert(h, "said", {"hidden_dropout_prob": 0.2, "attention_probs_dropout_prob": 0.3})
    silent = hf_bert(h, "silent")
    for init, sets, want in [(said, [], "dropout 0.2 (attention 0.3)"),
                             (said, ["model.dropout=0"], "dropout 0 (attention 0.3)"),
                             (said, ["model.attention_dropout=0.05"], "dropout 0.2 (attention 0.05)"),
                             (silent, [], "dropout 0.1 (attention 0.1)"),
                             ("", [], "dropout 0 (attention 0)"),
                             ("", ["model.dropout=0.25"], "dropout 0.25 (attention 0)"),
                             # as set, to the digit (not %g's 1), and -0 as 0
                             ("", ["model.dropout=0.999999999", "model.attention_dropout=-0"],
                              "dropout 0.999999999 (attention 0)")]:
        keys = base(h, "gpt", **dict(bert, **{"model.init_from": init or None}))
        cfg = U.write(h.path("auto.yaml"), U.render(keys))
        r = h.run(["plan", cfg] + sum((["--set", s] for s in sets), [])).expect(0, "plan")
        check(want in r.out, "plan with model.init_from %r %s does not say %r:\n%s", init, sets, want, r.out)
    # classifier_dropout (BertForSequenceClassification's, before its
    # classifier): pipetrain's head drops at model.dropout, and says so when
    # the file names another number
    for name, cd, noted in (("cd0", 0.0, True), ("cdnull", None, False), ("cdsame", 0.2, False)):
        init = hf_bert(h, name, {"hidden_dropout_prob": 0.2, "classifier_dropout": cd})
        keys = base(h, "gpt", **dict(bert, **{"model.init_from": init}))
        r = h.run(["plan", U.write(h.path(name + ".yaml"), U.render(keys))]).expect(0, name)
        note = "classifier_dropout 0 is not used" in r.err and "model.dropout (0.2)" in r.err
        check(note == noted and r.err.count("classifier_dropout") == noted,
              "classifier_dropout %r: note %s (expected %s):\n%s", cd, note, noted, r.describe())
    keys = base(h, "gpt", **dict(bert, **{"model.init_from": said}))
    cfg = U.write(h.path("auto.yaml"), U.render(keys))
    h.run(["train", cfg]).expect(0, "training with config.json's dropout")
    ck = os.path.join(h.path("run"), "checkpoints", U.checkpoints(h.path("run"))[-1])
    _, _, recs = U.read_recfile(os.path.join(ck, "manifest"))
    arch = json.loads(dict(recs)["manifest"])["arch"]
    check(arch["hidden_dropout"] == 0.2 and arch["attn_dropout"] == 0.3, "the checkpoint records %s", arch)
    out = h.path("exported")
    h.run(["export", ck, out]).expect(0, "export")
    with open(os.path.join(out, "config.json")) as fh:
        exported = json.load(fh)
    check(exported["hidden_dropout_prob"] == 0.2 and exported["attention_probs_dropout_prob"] == 0.3,
          "the exported config.json says %s", exported)
    shutil.rmtree(h.path("run"))
    # weights without a config.json (a directory holding model.safetensors
    # alone, or the file): loaded, with one note of what goes unchecked and,
    # for a run that trains, of each dropout left at auto being 0
    alone = h.path("weights-alone")
    os.makedirs(alone)
    shutil.copy(os.path.join(silent, "model.safetensors"), alone)
    unchecked = "has no config.json beside its weights"
    for init in (alone, os.path.join(alone, "model.safetensors"), silent):
        for sets, said in ((["model.dropout=0.1", "model.attention_dropout=0.1"], None),
                           ([], "model.dropout and model.attention_dropout left at auto are 0"),
                           (["model.dropout=0.1"], "model.attention_dropout left at auto is 0"),
                           (["model.attention_dropout=0"], "model.dropout left at auto is 0")):
            keys = base(h, "gpt", **dict(bert, **{"model.init_from": init, "train.max_steps": "1"}))
            cfg = U.write(h.path("alone.yaml"), U.render(keys))
            args = sum((["--set", s] for s in sets), [])
            # (plan says what train would)
            for cmd in (["train", cfg], ["plan", cfg], ["eval", cfg, "--init"]):
                r = h.run(cmd + args).expect(0, "%s from %s %s" % (cmd[0], init, sets))
                notes = [l for l in r.err.splitlines() if unchecked in l]
                if init == silent:
                    check(not notes, "a note with config.json there:\n%s", r.describe())
                    continue
                check(len(notes) == 1 and "model.heads (2)" in notes[0] and
                      "model.ln_eps (1e-12)" in notes[0] and notes[0].startswith("pipetrain: note: "),
                      "%s from %s %s: not one note of the config.json missing:\n%s", cmd[0], init,
                      sets, r.describe())
                want = said if cmd[0] in ("train", "plan") else None
                check((want in notes[0]) if want else "left at auto" not in notes[0],
                      "%s from %s %s: the dropout said is not %r:\n%s", cmd[0], init, sets, want,
                      notes[0])
            shutil.rmtree(h.path("run"), ignore_errors=True)


def test_bf16_without_a_gpu(h):
    """run.device auto finds no GPU: bf16 is refused naming run.precision."""
    if any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidiactl")):
        return "skipped: this machine has a GPU"
    text = U.render(base(h, **{"run.precision": "bf16"}))
    cfg = U.write(h.path("bad.yaml"), text)
    r = h.run(["train", cfg]).expect(2)
    r.one_error("%s:%d: run.precision: " % (cfg, U.line_of(text, "run.precision")),
                "found none", "allowed on the CPU: fp32")
    check(not os.path.exists(h.path("run")), "run.dir created")


def test_threads_above_cores_warned(h):
    """More threads than cores is allowed (a config may be for a bigger
    machine), but said once, with where run.threads was set."""
    threads = (os.cpu_count() or 1) + 1
    text = U.render(base(h, **{"run.threads": str(threads)}))
    cfg = U.write(h.path("c.yaml"), text)
    r = h.run(["plan", cfg]).expect(0)
    warnings = [l for l in r.err.splitlines() if l.startswith("pipetrain: warning: ")]
    check(len(warnings) == 1, "expected one warning, got:\n%s", r.err)
    want = "%s:%d: run.threads: %d threads" % (cfg, U.line_of(text, "run.threads"), threads)
    check(want in warnings[0], "the warning does not say %r:\n%s", want, warnings[0])


def test_duplicate_key_names_both_lines(h):
    text = dup(U.render(base(h)))
    first, second = line_with("lr: 0.003")(text), line_with("lr: 0.005")(text)
    cfg = U.write(h.path("bad.yaml"), text)
    r = h.run(["train", cfg]).expect(2)
    r.one_error("%s:%d: " % (cfg, second), "train.lr", "line %d" % first)


def test_duplicate_section(h):
    """a second `train:` section must not be merged silently into the first"""
    text = U.render(base(h)) + "train:\n  weight_decay: 0.2\n"
    first = line_with("train:")(text)
    second = len(text.splitlines()) - 1
    cfg = U.write(h.path("bad.yaml"), text)
    r = h.run(["train", cfg]).expect(2)
    r.one_error("%s:%d: " % (cfg, second), "'train' appears twice", "line %d" % first)


def test_usage_errors(h):
    cfg = U.write_config(h, "good.yaml", base(h))
    for args, needle in [(["trian", cfg], "unknown command 'trian'"),
                         (["train"], "needs a config file"),
                         (["eval"], "needs a config file"),
                         (["export", cfg], "export")]:
        r = h.run(args).expect(2, " ".join(args))
        line = r.one_error(needle, strict=False)
        check(r.err.startswith(line), "the error line is not first on stderr:\n%s", r.err)
        check("usage: pipetrain" in r.err, "no usage text after %r\n%s", needle, r.describe())
    check(not os.path.exists(h.path("run")), "run.dir created")


def test_subcommand_help(h):
    """`pipetrain train --help` (and eval, plan, export, inspect, keys, -h
    too) prints the usage and exits 0, rather than reading a config named
    --help (keys refused it as an argument, exit 2)."""
    for cmd in ("train", "eval", "plan", "export", "inspect", "keys"):
        for flag in ("--help", "-h"):
            r = h.run([cmd, flag]).expect(0, cmd + " " + flag)
            check(r.out.startswith("usage: pipetrain") and not r.err, "%s %s:\n%s", cmd, flag,
                  r.describe())


def test_quoted_number_with_leading_zero(h):
    """A quoted number is a string in every YAML, so "016" has no octal
    reading: it is 16 (the plain 016 is refused as ambiguous), however many
    zeros lead (62 or more were refused as a leading zero), signed too."""
    text = U.render(base(h, **{"train.max_steps": "1"})).replace("dim: 16", 'dim: "016"', 1)
    check('dim: "016"' in text, "the config has no 'dim: 16' to quote:\n%s", text)
    h.run(["plan", U.write(h.path("quoted.yaml"), text)]).expect(0, 'dim: "016"')
    for zeros in (61, 62, 200, 5000):
        for value in ('"%s16"', '"+%s16"'):
            quoted = value % ("0" * zeros)
            long_text = text.replace('dim: "016"', "dim: " + quoted, 1)
            h.run(["plan", U.write(h.path("quoted-%d.yaml" % zeros), long_text)]).expect(
                0, "dim: %s with %d zeros" % (value[:2], zeros))


def test_staging_is_host_memory(h):
    """The check of a step's staged inputs counts the host's memory, not
    pipeline.memory_gib (a device's): a small memory_gib does not refuse a
    batch the host holds."""
    keys = base(h, **{"pipeline.memory_gib": "0.01", "train.batch": "2048",
                      "data.synthetic_examples": "4096", "data.image_size": "112",
                      "model.patch": "28", "train.max_steps": "1"})
    r = h.run(["plan", U.write_config(h, "staging.yaml", keys)])
    check("whose inputs and targets" not in r.err, "refused for its staging:\n%s", r.describe())


def test_utf16_config(h):
    """A UTF-16 config (with its byte-order mark, as libyaml reads it) is
    read as the same config in UTF-8, and an error in it is reported on its
    line, counted in characters: U+010A, whose low byte is a newline's, used
    to count as a line (line 8 for line 3)."""
    text = U.render(base(h, **{"train.max_steps": "1"}))
    for codec, bom in (("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff")):
        cfg = U.write(h.path(codec + ".yaml"), bom + text.encode(codec), "wb")
        h.run(["plan", cfg]).expect(0, codec)
        bad = "# \u010a\u010a\u010a\u010a\u010a\nrun:\n  dir: X\n".encode(codec)
        surrogate = b"\x00\xd8" if codec.endswith("le") else b"\xd8\x00"
        cfg = U.write(h.path(codec + "-bad.yaml"), bom + bad.replace("X".encode(codec), surrogate), "wb")
        r = h.run(["plan", cfg]).expect(2, codec + " with a lone surrogate")
        r.one_error(cfg + ":3: YAML syntax error")


def test_line_ends_of_libyaml(h):
    """Lines that end in a lone CR (or CR LF), and in UTF-16 too, are lines:
    an error libyaml's reader finds by byte (a bad UTF-8 byte, a control
    character) is reported on its line, as the errors found by position are
    (it named line 1 of a file of lone CRs)."""
    text = U.render(base(h, **{"train.max_steps": "1"}))
    last = len(text.splitlines()) + 1
    for name, ends in (("cr", "\r"), ("crlf", "\r\n")):
        body = text.replace("\n", ends)
        cfg = U.write(h.path(name + ".yaml"), body.encode(), "wb")
        h.run(["plan", cfg]).expect(0, name + " line ends")
        for bad, needle in ((b"\xff", "invalid leading UTF-8 octet"),
                            (b"\x01", "control characters")):
            raw = (body + "sample:" + ends + '  prompt: "a').encode() + bad + ('b"' + ends).encode()
            cfg = U.write(h.path(name + "-bad.yaml"), raw, "wb")
            r = h.run(["plan", cfg]).expect(2, name + " with a reader error")
            r.one_error("%s:%d: YAML syntax error" % (cfg, last + 1), needle)
        # a key past libyaml's 1024 characters, said as such on its line
        cfg = U.write(h.path(name + "-key.yaml"), (body + "k" * 1100 + ": 1" + ends).encode(), "wb")
        r = h.run(["plan", cfg]).expect(2, name + " with a long key")
        r.one_error("%s:%d: YAML syntax error: a key of 1100 characters" % (cfg, last))
    for codec, bom in (("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff")):
        body = text.replace("\n", "\r")
        raw = bom + (body + "sample:\r").encode(codec) + b"\x00\xd8"[::1 if codec.endswith("le") else -1]
        cfg = U.write(h.path(codec + "-cr.yaml"), raw, "wb")
        r = h.run(["plan", cfg]).expect(2, codec + " lone CRs with a lone surrogate")
        r.one_error("%s:%d: YAML syntax error" % (cfg, last + 1))


def test_config_without_settings(h):
    """An empty config, one of comments only, a document of YAML's null
    alone (`---`, `~`: it said "expected 'key: value' lines"), or a FIFO read
    before its writer came, is refused (exit 2) naming the file: it would
    otherwise start a run of every default into runs/default. An explicit
    empty mapping ({}) is a config that sets nothing on purpose."""
    for name, text in (("empty.yaml", ""), ("comments.yaml", "# nothing yet\n\n   # at all\n"),
                       ("dashes.yaml", "---\n"), ("ended.yaml", "---\n...\n"),
                       ("tilde.yaml", "--- ~\n"), ("null.yaml", "# a comment\nnull\n")):
        cfg = U.write(h.path(name), text)
        for cmd in ("train", "plan"):
            r = h.run([cmd, cfg]).expect(2, "%s of %s" % (cmd, name))
            r.one_error(cfg, "holds no settings")
    check(not os.path.exists(h.path("runs")), "a refused config made runs/")
    fifo = h.path("no-writer.yaml")
    os.mkfifo(fifo)
    r = h.run(["plan", fifo], timeout=30).expect(2, "a FIFO config without a writer")
    r.one_error("no-writer.yaml", "holds no settings", "a pipe that had no writer")
    # a device is read as far as it has something now: one that would wait
    # (a pseudo-terminal's master) is refused at once, as is /dev/zero
    for dev, needle in (("/dev/ptmx", "nothing to read now"), ("/dev/zero", "larger than 1 MiB")):
        if os.path.exists(dev):
            r = h.run(["plan", dev], timeout=30).expect(2, "the config " + dev)
            r.one_error(dev, needle)
    r = h.run(["plan", U.write(h.path("braces.yaml"), "{}\n"), "--set", "run.dir=" + h.path("r"),
               "--set", "train.max_steps=1"])
    check("holds no settings" not in r.err, "an explicit empty mapping refused\n%s", r.describe())


def test_checkpoints_not_a_directory(h):
    """RUN_DIR/checkpoints that is a file (or a link leading nowhere) is
    refused before training, naming it, with exit 2 and the run's logs
    untouched: the first save would otherwise fail after the training."""
    cfg = U.write_config(h, "good.yaml", base(h))
    run = h.path("run")
    os.makedirs(run)
    log = U.write(os.path.join(run, "metrics.jsonl"), "")
    for kind in ("file", "dangling"):
        ck = os.path.join(run, "checkpoints")
        if os.path.lexists(ck):
            os.unlink(ck)
        if kind == "file":
            U.write(ck, "x\n")
        else:
            os.symlink(h.path("nowhere"), ck)
        r = h.run(["train", cfg]).expect(2, "checkpoints as a " + kind)
        r.one_error("run.dir", ck, "not a directory")
        check(os.path.getsize(log) == 0, "the refused run wrote to metrics.jsonl")


def test_special_files(h):
    """Outputs never replace what is not a regular file: export and eval
    --logits to a device node (as root: /dev/null itself would go), a FIFO,
    a directory or a symbolic link (to a regular file: the rename would
    replace the link), or under a missing directory, are refused (exit 2) and
    the node is left as it was; --logits and --hidden naming one file in two
    spellings are refused. Inputs never block: a checkpoint's manifest or
    unit file that is a FIFO, or a link to /dev/zero, is refused at once
    (exit 2), naming it. A config may come through a FIFO (`<(...)`): read
    when it has a writer, and no wait for one when it has none."""
    cfg = U.write_config(h, "good.yaml", base(h, **{"train.checkpoint_every": "2"}))
    h.run(["train", cfg]).expect(0, "training")
    ck = U.ckpt(h.path("run"), 2)
    fifo = h.path("fifo")
    os.mkfifo(fifo)
    outs = {"fifo": (fifo, "a FIFO"), "dir": (h.path("adir"), "a directory"),
            "missing": (h.path("no/such/dir/x.st"), "No such file"),
            "link": (h.path("link.st"), "is a symbolic link; it is not replaced")}
    U.write(h.path("target.st"), "a file the link leads to\n")
    os.symlink(h.path("target.st"), h.path("link.st"))
    os.mkdir(h.path("adir"))
    if os.geteuid() == 0:
        os.mknod(h.path("null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        outs["device"] = (h.path("null"), "a character device")
    for name, (path, needle) in outs.items():
        before = os.lstat(path) if os.path.lexists(path) else None
        for args in (["export", ck, path], ["eval", cfg, "--init", "--logits", path]):
            r = h.run(args, timeout=30).expect(2, "%s to %s" % (args[0], name))
            r.one_error(path, needle, strict=False)
            after = os.lstat(path) if before else None
            check(before is None and not os.path.lexists(path) or
                  (before and after and before.st_mode == after.st_mode and
                   before.st_ino == after.st_ino), "%s replaced %s", args[0], path)
    r = h.run(["eval", cfg, "--init", "--logits", "a.st", "--hidden", "./a.st"]).expect(2)
    r.one_error("--logits and --hidden name the same file ('a.st', './a.st')")
    check(not os.path.exists(h.path("a.st")), "a.st written")
    # bash's <(...) hands a pipe as /dev/fd/N: its content is read (a bad
    # value in it is found, naming the key)
    bad = U.write(h.path("bad-lr.yaml"), U.render(base(h, **{"train.lr": "99"})))
    for src, want in ((cfg, 0), (bad, 2)):
        p = subprocess.run(["bash", "-c", '"$0" plan <(cat "$1")', h.binary, src], cwd=h.dir,
                           capture_output=True, text=True, timeout=60, env=U.sanitizer_env())
        check(p.returncode == want and (want == 0 or "train.lr" in p.stderr),
              "plan <(cat %s): exit %d\n%s", src, p.returncode, p.stderr[-2000:])
    r = h.run(["plan", fifo], timeout=30)  # no writer: nothing read, at once, and refused
    check(r.rc == 2, "a FIFO config without a writer: exit %d\n%s", r.rc, r.describe())
    for part in ("manifest", os.path.basename(U.unit_files(ck)[0])):
        for kind in ("fifo", "zero"):
            bad = h.path("ck-%s-%s" % (part, kind))
            shutil.copytree(ck, bad)
            os.unlink(os.path.join(bad, part))
            if kind == "fifo":
                os.mkfifo(os.path.join(bad, part))
            else:
                os.symlink("/dev/zero", os.path.join(bad, part))
            for args in (["export", bad, h.path("x.st")], ["eval", cfg, "--checkpoint", bad]):
                r = h.run(args, timeout=30).expect(2, "%s of a checkpoint whose %s is %s"
                                                   % (args[0], part, kind))
                r.one_error(os.path.join(bad, part), "not a regular file", strict=False)


def test_unreadable_inputs(h):
    """A file that opens but cannot be read (/proc/self/mem: every read fails
    with EIO) is the input's fault as much as one that does not parse: as
    an IDX file, a text file or a model.init_from, and a run.dir where no
    log can be made (/proc/self, /proc/self/fd), each is refused with exit 2
    naming the key, not exit 1."""
    idx = {"data.kind": "idx", "model.classes": "10"}
    cases = [("vit", dict(idx, **{"data.train_images": "/proc/self/mem"}), "data.train_images"),
             ("vit", dict(idx, **{"data.test_labels": "/proc/self/mem"}), "data.test_labels"),
             ("gpt", {"data.kind": "text", "data.text": "/proc/self/mem"}, "data.text"),
             ("vit", {"model.init_from": "/proc/self/mem"}, "model.init_from"),
             ("vit", {"run.dir": "/proc/self"}, "run.dir"),
             ("gpt", {"run.dir": "/proc/self/fd"}, "run.dir")]
    for i, (kind, extra, key) in enumerate(cases):
        cfg = U.write_config(h, "c%d.yaml" % i, base(h, kind, **extra))
        r = h.run(["train", cfg], timeout=60).expect(2, "%s unreadable" % key)
        r.one_error(key)


def test_subnormal_number_accepted(h):
    """1e-310 is below a double's normal numbers but a number all the same
    (strtod says ERANGE): a key whose range holds it takes it."""
    keys = base(h, **{"cache.memory_gib": "1e-310"})
    h.run(["plan", U.write_config(h, "tiny-budget.yaml", keys)]).expect(0, "a budget of 1e-310 GiB")


def test_cache_budget_above_need(h):
    """cache.memory_gib and cache.disk_gib are budgets: a tier never holds
    more entries than there are samples, so the schema's largest values
    (1e6 GiB) train instead of failing to map or size the segment."""
    os.mkdir(h.path("spill"))
    keys = base(h, **{"cache.enabled": "true", "cache.memory_gib": "1000000",
                      "cache.disk_dir": h.path("spill"), "cache.disk_gib": "1000000",
                      "freeze.policy": "schedule", "freeze.start": "0"})
    h.run(["train", U.write_config(h, "big.yaml", keys)]).expect(0, "a cache budget of 1e6 GiB")


def test_cache_disk_dir_read_only(h):
    """A cache.disk_dir that is there but cannot be written (a read-only
    mount: root writes through permissions) is refused with the config's
    line and key, exit 2, before anything is made (it was exit 1 when the
    disk tier's file could not be created). Needs root (unshare, mount)."""
    ro = h.path("read-only-spill")
    os.mkdir(ro)
    text = U.render(base(h, **{"cache.enabled": "true", "cache.disk_dir": ro, "cache.disk_gib": "1",
                               "freeze.policy": "schedule", "freeze.start": "0"}))
    cfg = U.write(h.path("ro.yaml"), text)
    r = h.run_read_only(ro, ["train", cfg])
    if r is None:
        return "skipped: no mount namespace"
    r.expect(2, "a read-only cache.disk_dir")
    r.one_error("%s:%d: cache.disk_dir: " % (cfg, U.line_of(text, "cache.disk_dir")), ro,
                "Read-only file system")
    check(not os.path.exists(h.path("run")), "the refused run made run.dir")


def test_error_line_escapes_control_characters(h):
    """A path holding a newline, a tab or an escape sequence (all allowed in
    a file name) stays on the one error line, written as C escapes."""
    ck = h.path("a\nb\tc\x1b[31m")
    r = h.run(["export", ck, h.path("out.st")]).expect(2, "export of a missing checkpoint")
    r.one_error("a\\nb\\tc\\x1b[31m")
    check("\x1b" not in r.err, "the escape sequence reached stderr raw:\n%s", r.describe())
    # a C1 control (U+009B is CSI), a bidirectional override and a byte that
    # is not UTF-8 (a lone 0x9b, os.fsencode of \udc9b) as \x escapes of
    # their bytes, other text as it is
    ck = h.path("caf\u00e9-\u009b31m-\u202e-\udc9b-\u4e2d")
    r = h.run(["export", ck, h.path("out.st")]).expect(2, "export of a missing checkpoint")
    r.one_error("caf\u00e9-\\xc2\\x9b31m-\\xe2\\x80\\xae-\\x9b-\u4e2d")
    check("\u009b" not in r.err, "a C1 control reached stderr raw:\n%s", r.describe())


def test_eval_output_errors(h):
    """eval's --logits / --hidden / --checkpoint / --init misused: one clear
    error line, exit 2, nothing written. An output that cannot be written is
    refused before the evaluation (here from --init, so no run is needed)."""
    cfg = U.write_config(h, "good.yaml", base(h))
    os.makedirs(h.path("a-dir"))
    missing = h.path("no-such-dir", "h.safetensors")
    for args, needles in [
            (["--hidden"], ["--hidden needs an output file"]),
            (["--logits"], ["--logits needs an output file"]),
            (["--checkpoint"], ["--checkpoint needs a checkpoint directory"]),
            (["--hidden", "--set", "run.threads=1"], ["--hidden needs an output file", "got '--set'"]),
            (["--hidden", ""], ["--hidden needs an output file", "got ''"]),
            (["--hidden", "a.st", "--hidden", "b.st"], ["--hidden given twice", "a.st", "b.st"]),
            (["--init", "--logits", "x.st", "--hidden", "x.st"], ["--logits and --hidden", "x.st"]),
            (["--init", "--checkpoint", h.path("a-dir")], ["--init and --checkpoint"]),
            (["--init", "--init"], ["--init given twice"]),
            # the --name=PATH form: an empty value is missing, a value
            # starting with "--" is the user's own, a repeat is a repeat
            (["--hidden="], ["--hidden needs an output file (OUT.safetensors) (see"]),
            (["--checkpoint="], ["--checkpoint needs a checkpoint directory (see"]),
            (["--hidden=a.st", "--hidden", "b.st"], ["--hidden given twice", "a.st", "b.st"]),
            (["--init", "--logits=x.st", "--hidden=x.st"], ["--logits and --hidden", "x.st"]),
            (["--init", "--hidden=" + missing], ["--hidden", missing, "No such file or directory"]),
            (["--init=1"], ["--init takes no value, got '--init=1'"]),
            (["--hiddenx=a.st"], ["unexpected argument '--hiddenx=a.st'"]),
            (["--init", "--hidden", missing], ["--hidden", missing, "No such file or directory"]),
            (["--init", "--logits", "x.st", "--hidden", h.path("a-dir")], ["--hidden", "is a directory"])]:
        r = h.run(["eval", cfg] + args).expect(2, " ".join(args))
        r.one_error(*needles)
    # the program itself, as the output: refused, the program left whole
    import shutil
    prog = shutil.copy(h.binary, h.path("pipetrain-copy"))
    before = U.read_bytes(prog)
    binary, h.binary = h.binary, prog  # this test's own runner, run as the copy
    try:
        r = h.run(["eval", cfg, "--init", "--logits", prog]).expect(2, "--logits over the program")
    finally:
        h.binary = binary
    r.one_error("--logits", "is the pipetrain program running this command")
    check(U.read_bytes(prog) == before, "the program was overwritten")
    os.unlink(prog)
    r = h.run(["train", cfg, "--hidden", "h.st"]).expect(2, "--hidden on train")
    r.one_error("unexpected argument '--hidden'")
    check(not os.path.exists(h.path("no-such-dir")), "eval created the missing directory")
    left = sorted(f for f in os.listdir(h.dir) if f not in ("good.yaml", "a-dir"))
    check(not left and not os.listdir(h.path("a-dir")), "refused evals left files: %s", left)
    # the same --init evaluation with writable outputs succeeds and writes both
    r = h.run(["eval", cfg, "--init", "--logits", "l.st", "--hidden", "h.st"]).expect(0)
    check("checkpoint none (the initial weights" in r.out, "eval --init printed:\n%s", r.out)
    check(os.path.exists(h.path("l.st")) and os.path.exists(h.path("h.st")), "outputs not written")
    # and in the --name=PATH form, the same bytes
    r = h.run(["eval", cfg, "--init", "--logits=l2.st", "--hidden=h2.st"]).expect(0)
    check(U.read_bytes(h.path("l2.st")) == U.read_bytes(h.path("l.st")) and
          U.read_bytes(h.path("h2.st")) == U.read_bytes(h.path("h.st")),
          "--logits=/--hidden= wrote other bytes than --logits/--hidden")
    check(not os.path.exists(h.path("run")), "eval created run.dir")


TESTS = [test_base_config_trains, test_boundaries_accepted, test_base_gpt_config_trains,
         test_yaml_unterminated_quote, test_duplicate_key_names_both_lines, test_duplicate_section,
         test_config_of_1_mib_is_read, test_deep_config_in_checkpoint_refused_fast,
         test_integer_bounds_accepted, test_init_from_nan_or_inf, test_init_from_records_heads_and_ln_eps,
         test_vocab_shorter_than_model_vocab_noted,
         test_bf16_without_a_gpu,
         test_auto_freeze_of_many_blocks_logged_whole, test_profile_refused_with_its_key,
         test_text_classification_data_errors, test_data_beyond_the_address_space_limit,
         test_tokenizer_config_errors,
         test_init_from_tokenizer_note,
         test_bert_init_from_refused, test_weights_past_memory_with_init_from,
         test_eval_outputs_spare_init_from,
         test_checkpoint_does_not_read_init_from_weights,
         test_init_from_loaded_when_the_planned_resume_goes,
         test_planned_start_that_changed_under_the_lock,
         test_memory_refusal_says_what_it_compares, test_memory_counts_the_cache,
         test_run_dir_real_path_past_path_max, test_long_paths_leave_room_for_the_reason,
         test_key_without_a_value_names_its_line,
         test_test_file_is_the_training_file_noted,
         test_bert_dropout_auto,
         test_bert_init_from_legacy_names, test_init_from_sequence_classifier_note,
         test_jsonl_text_with_nul, test_special_files,
         test_unreadable_inputs,
         test_cache_budget_above_need, test_cache_disk_dir_read_only, test_subnormal_number_accepted,
         test_threads_above_cores_warned,
         test_usage_errors, test_subcommand_help, test_config_without_settings, test_utf16_config, test_line_ends_of_libyaml,
         test_quoted_number_with_leading_zero, test_staging_is_host_memory,
         test_checkpoints_not_a_directory, test_eval_output_errors,
         test_error_line_escapes_control_characters] + [make(c) for c in CASES]

if __name__ == "__main__":
    # 8 workers: most of a refused run is waiting for MPI to start, not CPU
    more = bound_tests(sys.argv[1]) if len(sys.argv) == 2 and os.path.isfile(sys.argv[1]) else []
    sys.exit(U.main(TESTS + more, sys.argv, workers=8))
