/*
 * moves.c: the difference between two layouts as a list of unit transfers.
 * Pure: it reads the two meshes and partitions and nothing else, so every
 * rank computes the same list and tests need no MPI.
 *
 * For each rank of the new layout and each unit its stage holds: if the rank
 * held the unit before, it keeps its copy (parameters are the same on every
 * replica, and so are moments: all replicas apply the same all-reduced
 * gradients). Otherwise one rank that held it sends it: on the same node
 * when possible (no network), the least used so far among those (spreading
 * the sends), the lowest world rank on a tie.
 */
#include "dp/dp.h"

#include <stdlib.h>
#include <string.h>

/* The stage of layout l that holds unit u. */
static int stage_of_unit(const pt_dp_layout *l, int u)
{
    int s = 0;
    while (s + 1 < l->mesh->stages && u >= l->bounds[s + 1])
        s++;
    return s;
}

static int held_by(const pt_dp_layout *l, int u, int rank)
{
    const int s = l->mesh->stage_of[rank];
    return s >= 0 && u >= l->bounds[s] && u < l->bounds[s + 1];
}

void pt_dp_moves_free(pt_dp_moves *m)
{
    free(m->move);
    memset(m, 0, sizeof *m);
}

int pt_dp_plan_moves(pt_dp_moves *out, const pt_dp_layout *from, const pt_dp_layout *to,
                     const int *node_of, pt_err *err)
{
    memset(out, 0, sizeof *out);
    const pt_mesh *a = from->mesh, *b = to->mesh;
    const int units = to->bounds[b->stages], ranks = b->ranks;
    if (from->bounds[a->stages] != units || a->ranks != ranks || to->frozen_units < from->frozen_units)
        return pt_fail(err, PT_EINTERNAL, "layouts of different models or worlds, or unfreezing");
    size_t cap = (size_t)b->replicas * units * 3;
    out->move = malloc((cap ? cap : 1) * sizeof *out->move);
    int *sends = calloc((size_t)ranks, sizeof *sends);
    if (!out->move || !sends) {
        free(sends);
        pt_dp_moves_free(out);
        return pt_fail(err, PT_ENOMEM, "out of memory planning a layout change");
    }
    for (int rep = 0; rep < b->replicas; rep++)
        for (int s = 0; s < b->stages; s++) {
            const int dst = pt_mesh_rank(b, rep, s);
            for (int u = to->bounds[s]; u < to->bounds[s + 1]; u++) {
                int src = -1;
                if (held_by(from, u, dst)) {
                    src = dst;
                } else {
                    const int old_stage = stage_of_unit(from, u);
                    int best_local = 0;
                    for (int r2 = 0; r2 < a->replicas; r2++) {
                        const int c = pt_mesh_rank(a, r2, old_stage);
                        const int local = node_of[c] == node_of[dst];
                        if (src < 0 || local > best_local ||
                            (local == best_local &&
                             (sends[c] < sends[src] || (sends[c] == sends[src] && c < src)))) {
                            src = c;
                            best_local = local;
                        }
                    }
                    sends[src]++;
                }
                const int parts = u >= to->frozen_units ? 3 : 1;
                static const int part_of[3] = {PT_PART_PARAM, PT_PART_M, PT_PART_V};
                for (int k = 0; k < parts; k++)
                    out->move[out->count++] = (pt_dp_move){u, part_of[k], src, dst};
            }
        }
    free(sends);
    return 0;
}
