#!/usr/bin/env python3
"""Resuming from a checkpoint gives the same bits as not stopping.

Each test trains a tiny model straight through, and again with a stop in the
middle, then resumes with train.resume=auto and compares with the straight
run: the unit files of the final checkpoint (parameters and AdamW moments)
and `pipetrain export` of it must be byte-identical, and metrics.jsonl must
hold the same loss, learning rate and gradient norm for every step (and the
same evaluations), each step exactly once.

Ways to stop:
  crash     the straight run's directory, cut back to what a run killed right
            after its step-S checkpoint leaves on disk (that checkpoint and the
            metrics up to step S); same config throughout
  sigint    SIGINT after a few steps of a long run (it finishes the step,
            saves and exits 130)
  max_steps a first run with train.max_steps=S, resumed with the straight
            run's max_steps; bit-exactness is only defined here for a schedule
            that does not depend on the run's length (constant), since the
            cosine and linear schedules span train.max_steps; for the default
            schedule, test_more_{max_steps,epochs}_on_resume_keeps_learning
            check that an extended run is not silently stuck at min_lr

Epochs are 5 steps (40 examples, batch 8), so a stop at step 4 or 6 is in the
middle of an epoch and one at step 5 is at its end.

usage: test_resume.py PIPETRAIN_BINARY
"""
import json
import re
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_util as U  # noqa: E402
from cli_util import check  # noqa: E402

STEPS = 12


def config(h, kind, run_dir, **extra):
    return U.tiny(kind, run_dir, **{"train.epochs": "3", "train.max_steps": str(STEPS),
                                    "train.keep_checkpoints": "10", **extra})


def train(h, name, kind, *sets, expect=0, **extra):
    run_dir = h.path(name)
    cfg = U.write_config(h, name + ".yaml", config(h, kind, run_dir, **extra))
    args = ["train", cfg]
    for s in sets:
        args += ["--set", s]
    r = h.run(args).expect(expect, "training " + name)
    return cfg, run_dir, r


def crash_copy(h, src, name, step):
    """What a run killed just after saving step `step` leaves behind."""
    dst = h.path(name)
    shutil.copytree(src, dst)
    for c in U.checkpoints(dst):
        if int(c[5:]) > step:
            shutil.rmtree(os.path.join(dst, "checkpoints", c))
    check(U.checkpoints(dst) and U.checkpoints(dst)[-1] == "step_%010d" % step,
          "the straight run saved no checkpoint at step %d: %s", step, U.checkpoints(src))
    path = os.path.join(dst, "metrics.jsonl")
    with open(path) as f:
        lines = f.readlines()
    with open(path, "w") as f:
        f.writelines(l for l in lines if json.loads(l).get("step", 0) <= step)
    return dst


def export(h, ckpt_dir, name):
    out = h.path(name + ".safetensors")
    h.run(["export", ckpt_dir, out]).expect(0, "export")
    return U.read_bytes(out)


def compare(h, straight, resumed, final=STEPS, resumed_at=None, run_ended_at=None):
    """The final checkpoints and the metrics of the two runs agree exactly
    (except for the evaluation a first run that ended at run_ended_at did at its end)."""
    a, b = U.ckpt(straight, final), U.ckpt(resumed, final)
    check(os.path.isfile(os.path.join(b, "manifest")), "the resumed run has no checkpoint at "
          "step %d: %s", final, U.checkpoints(resumed))
    sa, va = U.metrics(straight)
    sb, vb = U.metrics(resumed)
    if run_ended_at is not None and run_ended_at not in [r["step"] for r in va]:
        vb = [r for r in vb if r["step"] != run_ended_at]
    steps_b = [r["step"] for r in sb]
    check(steps_b == list(range(1, final + 1)),
          "the resumed run's metrics.jsonl has steps %s, expected 1..%d once each", steps_b, final)
    for ra, rb in zip(sa, sb):
        for k in ("step", "epoch", "loss", "train_accuracy", "lr", "grad_norm"):
            check(ra[k] == rb[k], "step %d: %s is %r straight, %r resumed (resumed at %s)",
                  ra["step"], k, ra[k], rb[k], resumed_at)
    key = [(r["step"], r["test_loss"], r["test_accuracy"]) for r in va]
    check(key == [(r["step"], r["test_loss"], r["test_accuracy"]) for r in vb],
          "evaluations differ:\n straight %s\n resumed  %s", va, vb)
    ua, ub = U.unit_files(a), U.unit_files(b)
    check([os.path.basename(p) for p in ua] == [os.path.basename(p) for p in ub],
          "unit files differ: %s vs %s", ua, ub)
    for pa, pb in zip(ua, ub):
        # every record but the file's own "checkpoint" record, which names the
        # checkpoint's random id
        ra, rb = U.unit_records(pa), U.unit_records(pb)
        check([t for t, _ in ra] == [t for t, _ in rb], "%s holds other records than the straight "
              "run's", pb)
        for (tag, da), (_, db) in zip(ra, rb):
            if da != db:
                first = next(i for i in range(min(len(da), len(db))) if da[i] != db[i]) \
                    if len(da) == len(db) else -1
                raise U.Failure("%s: %s differs from the straight run's (first differing byte "
                                "%d of %d)" % (pb, tag, first, len(da)))
    ea, eb = export(h, a, "straight"), export(h, b, "resumed")
    check(ea == eb, "exported weights differ from the straight run's")

    return sa


