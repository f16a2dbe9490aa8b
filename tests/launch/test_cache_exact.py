#!/usr/bin/env python3
"""With the frozen-prefix cache on, training is bit-identical to the cache off,
and resuming with the cache on (from an empty cache) is bit-identical to not
stopping (issue 10, item 1).

The cache serves an example's prefix activation computed in one micro-batch
in later epochs where the example sits with other examples, and computes the
missing ones (from the input, or from a shallower cached depth after the
frozen depth grew) in batches of only those: if any forward op gave a row
bits that depend on its batch-mates, cache on would drift from cache off.

  issue10_vit_d32      the hostile tester's reproduction: ViT d=32, 2 blocks,
                       4 heads, patch 7, 1024 synthetic images, batch 32, 150
                       steps, freezing by step (start 6, every 6, alpha 1/2);
                       cache on vs off: the same loss, learning rate and
                       gradient norm at every step, the same unit files
                       (parameters and AdamW moments) and exported weights;
                       then resumed with the cache on from the checkpoints of
                       steps 15, 60 (a freeze decision step) and 135, each in
                       a fresh run directory with an empty cache: the same
                       steps after the resume point and the same final files;
                       and cache on vs off again at run.threads 2
  sweep_*              the same comparison of cache on and off for other
                       widths (odd ones, below and above the 16- and 32-wide
                       tiles), head counts, batch sizes, ViT, GPT and BERT
                       (texts padded by different amounts and cut), at
                       run.threads 1 and 2, on shorter runs of smaller data
                       that still freeze in two steps and serve mixed batches;
                       these also evaluate every 2 epochs: the same test loss
                       and accuracy, the later ones read from the cache
  start0_*             freeze.start 0 (ViT, GPT, BERT): the first decision
                       comes before the first step; cache on vs off as above
  *_dropout*           BERT with dropout 0.1 (hidden states and attention
                       probabilities): frozen units run in inference form, so
                       the cached prefix is what the frozen units compute, and
                       the trainable units' masks follow the examples' ids and
                       the step, not their micro-batch: cache on vs off as
                       above (sweep and freeze.start 0), and resumed with the
                       cache on from an empty cache at steps 12 (a freeze
                       decision) and 27: the same steps and final files

Every cache-on run must also show that the cache was used as the comparison
needs it: it served hits, and computed examples in an epoch after the first
(for examples not cached yet, or advancing entries after the frozen depth
grew), so micro-batches were split between cached and computed examples or
between cached depths; every cache-off run must show no hits. Otherwise equal
results would prove nothing.

usage: test_cache_exact.py PIPETRAIN_BINARY [--full]
  --full  a longer sweep for manual runs (every width of tests/nn/test_rows.c
          up to 128, three batch sizes, threads 1 and 2, 150 steps each;
          several minutes)
"""
import json
import os
import shutil
import signal
import subprocess
import sys

sys.dont_write_bytecode = True  # nothing written into the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_util as U  # noqa: E402
from cli_util import check  # noqa: E402

REPRO = {
    "run.seed": "1", "run.threads": "1",
    "model.kind": "vit", "model.dim": "32", "model.layers": "2", "model.heads": "4",
    "model.patch": "7",
    "data.kind": "synthetic_images", "data.synthetic_examples": "1024",
    "train.batch": "32", "train.max_steps": "150", "train.epochs": "10",
    "train.eval_every": "0", "train.eval_examples": "64", "train.log_every": "1000",
    "freeze.policy": "schedule", "freeze.unit": "step", "freeze.start": "6", "freeze.every": "6",
    "freeze.alpha": "0.5",
}
EVERY = 15              # checkpoint interval of the reproduction
RESUME_AT = (15, 60, 135)


def keys(run_dir, base, cache, **extra):
    k = dict(base)
    k.update({"run.dir": run_dir, "cache.enabled": "true" if cache else "false"})
    k.update(extra)
    return k


def train(h, name, k, *sets):
    cfg = U.write_config(h, name + ".yaml", k)
    args = ["train", cfg]
    for s in sets:
        args += ["--set", s]
    h.run(args).expect(0, "training " + name)
    return k["run.dir"]


def steps_of(run_dir):
    steps, _ = U.metrics(run_dir)
    return [(r["step"], r["loss"], r["lr"], r["grad_norm"]) for r in steps]


