#!/usr/bin/env python3
"""Is pipetrain's CPU training steady, and does it hold up beside other work?
One run of this script measures, for each way the CPU backend's threads may
wait for each other (nn/cpu_pool.c):

  pipetrain        the default: spin at most 20 us, less after waits that
                   outlast the spin, then sleep on a futex
  sleep            PIPETRAIN_SPIN_US=0: sleep at once
  spin             PIPETRAIN_SPIN_US=1000000: spin up to a second, i.e.
                   nearly always (what a fixed long spin, such as libgomp's
                   default, does)
  shared           PIPETRAIN_POOL_RANGES=0: every thread claims tasks from
                   one shared counter, in order (the pool before per-thread
                   ranges; nn/cpu_pool.c)
  baseline         with --baseline BIN: another pipetrain binary, with the
                   environment it is given (e.g. the one before the thread
                   pool, whose OpenMP threads waited as GOMP_SPINCOUNT says)

1. Steadiness on a quiet machine: --runs runs of --steps steps of the demo
   ViT (configs/vit_fmnist.yaml, batch 128) at --threads threads, the
   settings alternating run by run; each run's samples/s over its steps
   after the first 20 (from its metrics file); per setting the median, the
   worst and the spread (median - worst) / median. Issue 13 asks for a
   spread of at most 10% at 2 threads.
2. Contention: one whole epoch of the demo (468 steps) alone, then beside
   one busy process per core (a Python busy loop each); the user + system
   CPU time of the pipetrain process (getrusage of the child) in both, and
   their ratio, per setting. Issue 13 asks for at most 1.3x.

With --canary, one bench/core_canary per CPU (pinned to it, about 1% of its
time, their bursts spread over the period) times, every 100 ms during the
steady part, register-only multiply-adds (the core's FMA throughput: its
clock times its share of the physical core), one dependent chain of them
(the clock alone) and a read of 16 MiB (the shared last-level cache): what
the core gives at that moment, which nothing pipetrain does can raise or
lower much (turbo does depend on how many of the host's cores are busy, and
two vCPUs are a small part of a server's). After the runs it prints each
run's samples/s beside the canaries' medians during it, and how the runs'
speed and that of their one-second windows follow the canaries (Pearson's
r, and the line fitted through them: the slowdown one would predict from
the canaries alone), and the runs' spread once the clock is taken out:
each run moved along a line fitted to the other runs (leave one out) to
the median clock. --canary-idle S first runs the canaries alone for S
seconds, to show how the clock moves with nothing of ours running. (The
canaries' own CPU time counts among the "others" of each run's line.)

With --pingpong, bench/core_pingpong times a cache line's round trip
between CPUs 0 and 1 before and after each run, and the runs are reported
apart by it: near (the host has the two vCPUs on one L3: tens of ns) and
far (on two chiplets: several times that), with the runs during which it
changed left out of both.

With --probe, each round of the steady part also runs one 1-thread
pipetrain process per core, side by side and independent (separate
processes: no thread of one ever waits for another's), for as many steps,
and prints their samples/s (summed, and each) next to the round's runs.
Every run of the steady part also prints what else the machine did
meanwhile (/proc/stat): the CPU seconds its vCPUs were busy beyond the
run's own (other processes, kernel threads, interrupts), and those the
hypervisor took from them (steal). If the probe or those move with the
slow runs, what slows them lies outside pipetrain's threads.

Nothing here changes results: how threads wait does not change any bit.

usage: steady_speed.py PIPETRAIN [--threads 2] [--runs 10] [--steps 300]
                       [--settings pipetrain,sleep,spin] [--baseline BIN]
                       [--no-contention] [--no-steady] [--epoch-steps 468]
                       [--probe] [--canary [CORE_CANARY]] [--canary-idle S]
                       [--pingpong [CORE_PINGPONG]] [--near-ns 150]
                       [--window 1] [--quick]"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from canary import Canaries, canary_path, during, first_step_clock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "vit_fmnist.yaml")
WARMUP = 20
SETTINGS = {
    "pipetrain": {},
    "sleep": {"PIPETRAIN_SPIN_US": "0"},
    "spin": {"PIPETRAIN_SPIN_US": "1000000"},
    "shared": {"PIPETRAIN_POOL_RANGES": "0"},
    "baseline": {},
}
BASELINE = None  # --baseline


def env_for(name):
    env = {k: v for k, v in os.environ.items() if k != "PIPETRAIN_SPIN_US"}
    env.update(SETTINGS[name])
    return env


def train_cmd(binary, run_dir, threads, steps, epochs=1):
    subprocess.run(["rm", "-rf", run_dir], check=True)
    return [binary, "train", CONFIG, "--set", "run.dir=" + run_dir, "--set", "run.threads=%d" % threads,
            "--set", "train.max_steps=%d" % steps, "--set", "train.epochs=%d" % epochs,
            "--set", "train.eval_every=0", "--set", "train.eval_examples=128",
            "--set", "train.checkpoint_every=1000000000"]


def rate_of(run_dir):
    """samples/s over a run's steps after the warm-up, from its metrics, or None"""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [r for r in map(json.loads, f) if r["event"] == "step"]
    if len(rows) <= WARMUP + 1:
        return None
    # time_s of a step is when it ended: the window is the steps after the warm-up
    return (len(rows) - WARMUP) * 128 / (rows[-1]["time_s"] - rows[WARMUP - 1]["time_s"])


