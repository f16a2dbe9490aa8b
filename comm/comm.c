/*
 * comm.c: comm.h over MPI. Waits poll MPI_Test with a deadline instead of
 * blocking in MPI_Wait: a few fast polls, then short sleeps, so a waiting
 * rank neither hangs forever on a lost peer nor takes the core from a rank
 * that shares it (several ranks per core is normal in tests).
 * Collectives are the non-blocking MPI ones waited on the same way.
 */
#include "comm/comm_group.h"

#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(MPI_Request) <= sizeof(((pt_req *)0)->opaque), "pt_req too small for MPI_Request");

struct pt_comm {
    int solo; /* a world of one without MPI (solo_open) */
    int rank, size, local_rank, local_size, node, nodes;
    int *node_of; /* [size] node index of every rank */
    int cores;    /* of this node, from hwloc */
    char host[MPI_MAX_PROCESSOR_NAME + 1];
    MPI_Comm node_comm;
    pt_group world, node_group;
};

static MPI_Request *req_of(pt_req *r) { return (MPI_Request *)(void *)r->opaque; }

/* After a wait timed out, a non-blocking operation is still posted on
 * buffers its caller has since given up (often on its stack), and the ranks
 * no longer call collectives in one order: a further MPI call could let MPI
 * write into freed memory (seen: crashes in the next collective) or wait
 * forever. So none is made: every later operation fails at once, and
 * closing aborts the job instead of finalizing. */
static volatile sig_atomic_t stopped;

void pt_comm_stop(void) { stopped = 1; }
int pt_comm_is_stopped(void) { return stopped; }

static const char *volatile phase;

void pt_comm_phase(const char *p) { phase = p; }
const char *pt_comm_phase_now(void) { return phase; }

static void ask_open(void);  /* who is where, below */
static void ask_close(void);

static int stopped_fail(pt_err *err)
{
    return pt_fail(err, PT_EPEER, "no more communication: an earlier wait found a peer that "
                   "stopped answering");
}

static int mpi_fail(pt_err *err, int code, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    return pt_fail(err, PT_EPEER, "%s failed: %.*s", what, len, msg);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int pt_comm_launched_in(char *const *envp)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK",    "PMI_RANK",
                                       "PMI_SIZE",             "PMI_FD",       "SLURM_PROCID",
                                       "MPI_LOCALNRANKS",      "HYDRA_CONTROL_FD"};
    for (char *const *e = envp; e && *e; e++)
        for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
            const size_t n = strlen(vars[i]);
            if (strncmp(*e, vars[i], n) == 0 && (*e)[n] == '=')
                return 1;
        }
    return 0;
}

int pt_comm_launched(void)
{
    extern char **environ;
    return pt_comm_launched_in(environ);
}

/* A process that no launcher started is a world of one, and then MPI is
 * not started at all: Open MPI's singleton start forks a daemon of its own
 * and loads its components, most of the time of a command run by hand
 * (about 0.4 s of `pipetrain eval` on a small model's checkpoint), and no
 * rank of a world of one has another to talk to. Its groups are `solo`:
 * collectives are the identity, a transfer is refused (it could only be
 * to itself, which nothing does). */
static int solo_open(pt_comm **out, pt_err *err)
{
    pt_comm *c = calloc(1, sizeof *c);
    if (!c || !(c->node_of = calloc(1, sizeof *c->node_of))) {
        free(c);
        return pt_fail(err, PT_ENOMEM, "out of memory starting");
    }
    c->solo = 1;
    c->size = c->local_size = c->nodes = 1;
    if (gethostname(c->host, sizeof c->host - 1) != 0)
        snprintf(c->host, sizeof c->host, "localhost");
    c->host[sizeof c->host - 1] = '\0';
    c->world = (pt_group){MPI_COMM_NULL, 0, 1, 600.0, 0, NULL, 1};
    c->node_group = (pt_group){MPI_COMM_NULL, 0, 1, 600.0, 0, NULL, 1};
    *out = c;
    return 0;
}

static int open_started(pt_comm **out, int *argc, char ***argv, pt_err *err);

int pt_comm_open(pt_comm **out, int *argc, char ***argv, double limit_s, pt_err *err)
{
    int rc;
    *out = NULL;
    if (!pt_comm_launched())
        return solo_open(out, err);
    /* MPI's start waits for every rank, with no deadline: one that stopped
     * on its way (or never started) held the others in it for good */
    pt_watch_begin("every rank to start MPI", "MPI_Init_thread, then the ranks' nodes",
                   "a rank that never started, or stopped while starting, holds the others here", limit_s);
    rc = open_started(out, argc, argv, err);
    pt_watch_end();
    return rc;
}

