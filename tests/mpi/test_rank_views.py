"""mpi_rank_views: ranks that see run.dir differently (a node whose view of
the shared file system lags, or that looked just before a save landed) end
the job together with one message, never in collectives of different kinds.

train.resume=auto: every rank looks for the newest checkpoint itself before
the run directory is locked (`planned`, to plan from its profile), and rank
0 chooses the one resumed under the lock. A rank whose own look found
another checkpoint than rank 0's choice entered an agreement that rank 0
skipped, and rank 0 went on into the checkpoint's load: the collectives did
not match (MPI_ERR_TRUNCATE, an Open MPI NBC error, exit 1 after
run.timeout_s, or a hang). Made here with rank 1 in a mount namespace of its
own in which the newest step directory is an empty directory (root only):
the job must end with exit 2, rank 1 naming the manifest it cannot read.

PT_TEST_ONLY=SUBSTRING runs the cases whose name holds it."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402

CONFIG = """run:
  dir: {run}
  threads: 1
  timeout_s: 20
model:
  kind: vit
  dim: 8
  layers: 1
  heads: 1
  patch: 4
  classes: 4
data:
  kind: synthetic_images
  image_size: 8
  synthetic_examples: 32
train:
  batch: 8
  epochs: 2
  eval_every: 0
  eval_examples: 8
pipeline:
  stages: 1
"""


def can_unshare():
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"])
    return probe.returncode == 0


def resume_with_rank1_hiding(tools, work, cfg, hidden, sets):
    """train.resume=auto of cfg on 2 ranks, rank 1 in a mount namespace of
    its own where directory `hidden` is an empty one; the finished process
    (stdout, stderr, returncode), or None when it did not end in 120 s."""
    empty = os.path.join(work, "empty")
    os.makedirs(empty, exist_ok=True)
    wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" "$1" && shift && exec "$@"', empty, hidden]
    extra = ["--set", "train.resume=auto", "--set", "train.epochs=3"] + sets
    cmd = [tools.mpiexec, "--oversubscribe", "-np", "1", tools.pipetrain, "train", cfg] + extra + \
          [":", "-np", "1"] + wrap + [tools.pipetrain, "train", cfg] + extra
    try:
        return subprocess.run(cmd, cwd=H.ROOT, env=H.ENV, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None


def newest_hidden_on_rank1(tools, work):
    name = "newest checkpoint hidden from rank 1"
    if not can_unshare():
        print("ok   %s: skipped (needs root and unshare --mount)" % name, flush=True)
        return 0
    run = os.path.join(work, "run")
    cfg = os.path.join(work, "views.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(run=run))
    rc, _, out = tools.run(2, ["train", cfg], check=False, timeout=300)
    steps = sorted(os.listdir(os.path.join(run, "checkpoints"))) if rc == 0 else []
    if len(steps) < 2:
        print("FAIL %s: the first run did not leave two checkpoints (%d, %r):\n%s"
              % (name, rc, steps, out[-2000:]), flush=True)
        return 1
    newest = os.path.join(run, "checkpoints", steps[-1])
    # rank 1 sees the newest step directory empty (no manifest): its own look
    # finds the one before, rank 0's the newest
    r = resume_with_rank1_hiding(tools, work, cfg, newest, [])
    if r is None:
        print("FAIL %s: the job hung (no end within 120 s)" % name, flush=True)
        return 1
    out = r.stdout + r.stderr
    problems = []
    if r.returncode != 2:
        problems.append("exit status %d, not 2" % r.returncode)
    want = "rank 1: error: '%s' holds no manifest" % newest
    if want not in out:
        problems.append("the output lacks %r" % want)
    for bad in ("MPI_ERR", "NBC", "MPI_ABORT", "step 9"):
        if bad in out:
            problems.append("the output has %r" % bad)
    if sorted(os.listdir(os.path.join(run, "checkpoints"))) != steps:
        problems.append("the checkpoints changed")
    if problems:
        print("FAIL %s: %s\n%s" % (name, "; ".join(problems), out[-2000:]), flush=True)
        return 1
    print("ok   %s: exit 2, rank 1 names the manifest it cannot read" % name, flush=True)
    return 0


def no_checkpoint_on_rank1_with_init_from(tools, work):
    """With model.init_from, a rank that planned a resume leaves the
    weights unread (the checkpoint's replace them) and a rank whose look
    found no checkpoint loads them: the agreement after the load is still
    every rank's. Rank 1 sees checkpoints/ empty: the job ends with exit 2,
    rank 1 naming what it cannot read, not in collectives of different
    kinds (one more agreement on the rank that loaded: a hang, or
    run.timeout_s and exit 1)."""
    name = "no checkpoint seen by rank 1, with model.init_from"
    if not can_unshare():
        print("ok   %s: skipped (needs root and unshare --mount)" % name, flush=True)
        return 0
    run = os.path.join(work, "run")
    cfg = os.path.join(work, "views.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(run=run))
    rc, _, out = tools.run(2, ["train", cfg], check=False, timeout=300)
    steps = sorted(os.listdir(os.path.join(run, "checkpoints"))) if rc == 0 else []
    init = os.path.join(work, "init.safetensors")
    if not steps or tools.run(1, ["export", os.path.join(run, "checkpoints", steps[-1]), init],
                              check=False)[0] != 0:
        print("FAIL %s: the first run or its export failed (%d):\n%s" % (name, rc, out[-2000:]),
              flush=True)
        return 1
    r = resume_with_rank1_hiding(tools, work, cfg, os.path.join(run, "checkpoints"),
                                 ["--set", "model.init_from=" + init])
    if r is None:
        print("FAIL %s: the job hung (no end within 120 s)" % name, flush=True)
        return 1
    out = r.stdout + r.stderr
    problems = []
    if r.returncode != 2:
        problems.append("exit status %d, not 2" % r.returncode)
    if "rank 1: error: '%s/checkpoints/%s" % (run, steps[-1]) not in out:
        problems.append("rank 1 does not name the checkpoint it cannot read")
    for bad in ("MPI_ERR", "NBC", "MPI_ABORT", "timed out", "no progress"):
        if bad in out:
            problems.append("the output has %r" % bad)
    if problems:
        print("FAIL %s: %s\n%s" % (name, "; ".join(problems), out[-2000:]), flush=True)
        return 1
    print("ok   %s: exit 2, rank 1 names the checkpoint it cannot read" % name, flush=True)
    return 0


def main():
    tools = H.Tools(sys.argv)
    only = os.environ.get("PT_TEST_ONLY", "")
    failures = 0
    for case in (newest_hidden_on_rank1, no_checkpoint_on_rank1_with_init_from):
        if only and only not in case.__name__:
            continue
        with tempfile.TemporaryDirectory(prefix="pt-views-") as work:
            failures += case(tools, work)
    if failures:
        print("mpi_rank_views: FAIL: %d case(s)" % failures)
        sys.exit(1)
    print("mpi_rank_views: all passed")


if __name__ == "__main__":
    main()
