"""The canaries of bench/core_canary, for the bench scripts that run beside them
(steady_speed.py, torch_speed.py): one per CPU, started and stopped, their
bursts read back; and the placing of a pipetrain run's steps on the same
clock (time.monotonic, the canaries' CLOCK_MONOTONIC), so a run's speed can be
set beside the clock its cores had meanwhile. bench/core_canary.c says what a
burst measures."""
import json
import os
import statistics
import subprocess
import sys
import time


def canary_path(arg, binary):
    """the core_canary to run: arg, or the one built beside the pipetrain binary; exits if absent"""
    path = arg or os.path.join(os.path.dirname(binary), "bench", "core_canary")
    if not os.access(path, os.X_OK):
        sys.exit("no core_canary at %s (build it, or name it: --canary PATH)" % path)
    return path


def first_step_clock(proc, run_dir):
    """the monotonic clock minus the run's own time_s, from when the run's first step record
    appears in its metrics (polled every millisecond until then, during the warm-up), or None"""
    path = os.path.join(run_dir, "metrics.jsonl")
    f, buf = None, ""
    try:
        while proc.poll() is None:
            if f is None and os.path.exists(path):
                f = open(path)
            if f is not None:
                buf += f.read()
                for line in buf.split("\n")[:-1]:
                    r = json.loads(line)
                    if r.get("event") == "step":
                        return time.monotonic() - r["time_s"]
            time.sleep(0.001)
    finally:
        if f is not None:
            f.close()
    return None


class Canaries:
    """one core_canary on each CPU this process may use, their bursts spread over the period;
    a context manager: they are stopped on the way out, whatever happens. bursts() reads what
    they printed: (t, cpu, FMA GFLOP/s, chain G/s, read GB/s) of each burst in which the canary
    was not descheduled"""

    def __init__(self, path, work, period_ms=100, *args):
        self.cpus = sorted(os.sched_getaffinity(0))
        self.files = [open(os.path.join(work, "canary%d.txt" % c), "w+") for c in self.cpus]
        self.errs = [open(os.path.join(work, "canary%d.err" % c), "w+") for c in self.cpus]
        self.procs = []
        try:
            for i, c in enumerate(self.cpus):
                phase = period_ms * i // len(self.cpus)
                self.procs.append(subprocess.Popen(
                    [path, "--cpu", str(c), "--period-ms", str(period_ms), "--phase-ms", str(phase)]
                    + list(args), stdout=self.files[i], stderr=self.errs[i]))
            time.sleep(0.5 + period_ms / 1000)
            for c, p, e in zip(self.cpus, self.procs, self.errs):
                if p.poll() is not None:
                    with open(e.name) as g:
                        raise RuntimeError("core_canary on CPU %d exited (%d): %s" % (c, p.returncode, g.read()))
        except BaseException:
            self.stop()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            p.wait()

    def bursts(self):
        """safe while the canaries run: each file is read through its own descriptor (seeking the
        one a canary writes through would move its writes), and a line still being written is left"""
        out = []
        for c, f in zip(self.cpus, self.files):
            with open(f.name) as g:
                for line in g:
                    w = line.split()
                    if line.endswith("\n") and len(w) == 5 and w[4] == "-":
                        out.append((float(w[0]), c, float(w[1]), float(w[2]), float(w[3])))
        return out


def during(bursts, t0, t1):
    """median FMA GFLOP/s, chain G/s and read GB/s of the bursts in [t0, t1), or None"""
    b = [x for x in bursts if t0 <= x[0] < t1]
    if not b:
        return None
    return tuple(statistics.median(x[k] for x in b) for k in (2, 3, 4))