static int open_started(pt_comm **out, int *argc, char ***argv, pt_err *err)
{
    int provided, rc;
    if ((rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
        return pt_fail(err, PT_EPEER, "MPI_Init_thread failed (code %d)", rc);
    /* errors come back as codes, so they become messages instead of aborts */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    pt_comm *c = calloc(1, sizeof *c);
    if (!c) {
        MPI_Finalize();
        return pt_fail(err, PT_ENOMEM, "out of memory starting MPI");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    int len = 0;
    MPI_Get_processor_name(c->host, &len);
    c->host[len] = '\0';
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &c->node_comm);
    MPI_Comm_rank(c->node_comm, &c->local_rank);
    MPI_Comm_size(c->node_comm, &c->local_size);
    /* node index: rank of this node's leader among all leaders, in world order */
    int leader = c->rank;
    MPI_Bcast(&leader, 1, MPI_INT, 0, c->node_comm);
    int *leaders = malloc((size_t)c->size * sizeof *leaders);
    if (!leaders) {
        free(c);
        MPI_Finalize();
        return pt_fail(err, PT_ENOMEM, "out of memory starting MPI");
    }
    MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, MPI_COMM_WORLD);
    c->node_of = calloc((size_t)c->size, sizeof *c->node_of);
    if (!c->node_of) {
        free(leaders);
        free(c);
        MPI_Finalize();
        return pt_fail(err, PT_ENOMEM, "out of memory starting MPI");
    }
    for (int r = 0; r < c->size; r++)
        if (leaders[r] == r) {
            if (r < leader)
                c->node++;
            c->nodes++;
        }
    /* a rank's node index = how many leaders come before its leader */
    for (int r = 0; r < c->size; r++)
        for (int q = 0; q < leaders[r]; q++)
            c->node_of[r] += leaders[q] == q;
    free(leaders);
    c->world = (pt_group){MPI_COMM_WORLD, c->rank, c->size, 600.0, 0, NULL, 0};
    MPI_Comm_set_errhandler(c->node_comm, MPI_ERRORS_RETURN);
    c->node_group = (pt_group){c->node_comm, c->local_rank, c->local_size, 600.0, 0, NULL, 0};
    ask_open();
    *out = c;
    return 0;
}

int pt_comm_finish(pt_comm *c, pt_err *err)
{
    if (!c || c->solo || stopped)
        return 0;
    return pt_barrier(&c->world, err);
}

void pt_comm_close(pt_comm *c, int code)
{
    if (!c)
        return;
    const int solo = c->solo;
    if (!solo && stopped) {
        fflush(stdout);
        fflush(stderr);
        /* the launcher forwards output while it kills: a moment for the
         * message that says why to get out first */
        nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    pt_group_nccl_close(&c->world);
    if (!solo) {
        ask_close();
        MPI_Comm_free(&c->node_comm);
    }
    const double limit = c->world.timeout;
    free(c->node_of);
    free(c);
    if (!solo) {
        /* MPI_Finalize waits for every rank with no deadline: what was
         * printed gets out before */
        fflush(stdout);
        fflush(stderr);
        pt_watch_begin_status("every rank to end MPI", "MPI_Finalize",
                              "a rank that stopped after the job's last wait, or the launcher "
                              "(mpirun, orted) stopped, holds the others here",
                              limit, code);
        MPI_Finalize();
        pt_watch_end();
    }
}

void pt_comm_abort(pt_comm *c, int code)
{
    fflush(stdout);
    fflush(stderr);
    if (c && c->solo)
        _exit(code);
    MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code); /* MPI_Abort does not return; this keeps the compiler sure of it */
}

int pt_comm_rank(const pt_comm *c) { return c->rank; }
int pt_comm_size(const pt_comm *c) { return c->size; }
int pt_comm_local_rank(const pt_comm *c) { return c->local_rank; }
int pt_comm_local_size(const pt_comm *c) { return c->local_size; }
int pt_comm_node(const pt_comm *c) { return c->node; }
int pt_comm_nodes(const pt_comm *c) { return c->nodes; }
int pt_comm_node_of(const pt_comm *c, int rank) { return c->node_of[rank]; }
const int *pt_comm_node_map(const pt_comm *c) { return c->node_of; }
int pt_comm_cores(const pt_comm *c) { return c->cores; }
const char *pt_comm_host(const pt_comm *c) { return c->host; }
pt_group *pt_comm_world(pt_comm *c) { return &c->world; }
pt_group *pt_comm_node_group(pt_comm *c) { return &c->node_group; }

/* "core 3" or "cores 0-1", "thread" or "threads" */
static const char *plural(int k, const char *one, const char *many) { return k == 1 ? one : many; }

int pt_comm_bind(pt_comm *c, int *threads, char *desc, size_t n, pt_err *err)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) || hwloc_topology_load(topo)) {
        hwloc_topology_destroy(topo);
        return pt_fail(err, PT_ESYS, "hwloc could not read the machine's topology");
    }
    const int all = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    /* The cores this process may use. hwloc's topology already leaves out
     * what a cgroup cpuset forbids. Without a launcher, the CPU affinity it
     * was started with (taskset, numactl, a batch system's binding) is the
     * user's too, and is never widened. Under mpirun it is not: Open MPI
     * binds every rank to one core by default (even a single rank, even
     * inside a taskset), and pipetrain splits the node's cores among its
     * ranks instead. */
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc(), set = hwloc_bitmap_alloc();
    if (!allowed || !set) {
        hwloc_bitmap_free(allowed);
        hwloc_bitmap_free(set);
        hwloc_topology_destroy(topo);
        return pt_fail(err, PT_ENOMEM, "out of memory binding to cores");
    }
    int narrowed = 0;
    if (c->solo && hwloc_get_cpubind(topo, allowed, HWLOC_CPUBIND_PROCESS) == 0 &&
        !hwloc_bitmap_iszero(allowed)) {
        for (int k = 0; k < all && !narrowed; k++) {
            hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, k);
            narrowed = core && core->cpuset && !hwloc_bitmap_isincluded(core->cpuset, allowed);
        }
    }
    if (!narrowed)
        hwloc_bitmap_fill(allowed);
    int usable[1024], cores = 0; /* indices of the cores with an allowed PU */
    for (int k = 0; k < all && cores < (int)(sizeof usable / sizeof *usable); k++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, k);
        if (core && core->cpuset && hwloc_bitmap_intersects(core->cpuset, allowed))
            usable[cores++] = k;
    }
    if (cores < 1) { /* hwloc found no core (some VMs): one, by index 0, as before */
        cores = 1;
        usable[0] = 0;
    }
    c->cores = cores;
    int per = cores / c->local_size;
    if (per < 1) {
        *threads = 1;
        snprintf(desc, n, "%d ranks share %d %s on %s: not bound (oversubscribed)", c->local_size,
                 cores, plural(cores, "core", "cores"), c->host);
    } else {
        for (int k = 0; k < per; k++) {
            hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, usable[c->local_rank * per + k]);
            if (core && core->cpuset)
                hwloc_bitmap_or(set, set, core->cpuset);
        }
        hwloc_bitmap_and(set, set, allowed); /* a PU outside the affinity stays outside */
        char *text = NULL;
        hwloc_bitmap_list_asprintf(&text, set);
        char which[96];
        const int first = usable[c->local_rank * per], last = usable[c->local_rank * per + per - 1];
        if (narrowed)
            snprintf(which, sizeof which, "the %d %s its CPU affinity allows", per,
                     plural(per, "core", "cores"));
        else if (per == 1)
            snprintf(which, sizeof which, "core %d", first);
        else
            snprintf(which, sizeof which, "cores %d-%d", first, last);
        if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) != 0) {
            /* binding can be refused (containers); running unbound is still correct */
            snprintf(desc, n, "%s: binding to %s refused (%s); unbound", c->host, which,
                     strerror(errno));
        } else {
            snprintf(desc, n, "%s: local rank %d bound to %s (PUs %s)", c->host, c->local_rank, which,
                     text ? text : "?");
        }
        free(text);
        *threads = per;
    }
    hwloc_bitmap_free(allowed);
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(topo);
    return 0;
}

