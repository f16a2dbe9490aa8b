#!/usr/bin/env python3
"""Bad checkpoints are refused cleanly, and checkpoint directories are kept tidy.

Bad checkpoints: a short run saves checkpoints; each case copies the run,
damages the newest checkpoint (truncated or bit-flipped files, wrong magic,
missing files, well-formed files with bad content -- written with a correct
CRC by cli_util.write_recfile -- or a config that does not match it) and then
runs `train --set train.resume=auto`, `train --set train.resume=DIR`,
`eval --checkpoint DIR` and `export DIR OUT` on it. Each must exit with status
2 (bad input) and one error line naming the damaged file (or the key that does
not match), without a crash or sanitizer report, without writing anything
(`export` leaves no output file) and with every checkpoint file unchanged.

Hygiene: train.keep_checkpoints prunes; a step directory without a manifest
is not a checkpoint (resume auto skips it, pruning removes it); a fresh run in
a run.dir that holds checkpoints is refused and deletes nothing.

usage: test_checkpoints.py PIPETRAIN_BINARY
"""
import fcntl
import hashlib
import glob
import json
import math
import os
import random
import re
import shutil
import signal
import tempfile
import struct
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # nothing written into the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_util as U  # noqa: E402
from cli_util import check  # noqa: E402

LAST = 10  # 2 epochs of 5 steps; checkpoints at 3, 6, 9 and 10


def keys(h, run_dir, kind="vit", **extra):
    return U.tiny(kind, run_dir, **{"train.epochs": "2", "train.checkpoint_every": "3",
                                    "train.keep_checkpoints": "10", **extra})


_reference_lock = threading.Lock()


def trained(h, name="orig", kind="vit", steps=(3, 6, 9, LAST), **extra):
    """A trained run of its own for the test: (config path, run dir). The
    run with the default settings is trained once and copied."""
    run_dir = h.path(name)
    cfg = U.write_config(h, name + ".yaml", keys(h, run_dir, kind, **extra))
    if kind != "vit" or extra:
        h.run(["train", cfg]).expect(0, "training the reference run")
    else:
        shared = os.path.join(os.path.dirname(h.dir), "shared-reference")
        with _reference_lock:
            if not os.path.exists(shared):
                tmp = shared + ".tmp"
                scfg = U.write(tmp + ".yaml", U.render(keys(h, tmp, kind)))
                h.run(["train", scfg]).expect(0, "training the reference run")
                os.rename(tmp, shared)
        shutil.copytree(shared, run_dir)
    check(U.checkpoints(run_dir) == ["step_%010d" % s for s in steps],
          "unexpected checkpoints %s", U.checkpoints(run_dir))
    return cfg, run_dir


def copy_run(h, run_dir, name, kind="vit", **extra):
    """A copy of run_dir with its own config (run.dir pointing at the copy)."""
    dst = h.path(name)
    shutil.copytree(run_dir, dst)
    cfg = U.write_config(h, name + ".yaml", keys(h, dst, kind, **extra))
    return cfg, dst


def expect_refused(h, r, needles, what):
    r.expect(2, what)
    r.one_error(*needles)


def all_refuse(h, cfg, run_dir, ckpt_dir, needles, modes=("auto", "path", "eval", "eval-default",
                                                           "export")):
    """Every way of reading ckpt_dir fails with status 2 and one error line
    holding every needle; nothing on disk changes. A resume from the path
    into a run.dir that does not exist yet ("fresh") leaves none behind."""
    before = U.snapshot(run_dir)
    out = h.path("export-out.safetensors")
    fresh = h.path("fresh-parent/fresh-run")
    # inspect verifies a checkpoint whole, as export reads it
    extra = (["fresh"] if "path" in modes else []) + (["inspect"] if "export" in modes else [])
    for mode in list(modes) + extra:
        if mode == "fresh":
            r = h.run(["train", cfg, "--set", "train.resume=" + ckpt_dir, "--set",
                       "run.dir=" + fresh])
            expect_refused(h, r, needles, mode)
            check(not os.path.exists(h.path("fresh-parent")), "a refused resume left %s: %s",
                  h.path("fresh-parent"), os.listdir(h.path("fresh-parent"))
                  if os.path.isdir(h.path("fresh-parent")) else "a file")
            continue
        if mode == "auto":
            r = h.run(["train", cfg, "--set", "train.resume=auto"])
        elif mode == "path":
            r = h.run(["train", cfg, "--set", "train.resume=" + ckpt_dir])
        elif mode == "eval":
            r = h.run(["eval", cfg, "--checkpoint", ckpt_dir])
        elif mode == "eval-default":
            r = h.run(["eval", cfg])
        elif mode == "inspect":
            r = h.run(["inspect", ckpt_dir])
            check(not r.out, "inspect of a bad checkpoint printed %r", r.out[:200])
        else:
            r = h.run(["export", ckpt_dir, out])
            check(not os.path.exists(out), "export of a bad checkpoint left %s", out)
        expect_refused(h, r, needles, mode)
        U.same_snapshot(before, U.snapshot(run_dir), "run.dir after %s" % mode)


# ------------------------------------------------------------ damaged files

def truncate_to(n):
    def f(path):
        size = os.path.getsize(path)
        with open(path, "r+b") as fh:
            fh.truncate(n(size) if callable(n) else n)
    return f


def flip(at):
    def f(path):
        size = os.path.getsize(path)
        pos = at(size) if callable(at) else at
        with open(path, "r+b") as fh:
            fh.seek(pos)
            b = fh.read(1)
            fh.seek(pos)
            fh.write(bytes([b[0] ^ 0x10]))
    return f


def set_magic(magic):
    def f(path):
        with open(path, "r+b") as fh:
            fh.write(magic)
    return f


def damage_case(target, how, modes):
    """target: 'units' or 'manifest'."""
    def t(h):
        _, orig = trained(h)
        cfg, run_dir = copy_run(h, orig, "copy")
        ck = U.ckpt(run_dir, LAST)
        path = os.path.join(ck, "manifest") if target == "manifest" else U.unit_files(ck)[0]
        how(path)
        all_refuse(h, cfg, run_dir, ck, [os.path.basename(path), "step_%010d" % LAST], modes)
    return t


# every way of reading a checkpoint for a few kinds of damage; the cheaper
# subset (the ASan build runs this too) for the rest
ALL_MODES = ("auto", "path", "eval", "eval-default", "export")
FULL_DAMAGE = ("units_truncated_to_0", "units_byte_flipped_in_payload", "manifest_byte_flipped",
               "manifest_wrong_magic")
