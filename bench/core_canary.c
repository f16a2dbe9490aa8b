/*
 * core_canary: how fast one CPU of this machine is, moment by moment, while
 * something else runs on it. Pinned to one CPU, it wakes every --period-ms
 * and times three fixed bursts of work, then sleeps again:
 *
 *   fma    independent multiply-add chains on registers only (the ones
 *          pipetrain measures its peak with: pt_cpu_fma_burst), sized to
 *          about --fma-us at start: the core's FMA throughput, which is its
 *          clock times the share of the FMA pipes it gets (a busy sibling
 *          hyperthread on the host, another guest's, would take half)
 *   chain  one dependent chain of scalar multiply-adds, as long: each waits
 *          for the one before, so it uses a sliver of the pipes and a
 *          sibling barely slows it; its rate is the clock divided by the
 *          FMA's latency (4 cycles on recent Intel and AMD cores). If fma
 *          falls and chain with it, the clock fell; fma alone, the share
 *   read   a sum over a --read-mib buffer of its own: past the core's own
 *          caches (16 MiB by default: it lies in the shared last-level
 *          cache of a large server, not in memory), so its rate is what
 *          that shared level gives
 *
 * None of them touches anything pipetrain does. One line per wake-up:
 *
 *   T FMA_GFLOPS CHAIN_GFMAS READ_GBS FLAG
 *
 * T is CLOCK_MONOTONIC in seconds (Python's time.monotonic on Linux), so a
 * driver can line the bursts up with a run's steps. CHAIN_GFMAS is
 * dependent multiply-adds per nanosecond. FLAG is "p" when the bursts'
 * thread CPU time fell short of their wall time by more than 5% (the
 * canary itself was descheduled meanwhile, so the rates say nothing about
 * the core), else "-". Each line is flushed as it is written.
 *
 * It runs until --seconds pass (0: until it is killed, or its parent
 * exits: it asks for SIGTERM then). --phase-ms delays the first wake-up, so
 * that canaries on several CPUs do not burst at the same moments. Its own
 * cost is its duty cycle on its CPU: (2 fma-us + the read) per period, about
 * 1% by default.
 */
#define _GNU_SOURCE
#include "nn/nn.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
    "usage: core_canary --cpu N [--period-ms 100] [--fma-us 300] [--read-mib 16]\n"
    "                   [--phase-ms 0] [--seconds 0]\n"
    "prints, every period, T FMA_GFLOPS CHAIN_GFMAS READ_GBS FLAG (see bench/core_canary.c)\n";

static double clock_s(clockid_t c)
{
    struct timespec t;
    if (clock_gettime(c, &t))
        return 0.0;
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static volatile uint64_t read_sink;
static volatile float chain_sink;

/* sums the buffer as 64-bit words (integer adds: the compiler vectorises
 * them without reassociation flags) */
static __attribute__((noinline)) void read_all(const uint64_t *b, size_t words)
{
    uint64_t s = 0;
    for (size_t i = 0; i < words; i++)
        s += b[i];
    read_sink = s;
}

/* n dependent multiply-adds: without -ffast-math the compiler may not
 * reorder them, so each waits for the last */
static __attribute__((noinline)) void fma_chain(long n)
{
    float x = 1.0f;
    const float a = 0.999999f, b = 1e-7f;
    for (long i = 0; i < n; i++)
        x = fmaf(x, a, b);
    chain_sink = x;
}

static void sleep_s(double d)
{
    if (d <= 0)
        return;
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* fmt has one %s, for arg */
static void fail(const char *fmt, const char *arg)
{
    fprintf(stderr, "core_canary: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage);
    exit(2);
}

static long arg_long(const char *name, const char *v, long lo, long hi)
{
    char *end;
    errno = 0;
    const long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "core_canary: %s must be an integer in [%ld, %ld], not '%s'\n%s", name, lo,
                hi, v, usage);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    long cpu = -1, period_ms = 100, fma_us = 300, read_mib = 16, phase_ms = 0, seconds = 0;
    static const char *names[] = {"--cpu",   "--period-ms", "--fma-us", "--read-mib",
                                  "--phase-ms", "--seconds"};
    long *vals[] = {&cpu, &period_ms, &fma_us, &read_mib, &phase_ms, &seconds};
    static const long lo[] = {0, 1, 1, 1, 0, 0};
    static const long hi[] = {CPU_SETSIZE - 1, 60000, 1000000, 4096, 60000, 1L << 30};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            return 0;
        }
        int k = 0;
        while (k < 6 && strcmp(a, names[k]))
            k++;
        if (k == 6)
            fail("unknown argument '%s'", a);
        if (i + 1 >= argc)
            fail("%s needs a value", a);
        *vals[k] = arg_long(a, argv[++i], lo[k], hi[k]);
    }
    if (cpu < 0)
        fail("--cpu N is required%s", "");
    /* a driver that dies (an exception, ^C) takes the canary with it */
    const pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) == 0 && getppid() != parent)
        return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((int)cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set)) {
        fprintf(stderr, "core_canary: cannot pin to CPU %ld: %s\n", cpu, strerror(errno));
        return 2;
    }
    const size_t words = (size_t)read_mib << 17;
    uint64_t *buf = aligned_alloc(64, words * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "core_canary: out of memory for %ld MiB\n", read_mib);
        return 2;
    }
    for (size_t i = 0; i < words; i++)
        buf[i] = i;
    /* burst sizes for about fma_us each: the best of a few short timings */
    double best_fma = 0, best_chain = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = clock_s(CLOCK_MONOTONIC);
        const double f = pt_cpu_fma_burst(20000);
        double t = clock_s(CLOCK_MONOTONIC) - t0;
        if (t > 0 && f / t > best_fma)
            best_fma = f / t;
        t0 = clock_s(CLOCK_MONOTONIC);
        fma_chain(100000);
        t = clock_s(CLOCK_MONOTONIC) - t0;
        if (t > 0 && 1e5 / t > best_chain)
            best_chain = 1e5 / t;
    }
    const double per_round = pt_cpu_fma_burst(1);
    long rounds = (long)(best_fma * 1e-6 * (double)fma_us / per_round);
    long links = (long)(best_chain * 1e-6 * (double)fma_us);
    rounds = rounds < 100 ? 100 : rounds;
    links = links < 1000 ? 1000 : links;
    setvbuf(stdout, NULL, _IOLBF, 0);
    sleep_s(1e-3 * (double)phase_ms);
    const double start = clock_s(CLOCK_MONOTONIC);
    double next = start;
    for (;;) {
        const double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        const double flops = pt_cpu_fma_burst(rounds);
        const double w1 = clock_s(CLOCK_MONOTONIC);
        fma_chain(links);
        const double w2 = clock_s(CLOCK_MONOTONIC);
        read_all(buf, words);
        const double w3 = clock_s(CLOCK_MONOTONIC), c3 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        const int preempted = (c3 - c0) < 0.95 * (w3 - w0);
        printf("%.6f %.2f %.4f %.2f %s\n", w0, flops / (w1 - w0) * 1e-9,
               (double)links / (w2 - w1) * 1e-9, (double)(words * sizeof *buf) / (w3 - w2) * 1e-9,
               preempted ? "p" : "-");
        if (seconds && w3 - start >= (double)seconds)
            break;
        next += 1e-3 * (double)period_ms;
        const double now = clock_s(CLOCK_MONOTONIC);
        if (next < now)
            next = now;
        sleep_s(next - now);
    }
    free(buf);
    return 0;
}
