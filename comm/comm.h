/*
 * comm.h: the comm module's public interface: the world of ranks and its
 * nodes, process groups, point-to-point transfers and collectives on host
 * buffers over MPI, and binding each rank to its share of the node's cores.
 *
 * MPI_COMM_WORLD is the control plane; a node is the set of ranks of one
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) group. Every blocking wait has a
 * deadline, so a peer that stops answering becomes an error naming it, never
 * a hang. comm/ moves bytes; it does not know what they mean.
 */
#ifndef PT_COMM_H
#define PT_COMM_H

#include "nn/nn.h"

#include <stddef.h>
#include <stdint.h>

typedef struct pt_comm pt_comm;
typedef struct pt_group pt_group;

/* A pending transfer. Opaque; zero-initialised means "none". */
typedef struct pt_req {
    uint64_t opaque[2];
    int active;
} pt_req;

typedef enum { PT_DT_F32, PT_DT_F64, PT_DT_I64 } pt_dtype;

/* MPI_Init_thread (funneled: only the main thread calls MPI) and the node
 * split, within limit_s (run.timeout_s; comm_group.h, pt_watch_begin: a
 * rank that does not start ends the job instead of holding it). A process that no launcher started (pt_comm_launched) is a world
 * of one without MPI: its collectives are the identity and a transfer is
 * refused. (Open MPI's singleton start would fork a daemon of its own; its
 * "isolated" mode, which would not, gives every singleton one session
 * directory, which one that ends removes under another that starts.) */
int pt_comm_open(pt_comm **out, int *argc, char ***argv, double limit_s, pt_err *err);
/* Whether a launcher (mpirun, mpiexec, srun, a PMI or PMIx server) started
 * this process as a rank of a job: any of the variables they set for their
 * ranks. Before pt_comm_open as after it. */
int pt_comm_launched(void);
/* The same from an environment given as main's third argument (before
 * main, in an executable's preinit functions, getenv does not see it yet). */
int pt_comm_launched_in(char *const *envp);
/* Every rank of the world reaches here within the world group's deadline
 * (a barrier): MPI_Finalize waits for every rank with none, so a rank that
 * stopped answering after the job's last collective would leave the others
 * there for good. 0 in a world of one and after pt_comm_stop (whose
 * pt_comm_close aborts the job). Collective over the world. */
int pt_comm_finish(pt_comm *c, pt_err *err);
/* MPI_Finalize within the world's timeout (nothing of MPI's in a world of
 * one). code: the status the process is to exit with; when the deadline
 * passes it exits with that status, or 1 where it is 0 (the job failed at
 * its end). */
void pt_comm_close(pt_comm *c, int code);
/* Kills every rank of the job (MPI_Abort; in a world of one, _exit); does
 * not return. */
void pt_comm_abort(pt_comm *c, int code) __attribute__((noreturn));
/* Stops all communication of this process after a wait timed out (a peer
 * stopped answering): every later transfer or collective fails at once
 * without calling MPI, whose posted operations may still point at freed
 * buffers, and pt_comm_close aborts the job. A poll loop that gives up
 * calls it (pt_patience_spent). */
void pt_comm_stop(void);
/* A poll loop's patience (pt_wait's, the gradient all-reduce's, NCCL's):
 * it gives up after the group's timeout without progress. So that it can
 * name the rank to look at in a job of many, every rank answers the
 * others' questions while it waits (what: what it waits for, as "an
 * all-reduce"), and a loop that reaches its limit first asks every other
 * rank, giving them a second to answer, and reports what it learnt
 * ("; rank 3 is in no wait (stopped, gone, busy in its own work, ...); rank 1
 * waits for stage 2", the group's members listed first; empty if nothing).
 * Long work that other ranks wait for and that cannot be split (a
 * checkpoint's writes) calls pt_comm_busy as it goes: while a rank answers
 * busy, or within one more run.timeout_s of its last such answer (a final
 * sync), and no other rank is silent, the loop waits another timeout
 * instead of giving up. Time the loop's own rank did not run (polls over
 * a second apart: stopped, as every rank of a suspended job is, or starved
 * of the CPU) does not count toward the limit, unless another rank gave up
 * meanwhile: then it gives up too, saying so. A rank that
 * gives up has told the others, which name it as having given up, not as
 * in no wait. */
typedef struct pt_patience {
    pt_group *g;
    const char *what;
    double limit, deadline, last;
    long polls;
    int asked_all_wait; /* an ask found every other rank waiting: the next gives up */
} pt_patience;
void pt_patience_start(pt_patience *p, pt_group *g, const char *what);
/* The wait moved on (a part of it completed): the limit counts from now. */
void pt_patience_moved(pt_patience *p);
/* After every poll that found the wait not done. 0: poll again (the first
 * polls at once, later ones after answering the others' questions and a
 * short sleep). 1: no progress within the limit and no rank busy; others
 * (n bytes) holds what the other ranks answered, and all communication of
 * this process is stopped (pt_comm_stop). */
