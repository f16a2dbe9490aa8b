/*
 * signals.c: how a process of pipetrain ends on a signal. train: a stop
 * request (SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGXCPU) that the training loop
 * reads after the step; a second one, or a timer's signal, ends the process
 * at once, taking the node's cache names and temporary files off first.
 * Every command: SIGBUS (a mapped file cut short) said and status 1. eval,
 * plan and export: the default action, after the same clean-up.
 */
#include "signals/signals.h"

#include "cache/cache.h"
#include "formats/formats.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Signal handlers can reach nothing but globals, so these two are: the stop
 * request, and where this rank's executor is (for the line a rank prints when
 * the launcher terminates it because another rank died). */
static volatile sig_atomic_t stop_signal;
static const char *volatile current_where;

/* The launcher's process that started this rank (0: none), whose death
 * sends SIGTERM (launch/main.c, PR_SET_PDEATHSIG). */
static volatile pid_t launcher_pid;

/* The first stop request's sender and time, to tell a repeat of it from a
 * second request (on_stop_signal). */
#define DUPLICATE_NS 500000000LL
static volatile sig_atomic_t first_code;
static volatile pid_t first_pid;
static volatile long long first_ns;

void pt_stop_signals_launcher(pid_t pid) { launcher_pid = pid; }

int pt_stop_signal_pending(void) { return (int)stop_signal; }

static void handle_stop(int sig, siginfo_t *si);

static void on_stop_signal(int sig, siginfo_t *si, void *context)
{
    (void)context;
    /* the thread it interrupted may be about to read errno: what the calls
     * below set (an lstat of names already gone, a write to a closed pipe)
     * must not reach it */
    const int saved_errno = errno;
    handle_stop(sig, si);
    errno = saved_errno;
}

static void handle_stop(int sig, siginfo_t *si)
{
    /* Repeats that are not a second request: a CPU-time limit's SIGXCPU
     * comes again each CPU second past the soft limit (the hard limit's
     * SIGKILL ends a save that takes longer); and when the launcher dies,
     * the kernel hands the rank to each of its threads in turn as they
     * exit, sending the death signal each time (Open MPI's mpirun: 1 to 4
     * SIGTERMs, all from its pid). Only the death signal's: a second
     * SIGUSR1, SIGINT or SIGHUP that the launcher forwards from the user is
     * a second request. */
    if (stop_signal && (sig == SIGXCPU || (sig == SIGTERM && launcher_pid > 0 && si &&
                                           si->si_code == SI_USER && si->si_pid == launcher_pid)))
        return;
    /* Nor is one request delivered twice: the same signal from the same
     * sender within DUPLICATE_NS of the first (GNU timeout signals its child
     * and then the child's process group, microseconds apart); a person who
     * means a second request sends it later than that. clock_gettime is
     * async-signal-safe. */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long long now_ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
    if (stop_signal == sig && si && si->si_code == first_code && si->si_pid == first_pid &&
        now_ns - first_ns < DUPLICATE_NS)
        return;
    if (stop_signal) { /* a second signal: the user means it */
        pt_cache_release_names_ending(); /* the first's may wait on a hold */
        pt_wfile_remove_temporaries();
        _exit(128 + sig);
    }
    stop_signal = sig;
    first_code = si ? si->si_code : 0;
    first_pid = si ? si->si_pid : 0;
    first_ns = now_ns;
    /* the job ends, by saving and stopping or, under mpirun, by the
     * launcher's SIGKILL a second later: the node's cache is freed once the
     * last rank using it is gone, whichever way */
    pt_cache_release_names();
    const char *where = current_where;
    if (where) { /* one write, so ranks sharing a terminal do not mix their lines */
        static const char head[] = "pipetrain: signal received while at ";
        char line[512];
        size_t n = sizeof head - 1, w = strlen(where);
        memcpy(line, head, n);
        if (w > sizeof line - 1 - n)
            w = sizeof line - 1 - n;
        memcpy(line + n, where, w);
        n += w;
        line[n++] = '\n';
        ssize_t ignored = write(STDERR_FILENO, line, n);
        (void)ignored;
    }
}

const char *volatile *pt_stop_signal_where(void) { return &current_where; }

/* Signals whose default action ends the process and that are no request to
 * stop (a timer nobody set; a closed pipe is ignored and a
 * file-size limit from main on): the
 * process still ends by the signal, but first takes the names of the
 * node's cache and its temporary files off, as a stop does, instead of
 * leaving them to the next start's sweep. The signal is blocked while the
 * handler runs; with the default action back, it ends the process as the
 * handler returns. */