DAMAGE = {
    "units_truncated_to_0": ("units", truncate_to(0)),
    "units_truncated_to_1": ("units", truncate_to(1)),
    "units_truncated_to_39": ("units", truncate_to(39)),
    "units_truncated_to_half": ("units", truncate_to(lambda s: s // 2)),
    "units_truncated_by_1": ("units", truncate_to(lambda s: s - 1)),
    "units_trailer_cut": ("units", truncate_to(lambda s: s - 12)),
    "units_byte_flipped_in_payload": ("units", flip(lambda s: s // 2)),
    "units_byte_flipped_in_version": ("units", flip(8)),
    "units_byte_flipped_in_crc": ("units", flip(lambda s: s - 10)),
    "units_wrong_magic": ("units", set_magic(b"PTCKMAN1")),
    "manifest_truncated_to_0": ("manifest", truncate_to(0)),
    "manifest_truncated_to_half": ("manifest", truncate_to(lambda s: s // 2)),
    "manifest_byte_flipped": ("manifest", flip(lambda s: s // 3)),
    "manifest_wrong_magic": ("manifest", set_magic(b"XXXXXXXX")),
}


def test_refused_start_in_a_run_dir_of_copied_checkpoints(h):
    """A run.dir that holds only another run's checkpoints (copied in, no
    log): a start refused there, for the checkpoints it would not replace or
    for another model, leaves it as it was. It left the empty metrics.jsonl
    it had opened, and then the lock file it made, so the next start took
    the directory for a run's and appended its log to a foreign
    metrics.jsonl put there (refused in a directory no run has used). The
    same for a run.dir refused before its lock is taken (its profile.json,
    or a rank's op profile, a directory), with every per-rank log on; a
    run's own lock and logs stay."""
    _, orig = trained(h)
    run_dir = h.path("copied")
    os.makedirs(run_dir)
    shutil.copytree(os.path.join(orig, "checkpoints"), os.path.join(run_dir, "checkpoints"))
    cfg = U.write_config(h, "copied.yaml", keys(h, run_dir, **{"model.dim": "32"}))
    before = U.snapshot(run_dir)
    logs = ["--set", "run.log_samples=true", "--set", "run.rank_metrics=true",
            "--set", "run.profile_ops=true"]
    for sets, needles in (([], ["already holds checkpoints"]),
                          (["--set", "train.resume=auto"], ["model.dim"]),
                          (logs, ["already holds checkpoints"])):
        r = h.run(["train", cfg] + sets)
        expect_refused(h, r, needles, " ".join(sets) or "a fresh start")
        U.same_snapshot(before, U.snapshot(run_dir), "run.dir after %s" % (" ".join(sets) or
                                                                          "a fresh start"))
        check(not os.path.lexists(os.path.join(run_dir, "lock")),
              "%s: the refused start left its lock file", " ".join(sets) or "a fresh start")
    for name in ("profile.json", "op_profile-rank0.json"):
        plain = h.path("plain-" + name)
        os.makedirs(os.path.join(plain, name))
        cfg = U.write_config(h, "plain.yaml", keys(h, plain))
        held = U.snapshot(plain)
        r = h.run(["train", cfg] + logs)
        expect_refused(h, r, [name], name + " a directory")
        U.same_snapshot(held, U.snapshot(plain), "run.dir after a refusal for its " + name)
        check(sorted(os.listdir(plain)) == [name], "the refused start left %s", os.listdir(plain))
        # a foreign log put there is still refused: no run has used it
        os.rmdir(os.path.join(plain, name))
        U.write(os.path.join(plain, "metrics.jsonl"), '{"mine": 1}\n')
        r = h.run(["train", cfg])
        expect_refused(h, r, ["metrics.jsonl"], "a foreign log after the refusal")
        check(U.read_bytes(os.path.join(plain, "metrics.jsonl")) == b'{"mine": 1}\n',
              "the foreign log was written to")
    # a run's own run.dir: its lock and its logs stay after a refused start,
    # after its lock and before it (byte for byte then: a refusal before the
    # lock takes it only to undo, and writes no holder into it)
    cfg, own = trained(h, "own")
    for name in ("lock", "metrics.jsonl"):
        check(os.path.isfile(os.path.join(own, name)), "no %s after a run", name)
    held = U.snapshot(own)
    # refused after the lock, which it rewrites with its own holder text:
    # the lock's bytes as they were, whatever they are (a run's line, none,
    # or a long text; one of 256 bytes or more stayed rewritten)
    ran = U.read_bytes(os.path.join(own, "lock"))
    for lock in (ran, b"", b"pid 1 on elsewhere " + b"x" * 300 + b"\n", ran.rstrip(b"\n") * 20):
        with open(os.path.join(own, "lock"), "wb") as f:
            f.write(lock)
        r = h.run(["train", cfg, "--set", "model.dim=32"] + logs)
        expect_refused(h, r, ["already holds checkpoints"], "another model in a run's run.dir")
        U.same_snapshot(held, U.snapshot(own), "a run's run.dir after a refused start")
        check(os.path.isfile(os.path.join(own, "lock")) and
              U.read_bytes(os.path.join(own, "lock")) == lock,
              "the run's lock file (%d bytes) went or changed", len(lock))
    os.makedirs(os.path.join(own, "op_profile-rank0.json"))
    lock = U.read_bytes(os.path.join(own, "lock"))
    held = U.snapshot(own)
    r = h.run(["train", cfg, "--set", "train.resume=auto"] + logs)
    expect_refused(h, r, ["op_profile-rank0.json"], "a run's op profile a directory")
    U.same_snapshot(held, U.snapshot(own), "a run's run.dir after a refusal before its lock")
    check(U.read_bytes(os.path.join(own, "lock")) == lock, "the refused start rewrote the run's lock")
    # a run.dir through a link: the same
    os.rmdir(os.path.join(own, "op_profile-rank0.json"))
    linked = h.path("linked")
    os.makedirs(os.path.join(linked, "op_profile-rank0.json"))
    os.symlink(linked, h.path("link-to-linked"))
    cfg = U.write_config(h, "linked.yaml", keys(h, h.path("link-to-linked")))
    r = h.run(["train", cfg] + logs)
    expect_refused(h, r, ["op_profile-rank0.json"], "an op profile a directory, run.dir a link")
    check(sorted(os.listdir(linked)) == ["op_profile-rank0.json"],
          "the refused start left %s through a link", os.listdir(linked))


def test_units_file_deleted(h):
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "copy")
    ck = U.ckpt(run_dir, LAST)
    unit = U.unit_files(ck)[0]
    os.unlink(unit)
    all_refuse(h, cfg, run_dir, ck, [os.path.basename(unit)])


def test_manifest_deleted_explicit_path(h):
    """A directory without a manifest is not a checkpoint: naming it is bad input."""
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "copy")
    ck = U.ckpt(run_dir, LAST)
    os.unlink(os.path.join(ck, "manifest"))
    all_refuse(h, cfg, run_dir, ck, ["step_%010d" % LAST], modes=("path", "eval", "export"))


def test_not_a_checkpoint_path(h):
    cfg, run_dir = trained(h)
    missing = h.path("no-such-checkpoint")
    all_refuse(h, cfg, run_dir, missing, ["no-such-checkpoint"], modes=("path", "eval", "export"))
    # a run directory where a checkpoint goes: said so, with where its
    # checkpoints are (it said only that the manifest could not be opened)
    for args in (["eval", cfg, "--checkpoint", run_dir], ["export", run_dir, h.path("x.st")]):
        r = h.run(args).expect(2, " ".join(args[:1] + args[2:]))
        r.one_error("'%s' is a run directory, not a checkpoint" % run_dir,
                    "%s/checkpoints/step_N" % run_dir)
    # what is wrong with the path itself, not "'PATH/manifest': cannot open"
    empty = h.path("empty-dir")
    os.makedirs(empty)
    # a Hugging Face model directory (a bert's export): said so, with the
    # key that takes it (it read as a save that never finished)
    hf = h.path("hf-dir")
    os.makedirs(hf)
    U.write(os.path.join(hf, "config.json"), "{}\n")
    for path, says in ((missing, "no such directory"), (cfg, "not a directory"),
                       (empty, "holds no manifest: it is not a checkpoint (an empty directory"),
                       (hf, "looks like a Hugging Face model directory")):
        for args in (["inspect", path], ["export", path, h.path("y.st")],
                     ["eval", cfg, "--checkpoint", path]):
            r = h.run(args).expect(2, " ".join(args))
            r.one_error("'%s'" % path, says)


def test_manifest_deleted_auto_takes_previous(h):
    """resume=auto skips the step directory without a manifest and resumes
    from the newest complete checkpoint."""
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "copy", **{"train.epochs": "3"})
    os.unlink(os.path.join(U.ckpt(run_dir, LAST), "manifest"))
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0)
    check("resumed at step 9" in r.err, "expected a resume from step 9\n%s", r.describe())
    # epochs of 5 steps: step 10 is the last of epoch 2, counted from 1 as
    # the progress line after it counts it (the note said epoch 1)
    check("resumed at step 9 (epoch 2, 4 of its batches done)" in r.err and
          "epoch 2/3 step 10/15" in r.err, "the resume's epoch:\n%s", r.describe())
    check(os.path.isfile(os.path.join(U.ckpt(run_dir, 15), "manifest")),
          "the resumed run did not save step 15: %s", U.checkpoints(run_dir))


def test_only_checkpoint_without_manifest_starts_fresh(h):
    """With no complete checkpoint, resume=auto says so and starts fresh."""
    _, orig = trained(h, steps=(5,), **{"train.checkpoint_every": "0", "train.epochs": "1"})
    cfg, run_dir = copy_run(h, orig, "copy", **{"train.checkpoint_every": "0",
                                                 "train.epochs": "1"})
    only = U.checkpoints(run_dir)
    check(only == ["step_0000000005"], "expected one checkpoint, got %s", only)
    os.unlink(os.path.join(U.ckpt(run_dir, 5), "manifest"))
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0)
    check("no checkpoint" in r.err and "starting fresh" in r.err,
          "resume=auto did not say it starts fresh\n%s", r.describe())
    check("step_0000000005 is not a complete checkpoint" in r.err,
          "the unfinished step directory was not named\n%s", r.describe())
    check("resumed at" not in r.err, "resumed from a directory without a manifest\n%s",
          r.describe())
    check(os.path.isfile(os.path.join(U.ckpt(run_dir, 5), "manifest")),
          "the fresh run saved no complete checkpoint")


# --------------------------------------------- well-formed files, bad content

def read_manifest(ck):
    """The manifest's JSON (format 2: one "manifest" record)."""
    _, _, recs = U.read_recfile(os.path.join(ck, "manifest"))
    rec = dict(recs)
    check("manifest" in rec, "no manifest record in %s", ck)
    return json.loads(rec["manifest"])


def rewrite_manifest(ck, edit):
    """edit(manifest dict) changes it in place; written back well-formed,
    with a correct CRC and the version kept."""
    path = os.path.join(ck, "manifest")
    magic, version, recs = U.read_recfile(path)
    m = json.loads(dict(recs)["manifest"])
    edit(m)
    U.write_recfile(path, magic, version, [("manifest", json.dumps(m).encode())])


def rebind(ck):
    """Lists every unit file's current size and SHA-256 in the manifest, so a
    crafted unit file gets past the binding and meets the checks behind it."""
    def e(m):
        for path in U.unit_files(ck):
            name = os.path.basename(path)
            data = U.read_bytes(path)
            m["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    rewrite_manifest(ck, e)


def edit_units_file(ck, edit, bind=True):
    path = U.unit_files(ck)[0]
    magic, version, recs = U.read_recfile(path)
    U.write_recfile(path, magic, version, edit(recs))
    if bind:
        rebind(ck)


def crafted_case(craft, needles, modes=("auto", "path", "eval", "export")):
    def t(h):
        _, orig = trained(h)
        cfg, run_dir = copy_run(h, orig, "copy")
        ck = U.ckpt(run_dir, LAST)
        craft(ck)
        all_refuse(h, cfg, run_dir, ck, needles, modes)
    return t


def manifest_version_1(ck):
    path = os.path.join(ck, "manifest")
    magic, _, recs = U.read_recfile(path)
    U.write_recfile(path, magic, 1, recs)


def units_record_short(ck):
    edit_units_file(ck, lambda recs: [(t, p[:-4] if t == "head.param" else p) for t, p in recs])


def units_record_missing(ck):
    edit_units_file(ck, lambda recs: [(t, p) for t, p in recs if t != "blocks.1.mlp.v"])


def units_from_other_step_with_moments_dropped(ck):
    """A unit file holding parameters only (as if every unit were frozen)."""
    edit_units_file(ck, lambda recs: [(t, p) for t, p in recs
                                      if t.endswith(".param") or t == "checkpoint"])


def units_own_record(field, value):
    """The unit file's own record names another checkpoint id, step or file."""
    def edit(recs):
        out = []
        for t, p in recs:
            if t == "checkpoint":
                own = json.loads(p)
                own[field] = value
                p = json.dumps(own).encode()
            out.append((t, p))
        return out
    return lambda ck: edit_units_file(ck, edit)


def unit_file_name(name):
    def craft(ck):
        def e(m):
            m["units"]["head"] = name
        rewrite_manifest(ck, e)
    return craft


def every_unit_in_empty_name(ck):
    """Every unit said to be in a file named "" (listed, with the unit
    file's digest): a name that is no file of the directory, refused before
    anything is read (it once went unopened and crashed the reader)."""
    def e(m):
        for unit in m["units"]:
            m["units"][unit] = ""
        m["files"] = {"": next(iter(m["files"].values()))}
    rewrite_manifest(ck, e)


def unit_value(tag, index, value):
    """Element `index` of record `tag` set to value, the digests made again:
    a forged file that passes every binding check."""
    def edit(recs):
        out = []
        for t, p in recs:
            if t == tag:
                b = bytearray(p)
                b[4 * index:4 * index + 4] = struct.pack("<f", value)
                p = bytes(b)
            out.append((t, p))
        return out
    return lambda ck: edit_units_file(ck, edit)


def manifest_set(path, value):
    """Sets (value not None) or deletes manifest field path ("lr.kind")."""
    def craft(ck):
        def e(m):
            keys = path.split(".")
            d = m
            for k in keys[:-1]:
                d = d[k]
            if value is None:
                del d[keys[-1]]
            else:
                d[keys[-1]] = value
        rewrite_manifest(ck, e)
    return craft


CRAFTED = {
    "manifest_version_1": (manifest_version_1, ["manifest", "format 1"], None),
    "manifest_not_json": (
        lambda ck: U.write_recfile(os.path.join(ck, "manifest"), b"PTCKMAN1", 2,
                                   [("manifest", b"{\"step\": 10,")]),
        ["manifest", "line 1"], None),
    "state_missing_epoch": (manifest_set("epoch", None), ["manifest", "epoch"], None),
    "state_negative_epoch_step": (manifest_set("epoch_step", -1), ["manifest", "epoch_step"],
                                  None),
    "state_step_as_text": (manifest_set("step", "10"), ["manifest", "step"], None),
    # (an epoch of 2^62 was accepted, and its step count overflowed)
    "state_epoch_past_step": (manifest_set("epoch", 2 ** 62), ["manifest", "do not fit step"],
                              None),
    "state_epoch_step_past_step": (manifest_set("epoch_step", LAST), ["manifest", "do not fit step"],
                                   None),
    # past the most a save writes: refused before it is parsed
    "manifest_too_large": (
        lambda ck: rewrite_manifest(ck, lambda m: m.update(padding="x" * (33 << 20))),
        ["manifest record is", "at most 32 MiB"], None),
    "state_lr_kind_out_of_range": (manifest_set("lr.kind", 9), ["manifest", "lr.kind"],
                                   None),
    "state_lr_base_missing": (manifest_set("lr.base", None), ["manifest", "base"], None),
    # (train.min_lr is at most train.lr in every config a save records)
    "state_lr_min_above_base": (manifest_set("lr.min", 0.5), ["manifest", "lr.min 0.5",
                                                              "above lr.base"], None),
    "state_frozen_units_out_of_range": (manifest_set("frozen_units", 99), ["frozen_units"],
                                        None),
    "freeze_state_malformed": (manifest_set("freeze.depth", 7), ["manifest", "freeze"],
                               None),
    # counts no run reaches (a step at int64's end overflowed in a note;
    # freeze counters at INT32_MAX or INT64_MAX overflowed as the run went on)
    "state_step_past_any_run": (manifest_set("step", 2 ** 63 - 1), ["manifest", "past any run's"],
                                None),
    "freeze_decisions_past_step": (manifest_set("freeze.decisions", 2 ** 31 - 1),
                                   ["manifest", "freeze state counts more than 10 steps allow"], None),
    "freeze_acc_steps_past_step": (manifest_set("freeze.acc_steps", 2 ** 63 - 1),
                                   ["manifest", "freeze state counts more than 10 steps allow"], None),
    "arch_record_malformed": (manifest_set("arch.dim", "sixteen"),
                              ["manifest", "architecture record's 'dim'", "an integer"], None),
    # the planner's measurements a resume plans from (eval and export plan
    # nothing from them, but refuse a checkpoint inspect refuses)
    "profile_not_a_mapping": (manifest_set("profile", [1, 2]), ["manifest", "profile must be a JSON object"],
                              None),
    "profile_other_format": (manifest_set("profile.format", "x"), ["manifest", "profile key 'format'"],
                             None),
    "profile_no_ranks": (manifest_set("profile.ranks", 0), ["manifest", "profile key 'ranks'"],
                         None),
    "profile_node_of_too_short": (manifest_set("profile.node_of", []),
                                  ["manifest", "profile key 'node_of'"], None),
    "profile_negative_latency": (manifest_set("profile.links.latency_s", -1),
                                 ["manifest", "profile key 'links.latency_s'"], None),
    "profile_of_another_model": (manifest_set("profile.model.dim", 64),
                                 ["manifest", "another model", "model.dim was 64"], None),
    "profile_costs_of_one_unit": (manifest_set("profile.costs.units", [{}]),
                                  ["manifest", "profile key 'costs.units'"], None),
    "units_record_escapes_directory": (unit_file_name("../../orig/checkpoints/x.bin"),
                                       ["head"], None),
    "units_record_names_unlisted_file": (unit_file_name("units-stage7.bin"),
                                         ["units-stage7.bin"], None),
    "files_entry_removed": (lambda ck: rewrite_manifest(ck, lambda m: m["files"].clear()),
                            ["units-stage0.bin", "size and SHA-256"], None),
    "files_entry_other_digest": (
        lambda ck: rewrite_manifest(ck, lambda m: m["files"]["units-stage0.bin"].update(
            sha256="0" * 64)), ["units-stage0.bin", "SHA-256"], None),
    "unit_file_changed_after_save": (
        lambda ck: edit_units_file(ck, lambda recs: recs[::-1], bind=False),
        ["units-stage0.bin", "not the file this checkpoint's manifest lists"], None),
    "unit_file_names_other_checkpoint": (units_own_record("checkpoint", "f" * 32),
                                         ["units-stage0.bin", "different checkpoints"], None),
    "unit_file_names_other_step": (units_own_record("step", 9),
                                   ["units-stage0.bin", "different checkpoints"], None),
    "unit_file_names_other_file": (units_own_record("file", "units-stage1.bin"),
                                   ["units-stage0.bin", "different checkpoints"], None),
    "unit_file_own_record_missing": (
        lambda ck: edit_units_file(ck, lambda recs: [(t, p) for t, p in recs if t != "checkpoint"]),
        ["units-stage0.bin", "checkpoint"], None),
    "unit_tensor_too_short": (units_record_short, ["head.param"], None),
    "units_record_empty_file_name": (every_unit_in_empty_name,
                                     ["manifest", "which file holds unit"], None),
    "unit_param_nan": (unit_value("head.param", 3, float("nan")),
                       ["units-stage0.bin", "head.param", "nan at element 3", "finite"], None),
    "unit_param_inf": (unit_value("blocks.0.mlp.param", 0, float("inf")),
                       ["blocks.0.mlp.param", "inf at element 0"], None),
    "unit_moment_nan": (unit_value("blocks.1.attn.m", 1, float("nan")),
                        ["blocks.1.attn.m", "nan at element 1"], None),
    "unit_second_moment_negative": (unit_value("blocks.1.mlp.v", 2, -1.0),
                                    ["blocks.1.mlp.v", "-1 at element 2", "not negative"],
                                    None),
    "arch_record_one_class": (manifest_set("arch.classes", 1),
                              ["manifest", "architecture record", "classes"], None),
    # a field out of range is named, with what it may be
    "arch_record_kind_out_of_range": (manifest_set("arch.kind", 9),
                                      ["manifest", "architecture record's 'kind'", "2 (bert)"], None),
    "arch_record_negative_ln_eps": (manifest_set("arch.ln_eps", -1e-5),
                                    ["manifest", "'ln_eps'", ">= 0 and < 1"], None),
    "arch_record_dropout_above_one": (manifest_set("arch.hidden_dropout", 1.1),
                                      ["manifest", "'hidden_dropout'", ">= 0 and < 1"], None),
    "arch_record_seed_negative": (manifest_set("arch.seed", -1), ["manifest", "'seed'"], None),
    "profile_model_kind_out_of_range": (manifest_set("profile.model.kind", 9),
                                        ["manifest", "profile key 'model.kind'", "2 (bert)"],
                                        None),
    "unit_moment_record_missing": (units_record_missing, ["blocks.1.mlp.v"], None),
    "unit_moments_all_missing": (units_from_other_step_with_moments_dropped, [".m"],
                                 None),
    # forged with every digest made again: what no unit reads is refused too
    "unit_file_extra_record": (
        lambda ck: edit_units_file(ck, lambda recs: recs + [("blocks.5.attn.param", b"\0" * 16)]),
        ["units-stage0.bin", "record 'blocks.5.attn.param'", "no part of a unit"], None),
    "unit_file_extra_part": (
        lambda ck: edit_units_file(ck, lambda recs: recs + [("head.grad", b"\0" * 16)]),
        ["units-stage0.bin", "record 'head.grad'"], None),
    "files_entry_no_unit_is_in": (
        lambda ck: rewrite_manifest(ck, lambda m: m["files"].update(
            {"/etc/passwd": {"bytes": 1, "sha256": "0" * 64}})),
        ["manifest", "lists a file named '/etc/passwd', which is not a unit file"], None),
    "files_entry_no_unit_is_in_usable_name": (
        lambda ck: rewrite_manifest(ck, lambda m: m["files"].update(
            {"units-stage1.bin": dict(m["files"]["units-stage0.bin"])})),
        ["manifest", "lists a file named 'units-stage1.bin' that none of its units is in"], None),
    "units_entry_the_model_has_not": (
        lambda ck: rewrite_manifest(ck, lambda m: m["units"].update({"blocks.7.mlp": "units-stage0.bin"})),
        ["manifest", "lists a unit 'blocks.7.mlp' that the model it holds has not"], None),
    "config_record_bad_key": (
        lambda ck: rewrite_manifest(ck, lambda m: m.update(
            config=m["config"].replace("  layers: 2\n", "  layerz: 2\n", 1))),
        ["layerz", "step_%010d" % LAST], ("auto", "path", "export")),  # eval: see test_tokenizer_recorded
    # the format field of the record, and the architecture against the
    # config record it was made from: refused by every command (export
    # wrote a config.json with the forged heads, pipetrain's own init_from
    # of it refused the [PAD] id)
    "manifest_format_field_other": (manifest_set("format", 99), ["manifest", "format field"],
                                    None),
    "manifest_format_field_missing": (manifest_set("format", None), ["manifest", "format field"],
                                      None),
    # (a resume names the config's line that makes the other model first)
    "arch_record_other_heads": (manifest_set("arch.heads", 4), ["model.heads = 4"], None),
    # the architecture's numbers and the state's batch and seed against the
    # config record too (export wrote an edited layer_norm_eps; a resume or
    # eval blamed the user's config for an edited one)
    "arch_record_other_ln_eps": (manifest_set("arch.ln_eps", 1e-6), ["model.ln_eps"], None),
    "arch_record_other_init_std": (manifest_set("arch.init_std", 0.5),
                                   ["manifest", "model.init_std", "edited"], None),
    "arch_record_other_seed": (manifest_set("arch.seed", 99), ["manifest", "run.seed", "edited"],
                               None),
    "state_other_batch": (manifest_set("batch", 9), ["train.batch"], None),
    "labels_on_image_data": (manifest_set("labels", ["a", "b", "c", "d"]),
                             ["manifest", "labels", "edited"], None),
    "config_record_other_kind": (
        lambda ck: rewrite_manifest(ck, lambda m: m.update(
            config=m["config"].replace("kind: vit", "kind: gpt", 1))),
        ["manifest", "model.kind = vit", "config record makes gpt"], None),
}


# -------------------------------- files swapped between checkpoints and runs

def swap_case(what):
    """Step 9's (or another run's) file copied over step 10's."""
    def t(h):
        _, orig = trained(h)
        cfg, run_dir = copy_run(h, orig, "copy")
        ck, older = U.ckpt(run_dir, LAST), U.ckpt(run_dir, 9)
        if what == "units":
            shutil.copy(U.unit_files(older)[0], ck)
            needles = ["units-stage0.bin", "not the file"]
        elif what == "units_rebound":  # and the manifest re-pointed at its digest
            shutil.copy(U.unit_files(older)[0], ck)
            rebind(ck)
            needles = ["units-stage0.bin", "different checkpoints"]
        elif what == "manifest":
            shutil.copy(os.path.join(older, "manifest"), ck)
            needles = ["manifest", "step 9", "step 10"]
        elif what == "whole_directory":  # step_9's files under step_10's name
            shutil.rmtree(ck)
            shutil.copytree(older, ck)
            needles = ["manifest", "step 9", "step 10"]
        else:  # the same step of another run (other seed: other weights)
            _, other = trained(h, "other", **{"run.seed": "4"})
            shutil.copy(U.unit_files(U.ckpt(other, LAST))[0], ck)
            needles = ["units-stage0.bin", "not the file"]
        all_refuse(h, cfg, run_dir, ck, needles, ("auto", "path", "eval", "export"))
    t.__name__ = "test_swapped_" + what
    return t


# ------------------------------------------- a config that does not match it

def mismatch_case(changes, needles, modes=("auto", "path")):
    def t(h):
        _, orig = trained(h)
        cfg, run_dir = copy_run(h, orig, "copy", **changes)
        all_refuse(h, cfg, run_dir, U.ckpt(run_dir, LAST), needles, modes)
    return t


MISMATCH = {
    "resume_other_dim": ({"model.dim": "32"}, ["dim", "16", "32"], ("auto", "path", "eval",
                                                                    "eval-default")),
    "resume_other_layers": ({"model.layers": "3"}, ["layers"], ("auto", "eval")),
    "resume_other_heads": ({"model.heads": "4"}, ["heads"], ("auto",)),
    "resume_other_patch": ({"model.patch": "2"}, ["patch"], ("auto",)),
    "resume_other_batch": ({"train.batch": "4"}, ["train.batch", "8", "4"], ("auto", "path")),
    "resume_other_seed": ({"run.seed": "4"}, ["run.seed"], ("auto", "path")),
}


def test_resume_gpt_with_vit_checkpoint(h):
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "copy", kind="gpt")
    all_refuse(h, cfg, run_dir, U.ckpt(run_dir, LAST), ["model.kind = vit", "model.kind = gpt"],
               ("auto", "eval"))


def test_resume_bert_other_ln_eps(h):
    """model.ln_eps is part of the model: a bert checkpoint trained with one
    epsilon is not resumed or evaluated under another (0 means bert's
    default, 1e-12: 0 against 1e-12 is the same model and resumes)."""
    files = U.bert_files(h, 40, 1)
    bert = dict(files, **{"model.kind": "bert", "model.context": "17", "model.positions": "20",
                          "model.classes": "3", "data.kind": "text_classification",
                          "model.ln_eps": "1e-12", "sample.length": None})
    _, orig = trained(h, kind="gpt", **bert)
    cfg, run_dir = copy_run(h, orig, "copy", kind="gpt", **dict(bert, **{"model.ln_eps": "1e-6"}))
    all_refuse(h, cfg, run_dir, U.ckpt(run_dir, 6), ["model.ln_eps = 1e-12", "model.ln_eps = 1e-06"],
               ("auto", "path", "eval"))
    _, zero = trained(h, "zero", kind="gpt", **dict(bert, **{"model.ln_eps": "0"}))
    cfg, run_dir = copy_run(h, zero, "zero-copy", kind="gpt", **dict(bert, **{"model.ln_eps": "1e-12",
                                                                              "train.epochs": "3"}))
    h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resuming eps 0 as 1e-12")


def test_bert_other_classes_or_kind_names_the_key(h):
    """A config whose model has another class count (fewer or more) or
    another kind than a bert checkpoint with stored labels is refused, exit
    2, naming model.classes or model.kind and both values, by eval as by a
    resume: not as a damaged manifest (eval measured the stored labels
    against the config's classes and called a good checkpoint's labels "not
    a list of 1 to 2 class names")."""
    files = U.bert_files(h, 40, 1)
    bert = dict(files, **{"model.kind": "bert", "model.context": "17", "model.positions": "20",
                          "model.classes": "3", "data.kind": "text_classification",
                          "sample.length": None})
    _, orig = trained(h, kind="gpt", **bert)
    # the same data with two of its three labels, for a 2-class config
    def two_labels(key):
        return U.write(h.path("two-" + os.path.basename(files[key])), "".join(
            line + "\n" for line in open(files[key]).read().splitlines()
            if line.split("\t", 1)[0] in ("a", "b")))
    two = {"data.train_file": two_labels("data.train_file"),
           "data.test_file": two_labels("data.test_file")}
    for classes, data in (("2", two), ("5", {})):
        cfg, run_dir = copy_run(h, orig, "classes-" + classes, kind="gpt", **dict(
            bert, **dict(data, **{"model.classes": classes})))
        all_refuse(h, cfg, run_dir, U.ckpt(run_dir, LAST),
                   ["model.classes: ", "model.classes = 3", "model.classes = " + classes],
                   ("auto", "path", "eval"))
    cfg, run_dir = copy_run(h, orig, "kind-gpt", kind="gpt")
    all_refuse(h, cfg, run_dir, U.ckpt(run_dir, LAST), ["model.kind = bert", "model.kind = gpt"],
               ("auto", "eval"))


def test_resume_bert_other_dropout(h):
    """model.dropout and model.attention_dropout are part of the training: a
    bert run trained with dropout 0.1 is not resumed (auto or a path) with
    another probability of either, naming the key and both values, while
    eval and export of its weights do not care. The value compared is the
    one the run used: auto (0 from scratch) resumes as an explicit 0, and a
    manifest written before dropout existed (no dropout fields: its run had
    none) resumes with 0 and is refused with 0.1."""
    files = U.bert_files(h, 40, 1)
    bert = dict(files, **{"model.kind": "bert", "model.context": "17", "model.positions": "20",
                          "model.classes": "3", "data.kind": "text_classification",
                          "sample.length": None})
    drop = dict(bert, **{"model.dropout": "0.1", "model.attention_dropout": "0.1"})
    _, orig = trained(h, kind="gpt", **drop)
    ck = U.ckpt(orig, 6)
    cfg, run_dir = copy_run(h, orig, "hidden", kind="gpt", **dict(drop, **{"model.dropout": "0"}))
    all_refuse(h, cfg, run_dir, U.ckpt(run_dir, 6),
               ["model.dropout = 0.1", "model.dropout = 0", "set it to 0.1"], ("auto", "path"))
    cfg, run_dir = copy_run(h, orig, "attention", kind="gpt",
                            **dict(drop, **{"model.attention_dropout": "0.2"}))
    all_refuse(h, cfg, run_dir, U.ckpt(run_dir, 6),
               ["model.attention_dropout = 0.1", "model.attention_dropout = 0.2"], ("auto", "path"))
    cfg, run_dir = copy_run(h, orig, "auto", kind="gpt", **bert)  # auto: 0 from scratch
    all_refuse(h, cfg, run_dir, U.ckpt(run_dir, 6), ["model.dropout = 0.1", "model.dropout = 0"],
               ("path",))
    h.run(["eval", cfg, "--checkpoint", ck]).expect(0, "eval under another dropout")
    h.run(["export", ck, h.path("w.safetensors")]).expect(0, "export")
    cfg, run_dir = copy_run(h, orig, "same", kind="gpt", **dict(drop, **{"train.epochs": "3"}))
    h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resuming with the same dropout")
    # auto from scratch is 0: resumed as an explicit 0
    _, zero = trained(h, "zero", kind="gpt", **bert)
    cfg, run_dir = copy_run(h, zero, "zero-copy", kind="gpt",
                            **dict(bert, **{"model.dropout": "0", "model.attention_dropout": "0",
                                            "train.epochs": "3"}))
    h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resuming auto as 0")
    # a manifest from before dropout: its run had none
    old = h.path("old")
    shutil.copytree(zero, old)

    def no_dropout_fields(m):
        check("hidden_dropout" in m["arch"] and "attn_dropout" in m["arch"],
              "the manifest's arch record has no dropout: %s", m["arch"])
        del m["arch"]["hidden_dropout"]
        del m["arch"]["attn_dropout"]
        # nor the tokenizer's keys (its run tokenized as auto gives)
        lines = m["config"].splitlines(True)
        gone = [l for l in lines if l.strip().split(":")[0] in
                ("lowercase", "strip_accents", "split_cjk")]
        check(len(gone) == 3, "the manifest's config has not the 3 tokenizer keys: %s", gone)
        m["config"] = "".join(l for l in lines if l not in gone)
    for step in (9, LAST):
        rewrite_manifest(U.ckpt(old, step), no_dropout_fields)
    cfg, run_dir = copy_run(h, old, "old-drop", kind="gpt", **drop)
    all_refuse(h, cfg, run_dir, U.ckpt(run_dir, LAST), ["model.dropout = 0", "model.dropout = 0.1"],
               ("auto",))
    cfg, run_dir = copy_run(h, old, "old-zero", kind="gpt", **dict(bert, **{"train.epochs": "3"}))
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resuming an old manifest")
    check("other data settings" not in r.err, "resuming an old manifest noted other data "
          "settings:\n%s", r.describe())


def read_only_export(h, ck):
    """An export into a directory that is there but cannot be written is bad
    input (exit 2, the path named) found before the work, as one into a
    directory that cannot be made is. Read-only by a mount in a namespace of
    its own: root writes through a directory's permissions."""
    ro = h.path("read-only")
    os.makedirs(ro)
    r = h.run_read_only(ro, ["export", ck, ro])
    if r is None:
        return  # no mount namespace here (not root): nothing to check
    r.expect(2, "export into a read-only directory")
    r.one_error("export: cannot write there", ro, "Read-only file system")
    check(os.listdir(ro) == [], "the refused export left %s", os.listdir(ro))


def bert_keys(h):
    """A tiny bert on 40 labelled texts of 3 classes (a, b, c): its files
    and keys."""
    files = U.bert_files(h, 40, 1)
    return files, dict(files, **{"model.kind": "bert", "model.context": "17",
                                 "model.positions": "20", "model.classes": "3",
                                 "data.kind": "text_classification", "sample.length": None})


def trained_bert(h):
    """That bert trained: its run directory."""
    return trained(h, kind="gpt", **bert_keys(h)[1])[1]


def test_stored_labels_under_the_rules_of_their_run(h):
    """Labels a checkpoint stores are held to the rules of the run that
    saved them: a label that later runs' data may not have (the form reports
    give a class without a label, a reserved default-ignorable code point)
    still exports, so a saved run stays usable."""
    orig = trained_bert(h)
    ck = U.ckpt(orig, LAST)
    labels = ["(class 0, no label)", "a\u2065", "c"]  # in byte order, as a save keeps them

    def relabel(m):
        m["labels"] = labels
    rewrite_manifest(ck, relabel)
    out = h.path("export-old-labels")
    h.run(["export", ck, out]).expect(0, "export of labels an earlier run saved")
    with open(os.path.join(out, "config.json")) as f:
        exported = json.load(f)
    check(exported.get("id2label") == {str(i): l for i, l in enumerate(labels)},
          "exported id2label %s", exported.get("id2label"))


def test_bert_other_labels(h):
    """A text-classification checkpoint records its classes' labels (the
    classifier's rows, in byte order): resuming or evaluating it with a
    training file whose labels differ ('a' renamed 'd', so class 0 becomes
    'b') is refused naming both, since every row would stand for another
    label; export writes them as id2label and label2id; a manifest without
    labels (written before they were recorded) is not checked."""
    files, bert = bert_keys(h)
    _, orig = trained(h, kind="gpt", **bert)
    ck = U.ckpt(orig, LAST)
    check(read_manifest(ck).get("labels") == ["a", "b", "c"], "the manifest's labels: %s",
          read_manifest(ck).get("labels"))
    out = h.path("export-dir")
    h.run(["export", ck, out]).expect(0, "export")
    with open(os.path.join(out, "config.json")) as f:
        exported = json.load(f)
    check(exported.get("id2label") == {"0": "a", "1": "b", "2": "c"} and
          exported.get("label2id") == {"a": 0, "b": 1, "c": 2},
          "exported id2label %s, label2id %s", exported.get("id2label"), exported.get("label2id"))
    # what killed exports into the directory left there goes with the next one
    before = sorted(os.listdir(out))
    leftovers = [U.write(os.path.join(out, name + ".tmp.4242.0123456789abcdef"), "partial")
                 for name in ("model.safetensors", "config.json", "vocab.txt")]
    r = h.run(["export", ck, out]).expect(0, "export over a killed one's leftovers")
    notes = [l for l in r.err.splitlines() if "temporary file" in l and "killed" in l]
    check(sorted(os.listdir(out)) == before and len(notes) == 3,
          "after an export over leftovers %s: %s, notes %s", leftovers, sorted(os.listdir(out)), notes)
    read_only_export(h, ck)
    renamed = {}
    for key in ("data.train_file", "data.test_file"):
        with open(files[key]) as f:
            text = f.read()
        renamed[key] = U.write(h.path("renamed-" + os.path.basename(files[key])),
                               "".join("d" + l[1:] if l.startswith("a\t") else l
                                       for l in text.splitlines(True)))
    cfg, run_dir = copy_run(h, orig, "renamed", kind="gpt", **dict(bert, **renamed))
    all_refuse(h, cfg, run_dir, U.ckpt(run_dir, LAST), ["class 0 = 'a'", "makes class 0 'b'",
                                                        "renamed-train.tsv"],
               ("auto", "path", "eval"))
    # more classes than labels: a label added to the training file takes a
    # row the checkpoint trained as no label's, and one taken away leaves a
    # trained label's row without one; both refused, both ways round
    four = dict(bert, **{"model.classes": "4"})
    _, orig4 = trained(h, "four", kind="gpt", **four)
    with open(files["data.train_file"]) as f:
        text = f.read()
    added = {"data.train_file": U.write(h.path("added-train.tsv"), text + "d\tin the beginning\n")}
    cfg, run_dir = copy_run(h, orig4, "added", kind="gpt", **dict(four, **added))
    all_refuse(h, cfg, run_dir, U.ckpt(run_dir, LAST), ["class 3 = '(none)'", "makes class 3 'd'",
                                                        "added-train.tsv"], ("auto", "path", "eval"))
    _, orig4d = trained(h, "four-d", kind="gpt", **dict(four, **added))
    cfg, run_dir = copy_run(h, orig4d, "taken", kind="gpt", **four)
    all_refuse(h, cfg, run_dir, U.ckpt(run_dir, LAST), ["class 3 = 'd'", "makes class 3 '(none)'"],
               ("auto", "path", "eval"))
    # the same two through model.init_from of an export (its id2label)
    for name, run, data, needles in (
            ("added", orig4, added, ["class 3 = '(none)'", "makes class 3 'd'"]),
            ("taken", orig4d, {}, ["class 3 = 'd'", "makes class 3 '(none)'"])):
        exp = h.path("export-four-" + name)
        h.run(["export", U.ckpt(run, LAST), exp]).expect(0, "export of " + name)
        init = dict(four, **dict(data, **{"model.init_from": exp}))
        cfg = U.write_config(h, "from-four-%s.yaml" % name,
                             keys(h, h.path("from-four-" + name), "gpt", **init))
        for args in (["train", cfg], ["eval", cfg, "--init"]):
            r = h.run(args).expect(2, "%s from the export, a label %s" % (args[0], name))
            r.one_error("model.init_from", *needles)
    # model.init_from of the export starts from its classifier too: the same
    # labels are refused otherwise, for train and eval --init alike; an
    # export without id2label is not checked
    fresh = dict(bert, **{"model.init_from": out, "run.dir": h.path("from-export-renamed")})
    cfg = U.write_config(h, "from-export-renamed.yaml", keys(h, fresh["run.dir"], "gpt",
                                                             **dict(fresh, **renamed)))
    for args in (["train", cfg], ["eval", cfg, "--init"]):
        r = h.run(args).expect(2, " ".join(args[:1]) + " from the export with other labels")
        r.one_error("model.init_from", "class 0 = 'a'", "makes class 0 'b'", "renamed-train.tsv")
    check(not os.path.exists(fresh["run.dir"]), "a refused train made its run.dir")
    cfg = U.write_config(h, "from-export.yaml", keys(h, h.path("from-export"), "gpt",
                                                     **dict(bert, **{"model.init_from": out})))
    h.run(["train", cfg]).expect(0, "training from the export with its labels")
    export_refusals(h, orig, out, h.path("from-export"))
    # data.vocab under another name than vocab.txt: its directory takes no
    # export either (a tokenizer_config.json written there would change how
    # the next run with that vocabulary tokenizes)
    vdir = h.path("words")
    os.makedirs(vdir)
    words = shutil.copy(files["data.vocab"], os.path.join(vdir, "words.txt"))
    _, wrun = trained(h, "words-run", kind="gpt", **dict(bert, **{"data.vocab": words}))
    before = U.snapshot(vdir)
    r = h.run(["export", U.ckpt(wrun, LAST), vdir]).expect(2, "export into data.vocab's directory")
    r.one_error("export", vdir, "the directory of data.vocab")
    check(U.snapshot(vdir) == before, "a refused export changed %s", vdir)
    # without id2label, or with the weights alone, the rows cannot be checked:
    # a note says so, once
    del exported["id2label"]
    U.write(os.path.join(out, "config.json"), json.dumps(exported))
    alone = h.path("weights-alone")
    os.makedirs(alone)
    shutil.copy(os.path.join(out, "model.safetensors"), alone)
    for init, why in ((out, "has no id2label"), (alone, "no config.json beside it"),
                      (os.path.join(alone, "model.safetensors"), "no config.json beside it")):
        r = h.run(["eval", U.write_config(h, "no-id2label.yaml", keys(h, h.path("x"), "gpt", **dict(
            fresh, **dict(renamed, **{"model.init_from": init})))), "--init"])
        r.expect(0, "weights without id2label (%s)" % init)
        notes = [l for l in r.err.splitlines() if "has a classifier (head.fc.*)" in l]
        check(len(notes) == 1 and why in notes[0] and "renamed-train.tsv" in notes[0] and
              "unchecked" in notes[0], "not one note of the unchecked classifier:\n%s",
              r.describe())
    cfg, run_dir = copy_run(h, orig, "same", kind="gpt", **dict(bert, **{"train.epochs": "3"}))
    h.run(["eval", cfg, "--checkpoint", U.ckpt(run_dir, LAST)]).expect(0, "eval with the same labels")
    h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resuming with the same labels")
    # model.classes above the data's labels (3): the record holds the 3
    _, wide = trained(h, "wide", kind="gpt", **dict(bert, **{"model.classes": "5"}))
    check(read_manifest(U.ckpt(wide, LAST)).get("labels") == ["a", "b", "c"], "labels with 5 classes")
    cfg, run_dir = copy_run(h, wide, "wide-more", kind="gpt",
                            **dict(bert, **{"model.classes": "5", "train.epochs": "3"}))
    h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resuming 5 classes of 3 labels")
    cfg, run_dir = copy_run(h, orig, "old", kind="gpt", **dict(bert, **renamed))
    rewrite_manifest(U.ckpt(run_dir, LAST), lambda m: m.pop("labels"))
    h.run(["eval", cfg, "--checkpoint", U.ckpt(run_dir, LAST)]).expect(0, "a manifest without labels")


def export_refusals(h, orig, exported, from_export):
    """What export refuses to write, leaving every file as it was: into the
    directory a run started from (model.init_from: the pretrained model
    would be replaced by the fine-tuned one), into another run's checkpoint,
    its checkpoints directory or a new step directory there, through a
    symbolic link; and forged labels in a manifest whose checksums were
    made again (two alike, out of byte order, one that prints as another)."""
    ck = U.ckpt(from_export, LAST)
    other = U.ckpt(orig, LAST)
    link = h.path("export-link")
    os.makedirs(h.path("link-target"))
    os.symlink(h.path("link-target"), link)
    before = {d: U.snapshot(d) for d in (exported, orig, h.path("link-target"))}
    for out, needles in ((exported, ["model.init_from", "whose files it would replace"]),
                         (other, ["checkpoint directory", "manifest"]),
                         (os.path.join(other, "sub"), ["checkpoint directory"]),
                         (os.path.dirname(other), ["a run's checkpoints"]),
                         (os.path.join(os.path.dirname(other), "step_%010d" % (LAST + 1)),
                          ["a run's checkpoints"]),
                         (link, ["symbolic link"])):
        h.run(["export", ck, out]).expect(2, "export into " + out).one_error("export", *needles)
    for d, digest in before.items():
        check(U.snapshot(d) == digest, "a refused export changed %s", d)
    check(not os.path.exists(os.path.join(os.path.dirname(other), "step_%010d" % (LAST + 1))),
          "a refused export made a step directory")
    for name, labels, needles in (("alike", ["a", "a", "c"], ["labels 1 and 2", "byte order"]),
                                  ("order", ["b", "a", "c"], ["labels 1 and 2", "byte order"]),
                                  ("invisible", ["a", "b\u200b", "c"], ["U+200B", "labels:2"])):
        cfg, run_dir = copy_run(h, orig, "labels-" + name, kind="gpt")
        copy = U.ckpt(run_dir, LAST)
        rewrite_manifest(copy, lambda m: m.update(labels=list(labels)))
        r = h.run(["export", copy, h.path("labels-out-" + name)]).expect(2, "forged labels " + name)
        r.one_error("manifest", *needles)
        check(not os.path.exists(h.path("labels-out-" + name)), "a refused export wrote its output")


def test_tokenizer_recorded(h):
    """A checkpoint records how its run tokenized (data.lowercase and the
    others, resolved from the tokenizer_config.json beside data.vocab): an
    eval and a resume of it tokenize so whatever that file says later (the
    same hidden states to the byte, no note, the new checkpoints record the
    same); a key set to another value in the config is followed, with a
    note. A checkpoint from before the keys (none in its config) was trained
    uncased, and its eval and export take that, whatever the file says. An
    export that has no tokenizer to write (its data.vocab not
    found) leaves a vocab.txt or tokenizer_config.json in its directory
    alone and refuses, writing nothing (it may be a model's own)."""
    files = U.bert_files(h, 40, 3)
    vdir = h.path("cased")
    os.makedirs(vdir)
    vocab = shutil.copy(files["data.vocab"], os.path.join(vdir, "vocab.txt"))
    tc = U.write(os.path.join(vdir, "tokenizer_config.json"), '{"do_lower_case": false}')
    # capitals: cased they are [UNK], uncased the words
    for key in ("data.train_file", "data.test_file"):
        with open(files[key]) as f:
            text = f.read()
        U.write(files[key], "".join(l.split("\t")[0] + "\t" + l.split("\t")[1].title()
                                    for l in text.splitlines(True)))
    bert = dict(files, **{"model.kind": "bert", "model.context": "17", "model.positions": "20",
                          "model.classes": "3", "data.kind": "text_classification",
                          "sample.length": None, "data.vocab": vocab})
    cfg, run_dir = trained(h, "cased-run", kind="gpt", **bert)
    ck = U.ckpt(run_dir, LAST)
    config = read_manifest(ck)["config"]
    check("lowercase: false" in config and "strip_accents: false" in config,
          "the manifest does not record the cased run:\n%s", config)
    before = h.path("h-before.st")
    h.run(["eval", cfg, "--checkpoint", ck, "--hidden", before]).expect(0, "eval")
    U.write(tc, '{"do_lower_case": true}')
    after = h.path("h-after.st")
    r = h.run(["eval", cfg, "--checkpoint", ck, "--hidden", after]).expect(0, "eval, file changed")
    check(U.read_bytes(before) == U.read_bytes(after) and "tokenizes otherwise" not in r.err,
          "eval after the tokenizer_config.json changed tokenized otherwise:\n%s", r.describe())
    # the same data uncased: other hidden states (the check above can fail)
    r = h.run(["eval", cfg, "--checkpoint", ck, "--hidden", after, "--set",
               "data.lowercase=true"]).expect(0, "eval, lowercase set")
    notes = [l for l in r.err.splitlines() if "tokenizes otherwise" in l]
    check(U.read_bytes(before) != U.read_bytes(after) and len(notes) == 1 and
          "data.lowercase true, its run false" in notes[0],
          "eval with data.lowercase set otherwise:\n%s", r.describe())
    more = U.write_config(h, "cased-more.yaml", keys(h, run_dir, "gpt",
                                                     **dict(bert, **{"train.epochs": "3"})))
    r = h.run(["train", more, "--set", "train.resume=auto"]).expect(0, "resume, file changed")
    check("other data settings" not in r.err and "tokenizes otherwise" not in r.err,
          "resume after the tokenizer_config.json changed:\n%s", r.describe())
    newest = U.ckpt(run_dir, 15)
    check("lowercase: false" in read_manifest(newest)["config"],
          "the resumed run's checkpoint does not record lowercase false")
    # a checkpoint from before the keys records none: its run was uncased (the
    # one tokenizer there was), whatever the file beside data.vocab says now
    old = h.path("cased-old")
    shutil.copytree(run_dir, old)
    old_ck = U.ckpt(old, LAST)

    def no_keys(m):
        m["config"] = "".join(l for l in m["config"].splitlines(True) if l.strip().split(":")[0]
                              not in ("lowercase", "strip_accents", "split_cjk"))
    rewrite_manifest(old_ck, no_keys)
    U.write(tc, '{"do_lower_case": false}')
    outs = {}
    for name, sets in (("auto", []), ("uncased", ["data.lowercase=true", "data.strip_accents=true"]),
                       ("cased", ["data.lowercase=false", "data.strip_accents=false"])):
        outs[name] = h.path("h-old-%s.st" % name)
        args = ["eval", cfg, "--checkpoint", old_ck, "--hidden", outs[name]]
        for s_ in sets:
            args += ["--set", s_]
        h.run(args).expect(0, "eval of an old checkpoint, " + name)
    check(U.read_bytes(outs["auto"]) == U.read_bytes(outs["uncased"]) and
          U.read_bytes(outs["auto"]) != U.read_bytes(outs["cased"]),
          "an old checkpoint's eval did not tokenize uncased")
    h.run(["export", old_ck, h.path("old-export")]).expect(0, "export of an old checkpoint")
    written = json.load(open(h.path("old-export/tokenizer_config.json")))
    check(written.get("do_lower_case") is True and written.get("strip_accents") is True,
          "an old checkpoint's export says %s", written)
    # a config record that does not read (a newer pipetrain's key): how the
    # run tokenized is not known, and a guess is refused while a key is auto
    unknown = h.path("cased-unknown")
    shutil.copytree(run_dir, unknown)
    unknown_ck = U.ckpt(unknown, LAST)
    rewrite_manifest(unknown_ck, lambda m: m.update(config=m["config"].replace(
        "  lowercase: false", "  lowercase: false\n  frobnicate: 3")))
    r = h.run(["eval", cfg, "--checkpoint", unknown_ck]).expect(2, "an unreadable config record")
    r.one_error(unknown_ck, "frobnicate", "is not known: set those keys")
    h.run(["eval", cfg, "--checkpoint", unknown_ck, "--set", "data.lowercase=false", "--set",
           "data.strip_accents=false", "--set", "data.split_cjk=true"]).expect(0, "keys set")
    # ... and a value of a newer pipetrain's (a word a key's list lacks)
    rewrite_manifest(unknown_ck, lambda m: m.update(config=m["config"].replace(
        "  frobnicate: 3\n", "").replace("  schedule: cosine", "  schedule: wsd")))
    check("schedule: wsd" in read_manifest(unknown_ck)["config"], "no schedule forged")
    h.run(["eval", cfg, "--checkpoint", unknown_ck, "--set", "data.lowercase=false", "--set",
           "data.strip_accents=false", "--set", "data.split_cjk=true"]).expect(0, "a newer word")
    # but a config record no pipetrain writes (YAML that does not read, a
    # key twice) is damage: refused by eval as by inspect, export and train
    for name, edit in (("syntax", lambda c: "run: [\n"),
                       ("twice", lambda c: c.replace("  lowercase: false", "  lowercase: false\n"
                                                     "  lowercase: true", 1))):
        bad = h.path("cased-" + name)
        shutil.copytree(run_dir, bad)
        bad_ck = U.ckpt(bad, LAST)
        rewrite_manifest(bad_ck, lambda m: m.update(config=edit(m["config"])))
        for cmd in (["eval", cfg, "--checkpoint", bad_ck, "--set", "data.lowercase=false", "--set",
                     "data.strip_accents=false", "--set", "data.split_cjk=true"],
                    ["inspect", bad_ck]):
            r = h.run(cmd).expect(2, "%s: %s" % (name, cmd[0]))
            r.one_error(bad_ck, "config record")
    # an export whose data.vocab is gone leaves a vocab.txt where it writes alone
    os.rename(vocab, vocab + ".away")
    out = h.path("export-over-vocab")
    os.makedirs(out)
    mine = U.write(os.path.join(out, "vocab.txt"), "mine\n")
    r = h.run(["export", ck, out]).expect(2, "export with no tokenizer over a vocab.txt")
    r.one_error("export", mine, "no tokenizer to replace it with", "remove it or export elsewhere")
    check(os.listdir(out) == ["vocab.txt"] and U.read_bytes(mine) == b"mine\n",
          "a refused export changed %s: %s", out, os.listdir(out))
    os.rename(vocab + ".away", vocab)


def test_normalization_set_apart(h):
    """data.lowercase and data.strip_accents set apart, with no
    tokenizer_config.json beside data.vocab: strip_accents at auto follows
    the run's data.lowercase (false here, where the file's default would say
    true), and an uncased run that keeps its accents exports a
    tokenizer_config.json that says both as the run had them (each a mutant
    that passed: strip_accents from the file's lowercase, and written from
    the run's lowercase)."""
    files = U.bert_files(h, 40, 7)
    bert = dict(files, **{"model.kind": "bert", "model.context": "17", "model.positions": "20",
                          "model.classes": "3", "data.kind": "text_classification",
                          "sample.length": None})
    for name, sets, lower, strip in (("cased-auto", {"data.lowercase": "false"}, False, False),
                                     ("uncased-accents", {"data.lowercase": "true",
                                                          "data.strip_accents": "false"}, True, False)):
        check(not os.path.exists(os.path.join(os.path.dirname(files["data.vocab"]),
                                              "tokenizer_config.json")), "a tokenizer_config.json")
        _, run_dir = trained(h, name, kind="gpt", **dict(bert, **sets))
        ck = U.ckpt(run_dir, LAST)
        config = read_manifest(ck)["config"]
        # split_cjk at auto with no file: BertTokenizer's default, true
        check(("lowercase: %s" % str(lower).lower()) in config and
              ("strip_accents: %s" % str(strip).lower()) in config and
              "split_cjk: true" in config,
              "%s: the manifest records\n%s", name, config)
        out = h.path(name + "-export")
        h.run(["export", ck, out]).expect(0, "export of " + name)
        written = json.load(open(os.path.join(out, "tokenizer_config.json")))
        check(written.get("do_lower_case") is lower and written.get("strip_accents") is strip and
              written.get("tokenize_chinese_chars") is True,
              "%s: the export's tokenizer_config.json says %s", name, written)
        # the longest input is the run's model.context (17), not the
        # position table's rows (20)
        check(written.get("model_max_length") == 17, "%s: model_max_length %s", name,
              written.get("model_max_length"))


def test_export_from_another_directory(h):
    """A checkpoint records the directory its run started in, and an export
    from another one reads the config's relative paths from there: it finds
    the run's data.vocab (and writes the tokenizer files, cased as the run
    tokenized), and refuses, writing nothing, to export into the directory
    of that vocabulary or into the model.init_from it started from (found
    as the run found them, not from the export's working directory)."""
    files = U.bert_files(h, 40, 5)
    os.makedirs(h.path("work/pre"))
    shutil.copy(files["data.vocab"], h.path("work/vocab.txt"))
    U.write(h.path("work/tokenizer_config.json"), '{"do_lower_case": false}')
    bert = dict(files, **{"model.kind": "bert", "model.context": "17", "model.positions": "20",
                          "model.classes": "3", "data.kind": "text_classification",
                          "sample.length": None, "data.vocab": "vocab.txt",
                          "train.checkpoint_every": "3"})
    cfg = U.write(h.path("work/rel.yaml"), U.render(keys(h, "run", "gpt", **bert)))
    h.run(["train", cfg], cwd=h.path("work")).expect(0, "training with relative paths")
    ck = os.path.join(h.path("work/run/checkpoints"), "step_%010d" % LAST)
    check(read_manifest(ck).get("cwd") == h.path("work"), "the manifest's cwd: %s",
          read_manifest(ck).get("cwd"))
    # a pretrained directory of its own to start from, named relatively
    out = h.path("work/pre")
    h.run(["export", ck, out], cwd="/").expect(0, "export from / into a new directory")
    written = json.load(open(os.path.join(out, "tokenizer_config.json")))
    check(written.get("do_lower_case") is False and
          U.read_bytes(os.path.join(out, "vocab.txt")) == U.read_bytes(files["data.vocab"]),
          "the export from / did not write the run's tokenizer: %s", written)
    cfg2 = U.write(h.path("work/from-pre.yaml"), U.render(keys(h, "run2", "gpt", **dict(
        bert, **{"model.init_from": "pre"}))))
    h.run(["train", cfg2], cwd=h.path("work")).expect(0, "training from the relative export")
    ck2 = os.path.join(h.path("work/run2/checkpoints"), "step_%010d" % LAST)
    for into, needles in ((h.path("work"), ["the directory of data.vocab"]),
                          (out, ["model.init_from"])):
        before = U.snapshot(into)
        r = h.run(["export", ck2, into], cwd="/").expect(2, "export from / into " + into)
        r.one_error("export", *needles)
        check(U.snapshot(into) == before, "a refused export changed %s", into)
    # a copy of the project, exported in its own directory: its config names
    # the copy's vocabulary there, which is spared as the original's is
    shutil.copytree(h.path("work"), h.path("work-copy"), symlinks=True)
    U.write(h.path("work-copy/tokenizer_config.json"), '{"do_lower_case": false, "mine": 1}')
    before = U.snapshot(h.path("work-copy"))
    r = h.run(["export", os.path.join("run", "checkpoints", "step_%010d" % LAST), "."],
              cwd=h.path("work-copy")).expect(2, "export of a copied project into its directory")
    r.one_error("export", "the directory of data.vocab")
    check(U.snapshot(h.path("work-copy")) == before, "a refused export changed the copy")
    # the project moved since (the directory it recorded is gone): exported
    # in its new place, the relative data.vocab is found there
    os.rename(h.path("work"), h.path("work-moved"))
    moved = h.path("moved-export")
    r = h.run(["export", os.path.join("run", "checkpoints", "step_%010d" % LAST), moved],
              cwd=h.path("work-moved")).expect(0, "export of a moved project")
    check("no tokenizer files" not in r.err, "the moved project's vocabulary was not found:\n%s",
          r.err)
    check(U.read_bytes(os.path.join(moved, "vocab.txt")) == U.read_bytes(files["data.vocab"]) and
          json.load(open(os.path.join(moved, "tokenizer_config.json"))).get("do_lower_case") is False,
          "the moved project's export: %s", sorted(os.listdir(moved)))


def test_eval_of_a_checkpoint_reads_no_init_from(h):
    """An eval of a checkpoint takes the weights from it and trains nothing
    (no dropout), so model.init_from's files are not read: a pretrained
    directory damaged since (config.json cut short, another activation) or
    gone evaluates to the same bits, while its files are still spared as
    outputs. It used to refuse them, and a missing one with a hint to set
    model.init_from empty that train, plan and eval --init gave too, where
    following it trains or evaluates from the seed instead."""
    files, bert = bert_keys(h)
    pre = h.path("eval-pre")
    h.run(["export", U.ckpt(trained_bert(h), LAST), pre]).expect(0, "export")
    cfg, run_dir = trained(h, "from-pre", kind="gpt", **dict(bert, **{"model.init_from": pre}))
    ck = U.ckpt(run_dir, LAST)

    def logits(name, *extra):
        out = h.path(name)
        h.run(["eval", cfg, "--logits", out] + list(extra)).expect(0, "eval " + name)
        return U.read_bytes(out)
    want = logits("l-intact.st", "--checkpoint", ck)
    config = os.path.join(pre, "config.json")
    intact = open(config).read()
    for name, text in (("cut", intact[:1]), ("relu", intact.replace('"gelu"', '"relu"'))):
        check(text != intact, "%s: the config.json was not changed", name)
        U.write(config, text)
        check(logits("l-%s.st" % name, "--checkpoint", ck) == want and
              logits("l-%s-newest.st" % name) == want,
              "%s: an eval of a checkpoint beside a changed init_from gave other logits", name)
        # its files are outputs no eval replaces, read or not
        r = h.run(["eval", cfg, "--checkpoint", ck, "--logits", config]).expect(2, "--logits over it")
        r.one_error("--logits", strict=False)
    U.write(config, intact)
    shutil.rmtree(pre)
    check(logits("l-gone.st", "--checkpoint", ck) == want,
          "an eval of a checkpoint without its init_from gave other logits")
    # its directory holding none of the model's files: their places are
    # still outputs no eval makes (the next run would read them)
    os.makedirs(pre)
    shutil.copy(files["data.vocab"], os.path.join(pre, "vocab.txt"))
    for opt, name in (("--logits", "config.json"), ("--hidden", "model.safetensors"),
                      ("--report", "tokenizer_config.json")):
        out = os.path.join(pre, name)
        r = h.run(["eval", cfg, "--checkpoint", ck, opt, out]).expect(2, opt + " into init_from")
        r.one_error(opt, out, "reads when it is there", strict=False)
        check(sorted(os.listdir(pre)) == ["vocab.txt"], "a refused eval made %s", os.listdir(pre))
    # commands that read it refuse it, naming it, with no hint to empty it
    for args in (["train", cfg], ["plan", cfg], ["eval", cfg, "--init"]):
        r = h.run(args).expect(2, " ".join(args[:1] + args[2:]) + " without model.init_from")
        line = r.one_error("model.init_from", pre, "No such file", strict=False)
        check("--set" not in line and "eval of a checkpoint" not in line,
              "%s: a hint that does not apply:\n  %s", args[0], line)


def test_export_padded_bert(h):
    """A bert whose embedding is padded past its vocabulary's lines
    (model.vocab larger, as training allows) exports with its tokenizer
    files, the run's vocab.txt as it is, and a run from the export (its
    vocab.txt as data.vocab, the same padded model.vocab) trains."""
    files = U.bert_files(h, 40, 7)
    padded = str(int(files["model.vocab"]) + 5)
    bert = dict(files, **{"model.kind": "bert", "model.context": "17", "model.positions": "20",
                          "model.classes": "3", "data.kind": "text_classification",
                          "sample.length": None, "model.vocab": padded})
    _, run_dir = trained(h, "padded", kind="gpt", **bert)
    out = h.path("padded-export")
    r = h.run(["export", U.ckpt(run_dir, LAST), out]).expect(0, "export of a padded bert")
    check(os.path.exists(os.path.join(out, "tokenizer_config.json")) and
          U.read_bytes(os.path.join(out, "vocab.txt")) == U.read_bytes(files["data.vocab"]) and
          "no tokenizer files" not in r.err,
          "a padded bert's export has no tokenizer files:\n%s", r.describe())
    check(json.load(open(os.path.join(out, "config.json"))).get("vocab_size") == int(padded),
          "the export's vocab_size is not model.vocab")
    cfg = U.write_config(h, "from-padded.yaml", keys(h, h.path("from-padded"), "gpt", **dict(
        bert, **{"model.init_from": out, "data.vocab": os.path.join(out, "vocab.txt")})))
    h.run(["train", cfg]).expect(0, "training from a padded bert's export")


FULL_EXPORT = r"""
set -u
mount -t tmpfs -o size=64k tmpfs "$MNT" || exit 90
mkdir "$MNT/kept"
# all but a page of the 64 KiB: the weights cannot be written
head -c 61440 /dev/zero > "$MNT/filler"
"$BIN" export "$CK" "$MNT/new/deeper/out" > "$OUT/fresh.out" 2> "$OUT/fresh.err"; echo $? > "$OUT/fresh.rc"
"$BIN" export "$CK" "$MNT/kept/out/" > "$OUT/kept.out" 2> "$OUT/kept.err"; echo $? > "$OUT/kept.rc"
find "$MNT" > "$OUT/left"
"""


def test_failed_bert_export_takes_back_its_directories(h):
    """A bert export writes a directory, making it and its missing parents
    first; when the files then cannot be written (a full disk), the export
    fails naming the cause and leaves no directory it made, and those that
    were there before it stay. It used to leave them, empty."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "skipped: needs root and unshare(1) for a private tmpfs"
    ck = U.ckpt(trained_bert(h), LAST)
    out = h.path("full-export")
    mnt = os.path.join(out, "mnt")
    os.makedirs(mnt)
    env = dict(U.sanitizer_env(), MNT=mnt, BIN=h.binary, CK=ck, OUT=out)
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", FULL_EXPORT],
                       env=env, capture_output=True, text=True, timeout=120)
    if p.returncode == 90:
        return "skipped: no tmpfs could be mounted here (%s)" % p.stderr.strip()[-200:]
    check(p.returncode == 0, "the script failed (%d): %s", p.returncode, p.stderr[-2000:])
    for name in ("fresh", "kept"):
        rc = int(open(os.path.join(out, name + ".rc")).read())
        err = open(os.path.join(out, name + ".err")).read()
        check(rc not in (0, 2) and "No space left on device" in err,
              "%s: an export onto a full disk: exit %d (expected 1, ENOSPC named):\n%s", name, rc, err)
    left = sorted(os.path.relpath(line.strip(), mnt) for line in open(os.path.join(out, "left")))
    check(left == [".", "filler", "kept"], "the failed exports left %s (expected only the directory that was "
          "there)", left)


def export_files(d):
    """{name: bytes} of every file in directory d (None: no directory)."""
    if not os.path.isdir(d):
        return None
    return {n: U.read_bytes(os.path.join(d, n)) for n in sorted(os.listdir(d))}


def test_bert_export_out_of_descriptors(h):
    """A bert export stages its four files before it puts any in place; one
    that runs out of file descriptors (RLIMIT_NOFILE 4 to 16) at any point fails
    with nothing replaced: an earlier export in OUT stays whole, a new OUT
    and its parents are taken back. Taking the descriptor that holds a
    staged file's lock through its rename used to wait for the commit, so
    at some limits the first commit failed after the others had been
    staged and they were put in place anyway: a mix of the old export and
    the new, or a config.json alone."""
    import resource
    run_dir = trained_bert(h)
    ref = h.path("fd-ref")
    h.run(["export", U.ckpt(run_dir, LAST), ref]).expect(0, "export")
    new = export_files(ref)
    kept = h.path("fd-kept")
    h.run(["export", U.ckpt(run_dir, 9), kept]).expect(0, "export")
    old = export_files(kept)
    check(old != new, "the two checkpoints exported the same files")
    failed = passed = 0
    for limit in range(4, 17):  # the export needs 9 here; below that every step fails
        def low(limit=limit):
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
        fresh = h.path("fd-new-%d" % limit)
        for out, before in ((kept, old), (os.path.join(fresh, "a", "b"), None)):
            p = subprocess.run([h.binary, "export", U.ckpt(run_dir, LAST), out], capture_output=True,
                               text=True, errors="replace", timeout=120, env=U.sanitizer_env(),
                               stdin=subprocess.DEVNULL, preexec_fn=low)
            r = U.Result(p.args, p.returncode, p.stdout, p.stderr)
            if ("Sanitizer" in r.err and "Too many open files" in r.err) or \
                    "error while loading shared libraries" in r.err:
                continue  # the sanitizer's or the loader's own files at this limit, not pipetrain's
            U.no_sanitizer(r)
            now = export_files(out)
            if r.rc == 0:
                passed += 1
                check(now == new, "limit %d: an export that succeeded left %s",
                      limit, sorted(now or {}))
                continue
            failed += 1
            check(r.rc == 1 and "pipetrain: error" in r.err,
                  "limit %d: a failed export ended with %d:\n%s", limit, r.rc, r.describe())
            if before is None:
                check(not os.path.exists(fresh), "limit %d: a failed export into a new directory "
                      "left %s", limit, [r for r, _, _ in os.walk(fresh)])
            else:
                check(now == before, "limit %d: a failed export over an earlier one left it "
                      "changed (files %s; those that changed: %s)", limit, sorted(now or {}),
                      sorted(n for n in (now or {}) if now[n] != before.get(n)))
        if export_files(kept) != old:  # put back for the next limit after a success
            shutil.rmtree(kept)
            h.run(["export", U.ckpt(run_dir, 9), kept]).expect(0, "export")
    check(failed and passed, "the limits 4 to 16 did not both fail and pass an export (%d failed, %d "
          "passed): the test no longer reaches the case", failed, passed)


def test_bert_export_paths_that_are_not_what_they_say(h):
    """A bert export makes the directories OUT names that are not there, and
    used to check OUT against the run's inputs and checkpoints only where
    it was there: `e1/new/..` replaced the pretrained model in e1 that the
    run started from, `CK/sub/out` and `checkpoints/a/b` wrote into a
    checkpoint and the run's checkpoints, and `link/` wrote through a link
    that `link` is refused as. Each is refused now (exit 2, naming why),
    nothing is made or changed; a closed stdout after a finished export
    does not end it by SIGPIPE."""
    ck = U.ckpt(trained_bert(h), LAST)
    base = h.path("odd-exports")
    os.makedirs(os.path.join(base, "target"))
    os.symlink(os.path.join(base, "target"), os.path.join(base, "link"))
    first = os.path.join(base, "e1")
    h.run(["export", ck, first]).expect(0, "a first export")
    before = U.snapshot(base)
    ck_before = U.snapshot(ck)
    ckpts = os.path.dirname(ck)
    cases = [
        (os.path.join(first, "new", ".."), "follows"),
        (os.path.join(base, "new", "..", "e1"), "follows"),
        (os.path.join(base, "new", "."), "follows"),
        (os.path.join(ck, "sub", "out"), "in checkpoint directory"),
        (os.path.join(ckpts, "a", "b"), "a run's checkpoints"),
        (os.path.join(ckpts, "zz", "..", "step_%010d" % (LAST + 40)), "follows"),
        (os.path.join(base, "link") + "/", "symbolic link"),
        (os.path.join(base, "link", "."), "symbolic link"),
    ]
    for out, why in cases:
        r = h.run(["export", ck, out]).expect(2, "export to " + out)
        check(why in r.err, "export to %s: no %r in\n%s", out, why, r.describe())
        U.same_snapshot(before, U.snapshot(base), "after an export to " + out)
        check(not os.path.exists(os.path.join(base, "new")) and not os.listdir(
            os.path.join(base, "target")), "an export to %s made a directory", out)
        U.same_snapshot(ck_before, U.snapshot(ck), "the checkpoint after an export to " + out)
        check(sorted(os.listdir(ckpts)) == sorted(U.checkpoints(os.path.dirname(ckpts))),
              "the run's checkpoints after an export to %s: %s", out, os.listdir(ckpts))
    # a directory where the export's weights file goes: refused naming it as
    # what the export writes into OUT (it read as if OUT named the file)
    blocked = os.path.join(base, "blocked")
    os.makedirs(os.path.join(blocked, "model.safetensors"))
    held = U.snapshot(blocked)
    r = h.run(["export", ck, blocked]).expect(2, "an export onto a directory in the way")
    r.one_error("'%s/model.safetensors', the weights file a bert export writes into '%s', is a "
                "directory there" % (blocked, blocked))
    U.same_snapshot(held, U.snapshot(blocked), "the export directory with a directory in the way")
    # each of the directory's files is replaced only when it is of its kind:
    # a config.json or tokenizer_config.json that is no JSON object (a YAML
    # config, a script, a JSON list) is refused naming it, nothing written;
    # an earlier export's (and empty files) are replaced
    for name in ("model.safetensors", "config.json", "tokenizer_config.json"):
        for text in ("run:\n  dir: runs/x\n", "#!/bin/sh\necho hi\n", "[1, 2]\n"):
            stranger = os.path.join(base, "stranger")
            if os.path.exists(stranger):
                shutil.rmtree(stranger)
            os.makedirs(stranger)
            U.write(os.path.join(stranger, name), text)
            held = U.snapshot(stranger)
            r = h.run(["export", ck, stranger]).expect(2, "an export over a foreign " + name)
            r.one_error("'%s/%s' holds a file that is not a" % (stranger, name),
                        "it is not replaced")
            U.same_snapshot(held, U.snapshot(stranger), "the export directory with a foreign " + name)
    h.run(["export", ck, stranger]).expect(2, "the last stranger, again")
    shutil.rmtree(stranger)
    h.run(["export", ck, stranger]).expect(0, "an export into a new directory")
    U.write(os.path.join(stranger, "config.json"), "")
    h.run(["export", ck, stranger]).expect(0, "an export over an earlier one, config.json emptied")
    check(json.loads(U.read_bytes(os.path.join(stranger, "config.json"))).get("model_type") == "bert",
          "the export did not write config.json again")
    # a run.dir spelled through a directory that is not there: refused before
    # anything is made, and the files of the run it names are left alone
    run_dir = os.path.dirname(ckpts)
    empty = os.path.join(run_dir, "NOTES")
    U.write(empty, "")
    held = U.snapshot(run_dir)
    dotted = os.path.join(os.path.dirname(run_dir), "nx", "..", os.path.basename(run_dir))
    cfg = U.write_config(h, "dotted.yaml", keys(h, dotted, "gpt", **bert_keys(h)[1]))
    r = h.run(["train", cfg]).expect(2, "a run.dir through a missing directory")
    check("run.dir" in r.err and "does not exist yet" in r.err, "no reason given\n%s", r.describe())
    U.same_snapshot(held, U.snapshot(run_dir), "the run's directory after the refused train")
    check(os.path.isfile(empty) and os.path.isfile(os.path.join(run_dir, "lock")),
          "the refused train removed files of %s: %s", run_dir, os.listdir(run_dir))
    check(not os.path.exists(os.path.join(os.path.dirname(run_dir), "nx")), "nx was made")
    # stdout closed before the "wrote" line: the export is done, exit 0
    out = os.path.join(base, "piped")
    p = subprocess.Popen([h.binary, "export", ck, out], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=U.sanitizer_env(), cwd=h.dir)
    p.stdout.close()
    _, err = p.communicate(timeout=120)
    check(p.returncode == 0 and os.path.isfile(os.path.join(out, "model.safetensors")),
          "an export whose stdout was closed: exit %d\n%s", p.returncode, err.decode()[-2000:])


def test_stopped_bert_export_takes_back_its_directories(h):
    """A bert export into a directory it makes, ended by SIGTERM, SIGINT or
    SIGHUP while its files are written: the command ends by the signal and
    leaves neither temporary files nor the directories it made (those there
    before stay); one that finished first, or whose signal came once all its
    files were staged (it waits for their renames), leaves the whole export.
    The directories used to stay, empty."""
    bert = dict(bert_keys(h)[1], **{"model.dim": "256", "model.layers": "4", "model.heads": "4",
                                    "model.mlp_hidden": "1024"})
    cfg, run_dir = trained(h, "big-bert", kind="gpt", steps=(1,), **dict(bert, **{
        "train.max_steps": "1", "train.epochs": "1", "train.checkpoint_every": "1"}))
    ck = U.ckpt(run_dir, 1)
    base = h.path("stopped-exports")
    os.makedirs(base)
    stopped = 0
    for i, sig in enumerate((signal.SIGTERM, signal.SIGINT, signal.SIGHUP) * 2):
        top = os.path.join(base, "new%d" % i)
        out = os.path.join(top, "deeper", "out")
        for attempt in range(5):  # on a busy machine the poll may miss the write
            p = h.popen(["export", ck, out])
            caught = False
            while p.poll() is None and not caught:
                caught = os.path.isdir(out) and temporary_with_bytes(out)
            if caught:
                break
            p.communicate(timeout=120)
            shutil.rmtree(top, ignore_errors=True)
        p.send_signal(sig)
        p.communicate(timeout=120)
        check(p.returncode in (0, -sig), "export ended with %s after signal %d", p.returncode, sig)
        whole = os.path.isdir(out) and sorted(os.listdir(out)) == [
            "config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
        if p.returncode == -sig and whole:
            # the signal came once every file was staged: it waits for the
            # four renames, then ends the export (as the next test shows)
            pass
        elif p.returncode == -sig:
            stopped += 1
            left = [os.path.relpath(os.path.join(d, f), base) for d, ds, fs in os.walk(top) for f in ds + fs]
            check(not os.path.exists(top), "an export stopped by signal %d left %s (and %s)", sig,
                  left, top)
        else:
            check(sorted(os.listdir(out)) == ["config.json", "model.safetensors", "tokenizer_config.json",
                                              "vocab.txt"], "a finished export holds %s", os.listdir(out))
    check(sorted(os.listdir(base)) == ["new%d" % i for i in range(6) if os.path.exists(
        os.path.join(base, "new%d" % i))], "other entries in %s", os.listdir(base))
    check(stopped >= 3, "only %d of 6 exports were stopped while writing", stopped)


def test_signal_while_bert_export_renames(h):
    """A stop signal that comes while a bert export puts its four staged
    files in place, after any one of the renames: the export finishes the
    group first, then ends by the signal, so its directory holds the whole new
    export, never new files beside old or missing ones. A preloaded rename()
    raises the signal right after the rename of the file named, so the moment
    is exact."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return "skipped: no C compiler"
    src = U.write(h.path("rename.c"), r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
static void maybe_raise(const char *path, const char *var)
{
    const char *after = getenv(var);
    size_t n = strlen(path), m = after ? strlen(after) : 0;
    if (after && n >= m && strcmp(path + n - m, after) == 0)
        raise(atoi(getenv("PT_TEST_SIGNAL")));
}
int rename(const char *from, const char *to)
{
    int (*real)(const char *, const char *) = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    const int rc = real(from, to);
    maybe_raise(to, "PT_TEST_SIGNAL_AFTER");
    return rc;
}
int mkdir(const char *path, mode_t mode)
{
    int (*real)(const char *, mode_t) = (int (*)(const char *, mode_t))dlsym(RTLD_NEXT, "mkdir");
    const int rc = real(path, mode);
    if (rc == 0)
        maybe_raise(path, "PT_TEST_SIGNAL_AFTER_MKDIR");
    return rc;
}
""")
    lib = h.path("rename.so")
    subprocess.run([cc, "-shared", "-fPIC", "-o", lib, src, "-ldl"], check=True)
    run_dir = trained_bert(h)
    ck, older = U.ckpt(run_dir, LAST), U.ckpt(run_dir, 3)
    names = ["config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
    want = h.path("reference")
    h.run(["export", ck, want]).expect(0, "the reference export")
    want_bytes = {n: U.read_bytes(os.path.join(want, n)) for n in names}
    old = h.path("old-export")
    h.run(["export", older, old]).expect(0, "an export of step 3")
    check(U.read_bytes(os.path.join(old, "model.safetensors")) != want_bytes["model.safetensors"],
          "steps 3 and %d exported the same weights", LAST)
    for i, (after, sig) in enumerate((a, s) for a in names for s in
                                     (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)):
        for into in ("new", "over"):
            out = h.path("%s%d/out" % (into, i))
            if into == "over":
                shutil.copytree(old, out)
            env = {"LD_PRELOAD": lib, "PT_TEST_SIGNAL_AFTER": "/" + after,
                   "PT_TEST_SIGNAL": str(int(sig)),
                   "ASAN_OPTIONS": "verify_asan_link_order=0:" + os.environ.get("ASAN_OPTIONS", "")}
            full = dict(U.sanitizer_env(), **env)
            p = subprocess.run([h.binary, "export", ck, out], capture_output=True, text=True,
                               errors="replace", timeout=240, env=full, cwd=h.dir,
                               stdin=subprocess.DEVNULL)
            r = U.Result([h.binary, "export", ck, out], p.returncode, p.stdout, p.stderr)
            U.no_sanitizer(r)
            check(r.rc == -sig, "signal %d after %s (%s): exit %s\n%s", sig, after, into, r.rc,
                  r.describe())
            got = sorted(os.listdir(out)) if os.path.isdir(out) else None
            check(got == names, "signal %d after %s (%s): the directory holds %s", sig, after,
                  into, got)
            for n in names:
                check(U.read_bytes(os.path.join(out, n)) == want_bytes[n],
                      "signal %d after %s (%s): %s is not the new export's", sig, after, into, n)
    # and right after each mkdir of the directories it makes (the moment
    # between a mkdir and its record, which a handler used to miss): none of
    # them is left
    for level in ("m1", "m2", "out"):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            top = h.path("made-%s-%d" % (level, sig))
            os.makedirs(top)
            out = os.path.join(top, "m1", "m2", "out")
            env = {"LD_PRELOAD": lib, "PT_TEST_SIGNAL_AFTER_MKDIR": "/" + level,
                   "PT_TEST_SIGNAL": str(int(sig)),
                   "ASAN_OPTIONS": "verify_asan_link_order=0:" + os.environ.get("ASAN_OPTIONS", "")}
            p = subprocess.run([h.binary, "export", ck, out], capture_output=True, text=True,
                               errors="replace", timeout=240, env=dict(U.sanitizer_env(), **env),
                               cwd=h.dir, stdin=subprocess.DEVNULL)
            U.no_sanitizer(U.Result(["export"], p.returncode, p.stdout, p.stderr))
            check(p.returncode == -sig, "signal %d after mkdir %s: exit %s\n%s", sig, level,
                  p.returncode, p.stderr[-1500:])
            check(os.listdir(top) == [], "signal %d after mkdir %s left %s", sig, level,
                  [os.path.relpath(os.path.join(d, x), top) for d, ds, fs in os.walk(top)
                   for x in ds + fs])


def test_unmakeable_directories_leave_nothing(h):
    """A run.dir or a bert export directory that cannot be made part of the
    way down (a name past 255 bytes under new levels) is refused, exit 2
    naming it, and the levels made before the failure are taken back (a
    refused train used to leave them); a bert export from a working
    directory that was removed is bad input too (exit 2, as for train)."""
    cfg, _ = trained(h, "vit")
    long = "b" * 256
    for where in (os.path.join("new1", "new2", long), os.path.join(h.dir, "abs1", long, "x")):
        r = h.run(["train", cfg, "--set", "run.dir=" + where]).expect(2, where)
        r.one_error("run.dir", "File name too long")
        check(not os.path.exists(os.path.join(h.dir, "new1")) and
              not os.path.exists(os.path.join(h.dir, "abs1")), "a refused train left %s",
              sorted(os.listdir(h.dir)))
    bert = trained_bert(h)
    ck = U.ckpt(bert, LAST)
    r = h.run(["export", ck, os.path.join("e1", "e2", long, "out")]).expect(2)
    r.one_error("File name too long")
    check(not os.path.exists(h.path("e1")), "a refused export left %s", h.path("e1"))
    p = subprocess.run(["sh", "-c", 'mkdir gone && cd gone && rmdir ../gone && exec "$0" export '
                        '"$1" out', h.binary, ck], cwd=h.dir, capture_output=True, text=True,
                       env=U.sanitizer_env(), timeout=240)
    r = U.Result(["export from a removed directory"], p.returncode, p.stdout, p.stderr)
    r.expect(2, "export from a removed working directory").one_error("out")


def test_export_spares_data_files(h):
    """export never writes over the data a run trained on: an IDX run's four
    image and label files and a text run's data.text, named as the config
    names them (relative to the run's directory), from that directory and
    from another, are refused with exit 2 naming the key, and stay as they
    were."""
    import gzip
    os.makedirs(h.path("work"))
    rnd = random.Random(3)
    idx = {}
    for split, n in (("train", 40), ("test", 16)):
        img, lab = h.path("work/%s-images.gz" % split), h.path("work/%s-labels.gz" % split)
        with gzip.open(img, "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 8, 8) + bytes(rnd.randrange(256) for _ in range(n * 64)))
        with gzip.open(lab, "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + bytes(rnd.randrange(4) for _ in range(n)))
        idx["data.%s_images" % split] = os.path.basename(img)
        idx["data.%s_labels" % split] = os.path.basename(lab)
    U.write(h.path("work/text.txt"), "in the beginning god created the heaven and the earth. " * 40)
    runs = {"vit": dict(idx, **{"data.kind": "idx", "model.patch": "4"}),
            "gpt": {"data.kind": "text", "data.text": "text.txt"}}
    for kind, extra in runs.items():
        cfg = U.write(h.path("work/%s.yaml" % kind), U.render(keys(h, kind + "-run", kind, **extra)))
        h.run(["train", cfg], cwd=h.path("work")).expect(0, "training " + kind)
        ck = h.path("work", kind + "-run", "checkpoints", U.checkpoints(h.path("work", kind + "-run"))[-1])
        for key, name in extra.items():
            if key in ("data.kind", "model.patch"):
                continue
            before = U.snapshot(h.path("work"))
            for cwd, out in ((h.path("work"), name), ("/", h.path("work", name))):
                r = h.run(["export", ck, out], cwd=cwd).expect(2, "export over %s from %s" % (key, cwd))
                r.one_error("export", key)
                check(U.snapshot(h.path("work")) == before, "a refused export over %s changed the "
                      "run's directory", key)


def test_data_identity(h):
    """A checkpoint records what the run was fed: the SHA-256 of the
    training and test examples as the model sees them (counts, token ids,
    labels) and of the vocabulary's tokens in id order. A vocab.txt of the
    same size with two tokens swapped is refused by a resume and an eval
    naming data.vocab (the embedding rows stand for the old tokens), and an
    export then writes no vocab.txt; a training or test file edited in place
    under the same keys resumes with a note saying so; a malformed record is
    refused naming it; a manifest without one is not checked. Training from
    an export whose vocab.txt differs from data.vocab says so in a note, and
    so does one whose vocab.txt cannot be read as a vocabulary."""
    import hashlib
    files = U.bert_files(h, 40, 2)
    bert = dict(files, **{"model.kind": "bert", "model.context": "17", "model.positions": "20",
                          "model.classes": "3", "data.kind": "text_classification",
                          "sample.length": None})
    _, orig = trained(h, "ident", kind="gpt", **bert)
    m = read_manifest(U.ckpt(orig, LAST))
    data = m.get("data", {})
    with open(files["data.vocab"]) as f:
        tokens = f.read().split("\n")[:-1]
    check(data.get("vocab") == {"sha256": hashlib.sha256(
        "".join(t + "\n" for t in tokens).encode()).hexdigest()},
          "the manifest's vocab record %s", data.get("vocab"))
    check(data.get("train", {}).get("examples") == 40 and data.get("test", {}).get("examples") == 16 and
          all(len(data[k]["sha256"]) == 64 for k in ("train", "test")) and
          data["train"]["sha256"] != data["test"]["sha256"], "the manifest's data record %s", data)
    # the same vocabulary in CRLF lines is the same tokens: not refused
    crlf = U.write(h.path("vocab-crlf.txt"), "".join(t + "\r\n" for t in tokens))
    cfg, run_dir = copy_run(h, orig, "ident-crlf", kind="gpt",
                            **dict(bert, **{"data.vocab": crlf, "train.epochs": "3"}))
    h.run(["eval", cfg, "--checkpoint", U.ckpt(run_dir, LAST)]).expect(0, "eval, vocab in CRLF lines")
    # two tokens swapped: same size, other ids
    swapped = tokens[:]
    swapped[5], swapped[6] = swapped[6], swapped[5]
    other = U.write(h.path("vocab-swapped.txt"), "\n".join(swapped) + "\n")
    cfg, run_dir = copy_run(h, orig, "ident-vocab", kind="gpt", **dict(bert, **{"data.vocab": other}))
    all_refuse(h, cfg, run_dir, U.ckpt(run_dir, LAST),
               ["vocab-swapped.txt", "data.vocab", "not the vocabulary checkpoint"],
               ("auto", "path", "eval"))
    # export reads the checkpoint's own data.vocab: changed under it, the
    # export has the weights but no tokenizer files
    cfg, run_dir = copy_run(h, orig, "ident-export", kind="gpt", **bert)
    saved = U.read_bytes(files["data.vocab"])
    try:
        U.write(files["data.vocab"], "\n".join(swapped) + "\n")
        out = h.path("ident-export-dir")
        r = h.run(["export", U.ckpt(run_dir, LAST), out]).expect(0, "export, vocab changed")
        check("no longer the vocabulary the checkpoint was trained with" in r.err and not os.path.exists(
            os.path.join(out, "vocab.txt")) and os.path.exists(os.path.join(out, "model.safetensors")),
              "export with a changed vocab:\n%s", r.describe())
    finally:
        with open(files["data.vocab"], "wb") as f:
            f.write(saved)
    out = h.path("ident-export-good")
    h.run(["export", U.ckpt(run_dir, LAST), out]).expect(0, "export")
    check(os.path.exists(os.path.join(out, "vocab.txt")), "export wrote no vocab.txt")
    # the training or the test file edited in place (same path, same keys):
    # resumed, with one note naming the key and the file; a settings change
    # gets its own note and not this one
    for split in ("train", "test"):
        key = "data.%s_file" % split
        mine = dict(files)
        for k in ("data.train_file", "data.test_file"):
            mine[k] = U.write(h.path("ident-%s-%s" % (split, os.path.basename(files[k]))),
                              open(files[k]).read())
        _, run_dir = trained(h, "ident-" + split, kind="gpt", **dict(bert, **mine))
        with open(mine[key]) as f:
            lines = f.read().splitlines(True)
        lines[0] = lines[0][:2] + "and " + lines[0][2:]
        U.write(mine[key], "".join(lines))
        cfg = U.write_config(h, "ident-%s-more.yaml" % split, keys(h, run_dir, "gpt", **dict(
            bert, **dict(mine, **{"train.epochs": "3"}))))
        r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resume, %s edited" % split)
        word = "training" if split == "train" else "test"
        notes = [l for l in r.err.splitlines() if "examples than it was saved with" in l]
        check(len(notes) == 1 and ("on other %s examples than it was saved with, from the same "
                                   "settings: %s '%s' changed since (%d examples" %
                                   (word, key, mine[key], 40 if split == "train" else 16)) in notes[0],
              "not one note of the %s file edited in place:\n%s", split, r.describe())
    # the labels alone changed ('a' and 'b' swapped on every line, the texts
    # and the set of labels as they were): noted as other examples too
    mine = {k: U.write(h.path("ident-labels-" + os.path.basename(files[k])), open(files[k]).read())
            for k in ("data.train_file", "data.test_file")}
    _, run_dir = trained(h, "ident-labels", kind="gpt", **dict(bert, **mine))
    swap = {"a": "b", "b": "a"}
    with open(mine["data.train_file"]) as f:
        lines = f.read().splitlines(True)
    U.write(mine["data.train_file"], "".join(swap.get(l[0], l[0]) + l[1:] for l in lines))
    cfg = U.write_config(h, "ident-labels-more.yaml", keys(h, run_dir, "gpt", **dict(
        bert, **dict(mine, **{"train.epochs": "3"}))))
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resume, labels swapped")
    check("on other training examples than it was saved with, from the same settings: "
          "data.train_file '%s' changed since (40 examples" % mine["data.train_file"] in r.err,
          "no note of the labels swapped in place:\n%s", r.describe())
    # the same data: no note
    cfg, run_dir = copy_run(h, orig, "ident-same", kind="gpt", **dict(bert, **{"train.epochs": "3"}))
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resume, same data")
    check("examples than it was saved with" not in r.err, "a note on the same data:\n%s",
          r.describe())
    # malformed records refused naming them; none at all: not checked
    for name, edit, needle in (
            ("ident-bad-sha", lambda m: m["data"]["train"].update(sha256="xyz"), "data.train is malformed"),
            ("ident-bad-count", lambda m: m["data"]["test"].update(examples=-1), "data.test is malformed"),
            ("ident-bad-vocab", lambda m: m["data"].update(vocab=[1]), "data.vocab is malformed"),
            ("ident-bad-data", lambda m: m.update(data="x"), "data is not an object")):
        cfg, run_dir = copy_run(h, orig, name, kind="gpt", **bert)
        for step in (9, LAST):
            rewrite_manifest(U.ckpt(run_dir, step), edit)
        all_refuse(h, cfg, run_dir, U.ckpt(run_dir, LAST), [needle], ("auto", "path", "eval"))
        r = h.run(["export", U.ckpt(run_dir, LAST), h.path(name + "-export")])
        expect_refused(h, r, [needle], "export of " + name)
        check(not os.path.exists(h.path(name + "-export")), "a refused export wrote %s", name)
    # a count that disagrees with the digest (edited by hand): noted as other data
    cfg, run_dir = copy_run(h, orig, "ident-count", kind="gpt", **dict(bert, **{"train.epochs": "3"}))
    rewrite_manifest(U.ckpt(run_dir, LAST), lambda m: m["data"]["train"].update(examples=41))
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resume, count edited")
    check("on other training examples than it was saved with, from the same settings: "
          "data.train_file '%s' changed since (41 examples" % files["data.train_file"] in r.err,
          "no note of a count that differs:\n%s", r.describe())
    cfg, run_dir = copy_run(h, orig, "ident-none", kind="gpt", **dict(bert, **{"data.vocab": other}))
    for step in (9, LAST):
        rewrite_manifest(U.ckpt(run_dir, step), lambda m: m.pop("data"))
    h.run(["eval", cfg, "--checkpoint", U.ckpt(run_dir, LAST)]).expect(0, "a manifest without data")
    # model.init_from of the export (its vocab.txt the original) with the
    # swapped data.vocab: a note naming both and the first id that differs
    for name, vocab, noted in (("ident-init-other", other, True),
                               ("ident-init-same", files["data.vocab"], False)):
        cfg = U.write_config(h, name + ".yaml", keys(h, h.path(name), "gpt", **dict(
            bert, **{"model.init_from": out, "data.vocab": vocab})))
        for args in (["train", cfg], ["eval", cfg, "--init"]):
            r = h.run(args).expect(0, "%s from the export" % args[0])
            note = "differs from model.init_from's '%s' in 2 of the ids (first: id 5 is '%s' there, " \
                   "'%s' here)" % (os.path.join(out, "vocab.txt"), tokens[5], tokens[6])
            check((note in r.err) == noted, "%s, %s: note %s expected:\n%s", name, args[0],
                  "a" if noted else "no", r.describe())
    # an init_from vocab.txt that does not load (a token twice): its ids are
    # not compared, and a note says so instead of nothing
    unreadable = h.path("ident-init-unreadable-from")
    shutil.copytree(out, unreadable)
    U.write(os.path.join(unreadable, "vocab.txt"), "".join(t + "\n" for t in tokens[:6] + tokens[5:]))
    cfg = U.write_config(h, "ident-init-unreadable.yaml", keys(h, h.path("ident-init-unreadable"), "gpt", **dict(
        bert, **{"model.init_from": unreadable})))
    r = h.run(["train", cfg]).expect(0, "train from an export with an unreadable vocab.txt")
    check("model.init_from's '%s' cannot be read as a vocabulary, so data.vocab '%s' was not compared" %
          (os.path.join(unreadable, "vocab.txt"), files["data.vocab"]) in r.err,
          "no note of the init_from vocab.txt that does not load:\n%s", r.describe())
    # a vocab.txt there that is no file (a directory, a FIFO, a dangling
    # link): not compared either, said, and never waited on
    for kind in ("dir", "fifo", "dangling"):
        there = h.path("ident-init-%s-from" % kind)
        shutil.copytree(out, there)
        v = os.path.join(there, "vocab.txt")
        os.remove(v)
        {"dir": os.mkdir, "fifo": os.mkfifo,
         "dangling": lambda p: os.symlink(h.path("nothing-here"), p)}[kind](v)
        cfg = U.write_config(h, "ident-init-%s.yaml" % kind, keys(h, h.path("ident-init-" + kind),
                                                                   "gpt", **dict(bert, **{
                                                                       "model.init_from": there})))
        r = h.run(["train", cfg]).expect(0, "train from an export whose vocab.txt is a " + kind)
        check("model.init_from's '%s' is not a regular file, so data.vocab '%s' was not compared" %
              (v, files["data.vocab"]) in r.err, "%s: no note of the vocab.txt:\n%s", kind,
              r.describe())
    # none at all: nothing to compare, no note
    none = h.path("ident-init-none-from")
    shutil.copytree(out, none)
    os.remove(os.path.join(none, "vocab.txt"))
    cfg = U.write_config(h, "ident-init-none.yaml", keys(h, h.path("ident-init-none"), "gpt", **dict(
        bert, **{"model.init_from": none})))
    r = h.run(["train", cfg]).expect(0, "train from an export without a vocab.txt")
    check("was not compared" not in r.err, "a note without a vocab.txt:\n%s", r.describe())


def test_eval_of_other_sized_test_images_names_them(h):
    """IDX images 8x8 in training; `eval` of test images 4x4 (the model's
    image size comes from the images) is refused naming data.test_images,
    the file eval reads, not data.train_images, which it does not."""
    import struct

    def idx(path, count, side, labels=None):
        if labels is not None:
            return U.write(path, struct.pack(">II", 0x801, count) + bytes(labels), "wb")
        return U.write(path, struct.pack(">IIII", 0x803, count, side, side) +
                       bytes((i * 37) % 256 for i in range(count * side * side)), "wb")
    data = {"data.kind": "idx", "data.train_images": idx(h.path("ti"), 40, 8),
            "data.train_labels": idx(h.path("tl"), 40, 8, [i % 4 for i in range(40)]),
            "data.test_images": idx(h.path("vi"), 12, 8),
            "data.test_labels": idx(h.path("vl"), 12, 8, [i % 4 for i in range(12)]),
            "data.image_size": None, "data.synthetic_examples": None}
    _, run_dir = trained(h, "idx", **data)
    small = dict(data, **{"data.test_images": idx(h.path("small"), 12, 4)})
    cfg = U.write_config(h, "idx-small.yaml", keys(h, run_dir, **small))
    r = h.run(["eval", cfg]).expect(2, "test images of another size")
    r.one_error("data.test_images", strict=False)
    check("data.train_images" not in r.error_lines()[0], "names data.train_images:\n%s",
          r.describe())


def test_images_edited_in_place_are_noted(h):
    """IDX images: the digest covers the pixels as the model gets them. One
    pixel of the training file changed in place gives a note naming
    data.train_images; the same files give none."""
    import struct

    def idx(path, count, labels=None):
        if labels is not None:
            return U.write(path, struct.pack(">II", 0x801, count) + bytes(labels), "wb")
        return U.write(path, struct.pack(">IIII", 0x803, count, 8, 8) +
                       bytes((i * 37) % 256 for i in range(count * 64)), "wb")
    data = {"data.kind": "idx", "data.train_images": idx(h.path("ti"), 40),
            "data.train_labels": idx(h.path("tl"), 40, [i % 4 for i in range(40)]),
            "data.test_images": idx(h.path("vi"), 12),
            "data.test_labels": idx(h.path("vl"), 12, [i % 4 for i in range(12)]),
            "data.image_size": None, "data.synthetic_examples": None}
    _, run_dir = trained(h, "idx", **data)
    cfg = U.write_config(h, "idx-more.yaml", keys(h, run_dir, **dict(data, **{"train.epochs": "3"})))
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0, "same images")
    check("examples than it was saved with" not in r.err, "a note on the same images:\n%s", r.err)
    raw = bytearray(U.read_bytes(data["data.train_images"]))
    raw[16 + 100] ^= 1
    U.write(data["data.train_images"], bytes(raw), "wb")
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0, "a pixel changed")
    check("on other training examples than it was saved with, from the same settings: "
          "data.train_images '%s' and data.train_labels '%s' changed since (40 examples" %
          (data["data.train_images"], data["data.train_labels"]) in r.err and
          "other test examples" not in r.err, "no note of the changed pixel:\n%s", r.err)
    # the pixel back, and a label changed instead: the labels are the data too
    raw[16 + 100] ^= 1
    U.write(data["data.train_images"], bytes(raw), "wb")
    labels = bytearray(U.read_bytes(data["data.train_labels"]))
    labels[8 + 5] = (labels[8 + 5] + 1) % 4
    U.write(data["data.train_labels"], bytes(labels), "wb")
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0, "a label changed")
    check("on other training examples than it was saved with, from the same settings: "
          "data.train_images '%s' and data.train_labels '%s' changed since (40 examples" %
          (data["data.train_images"], data["data.train_labels"]) in r.err,
          "no note of the changed label:\n%s", r.err)


def test_resume_mid_epoch_after_data_shrank(h):
    """Step 3 is 3 batches into an epoch; with 16 examples an epoch has 2
    batches. The refusal names the key that changed, at its line, as the
    other refusals of a resume do (it used to name none)."""
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "copy", **{"data.synthetic_examples": "16"})
    ck = U.ckpt(run_dir, 3)
    all_refuse(h, cfg, run_dir, ck, ["step_0000000003", "copy.yaml:", "data.synthetic_examples: ",
                                     "data.synthetic_examples 40 -> 16"], ("path",))
    # at the boundary: 24 examples make epochs of 3 batches, and step 3 is 3
    # batches into one, past its last (once taken for a position inside it:
    # the later checkpoints moved aside, then exit 1 at the first step)
    cfg, run_dir = copy_run(h, orig, "copy-edge", **{"data.synthetic_examples": "24"})
    all_refuse(h, cfg, run_dir, U.ckpt(run_dir, 3), ["3 batches into an epoch of 3 batches",
                                                     "data.synthetic_examples 40 -> 24"], ("path",))
    # beside keys that change only the order or the pixels (before it in the
    # table), the key named is still the one that changed the count
    cfg, run_dir = copy_run(h, orig, "copy2", **{"data.synthetic_examples": "16",
                                                 "data.shuffle": "false", "data.hflip": "true"})
    line = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 3)]).expect(2).one_error(
        "copy2.yaml:", "data.synthetic_examples: ", "data.synthetic_examples 40 -> 16")
    check("shuffle" not in line and "hflip" not in line, "%s", line)
    # bert: another test file (which takes nothing from the training file)
    # beside a training file cut in place: the training file is named
    files, bert = bert_keys(h)
    _, borig = trained(h, "bert", kind="gpt", **bert)
    other_test = U.write(h.path("test2.tsv"), open(files["data.test_file"]).read())
    cfg, run_dir = copy_run(h, borig, "bcopy", kind="gpt",
                            **dict(bert, **{"data.test_file": other_test}))
    with open(files["data.train_file"]) as f:
        lines = f.read().splitlines()
    U.write(files["data.train_file"], "\n".join(lines[:16]) + "\n")
    line = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 3)]).expect(2).one_error(
        "data.train_file", "changed since")
    check("data.test_file" not in line.split("checkpoint")[0], "%s", line)
    # no test file any more, and a test fraction that leaves too few
    # training texts: both are named, the fraction too
    cfg, run_dir = copy_run(h, borig, "bcopy2", kind="gpt",
                            **dict(bert, **{"data.test_file": '""', "data.test_fraction": "0.5"}))
    U.write(files["data.train_file"], "\n".join(lines) + "\n")
    h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 3)]).expect(2).one_error(
        "data.test_file", "data.test_fraction 0.1 -> 0.5")


def test_schedule_note_on_resume(h):
    """A resume under another learning-rate schedule says so once; a
    min_lr changed under a constant schedule (which never reaches it) is no
    change, and the same schedule gets no note. The note says the new
    schedule's kind and warm-up."""
    for i, (sched, changes, noted) in enumerate((
            ("cosine", {}, None), ("cosine", {"train.lr": "0.002"}, "lr 0.002"),
            ("cosine", {"train.min_lr": "0.0002"}, "min_lr 0.0002"),
            ("cosine", {"train.warmup_steps": "4"}, "warm-up 4"),
            ("cosine", {"train.schedule": "linear"}, "linear"),
            ("constant", {"train.min_lr": "0.0002"}, None))):
        if not os.path.isdir(h.path("s-%s" % sched)):
            trained(h, "s-%s" % sched, **{"train.schedule": sched})
        orig = h.path("s-%s" % sched)
        cfg, run_dir = copy_run(h, orig, "c-%d" % i, **dict({"train.schedule": sched}, **changes))
        r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0)
        notes = [l for l in r.err.splitlines() if "learning-rate schedule differs" in l]
        # (the new schedule is the part after "now")
        check(len(notes) == (1 if noted else 0) and (not noted or noted in notes[0].split(", now ")[-1]),
              "%s %s: %d notes of another schedule\n%s", sched, changes, len(notes), r.err)


def test_optimizer_note_on_resume(h):
    """A resume with other optimizer or freezing settings than the
    checkpoint's says so in one note naming each changed key, old and new;
    the same settings resume without it."""
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "same")
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0, "same settings")
    check("other optimizer or freezing settings" not in r.err, "a note with the same settings:\n%s",
          r.err)
    for name, changes, needles in (
            ("decay", {"train.weight_decay": "0.5"}, ["train.weight_decay"]),
            ("beta2", {"train.beta2": "0.99"}, ["train.beta2"]),
            ("clip", {"train.grad_clip": "0.5"}, ["train.grad_clip"]),
            ("both", {"train.weight_decay": "0.5", "freeze.policy": "schedule", "freeze.unit": "step",
                      "freeze.every": "3", "freeze.start": "3"},
             ["train.weight_decay", "freeze.policy"])):
        cfg, run_dir = copy_run(h, orig, name, **changes)
        r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0, name)
        notes = [l for l in r.err.splitlines() if "other optimizer or freezing settings" in l]
        check(len(notes) == 1 and all(n in notes[0] for n in needles) and "step_0000000006" in notes[0],
              "%s: the note does not name %s:\n%s", name, needles, r.err)


def test_resume_with_other_data_is_noted(h):
    """Other data settings than the checkpoint's are allowed on resume (the
    epoch still fits the position), but the resume is no longer the run that
    did not stop: a note names each changed data key, old and new value; the
    same data resumes without one."""
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "same", **{"train.epochs": "3"})
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0, "same data")
    check("other data settings" not in r.err, "a note with the same data:\n%s", r.err)
    cfg, run_dir = copy_run(h, orig, "more", **{"train.epochs": "3", "data.synthetic_examples": "48",
                                                "data.shuffle": "false"})
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0, "other data")
    note = [l for l in r.err.splitlines() if "other data settings" in l]
    check(len(note) == 1 and "data.synthetic_examples 40 -> 48" in note[0] and
          "data.shuffle true -> false" in note[0] and "step_0000000006" in note[0],
          "the note does not name the changes:\n%s", r.err)
    check("examples than it was saved with" not in r.err,
          "a second note of the other examples beside the settings':\n%s", r.err)
    # epochs of 6 batches now: the 5 of epoch 1 stay, so the run ends with
    # epoch 3 at step 5 + 2 * 6 = 17 (it counted 3 * 6 = 18 steps, one
    # past the end of epoch 3)
    check(U.checkpoints(run_dir)[-1] == "step_%010d" % 17 and "epoch 4" not in r.err + r.out and
          "of 17 steps" not in r.err, "the resumed run does not end with epoch 3 at step 17: %s\n%s",
          U.checkpoints(run_dir), r.err[-3000:])
    # and the learning-rate schedule runs over those 17 steps, down to
    # train.min_lr at the end (it once kept the 18 counted before the
    # checkpoint was read: every rate from step 7 on was another)
    check("over 17)" in r.err, "the schedule's note does not say 17 steps:\n%s", r.err)
    lr = json.loads(h.run(["inspect", U.ckpt(run_dir, 17)]).expect(0, "inspect").out)["lr"]
    check(lr["total_steps"] == 17 and lr["next"] == lr["min"], "the schedule after the resume: %s", lr)


