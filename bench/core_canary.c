/*
 * core_canary: how fast one CPU of this machine is, moment by moment, while
 * something else runs on it. Pinned to one CPU, it wakes every --period-ms
 * and times two fixed bursts of work, then sleeps again:
 *
 *   fma   register-only multiply-adds (the chains pipetrain measures its
 *         peak with: pt_cpu_fma_burst), sized to about --fma-us at start;
 *         touches no memory, so its rate is the core's clock and its share
 *         of the physical core (a busy sibling hyperthread of another guest
 *         halves it) and nothing else
 *   read  a sum over a --read-mib buffer of its own: beyond the core's
 *         caches, so its rate is what the shared cache and memory give
 *
 * and prints one line per wake-up:
 *
 *   T FMA_GFLOPS READ_GBS FLAGS
 *
 * T is CLOCK_MONOTONIC in seconds (Python's time.monotonic on Linux), so a
 * driver can line the bursts up with a run's steps. FLAGS is "-" or "p" when
 * the bursts' thread CPU time fell short of their wall time by more than 5%:
 * the canary itself was descheduled meanwhile, and the rates say nothing
 * about the core. It runs until --seconds pass (0: until it is killed;
 * its lines are flushed one by one, so a SIGTERM loses none).
 *
 * Its own cost is its duty cycle: about (fma-us + the read's time) per
 * period on its CPU, near 1% by default. bench/steady_speed.py --canary
 * runs one per CPU beside the steady runs.
 *
 * usage: core_canary --cpu N [--period-ms 100] [--fma-us 300] [--read-mib 16]
 *                    [--seconds S]
 */
#define _GNU_SOURCE
#include "nn/nn.h"

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static volatile uint64_t read_sink;

/* sums the buffer as 64-bit words (integer adds: the compiler vectorises
 * them without reassociation flags) */
static __attribute__((noinline)) void read_all(const uint64_t *b, size_t words)
{
    uint64_t s = 0;
    for (size_t i = 0; i < words; i++)
        s += b[i];
    read_sink = s;
}

static long arg_long(const char *name, const char *v, long lo, long hi)
{
    char *end;
    errno = 0;
    const long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "core_canary: %s must be an integer in [%ld, %ld], not '%s'\n", name, lo,
                hi, v);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    long cpu = -1, period_ms = 100, fma_us = 300, read_mib = 16, seconds = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "core_canary: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--cpu"))
            cpu = arg_long(a, v, 0, CPU_SETSIZE - 1);
        else if (!strcmp(a, "--period-ms"))
            period_ms = arg_long(a, v, 1, 60000);
        else if (!strcmp(a, "--fma-us"))
            fma_us = arg_long(a, v, 1, 1000000);
        else if (!strcmp(a, "--read-mib"))
            read_mib = arg_long(a, v, 1, 4096);
        else if (!strcmp(a, "--seconds"))
            seconds = arg_long(a, v, 0, 1L << 30);
        else {
            fprintf(stderr, "core_canary: unknown option %s\n", a);
            return 2;
        }
    }
    if (cpu < 0) {
        fprintf(stderr, "core_canary: --cpu N is required\n");
        return 2;
    }
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
    /* rounds for about fma_us: the best of a few short timings */
    double best = 0;
    for (int r = 0; r < 5; r++) {
        const double t0 = clock_s(CLOCK_MONOTONIC);
        const double f = pt_cpu_fma_burst(20000);
        const double t = clock_s(CLOCK_MONOTONIC) - t0;
        if (t > 0 && f / t > best)
            best = f / t;
    }
    const double per_round = pt_cpu_fma_burst(1);
    long rounds = (long)(best * 1e-6 * (double)fma_us / per_round);
    if (rounds < 100)
        rounds = 100;
    setvbuf(stdout, NULL, _IOLBF, 0);
    const double start = clock_s(CLOCK_MONOTONIC);
    double next = start;
    for (;;) {
        const double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        const double flops = pt_cpu_fma_burst(rounds);
        const double w1 = clock_s(CLOCK_MONOTONIC);
        read_all(buf, words);
        const double w2 = clock_s(CLOCK_MONOTONIC), c2 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        const int preempted = (c2 - c0) < 0.95 * (w2 - w0);
        printf("%.6f %.2f %.2f %s\n", w0, flops / (w1 - w0) * 1e-9,
               (double)(words * sizeof *buf) / (w2 - w1) * 1e-9, preempted ? "p" : "-");
        if (seconds && w2 - start >= (double)seconds)
            break;
        next += 1e-3 * (double)period_ms;
        const double now = clock_s(CLOCK_MONOTONIC);
        if (next < now)
            next = now;
        const double d = next - now;
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        while (nanosleep(&ts, &ts) && errno == EINTR) {
        }
    }
    free(buf);
    return 0;
}