static void on_fatal_signal(int sig)
{
    pt_cache_release_names_ending();
    pt_wfile_remove_temporaries();
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

/* SIGBUS: a page of a mapping whose file is gone past it: the activation
 * cache's shared memory or a checkpoint file being read, cut short by another
 * process while mapped (or the device under it failing). Not a bug of the
 * run's to dump core over: it says so, takes the names off as a stop does,
 * and ends the process with status 1. */
static const char bus_read[] =
    "pipetrain: error: SIGBUS: a file this process had mapped (a checkpoint or weights file being "
    "read) was cut short by another process while in use, or the device holding it failed; "
    "stopping\n";
static const char bus_train[] =
    "pipetrain: error: SIGBUS: a file or shared-memory segment this process had mapped "
    "(the activation cache's, or a checkpoint file being read) was cut short by another "
    "process while in use, or the device holding it failed; stopping (a save writes a checkpoint "
    "whole and never changes it after: unless the file cut short was the checkpoint being "
    "resumed, resume with --set train.resume=auto)\n";
/* the message for the command that runs (set before the handler is) */
static const char *bus_msg = bus_read;
static size_t bus_len = sizeof bus_read - 1;

static void on_bus_error(int sig)
{
    (void)sig;
    ssize_t ignored = write(STDERR_FILENO, bus_msg, bus_len);
    (void)ignored;
    pt_cache_release_names_ending();
    pt_wfile_remove_temporaries();
    _exit(1);
}

void pt_catch_bus_error(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_bus_error;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

void pt_catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    /* SIGXFSZ is ignored from main on (a write past ulimit -f fails, named).
     * A closed pipe is no reason to lose a run: train's only stream is
     * stderr (progress, notes), and a reader that went away (`2>&1 | head`,
     * a dead tee) makes those writes fail while the run goes on, its log in
     * metrics.jsonl, and a stop still saves a checkpoint (before, the stop
     * handler's own line to stderr raised SIGPIPE and ended it unsaved) */
    signal(SIGPIPE, SIG_IGN);
    const int fatal[] = {SIGALRM, SIGVTALRM, SIGPROF};
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++) {
        struct sigaction was;
        /* one the user set to be ignored (a shell's trap '' ALRM) stays so */
        if (sigaction(fatal[i], NULL, &was) == 0 && was.sa_handler != SIG_IGN)
            sigaction(fatal[i], &sa, NULL);
    }
    bus_msg = bus_train;
    bus_len = sizeof bus_train - 1;
    pt_catch_bus_error();
    sa.sa_sigaction = on_stop_signal; /* who sent it: a dying launcher's repeats */
    sa.sa_flags = SA_SIGINFO;
    /* SIGINT and SIGTERM are caught even when inherited as ignored: a
     * non-interactive shell starts every `cmd &` with SIGINT ignored (so a
     * Ctrl-C reaches only the foreground), and a script that then sends
     * `kill -INT` to the job it started means it; a stop is a checkpoint
     * and status 130, so nothing is lost either way */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* a hang-up (the terminal or ssh session gone) stops as SIGTERM does,
     * unless the user asked to ignore it (nohup) */
    struct sigaction hup;
    if (sigaction(SIGHUP, NULL, &hup) == 0 && hup.sa_handler != SIG_IGN)
        sigaction(SIGHUP, &sa, NULL);
    /* Open MPI's mpirun forwards SIGUSR1 to every rank and lets them finish;
     * SIGTERM and SIGINT it turns into killing the job (ranks get a second
     * before SIGKILL, and mpirun exits 1 whatever they do). So SIGUSR1 is
     * the way to stop a job under mpirun with a checkpoint and status 130. */
    sigaction(SIGUSR1, &sa, NULL);
    /* the soft CPU-time limit (ulimit -S -t, a batch system's CPU limit) is
     * the kernel's warning before the hard limit's SIGKILL: time to save,
     * as for SIGTERM, unless the user asked to ignore it */
    struct sigaction xcpu;
    if (sigaction(SIGXCPU, NULL, &xcpu) == 0 && xcpu.sa_handler != SIG_IGN)
        sigaction(SIGXCPU, &sa, NULL);
    /* a parent that blocked them (and exec passed the mask on) would keep
     * every stop request from arriving: the run would never save on one */
    sigset_t stops;
    sigemptyset(&stops);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGHUP);
    sigaddset(&stops, SIGUSR1);
    sigaddset(&stops, SIGXCPU);
    sigprocmask(SIG_UNBLOCK, &stops, NULL);
}

/* eval, plan and export end at a signal whose default action ends the
 * process (SIGINT, SIGTERM, SIGHUP, SIGUSR1, a closed pipe, a timer, ...) as
 * by default, but first take off the names of the node's cache (which an
 * evaluation may have made) and remove the temporary files of the outputs
 * they were writing (a finished output is renamed into place whole, so what
 * is left of an unfinished one is only its temporary file). A signal the
 * process started ignoring (nohup's SIGHUP), or that a library handles
 * (a profiler's SIGPROF, say), is left as it is, but for SIGINT and SIGTERM,
 * as for train. */
static void on_end_signal(int sig);

/* on_end_signal, once (SA_RESETHAND: the default action after it runs) */
static struct sigaction end_action(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_end_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    return sa;
}

static void on_end_signal(int sig)
{
    if (pt_wfile_defer_signal(sig)) {
        /* outputs going into place as a group (a bert export's renames):
         * this handler again (SA_RESETHAND took it off) for when the group
         * is in place and raises the signal again */
        const struct sigaction sa = end_action();
        sigaction(sig, &sa, NULL);
        return;
    }
    pt_cache_release_names_ending();
    pt_wfile_remove_temporaries();
    raise(sig); /* SA_RESETHAND: the default action now */
}

void pt_catch_end_signals(void)
{
    const struct sigaction sa = end_action();
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    const int others[] = {SIGHUP, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM,
                          SIGXCPU, SIGVTALRM, SIGPROF};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        struct sigaction was;
        if (sigaction(others[i], NULL, &was) == 0 && !(was.sa_flags & SA_SIGINFO) &&
            was.sa_handler == SIG_DFL)
            sigaction(others[i], &sa, NULL);
    }
}
