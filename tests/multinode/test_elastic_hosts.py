#!/usr/bin/env python3
"""Elastic re-planning across simulated hosts (tests/multinode/hosts.sh):
freed ranks on both hosts go idle, then join as replicas.

2 hosts x 3 ranks train tests/mpi/test_elastic.py's ViT (4 blocks of width
64, 512 examples, batch 32, 4 epochs, a freeze decision after each) with the
cache on, planning from that test's profile as measured on this world (6
ranks, 3 per node, a core each; the link between hosts a quarter of the
link inside one), under a per-device memory limit (0.0025 GiB) that the
planner meets with:
  (K, D) = (3, 2)  every rank busy, one pipeline inside each host;
        -> (2, 2)  2 blocks frozen: each host's third rank (2 and 5) idle,
                   after handing on what it held;
        -> (1, 6)  3 blocks frozen: ranks 2 and 5 replicas again, taking
                   the units' parameters and Adam moments from a rank that
                   kept them.
Checked:
  - those layouts, and ranks 2 and 5 training no example while idle and
    their replica's share after they join (run.log_samples);
  - every step's loss within 1e-5 and every weight within 1e-4 (normwise) of
    one process with the same freeze decisions (tests/mpi/test_elastic.py's
    tolerances, for the same model: only the order of sums differs); the
    replicas hold the same weights at every step (run.check_replicas);
  - every example exactly once per epoch, across both transitions;
  - while it trains each host has its own cache segment, in its own
    /dev/shm, and afterwards neither is left (the cache is what makes the
    frozen blocks free, and so the (2, 2) layout the fastest: with it off
    the planner keeps K = 3 at step 16, and no rank is idle);
  - the checkpoint saved at step 16, which resumes at (2, 2) with ranks 2
    and 5 idle, resumed on the same 6 ranks: the same re-plan to (1, 6) at
    step 32, and bit-identical to the run that never stopped.
The hosts are torn down however the test ends.

Passes with "skipped: ..." where the hosts cannot be made.

usage: test_elastic_hosts.py PIPETRAIN HOSTS_SH MPIEXEC"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mpi"))
import harness as h  # noqa: E402

LOSS_TOL, TOL, ENTRY_TOL, LR = 1e-5, 1e-4, 1e-3, 0.002
CONFIG = """run: {{seed: 5, threads: 1, timeout_s: 120}}
model: {{kind: vit, dim: 64, layers: 4, heads: 4, patch: 7}}
data: {{kind: synthetic_images, synthetic_examples: 512}}
train: {{batch: 32, epochs: 4, lr: {lr}, eval_every: 0, eval_examples: 64, keep_checkpoints: 10}}
freeze: {{policy: schedule, alpha: 0.5, every: 1, start: 1, max_depth: 3}}
cache: {{enabled: true}}
"""
EXAMPLES, HOSTS, PER_HOST, MEMORY = 512, 2, 3, "0.0025"
RANKS = HOSTS * PER_HOST
IDLE = (2, 5)  # each host's third rank, idle at (2, 2)
failures = []


def expect(cond, what):
    print("  %s: %s" % ("ok" if cond else "FAIL", what), flush=True)
    if not cond:
        failures.append(what)


def skip_reason():
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "nsenter", "unshare"):
        if not shutil.which(tool):
            return "%s is missing" % tool
    if subprocess.run(["unshare", "--net", "--uts", "--mount", "true"]).returncode != 0:
        return "unshare --net --uts --mount fails here"
    return None


def world_profile(path):
    """test_elastic.py's ViT profile as measured on this world."""
    with open(os.path.join(HERE, "..", "mpi", "elastic_profile.json")) as f:
        p = json.load(f)
    p["ranks"], p["node_of"], p["cores"] = RANKS, [r // PER_HOST for r in range(RANKS)], PER_HOST
    p["links"]["inter_bytes_per_s"] = p["links"]["intra_bytes_per_s"] / 4
    with open(path, "w") as f:
        json.dump(p, f)
    return path


def main():
    binary, hosts = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    mpiexec = sys.argv[3] if len(sys.argv) > 3 else "mpirun"
    why = skip_reason()
    if why:
        print("skipped: needs root and network namespaces (%s)" % why)
        return 0
    env = dict(os.environ, MNH_NAME="mnel%d" % os.getpid(), MNH_SLOTS=str(PER_HOST), MNH_TIMEOUT="300",
               MNH_MPIRUN=mpiexec, OMP_NUM_THREADS="1")
    env.pop("MNH_SUBNET", None)
    env.pop("MNH_CPUS", None)

    def H(*args, check=True):
        r = subprocess.run([hosts] + list(args), env=env, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise SystemExit("hosts.sh %s failed (%d):\n%s%s" % (" ".join(args), r.returncode,
                                                                 r.stdout, r.stderr))
        return r

    def segments(host):
        return [n for n in H("exec", str(host), "ls", "/dev/shm").stdout.split()
                if n.startswith("pipetrain-")]

    work = tempfile.mkdtemp(prefix="pt-elastic-hosts-")
    try:
        config = os.path.join(work, "c.yaml")
        with open(config, "w") as f:
            f.write(CONFIG.format(lr=LR))
        profile = world_profile(os.path.join(work, "profile.json"))

        def result(run_dir):
            loss = {r["step"]: r["loss"] for r in h.events(run_dir, "step")}
            return loss, h.export_weights(binary, h.latest_checkpoint(run_dir), run_dir + ".st")

        def train(run_dir, watch=False, **kv):
            """6 ranks across the hosts; with watch, the hosts' cache
            segments seen while it ran."""
            cmd = [hosts, "run", "--", "-np", str(RANKS), "-x", "OMP_NUM_THREADS", binary, "train", config] + \
                h.sets(run__dir=run_dir, pipeline__memory_gib=MEMORY, pipeline__cores=str(PER_HOST), **kv)
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            seen = {host: set() for host in range(HOSTS)}
            while watch and p.poll() is None:
                for host in range(HOSTS):
                    seen[host].update(segments(host))
                time.sleep(0.05)
            out = p.communicate()[0]
            expect(p.returncode == 0, "%s: exits 0 (%d)%s" % (os.path.basename(run_dir), p.returncode,
                                                              "" if p.returncode == 0 else "\n" + out[-3000:]))
            return p.returncode == 0, seen

        print("one process (the reference)", flush=True)
        ref_dir = os.path.join(work, "serial")
        subprocess.run([binary, "train", config] + h.sets(run__dir=ref_dir), check=True, capture_output=True,
                       env=dict(h.ENV))
        ref = result(ref_dir)
        steps = len(ref[0])
        H("up", str(HOSTS))

        print("%d hosts x %d ranks, elastic, cache on" % (HOSTS, PER_HOST), flush=True)
        on_dir = os.path.join(work, "cache-on")
        ok, seen = train(on_dir, watch=True, pipeline__profile=profile, run__log_samples="true",
                         run__check_replicas=1)
        if not ok:
            raise SystemExit("FAILED: the elastic run across hosts did not finish")
        layouts = [(e["step"], (e["old"]["stages"], e["old"]["replicas"]), (e["new"]["stages"], e["new"]["replicas"]))
                   for e in h.events(on_dir, "replan")]
        expect([(s, a, b) for s, a, b in layouts if a != b] == [(16, (3, 2), (2, 2)), (32, (2, 2), (1, 6))],
               "(K, D) went (3, 2) -> (2, 2) at step 16 -> (1, 6) at step 32: %s" % layouts)
        expect(all(len(s) == 1 for s in seen.values()) and not seen[0] & seen[1],
               "each host had its own cache segment while training: %s" % seen)
        expect(not segments(0) and not segments(1), "both hosts' cache segments are gone at the end")
        by_rank = h.samples(on_dir)
        for rank in IDLE:
            epochs = sorted(by_rank.get(rank, {}))
            expect(1 not in epochs and 2 in epochs and 3 in epochs,
                   "rank %d (host %d) idle in epoch 1, a replica in epochs 2 and 3: examples in epochs %s"
                   % (rank, rank // PER_HOST, epochs))
        per_epoch = h.samples_by_epoch(on_dir)
        expect(sorted(per_epoch) == [0, 1, 2, 3] and
               all(sorted(v) == list(range(EXAMPLES)) for v in per_epoch.values()),
               "every example exactly once in each of the 4 epochs (%s)"
               % {e: len(v) for e, v in sorted(per_epoch.items())})
        on = result(on_dir)
        loss_err = max(abs(on[0][s] - ref[0][s]) / abs(ref[0][s]) for s in ref[0]) \
            if on[0].keys() == ref[0].keys() else float("inf")
        worst, where, entry = 0.0, "", 0.0
        for k, b in ref[1].items():
            a = on[1][k]
            if k.endswith("attn.qkv.bias"):  # the key third: true gradient 0 (test_elastic.py)
                d = len(b) // 3
                expect(max(np.abs(a[d:2 * d]).max(), np.abs(b[d:2 * d]).max()) <= steps * LR * 1.01,
                       "%s key part within %g of 0" % (k, steps * LR))
                a, b = np.concatenate([a[:d], a[2 * d:]]), np.concatenate([b[:d], b[2 * d:]])
            if h.nrel(a, b) > worst:
                worst, where = h.nrel(a, b), k
            entry = max(entry, h.rel(a, b))
        expect(loss_err <= LOSS_TOL and worst <= TOL and entry <= ENTRY_TOL,
               "against one process: losses %.1e (bound %.0e), weights %.1e at %s (bound %.0e), "
               "every entry %.1e (bound %.0e, as test_elastic.py)"
               % (loss_err, LOSS_TOL, worst, where, TOL, entry, ENTRY_TOL))

        print("resumed from step 16, saved at (2, 2) with ranks %s idle" % (IDLE,), flush=True)
        res_dir = os.path.join(work, "resumed")
        name = "step_%010d" % 16
        shutil.copytree(os.path.join(on_dir, "checkpoints", name), os.path.join(res_dir, "checkpoints", name))
        if train(res_dir, train__resume="auto")[0]:
            got = result(res_dir)
            was = [(e["step"], e["new"]) for e in h.events(on_dir, "replan") if e["step"] > 16]
            now = [(e["step"], e["new"]) for e in h.events(res_dir, "replan")]
            expect(now[-len(was):] == was and len(now) >= len(was) > 0,
                   "the resumed run re-plans as the one that never stopped: %s, %s" % (now, was))
            expect(len(got[0]) == steps - 16 and all(got[0][s] == on[0][s] for s in got[0]) and
                   all(np.array_equal(got[1][k], on[1][k]) for k in on[1]),
                   "resumed: bit-identical to the run that never stopped")
    finally:
        H("down", check=False)
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("FAILED: %d checks" % len(failures))
        return 1
    print("multinode elastic: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
