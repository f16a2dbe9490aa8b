#!/usr/bin/env python3
"""Kill-and-resume soak: a run killed at any moment and resumed with
train.resume=auto, again and again, ends bit-identical to the run that was
never interrupted, and leaves nothing of ours in /dev/shm.

Variants (each against its own uninterrupted reference run):
  single     one process
  pipe2      a 2-stage pipeline under mpirun (a random rank is SIGKILLed;
             mpirun then ends the job)
  cache1     freezing decided every few steps with the activation cache on,
             one process
  cache2     the same as a 2-stage pipeline
  pid1       one process as PID 1 of a new pid namespace (unshare -pf), where
             the pid is the same after every restart
  bert2      a 2-stage BERT with dropout (hidden and attention, 0.1), padded
             examples, freezing and the cache: a resumed run must make the
             same dropout masks (a function of seed, step, example, unit)
  dp2        freezing with the cache on 2 ranks as 2 replicas of one stage
             (data parallel: a gradient all-reduce each step, both
             replicas reading the node's one cache)
  elastic4   4 ranks re-planned as blocks freeze, (4, 1) -> (2, 2) -> (1, 4)
             (freed ranks becoming replicas, moving their stages' weights and
             Adam moments), planned from test_elastic's recorded profile so
             that the layouts are the same in every attempt
  idle5      the same on 5 ranks under test_elastic's idle-join limit: the
             fifth rank idle in the first layouts, then a replica
Two kinds of kill:
  - at a random moment (uniform over the expected run time, then over
    the part left after the newest checkpoint), with a checkpoint every 2
    steps so many kills land inside a save;
  - at each phase of a save, deterministically (PIPETRAIN_TEST_FAULT, see
    launch/fault.h: directory prepared, unit file half written, unit files
    written, manifest written), once plain and once as PID 1.
And a stop signal to mpirun in the 2-stage pipeline: SIGUSR1 (every rank
saves, mpirun exits 130) and SIGTERM (Open MPI kills the job; mpirun exits 1);
and SIGKILL to mpirun with the cache on (the orphaned ranks end, leaving no
segment);
and, deterministically, a stop signal reaching rank 0 or rank 1 alone just
after a step's results were combined (all ranks stop after the next step).
Checked after the last resume: every step's loss that any attempt logged
equals the reference's for that step (steps redone after a kill are logged
twice, and both must match), the final weights are bit-identical, no
temporary file is left in the last checkpoint, and after each variant
/dev/shm holds no pipetrain segment (checked per variant: the next
variant's start-up sweep would hide a segment left behind).

The whole test runs in a private mount namespace with its own /dev/shm (it
re-executes itself under `unshare -m` as root), so the last check sees only
what this test made. Without the right to do so it skips that check.

usage: test_kill_resume.py PIPETRAIN MPIEXEC [--long] [--seed N] [--only VARIANT]
  --long: many more kills per variant (a script for manual soaks)"""
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi"))
import harness as h  # noqa: E402
import test_elastic  # noqa: E402  (its recorded profile and the limits that make its layouts)