def test_resume_with_other_initial_weights_is_noted(h):
    """A resume continues the checkpoint's weights: with another
    model.init_std or model.init_from than the run started with no initial
    weights are loaded, and a note says so, naming both values (before:
    silently ignored); the same ones give none. The resumed run is
    bit-identical to the one without them."""
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "same-init", **{"train.epochs": "3"})
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0, "same init")
    check("other initial weights" not in r.err, "a note with the same initial weights:\n%s", r.err)
    same = [U.unit_records(f) for f in U.unit_files(U.ckpt(run_dir, 15))]
    weights = h.path("init.safetensors")
    h.run(["export", U.ckpt(orig, 3), weights]).expect(0, "exporting initial weights")
    cfg, run_dir = copy_run(h, orig, "other-init", **{"train.epochs": "3", "model.init_std": "0.05",
                                                      "model.init_from": weights})
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0, "other init")
    note = [l for l in r.err.splitlines() if "other initial weights" in l]
    check(len(note) == 1 and "model.init_std 0.02 -> 0.05" in note[0] and
          'model.init_from "" -> "%s"' % weights in note[0] and "step_0000000006" in note[0] and
          "none are loaded" in note[0], "the note does not name the changes:\n%s", r.err)
    check([U.unit_records(f) for f in U.unit_files(U.ckpt(run_dir, 15))] == same,
          "the other initial weights changed the resumed run")


