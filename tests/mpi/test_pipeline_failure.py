#!/usr/bin/env python3
"""A rank that dies, errors or stops answering mid-step ends the whole job
quickly, with messages naming the failed rank and the schedule step, and
leaves no partial checkpoint.

Each case runs the demo ViT with K = 4 (or 2) stages and injects a fault with
PIPETRAIN_TEST_FAULT (launch/fault.h) at step 5; the job must exit non-zero
within 60 s. The last case kills a rank while a checkpoint is being written:
the directory of that step must not count as a checkpoint, and resuming must
continue from the previous one and still reproduce an uninterrupted run.

Most of a case's time is a wait for a fault's timeout, with every rank
asleep, so the cases run three at a time (PT_TEST_WORKERS); each case's
lines are printed together, in the order the cases are listed. The cases
that look for cache segments left in /dev/shm, or stop a rank at a moment
of its own, run alone afterwards.

usage: test_pipeline_failure.py PIPETRAIN MPIEXEC
PT_TEST_ONLY=SUBSTRING runs the cases whose name holds it."""
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import threading
import time
import sys
import tempfile
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

CONFIG = "configs/vit_fmnist.yaml"
# far below the 600 s a hang would take by default (run.timeout_s), and
# above what a loaded 2-core machine needs to read the data and reach step 5
# (29 s seen once for the hang case, beside another test's processes)
LIMIT_S = 60
# a freeze decision at step 3, and none after in these runs: a re-plan there
REPLAN_AT_3 = {"freeze.policy": "schedule", "freeze.unit": "step", "freeze.start": 3, "freeze.every": 100}
failures = []
_case = threading.local()  # .lines: the running case's output, printed when it ends


def say(text):
    lines = getattr(_case, "lines", None)
    if lines is None:
        print(text, flush=True)
    else:
        lines.append(text)


