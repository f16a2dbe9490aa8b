/*
 * comm_group.h (internal to comm/): a group as comm.c (MPI) and nccl.c (NCCL)
 * both see it.
 */
#ifndef PT_COMM_GROUP_H
#define PT_COMM_GROUP_H

#include "comm/comm.h"

#include <mpi.h>

struct pt_nccl; /* nccl.c */

struct pt_group {
    MPI_Comm mpi;
    int rank, size;
    double timeout;
    int owned;             /* MPI_Comm_free on release */
    struct pt_nccl *nccl;  /* NULL until pt_group_nccl_open */
    int solo;              /* a group of one without MPI (comm.c, solo_open) */
};

/* Who is where (comm.c), pt_patience's two halves: a waiting rank answers
 * the others' question as it polls; one that reaches its limit asks them,
 * and returns 1 when it should wait on (a rank is busy, none silent), 2
 * when every other rank answered that it waits and this is not the last
 * try (one may have come late into this wait, which may be done: poll
 * again a while, then ask with last_try), else 0 with what it learnt in
 * out (and the others are told that this rank gave up). pt_comm_back: a waiting rank that itself
 * did not run for away_s seconds (its polls that far apart) looks whether
 * another rank gave up meanwhile: 1 with that in out (this rank gives up
 * too, and tells the others), else 0 (the time away does not count). */
void pt_comm_answer(const char *what);
int pt_comm_ask(pt_group *g, const char *what, int last_try, char *out, size_t n);
int pt_comm_back(const char *what, double away_s, char *out, size_t n);

/* watch.c: a deadline for a call that blocks with none of its own (MPI's
 * start, split and end; NCCL's communicator creation and the calls that
 * connect its ranks): between begin and end, a thread of the process
 * watches it, and if the call has not returned within limit_s (at least
 * WATCH_MIN_S, watch.c; time the process did not run not counted) it prints
 * "no progress for ... waiting for <what> (<name>; ...): <why>" (why may
 * be NULL) and ends the process with status 1, which ends the job. One
 * call at a time, from the thread that calls MPI. */
void pt_watch_begin(const char *what, const char *name, const char *why, double limit_s);
/* The same, ending the process with `status` (1 where it is not 1 to 255):
 * a job that failed already keeps its own status when its end then hangs. */
void pt_watch_begin_status(const char *what, const char *name, const char *why, double limit_s,
                           int status);
void pt_watch_end(void);
/* comm.c: whether a rank of the job stopped answering (pt_comm_stop): what
 * would wait for every rank is skipped or aborted. */
int pt_comm_is_stopped(void);
/* The world rank the launcher gave this process (its environment, read
 * before MPI starts as after); -1 if none says. */
int pt_launcher_rank(void);

#endif