/* ----------------------------------------------------------------- groups */

int pt_group_split(pt_comm *c, int color, int key, pt_group **out, pt_err *err)
{
    MPI_Comm mpi;
    *out = NULL;
    if (c->solo) {
        if (color < 0)
            return 0;
        pt_group *g = calloc(1, sizeof *g);
        if (!g)
            return pt_fail(err, PT_ENOMEM, "out of memory creating a group");
        *g = (pt_group){MPI_COMM_NULL, 0, 1, c->world.timeout, 1, NULL, 1};
        *out = g;
        return 0;
    }
    /* MPI_Comm_split blocks with no deadline until every rank is in it: a
     * rank that stopped answering on its way there (at a re-plan, or while
     * starting up) held the others in it for good. They meet first in a
     * barrier that times out; past it, every rank is at the split. */
    if (stopped)
        return stopped_fail(err);
    pt_req r = {0};
    int rc = MPI_Ibarrier(c->world.mpi, req_of(&r));
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "MPI_Ibarrier");
    r.active = 1;
    if ((rc = pt_wait(&c->world, &r, "every rank, to make a process group", err)))
        return rc;
    pt_watch_begin("every rank, to make a process group", "MPI_Comm_split", NULL, c->world.timeout);
    rc = MPI_Comm_split(MPI_COMM_WORLD, color < 0 ? MPI_UNDEFINED : color, key, &mpi);
    pt_watch_end();
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "MPI_Comm_split");
    if (mpi == MPI_COMM_NULL)
        return 0;
    pt_group *g = calloc(1, sizeof *g);
    if (!g) {
        MPI_Comm_free(&mpi);
        return pt_fail(err, PT_ENOMEM, "out of memory creating a group");
    }
    MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    g->mpi = mpi;
    g->owned = 1;
    g->timeout = c->world.timeout;
    MPI_Comm_rank(mpi, &g->rank);
    MPI_Comm_size(mpi, &g->size);
    *out = g;
    return 0;
}

void pt_group_free(pt_group *g)
{
    if (!g || !g->owned)
        return;
    pt_group_nccl_close(g);
    if (!g->solo && !stopped)
        MPI_Comm_free(&g->mpi);
    free(g);
}

int pt_group_rank(const pt_group *g) { return g->rank; }
int pt_group_size(const pt_group *g) { return g->size; }
void pt_group_set_timeout(pt_group *g, double seconds) { g->timeout = seconds; }
double pt_group_timeout(const pt_group *g) { return g->timeout; }

int pt_group_tag_limit(const pt_group *g)
{
    if (g->solo)
        return INT_MAX;
    int *ub = NULL, flag = 0;
    if (MPI_Comm_get_attr(g->mpi, MPI_TAG_UB, &ub, &flag) != MPI_SUCCESS || !flag || !ub)
        return 32767; /* what every MPI allows */
    return *ub;
}
int pt_group_nccl_ready(const pt_group *g) { return g && g->nccl != NULL; }