def test_minus_zero_is_zero(h):
    """A number key written -0 is 0: the run saves it as 0, and a resume
    that says 0 is the same setting, without a note of another optimizer
    setting (before: saved as -0, and noted as -0 -> 0)."""
    run_dir = h.path("minus-zero")
    cfg = U.write_config(h, "minus-zero.yaml", keys(h, run_dir, **{"train.weight_decay": "-0"}))
    h.run(["train", cfg]).expect(0, "training with train.weight_decay -0")
    r = h.run(["inspect", run_dir, "--config"]).expect(0, "inspect --config")
    check("  weight_decay: 0\n" in r.out, "not saved as 0:\n%s", r.out)
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6), "--set",
               "train.weight_decay=0"]).expect(0, "resume with 0")
    check("other optimizer" not in r.err, "a note of another weight decay:\n%s", r.err)


def test_eval_on_other_test_examples_is_noted(h):
    """eval of a checkpoint on other test examples than its run evaluated
    (here another data.test_fraction, which moves training text into the
    test split) is allowed, with a note naming the change; the same split
    gives none. It used to say nothing."""
    text = U.write(h.path("words.txt"), " ".join(U.WORDS[i * 7 % len(U.WORDS)] for i in range(900)))
    run_dir = h.path("text-run")
    cfg = U.write_config(h, "text.yaml", U.tiny("gpt", run_dir, **{
        "data.kind": "text", "data.text": text, "data.test_fraction": "0.25",
        "train.max_steps": "2", "train.checkpoint_every": "2"}))
    h.run(["train", cfg]).expect(0)
    r = h.run(["eval", cfg]).expect(0, "the run's own split")
    check("other test examples" not in r.err, "a note on the run's own split:\n%s", r.err)
    r = h.run(["eval", cfg, "--set", "data.test_fraction=0.5"]).expect(0, "another split")
    note = [l for l in r.err.splitlines() if "other test examples than its run evaluated" in l]
    check(len(note) == 1 and "data.test_fraction 0.25 -> 0.5" in note[0] and
          "some may be examples it trained on" in note[0], "no note of the other split:\n%s", r.err)


def test_eval_on_other_generated_examples_is_noted(h):
    """Generated data records no digest: eval under another run.seed or
    data.synthetic_examples than the checkpoint's run draws other test
    examples (one seed's test examples may be another's training ones), so a
    note names the keys; the run's own settings and a key that generates
    nothing (train.lr) give none. It used to say nothing."""
    for kind in ("vit", "gpt"):
        cfg, run_dir = trained(h, "gen-" + kind, kind)
        r = h.run(["eval", cfg]).expect(0, kind + ": the run's own settings")
        check("other generated test examples" not in r.err, "%s: a note on the run's own data:\n%s",
              kind, r.err)
        r = h.run(["eval", cfg, "--set", "train.lr=0.001"]).expect(0, kind + ": another lr")
        check("other generated test examples" not in r.err, "%s: a note for train.lr:\n%s", kind,
              r.err)
        for sets, want in ((["run.seed=4"], ["run.seed 3 -> 4"]),
                           (["data.synthetic_examples=48"], ["data.synthetic_examples 40 -> 48"]),
                           (["run.seed=5", "data.synthetic_examples=44"],
                            ["run.seed 3 -> 5", "data.synthetic_examples 40 -> 44"])):
            args = ["eval", cfg]
            for one in sets:
                args += ["--set", one]
            r = h.run(args).expect(0, "%s: eval under %s" % (kind, sets))
            note = [l for l in r.err.splitlines() if "other generated test examples" in l]
            check(len(note) == 1 and all(w in note[0] for w in want) and
                  "some may be examples it trained on" in note[0] and
                  "step_%010d" % LAST in note[0],
                  "%s %s: no note naming %s:\n%s", kind, sets, want, r.err)


def test_resume_with_other_test_data_is_noted(h):
    """A resume whose data settings differ only in where the test examples
    come from (another data.test_file beside the same training file) keeps
    its data order and position: the note says its evaluations are not
    comparable, not that the order is inexact. A change that reaches the
    training examples (the training file, or a test file dropped so that
    data.test_fraction cuts the training file) keeps the order's note."""
    files, bert = bert_keys(h)
    _, orig = trained(h, "tb", "gpt", **bert)
    other = U.write(h.path("other-test.tsv"), "a\tthe deep\nb\tvoid and form\nc\tupon the face\n")
    cases = (("test-file", {"data.test_file": other}, "other test data settings",
              "its evaluations are not comparable"),
             ("no-test-file", {"data.test_file": None, "data.test_fraction": "0.1"},
              "other data settings", "only exact with the same data"))
    for name, change, what, why in cases:
        cfg, run_dir = copy_run(h, orig, name, "gpt", **dict(bert, **change))
        # without a test file, 4 of the 40 examples move into the test
        # split, and the position (step 6: epoch 2, batch 1) still fits
        r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0, name)
        note = [l for l in r.err.splitlines() if "data settings than it was saved with" in l]
        check(len(note) == 1 and what in note[0] and why in note[0] and
              "data.test_file" in note[0], "%s: not the note expected (%r, %r):\n%s", name, what,
              why, r.err)
        other_why = ("only exact with the same data" if name == "test-file"
                     else "its evaluations are not comparable")
        check(other_why not in note[0], "%s: the other wording too:\n%s", name, r.err)
    # the test file swapped and the training file edited in place (its lines
    # in reverse order: the same count and labels, other examples in each
    # place): both are said, the second from the training examples' digest
    with open(files["data.train_file"]) as f:
        lines = f.read().splitlines()
    U.write(files["data.train_file"], "\n".join(reversed(lines)) + "\n")
    cfg, run_dir = copy_run(h, orig, "test-file-train-edited", "gpt",
                            **dict(bert, **{"data.test_file": other}))
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0, "edited")
    check(sum("other test data settings" in l for l in r.err.splitlines()) == 1 and
          sum("on other training examples than it was saved with" in l
              for l in r.err.splitlines()) == 1,
          "the swapped test file and the edited training file are not both noted:\n%s", r.err)


def test_eval_without_checkpoints(h):
    """eval without --checkpoint and nothing in run.dir: exit 2, naming the
    config's line of run.dir, where it looked (--set when set there)."""
    run_dir = h.path("empty-run")
    cfg = U.write_config(h, "c.yaml", keys(h, run_dir))
    r = h.run(["eval", cfg]).expect(2)
    r.one_error("%s:%d: run.dir: " % (cfg, U.line_of(open(cfg).read(), "run.dir")),
                "no checkpoint", strict=False)
    r = h.run(["eval", cfg, "--set", "run.dir=" + run_dir + "-too"]).expect(2)
    r.one_error("--set: run.dir: ", "no checkpoint", strict=False)
    check(not os.path.exists(run_dir), "eval created run.dir")


# ----------------------------------------------------------------- hygiene

def test_keep_checkpoints_prunes(h):
    for keep, want in [(2, [8, 10]), (1, [10])]:
        run_dir = h.path("keep%d" % keep)
        cfg = U.write_config(h, "keep%d.yaml" % keep, keys(h, run_dir, **{
            "train.checkpoint_every": "2", "train.keep_checkpoints": str(keep)}))
        h.run(["train", cfg]).expect(0)
        got = U.checkpoints(run_dir)
        check(got == ["step_%010d" % s for s in want], "keep_checkpoints=%d left %s", keep, got)
        for name in got:
            check(os.path.isfile(os.path.join(run_dir, "checkpoints", name, "manifest")),
                  "%s has no manifest", name)


def test_keep_checkpoints_default_per_epoch(h):
    """checkpoint_every 0: one per epoch; the default keep_checkpoints is 3."""
    run_dir = h.path("run")
    k = keys(h, run_dir, **{"train.checkpoint_every": "0", "train.epochs": "5"})
    del k["train.keep_checkpoints"]
    cfg = U.write_config(h, "c.yaml", k)
    h.run(["train", cfg]).expect(0)
    got = U.checkpoints(run_dir)
    check(got == ["step_%010d" % s for s in (15, 20, 25)], "left %s", got)


def test_prune_removes_incomplete_and_keeps_foreign_entries(h):
    """Pruning removes a step directory without a manifest; one holding what
    pipetrain does not remove (a directory in it), or a link, is moved
    whole to RUN_DIR/abandoned/ with one note (it stayed, with a note at
    every later save that its files were removed), a link's target
    untouched; entries not named as steps stay."""
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "copy", **{"train.epochs": "4",
                                                "train.keep_checkpoints": "2"})
    root = os.path.join(run_dir, "checkpoints")
    # an interrupted save at a later step, and entries that are not pipetrain's
    stale = os.path.join(root, "step_0000000099")
    os.mkdir(stale)
    shutil.copy(U.unit_files(U.ckpt(run_dir, LAST))[0], stale)
    U.write(os.path.join(root, "notes.txt"), "mine\n")
    os.mkdir(os.path.join(root, "step_best"))
    # step 3 without its manifest and a directory where a units file was;
    # step 6 a link to a directory of the user's
    old = U.ckpt(run_dir, 3)
    os.unlink(os.path.join(old, "manifest"))
    units = U.unit_files(old)[0]
    os.unlink(units)
    os.mkdir(units)
    mine = h.path("mine")
    shutil.copytree(U.ckpt(run_dir, 6), mine)
    os.unlink(os.path.join(mine, "manifest"))
    shutil.rmtree(U.ckpt(run_dir, 6))
    os.symlink(mine, U.ckpt(run_dir, 6))
    kept = U.snapshot(mine)
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0)
    check("resumed at step %d" % LAST in r.err, "did not resume from step %d (the directory "
          "without a manifest must be skipped)\n%s", LAST, r.describe())
    left = sorted(os.listdir(root))
    check(left == ["notes.txt", "step_0000000018", "step_0000000020", "step_best"],
          "after pruning to 2: %s", left)
    for step in (3, 6):
        name = "step_%010d" % step
        # (step 6 a link: said to be one, not a checkpoint whose files went)
        notes = r.err.count(("'%s' was a symbolic link, not a checkpoint of the run's" if step == 6
                             else "'%s' was not a complete checkpoint") % os.path.join(root, name))
        moved = glob.glob(os.path.join(run_dir, "abandoned", name + ".*", name))
        check(notes == 1 and len(moved) == 1, "%s: %d notes, moved to %s\n%s", name, notes, moved,
              r.describe())
    check(os.path.isdir(os.path.join(glob.glob(os.path.join(run_dir, "abandoned", "step_0000000003.*",
                                                            "step_0000000003"))[0],
                                     os.path.basename(units))),
          "step 3's directory was not moved whole")
    U.same_snapshot(kept, U.snapshot(mine), "the linked directory of the user's")


