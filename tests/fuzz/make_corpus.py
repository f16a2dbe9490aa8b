#!/usr/bin/env python3
"""Regenerates the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/),
dictionaries (tests/fuzz/<target>.dict) and the checkpoint fixture
(tests/fuzz/fixtures/step_0000000002/) from a pipetrain binary:

    tests/fuzz/make_corpus.py build/pipetrain

It trains a tiny ViT for two steps (synthetic 4x4 images, one block of width
4; about 200 parameters, so every file stays a few KB), keeps its checkpoint
as the fixture and as seeds, exports it to safetensors, and writes small
valid inputs for the other readers. The outputs are checked in; run this
again only when a format changes (the checkpoint id is random, so the
fixture and the checkpoint seeds change together, and only together).

Standard library only.
"""
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
STEP = "step_0000000002"

TINY = """run:
  dir: {run}
  threads: 1
  metrics: false
model:
  kind: vit
  dim: 4
  layers: 1
  heads: 1
  mlp_hidden: 4
  patch: 2
  classes: 2
data:
  kind: synthetic_images
  image_size: 4
  synthetic_examples: 16
train:
  batch: 8
  epochs: 1
  eval_every: 0
pipeline:
  memory_gib: 1  # leaves M to the planner: the manifest's profile holds unit costs
"""


def put(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def fresh(folder):
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)


def recfile_records(data):
    """The (tag, payload) records of a recfile (no checks: our own files)."""
    pos, end, out = 16, len(data) - 24, []
    while pos < end:
        (n,) = struct.unpack_from("<I", data, pos)
        tag = data[pos + 4:pos + 4 + n].decode()
        (length,) = struct.unpack_from("<Q", data, pos + 4 + n)
        start = pos + 4 + n + 8
        out.append((tag, data[start:start + length]))
        pos = start + length
    return out


def dict_line(token):
    """A libFuzzer dictionary entry: a quoted string, escaped."""
    out = []
    for b in token if isinstance(token, bytes) else token.encode():
        c = chr(b)
        out.append("\\x%02x" % b if b < 0x20 or b >= 0x7f or c in '"\\' else c)
    return '"%s"' % "".join(out)


def write_dict(name, comment, tokens):
    seen, lines = set(), ["# %s (written by make_corpus.py)" % comment]
    for t in tokens:
        if t and t not in seen:
            seen.add(t)
            lines.append(dict_line(t))
    put(os.path.join(HERE, name + ".dict"), "\n".join(lines) + "\n")


def idx(images, rows, cols, labels):
    """An images file and a labels file in IDX format (plain bytes)."""
    head = struct.pack(">IIII", 0x803, len(images), rows, cols)
    return (head + b"".join(bytes(i) for i in images),
            struct.pack(">II", 0x801, len(labels)) + bytes(labels))


def idx_input(flags, classes, images, labels):
    return bytes([flags, classes - 1]) + struct.pack("<H", len(images)) + images + labels


def textcls_input(flags, context, fraction_byte, train, test=b""):
    train, test = (t.encode() if isinstance(t, str) else t for t in (train, test))
    return bytes([flags, context - 2, fraction_byte]) + struct.pack("<H", len(train)) + train + test