CONFIG = """run: {{dir: {run}, threads: 1, seed: 7}}
{model}
train: {{batch: 16, epochs: 3, lr: 0.003, warmup_steps: 3, eval_every: 0, eval_examples: 32,
         checkpoint_every: 2, keep_checkpoints: 2}}
pipeline: {{{layout}, microbatches: 2}}
"""
FREEZE = """freeze: {policy: schedule, unit: step, start: 6, every: 6, alpha: 0.5}
cache: {enabled: true}
"""
VIT = """model: {kind: vit, dim: 32, layers: 2, heads: 2, patch: 7}
data: {kind: synthetic_images, synthetic_examples: 192}"""
BERT = """model: {{kind: bert, dim: 32, layers: 2, heads: 2, context: 16, vocab: {vocab}, classes: 3,
        positions: 16, dropout: 0.1, attention_dropout: 0.1}}
data: {{{data}}}"""
# elastic4's whole config: the model, batch and limit that test_elastic
# plans from its recorded profile (the layouts then do not depend on this
# machine's timing), (4, 1) -> (2, 2) -> (1, 4) as blocks freeze
ELASTIC = """run: {{dir: {run}, threads: 1, seed: 5}}
model: {{kind: vit, dim: 64, layers: 4, heads: 4, patch: 7}}
data: {{kind: synthetic_images, synthetic_examples: 512}}
train: {{batch: 32, epochs: 4, lr: 0.002, eval_every: 0, eval_examples: 64, checkpoint_every: 2,
         keep_checkpoints: 2}}
freeze: {{policy: schedule, alpha: 0.5, every: 1, start: 1, max_depth: 3}}
cache: {{enabled: true}}
pipeline: {{memory_gib: {memory}, cores: {cores}, profile: {profile}}}
"""
VARIANTS = {  # name: (ranks, freeze + cache, as PID 1, model)
    "single": (1, False, False, "vit"),
    "pipe2": (2, False, False, "vit"),
    "cache1": (1, True, False, "vit"),
    "cache2": (2, True, False, "vit"),
    "pid1": (1, False, True, "vit"),
    "bert2": (2, True, False, "bert"),
    "dp2": (2, True, False, "vit"),
    "elastic4": (4, True, False, "elastic"),
    "idle5": (5, True, False, "elastic"),
}
# the layout where it is not a pipeline of one stage per rank: dp2's two
# ranks are replicas of one stage, reading the node's one cache
LAYOUTS = {"dp2": "stages: 1, replicas: 2"}
PHASES = ("checkpoint-prepared", "checkpoint-writing", "checkpoint", "checkpoint-manifest")
LIMIT_S = 60  # a killed job must be gone within this
failures = []


def expect(cond, what):
    print("  %s: %s" % ("ok" if cond else "FAIL", what), flush=True)
    if not cond:
        failures.append(what)


class Runner:
    def __init__(self, tools, work):
        self.tools, self.work = tools, work

    def config(self, name, variant):
        ranks, freeze, _, model = VARIANTS[variant]
        run_dir = os.path.join(self.work, name)
        path = run_dir + ".yaml"
        if model == "elastic":
            profile = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi",
                                   "elastic_profile.json")
            if ranks != 4:  # test_elastic's 4-rank profile as this world's
                profile = test_elastic.world_profile(profile, ranks, run_dir + "-profile.json")
            with open(path, "w") as f:
                f.write(ELASTIC.format(run=run_dir, profile=profile, cores=ranks,
                                       memory=test_elastic.MEMORY["vit"] if ranks == 4
                                       else test_elastic.IDLE_JOIN["vit"]))
            return path, run_dir
        if model == "bert":
            data, vocab = h.bert_data(self.work, 192, 32, seed=23)
            model = BERT.format(vocab=vocab, data=data)
        else:
            model = VIT
        with open(path, "w") as f:
            layout = LAYOUTS.get(variant, "stages: %d" % ranks)
            f.write(CONFIG.format(run=run_dir, layout=layout, model=model) + (FREEZE if freeze else ""))
        return path, run_dir

    def command(self, variant, cfg, resume):
        ranks, _, pid1, _ = VARIANTS[variant]
        args = ["train", cfg] + (["--set", "train.resume=auto"] if resume else [])
        cmd = self.tools.command(ranks, args)
        if pid1:
            cmd = ["unshare", "--pid", "--fork", "--mount-proc"] + cmd
        return cmd

    def start(self, variant, cfg, resume, fault=None):
        env = dict(h.ENV)
        if fault:
            env["PIPETRAIN_TEST_FAULT"] = fault
        return subprocess.Popen(self.command(variant, cfg, resume), cwd=h.ROOT, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True)


def children(pid):
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return []
    return [int(x) for x in out.split()]


def kill_one(p, variant):
    """SIGKILL the process that trains: a random rank under mpirun, the
    namespace's PID 1 under unshare, else the process itself."""
    ranks, _, pid1, _ = VARIANTS[variant]
    victims = [p.pid]
    if ranks > 1 or pid1:
        kids = children(p.pid)
        if kids:
            victims = [random.choice(kids)]
    for v in victims:
        try:
            os.kill(v, signal.SIGKILL)
        except ProcessLookupError:
            pass


