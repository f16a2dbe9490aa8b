/* mn_check: are the ranks of this MPI job really on separate hosts?
 *
 *   mn_check [--nodes N] [--env VAR=VALUE] [--remote-unset VAR] [--bw MIB] [--hold S]
 *
 * Every rank reports its hostname, MPI_Get_processor_name, its node (from
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)) and whether a POSIX shared-memory
 * object that rank 0 created is visible to it. Rank 0 prints one line per
 * rank and checks:
 *   - there are N nodes (--nodes);
 *   - each rank's processor name is its hostname, and two ranks share a node
 *     exactly when they share a hostname;
 *   - the object is visible on rank 0's node and absent everywhere else;
 *   - an all-reduce of a 512 KiB vector over all ranks is exact;
 *   - VAR=VALUE on every rank (--env: a variable forwarded with mpirun -x);
 *   - VAR unset on every rank off rank 0's node (--remote-unset: a variable
 *     mpirun was not told to forward must not arrive there).
 * --bw MIB: then a ping-pong of MIB-MiB messages between rank 0 and the first
 * rank on another node, printed as "bw: ... MB/s".
 * --hold S: then print "hold: all ranks ready" and sleep (idle, no MPI calls)
 * up to S seconds, so that a test can kill a rank; exit 3 if nobody did.
 * Exit status: 0 all checks passed, 1 a check failed, 2 usage or setup. */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { HOST_LEN = 64, SHM_LEN = 64, VEC_LEN = 1 << 16 };

typedef struct {
    char host[HOST_LEN];
    char proc[MPI_MAX_PROCESSOR_NAME];
    int node, nodes, local, locals;
    int shm;     /* 1 visible (rank 0's content), 0 absent, -1 something else */
    int sum_ok;  /* this rank's all-reduce result is exact */
    int env_ok;  /* --env holds here */
    int unset;   /* --remote-unset's variable is absent here */
} report;

static void usage_exit(int rank, const char *why) {
    if (rank == 0) {
        fprintf(stderr, "mn_check: %s\nusage: mn_check [--nodes N] [--env VAR=VALUE] "
                        "[--remote-unset VAR] [--bw MIB] [--hold SECONDS]\n", why);
    }
    MPI_Finalize();
    exit(2);
}