def test_fresh_run_refused_where_checkpoints_exist(h):
    cfg, run_dir = trained(h)
    before = U.snapshot(run_dir)
    for extra in ([], ["--set", "train.resume="]):
        r = h.run(["train", cfg] + extra).expect(2)
        r.one_error(run_dir, "train.resume=auto", "step_%010d" % LAST)
        U.same_snapshot(before, U.snapshot(run_dir), "run.dir after a refused fresh start")


def test_fresh_run_allowed_over_incomplete_checkpoint(h):
    run_dir = h.path("run")
    os.makedirs(os.path.join(run_dir, "checkpoints", "step_0000000007"))
    cfg = U.write_config(h, "c.yaml", keys(h, run_dir))
    h.run(["train", cfg]).expect(0)
    check("step_0000000007" not in U.checkpoints(run_dir),
          "the incomplete step_0000000007 was not pruned: %s", U.checkpoints(run_dir))


def test_resume_explicit_older_checkpoint(h):
    """Resuming step 6 of a run.dir holding steps 9 and 10 leaves that
    history: 9 and 10 move whole into RUN_DIR/abandoned/after-step_6.*
    (a note names it), so a later `auto` resume (say after a kill before
    step 9) or pruning never takes the history left for this one; here the
    new history, with the same settings, ends with the same bits."""
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "copy")
    before = U.snapshot(os.path.join(run_dir, "checkpoints"))
    # an incomplete save after them is no history: left for pruning
    partial = U.ckpt(run_dir, 11)
    os.makedirs(partial)
    U.write(os.path.join(partial, "units-stage0.bin"), "half")
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0)
    check("resumed at step 6" in r.err, "no resume message\n%s", r.describe())
    check("holds 2 later checkpoints (a history this run leaves): moved to" in r.err,
          "no note of the later checkpoints\n%s", r.describe())
    left = glob.glob(os.path.join(run_dir, "abandoned", "after-step_%010d.*" % 6))
    check(len(left) == 1 and sorted(os.listdir(left[0])) == ["step_%010d" % 9, "step_%010d" % LAST],
          "abandoned: %s", left)
    for step in (9, LAST):
        name = "step_%010d/" % step
        U.same_snapshot({k[len(name):]: v for k, v in before.items() if k.startswith(name)},
                        U.snapshot(os.path.join(left[0], name)), "abandoned step %d" % step)
    check(U.checkpoints(run_dir) == ["step_%010d" % k for k in (3, 6, 9, LAST)] and
          not os.path.exists(partial), "checkpoints: %s", U.checkpoints(run_dir))
    # metrics.jsonl: this run's start line names the checkpoint and where the
    # history it left went; the left history's lines stay before it
    starts = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    starts = [(i, e) for i, e in enumerate(starts) if e["event"] == "start"]
    check(len(starts) == 2 and starts[0][1]["step"] == 0 and starts[0][1]["resumed_from"] is None
          and starts[1][1]["step"] == 6 and starts[1][1]["resumed_from"] == U.ckpt(run_dir, 6)
          and starts[1][1]["abandoned_to"] == left[0] and starts[0][1]["abandoned_to"] is None,
          "start events: %s", starts)
    exports = []
    for ck in (U.ckpt(orig, LAST), U.ckpt(run_dir, LAST)):
        out = h.path("export-%d.st" % len(exports))
        h.run(["export", ck, out]).expect(0)
        exports.append(U.read_bytes(out))
    check(exports[0] == exports[1], "the new history's step 10 differs from the one it left")
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0)
    check("resumed at step %d" % LAST in r.err and "moved to" not in r.err, "auto resumed:\n%s",
          r.describe())


def test_resume_of_abandoned_history_leaves_the_one_that_replaced_it(h):
    """History A (steps 3 to 10), a go-back to its step 6 under another
    learning rate (A's 9 and 10 move to abandoned/after-step_6.*; B saves
    9' and 10'), then A's step 10 resumed from there: run.dir's own 9' and
    10' are B's, neither an ancestor of A's 10, and both move to abandoned/.
    Only 10' moved (the steps at or after the resumed one), so an explicit
    go-back to checkpoints/step_9 later took B's 9' inside A's history. A
    goes on to the bits of A never left; B's two steps are in abandoned/,
    byte for byte."""
    _, orig = trained(h)
    want_cfg, want = copy_run(h, orig, "want", **{"train.epochs": "3"})
    h.run(["train", want_cfg, "--set", "train.resume=auto"]).expect(0, "A going on")
    cfg_b, run_dir = copy_run(h, orig, "lineage", **{"train.lr": "0.002"})
    h.run(["train", cfg_b, "--set", "train.resume=" + U.ckpt(run_dir, 6)]).expect(0, "B")
    left_a = glob.glob(os.path.join(run_dir, "abandoned", "after-step_%010d.*" % 6))
    check(len(left_a) == 1 and U.checkpoints(run_dir) == ["step_%010d" % k for k in (3, 6, 9, LAST)],
          "after B: abandoned %s, checkpoints %s", left_a, U.checkpoints(run_dir))
    b_steps = {k: U.snapshot(U.ckpt(run_dir, k)) for k in (9, LAST)}
    cfg_a = U.write_config(h, "lineage-a.yaml", keys(h, run_dir, **{"train.epochs": "3"}))
    a10 = os.path.join(left_a[0], "step_%010d" % LAST)
    r = h.run(["train", cfg_a, "--set", "train.resume=" + a10]).expect(0, "A's 10 again")
    check("a history this run.dir left after its step 6" in r.err and
          "holds 2 checkpoints after step 6" in r.err, "no note of B's steps:\n%s", r.describe())
    check(U.checkpoints(run_dir) == ["step_%010d" % k for k in (3, 6, LAST, 12, 15)],
          "checkpoints after A resumed: %s", U.checkpoints(run_dir))
    left_b = [d for d in glob.glob(os.path.join(run_dir, "abandoned", "after-step_%010d.*" % 6))
              if d != left_a[0]]
    check(len(left_b) == 1 and sorted(os.listdir(left_b[0])) == ["step_%010d" % k for k in (9, LAST)],
          "B's steps: %s", left_b)
    for k in (9, LAST):
        U.same_snapshot(b_steps[k], U.snapshot(os.path.join(left_b[0], "step_%010d" % k)),
                        "B's step %d" % k)
    same_weights(h, U.ckpt(want, 15), U.ckpt(run_dir, 15),
                 "A resumed from abandoned/ ended otherwise than A never left")


def test_go_back_killed_between_its_moves(h):
    """A resume of step 6 of a run.dir holding steps 9 and 10 moves them
    one at a time; a start SIGKILLed at the move of either (strace injects
    the signal into the first or the second rename of their directories)
    left the one not yet moved in checkpoints/, and `auto` resumed it: the
    history the start left, with its other half in abandoned/. RUN_DIR/
    resuming now names step 6 before the first move: `auto` goes back to it
    with a note (and `inspect` of run.dir says its newest is of the history
    left), moves what is left, and the run ends with step 10's bits; both
    halves of the history left are in abandoned/, byte for byte. The step
    gone back to is taken under run.dir's name (here through a link), not
    by the first start's absolute path, which another node need not see."""
    _, orig = trained(h)
    want = h.path("want.st")
    h.run(["export", U.ckpt(orig, LAST), want]).expect(0)
    left_history = {s: U.snapshot(U.ckpt(orig, s)) for s in (9, LAST)}
    for when in (1, 2):
        cfg, run_dir = copy_run(h, orig, "goback-%d" % when)
        later = [U.ckpt(run_dir, s) for s in (9, LAST)]
        cmd = ["strace", "-f", "-o", "/dev/null", "-e", "trace=rename,renameat,renameat2",
               "-e", "inject=rename,renameat,renameat2:signal=KILL:when=%d" % when]
        for path in later:
            cmd += ["-P", os.path.abspath(path)]
        p = subprocess.run(cmd + [h.binary, "train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)],
                           cwd=h.dir, env=U.sanitizer_env(), timeout=120, capture_output=True,
                           text=True, errors="replace", stdin=subprocess.DEVNULL)
        check(p.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL),
              "move %d: not killed (%s):\n%s", when, p.returncode, p.stderr[-2000:])
        stayed = [s for s, path in zip((9, LAST), later) if os.path.isdir(path)]
        check(len(stayed) == 3 - when, "move %d: %s stayed in checkpoints/", when, stayed)
        check(os.path.isfile(os.path.join(run_dir, "resuming")),
              "move %d: no RUN_DIR/resuming before the moves", when)
        r = h.run(["inspect", run_dir]).expect(0, "inspect after the kill")
        check("resuming names %s, run.dir's own step" % os.path.realpath(U.ckpt(run_dir, 6)) in r.err,
              "move %d: inspect gave no note of the go-back:\n%s", when, r.describe())
        # run.dir named through a link to its parent, as a node that mounts
        # it elsewhere names it: the step gone back to is taken as run.dir's
        # own, in run.dir's form, not as the start's absolute path
        link = h.path("via-%d" % when)
        os.symlink(os.path.dirname(os.path.abspath(run_dir)), link)
        linked = os.path.join(link, os.path.basename(run_dir))
        r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "run.dir=" + linked]).expect(
            0, "auto after the kill")
        check("resumed at step 6" in r.err and "went back to its %s " % U.ckpt(linked, 6) in r.err
              and "going back to it again" in r.err,
              "move %d: auto did not go back to step 6 with a note:\n%s", when, r.describe())
        starts = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
        starts = [e for e in starts if e["event"] == "start"]
        check(starts[-1]["resumed_from"] == U.ckpt(linked, 6),
              "move %d: resumed from %s, not run.dir's own step 6 as run.dir names it", when,
              starts[-1]["resumed_from"])
        check(not os.path.exists(os.path.join(run_dir, "resuming")), "move %d: resuming stayed", when)
        check(U.checkpoints(run_dir) == ["step_%010d" % k for k in (3, 6, 9, LAST)],
              "move %d: checkpoints %s", when, U.checkpoints(run_dir))
        out = h.path("got-%d.st" % when)
        h.run(["export", U.ckpt(run_dir, LAST), out]).expect(0)
        check(U.read_bytes(out) == U.read_bytes(want), "move %d: step 10 differs", when)
        moved = {}
        for d in glob.glob(os.path.join(run_dir, "abandoned", "after-step_%010d.*" % 6)):
            for name in os.listdir(d):
                moved[name] = U.snapshot(os.path.join(d, name))
        check(sorted(moved) == ["step_%010d" % s for s in (9, LAST)],
              "move %d: abandoned holds %s", when, sorted(moved))
        # (a kill at the first move leaves the directory made for it empty:
        # the next start removes it)
        empty = [d for d in os.listdir(os.path.join(run_dir, "abandoned"))
                 if not os.listdir(os.path.join(run_dir, "abandoned", d))]
        check(not empty, "move %d: empty directories left in abandoned/: %s", when, empty)
        for s in (9, LAST):
            U.same_snapshot(left_history[s], moved["step_%010d" % s],
                            "move %d: abandoned step %d" % (when, s))


def test_go_back_killed_then_run_dir_moved(h):
    """A go-back to step 6 killed at its first move, then run.dir moved
    elsewhere (or seen by the next job's first rank at another mount):
    RUN_DIR/resuming named step 6 by its absolute path, which is gone, and
    `auto` was refused. It names run.dir's own checkpoints by their path
    under run.dir: `auto` in the moved directory goes back to step 6 and
    ends with step 10's bits."""
    _, orig = trained(h)
    want = h.path("want.st")
    h.run(["export", U.ckpt(orig, LAST), want]).expect(0)
    _, run_dir = copy_run(h, orig, "before-move")
    cmd = ["strace", "-f", "-o", "/dev/null", "-e", "trace=rename,renameat,renameat2",
           "-e", "inject=rename,renameat,renameat2:signal=KILL:when=1"]
    for s in (9, LAST):
        cmd += ["-P", os.path.abspath(U.ckpt(run_dir, s))]
    cfg = U.write_config(h, "before-move.yaml", keys(h, run_dir))
    p = subprocess.run(cmd + [h.binary, "train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)],
                       cwd=h.dir, env=U.sanitizer_env(), timeout=120, capture_output=True,
                       text=True, errors="replace", stdin=subprocess.DEVNULL)
    check(p.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL), "not killed (%s):\n%s",
          p.returncode, p.stderr[-2000:])
    lines = open(os.path.join(run_dir, "resuming")).read().split("\n")
    check(lines[1] == "checkpoints/step_%010d" % 6 and lines[2] == "moving",
          "RUN_DIR/resuming: %s", lines)
    moved = h.path("after-move")
    os.rename(run_dir, moved)
    cfg = U.write_config(h, "after-move.yaml", keys(h, moved))
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "auto in the moved run.dir")
    check("resumed at step 6" in r.err and "going back to it again" in r.err,
          "auto did not go back to step 6:\n%s", r.describe())
    out = h.path("got.st")
    h.run(["export", U.ckpt(moved, LAST), out]).expect(0)
    check(U.read_bytes(out) == U.read_bytes(want), "step 10 differs")


def test_unreadable_newest_step_directory(h):
    """A newest step directory this user cannot look into (mode 000; run as
    an unprivileged user, root reads through it): it was taken for a save
    that did not finish, so `inspect` and `eval` took the step before it
    without a word, and `auto` started afresh over the run, failing at the
    save of that step. Which checkpoint is the newest is not known: every
    command refuses, exit 2 naming the directory, and run.dir is left as it
    was; readable again, `auto` resumes it."""
    _, orig = trained(h)
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        print("skipped: root without runuser")
        return
    base = tempfile.mkdtemp(prefix="pt-unreadable-")  # where the unprivileged user may go
    try:
        os.chmod(base, 0o755)
        run_dir = os.path.join(base, "run")
        shutil.copytree(orig, run_dir)
        cfg = U.write(os.path.join(base, "run.yaml"), U.render(keys(h, run_dir)))
        as_user = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
        if as_user:
            for root, dirs, files in os.walk(base):
                for name in dirs + files + [""]:
                    os.chown(os.path.join(root, name), 65534, -1)
            probe = subprocess.run(as_user + [h.binary, "keys"], capture_output=True)
            if probe.returncode != 0:
                print("skipped: the unprivileged user cannot run %s" % h.binary)
                return
        newest = U.ckpt(run_dir, LAST)
        os.chmod(newest, 0)
        before = U.snapshot(run_dir)

        def run(args):
            cmd = as_user + [h.binary] + args
            p = subprocess.run(cmd, cwd=base, capture_output=True, text=True, errors="replace",
                               timeout=120, env=U.sanitizer_env(), stdin=subprocess.DEVNULL)
            r = U.Result(cmd, p.returncode, p.stdout, p.stderr)
            U.no_sanitizer(r)
            return r
        for args in (["inspect", run_dir], ["eval", cfg], ["train", cfg, "--set", "train.resume=auto"],
                     ["train", cfg, "--set", "train.resume=auto", "--set", "train.epochs=3"]):
            r = run(args).expect(2, " ".join(args[:1]))
            r.one_error("'%s' cannot be read" % newest)
            U.same_snapshot(before, U.snapshot(run_dir), "run.dir after %s" % args[0])
        os.chmod(newest, 0o755)
        r = run(["train", cfg, "--set", "train.resume=auto", "--set", "train.epochs=3"]).expect(0)
        check("resumed at step %d" % LAST in r.err, "readable again:\n%s", r.describe())
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_go_back_whose_resuming_file_stays(h):
    """A go-back to step 6 whose RUN_DIR/resuming, written before the later
    steps moved, cannot be removed after the moves (strace makes the unlink
    fail with EIO): the start trained on, leaving the file that says the
    moves are under way, which is never stale, so every later `auto` went
    back to step 6 again and moved the new history aside. It now ends, exit
    1 naming the file, before any step; `auto` then goes back to step 6
    once, removes the file and ends with step 10's bits, and the next
    `auto` goes on from step 10."""
    _, orig = trained(h)
    want = h.path("want.st")
    h.run(["export", U.ckpt(orig, LAST), want]).expect(0)
    cfg, run_dir = copy_run(h, orig, "stays")
    marker = os.path.join(os.path.abspath(run_dir), "resuming")
    cmd = ["strace", "-f", "-o", "/dev/null", "-e", "trace=unlink,unlinkat",
           "-e", "inject=unlink,unlinkat:error=EIO", "-P", marker,
           h.binary, "train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6)]
    env = untraced_leaks_env()
    p = subprocess.run(cmd, cwd=h.dir, env=env, timeout=120, capture_output=True,
                       text=True, errors="replace", stdin=subprocess.DEVNULL)
    check(p.returncode == 1 and "could not remove '%s'" % marker in p.stderr and
          "resumed at step" not in p.stderr,
          "a start that could not remove its file: status %s\n%s", p.returncode, p.stderr[-3000:])
    check(os.path.isfile(marker) and U.checkpoints(run_dir) == ["step_%010d" % k for k in (3, 6)],
          "after it: file %s, checkpoints %s", os.path.isfile(marker), U.checkpoints(run_dir))
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "auto after it")
    check("resumed at step 6" in r.err and "going back to it again" in r.err,
          "auto did not go back to step 6:\n%s", r.describe())
    check(not os.path.exists(marker), "the file stayed")
    out = h.path("got.st")
    h.run(["export", U.ckpt(run_dir, LAST), out]).expect(0)
    check(U.read_bytes(out) == U.read_bytes(want), "step 10 differs")
    r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.epochs=3"]).expect(0)
    check("resumed at step %d" % LAST in r.err and "moved to" not in r.err,
          "the next auto did not go on from step %d:\n%s" % (LAST, r.describe()))


def test_fresh_start_whose_resuming_file_stays(h):
    """A resume of another run's step 6 into a new run.dir killed while it
    loads leaves RUN_DIR/resuming naming that step; a fresh start there
    then removes it (its history is its own). When the removal failed
    (strace: EIO) the fresh start trained on, and a later `auto` resumed
    the other run's step 6 beside the fresh history's steps. It now ends
    before any step, exit 1 naming the file; once the file can go, the fresh
    start trains, and `auto` goes on from its own newest."""
    _, orig = trained(h)
    run_dir = h.path("fresh-stays")
    cfg = U.write_config(h, "fresh-stays.yaml", keys(h, run_dir))
    env = dict(U.sanitizer_env(), PIPETRAIN_TEST_FAULT="0:0:crash:loading")
    p = subprocess.run([h.binary, "train", cfg, "--set", "train.resume=" + U.ckpt(orig, 6)],
                       cwd=h.dir, env=env, timeout=120, capture_output=True, text=True,
                       errors="replace", stdin=subprocess.DEVNULL)
    marker = os.path.join(os.path.abspath(run_dir), "resuming")
    check(p.returncode == -signal.SIGKILL and os.path.isfile(marker),
          "not killed while loading with the file written (%s):\n%s", p.returncode, p.stderr[-2000:])
    env = untraced_leaks_env()
    p = subprocess.run(["strace", "-f", "-o", "/dev/null", "-e", "trace=unlink,unlinkat",
                        "-e", "inject=unlink,unlinkat:error=EIO", "-P", marker, h.binary, "train",
                        cfg, "--set", "train.max_steps=3"], cwd=h.dir, env=env, timeout=120,
                       capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL)
    check(p.returncode == 1 and "could not remove '%s'" % marker in p.stderr and
          "step 1/" not in p.stderr and not U.checkpoints(run_dir),
          "a fresh start that could not remove the file: status %s, checkpoints %s\n%s",
          p.returncode, U.checkpoints(run_dir), p.stderr[-3000:])
    h.run(["train", cfg, "--set", "train.max_steps=3"]).expect(0, "the fresh start")
    check(not os.path.exists(marker), "the file stayed")
    r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=4"]).expect(0)
    check("resumed at step 3" in r.err and "resumed from" not in r.err,
          "auto after the fresh start:\n%s", r.describe())


def other_runs_step_resumed(h):
    """(orig, own, want): two runs of steps 3 to 10 (own at another learning
    rate), and the export of step 8 of a copy of own that resumed orig's
    step 6, with nothing failing."""
    _, orig = trained(h)
    _, own = trained(h, "own", **{"train.lr": "0.002"})
    ref_cfg, ref = copy_run(h, own, "ref", **{"train.lr": "0.002"})
    h.run(["train", ref_cfg, "--set", "train.resume=" + U.ckpt(orig, 6),
           "--set", "train.max_steps=8"]).expect(0, "the resume nothing failed in")
    want = h.path("want.st")
    h.run(["export", U.ckpt(ref, 8), want]).expect(0)
    return orig, own, want


def untraced_leaks_env():
    """The binary's environment under strace: LeakSanitizer cannot run under
    ptrace, so its check at exit is off."""
    env = U.sanitizer_env()
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return env


def test_resume_of_other_runs_step_killed_between_its_moves(h):
    """Another run's step 6 resumed into a run.dir holding its own steps 3
    to 10: all four move to abandoned/ one at a time after RUN_DIR/resuming
    names the resumed step. A SIGKILL at a move after the first (strace)
    left own steps of 6 or later in checkpoints/, so the file counted as
    stale ("run.dir holds that step or later") and `auto` resumed
    run.dir's own step 9 or 10, of the history the start left. The
    file now says the moves are under way until they are done: `auto`
    resumes the other run's step 6 again, moves the rest, and ends with the
    bits of the resume that was not killed; nothing of run.dir's own is
    lost."""
    orig, own, want = other_runs_step_resumed(h)
    named = os.path.realpath(U.ckpt(orig, 6))
    own_steps = (3, 6, 9, LAST)
    left_history = {s: U.snapshot(U.ckpt(own, s)) for s in own_steps}
    for when in (2, 3, 4):
        cfg, run_dir = copy_run(h, own, "killed-%d" % when, **{"train.lr": "0.002"})
        cmd = ["strace", "-f", "-o", "/dev/null", "-e", "trace=rename,renameat,renameat2",
               "-e", "inject=rename,renameat,renameat2:signal=KILL:when=%d" % when]
        for s in own_steps:
            cmd += ["-P", os.path.abspath(U.ckpt(run_dir, s))]
        p = subprocess.run(cmd + [h.binary, "train", cfg, "--set", "train.resume=" + U.ckpt(orig, 6),
                                  "--set", "train.max_steps=8"],
                           cwd=h.dir, env=U.sanitizer_env(), timeout=120, capture_output=True,
                           text=True, errors="replace", stdin=subprocess.DEVNULL)
        check(p.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL),
              "move %d: not killed (%s):\n%s", when, p.returncode, p.stderr[-2000:])
        stayed = [s for s in own_steps if os.path.isdir(U.ckpt(run_dir, s))]
        check(len(stayed) == 5 - when, "move %d: %s stayed in checkpoints/", when, stayed)
        r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=8"]).expect(
            0, "auto after the kill")
        check("resumed at step 6" in r.err and "resumed from %s" % named in r.err,
              "move %d: auto did not resume the other run's step 6 with a note:\n%s", when,
              r.describe())
        check(not os.path.exists(os.path.join(run_dir, "resuming")), "move %d: resuming stayed", when)
        out = h.path("got-%d.st" % when)
        h.run(["export", U.ckpt(run_dir, 8), out]).expect(0)
        check(U.read_bytes(out) == U.read_bytes(want), "move %d: step 8 differs", when)
        moved = {}
        for d in glob.glob(os.path.join(run_dir, "abandoned", "replaced-by-step_%010d.*" % 6)):
            for name in os.listdir(d):
                moved[name] = U.snapshot(os.path.join(d, name))
        check(sorted(moved) == ["step_%010d" % s for s in own_steps],
              "move %d: abandoned holds %s", when, sorted(moved))
        for s in own_steps:
            U.same_snapshot(left_history[s], moved["step_%010d" % s],
                            "move %d: abandoned step %d" % (when, s))


def test_resume_of_other_runs_step_whose_resuming_file_stays(h):
    """Another run's step 6 resumed into a run.dir holding its own steps 3
    to 10, with RUN_DIR/resuming's removal after the first save failing
    (strace: EIO on its unlink). Once rewritten without `moving` the file is
    stale and passed over: the run goes on (exit 0). When its rewrite after
    the moves failed too (EIO on the second rename onto it), the file still
    said `moving` and the run went on all the same: every later `auto`
    went back to the other run's step 6, moving the new history aside. The
    run now ends after that save, exit 1 naming the file; `auto` resumes
    step 6 again and ends with the bits of the resume nothing failed in."""
    orig, own, want = other_runs_step_resumed(h)
    env = untraced_leaks_env()
    renames = "rename,renameat,renameat2"

    def traced(name, *inject, trace="/dev/null"):
        """The resume under strace: (run.dir, the file's path, the result)."""
        cfg, run_dir = copy_run(h, own, name, **{"train.lr": "0.002"})
        marker = os.path.join(os.path.abspath(run_dir), "resuming")
        cmd = ["strace", "-f", "-o", trace, "-e", "trace=unlink,unlinkat," + renames]
        for what in inject:
            cmd += ["-e", "inject=" + what]
        p = subprocess.run(cmd + [h.binary, "train", cfg, "--set", "train.resume=" + U.ckpt(orig, 6),
                                  "--set", "train.max_steps=8"],
                           cwd=h.dir, env=env, timeout=120, capture_output=True, text=True,
                           errors="replace", stdin=subprocess.DEVNULL)
        return cfg, run_dir, marker, p

    # the calls to fail, by their syscall's own count (strace's `when`):
    # the unlink of the file, and the rename that rewrites it without
    # `moving`, the second onto it (strace -P would match a rename by its
    # first path only, a temporary name here)
    log = h.path("calls.txt")
    _, _, marker, p = traced("count", trace=log)
    seen, unlink, onto = {}, None, []
    for line in open(log):
        m = re.match(r"\d+ +(\w+)\((.*)", line)
        if not m or "resumed>" in line or "unfinished" in line:
            continue
        call, args = m.group(1), m.group(2)
        seen[call] = seen.get(call, 0) + 1
        target = '"%s"' % marker
        if call.startswith("unlink") and target in args and unlink is None:
            unlink = (call, seen[call])
        if call.startswith("rename") and target in args.split(",", 2)[-1]:
            onto.append((call, seen[call]))
    check(p.returncode == 0 and unlink and len(onto) == 2, "unlink %s, renames onto the file %s",
          unlink, onto)
    for rewrite_fails in (False, True):
        name = "stays-%s" % ("moving" if rewrite_fails else "stale")
        # (from it on: a failed rewrite first unlinks its temporary file)
        inject = ["%s:error=EIO:when=%d+" % unlink]
        if rewrite_fails:
            inject.append("%s:error=EIO:when=%d" % onto[1])
        cfg, run_dir, marker, p = traced(name, *inject)
        if not rewrite_fails:
            check(p.returncode == 0 and os.path.isfile(marker),
                  "%s: status %s, file there: %s\n%s", name, p.returncode, os.path.isfile(marker),
                  p.stderr[-3000:])
            r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=9"]).expect(
                0, name + ": auto")
            check("resumed at step 8" in r.err and "resumed from" not in r.err,
                  "%s: a stale file was followed:\n%s", name, r.describe())
            continue
        check(p.returncode == 1 and "could not remove '%s'" % marker in p.stderr and
              "step 7/" not in p.stderr,
              "%s: status %s\n%s", name, p.returncode, p.stderr[-3000:])
        check(open(marker).read().endswith("\nmoving\n"), "%s: the file lost its 'moving'", name)
        r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=8"]).expect(
            0, name + ": auto")
        check("resumed at step 6" in r.err and "resumed from" in r.err and not os.path.exists(marker),
              "%s: auto did not resume the other run's step 6 once:\n%s", name, r.describe())
        check(not [f for f in os.listdir(run_dir) if f.startswith("resuming.")],
              "%s: the failed rewrite's temporary file was left: %s", name, os.listdir(run_dir))
        out = h.path("got.st")
        h.run(["export", U.ckpt(run_dir, 8), out]).expect(0)
        check(U.read_bytes(out) == U.read_bytes(want), "%s: step 8 differs", name)
        r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=9"]).expect(
            0, name + ": auto again")
        check("resumed at step 8" in r.err and "resumed from" not in r.err,
              "%s: the next auto went back:\n%s", name, r.describe())


def same_weights(h, a, b, what):
    """Checkpoints a and b export the same weights, byte for byte."""
    exports = []
    for ck in (a, b):
        out = h.path("weights-%d.st" % len(exports))
        h.run(["export", ck, out]).expect(0)
        exports.append(U.read_bytes(out))
    check(exports[0] == exports[1], "%s", what)


def holds_resumed_step_6(h, orig, other):
    """run.dir `other` holds, as step 6, orig's step 6, and none of its own."""
    check(U.checkpoints(other) == ["step_%010d" % 6], "checkpoints: %s", U.checkpoints(other))
    same_weights(h, U.ckpt(orig, 6), U.ckpt(other, 6), "run.dir's step 6 is not the checkpoint resumed")


def test_resume_other_runs_step_into_run_holding_that_step(h):
    """Another run's checkpoint of step 6 resumed into a run.dir that holds
    its own steps 3 to 10: they are another history, and all move into
    RUN_DIR/abandoned/replaced-by-step_6.*; the run then saves the step it
    resumed there. It kept run.dir's own step 6 under that name (taken for
    the checkpoint it resumed, so nothing was saved), and a later `auto`
    resume or `eval` went on from the other history; then it kept its own
    steps before 6 beside the resumed history, where pruning removed them
    first and a go-back to one mixed the two."""
    _, orig = trained(h)
    cfg, other = trained(h, "other", **{"train.lr": "0.002"})
    before = U.snapshot(os.path.join(other, "checkpoints"))
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(orig, 6),
               "--set", "train.max_steps=6"]).expect(0)
    check("from another directory's checkpoint in a run.dir that holds 4 checkpoints of its own"
          in r.err, "no note of the checkpoints left\n%s", r.describe())
    left = glob.glob(os.path.join(other, "abandoned", "replaced-by-step_%010d.*" % 6))
    check(len(left) == 1 and sorted(os.listdir(left[0])) == ["step_%010d" % k for k in (3, 6, 9, LAST)],
          "abandoned: %s", left)
    for step in (3, 6, 9, LAST):
        name = "step_%010d/" % step
        U.same_snapshot({k[len(name):]: v for k, v in before.items() if k.startswith(name)},
                        U.snapshot(os.path.join(left[0], name)), "abandoned step %d" % step)
    holds_resumed_step_6(h, orig, other)


def test_resumed_other_runs_step_saved_before_training(h):
    """Another run's checkpoint of step 6 resumed into a run.dir that holds
    its own steps 3 to 10, which then fails before its next save: run.dir's
    step 6 went to abandoned/, and the resumed step was only saved at the
    next checkpoint, so `auto` went on from run.dir's own step 3 (the other
    history) without a word. The resumed step is now saved before the first
    step trains."""
    _, orig = trained(h)
    cfg, other = trained(h, "other", **{"train.lr": "0.002"})
    h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(orig, 6),
           "--set", "train.max_steps=8"], env={"PIPETRAIN_TEST_FAULT": "0:7:error"}).expect(
        1, "a resume failing before step 7")
    holds_resumed_step_6(h, orig, other)


