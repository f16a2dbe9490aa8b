/*
 * mesh.c: the process mesh of a layout: which world rank is stage s of
 * replica r when K-stage pipelines are laid over the world's nodes, and the
 * groups that follow from it.
 *
 * Placement: a pipeline never crosses a node (stage-to-stage traffic is the
 * heaviest); each node holds floor(ranks on it / K) pipelines, on its ranks
 * in world-rank order, consecutive ranks per pipeline; replicas are numbered
 * node by node, so replica groups span nodes only once a node is full. Ranks
 * left over on a node are idle. The placement is a pure function of (world
 * size, node of every rank, K, D): every rank computes the same mesh without
 * talking, and a re-plan is a new call.
 */
#include "comm/comm_group.h"

#include <stdlib.h>
#include <string.h>

/* The world ranks of node n in rank order into out; returns how many. */
static int node_ranks(int ranks, const int *node_of, int n, int *out)
{
    int k = 0;
    for (int r = 0; r < ranks; r++)
        if (node_of[r] == n)
            out[k++] = r;
    return k;
}

static int node_count(int ranks, const int *node_of)
{
    int nodes = 0;
    for (int r = 0; r < ranks; r++)
        nodes = node_of[r] + 1 > nodes ? node_of[r] + 1 : nodes;
    return nodes;
}

int pt_mesh_capacity(int ranks, const int *node_of, int stages)
{
    if (stages < 1)
        return 0;
    int *count = calloc((size_t)node_count(ranks, node_of) + 1, sizeof *count);
    if (!count)
        return 0;
    for (int r = 0; r < ranks; r++)
        count[node_of[r]]++;
    int d = 0;
    for (int n = 0; n < node_count(ranks, node_of); n++)
        d += count[n] / stages;
    free(count);
    return d;
}

void pt_mesh_free(pt_mesh *m)
{
    free(m->rank_of);
    free(m->replica_of);
    free(m->stage_of);
    memset(m, 0, sizeof *m);
}

int pt_mesh_build(pt_mesh *m, int ranks, const int *node_of, int stages, int replicas, pt_err *err)
{
    memset(m, 0, sizeof *m);
    const int cap = pt_mesh_capacity(ranks, node_of, stages);
    if (stages < 1 || replicas < 1 || replicas > cap)
        return pt_fail(err, PT_EINPUT, "%d replicas of a %d-stage pipeline do not fit on %d ranks "
                       "(at most %d: a pipeline never crosses a node)", replicas, stages, ranks, cap);
    m->stages = stages;
    m->replicas = replicas;
    m->ranks = ranks;
    m->rank_of = malloc((size_t)stages * replicas * sizeof *m->rank_of);
    m->replica_of = malloc((size_t)ranks * sizeof *m->replica_of);
    m->stage_of = malloc((size_t)ranks * sizeof *m->stage_of);
    int *on_node = malloc((size_t)ranks * sizeof *on_node);
    if (!m->rank_of || !m->replica_of || !m->stage_of || !on_node) {
        free(on_node);
        pt_mesh_free(m);
        return pt_fail(err, PT_ENOMEM, "out of memory building the process mesh");
    }
    for (int r = 0; r < ranks; r++)
        m->replica_of[r] = m->stage_of[r] = -1;
    int rep = 0;
    const int nodes = node_count(ranks, node_of);
    for (int n = 0; n < nodes && rep < replicas; n++) {
        int k = node_ranks(ranks, node_of, n, on_node);
        for (int p = 0; p + stages <= k && rep < replicas; p += stages, rep++)
            for (int s = 0; s < stages; s++) {
                const int w = on_node[p + s];
                m->rank_of[rep * stages + s] = w;
                m->replica_of[w] = rep;
                m->stage_of[w] = s;
            }
    }
    free(on_node);
    return 0;
}

int pt_mesh_rank(const pt_mesh *m, int replica, int stage)
{
    return m->rank_of[replica * m->stages + stage];
}

/* ------------------------------------------------------------------ groups */

void pt_mesh_groups_free(pt_mesh_groups *g)
{
    pt_group_free(g->pipe);
    pt_group_free(g->replicas);
    pt_group_free(g->active);
    memset(g, 0, sizeof *g);
}

int pt_mesh_groups_build(pt_mesh_groups *g, pt_comm *c, const pt_mesh *m, double timeout, pt_err *err)
{
    memset(g, 0, sizeof *g);
    const int me = pt_comm_rank(c), rep = m->replica_of[me], st = m->stage_of[me];
    /* three collective splits over the world, in the same order on every rank */
    int rc = pt_group_split(c, rep >= 0 ? 0 : -1, rep * m->stages + st, &g->active, err);
    if (rc == 0)
        rc = pt_group_split(c, rep, st, &g->pipe, err);
    if (rc == 0)
        rc = pt_group_split(c, st, rep, &g->replicas, err);
    if (rc) {
        pt_mesh_groups_free(g);
        return rc;
    }
    pt_group *all[3] = {g->active, g->pipe, g->replicas};
    for (int i = 0; i < 3; i++)
        if (all[i])
            pt_group_set_timeout(all[i], timeout);
    return 0;
}