static void setup_fail(const char *what) {
    fprintf(stderr, "mn_check: %s: %s\n", what, strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* 1: the object exists and holds `name` (what rank 0 wrote), 0: it does not
 * exist, -1: anything else. */
static int shm_probe(const char *name) {
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    char buf[SHM_LEN] = {0};
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    return got > 0 && strcmp(buf, name) == 0 ? 1 : -1;
}

static void ping_pong(int rank, int peer, int mib, const char *peer_host) {
    size_t bytes = (size_t)mib << 20;
    char *buf = malloc(bytes);
    if (!buf) setup_fail("malloc");
    memset(buf, rank, bytes);
    const int rounds = 4;
    double t0 = 0;
    for (int r = -1; r < rounds; r++) { /* round -1 warms up */
        if (r == 0) t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == peer) {
            MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) {
        double s = MPI_Wtime() - t0;
        printf("bw: rank 0 <-> rank %d (%s), %d x 2 messages of %d MiB in %.3f s: %.1f MB/s\n",
               peer, peer_host, rounds, mib, s, 2.0 * rounds * (double)bytes / s / 1e6);
    }
    free(buf);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int want_nodes = 0, bw_mib = 0, hold_s = 0;
    const char *env_arg = NULL, *unset_var = NULL;
    for (int a = 1; a < argc; a++) {
        const char *val = a + 1 < argc ? argv[a + 1] : NULL;
        if (!val) usage_exit(rank, "an option without its value");
        if (strcmp(argv[a], "--nodes") == 0) want_nodes = atoi(val);
        else if (strcmp(argv[a], "--bw") == 0) bw_mib = atoi(val);
        else if (strcmp(argv[a], "--hold") == 0) hold_s = atoi(val);
        else if (strcmp(argv[a], "--env") == 0) env_arg = val;
        else if (strcmp(argv[a], "--remote-unset") == 0) unset_var = val;
        else usage_exit(rank, "unknown option");
        a++;
    }
    if (bw_mib < 0 || bw_mib > 1024 || hold_s < 0 || (env_arg && !strchr(env_arg, '=')))
        usage_exit(rank, "bad option value");

    report me;
    memset(&me, 0, sizeof me);
    if (gethostname(me.host, sizeof me.host - 1) != 0) setup_fail("gethostname");
    int len = 0;
    MPI_Get_processor_name(me.proc, &len);

    /* the node: its index among nodes, numbered by their lowest world rank */
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &me.local);
    MPI_Comm_size(node, &me.locals);
    int leader = me.local == 0, node_index = 0;
    MPI_Exscan(&leader, &node_index, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) node_index = 0; /* MPI_Exscan leaves rank 0's result undefined */
    MPI_Bcast(&node_index, 1, MPI_INT, 0, node);
    me.node = node_index;
    MPI_Allreduce(&leader, &me.nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

    /* shared memory: rank 0 makes an object holding its own name */
    char shm_name[SHM_LEN] = {0};
    if (rank == 0) {
        snprintf(shm_name, sizeof shm_name, "/mn_check.%ld.%ld", (long)getpid(), (long)time(NULL));
        int fd = shm_open(shm_name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0) setup_fail("shm_open");
        if (write(fd, shm_name, strlen(shm_name) + 1) != (ssize_t)(strlen(shm_name) + 1))
            setup_fail("write to the shm object");
        close(fd);
    }
    MPI_Bcast(shm_name, sizeof shm_name, MPI_CHAR, 0, MPI_COMM_WORLD);
    me.shm = shm_probe(shm_name);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) shm_unlink(shm_name);

    /* an all-reduce big enough to cross hosts in several TCP fragments;
     * every term is a small integer, so the sum is exact */
    double *vec = malloc(VEC_LEN * sizeof *vec), *sum = malloc(VEC_LEN * sizeof *sum);
    if (!vec || !sum) setup_fail("malloc");
    for (int k = 0; k < VEC_LEN; k++) vec[k] = rank + (double)k;
    MPI_Allreduce(vec, sum, VEC_LEN, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    me.sum_ok = 1;
    for (int k = 0; k < VEC_LEN; k++) {
        if (sum[k] != (double)size * (size - 1) / 2 + (double)size * k) me.sum_ok = 0;
    }
    free(vec);
    free(sum);

    me.env_ok = 1;
    if (env_arg) {
        const char *eq = strchr(env_arg, '=');
        char var[128];
        snprintf(var, sizeof var, "%.*s", (int)(eq - env_arg), env_arg);
        const char *have = getenv(var);
        me.env_ok = have && strcmp(have, eq + 1) == 0;
    }
    me.unset = !unset_var || !getenv(unset_var);

    report *all = rank == 0 ? malloc(size * sizeof *all) : NULL;
    if (rank == 0 && !all) setup_fail("malloc");
    MPI_Gather(&me, sizeof me, MPI_BYTE, all, sizeof me, MPI_BYTE, 0, MPI_COMM_WORLD);

    int fails = 0, peer = -1;
    if (rank == 0) {
        static const char *shm_word[] = {"other", "absent", "visible"};
        for (int r = 0; r < size; r++) {
            const report *p = &all[r];
            printf("rank %d/%d host=%s processor_name=%s node=%d/%d local=%d/%d shm_from_rank0=%s\n", r,
                   size, p->host, p->proc, p->node, p->nodes, p->local, p->locals, shm_word[p->shm + 1]);
        }
#define FAIL(...) (fails++, printf("FAIL: " __VA_ARGS__), putchar('\n'))
        if (want_nodes && all[0].nodes != want_nodes) FAIL("%d nodes, want %d", all[0].nodes, want_nodes);
        for (int r = 0; r < size; r++) {
            const report *p = &all[r];
            if (peer < 0 && p->node != 0) peer = r;
            if (strcmp(p->host, p->proc) != 0) FAIL("rank %d: processor name is not the hostname", r);
            for (int s = r + 1; s < size; s++) {
                int same_node = p->node == all[s].node, same_host = strcmp(p->host, all[s].host) == 0;
                if (same_node != same_host)
                    FAIL("ranks %d and %d: %s node but %s hostname", r, s, same_node ? "same" : "different",
                         same_host ? "same" : "different");
            }
            if (p->shm != (p->node == 0))
                FAIL("rank %d on node %d: rank 0's shm object is %s", r, p->node, shm_word[p->shm + 1]);
            if (!p->sum_ok) FAIL("rank %d: wrong all-reduce result", r);
            if (!p->env_ok) FAIL("rank %d: %s is not set (mpirun -x did not forward it)", r, env_arg);
            if (!p->unset && p->node != 0)
                FAIL("rank %d on another host than rank 0 has %s, which was not forwarded", r, unset_var);
        }
        if (fails) printf("mn_check: %d checks FAILED\n", fails);
        else printf("mn_check: all checks passed (%d ranks on %d nodes)\n", size, all[0].nodes);
        fflush(stdout);
        free(all);
    }
    MPI_Bcast(&fails, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(&peer, 1, MPI_INT, 0, MPI_COMM_WORLD);

    if (!fails && bw_mib > 0) {
        if (peer < 0) {
            if (rank == 0) printf("bw: no rank on another node\n");
        } else {
            char peer_host[HOST_LEN];
            memcpy(peer_host, me.host, sizeof peer_host);
            MPI_Bcast(peer_host, sizeof peer_host, MPI_CHAR, peer, MPI_COMM_WORLD);
            ping_pong(rank, peer, bw_mib, peer_host);
        }
        fflush(stdout);
        MPI_Barrier(MPI_COMM_WORLD);
    }

    if (!fails && hold_s > 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) printf("hold: all ranks ready\n");
        fflush(stdout);
        struct timespec tenth = {0, 100000000L};
        for (int t = 0; t < hold_s * 10; t++) nanosleep(&tenth, NULL);
        if (rank == 0) printf("hold: nobody was killed in %d s\n", hold_s);
        MPI_Finalize();
        return 3;
    }
    MPI_Comm_free(&node);
    MPI_Finalize();
    return fails ? 1 : 0;
}