def not_trivial(h, run_dir, early, final=STEPS):
    """The weights moved between the resume point and the end (else equal
    results would prove nothing)."""
    check(export(h, U.ckpt(run_dir, early), "early") != export(h, U.ckpt(run_dir, final), "late"),
          "weights at step %d and %d are equal: nothing was trained", early, final)


def crash_case(kind, stop, every, **extra):
    def t(h):
        _, straight, _ = train(h, "straight", kind, **{"train.checkpoint_every": str(every)},
                               **extra)
        resumed = crash_copy(h, straight, "resumed", stop)
        cfg = U.write_config(h, "resumed.yaml", config(
            h, kind, resumed, **{"train.checkpoint_every": str(every)}, **extra))
        r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resume")
        check("resumed at step %d" % stop in r.err, "no 'resumed at step %d'\n%s", stop,
              r.describe())
        starts = U.starts(resumed)
        check([e["step"] for e in starts] == [0, stop] and starts[0]["resumed_from"] is None and
              starts[1]["resumed_from"] == U.ckpt(resumed, stop) and
              starts[1]["abandoned_to"] is None and
              starts[1]["total_steps"] == starts[0]["total_steps"] == STEPS and
              abs(starts[1]["unix_time"] - time.time()) < 3600,
              "start events of the resumed run: %s", starts)
        compare(h, straight, resumed, resumed_at=stop)
        not_trivial(h, straight, stop)
    return t


def max_steps_case(kind, stop, **extra):
    def t(h):
        _, straight, _ = train(h, "straight", kind, **extra)
        cfg, resumed, _ = train(h, "resumed", kind, "train.max_steps=%d" % stop, **extra)
        check(U.checkpoints(resumed)[-1] == "step_%010d" % stop, "no checkpoint at step %d: %s",
              stop, U.checkpoints(resumed))
        h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resume")
        compare(h, straight, resumed, resumed_at=stop, run_ended_at=stop)
    return t


def wait_for_lines(p, run_dir, lines):
    """Until RUN_DIR/metrics.jsonl holds `lines` lines (the run is training),
    p has ended, or 120 s have passed."""
    metrics = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.time() + 120
    while p.poll() is None and time.time() < deadline:
        try:
            with open(metrics) as f:
                if sum(1 for _ in f) >= lines:
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.002)


def sigint_case(kind, epochs, **extra):
    """SIGINT a long run after a few steps, resume it, compare with a straight run."""
    long = {"train.epochs": str(epochs), "train.max_steps": "0", "train.eval_every": "0",
            "train.checkpoint_every": "1000000", "train.log_every": "1000", **extra}

    def t(h):
        total = epochs * 5
        _, straight, _ = train(h, "straight", kind, **long)
        run_dir = h.path("resumed")
        cfg = U.write_config(h, "resumed.yaml", config(h, kind, run_dir, **long))
        p = h.popen(["train", cfg])
        wait_for_lines(p, run_dir, 3)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        r = U.Result(p.args, p.returncode, out, err)
        U.no_sanitizer(r)
        r.expect(130, "stopped by SIGINT")
        check("signal 2" in err, "no word of the signal on stderr\n%s", r.describe())
        saved = U.checkpoints(run_dir)
        check(len(saved) == 1, "expected one checkpoint after the stop, got %s", saved)
        stop = int(saved[0][5:])
        steps, _ = U.metrics(run_dir)
        check(0 < stop < total and steps[-1]["step"] == stop,
              "stopped at step %d (metrics end at %d) of %d", stop, steps[-1]["step"], total)
        r = h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "resume")
        check("resumed at step %d" % stop in r.err, "no resume message\n%s", r.describe())
        compare(h, straight, run_dir, final=total, resumed_at=stop)
    return t


def keeps_learning_case(key, first, then, **extra):
    """With the default schedule (cosine over the run's steps) a run has
    decayed to min_lr at its end. Resumed with a larger train.max_steps or
    train.epochs (to train longer), either the run is refused with a message
    naming that key, or the new steps train at a learning rate above min_lr --
    not silently at min_lr, which wastes them."""
    def t(h):
        cfg, run_dir, _ = train(h, "run", "vit", "%s=%s" % (key, first), **extra)
        done = len(U.metrics(run_dir)[0])
        r = h.run(["train", cfg, "--set", "%s=%s" % (key, then), "--set", "train.resume=auto"])
        if r.rc == 2:
            r.one_error(key, strict=False)
            return "refused (allowed)"
        r.expect(0, "resume with more steps")
        steps, _ = U.metrics(run_dir)
        min_lr = float(config(h, "vit", run_dir)["train.min_lr"])
        after = [s["lr"] for s in steps[done:]]
        check(after, "no steps after the resume at step %d", done)
        check(any(lr > min_lr * 1.001 for lr in after),
              "after resuming with %s %s -> %s, every one of the %d new steps ran at min_lr "
              "(%g): lr %s", key, first, then, len(after), min_lr, after)
    return t