int pt_group_world_rank(const pt_group *g, int rank)
{
    if (g->solo)
        return rank;
    MPI_Group mine, world;
    int out = -1;
    MPI_Comm_group(g->mpi, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_translate_ranks(mine, 1, &rank, world, &out);
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    return out;
}

/* -------------------------------------------------------------- transfers */

/* `bytes` bytes as MPI counts them: up to INT_MAX, that many MPI_BYTEs;
 * beyond (a unit of a large model moved at a re-plan, a large stage's
 * micro-batch), one element of a type made here: whole GiB blocks, then
 * the rest. MPI counts are ints, so without it a transfer past 2 GiB could
 * not be posted at all. A made type is freed by release_bytes right after
 * the call that posts it (MPI keeps it until the operation completes). */
typedef struct {
    MPI_Datatype type;
    int count;
} mpi_bytes;

static int bytes_type(size_t bytes, mpi_bytes *out, pt_err *err)
{
    out->type = MPI_BYTE;
    out->count = (int)bytes;
    if (bytes <= INT_MAX)
        return 0;
    enum { GIB = 1 << 30 };
    const size_t blocks = bytes / GIB, rest = bytes % GIB;
    if (blocks > INT_MAX)
        return pt_fail(err, PT_EINTERNAL, "a single transfer of %zu bytes", bytes);
    MPI_Datatype gib = MPI_DATATYPE_NULL;
    const int lengths[2] = {(int)blocks, (int)rest};
    const MPI_Aint at[2] = {0, (MPI_Aint)(blocks * GIB)};
    MPI_Datatype types[2] = {MPI_DATATYPE_NULL, MPI_BYTE};
    int rc = MPI_Type_contiguous(GIB, MPI_BYTE, &gib);
    if (rc == MPI_SUCCESS) {
        types[0] = gib;
        rc = MPI_Type_create_struct(rest ? 2 : 1, lengths, at, types, &out->type);
        MPI_Type_free(&gib);
    }
    if (rc == MPI_SUCCESS && (rc = MPI_Type_commit(&out->type)) != MPI_SUCCESS)
        MPI_Type_free(&out->type);
    if (rc != MPI_SUCCESS) {
        out->type = MPI_BYTE;
        return mpi_fail(err, rc, "a datatype for a transfer past 2 GiB");
    }
    out->count = 1;
    return 0;
}

static void release_bytes(mpi_bytes *b)
{
    if (b->type != MPI_BYTE)
        MPI_Type_free(&b->type);
}

/* ------------------------------------------------------------ who is where */

/* A wait that times out says which ranks are in no wait at all (stopped,
 * hung in their own work, or gone) and what the others wait for: the rank
 * to look at in a job of many. Each rank keeps a receive posted on a
 * duplicate of the world for a question (one int); its waits answer while
 * they poll, with what they wait for. A rank gives the others ASK_S to
 * answer; one that has not answered by then is named as silent. A rank
 * asks once (it stops after), so at most one answer per other rank is
 * ever going out: answers has a slot for each. */
enum { ASK_TAG = 1, ANSWER_TAG = 2, GAVE_UP_TAG = 3, TICK_TAG = 4, ANSWER_LEN = 192, NAMED_MAX = 16 };
static const double ASK_S = 1.0;
static const double AWAY_S = 1.0; /* a gap between a wait's polls longer than this: the rank did not run */
static MPI_Comm ask_comm = MPI_COMM_NULL;
static MPI_Request ask_in = MPI_REQUEST_NULL;
static int ask_buf;
static struct answer {
    MPI_Request req;
    char text[ANSWER_LEN];
} *answers; /* [world size], made at the first question */
static int answers_n;
static double *busy_seen; /* [world size]: when this rank last heard each one answer busy */

static void ask_open(void)
{
    if (MPI_Comm_dup(MPI_COMM_WORLD, &ask_comm) != MPI_SUCCESS) {
        ask_comm = MPI_COMM_NULL; /* timeouts then say nothing of the others */
        return;
    }
    MPI_Comm_set_errhandler(ask_comm, MPI_ERRORS_RETURN);
    if (MPI_Irecv(&ask_buf, 1, MPI_INT, MPI_ANY_SOURCE, ASK_TAG, ask_comm, &ask_in) != MPI_SUCCESS)
        ask_in = MPI_REQUEST_NULL;
}

/* a send that is not complete by now left to complete on its own, without
 * waiting for it; whether it had completed (its buffer is free again) */
static int drop_request(MPI_Request *r)
{
    int done = 0;
    if (*r == MPI_REQUEST_NULL || (MPI_Test(r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done))
        return 1;
    MPI_Request_free(r);
    return 0;
}

/* cancels a posted receive; whether it completed (its buffer is free again) */
static int cancel_request(MPI_Request *r)
{
    if (*r == MPI_REQUEST_NULL)
        return 1;
    MPI_Cancel(r);
    const double until = now_s() + 0.2;
    do {
        int done = 0;
        if (MPI_Test(r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return 0;
        if (done)
            return 1;
        nanosleep(&(struct timespec){0, 20000}, NULL);
    } while (now_s() < until);
    return 0;
}

static void ask_close(void)
{
    if (ask_comm == MPI_COMM_NULL)
        return;
    if (!cancel_request(&ask_in))
        return; /* MPI keeps it; the communicator stays with it */
    int going = 0;
    for (int i = 0; i < answers_n; i++)
        going |= !drop_request(&answers[i].req);
    if (!going) { /* else kept: MPI may still read an answer's text */
        free(answers);
        answers = NULL;
        answers_n = 0;
    }
    free(busy_seen);
    busy_seen = NULL;
    MPI_Comm_free(&ask_comm);
}

/* answers every question that came, as waiting for `what` (kind 'w') or
 * busy with it (kind 'b'): the first character of an answer is its kind */
static void answer_as(char kind, const char *what)
{
    if (ask_comm == MPI_COMM_NULL || stopped)
        return;
    while (ask_in != MPI_REQUEST_NULL) {
        int done = 0;
        MPI_Status st;
        if (MPI_Test(&ask_in, &done, &st) != MPI_SUCCESS || !done)
            return;
        const int from = st.MPI_SOURCE;
        if (MPI_Irecv(&ask_buf, 1, MPI_INT, MPI_ANY_SOURCE, ASK_TAG, ask_comm, &ask_in) != MPI_SUCCESS)
            ask_in = MPI_REQUEST_NULL;
        int ranks = 0;
        if (!answers && MPI_Comm_size(ask_comm, &ranks) == MPI_SUCCESS &&
            (answers = calloc((size_t)ranks, sizeof *answers))) {
            answers_n = ranks;
            for (int i = 0; i < answers_n; i++)
                answers[i].req = MPI_REQUEST_NULL;
        }
        struct answer *a = answers && from >= 0 && from < answers_n ? &answers[from] : NULL;
        int sent = 1;
        if (a && a->req != MPI_REQUEST_NULL)
            MPI_Test(&a->req, &sent, MPI_STATUS_IGNORE);
        if (!a || !sent) /* no memory, or an answer to this rank still going out: none */
            continue;
        const char *at = phase;
        snprintf(a->text, ANSWER_LEN, "%c%s%s%s", kind, what, at ? " while " : "", at ? at : "");
        MPI_Isend(a->text, (int)strlen(a->text) + 1, MPI_CHAR, from, ANSWER_TAG, ask_comm, &a->req);
    }
}

void pt_comm_answer(const char *what) { answer_as('w', what); }
void pt_comm_busy(const char *doing) { answer_as('b', doing); }

static int ticks_count; /* pt_comm_ticks_count */

void pt_comm_ticks_count(int on) { ticks_count = on; }

/* takes the other ranks' progress notices that came; how many */
static int take_ticks(void)
{
    int got = 0;
    for (;;) {
        int flag = 0, buf;
        MPI_Status st;
        if (ask_comm == MPI_COMM_NULL ||
            MPI_Iprobe(MPI_ANY_SOURCE, TICK_TAG, ask_comm, &flag, &st) != MPI_SUCCESS || !flag ||
            MPI_Recv(&buf, 1, MPI_INT, st.MPI_SOURCE, TICK_TAG, ask_comm, MPI_STATUS_IGNORE) !=
                MPI_SUCCESS)
            return got;
        got++;
    }
}

void pt_comm_tick(double timeout)
{
    static const int tick = 1; /* its value says nothing: a notice is its arrival */
    static double last = -1e300;
    if (ask_comm == MPI_COMM_NULL || stopped)
        return;
    const double t = now_s();
    if (t - last < (timeout > 0 ? timeout / 16 : 1.0))
        return;
    last = t;
    /* the others' notices that came while this rank worked: taken, so that
     * none pile up over a long run whose waits end before they look */
    take_ticks();
    int me = 0, size = 0;
    if (MPI_Comm_rank(ask_comm, &me) != MPI_SUCCESS || MPI_Comm_size(ask_comm, &size) != MPI_SUCCESS)
        return;
    for (int w = 0; w < size; w++) {
        MPI_Request r;
        if (w != me && MPI_Isend(&tick, 1, MPI_INT, w, TICK_TAG, ask_comm, &r) == MPI_SUCCESS)
            MPI_Request_free(&r);
    }
}


/* A rank that gives up tells every other rank, which then does not take
 * it for one in no wait when it asks later (it answers no more): the text
 * is what it waited for, kept for the sends. */
static char gave_up_text[ANSWER_LEN];

static void tell_gave_up(int me, int size, const char *what)
{
    const char *at = phase;
    snprintf(gave_up_text, ANSWER_LEN, "%s%s%s", what, at ? " while " : "", at ? at : "");
    for (int w = 0; w < size; w++) {
        MPI_Request r;
        if (w != me && MPI_Isend(gave_up_text, (int)strlen(gave_up_text) + 1, MPI_CHAR, w, GAVE_UP_TAG,
                                 ask_comm, &r) == MPI_SUCCESS)
            MPI_Request_free(&r);
    }
}

/* the notices of ranks that gave up, into gave (a text per world rank) */
static void take_gave_up(char *gave, int size)
{
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, GAVE_UP_TAG, ask_comm, &flag, &st) != MPI_SUCCESS || !flag)
            return;
        char text[ANSWER_LEN];
        if (MPI_Recv(text, ANSWER_LEN, MPI_CHAR, st.MPI_SOURCE, GAVE_UP_TAG, ask_comm, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS)
            return;
        text[ANSWER_LEN - 1] = '\0';
        if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < size)
            snprintf(gave + (size_t)st.MPI_SOURCE * ANSWER_LEN, ANSWER_LEN, "%s", text[0] ? text : "?");
    }
}

int pt_comm_back(const char *what, double away_s, char *out, size_t n)
{
    out[0] = '\0';
    int me = -1, size = 0;
    if (ask_comm == MPI_COMM_NULL || stopped || n < 2 || MPI_Comm_rank(ask_comm, &me) != MPI_SUCCESS ||
        MPI_Comm_size(ask_comm, &size) != MPI_SUCCESS || size < 2)
        return 0;
    char *gave = calloc((size_t)size, ANSWER_LEN);
    if (!gave)
        return 0;
    take_gave_up(gave, size);
    size_t len = (size_t)snprintf(out, n, "; this rank itself did not run for %.3g s (stopped, or "
                                  "starved of the CPU)", away_s);
    int told = 0;
    for (int w = 0; w < size && len < n; w++)
        if (gave[(size_t)w * ANSWER_LEN] && told++ < 4)
            len += (size_t)snprintf(out + len, n - len, "; rank %d gave up waiting for %s meanwhile",
                                    w, gave + (size_t)w * ANSWER_LEN);
    free(gave);
    if (!told) {
        out[0] = '\0';
        return 0;
    }
    tell_gave_up(me, size, what);
    return 1;
}

int pt_comm_ask(pt_group *g, const char *what, int last_try, char *out, size_t n)
{
    out[0] = '\0';
    int me = -1, size = 0, gsize = 0;
    MPI_Comm mpi = g && !g->solo ? g->mpi : MPI_COMM_NULL;
    if (ask_comm == MPI_COMM_NULL || stopped || mpi == MPI_COMM_NULL || n < 2 ||
        MPI_Comm_rank(ask_comm, &me) != MPI_SUCCESS || MPI_Comm_size(ask_comm, &size) != MPI_SUCCESS ||
        MPI_Comm_size(mpi, &gsize) != MPI_SUCCESS || size < 2)
        return 0;
    if (!busy_seen && (busy_seen = calloc((size_t)size, sizeof *busy_seen)))
        for (int w = 0; w < size; w++)
            busy_seen[w] = -1e300;
    /* every rank is asked, not only g's: the one that stopped may be one
     * that g's members wait for in turn (a pipeline stage waiting for a
     * rank held up in another replica) */
    int *ranks = malloc((size_t)(gsize + 2 * size) * sizeof *ranks);
    MPI_Request *reqs = malloc((size_t)size * 2 * sizeof *reqs);
    char *said = calloc((size_t)size, ANSWER_LEN), *gave = calloc((size_t)size, ANSWER_LEN);
    if (!ranks || !reqs || !said || !gave) {
        free(ranks);
        free(reqs);
        free(said);
        free(gave);
        tell_gave_up(me, size, what);
        return 0;
    }
    /* state[w]: 0 not asked (this rank), 1 asked, 2 answered; in_g[w]: a member of g */
    int *state = ranks + gsize, *in_g = state + size;
    memset(in_g, 0, (size_t)size * sizeof *in_g);
    MPI_Group mine, all;
    MPI_Comm_group(mpi, &mine);
    MPI_Comm_group(ask_comm, &all);
    int *world = malloc((size_t)gsize * sizeof *world);
    if (world) {
        for (int i = 0; i < gsize; i++)
            ranks[i] = i;
        MPI_Group_translate_ranks(mine, gsize, ranks, all, world);
        for (int i = 0; i < gsize; i++)
            if (world[i] >= 0 && world[i] < size)
                in_g[world[i]] = 1;
        free(world);
    }
    MPI_Group_free(&mine);
    MPI_Group_free(&all);
    static int question = 1; /* its value says nothing: a question is its arrival */
    for (int w = 0; w < size; w++) {
        reqs[2 * w] = reqs[2 * w + 1] = MPI_REQUEST_NULL;
        state[w] = 0;
        if (w == me || MPI_Irecv(said + (size_t)w * ANSWER_LEN, ANSWER_LEN, MPI_CHAR, w, ANSWER_TAG,
                                 ask_comm, &reqs[2 * w + 1]) != MPI_SUCCESS)
            continue;
        if (MPI_Isend(&question, 1, MPI_INT, w, ASK_TAG, ask_comm, &reqs[2 * w]) != MPI_SUCCESS) {
            reqs[2 * w] = MPI_REQUEST_NULL; /* not asked: not named silent */
            continue;
        }
        state[w] = 1;
    }
    const double until = now_s() + ASK_S;
    for (int waiting = 1; waiting && now_s() < until;) {
        pt_comm_answer(what);
        waiting = 0;
        for (int w = 0; w < size; w++) {
            int done = 0;
            if (state[w] == 1 && MPI_Test(&reqs[2 * w + 1], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
                state[w] = 2;
            waiting |= state[w] == 1;
        }
        if (waiting)
            nanosleep(&(struct timespec){0, 200000}, NULL);
    }
    take_gave_up(gave, size);
    /* a rank that gave up waiting answers no more: not silent, gone too */
    int gone = 0;
    for (int w = 0; w < size; w++)
        if (state[w] == 1 && gave[(size_t)w * ANSWER_LEN]) {
            state[w] = 3;
            gone++;
        }
    /* busy: answered busy now, or within the grace after an answer busy
     * (a rank writing its checkpoint is silent in the writes' final sync);
     * excused: silent now, busy then */
    const double t = now_s(), grace = (g->timeout > 0 ? g->timeout : 0) + 2 * ASK_S;
    int busy = 0, excused = 0;
    for (int w = 0; w < size; w++) {
        if (state[w] == 2 && said[(size_t)w * ANSWER_LEN] == 'b') {
            busy++;
            if (busy_seen)
                busy_seen[w] = t;
        } else if (state[w] == 1 && busy_seen && t - busy_seen[w] <= grace) {
            excused++;
        }
    }
    /* the silent ones (asked, no answer), then what those that answered
     * wait for: g's members first */
    size_t len = 0;
    int silent = 0, named = 0, answered = 0, shown = 0;
    for (int w = 0; w < size; w++) {
        silent += state[w] == 1;
        answered += state[w] == 2;
    }
    const int going = (busy > 0 || excused > 0) && silent == excused && !gone;
    for (int w = 0; w < size && silent && len < n; w++) {
        if (state[w] != 1)
            continue;
        if (named == NAMED_MAX) {
            len += (size_t)snprintf(out + len, n - len, " and %d more", silent - named);
            break;
        }
        const char *sep = named ? ", " : silent == 1 ? "; rank " : "; ranks ";
        len += (size_t)snprintf(out + len, n - len, "%s%d", sep, w);
        named++;
    }
    if (silent && len < n)
        len += (size_t)snprintf(out + len, n - len, " %s in no wait (stopped, gone, busy in %s own work, "
                                "or behind a link too slow to answer within a second)",
                                silent == 1 ? "is" : "are", silent == 1 ? "its" : "their");
    for (int pass = 1; pass >= 0; pass--)
        for (int w = 0; w < size; w++) {
            if (state[w] != 2 || in_g[w] != pass || shown == 4 || len >= n)
                continue;
            char *text = said + (size_t)w * ANSWER_LEN;
            text[ANSWER_LEN - 1] = '\0';
            len += (size_t)snprintf(out + len, n - len, "; rank %d %s %s", w,
                                    text[0] == 'b' ? "is busy" : "waits for", text[0] ? text + 1 : text);
            shown++;
        }
    if (answered > shown && len < n)
        len += (size_t)snprintf(out + len, n - len, "; %d more rank%s wait%s", answered - shown,
                                answered - shown == 1 ? "" : "s", answered - shown == 1 ? "s" : "");
    /* no rank stopped, gone or busy: every one waits, so none failed */
    const int all_wait = size > 1 && answered == size - 1 && !silent && !gone && !busy;
    if (all_wait && len < n)
        len += (size_t)snprintf(out + len, n - len, "; every rank waits and none is stopped or "
                                "busy: run.timeout_s (%.3g s) is shorter than this wait takes, "
                                "or the ranks wait for each other", g->timeout);
    for (int w = 0, told = 0; w < size && len < n; w++)
        if (state[w] == 3 && told++ < 4)
            len += (size_t)snprintf(out + len, n - len, "; rank %d gave up waiting for %s", w,
                                    gave + (size_t)w * ANSWER_LEN);
    /* a receive still posted is cancelled; one that does not complete even
     * so keeps its buffer (a leak, on a rank that is about to stop) */
    int keep = 0;
    for (int w = 0; w < size; w++) {
        drop_request(&reqs[2 * w]);
        keep |= !cancel_request(&reqs[2 * w + 1]);
    }
    free(ranks);
    free(reqs);
    free(gave);
    if (!keep)
        free(said);
    if (all_wait && !last_try)
        return 2;
    if (!going)
        tell_gave_up(me, size, what);
    return going;
}

/* Posts one nonblocking transfer with peer: a send of buf (send), else a
 * receive into it. */
static int post(pt_group *g, int send, void *buf, size_t bytes, int peer, int tag, pt_req *r,
                pt_err *err)
{
    if (g->solo) /* the only rank there is: a transfer to itself */
        return pt_fail(err, PT_EINTERNAL, "a transfer to rank %d in a world of one", peer);
    if (stopped)
        return stopped_fail(err);
    mpi_bytes n;
    int rc = bytes_type(bytes, &n, err);
    if (rc)
        return rc;
    rc = send ? MPI_Isend(buf, n.count, n.type, peer, tag, g->mpi, req_of(r))
              : MPI_Irecv(buf, n.count, n.type, peer, tag, g->mpi, req_of(r));
    release_bytes(&n);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, send ? "MPI_Isend" : "MPI_Irecv");
    r->active = 1;
    return 0;
}

int pt_isend(pt_group *g, const void *buf, size_t bytes, int peer, int tag, pt_req *r, pt_err *err)
{
    return post(g, 1, (void *)buf, bytes, peer, tag, r, err); /* (MPI only reads it) */
}

int pt_irecv(pt_group *g, void *buf, size_t bytes, int peer, int tag, pt_req *r, pt_err *err)
{
    return post(g, 0, buf, bytes, peer, tag, r, err);
}

void pt_patience_start(pt_patience *p, pt_group *g, const char *what)
{
    const double t = now_s();
    *p = (pt_patience){g, what, g->timeout, t + g->timeout, t, 0, 0};
}

void pt_patience_moved(pt_patience *p) { p->deadline = now_s() + p->limit; }

int pt_patience_spent(pt_patience *p, char *others, size_t n)
{
    others[0] = '\0';
    if (++p->polls <= 200) /* a transfer about to complete: poll at once */
        return 0;
    const double t = now_s(), away = t - p->last;
    p->last = t;
    if (away > AWAY_S) {
        /* this rank itself did not run (stopped, as by SIGSTOP or a whole
         * job's suspension, or starved of the CPU): that time is nobody's
         * delay and does not count, unless another rank gave up meanwhile */
        if (pt_comm_back(p->what, away, others, n)) {
            pt_comm_stop();
            return 1;
        }
        p->deadline += away;
    }
    /* another rank moved on in a wait that spans its work */
    if (take_ticks() && ticks_count)
        p->deadline = t + p->limit;
    if (t > p->deadline) {
        const int said = pt_comm_ask(p->g, p->what, p->asked_all_wait, others, n);
        p->last = now_s(); /* the second the ask took is no time away */
        if (said == 1) { /* another rank is busy: wait on */
            p->deadline = now_s() + p->limit;
            return 0;
        }
        if (said == 2) {
            /* every other rank waits: one that came late into this very
             * wait answered so while this rank asked, and the wait may be
             * done now; polled once more for a while before giving up */
            p->asked_all_wait = 1;
            p->deadline = now_s() + (p->limit < ASK_S ? p->limit : ASK_S);
            return 0;
        }
        pt_comm_stop();
        return 1;
    }
    pt_comm_answer(p->what);
    nanosleep(&(struct timespec){0, 20000}, NULL);
    return 0;
}

int pt_wait(pt_group *g, pt_req *r, const char *what, pt_err *err)
{
    if (!r->active)
        return 0;
    if (stopped)
        return stopped_fail(err);
    pt_patience p;
    pt_patience_start(&p, g, what);
    char others[1024];
    for (;;) {
        int done = 0;
        MPI_Status st;
        int rc = MPI_Test(req_of(r), &done, &st);
        if (rc != MPI_SUCCESS) {
            r->active = 0;
            return mpi_fail(err, rc, what);
        }
        if (done) {
            r->active = 0;
            return 0;
        }
        if (pt_patience_spent(&p, others, sizeof others)) {
            const char *at = phase;
            return pt_fail(err, PT_EPEER,
                           "no progress for %.3g s waiting for %s%s%s ("
                           "run.timeout_s sets this limit)%s",
                           g->timeout, what, at ? " while " : "", at ? at : "", others);
        }
    }
}

int pt_req_test(pt_req *r, int *done, pt_err *err)
{
    *done = 1;
    if (!r->active)
        return 0;
    if (stopped)
        return stopped_fail(err);
    MPI_Status st;
    int flag = 0, rc = MPI_Test(req_of(r), &flag, &st);
    if (rc != MPI_SUCCESS) {
        r->active = 0;
        return mpi_fail(err, rc, "MPI_Test");
    }
    *done = flag;
    if (flag)
        r->active = 0;
    return 0;
}

int pt_req_cancel(pt_req *r)
{
    if (!r->active)
        return 0;
    r->active = 0;
    if (stopped) /* left posted: the job is aborted at close */
        return 1;
    MPI_Cancel(req_of(r));
    /* a cancelled request completes: at once when no message had matched
     * it, once its data has moved when one had; until then MPI may still
     * write into (or read) its buffer */
    const double deadline = now_s() + 0.2;
    for (;;) {
        int done = 0;
        MPI_Status st;
        if (MPI_Test(req_of(r), &done, &st) != MPI_SUCCESS)
            return 1;
        if (done)
            return 0;
        if (now_s() > deadline)
            break;
        nanosleep(&(struct timespec){0, 20000}, NULL);
    }
    MPI_Request_free(req_of(r));
    return 1;
}

/* ------------------------------------------------------------ collectives */

static MPI_Datatype mpi_type(pt_dtype t)
{
    return t == PT_DT_F32 ? MPI_FLOAT : t == PT_DT_F64 ? MPI_DOUBLE : MPI_INT64_T;
}

static size_t type_size(pt_dtype t) { return t == PT_DT_F32 ? 4 : 8; }

int pt_allreduce_sum(pt_group *g, void *buf, size_t count, pt_dtype t, pt_err *err)
{
    if (g->solo) /* the sum over one member */
        return 0;
    if (stopped)
        return stopped_fail(err);
    /* in chunks that fit MPI's int count */
    const size_t chunk = (size_t)1 << 28;
    for (size_t at = 0; at < count; at += chunk) {
        size_t n = count - at < chunk ? count - at : chunk;
        pt_req r = {0};
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + at * type_size(t), (int)n, mpi_type(t),
                                MPI_SUM, g->mpi, req_of(&r));
        if (rc != MPI_SUCCESS)
            return mpi_fail(err, rc, "MPI_Iallreduce");
        r.active = 1;
        if ((rc = pt_wait(g, &r, "an all-reduce", err)))
            return rc;
    }
    return 0;
}

int pt_allreduce_max_i64(pt_group *g, int64_t *v, pt_err *err)
{
    if (g->solo)
        return 0;
    if (stopped)
        return stopped_fail(err);
    pt_req r = {0};
    int rc = MPI_Iallreduce(MPI_IN_PLACE, v, 1, MPI_INT64_T, MPI_MAX, g->mpi, req_of(&r));
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "MPI_Iallreduce");
    r.active = 1;
    return pt_wait(g, &r, "an all-reduce", err);
}