def expect(cond, what):
    say("  %s: %s" % ("ok" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def side_by_side(cases, workers=None):
    """Runs the callables in `cases` on `workers` threads; each one's lines
    are printed together when it and those before it in the list ended."""
    workers = workers or int(os.environ.get("PT_TEST_WORKERS", "3"))

    def one(case):
        _case.lines = []
        try:
            case()
        except SystemExit as e:  # tools.run(check=True) on a failed command
            expect(False, "%s: %s" % (case.__name__, e))
        except Exception:  # a bug in the test itself: report it as a failure
            expect(False, "%s: %s" % (case.__name__, traceback.format_exc()))
        lines, _case.lines = _case.lines, None
        return lines

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for lines in pool.map(one, cases):
            if lines:
                print("\n".join(lines), flush=True)


def named_in_no_wait(out):
    """The ranks the job's error lines name as in no wait."""
    named = set()
    for who in re.findall(r"; ranks? ([\d, ]+)(?: and \d+ more)? (?:is|are) in no wait", out):
        named |= {int(r) for r in who.split(", ")}
    return named


def rank_of(pid):
    """The world rank of a running rank's process (Open MPI's environment)."""
    with open("/proc/%d/environ" % pid, "rb") as f:
        env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
    return int(env.get(b"OMPI_COMM_WORLD_RANK", b"-1"))


def end_job(p, stopped, timeout):
    """The job's output once it ended (killed after timeout s), the stopped
    rank's process (or None) continued and killed."""
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    for sig in (signal.SIGCONT, signal.SIGKILL) if stopped else ():
        try:
            os.kill(stopped, sig)
        except ProcessLookupError:
            pass
    return out


def fault_case(tools, work, name, fault, must_say, ranks=4, extra=None, want_rc=None):
    run_dir = os.path.join(work, name)
    args = ["train", CONFIG] + h.sets(run__dir=run_dir, train__max_steps=20, train__eval_examples=64,
                                      pipeline__stages=ranks, pipeline__microbatches=4,
                                      run__threads=1, **(extra or {}))
    rc, secs, out = tools.run(ranks, args, env={"PIPETRAIN_TEST_FAULT": fault}, timeout=120, check=False)
    say("%s (PIPETRAIN_TEST_FAULT=%s): exit %d after %.1f s" % (name, fault, rc, secs))
    expect(rc != 0 if want_rc is None else rc == want_rc,
           "%s: exit %s" % (name, "non-zero" if want_rc is None else want_rc))
    expect(secs < LIMIT_S, "%s: every rank gone within %d s" % (name, LIMIT_S))
    for pattern in must_say:
        expect(re.search(pattern, out) is not None, "%s: output matches /%s/" % (name, pattern))
    if fault.split(":")[2] == "hang":
        # the ranks that timed out asked the others where they are: the
        # hung rank is named as in no wait, and no rank that was waiting
        named = named_in_no_wait(out)
        expect(named == {int(fault.split(":")[0])}, "%s: the ranks named as in no wait, %s, are the "
               "hung one\n%s" % (name, sorted(named), out[-1500:]))
    return run_dir, out


def diverged_case(tools, work, name, args):
    """A run that diverges in a 2-stage pipeline (lr and weight decay 10, a
    checkpoint every step) stops with every rank naming the step, exit 2,
    and leaves no checkpoint of non-finite numbers: the newest one
    evaluates and exports (both refuse a NaN or Inf)."""
    run_dir = os.path.join(work, name)
    args = args + h.sets(run__dir=run_dir, run__threads=1, train__eval_examples=16)
    rc, secs, out = tools.run(2, ["train"] + args + h.sets(
        pipeline__stages=2, pipeline__microbatches=2, train__lr=10, train__weight_decay=10,
        train__warmup_steps=0, train__min_lr=0, train__checkpoint_every=1, train__keep_checkpoints=100,
        train__max_steps=40), timeout=300, check=False)
    say("%s: exit %d after %.1f s" % (name, rc, secs))
    expect(rc == 2, "%s: exit 2" % name)
    said = re.findall(r"rank (\d): error: the (?:loss|gradient) became (?:NaN|Inf|-Inf) at step (\d+)", out)
    expect(sorted(r for r, _ in said) == ["0", "1"] and len({st for _, st in said}) == 1,
           "%s: both ranks name the same step (%s)\n%s" % (name, said, out[-1500:]))
    # both found it in the same combined numbers: they end without aborting
    # (two ranks calling MPI_Abort at once could crash mpirun)
    expect("MPI_ABORT" not in out, "%s: no rank aborted the job\n%s" % (name, out[-1500:]))
    latest = h.latest_checkpoint(run_dir)
    rc_eval, _, out_eval = tools.run(1, ["eval"] + args + ["--checkpoint", latest], timeout=120, check=False)
    expect(rc_eval == 0, "%s: the newest checkpoint (%s) evaluates\n%s" % (name, latest, out_eval[-800:]))
    weights = tools.export(latest, os.path.join(work, name + ".safetensors"))
    expect(all(np.isfinite(w).all() for w in weights.values()), "%s: exported weights finite" % name)


def cases(tools, work):
    """The cases that may run side by side, in the order their lines print."""
    dp = {"pipeline.stages": 2, "pipeline.replicas": 2}  # rank 3 is replica 1's stage 1
    out = []

    def case(f):
        out.append(f)
        return f

    @case
    def diverged_vit():
        diverged_case(tools, work, "diverged-vit", [CONFIG, "--set", "train.batch=32"])

    @case
    def diverged_bert():
        data, vocab = h.bert_data(work, 64, 16, 4)
        bert = os.path.join(work, "bert.yaml")
        with open(bert, "w") as f:
            f.write("model: {kind: bert, dim: 16, layers: 2, heads: 2, context: 17, positions: 20, "
                    "classes: 3, vocab: %d, dropout: 0.1}\ndata: {%s}\ntrain: {batch: 8, epochs: 10}\n"
                    % (vocab, data))
        diverged_case(tools, work, "diverged-bert", [bert])

    for name, fault, must_say, extra in (
            ("crash", "2:5:crash", [r"rank 2\b.*(signal 9|Killed|exited)", r"step 5, replica \d, stage \d"],
             None),
            ("error", "1:5:error", [r"rank 1: error: injected fault at step 5", r"step 5, replica \d, stage \d"],
             None),
            ("hang", "3:5:hang", [r"no progress for 5 s waiting for stage \d", r"step 5, replica \d, stage \d"],
             {"run.timeout_s": 5}),
            # a stage that fails in an evaluation ends the job at once, naming
            # its error: the stage after it waited for its activations until
            # run.timeout_s (4 stages, rank 1 failing in the last evaluation)
            ("error-in-eval", "1:20:error:eval", [r"rank 1: error: injected fault at step 20 \(eval\)"], None),
            # the same in a replica: K = 2 stages x D = 2 replicas
            ("replica-crash", "3:5:crash", [r"rank 3\b.*(signal 9|Killed|exited)", r"step 5, replica 0, stage \d"],
             dp),
            ("replica-error", "2:5:error", [r"rank 2: error: injected fault at step 5", r"replica \d, stage \d"],
             dp),
            ("replica-hang", "3:5:hang", [r"no progress for 5 s", r"replica 1, stage 0"],
             dict(dp, **{"run.timeout_s": 5})),
            # 3 replicas on 6 ranks: the hung rank is outside most waits'
            # groups, and the ranks that gave up first answer no more
            ("replica-hang-6-ranks", "5:4:hang", [r"no progress for 5 s"],
             {"pipeline.stages": 2, "pipeline.replicas": 3, "run.timeout_s": 5})):
        def four_ranks(name=name, fault=fault, must_say=must_say, extra=extra):
            fault_case(tools, work, name, fault, must_say, extra=extra,
                       ranks=6 if name.endswith("6-ranks") else 4)
        four_ranks.__name__ = name
        case(four_ranks)

    # where no step is running, the timeout says what the job was doing:
    # starting up, or the last evaluation after the last step
    @case
    def hang_at_start_up():
        fault_case(tools, work, "hang-at-start-up", "1:0:hang:start-up",
                   [r"rank 0: error: no progress for 5 s waiting for an all-reduce while starting up"],
                   ranks=2, extra={"run.timeout_s": 5})

    @case
    def hang_after_last_step():
        fault_case(tools, work, "hang-after-last-step", "1:20:hang:finished",
                   [r"rank 0: error: no progress for 5 s waiting for [a-z -]+ while at step 20: "
                    r"evaluating the test split"], ranks=2, extra={"run.timeout_s": 5})

    # the same where the last step ends an epoch, so its evaluation and
    # checkpoint came before: no collective is left in the run, and the
    # others waited in MPI_Finalize, which has no deadline, for good
    @case
    def hang_after_last_epoch():
        fault_case(tools, work, "hang-after-last-epoch", "1:16:hang:finished",
                   [r"rank 0: error: no progress for 5 s waiting for a barrier while ending the job"],
                   ranks=2, extra={"run.timeout_s": 5, "train.max_steps": 0, "train.epochs": 2,
                                   "train.eval_every": 1, "data.kind": "synthetic_images",
                                   "data.synthetic_examples": 64, "train.batch": 8})

    # a rank that cannot build its stage (its memory ran out) ends the job
    # at once, naming its error, at the start and at a re-plan: the
    # others waited for it until run.timeout_s, at the start in a
    # mismatched collective, at a re-plan in the unit moves
    for name, fault, extra in (
            ("stage-error-at-start-up", "1:0:error:stage", {}),
            ("stage-error-at-replan", "1:3:error:stage", REPLAN_AT_3)):
        def stage_error(name=name, fault=fault, extra=extra):
            rc_out = fault_case(tools, work, name, fault,
                                [r"rank 1: error: .*injected fault at step %s \(stage\)" % fault[2]],
                                extra=dict(extra, **{"run.timeout_s": 30}))
            expect("no progress" not in rc_out[1] and "TRUNCATE" not in rc_out[1],
                   "%s: no rank waits for the failed one until run.timeout_s" % name)
        stage_error.__name__ = name
        case(stage_error)

    # `eval` on 2 replicas: rank 0 failing in a round of it agreed with the
    # others' round by the command's next agreement, so it left without
    # ending the job and rank 1 waited until run.timeout_s
    @case
    def eval_error_in_round():
        run_dir = os.path.join(work, "eval-error")
        tools.run(1, ["train", CONFIG] + h.sets(run__dir=run_dir, train__max_steps=2,
                                                 train__eval_examples=64, run__threads=1))
        rc, secs, out = tools.run(2, ["eval", CONFIG] + h.sets(
            run__dir=run_dir, pipeline__stages=1, pipeline__replicas=2, run__timeout_s=30,
            run__threads=1), env={"PIPETRAIN_TEST_FAULT": "0:0:error:eval"}, timeout=120, check=False)
        say("eval-error-in-round: exit %d after %.1f s" % (rc, secs))
        expect(rc != 0 and "rank 0: error: injected fault at step 0 (eval)" in out and
               "no progress" not in out and secs < 30,
               "eval-error-in-round: exit non-zero before run.timeout_s (30 s), rank 0's message, "
               "no rank waiting for it\n%s" % out[-1500:])

    # a save after an evaluation in the same step names the save, not the
    # evaluation before it
    @case
    def hang_in_save_after_eval():
        _, out = fault_case(tools, work, "hang-in-save-after-eval", "1:2:hang:checkpoint",
                            [r"rank 0: error: saving checkpoint \S*step_0000000002: no progress for 5 s"],
                            ranks=2, extra={"run.timeout_s": 5, "train.eval_every_steps": 2,
                                            "train.checkpoint_every": 2})
        expect("evaluating" not in "".join(l for l in out.splitlines() if "no progress" in l),
               "hang-in-save-after-eval: the timeout does not name the evaluation before the save")

    # a save that takes longer than run.timeout_s on one rank (8 s of
    # writes that go on, against 3 s): the others, waiting in the save's
    # agreement, find it busy and wait on, where they used to give up on it
    # after run.timeout_s; then the same rank stops answering once its
    # writes are done, and the job ends within two more run.timeout_s
    slow = {"run.timeout_s": 3, "train.checkpoint_every": 2, "train.max_steps": 4}

    @case
    def slow_save():
        run_dir = os.path.join(work, "slow-save")
        args = ["train", CONFIG] + h.sets(run__dir=run_dir, train__eval_examples=64, pipeline__stages=2,
                                          run__threads=1, **{k.replace(".", "__"): v for k, v in slow.items()})
        rc, secs, out = tools.run(2, args, env={"PIPETRAIN_TEST_FAULT": "1:2:slow:checkpoint-writing"},
                                  timeout=120, check=False)
        say("slow-save: exit %d after %.1f s" % (rc, secs))
        expect(rc == 0 and secs > 8, "slow-save: trained to the end through a save of 8 s under "
               "run.timeout_s 3\n%s" % out[-1500:])
        expect(os.path.exists(os.path.join(run_dir, "checkpoints", "step_0000000002", "manifest")),
               "slow-save: the slow save is a checkpoint")

    @case
    def slow_save_then_hang():
        _, out = fault_case(tools, work, "slow-save-then-hang", "1:2:slow:checkpoint-writing,1:2:hang:checkpoint",
                            [r"rank 0: error: saving checkpoint \S*step_0000000002: no progress for 3 s",
                             r"; rank 1 is in no wait"], ranks=2, extra=slow)

    # after a re-plan (a freeze decision at step 3 rebuilds the stage
    # executors) the messages still give the run's step, not a count
    # that started again at the re-plan
    @case
    def hang_after_replan():
        _, out = fault_case(tools, work, "hang-after-replan", "1:5:hang",
                            [r"step 5, replica \d, stage \d", r"re-plan|frozen"],
                            extra=dict(REPLAN_AT_3, **{"run.timeout_s": 5}))
        expect(re.search(r"step [1-4], replica \d, stage \d", out) is None,
               "hang-after-replan: no message gives an executor's own step count")

    @case
    def replica_crash_in_checkpoint():
        run_dir, _ = fault_case(tools, work, "replica-crash-in-checkpoint", "3:8:crash:checkpoint",
                                [r"rank 3\b.*(signal 9|Killed|exited)"],
                                extra=dict(dp, **{"train.checkpoint_every": 4, "train.max_steps": 12}))
        expect(not os.path.exists(os.path.join(run_dir, "checkpoints", "step_0000000008", "manifest")),
               "replicas: no manifest for the interrupted save")
        expect(h.latest_checkpoint(run_dir).endswith("step_0000000004"), "replicas: newest checkpoint is step 4")

    # a save that fails on every rank (a full disk under each rank's
    # unit file), or on one, after the ranks agreed on it: the ranks that
    # failed say why, exit 1, and no rank aborts the job (several ranks
    # calling MPI_Abort at once could crash mpirun itself)
    for who, speakers in (("-1", ["0", "1", "2", "3"]), ("2", ["2"])):
        def save_fails(who=who, speakers=speakers):
            name = "save-fails-%s" % who.replace("-", "all")
            run_dir, out = fault_case(tools, work, name, who + ":8:error:checkpoint",
                                      [r"injected fault at step 8 \(checkpoint\)"],
                                      extra=dict(dp, **{"train.checkpoint_every": 4,
                                                        "train.max_steps": 12}), want_rc=1)
            said = sorted(set(re.findall(r"rank (\d): error: saving checkpoint \S*step_0000000008: "
                                         r"injected fault at step 8", out)))
            expect(said == speakers, "%s: ranks %s name the failed save, expected %s"
                   % (name, said, speakers))
            expect("MPI_ABORT" not in out and "ORTE_ERROR_LOG" not in out and
                   re.search(r"Segmentation|signal 11|core dumped", out) is None,
                   "%s: nothing aborted or crashed\n%s" % (name, out[-1500:]))
            expect(h.latest_checkpoint(run_dir).endswith("step_0000000004"),
                   "%s: newest checkpoint is step 4" % name)
        save_fails.__name__ = "save_fails_" + who
        case(save_fails)

    # a rank whose process groups cannot be made at the start (NCCL failing
    # on one node), with the cache on: every rank learns of it before the
    # cache's collectives (rank 0 waited in them until run.timeout_s)
    for who in ("1", "0"):
        def place_fails(who=who):
            _, out = fault_case(tools, work, "place-fails-%s" % who, who + ":0:error:place",
                                [r"rank %s: error: injected fault at step 0 \(place\)" % who], ranks=2,
                                extra={"run.timeout_s": 40, "cache.enabled": "true",
                                       "freeze.policy": "schedule"})
            expect("no progress for" not in out, "place-fails-%s: a rank waited for the failed one "
                   "until run.timeout_s\n%s" % (who, out[-1500:]))
        place_fails.__name__ = "place_fails_" + who
        case(place_fails)

    # a rank that stops answering on its way to a layout's process groups,
    # at the start or at a re-plan: the others, which waited in
    # MPI_Comm_split with no deadline for good, stop after run.timeout_s
    for name, fault, extra in (
            ("groups-hang-start", "1:0:hang:groups", {}),
            ("groups-hang-replan", "1:3:hang:groups", REPLAN_AT_3)):
        def groups_hang(name=name, fault=fault, extra=extra):
            fault_case(tools, work, name, fault, [r"no progress for 5 s waiting for every rank, to "
                                                  r"make a process group"], ranks=2,
                       extra=dict(extra, **{"run.timeout_s": 5}))
        groups_hang.__name__ = name
        case(groups_hang)

    # a rank stopped (SIGSTOP) before MPI had started in it: the others
    # waited in MPI_Init_thread, which has no deadline, for good. Now they
    # end the job after run.timeout_s (at least 20 s for such a call), each
    # saying what it waited for. The stop comes from a wrapper the launcher
    # starts in the rank's place, before it runs pipetrain.
    for ranks, stop in ((2, 1), (3, 0)):
        def stopped_before_start(ranks=ranks, stop=stop):
            name = "stopped-before-start-%d-of-%d" % (stop, ranks)
            wrapper = os.path.join(work, name + ".sh")
            with open(wrapper, "w") as f:
                f.write('#!/bin/sh\nif [ "$OMPI_COMM_WORLD_RANK" = %d ]; then kill -STOP $$; fi\nexec "$@"\n'
                        % stop)
            os.chmod(wrapper, 0o755)
            cmd = tools.command(ranks, ["train", CONFIG] + h.sets(
                run__dir=os.path.join(work, name), run__threads=1, run__timeout_s=5, train__max_steps=2))
            cmd.insert(cmd.index(tools.pipetrain), wrapper)
            start = time.time()
            try:
                r = subprocess.run(cmd, cwd=h.ROOT, env=h.ENV, capture_output=True, text=True, timeout=120)
                rc, out = r.returncode, r.stdout + r.stderr
            except subprocess.TimeoutExpired as e:
                rc, out = None, "%s%s" % (e.stdout or "", e.stderr or "")
            secs = time.time() - start
            left = subprocess.run(["pgrep", "-f", wrapper], capture_output=True, text=True).stdout.split()
            for pid in left:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.kill(int(pid), sig)
                    except (ProcessLookupError, ValueError):
                        pass
            say("%s: exit %s after %.1f s" % (name, rc, secs))
            expect(rc not in (None, 0) and secs < LIMIT_S, "%s: exit non-zero within %d s" % (name, LIMIT_S))
            said = re.findall(r"rank (\d+): error: no progress for 20 s waiting for every rank to start MPI "
                              r"\(MPI_Init_thread", out)
            # the first to say it ends the job: the others may be gone before they do
            expect(len(said) >= 1, "%s: a waiting rank says it waited 20 s for MPI's start (%s)\n%s"
                   % (name, said, out[-1500:]))
            expect(not left, "%s: the stopped rank ended with the job (left: %s)" % (name, left))
        stopped_before_start.__name__ = "stopped_before_start_%d_of_%d" % (stop, ranks)
        case(stopped_before_start)

    # the same start, but the waiting rank is itself stopped for longer
    # than its limit (as when a job is suspended), then both go on: time in
    # which a process did not run does not count against its start, so the
    # job trains to its end instead of the waiting rank giving up the
    # moment it runs again
    @case
    def suspended_at_start():
        name = "suspended-at-start"
        wrapper = os.path.join(work, name + ".sh")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nif [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then kill -STOP $$; fi\nexec "$@"\n')
        os.chmod(wrapper, 0o755)
        cmd = tools.command(2, ["train", CONFIG] + h.sets(
            run__dir=os.path.join(work, name), run__threads=1, run__timeout_s=5, train__max_steps=2,
            train__eval_examples=64))
        cmd.insert(cmd.index(tools.pipetrain), wrapper)
        start = time.time()
        p = subprocess.Popen(cmd, cwd=h.ROOT, env=h.ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        waiting, held = None, None  # rank 0's pipetrain, rank 1's stopped wrapper
        while time.time() - start < 30 and (waiting is None or held is None) and p.poll() is None:
            time.sleep(0.2)
            for pid in subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                                      text=True).stdout.split():
                try:
                    rank = rank_of(int(pid))
                    with open("/proc/%s/stat" % pid) as f:
                        stopped = f.read().rsplit(")", 1)[1].split()[0] == "T"
                except (OSError, ValueError):
                    continue
                if rank == 0:
                    waiting = int(pid)
                elif rank == 1 and stopped:
                    held = int(pid)
        suspended = waiting is not None and held is not None
        if suspended:
            time.sleep(1.0)  # into MPI's start
            os.kill(waiting, signal.SIGSTOP)
            time.sleep(25.0)  # past the 20 s the start is given
            os.kill(waiting, signal.SIGCONT)
            time.sleep(0.5)
            os.kill(held, signal.SIGCONT)
        out = end_job(p, held, 120)
        secs = time.time() - start
        say("%s: exit %s after %.1f s" % (name, p.returncode, secs))
        expect(suspended, "%s: found rank 0 and the stopped rank 1" % name)
        expect(p.returncode == 0 and "no progress" not in out,
               "%s: the job trained to its end once both went on\n%s" % (name, out[-1500:]))

    # a rank that stops answering after the job's last wait, before MPI
    # ends: the other waited in MPI_Finalize, which has no deadline
    @case
    def hang_at_end():
        name = "hang-at-end"
        args = ["train", CONFIG] + h.sets(run__dir=os.path.join(work, name), run__threads=1, run__timeout_s=5,
                                          train__max_steps=2, train__eval_examples=64, pipeline__stages=2)
        rc, secs, out = tools.run(2, args, env={"PIPETRAIN_TEST_FAULT": "1:0:hang:ended"}, timeout=120,
                                  check=False)
        say("%s: exit %d after %.1f s" % (name, rc, secs))
        expect(rc != 0 and secs < LIMIT_S, "%s: exit non-zero within %d s" % (name, LIMIT_S))
        expect(re.search(r"rank 0: error: no progress for 20 s waiting for every rank to end MPI "
                         r"\(MPI_Finalize", out) is not None,
               "%s: rank 0 says it waited 20 s for MPI's end\n%s" % (name, out[-1500:]))
        expect(os.path.exists(os.path.join(work, name, "checkpoints", "step_0000000002", "manifest")),
               "%s: the run's last checkpoint was saved before" % name)

    # a job that failed on bad input (status 2 on every rank) and then hangs
    # at MPI's end keeps its status: the hang is not what went wrong first
    @case
    def failed_then_hang_at_end():
        name = "failed-then-hang-at-end"
        args = ["train", CONFIG] + h.sets(run__dir=os.path.join(work, name), run__threads=1, run__timeout_s=5,
                                          data__train_images=CONFIG)  # not an IDX file
        rc, secs, out = tools.run(2, args, env={"PIPETRAIN_TEST_FAULT": "1:0:hang:ended"}, timeout=120,
                                  check=False)
        say("%s: exit %d after %.1f s" % (name, rc, secs))
        expect(rc == 2 and secs < LIMIT_S, "%s: exit 2 within %d s" % (name, LIMIT_S))
        expect("data.train_images" in out and "bad magic" in out and re.search(r"rank 0: error: no progress for 20 s waiting for every "
                                               r"rank to end MPI \(MPI_Finalize", out) is not None,
               "%s: the key named, and rank 0 says it waited 20 s for MPI's end\n%s" % (name, out[-1500:]))

    # run.timeout_s far below a message's time: waits time out anywhere
    # (setup, link measurement, steps). The rank that gave up used to go
    # on calling collectives while MPI still held its abandoned request
    # (crashes in the next one, hangs), or exit saying nothing.
    for i, (limit, extra) in enumerate([(1e-9, {}), (1e-4, {}), (1e-3, {}), (3e-3, {}),
                                        (1e-3, dp), (3e-3, dp), (1e-9, dp), (1e-4, {})]):
        def tiny_timeout(i=i, limit=limit, extra=extra):
            name = "tiny-timeout-%d" % i
            ranks = 4 if extra else 2
            keys = dict(run__dir=os.path.join(work, name), train__max_steps=20, train__eval_examples=64,
                        pipeline__stages=2, pipeline__microbatches=4, run__threads=1,
                        run__timeout_s=limit)
            keys.update({k.replace(".", "__"): v for k, v in extra.items()})
            args = ["train", CONFIG] + h.sets(**keys)
            rc, secs, out = tools.run(ranks, args, timeout=120, check=False)
            say("%s (run.timeout_s %g, %d ranks): exit %d after %.1f s" % (name, limit, ranks, rc, secs))
            crashed = re.search(r"Segmentation|signal 11|signal 6|core dumped", out)
            expect(rc == 0 or (rc != 0 and "no progress for" in out and not crashed and secs < LIMIT_S),
                   "%s: trained, or every rank gone within %d s with a message and no crash" % (name, LIMIT_S))
        tiny_timeout.__name__ = "tiny_timeout_%d" % i
        case(tiny_timeout)

    # killed while writing the step-8 checkpoint: steps 4 is the last checkpoint
    @case
    def crash_in_checkpoint():
        ckpt = dict(train__max_steps=12, train__checkpoint_every=4, train__eval_examples=64,
                    pipeline__stages=2, pipeline__microbatches=4, run__threads=1)
        run_dir, out = fault_case(tools, work, "crash-in-checkpoint", "1:8:crash:checkpoint",
                                  [r"rank 1\b.*(signal 9|Killed|exited)"], ranks=2,
                                  extra={"train.checkpoint_every": 4, "train.max_steps": 12})
        step8 = os.path.join(run_dir, "checkpoints", "step_0000000008")
        expect(not os.path.exists(os.path.join(step8, "manifest")), "no manifest for the interrupted save")
        expect(h.latest_checkpoint(run_dir).endswith("step_0000000004"), "newest checkpoint is step 4")
        rc, _, out = tools.run(2, ["train", CONFIG] + h.sets(run__dir=run_dir, train__resume="auto", **ckpt))
        expect("resumed at step 4" in out, "resume starts from step 4")
        straight = os.path.join(work, "straight")
        tools.run(1, ["train", CONFIG] + h.sets(run__dir=straight, **dict(ckpt, pipeline__stages=1)))
        a = tools.export(h.latest_checkpoint(run_dir), run_dir + ".safetensors")
        b = tools.export(h.latest_checkpoint(straight), straight + ".safetensors")
        expect(all(np.array_equal(a[k], b[k]) for k in b), "resumed run's weights equal an uninterrupted run's")

    return out


def alone(tools, work):
    """The cases that run one at a time, after the others: they look for
    cache segments any run left, or stop a rank at a moment of its work."""
    # a stop signal at start-up, after a node's first rank made the
    # activation cache and before the others attached: the job stops
    # after its first step with a checkpoint, exit 130, as a stop during
    # start-up does without the cache, every rank gone and the segment
    # with it (the names are held until every rank attached). A rank
    # whose attach failed used to end with exit 1, or enter other
    # collectives than the rest and hang; then the job stopped before
    # training, with no checkpoint and an error line.
    before = h.our_segments()
    for who in ("-1", "0", "1"):
        name = "stop-at-cache-open-%s" % who.replace("-", "all")
        args = ["train", CONFIG] + h.sets(run__dir=os.path.join(work, name), train__max_steps=4,
                                          train__eval_examples=64, pipeline__stages=2,
                                          run__threads=1, cache__enabled="true",
                                          freeze__policy="schedule")
        rc, secs, out = tools.run(2, args, env={"PIPETRAIN_TEST_FAULT": who + ":0:stop:cache-open"},
                                  timeout=120, check=False)
        say("%s: exit %d after %.1f s" % (name, rc, secs))
        expect(rc == 130 and secs < LIMIT_S, "%s: exit 130 within %d s\n%s" % (name, LIMIT_S, out[-1500:]))
        saved = os.path.join(work, name, "checkpoints", "step_0000000001", "manifest")
        expect(os.path.exists(saved) and "error:" not in out,
               "%s: stopped after step 1 with its checkpoint, no error line\n%s"
               % (name, out[-1500:]))
    left = h.segments_left(before)
    expect(not left, "stops at the cache's opening: no cache segment left in /dev/shm (%s)" % left)
    # the node's first rank stops answering right after creating the
    # cache, before the others attach: they time out and end the job,
    # and take the segment's name off (it stayed until the next start)
    before = h.our_segments()
    _, out = fault_case(tools, work, "hang-at-cache-open", "0:0:hang:cache-open",
                        [r"rank 1: error: no progress for 3 s"], ranks=2,
                        extra={"run.timeout_s": 3, "cache.enabled": "true",
                               "freeze.policy": "schedule"})
    # the launcher kills the stalled rank: a name is left only once it is gone
    for _ in range(150):
        if not any(h.alive(pid) for n, pid in h.our_segments().items() if n not in before):
            break
        time.sleep(0.1)
    left = h.segments_left(before)
    expect(not left, "hang-at-cache-open: no cache segment left in /dev/shm (%s)" % left)

    # a rank of an evaluation that stops answering (SIGSTOP): the ranks
    # that wait for it say what they waited for and for how long; the
    # agreement after it used to replace that with a generic line. Rank 1
    # stops itself in the evaluation's first round (the test hook): a
    # SIGSTOP from here a second after the start landed in the start-up's
    # collectives on a loaded machine, where MPI's own wait is longer
    tools.run(1, ["train", CONFIG] + h.sets(run__dir=os.path.join(work, "to-eval"), train__max_steps=2,
                                            train__eval_examples=64, run__threads=1))
    cmd = tools.command(2, ["eval", CONFIG] + h.sets(run__dir=os.path.join(work, "to-eval"),
                                                     run__threads=1, run__timeout_s=3,
                                                     pipeline__stages=2, train__eval_examples=0))
    start = time.time()
    p = subprocess.Popen(cmd, cwd=h.ROOT, env=dict(h.ENV, PIPETRAIN_TEST_FAULT="1:*:sigstop:eval"),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stopped = stopped_rank = None
    while time.time() - start < 60 and stopped is None and p.poll() is None:
        time.sleep(0.1)
        got = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        for pid in (int(x) for x in got):
            try:
                with open("/proc/%d/stat" % pid) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                if state == "T" and rank_of(pid) == 1:
                    stopped, stopped_rank = pid, 1
            except (ProcessLookupError, FileNotFoundError, IndexError):
                pass
    out = end_job(p, stopped, 60)
    secs = time.time() - start
    say("eval with a stopped rank: exit %d after %.1f s" % (p.returncode, secs))
    expect(stopped is not None, "eval with a stopped rank: found the ranks")
    if p.returncode != 0:  # a run that finished before the stop proves nothing either way
        expect("no progress for 3 s" in out, "eval with a stopped rank: the waiting rank says "
               "what it waited for\n" + out[-1500:])
        expect(named_in_no_wait(out) == {stopped_rank}, "eval with a stopped rank: the waiting rank names "
               "rank %s, the stopped one, and only it, as in no wait\n%s" % (stopped_rank, out[-1500:]))


def stopped_in_training(tools, work):
    """A rank SIGSTOPped while 2 pipelines of 2 stages train: the ranks name
    it, and only it, as in no wait. Open MPI sends SIGCONT to every rank as
    it ends the job; the stopped rank then found its own wait's deadline
    past and named the others, gone or going by then, as in no wait; it now
    sees that it did not run and says so instead."""
    run_dir = os.path.join(work, "stopped-in-training")
    cmd = tools.command(4, ["train", CONFIG] + h.sets(run__dir=run_dir, run__threads=1, run__timeout_s=3,
                                                      pipeline__stages=2, pipeline__replicas=2,
                                                      train__max_steps=400, train__eval_examples=64))
    start = time.time()
    p = subprocess.Popen(cmd, cwd=h.ROOT, env=h.ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stopped, stopped_rank = None, None
    while time.time() - start < 60 and p.poll() is None and stopped is None:
        time.sleep(0.2)
        if not os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
            continue  # not training yet
        time.sleep(1.0)
        for pid in subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split():
            try:
                if rank_of(int(pid)) == 2:
                    os.kill(int(pid), signal.SIGSTOP)
                    stopped, stopped_rank = int(pid), 2
            except (OSError, ValueError):
                pass
    out = end_job(p, stopped, 90)
    say("training with a stopped rank: exit %d after %.1f s" % (p.returncode, time.time() - start))
    expect(stopped is not None and p.returncode != 0, "training with a stopped rank: rank 2 stopped, "
           "the job ended (%s)" % p.returncode)
    expect(named_in_no_wait(out) == {stopped_rank}, "training with a stopped rank: rank 2, and only it, "
           "named as in no wait (%s)\n%s" % (sorted(named_in_no_wait(out)), out[-2500:]))


def long_step_with_an_idle_rank(tools, work):
    """A step far longer than run.timeout_s (4 s: the start-up's waits
    stay well within it on a loaded machine; 2 s did not, once, beside
    other tests) on 2 ranks where the layout
    leaves rank 1 idle (K = 1 x D = 1): rank 1 waits in the collective that
    ends the step for all of rank 0's work, while each of rank 0's actions
    is far shorter than the limit. Rank 1 gave up after run.timeout_s
    (rank 0, computing, answers no question) and ended a healthy job; now
    rank 0's progress counts, and the job trains to its end. And with rank
    0 stopped (SIGSTOP) in the middle of such a step, rank 1 still names
    it, and only it, as in no wait."""
    keys = dict(run__threads=1, run__timeout_s=4, model__dim=96, model__layers=6, model__heads=4,
                model__patch=4, data__kind="synthetic_images", data__synthetic_examples=4096,
                train__batch=4096, train__epochs=1, train__max_steps=1, train__eval_examples=8,
                pipeline__stages=1, pipeline__replicas=1, pipeline__microbatches=16)
    rc, secs, out = tools.run(2, ["train", CONFIG] + h.sets(run__dir=os.path.join(work, "long-step"),
                                                           **keys), timeout=300, check=False)
    said = re.search(r"(\d+) samples/s", out)
    say("a step longer than run.timeout_s with an idle rank: exit %d after %.1f s (%s samples/s)"
        % (rc, secs, said.group(1) if said else "?"))
    expect(rc == 0 and "no progress" not in out and "done: 1 step" in out,
           "a step longer than run.timeout_s with an idle rank: trained to its end\n" + out[-2000:])
    run_dir = os.path.join(work, "long-step-stopped")
    cmd = tools.command(2, ["train", CONFIG] + h.sets(run__dir=run_dir, **keys))
    start = time.time()
    p = subprocess.Popen(cmd, cwd=h.ROOT, env=h.ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    stopped = None
    while time.time() - start < 60 and p.poll() is None and stopped is None:
        time.sleep(0.2)
        if not os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
            continue  # not training yet
        time.sleep(3.0)  # into the step (about 9 s here)
        for pid in subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split():
            try:
                if rank_of(int(pid)) == 0:
                    os.kill(int(pid), signal.SIGSTOP)
                    stopped = int(pid)
            except (OSError, ValueError):
                pass
    out = end_job(p, stopped, 90)
    say("a long step, rank 0 stopped: exit %s after %.1f s" % (p.returncode, time.time() - start))
    expect(stopped is not None and p.returncode != 0 and time.time() - start < LIMIT_S,
           "a long step, rank 0 stopped: the job ended (%s)" % p.returncode)
    expect(named_in_no_wait(out) == {0}, "a long step, rank 0 stopped: rank 0, and only it, named as "
           "in no wait (%s)\n%s" % (sorted(named_in_no_wait(out)), out[-2500:]))


def suspended_job(tools, work):
    """Every rank of a job stopped (SIGSTOP, as a suspended job or a paused
    container is) for longer than run.timeout_s, mid-training, then
    continued: the job trains on to its end, exit 0, every step logged.
    The time a rank itself did not run does not count toward its wait's
    limit (each rank waiting then used to find its deadline past on SIGCONT
    and give up: exit 1, no checkpoint). Stopped while rank 1 surely waits:
    rank 0 pauses 2 s at step 30 (the fault hook) and both are stopped as
    step 29's line appears."""
    run_dir = os.path.join(work, "suspended")
    steps = 60
    cmd = tools.command(2, ["train", CONFIG] + h.sets(run__dir=run_dir, run__threads=1, run__timeout_s=3,
                                                      pipeline__stages=2, train__max_steps=steps,
                                                      train__eval_examples=64))
    start = time.time()
    p = subprocess.Popen(cmd, cwd=h.ROOT, env=dict(h.ENV, PIPETRAIN_TEST_FAULT="0:30:pause:step"),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ranks = {}
    while time.time() - start < 120 and p.poll() is None and len(ranks) < 2:
        time.sleep(0.02)
        try:
            with open(os.path.join(run_dir, "metrics.jsonl")) as f:
                if '"event": "step", "step": 29,' not in f.read():
                    continue
        except OSError:
            continue
        for pid in subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split():
            try:
                ranks[rank_of(int(pid))] = int(pid)
            except (OSError, ValueError):
                pass
    suspended = sorted(ranks) == [0, 1] and p.poll() is None
    if suspended:
        for pid in ranks.values():
            os.kill(pid, signal.SIGSTOP)
        time.sleep(8.0)  # past run.timeout_s, and the second the ranks ask each other
        for pid in ranks.values():
            os.kill(pid, signal.SIGCONT)
    out = end_job(p, None, 240)
    last = 0
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            last = max([r.get("step", 0) for r in map(json.loads, f) if r.get("event") == "step"] or [0])
    except (OSError, ValueError):
        pass
    say("a suspended job: exit %s after %.1f s, last step %d" % (p.returncode, time.time() - start, last))
    expect(suspended, "a suspended job: both ranks stopped while training")
    expect(p.returncode == 0 and "no progress" not in out and last == steps,
           "a suspended job: trained on to step %d once continued (exit %s, last step %d)\n%s"
           % (steps, p.returncode, last, out[-1500:]))


def timeout_too_short(tools, work):
    """run.timeout_s far shorter than a start-up collective takes (1e-6 s),
    on 2 ranks: every rank gives up waiting while the other waits too, and
    none is stopped or busy. The error named no culprit and said nothing
    more; it now says that every rank waits, so the limit is shorter than
    the wait takes (or the ranks wait for each other).

    On synthetic data: with the real data set, a rank that gave up waiting
    could find the other still reading it (its own work, where it answers
    nothing) for longer than the second it is given to answer, on a loaded
    machine (2 runs of 15 beside 4 busy processes; the CI run of stop 78),
    and rightly name it as in no wait. With 64 synthetic examples the work
    between two start-up waits is far below that second (0 runs of 60)."""
    rc, secs, out = tools.run(2, ["train", CONFIG] + h.sets(run__dir=os.path.join(work, "short"),
                                                           run__timeout_s="0.000001",
                                                           data__kind="synthetic_images",
                                                           data__synthetic_examples=64, train__batch=8,
                                                           train__max_steps=2, run__threads=1),
                              timeout=120, check=False)
    say("timeout shorter than a wait: exit %d after %.1f s" % (rc, secs))
    expect(rc != 0 and secs < LIMIT_S, "timeout shorter than a wait: the job ended with an error")
    expect("every rank waits and none is stopped or busy: run.timeout_s (1e-06 s) is shorter" in out,
           "timeout shorter than a wait: the error says every rank waits\n" + out[-1500:])


def main():
    tools = h.Tools(sys.argv)
    start = time.time()
    only = os.environ.get("PT_TEST_ONLY", "")
    with tempfile.TemporaryDirectory(prefix="pt-fail-") as work:
        side_by_side([c for c in cases(tools, work) if only in c.__name__])
        for f in (alone, stopped_in_training, long_step_with_an_idle_rank, suspended_job,
                  timeout_too_short):
            if only in f.__name__:
                f(tools, work)
    say("%.1f s" % (time.time() - start))
    if failures:
        sys.exit("FAILED: %d checks" % len(failures))
    print("pipeline failure handling: passed")


if __name__ == "__main__":
    main()