def test_failed_save_of_resumed_other_runs_step(h):
    """Another run's checkpoint of step 6 resumed into a run.dir that holds
    its own steps 3 to 10, and the save of step 6 there fails (an error
    while writing its files): run.dir's own 6 to 10 are already in
    abandoned/, so its newest was its own step 3, of the history the resume
    left, and `auto` went back there and trained steps 4 to 10 again
    without a word (its step 3 moves to abandoned/ too now). run.dir/resuming now names the checkpoint being saved
    (its step, its manifest's SHA-256, its path) until the save is done, and
    `auto` resumes it again, with a note: the run ends with the bits of the
    one whose save never failed (`eval` and `inspect` of run.dir meanwhile
    take the named checkpoint, with a note: run.dir holds none of its own). The file is stale, and passed
    over, once run.dir holds a checkpoint of that step or later. A file
    there that names no checkpoint (empty, relative, two paths, too long, a
    FIFO, its `moving` line alone, twice, first or without its newline), or
    one whose checkpoint is gone or another now, is refused (exit
    2, naming it and train.resume), not followed and not passed over, and
    nothing in run.dir changes."""
    _, orig = trained(h)
    cfg, other = trained(h, "other", **{"train.lr": "0.002"})
    ref_cfg, ref = copy_run(h, other, "ref", **{"train.lr": "0.002"})
    h.run(["train", ref_cfg, "--set", "train.resume=" + U.ckpt(orig, 6),
           "--set", "train.max_steps=8"]).expect(0, "the resume whose save does not fail")
    h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(orig, 6), "--set", "train.max_steps=8"],
          env={"PIPETRAIN_TEST_FAULT": "0:6:error:checkpoint-writing"}).expect(
        1, "a resume whose save of the resumed step fails")
    marker = os.path.join(other, "resuming")
    check(os.path.isfile(marker), "no %s after the failed save", marker)
    named = os.path.realpath(U.ckpt(orig, 6))
    failed_state = h.path("failed-state")
    shutil.copytree(other, failed_state, symlinks=True)
    r = h.run(["eval", cfg]).expect(0, "eval after the failed save")  # the named one, said so
    check("%s names %s" % (marker, named) in r.err and "holds no checkpoint of its own" in r.err
          and r.out.startswith("checkpoint %s\n" % named), "eval gave no note:\n%s", r.describe())
    r = h.run(["inspect", other]).expect(0, "inspect after the failed save")
    check("%s names %s" % (marker, named) in r.err and json.loads(r.out)["checkpoint"] == named,
          "inspect gave no note:\n%s", r.describe())
    r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=8"]).expect(
        0, "auto after the failed save")
    check("resumed at step 6" in r.err and "resumed from %s" % named in r.err,
          "auto did not resume the other run's step 6 with a note:\n%s", r.describe())
    check(not os.path.exists(marker), "%s is still there after the save", marker)
    outs = []
    for run_dir in (ref, other):
        out = h.path("export-%s.st" % os.path.basename(run_dir))
        h.run(["export", U.ckpt(run_dir, 8), out]).expect(0)
        outs.append(U.read_bytes(out))
    check(outs[0] == outs[1], "step 8 differs from the run whose save did not fail")
    # the same file again, now that run.dir holds step 8: stale, auto goes on from 8
    shutil.copy(os.path.join(failed_state, "resuming"), marker)
    r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=9"]).expect(
        0, "auto with a stale file")
    check("resumed at step 8" in r.err and "resumed from" not in r.err,
          "a stale file was followed:\n%s", r.describe())
    # files that name no checkpoint, or one that is gone or another now
    text = U.read_bytes(os.path.join(failed_state, "resuming")).decode()
    step_hex, path = text.split("\n")[:2]
    gone = h.path("gone-copy")
    shutil.copytree(U.ckpt(orig, 6), gone)
    other_ckpt = h.path("other-copy")
    shutil.copytree(U.ckpt(orig, 9), other_ckpt)
    # a manifest far larger than any (sparse: 1 TiB read as zeros), which the
    # refusal must not hash to the end first
    huge = h.path("huge-manifest")
    shutil.copytree(U.ckpt(orig, 6), huge)
    with open(os.path.join(huge, "manifest"), "r+b") as f:
        f.truncate(1 << 40)
    cases = [("empty", ""), ("relative", step_hex + "\nrelative/path\n"),
             ("two paths", step_hex + "\n/a\n/b\n"), ("too long", "x" * 5000),
             ("no digest", "6\n" + path + "\n"),
             ("gone", "%s\n%s\n" % (step_hex, gone + "-removed")),
             ("another checkpoint", "%s\n%s\n" % (step_hex, other_ckpt)), ("fifo", None),
             # the third line a start moving run.dir's own steps writes
             ("moving alone", "moving\n"), ("moving twice", "%s\n%s\nmoving\nmoving\n" % (step_hex, path)),
             ("moving first", "moving\n%s\n%s\n" % (step_hex, path)),
             ("moving unended", "%s\n%s\nmoving" % (step_hex, path)),
             ("moving gone", "%s\n%s\nmoving\n" % (step_hex, gone + "-removed")),
             ("moving too long", "%s\n/%s\nmoving\n" % (step_hex, "x" * 4200)),
             ("huge manifest", "%s\n%s\nmoving\n" % (step_hex, huge))]
    for name, content in cases:
        bad = h.path("bad-" + name.replace(" ", "-"))
        shutil.copytree(failed_state, bad, symlinks=True)
        cfg2 = U.write_config(h, "bad-%s.yaml" % name.replace(" ", "-"),
                              keys(h, bad, **{"train.lr": "0.002"}))
        os.unlink(os.path.join(bad, "resuming"))
        if content is None:
            os.mkfifo(os.path.join(bad, "resuming"))
        else:
            U.write(os.path.join(bad, "resuming"), content)
        before = U.snapshot(bad)
        r = h.run(["train", cfg2, "--set", "train.resume=auto"], timeout=60).expect(
            2, "resuming: " + name)
        check("train.resume" in r.err and os.path.join(bad, "resuming") in r.err,
              "%s: the refusal names neither the key nor the file:\n%s", name, r.describe())
        check(U.snapshot(bad) == before, "%s: the refused start changed run.dir", name)


def test_unreadable_resuming_over_own_steps(h):
    """A run.dir with checkpoints of its own and a RUN_DIR/resuming that
    does not read (damaged, empty, a FIFO): train.resume=auto refuses it;
    eval and inspect take its newest step and say that, and why train
    refuses the run.dir (they said nothing of it); plan says the same and
    plans from that step."""
    cfg, run_dir = trained(h, "own-steps")
    marker = os.path.join(run_dir, "resuming")
    newest = U.ckpt(run_dir, LAST)
    for name, content in (("damaged", "not a record\n"), ("empty", ""), ("fifo", None)):
        if os.path.lexists(marker):
            os.unlink(marker)
        if content is None:
            os.mkfifo(marker)
        else:
            U.write(marker, content)
        r = h.run(["train", cfg, "--set", "train.resume=auto"], timeout=60).expect(2, name)
        r.one_error("train.resume", marker)
        said = "%s is used, run.dir's newest; train.resume=auto refuses this run.dir: " % newest
        r = h.run(["eval", cfg], timeout=60).expect(0, "eval, resuming " + name)
        check(said in r.err and marker in r.err and r.out.startswith("checkpoint %s\n" % newest),
              "%s: eval's note:\n%s", name, r.describe())
        r = h.run(["inspect", run_dir], timeout=60).expect(0, "inspect, resuming " + name)
        check(said in r.err and json.loads(r.out)["checkpoint"] == newest,
              "%s: inspect's note:\n%s", name, r.describe())
        # plan, which train's refusal would stop, says so (it planned
        # silently from the newest)
        r = h.run(["plan", cfg, "--set", "train.resume=auto"], timeout=60).expect(
            0, "plan, resuming " + name)
        check("train.resume=auto refuses this run.dir: " in r.err and marker in r.err and
              "planned as a resume of run.dir's newest, " + newest in r.err,
              "%s: plan's note:\n%s", name, r.describe())


def test_run_dir_written_with_slashes_at_its_end(h):
    """run.dir written as `R/` or `R//` is the directory R: the run trains
    and saves there, and nothing it or eval and inspect print names a path
    with '//' in it (the resume notes, RUN_DIR/resuming, the done line):
    the same for a run.dir that holds no checkpoint of its own yet, whose
    RUN_DIR/resuming names the step an interrupted resume read."""
    _, orig = trained(h)
    for tail in ("/", "//"):
        run_dir = h.path("slashed%d" % len(tail))
        cfg = U.write_config(h, "slashed.yaml", keys(h, run_dir + tail))
        r = h.run(["train", cfg, "--set", "train.max_steps=4"]).expect(0, "train, run.dir " + tail)
        check(os.path.isdir(U.ckpt(run_dir, 3)) and "//" not in r.out + r.err,
              "run.dir R%s: trained, printing:\n%s", tail, r.describe())
        r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=6"]
                  ).expect(0, "resume, run.dir " + tail)
        check(os.path.isdir(U.ckpt(run_dir, 6)) and "//" not in r.out + r.err,
              "run.dir R%s: resumed, printing:\n%s", tail, r.describe())
        # a resume of another run's step killed while it reads it: the
        # record names that step, and run.dir has none of its own
        other = h.path("resumed%d" % len(tail))
        cfg = U.write_config(h, "resumed.yaml", keys(h, other + tail))
        env = dict(U.sanitizer_env(), PIPETRAIN_TEST_FAULT="0:0:crash:loading")
        p = subprocess.run([h.binary, "train", cfg, "--set", "train.resume=" + U.ckpt(orig, 6)],
                           cwd=h.dir, env=env, timeout=120, capture_output=True, text=True,
                           errors="replace", stdin=subprocess.DEVNULL)
        check(p.returncode == -signal.SIGKILL, "not killed while loading (%s):\n%s",
              p.returncode, p.stderr[-2000:])
        # (inspect's argument is named as it is written, R// too; the
        # paths made from it add no '/' after one)
        for cmd in (["eval", cfg], ["inspect", other + tail]):
            r = h.run(cmd, timeout=60).expect(0, " ".join(cmd[:1]) + ", run.dir " + tail)
            said = (r.out + r.err).replace(other + tail, other + "/")
            check("resuming names" in r.err and "//" not in said,
                  "%s of run.dir R%s:\n%s", cmd[0], tail, r.describe())
        r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=7"]
                  ).expect(0, "auto after the kill, run.dir " + tail)
        check("resuming" in r.err and "//" not in r.out + r.err and
              os.path.isdir(U.ckpt(other, 7)),
              "run.dir R%s: auto after the kill:\n%s", tail, r.describe())


def test_resume_of_other_runs_step_killed_while_loading(h):
    """Another run's checkpoint of step 6 resumed into a new run.dir, the
    start killed (SIGKILL) while it reads the checkpoint: run.dir was made
    (its lock, an empty metrics.jsonl) but RUN_DIR/resuming was written only
    after the load, so `auto` found no checkpoint and trained from step 1.
    The file now names the checkpoint before the load: `auto` resumes it,
    with a note, to the bits of the resume that was not killed. Killed so
    over a run.dir holding its own steps 3 to 10, nothing had moved yet:
    `auto` takes its own step 10, as before the killed start. A resume refused after the file was written (the checkpoint's
    unit file cut short) leaves run.dir as it was: the file another
    interrupted start left, byte for byte, or none, or no run.dir at all."""
    _, orig = trained(h)
    ref = h.path("ref")
    ref_cfg = U.write_config(h, "ref.yaml", keys(h, ref))
    h.run(["train", ref_cfg, "--set", "train.resume=" + U.ckpt(orig, 6),
           "--set", "train.max_steps=8"]).expect(0, "the resume that is not killed")
    out = h.path("want.st")
    h.run(["export", U.ckpt(ref, 8), out]).expect(0)
    want = U.read_bytes(out)
    named = os.path.realpath(U.ckpt(orig, 6))
    _, own = trained(h, "own", **{"train.lr": "0.002"})
    for name, run_dir in (("fresh", h.path("fresh")), ("own steps", own)):
        cfg = U.write_config(h, "killed.yaml", keys(h, run_dir, **(
            {"train.lr": "0.002"} if run_dir == own else {})))
        env = dict(U.sanitizer_env(), PIPETRAIN_TEST_FAULT="0:0:crash:loading")
        p = subprocess.run([h.binary, "train", cfg, "--set", "train.resume=" + U.ckpt(orig, 6),
                            "--set", "train.max_steps=8"], cwd=h.dir, env=env, timeout=120,
                           capture_output=True, text=True, errors="replace",
                           stdin=subprocess.DEVNULL)
        check(p.returncode == -signal.SIGKILL, "%s: not killed while loading (%s):\n%s", name,
              p.returncode, p.stderr[-2000:])
        check(os.path.isdir(run_dir), "%s: no run.dir before the load", name)
        r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=8"]
                  ).expect(0, "%s: auto after the kill" % name)
        if run_dir == own:  # nothing of it had moved: run.dir's own newest, as before
            check("resumed at step 10" in r.err and "resumed from" not in r.err,
                  "%s: auto did not take run.dir's own step 10:\n%s", name, r.describe())
            continue
        check("resumed at step 6" in r.err and "resumed from %s" % named in r.err,
              "%s: auto did not resume the other run's step 6 with a note:\n%s", name,
              r.describe())
        h.run(["export", U.ckpt(run_dir, 8), out]).expect(0)
        check(U.read_bytes(out) == want, "%s: step 8 differs from the resume not killed", name)
    # refused after the file was written: put back as it was, or taken off
    damaged = h.path("damaged")
    shutil.copytree(U.ckpt(orig, 6), damaged)
    unit = max((f for f in os.listdir(damaged) if f != "manifest"),
               key=lambda f: os.path.getsize(os.path.join(damaged, f)))
    with open(os.path.join(damaged, unit), "r+b") as fh:
        fh.truncate(os.path.getsize(os.path.join(damaged, unit)) // 2)
    _, left = trained(h, "left", **{"train.lr": "0.002"})
    U.write(os.path.join(left, "resuming"), "left by another start\n")
    for name, run_dir in (("no run.dir", h.path("never")), ("own steps", own),
                          ("a file left", left)):
        cfg = U.write_config(h, "refused.yaml", keys(h, run_dir, **(
            {} if run_dir == h.path("never") else {"train.lr": "0.002"})))
        before = U.snapshot(run_dir) if os.path.exists(run_dir) else None
        h.run(["train", cfg, "--set", "train.resume=" + damaged]).expect(
            2, "%s: a damaged checkpoint" % name)
        after = U.snapshot(run_dir) if os.path.exists(run_dir) else None
        check(after == before, "%s: the refused resume changed run.dir (resuming: %s)", name,
              os.path.exists(os.path.join(run_dir, "resuming")))


def test_resume_of_other_runs_step_over_a_damaged_own_step(h):
    """run.dir's own step 6 is damaged (its manifest a directory, so no
    checkpoint auto would take, and the move of its later steps leaves it),
    and another run's step 6 is resumed there: the start took the directory
    for the resumed step already saved, skipped the save and left
    RUN_DIR/resuming behind for good. The save now replaces the damaged
    directory, and the file goes. And a resume refused because the later
    steps cannot move (abandoned/ is a file) leaves run.dir as it was: its
    checkpoints, and no RUN_DIR/resuming."""
    _, orig = trained(h)
    cfg, other = trained(h, "other", **{"train.lr": "0.002"})
    refused_cfg, refused = copy_run(h, other, "refused", **{"train.lr": "0.002"})
    manifest = os.path.join(U.ckpt(other, 6), "manifest")
    os.unlink(manifest)
    os.mkdir(manifest)
    h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(orig, 6),
           "--set", "train.max_steps=8"]).expect(0, "the resume over a damaged step 6")
    check(not os.path.exists(os.path.join(other, "resuming")), "RUN_DIR/resuming left behind")
    outs = []
    for ck in (U.ckpt(orig, 6), U.ckpt(other, 6)):
        out = h.path("export-%d.st" % len(outs))
        h.run(["export", ck, out]).expect(0, "export of " + ck)
        outs.append(U.read_bytes(out))
    check(outs[0] == outs[1], "run.dir's step 6 is not the checkpoint resumed")
    U.write(os.path.join(refused, "abandoned"), "a file where the directory goes\n")
    before = U.snapshot(refused)
    h.run(["train", refused_cfg, "--set", "train.resume=" + U.ckpt(orig, 6)]).expect(
        2, "a resume whose later steps cannot move")
    check(U.snapshot(refused) == before, "the refused resume changed run.dir (resuming: %s)",
          os.path.exists(os.path.join(refused, "resuming")))


def test_damaged_newest_step_directory(h):
    """The newest step directory damaged so that it is no checkpoint: its
    manifest replaced by a directory, a FIFO or a link to a device (a
    manifest file that fails its checks is refused instead: the damage
    cases above). `auto`
    resumes step 9 with a note naming step 10 as passed over (so does eval),
    and the save of step 10 moves the damaged directory whole to
    RUN_DIR/abandoned/ instead of failing there run after run; the run ends
    with the bits of the one that never stopped. A step directory that is a
    symbolic link to a directory of the user's is never emptied through the
    link (pruning and the next save move or leave the link, never the files
    where it leads)."""
    _, orig = trained(h)
    want = h.path("want.st")
    h.run(["export", U.ckpt(orig, LAST), want]).expect(0)
    for name, damage in (("dir", lambda m: os.mkdir(m)), ("fifo", lambda m: os.mkfifo(m)),
                         ("devlink", lambda m: os.symlink("/dev/zero", m))):
        cfg, run_dir = copy_run(h, orig, "copy-" + name)
        manifest = os.path.join(U.ckpt(run_dir, LAST), "manifest")
        os.unlink(manifest)
        damage(manifest)
        r = h.run(["eval", cfg]).expect(0, "eval over a damaged newest step (%s)" % name)
        note = "note: %s is newer than" % U.ckpt(run_dir, LAST)  # the whole path
        check(note in r.err, "eval gave no note (%s):\n%s", name, r.describe())
        r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resume over " + name)
        check("resumed at step 9" in r.err and note in r.err,
              "resume (%s):\n%s", name, r.describe())
        moved = glob.glob(os.path.join(run_dir, "abandoned", "step_%010d.*" % LAST, "step_%010d" % LAST))
        if name == "dir":  # what cannot be unlinked moves whole
            check(len(moved) == 1 and os.path.isdir(os.path.join(moved[0], "manifest")),
                  "the damaged directory was not moved aside: %s\n%s", moved, r.describe())
        got = h.path("got-%s.st" % name)
        h.run(["export", U.ckpt(run_dir, LAST), got]).expect(0)
        check(U.read_bytes(got) == U.read_bytes(want), "step 10 after the resume over %s differs", name)
        h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "a second resume (%s)" % name)
    # RUN_DIR/abandoned a file of the user's: the move aside is refused,
    # naming it, and the file is left as it was
    cfg, run_dir = copy_run(h, orig, "copy-abandoned-file")
    manifest = os.path.join(U.ckpt(run_dir, LAST), "manifest")
    os.unlink(manifest)
    os.mkdir(manifest)
    U.write(os.path.join(run_dir, "abandoned"), "the user's")
    r = h.run(["train", cfg, "--set", "train.resume=auto"])
    check(r.rc == 2 and "abandoned' is a regular file, not a directory" in r.err,
          "abandoned as a file:\n%s", r.describe())
    check(U.read_bytes(os.path.join(run_dir, "abandoned")) == b"the user's", "abandoned changed")
    # a step directory that is a link to the user's own directory
    cfg, run_dir = copy_run(h, orig, "copy-link")
    mine = h.path("mine")
    os.makedirs(mine)
    U.write(os.path.join(mine, "keep.txt"), "the user's")
    U.write(os.path.join(mine, "manifest"), "the user's")  # what a save unlinks first
    os.symlink("/nonexistent", os.path.join(mine, "link"))
    os.mkfifo(os.path.join(mine, "units-stage0.bin"))
    shutil.rmtree(U.ckpt(run_dir, LAST))
    os.symlink(mine, U.ckpt(run_dir, LAST))
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resume over a linked step")
    check("resumed at step 9" in r.err, "a linked step directory was taken as a checkpoint:\n%s",
          r.describe())
    check("'%s' was a symbolic link, not a checkpoint of the run's; moved to" % U.ckpt(run_dir, LAST)
          in r.err and "files were removed" not in r.err and "held what" not in r.err,
          "the note of the linked step directory:\n%s", r.describe())
    check(sorted(os.listdir(mine)) == ["keep.txt", "link", "manifest", "units-stage0.bin"] and
          U.read_bytes(os.path.join(mine, "manifest")) == b"the user's",
          "the linked directory changed: %s", os.listdir(mine))
    got = h.path("got-link.st")
    h.run(["export", U.ckpt(run_dir, LAST), got]).expect(0)
    check(U.read_bytes(got) == U.read_bytes(want), "step 10 after the resume over a link differs")


def test_other_model_names_the_config_line(h):
    """A resume or an eval whose config makes another model than the
    checkpoint holds is refused, exit 2, naming the config's file, line and
    key that differ (model.dim in the file; model.layers by --set;
    data.image_size, behind the model's image height), the checkpoint and
    both values; nothing in run.dir changes."""
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "copy-other-model")
    text = open(cfg).read()
    lines = text.splitlines(True)
    at = U.line_of(text, "model.dim")
    check(lines[at - 1].strip() != "dim: 56", "the test's model already has dim 56")
    lines[at - 1] = "  dim: 56\n"
    wide = U.write(h.path("wide.yaml"), "".join(lines))
    before = U.snapshot(run_dir)
    for args, where, needles in (
            (["train", wide, "--set", "train.resume=auto"],
             "%s:%d: model.dim: " % (wide, at), ["model.dim = 56"]),
            (["eval", wide], "%s:%d: model.dim: " % (wide, at), ["model.dim = 56"]),
            (["train", cfg, "--set", "train.resume=auto", "--set", "model.layers=3"],
             "--set: model.layers: ", ["model.layers = 3"]),
            (["train", cfg, "--set", "train.resume=auto", "--set", "data.image_size=12"],
             "--set: data.image_size: ", ["the image height of the data = 12"]),
            (["eval", cfg, "--set", "data.image_size=12"],
             "--set: data.image_size: ", ["the image height of the data = 12"])):
        r = h.run(args).expect(2, " ".join(args[:1] + args[2:]))
        line = r.one_error(where, "checkpoint %s holds a model with" % U.ckpt(run_dir, LAST), *needles)
        check(line.index(where) < line.index("checkpoint "), "the config's place is not first: %s", line)
    # the batch and the seed, which fix the data position, the same way
    at = U.line_of(text, "train.batch")
    lines = text.splitlines(True)
    check(lines[at - 1].strip().startswith("batch: ") and lines[at - 1].strip() != "batch: 6",
          "the test's batch line: %r", lines[at - 1])
    other_batch = U.write(h.path("other-batch.yaml"), "".join(lines[:at - 1] + ["  batch: 6\n"] +
                                                             lines[at:]))
    for args, where, needle in (
            (["train", other_batch, "--set", "train.resume=auto"], "%s:%d: train.batch: " % (
                other_batch, at), "saved with train.batch = "),
            (["train", cfg, "--set", "train.resume=auto", "--set", "run.seed=77"],
             "--set: run.seed: ", "saved with run.seed = ")):
        r = h.run(args).expect(2, " ".join(args[:1] + args[2:]))
        line = r.one_error(where, "checkpoint %s was saved" % U.ckpt(run_dir, LAST), needle)
        check(line.index(where) < line.index("checkpoint "), "the config's place is not first: %s", line)
    U.same_snapshot(before, U.snapshot(run_dir), "run.dir")


def test_linked_manifest(h):
    """A step directory whose manifest is a symbolic link to a manifest kept
    elsewhere (its units files in place) is a checkpoint to every command
    alike: eval and export given it accept it, and so do eval without
    --checkpoint and train.resume=auto, which resume it; the pruning of the
    run that follows does not take it for a save that did not finish (it
    removed the directory's files, and auto trained from scratch)."""
    _, orig = trained(h)
    want = h.path("want.st")
    h.run(["export", U.ckpt(orig, LAST), want]).expect(0)
    cfg, run_dir = copy_run(h, orig, "copy-linked-manifest")
    step_dir = U.ckpt(run_dir, LAST)
    kept = h.path("kept-manifest")
    shutil.move(os.path.join(step_dir, "manifest"), kept)
    os.symlink(kept, os.path.join(step_dir, "manifest"))
    before = sorted(os.listdir(step_dir))
    got = h.path("got.st")
    h.run(["export", step_dir, got]).expect(0, "export of a linked manifest")
    check(U.read_bytes(got) == U.read_bytes(want), "the export through the link differs")
    r = h.run(["eval", cfg]).expect(0, "eval over a linked manifest")
    check("newer than" not in r.err, "eval passed the linked manifest over:\n%s", r.describe())
    r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.epochs=3"])
    r.expect(0, "resume over a linked manifest")
    check("resumed at step %d" % LAST in r.err and "not a complete checkpoint" not in r.err,
          "auto did not resume the linked manifest:\n%s", r.describe())
    check(sorted(os.listdir(step_dir)) == before and os.path.islink(os.path.join(step_dir, "manifest")),
          "the step directory changed: %s", os.listdir(step_dir))


def temporary_with_bytes(d):
    """Whether a temporary file in d holds bytes (one that vanishes while
    looked at counts as empty)."""
    for f in os.listdir(d):
        try:
            if ".tmp." in f and os.path.getsize(os.path.join(d, f)) > 0:
                return True
        except FileNotFoundError:
            pass
    return False


def test_outputs_of_a_stopped_export_or_eval(h):
    """SIGTERM, SIGINT or SIGHUP at random moments of an export or an eval
    --logits/--hidden of a 40 MB checkpoint: the command ends by the signal,
    the output is the old file or the whole new one, and no temporary file
    is left beside it (they were left, and nothing ever removed them)."""
    run_dir = h.path("big")
    cfg = U.write_config(h, "big.yaml", U.tiny("gpt", run_dir, **{
        "model.dim": "256", "model.layers": "4", "model.heads": "4", "train.max_steps": "1",
        "train.epochs": "1"}))
    h.run(["train", cfg]).expect(0)
    ck = U.ckpt(run_dir, 1)
    outdir = h.path("outputs")
    os.makedirs(outdir)
    rng = random.Random(7)
    writing = {"export": 0, "eval": 0}
    for i in range(12):
        sig = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)[i % 3]
        if i % 2 == 0:
            args = ["export", ck, os.path.join(outdir, "w.st")]
        else:
            args = ["eval", cfg, "--checkpoint", ck, "--logits", os.path.join(outdir, "l.st"),
                    "--hidden", os.path.join(outdir, "h.st")]
        p = h.popen(args)
        if i < 6:  # as soon as a temporary file holds bytes: while an output is written
            caught = False  # (not eval's probe of its outputs at the start, which stays empty)
            for attempt in range(5):  # on a busy machine the poll may miss a short write
                while p.poll() is None and not caught:
                    caught = temporary_with_bytes(outdir)
                if caught:
                    break
                p.communicate(timeout=120)
                p = h.popen(args)
            writing[args[0]] += caught
        else:
            time.sleep(rng.uniform(0.0, 0.4))
        p.send_signal(sig)
        p.communicate(timeout=120)
        check(p.returncode in (0, -sig), "%s ended with %s after signal %d", args[0], p.returncode, sig)
        left = [f for f in os.listdir(outdir) if ".tmp." in f]
        check(not left, "%s stopped by signal %d left %s", args[0], sig, left)
    check(writing["export"] >= 1 and writing["eval"] >= 1,
          "signals that came while an output was written: %s of 3 each", writing)
    if os.path.exists(os.path.join(outdir, "w.st")):
        h.run(["export", ck, os.path.join(outdir, "again.st")]).expect(0)
        check(U.read_bytes(os.path.join(outdir, "w.st")) == U.read_bytes(os.path.join(outdir, "again.st")),
              "an export that was signalled left a partial file")
    # SIGKILL leaves its temporary file (nothing can remove it then): the next
    # export or eval of that output removes it, with a note, whatever its pid
    # (a writer's lock tells it is alive, not its pid); a live writer's
    # temporary file (this test holds its lock) is left alone
    for args, out in ((["export", ck], "w.st"), (["eval", cfg, "--checkpoint", ck, "--logits"], "l.st")):
        target = os.path.join(outdir, out)
        p = h.popen(args + [target])
        caught = False
        while p.poll() is None and not caught:
            caught = temporary_with_bytes(outdir)
        p.kill()
        p.communicate(timeout=120)
        forged = U.write(target + ".tmp.1.00000000deadbeef", "left by a killed writer")
        mine = U.write(target + ".tmp.%d.0123456789abcdef" % os.getpid(), "a live writer's")
        holder = open(mine, "rb")
        fcntl.flock(holder, fcntl.LOCK_EX)
        killed = [f for f in os.listdir(outdir) if f.startswith(out + ".tmp.")]
        r = h.run(args + [target]).expect(0, "%s after a killed one" % args[0])
        holder.close()
        left = sorted(f for f in os.listdir(outdir) if ".tmp." in f)
        check(left == [os.path.basename(mine)], "%s after a SIGKILL left %s (there were %s)",
              args[0], left, killed)
        notes = [l for l in r.err.splitlines() if "temporary file" in l and "killed" in l]
        check(len(notes) == 1 and target in notes[0] and
              "removed %d temporary" % (len(killed) - 1) in notes[0],
              "not one note of the %d removed:\n%s", len(killed) - 1, r.describe())
        os.unlink(mine)
        check(os.path.exists(forged) is False, "the dead writer's file is still there")


def test_resume_past_the_end_into_a_new_run_dir(h):
    """A run resumed from another run's checkpoint of step 10 into a new
    run.dir, with settings that end the run sooner (1 epoch: 5 steps), has
    nothing to train: it says so, and still leaves the checkpoint that
    "done: ... checkpoints in" names (it printed that with none there);
    resumed again there, it saves nothing new."""
    _, orig = trained(h)
    new = h.path("new-run")
    cfg = U.write_config(h, "new.yaml", keys(h, new, **{"train.epochs": "1"}))
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(orig, LAST)]).expect(0)
    check("nothing left to train: the checkpoint is at step 10" in r.err and
          "end it at step 5" in r.err, "no note that nothing is left\n%s", r.describe())
    # past the run's last step there is no epoch the next step trains
    check("resumed at step 10, this run's last (no step left to train)" in r.err and
          "of its batches done" not in r.err, "the resume line names an epoch\n%s", r.describe())
    check(U.checkpoints(new) == ["step_%010d" % LAST], "checkpoints in the new run.dir: %s",
          U.checkpoints(new) if os.path.isdir(new) else "none")
    h.run(["eval", cfg]).expect(0, "evaluating the new run.dir's checkpoint")
    before = U.snapshot(os.path.join(new, "checkpoints"))
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resuming there again")
    check("resumed at step 10, this run's last" in r.err, "resumed again:\n%s", r.describe())
    U.same_snapshot(before, U.snapshot(os.path.join(new, "checkpoints")), "checkpoints after auto")


