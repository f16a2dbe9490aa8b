/*
 * watch.c: a deadline for the calls that block with none of their own
 * (comm_group.h, pt_watch_begin): MPI's start, its process-group splits and
 * its end, and NCCL's communicator creation and the calls in which it
 * connects a communicator's ranks. They wait for the other ranks inside
 * the library, where no poll of ours can see them, so a rank that stopped
 * on its way to one (SIGSTOP, a debugger, a hung file system) held the
 * others there for good. One thread of the process, made at the first
 * such call, watches each while it runs; if the call has not returned by
 * its deadline, the thread says what the rank waited for and ends the
 * process (exit status 1, or at MPI's end the status a job that failed
 * already has), and the launcher then ends the job.
 *
 * begin and end only take a lock and set a few fields, so calls made many
 * times a step (NCCL's) can be watched. Time in which the process did not
 * run at all (the job suspended, SIGSTOP) does not count: the watcher,
 * stopped with it, sees the gap and moves the deadline by it.
 */
#include "comm/comm_group.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* the least time a watched call is given, whatever run.timeout_s says: its
 * wait cannot be told from its own work (MPI's start loads components and
 * exchanges every rank's addresses, seconds on a loaded machine), so a
 * limit meant for polled waits would end healthy jobs */
static const double WATCH_MIN_S = 20.0;
static const double TICK_S = 0.25; /* the watcher's wake-ups while a call runs */
static const double AWAY_S = 1.0;  /* a gap between wake-ups longer than this: the process did not run */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static int started, warned; /* the watcher thread runs; its start failed and was said */
static int idle;            /* the watcher waits for a call, with no timeout */
static struct {
    int armed;               /* a call runs */
    double limit, deadline;  /* seconds, CLOCK_MONOTONIC */
    const char *what, *name, *why;
    int status;              /* what the process exits with when the limit passes */
    char head[48];           /* "pipetrain: rank R: error: ", made by begin */
} call;

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Says why and ends the process; mu is held. No stdio: its lock could be
 * held by a thread stopped inside the library, and a full pipe to the
 * launcher must not keep the process from ending. */
static void give_up(void)
{
    char line[1024];
    int n = snprintf(line, sizeof line,
                     "%sno progress for %.3g s waiting for %s (%s; run.timeout_s sets this limit, at "
                     "least %.3g s for a call that waits inside MPI or NCCL)%s%s; ending the job\n",
                     call.head, call.limit, call.what, call.name, WATCH_MIN_S, call.why ? ": " : "",
                     call.why ? call.why : "");
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof line) {
        n = sizeof line - 1;
        line[n - 1] = '\n';
    }
    for (const char *p = line; n > 0;) {
        const ssize_t w = write(STDERR_FILENO, p, (size_t)n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        p += w;
        n -= (int)w;
    }
    /* the main thread is inside MPI or NCCL, which nothing here may call
     * from another thread: the process ends, and the launcher the job */
    _exit(call.status);
}

static void *watch(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    double last = mono_s();
    for (;;) {
        if (!call.armed) {
            idle = 1;
            pthread_cond_wait(&cv, &mu);
            idle = 0;
            last = mono_s();
            continue;
        }
        const double now = mono_s();
        if (now - last > AWAY_S) /* the process did not run: that time does not count */
            call.deadline += now - last;
        last = now;
        if (now >= call.deadline)
            give_up();
        const double wake = fmin(now + TICK_S, call.deadline);
        struct timespec until = {(time_t)wake, (long)((wake - floor(wake)) * 1e9)};
        pthread_cond_timedwait(&cv, &mu, &until);
    }
    return NULL;
}

/* the watcher, at the first call; mu is held */
static void start(const char *name)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_attr_t ta;
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    /* not the default of RLIMIT_STACK's size, which can be very large */
    pthread_attr_setstacksize(&ta, 256 << 10);
    /* it takes no signal: they stay the main thread's */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_t t;
    const int e = pthread_create(&t, &ta, watch, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&ta);
    started = e == 0;
    if (!started) {
        pthread_cond_destroy(&cv);
        if (!warned)
            fprintf(stderr, "pipetrain: warning: cannot start the thread that bounds %s and the like "
                    "(%s): a rank that stops answering there holds the others\n", name, strerror(e));
        warned = 1;
    }
}

void pt_watch_begin(const char *what, const char *name, const char *why, double limit_s)
{
    pt_watch_begin_status(what, name, why, limit_s, 1);
}

void pt_watch_begin_status(const char *what, const char *name, const char *why, double limit_s,
                           int status)
{
    pthread_mutex_lock(&mu);
    if (!call.head[0]) {
        /* read here, on the thread that calls MPI: the watcher reads nothing
         * that MPI might change under it (the environment) */
        const int rank = pt_launcher_rank();
        if (rank >= 0)
            snprintf(call.head, sizeof call.head, "pipetrain: rank %d: error: ", rank);
        else
            snprintf(call.head, sizeof call.head, "pipetrain: error: ");
    }
    if (!started)
        start(name);
    call.what = what;
    call.name = name;
    call.why = why;
    call.status = status > 0 && status < 256 ? status : 1;
    call.limit = fmax(limit_s, WATCH_MIN_S); /* NaN: the least */
    call.deadline = mono_s() + call.limit;
    call.armed = 1;
    if (started && idle) /* else it wakes within TICK_S and sees the new deadline */
        pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
}

void pt_watch_end(void)
{
    pthread_mutex_lock(&mu);
    call.armed = 0;
    pthread_mutex_unlock(&mu);
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