def show_group(p, why):
    """What is left of a job that did not end in time (which process waits,
    and where), printed before it is killed, so a rare hang says whose it
    is: a rank still running, or only mpirun over ranks that have ended.
    Returns whether a rank (any process of the job but mpirun itself) is
    still alive, not a zombie."""
    try:
        rows = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,stat=,etime=,wchan:24=,args="],
                              capture_output=True, text=True, timeout=30).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired) as e:
        rows = []
        print("  (ps failed: %s)" % e, flush=True)
    family, lines = {p.pid}, []
    for _ in range(4):  # descendants (ranks may leave mpirun's process group)
        for r in rows:
            f = r.split()
            if len(f) > 1 and int(f[1]) in family:
                family.add(int(f[0]))
    lines = [r for r in rows if r.split() and int(r.split()[0]) in family]
    print("  %s; its processes (pid, ppid, state, elapsed, wait channel, command):\n%s" %
          (why, "\n".join("    " + r.strip()[:300] for r in lines)), flush=True)
    return not rows or any(int(r.split()[0]) != p.pid and not r.split()[2].startswith("Z")
                           for r in lines)


def wait_gone(p, variant):
    """Every rank must end by itself within LIMIT_S once one is gone, and
    with them the job. Open MPI 4.1.4's mpirun, rarely, keeps waiting over
    ranks that have all ended (a killed rank left unreaped, a zombie: seen
    twice in some hundreds of kills); that is its defect, not a rank's, and
    is said so here and in the README, and not counted against the ranks."""
    try:
        p.wait(timeout=LIMIT_S)
        return True
    except subprocess.TimeoutExpired:
        rank_alive = show_group(p, "%s: still running %d s after the kill" % (variant, LIMIT_S))
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        if not rank_alive:
            print("  note: %s: every rank had ended; Open MPI's mpirun kept waiting over a rank "
                  "it did not reap (its defect, see the README)" % variant, flush=True)
        return not rank_alive


def logged_losses(run_dir):
    """{step: [loss, ...]} over every line any attempt wrote (a line cut by
    a kill is skipped)."""
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("event") == "step":
                out.setdefault(r["step"], []).append(r["loss"])
    return out


def check_run(runner, name, run_dir, ref):
    ref_losses, ref_weights = ref
    got = logged_losses(run_dir)
    bad = [(s, v, ref_losses.get(s)) for s, vs in sorted(got.items()) for v in vs
           if v != ref_losses.get(s)]
    expect(sorted(got) == sorted(ref_losses),
           "%s: every step was logged (%d of %d)" % (name, len(got), len(ref_losses)))
    expect(not bad, "%s: every logged loss equals the uninterrupted run's%s" %
           (name, "" if not bad else " (first: step %d %r vs %r)" % bad[0]))
    last = h.latest_checkpoint(run_dir)
    w = runner.tools.export(last, run_dir + ".st")
    same = sorted(w) == sorted(ref_weights) and all(
        w[k].tobytes() == ref_weights[k].tobytes() for k in ref_weights)
    expect(same, "%s: final weights bit-identical" % name)
    stray = [n for n in os.listdir(last) if ".tmp." in n]
    expect(not stray, "%s: no temporary files in %s: %s" % (name, os.path.basename(last), stray))


def reference(runner, variant):
    cfg, run_dir = runner.config("ref-" + variant, variant)
    p = runner.start(variant, cfg, False)
    start = time.time()
    _, err = p.communicate(timeout=600)
    took = time.time() - start
    if p.returncode != 0:
        sys.exit("reference run %s failed (%d):\n%s" % (variant, p.returncode, err[-3000:]))
    losses = {s: vs[-1] for s, vs in logged_losses(run_dir).items()}
    weights = runner.tools.export(h.latest_checkpoint(run_dir), run_dir + ".st")
    return (losses, weights), took


def checkpoint_step(run_dir):
    """The step of run_dir's newest complete checkpoint; 0 before the first."""
    try:
        return int(os.path.basename(h.latest_checkpoint(run_dir)).split("_")[-1])
    except (OSError, IndexError, ValueError):
        return 0