def check_cache_use(run_dir, cache):
    """A cache-on run served hits, and computed examples in an epoch after
    the first (after the frozen depth grew, or for examples not cached yet),
    so some micro-batches were split between cached and computed examples or
    between cached depths; a cache-off run served no hits."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        epochs = [r for r in map(json.loads, f) if r.get("event") == "epoch"]
    check(len(epochs) >= 3, "%s: fewer than 3 epoch records in metrics.jsonl", run_dir)
    hits = [(e["cache_hits"], e["prefix_computed"]) for e in epochs]
    if cache:
        check(sum(a for a, _ in hits) > 0 and any(c > 0 for _, c in hits[1:]),
              "%s: the cache served no hits or computed nothing after the first epoch "
              "(hits, computed per epoch: %s), so the comparison tests nothing", run_dir, hits)
    else:
        check(all(a == 0 for a, _ in hits), "%s: the cache is off but served hits: %s",
              run_dir, hits)


def export(h, ckpt_dir, name):
    out = h.path(name + ".safetensors")
    h.run(["export", ckpt_dir, out]).expect(0, "export " + ckpt_dir)
    if os.path.isdir(out):  # bert: a Hugging Face directory
        return U.read_bytes(os.path.join(out, "model.safetensors"))
    return U.read_bytes(out)


def same_final(h, a_dir, b_dir, step, what):
    """The checkpoints of step `step` hold the same bytes (parameters and
    moments of every unit), and export to the same weights."""
    a, b = U.ckpt(a_dir, step), U.ckpt(b_dir, step)
    check(os.path.isfile(os.path.join(b, "manifest")), "%s: no checkpoint of step %d in %s: %s",
          what, step, b_dir, U.checkpoints(b_dir))
    ua, ub = U.unit_files(a), U.unit_files(b)
    check([os.path.basename(p) for p in ua] == [os.path.basename(p) for p in ub],
          "%s: unit files differ: %s vs %s", what, ua, ub)
    for pa, pb in zip(ua, ub):
        check(U.unit_records(pa) == U.unit_records(pb), "%s: %s differs from %s", what, pb, pa)
    check(export(h, a, "a-%d" % step) == export(h, b, "b-%d" % step),
          "%s: exported weights differ", what)


def same_steps(a, b, what, first=1):
    """Step records from step `first` on agree exactly; names the first
    step that does not."""
    a = [r for r in a if r[0] >= first]
    b = [r for r in b if r[0] >= first]
    check([r[0] for r in a] == [r[0] for r in b], "%s: steps %s vs %s", what,
          [r[0] for r in a][:5], [r[0] for r in b][:5])
    bad = next((x for x, y in zip(a, b) if x != y), None)
    check(bad is None, "%s: first differing step %s: (step, loss, lr, grad_norm) %s vs %s", what,
          bad and bad[0], bad, bad and dict((r[0], r) for r in b)[bad[0]])


def evals_of(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r.get("event") == "eval"]


def same_evals(off, on, what):
    """Evaluations agree exactly (test loss and accuracy); with the cache on,
    later evaluations read test examples' frozen prefix from the cache."""
    a, b = evals_of(off), evals_of(on)
    key = lambda e: (e["step"], e["test_loss"], e["test_accuracy"], e["examples"])
    check([key(e) for e in a] == [key(e) for e in b], "%s: evaluations differ: %s vs %s", what,
          [key(e) for e in a], [key(e) for e in b])
    check(all(e["cache_hits"] == 0 for e in a), "%s: cache off, eval hits %s", what,
          [e["cache_hits"] for e in a])
    if len(b) >= 3:  # (the reproduction evaluates once, at its end: nothing to hit)
        check(any(e["cache_hits"] > 0 for e in b), "%s: the cache served no evaluation (hits %s), "
              "so the comparison tests nothing", what, [e["cache_hits"] for e in b])


def on_equals_off(h, base, name, final):
    off = train(h, name + "-off", keys(h.path(name + "-off"), base, False))
    on = train(h, name + "-on", keys(h.path(name + "-on"), base, True))
    check_cache_use(off, False)
    check_cache_use(on, True)
    same_steps(steps_of(off), steps_of(on), name + ": cache on vs off")
    same_evals(off, on, name + ": cache on vs off")
    same_final(h, off, on, final, name + ": cache on vs off")
    return on