def write_textcls(corpus):
    """Seeds of fuzz_textcls: TSV and JSONL, a split and a test file."""
    folder = os.path.join(corpus, "textcls")
    fresh(folder)
    tsv = ("\ufefflaw\tThe LORD said,\r\n\nwisdom\tgod cafe \u4e2d\n"
           "law\tthe gods said.\n  \n\u00e9t\u00e9\tthe\n")
    jsonl = ('{"text": "The LORD said", "label": "law"}\n\n'
             '{"label": 3, "text": "God\\u0027s", "id": [1]}\r\n'
             '{"text": "the the the the the the", "label": "law"}\n')
    put(os.path.join(folder, "tsv_split"), textcls_input(0, 6, 127, tsv))
    put(os.path.join(folder, "jsonl_split"), textcls_input(1, 4, 63, jsonl))
    put(os.path.join(folder, "tsv_test_jsonl"), textcls_input(
        6, 8, 0, tsv, '{"text": "the", "label": "law"}\n{"text": "x", "label": "nope"}\n'))
    put(os.path.join(folder, "jsonl_test_tsv"), textcls_input(5, 3, 0, jsonl, "3\tgod\nlaw\tthe"))
    write_dict("textcls", "text-classification file syntax",
               ["\t", "\r\n", "\n", "\ufeff", "{", "}", '"text": ', '"label": ', "\\u0000",
                "\\ud800", "[CLS]", "the", "##s", b"\xff"])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_corpus.py PIPETRAIN")
    pipetrain = os.path.abspath(sys.argv[1])
    corpus = os.path.join(HERE, "corpus")
    tmp = tempfile.mkdtemp(prefix="pt_corpus_")
    try:
        run = os.path.join(tmp, "run")
        put(os.path.join(tmp, "tiny.yaml"), TINY.format(run=run))
        subprocess.run([pipetrain, "train", os.path.join(tmp, "tiny.yaml")], check=True,
                       stdout=subprocess.DEVNULL)
        step = os.path.join(run, "checkpoints", STEP)
        weights = os.path.join(tmp, "tiny.safetensors")
        subprocess.run([pipetrain, "export", step, weights], check=True, stdout=subprocess.DEVNULL)
        keys = subprocess.run([pipetrain, "keys"], check=True, capture_output=True,
                              text=True).stdout
        with open(os.path.join(step, "manifest"), "rb") as f:
            manifest = f.read()
        with open(os.path.join(step, "units-stage0.bin"), "rb") as f:
            units = f.read()
        with open(weights, "rb") as f:
            safetensors = f.read()
    finally:
        shutil.rmtree(tmp)

    fixture = os.path.join(HERE, "fixtures", STEP)
    fresh(fixture)
    put(os.path.join(fixture, "manifest"), manifest)
    put(os.path.join(fixture, "units-stage0.bin"), units)
    manifest_json = dict(recfile_records(manifest))["manifest"]
    config_yaml = json.loads(manifest_json)["config"]

    # config: the shipped configs, the tiny run's, every key as a checkpoint
    # stores it, and YAML followed by --set assignments (NUL-separated)
    folder = os.path.join(corpus, "config")
    fresh(folder)
    for name in ("vit_fmnist.yaml", "gpt_kjv.yaml", "bert_finetune.yaml"):
        shutil.copy(os.path.join(REPO, "configs", name), folder)
    put(os.path.join(folder, "tiny.yaml"), TINY.format(run="runs/tiny"))
    put(os.path.join(folder, "checkpoint.yaml"), config_yaml)
    put(os.path.join(folder, "sets"), b"model:\n  kind: gpt\n  dim: 8\n\0model.heads=2\0"
        b"train.lr=0.01\0pipeline.stages=auto\0data.kind=synthetic_text\0run.dir=\"r\"")
    rows = [l.split("|") for l in keys.splitlines()[2:]]
    key_names = [r[1].strip().strip("`") for r in rows]
    words = []
    for r in rows:
        m = re.match(r"\s*one of (.*)", r[3])
        if m:
            words += [w.strip() for w in m.group(1).split(",")]
    tokens = key_names + [k.split(".")[0] + ":" for k in key_names]
    tokens += [k.split(".")[1] + ": " for k in key_names] + [k + "=" for k in key_names]
    tokens += words + ["true", "false", "auto", "yes", "no", "~", "null", "1e308", "-1",
                       "9223372036854775807", "0x10", ".inf", ".nan", "&a ", "*a", "!!str ",
                       "!!map", "---", "...", "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "{", "}",
                       "[", "]", ": ", "- ", "? ", "\"", "'", "|\n", ">\n", "\\x01", "\\u0000",
                       "\n  ", "#", "\0"]
    write_dict("config", "config keys, their words and YAML syntax", tokens)

    # recfile: the two real checkpoint files
    folder = os.path.join(corpus, "recfile")
    fresh(folder)
    put(os.path.join(folder, "manifest"), manifest)
    put(os.path.join(folder, "units-stage0.bin"), units)
    write_dict("recfile", "recfile magics and markers",
               ["PTCKMAN1", "PTUNITS1", "PTRECEND", b"\xff\xff\xff\xff", b"\x02\0\0\0",
                "checkpoint", "manifest", "embed.patch.weight", ".param", ".m", ".v"])

    # checkpoint: the manifest file as it is, and its JSON record alone
    folder = os.path.join(corpus, "checkpoint")
    fresh(folder)
    put(os.path.join(folder, "manifest"), manifest)
    put(os.path.join(folder, "manifest.json"), manifest_json)
    # the same with a vocabulary record, as a bert's manifest has one
    with_vocab = json.loads(manifest_json)
    with_vocab.setdefault("data", {})["vocab"] = {"sha256": "0123456789abcdef" * 4}
    put(os.path.join(folder, "manifest-vocab.json"), json.dumps(with_vocab, indent=1).encode())
    fields = ["format", "checkpoint", "step", "epoch", "epoch_step", "batch", "seed", "lr",
              "kind", "base", "min", "warmup", "total", "frozen_units", "arch", "dim",
              "layers", "heads", "mlp_hidden", "causal", "channels", "height", "width", "patch",
              "classes", "vocab", "context", "init_std", "freeze", "depth", "decisions",
              "have_prev", "acc_steps", "prev_steps", "acc", "prev", "units", "files", "bytes", "sha256",
              "config", "embed", "blocks.0.attn", "blocks.0.mlp", "head", "units-stage0.bin",
              "manifest", "../", ".", "profile", "ranks", "node_of", "cores", "threads",
              "backend", "cpu", "links", "intra_bytes_per_s", "inter_bytes_per_s", "latency_s",
              "costs", "boundary_bytes_per_example", "fwd", "bwd", "param_bytes", "state_bytes",
              "saved_bytes", "scratch_bytes", "model", "pipetrain-profile-1", "data", "train",
              "test", "examples", "labels"]
    tokens = ['"%s"' % f for f in fields] + ["true", "false", "null", "-1", "0.0", "1e400",
                                             "9223372036854775807", "\\u0000", "\\n", "{}",
                                             "[]"]
    write_dict("checkpoint", "manifest field names and JSON syntax", tokens)

    # safetensors: the exported file as it is and as header + NUL + data; one
    # of every dtype and shape kind the reader handles
    folder = os.path.join(corpus, "safetensors")
    fresh(folder)
    put(os.path.join(folder, "tiny.safetensors"), safetensors)
    (n,) = struct.unpack_from("<Q", safetensors, 0)
    put(os.path.join(folder, "tiny.json"), safetensors[8:8 + n].rstrip(b" ") + b"\0" +
        safetensors[8 + n:])
    header = {"__metadata__": {"format": "pt"},
              "a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
              "b": {"dtype": "BF16", "shape": [], "data_offsets": [4, 6]},
              "c": {"dtype": "F64", "shape": [1, 1], "data_offsets": [8, 16]},
              "d": {"dtype": "I8", "shape": [3], "data_offsets": [16, 19]},
              "e": {"dtype": "F32", "shape": [0, 5], "data_offsets": [19, 19]}}
    data = bytes([0x00, 0x3c, 0x00, 0xfc, 0x80, 0x3f, 0, 0]) + struct.pack("<d", 1e300) + b"xyz"
    put(os.path.join(folder, "dtypes.json"), json.dumps(header, separators=(",", ":")).encode() +
        b"\0" + data)
    dtypes = ["F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64", "I32", "I16", "I8",
              "U64", "U32", "U16", "U8", "BOOL"]
    tokens = ['"%s"' % t for t in dtypes + ["dtype", "shape", "data_offsets", "__metadata__"]]
    tokens += ["[0,0]", "[]", "18446744073709551615", "9223372036854775807", "-1", "1.5",
               "\\u0000", "\\ud800", "\0"]
    write_dict("safetensors", "safetensors header fields and dtypes", tokens)

    # idx: plain, gzip'd by the harness, and gzip bytes in the input itself
    folder = os.path.join(corpus, "idx")
    fresh(folder)
    images, labels = idx([[0, 128, 255, 7], [1, 2, 3, 4], [9, 9, 9, 9]], 2, 2, [0, 9, 3])
    put(os.path.join(folder, "plain"), idx_input(0, 10, images, labels))
    put(os.path.join(folder, "harness_gzip"), idx_input(3, 10, images, labels))
    put(os.path.join(folder, "input_gzip"),
        idx_input(0, 10, gzip.compress(images, mtime=0), gzip.compress(labels, mtime=0)))
    write_textcls(corpus)
    print("wrote", corpus, "and", fixture)


if __name__ == "__main__":
    main()