int pt_patience_spent(pt_patience *p, char *others, size_t n);
void pt_comm_busy(const char *doing);
/* Progress over a whole step. A wait that spans other ranks' work rather
 * than one action of a neighbour (an idle rank's, or a stage's whose units
 * are all frozen, in the collectives that end a step; a replica's, ahead
 * of a slower one) would give up in a healthy step longer than the
 * timeout: the working ranks are silent to its question while they
 * compute. So a rank that runs a step's actions (or an evaluation's
 * forwards) calls pt_comm_tick as it starts them and after each, which
 * tells every other rank that it moves on (at most once per a sixteenth
 * of `timeout`, the group's: a wait gives up only when an action, or the
 * work between two steps, takes 15/16 of it); and between
 * pt_comm_ticks_count(1)
 * and (0) a wait's limit counts from the last such notice. A rank that
 * stops ticking (stopped, gone, hung in one action) is still named after
 * the timeout; the notices that come during other waits are taken and
 * dropped. */
void pt_comm_tick(double timeout);
void pt_comm_ticks_count(int on);

int pt_comm_rank(const pt_comm *c);
int pt_comm_size(const pt_comm *c);
int pt_comm_local_rank(const pt_comm *c);  /* rank within the node */
int pt_comm_local_size(const pt_comm *c);  /* ranks on this node */
int pt_comm_node(const pt_comm *c);        /* index of this node, 0..nodes-1 */
int pt_comm_nodes(const pt_comm *c);
int pt_comm_node_of(const pt_comm *c, int rank); /* node index of any world rank */
const char *pt_comm_host(const pt_comm *c);

/* Binds this rank to its share of the node's cores (hwloc): the node's cores
 * (those a cgroup cpuset allows; without a launcher, those the process's CPU
 * affinity allows, never widened) split evenly among its ranks. *threads
 * gets the cores this rank owns, or 1 when there are more ranks than cores
 * (then nothing is bound). desc gets a one-line description of the binding
 * for the plan, without the thread count (run.threads may set another). */
int pt_comm_bind(pt_comm *c, int *threads, char *desc, size_t n, pt_err *err);
/* Cores of this node this job may use (as pt_comm_bind), known after it; 0 before. */
int pt_comm_cores(const pt_comm *c);

/* Groups. The world group and the node group (the ranks of this rank's
 * node) are owned by the comm. */
pt_group *pt_comm_world(pt_comm *c);
pt_group *pt_comm_node_group(pt_comm *c);
/* Collective over the world: ranks with the same color form a group, ordered
 * by key. color < 0: this rank joins no group (*out = NULL). The ranks meet
 * first under the world's deadline (MPI_Comm_split itself has none): a rank
 * that stopped answering is named by the others' timeout. */
int pt_group_split(pt_comm *c, int color, int key, pt_group **out, pt_err *err);
void pt_group_free(pt_group *g);
int pt_group_rank(const pt_group *g);
int pt_group_size(const pt_group *g);
/* The world rank of a member of the group. */
int pt_group_world_rank(const pt_group *g, int rank);
/* Seconds a wait may take before the peer counts as lost (default 600). */
void pt_group_set_timeout(pt_group *g, double seconds);
double pt_group_timeout(const pt_group *g);
/* The largest tag a transfer in the group may carry (MPI_TAG_UB: at least
 * 32767 by the standard, INT_MAX in Open MPI). */
int pt_group_tag_limit(const pt_group *g);

/* Non-blocking transfers of host memory. peer is a rank of the group. */
int pt_isend(pt_group *g, const void *buf, size_t bytes, int peer, int tag, pt_req *r, pt_err *err);
int pt_irecv(pt_group *g, void *buf, size_t bytes, int peer, int tag, pt_req *r, pt_err *err);
/* Waits for a transfer (no-op on an inactive request). `what` names it in
 * the timeout message ("gradient of micro-batch 3 from rank 2"). */
int pt_wait(pt_group *g, pt_req *r, const char *what, pt_err *err);
/* What this process is doing where no error prefix says it ("starting up",
 * "at step 12: evaluating the test split"), named in a timeout's message; the
 * caller keeps the string alive until the next call. NULL: nothing (a
 * step's errors carry their own place). */
void pt_comm_phase(const char *phase);
const char *pt_comm_phase_now(void); /* the phase set last (NULL: none) */
/* Whether a transfer has completed (*done), without waiting; an inactive
 * request is done. */
int pt_req_test(pt_req *r, int *done, pt_err *err);
/* Cancels and frees a pending transfer (after an error). Returns 1 when
 * it may not have completed (MPI may still write into or read its buffer,
 * which the caller then leaves allocated: the job is failing), else 0. */
int pt_req_cancel(pt_req *r);