def test_issue10_vit_d32(h):
    base = dict(REPRO, **{"train.checkpoint_every": str(EVERY), "train.keep_checkpoints": "100"})
    straight = on_equals_off(h, base, "repro", 150)
    check(export(h, U.ckpt(straight, RESUME_AT[0]), "early") !=
          export(h, U.ckpt(straight, 150), "late"), "the weights did not move: nothing trained")
    want = steps_of(straight)
    for s in RESUME_AT:
        run_dir = h.path("resumed-%d" % s)
        train(h, "resumed-%d" % s, keys(run_dir, base, True),
              "train.resume=" + U.ckpt(straight, s))
        same_steps(want, steps_of(run_dir), "resumed at step %d, cache on" % s, first=s + 1)
        same_final(h, straight, run_dir, 150, "resumed at step %d, cache on" % s)


def test_issue10_vit_d32_threads2(h):
    on_equals_off(h, dict(REPRO, **{"run.threads": "2"}), "repro-t2", 150)


def test_small_dev_shm(h):
    """A /dev/shm smaller than the cache (containers often give 64 MiB): the
    segment's pages are reserved as entries are first stored, so a full
    tmpfs closes the memory tier (the rest is computed) instead of killing
    the run with SIGBUS. Cache on, in a mount namespace whose /dev/shm is a
    256 KiB tmpfs (about a tenth of the entries fit), is bit-identical to
    cache off, and served hits. Needs root (unshare, mount)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "skipped: needs root and unshare"
    base = dict(REPRO, **{"train.max_steps": "100"})
    off = train(h, "shm-off", keys(h.path("shm-off"), base, False))
    on_dir = h.path("shm-on")
    cfg = U.write_config(h, "shm-on.yaml", keys(on_dir, base, True))
    script = 'mount -t tmpfs -o size=256k tmpfs /dev/shm && exec "$0" train "$1"'
    p = subprocess.run(["unshare", "-m", "sh", "-c", script, h.binary, cfg], cwd=h.dir,
                       capture_output=True, text=True, timeout=240, env=U.sanitizer_env())
    check(p.returncode == 0, "cache on with a 256 KiB /dev/shm: exit %d\n%s", p.returncode,
          U.tail(p.stdout + p.stderr))
    check_cache_use(on_dir, True)
    same_steps(steps_of(off), steps_of(on_dir), "a 256 KiB /dev/shm: cache on vs off")


CUT_SHORT = r"""
mount -t tmpfs -o size=64m tmpfs /dev/shm || exit 90
"$BIN" train "$CFG" > "$OUT/cut.out" 2> "$OUT/cut.err" &
pid=$!
# the cache in use: the third epoch begun (blocks froze from step 6 on)
i=0
until grep -q '"event": "epoch", "epoch": 3' "$RUN/metrics.jsonl" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 6000 ] || ! kill -0 $pid 2>/dev/null; then kill -9 $pid; exit 91; fi
    sleep 0.02
done
kill -STOP $pid
for f in /dev/shm/pipetrain-*; do truncate -s 0 "$f"; done
kill -CONT $pid
wait $pid
echo $? > "$OUT/cut.rc"
"""


def test_dev_shm_cut_short(h):
    """The job's shared-memory segment cut to nothing by another process
    while the cache is in use (a page of it mapped past its end): the run
    ends with exit 1 and a message saying so, not SIGBUS and a core dump,
    and resumes from its last checkpoint. Needs root (unshare, mount)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "skipped: needs root and unshare"
    run_dir = h.path("cut")
    cfg = U.write_config(h, "cut.yaml", keys(run_dir, dict(REPRO, **{
        "train.max_steps": "3000", "train.epochs": "100", "train.checkpoint_every": "32"}), True))
    env = dict(U.sanitizer_env(), BIN=h.binary, CFG=cfg, OUT=h.dir, RUN=run_dir)
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", CUT_SHORT],
                       cwd=h.dir, capture_output=True, text=True, timeout=400, env=env)
    if p.returncode == 90:
        return "skipped: no tmpfs could be mounted here"
    check(p.returncode == 0, "the script failed (%d): %s", p.returncode,
          U.tail(p.stderr + U.read_bytes(h.path("cut.err")).decode(errors="replace")))
    rc = int(open(h.path("cut.rc")).read())
    err = open(h.path("cut.err")).read()
    check(rc == 1 and "SIGBUS: a file or shared-memory segment this process had mapped" in err,
          "the cache's segment cut short: exit %d (expected 1 and the message)\n%s", rc,
          U.tail(err))
    r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", "train.max_steps=200"])
    r.expect(0, "the resume after the segment was cut short")
    check("resumed at step" in r.err, "no resume:\n%s", r.describe())


