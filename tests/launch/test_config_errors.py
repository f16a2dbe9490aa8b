#!/usr/bin/env python3
"""Bad configurations and bad command lines are refused cleanly.

Every case runs `pipetrain train` (or eval / plan) on a tiny synthetic config
with one thing wrong and checks: exit status 2; exactly one line on stderr,
starting "pipetrain: error: "; for problems in the YAML file, FILE:LINE of the
offending key; the key's name; the allowed values or range for a bad value,
or a "did you mean" hint for a misspelt key; and that nothing was written
(no run directory, the test's directory unchanged). A positive control
checks that the untouched base config trains, so the cases fail for their own
reason.

usage: test_config_errors.py PIPETRAIN_BINARY
"""
import os
import re
import sys

sys.dont_write_bytecode = True  # nothing written into the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_util as U  # noqa: E402
from cli_util import check  # noqa: E402


def base(h, kind="vit", **keys):
    """Tiny config that trains 2 steps if it is (wrongly) accepted."""
    return U.tiny(kind, h.path("run"), **{"train.max_steps": "2", "train.epochs": "1", **keys})


class Case:
    def __init__(self, name, changes=None, kind="vit", raw=None, sets=(), blame=None, line=None,
                 needles=(), cmd="train", strict=True, setup=None, config_name="bad.yaml"):
        self.name, self.changes, self.kind, self.raw = name, changes or {}, kind, raw
        self.sets, self.blame, self.line, self.needles = list(sets), blame, line, list(needles)
        self.cmd, self.strict, self.setup, self.config_name = cmd, strict, setup, config_name


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
    r = h.run(args, timeout=120)
    r.expect(2, "bad input")
    needles = [n.format(cfg=cfg, **extra) for n in c.needles]
    if c.blame:
        needles.append("%s:%d: " % (cfg, U.line_of(text, c.blame)))
        needles.append(c.blame)
    if c.line:
        needles.append("%s:%d: " % (cfg, c.line(text) if callable(c.line) else c.line))
    r.one_error(*needles, strict=c.strict)
    check(not os.path.exists(h.path("run")), "a refused config created run.dir %s\n%s",
          h.path("run"), r.describe())
    U.same_snapshot(before, U.snapshot(h.dir), "the test directory")
    check(r.out == "", "a refused config printed on stdout: %r", r.out[:300])


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
    Case("key_without_section", raw=append("lr: 0.1\n"), line=last_line,
         needles=["'lr'", "did you mean 'train.lr'"]),
    Case("section_is_a_scalar", raw=append("pipeline: 4\n"), line=last_line, needles=["pipeline"]),
    Case("mapping_where_value_expected",
         raw=lambda t: t.replace("  lr: 0.003\n", "  lr:\n    value: 0.1\n"),
         line=line_with("value:"), needles=["train.lr"]),
    # ---- the activation cache
    Case("cache_with_flip", {"freeze.policy": "schedule", "cache.enabled": "true", "data.hflip": "true"},
         blame="cache.enabled", needles=["augmentation", "data.hflip"]),
    Case("cache_with_crop", {"freeze.policy": "schedule", "cache.enabled": "true", "data.crop_pad": "2"},
         blame="cache.enabled", needles=["augmentation", "data.crop_pad"]),
    Case("cache_without_freezing", {"cache.enabled": "true"}, blame="cache.enabled",
         needles=["freeze.policy is none"]),
    Case("cache_disk_dir_missing", {"cache.disk_dir": "/nonexistent/dir"}, blame="cache.disk_dir",
         needles=["not a directory"]),
    Case("freeze_alpha_out_of_range", {"freeze.alpha": "1"}, blame="freeze.alpha",
         needles=["allowed: a number > 0 and < 1"]),
    # ---- values of the wrong type
    Case("word_for_int", {"model.dim": "sixteen"}, blame="model.dim",
         needles=["sixteen", RANGE_DIM]),
    Case("fraction_for_int", {"model.layers": "2.5"}, blame="model.layers",
         needles=["2.5", "allowed: an integer from 1 to 1024"]),
    Case("quoted_empty_for_int", {"model.dim": '""'}, blame="model.dim", needles=[RANGE_DIM]),
    Case("int_for_bool", {"run.metrics": "1"}, blame="run.metrics",
         needles=["allowed: true or false"]),
    Case("word_for_float", {"train.lr": "fast"}, blame="train.lr",
         needles=["fast", "allowed: a number > 0 and <= 10"]),
    Case("nan_for_float", {"train.grad_clip": "nan"}, blame="train.grad_clip",
         needles=["allowed: a number >= 0 and <= 1e+06"]),
    Case("inf_for_float", {"data.std": ".inf"}, blame="data.std", needles=["allowed: a number > 0"]),
    # ---- values out of range
    Case("int_below_range", {"model.layers": "0"}, blame="model.layers",
         needles=["out of range", "allowed: an integer from 1 to 1024"]),
    Case("i64_above_range", {"train.batch": "99999999999"}, blame="train.batch",
         needles=["allowed: an integer from 1 to 16777216"]),
    Case("negative_seed", {"run.seed": "-1"}, blame="run.seed", needles=["allowed: an integer from 0"]),
    Case("huge_int_overflow", {"model.dim": "99999999999999999999999"}, blame="model.dim",
         needles=[RANGE_DIM]),
    Case("float_above_range", {"train.weight_decay": "11"}, blame="train.weight_decay",
         needles=["allowed: a number >= 0 and <= 10"]),
    Case("exclusive_min_lr_zero", {"train.lr": "0"}, blame="train.lr",
         needles=["allowed: a number > 0 and <= 10"]),
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
    Case("yaml_syntax_unclosed_flow", raw=append("pipeline: {stages: 1\n"), needles=["YAML"]),
    Case("duplicate_key", raw=dup, line=line_with("lr: 0.005"),
         needles=["train.lr", "twice"]),
    Case("list_for_scalar", {"train.lr": "[0.1, 0.2]"}, blame="train.lr",
         needles=["allowed: a number > 0 and <= 10"]),
    Case("empty_value", {"train.lr": ""}, blame="train.lr",
         needles=["allowed: a number > 0 and <= 10"]),
    Case("top_level_list", raw=lambda t: "- run\n- model\n", line=1, needles=["key: value"]),
    # empty mappings of unknown names pass, but not 2^40 walks of one through aliases
    Case("aliases_of_mappings",
         raw=append("l0: &l0 {}\n" + "".join("l%d: &l%d {a: *l%d, b: *l%d}\n" % (i, i, i - 1, i - 1)
                                             for i in range(1, 41))),
         line=line_with("l1:"), needles=["l1.a", "aliases (*name) of mappings"]),
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
    Case("missing_init_from", {"model.init_from": "{missing}"}, blame="model.init_from",
         needles=["{missing}"], setup=files),
    Case("missing_config_file", config_name="missing.yaml", needles=["{cfg}"]),
    Case("config_is_a_directory", config_name="adir", setup=files, needles=["{cfg}"]),
    # ---- found while building the run (after the YAML was accepted)
    Case("batch_above_dataset", {"train.batch": "1000"}, needles=["train.batch"]),
    Case("augmentation_on_text", {"data.hflip": "true"}, kind="gpt", needles=["data.hflip"]),
    Case("text_too_short_for_context", {"data.kind": "text", "data.text": "{short}"},
         kind="gpt", needles=["{short}"], setup=short_text),
    Case("init_from_not_safetensors", {"model.init_from": "{garbage}"}, needles=["{garbage}"],
         setup=garbage_weights),
    Case("empty_run_dir", {"run.dir": '""'}, needles=["run.dir"]),
    # ---- --set overrides and the command line
    Case("set_unknown_key", sets=["train.lrr=0.1"],
         needles=["--set", "train.lrr", "did you mean 'train.lr'"]),
    Case("set_without_equals", sets=["train.lr"], needles=["--set", "train.lr", "key=value"]),
    Case("set_empty_key", sets=["=3"], needles=["--set", "key=value"]),
    Case("set_string_not_utf8", sets=["run.dir=r\udcff"],
         needles=["--set", "run.dir", "invalid UTF-8"]),
    Case("set_bad_value", sets=["train.batch=0"],
         needles=["--set", "train.batch", "allowed: an integer from 1 to 16777216"]),
    Case("set_equals_form_bad_enum", sets=["--set=pipeline.schedule=zigzag"],
         needles=["--set", "pipeline.schedule", "gpipe, 1f1b"]),
    Case("set_breaks_cross_key_rule", sets=["model.heads=5"],
         needles=["--set", "model.heads", "model.dim"]),
    Case("unexpected_argument", sets=["--bogus"], needles=["unexpected argument '--bogus'"]),
    Case("checkpoint_option_on_train", sets=["--checkpoint"],
         needles=["unexpected argument '--checkpoint'"]),
    Case("eval_with_bad_config", {"model.heads": "3"}, cmd="eval", blame="model.heads"),
    Case("plan_with_bad_config", {"train.schedule": "cosin"}, cmd="plan", blame="train.schedule"),
]


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


TESTS = [test_base_config_trains, test_base_gpt_config_trains,
         test_yaml_unterminated_quote, test_duplicate_key_names_both_lines, test_duplicate_section,
         test_usage_errors] + [make(c) for c in CASES]

if __name__ == "__main__":
    sys.exit(U.main(TESTS, sys.argv, workers=6))