def test_checkpoint_files_are_recfiles(h):
    """Every checkpoint file has its magic, version 2 and a valid CRC, and
    the manifest records what checkpoint.h promises, binding every file."""
    _, run_dir = trained(h)
    ck = U.ckpt(run_dir, LAST)
    magic, version, recs = U.read_recfile(os.path.join(ck, "manifest"))
    check(magic == b"PTCKMAN1" and version == 2, "manifest magic %r version %d", magic, version)
    m = read_manifest(ck)
    for key, want in (("step", LAST), ("epoch", 2), ("epoch_step", 0), ("batch", 8), ("seed", 3)):
        check(m.get(key) == want, "manifest %s = %r, expected %r", key, m.get(key), want)
    check(len(m["checkpoint"]) == 32, "checkpoint id %r", m["checkpoint"])
    for key in ("arch", "units", "files", "freeze", "lr", "config"):
        check(key in m, "manifest lacks %s", key)
    for unit in U.unit_files(ck):
        name = os.path.basename(unit)
        data = U.read_bytes(unit)
        check(m["files"][name] == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()},
              "manifest's entry for %s: %r", name, m["files"].get(name))
        magic, version, urecs = U.read_recfile(unit)
        check(magic == b"PTUNITS1" and version == 2, "%s: magic %r version %d", unit, magic,
              version)
        own = json.loads(dict(urecs)["checkpoint"])
        check(own == {"checkpoint": m["checkpoint"], "step": LAST, "file": name},
              "%s names %r", name, own)
        tags = [t for t, _ in urecs]
        for unit_name in ("embed", "blocks.0.attn", "blocks.1.mlp", "head"):
            for part in ("param", "m", "v"):
                check("%s.%s" % (unit_name, part) in tags, "%s lacks %s.%s", unit, unit_name, part)
    # no temporary files left behind
    for name in os.listdir(ck):
        check(name == "manifest" or name.endswith(".bin"), "stray file %s in %s", name, ck)


def test_leftovers_of_a_crashed_save_are_removed(h):
    """Temporary files a killed save left (with any pid, this one included)
    block nothing and are removed when the next job takes the run directory;
    an incomplete step directory goes at the next save."""
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "copy", **{"train.epochs": "3"})
    ck = U.ckpt(run_dir, LAST)
    junk = [os.path.join(ck, "units-stage0.bin.tmp.1"),
            os.path.join(ck, "manifest.tmp.1.0123456789abcdef")]
    incomplete = os.path.join(run_dir, "checkpoints", "step_0000000012")
    os.mkdir(incomplete)
    junk.append(os.path.join(incomplete, "units-stage0.bin.tmp.1"))
    for j in junk:
        U.write(j, "partial")
    r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0)
    check("resumed at step %d" % LAST in r.err, "did not resume\n%s", r.describe())
    for j in junk:
        check(not os.path.exists(j), "leftover %s still there", j)
    check(U.checkpoints(run_dir)[-1] == "step_0000000015", "%s", U.checkpoints(run_dir))


def test_two_jobs_in_one_run_dir(h):
    """A second job in a run directory that a live job holds is refused
    (with or without train.resume), and leaves the first job's files alone."""
    run_dir = h.path("run")
    cfg = U.write_config(h, "c.yaml", keys(h, run_dir, **{"train.epochs": "400"}))
    first = subprocess.Popen([h.binary, "train", cfg], cwd=h.dir, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(run_dir, "lock")) or not U.checkpoints(run_dir):
            check(time.time() < deadline and first.poll() is None, "the first job did not start")
            time.sleep(0.05)
        for extra in ([], ["--set", "train.resume=auto"]):
            r = h.run(["train", cfg] + extra).expect(2)
            line = r.one_error(run_dir, "in use by another pipetrain job", "pid %d" % first.pid)
            check("train.resume" not in line, "the refusal suggests resuming: %s", line)
        check(first.poll() is None, "the first job stopped")
    finally:
        first.kill()
        first.wait()
    # the kernel dropped the dead job's lock: the next job may resume
    h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=12"]).expect(0)
    # a refused job never touches the holder's logs, not even a last line
    # that looks cut (the holder may be writing it): only the holder cuts
    metrics = os.path.join(run_dir, "metrics.jsonl")
    with open(metrics, "a") as f:
        f.write('{"event": "step", "st')
    before = U.read_bytes(metrics)
    import fcntl
    with open(os.path.join(run_dir, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(2)
        r.one_error(run_dir, "in use by another pipetrain job")
        check(U.read_bytes(metrics) == before, "a refused job changed metrics.jsonl")
    r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=13"]).expect(0)
    check("ended in a line cut short (21 bytes" in r.err, "the holder did not cut:\n%s", r.describe())
    U.metrics(run_dir)  # every line parses


def test_run_dir_inside_checkpoints(h):
    """A run.dir at or below a step directory of another run's checkpoints
    (a checkpoint, or a step a save will make) is refused, exit 2, and
    nothing there changes: that run's saves and pruning would remove this
    run's lock and logs while it trains, letting a second job into its
    run.dir (the slip of naming a checkpoint in run.dir instead of
    train.resume used to be accepted); `plan` refuses it alike (it planned
    such a run). Directories that pruning never touches are run
    directories like any other."""
    cfg, run_dir = trained(h)
    ckpts = os.path.join(run_dir, "checkpoints")
    step = os.path.join(ckpts, "step_%010d" % LAST)
    before = U.snapshot(run_dir)
    for where, words in ((step, "is in checkpoint directory"),
                         (os.path.join(step, "a", "b"), "is in checkpoint directory"),
                         (os.path.join(ckpts, "step_%010d" % (LAST + 5)), "a step directory of the run"),
                         (os.path.join(ckpts, "step_%010d" % (LAST + 5), "x"),
                          "a step directory of the run"),
                         (os.path.join(run_dir, "checkpoints", "..", "checkpoints",
                                       "step_%010d" % LAST), "is in checkpoint directory"),
                         # ".." among the parts that do not exist yet
                         (os.path.join(ckpts, "zz", "..", "step_%010d" % (LAST + 10)),
                          "a step directory of the run"),
                         (os.path.join(ckpts, "zz", "y", "..", "..", "step_%010d" % LAST),
                          "is in checkpoint directory")):
        for extra in ([], ["--set", "train.resume=" + step]):
            for cmd in ("train", "plan"):
                r = h.run([cmd, cfg, "--set", "run.dir=" + where] + extra).expect(2, cmd)
                r.one_error("run.dir", words, "not a run directory")
                U.same_snapshot(before, U.snapshot(run_dir), "the run after %s's run.dir %s" % (cmd, where))
    # look-alikes that no pruning touches: a directory called checkpoints
    # beside another tool's metrics.jsonl and lock, a step_ name that is not
    # a step, a name in a run's checkpoints that is not a step
    proj = h.path("proj")
    os.makedirs(os.path.join(proj, "checkpoints"))
    for name in ("metrics.jsonl", "lock"):
        U.write(os.path.join(proj, name), "{}\n")
    prep = h.path("data", "step_prep")
    os.makedirs(prep)
    U.write(os.path.join(prep, "manifest"), "not ours\n")
    for where in (os.path.join(proj, "checkpoints", "run1"), os.path.join(prep, "out"),
                  os.path.join(ckpts, "fork")):
        h.run(["train", cfg, "--set", "run.dir=" + where, "--set", "train.resume=" + step,
               "--set", "train.epochs=3"]).expect(0)


def test_long_real_paths(h):
    """A run.dir and outputs reached through a symbolic link to a directory
    whose real path is longer than 1024 bytes: the checks that resolve real
    paths (run.dir against other runs' checkpoints, eval's and export's
    outputs) used to overflow a 1024-byte buffer (train died of SIGSEGV)."""
    deep = h.path("deep")
    for c in "abcdef":
        deep = os.path.join(deep, c * 200)
    os.makedirs(deep)
    link = h.path("short")
    os.symlink(deep, link)
    run_dir = os.path.join(link, "run")
    cfg = U.write_config(h, "long.yaml", keys(h, run_dir))
    h.run(["train", cfg]).expect(0)
    h.run(["eval", cfg, "--logits", os.path.join(link, "logits.bin")]).expect(0)
    step = os.path.join(run_dir, "checkpoints", U.checkpoints(run_dir)[-1])
    h.run(["export", step, os.path.join(link, "model.safetensors")]).expect(0)
    h.run(["export", step, os.path.join(run_dir, "checkpoints", "x.safetensors")]).expect(2)
    h.run(["train", cfg, "--set", "run.dir=" + os.path.join(step, "run")]).expect(2)


def test_real_paths_past_path_max(h):
    """A directory whose real path is longer than PATH_MAX (4096 bytes,
    reached through two links): the checks that keep run.dir and eval's and
    export's outputs out of every run's checkpoints need real paths, and
    refuse (exit 2, naming the path) when there is none; they used to let
    the write through, into another run's checkpoint too."""
    names = ["%02d" % i + "d" * 198 for i in range(22)]
    first = os.path.join(h.path("deep"), *names[:11])
    os.makedirs(first)
    s = h.path("s")
    os.symlink(first, s)
    os.makedirs(os.path.join(s, *names[11:]))
    os.symlink(os.path.join(*names[11:]), os.path.join(s, "t"))
    far = os.path.join(s, "t")
    check(len(os.path.realpath(far)) > 4096 or not os.path.isdir(far), "the real path is short")
    cfg, run_dir = trained(h)
    step = os.path.join(run_dir, "checkpoints", U.checkpoints(run_dir)[-1])
    before = U.snapshot(h.path("deep"))
    far_cfg = U.write_config(h, "far.yaml", keys(h, os.path.join(far, "run")))
    r = h.run(["train", far_cfg]).expect(2, "run.dir past PATH_MAX")
    r.one_error("run.dir", "cannot be found (File name too long)", strict=False)
    r = h.run(["eval", cfg, "--logits", os.path.join(far, "l.st")]).expect(2, "--logits past PATH_MAX")
    r.one_error("--logits", "cannot be found", strict=False)
    r = h.run(["export", step, os.path.join(far, "w.st")]).expect(2, "export past PATH_MAX")
    r.one_error("export", "cannot be found")
    U.same_snapshot(before, U.snapshot(h.path("deep")), "the deep directories")


def test_diverged_run_saves_no_nan(h):
    """A run that diverges stops before a NaN reaches its weights and saves
    nothing non-finite: the gradient is checked before the update and every
    tensor before a checkpoint is written. A NaN gradient used to be applied
    and saved at the next checkpoint (here, every step), which eval, export
    and a resume then refused, with the good checkpoints pruned. BERT too
    (post-LN, padded examples, dropout)."""
    for kind in ("vit", "gpt", "bert"):
        run_dir = h.path("diverged-" + kind)
        keys = U.tiny("gpt" if kind == "bert" else kind, run_dir, **{
            "train.lr": "10", "train.weight_decay": "10", "train.warmup_steps": "0",
            "train.min_lr": "0", "train.checkpoint_every": "1", "train.keep_checkpoints": "100"})
        if kind == "bert":
            keys.update({"model.kind": "bert", "model.context": "17", "model.positions": "20",
                         "model.classes": "3", "model.dropout": "0.1", "data.kind": "text_classification",
                         "data.synthetic_examples": None, "sample.length": None})
            keys.update(U.bert_files(h, 40, 5))
        cfg = U.write_config(h, "diverged-%s.yaml" % kind, keys)
        r = h.run(["train", cfg]).expect(2)
        check("training diverged" in r.err, "%s: no word of the divergence\n%s", kind,
              U.tail(r.err))
        saved = U.checkpoints(run_dir)
        check(saved, "%s: nothing saved before the divergence", kind)
        for c in saved:
            for name, raw in U.unit_records(os.path.join(run_dir, "checkpoints", c, "units-stage0.bin")):
                vals = U.floats(raw)
                check(all(math.isfinite(x) for x in vals), "%s: %s of %s is not finite", kind,
                      name, c)
        h.run(["eval", cfg]).expect(0)
        h.run(["export", os.path.join(run_dir, "checkpoints", saved[-1]),
               h.path("diverged-%s.safetensors" % kind)]).expect(0)


def test_prune_spares_a_held_checkpoint(h):
    """A checkpoint that a reader holds (eval and export take a shared lock
    on its manifest while they read it) is not pruned under it: it stays past
    train.keep_checkpoints and goes at the first save after the reader let
    go. Pruning used to remove checkpoints that eval or export were reading
    (with keep 1, more than half of the evaluations of a run in progress
    failed)."""
    cfg, run_dir = trained(h)
    held = os.path.join(run_dir, "checkpoints", "step_%010d" % LAST)
    fd = os.open(os.path.join(held, "manifest"), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.epochs=3",
               "--set", "train.keep_checkpoints=1"]).expect(0)
        left = U.checkpoints(run_dir)
        check(left == ["step_%010d" % LAST, "step_%010d" % (LAST + 5)],
              "with step %d held, a resume keeping 1 left %s", LAST, left)
    finally:
        os.close(fd)
    h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.epochs=4",
           "--set", "train.keep_checkpoints=1"]).expect(0)
    left = U.checkpoints(run_dir)
    check(left == ["step_%010d" % (LAST + 10)], "released, step %d was not pruned: %s", LAST, left)


# Under the sanitizers (PT_TEST_SANITIZED=1) a run of the binary starts in
# about a third of a second and a step is about ten times slower: the races
# below repeat a third as often there, and space their saves by fewer steps
# (the same time apart). The normal build runs them in full.
SANITIZED = os.environ.get("PT_TEST_SANITIZED") == "1"


def test_go_back_while_a_later_step_is_read(h):
    """A resume of an older step moves the later ones to abandoned/; one of
    them that an eval reads (it holds it, and opens its files by their
    path) moved from under it, and the eval failed with exit 2 naming a
    unit file that was not there. The move now waits for the read to end
    (strace slows the eval's open of its unit file by 3 s): both succeed,
    the eval with the later step's logits, the resume with its moves. And a
    resume of another run's step holds it while it reads, against that
    run's pruning. Needs strace."""
    if not shutil.which("strace"):
        return "skipped: needs strace"
    _, orig = trained(h)
    cfg, run_dir = copy_run(h, orig, "read-while-moved")
    unit = U.unit_files(U.ckpt(run_dir, LAST))[0]
    want = h.run(["eval", cfg]).expect(0, "eval, undisturbed").out
    reader = subprocess.Popen(["strace", "-f", "-o", "/dev/null", "-P", os.path.abspath(unit),
                               "-e", "trace=openat", "-e", "inject=openat:delay_enter=3000000",
                               h.binary, "eval", cfg], cwd=h.dir, env=untraced_leaks_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL)
    time.sleep(1.2)  # the eval holds step 10 by now, and waits in the open
    r = h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, 6), "--set",
               "train.max_steps=7"], timeout=120).expect(0, "a go-back while step 10 is read")
    out, err = reader.communicate(timeout=120)
    check(reader.returncode == 0 and out == want, "the eval of step 10 while it was moved: exit "
          "%s\n%s", reader.returncode, U.tail(err))
    check("moved to" in r.err and not os.path.exists(U.ckpt(run_dir, LAST)),
          "the go-back did not move step 10:\n%s", r.describe())
    # another run's step held against that run's pruning while it is read:
    # that run trains on (auto) and prunes all but its newest at each save
    ocfg, orig = trained(h, "pruning")
    unit = U.unit_files(U.ckpt(orig, 6))[0]
    rcfg = U.write_config(h, "reads-another.yaml", keys(h, h.path("reads-another")))
    reader = subprocess.Popen(["strace", "-f", "-o", "/dev/null", "-P", os.path.abspath(unit),
                               "-e", "trace=openat", "-e", "inject=openat:delay_enter=3000000",
                               h.binary, "train", rcfg, "--set", "train.resume=" + U.ckpt(orig, 6),
                               "--set", "train.max_steps=7"], cwd=h.dir, env=untraced_leaks_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL)
    time.sleep(1.2)  # it holds step 6 by now, and waits in the open
    h.run(["train", ocfg, "--set", "train.resume=auto", "--set", "train.epochs=3",
           "--set", "train.keep_checkpoints=1"], timeout=120).expect(0, "the run that prunes")
    out, err = reader.communicate(timeout=120)
    check(reader.returncode == 0, "a resume of another run's step that run prunes: exit %s\n%s",
          reader.returncode, U.tail(err))


def test_eval_while_training(h):
    """eval and inspect of a run in progress (its newest checkpoint, chosen
    and held before the run's pruning can take it) succeed while the run
    saves and prunes at every step."""
    run_dir = h.path("live")
    cfg = U.write_config(h, "live.yaml", keys(h, run_dir, **{
        "train.epochs": "100000", "train.checkpoint_every": "1", "train.keep_checkpoints": "1",
        "train.eval_every": "0", "data.synthetic_examples": "400"}))
    trainer = h.popen(["train", cfg])
    try:
        def complete():  # a step directory whose save finished (it has its manifest)
            return [c for c in U.checkpoints(run_dir)
                    if os.path.exists(os.path.join(run_dir, "checkpoints", c, "manifest"))]
        deadline = time.time() + 120
        while not complete() and time.time() < deadline and trainer.poll() is None:
            time.sleep(0.05)
        check(complete(), "the run saved no checkpoint in 120 s")
        bad = []
        for i in range(20 if SANITIZED else 60):
            r = h.run(["eval", cfg])
            if r.rc != 0:
                bad.append("eval %d: exit %d: %s" % (i, r.rc, U.tail(r.err, 400)))
        # inspect of the run directory likewise (its newest, chosen again
        # when the run pruned it first), a few hundred times: a step that only
        # grows, the step directory's own
        last = 0
        for i in range(100 if SANITIZED else 300):
            r = h.run(["inspect", run_dir])
            if r.rc != 0:
                bad.append("inspect %d: exit %d: %s" % (i, r.rc, U.tail(r.err, 400)))
                continue
            o = json.loads(r.out)
            if o["step"] < last or not o["checkpoint"].endswith("step_%010d" % o["step"]):
                bad.append("inspect %d: step %d after %d (%s)" % (i, o["step"], last,
                                                                  o["checkpoint"]))
            last = o["step"]
        check(trainer.poll() is None, "the run ended during the evaluations")
        check(not bad, "%d evaluations or inspections of the run in progress failed:\n%s",
              len(bad), "\n".join(bad[:3]))
    finally:
        if trainer.poll() is None:
            trainer.send_signal(signal.SIGTERM)
        trainer.communicate(timeout=120)
    check(trainer.returncode == 130, "the run, stopped by SIGTERM: exit %d", trainer.returncode)


def test_run_dir_changed_while_training(h):
    """run.dir moved away, its lock removed or replaced, or its checkpoints/
    replaced by a link to another run's or by another directory, while a job
    trains: the next save stops the job (exit 1, saying what changed) rather
    than save where another job may (before: it made a new run.dir of the
    old name, which a second job could lock and train in beside it, and
    pruned the other run's checkpoints through the link). A checkpoints/
    that was a link before the job started is followed, as it always was."""
    _, other = trained(h, "other-run")
    other_ckpts = os.path.join(other, "checkpoints")
    before = U.snapshot(other)
    for how in ("moved", "lock", "replaced", "link", "directory"):
        run_dir = h.path("live-" + how)
        cfg = U.write_config(h, "live-%s.yaml" % how, keys(h, run_dir, **{
            # saves far apart (a tenth of a second or more), so the change
            # falls between two of them, not inside one
            "train.epochs": "100000", "train.max_steps": "400000",
            "train.checkpoint_every": "800" if SANITIZED else "4000",
            "train.keep_checkpoints": "1", "train.eval_every": "0", "train.log_every": "100000",
            "data.synthetic_examples": "400"}))  # few lines: stderr is a pipe read at the end
        trainer = h.popen(["train", cfg])
        try:
            ckpts = os.path.join(run_dir, "checkpoints")
            deadline = time.time() + 120
            while time.time() < deadline and trainer.poll() is None and not glob.glob(
                    os.path.join(ckpts, "step_*", "manifest")):
                time.sleep(0.02)
            check(trainer.poll() is None, "%s: the run ended before its first checkpoint", how)
            if how == "moved":
                os.rename(run_dir, run_dir + ".moved")
            elif how == "lock":
                os.unlink(os.path.join(run_dir, "lock"))
            elif how == "replaced":
                U.write(os.path.join(run_dir, "lock.new"), "pid 1 on elsewhere\n")
                os.rename(os.path.join(run_dir, "lock.new"), os.path.join(run_dir, "lock"))
            elif how == "link":
                # swapped in one step: a save falling between a rename and a
                # symlink would find no checkpoints/ at all (another message)
                os.symlink(other_ckpts, ckpts + ".aside")
                U.exchange(ckpts + ".aside", ckpts)
            else:
                os.mkdir(ckpts + ".aside")
                U.exchange(ckpts + ".aside", ckpts)
            out, err = trainer.communicate(timeout=120)
        finally:
            if trainer.poll() is None:
                trainer.kill()
                trainer.communicate()
        want = {"moved": "run.dir '%s' is no longer the directory this job locked: '%s/lock' is "
                         "gone" % (run_dir, run_dir),
                "replaced": "'%s/lock' is another file than the lock the job holds" % run_dir,
                "link": "'%s' is no longer the directory of checkpoints this job saved in (a "
                        "symbolic link leading elsewhere" % ckpts,
                "directory": "'%s' is no longer the directory of checkpoints this job saved in "
                             "(another directory" % ckpts}.get(how, "'%s/lock' is gone" % run_dir)
        check(trainer.returncode == 1 and want in err, "%s: exit %d (expected 1 and %r)\n%s", how,
              trainer.returncode, want, U.tail(err, 1500))
        if how == "moved":
            check(not os.path.exists(run_dir), "the moved run.dir's name was made again: %s",
                  os.listdir(run_dir) if os.path.isdir(run_dir) else "a file")
    U.same_snapshot(before, U.snapshot(other), "the other run's directory")
    # a checkpoints/ that is a link the user made before the job: followed,
    # as it always was (a volume of its own for the checkpoints)
    run_dir, elsewhere = h.path("linked-from-start"), h.path("elsewhere")
    os.makedirs(run_dir)
    os.makedirs(elsewhere)
    os.symlink(elsewhere, os.path.join(run_dir, "checkpoints"))
    cfg = U.write_config(h, "linked-from-start.yaml", keys(h, run_dir))
    h.run(["train", cfg]).expect(0, "training with checkpoints/ a link made before")
    check(os.path.isfile(os.path.join(elsewhere, "step_%010d" % LAST, "manifest")),
          "no checkpoint where the link leads: %s", os.listdir(elsewhere))
    h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.epochs=3"]).expect(
        0, "resuming through the link")


