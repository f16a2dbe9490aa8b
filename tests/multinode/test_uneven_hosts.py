#!/usr/bin/env python3
"""pipetrain on simulated hosts that differ (tests/multinode/hosts.sh): every
rank lays out the same mesh.

Every rank runs the planner itself, so every input of the planner must be
the same on every rank. The cores a node's ranks share are measured on each
node; host0 here has 2 cores and host1 1 (each host a cpuset of its own).
The profile (uneven_hosts_profile.json: every unit 1 ms per micro-batch
whatever its size, fast links) makes K = 1 x D = 4 the plan on host0's 2
cores, while on 1 core the 2 busy ranks of a replica per host are priced
twice as slow and K = 1 x D = 1 wins. Ranks that planned from their own
node's cores used to split into two meshes without an error: host0's ranks
trained replicas 0 and 1 of 4 while host1's sat idle, so half of every
step's batch was never trained (and the loss was half the real one). Checked:
the run says K = 1 x D = 4, every rank's first stage logs its share, and
every example is trained exactly once in the epoch.

Passes with "skipped: ..." where the hosts or their cpusets cannot be made.

usage: test_uneven_hosts.py PIPETRAIN HOSTS_SH MPIEXEC"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = """run: {{dir: {run}, seed: 5, threads: 1, log_samples: true, timeout_s: 60}}
model: {{kind: vit, dim: 32, layers: 2, heads: 2, patch: 7}}
data: {{kind: synthetic_images, synthetic_examples: 64}}
train: {{batch: 16, epochs: 1, lr: 0.002, eval_every: 0, eval_examples: 16}}
pipeline: {{memory_gib: 1, profile: {profile}}}
"""
EXAMPLES = 64
failures = []


def expect(cond, what):
    print("  %s: %s" % ("ok" if cond else "FAIL", what), flush=True)
    if not cond:
        failures.append(what)


def cpus():
    """Two CPUs this machine's root cpuset holds, or None."""
    try:
        with open("/sys/fs/cgroup/cpuset/cpuset.cpus") as f:
            text = f.read().strip()
    except OSError:
        return None
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += range(int(a), int(b) + 1)
        elif part:
            out.append(int(part))
    return out[:2] if len(out) >= 2 else None


def skip_reason():
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "nsenter", "unshare"):
        if not shutil.which(tool):
            return "%s is missing" % tool
    if subprocess.run(["unshare", "--net", "--uts", "--mount", "true"]).returncode != 0:
        return "unshare --net --uts --mount fails here"
    if not os.path.isfile("/sys/fs/cgroup/cpuset/tasks") or cpus() is None:
        return "no cgroup-v1 cpuset hierarchy with 2 CPUs"
    return None


def main():
    binary, hosts = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    mpiexec = sys.argv[3] if len(sys.argv) > 3 else "mpirun"
    why = skip_reason()
    if why:
        print("skipped: needs root, network namespaces and cpusets (%s)" % why)
        return 0
    a, b = cpus()
    env = dict(os.environ, MNH_NAME="mnuh%d" % os.getpid(), MNH_SLOTS="2", MNH_TIMEOUT="300",
               MNH_MPIRUN=mpiexec, MNH_CPUS="%d,%d;%d" % (a, b, b), OMP_NUM_THREADS="1")
    env.pop("MNH_SUBNET", None)
    work = tempfile.mkdtemp(prefix="pt-uneven-")
    try:
        run_dir = os.path.join(work, "run")
        config = os.path.join(work, "c.yaml")
        with open(config, "w") as f:
            f.write(CONFIG.format(run=run_dir, profile=os.path.join(HERE, "uneven_hosts_profile.json")))
        up = subprocess.run([hosts, "up", "2"], env=env, capture_output=True, text=True)
        if up.returncode != 0:
            raise SystemExit("hosts.sh up failed:\n" + up.stdout + up.stderr)
        print("2 hosts x 2 ranks, host0 with 2 cores, host1 with 1", flush=True)
        r = subprocess.run([hosts, "run", "--", "-np", "4", "-x", "OMP_NUM_THREADS", binary, "train",
                            config], env=env, capture_output=True, text=True)
        out = r.stdout + r.stderr
        expect(r.returncode == 0, "training exits 0 (%d)%s" %
               (r.returncode, "" if r.returncode == 0 else "\n" + out[-3000:]))
        m = re.search(r"multi-node: K = (\d+) stages? x D = (\d+)", out)
        expect(m and m.groups() == ("1", "4"), "rank 0 planned K = 1 x D = 4: %s" % (m and m.group(0)))
        logged = {}
        seen = []
        for path in sorted(glob.glob(os.path.join(run_dir, "samples-rank*.jsonl"))):
            with open(path) as f:
                recs = [json.loads(line) for line in f]
            logged[os.path.basename(path)] = len(recs)
            for rec in recs:
                seen += rec["ids"]
        expect(len(logged) == 4 and all(n == 4 for n in logged.values()),
               "every rank trained its share of each of the 4 steps: %s" % logged)
        expect(sorted(seen) == list(range(EXAMPLES)),
               "every example trained exactly once in the epoch (%d ids, %d distinct)"
               % (len(seen), len(set(seen))))
    finally:
        subprocess.run([hosts, "down"], env=env, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("FAILED: %d checks" % len(failures))
        return 1
    print("multinode uneven hosts: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