def test_read_only_dev_shm(h):
    """A /dev/shm this job cannot write (mounted read-only here) ends a run
    with the cache on with exit 1 saying the directory must be writable or
    the cache off, not that the kernel lacks O_TMPFILE (which it said for
    every failure but a full one). Needs
    root (unshare, mount)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "skipped: needs root and unshare"
    base = dict(REPRO, **{"train.max_steps": "10"})
    cfg = U.write_config(h, "ro.yaml", keys(h.path("ro"), base, True))
    script = 'mount -t tmpfs -o ro,size=256k tmpfs /dev/shm && exec "$0" train "$1"'
    p = subprocess.run(["unshare", "-m", "sh", "-c", script, h.binary, cfg], cwd=h.dir,
                       capture_output=True, text=True, timeout=240, env=U.sanitizer_env())
    check(p.returncode == 1 and "Read-only file system" in p.stderr and
          "must be writable by this user; or set cache.enabled false" in p.stderr and
          "O_TMPFILE" not in p.stderr,
          "cache on with a read-only /dev/shm: exit %d\n%s", p.returncode, U.tail(p.stderr))


def own_shm_script(start, then, shm_size="64m", polls=2400, poll_s=0.05):
    """A sh script for `unshare -m sh -c SCRIPT BINARY ARGS...`: mounts a
    /dev/shm of its own (shm_size), runs START in the background (its pid
    in $p), waits until the cache's segment appears there (exit 91 if it
    does not within polls x poll_s seconds), runs THEN (which sets $rc),
    and prints "rc RC left: NAMES" (what /dev/shm still holds)."""
    return ('mount -t tmpfs -o size=%s tmpfs /dev/shm || exit 90\n'
            '%s >/dev/null 2>&1 & p=$!\n'
            'i=0; while [ -z "$(ls -A /dev/shm)" ] && [ $i -lt %d ]; do sleep %g; i=$((i+1)); done\n'
            '[ -n "$(ls -A /dev/shm)" ] || { kill -9 $p; exit 91; }\n'
            '%s\n'
            'echo "rc $rc left: $(ls -A /dev/shm)"\n' % (shm_size, start, polls, poll_s, then))


def test_segment_gone_when_killed_after_a_stop_signal(h):
    """Under mpirun a rank gets SIGTERM and, a second later, SIGKILL when
    the launcher ends the job (another rank died): the stop signal takes the
    segment's name off /dev/shm at once, so its memory is freed when the
    process dies, though it never reaches its close. In a mount namespace
    with a /dev/shm of its own (nothing else's segments there): SIGTERM, then
    SIGKILL as soon as the name is gone, leave /dev/shm empty. Needs root (unshare, mount)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "skipped: needs root and unshare"
    run_dir = h.path("killed")
    # (no periodic save: the only checkpoint a stop could write is its own)
    slow = dict(REPRO, **{"train.max_steps": "100000", "freeze.start": "100000",
                          "train.checkpoint_every": "1000000"})
    cfg = U.write_config(h, "killed.yaml", keys(run_dir, slow, True))
    # SIGKILL once the name is off, however late a loaded machine runs the
    # handler (a fixed 50 ms let the SIGKILL overtake the SIGTERM). The stop's
    # save stops answering once its step directory is made (the fault hook),
    # so neither the save nor the close after it is reached whenever the
    # SIGKILL comes (a step that ended just after the SIGTERM once let both
    # finish first); the SIGKILL, not an exit, must end the job
    script = own_shm_script(
        '"$0" train "$1"',
        'sleep 0.5; kill -TERM $p\n'
        'i=0; while [ -n "$(ls -A /dev/shm)" ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done\n'
        'kill -KILL $p; wait $p; rc=$?', polls=1200)
    env = U.sanitizer_env()
    env["PIPETRAIN_TEST_FAULT"] = "0:*:hang:checkpoint-prepared"
    p = subprocess.run(["unshare", "-m", "sh", "-c", script, h.binary, cfg], cwd=h.dir,
                       capture_output=True, text=True, timeout=240, env=env)
    saved = [n for n in U.checkpoints(run_dir)
             if os.listdir(os.path.join(run_dir, "checkpoints", n))]
    check(p.returncode == 0 and p.stdout.strip() == "rc 137 left:" and not saved,
          "SIGTERM then SIGKILL with the cache on: exit %d, %s, checkpoints with files %s",
          p.returncode, U.tail(p.stdout + p.stderr), saved)


def test_second_signal_while_the_names_are_held(h):
    """A stop signal while the cache opens finds its names held (until
    every rank of the node has attached) and only records the request; a
    second signal then ends the process at once. It left the segment's
    name in /dev/shm and the disk tier's file for the next start's sweep
    (the hold was never let go); the names now go as the process ends. The
    window is widened by strace, which delays the return of each link that
    names the segment and the disk file by 1.5 s: the first SIGTERM comes
    while the segment's is delayed, the second while the disk file's is. In
    a mount namespace with a /dev/shm of its own. Needs root (unshare,
    mount) and strace."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("strace"):
        return "skipped: needs root, unshare and strace"
    run_dir, spill = h.path("held"), h.path("held-spill")
    os.makedirs(spill)
    slow = dict(REPRO, **{"train.max_steps": "100000", "freeze.start": "0",
                          "cache.disk_dir": spill, "cache.disk_gib": "0.01"})
    cfg = U.write_config(h, "held.yaml", keys(run_dir, slow, True))
    # ($p is strace's; pipetrain is its child)
    script = own_shm_script(
        'strace -f -o /dev/null -e trace=linkat -e inject=linkat:delay_exit=1500000 "$0" train "$1"',
        'c=$(pgrep -P $p); kill -TERM $c; sleep 1.6; kill -TERM $c; wait $p; rc=$?', poll_s=0.02)
    p = subprocess.run(["unshare", "-m", "sh", "-c", script, h.binary, cfg], cwd=h.dir,
                       capture_output=True, text=True, timeout=240, env=U.sanitizer_env())
    check(p.returncode == 0 and p.stdout.strip() == "rc %d left:" % (128 + signal.SIGTERM) and
          not os.listdir(spill),
          "two SIGTERMs while the cache's names are held: %s, the disk tier holding %s",
          U.tail(p.stdout + p.stderr), os.listdir(spill))


def signal_in_own_shm(h, args, sig, shm_size, settle):
    """Runs pipetrain ARGS in a mount namespace
    with a /dev/shm of its own (shm_size), sends SIG `settle` seconds after
    the cache's segment appears there: (status of the sh, its stdout, stdout
    and stderr), stdout being "rc RC left: NAMES"."""
    cmd = " ".join('"$%d"' % (i + 1) for i in range(len(args)))
    script = own_shm_script('"$0" ' + cmd, 'sleep %s; kill -%s $p; wait $p; rc=$?' % (settle, sig),
                            shm_size=shm_size)
    p = subprocess.run(["unshare", "-m", "sh", "-c", script, h.binary] + list(args), cwd=h.dir,
                       capture_output=True, text=True, timeout=240, env=U.sanitizer_env())
    return p.returncode, p.stdout.strip(), U.tail(p.stdout + p.stderr)


def test_segment_gone_when_a_signal_ends_the_run(h):
    """Signals whose default action ends the process but that ask no stop
    (SIGALRM): the run still ends by the signal, and takes the cache's
    names off /dev/shm as it goes (they were left for the next start's
    sweep). SIGHUP (a closed terminal) and SIGXCPU (the soft CPU-time
    limit) stop the run as SIGTERM does: a checkpoint, status 130, nothing
    left. SIGPIPE is ignored (a
    stderr whose reader went away is no reason to lose the run): the run
    goes on to its end, status 0, nothing left. In a mount namespace with a
    /dev/shm of its own. Needs root (unshare, mount)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "skipped: needs root and unshare"
    # long enough for the signal to come while it trains (REPRO's 10
    # epochs, 320 steps, end in a quarter of a second on a quiet machine),
    # short enough for SIGPIPE's run to reach its end soon (3 s)
    slow = dict(REPRO, **{"train.max_steps": "3000", "train.epochs": "100000",
                          "freeze.start": "100000"})
    for sig, want in (("ALRM", 128 + 14), ("PIPE", 0), ("XCPU", 130), ("HUP", 130)):
        run_dir = h.path("signal-" + sig)
        cfg = U.write_config(h, "signal-%s.yaml" % sig, keys(run_dir, slow, True))
        rc, out, shown = signal_in_own_shm(h, ["train", cfg], sig, "64m", "0.3")
        check(rc == 0 and out == "rc %d left:" % want,
              "SIG%s with the cache on: exit %d, %s (want rc %d, nothing left)", sig, rc, shown, want)
        if want == 130:
            check(U.checkpoints(run_dir), "SIG%s left no checkpoint", sig)


