/*
 * core_pingpong: how far apart two CPUs are, as the time one cache line
 * takes to go from one to the other and back. Two threads, pinned to CPUs
 * A and B (default 0 and 1), hand a counter back and forth through one
 * 64-byte line --rounds times; the median round trip of --batches batches
 * is printed in nanoseconds.
 *
 * Why: on a virtual machine the host decides where the vCPUs run. On a
 * chiplet CPU (AMD EPYC: 8 cores per CCD around one L3) two vCPUs on one
 * CCD hand a line over through that L3 in tens of nanoseconds; on two CCDs
 * it goes through the I/O die, several times slower, and every cache line
 * that one of pipetrain's threads writes and the other reads (activations,
 * gradients, the pool's counters) pays that. bench/steady_speed.py
 * --pingpong runs this before and after each run.
 *
 * usage: core_pingpong [--cpus A,B] [--rounds N] [--batches K]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Alignas(64) _Atomic long line;
static long rounds = 20000;
static int batches = 9;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return sched_setaffinity(0, sizeof s, &s);
}

static int cpu_b = 1;

/* B: answers every odd value with the next even one */
static void *answer(void *arg)
{
    (void)arg;
    if (pin(cpu_b) != 0) {
        fprintf(stderr, "core_pingpong: cannot run on CPU %d\n", cpu_b);
        exit(2);
    }
    const long total = rounds * batches;
    for (long i = 0; i < total; i++) {
        while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 1)
            ;
        atomic_store_explicit(&line, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int cpu_a = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpus") && i + 1 < argc && sscanf(argv[i + 1], "%d,%d", &cpu_a, &cpu_b) == 2)
            i++;
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc && (rounds = atol(argv[i + 1])) > 0)
            i++;
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc && (batches = atoi(argv[i + 1])) > 0 &&
                 batches <= 1000)
            i++;
        else {
            fprintf(stderr, "usage: core_pingpong [--cpus A,B] [--rounds N] [--batches K]\n");
            return 2;
        }
    }
    if (cpu_a == cpu_b) {
        fprintf(stderr, "core_pingpong: --cpus needs two different CPUs\n");
        return 2;
    }
    if (pin(cpu_a) != 0) {
        fprintf(stderr, "core_pingpong: cannot run on CPU %d\n", cpu_a);
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, answer, NULL) != 0) {
        fprintf(stderr, "core_pingpong: cannot start a thread\n");
        return 2;
    }
    double ns[1000];
    long i = 0;
    for (int b = 0; b < batches; b++) {
        const double t0 = now_s();
        for (long r = 0; r < rounds; r++, i++) {
            atomic_store_explicit(&line, 2 * i + 1, memory_order_release);
            while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 2)
                ;
        }
        ns[b] = (now_s() - t0) / (double)rounds * 1e9;
    }
    pthread_join(t, NULL);
    qsort(ns, (size_t)batches, sizeof *ns, cmp);
    printf("%.1f\n", ns[batches / 2]);
    return 0;
}