def random_kills(runner, variant, ref, took, kills):
    """Kills at random moments until the run gets through; returns how many
    attempts it took."""
    cfg, run_dir = runner.config("random-%s" % variant, variant)
    total = len(ref[0])
    attempts, killed, fresh = 0, 0, 0
    while True:
        attempts += 1
        started = time.monotonic()
        p = runner.start(variant, cfg, resume=attempts > 1)
        if killed < kills:
            # from just after start-up to the end of the run: the whole
            # uninterrupted run's time at first, then the part left after
            # the newest checkpoint (drawn over the whole time again, most
            # kills after the first would come after a resume had ended)
            done = checkpoint_step(run_dir)
            time.sleep(random.uniform(0.01, max(0.02, took * (total - done) / total)))
            if p.poll() is None:
                kill_one(p, variant)
                killed += 1
                if not wait_gone(p, variant):
                    expect(False, "%s: a rank did not end within %d s of a SIGKILL" %
                           (variant, LIMIT_S))
                continue
        _, err = p.communicate(timeout=600)
        if p.returncode == 0 and killed == 0 and fresh < 3:
            # it ended before the first kill (a run can be faster than the
            # reference was, on a machine whose load fell since): nothing
            # was tested, so again from the start, the kills drawn within
            # half the time this run was given (it ended somewhere in it)
            took = min(took, (time.monotonic() - started) / 2)
            shutil.rmtree(run_dir)
            attempts, fresh = 0, fresh + 1
            continue
        if p.returncode == 0:
            break
        if attempts > kills + 3:
            expect(False, "%s: resume keeps failing (exit %d):\n%s" % (variant, p.returncode,
                                                                     err[-2000:]))
            return attempts
    expect(killed > 0, "%s: a random kill landed (%d fresh starts ended before it)" % (variant, fresh))
    check_run(runner, "%s, %d random kills" % (variant, killed), run_dir, ref)
    return attempts


def phase_kills(runner, variant, ref, step):
    """A SIGKILL at every phase of the save of one step, each followed by a
    resume, in one run directory."""
    cfg, run_dir = runner.config("phases-%s-%d" % (variant, step), variant)
    for i, phase in enumerate(PHASES):
        s = step + 2 * i  # a later save each time: the run moves on between kills
        p = runner.start(variant, cfg, resume=i > 0, fault="0:%d:crash:%s" % (s, phase))
        _, err = p.communicate(timeout=600)
        expect(p.returncode != 0, "%s: killed at step %d, %s (exit %d)" % (variant, s, phase,
                                                                           p.returncode))
        if phase == "checkpoint-writing":
            leftovers = glob.glob(os.path.join(run_dir, "checkpoints", "*", "*.tmp.*"))
            expect(leftovers, "%s: the kill left a temporary file behind (%d)" %
                   (variant, len(leftovers)))
    p = runner.start(variant, cfg, resume=True)
    _, err = p.communicate(timeout=600)
    expect(p.returncode == 0, "%s: resumed after the phase kills (exit %d)%s" %
           (variant, p.returncode, "" if p.returncode == 0 else "\n" + err[-2000:]))
    if p.returncode == 0:
        check_run(runner, "%s, a kill at every phase of a save" % variant, run_dir, ref)


def signal_mpirun(runner, ref, sig, want_rc):
    """A stop signal to mpirun once training runs: with SIGUSR1 every rank
    saves and mpirun exits 130; with SIGTERM Open MPI kills the job (exit 1).
    Either way the job ends in time and the resumed run is exact."""
    name = signal.Signals(sig).name
    cfg, run_dir = runner.config("signal-" + name, "pipe2")
    p = runner.start("pipe2", cfg, resume=False)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.time() + 60
    while p.poll() is None and time.time() < deadline and not (
            os.path.exists(metrics) and '"step"' in open(metrics).read()):
        time.sleep(0.02)
    p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        show_group(p, "still running %d s after the stop signal" % LIMIT_S)
        os.killpg(p.pid, signal.SIGKILL)
        _, err = p.communicate()
        subprocess.run(["pkill", "-KILL", "-f", cfg])  # ranks outside mpirun's group
    expect(p.returncode == want_rc, "%s to mpirun: exit %s (want %d)" % (name, p.returncode, want_rc))
    if want_rc == 130:
        steps = max(logged_losses(run_dir))
        last = os.path.basename(h.latest_checkpoint(run_dir))
        expect(last == "step_%010d" % steps, "%s: saved at the last step done (%s, step %d)" %
               (name, last, steps))
    p = runner.start("pipe2", cfg, resume=True)
    _, err = p.communicate(timeout=600)
    expect(p.returncode == 0, "%s: resumed (exit %d)" % (name, p.returncode))
    if p.returncode == 0:
        check_run(runner, "pipe2 after %s to mpirun" % name, run_dir, ref)