def test_eval_opens_no_cache_and_a_signal_ends_it(h):
    """eval passes each test example once, so a cache of the frozen prefix
    would hold only entries nobody reads: with the config's cache on (as the
    run trained with it) eval opens none, and its layout is planned for the
    frozen blocks cut among the stages, not riding in front of stage 0 (that
    count refused an eval on 4 ranks under a memory limit the same eval with
    the cache off ran in: mpi_layout_errors). Checked in a mount namespace
    with a /dev/shm of its own: the eval of a checkpoint with frozen blocks
    stops itself (SIGSTOP) at its first round, when an opened cache would
    be there (it used to be), and /dev/shm is empty; then a signal ends it
    as the signal does (128 + its number) with nothing left. Needs root
    (unshare, mount)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "skipped: needs root and unshare"
    run_dir = h.path("eval-signal")
    cfg = U.write_config(h, "eval-signal.yaml", U.tiny("vit", run_dir, **{
        "freeze.policy": "schedule", "freeze.start": "1", "cache.enabled": "true",
        "train.epochs": "3"}))
    h.run(["train", cfg]).expect(0)
    frozen = json.loads(h.run(["inspect", run_dir]).expect(0).out).get("frozen_blocks")
    check(frozen, "the checkpoint eval reads has frozen blocks: inspect says %r", frozen)
    script = ('mount -t tmpfs -o size=64m tmpfs /dev/shm || exit 90\n'
              'PIPETRAIN_TEST_FAULT=0:*:sigstop:eval "$0" eval "$1" >/dev/null 2>&1 & p=$!\n'
              'i=0; until [ "$(cut -d" " -f3 /proc/$p/stat 2>/dev/null)" = T ] || [ $i -ge 2400 ]; '
              'do sleep 0.05; i=$((i+1)); done\n'
              '[ "$(cut -d" " -f3 /proc/$p/stat 2>/dev/null)" = T ] || { kill -9 $p; exit 91; }\n'
              'seen=$(ls -A /dev/shm); kill -$2 $p; kill -CONT $p; wait $p; rc=$?\n'
              'echo "rc $rc seen: [$seen] left: [$(ls -A /dev/shm)]"\n')
    for sig, want in (("TERM", 128 + 15), ("INT", 128 + 2), ("HUP", 128 + 1), ("USR1", 128 + 10),
                      ("PIPE", 128 + 13)):
        p = subprocess.run(["unshare", "-m", "sh", "-c", script, h.binary, cfg, sig], cwd=h.dir,
                           capture_output=True, text=True, timeout=240, env=U.sanitizer_env())
        out = p.stdout.strip()
        check(p.returncode == 0 and out == "rc %d seen: [] left: []" % want,
              "eval of frozen blocks with the cache on, stopped in its first round: %s (want rc "
              "%d, nothing in /dev/shm then or after SIG%s); status %d, %s", out, want, sig,
              p.returncode, U.tail(p.stdout + p.stderr))


def test_eval_needs_no_disk_tier_directory(h):
    """eval opens no cache, so the cache's disk tier directory the run
    trained with (cache.disk_dir) need not be there: an evaluation of the
    checkpoint after the directory is gone (another machine, a cleaned
    scratch disk) evaluates, where it was refused naming the key. train and
    plan, which make or plan the tier, still refuse it with the config's
    line, exit 2, and the probe they write there leaves nothing behind."""
    run_dir, spill = h.path("tier-run"), h.path("tier")
    os.mkdir(spill)
    keys = U.tiny("vit", run_dir, **{"freeze.policy": "schedule", "freeze.start": "1",
                                     "cache.enabled": "true", "cache.memory_gib": "0",
                                     "cache.disk_dir": spill, "cache.disk_gib": "0.01",
                                     "train.epochs": "2"})
    text = U.render(keys)
    cfg = U.write(h.path("tier.yaml"), text)
    h.run(["train", cfg]).expect(0, "training with a disk tier")
    check(os.listdir(spill) == [], "the disk tier left %r" % os.listdir(spill))
    first = h.run(["eval", cfg]).expect(0, "eval, the directory there")
    os.rmdir(spill)
    r = h.run(["eval", cfg]).expect(0, "eval after cache.disk_dir is gone")
    loss = [l for l in r.out.splitlines() if "test loss" in l]
    check(loss and loss == [l for l in first.out.splitlines() if "test loss" in l],
          "eval without the directory gave %r, with it %r", loss,
          [l for l in first.out.splitlines() if "test loss" in l])
    for cmd in ("train", "plan"):
        r = h.run([cmd, cfg]).expect(2, cmd + " with cache.disk_dir gone")
        r.one_error("%s:%d: cache.disk_dir: " % (cfg, U.line_of(text, "cache.disk_dir")),
                    "is not a directory")


def small(kind, dim, heads, batch, threads, steps=60, epoch_steps=6, every=3, start=None,
          dropout=None):
    """A short run of kind at width dim that freezes 1 then 2 blocks after
    `every` and 2 * `every` steps (or before the first step and after
    `every` steps, with start 0), over data that repeats every
    `epoch_steps` steps; bert with dropout (both probabilities) if given."""
    examples = epoch_steps * batch
    k = dict(REPRO)
    k.update({"run.threads": str(threads), "model.dim": str(dim), "model.heads": str(heads),
              "data.synthetic_examples": str(examples), "train.batch": str(batch),
              "train.max_steps": str(steps), "train.epochs": "1000",
              "train.eval_every": "2", "train.eval_examples": "0",
              "freeze.start": str(every if start is None else start), "freeze.every": str(every)})
    if kind == "gpt":
        for key in ("model.patch",):
            k.pop(key)
        k.update({"model.kind": "gpt", "model.context": "17", "data.kind": "synthetic_text",
                  "sample.length": "0"})
    elif kind == "bert":
        k.pop("model.patch")
        k.update({"model.kind": "bert", "model.context": "17", "model.positions": "20",
                  "model.classes": "3", "data.kind": "text_classification"})
        if dropout:
            k.update({"model.dropout": dropout, "model.attention_dropout": dropout})
    else:
        k.update({"model.patch": "7"})
    return k


def freeze_events(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [(r["step"], r["old_depth"], r["depth"]) for r in map(json.loads, f)
                if r.get("event") == "freeze"]


def check_dropout(run_dir, dropout, step=60):
    """The run's checkpoint of `step` records the dropout it was given (so it
    trained with it)."""
    _, _, recs = U.read_recfile(os.path.join(U.ckpt(run_dir, step), "manifest"))
    arch = json.loads(dict(recs)["manifest"])["arch"]
    want = float(dropout or 0)
    check(arch.get("hidden_dropout") == want and arch.get("attn_dropout") == want,
          "%s: the checkpoint's arch %s, not dropout %g", run_dir, arch, want)


def start0_case(kind, threads, dropout=None):
    """freeze.start 0: a decision before the first step freezes the
    schedule's first bound (1 of 2 blocks at alpha 0.5), so every step
    trains only the top; the cache fills in the first epoch and serves
    the next ones, bit-identical to recomputing."""
    def t(h):
        base = small(kind, 16, 2, 12, threads, start=0, dropout=dropout)
        if kind == "bert":
            base.update(U.bert_files(h, 6 * 12, 16))
        on = on_equals_off(h, base, "run", 60)
        ev = freeze_events(on)
        check(ev[:2] == [(0, 0, 1), (3, 1, 2)], "%s: freeze decisions (step, old, new) %s; "
              "wanted 0 -> 1 at step 0, 1 -> 2 at step 3", on, ev[:4])
        if kind == "bert":
            check_dropout(on, dropout)
    t.__name__ = "test_start0_%s%s_threads%d" % (kind, "_dropout" if dropout else "", threads)
    return t


def sweep_case(kind, dim, heads, batch, threads, **kw):
    def t(h):
        base = small(kind, dim, heads, batch, threads, **kw)
        if kind == "bert":
            base.update(U.bert_files(h, kw.get("epoch_steps", 6) * batch, dim))
        on = on_equals_off(h, base, "run", kw.get("steps", 60))
        if kind == "bert" and kw.get("steps", 60) == 60:
            check_dropout(on, kw.get("dropout"))
    t.__name__ = "test_sweep_%s%s_d%d_h%d_batch%d_threads%d_steps%d" % (
        kind, "_dropout" if kw.get("dropout") else "", dim, heads, batch, threads, kw.get("steps", 60))
    return t


def test_bert_dropout_resumed(h):
    """BERT with dropout, freezing and the cache: resumed with the cache on
    (from an empty cache, in a fresh run directory) from the checkpoints of
    step 12 (a freeze decision) and 27, the same steps and final files as the
    run that never stopped (itself equal to cache off)."""
    base = small("bert", 16, 2, 12, 1, dropout="0.1")
    base.update(U.bert_files(h, 6 * 12, 16))
    base.update({"train.checkpoint_every": "3", "train.keep_checkpoints": "100"})
    straight = on_equals_off(h, base, "straight", 60)
    want = steps_of(straight)
    for s in (12, 27):
        run_dir = h.path("resumed-%d" % s)
        train(h, "resumed-%d" % s, keys(run_dir, base, True), "train.resume=" + U.ckpt(straight, s))
        same_steps(want, steps_of(run_dir), "resumed at step %d, cache on" % s, first=s + 1)
        same_final(h, straight, run_dir, 60, "resumed at step %d, cache on" % s)


QUICK = [
    ("vit", 8, 2, 32, 1), ("vit", 9, 3, 24, 2), ("vit", 16, 2, 12, 1), ("vit", 24, 3, 12, 2),
    ("vit", 31, 1, 24, 2), ("vit", 33, 3, 32, 1), ("vit", 48, 4, 20, 1), ("vit", 63, 7, 24, 2),
    ("vit", 65, 5, 20, 1), ("vit", 96, 4, 32, 2), ("gpt", 16, 2, 12, 1), ("gpt", 17, 1, 16, 2),
    ("gpt", 40, 5, 12, 1), ("gpt", 33, 3, 8, 2),
    ("bert", 16, 2, 12, 1), ("bert", 33, 3, 16, 2), ("bert", 48, 4, 20, 1),
]
FULL_WIDTHS = [(8, 2), (9, 3), (12, 4), (17, 1), (24, 3), (31, 1), (32, 4), (33, 3), (40, 5),
               (48, 3), (63, 7), (64, 4), (65, 5), (96, 3), (100, 4), (127, 1), (128, 2)]


def test_jobs_in_pid_namespaces(h):
    """Two jobs whose rank 0 is PID 1 of a PID namespace of its own (two
    containers), started together on one /dev/shm and one cache.disk_dir:
    their segments and disk files have different names (pid and start time
    alone were the same, and one job failed with 'File exists'), and both
    end bit-identical to the cache off. Needs root (unshare)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "skipped: needs root and unshare"
    base = dict(REPRO, **{"train.max_steps": "100"})
    off = train(h, "ns-off", keys(h.path("ns-off"), base, False))
    disk = h.path("disk")
    os.makedirs(disk)
    runs = []
    for attempt in range(3):  # the same second on the clock, at least once
        procs = []
        for i in range(2):
            run_dir = h.path("ns-%d-%d" % (attempt, i))
            cfg = U.write_config(h, "ns-%d-%d.yaml" % (attempt, i),
                                 keys(run_dir, base, True, **{"cache.disk_dir": disk,
                                                              "cache.disk_gib": "0.01"}))
            procs.append((run_dir, subprocess.Popen(
                ["unshare", "-pf", "--mount-proc", h.binary, "train", cfg], cwd=h.dir,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=U.sanitizer_env())))
        for run_dir, p in procs:
            out, err = p.communicate(timeout=240)
            check(p.returncode == 0, "a job in a PID namespace of its own: exit %d\n%s",
                  p.returncode, U.tail(out + err))
            runs.append(run_dir)
    for run_dir in runs:
        check_cache_use(run_dir, True)
        same_steps(steps_of(off), steps_of(run_dir), "a job in a PID namespace: cache on vs off")