int pt_group_agree(pt_group *g, int rc, pt_err *err)
{
    int64_t worst = rc;
    /* a rank that failed keeps its own message whatever the agreement meets
     * (a peer that stopped answering, or communication stopped after the
     * timeout that is its failure) */
    pt_err mine;
    int got = pt_allreduce_max_i64(g, &worst, rc ? &mine : err);
    if (got)
        return rc ? rc : got;
    if (rc == 0 && worst != 0) {
        pt_fail(err, (int)worst, "another rank failed (its message says why)");
        if (err)
            err->relayed = err->agreed = 1;
        return (int)worst;
    }
    if (rc && err) /* every rank knows: none is left waiting on this one */
        err->agreed = 1;
    return rc;
}

int pt_bcast(pt_group *g, void *buf, size_t bytes, int root, pt_err *err)
{
    if (g->solo)
        return 0;
    if (stopped)
        return stopped_fail(err);
    mpi_bytes n;
    int rc = bytes_type(bytes, &n, err);
    if (rc)
        return rc;
    pt_req r = {0};
    rc = MPI_Ibcast(buf, n.count, n.type, root, g->mpi, req_of(&r));
    release_bytes(&n);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "MPI_Ibcast");
    r.active = 1;
    return pt_wait(g, &r, "a broadcast", err);
}