/* Collectives on host memory, with the group's deadline. */
int pt_allreduce_sum(pt_group *g, void *buf, size_t count, pt_dtype t, pt_err *err);
int pt_allreduce_max_i64(pt_group *g, int64_t *v, pt_err *err);
int pt_bcast(pt_group *g, void *buf, size_t bytes, int root, pt_err *err);
/* Every member's `bytes` bytes of mine, in group rank order, into all
 * (size * bytes). g NULL: only this rank (a copy). */
int pt_allgather(pt_group *g, const void *mine, void *all, size_t bytes, pt_err *err);
int pt_barrier(pt_group *g, pt_err *err);
/* Whether every member got here without failing: the worst rc of the group.
 * A member that did not fail itself gets the failure back with a relayed
 * message ("another rank failed"); the failing one keeps its own. */
int pt_group_agree(pt_group *g, int rc, pt_err *err);

/* --------------------------------------------------------- the process mesh */

/* A layout's K stages x D replicas placed on the world's ranks (mesh.c):
 * pipelines inside one node, replicas numbered node by node, the rest idle.
 * A pure function of its inputs, so every rank computes the same mesh. */
typedef struct pt_mesh {
    int stages, replicas, ranks;
    int *rank_of;    /* [replicas * stages]: world rank of (r, s) at r * stages + s */
    int *replica_of; /* [ranks]: replica of each world rank, -1 when idle */
    int *stage_of;   /* [ranks]: its stage, -1 when idle */
} pt_mesh;

/* Most replicas of a K-stage pipeline the ranks allow (node_of[r]: node index
 * of world rank r, 0..nodes-1). */
int pt_mesh_capacity(int ranks, const int *node_of, int stages);
/* PT_EINPUT when D replicas do not fit. */
int pt_mesh_build(pt_mesh *m, int ranks, const int *node_of, int stages, int replicas, pt_err *err);
void pt_mesh_free(pt_mesh *m);
int pt_mesh_rank(const pt_mesh *m, int replica, int stage);

/* This rank's groups in a mesh (NULL where it has none): its pipeline (group
 * rank = stage), its stage's replicas (group rank = replica) and all active
 * ranks (group rank = replica * K + stage). */
typedef struct pt_mesh_groups {
    pt_group *pipe, *replicas, *active;
} pt_mesh_groups;

/* Collective over the world; waits time out after `timeout` seconds. */
int pt_mesh_groups_build(pt_mesh_groups *g, pt_comm *c, const pt_mesh *m, double timeout, pt_err *err);
void pt_mesh_groups_free(pt_mesh_groups *g);
/* Measures the links the gradient all-reduce will use: bytes/s and seconds
 * per message between two ranks of rank 0's node and between rank 0 and a
 * rank of another node (ping-pong of a few MiB). Collective over the world;
 * every rank gets rank 0's figures. A link that does not exist reports 0. */
int pt_comm_measure_links(pt_comm *c, double *bw_intra, double *bw_inter, double *latency, pt_err *err);
/* A link's bytes/s from the one-way seconds of a message of `bytes` bytes
 * (t_big) and of a small one (t_small, the latency): positive whatever the
 * timings (a loaded machine can make the small ones slower), at most 10
 * times bytes / t_big, and at most 1e15, moving smoothly with the timings. */
double pt_link_bandwidth(double bytes, double t_small, double t_big);
/* The world's node index of every rank ([size], owned by the comm). */
const int *pt_comm_node_map(const pt_comm *c);

/* -------------------------------------------- NCCL, on device memory */

/* Built when NCCL and the CUDA runtime are found (otherwise every call below
 * fails with PT_EBACKEND). A group gets a NCCL communicator over its ranks:
 * group rank 0 makes the unique id and broadcasts it over MPI. Operations are
 * queued on the CUDA stream given at open (a cudaStream_t, passed as void * so
 * this header needs no CUDA); pt_nccl_wait waits for them with the group's
 * deadline and aborts the communicator if it passes. Transfers that must
 * progress together go between pt_nccl_group_start and _end. */
int pt_comm_has_nccl(void);
int pt_group_nccl_open(pt_group *g, int device, void *stream, pt_err *err);
/* Whether the group has a NCCL communicator (NULL group: no). */
int pt_group_nccl_ready(const pt_group *g);
void pt_group_nccl_close(pt_group *g);
int pt_nccl_group_start(pt_err *err);
int pt_nccl_group_end(pt_err *err);
int pt_nccl_send(pt_group *g, const void *buf, size_t bytes, int peer, pt_err *err);
int pt_nccl_recv(pt_group *g, void *buf, size_t bytes, int peer, pt_err *err);
int pt_nccl_allreduce_sum(pt_group *g, void *buf, size_t count, pt_dtype t, pt_err *err);
int pt_nccl_bcast(pt_group *g, void *buf, size_t bytes, int root, pt_err *err);
int pt_nccl_wait(pt_group *g, pt_err *err);

#endif