def tests(full):
    out = [test_issue10_vit_d32, test_issue10_vit_d32_threads2, test_small_dev_shm, test_read_only_dev_shm,
           test_dev_shm_cut_short,
           test_segment_gone_when_killed_after_a_stop_signal,
           test_segment_gone_when_a_signal_ends_the_run, test_second_signal_while_the_names_are_held,
           test_eval_opens_no_cache_and_a_signal_ends_it,
           test_eval_needs_no_disk_tier_directory,
           test_jobs_in_pid_namespaces]
    out += [sweep_case(*c) for c in QUICK]
    out += [start0_case("vit", 1), start0_case("gpt", 2), start0_case("bert", 1)]
    out += [sweep_case("bert", 16, 2, 12, 1, dropout="0.1"), sweep_case("bert", 33, 3, 16, 2, dropout="0.1"),
            start0_case("bert", 2, dropout="0.1"), test_bert_dropout_resumed]
    if full:
        for dim, heads in FULL_WIDTHS:
            for batch in (8, 20, 32):
                for threads in (1, 2):
                    for kind in ("vit", "gpt", "bert"):
                        out.append(sweep_case(kind, dim, heads, batch, threads, steps=150,
                                              epoch_steps=8))
                    out.append(sweep_case("bert", dim, heads, batch, threads, steps=150,
                                          epoch_steps=8, dropout="0.1"))
    return out


if __name__ == "__main__":
    argv = [a for a in sys.argv if a != "--full"]
    sys.exit(U.main(tests("--full" in sys.argv), argv, workers=2))