int pt_allgather(pt_group *g, const void *mine, void *all, size_t bytes, pt_err *err)
{
    if (!g || g->solo) {
        if (all != mine)
            memmove(all, mine, bytes);
        return 0;
    }
    if (stopped)
        return stopped_fail(err);
    mpi_bytes n;
    int rc = bytes_type(bytes, &n, err);
    if (rc)
        return rc;
    pt_req r = {0};
    rc = MPI_Iallgather(mine, n.count, n.type, all, n.count, n.type, g->mpi, req_of(&r));
    release_bytes(&n);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "MPI_Iallgather");
    r.active = 1;
    return pt_wait(g, &r, "an all-gather", err);
}

int pt_barrier(pt_group *g, pt_err *err)
{
    if (g->solo)
        return 0;
    if (stopped)
        return stopped_fail(err);
    pt_req r = {0};
    int rc = MPI_Ibarrier(g->mpi, req_of(&r));
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "MPI_Ibarrier");
    r.active = 1;
    return pt_wait(g, &r, "a barrier", err);
}

/* ------------------------------------------------------------ link speed */

/* Round trips of `bytes` between world ranks a and b (a starts); seconds per
 * one-way message on a, 0 elsewhere. Ranks other than a and b do nothing. */
static int ping_pong(pt_comm *c, int a, int b, size_t bytes, int reps, char *buf, double *one_way,
                     pt_err *err)
{
    *one_way = 0;
    const int me = c->rank;
    if (me != a && me != b)
        return 0;
    const int peer = me == a ? b : a;
    double t0 = 0;
    for (int i = -1; i < reps; i++) { /* i = -1 warms up the connection */
        if (i == 0)
            t0 = now_s();
        pt_req r = {0};
        int rc;
        if (me == a) {
            if ((rc = pt_isend(&c->world, buf, bytes, peer, 77, &r, err)) ||
                (rc = pt_wait(&c->world, &r, "a link measurement", err)) ||
                (rc = pt_irecv(&c->world, buf, bytes, peer, 78, &r, err)) ||
                (rc = pt_wait(&c->world, &r, "a link measurement", err)))
                return rc;
        } else {
            if ((rc = pt_irecv(&c->world, buf, bytes, peer, 77, &r, err)) ||
                (rc = pt_wait(&c->world, &r, "a link measurement", err)) ||
                (rc = pt_isend(&c->world, buf, bytes, peer, 78, &r, err)) ||
                (rc = pt_wait(&c->world, &r, "a link measurement", err)))
                return rc;
        }
    }
    if (me == a)
        *one_way = (now_s() - t0) / (2.0 * reps);
    return 0;
}