def test_run_dir_moved_during_a_save(h):
    """run.dir moved away while a save writes into it (here stopped, SIGSTOP
    by the test hook, once its step directory is made, and continued after
    the move; a 2 s pause there was outlasted on a loaded machine): the job
    stops, exit 1, saying that run.dir is no longer the directory it locked
    (before: that it could not open units-stage0.bin, which was true but
    not why)."""
    run_dir = h.path("moving")
    cfg = U.write_config(h, "moving.yaml", keys(h, run_dir, **{"train.checkpoint_every": "3"}))
    env = dict(U.sanitizer_env(), PIPETRAIN_TEST_FAULT="0:3:sigstop:checkpoint-prepared")
    p = subprocess.Popen([h.binary, "train", cfg], cwd=h.dir, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        deadline = time.time() + 120
        state = None
        while time.time() < deadline and p.poll() is None and state != "T":
            time.sleep(0.01)
            with open("/proc/%d/stat" % p.pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        check(p.poll() is None and os.path.isdir(U.ckpt(run_dir, 3)),
              "the run was not stopped in its save")
        os.rename(run_dir, run_dir + ".moved")
        os.kill(p.pid, signal.SIGCONT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    want = "run.dir '%s' is no longer the directory this job locked" % run_dir
    check(p.returncode == 1 and want in err, "exit %d (expected 1 and %r)\n%s", p.returncode, want,
          U.tail(err, 1500))
    check(not os.path.exists(run_dir), "the moved run.dir was made again: %s",
          os.listdir(run_dir) if os.path.isdir(run_dir) else "a file")


def test_few_file_descriptors_are_not_bad_input(h):
    """Under a low limit of open files (ulimit -n 4 to 12) train, eval and
    export end with 0 or with exit 1 naming the cause, never exit 2 (bad
    input: the same config and files do elsewhere) nor a signal. They used
    to say exit 2 ('cannot read lock: Too many open files', and a manifest
    that could not be opened). A train refused so leaves no run.dir (it left
    one with its empty log when the lock could not be opened)."""
    import resource
    cfg, run_dir = trained(h, "fds")
    seen = []
    for n in range(4, 13):  # 3: the loader itself cannot open the libraries
        def limit(n=n):
            resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
        for args in (["eval", cfg], ["train", cfg, "--set", "run.dir=" + h.path("fds-%d" % n)],
                     ["export", U.ckpt(run_dir, LAST), h.path("fds-%d.safetensors" % n)]):
            p = subprocess.run([h.binary] + args, cwd=h.dir, env=U.sanitizer_env(), text=True,
                               errors="replace", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, preexec_fn=limit, timeout=120)
            seen.append((n, args[0], p.returncode))
            check(p.returncode in (0, 1), "%s under ulimit -n %d: exit %d\n%s", args[0], n,
                  p.returncode, U.tail(p.stderr, 1500))
            check(p.returncode == 0 or "Too many open files" in p.stderr or
                  "file descriptors" in p.stderr, "%s under ulimit -n %d: exit 1 without the cause"
                  "\n%s", args[0], n, U.tail(p.stderr, 1500))
            check(p.returncode == 0 or args[0] != "train" or not os.path.exists(h.path("fds-%d" % n)),
                  "a refused train under ulimit -n %d left its run.dir: %s", n,
                  os.listdir(h.path("fds-%d" % n)) if os.path.isdir(h.path("fds-%d" % n)) else "")
    for cmd in ("eval", "train", "export"):
        codes = [rc for _, c, rc in seen if c == cmd]
        check(1 in codes and 0 in codes, "%s: no limit both failed and passed: %s", cmd, codes)


def test_start_beside_a_probe(h):
    """A job starting while an eval looks whether a run trains in run.dir
    (it holds the lock file shared for a moment) takes the lock: it looks
    again for a while before calling the run.dir in use. It used to be
    refused whenever its one look met the probe."""
    stop = threading.Event()
    starts = []
    for i in range(6):
        run_dir = h.path("probed-%d" % i)
        os.makedirs(run_dir)
        open(os.path.join(run_dir, "lock"), "w").close()
        starts.append((run_dir, U.write_config(h, "probed-%d.yaml" % i, U.tiny(
            "vit", run_dir, **{"train.epochs": "1", "train.checkpoint_every": "0"}))))

    def probe():  # shared for 20 ms of every 40, as eval's look does for a moment
        while not stop.is_set():
            for run_dir, _ in starts:
                fd = os.open(os.path.join(run_dir, "lock"), os.O_RDONLY)
                fcntl.flock(fd, fcntl.LOCK_SH)
                fds.append(fd)
            time.sleep(0.02)
            while fds:
                os.close(fds.pop())
            time.sleep(0.02)
    fds = []
    t = threading.Thread(target=probe)
    t.start()
    try:
        refused = []
        for run_dir, cfg in starts:
            r = h.run(["train", cfg])
            if r.rc != 0:
                refused.append("exit %d: %s" % (r.rc, U.tail(r.err, 300)))
    finally:
        stop.set()
        t.join()
    check(not refused, "%d of %d jobs starting beside a momentary probe failed:\n%s",
          len(refused), len(starts), "\n".join(refused[:2]))


def test_step_directory_under_another_name(h):
    """A step directory renamed by hand (step_10 for step_0000000010) is the
    user's: train.resume=auto and eval take the newest checkpoint under a
    save's name, pruning leaves it, and nothing is opened under a name it
    does not have (auto used to find it and then open step_0000000010)."""
    cfg, run_dir = trained(h)
    ck = os.path.join(run_dir, "checkpoints")
    os.rename(os.path.join(ck, "step_%010d" % LAST), os.path.join(ck, "step_%d" % LAST))
    before = U.snapshot(os.path.join(ck, "step_%d" % LAST))
    r = h.run(["eval", cfg]).expect(0)
    check("step_%010d" % 9 in r.out, "eval did not take step 9:\n%s", r.out)
    h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.keep_checkpoints=1"]).expect(0)
    left = sorted(os.listdir(ck))
    check(left == ["step_%010d" % LAST, "step_%d" % LAST], "after a resume keeping 1: %s", left)
    U.same_snapshot(before, U.snapshot(os.path.join(ck, "step_%d" % LAST)), "the renamed step")


def test_lock_file_removed_while_waited_for(h):
    """A job waiting for the lock file that another process holds, which is
    then removed and let go, does not run on the removed file's lock: it
    takes the lock of the file named lock (a third job would make and lock
    a new one beside it). It used to go on with its lock on the removed file
    and stop at the check that every rank sees that lock."""
    failed = []
    for i in range(5):
        run_dir = h.path("unlinked-%d" % i)
        os.makedirs(run_dir)
        lock = os.path.join(run_dir, "lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        cfg = U.write_config(h, "unlinked-%d.yaml" % i, U.tiny(
            "vit", run_dir, **{"train.epochs": "1", "train.checkpoint_every": "0"}))
        p = h.popen(["train", cfg])
        time.sleep(0.08 + 0.02 * i)  # inside the 200 ms it looks again for
        os.unlink(lock)
        os.close(fd)
        out, err = p.communicate(timeout=120)
        if p.returncode != 0:
            failed.append("exit %d: %s" % (p.returncode, U.tail(err, 300)))
    check(not failed, "%d of 5 jobs failed:\n%s", len(failed), "\n".join(failed[:2]))


FLOCK_SYSCALL = {"x86_64": 73, "aarch64": 32}.get(os.uname().machine)


def in_flock(pid):
    """Whether process pid (or a thread of it) is inside flock(2), as a
    tracer that delays the call holds it there."""
    for task in glob.glob("/proc/%d/task/*/syscall" % pid):
        try:
            if open(task).read().split()[:1] == [str(FLOCK_SYSCALL)]:
                return True
        except OSError:
            pass
    return False


def traced_child(tracer):
    """The pid of the program strace (pid tracer) runs, once it runs."""
    for _ in range(500):
        for path in glob.glob("/proc/%d/task/*/children" % tracer.pid):
            try:
                kids = open(path).read().split()
            except OSError:
                kids = []
            if kids:
                return int(kids[0])
        if tracer.poll() is not None:
            return None
        time.sleep(0.01)
    return None


def start_held(h, args, flock_delay=0, when=1):
    """pipetrain ARGS started, under strace delaying its WHEN-th flock(2)
    by FLOCK_DELAY seconds when that is not 0."""
    cmd = [h.binary] + args
    if flock_delay:
        cmd = ["strace", "-f", "-o", "/dev/null", "-e", "trace=flock", "-e",
               "inject=flock:delay_enter=%d:when=%d" % (flock_delay * 1000000, when)] + cmd
    return subprocess.Popen(cmd, cwd=h.dir, env=untraced_leaks_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            errors="replace")


def held_in_flock(p, deadline):
    """Whether p (started by start_held) waits in the flock strace delays:
    seen there (it is not always, through /proc), or still running 3 s on,
    inside the delay (it reaches the call in well under a second)."""
    pid = traced_child(p)
    give_up = min(deadline, time.time() + 3)
    while pid and p.poll() is None and not in_flock(pid) and time.time() < give_up:
        time.sleep(0.01)
    return pid is not None and p.poll() is None


def test_start_waiting_for_its_lock_keeps_its_logs(h):
    """Two starts at once in one run.dir: B, refused before its lock (no
    layout fits its pipeline.memory_gib), and A, a healthy start that has
    not taken its lock yet (strace holds A in its lock's flock). B used to
    take the lock to undo what it made, and removed the empty metrics.jsonl
    A had opened before its lock (and A's lock file): A trained on, its log
    written to a removed file. Where the run.dir was not there when B
    started, B removed it, made by A, empty: A ended with exit 1 (or 2,
    blaming run.dir). Logs are now opened under the lock, and a start undoes
    only a run.dir it made itself. In a run.dir that was there, B runs
    first (under strace, which held it in its undo's flock when it took the
    lock to undo), then A; in a fresh one B is stopped (SIGSTOP) while it
    loads its data, after it looked at run.dir and before it is refused,
    and let go once A waits in its flock."""
    if not shutil.which("strace") or FLOCK_SYSCALL is None:
        return "skipped: needs strace on x86_64 or aarch64"

    for case in ("existing", "fresh"):
        run_dir = h.path("together-" + case)
        if case == "existing":
            os.makedirs(run_dir)
        keys_a = U.tiny("vit", run_dir, **{"train.epochs": "1", "train.checkpoint_every": "0",
                                           "run.rank_metrics": "true", "run.log_samples": "true"})
        cfg_a = U.write_config(h, "together-a-%s.yaml" % case, keys_a)
        # a fresh B loads 600,000 generated images (a second or more) before it is refused
        cfg_b = U.write_config(h, "together-b-%s.yaml" % case, dict(
            keys_a, **{"pipeline.memory_gib": "0.000001"},
            **({"data.synthetic_examples": "600000"} if case == "fresh" else {})))
        deadline = time.time() + 60
        if case == "existing":
            b = start_held(h, ["train", cfg_b], 5)
            b_held = held_in_flock(b, deadline)  # (B, refused before its lock, ends now)
            a = start_held(h, ["train", cfg_a], 8)
            a_held = held_in_flock(a, deadline)
        else:
            b = start_held(h, ["train", cfg_b])
            time.sleep(0.4)
            b.send_signal(signal.SIGSTOP)
            b_held = b.poll() is None and not os.path.exists(run_dir)
            a = start_held(h, ["train", cfg_a], 8)
            a_held = held_in_flock(a, deadline)
            b.send_signal(signal.SIGCONT)
        _, b_err = b.communicate(timeout=120)
        _, a_err = a.communicate(timeout=120)
        check(a_held and (b_held or case == "existing"), "%s: the starts were not held where they "
              "race (A %s, B %s)", case, a_held, b_held)
        check(b.returncode == 2 and "pipeline.memory_gib" in b_err,
              "%s: B: exit %s, not refused for its memory:\n%s", case, b.returncode,
              U.tail(b_err, 1500))
        check(a.returncode == 0, "%s: A: exit %s\n%s", case, a.returncode, U.tail(a_err, 1500))
        names = sorted(os.listdir(run_dir))
        for name in ("lock", "metrics.jsonl", "metrics-rank0.jsonl", "samples-rank0.jsonl"):
            check(name in names and os.path.getsize(os.path.join(run_dir, name)) > 0,
                  "%s: A's %s is gone or empty after B's refusal: %s", case, name, names)
        events = [json.loads(l)["event"] for l in open(os.path.join(run_dir, "metrics.jsonl"))]
        check(events[:1] == ["start"] and "step" in events, "%s: A's log: %s", case, events)

def damaged_step(h):
    """A checkpoint of its own whose unit file has a byte flipped: a resume
    of it is refused after the lock, as it loads."""
    _, orig = trained(h)
    _, copy = copy_run(h, orig, "damaged-source")
    ck = U.ckpt(copy, LAST)
    flip(lambda size: size // 2)(U.unit_files(ck)[0])
    return ck


def test_refused_starts_beside_other_jobs_take_back_only_their_own(h):
    """A start refused after its lock (it resumes a damaged checkpoint)
    takes back only what it made itself:
     - A, refused so, holds the lock with its empty logs open (strace holds
       it at its next flock) when B, refused so too, starts; B waits in its
       lock's flock (strace) until A has taken back its files, then makes
       its own and is refused: run.dir ends empty, as it was. B used to
       note what run.dir held as it started (A's lock and logs), and left
       its own lock file and empty logs there for good.
     - B made the lock file and waits in its flock (strace) while A trains
       a whole run there with it; B is then refused: A's lock stays, with
       A's text. B used to remove it (there was none when B started), so
       A's run.dir held a log and no lock: someone else's, to auto."""
    if not shutil.which("strace") or FLOCK_SYSCALL is None:
        return "skipped: needs strace on x86_64 or aarch64"
    damaged = damaged_step(h)
    logs = {"run.rank_metrics": "true", "run.log_samples": "true"}
    run_dir = h.path("two-refused")
    os.makedirs(run_dir)
    cfg = U.write_config(h, "two-refused.yaml", keys(h, run_dir, **logs))
    refused = ["train", cfg, "--set", "train.resume=" + damaged]
    deadline = time.time() + 60
    a = start_held(h, refused, 3, when=2)  # its second: RUN_DIR/resuming's, logs open
    a_held = held_in_flock(a, deadline)
    # (held_in_flock may have seen A in its first flock, the lock's, which
    # it passes at once: its logs open after it, before the one held)
    while a.poll() is None and "metrics.jsonl" not in os.listdir(run_dir) and time.time() < deadline:
        time.sleep(0.01)
    opened = sorted(os.listdir(run_dir))
    b = start_held(h, refused, 5)
    b_held = held_in_flock(b, deadline)
    for p, who in ((a, "A"), (b, "B")):
        _, err = p.communicate(timeout=120)
        check(p.returncode == 2 and os.path.basename(U.unit_files(damaged)[0]) in err,
              "%s: exit %s, not refused for the damaged checkpoint:\n%s", who, p.returncode,
              U.tail(err, 1500))
    check(a_held and b_held and "metrics.jsonl" in opened and "lock" in opened,
          "the starts were not held where they overlap (A %s, B %s; run.dir held %s)", a_held,
          b_held, opened)
    check(os.listdir(run_dir) == [], "two refused starts left %s", sorted(os.listdir(run_dir)))

    run_dir = h.path("lock-made-for-another")
    os.makedirs(run_dir)
    cfg = U.write_config(h, "lock-made-for-another.yaml", keys(h, run_dir, **logs))
    # (B's wait outlasts A's whole run, under load and ASan too)
    b = start_held(h, ["train", cfg, "--set", "train.resume=" + damaged], 20)
    b_held = held_in_flock(b, time.time() + 60)
    made = os.path.isfile(os.path.join(run_dir, "lock"))
    h.run(["train", cfg], timeout=120).expect(0, "A, while B waits for the lock file it made")
    lock = U.read_bytes(os.path.join(run_dir, "lock"))
    a_done = b.poll() is None
    _, err = b.communicate(timeout=120)
    check(b_held and made and a_done and b.returncode == 2 and
          os.path.basename(U.unit_files(damaged)[0]) in err,
          "B: held %s, lock file made %s, still waiting after A %s, exit %s:\n%s",
          b_held, made, a_done, b.returncode, U.tail(err, 1500))
    check(os.path.isfile(os.path.join(run_dir, "lock")) and
          U.read_bytes(os.path.join(run_dir, "lock")) == lock,
          "B's refusal took or changed A's lock file: %s", sorted(os.listdir(run_dir)))
    r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.epochs=3"], timeout=120)
    r.expect(0, "A's run resumed after B's refusal")

def nested_run_dir(h):
    """(t, t/a/run, a config training there, the environment of a start
    refused after its lock by a test fault), with only t made."""
    top = h.path("t")
    os.makedirs(top)
    run_dir = os.path.abspath(os.path.join(top, "a", "run"))
    cfg = U.write_config(h, "nested.yaml", keys(h, run_dir, **{"train.checkpoint_every": "0"}))
    return top, run_dir, cfg, dict(untraced_leaks_env(), PIPETRAIN_TEST_FAULT="0:0:fail:settling")


def test_start_making_a_run_dir_a_refused_start_removes(h):
    """A, refused after its lock (a test fault), made directories a/ and
    a/run of its run.dir t/a/run; B, a healthy start into the same run.dir,
    waits in its mkdir of a/run (strace) while A takes back both (A waits
    4 s in its lock's flock first, B 7 s in that mkdir). B's mkdir
    then fails (a/ is gone): B makes the path again and trains. It ended
    with exit 2, blaming run.dir."""
    if not shutil.which("strace"):
        return "skipped: needs strace"
    top, run_dir, cfg, env = nested_run_dir(h)
    # A: held 4 s in its lock's flock, once it made a/, a/run and the lock file
    a = subprocess.Popen(["strace", "-f", "-o", "/dev/null", "-e", "trace=flock", "-e",
                          "inject=flock:delay_enter=4000000:when=1", h.binary, "train", cfg],
                         cwd=h.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True, errors="replace")
    deadline = time.time() + 60
    while (not os.path.exists(os.path.join(run_dir, "lock")) and a.poll() is None and
           time.time() < deadline):
        time.sleep(0.01)
    held = a.poll() is None and os.path.exists(os.path.join(run_dir, "lock"))
    # B: its mkdir of a/run (the last of one mkdir per level of the path)
    # held 7 s, past A's refusal
    levels = len([c for c in run_dir.split("/") if c])
    b = subprocess.Popen(["strace", "-f", "-o", "/dev/null", "-e", "trace=mkdir,mkdirat", "-e",
                          "inject=mkdir,mkdirat:delay_enter=7000000:when=%d" % levels, h.binary,
                          "train", cfg], cwd=h.dir, env=untraced_leaks_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                         errors="replace")
    _, a_err = a.communicate(timeout=120)
    gone = not os.path.exists(os.path.join(top, "a"))
    b_waits = b.poll() is None
    _, b_err = b.communicate(timeout=120)
    check(held and a.returncode != 0 and "injected fault" in a_err and gone and b_waits,
          "A: held in flock %s, exit %s, took run.dir back %s, B still waiting %s:\n%s", held,
          a.returncode, gone, b_waits, U.tail(a_err, 1500))
    check(b.returncode == 0, "B: exit %s\n%s", b.returncode, U.tail(b_err, 1500))
    check(os.path.isfile(os.path.join(run_dir, "metrics.jsonl")), "B's run.dir: %s",
          os.listdir(run_dir) if os.path.isdir(run_dir) else "none")

def test_refused_start_takes_back_the_highest_directory_it_made(h):
    """A makes t/a (its session), but t/a/run is there when its mkdir of it
    runs (C, held in its lock's flock, made it) and gone once that mkdir
    returns (C, refused, took it back): A makes it again, and, refused
    itself (a test fault), takes back t/a/run and t/a, leaving t as it was.
    strace holds A's mkdir of t/a/run before (3 s) and after (8 s) it runs,
    and C in its flock (4 s): C has made t/a/run by the time A's mkdir runs,
    and has taken it back by the time that mkdir returns."""
    if not shutil.which("strace"):
        return "skipped: needs strace"
    top, run_dir, cfg, env = nested_run_dir(h)
    levels = len([c for c in run_dir.split("/") if c])
    a = subprocess.Popen(["strace", "-f", "-o", "/dev/null", "-e", "trace=mkdir", "-e",
                          "inject=mkdir:delay_enter=3000000:delay_exit=8000000:when=%d" % levels,
                          h.binary, "train", cfg], cwd=h.dir, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                         errors="replace")
    deadline = time.time() + 60
    while not os.path.isdir(os.path.join(top, "a")) and a.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    c = subprocess.Popen(["strace", "-f", "-o", "/dev/null", "-e", "trace=flock", "-e",
                          "inject=flock:delay_enter=4000000:when=1", h.binary, "train", cfg],
                         cwd=h.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True, errors="replace")
    _, c_err = c.communicate(timeout=120)
    _, a_err = a.communicate(timeout=120)
    for p, err, who in ((a, a_err, "A"), (c, c_err, "C")):
        check(p.returncode == 1 and "injected fault" in err, "%s: exit %s, not the fault's:\n%s",
              who, p.returncode, U.tail(err, 1500))
    check(os.listdir(top) == [], "left in t: %s", [os.path.relpath(os.path.join(d, n), top)
                                                   for d, ds, fs in os.walk(top) for n in ds + fs])

def stopped_itself(p, deadline):
    """Whether process p stopped (SIGSTOP: the test fault "sigstop")."""
    while p.poll() is None and time.time() < deadline:
        try:
            if open("/proc/%d/stat" % p.pid).read().rsplit(")", 1)[1].split()[0] == "T":
                return True
        except OSError:
            pass
        time.sleep(0.01)
    return False


def test_refused_start_whose_run_dir_was_replaced(h):
    """A, to be refused after its lock (it resumes a damaged checkpoint),
    stops (a test fault) with its logs open; its run.dir is removed, and B
    starts a run at that path and stops the same way, its own logs open and
    empty. A, let go and refused, took back the empty logs at its run.dir's
    path that it had not seen there: B's, which B then wrote into removed
    files. A refusal now takes back what is at run.dir's path only while it
    is the directory it locked."""
    damaged = damaged_step(h)
    run_dir = h.path("replaced")
    cfg = U.write_config(h, "replaced.yaml", keys(h, run_dir, **{"run.rank_metrics": "true"}))
    env = dict(U.sanitizer_env(), PIPETRAIN_TEST_FAULT="0:0:sigstop:settling")
    logs = [os.path.join(run_dir, n) for n in ("metrics.jsonl", "metrics-rank0.jsonl")]

    def start(args):
        return subprocess.Popen([h.binary, "train", cfg] + args, cwd=h.dir, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, errors="replace")
    a = start(["--set", "train.resume=" + damaged])
    b = None
    try:
        deadline = time.time() + 120
        check(stopped_itself(a, deadline) and all(os.path.isfile(l) for l in logs),
              "A did not stop with its logs open (exit %s)", a.poll())
        shutil.rmtree(run_dir)
        b = start([])
        check(stopped_itself(b, deadline) and all(os.path.isfile(l) for l in logs),
              "B did not stop with its logs open (exit %s)", b.poll())
        a.send_signal(signal.SIGCONT)
        _, a_err = a.communicate(timeout=120)
        check(a.returncode == 2 and os.path.basename(U.unit_files(damaged)[0]) in a_err,
              "A: exit %s, not refused for the damaged checkpoint:\n%s", a.returncode,
              U.tail(a_err, 1500))
        check(all(os.path.isfile(l) for l in logs), "A's refusal took B's logs: %s",
              sorted(os.listdir(run_dir)))
        b.send_signal(signal.SIGCONT)
        _, b_err = b.communicate(timeout=120)
        check(b.returncode == 0, "B: exit %s\n%s", b.returncode, U.tail(b_err, 1500))
        check(all(os.path.getsize(l) > 0 for l in logs), "B's logs are empty")
    finally:
        for p in (a, b):
            if p and p.poll() is None:
                p.kill()
                p.communicate()

def inspected(h, path, *extra):
    r = h.run(["inspect", path] + list(extra)).expect(0, "inspect " + path)
    return r.out if extra else json.loads(r.out)


def test_inspect(h):
    """`inspect` tells what a checkpoint holds without changing a byte:
    the step, position, frozen blocks and parameter count that a resume from
    it starts with (its start line), the learning rate of the update after it
    (the uninterrupted run's next step line), and for a run directory its
    newest checkpoint; `--config` prints the configuration the run saved, which
    resumes it; a bert's labels and data counts. Bad arguments exit 2."""
    frz = {"freeze.policy": "schedule", "freeze.unit": "step", "freeze.every": "3",
           "freeze.start": "3", "freeze.alpha": "0.5", "train.warmup_steps": "4"}
    _, orig = trained(h, "frz", **frz)
    before = U.snapshot(orig)
    steps = {rec["step"]: rec for rec in U.metrics(orig)[0]}
    params = U.starts(orig)[0]["parameters"]
    newest = inspected(h, orig)
    check(newest["checkpoint"] == U.ckpt(orig, LAST) and newest["step"] == LAST,
          "a run directory's newest: %s", newest)
    depths = set()
    for step in (3, 6, 9):
        ck = U.ckpt(orig, step)
        o = inspected(h, ck)
        depths.add(o["frozen_blocks"])
        check(o["checkpoint"] == ck and o["step"] == step and o["batch"] == 8 and o["seed"] == 3,
              "step %d: %s", step, o)
        check(o["model"]["kind"] == "vit" and o["model"]["parameters"] == params and
              o["model"]["layers"] == 2 and o["model"]["tokens"] == 5, "step %d: %s", step, o)
        check(o["lr"]["next"] == steps[step + 1]["lr"], "step %d: next lr %r, the run's %r", step,
              o["lr"]["next"], steps[step + 1]["lr"])
        check(o["lr"]["schedule"] == "cosine" and o["lr"]["warmup_steps"] == 4 and
              o["lr"]["total_steps"] == LAST, "step %d: %s", step, o["lr"])
        check(o["labels"] is None and o["files"] == len(U.unit_files(ck)), "step %d: %s", step, o)
        # what a resume from it starts at
        cfg, run_dir = copy_run(h, orig, "resume%d" % step, **frz,
                                **{"train.max_steps": str(step + 1)})
        shutil.rmtree(os.path.join(run_dir, "checkpoints"))
        shutil.copytree(ck, os.path.join(run_dir, "checkpoints", os.path.basename(ck)))
        os.remove(os.path.join(run_dir, "metrics.jsonl"))
        h.run(["train", cfg, "--set", "train.resume=" + U.ckpt(run_dir, step)]).expect(
            0, "resume %d" % step)
        start = U.starts(run_dir)[0]
        for key in ("step", "epoch", "epoch_step", "frozen_blocks"):
            check(start[key] == o[key], "step %d: %s: inspect %r, resume %r", step, key, o[key],
                  start[key])
    check(depths == {1, 2}, "frozen blocks at steps 3, 6, 9: %s", depths)
    # --config: the saved configuration, which resumes the run
    text = inspected(h, U.ckpt(orig, 9), "--config")
    copy = h.path("copy")
    shutil.copytree(orig, copy)
    cfg = U.write(h.path("saved.yaml"), text)
    r = h.run(["train", cfg, "--set", "run.dir=" + copy, "--set", "train.resume=" +
               U.ckpt(copy, 9)]).expect(0, "resuming with the saved config")
    check("resumed at step 9" in r.err, "%s", r.describe())
    # ... and that starts a run like it: the same steps, bit for bit, and no
    # note of a key it does not read (it holds only those a run reads)
    fresh = h.path("fresh")
    r = h.run(["train", cfg, "--set", "run.dir=" + fresh]).expect(0, "a run from the saved config")
    check("is not used" not in r.err, "notes for keys the saved config holds:\n%s", r.err)
    again = {rec["step"]: rec for rec in U.metrics(fresh)[0]}
    check([again[k]["loss"] for k in sorted(again)] == [steps[k]["loss"] for k in sorted(steps)],
          "a run from the saved config trained otherwise")
    # a run that resumed another's checkpoint: its saved config does not
    # resume that checkpoint again
    text = inspected(h, h.path("resume6"), "--config")
    check('  resume: ""' in text.splitlines() and "step_%010d" % 6 not in text,
          "the saved config of a resumed run names the checkpoint it resumed:\n%s", text)
    # a checkpoint of a version that read a freeze.max_depth above
    # model.layers as "all" (now refused naming the key): its saved config
    # says the same as that version read, and resumes it
    old = h.path("old-depth")
    shutil.copytree(orig, old)
    for name in os.listdir(os.path.join(old, "checkpoints")):
        rewrite_manifest(os.path.join(old, "checkpoints", name), lambda m: m.update(
            config=m["config"].replace("  max_depth: 0\n", "  max_depth: 7\n", 1)))
    check("max_depth: 7" in read_manifest(U.ckpt(old, 9))["config"], "no max_depth forged")
    text = inspected(h, U.ckpt(old, 9), "--config")
    check("  max_depth: 2" in text.splitlines(), "an old checkpoint's max_depth:\n%s", text)
    cfg = U.write(h.path("old-depth.yaml"), text)
    r = h.run(["train", cfg, "--set", "run.dir=" + old, "--set", "train.resume=" +
               U.ckpt(old, 9)]).expect(0, "resuming an old checkpoint with its saved config")
    check("resumed at step 9" in r.err and "settings than it was saved with" not in r.err,
          "%s", r.describe())
    U.same_snapshot(before, U.snapshot(orig), "the inspected run")
    # bert: labels and data; a run without freezing, trained again from its
    # saved config, gets no note either (no key only a resume reads)
    bert_run = trained_bert(h)
    text = inspected(h, bert_run, "--config")
    cfg = U.write(h.path("bert-saved.yaml"), text)
    r = h.run(["train", cfg, "--set", "run.dir=" + h.path("bert-again")]).expect(0)
    check("is not used" not in r.err, "notes for keys the saved config holds:\n%s", r.err)
    check([x["loss"] for x in U.metrics(h.path("bert-again"))[0]] ==
          [x["loss"] for x in U.metrics(bert_run)[0]], "the bert trained again otherwise")
    b = inspected(h, bert_run)
    check(b["labels"] == ["a", "b", "c"] and b["model"]["kind"] == "bert", "bert: %s", b)
    check(b["data"]["train"]["examples"] == 40 and b["data"]["test"]["examples"] == 16 and
          re.fullmatch("[0-9a-f]{64}", b["data"]["vocab"]["sha256"]), "bert data: %s", b["data"])
    for args, needle in ((["inspect"], "inspect takes"), (["inspect", orig, orig], "got also"),
                         (["inspect", ""], "is empty"), (["export", "", h.path("e")], "is empty"),
                         (["inspect", orig, "--json"], "unknown option"),
                         (["inspect", orig, "--config", "--config"], "twice"),
                         (["inspect", h.path("none")], "none': no such directory"),
                         (["inspect", h.dir], "manifest")):
        r = h.run(args).expect(2, " ".join(args))
        check(needle in r.err and not r.out, "%s: %s", args, r.describe())
    os.makedirs(h.path("empty/checkpoints"))
    h.run(["inspect", h.path("empty")]).expect(2).one_error("without a complete checkpoint")
    # a run that has only just begun (its lock, its log, no checkpoints/
    # yet) is a run directory, not a checkpoint without a manifest
    for marks in (("lock",), ("metrics.jsonl",), ("lock", "metrics.jsonl")):
        young = h.path("young-" + "-".join(marks))
        os.makedirs(young)
        for m in marks:
            U.write(os.path.join(young, m), "")
        r = h.run(["inspect", young]).expect(2, "a run without checkpoints/ yet")
        r.one_error("'%s' is a run directory without a checkpoint yet" % young,
                    "no checkpoints/ in it")
        check(sorted(os.listdir(young)) == sorted(marks), "inspect changed %s", young)
    # ... and one whose checkpoints is a file, said as such
    U.write(h.path("young-lock/checkpoints"), "a file")
    r = h.run(["inspect", h.path("young-lock")]).expect(2, "checkpoints a file")
    r.one_error("its checkpoints is not a directory")
    # a path that is not UTF-8 (JSON holds only Unicode): its bytes as U+FFFD
    odd = os.path.join(h.dir, os.fsdecode(b"r\xffn"))
    shutil.copytree(orig, odd)
    o = inspected(h, odd)
    check(o["checkpoint"] == os.path.join(h.dir, "r\ufffdn", "checkpoints", "step_%010d" % LAST),
          "a path that is not UTF-8: %r", o.get("checkpoint"))


def test_stop_during_an_evaluation_of_rounds(h):
    """A stop signal that arrives during an evaluation of several rounds
    (24 test examples, 8 a round) stops the run with exit 130 and the resume
    ends with the bits of the run that was never stopped. The failure hook
    (PIPETRAIN_TEST_FAULT ...:stop:eval) raised the signal in every round, a
    second signal, which stops at once (exit 138); it now raises it once.
    The run stopped after the next step, with a second save; it now stops
    after the step evaluated: a signal during an evaluation, a freeze
    decision or a save (the slow parts, where a launcher's grace period runs
    out) is agreed on after them, and the save just made, or one made then,
    is the stop's checkpoint. The same for a signal during step 5's save
    (checkpoint_every 5) and step 3's evaluation (eval_every_steps 3, no
    save due: the stop saves step 3)."""
    keys = {"train.eval_examples": "24", "train.eval_every": "1", "train.checkpoint_every": "0"}
    cfg, straight = trained(h, "straight", steps=(5, LAST), **keys)
    for name, fault, extra, want in [
            ("eval", "0:5:stop:eval", {}, (5,)),
            ("save", "0:5:stop:checkpoint-writing", {"train.checkpoint_every": "5"}, (5,)),
            ("eval mid-epoch", "0:3:stop:eval", {"train.eval_every_steps": "3"}, (3,))]:
        run_dir = h.path("stopped-" + name.replace(" ", "-"))
        cfg = U.write_config(h, "stopped.yaml", U.tiny("vit", run_dir, **{
            "train.epochs": "2", "train.keep_checkpoints": "10", **dict(keys, **extra)}))
        r = h.run(["train", cfg], env={"PIPETRAIN_TEST_FAULT": fault}).expect(
            130, "%s: a stop signal during step %d's %s" % (name, want[0], name))
        check(U.checkpoints(run_dir) == ["step_%010d" % s for s in want] and
              "stopped by signal 10 after step %d" % want[-1] in r.err,
              "%s: the stopped run's checkpoints: %s\n%s", name, U.checkpoints(run_dir),
              r.describe())
        h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "%s: the resume" % name)
        check([U.unit_records(f) for f in U.unit_files(U.ckpt(run_dir, LAST))] ==
              [U.unit_records(f) for f in U.unit_files(U.ckpt(straight, LAST))],
              "%s: the resumed run ends with other bits than the run never stopped", name)


def test_manifest_of_many_units_checked_in_linear_time(h):
    """A manifest listing 60,000 units, each in a file of its own that the
    files list binds: its units and files were matched pairwise (60,000^2
    comparisons, about two minutes before the refusal); now in one pass. The
    units are no units of the model: refused, exit 2. Timed (the least of 3
    runs) against the same refusal at a quarter of the units in the same
    run, so that a slow machine
    or a sanitizer's allocator (whose cost is per unit, linear) moves both:
    linear work takes at most 4x as long at 4x the units, pairwise 16x
    (below half a second, the start-up dominates: timed from 0.5 s)."""
    _, orig = trained(h)
    ck = U.ckpt(orig, LAST)
    took = {}
    done = 0
    for n in (15000, 60000):
        def e(m, first=done, last=n):
            for i in range(first, last):
                m["units"]["blocks.%d.mlp" % (i + 100)] = "u%d.bin" % i
                m["files"]["u%d.bin" % i] = {"bytes": 1, "sha256": "0" * 64}
        rewrite_manifest(ck, e)
        done = n
        # the least of 3 (a busy machine only adds time: one run of 60,000
        # took 4.4 s beside other tests, where it takes 0.3 s alone)
        for _ in range(3):
            t0 = time.time()
            r = h.run(["inspect", ck]).expect(2, "a manifest of %d units" % n)
            took[n] = min(took.get(n, float("inf")), time.time() - t0)
            check("that the model it holds has not" in r.err, "not refused for its units:\n%s",
                  r.describe())
    ratio = took[60000] / max(took[15000], 0.5)
    check(ratio < 8, "4x the units took %.1fx as long (%.1f s against %.1f s): not linear",
          ratio, took[60000], took[15000])
    check(took[60000] < 300, "refused after %.1f s", took[60000])
    return "%.1f s at 60,000 units, %.1fx the time at 15,000" % (took[60000], ratio)


def tests():
    out = []
    for name, (target, how) in DAMAGE.items():
        t = damage_case(target, how,
                        ALL_MODES if name in FULL_DAMAGE else ("auto", "eval", "export"))
        t.__name__ = "test_" + name
        out.append(t)
    for name, (craft, needles, modes) in CRAFTED.items():
        t = crafted_case(craft, needles, modes or ("auto", "path", "eval", "export"))
        t.__name__ = "test_crafted_" + name
        out.append(t)
    for what in ("units", "units_rebound", "manifest", "whole_directory", "other_run"):
        out.append(swap_case(what))
    for name, (changes, needles, modes) in MISMATCH.items():
        t = mismatch_case(changes, needles, modes)
        t.__name__ = "test_" + name
        out.append(t)
    return out + [
        test_units_file_deleted, test_manifest_deleted_explicit_path, test_not_a_checkpoint_path,
        test_manifest_deleted_auto_takes_previous, test_only_checkpoint_without_manifest_starts_fresh,
        test_resume_gpt_with_vit_checkpoint, test_resume_bert_other_ln_eps,
        test_manifest_of_many_units_checked_in_linear_time,
        test_resume_bert_other_dropout, test_bert_other_classes_or_kind_names_the_key,
        test_bert_other_labels,
        test_stored_labels_under_the_rules_of_their_run, test_tokenizer_recorded,
        test_normalization_set_apart, test_export_from_another_directory,
        test_export_padded_bert,
        test_eval_of_a_checkpoint_reads_no_init_from,
        test_failed_bert_export_takes_back_its_directories,
        test_stopped_bert_export_takes_back_its_directories, test_export_spares_data_files,
        test_signal_while_bert_export_renames, test_unmakeable_directories_leave_nothing,
        test_schedule_note_on_resume,
        test_optimizer_note_on_resume,
        test_bert_export_paths_that_are_not_what_they_say,
        test_bert_export_out_of_descriptors,
        test_data_identity,
        test_resume_mid_epoch_after_data_shrank, test_resume_with_other_data_is_noted,
        test_resume_with_other_initial_weights_is_noted, test_minus_zero_is_zero,
        test_images_edited_in_place_are_noted, test_eval_of_other_sized_test_images_names_them,
        test_eval_on_other_test_examples_is_noted,
        test_eval_on_other_generated_examples_is_noted,
        test_resume_with_other_test_data_is_noted,
        test_eval_without_checkpoints, test_keep_checkpoints_prunes,
        test_keep_checkpoints_default_per_epoch,
        test_prune_removes_incomplete_and_keeps_foreign_entries,
        test_fresh_run_refused_where_checkpoints_exist,
        test_fresh_run_allowed_over_incomplete_checkpoint, test_resume_explicit_older_checkpoint,
        test_go_back_killed_between_its_moves,
        test_resume_of_abandoned_history_leaves_the_one_that_replaced_it,
        test_go_back_whose_resuming_file_stays,
        test_unreadable_newest_step_directory,
        test_go_back_killed_then_run_dir_moved,
        test_resume_of_other_runs_step_whose_resuming_file_stays,
        test_fresh_start_whose_resuming_file_stays,
        test_resume_of_other_runs_step_killed_between_its_moves,
        test_resume_other_runs_step_into_run_holding_that_step,
        test_resumed_other_runs_step_saved_before_training,
        test_failed_save_of_resumed_other_runs_step,
        test_unreadable_resuming_over_own_steps, test_run_dir_written_with_slashes_at_its_end,
        test_resume_of_other_runs_step_killed_while_loading,
        test_resume_of_other_runs_step_over_a_damaged_own_step,
        test_damaged_newest_step_directory, test_linked_manifest,
        test_other_model_names_the_config_line,
        test_outputs_of_a_stopped_export_or_eval,
        test_resume_past_the_end_into_a_new_run_dir,
        test_checkpoint_files_are_recfiles, test_leftovers_of_a_crashed_save_are_removed,
        test_two_jobs_in_one_run_dir, test_start_waiting_for_its_lock_keeps_its_logs,
        test_refused_starts_beside_other_jobs_take_back_only_their_own,
        test_start_making_a_run_dir_a_refused_start_removes,
        test_refused_start_takes_back_the_highest_directory_it_made,
        test_refused_start_whose_run_dir_was_replaced,
        test_run_dir_inside_checkpoints,
        test_refused_start_in_a_run_dir_of_copied_checkpoints,
        test_prune_spares_a_held_checkpoint, test_eval_while_training, test_go_back_while_a_later_step_is_read, test_run_dir_changed_while_training,
        test_run_dir_moved_during_a_save,
        test_few_file_descriptors_are_not_bad_input,
        test_long_real_paths,
        test_real_paths_past_path_max,
        test_diverged_run_saves_no_nan, test_start_beside_a_probe,
        test_step_directory_under_another_name, test_lock_file_removed_while_waited_for,
        test_inspect, test_stop_during_an_evaluation_of_rounds,
    ]


if __name__ == "__main__":
    sys.exit(U.main(tests(), sys.argv, workers=4))
