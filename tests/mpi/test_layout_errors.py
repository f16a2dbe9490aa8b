"""mpi_layout_errors: a fixed layout the ranks or the batch cannot hold is
refused before anything runs, naming its key, under mpirun as in one
process: exit 2, "CONFIG:LINE: KEY: ...", no run directory made, no
shared-memory segment left, for `train` and for `plan`.

The case a tester found: train.batch 5 over 2 replicas gives shares of 3
and 2 examples, so 3 micro-batches fit one replica and not the other;
`plan` printed a layout and `train` aborted every rank at step 1. The
smallest share is batch / D (floor), and M up to it is accepted (the
boundary case trains).

Ranks that read different configurations (a config through a pipe reaches
rank 0 alone; a launch with other --set per rank) are refused before
anything runs, exit 2, the rank that differs naming the first key: they
used to hang in a pipeline, or corrupt the heap in the gradient all-reduce
(MPI_ERR_TRUNCATE) of replicas, or train replicas apart in silence.

A run.dir that one rank cannot write (its node mounts the shared file
system read-only) is refused at the start, exit 2, that rank naming
run.dir and its host: it used to train until the first checkpoint of a
unit on that node, then end with exit 1 (or, with every unit of the first
replica elsewhere, only after a re-plan moved one there). Made here with
a read-only bind mount in rank 1's own mount namespace (root only)."""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402

CONFIG = """run:
  dir: {run}
  seed: 1
  threads: 1
model:
  kind: vit
  dim: 8
  layers: 1
  heads: 1
  patch: 7
  classes: 10
data:
  kind: synthetic_images
  synthetic_examples: 64
train:
  batch: {batch}
  epochs: 1
  max_steps: 2
  eval_examples: 16
  lr: 0.001
pipeline:
  stages: {stages}
  replicas: {replicas}
  microbatches: {micro}
cache:
  enabled: true
freeze:
  policy: schedule
  start: 0
"""


def fail(msg):
    print("mpi_layout_errors: FAIL: " + msg, flush=True)
    sys.exit(1)


def refusal_failed(where, rc, out, run_dir, words):
    """Checks a refusal: exit 2, every word in the output, no run.dir made.
    Prints ok or FAIL with what is wrong; returns the failures (0 or 1)."""
    problems = [] if rc == 2 else ["exit status %d, not 2" % rc]
    problems += ["the output lacks %r" % w for w in words if w not in out]
    if os.path.exists(run_dir):
        problems.append("run.dir was created")
    if problems:
        print("FAIL %s: %s\n%s" % (where, "; ".join(problems), out[-2000:]), flush=True)
        return 1
    print("ok   %s" % where, flush=True)
    return 0


def damaged_stage_file(tools, work):
    run = os.path.join(work, "run-two-stages")
    cfg = os.path.join(work, "two-stages.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(run=run, batch=4, stages=2, replicas=1, micro=2))
    rc, _, out = tools.run(2, ["train", cfg], check=False, timeout=300)
    if rc != 0:
        print("FAIL damaged stage file: the 2-stage run did not train (%d):\n%s" % (rc, out[-2000:]))
        return 1
    ckpt = H.latest_checkpoint(run)
    units = os.path.join(ckpt, "units-stage1.bin")
    with open(units, "r+b") as f:
        f.seek(os.path.getsize(units) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x10]))
    failures = 0
    for what, args in (("eval", ["eval", cfg, "--checkpoint", ckpt]),
                       ("resume", ["train", cfg, "--set", "train.resume=" + ckpt,
                                   "--set", "train.max_steps=3"])):
        rc, _, out = tools.run(2, args, check=False, timeout=120)
        problems = []
        if rc != 2:
            problems.append("exit status %d, not 2" % rc)
        for w in ("rank 1: error: ", "units-stage1.bin"):
            if w not in out:
                problems.append("the output lacks %r" % w)
        if "another rank failed" in out:
            problems.append("a rank that only learned of the failure printed a message too")
        if problems:
            failures += 1
            print("FAIL damaged stage file (%s): %s\n%s" % (what, "; ".join(problems), out[-2000:]),
                  flush=True)
        else:
            print("ok   damaged stage file (%s): rank 1 names units-stage1.bin" % what, flush=True)
    return failures


