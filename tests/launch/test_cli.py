#!/usr/bin/env python3
"""The command line: help, version, `keys`, `plan`, `export` and `eval --logits`,
and the demo configs.

- `--help` / `-h` print the usage on stdout and exit 0; no arguments print it
  on stderr and exit 2; `--version` prints "pipetrain X.Y.Z".
- `keys` prints a Markdown table with one row per key of the schema
  (config/schema.c, read here as text), the same keys a checkpoint's
  config record holds, and every default it shows is accepted back from YAML;
  it takes no arguments.
- `export` writes safetensors (parsed here with json + struct) holding every
  parameter with its PyTorch name and shape for a small ViT and GPT, and the
  same floats as the checkpoint's parameter records; `model.init_from` reads
  it back.
- `eval --logits` writes one F32 tensor [test rows, classes]; `--hidden` one
  F32 tensor [test examples, T, d], the activation entering the head, from
  which the exported head's LayerNorm and linear layer give back the logits.
- configs/vit_fmnist.yaml and configs/gpt_kjv.yaml train 2 steps when their
  data is installed (run from the repository root, as their relative paths
  expect, with run.dir in a temporary directory); otherwise "skipped: ...".

usage: test_cli.py PIPETRAIN_BINARY
"""
import math
import json
import os
import shutil
import struct
import subprocess
import re
import signal
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_util as U  # noqa: E402
from cli_util import check  # noqa: E402

D, LAYERS, HEADS, PATCH, SIZE, CLASSES, CONTEXT = 16, 2, 2, 4, 8, 4, 16


def schema_keys():
    with open(os.path.join(U.REPO, "config", "schema.c")) as f:
        keys = re.findall(r'\{"([a-z_0-9]+\.[a-z_0-9]+)",\s*PT_K_', f.read())
    check(len(keys) > 40, "found only %d keys in config/schema.c", len(keys))
    return keys


def keys_table(h):
    r = h.run(["keys"]).expect(0)
    lines = r.out.splitlines()
    check(len(lines) > 2 and re.match(r"^\|\s*key\s*\|", lines[0]),
          "keys output does not start with a Markdown table header:\n%s", r.out[:500])
    check(re.match(r"^\|(\s*:?-+:?\s*\|)+$", lines[1]), "no Markdown separator row: %r", lines[1])
    cols = lines[0].count("|")
    rows = {}
    for line in lines[2:]:
        if not line.strip():
            continue
        check(line.startswith("|") and line.endswith("|") and line.count("|") == cols,
              "malformed table row (cells must not contain '|'): %r", line)
        cells = [c.strip() for c in line.strip("|").split("|")]
        m = re.match(r"^`([^`]+)`$", cells[0])
        check(m, "first cell is not a `key`: %r", line)
        check(m.group(1) not in rows, "key %s listed twice", m.group(1))
        rows[m.group(1)] = cells
    return rows


def test_help(h):
    for flag in ("--help", "-h"):
        r = h.run([flag]).expect(0, flag)
        check("usage: pipetrain" in r.out, "%s: no usage on stdout\n%s", flag, r.describe())
        for cmd in ("train", "eval", "export", "keys", "plan"):
            check(re.search(r"^\s+%s\b" % cmd, r.out, re.M), "%s: usage lacks '%s'", flag, cmd)
        check(r.err == "", "%s wrote on stderr: %r", flag, r.err)
        r = h.run([flag, "extra"]).expect(2, flag + " with an argument")
        r.one_error("takes no arguments", "'extra'", strict=False)


def test_no_arguments(h):
    r = h.run([]).expect(2)
    check("usage: pipetrain" in r.err, "no usage on stderr\n%s", r.describe())
    check(r.out == "", "usage went to stdout")


def test_version(h):
    r = h.run(["--version"]).expect(0)
    check(re.match(r"^pipetrain \d+\.\d+\.\d+\n$", r.out), "unexpected --version output %r", r.out)
    r = h.run(["--version", "extra"]).expect(2, "--version with an argument")
    r.one_error("--version takes no arguments", "'extra'", strict=False)


def test_keys_lists_every_schema_key(h):
    rows = keys_table(h)
    want = schema_keys()
    missing = [k for k in want if k not in rows]
    extra = [k for k in rows if k not in want]
    check(not missing and not extra, "keys table: missing %s, unknown %s", missing, extra)
    check(list(rows) == want, "keys table is not in schema order")
    for k, cells in rows.items():
        check(len(cells) == 4 and all(cells), "row of %s has an empty cell: %r", k, cells)


def test_keys_takes_no_arguments(h):
    """`keys` with anything after it is a usage error: nothing on stdout, one
    error line naming the argument, then the usage."""
    for extra in (["extra"], ["--set", "a=b"], ["x", "y"]):
        r = h.run(["keys"] + extra).expect(2, "keys " + " ".join(extra))
        r.one_error("keys takes no arguments", "'%s'" % extra[0], strict=False)
        check(r.out == "", "keys %s printed on stdout: %r", extra, r.out[:200])
        check("usage: pipetrain" in r.err, "no usage after the error:\n%s", r.describe())


def test_keys_match_checkpoint_config(h):
    """The config a checkpoint stores names exactly the keys `keys` lists."""
    run_dir = h.path("run")
    cfg = U.write_config(h, "c.yaml", U.tiny("vit", run_dir, **{"train.max_steps": "1"}))
    h.run(["train", cfg]).expect(0)
    _, _, recs = U.read_recfile(os.path.join(U.ckpt(run_dir, 1), "manifest"))
    text = json.loads(dict(recs)["manifest"])["config"]
    stored, section = [], None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line.rstrip(":")
        elif line.strip():
            stored.append(section + "." + line.strip().split(":", 1)[0])
    check(stored == list(keys_table(h)), "checkpoint config keys %s differ from `keys`", stored)


def test_keys_defaults_are_accepted(h):
    """Every key at the default `keys` shows, written as YAML, is a valid config."""
    rows = keys_table(h)
    keys = {}
    for k, cells in rows.items():
        m = re.match(r"^`(.*)`$", cells[1])
        check(m, "default of %s is not in backquotes: %r", k, cells[1])
        v = m.group(1)
        keys[k] = v if v == "''" else '"%s"' % v if not re.match(r"^[-+.\w]+$", v) else v
    cfg = U.write(h.path("defaults.yaml"), U.render(keys))
    run_dir = h.path("run")
    tiny = U.tiny("vit", run_dir, **{"train.max_steps": "1", "train.epochs": "1"})
    args = ["train", cfg]
    for k, v in tiny.items():
        args += ["--set", "%s=%s" % (k, v)]
    r = h.run(args)
    r.expect(0, "training from every default")
    check(U.checkpoints(run_dir) == ["step_0000000001"], "no checkpoint: %s",
          U.checkpoints(run_dir))


def test_readme_documents_every_key(h):
    readme = os.path.join(U.REPO, "README.md")
    if not os.path.exists(readme):
        return "skipped: no README.md in the repository"
    with open(readme) as f:
        text = f.read()
    missing = [k for k in schema_keys() if k not in text]
    check(not missing, "README.md does not document %s", missing)


# ------------------------------------------------------------------ export