def cpu_s():
    """(busy, steal): CPU seconds this machine's vCPUs have spent busy (user, nice, system,
    irq, softirq), and those the hypervisor took from them (/proc/stat), or (None, None)"""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        hz = os.sysconf("SC_CLK_TCK")
        return (v[0] + v[1] + v[2] + v[5] + v[6]) / hz, v[7] / hz
    except (OSError, IndexError, ValueError):
        return None, None


def others(c0, c1, ours, wall, cores):
    """what else ran during a run: CPU seconds busy on the machine beyond ours, and stolen"""
    if c0[0] is None or c1[0] is None:
        return ""
    return ", others %.2f s CPU, %.2f s stolen (%.1f%% of the vCPUs' time)" % (
        c1[0] - c0[0] - ours, c1[1] - c0[1], 100 * (c1[1] - c0[1]) / (wall * cores))


def step_times(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r["time_s"] for r in map(json.loads, f) if r["event"] == "step"]


def run(binary, name, threads, steps, work, epochs=1, steps_out=None):
    """(samples/s after the warm-up or None, CPU seconds of the child, wall seconds); with
    steps_out, appends the monotonic clock at each step's end to it"""
    if name == "baseline":
        binary = BASELINE
    run_dir = os.path.join(work, "run")
    cmd = train_cmd(binary, run_dir, threads, steps, epochs)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True, env=env_for(name))
        offset = first_step_clock(p, run_dir) if steps_out is not None else None
        p.wait()
        wall = time.monotonic() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode:
            err.seek(0)
            sys.exit("steady_speed: %s failed:\n%s" % (" ".join(cmd), err.read()[-2000:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if steps_out is not None and offset is not None:
        steps_out.extend(offset + x for x in step_times(run_dir))
    return rate_of(run_dir), cpu, wall


def fit(xs, ys):
    """Pearson's r and the least-squares line y = a + b x"""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    r = sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else float("nan")
    b = sxy / sxx if sxx > 0 else 0.0
    return r, my - b * mx, b


def idle_report(bursts, cpus, seconds):
    """the canaries on their own: how each CPU's clock moves with nothing else of ours running"""
    print("the canaries alone for %d s (nothing else of ours running), bursts of 3 ms every 250 ms:"
          % seconds)
    print("| CPU | bursts | FMA GFLOP/s: median | 5th percentile | lowest | 10-second windows: median, "
          "lowest, highest | chain G/s: median, in the lowest FMA window |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for c in cpus:
        b = [x for x in bursts if x[1] == c]
        if not b:
            continue
        f = sorted(x[2] for x in b)
        t0, win = b[0][0], {}
        for x in b:
            win.setdefault(int((x[0] - t0) // 10), []).append(x)
        w = sorted((statistics.median(x[2] for x in v), statistics.median(x[3] for x in v))
                   for v in win.values() if len(v) >= 10)
        wtxt = "%.1f, %.1f, %.1f" % (statistics.median(x[0] for x in w), w[0][0], w[-1][0]) if w else "-"
        ctxt = "%.3f, %.3f" % (statistics.median(x[3] for x in b), w[0][1]) if w else "-"
        print("| %d | %d | %.1f | %.1f | %.1f | %s | %s |" % (c, len(f), statistics.median(f),
                                                           f[len(f) // 20], f[0], wtxt, ctxt))


def canary_report(runs, bursts, window):
    """runs: (round, setting, samples/s, step end times) of the steady runs"""
    print("\nthe canaries (median of all CPUs' bursts during each run) against the runs:")
    print("| setting | run | samples/s | canary FMA GFLOP/s | canary chain G/s | canary read GB/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    per_run, per_win = [], []
    for i, n, rate, ends in runs:
        if rate is None or len(ends) <= WARMUP:
            continue
        c = during(bursts, ends[WARMUP - 1], ends[-1])
        if c is None:
            continue
        per_run.append((n, rate) + c)
        print("| %s | %d | %.0f | %.1f | %.3f | %.1f |" % ((n, i, rate) + c))
        # windows of about `window` seconds: whole steps from the warm-up on
        j = WARMUP - 1
        while j < len(ends) - 1:
            k = j + 1
            while k < len(ends) - 1 and ends[k] - ends[j] < window:
                k += 1
            w = during(bursts, ends[j], ends[k])
            if w is not None and ends[k] - ends[j] >= 0.5 * window:
                per_win.append((n, (k - j) * 128 / (ends[k] - ends[j])) + w)
            j = k
    for label, rows in (("runs", per_run), ("%g-second windows of the runs" % window, per_win)):
        for n in sorted(set(r[0] for r in rows)):
            sel = [r for r in rows if r[0] == n]
            if len(sel) < 3:
                continue
            rates = [r[1] for r in sel]
            for what, col in (("FMA", 2), ("chain", 3), ("read", 4)):
                xs = [r[col] for r in sel]
                r, a, b = fit(xs, rates)
                lo, mid = min(xs), statistics.median(xs)
                pred = (a + b * lo) / (a + b * mid) if a + b * mid else float("nan")
                print("%s, %s: %d of them; samples/s against canary %s: r = %.2f; canary median %.4g, "
                      "lowest %.4g (%.1f%% below), where the fitted line predicts %.1f%% fewer samples/s"
                      % (n, label, len(sel), what, r, mid, lo, 100 * (mid - lo) / mid, 100 * (1 - pred)))
            if label == "runs" and len(sel) >= 4:
                # each run moved to the median clock along the FMA line fitted to the other runs
                # (leave one out: a line fitted to a run itself would absorb part of its own noise)
                xs = [r[2] for r in sel]
                mid = statistics.median(xs)
                moved = (max(xs) - min(xs)) / mid if mid else 0.0
                if moved < 0.02:
                    # a line fitted to a clock that hardly moved is noise: moving runs
                    # along it can make any speed, negative ones too
                    print("%s, runs at the median clock: not computed (the canary's FMA rate moved "
                          "%.1f%% over the runs, too little for a line)" % (n, 100 * moved))
                    continue
                adj = []
                for i, (x, y) in enumerate(zip(xs, rates)):
                    _, _, b = fit(xs[:i] + xs[i + 1:], rates[:i] + rates[i + 1:])
                    adj.append(y + b * (mid - x))
                m = statistics.median(adj)
                print("%s, runs at the median clock (each run's samples/s moved along the FMA line of the "
                      "other runs): median %.0f, worst %.0f, spread %.1f%% (%.1f%% as measured)"
                      % (n, m, min(adj), 100 * (m - min(adj)) / m,
                         100 * (statistics.median(rates) - min(rates)) / statistics.median(rates)))


def probe(binary, procs, steps, work):
    """samples/s of each of procs independent 1-thread runs side by side (None: too short)"""
    dirs = [os.path.join(work, "probe%d" % i) for i in range(procs)]
    cmds = [train_cmd(binary, d, 1, steps) for d in dirs]
    ps = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           env=env_for("pipetrain")) for c in cmds]
    for p, c in zip(ps, cmds):
        _, err = p.communicate()
        if p.returncode:
            sys.exit("steady_speed: %s failed:\n%s" % (" ".join(c), err[-2000:]))
    rates = [rate_of(d) for d in dirs]
    return rates if all(r is not None for r in rates) else None


def busy(n):
    code = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def round_trip(path):
    """core_pingpong's median round trip of a cache line between CPUs 0 and 1, in ns"""
    r = subprocess.run([path], capture_output=True, text=True)
    if r.returncode:
        sys.exit("steady_speed: %s failed: %s" % (path, r.stderr.strip()))
    return float(r.stdout)


def pingpong_report(trips, rates, near_ns):
    """the runs by where the host had put CPUs 0 and 1: near (a round trip, before and
    after the run, under near_ns) or far (both above it)"""
    if not trips:
        return
    print("\ncross-CPU round trips (core_pingpong, ns, before / after each run); near: both under %.0f, "
          "far: both above" % near_ns)
    print("| setting | near runs: samples/s (median, worst) | far runs: samples/s (median, worst) | "
          "runs that moved |")
    print("| --- | --- | --- | --- |")
    for n, rs in rates.items():
        near = [r for i, r in enumerate(rs) if max(trips[(n, i)]) < near_ns]
        far = [r for i, r in enumerate(rs) if min(trips[(n, i)]) >= near_ns]

        def cell(v):
            return "%d runs: %.0f, %.0f" % (len(v), statistics.median(v), min(v)) if v else "none"
        print("| %s | %s | %s | %d |" % (n, cell(near), cell(far), len(rs) - len(near) - len(far)))


def steady_runs(args, names, binary, work, cores, rates, probes, canaries, traced, trips):
    """the steady part: args.runs rounds of a run per setting (and the probe)"""
    for i in range(args.runs):
        for n in names:
            before = round_trip(args.pingpong) if args.pingpong else None
            c0 = cpu_s()
            ends = [] if canaries else None
            r, ours, wall = run(binary, n, args.threads, args.steps, work, steps_out=ends)
            c1 = cpu_s()
            rates[n].append(r)
            if canaries:
                traced.append((i + 1, n, r, ends))
            trip = ""
            if args.pingpong:
                key = (n, len(rates[n]) - 1)
                trips[key] = (before, round_trip(args.pingpong))
                trip = ", cache-line round trip %.0f / %.0f ns" % trips[key]
            print("  run %d %-10s %.0f samples/s%s%s" % (i + 1, n, r, others(c0, c1, ours, wall, cores), trip),
                  flush=True)
        if args.probe:
            c0 = cpu_s()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.monotonic()
            pr = probe(binary, cores, args.steps, work)
            wall = time.monotonic() - t
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            c1 = cpu_s()
            probes.append(sum(pr))
            ours = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            steal = others(c0, c1, ours, wall, cores)
            print("  run %d probe: %d independent 1-thread processes, %.0f samples/s together (%s)%s"
                  % (i + 1, cores, sum(pr), " + ".join("%.0f" % r for r in pr), steal), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipetrain")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--settings", default="pipetrain,sleep,spin")
    ap.add_argument("--baseline", help="another pipetrain binary, measured as setting 'baseline'")
    ap.add_argument("--no-contention", action="store_true")
    ap.add_argument("--no-steady", action="store_true", help="only the contention part")
    ap.add_argument("--epoch-steps", type=int, default=60000 // 128,
                    help="steps of the contention part's runs (default: an epoch)")
    ap.add_argument("--probe", action="store_true",
                    help="each round also runs one independent 1-thread process per core (see above)")
    ap.add_argument("--canary", nargs="?", const="", metavar="CORE_CANARY",
                    help="run bench/core_canary (default: the one built beside PIPETRAIN) on each CPU "
                    "during the steady part (see above)")
    ap.add_argument("--pingpong", nargs="?", const="", metavar="CORE_PINGPONG",
                    help="time a cache line's round trip between CPUs 0 and 1 before and after each run "
                         "(default: the bench/core_pingpong built beside PIPETRAIN)")
    ap.add_argument("--near-ns", type=float, default=150.0,
                    help="--pingpong: round trips under this are 'near' (default 150: the development VM's "
                         "two modes were 55-90 and 300-370 ns)")
    ap.add_argument("--window", type=float, default=1.0, help="seconds per window in --canary's report")
    ap.add_argument("--canary-idle", type=int, default=0, metavar="SECONDS",
                    help="with --canary, first run the canaries alone for SECONDS (bursts of 3 ms every "
                    "250 ms) and print how each CPU's rate moved")
    ap.add_argument("--quick", action="store_true", help="2 runs of 40 steps, a 60-step 'epoch'")
    args = ap.parse_args()
    names = [s for s in args.settings.split(",") if s]
    global BASELINE
    if args.baseline:
        BASELINE = os.path.abspath(args.baseline)
        if "baseline" not in names:
            names.append("baseline")
    for n in names:
        if n not in SETTINGS or (n == "baseline" and not BASELINE):
            sys.exit("steady_speed: unknown setting %r (%s; baseline needs --baseline)" %
                     (n, ", ".join(SETTINGS)))
    binary = os.path.abspath(args.pipetrain)
    epoch_steps = args.epoch_steps
    if args.quick:
        args.runs, args.steps, epoch_steps = 2, 40, 60
    if args.steps < WARMUP + 2 or args.runs < 1 or args.threads < 1 or args.window <= 0:
        sys.exit("steady_speed: --steps must be at least %d, --runs and --threads at least 1, "
                 "--window above 0" % (WARMUP + 2))
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="pt-steady-") as work:
        print("demo ViT, batch 128, %d threads, %d cores; %d runs of %d steps per setting, alternating"
              % (args.threads, cores, args.runs, args.steps), flush=True)
        rates = {n: [] for n in names}
        probes, trips = [], {}
        if args.pingpong is not None:
            args.pingpong = args.pingpong or os.path.join(os.path.dirname(binary), "bench", "core_pingpong")
            if not os.access(args.pingpong, os.X_OK):
                sys.exit("no core_pingpong at %s (build it, or name it: --pingpong PATH)" % args.pingpong)
            if cores < 2:
                sys.exit("steady_speed: --pingpong needs 2 CPUs")
        canaries, traced = None, []
        if args.canary is not None and not args.no_steady:
            path = canary_path(args.canary, binary)
            if args.canary_idle > 0:
                with Canaries(path, work, 250, "--fma-us", "3000") as idle:
                    time.sleep(args.canary_idle)
                idle_report(idle.bursts(), idle.cpus, args.canary_idle)
            canaries = Canaries(path, work)
        try:
            if not args.no_steady:
                steady_runs(args, names, binary, work, cores, rates, probes, canaries, traced, trips)
        finally:
            if canaries:
                canaries.stop()
        if canaries:
            canary_report(traced, canaries.bursts(), args.window)
        pingpong_report(trips, rates, args.near_ns)
        for n in names if not args.no_steady else []:
            if n == names[0]:
                print("\n| setting | median samples/s | worst | best | spread (median - worst) / median |")
                print("| --- | --- | --- | --- | --- |")
            med, worst = statistics.median(rates[n]), min(rates[n])
            print("| %s | %.0f | %.0f | %.0f | %.1f%% |" % (n, med, worst, max(rates[n]), 100 * (med - worst) / med))
        if probes:
            med, worst = statistics.median(probes), min(probes)
            print("| probe: %d independent 1-thread processes, summed | %.0f | %.0f | %.0f | %.1f%% |"
                  % (cores, med, worst, max(probes), 100 * (med - worst) / med))
        if args.no_contention:
            return
        print("\nruns of %d steps (468: an epoch) alone and beside %d busy processes: CPU seconds of pipetrain" %
              (epoch_steps, cores), flush=True)
        rows = []
        for n in names:
            _, quiet_cpu, quiet_wall = run(binary, n, args.threads, epoch_steps, work)
            procs = busy(cores)
            try:
                time.sleep(0.5)
                _, busy_cpu, busy_wall = run(binary, n, args.threads, epoch_steps, work)
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
            rows.append((n, quiet_cpu, quiet_wall, busy_cpu, busy_wall))
            print("  %-10s alone %.1f s CPU (%.1f s wall), beside %d busy: %.1f s CPU (%.1f s wall)"
                  % (n, quiet_cpu, quiet_wall, cores, busy_cpu, busy_wall), flush=True)
        print("\n| setting | CPU s alone | CPU s beside busy | ratio | wall s alone | wall s beside busy |")
        print("| --- | --- | --- | --- | --- | --- |")
        for n, qc, qw, bc, bw in rows:
            print("| %s | %.1f | %.1f | %.2fx | %.1f | %.1f |" % (n, qc, bc, bc / qc, qw, bw))


if __name__ == "__main__":
    main()