def configs_differ(tools, work):
    run = os.path.join(work, "run-differ")
    cfg = os.path.join(work, "differ.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(run=run, batch=4, stages=1, replicas=2, micro=1))
    failures = 0
    base = [tools.mpiexec, "--oversubscribe"]
    cases = [  # (name, command, stdin, words)
        ("a config on stdin", base + ["-np", "2", tools.pipetrain, "train", "/dev/stdin"], cfg,
         ["rank 1: error: config '/dev/stdin': rank 1 reads another configuration than rank 0",
          "run.dir"]),
        ("another --set on rank 1", base + ["-np", "1", tools.pipetrain, "train", cfg, "--set",
                                            "train.lr=0.01", ":", "-np", "1", tools.pipetrain,
                                            "train", cfg, "--set", "train.lr=0.0001"], None,
         ["rank 1: error: config '%s': rank 1 reads another configuration" % cfg,
          "'train.lr: 0.0001'"]),
    ]
    # eval with another checkpoint per rank: a mix of two checkpoints' weights
    trained = os.path.join(work, "run-trained")
    tcfg = os.path.join(work, "trained.yaml")
    with open(tcfg, "w") as f:
        f.write(CONFIG.format(run=trained, batch=4, stages=1, replicas=1, micro=1)
                .replace("  max_steps: 2\n", "  max_steps: 2\n  checkpoint_every: 1\n"))
    tools.run(1, ["train", tcfg])
    ck = [os.path.join(trained, "checkpoints", "step_%010d" % k) for k in (1, 2)]
    # another command on rank 1 (an MPMD line): refused at once, not both
    # ranks waiting run.timeout_s for each other
    cases.append(("another command on rank 1",
                  base + ["-np", "1", tools.pipetrain, "train", cfg, ":", "-np", "1",
                          tools.pipetrain, "eval", cfg], None,
                  ["rank 1: error: rank 1 runs 'pipetrain eval', rank 0 another command"]))
    cases.append(("eval of another checkpoint on rank 1",
                  base + ["-np", "1", tools.pipetrain, "eval", tcfg, "--checkpoint", ck[0], ":",
                          "-np", "1", tools.pipetrain, "eval", tcfg, "--checkpoint", ck[1]], None,
                  ["rank 1: error: ", "eval.checkpoint"]))
    # the same config, but each rank reads files of its own (relative paths
    # from another working directory, as on hosts with copies of their
    # own): another vocabulary or other examples on rank 1 are refused
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "in", "the", "beginning", "god", "created"]
    lines = ["%s\t%s" % ("ab"[i % 2], " ".join(words[4 + (i * j) % 5] for j in range(1 + i % 7)))
             for i in range(24)]
    bert_run = os.path.join(work, "run-bert-differ")
    bcfg = os.path.join(work, "bert-differ.yaml")
    with open(bcfg, "w") as f:
        f.write("run:\n  dir: %s\n  seed: 1\n  threads: 1\nmodel:\n  kind: bert\n  dim: 8\n"
                "  layers: 1\n  heads: 1\n  classes: 2\n  vocab: %d\n  context: 8\n"
                "  positions: 8\ndata:\n  kind: text_classification\n  vocab: vocab.txt\n"
                "  train_file: train.tsv\n  test_file: test.tsv\ntrain:\n  batch: 4\n"
                "  epochs: 1\n  max_steps: 2\npipeline:\n  stages: 1\n  replicas: 2\n"
                % (bert_run, len(words)))
    for name, vocab, train in (("same", words, lines), ("vocab", words[:5] + [words[6], words[5]] +
                                                        words[7:], lines),
                               ("train", words, lines[:3] + ["b\tgod"] + lines[4:])):
        d = os.path.join(work, "files-" + name)
        os.mkdir(d)
        for fname, text in (("vocab.txt", vocab), ("train.tsv", train[:16]), ("test.tsv", train[16:])):
            with open(os.path.join(d, fname), "w") as f:
                f.write("\n".join(text) + "\n")
    bad = os.path.join(work, "files-badtrain")
    os.mkdir(bad)
    for fname in ("vocab.txt", "train.tsv", "test.tsv"):
        with open(os.path.join(work, "files-same", fname)) as f:
            text = f.read()
        with open(os.path.join(bad, fname), "w") as f:
            f.write(text + ("no tab here\n" if fname == "train.tsv" else ""))
    same = os.path.join(work, "files-same")
    # one rank's copy of a file does not load: it names it, the others stop
    # with it (they used to wait in the next collective until run.timeout_s,
    # or hang in a mismatched one)
    for cmd in ("train", "eval"):
        cases.append(("rank 1's training file does not load (%s)" % cmd,
                      base + ["-np", "1", "-wdir", same, tools.pipetrain, cmd, bcfg] +
                      (["--init"] if cmd == "eval" else []) + [":", "-np", "1", "-wdir", bad,
                                                               tools.pipetrain, cmd, bcfg] +
                      (["--init"] if cmd == "eval" else []), None,
                      ["rank 1: error: %s:" % bcfg, "data.train_file: train.tsv:17: no tab"]))
    # a setting taken from a file beside the vocabulary (data.lowercase at
    # auto, from tokenizer_config.json) that differs on rank 1 is named: its
    # token ids differ, and it was blamed on the training file
    tokcfg = os.path.join(work, "files-tokcfg")
    shutil.copytree(same, tokcfg)
    with open(os.path.join(tokcfg, "tokenizer_config.json"), "w") as f:
        f.write('{"do_lower_case": false}\n')
    cases.append(("rank 1's tokenizer_config.json is cased",
                  base + ["-np", "1", "-wdir", same, tools.pipetrain, "train", bcfg, ":",
                          "-np", "1", "-wdir", tokcfg, tools.pipetrain, "train", bcfg], None,
                  ["rank 1: error: this rank takes data.lowercase = false from "
                   "'tokenizer_config.json', rank 0 takes true"]))
    for name, what, key in (("vocab", "vocabulary", "data.vocab 'vocab.txt'"),
                            ("train", "training data", "data.train_file 'train.tsv'")):
        cases.append(("rank 1 reads another %s" % name,
                      base + ["-np", "1", "-wdir", same, tools.pipetrain, "train", bcfg, ":",
                              "-np", "1", "-wdir", os.path.join(work, "files-" + name),
                              tools.pipetrain, "train", bcfg], None,
                      ["rank 1: error: this rank reads other %s than rank 0 from %s" % (what, key)]))
    # a relative run.dir, a relative checkpoint or model.init_from that are
    # other directories or files on rank 1: refused before anything is
    # written or mixed (a run wrote rank 1's units over another run's
    # checkpoint; eval mixed two checkpoints' stages)
    other = os.path.join(work, "files-other")
    shutil.copytree(same, other)
    norun = os.path.join(work, "files-norun")  # no run.dir (another node's file system)
    shutil.copytree(same, norun)
    rel = os.path.join(work, "bert-relative.yaml")
    with open(bcfg) as f:
        text = f.read()
    with open(rel, "w") as f:
        f.write(text.replace("  dir: %s\n" % bert_run, "  dir: run\n"))
    one = [tools.mpiexec, "--oversubscribe", "-np", "1"]
    for d, seed in ((same, "1"), (other, "2")):
        r = subprocess.run(one + ["-wdir", d, tools.pipetrain, "train", rel, "--set",
                                  "pipeline.replicas=1", "--set", "run.seed=" + seed],
                           cwd=H.ROOT, env=H.ENV, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        step = os.path.join(d, "run", "checkpoints", "step_%010d" % 2)
        os.symlink(step, os.path.join(d, "ckpt"))
        r = subprocess.run(one + [tools.pipetrain, "export", step, os.path.join(d, "init")],
                           cwd=H.ROOT, env=H.ENV, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    # rank 1's model.init_from with another dropout in its config.json
    # (model.dropout at auto reads it): named, not blamed on the weights
    drop = os.path.join(work, "files-dropout")
    shutil.copytree(same, drop, symlinks=True)
    with open(os.path.join(drop, "init", "config.json")) as f:
        hf = json.load(f)
    hf["hidden_dropout_prob"] = 0.25
    with open(os.path.join(drop, "init", "config.json"), "w") as f:
        json.dump(hf, f)
    cases.append(("rank 1's model.init_from has another dropout",
                  base + ["-np", "1", "-wdir", same, tools.pipetrain, "eval", rel, "--init", "--set",
                          "model.init_from=init", ":", "-np", "1", "-wdir", drop, tools.pipetrain,
                          "eval", rel, "--init", "--set", "model.init_from=init"], None,
                  ["rank 1: error: this rank takes model.dropout = 0.25 from 'init/config.json', "
                   "rank 0 takes 0:"]))
    two = lambda *args: (base + ["-np", "1", "-wdir", same, tools.pipetrain] + list(args) +
                         [":", "-np", "1", "-wdir", other, tools.pipetrain] + list(args))
    cases += [
        ("rank 1's relative run.dir is another directory",
         two("train", rel, "--set", "train.resume=auto", "--set", "run.seed=1"), None,
         ["rank 1: error: %s:2: run.dir: 'run' is not the directory rank 0 locked" % rel,
          "here, on host '%s'" % socket.gethostname()]),
        ("rank 1 sees no run.dir (and so no lock) where rank 0 has one",
         base + ["-np", "1", "-wdir", same, tools.pipetrain, "train", rel, "--set", "train.resume=auto",
                 "--set", "run.seed=1", ":", "-np", "1", "-wdir", norun, tools.pipetrain, "train", rel,
                 "--set", "train.resume=auto", "--set", "run.seed=1"], None,
         ["rank 1: error: %s:2: run.dir: " % rel, "lock", "on host '%s' (rank 0 locked it" %
          socket.gethostname()]),
        ("rank 1's relative --checkpoint is another checkpoint",
         two("eval", rel, "--checkpoint", "ckpt", "--set", "pipeline.stages=2", "--set",
             "pipeline.replicas=1"), None,
         ["rank 1: error: checkpoint 'ckpt' is not the one rank 0 reads"]),
        ("rank 1's relative train.resume is another checkpoint",
         two("train", rel, "--set", "train.resume=ckpt", "--set", "run.dir=" + bert_run,
             "--set", "run.seed=1", "--set", "train.max_steps=3"), None,
         ["rank 1: error: checkpoint 'ckpt' is not the one rank 0 reads"]),
        ("rank 1's relative model.init_from is other weights",
         two("eval", rel, "--init", "--set", "model.init_from=init"), None,
         ["rank 1: error: ", "this rank reads other initial weights than rank 0 from "
          "model.init_from 'init'"]),
    ]
    # a config that does not parse on one rank: bad input (2) whichever rank
    # mpirun reports, each time
    broken = os.path.join(work, "broken.yaml")
    with open(broken, "w") as f:
        f.write("run: [bad\n")
    for i in range(3):
        cases.append(("a config that does not parse on rank 2, try %d" % (i + 1),
                      base + ["-np", "2", tools.pipetrain, "train", cfg, ":", "-np", "1",
                              tools.pipetrain, "train", broken], None,
                      ["rank 2: error: %s:" % broken, "YAML syntax error"]))
    for name, cmd, stdin, words in cases:
        before = H.our_segments()
        with open(stdin or os.devnull) as inp:
            r = subprocess.run(cmd, cwd=H.ROOT, env=H.ENV, stdin=inp, capture_output=True,
                               text=True, timeout=120)
        out = r.stdout + r.stderr
        problems = ["the output lacks %r" % w for w in words if w not in out]
        if r.returncode != 2:
            problems.append("exit status %d, not 2" % r.returncode)
        if "rank 0: error" in out or "another rank reads" in out:
            problems.append("a rank that agrees with rank 0 printed a message")
        if os.path.exists(run) or os.path.exists(bert_run):
            problems.append("run.dir was created")
        if H.segments_left(before):
            problems.append("shared memory left: %s" % H.segments_left(before))
        if problems:
            failures += 1
            print("FAIL configs differ (%s): %s\n%s" % (name, "; ".join(problems), out[-2000:]),
                  flush=True)
        else:
            print("ok   configs differ (%s): refused, exit 2" % name, flush=True)
    # the same files in two places: trained
    r = subprocess.run(base + ["-np", "1", "-wdir", same, tools.pipetrain, "train", bcfg, ":", "-np",
                               "1", "-wdir", os.path.join(work, "files-same"), tools.pipetrain,
                               "train", bcfg], cwd=H.ROOT, env=H.ENV, capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        failures += 1
        print("FAIL the same files on both ranks: exit %d\n%s" % (r.returncode, r.stderr[-2000:]),
              flush=True)
    else:
        print("ok   the same files on both ranks: trained", flush=True)
    return failures


def read_only_on_rank1(tools, work):
    """Rank 1 sees run.dir (fresh) or its checkpoints/ (a resume) through a
    read-only bind mount of its own: refused before a step, nothing of the
    run changed."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("ok   run.dir read-only on rank 1: skipped (needs root and unshare)", flush=True)
        return 0
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"])
    if probe.returncode != 0:
        print("ok   run.dir read-only on rank 1: skipped (unshare --mount fails here)", flush=True)
        return 0
    # rank 1 enters a mount namespace where RO_DIR is read-only, then execs pipetrain
    wrap = ['unshare', '--mount', '--propagation', 'private', 'sh', '-c',
            'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"']
    parent = os.path.join(work, "ro-parent")
    os.mkdir(parent)
    run = os.path.join(parent, "run")
    cfg = os.path.join(work, "ro.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(run=run, batch=4, stages=1, replicas=2, micro=1))
    line = 2  # run: / dir:
    failures = 0

    def launch(ro_dir, extra):
        cmd = [tools.mpiexec, "--oversubscribe", "-np", "1", tools.pipetrain, "train", cfg] + extra + \
              [":", "-np", "1"] + wrap + [ro_dir, tools.pipetrain, "train", cfg] + extra
        return subprocess.run(cmd, cwd=H.ROOT, env=H.ENV, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=120)

    def check(name, r, words, unchanged):
        nonlocal failures
        out = r.stdout + r.stderr
        problems = ["the output lacks %r" % w for w in words if w not in out]
        if r.returncode != 2:
            problems.append("exit status %d, not 2" % r.returncode)
        if "step 1" in out or "MPI_ABORT" in out:
            problems.append("it started training")
        problems += unchanged()
        if problems:
            failures += 1
            print("FAIL run.dir read-only on rank 1 (%s): %s\n%s" % (name, "; ".join(problems),
                                                                     out[-2000:]), flush=True)
        else:
            print("ok   run.dir read-only on rank 1 (%s): refused, exit 2" % name, flush=True)

    before = H.our_segments()
    r = launch(parent, [])
    check("a fresh run.dir", r,
          ["rank 1: error: %s:%d: run.dir: cannot create files in '%s' on host '" % (cfg, line, run),
           "Read-only file system", "writable from every node"],
          lambda: (["run.dir was left behind"] if os.path.exists(run) else []) +
                  (["shared memory left"] if H.segments_left(before) else []))
    # a run that trained, resumed while rank 1 cannot write its checkpoints/
    rc, _, out = tools.run(2, ["train", cfg], check=False, timeout=300)
    if rc != 0:
        print("FAIL run.dir read-only on rank 1: the 2-replica run did not train (%d):\n%s"
              % (rc, out[-2000:]), flush=True)
        return failures + 1
    ckpts = os.path.join(run, "checkpoints")

    def listing():
        return sorted((os.path.relpath(os.path.join(d, n), run), os.path.getsize(os.path.join(d, n)))
                      for d, _, names in os.walk(run) for n in names if n != "lock")
    was = listing()
    r = launch(ckpts, ["--set", "train.resume=auto", "--set", "train.max_steps=4"])
    check("checkpoints/ on a resume", r,
          ["rank 1: error: %s:%d: run.dir: cannot create files in '%s' on host '" % (cfg, line, ckpts),
           "Read-only file system"],
          lambda: [] if listing() == was else ["run.dir changed: %r -> %r" % (was, listing())])
    return failures


def reported(name, problems, out, ok):
    """Prints ok or FAIL with the problems and the output's end; returns
    the failures (0 or 1)."""
    if problems:
        print("FAIL %s: %s\n%s" % (name, "; ".join(problems), out[-2000:]), flush=True)
        return 1
    print("ok   %s: %s" % (name, ok), flush=True)
    return 0


def log_unopenable_on_rank1(tools, work):
    """A run.dir that holds a one-process run's logs (metrics-rank0.jsonl,
    samples-rank0.jsonl), resumed on 2 ranks where rank 1's samples log
    cannot be opened (a directory in its place): refused, exit 2, naming
    it, and run.dir as it was, byte for byte (its lock too). The ranks'
    new empty logs (metrics-rank1.jsonl) were left: the start took back
    per-rank logs only where run.dir held none at all."""
    run = os.path.join(work, "logs-run")
    cfg = os.path.join(work, "logs.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(run=run, batch=4, stages=1, replicas=2, micro=1))
    logs = ["--set", "run.rank_metrics=true", "--set", "run.log_samples=true"]
    tools.run(1, ["train", cfg, "--set", "pipeline.replicas=1"] + logs)
    os.mkdir(os.path.join(run, "samples-rank1.jsonl"))

    def listing():
        out = []
        for d, dirs, names in os.walk(run):
            out += [(os.path.relpath(os.path.join(d, n), run), "dir") for n in dirs]
            for n in names:
                with open(os.path.join(d, n), "rb") as fh:
                    out.append((os.path.relpath(os.path.join(d, n), run), fh.read()))
        return sorted(out)
    was = listing()
    rc, _, out = tools.run(2, ["train", cfg, "--set", "train.resume=auto", "--set",
                               "train.max_steps=4"] + logs, check=False, timeout=300)
    problems = [] if rc == 2 else ["exit status %d, not 2" % rc]
    if "samples-rank1.jsonl" not in out or "Is a directory" not in out:
        problems.append("the refusal does not name rank 1's samples log")
    now = listing()
    if now != was:
        problems.append("run.dir changed: removed %s, added %s" % (
            sorted(n for n, _ in set(was) - set(now)), sorted(n for n, _ in set(now) - set(was))))
    return reported("a log rank 1 cannot open", problems, out,
                    "refused, exit 2, run.dir as it was")


def rank1_stopped_with_its_logs_open(tools, work):
    """Rank 1 stops (SIGSTOP) right after it opened its logs, under the lock,
    in a run.dir the job made: rank 0 gives up after run.timeout_s and the
    job ends with exit 1; run.dir goes with rank 1's empty log in it. Rank 1
    never reaches the refusal, so rank 0 takes back the empty logs that were
    not there when it took the lock, whichever rank made them (each rank
    used to take back only its own, and the run.dir stayed)."""
    run = os.path.join(work, "stopped-run")
    cfg = os.path.join(work, "stopped.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(run=run, batch=4, stages=1, replicas=2, micro=1))
    rc, _, out = tools.run(2, ["train", cfg, "--set", "run.rank_metrics=true", "--set",
                               "run.timeout_s=3"], check=False, timeout=300,
                           env={"PIPETRAIN_TEST_FAULT": "1:0:sigstop:settling"})
    problems = [] if rc == 1 else ["exit status %d, not 1" % rc]
    if "rank 1 is in no wait" not in out:
        problems.append("rank 1 is not named")
    if os.path.exists(run):
        problems.append("run.dir left: %s" % sorted(os.listdir(run)))
    return reported("rank 1 stopped with its logs open", problems, out,
                    "exit 1, no run.dir left")


def extra_tensor_in_init(tools, work):
    """model.init_from with a tensor no unit of the model has is refused,
    naming the tensor, whatever the layout: it used to be refused on one
    stage only (each stage of a pipeline loads its own units and could not
    tell another stage's tensor from none)."""
    run = os.path.join(work, "run-for-init")
    cfg = os.path.join(work, "for-init.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(run=run, batch=4, stages=1, replicas=1, micro=1))
    tools.run(1, ["train", cfg], timeout=300)
    exported = os.path.join(work, "init.safetensors")
    tools.run(1, ["export", H.latest_checkpoint(run), exported])
    with open(exported, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header, body = json.loads(data[8:8 + n]), data[8 + n:]
    header["block9.extra"] = {"dtype": "F32", "shape": [3],
                              "data_offsets": [len(body), len(body) + 12]}
    text = json.dumps(header).encode()
    extra = os.path.join(work, "extra.safetensors")
    with open(extra, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body + bytes(12))
    failures = 0
    for stages in (1, 2):
        run_dir = os.path.join(work, "run-extra-%d" % stages)
        rc, _, out = tools.run(stages, ["train", cfg, "--set", "run.dir=" + run_dir, "--set",
                                        "model.init_from=" + extra, "--set",
                                        "pipeline.stages=%d" % stages], check=False, timeout=120)
        failures += refusal_failed(
            "init_from with an extra tensor on %d stage(s): refused naming it" % stages, rc, out,
            run_dir, ["has tensor 'block9.extra', which this model does not have"])
    return failures


def stopped_rank0(p, timeout):
    """The pid of rank 0 of the job started as p once it stopped itself
    (SIGSTOP, the test hook), or None if it did not within timeout s."""
    end = time.time() + timeout
    while time.time() < end and p.poll() is None:
        time.sleep(0.05)
        kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                              text=True).stdout.split()
        for pid in map(int, kids):
            try:
                with open("/proc/%d/stat" % pid) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                with open("/proc/%d/environ" % pid, "rb") as f:
                    env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
                if state == "T" and env.get(b"OMPI_COMM_WORLD_RANK") == b"0":
                    return pid
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
    return None


def eval_with_cache_under_memory(tools, work):
    """`eval` on 4 ranks under a pipeline.memory_gib that holds the model for
    inference, with the config's cache on (as the run trained with it): the
    planner counted the frozen model's prefix as riding in front of stage 0,
    as the cache serves it in training, and refused every layout (exit 2),
    while the same eval with the cache off ran. An evaluation opens no
    cache (it passes each test example once): both run, with the same loss,
    and while rank 0 is stopped in its first round of evaluation (the test
    hook's SIGSTOP) /dev/shm holds no segment of the job (named after rank
    0's pid), where the cache would have been opened before."""
    run = os.path.join(work, "run-eval-cache")
    cfg = os.path.join(work, "eval-cache.yaml")
    with open(cfg, "w") as f:
        f.write("run: {dir: %s, threads: 1}\n"
                "model: {kind: vit, dim: 16, layers: 6, heads: 2, patch: 4, classes: 4}\n"
                "data: {kind: synthetic_images, synthetic_examples: 64, image_size: 8}\n"
                "train: {batch: 8, max_steps: 6}\n"
                "freeze: {policy: schedule}\n" % run)
    tools.run(1, ["train", cfg], timeout=300)
    losses, failures = {}, 0
    for cache in ("false", "true"):
        args = ["eval", cfg, "--set", "pipeline.memory_gib=0.00008", "--set", "cache.enabled=" + cache]
        p = subprocess.Popen(tools.command(4, args), cwd=H.ROOT,
                             env=dict(H.ENV, PIPETRAIN_TEST_FAULT="0:*:sigstop:eval"),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        pid = stopped_rank0(p, 120)
        segments = []
        if pid is not None:
            prefix = "pipetrain-%d-%d-" % (os.getuid(), pid)
            segments = [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]
            os.kill(pid, signal.SIGCONT)
        try:
            out, _ = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        got = re.findall(r"^test loss ([0-9.]+)$", out, re.M)
        if p.returncode != 0 or len(got) != 1 or pid is None or segments:
            failures += 1
            print("FAIL eval on 4 ranks under pipeline.memory_gib, cache %s: exit %d, rank 0 %s, "
                  "segments of the job in /dev/shm while it evaluated: %s\n%s"
                  % (cache, p.returncode, "stopped" if pid else "never stopped", segments,
                     out[-2000:]), flush=True)
        else:
            losses[cache] = got[0]
    if len(losses) == 2 and losses["false"] != losses["true"]:
        failures += 1
        print("FAIL eval under pipeline.memory_gib: test loss %s with the cache off, %s on"
              % (losses["false"], losses["true"]), flush=True)
    if not failures:
        print("ok   eval on 4 ranks under pipeline.memory_gib, the config's cache on and off: "
              "test loss %s, no cache segment" % losses["true"], flush=True)
    return failures


def memory_suggestions_on_replicas(tools, work):
    """One stage with its micro-batches fixed on 2 ranks, refused by
    pipeline.memory_gib: what the refusal suggests (a micro-batch count, or
    a share per replica in micro-batches of one) is accepted when followed,
    with pipeline.replicas fixed at 2 and left to the planner. With auto
    the check counted 2 replicas without the gradient all-reduce's buffers,
    which the planner counts for every D >= 2: it suggested 16 micro-batches
    where 32 fit, and the planner refused that with no suggestion. And the
    planner's own refusal, on 2 and 4 ranks, names a batch that plans."""
    cfg = os.path.join(work, "memory-replicas.yaml")
    with open(cfg, "w") as f:
        f.write("run: {dir: %s, seed: 1, threads: 1}\n"
                "model: {kind: vit, dim: 64, layers: 4, heads: 4, patch: 7, classes: 10}\n"
                "data: {kind: synthetic_images, synthetic_examples: 256}\n"
                "train: {batch: 64, max_steps: 2}\n"
                "pipeline: {stages: 1, microbatches: 1, memory_gib: 0.004}\n"
                % os.path.join(work, "run-memory-replicas"))
    def follow(config, sets, where, named, ranks=2):
        """1 when the refusal of config on `ranks` ranks names nothing that
        named(out) finds (the --set arguments that follow it), or following
        it does not plan; else 0."""
        rc, _, out = tools.run(ranks, ["plan", config] + sets, check=False, timeout=120)
        given = named(out) if rc == 2 else None
        if not given:
            print("FAIL %s: exit %d, nothing named to follow\n%s" % (where, rc, out[-2000:]))
            return 1
        rc, _, again = tools.run(ranks, ["plan", config] + sets + given, check=False, timeout=120)
        if rc != 0:
            print("FAIL %s: following %s gave exit %d\n%s" % (where, " ".join(given[1::2]), rc,
                                                              again[-2000:]))
            return 1
        print("ok   %s: following %s plans" % (where, " ".join(given[1::2])))
        return 0

    def batch_named(out):
        """a micro-batch count, or a share per replica in micro-batches of one"""
        m = re.search(r"allowed: pipeline\.microbatches = (\d+) \(micro-batches of \d+ examples?\)", out)
        share = re.search(r"allowed: at most (\d+) examples? per replica, in micro-batches of "
                          r"one \(pipeline\.microbatches = (\d+)\)", out)
        return (["--set", "pipeline.microbatches=" + m.group(1)] if m else
                ["--set", "train.batch=%d" % (2 * int(share.group(1))),
                 "--set", "pipeline.microbatches=" + share.group(2)] if share else None)

    def dim_named(out):
        """a model.dim that holds the whole step (not one example's)"""
        m = re.search(r"allowed: model\.dim = (\d+)( or narrower)?,", out)
        return ["--set", "model.dim=" + m.group(1)] if m and "for one example:" not in out else None

    def batch_planned(out):
        """the batch the planner's refusal names"""
        m = re.search(r"no pipeline layout fits.*\(train\.batch = (\d+) has one\)", out)
        return ["--set", "train.batch=" + m.group(1)] if m else None

    failures = 0
    for replicas in ("auto", "2"):
        for schedule in ("1f1b", "gpipe"):
            failures += follow(
                cfg, ["--set", "pipeline.replicas=" + replicas, "--set", "pipeline.schedule=" + schedule],
                "memory refusal on 2 ranks, replicas %s, %s" % (replicas, schedule), batch_named)
    # uneven shares (7 over 2 replicas: 4 and 3): the count named is one the
    # smaller share holds, or a batch that splits evenly (a reviewer found 4
    # micro-batches named, which the layout check refuses for a share of 3)
    gpt = os.path.join(work, "memory-uneven.yaml")
    with open(gpt, "w") as f:
        f.write("run: {dir: %s, seed: 1, threads: 1}\n"
                "model: {kind: gpt, dim: 64, layers: 2, heads: 4, context: 64}\n"
                "data: {kind: synthetic_text, synthetic_examples: 256}\n"
                "train: {batch: 7, max_steps: 2}\n"
                "pipeline: {stages: 1, microbatches: 1, memory_gib: 0.003418}\n"
                % os.path.join(work, "run-memory-uneven"))
    for replicas in ("2", "auto"):
        failures += follow(gpt, ["--set", "pipeline.replicas=" + replicas],
                           "memory refusal on 2 ranks, 7 examples over replicas %s" % replicas,
                           batch_named)
    # the weights past the limit with replicas auto, blocks frozen from the
    # start: the model.dim named is one the planner (which lays out D) fits
    # too, its sizes interpolated between those it times at (a tester found
    # 48 named, which the planner refused by a few hundred bytes)
    wide = os.path.join(work, "memory-wide.yaml")
    with open(wide, "w") as f:
        f.write("run: {dir: %s, seed: 1, threads: 1}\n"
                "model: {kind: vit, dim: 128, layers: 6, heads: 4, patch: 4, classes: 10}\n"
                "data: {kind: synthetic_images, synthetic_examples: 64}\n"
                "train: {batch: 16, max_steps: 2}\n"
                "pipeline: {stages: 1, microbatches: 1, replicas: auto, memory_gib: 0.01}\n"
                "freeze: {policy: schedule, start: 0, max_depth: 2}\n"
                % os.path.join(work, "run-memory-wide"))
    for frozen, sets in (("2", []), ("no", ["--set", "freeze.policy=none"])):
        failures += follow(wide, sets, "weights past the limit on 2 ranks, replicas auto, %s blocks "
                           "frozen" % frozen, dim_named)
    # the layout left to the planner on 2 and 4 ranks: its refusal names the
    # largest batch it finds a layout for, which then plans; also with M and
    # D fixed, where batches below M D are no answer about memory (the
    # search once took their refusal for "too large" and named nothing)
    for ranks, fixed in ((2, []), (4, []), (2, ["--set", "pipeline.replicas=1", "--set",
                                               "pipeline.microbatches=8", "--set", "train.batch=12"])):
        sets = ["--set", "pipeline.stages=auto", "--set", "pipeline.microbatches=auto",
                "--set", "pipeline.memory_gib=" + ("0.0022" if fixed else "0.002")] + fixed
        failures += follow(cfg, sets, "planner's memory refusal on %d ranks%s" % (
            ranks, " (D, M fixed)" if fixed else ""), batch_planned, ranks)
    return failures


def staging_share_on_replicas(tools, work):
    """A batch whose staged inputs cannot fit a rank's RAM is refused naming
    train.batch, with the larger replica's share: 16777215 over 2 replicas is
    8388608 per replica (the ceiling; the floor, 8388607, understates what the
    larger replica stages). A GPT of context 65536 stages about 0.5 MiB an
    example, so the share takes some 4 TiB: refused on any machine."""
    run = os.path.join(work, "run-staging")
    cfg = os.path.join(work, "staging.yaml")
    with open(cfg, "w") as f:
        f.write("run:\n  dir: %s\n  threads: 1\nmodel:\n  kind: gpt\n  context: 65536\n"
                "  dim: 8\n  layers: 1\n  heads: 1\ndata:\n  kind: synthetic_text\n"
                "  synthetic_examples: 64\ntrain:\n  batch: 16777215\n"
                "pipeline:\n  replicas: 2\n" % run)
    failures = 0
    for cmd in ("train", "plan"):
        rc, _, out = tools.run(2, [cmd, cfg], check=False, timeout=120)
        failures += refusal_failed("staging share on 2 replicas (%s)" % cmd, rc, out, run,
                                   ["%s:14: train.batch: " % cfg,
                                    "16777215 examples, 8388608 per replica,"])
    return failures


def main():
    tools = H.Tools(sys.argv)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="pt-layout-") as work:
        cases = [  # (name, ranks, batch, stages, replicas, micro, key, words)
            ("micro_above_smaller_share", 2, 5, 1, 2, 3, "pipeline.microbatches",
             ["train.batch = 5 over 2 replicas", "smallest share 2 examples", "1 to 2"]),
            ("micro_above_share_of_one", 2, 3, 1, 2, 2, "pipeline.microbatches",
             ["smallest share 1 example;", "1 to 1"]),
            ("micro_above_share_in_pipelines", 4, 9, 2, 2, 5, "pipeline.microbatches",
             ["train.batch = 9 over 2 replicas", "smallest share 4 examples"]),
            ("replicas_above_batch", 2, 1, 1, 2, 1, "pipeline.replicas",
             ["a step has only train.batch = 1"]),
            ("replicas_above_ranks", 2, 8, 1, 3, 1, "pipeline.replicas", ["at most 2 pipelines"]),
            ("stages_above_ranks", 2, 8, 3, 1, 1, "pipeline.stages", ["2 ranks"]),
        ]
        for name, ranks, batch, stages, replicas, micro, key, words in cases:
            run = os.path.join(work, "run-" + name)
            text = CONFIG.format(run=run, batch=batch, stages=stages, replicas=replicas,
                                 micro=micro)
            cfg = os.path.join(work, name + ".yaml")
            with open(cfg, "w") as f:
                f.write(text)
            line = next(i for i, l in enumerate(text.splitlines(), 1)
                        if l.strip().startswith(key.split(".")[1] + ":"))
            for cmd in ("train", "plan"):
                before = H.our_segments()
                rc, _, out = tools.run(ranks, [cmd, cfg], check=False, timeout=120)
                where = "%s (%s, %d ranks)" % (name, cmd, ranks)
                problems = []
                if rc != 2:
                    problems.append("exit status %d, not 2" % rc)
                for w in ["%s:%d: %s: " % (cfg, line, key)] + words:
                    if w not in out:
                        problems.append("the output lacks %r" % w)
                if "MPI_ABORT" in out or "step 1" in out:
                    problems.append("it started training")
                if os.path.exists(run):
                    problems.append("run.dir was created")
                if H.segments_left(before):
                    problems.append("shared memory left: %s" % H.segments_left(before))
                if problems:
                    failures += 1
                    print("FAIL %s: %s\n%s" % (where, "; ".join(problems), out[-2000:]), flush=True)
                else:
                    print("ok   %s" % where, flush=True)
        # the boundary, M = the smallest share, trains: an even split (4 over
        # 2) and an uneven one (5 over 2: shares 3 and 2), the case the bug was about
        for batch in (4, 5):
            text = CONFIG.format(run=os.path.join(work, "run-boundary-%d" % batch), batch=batch,
                                 stages=1, replicas=2, micro=2)
            cfg = os.path.join(work, "boundary-%d.yaml" % batch)
            with open(cfg, "w") as f:
                f.write(text)
            rc, _, out = tools.run(2, ["train", cfg], check=False, timeout=300)
            if rc != 0:
                failures += 1
                print("FAIL boundary: batch %d, D 2, M 2 did not train (%d):\n%s"
                      % (batch, rc, out[-2000:]))
            else:
                print("ok   boundary: batch %d, D 2, M 2 trains" % batch)
        # plan lists every rank's binding with the threads it will use
        # (run.threads, not its share of the cores); it used to print rank 0's alone
        for threads in ("1", "2"):
            rc, _, out = tools.run(2, ["plan", os.path.join(work, "boundary-4.yaml"), "--set",
                                       "run.threads=" + threads], check=False, timeout=120)
            want = ", %s %s" % (threads, "thread" if threads == "1" else "threads")
            lines = [l for l in out.splitlines() if re.match(r"rank [01]: ", l)]
            if rc != 0 or len(lines) != 2 or not all(l.endswith(want) for l in lines):
                failures += 1
                print("FAIL plan with run.threads %s on 2 ranks: exit %d, binding lines %r\n%s"
                      % (threads, rc, lines, out[-2000:]))
            else:
                print("ok   plan lists both ranks' bindings, run.threads %s" % threads)
        failures += damaged_stage_file(tools, work)
        failures += configs_differ(tools, work)
        failures += read_only_on_rank1(tools, work)
        failures += log_unopenable_on_rank1(tools, work)
        failures += rank1_stopped_with_its_logs_open(tools, work)
        failures += extra_tensor_in_init(tools, work)
        failures += eval_with_cache_under_memory(tools, work)
        failures += memory_suggestions_on_replicas(tools, work)
        failures += staging_share_on_replicas(tools, work)
    if failures:
        fail("%d case(s)" % failures)
    print("mpi_layout_errors: all passed")


if __name__ == "__main__":
    main()