def test_stop_signal_before_main(h):
    """A stop signal that comes while the libraries' constructors run (before
    main: OpenBLAS's alone takes tens of milliseconds, and mpirun forwards a
    signal the moment it gets one) stops the run as one during training
    does: a checkpoint and status 130, not death by the default action. A
    preloaded library's constructor raises the signal, so the moment is
    exact: after the executable's preinit functions, before main."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return "skipped: no C compiler"
    src = U.write(h.path("raise.c"), "#include <signal.h>\n#include <stdlib.h>\n"
                  "__attribute__((constructor)) static void stop_early(void)\n"
                  "{ raise(atoi(getenv(\"PT_TEST_EARLY_SIGNAL\"))); }\n")
    lib = h.path("raise.so")
    subprocess.run([cc, "-shared", "-fPIC", "-o", lib, src], check=True)
    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        run_dir = h.path("early-%d" % sig)
        cfg = U.write_config(h, "early-%d.yaml" % sig, config(h, "vit", run_dir))
        # ASan wants its runtime first among the libraries: the preload comes after it
        r = h.run(["train", cfg], env={"LD_PRELOAD": lib, "PT_TEST_EARLY_SIGNAL": str(int(sig)),
                                       "ASAN_OPTIONS": "verify_asan_link_order=0:" +
                                       os.environ.get("ASAN_OPTIONS", "")})
        r.expect(130, "signal %d before main" % sig)
        check("stopped by signal %d after step 1" % sig in r.err, "no stop after step 1:\n%s",
              r.describe())
        check(U.checkpoints(run_dir) == ["step_%010d" % 1], "checkpoints %s", U.checkpoints(run_dir))


def test_signal_during_a_step_stops_after_that_step(h):
    """A stop signal that comes while a step's micro-batches run ends the run
    after that step, not the next: the step's combine asks for the signal
    when it happens, not when the step began. The handler's note says which
    step and action it interrupted; only trials whose note names a
    micro-batch of a step count (a signal between steps, or during a log
    line, may stop after the next one). The note is never read half
    rewritten (the step writes the other of two strings, then publishes
    it), so every trial whose note names a micro-batch must stop on the step
    named, and at least two must."""
    long = {"train.epochs": "400", "train.max_steps": "0", "train.eval_every": "0",
            "train.checkpoint_every": "1000000", "train.log_every": "1000"}
    good, late = 0, []
    for trial in range(12):
        run_dir = h.path("during-%d" % trial)
        cfg = U.write_config(h, "during-%d.yaml" % trial, config(h, "vit", run_dir, **long))
        p = h.popen(["train", cfg])
        wait_for_lines(p, run_dir, 3 + 5 * trial)
        p.send_signal(signal.SIGUSR1)
        out, err = p.communicate(timeout=120)
        r = U.Result(p.args, p.returncode, out, err)
        U.no_sanitizer(r)
        r.expect(130, "stopped by SIGUSR1")
        stopped = re.search(r"stopped by signal 10 after step (\d+)", err)
        check(stopped, "no note of the stop\n%s", r.describe())
        after = int(stopped.group(1))
        check(U.checkpoints(run_dir) == ["step_%010d" % after], "checkpoints %s after a stop "
              "after step %d", U.checkpoints(run_dir), after)
        where = re.search(r"signal received while at step (\d+), ([^\n]*of micro-batch[^\n]*)",
                          err)
        if where:
            at = int(where.group(1))
            if after == at:
                good += 1
            else:
                late.append("a signal during step %d (%s) stopped the run after step %d"
                            % (at, where.group(2), after))
        if good >= 3:
            break
    check(good >= 2 and not late, "%d signals during a step stopped after it; %s", good,
          "; ".join(late) or "no others")
    return "%d signals during a step stopped after it" % good


def test_a_stop_signal_after_the_last_step_stops_nothing(h):
    """A stop signal that comes after the run's last step, during its save
    at the end of the last epoch (before the run's last evaluation) or
    during that evaluation, stops nothing: exit 0, the last evaluation
    logged, the same checkpoint as a run without the signal. (A signal
    during that save stopped the run with 130 and skipped the evaluation.)"""
    keys = {"train.max_steps": "0", "train.eval_every": "0", "train.epochs": "2"}
    cfg, straight, r = train(h, "last-straight", "vit", **keys)
    last = int(U.checkpoints(straight)[-1].split("_")[-1])
    check("eval  step %d " % last in r.err, "the straight run has no last evaluation:\n%s", r.err)
    want = export(h, U.ckpt(straight, last), "last-straight")
    for point in ("checkpoint-prepared", "checkpoint-writing", "checkpoint-manifest", "finished"):
        name = "last-" + point
        run_dir = h.path(name)
        c = U.write_config(h, name + ".yaml", config(h, "vit", run_dir, **keys))
        r = h.run(["train", c], env={"PIPETRAIN_TEST_FAULT": "0:%d:stop:%s" % (last, point)})
        r.expect(0, "a stop signal at %s of the last step" % point)
        check("signal received while at step %d" % last in r.err and "eval  step %d " % last in r.err
              and "done: %d steps" % last in r.err, "%s: no last evaluation, or no signal:\n%s",
              point, r.describe())
        check(export(h, U.ckpt(run_dir, last), name) == want,
              "%s: the last checkpoint differs from the run without the signal" % point)


def test_a_stop_signal_sent_twice_at_once_is_one_stop(h):
    """One stop request delivered twice (GNU timeout sends SIGTERM to its
    child and then to the child's process group; here the same sender sends
    it again 20 ms later, after the first's handler ran) is one request:
    the run saves the step and exits 130. The same signal sent again later
    than half a second is a second request and ends the run at once (its
    stop's save held up by the fault hook), 128 + 15, with no checkpoint."""
    long = {"train.epochs": "400", "train.max_steps": "0", "train.eval_every": "0",
            "train.checkpoint_every": "1000000", "train.log_every": "1000"}
    for trial, (gap, fault, want) in enumerate(((0.02, None, 130), (0.0, None, 130),
                                               (0.02, None, 130), (0.8, "hang", 128 + 15))):
        run_dir = h.path("twice-%d" % trial)
        cfg = U.write_config(h, "twice-%d.yaml" % trial, config(h, "vit", run_dir, **long))
        env = U.sanitizer_env()
        if fault:
            env["PIPETRAIN_TEST_FAULT"] = "0:*:hang:checkpoint-prepared"
        p = subprocess.Popen([h.binary, "train", cfg], cwd=h.dir, env=env, text=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, errors="replace")
        wait_for_lines(p, run_dir, 3)
        p.send_signal(signal.SIGTERM)
        time.sleep(gap)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
        r = U.Result(p.args, p.returncode, "", err)
        U.no_sanitizer(r)
        r.expect(want, "SIGTERM, then SIGTERM again %g s later" % gap)
        saved = [n for n in U.checkpoints(run_dir)
                 if os.listdir(os.path.join(run_dir, "checkpoints", n))]
        if want == 130:
            stopped = re.search(r"stopped by signal 15 after step (\d+)", err)
            check(stopped and saved == ["step_%010d" % int(stopped.group(1))],
                  "a signal sent twice: checkpoints %s\n%s", saved, r.describe())
        else:
            check(not saved, "a second signal: checkpoints %s", saved)


def test_killed_writes_of_run_files_are_swept(h):
    """A run killed while it wrote profile.json or an op profile leaves the
    file's temporary twin in run.dir; the next run there removes it (with a
    note), as every other output's, and leaves a live writer's alone (one
    holding its lock: here this test)."""
    import fcntl
    run_dir = h.path("swept")
    os.makedirs(run_dir)
    dead = ["profile.json.tmp.%d.0123456789abcdef" % os.getpid(),
            "profile.json.tmp.1.fedcba9876543210",
            "op_profile-rank0.json.tmp.%d.00112233445566ff" % os.getpid()]
    for name in dead:
        U.write(os.path.join(run_dir, name), "a killed run's half-written file")
    live = os.path.join(run_dir, "profile.json.tmp.%d.aaaaaaaaaaaaaaaa" % os.getpid())
    with open(live, "w") as f:
        f.write("a live writer's")
        f.flush()
        fcntl.flock(f, fcntl.LOCK_EX)
        cfg = U.write_config(h, "swept.yaml", config(h, "vit", run_dir,
                                                     **{"run.profile_ops": "true"}))
        r = h.run(["train", cfg]).expect(0, "a run where killed writes were left")
    left = sorted(n for n in os.listdir(run_dir) if ".tmp." in n)
    check(left == [os.path.basename(live)], "temporary files left in run.dir: %s", left)
    check(r.err.count("that was killed") == 2, "no note of each file's removed temporaries\n%s",
          r.describe())


def test_lock_is_never_written_through(h):
    """RUN_DIR/lock as a link (to a file of the user's, or dangling), a hard
    link to a file of the user's, a directory or a FIFO: refused with exit 2 naming the config's run.dir
    and the lock, and nothing written where a link leads (the lock was
    opened through it and the file it led to truncated). A run.dir on a
    read-only mount: exit 2 naming run.dir, not a failure of the system."""
    victim = U.write(h.path("victim.txt"), "the user's\n")
    for name, make in (("link", lambda p: os.symlink(victim, p)),
                       ("dangling", lambda p: os.symlink(h.path("nowhere.txt"), p)),
                       ("hardlink", lambda p: os.link(victim, p)),
                       ("dir", os.mkdir), ("fifo", os.mkfifo)):
        run_dir = h.path("lock-" + name)
        os.makedirs(run_dir)
        lock = os.path.join(run_dir, "lock")
        make(lock)
        text = U.render(config(h, "vit", run_dir))
        cfg = U.write(h.path("lock-%s.yaml" % name), text)
        r = h.run(["train", cfg], timeout=60).expect(2, "a lock that is a " + name)
        r.one_error("%s:%d: run.dir: " % (cfg, U.line_of(text, "run.dir")), lock)
        st = os.lstat(lock)
        check(stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISFIFO(st.st_mode) or
              st.st_nlink == 2, "the lock's %s was replaced", name)
    check(open(victim).read() == "the user's\n", "the file a linked lock led to was written")
    check(not os.path.exists(h.path("nowhere.txt")), "a dangling lock's target was created")
    ro = h.path("read-only")
    os.makedirs(ro)
    text = U.render(config(h, "vit", ro))
    cfg = U.write(h.path("read-only.yaml"), text)
    r = h.run_read_only(ro, ["train", cfg])
    if r is None:
        return "read-only run.dir skipped: no mount namespace"
    r.expect(2, "a read-only run.dir")
    r.one_error("%s:%d: run.dir: " % (cfg, U.line_of(text, "run.dir")), "Read-only file system")
    check(os.listdir(ro) == [], "the refused run left %s", os.listdir(ro))


def test_checkpoints_read_only_mid_run(h):
    """A run.dir writable when the run began whose checkpoints/ is
    read-only by the time of a save (a file system remounted read-only
    under the run) fails the run as a full disk does: exit 1 naming the
    step directory and the cause, not exit 2, which is for bad input. The
    run is started in a mount namespace of its own; once it has logged a
    step, its checkpoints/ is mounted read-only there, and the next save
    (at step 5000) cannot make its step directory. It used to exit 2 when that mkdir
    failed, and 1 when a file in the directory could not be made."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "skipped: no mount namespace"
    run_dir = h.path("ro-mid")
    cfg = U.write_config(h, "ro-mid.yaml", config(h, "vit", run_dir, **{
        "train.max_steps": "20000", "train.epochs": "5000", "train.checkpoint_every": "5000",
        "train.log_every": "1"}))
    ck = os.path.join(run_dir, "checkpoints")
    os.makedirs(ck)  # (a run makes it at its first save)
    script = ('"$@" > "$OUT" 2> "$ERR" & pid=$!; '
              'until grep -q \'"event": "step"\' "$RUN/metrics.jsonl" 2>/dev/null; do '
              '  kill -0 $pid 2>/dev/null || break; sleep 0.01; done; '
              'mount --bind "$CK" "$CK" && mount -o remount,bind,ro "$CK" || { kill $pid; exit 99; }; '
              'wait $pid')
    env = dict(U.sanitizer_env(), OUT=h.path("ro.out"), ERR=h.path("ro.err"), RUN=run_dir, CK=ck)
    p = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", h.binary, "train", cfg],
                       cwd=h.dir, env=env, timeout=300, stdin=subprocess.DEVNULL)
    if p.returncode == 99:
        return "skipped: no read-only bind mount"
    err = open(h.path("ro.err"), errors="replace").read()
    check(p.returncode == 1, "exit %d, expected 1:\n%s", p.returncode, U.tail(err))
    # the first save after the mount (step 5000, or a later one where the
    # machine was slow to mount) is the one that fails
    failed = re.findall(r"cannot create directory '[^']*/checkpoints/step_([0-9]{10})': "
                        r"Read-only file system", err)
    check(len(failed) == 1 and int(failed[0]) % 5000 == 0,
          "the error does not name the step directory and the cause:\n%s", U.tail(err))
    if failed:
        check(U.checkpoints(run_dir) == ["step_%010d" % s for s in range(5000, int(failed[0]), 5000)],
              "checkpoints %s after the save of step %s failed", U.checkpoints(run_dir), failed[0])


def test_straight_runs_are_reproducible(h):
    """Control: the same config twice gives the same bits."""
    _, a, _ = train(h, "a", "vit", **{"train.checkpoint_every": "4"})
    _, b, _ = train(h, "b", "vit", **{"train.checkpoint_every": "4"})
    compare(h, a, b)


def test_resume_when_already_done(h):
    """Resuming a finished run trains nothing more and changes no checkpoint."""
    cfg, run_dir, _ = train(h, "run", "vit", **{"train.checkpoint_every": "4"})
    before = U.snapshot(os.path.join(run_dir, "checkpoints"))
    h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0)
    U.same_snapshot(before, U.snapshot(os.path.join(run_dir, "checkpoints")), "checkpoints")
    steps, _ = U.metrics(run_dir)
    check([r["step"] for r in steps] == list(range(1, STEPS + 1)), "steps ran again: %s",
          [r["step"] for r in steps])


def test_file_size_limit_is_reported(h):
    """Under a file-size limit (ulimit -f) that a checkpoint's units file
    passes, the run ends with exit 1 naming the file and EFBIG, leaves no
    temporary file, and a run without the limit then trains to the
    straight run's bits. SIGXFSZ used to end it with no word (exit by the
    signal)."""
    import resource
    steps = {"train.epochs": "10", "train.max_steps": "40", "train.keep_checkpoints": "50"}
    _, straight, _ = train(h, "straight", "vit", **steps)
    units = os.path.getsize(U.unit_files(U.ckpt(straight, 40))[0])
    run_dir = h.path("limited")
    cfg = U.write_config(h, "limited.yaml", config(h, "vit", run_dir, **steps))
    cap = units // 2

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
    p = subprocess.run([h.binary, "train", cfg], cwd=h.dir, env=U.sanitizer_env(), text=True,
                       errors="replace", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, preexec_fn=limit, timeout=240)
    check(p.returncode == 1 and "File too large" in p.stderr and "units-stage0.bin" in p.stderr,
          "under ulimit -f of %d bytes (units files of %d): exit %d (expected 1 naming the file "
          "and EFBIG)\n%s", cap, units, p.returncode, U.tail(p.stderr, 1500))
    left = [os.path.join(d, f) for d, _, fs in os.walk(run_dir) for f in fs if ".tmp." in f]
    check(not left, "temporary files left: %s", left)
    h.run(["train", cfg, "--set", "train.resume=auto"]).expect(0, "the run without the limit")
    a, b = U.unit_files(U.ckpt(straight, 40)), U.unit_files(U.ckpt(run_dir, 40))
    check(len(a) == len(b) and all([r for r in U.unit_records(x) if r[0] != "checkpoint"] ==
                                   [r for r in U.unit_records(y) if r[0] != "checkpoint"]
                                   for x, y in zip(a, b)),
          "step 40's units differ from the straight run's")


def test_cpu_time_limit_stops_with_a_checkpoint(h):
    """The soft CPU-time limit (ulimit -t, a batch system's CPU limit) is
    the kernel's warning before the hard limit's SIGKILL: SIGXCPU stops the
    run as SIGTERM does, a checkpoint of the step and exit 130, and a resume
    goes on from it. The kernel sends SIGXCPU again each CPU second past the
    soft limit; those are not a second stop request (which exits at once,
    unsaved): two SIGXCPU in a row still save. SIGXCPU used to end the run
    by the signal with nothing saved."""
    import resource
    endless = {"train.epochs": "100000", "train.max_steps": "10000000",
               "train.checkpoint_every": "1000000", "model.dim": "32"}
    run_dir = h.path("cpu-limit")
    cfg = U.write_config(h, "cpu-limit.yaml", config(h, "vit", run_dir, **endless))

    def limit():
        resource.setrlimit(resource.RLIMIT_CPU, (1, 120))
    p = subprocess.run([h.binary, "train", cfg], cwd=h.dir, env=U.sanitizer_env(), text=True,
                       errors="replace", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, preexec_fn=limit, timeout=240)
    got = U.checkpoints(run_dir)
    check(p.returncode == 130 and "stopped by signal %d" % signal.SIGXCPU in p.stderr and
          len(got) == 1, "under ulimit -t 1 (hard 120): exit %d, checkpoints %s (expected 130 "
          "and one checkpoint)\n%s", p.returncode, got, U.tail(p.stderr, 1500))
    stopped = int(got[0][len("step_"):]) if got else 0
    h.run(["train", cfg, "--set", "train.resume=auto", "--set",
           "train.max_steps=%d" % (stopped + 2)]).expect(0, "the resume after the CPU limit")
    check(U.checkpoints(run_dir)[-1] == "step_%010d" % (stopped + 2),
          "the resume ended at %s, not step %d", U.checkpoints(run_dir), stopped + 2)
    for gap in (0.0, 0.05):
        run_dir = h.path("xcpu-twice-%g" % gap)
        cfg = U.write_config(h, "xcpu-twice.yaml", config(h, "vit", run_dir, **endless))
        proc = h.popen(["train", cfg])
        wait_for_lines(proc, run_dir, 3)
        proc.send_signal(signal.SIGXCPU)
        time.sleep(gap)
        proc.send_signal(signal.SIGXCPU)
        _, err = proc.communicate(timeout=240)
        check(proc.returncode == 130 and len(U.checkpoints(run_dir)) == 1,
              "SIGXCPU twice, %g s apart: exit %d, checkpoints %s (expected 130 and one)\n%s",
              gap, proc.returncode, U.checkpoints(run_dir), U.tail(err, 1500))


FULL_DISK = r"""
set -u
mount -t tmpfs -o size=64k tmpfs "$MNT" || exit 90
mkdir -p "$RUN/checkpoints" && mount -t tmpfs -o size=16m tmpfs "$RUN/checkpoints" || exit 91
# all but 3 pages of run.dir's 64 KiB: the lock, then a page of metrics.jsonl
head -c 53248 /dev/zero > "$MNT/filler"
"$BIN" train "$CFG" > "$OUT/first.out" 2> "$OUT/first.err"; echo $? > "$OUT/first.rc"
rm "$MNT/filler"
"$BIN" train "$CFG" --set train.resume=auto > "$OUT/second.out" 2> "$OUT/second.err"
echo $? > "$OUT/second.rc"
cp -r "$RUN" "$OUT/run"
"""


NO_INODES = r"""
set -u
for n in 1 3 4; do
  mount -t tmpfs -o size=1m,nr_inodes=$n tmpfs "$MNT" || exit 90
  "$BIN" train "$CFG" > "$OUT/inodes-$n.out" 2> "$OUT/inodes-$n.err"; echo $? > "$OUT/inodes-$n.rc"
  (cd "$MNT" && find . -mindepth 1) > "$OUT/inodes-$n.left"
  umount "$MNT"
done
"""


def test_no_room_to_start_is_not_bad_input(h):
    """A file system with no inode left for run.dir, its metrics.jsonl or
    its lock (tmpfs with 1, 3 and 4 inodes: the root takes one) is the
    machine's trouble, not the user's: exit 1 naming ENOSPC, not 2, and
    none of the directories the run made (run.dir and a parent) left."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "skipped: needs root and unshare(1) for a private tmpfs"
    mnt = h.path("noinodes")
    os.makedirs(mnt)
    cfg = U.write_config(h, "noinodes.yaml", config(h, "vit", os.path.join(mnt, "r", "sub")))
    env = dict(U.sanitizer_env(), MNT=mnt, BIN=h.binary, CFG=cfg, OUT=h.path("."))
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", NO_INODES],
                       env=env, capture_output=True, text=True, timeout=240)
    if p.returncode == 90:
        return "skipped: no tmpfs could be mounted here (%s)" % p.stderr.strip()[-200:]
    check(p.returncode == 0, "the script failed (%d): %s", p.returncode, p.stderr[-2000:])
    for n in (1, 3, 4):
        rc = int(open(h.path("inodes-%d.rc" % n)).read())
        err = open(h.path("inodes-%d.err" % n)).read()
        left = open(h.path("inodes-%d.left" % n)).read().split()
        check(rc == 1 and "No space left on device" in err,
              "%d inodes: exit %d (expected 1, naming ENOSPC)\n%s", n, rc, err[-1500:])
        check(not left, "%d inodes: the failed start left %s", n, left)


def test_full_disk_stops_the_run_with_a_checkpoint(h):
    """A metrics.jsonl that cannot be written (run.dir on a full file system;
    its checkpoints on another) stops the run as a signal does: a checkpoint
    of the step, exit 1 naming the file and the cause. Once there is room,
    the resume drops the line the full disk cut, and the run ends with the
    straight run's bits and a metrics file of whole lines, every step once
    but those whose lines could not be written (the failed one, and the one
    in which the ranks agreed to stop). The same with run.profile_ops, whose
    profile, written as the run stops, cannot be written either: its error
    used to be the only one shown, without the cause or the stop."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "skipped: needs root and unshare(1) for a private tmpfs"
    steps = {"train.epochs": "10", "train.max_steps": "40", "train.keep_checkpoints": "50"}
    _, straight, _ = train(h, "straight", "vit", **steps)
    for ops in ("false", "true"):
        out = h.path("ops-" + ops)
        os.makedirs(out)
        skipped = full_disk_case(h, straight, out, dict(steps, **{"run.profile_ops": ops}))
        if skipped:
            return skipped


def full_disk_case(h, straight, out, steps):
    """test_full_disk_stops_the_run_with_a_checkpoint's run, in out."""
    mnt = os.path.join(out, "mnt")
    os.makedirs(mnt)
    run_dir = os.path.join(mnt, "run")
    cfg = U.write_config(h, os.path.join(out, "full.yaml"), config(h, "vit", run_dir, **steps))
    env = dict(U.sanitizer_env(), MNT=mnt, RUN=run_dir, BIN=h.binary, CFG=cfg, OUT=out)
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", FULL_DISK],
                       env=env, capture_output=True, text=True, timeout=240)
    if p.returncode in (90, 91):
        return "skipped: no tmpfs could be mounted here (%s)" % p.stderr.strip()[-200:]
    check(p.returncode == 0, "the script failed (%d): %s", p.returncode, p.stderr[-2000:])
    rc1, rc2 = (int(open(os.path.join(out, n + ".rc")).read()) for n in ("first", "second"))
    err1, err2 = (open(os.path.join(out, n + ".err")).read() for n in ("first", "second"))
    check(rc1 == 1 and "metrics.jsonl' failed: No space left on device" in err1 and
          "the run stopped after step" in err1,
          "the first run: exit %d (expected 1, the file and ENOSPC named):\n%s", rc1, err1[-2000:])
    stop = int(err1.split("the run stopped after step ")[1].split()[0])
    check(0 < stop < 40, "stopped at step %d", stop)
    check(rc2 == 0 and "resumed at step %d" % stop in err2, "the resume: exit %d\n%s", rc2,
          err2[-2000:])
    resumed = os.path.join(out, "run")
    check(os.path.isfile(os.path.join(U.ckpt(resumed, stop), "manifest")),
          "no checkpoint of step %d: %s", stop, U.checkpoints(resumed))
    sa, _ = U.metrics(straight)  # json.loads of every line: a cut line fails here
    sb, _ = U.metrics(resumed)
    # lost: the line the disk cut, and those of the steps until the ranks
    # agree to stop (the request travels in the next step's combine)
    logged = [r["step"] for r in sb]
    lost = sorted(set(range(1, 41)) - set(logged))
    check(logged == sorted(set(logged)) and set(lost) <= {stop - 1, stop} and
          set(logged) <= set(range(1, 41)),
          "steps logged %s (stopped at %d)", logged, stop)
    by_step = {r["step"]: r for r in sa}
    for r in sb:
        check(r["loss"] == by_step[r["step"]]["loss"], "step %d: loss %r, straight %r",
              r["step"], r["loss"], by_step[r["step"]]["loss"])
    a, b = U.unit_files(U.ckpt(straight, 40)), U.unit_files(U.ckpt(resumed, 40))
    check(len(a) == len(b) and all([r for r in U.unit_records(x) if r[0] != "checkpoint"] ==
                                   [r for r in U.unit_records(y) if r[0] != "checkpoint"]
                                   for x, y in zip(a, b)),
          "step 40's units differ from the straight run's")


def test_resume_counts_frozen_blocks_in_memory(h):
    """A limit the whole model in training does not fit (pipeline.memory_gib,
    one process, fixed micro-batches) is enough for a checkpoint whose blocks
    froze: they keep no gradients or moments, so the resume is not refused."""
    keys = {"model.layers": "4", "train.epochs": "6", "train.max_steps": "30",
            "freeze.policy": "schedule", "freeze.alpha": "0.5", "pipeline.microbatches": "1"}
    cfg, run_dir, _ = train(h, "run", "vit", "train.max_steps=10", **keys)
    # (the whole model is refused up to about 0.0004 GiB, its weights alone
    # up to 0.000218, the resume runs from about 0.00023: its frozen blocks'
    # forward work area and the prefix source's outputs are counted since
    # 0.0002, which then refused the whole model for its weights alone, was
    # chosen)
    limit = "pipeline.memory_gib=0.0003"
    r = h.run(["train", cfg, "--set", "run.dir=" + h.path("fresh"), "--set", limit]).expect(
        2, "a fresh run under the limit")
    r.one_error("more than the 0.0003 GiB one stage may use (pipeline.memory_gib")
    r = h.run(["train", cfg, "--set", "train.resume=auto", "--set", limit]).expect(0, "resume")
    check("resumed at step 10" in r.err, "no resume:\n%s", r.describe())


def test_logs_are_written_only_to_regular_files(h):
    """metrics.jsonl as a FIFO, a link, a hard link or a directory is refused (exit 2,
    the file named) without waiting on it or writing through it; a cut last
    line left by an earlier run is removed, with a note."""
    target = U.write(h.path("target.txt"), "keep\n")
    for name, make in (("fifo", os.mkfifo), ("link", lambda p: os.symlink(target, p)),
                       ("hardlink", lambda p: os.link(target, p)), ("dir", os.mkdir)):
        run_dir = h.path(name)
        os.makedirs(run_dir)
        make(os.path.join(run_dir, "metrics.jsonl"))
        cfg = U.write_config(h, name + ".yaml", config(h, "vit", run_dir))
        r = h.run(["train", cfg], timeout=60).expect(2, name)
        r.one_error(os.path.join(run_dir, "metrics.jsonl"))
    check(open(target).read() == "keep\n", "the link's target was written")
    run_dir = h.path("cut")
    os.makedirs(run_dir)
    # as an earlier run in it left them: its lock, and its log cut short
    U.write(os.path.join(run_dir, "lock"), "pid 1 on a host since 2026-01-01 00:00:00 (job 0)\n")
    U.write(os.path.join(run_dir, "metrics.jsonl"), '{"event": "step", "step": 1}\n{"event": "st')
    cfg = U.write_config(h, "cut.yaml", config(h, "vit", run_dir))
    r = h.run(["train", cfg]).expect(0, "after a cut line")
    check("ended in a line cut short (13 bytes" in r.err, "no note of the cut line\n%s", r.describe())
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        lines = [json.loads(x) for x in f]
    check(lines[0] == {"event": "step", "step": 1} and len(lines) > STEPS,
          "metrics.jsonl after the cut line: %s", lines[:3])


T2 = {"run.threads": "2"}
MB2 = {"pipeline.microbatches": "2"}
CASES = {
    "vit_crash_after_step4_threads1": crash_case("vit", 4, 4),
    "vit_crash_after_step4_threads2": crash_case("vit", 4, 4, **T2),
    "gpt_crash_after_step4_threads1": crash_case("gpt", 4, 4),
    "gpt_crash_after_step4_threads2": crash_case("gpt", 4, 4, **T2),
    "vit_crash_mid_epoch_step6": crash_case("vit", 6, 3),
    "gpt_crash_mid_epoch_step6_threads2": crash_case("gpt", 6, 3, **T2),
    "vit_crash_at_epoch_end_step5": crash_case("vit", 5, 5),
    "vit_microbatches2_crash_after_step6": crash_case("vit", 6, 3, **MB2),
    "gpt_microbatches2_threads2_crash_after_step4": crash_case("gpt", 4, 4, **MB2, **T2),
    "vit_max_steps_4_then_12_constant_lr": max_steps_case(
        "vit", 4, **{"train.schedule": "constant", "train.warmup_steps": "0"}),
    "vit_max_steps_6_then_12_constant_lr": max_steps_case(
        "vit", 6, **{"train.schedule": "constant", "train.warmup_steps": "0"}),
    "gpt_max_steps_6_then_12_constant_lr": max_steps_case(
        "gpt", 6, **{"train.schedule": "constant", "train.warmup_steps": "0"}),
    "vit_microbatches3_crash_after_step4": crash_case("vit", 4, 4, **{
        "pipeline.microbatches": "3"}),
    "more_max_steps_on_resume_keeps_learning": keeps_learning_case("train.max_steps", 4, 12),
    "more_epochs_on_resume_keeps_learning": keeps_learning_case("train.epochs", 2, 3, **{
        "train.max_steps": "0"}),
    "vit_sigint_then_resume": sigint_case("vit", 400),
    "gpt_sigint_then_resume": sigint_case("gpt", 100),
}


def tests():
    out = []
    for name, t in CASES.items():
        t.__name__ = "test_" + name
        out.append(t)
    return [test_straight_runs_are_reproducible, test_resume_when_already_done,
            test_stop_signal_before_main, test_signal_during_a_step_stops_after_that_step,
            test_a_stop_signal_sent_twice_at_once_is_one_stop,
            test_a_stop_signal_after_the_last_step_stops_nothing,
            test_lock_is_never_written_through, test_killed_writes_of_run_files_are_swept,
            test_full_disk_stops_the_run_with_a_checkpoint, test_checkpoints_read_only_mid_run,
            test_no_room_to_start_is_not_bad_input,
            test_file_size_limit_is_reported,
            test_cpu_time_limit_stops_with_a_checkpoint,
            test_logs_are_written_only_to_regular_files,
            test_resume_counts_frozen_blocks_in_memory] + out


if __name__ == "__main__":
    sys.exit(U.main(tests(), sys.argv, workers=3))
