/*
 * watch.c: a deadline for the calls that block with none of their own
 * (comm_group.h, pt_watch_begin): MPI's start, its process-group splits and
 * its end, and NCCL's communicator creation. They wait for every rank of
 * their group inside the library, where no poll of ours can see them, so a
 * rank that stopped on its way to one (SIGSTOP, a debugger, a hung file
 * system) held the others there for good. A thread of this process waits
 * beside the call; if the call has not returned by the deadline, it says
 * what the rank waited for and ends the process (exit status 1), and the
 * launcher then ends the job.
 */
#include "comm/comm_group.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* the least time a watched call is given, whatever run.timeout_s says: its
 * wait cannot be told from its own work (MPI's start loads components and
 * exchanges every rank's addresses, seconds on a loaded machine), so a
 * limit meant for polled waits would end healthy jobs */
static const double WATCH_MIN_S = 20.0;
static const double TICK_S = 0.25;  /* the watcher's wake-ups */
static const double AWAY_S = 1.0;   /* a gap between wake-ups longer than this: the process did not run */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static pthread_once_t cv_once = PTHREAD_ONCE_INIT;
static pthread_t watcher;
static int watching; /* a watcher thread runs (made by begin, joined by end) */
static int returned; /* the watched call returned: the watcher leaves */
static struct {
    const char *what, *name, *why;
    double limit;
} call;

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void cv_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &a);
    pthread_condattr_destroy(&a);
}

static void *watch(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    const double start = mono_s();
    double last = start, away = 0;
    while (!returned) {
        const double now = mono_s();
        away = now - last > AWAY_S ? now - last : 0;
        last = now;
        if (now - start >= call.limit)
            break;
        const double wake = now + fmin(TICK_S, call.limit - (now - start));
        struct timespec until = {(time_t)wake, (long)((wake - floor(wake)) * 1e9)};
        pthread_cond_timedwait(&cv, &mu, &until);
    }
    if (returned) {
        pthread_mutex_unlock(&mu);
        return NULL;
    }
    char head[48] = "pipetrain: error: ";
    const int rank = pt_launcher_rank();
    if (rank >= 0)
        snprintf(head, sizeof head, "pipetrain: rank %d: error: ", rank);
    char self[128] = "";
    if (away > 0)
        snprintf(self, sizeof self, "; this rank itself did not run for the last %.3g s (stopped, or "
                 "starved of the CPU)", away);
    fprintf(stderr, "%sno progress for %.3g s waiting for %s (%s; run.timeout_s sets this limit, at "
            "least %.3g s for a call that waits inside MPI or NCCL)%s%s%s; ending the job\n",
            head, call.limit, call.what, call.name, WATCH_MIN_S, call.why ? ": " : "",
            call.why ? call.why : "", self);
    fflush(stderr);
    /* the main thread is inside MPI or NCCL, which nothing here may call
     * from another thread: the process ends, and the launcher the job */
    _exit(1);
}

void pt_watch_begin(const char *what, const char *name, const char *why, double limit_s)
{
    pthread_once(&cv_once, cv_init);
    pthread_mutex_lock(&mu);
    call.what = what;
    call.name = name;
    call.why = why;
    call.limit = fmax(limit_s, WATCH_MIN_S); /* NaN: the least */
    returned = 0;
    /* the watcher takes no signal: they stay the main thread's */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    watching = pthread_create(&watcher, NULL, watch, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_mutex_unlock(&mu);
}

void pt_watch_end(void)
{
    pthread_mutex_lock(&mu);
    returned = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    if (watching)
        pthread_join(watcher, NULL);
    watching = 0;
}

int pt_launcher_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long r;
        if (v && *v && (r = strtol(v, &end, 10)) >= 0 && r <= 1 << 30 && *end == '\0')
            return (int)r;
    }
    return -1;
}