def kill_mpirun(runner, variant, trial):
    """SIGKILL to mpirun itself mid-run (a long run, so that it cannot end
    on its own first): every rank gets SIGTERM as its launcher dies
    (PR_SET_PDEATHSIG), so it takes the cache's names off at once (no
    segment left: checked by the caller, in a /dev/shm of the test's own),
    stops after the step and saves it (rank 0 says so) before Open MPI ends
    the orphans, about a second later here; and every rank is gone within
    LIMIT_S. Orphans used to train on until Open MPI's progress thread ended
    them with _exit, past every cleanup (the segment stayed, 5 runs in 5);
    then the kernel sent the death signal once per thread of mpirun's that
    the rank was handed to, and a second SIGTERM read as the user's second
    request exited at once, unsaved (no stop line in 8 runs of 8)."""
    cfg, run_dir = runner.config("kill-mpirun-%d" % trial, variant)
    with open(cfg) as f:
        text = f.read()
    with open(cfg, "w") as f:
        f.write(text.replace("epochs: 3,", "epochs: 3000,"))
    errs = run_dir + ".err"
    ranks = VARIANTS[variant][0]
    # each rank's stderr in a file of its own (mpirun's pipe dies with it)
    cmd = [runner.tools.mpiexec, "--oversubscribe", "-np", str(ranks), "sh", "-c",
           'exec "$0" train "$1" 2> "$2.$OMPI_COMM_WORLD_RANK"', runner.tools.pipetrain, cfg, errs]
    p = subprocess.Popen(cmd, cwd=h.ROOT, env=dict(h.ENV), stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.time() + 60
    while p.poll() is None and time.time() < deadline and not (
            os.path.exists(metrics) and open(metrics).read().count('"step"') >= 3):
        time.sleep(0.02)
    expect(p.poll() is None, "%s: the long run ended before mpirun could be killed" % variant)
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    deadline = time.time() + LIMIT_S
    while time.time() < deadline and subprocess.run(["pgrep", "-f", cfg],
                                                     capture_output=True).returncode == 0:
        time.sleep(0.05)
    left = subprocess.run(["pgrep", "-f", cfg], capture_output=True, text=True).stdout.split()
    expect(not left, "%s: ranks %s still running %d s after mpirun's SIGKILL" % (variant, left,
                                                                                 LIMIT_S))
    if left:
        subprocess.run(["pkill", "-KILL", "-f", cfg])
    try:
        with open(errs + ".0", errors="replace") as f:
            said = f.read()
    except FileNotFoundError:
        said = ""
    stop = re.search(r"stopped by signal 15 after step (\d+)", said)
    expect(stop is not None, "%s: rank 0 did not stop and save after mpirun's SIGKILL:\n%s" %
           (variant, said[-1500:]))
    if stop:
        last = os.path.basename(h.latest_checkpoint(run_dir))
        expect(last == "step_%010d" % int(stop.group(1)),
               "%s: the stop after mpirun's SIGKILL saved %s, not step %s" % (variant, last,
                                                                             stop.group(1)))


def stopped_by_fault(runner, ref, variant, name, fault, step, what):
    """Runs variant with PIPETRAIN_TEST_FAULT=fault: every rank must stop
    after `step` together (exit 130, a checkpoint of that step, the last
    logged step), and the resumed run is exact."""
    cfg, run_dir = runner.config(name, variant)
    p = runner.start(variant, cfg, resume=False, fault=fault)
    try:
        _, err = p.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        show_group(p, "still running %d s after the stop signal" % LIMIT_S)
        os.killpg(p.pid, signal.SIGKILL)
        _, err = p.communicate()
        subprocess.run(["pkill", "-KILL", "-f", cfg])  # ranks outside mpirun's group
    what = "%s: %s" % (variant, what)
    expect(p.returncode == 130, "%s: exit %s (want 130)%s" % (what, p.returncode,
                                                              "" if p.returncode == 130 else "\n" + err[-1500:]))
    if p.returncode == 130:
        last = os.path.basename(h.latest_checkpoint(run_dir))
        expect(last == "step_%010d" % step and max(logged_losses(run_dir)) == step,
               "%s: every rank stopped after step %d (%s, last logged %d)" % (
                   what, step, last, max(logged_losses(run_dir))))
    p = runner.start(variant, cfg, resume=True)
    _, err = p.communicate(timeout=600)
    expect(p.returncode == 0, "%s: resumed (exit %d)" % (what, p.returncode))
    if p.returncode == 0:
        check_run(runner, what, run_dir, ref)


def stop_after_combine(runner, ref, variant, rank):
    """A stop signal that reaches one rank just after a step's results were
    combined (PIPETRAIN_TEST_FAULT RANK:5:stop:combined): that step's
    combine carried no stop, so every rank must go on to step 6, stop after
    it together (exit 130, a checkpoint of step 6), and the resumed run is
    exact. A rank that looked at its own signal there left after step 5
    while the others waited for it in step 6: the job hung (about 1 run in
    10 of the mpirun SIGUSR1 case, under load)."""
    stopped_by_fault(runner, ref, variant, "stop-rank%d" % rank, "%d:5:stop:combined" % rank, 6,
                     "a stop signal at rank %d after step 5's combine" % rank)


def stop_during_peer_save(runner, ref, variant):
    """Rank 0 is signalled as step 5 begins (PIPETRAIN_TEST_FAULT
    0:5:stop:step), so every rank stops after step 5; rank 1, which stops
    because rank 0 asked, gets its own stop signal during that save
    (1:5:stop:checkpoint), as when a user signals each rank in turn. That is
    its first signal, not a second one that exits at once: the save
    completes, exit 130 with a checkpoint of step 5, and the resumed run is
    exact. (A rank that counted the other's request as its own signal exited
    138 in the save, leaving the step directory without a manifest.)"""
    stopped_by_fault(runner, ref, variant, "stop-peer-save", "0:5:stop:step,1:5:stop:checkpoint",
                     5, "a stop signal at rank 1 during the save rank 0's stop began")


def our_segments():
    return [n for n in os.listdir("/dev/shm") if n.startswith("pipetrain-%d-" % os.getuid())]


def private_shm():
    """Re-executes this test in a mount namespace with an empty /dev/shm of
    its own, when allowed; returns True when already there."""
    if os.environ.get("PT_SOAK_PRIVATE_SHM") == "1":
        return True
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    script = 'mount -t tmpfs -o mode=1777 soak-shm /dev/shm && exec "$@"'
    env = dict(os.environ, PT_SOAK_PRIVATE_SHM="1")
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                        "sh", sys.executable] + sys.argv, env=env)
    sys.exit(r.returncode)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    long_run = "--long" in sys.argv
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else int(time.time())
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    args = [a for a in args if (not a.isdigit() or str(seed) != a) and a != only]
    private = private_shm()
    tools = h.Tools([sys.argv[0]] + args)
    random.seed(seed)
    print("seed %d (--seed %d repeats the kill times)%s" % (seed, seed, "" if private else
          "; /dev/shm is shared with the machine, its check is skipped"), flush=True)
    kills = 12 if long_run else 2
    with tempfile.TemporaryDirectory(prefix="pt-soak-") as work:
        runner = Runner(tools, work)
        for variant in [only] if only else VARIANTS:
            print("%s:" % variant, flush=True)
            ref, took = reference(runner, variant)
            random_kills(runner, variant, ref, took, kills)
            steps = [8] if variant in ("single", "pid1", "cache1", "idle5") or long_run else []
            if variant == "elastic4":  # saves in the layouts after each re-plan
                steps += [18, 34]
            for step in steps:  # (idle5's at 8: saves while the fifth rank is idle)
                phase_kills(runner, variant, ref, step=step)
            if variant == "pipe2":
                stop_after_combine(runner, ref, variant, 0)
                stop_after_combine(runner, ref, variant, 1)
                stop_during_peer_save(runner, ref, variant)
                signal_mpirun(runner, ref, signal.SIGUSR1, 130)
                signal_mpirun(runner, ref, signal.SIGTERM, 1)
            if variant == "cache2" and private:
                for trial in range(2):
                    kill_mpirun(runner, variant, trial)
            if private:  # after each variant: a later variant's sweep must not hide a leak
                left = our_segments()
                expect(not left, "%s: /dev/shm holds no pipetrain segment at the end: %s" % (variant, left))
    if failures:
        sys.exit("FAILED: %d checks (seed %d)" % (len(failures), seed))
    print("kill and resume: passed")


if __name__ == "__main__":
    main()