double pt_link_bandwidth(double bytes, double t_small, double t_big)
{
    /* the big message's time less the latency the small ones showed; on a
     * loaded machine a few small messages can take longer than the big
     * ones, and then the big ones' own rate (a lower bound) is the figure:
     * never 0, which would say the link is not there */
    /* the latency taken off at most 90% of the big messages' time, so the
     * figure moves smoothly with the timings and is at most 10 times that
     * lower bound; and at most 1e15 bytes/s, what a profile may state
     * (checkpoint/profile.c reads back no more) */
    const double most = 1e15;
    if (!(t_big > 0))
        return most;
    const double lat = t_small > 0 ? (t_small < 0.9 * t_big ? t_small : 0.9 * t_big) : 0;
    const double bw = bytes / (t_big - lat);
    return bw < most ? bw : most;
}

int pt_comm_measure_links(pt_comm *c, double *bw_intra, double *bw_inter, double *latency, pt_err *err)
{
    enum { BIG = 4 << 20, SMALL = 8 };
    double v[3] = {0, 0, 0};
    char *buf = malloc(BIG);
    int rc = buf ? 0 : pt_fail(err, PT_ENOMEM, "out of memory measuring links");
    int local_peer = -1, remote_peer = -1;
    for (int r = 1; r < c->size; r++) {
        if (local_peer < 0 && c->node_of[r] == c->node_of[0])
            local_peer = r;
        if (remote_peer < 0 && c->node_of[r] != c->node_of[0])
            remote_peer = r;
    }
    if (buf)
        memset(buf, 0, BIG);
    /* a rank without its buffer says so before the ping-pongs: its peer
     * would otherwise wait out run.timeout_s for it in the first one */
    if ((rc = pt_group_agree(&c->world, rc, err))) {
        free(buf);
        return rc;
    }
    double t_small = 0, t_big = 0;
    /* the same sequence on every rank: measurements that do not involve it are no-ops */
    if (rc == 0 && local_peer > 0 &&
        (rc = ping_pong(c, 0, local_peer, SMALL, 20, buf, &t_small, err)) == 0 &&
        (rc = ping_pong(c, 0, local_peer, BIG, 3, buf, &t_big, err)) == 0 && c->rank == 0) {
        v[2] = t_small;
        v[0] = pt_link_bandwidth(BIG, t_small, t_big);
    }
    if (rc == 0 && remote_peer > 0 &&
        (rc = ping_pong(c, 0, remote_peer, SMALL, 20, buf, &t_small, err)) == 0 &&
        (rc = ping_pong(c, 0, remote_peer, BIG, 3, buf, &t_big, err)) == 0 && c->rank == 0) {
        v[2] = t_small > v[2] ? t_small : v[2];
        v[1] = pt_link_bandwidth(BIG, t_small, t_big);
    }
    free(buf);
    if (rc == 0)
        rc = pt_bcast(&c->world, v, sizeof v, 0, err);
    *bw_intra = v[0];
    *bw_inter = v[1];
    *latency = v[2];
    return rc;
}