def expected_tensors(kind):
    d, hidden = D, 4 * D
    out = {}
    if kind == "vit":
        tokens = (SIZE // PATCH) ** 2 + 1
        out.update({"embed.patch.weight": [d, PATCH * PATCH], "embed.patch.bias": [d],
                    "embed.cls": [1, 1, d], "embed.pos": [1, tokens, d]})
    else:
        out.update({"embed.tok.weight": [256, d], "embed.pos.weight": [CONTEXT, d]})
    for b in range(LAYERS):
        p = "blocks.%d." % b
        out.update({p + "attn.ln.weight": [d], p + "attn.ln.bias": [d],
                    p + "attn.qkv.weight": [3 * d, d], p + "attn.qkv.bias": [3 * d],
                    p + "attn.proj.weight": [d, d], p + "attn.proj.bias": [d],
                    p + "mlp.ln.weight": [d], p + "mlp.ln.bias": [d],
                    p + "mlp.fc1.weight": [hidden, d], p + "mlp.fc1.bias": [hidden],
                    p + "mlp.fc2.weight": [d, hidden], p + "mlp.fc2.bias": [d]})
    out.update({"head.ln.weight": [d], "head.ln.bias": [d]})
    if kind == "vit":
        out.update({"head.fc.weight": [CLASSES, d], "head.fc.bias": [CLASSES]})
    else:
        out["head.fc.weight"] = [256, d]
    return out


def tiny_keys(kind, run_dir, **extra):
    k = U.tiny(kind, run_dir, **{"train.max_steps": "4", "train.checkpoint_every": "4", **extra})
    k.update({"model.dim": str(D), "model.layers": str(LAYERS), "model.heads": str(HEADS)})
    if kind == "vit":
        k.update({"model.patch": str(PATCH), "data.image_size": str(SIZE),
                  "model.classes": str(CLASSES)})
    else:
        k["model.context"] = str(CONTEXT)
    return k


def export_case(kind):
    def t(h):
        run_dir = h.path("run")
        cfg = U.write_config(h, "c.yaml", tiny_keys(kind, run_dir))
        h.run(["train", cfg]).expect(0)
        ck = U.ckpt(run_dir, 4)
        out = h.path("w.safetensors")
        r = h.run(["export", ck, out]).expect(0)
        check(out in r.out, "export did not say what it wrote: %r", r.out)
        tensors, meta = U.read_safetensors(out)
        want = expected_tensors(kind)
        got = {k: v[1] for k, v in tensors.items()}
        check(set(got) == set(want), "tensor names: missing %s, unexpected %s",
              sorted(set(want) - set(got)), sorted(set(got) - set(want)))
        for name, shape in want.items():
            check(got[name] == shape, "%s has shape %s, expected %s", name, got[name], shape)
            check(tensors[name][0] == "F32", "%s has dtype %s", name, tensors[name][0])
        check(meta.get("model.kind") == kind, "metadata model.kind = %r", meta.get("model.kind"))
        # the same floats as the checkpoint's parameter records, unit by unit
        # (tensors of a unit are its parameter blob in order)
        params = {}
        for unit in U.unit_files(ck):
            for tag, payload in U.read_recfile(unit)[2]:
                if tag.endswith(".param"):
                    params[tag[:-6]] = payload
        for unit, blob in params.items():
            names = [n for n in want if n.startswith(unit + ".")]
            joined = b"".join(tensors[n][2] for n in names)
            check(joined == blob, "export of unit %s differs from its checkpoint record", unit)
        check(sum(len(v) for v in params.values()) == sum(len(v[2]) for v in tensors.values()),
              "export holds tensors that are in no unit")
        for name, (_, _, raw) in tensors.items():
            check(all(math.isfinite(x) for x in U.floats(raw)), "%s is not finite", name)
        # LayerNorm weights start at 1; after 4 steps they moved but stayed near it
        ln = U.floats(tensors["head.ln.weight"][2])
        check(any(x != 1.0 for x in ln) and all(0.5 < x < 1.5 for x in ln),
              "head.ln.weight does not look trained: %s", ln[:4])

        # round trip: init_from the export, one step at a learning rate too
        # small to move float32 weights: the same weights come back
        run2 = h.path("run2")
        cfg2 = U.write_config(h, "c2.yaml", tiny_keys(kind, run2, **{
            "model.init_from": out, "train.max_steps": "1", "train.lr": "1e-30",
            "train.min_lr": "0", "train.weight_decay": "0", "train.warmup_steps": "0"}))
        h.run(["train", cfg2]).expect(0)
        out2 = h.path("w2.safetensors")
        h.run(["export", U.ckpt(run2, 1), out2]).expect(0)
        t2, _ = U.read_safetensors(out2)
        for name, (_, _, raw) in tensors.items():
            a, b = U.floats(raw), U.floats(t2[name][2])
            worst = max(abs(x - y) for x, y in zip(a, b))
            check(worst < 1e-20, "%s changed by %g through init_from", name, worst)
    return t


def test_export_errors(h):
    run_dir = h.path("run")
    cfg = U.write_config(h, "c.yaml", tiny_keys("vit", run_dir))
    h.run(["train", cfg]).expect(0)
    ck = U.ckpt(run_dir, 4)
    r = h.run(["export", ck]).expect(2, "missing output argument")
    r.one_error(strict=False)
    r = h.run(["export", ck, h.path("a.st"), "extra"]).expect(2, "extra argument")
    r.one_error(strict=False)
    # an option where a path goes is refused, not written as a file of that
    # name (export CK --help made one called --help)
    for args in ([ck, "--help"], [ck, "-h"], ["--force", h.path("b.st")]):
        r = h.run(["export"] + args).expect(2, "export " + " ".join(args))
        r.one_error("export takes no options", strict=False)
    # ... named among more arguments too (export reads no config to --set)
    for args in ([ck, h.path("c.st"), "--set", "x=1"], [ck, "--set"]):
        r = h.run(["export"] + args).expect(2, "export " + " ".join(args))
        r.one_error("got '--set'", strict=False)
    check(not os.path.exists(h.path("--help")) and not os.path.exists(h.path("-h")),
          "export wrote a file named after an option")
    # the config comes first, and --set needs its KEY=VALUE
    r = h.run(["train", "--set", "train.lr=0.01", cfg]).expect(2, "train --set ... CONFIG")
    r.one_error("the config file comes first, before '--set'", strict=False)
    # eval's hint names its own options too
    r = h.run(["eval", "--checkpoint", ck, cfg]).expect(2, "eval --checkpoint before the config")
    r.one_error("the config file comes first, before '--checkpoint'", "[--checkpoint DIR | --init]",
                "[--report OUT.json]", strict=False)
    r = h.run(["train", cfg, "--set"]).expect(2, "train CONFIG --set")
    r.one_error("--set needs KEY=VALUE", strict=False)
    out = h.path("no-such-dir", "w.safetensors")
    r = h.run(["export", ck, out])
    check(r.rc in (1, 2), "export into a missing directory: status %d", r.rc)
    r.one_error("no-such-dir", strict=False)
    check(not os.path.exists(h.path("no-such-dir")), "export created the missing directory")
    # outputs never replace an input nor land in the checkpoint read (pruning
    # would take them along): export and eval --logits / --hidden alike
    before = U.snapshot(ck)
    for out in (os.path.join(ck, "manifest"), os.path.join(ck, "units-stage0.bin"),
                os.path.join(ck, "new.safetensors"), ck):
        r = h.run(["export", ck, out]).expect(2, "export onto " + out)
        r.one_error("the checkpoint directory '%s' that this command reads" % ck)
        for option in ("--logits", "--hidden"):
            r = h.run(["eval", cfg, "--checkpoint", ck, option, out]).expect(2, option + " " + out)
            r.one_error(option, "the checkpoint directory", strict=False)
    U.same_snapshot(before, U.snapshot(ck), "the checkpoint")
    # nor anywhere in a run's checkpoints, nor onto the files run.dir keeps
    # (a replaced lock would let a second job in)
    other = U.ckpt(run_dir, 3)
    shutil.copytree(ck, other)  # another checkpoint of the run (only written to, never read)
    whole = U.snapshot(run_dir)
    for out in (os.path.join(other, "units-stage0.bin"), os.path.join(other, "new.st"),
                os.path.join(run_dir, "checkpoints", "new.st")):
        r = h.run(["export", ck, out]).expect(2, "export into " + out)
        r.one_error("a run's checkpoints")
        r = h.run(["eval", cfg, "--checkpoint", ck, "--logits", out]).expect(2, "--logits " + out)
        r.one_error("a run's checkpoints", strict=False)
    # inspect of a run directory written with a '/' at its end names the
    # checkpoint without '//' in it
    r = h.run(["inspect", run_dir + "/"]).expect(0, "inspect RUN_DIR/")
    check(json.loads(r.out)["checkpoint"] == ck, "inspect RUN_DIR/ named %r" % json.loads(r.out)["checkpoint"])
    # (and the records of its resumes: RUN_DIR/resuming, which
    # train.resume=auto reads, and RUN_DIR/abandoned, moved into)
    for name in ("lock", "metrics.jsonl", "profile.json", "resuming", "abandoned"):
        out = os.path.join(run_dir, name)
        if name == "lock":
            U.write(out, "")
        r = h.run(["eval", cfg, "--logits", out]).expect(2, "--logits onto " + name)
        r.one_error("is one of the files run.dir", strict=False)
        r = h.run(["export", ck, out]).expect(2, "export onto " + name)
        r.one_error("is one of the files run.dir '%s' keeps" % run_dir)  # as it is written
    U.same_snapshot(whole, U.snapshot(run_dir), "run.dir")
    # nor onto another run's: its lock replaced let a second job train in
    # its run.dir beside the first (snapshot() leaves the lock out: compared
    # by hand)
    another = h.path("another-run")
    shutil.copytree(run_dir, another)
    U.write(os.path.join(another, "lock"), "pid 1 on elsewhere (job x)\n")
    theirs = U.snapshot(another)
    for name in ("lock", "metrics.jsonl", "profile.json", "resuming", "abandoned"):
        out = os.path.join(another, name)
        r = h.run(["export", ck, out]).expect(2, "export onto another run's " + name)
        r.one_error("is one of the files the run directory '%s' keeps" % another)
        r = h.run(["eval", cfg, "--checkpoint", ck, "--hidden", out]).expect(2, "--hidden onto " + name)
        r.one_error("--hidden", "is one of the files the run directory", strict=False)
    U.same_snapshot(theirs, U.snapshot(another), "another run's run.dir")
    check(open(os.path.join(another, "lock")).read() == "pid 1 on elsewhere (job x)\n",
          "another run's lock was replaced")
    # a spelling longer than the checks' buffers is refused, never checked cut
    # short (such a --logits replaced a run's lock; such an export OUT, the
    # run's data)
    def long_spelling(path):
        return os.path.join(os.path.dirname(path), "./" * 530 + os.path.basename(path))
    for out in (os.path.join(another, "lock"), os.path.join(run_dir, "metrics.jsonl")):
        r = h.run(["eval", cfg, "--logits", long_spelling(out)]).expect(2, "a long --logits")
        r.one_error("--logits", "bytes long", strict=False)
        r = h.run(["export", ck, long_spelling(out)]).expect(2, "a long export OUT")
        r.one_error("export: OUT", "bytes long")
    r = h.run(["export", long_spelling(ck), h.path("long.st")]).expect(2, "a long CHECKPOINT_DIR")
    r.one_error("export: CHECKPOINT_DIR", "bytes long")
    r = h.run(["eval", cfg, "--checkpoint", long_spelling(ck)]).expect(2, "a long --checkpoint")
    r.one_error("--checkpoint", "bytes long", strict=False)
    r = h.run(["eval", long_spelling(cfg)]).expect(2, "a long config path")
    r.one_error("config", "bytes long", strict=False)
    U.same_snapshot(theirs, U.snapshot(another), "another run's run.dir")
    U.same_snapshot(whole, U.snapshot(run_dir), "run.dir")
    check(open(os.path.join(another, "lock")).read() == "pid 1 on elsewhere (job x)\n",
          "another run's lock was replaced")
    check(not os.path.exists(h.path("long.st")), "an export from a long checkpoint path wrote")
    with open(cfg) as f:
        text = f.read()
    r = h.run(["eval", cfg, "--logits", cfg]).expect(2, "--logits onto the config")
    r.one_error("--logits '%s' is '%s', an input of this command" % (cfg, cfg), strict=False)
    check(open(cfg).read() == text, "the config was overwritten")
    # a file of another kind at an output (a config, a script, named by
    # mistake; no input of the command) is not replaced: export and --logits
    # / --hidden replace a safetensors file, --report JSON, or an empty file
    other_cfg, script, report = h.path("other.yaml"), h.path("go.sh"), h.path("r.json")
    U.write(other_cfg, text)
    U.write(script, "#!/bin/sh\necho hello\n")
    U.write(report, '{"test_accuracy": 0.5}\n')
    kept = {p: U.read_bytes(p) for p in (other_cfg, script, report)}
    for out in kept:
        r = h.run(["export", ck, out]).expect(2, "export onto " + out)
        r.one_error("export '%s' holds a file that is not a safetensors file" % out, "not replaced")
        for option in ("--logits", "--hidden"):
            r = h.run(["eval", cfg, "--checkpoint", ck, option, out]).expect(2, option + " onto " + out)
            r.one_error("%s '%s' holds a file that is not a safetensors file" % (option, out), strict=False)
        if out != report:
            r = h.run(["eval", cfg, "--checkpoint", ck, "--report", out]).expect(2, "--report onto " + out)
            r.one_error("--report '%s' holds a file that is not a JSON object" % out, strict=False)
    check(all(U.read_bytes(p) == b for p, b in kept.items()), "a file of another kind was replaced")
    first, empty = h.path("first.st"), h.path("empty.st")
    h.run(["export", ck, first]).expect(0)
    U.write(empty, "")
    h.run(["export", ck, empty]).expect(0)
    check(U.read_bytes(empty) == U.read_bytes(first), "an empty file at OUT was not replaced by the export")
    h.run(["export", ck, first]).expect(0)  # an earlier export
    h.run(["eval", cfg, "--checkpoint", ck, "--logits", first, "--report", report]).expect(0)
    with open(report) as f:
        check("classes" in json.load(f), "the earlier JSON at --report was not replaced by the report")


def test_train_inputs_are_not_run_files(h):
    """train never writes over nor removes one of its own inputs: a config,
    data file or vocabulary that is one of the files run.dir keeps (its
    lock, logs and profiles), or lies in run.dir's checkpoints, or is a
    link to such a file, is refused (exit 2, naming the key; by `plan`
    too) and left as it was; the same files elsewhere train."""
    corpus = "".join("%d the beginning of the earth was without form and void\n" % i
                     for i in range(300))
    text_keys = {"data.kind": "text", "data.text": None}
    places = {  # a bert's labelled texts must be named *.jsonl (or *.tsv)
        "gpt": ("metrics.jsonl", "profile.json", "lock", "samples-rank0.jsonl",
                "op_profile-rank0.json", "metrics-rank0.jsonl", "resuming", "abandoned",
                os.path.join("checkpoints", "step_0000000099", "in.txt"),
                os.path.join("checkpoints", "in.txt"), "link"),
        "bert": ("metrics.jsonl", "samples-rank0.jsonl", "metrics-rank0.jsonl",
                 os.path.join("checkpoints", "step_0000000099", "in.jsonl"), "link.jsonl")}
    for kind in ("gpt", "bert"):
        for where in places[kind]:
            run_dir = h.path("run-%s-%s" % (kind, where.replace("/", "_")))
            at = os.path.join(run_dir, where)
            os.makedirs(os.path.dirname(at), exist_ok=True)
            if kind == "gpt":
                k = tiny_keys("gpt", run_dir, **text_keys)
                key, content = "data.text", corpus
            else:
                k = tiny_keys("gpt", run_dir)
                k.update({"model.kind": "bert", "data.kind": "text_classification",
                          "model.classes": "3", "data.synthetic_examples": None,
                          "sample.length": None})
                k.update(U.bert_files(h, 40, 5))
                key = "data.train_file"
                content = "".join(json.dumps({"text": t, "label": l}) + "\n" for l, t in
                                  (line.split("\t", 1) for line in
                                   open(k["data.train_file"]).read().splitlines()))
            if where.startswith("link"):  # a link to the run's metrics.jsonl
                target = os.path.join(run_dir, "metrics.jsonl")
                U.write(target, content)
                os.symlink("metrics.jsonl", at)
            else:
                U.write(at, content)
            k[key] = at
            cfg = U.write_config(h, "c-%s.yaml" % kind, k)
            before = U.snapshot(run_dir)
            locked = open(at).read() if where == "lock" else None
            for cmd in ("plan", "train"):
                r = h.run([cmd, cfg]).expect(2, "%s: %s %s at %s" % (cmd, kind, key, where))
                r.one_error(key, at, "checkpoints" if "checkpoints" in where
                            else "is one of the files run.dir", strict=False)
            U.same_snapshot(before, U.snapshot(run_dir), "run.dir")
            if locked is not None:
                check(open(at).read() == locked, "the input at run.dir/lock was changed")
    # the config itself as run.dir's profile.json
    run_dir = h.path("run-config")
    os.makedirs(run_dir)
    cfg = U.write(os.path.join(run_dir, "profile.json"),
                  U.render(tiny_keys("gpt", run_dir)))
    before = U.snapshot(run_dir)
    r = h.run(["train", cfg]).expect(2, "the config as run.dir's profile.json")
    r.one_error("the config file '%s'" % cfg, "is one of the files run.dir", strict=False)
    U.same_snapshot(before, U.snapshot(run_dir), "run.dir")
    # nor is a file written through a link at one of run.dir's names: the
    # link's target is refused as run.dir's, naming the key, and unchanged
    for name in ("profile.json", "metrics.jsonl"):
        run_dir = h.path("run-link-" + name)
        os.makedirs(run_dir)
        mine = U.write(h.path("mine-" + name), "the user's\n")
        os.symlink(mine, os.path.join(run_dir, name))
        cfg = U.write_config(h, "link.yaml", tiny_keys("gpt", run_dir))
        r = h.run(["train", cfg]).expect(2, "a link at run.dir's " + name)
        r.one_error("run.dir: ", "is a symbolic link", strict=False)
        check(open(mine).read() == "the user's\n", "the file a link at %s leads to changed", name)
    # files a model directory may hold beside model.init_from are looked at
    # only as far as they resolve: a link there that loops is no input
    # train reads (it was refused, naming no line, when run.dir existed)
    first = h.path("run-first")
    h.run(["train", U.write_config(h, "first.yaml", tiny_keys("gpt", first))]).expect(0)
    w = h.path("w")
    os.makedirs(w)
    h.run(["export", U.ckpt(first, 4), os.path.join(w, "init.safetensors")]).expect(0)
    os.symlink("config.json", os.path.join(w, "config.json"))
    run_dir = h.path("run-init")
    os.makedirs(run_dir)
    cfg = U.write_config(h, "init.yaml", tiny_keys("gpt", run_dir, **{
        "model.init_from": os.path.join(w, "init.safetensors")}))
    h.run(["train", cfg]).expect(0, "init_from beside a looping config.json link")
    # and an export may replace a model.safetensors beside a run's
    # init_from file, again and again: that file is no input of the run
    for _ in range(2):
        h.run(["export", U.ckpt(run_dir, 4), os.path.join(w, "model.safetensors")]).expect(
            0, "export to model.safetensors beside init_from")
    # the same names outside a run directory are plain inputs
    elsewhere = h.path("elsewhere")
    os.makedirs(os.path.join(elsewhere, "checkpoints"))
    text = U.write(os.path.join(elsewhere, "metrics.jsonl"), corpus)
    cfg = U.write_config(h, "fine.yaml", tiny_keys("gpt", h.path("run-fine"), **{
        "data.kind": "text", "data.text": text}))
    h.run(["train", cfg]).expect(0, "data.text named metrics.jsonl outside run.dir")
    check(open(text).read() == corpus, "an input outside run.dir was changed")


def test_run_dir_of_someone_else(h):
    """A run.dir that exists but that no run has used (it holds no lock
    file) and that holds a regular file under one of the names of a run's
    logs or profile, or a file named lock that is no run's lock, is
    refused (exit 2, naming run.dir and the file; by `plan` too) and left
    as it was, lock and all: the run would append to or replace the user's
    file. So is
    anything named resuming there (the first save removes the marker of
    that name). An empty file is nothing to lose (a start killed between
    making its log and its lock leaves one) and trains. Other
    files there (a config beside its run) train and stay as they were; so
    does the profile.json that pipeline.profile names, and a run.dir whose
    lock a run made (its second run), or that holds a run's checkpoints
    (its lock removed by hand)."""
    names = ("metrics.jsonl", "profile.json", "samples-rank0.jsonl", "metrics-rank3.jsonl",
             "op_profile-rank1.json", "lock", "resuming", "resuming-link")
    for name in names:
        run_dir = h.path("theirs-" + name)
        os.makedirs(run_dir)
        if name == "resuming-link":  # the first save would remove it (whatever it is)
            name = "resuming"
            os.symlink(h.path("theirs.yaml"), os.path.join(run_dir, name))
        else:
            U.write(os.path.join(run_dir, name), "the user's own\n")
        cfg = U.write_config(h, "theirs.yaml", tiny_keys("gpt", run_dir))
        r = h.run(["plan", cfg]).expect(2, "plan of a run.dir holding someone's " + name)
        r.one_error("run.dir", run_dir, name, strict=False)
        r = h.run(["train", cfg]).expect(2, "a run.dir holding someone's " + name)
        r.one_error("run.dir", run_dir, name, strict=False)
        check(sorted(os.listdir(run_dir)) == [name], "the refused run left %s in run.dir",
              sorted(os.listdir(run_dir)))
        check(os.path.islink(os.path.join(run_dir, name)) or
              open(os.path.join(run_dir, name)).read() == "the user's own\n",
              "the user's %s changed", name)
    # an empty metrics.jsonl (nothing written in it: a start of an older
    # pipetrain, which opened its logs before its lock, killed before it)
    # is no one's: the next start trains there
    run_dir = h.path("killed-before-its-lock")
    os.makedirs(run_dir)
    U.write(os.path.join(run_dir, "metrics.jsonl"), "")
    cfg = U.write_config(h, "killed.yaml", tiny_keys("gpt", run_dir))
    h.run(["train", cfg]).expect(0, "a run.dir holding only an empty metrics.jsonl")
    # a config and notes beside the run: trained, left as they were
    run_dir = h.path("with-config")
    os.makedirs(run_dir)
    cfg = U.write_config(h, "beside.yaml", tiny_keys("gpt", run_dir))
    shutil.copy(cfg, os.path.join(run_dir, "config.yaml"))
    U.write(os.path.join(run_dir, "notes.txt"), "why this run\n")
    before = U.snapshot(run_dir)
    h.run(["train", os.path.join(run_dir, "config.yaml")]).expect(0, "a run.dir holding its config")
    after = U.snapshot(run_dir)
    for k in before:
        check(after.get(k) == before[k], "%s in run.dir changed", k)
    # its second run (the lock is there): trained again
    h.run(["train", cfg, "--set", "train.max_steps=6", "--set", "train.resume=auto"]).expect(
        0, "a run.dir's second run")
    # and its third, its lock removed by hand (its checkpoints say it is a run's)
    os.unlink(os.path.join(run_dir, "lock"))
    h.run(["train", cfg, "--set", "train.max_steps=8", "--set", "train.resume=auto"]).expect(
        0, "a run.dir whose lock was removed")
    # a profile copied in and named by pipeline.profile
    run_dir = h.path("with-profile")
    os.makedirs(run_dir)
    mine = os.path.join(run_dir, "profile.json")
    shutil.copy(os.path.join(h.path("with-config"), "profile.json"), mine)
    cfg = U.write_config(h, "profiled.yaml", tiny_keys("gpt", run_dir, **{
        "pipeline.profile": mine}))
    h.run(["train", cfg]).expect(0, "a run.dir holding the profile pipeline.profile names")


def test_cache_disk_dir_in_checkpoints(h):
    """cache.disk_dir in a checkpoint (its step directory), or in a run's
    checkpoints/, is refused (exit 2, naming the key): a pruning removes
    whole step directories, the disk tier's file with them, and a
    checkpoint holds only its own files. Nothing there changes. `plan`
    refuses it alike. A directory of its own trains."""
    first = h.path("ckpt-run")
    h.run(["train", U.write_config(h, "first.yaml", tiny_keys("gpt", first))]).expect(
        0, "a run with a checkpoint")
    step = os.path.join(first, "checkpoints", U.checkpoints(first)[-1])
    own = h.path("own-disk")
    os.makedirs(own)
    before = U.snapshot(first)
    keys = {"freeze.policy": "schedule", "freeze.start": "0", "cache.enabled": "true",
            "cache.disk_gib": "0.01", "cache.memory_gib": "0.000001"}
    for name, where, rc in (("step", step, 2), ("checkpoints", os.path.dirname(step), 2),
                            ("below-step", os.path.join(step, "."), 2), ("own", own, 0)):
        run_dir = h.path("disk-" + name)
        cfg = U.write_config(h, "disk-%s.yaml" % name, tiny_keys("gpt", run_dir, **dict(
            keys, **{"cache.disk_dir": where})))
        for cmd in ("plan", "train"):
            r = h.run([cmd, cfg]).expect(rc, "%s of cache.disk_dir %s" % (cmd, name))
            if rc:
                r.one_error("cache.disk_dir", strict=False)
                check(not os.path.exists(run_dir), "a refused %s left %s", cmd, run_dir)
    after = U.snapshot(first)
    check(after == before, "the checkpointed run changed: %s",
          sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)))


