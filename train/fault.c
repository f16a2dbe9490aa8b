/*
 * fault.c: the failure-injection hook of the failure tests (see train.h).
 */
#include "train/train.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Whether one fault of the list (spec, up to a comma or its end) names
 * this rank, step and point; its kind into kind. */
static int fault_here(const char *spec, const char *point, int rank, int64_t step, char *kind)
{
    int want_rank;
    char want_step[24], where[32] = "step";
    return sscanf(spec, "%d:%23[0-9*]:%15[a-z]:%31[a-z-]", &want_rank, want_step, kind, where) >= 3 &&
           (want_rank == rank || want_rank == -1) &&
           (strcmp(want_step, "*") == 0 || strtoll(want_step, NULL, 10) == step) &&
           strcmp(where, point) == 0;
}

int pt_test_fault(const char *point, int rank, int64_t step, pt_err *err)
{
    const char *spec = getenv("PIPETRAIN_TEST_FAULT");
    char kind[16];
    while (spec && !fault_here(spec, point, rank, step, kind))
        spec = (spec = strchr(spec, ',')) ? spec + 1 : NULL;
    if (!spec)
        return 0;
    if (strcmp(kind, "crash") == 0) {
        raise(SIGKILL);
        /* still here: PID 1 of a pid namespace ignores signals it sends
         * itself; leaving without any cleanup is the same loss */
        _exit(128 + SIGKILL);
    }
    if (strcmp(kind, "hang") == 0)
        for (;;)
            pause();
    if (strcmp(kind, "stop") == 0) { /* a stop signal arriving just here */
        /* once: a point passed several times in a step (an evaluation's
         * rounds) would otherwise be a second signal, which stops at once */
        static char fired_point[32];
        static int64_t fired_step = -1;
        if (step == fired_step && strcmp(point, fired_point) == 0)
            return 0;
        fired_step = step;
        snprintf(fired_point, sizeof fired_point, "%s", point);
        raise(SIGUSR1);
        return 0;
    }
    if (strcmp(kind, "sigstop") == 0) { /* the rank stopped (SIGSTOP) just here, once */
        static int stopped;
        if (!stopped++)
            raise(SIGSTOP);
        return 0;
    }
    if (strcmp(kind, "slow") == 0) { /* 8 s of work here that says it is going on */
        for (int i = 0; i < 400; i++) {
            pt_comm_busy("a slow part of the failure tests");
            struct timespec left = {0, 20 * 1000 * 1000};
            while (nanosleep(&left, &left) != 0)
                ;
        }
        return 0;
    }
    if (strcmp(kind, "pause") == 0) { /* 2 s here, for a test to change what lies around */
        struct timespec left = {2, 0};
        while (nanosleep(&left, &left) != 0)
            ;
        return 0;
    }
    return pt_fail(err, PT_EINTERNAL, "injected fault at step %lld (%s)", (long long)step, point);
}