def head_logits(kind, hidden, tokens, weights):
    """the logits the exported head computes from the hidden states
    (a flat list, [examples, tokens, D]): LayerNorm (eps 1e-5) then the linear
    layer, of the [CLS] position for vit and of every position for gpt"""
    w = {k: U.floats(v[2]) for k, v in weights.items()}
    W, bias = w["head.fc.weight"], w.get("head.fc.bias")
    out = []
    for e in range(len(hidden) // (tokens * D)):
        for t in range(1 if kind == "vit" else tokens):
            x = hidden[(e * tokens + t) * D:(e * tokens + t + 1) * D]
            mean = sum(x) / D
            var = sum((v - mean) ** 2 for v in x) / D
            z = [(v - mean) / math.sqrt(var + 1e-5) * w["head.ln.weight"][i] + w["head.ln.bias"][i]
                 for i, v in enumerate(x)]
            for c in range(len(W) // D):
                out.append(sum(W[c * D + i] * z[i] for i in range(D)) + (bias[c] if bias else 0.0))
    return out


def logits_case(kind, rows, classes):
    def t(h):
        run_dir = h.path("run")
        cfg = U.write_config(h, "c.yaml", tiny_keys(kind, run_dir))
        h.run(["train", cfg]).expect(0)
        out, hid = h.path("logits.safetensors"), h.path("hidden.safetensors")
        r = h.run(["eval", cfg, "--logits", out, "--hidden", hid]).expect(0)
        check(U.ckpt(run_dir, 4) in r.out, "eval did not use the newest checkpoint:\n%s", r.out)
        m = re.search(r"examples (\d+)", r.out)
        check(m, "eval printed no example count:\n%s", r.out)
        tensors, _ = U.read_safetensors(out)
        check(list(tensors) == ["logits"], "tensors %s", list(tensors))
        dtype, shape, raw = tensors["logits"]
        check(dtype == "F32" and shape == [rows, classes],
              "logits are %s %s, expected F32 [%d, %d]", dtype, shape, rows, classes)
        per = rows // int(m.group(1))
        check(per * int(m.group(1)) == rows, "%d rows for %s examples", rows, m.group(1))
        values = U.floats(raw)
        check(all(math.isfinite(x) for x in values), "non-finite logits")
        check(len(set(values)) > classes, "logits are constant")
        check(re.search(r"test loss [\d.]+", r.out), "no test loss printed:\n%s", r.out)
        # the hidden states: what the head turns into those logits
        tensors, _ = U.read_safetensors(hid)
        check(list(tensors) == ["hidden"], "tensors %s", list(tensors))
        dtype, shape, raw = tensors["hidden"]
        tokens = (SIZE // PATCH) ** 2 + 1 if kind == "vit" else CONTEXT
        examples = int(m.group(1))
        check(dtype == "F32" and shape == [examples, tokens, D],
              "hidden states are %s %s, expected F32 [%d, %d, %d]", dtype, shape, examples, tokens, D)
        hidden = U.floats(raw)
        check(all(math.isfinite(x) for x in hidden), "non-finite hidden states")
        h.run(["export", U.ckpt(run_dir, 4), h.path("w.safetensors")]).expect(0)
        mine = head_logits(kind, hidden, tokens, U.read_safetensors(h.path("w.safetensors"))[0])
        worst = max(abs(a - b) for a, b in zip(mine, values)) / max(abs(b) for b in values)
        check(len(mine) == len(values) and worst < 1e-4,
              "the head of the hidden states gives other logits: rel err %.2e", worst)
        # the same logits again (eval is deterministic), through --checkpoint
        out2 = h.path("logits2.safetensors")
        h.run(["eval", cfg, "--checkpoint", U.ckpt(run_dir, 4), "--logits", out2]).expect(0)
        check(U.read_bytes(out) == U.read_bytes(out2), "two evals of one checkpoint differ")
    return t


def test_plan_writes_nothing(h):
    run_dir = h.path("run")
    cfg = U.write_config(h, "c.yaml", tiny_keys("vit", run_dir))
    r = h.run(["plan", cfg]).expect(0)
    check(r.out.strip(), "plan printed nothing")
    check(not os.path.exists(run_dir), "plan created run.dir")


def test_eval_under_training_memory(h):
    """An evaluation keeps no gradients, moments or saved activations: under
    a pipeline.memory_gib that holds the model for inference but not for
    training, eval (of a checkpoint and --init) runs, while train and plan
    (which plans training) are refused naming the key."""
    run_dir = h.path("run")
    keys = {"model.dim": "32", "model.layers": "4", "model.heads": "2", "model.patch": "7",
            "data.kind": "synthetic_images", "data.synthetic_examples": "240",
            "train.batch": "15", "train.epochs": "1", "train.eval_examples": "48",
            "run.dir": run_dir, "run.threads": "1"}
    cfg = U.write_config(h, "c.yaml", keys)
    h.run(["train", cfg]).expect(0)
    tight = ["--set", "pipeline.memory_gib=0.0007"]
    for args in (["eval", cfg], ["eval", cfg, "--init"]):
        r = h.run(args + tight).expect(0, " ".join(args) + " under a training-sized limit")
        check("test accuracy" in r.out, "eval printed no accuracy:\n%s", r.out)
    for cmd in ("plan", "train"):
        r = h.run([cmd, cfg, "--set", "run.dir=" + h.path("run2")] + tight).expect(2, cmd)
        check("pipeline.memory_gib" in r.err, "%s did not name the key:\n%s", cmd, r.err)


def test_set_twice_noted(h):
    """A key --set gives more than once takes the last value (as argparse's
    last option wins), with one note naming each such key and its values,
    from train, plan and eval; a --set over the config file's line, or of
    two different keys, gives none."""
    run_dir = h.path("run")
    cfg = U.write_config(h, "c.yaml", U.tiny("vit", run_dir, **{"train.max_steps": "2"}))
    twice = ["--set", "model.dim=8", "--set", "train.lr=0.002", "--set", "model.dim=16"]
    for cmd in ("train", "plan", "eval"):
        r = h.run([cmd, cfg] + twice).expect(0, cmd)
        notes = [l for l in r.err.splitlines() if "more than once" in l]
        check(len(notes) == 1 and "model.dim 8 -> 16" in notes[0] and "train.lr" not in notes[0],
              "%s: not one note of model.dim 8 -> 16:\n%s", cmd, r.err)
    # the last value is the one used: the same parameter count as 16 alone
    once = h.run(["train", cfg, "--set", "run.dir=" + h.path("once"), "--set",
                  "model.dim=16"]).expect(0, "once")
    again = h.run(["train", cfg, "--set", "run.dir=" + h.path("again")] + twice).expect(0, "twice")
    count = re.compile(r"([0-9]+) parameters")
    check(count.findall(once.out + once.err) == count.findall(again.out + again.err) and
          count.findall(once.out + once.err), "the last --set is not the one used:\n%s\n%s",
          once.out + once.err, again.out + again.err)
    for args in (["--set", "model.dim=16"], ["--set", "model.dim=16", "--set", "train.lr=0.002"]):
        r = h.run(["plan", cfg] + args).expect(0, str(args))
        check("more than once" not in r.err, "%s: a note:\n%s", args, r.err)
    # long values (paths of 240 bytes and more) are cut, and keys past what
    # the note holds are counted: never no note at all
    long_a, long_b = h.path("a" * 240, "x"), h.path("b" * 240, "x")
    many = ["--set", "run.dir=" + long_a, "--set", "run.dir=" + long_b]
    for i in range(40):
        many += ["--set", "data.synthetic_examples=%d" % (40 + i)]
    r = h.run(["plan", cfg] + many).expect(0, "long values")
    notes = [l for l in r.err.splitlines() if "more than once" in l]
    check(len(notes) == 1 and notes[0].count("run.dir ") == 1 and "..." in notes[0] and
          "data.synthetic_examples 40 -> 41" in notes[0] and re.search(r"and [0-9]+ more$", notes[0]),
          "long values: not one note with the cut run.dir and a count:\n%s", r.err)
    # a value cut at 80 bytes is cut between UTF-8 characters (3-byte ones
    # from byte 79: a cut inside one is no text), a tab is escaped, and a
    # whole number is written whole (600, not 6e+02)
    wide = "run.dir=" + "xx" + "\u20ac" * 40  # with its quote, byte 80 falls inside a euro sign
    r = h.run(["plan", cfg, "--set", wide, "--set", wide + "y", "--set", "sample.prompt=a\tb",
               "--set", "sample.prompt=c", "--set", "run.timeout_s=600", "--set",
               "run.timeout_s=700"]).expect(0, "cut values")
    note = [l for l in r.err.splitlines() if "more than once" in l]
    check(len(note) == 1 and "\t" not in note[0] and "a\\tb" in note[0] and
          "run.timeout_s 600 -> 700" in note[0], "the note of odd values:\n%r", r.err)
    check("\ufffd" not in note[0] and "\\x" not in note[0],
          "a character cut in the note: %r", note)


def test_warmup_note(h):
    """The note that the learning rate never reaches train.lr comes where the
    warm-up covers every update (warmup_steps >= the run's steps) and is one:
    a warm-up of 1 step is none (update 0 uses lr (1/1 + 0) = train.lr), and
    one shorter than the run reaches the peak. Every logged rate is checked
    against the note: below train.lr throughout where noted."""
    for warmup, steps, noted in ((1, 1, False), (1, 3, False), (2, 3, False), (3, 3, True),
                                 (5, 3, True), (2, 2, True), (4, 1, True)):
        name = "w%d-s%d" % (warmup, steps)
        cfg = U.write_config(h, name + ".yaml", U.tiny("vit", h.path(name), **{
            "train.warmup_steps": str(warmup), "train.max_steps": str(steps),
            "train.lr": "0.003", "train.min_lr": "0.003", "train.checkpoint_every": "0"}))
        r = h.run(["train", cfg]).expect(0, name)
        got = "never reaches train.lr" in r.err + r.out
        check(got == noted, "%s: note %s, expected %s\n%s", name, got, noted, r.err)
        # said as every other note is, with one noun per count
        said = "pipetrain: note: train.warmup_steps = %d is not below the run's %d step%s: " % (
            warmup, steps, "" if steps == 1 else "s")
        check(not noted or said in r.err, "%s: the note is not %r:\n%s", name, said, r.err)
        lrs = [float(m) for m in re.findall(r" lr ([0-9.e+-]+) ", r.out + r.err)]
        check(len(lrs) == steps, "%s: %d logged rates, expected %d", name, len(lrs), steps)
        check(noted == all(x < 0.003 * (1 - 1e-6) for x in lrs),
              "%s: the rates %s do not agree with the note (%s)", name, lrs, noted)


def test_freeze_start_past_the_end_noted(h):
    """The note that no block freezes while the run trains comes exactly
    where the first freeze decision (freeze.start epochs or steps) is at or
    after the run's last step: checked against the freeze decisions the
    run logs (a fresh tiny run: 5 steps an epoch, 3 epochs, 15 steps)."""
    cases = (("schedule", "step", 14, None, False), ("schedule", "step", 15, None, True),
             ("schedule", "step", 40, None, True), ("auto", "epoch", 2, None, False),
             ("auto", "epoch", 3, None, True), ("schedule", "epoch", 1, 6, False),
             ("schedule", "epoch", 2, 10, True), ("schedule", "step", 0, None, False))
    for policy, unit, start, steps, noted in cases:
        name = "%s-%s-%d-%s" % (policy, unit, start, steps)
        keys = {"freeze.policy": policy, "freeze.unit": unit, "freeze.start": str(start)}
        if steps:
            keys["train.max_steps"] = str(steps)
        cfg = U.write_config(h, name + ".yaml", U.tiny("vit", h.path(name), **keys))
        r = h.run(["train", cfg]).expect(0, name)
        got = "no block freezes while it trains" in r.err
        check(got == noted, "%s: note %s, expected %s\n%s", name, got, noted, r.err)
        check(not noted or "pipetrain: note: freeze.start = " in r.err, "%s: not said as the other "
              "notes are:\n%s", name, r.err)
        with open(os.path.join(h.path(name), "metrics.jsonl")) as f:
            recs = [json.loads(x) for x in f]
        last = max(x["step"] for x in recs if x.get("event") == "step")
        early = [x["step"] for x in recs if x.get("event") == "freeze" and x["step"] < last]
        check(noted == (not early), "%s: decisions before the last step %d at %s, noted %s",
              name, last, early, noted)


def long_run(h, name, **keys):
    """A config whose run trains far longer than a test waits."""
    return U.write_config(h, name + ".yaml", U.tiny("vit", h.path(name), **dict({
        "train.epochs": "100000", "train.log_every": "1000", "train.eval_every": "0",
        "train.checkpoint_every": "0", "sample.length": None}, **keys)))


def stop_after(p, secs, sig=signal.SIGTERM):
    """Sends sig to process p after secs; its exit status (never waits more
    than 120 s)."""
    time.sleep(secs)
    p.send_signal(sig)
    try:
        return p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise U.Failure("still running 120 s after signal %d" % sig)


def test_closed_standard_streams(h):
    """A train started with a standard stream closed (`2>&-`, and all three)
    writes its progress nowhere rather than into the first file it opens:
    before, stderr's number went to metrics.jsonl (lines that are not JSON)
    or, with run.metrics off, to the run's lock (overwriting who holds it).
    plan and keys with stdout closed still fail to print, exit 1."""
    for metrics, closes in (("true", "2>&-"), ("false", "2>&-"), ("true", "<&- >&- 2>&-"),
                            ("false", "<&- >&- 2>&-")):
        name = "closed-%s-%d" % (metrics, len(closes))
        cfg = U.write_config(h, name + ".yaml", U.tiny("vit", h.path(name), **{
            "run.metrics": metrics}))
        p = subprocess.run(["sh", "-c", 'exec "$0" train "$1" ' + closes, h.binary, cfg],
                           env=U.sanitizer_env(), timeout=240)
        check(p.returncode == 0, "%s: exit %d", name, p.returncode)
        for top, _, files in os.walk(h.path(name)):
            for f in files:
                with open(os.path.join(top, f), "rb") as fh:
                    text = fh.read()
                check(b"epoch 1/" not in text and b"pipetrain: vit" not in text,
                      "%s: %s holds progress lines", name, os.path.join(top, f))
        if metrics == "true":
            with open(os.path.join(h.path(name), "metrics.jsonl")) as f:
                for line in f:
                    try:
                        json.loads(line)
                    except ValueError:
                        raise U.Failure("%s: metrics.jsonl holds %r" % (name, line[:200]))
        check(U.checkpoints(h.path(name)), "%s: no checkpoint", name)
    # a command whose result is printed, with stdout closed: that write
    # still fails, and is said, exit 1 (stdout is not made a sink)
    cfg = U.write_config(h, "plan.yaml", U.tiny("vit", h.path("plan-run")))
    for args in (["plan", cfg], ["keys"]):
        p = subprocess.run(["sh", "-c", 'exec "$0" "$@" >&-', h.binary] + args, env=U.sanitizer_env(),
                           capture_output=True, text=True, errors="replace", timeout=240)
        check(p.returncode == 1 and "cannot write to stdout" in p.stderr,
              "%s with stdout closed: exit %d\n%s", args[0], p.returncode, p.stderr[-1500:])


def test_stderr_reader_gone(h):
    """A train whose stderr is a pipe nobody reads any more (`2>&1 | head`,
    a tee that died) goes on training, and a stop signal still saves a
    checkpoint and exits 130; before, the next progress line or the stop
    handler's own line ended it by SIGPIPE with nothing saved."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
        name = "gone-%d" % sig
        cfg = long_run(h, name, **{"train.log_every": "1"})
        r, w = os.pipe()
        p = subprocess.Popen([h.binary, "train", cfg], stdout=subprocess.DEVNULL, stderr=w,
                             stdin=subprocess.DEVNULL, env=U.sanitizer_env(), cwd=h.dir)
        os.close(w)
        os.read(r, 10)  # the first line has begun: then the reader goes
        os.close(r)
        rc = stop_after(p, 1.0, sig)
        check(rc == 130, "signal %d with the reader gone: exit %d (expected 130)", sig, rc)
        check(U.checkpoints(h.path(name)), "signal %d with the reader gone: no checkpoint", sig)


def test_notes_escape_the_run_dir(h):
    """A run.dir holding a carriage return or a right-to-left override (both
    allowed in a path) is escaped in the notes that name it ("no checkpoint
    in ... yet", "done: ... checkpoints in ..."), as errors escape it: before,
    the carriage return redrew the line and the override reversed it."""
    cfg = U.write_config(h, "odd.yaml", U.tiny("vit", h.path("plain")))
    r = h.run(["train", cfg, "--set", "run.dir=" + h.path("odd\rname\u202edir"), "--set",
               "train.resume=auto"]).expect(0, "train")
    check("no checkpoint in" in r.err and "done:" in r.err, "the notes are missing:\n%s", r.err)
    check("\r" not in r.err and "\u202e" not in r.err, "raw bytes of run.dir on stderr: %r", r.err)


def test_stop_while_the_config_pipe_is_read(h):
    """A stop signal while train still reads its config from a slow pipe
    (`train <(generate-config)`) is a stop, not bad input: the read goes on
    and the run stops after its first step with a checkpoint, exit 130
    (before: exit 2, "cannot read config: Interrupted system call")."""
    cfg = long_run(h, "slow-pipe")
    r, w = os.pipe()
    p = subprocess.Popen([h.binary, "train", "/dev/fd/%d" % r], pass_fds=(r,), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                         env=U.sanitizer_env(), cwd=h.dir)
    os.close(r)
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    os.write(w, open(cfg, "rb").read())
    os.close(w)
    out, err = p.communicate(timeout=120)
    check(p.returncode == 130 and "stopped by signal 15 after step 1" in err,
          "exit %d (expected 130, stopped after step 1)\n%s", p.returncode, U.tail(err, 1500))
    check(U.checkpoints(h.path("slow-pipe")) == ["step_%010d" % 1], "checkpoints %s",
          U.checkpoints(h.path("slow-pipe")))


def test_bus_error_every_command(h):
    """SIGBUS (a mapped checkpoint or weights file cut short by another
    process, or its device failing) ends every command with a message and
    exit 1, as it ends train: eval, export and inspect died with the signal
    and a core dump. eval and plan are held reading their config from a
    pipe when the signal comes; export and inspect get the same handler at
    the same place in main, but nothing holds them still for a test."""
    for cmd in ("eval", "plan"):
        r, w = os.pipe()
        p = subprocess.Popen([h.binary, cmd, "/dev/fd/%d" % r], pass_fds=(r,), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             errors="replace", env=U.sanitizer_env(), cwd=h.dir)
        os.close(r)
        time.sleep(0.5)
        p.send_signal(signal.SIGBUS)
        out, err = p.communicate(timeout=60)
        os.close(w)
        check(p.returncode == 1 and "error: SIGBUS: a file this process had mapped" in err,
              "%s: exit %d (expected 1 and the SIGBUS message)\n%s", cmd, p.returncode, U.tail(err, 800))


def test_stop_signals_blocked_by_the_parent(h):
    """Stop signals that the parent had blocked (exec passes the mask on)
    still stop train with a checkpoint: before, they were never delivered
    and the run went on to its end."""
    cfg = long_run(h, "blocked")
    stops = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1}
    p = subprocess.Popen([h.binary, "train", cfg], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=U.sanitizer_env(), cwd=h.dir,
                         preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, stops))
    rc = stop_after(p, 1.5)
    check(rc == 130, "exit %d (expected 130)", rc)
    check(U.checkpoints(h.path("blocked")), "no checkpoint")


def test_ignored_stop_signals(h):
    """A hang-up or the soft CPU-time limit that the user asked to ignore
    (nohup, a parent's SIG_IGN that exec passes on) does not stop train: it
    goes on, and SIGTERM then stops it with a checkpoint, exit 130. SIGINT
    ignored the same way (as a non-interactive shell starts `cmd &`) still
    stops it: a script that sends it means it."""
    for sig, stops in ((signal.SIGHUP, False), (signal.SIGXCPU, False), (signal.SIGINT, True)):
        name = "ignored-%d" % sig
        cfg = long_run(h, name)
        p = subprocess.Popen([h.binary, "train", cfg], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             errors="replace", env=U.sanitizer_env(), cwd=h.dir,
                             preexec_fn=lambda sig=sig: signal.signal(sig, signal.SIG_IGN))
        time.sleep(1.0)
        p.send_signal(sig)
        if not stops:
            time.sleep(1.0)
            check(p.poll() is None, "signal %d, ignored by the parent, stopped the run: exit %s",
                  sig, p.returncode)
            p.send_signal(signal.SIGTERM)
        try:
            _, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise U.Failure("signal %d: still running 120 s after the stop" % sig)
        want = sig if stops else signal.SIGTERM
        check(p.returncode == 130 and "stopped by signal %d" % want in err,
              "signal %d ignored by the parent: exit %d (expected 130, stopped by %d)\n%s", sig,
              p.returncode, want, U.tail(err, 1500))
        check(U.checkpoints(h.path(name)), "signal %d ignored by the parent: no checkpoint", sig)


def test_umask_without_owner_rights(h):
    """For a user who is not root, a umask that takes the owner's own
    permissions off (0222) would make run.dir and checkpoints/ directories
    the job cannot write into: train refuses it at the start (every rank
    alike), exit 2, naming the umask, and makes nothing (before: a fresh run was
    refused blaming run.dir and left it behind; an existing run.dir trained
    to its first save and failed there). A umask of 077 trains. Run as
    nobody through setpriv; skipped where that cannot be done."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("skipped: needs root and setpriv")
        return
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    # (through sh as below: setpriv's own exec may still pass a directory
    # nobody cannot search, as a checkout in a mode-0700 mktemp directory)
    if subprocess.run(nobody + ["sh", "-c", 'exec "$0" --version', h.binary],
                      capture_output=True).returncode != 0:
        print("skipped: user nobody cannot run %s" % h.binary)
        return
    import tempfile
    work = tempfile.mkdtemp(prefix="pt-umask-")
    try:
        os.chmod(work, 0o777)
        cfg = U.write(os.path.join(work, "c.yaml"), U.render(U.tiny("vit", os.path.join(work, "run"))))
        os.chmod(cfg, 0o644)
        for mask, want in (("0222", 2), ("0277", 2), ("077", 0)):
            for args in (["train", cfg],):
                p = subprocess.run(nobody + ["sh", "-c", 'umask %s; exec "$0" "$@"' % mask, h.binary]
                                   + args, capture_output=True, text=True, errors="replace",
                                   timeout=240, env=U.sanitizer_env(), cwd=work)
                check(p.returncode == want, "%s under umask %s: exit %d, expected %d\n%s", args[0],
                      mask, p.returncode, want, U.tail(p.stderr, 1500))
                if want:
                    check("the umask is %04o" % int(mask, 8) in p.stderr,
                          "%s under umask %s: the umask is not named\n%s", args[0], mask, p.stderr)
                    check(sorted(os.listdir(work)) == ["c.yaml"], "%s under umask %s made %s",
                          args[0], mask, os.listdir(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_eval_every_steps(h):
    """train.eval_every_steps evaluates every N steps besides the epochs'
    evaluations (never twice at one step, and at the end), and changes no
    bit of the training: the step losses and the final weights are those of
    the run without it."""
    runs = {}
    for name, extra in (("plain", {}), ("stepped", {"train.eval_every_steps": "3"})):
        run_dir = h.path(name)
        cfg = U.write_config(h, name + ".yaml", U.tiny("vit", run_dir, **{
            "train.epochs": "2", "train.eval_every": "1", **extra}))
        h.run(["train", cfg]).expect(0, name)
        steps, evals = U.metrics(run_dir)
        out = h.path(name + ".st")
        h.run(["export", U.ckpt(run_dir, 10), out]).expect(0)
        runs[name] = ([x["loss"] for x in steps], [e["step"] for e in evals], U.read_bytes(out))
    check(runs["plain"][1] == [5, 10], "epoch evaluations at %s", runs["plain"][1])
    check(runs["stepped"][1] == [3, 5, 6, 9, 10], "evaluations at %s", runs["stepped"][1])
    check(runs["plain"][0] == runs["stepped"][0], "evaluating every 3 steps changed the losses")
    check(runs["plain"][2] == runs["stepped"][2], "evaluating every 3 steps changed the weights")


def test_eval_every_epochs(h):
    """train.eval_every N evaluates after every Nth epoch (epochs counted
    from 1) and at the end, not after the epochs before them."""
    run_dir = h.path("every2")
    cfg = U.write_config(h, "every2.yaml", U.tiny("vit", run_dir, **{
        "train.epochs": "5", "train.eval_every": "2"}))
    h.run(["train", cfg]).expect(0, "eval_every 2")
    steps, evals = U.metrics(run_dir)
    per = len(steps) // 5
    check([e["step"] for e in evals] == [2 * per, 4 * per, 5 * per],
          "evaluations at steps %s of %d-step epochs", [e["step"] for e in evals], per)


def test_eval_loss_is_per_row(h):
    """The test loss is the mean over rows (a gpt's tokens, a classifier's
    examples): from the initial weights, whose logits are near 0, it is near
    ln of the classes (ln 256 for a gpt's bytes), as the first training
    steps' loss is; a loss summed over a gpt's positions was 16 times it."""
    for kind, classes in (("gpt", 256), ("vit", 4)):
        cfg = U.write_config(h, "init-%s.yaml" % kind, U.tiny(kind, h.path("run-" + kind)))
        r = h.run(["eval", cfg, "--init"]).expect(0, "eval --init of a " + kind)
        m = re.search(r"^test loss ([\d.]+)$", r.out, re.M)
        check(m is not None and abs(float(m.group(1)) - math.log(classes)) < 0.1,
              "%s: the initial weights' test loss is not near ln %d = %.3f:\n%s", kind, classes,
              math.log(classes), r.describe())


def test_eval_logits_in_micro_batches(h):
    """eval --logits with pipeline.microbatches 4 writes the same logits as
    with 1 (each example's logits do not depend on its batch); a pass that
    kept only its last micro-batch's rows failed ('logits row 2 out of
    range')."""
    run_dir = h.path("run")
    cfg = U.write_config(h, "c.yaml", U.tiny("vit", run_dir))
    h.run(["train", cfg]).expect(0, "training")
    outs = {}
    for micro in ("1", "4"):
        outs[micro] = h.path("l%s.st" % micro)
        h.run(["eval", cfg, "--logits", outs[micro], "--set",
               "pipeline.microbatches=" + micro]).expect(0, "eval --logits, %s micro-batches" % micro)
    check(U.read_bytes(outs["1"]) == U.read_bytes(outs["4"]),
          "eval --logits in 4 micro-batches wrote other logits than in 1")


def test_waiting_threads(h):
    """`plan` says how the CPU backend's threads wait for each other
    (nn/cpu_pool.c): by default a spin of at most SPIN_CAP_NS that shrinks
    when waits outlast it, then sleep; PIPETRAIN_SPIN_US sets the cap (0:
    sleep at once), and a value that is not a decimal number of microseconds
    is ignored, saying so. One thread has nobody to wait for: no line."""
    cfg = U.write_config(h, "c.yaml", tiny_keys("vit", h.path("run"), **{"run.threads": "2"}))
    default = "spin up to 20 us (less after waits that outlast it), then sleep"
    cases = [({"PIPETRAIN_SPIN_US": None}, default),
             ({"PIPETRAIN_SPIN_US": "fast"}, default + "; PIPETRAIN_SPIN_US ignored: not a "
              "number of microseconds from 0 to 1e6"),
             ({"PIPETRAIN_SPIN_US": "0x10"}, default + "; PIPETRAIN_SPIN_US ignored: not a "
              "number of microseconds from 0 to 1e6"),
             ({"PIPETRAIN_SPIN_US": "0"}, "sleep at once (PIPETRAIN_SPIN_US)"),
             ({"PIPETRAIN_SPIN_US": "200"},
              "spin up to 200 us (PIPETRAIN_SPIN_US) (less after waits that outlast it), then sleep")]
    for env, want in cases:
        r = h.run(["plan", cfg], env=env).expect(0)
        line = next((l for l in r.out.splitlines() if l.startswith("waiting threads:")), None)
        check(line == "waiting threads: " + want, "with %s: plan says %r, wanted %r", env, line,
              "waiting threads: " + want)
    one = U.write_config(h, "one.yaml", tiny_keys("vit", h.path("run"), **{"run.threads": "1"}))
    r = h.run(["plan", one]).expect(0)
    check(not any(l.startswith("waiting threads:") for l in r.out.splitlines()),
          "plan at 1 thread printed a waiting-threads line")


def gpu_visible():
    return any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidiactl"))


def test_device_cuda_without_gpu(h):
    """run.device: cuda where no GPU can be used is a clear error, not a silent
    fall-back to the CPU; bf16 on the CPU is refused too. Nothing is written."""
    if gpu_visible():
        return "skipped: this machine has a GPU"
    run_dir = h.path("run")
    cfg = U.write_config(h, "c.yaml", tiny_keys("vit", run_dir, **{"run.device": "cuda"}))
    # a setting this build or machine cannot honour: exit 2, naming the
    # file, line and key, as bf16 on the CPU below
    r = h.run(["train", cfg]).expect(2)
    r.one_error(cfg + ":", "run.device is cuda")
    check(not os.path.exists(run_dir), "a failed device open created run.dir")
    r = h.run(["eval", cfg, "--init", "--set", "run.device=cuda"]).expect(2)
    r.one_error("--set", "run.device is cuda")
    cfg = U.write_config(h, "d.yaml", tiny_keys("vit", run_dir, **{"run.precision": "bf16",
                                                                   "run.device": "cpu"}))
    r = h.run(["train", cfg]).expect(2)
    r.one_error("run.precision", "bf16", "GPU")
    check(not os.path.exists(run_dir), "a refused config created run.dir")


# -------------------------------------------------------------- demo configs

def demo(h, config, data_files, extra):
    missing = [p for p in data_files if not os.path.exists(os.path.join(U.REPO, p))]
    if missing:
        return "skipped: %s not installed" % ", ".join(missing)
    run_dir = h.path("run")
    args = ["train", os.path.join("configs", config), "--set", "run.dir=" + run_dir,
            "--set", "train.max_steps=2", "--set", "train.eval_examples=32", "--set",
            "run.threads=1"] + extra
    before = U.snapshot(os.path.join(U.REPO, "runs"))
    r = h.run(args, cwd=U.REPO, timeout=280).expect(0, config)
    check(not unused_notes(r), "%s sets keys it does not use\n%s", config, r.describe())
    check("done: 2 steps" in r.err, "%s did not train 2 steps\n%s", config, r.describe())
    check(U.checkpoints(run_dir) == ["step_0000000002"], "checkpoints %s", U.checkpoints(run_dir))
    U.same_snapshot(before, U.snapshot(os.path.join(U.REPO, "runs")), "the repository's runs/")
    r = h.run(["eval", os.path.join("configs", config), "--set", "run.dir=" + run_dir, "--set",
               "run.threads=1"] + extra, cwd=U.REPO, timeout=280).expect(0, "eval " + config)
    check("test accuracy" in r.out, "eval printed no accuracy:\n%s", r.out)


def test_small_stack(h):
    """training with `ulimit -s` at 256 KiB: the matrix kernels keep their
    scratch (a quarter of a MiB per thread) off the stack of every thread,
    the caller's included (before, this run died of a segmentation fault)"""
    import resource
    import subprocess
    run_dir = h.path("small-stack")
    cfg = U.write_config(h, "small-stack.yaml", U.tiny("vit", run_dir, **{
        "model.dim": "64", "model.heads": "4", "run.threads": "2", "train.max_steps": "3"}))

    def small_stack():
        hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
        soft = 256 << 10
        resource.setrlimit(resource.RLIMIT_STACK,
                           (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
    p = subprocess.run([h.binary, "train", cfg], cwd=h.dir, capture_output=True, text=True,
                       errors="replace", timeout=240, env=U.sanitizer_env(),
                       stdin=subprocess.DEVNULL, preexec_fn=small_stack)
    check(p.returncode == 0, "training with a 256 KiB stack: rc %d\n%s", p.returncode,
          U.tail(p.stderr))
    steps, _ = U.metrics(run_dir)
    check(len(steps) == 3, "%d steps recorded, expected 3", len(steps))


def test_tiny_stack_limit(h):
    """A stack limit below the 128 KiB pipetrain needs: raised where the hard
    limit allows (a resume, which cuts the logs, used to die of a
    segmentation fault at 80 KiB), else refused with a message, exit 1."""
    import resource
    import subprocess
    run_dir = h.path("tiny-stack")
    cfg = U.write_config(h, "tiny-stack.yaml", U.tiny("vit", run_dir, **{"train.max_steps": "2"}))
    h.run(["train", cfg]).expect(0)

    def limit(soft, hard):
        def set_it():
            resource.setrlimit(resource.RLIMIT_STACK, (soft, hard))
        return set_it
    hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
    for soft_kib, hard_kib, want in ((64, None, 0), (80, 80, 1)):
        if hard_kib is None and hard != resource.RLIM_INFINITY and hard < 128 << 10:
            continue  # cannot be raised here
        p = subprocess.run([h.binary, "train", cfg, "--set", "train.resume=auto", "--set",
                            "train.max_steps=4"], cwd=h.dir, capture_output=True, text=True,
                           errors="replace", timeout=240, env=U.sanitizer_env(),
                           stdin=subprocess.DEVNULL,
                           preexec_fn=limit(soft_kib << 10,
                                            hard if hard_kib is None else hard_kib << 10))
        what = "a resume under ulimit -s %d KiB (hard %s)" % (soft_kib, hard_kib or "as it was")
        check(p.returncode == want, "%s: rc %d, wanted %d\n%s", what, p.returncode, want,
              U.tail(p.stderr))
        if want:
            check("the stack size limit (ulimit -s) is 80 KiB and cannot be raised" in p.stderr,
                  "%s: no message\n%s", what, U.tail(p.stderr))
    steps, _ = U.metrics(run_dir)
    check(len(steps) == 4, "%d steps recorded, expected 4", len(steps))


def test_stack_limit_refused_without_crash(h):
    """A hard stack limit far below 128 KiB, yet enough to reach main (16 and
    18 KiB): pipetrain refuses with its message, exit 1, every time. The
    refusal used to be printed with fprintf to the unbuffered stderr, whose
    8 KiB buffer on the stack overflowed such a stack in about a third of the
    starts (the initial stack's offset is random): a segmentation fault
    instead of the promised message. The environment is empty: every byte of
    it sits on that stack too, and with a few hundred more the dynamic loader
    itself (before pipetrain runs) overflows 18 KiB now and then. Limits at
    which /bin/true cannot start are left out, and so is a sanitizer build,
    whose runtime overflows such a stack itself."""
    import resource
    import subprocess

    def limit(kib):
        def set_it():
            resource.setrlimit(resource.RLIMIT_STACK, (kib << 10, kib << 10))
        return set_it
    with open(h.binary, "rb") as f:
        image = f.read()
    if b"__asan_init" in image or b"__tsan_init" in image:
        return "skipped: a sanitizer's runtime needs more stack than this before main"
    tried = 0
    for kib in (16, 18):
        if any(subprocess.run(["/bin/true"], env={}, preexec_fn=limit(kib)).returncode != 0
               for _ in range(8)):
            continue  # the loader itself needs more here
        tried += 1
        for i in range(24):
            p = subprocess.run([h.binary, "keys"], cwd=h.dir, capture_output=True, text=True,
                               errors="replace", timeout=60, env={},
                               stdin=subprocess.DEVNULL, preexec_fn=limit(kib))
            check(p.returncode == 1 and "the stack size limit (ulimit -s) is %d KiB and cannot be "
                  "raised to the 128 KiB pipetrain needs" % kib in p.stderr,
                  "hard stack limit %d KiB, start %d: rc %d, wanted 1 and the message\n%s", kib, i,
                  p.returncode, U.tail(p.stderr))
    if not tried:
        return "skipped: /bin/true does not start under an 18 KiB stack here"


def test_address_space_limit(h):
    """Under an address-space limit (ulimit -v) a run ends: it trains, or the
    dynamic loader or pipetrain refuses with a message. Between about 0.9
    and 1.1 GiB OpenBLAS's library constructor (OpenBLAS was linked into the
    trainer then) retried an allocation forever before main, and SIGTERM
    could not end it; below 0.82 GiB cuBLASLt (linked then too) could not be
    loaded, and at about 0.81 GiB its constructor crashed. A small model on
    the CPU needs neither: it trains under 512 MiB."""
    import resource
    cfg = U.write_config(h, "as-limit.yaml", U.tiny("vit", h.path("as-limit"), **{
        "train.max_steps": "3", "run.threads": "2", "model.dim": "32"}))
    trained = []
    for mib in (128, 256, 512, 768, 808, 812, 896, 960, 1024, 1088, 1152, 1536):
        def set_it(b=mib << 20):
            resource.setrlimit(resource.RLIMIT_AS, (b, b))
        what = "train under ulimit -v %d MiB" % mib
        try:
            p = subprocess.run([h.binary, "train", cfg, "--set", "run.dir=" + h.path("as-%d" % mib)],
                               cwd=h.dir, capture_output=True, text=True, errors="replace",
                               timeout=60, env=U.sanitizer_env(), stdin=subprocess.DEVNULL,
                               preexec_fn=set_it)
        except subprocess.TimeoutExpired:
            check(False, "%s: still running after 60 s", what)
        err = p.stderr
        if p.returncode == 0:
            trained.append(mib)
        elif p.returncode == 127:
            check("error while loading shared libraries" in err, "%s: rc 127 without the "
                  "loader's message\n%s", what, U.tail(err))
        else:
            check(p.returncode == 1 and "pipetrain: error:" in err, "%s: rc %d\n%s", what,
                  p.returncode, U.tail(err))
    check(trained and min(trained) <= 512, "no run trained under a limit of 512 MiB or less "
          "(trained under: %s)", trained)


def test_attention_work_memory_counted(h):
    """The planner counts the memory CPU attention takes for itself while it
    runs (a T x T score tile per thread, beside the T x T probabilities kept
    for backward): a context whose attention needs 2 GiB used to be planned
    as 1 GiB, so a memory limit (or the machine's RAM) between the two was
    accepted and the run was killed for want of memory."""
    cfg = U.write_config(h, "long-context.yaml", U.tiny("gpt", h.path("long-context"), **{
        "model.context": "16384", "model.dim": "2", "model.heads": "1", "model.layers": "1",
        "train.batch": "1", "train.max_steps": "1", "data.synthetic_examples": "16",
        "pipeline.memory_gib": "1.5"}))
    r = h.run(["train", cfg]).expect(2)
    line = r.one_error("pipeline.memory_gib", "blocks.0.attn")
    # the 1 GiB score tile, and the unit's few MiB of other scratch (the
    # products' packed weights among them): not the few MiB alone
    m = re.search(r"scratch ([\d.]+) GiB more", line)
    check(m and 1.0 <= float(m.group(1)) < 1.1, "the scratch counted is not the 1 GiB score "
          "tile and a few MiB more:\n  %s", line)
    check(not os.path.exists(h.path("long-context")), "a refused run left its run.dir")


def test_memory_claim_beyond_the_machine(h):
    """pipeline.memory_gib above what a rank has here is allowed (a plan
    for a bigger machine) with a warning naming the key and what this
    machine has; a layout planned for it used to fail later at an allocation
    with no word of the key. Within the machine: no warning."""
    cfg = U.write_config(h, "c.yaml", tiny_keys("vit", h.path("run"), **{"pipeline.memory_gib": "1e6"}))
    r = h.run(["plan", cfg]).expect(0)
    check(re.search(r"warning: .*pipeline\.memory_gib: 1e\+06 GiB per rank, more than the [\d.]+ GiB "
                    r"each rank has here", r.err), "no warning:\n%s", r.describe())
    cfg = U.write_config(h, "d.yaml", tiny_keys("vit", h.path("run"), **{"pipeline.memory_gib": "0.5"}))
    r = h.run(["plan", cfg]).expect(0)
    check("memory_gib" not in r.err, "a warning within the machine:\n%s", r.describe())


def test_units_timed_within_the_memory_limit(h):
    """Under pipeline.memory_gib the units are timed at micro-batches that
    one unit alone fits in (no layout can use larger ones), not at the whole
    batch: timing them at 256 examples took 3x the limit before training
    began. A profile timed at the whole batch still plans such a run."""
    keys = U.tiny("vit", h.path("run"), **{
        "data.synthetic_examples": "512", "data.image_size": "28", "model.patch": "4",
        "model.dim": "64", "model.heads": "2", "model.classes": "10", "train.batch": "256",
        "train.max_steps": "1", "pipeline.memory_gib": "0.02"})
    h.run(["train", U.write_config(h, "limited.yaml", keys)]).expect(0)
    timed = json.load(open(h.path("run", "profile.json")))["costs"]["batch"]
    check(timed[1] < 256, "timed at micro-batches of %s under a 0.02 GiB limit", timed)
    free = dict(keys, **{"run.dir": h.path("free"), "pipeline.memory_gib": "0",
                         "pipeline.microbatches": "auto", "pipeline.stages": "auto"})
    del free["pipeline.memory_gib"]
    h.run(["train", U.write_config(h, "free.yaml", free)]).expect(0)
    whole = json.load(open(h.path("free", "profile.json")))["costs"]["batch"]
    if whole[1] == 256:  # measured at the whole batch (one process plans only with a limit)
        again = dict(keys, **{"run.dir": h.path("again"),
                              "pipeline.profile": h.path("free", "profile.json")})
        h.run(["train", U.write_config(h, "again.yaml", again)]).expect(0)


def test_cpu_affinity(h):
    """Without a launcher, the CPU affinity pipetrain starts with (taskset)
    is never widened: one allowed CPU gives one thread bound to it. It used
    to bind itself to every core of the machine."""
    import subprocess
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        print("  skipped: one CPU allowed here")
        return
    cpu = allowed[-1]
    cfg = U.write_config(h, "affinity.yaml", U.tiny("vit", h.path("affinity"), **{"train.max_steps": "2", "run.threads": "0"}))
    for cmd in (["plan", cfg], ["train", cfg]):
        p = subprocess.run([h.binary] + cmd, cwd=h.dir, capture_output=True, text=True,
                           errors="replace", timeout=240, env=U.sanitizer_env(),
                           stdin=subprocess.DEVNULL, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
        check(p.returncode == 0, "%s under an affinity of CPU %d: rc %d\n%s", cmd[0], cpu,
              p.returncode, U.tail(p.stderr))
        out = p.stdout + p.stderr
        if cmd[0] == "plan":
            want = "bound to the 1 core its CPU affinity allows (PUs %d), 1 thread" % cpu
            check(want in out and "1 core on rank 0's node" in out, "plan under an affinity of "
                  "CPU %d does not say %r\n%s", cpu, want, U.tail(out))
        else:
            check("cpu backend with 1 thread per rank" in out, "train under an affinity of CPU %d "
                  "did not take 1 thread\n%s", cpu, U.tail(out))


def test_demo_vit_fmnist(h):
    return demo(h, "vit_fmnist.yaml",
                ["/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                 "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"], [])


def test_demo_gpt_kjv(h):
    return demo(h, "gpt_kjv.yaml", ["datasets/kjv.txt"], ["--set", "sample.length=16"])


def test_sample_escapes_are_unambiguous(h):
    """A GPT sample is printed with undecodable bytes as \\xNN: a backslash,
    of the prompt or drawn, is doubled, so the line decodes back to the
    bytes (the prompt as written, a\\x41 must not read as aA)."""
    prompt = "a\\x41\\"
    cfg = U.write_config(h, "s.yaml", U.tiny("gpt", h.path("run"), **{
        "sample.prompt": "'%s'" % prompt, "sample.length": "600", "sample.temperature": "100",
        "sample.top_k": "0"}))
    r = h.run(["eval", cfg, "--init"])
    at = r.out.find("\nsample: ")
    check(r.rc == 0 and at >= 0 and r.out.endswith("\n"), "eval --init of a gpt: exit %d, "
          "no sample last on stdout\n%s", r.rc, r.describe())
    # newlines and tabs are printed as they are: the sample runs to the end
    shown, out, i = r.out[at + len("\nsample: "):-1], bytearray(), 0
    while i < len(shown):
        if shown[i] != "\\":
            out += shown[i].encode()
            i += 1
        elif shown[i + 1:i + 2] == "\\":
            out += b"\\"
            i += 2
        else:
            check(re.match(r"x[0-9a-f]{2}", shown[i + 1:i + 4]) is not None,
                  "a backslash at %d is neither doubled nor \\xNN: %r", i, shown[i:i + 8])
            out.append(int(shown[i + 2:i + 4], 16))
            i += 4
    check(out.startswith(prompt.encode()) and len(out) == len(prompt) + 600,
          "the sample line decodes to %d bytes starting %r (expected the prompt %r and 600 bytes)",
          len(out), bytes(out[:16]), prompt)


def test_top_k_one_is_greedy(h):
    """sample.top_k: 1 draws the most likely byte every time, so the sample
    is the same at any temperature; with every byte a candidate (top_k 0)
    the temperature changes it (the check can fail). A top-k that kept one
    candidate too many passed every other test."""
    def sample(name, top_k, temperature):
        cfg = U.write_config(h, name + ".yaml", U.tiny("gpt", h.path("greedy"), **{
            "sample.prompt": "ab", "sample.length": "200", "sample.top_k": str(top_k),
            "sample.temperature": str(temperature), "model.init_std": "0.5"}))
        r = h.run(["eval", cfg, "--init"]).expect(0, name)
        at = r.out.find("\nsample: ")
        check(at >= 0, "%s: no sample\n%s", name, r.describe())
        return r.out[at:]
    greedy = {sample("k1-t%s" % t, 1, t) for t in ("0.1", "1", "100")}
    check(len(greedy) == 1, "top_k 1 gave %d samples at 3 temperatures: %s", len(greedy), greedy)
    check(sample("k0-t0.1", 0, "0.1") != sample("k0-t100", 0, "100"),
          "with every byte a candidate the temperature changed nothing")
    return "greedy sample %r" % next(iter(greedy))[10:40]


def test_bench_reads_the_eval_lines(h):
    """bench/bert_freeze.py times each evaluation by the line train prints
    after it; every such line (mid-epoch and end of epoch, with and without
    macro-F1) must be one its pattern reads, with the step, epoch, accuracy
    and examples of metrics.jsonl's eval records. (The pattern of an older
    line form once left the bench unable to run.)"""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "bert_freeze", os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                    "bench", "bert_freeze.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for kind, extra in (("vit", {}), ("gpt", {"sample.length": "0"})):
        run_dir = h.path("evals-" + kind)
        cfg = U.write_config(h, "evals-%s.yaml" % kind, U.tiny(kind, run_dir, **dict(
            extra, **{"train.eval_every_steps": "3"})))  # mid-epoch lines too
        r = h.run(["train", cfg]).expect(0, "training " + kind)
        lines = [l for l in r.err.splitlines() if l.startswith("eval ")]
        _, evals = U.metrics(run_dir)
        check(len(lines) == len(evals) and len(evals) >= 3, "%s: %d eval lines, %d eval records",
              kind, len(lines), len(evals))
        for line, rec in zip(lines, evals):
            m = bench.EVAL_LINE.match(line)
            check(m is not None, "bench/bert_freeze.py's EVAL_LINE does not read %r", line)
            check(int(m.group("step")) == rec["step"] and
                  abs(float(m.group("accuracy")) - 100 * rec["test_accuracy"]) < 0.006 and
                  int(m.group("examples")) == rec["examples"],
                  "%r read as %s against the record %s", line, m.groupdict(), rec)


def test_epochs_counted_out_of_those_the_run_reaches(h):
    """The progress and eval lines count epochs out of those the run
    reaches: train.epochs, or fewer where train.max_steps ends it sooner (a
    5-step run said "epoch 1 of 12"); a resume counts out of the same."""
    PROGRESS = re.compile(r"^epoch (\d+)/(\d+) step (\d+)/(\d+) ")
    EVAL = re.compile(r"^eval  step \d+ \((?:end of|in) epoch (\d+) of (\d+)\)")
    cases = [("whole", {}, 3)]
    while cases:
        name, keys, want = cases.pop(0)
        run_dir = h.path("epochs-" + name)
        cfg = U.write_config(h, "epochs-%s.yaml" % name, U.tiny("vit", run_dir, **dict(
            keys, **{"train.eval_every_steps": "3", "train.checkpoint_every": "1",
                     "train.keep_checkpoints": "100"})))
        r = h.run(["train", cfg]).expect(0, name)
        steps, _ = U.metrics(run_dir)
        reached = max(rec["epoch"] for rec in steps) + 1
        check(reached == want, "%s: the steps reach %d epochs, expected %d", name, reached, want)
        if name == "whole":  # 3 epochs of `per` steps; then runs cut short
            per = len(steps) // 3
            check(len(steps) == 3 * per and per >= 3, "%d steps in 3 epochs", len(steps))
            cases = [(name, {"train.epochs": "12", "train.max_steps": str(steps)}, want)
                     for name, steps, want in (("cut", 2 * per + 1, 3), ("one", 2, 1),
                                               ("exact", 2 * per, 2))]
        progress = [PROGRESS.match(l) for l in r.err.splitlines() if PROGRESS.match(l)]
        evals = [EVAL.match(l) for l in r.err.splitlines() if EVAL.match(l)]
        check(len(progress) == len(steps) and evals, "%s: %d progress lines, %d eval lines:\n%s",
              name, len(progress), len(evals), r.describe())
        for m in progress + evals:
            check(int(m.group(2)) == reached and 1 <= int(m.group(1)) <= reached,
                  "%s: %r counts out of %s epochs; the run reaches %d", name, m.group(0),
                  m.group(2), reached)
        # resumed from its second step: the same count
        ck = os.path.join(run_dir, "checkpoints", "step_%010d" % 2)
        r = h.run(["train", cfg, "--set", "train.resume=" + ck]).expect(0, name + " resumed")
        for l in r.err.splitlines():
            m = PROGRESS.match(l) or EVAL.match(l)
            check(m is None or int(m.group(2)) == reached, "%s resumed: %r", name, l)


def test_stdout_write_failure(h):
    """What a command prints must reach stdout: with stdout on a full device
    (/dev/full) eval, plan, keys, --version and --help exit 1 saying so,
    rather than 0 with their figures lost."""
    cfg = U.write_config(h, "c.yaml", U.tiny("vit", h.path("run"), **{"train.max_steps": "1"}))
    for args in (["eval", cfg, "--init"], ["plan", cfg], ["keys"], ["--version"], ["--help"]):
        with open("/dev/full", "w") as full:
            p = subprocess.run([h.binary] + args, stdout=full, stderr=subprocess.PIPE, text=True,
                               timeout=120, env=U.sanitizer_env(), cwd=h.dir)
        check(p.returncode == 1 and "cannot write to stdout" in p.stderr,
              "%s with stdout on /dev/full: exit %d\n%s", args[0], p.returncode, p.stderr[-2000:])


NOTE_RE = re.compile(r"^pipetrain: note: (.*?)(\S+) is not used: (.*)$")


def unused_notes(r):
    """{key: (where, why)} of the 'KEY is not used' notes on stderr."""
    out = {}
    for line in r.err.splitlines():
        m = NOTE_RE.match(line)
        if m:
            check(m.group(2) not in out, "%s noted twice\n%s", m.group(2), r.describe())
            out[m.group(2)] = (m.group(1), m.group(3))
    return out


def unused_case(h, name, keys, expect, sets=(), command="plan"):
    """Runs `command` on keys (and --set's); the keys it notes as not used
    must be exactly expect, each noted where it was set."""
    path = U.write_config(h, name + ".yaml", keys)
    text = open(path).read()
    args = [command, path]
    for s in sets:
        args += ["--set", s]
    r = h.run(args).expect(0, name)
    got = unused_notes(r)
    check(set(got) == set(expect), "%s: notes for %s, expected %s\n%s", name, sorted(got),
          sorted(expect), r.describe())
    set_keys = {s.split("=", 1)[0] for s in sets}
    for key, (where, why) in got.items():
        want = "--set: " if key in set_keys else "%s:%d: " % (path, U.line_of(text, key))
        check(where == want, "%s: %s noted at %r, expected %r", name, key, where, want)
        check(why.startswith("read only with "), "%s: %s: %r", name, key, why)
    return got


def test_grad_clip_zero_is_off_and_last_step_logged(h):
    """train.grad_clip: 0 turns clipping off: the same losses as a bound no
    gradient reaches (a mutant that read 0 as a bound of 0 zeroed every
    step's gradient and passed every test); and with train.log_every not
    dividing the steps (4 of 15) the last step still gets its progress
    line (the final line was dropped by a mutant, unseen)."""
    losses = {}
    for name, clip in (("clip0", "0"), ("clip-huge", "1e6")):
        keys = dict(U.tiny("vit", h.path(name)), **{"train.grad_clip": clip, "train.max_steps": "15",
                                                    "train.log_every": "4", "train.epochs": "5"})
        r = h.run(["train", U.write_config(h, name + ".yaml", keys)]).expect(0, name)
        losses[name] = [(m["step"], m["loss"]) for m in U.metrics(h.path(name))[0]]
        steps = [int(x) for x in re.findall(r"step (\d+)/15", r.err)]
        check(steps and steps[-1] == 15, "%s: progress lines end at step %s\n%s", name,
              steps[-1:], r.err[-1500:])
        # no step is left after the last: its ETA is 0
        last = [l for l in r.err.splitlines() if "step 15/15" in l][-1]
        check(last.endswith("ETA 0s"), "%s: the last progress line: %r", name, last)
    check(losses["clip0"] == losses["clip-huge"] and len(losses["clip0"]) >= 2,
          "grad_clip 0 is not off: %s against %s", losses["clip0"], losses["clip-huge"])


def test_threads_past_the_cores_warned(h):
    """run.threads above the cores a rank has gets one warning naming both;
    exactly the cores gets none (a mutant warning at equal passed)."""
    def run(name, threads):
        keys = dict(U.tiny("vit", h.path(name)), **{"run.threads": str(threads),
                                                    "train.max_steps": "1"})
        return h.run(["train", U.write_config(h, name + ".yaml", keys)]).expect(0, name).err
    err = run("many", 1024)
    warned = re.findall(r"run\.threads: 1024 threads per rank, but each rank has (\d+) cores?", err)
    check(len(warned) == 1, "no warning of 1024 threads:\n%s", err[-1500:])
    cores = int(warned[0])
    err = run("exact", cores)
    check("threads per rank, but" not in err, "%d threads on %d cores warned:\n%s", cores, cores,
          err[-1500:])


def test_eta_counts_the_steps_left(h):
    """The progress line's ETA is the wall time per step so far times the
    steps left: the first step's own time at step 1, then the time since
    the first step over the steps since. Recomputed here from the metrics
    records of the same moments (time_s, step_s), on steps of about a
    second, so one step too many or too few moves the ETA by a second (an
    ETA counting one step too many passed every test: the test models'
    steps take milliseconds)."""
    name = "eta"
    keys = dict(U.tiny("vit", h.path(name)), **{
        "run.threads": "1", "model.dim": "192", "model.layers": "4", "model.heads": "2",
        "model.patch": "7", "data.kind": "synthetic_images", "data.image_size": "28",
        "data.synthetic_examples": "6144", "train.batch": "1536", "train.epochs": "1",
        "train.max_steps": "4", "train.log_every": "1", "train.eval_examples": "16"})
    r = h.run(["train", U.write_config(h, name + ".yaml", keys)]).expect(0, name)
    recs = [json.loads(l) for l in open(os.path.join(h.path(name), "metrics.jsonl"))]
    steps = [e for e in recs if e.get("event") == "step"]
    total = next(e for e in recs if e.get("event") == "start")["total_steps"]
    shown = {int(m.group(1)): int(m.group(2)) for m in
             re.finditer(r"step (\d+)/%d .* ETA (\d+)s$" % total, r.err, re.M)}
    check(sorted(shown) == [e["step"] for e in steps], "ETA lines for steps %s, records %s\n%s",
          sorted(shown), [e["step"] for e in steps], r.err[-1500:])
    first = steps[0]
    slow = 0
    for k, e in enumerate(steps):
        per = first["step_s"] if k == 0 else (e["time_s"] - first["time_s"]) / k
        want = per * (total - e["step"])
        slow += per >= 0.75
        check(abs(shown[e["step"]] - want) <= 0.5 + 1e-6,
              "step %d: ETA %ds, but %.3f s per step x %d steps left is %.3f s\n%s",
              e["step"], shown[e["step"]], per, total - e["step"], want, r.err[-1500:])
    check(slow >= 2, "steps too fast (%s s) for an ETA off by a step to show",
          [round(e["step_s"], 3) for e in steps])


def test_binding_names_its_cores(h):
    """plan's binding line names the cores the rank is bound to: a range
    of as many cores as it has threads, whose PUs it lists (the range's
    last core read one past the cores found passed every test)."""
    name = "bind"
    cfg = U.write_config(h, name + ".yaml", dict(U.tiny("vit", h.path(name)), **{"run.threads": "0"}))
    r = h.run(["plan", cfg]).expect(0, name)
    m = re.search(r"^rank 0: .*: local rank 0 bound to (?:core (\d+)|cores (\d+)-(\d+)) "
                  r"\(PUs ([0-9,-]+)\), (\d+) threads?$", r.out, re.M)
    if m is None:
        check("not bound" in r.out or "refused" in r.out or "affinity allows" in r.out,
              "no binding line:\n%s", r.out[:1500])
        return "skipped: this rank is not bound to a range of cores here"
    threads = int(m.group(5))
    first, last = (int(m.group(1)), int(m.group(1))) if m.group(1) else (int(m.group(2)), int(m.group(3)))
    check(last - first + 1 == threads, "bound to cores %d-%d, but %d threads:\n%s", first, last,
          threads, m.group(0))
    pus = set()
    for part in m.group(4).split(","):
        a, _, b = part.partition("-")
        pus.update(range(int(a), int(b or a) + 1))
    check(len(pus) >= threads, "%d threads on the PUs %s", threads, m.group(4))


def test_freeze_lines_match_records(h):
    """Each freeze decision's progress line says what its metrics record
    says: the depths, and under auto the norms' candidate, the median change
    rate and the schedule's bound, each in its place (the candidate and the
    bound swapped in the line passed every test)."""
    for policy in ("auto", "schedule"):
        name = "freeze-" + policy
        keys = dict(U.tiny("vit", h.path(name)), **{"freeze.policy": policy, "model.layers": "4",
                                                   "train.epochs": "6"})
        r = h.run(["train", U.write_config(h, name + ".yaml", keys)]).expect(0, name)
        recs = [json.loads(l) for l in open(os.path.join(h.path(name), "metrics.jsonl"))]
        recs = [e for e in recs if e.get("event") == "freeze"]
        check(recs, "%s: no freeze record", policy)
        for e in recs:
            line = "freeze decision %d (%s): %d -> %d of 4 blocks frozen (" % (
                e["decision"], policy, e["old_depth"], e["depth"])
            if policy == "auto":
                line += "the norms say %d, median change rate %.3g, bound %d)" % (
                    e["candidate"], e["threshold"], e["bound"])
            else:
                line += "bound %d)" % e["bound"]
            check(line in r.err, "%s: no line %r\n%s", policy, line, r.err[-2500:])
        if policy == "auto":
            check(any(e["candidate"] != e["bound"] for e in recs),
                  "every decision's candidate is its bound: the order is not tested %s", recs)


def test_cache_without_freezing_noted(h):
    """cache.enabled with freeze.policy none (a no-freezing ablation of a
    config with the cache on) trains without the cache, as a key the run
    does not read: a note for it and for each cache.* key set, naming the
    policy, and the same losses as the run without them; data.hflip beside
    it is no refusal then (nothing is cached). cache.enabled: false gets no
    note. It used to be refused, exit 2."""
    vit = dict(U.tiny("vit", h.path("plain")), **{"train.max_steps": "3"})
    h.run(["train", U.write_config(h, "plain.yaml", vit)]).expect(0, "plain")
    cached = dict(vit, **{"run.dir": h.path("cached"), "cache.enabled": "true",
                          "cache.memory_gib": "0.5"})
    got = unused_case(h, "cached", cached, {"cache.enabled", "cache.memory_gib"}, command="train")
    for key in got:
        check("freeze.policy is none" in got[key][1], "%s: %r", key, got[key])
    losses = lambda d: [(r["step"], r["loss"]) for r in U.metrics(d)[0]]
    check(losses(h.path("cached")) == losses(h.path("plain")) and losses(h.path("plain")),
          "other losses with the cache key set:\n%s\n%s", losses(h.path("cached")),
          losses(h.path("plain")))
    unused_case(h, "flip", dict(cached, **{"run.dir": h.path("flip"), "data.hflip": "true"}),
                {"cache.enabled", "cache.memory_gib"}, command="train")
    unused_case(h, "off", dict(vit, **{"run.dir": h.path("off"), "cache.enabled": "false"}), set(),
                command="train")


def test_unused_keys_noted(h):
    """A key the config sets that its run never reads (model.patch for a
    gpt, cache.* with the cache off, ...) gets a note naming where it was
    set and what reads it, from train and plan; keys that are read, and keys
    left at their defaults, get none; eval prints none."""
    vit = U.tiny("vit", h.path("run"))
    gpt = U.tiny("gpt", h.path("run"))
    text = U.write(h.path("t.txt"), "in the beginning god created the heaven and the earth\n" * 40)
    disk = h.path("disk")
    os.makedirs(disk)
    off = {  # read by nothing a vit on synthetic images does
        "model.context": "16", "model.vocab": "30", "model.positions": "20",
        "model.type_vocab": "2", "model.dropout": "0", "model.attention_dropout": "auto",
        "data.text": text, "data.train_file": "x.tsv", "data.test_file": "y.tsv",
        "data.vocab": "v.txt", "data.lowercase": "true", "data.strip_accents": "false",
        "data.split_cjk": "true", "data.test_fraction": "0.2", "data.train_images": "a",
        "data.train_labels": "b", "data.test_images": "c", "data.test_labels": "d",
        "data.mean": "0.5", "data.std": "0.5", "sample.length": "4", "sample.temperature": "1",
        "sample.top_k": "3", "sample.prompt": "hi", "train.schedule": "constant",
        "freeze.alpha": "0.5", "freeze.every": "2", "freeze.unit": "step", "freeze.start": "2",
        "freeze.max_depth": "1", "pipeline.elastic": "false", "cache.memory_gib": "0.5",
        "cache.disk_dir": disk, "cache.disk_gib": "1", "cache.min_depth": "1"}
    expect = set(off) - {"train.schedule"} | {"train.min_lr"}  # tiny sets min_lr
    unused_case(h, "vit_off", dict(vit, **off), expect)
    # the same keys read: nothing noted
    on = {"freeze.policy": "schedule", "freeze.alpha": "0.5", "freeze.every": "2",
          "freeze.unit": "step", "freeze.start": "2", "freeze.max_depth": "1",
          "pipeline.elastic": "false", "cache.enabled": "true", "cache.memory_gib": "0.5",
          "cache.disk_dir": disk, "cache.disk_gib": "1", "cache.min_depth": "1",
          "train.schedule": "linear", "model.patch": "4", "model.classes": "4",
          "data.image_size": "8", "data.synthetic_examples": "40"}
    unused_case(h, "vit_on", dict(vit, **on), set())
    # a gpt: patches, classes and image sizes are not its; its sample keys
    # only while it samples; the --set ones are noted as --set's
    unused_case(h, "gpt_off", dict(gpt, **{"model.patch": "4", "model.classes": "4",
                                           "data.image_size": "8", "sample.prompt": "x"}),
                {"model.patch", "model.classes", "data.image_size", "sample.prompt",
                 "freeze.alpha"},
                sets=("sample.length=0", "freeze.alpha=0.5"))
    got = unused_case(h, "gpt_sets", gpt, {"freeze.alpha", "model.patch"},
                      sets=("freeze.alpha=0.5", "model.patch=2"))
    check("freeze.policy is none" in got["freeze.alpha"][1], "%r", got["freeze.alpha"])
    check("model.kind is gpt" in got["model.patch"][1], "%r", got["model.patch"])
    unused_case(h, "gpt_on", dict(gpt, **{"sample.temperature": "1", "sample.top_k": "3",
                                          "sample.prompt": "x", "model.context": "16"}), set())
    # text data: the synthetic count is not read, the split fraction is
    unused_case(h, "gpt_text", dict(gpt, **{"data.kind": "text", "data.text": text,
                                            "data.test_fraction": "0.2"}),
                {"data.synthetic_examples"})
    # bert: its tables are read; a test file makes data.test_fraction unread
    bert = dict(U.tiny("gpt", h.path("run")), **U.bert_files(h, 40, 1))
    bert.update({"model.kind": "bert", "model.context": "17", "model.positions": "20",
                 "model.type_vocab": "2", "model.dropout": "0", "model.classes": "3",
                 "data.kind": "text_classification", "sample.length": None,
                 "data.synthetic_examples": None})
    got = unused_case(h, "bert_test_file", dict(bert, **{"data.test_fraction": "0.2",
                                                         "model.patch": "4"}),
                      {"data.test_fraction", "model.patch"})
    check("data.test_file is set" in got["data.test_fraction"][1], "%r", got["data.test_fraction"])
    unused_case(h, "bert_on", dict(bert, **{"data.test_file": None, "data.test_fraction": "0.25",
                                            "data.lowercase": "true"}), set())
    # IDX images read their files and normalisation; no image size is set there
    def idx(name, count, side=0, labels=None):
        if labels is not None:
            return U.write(h.path(name), struct.pack(">II", 0x801, count) + bytes(labels), "wb")
        return U.write(h.path(name), struct.pack(">IIII", 0x803, count, side, side) +
                       bytes((i * 37) % 256 for i in range(count * side * side)), "wb")
    files = {"data.train_images": idx("ti", 40, 8), "data.test_images": idx("vi", 12, 8),
             "data.train_labels": idx("tl", 40, labels=[i % 4 for i in range(40)]),
             "data.test_labels": idx("vl", 12, labels=[i % 4 for i in range(12)])}
    unused_case(h, "idx_on", dict(vit, **files, **{"data.kind": "idx", "data.mean": "0.5",
                                                   "data.std": "0.25", "data.image_size": None,
                                                   "data.synthetic_examples": None}), set())
    unused_case(h, "idx_off", dict(vit, **files, **{"data.kind": "idx", "data.mean": "0.5"}),
                {"data.image_size", "data.synthetic_examples"})
    # the layout: elastic re-plans only what is auto; one fixed replica has
    # no all-reduce and nothing to compare
    fixed = {"freeze.policy": "schedule", "pipeline.stages": "1", "pipeline.replicas": "1",
             "pipeline.microbatches": "2"}
    got = unused_case(h, "layout_fixed", dict(vit, **fixed, **{
        "pipeline.elastic": "true", "pipeline.overlap": "false", "pipeline.bucket_mib": "8",
        "run.check_replicas": "2"}), {"pipeline.elastic", "pipeline.overlap",
                                      "pipeline.bucket_mib", "run.check_replicas"})
    check("are all fixed" in got["pipeline.elastic"][1], "%r", got["pipeline.elastic"])
    unused_case(h, "layout_auto", dict(vit, **{"freeze.policy": "schedule",
                                               "pipeline.elastic": "true",
                                               "pipeline.overlap": "false",
                                               "pipeline.bucket_mib": "8",
                                               "run.check_replicas": "2"}), set())
    # train notes them too (after it has started); eval of its checkpoint does not
    keys = dict(vit, **{"model.context": "16", "train.max_steps": "2"})
    unused_case(h, "vit_train", keys, {"model.context"}, command="train")
    r = h.run(["eval", U.write_config(h, "vit_train.yaml", keys)]).expect(0)
    check(not unused_notes(r), "eval noted unused keys\n%s", r.describe())
    # pipeline.elastic with freeze.policy none and the layout at auto: not
    # read by a fresh run, read by a resume (a checkpoint with frozen blocks
    # is planned again); model.init_std and model.init_from are read by
    # both (a resume checks the weights, and saves and exports init_std)
    init = h.path("init.safetensors")
    h.run(["export", U.ckpt(h.path("run"), 2), init]).expect(0)
    extra = {"model.init_std": "0.5", "model.init_from": init, "pipeline.elastic": "false"}
    got = unused_case(h, "vit_fresh", dict(keys, **extra, **{"run.dir": h.path("run2")}),
                      {"model.context", "pipeline.elastic"}, command="train")
    check("starts fresh" in got["pipeline.elastic"][1], "%r", got["pipeline.elastic"])
    # plan of a config train would resume notes what that resume does not
    # read, as train does (it noted pipeline.elastic, which the resume reads)
    unused_case(h, "vit_resume_plan", dict(keys, **extra, **{"train.max_steps": "3"}),
                {"model.context"}, command="plan", sets=("train.resume=auto",))
    unused_case(h, "vit_resume", dict(keys, **extra, **{"train.max_steps": "3"}),
                {"model.context"}, command="train", sets=("train.resume=auto",))


def tests():
    out = [test_help, test_no_arguments, test_version, test_keys_lists_every_schema_key,
           test_keys_takes_no_arguments,
           test_keys_match_checkpoint_config, test_keys_defaults_are_accepted,
           test_readme_documents_every_key, test_export_errors, test_train_inputs_are_not_run_files,
           test_run_dir_of_someone_else, test_plan_writes_nothing,
           test_eval_under_training_memory, test_eval_every_steps, test_eval_every_epochs,
           test_eval_loss_is_per_row, test_eval_logits_in_micro_batches, test_warmup_note,
           test_top_k_one_is_greedy,
           test_freeze_start_past_the_end_noted,
           test_closed_standard_streams, test_stderr_reader_gone,
           test_notes_escape_the_run_dir,
           test_stop_while_the_config_pipe_is_read, test_stop_signals_blocked_by_the_parent,
           test_bus_error_every_command,
           test_ignored_stop_signals,
           test_cache_without_freezing_noted,
           test_freeze_lines_match_records,
           test_threads_past_the_cores_warned,
           test_eta_counts_the_steps_left, test_binding_names_its_cores,
           test_grad_clip_zero_is_off_and_last_step_logged,
           test_umask_without_owner_rights,
           test_set_twice_noted,
           test_cache_disk_dir_in_checkpoints,
           test_device_cuda_without_gpu, test_waiting_threads, test_small_stack,
           test_tiny_stack_limit, test_stack_limit_refused_without_crash,
           test_address_space_limit, test_attention_work_memory_counted,
           test_memory_claim_beyond_the_machine, test_units_timed_within_the_memory_limit,
           test_cpu_affinity,
           test_demo_vit_fmnist, test_demo_gpt_kjv, test_sample_escapes_are_unambiguous,
           test_bench_reads_the_eval_lines, test_epochs_counted_out_of_those_the_run_reaches,
           test_stdout_write_failure,
           test_unused_keys_noted]
    for name, t in [("export_vit", export_case("vit")), ("export_gpt", export_case("gpt")),
                    ("eval_logits_vit", logits_case("vit", 10, CLASSES)),
                    ("eval_logits_gpt", logits_case("gpt", 10 * CONTEXT, 256))]:
        t.__name__ = "test_" + name
        out.append(t)
    return out


if __name__ == "__main__":
    sys.exit(U.main(tests(), sys.argv, workers=4))
