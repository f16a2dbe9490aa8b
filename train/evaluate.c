/*
 * evaluate.c: test-split evaluation and text sampling, through the pipeline
 * (forward only). With the cache on, the frozen prefix of a test example is
 * cached too, under id train count + index (train/prefix.c). Evaluation walks the test split in file order, each
 * replica a contiguous share of it, up to M micro-batches at a time, so its
 * result does not depend on shuffling or on the training layout beyond
 * floating-point summation order. The last stages hold the loss and logits;
 * the sums are shared over the world (idle ranks add zeros), so every rank
 * gets the result. Sampling runs on replica 0; each byte it draws goes to
 * every rank.
 */
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int evaluate(pt_run *r, int64_t limit, int keep, float *logits, float *hidden,
                    pt_eval_result *out, pt_err *err);

/* A round's waits span the other ranks' forwards (an idle rank's, a
 * replica's ahead of a slower one, every rank's but replica 0's when it
 * keeps the outputs): their progress counts (comm.h, pt_comm_tick). */
int pt_evaluate(pt_run *r, int64_t limit, int keep, float *logits, float *hidden,
                pt_eval_result *out, pt_err *err)
{
    pt_comm_ticks_count(1);
    const int rc = evaluate(r, limit, keep, logits, hidden, out, err);
    pt_comm_ticks_count(0);
    return rc;
}

static int evaluate(pt_run *r, int64_t limit, int keep, float *logits, float *hidden,
                    pt_eval_result *out, pt_err *err)
{
    const pt_dataset *ds = r->spec.test;
    const int64_t count = limit > 0 && limit < ds->count ? limit : ds->count;
    /* this replica's share; with outputs kept, replica 0 does it all */
    const int D = keep ? 1 : r->plan.replicas;
    const int part = keep ? (r->replica == 0 ? 0 : -1) : r->replica;
    const int64_t lo = part >= 0 ? count * part / D : 0, hi = part >= 0 ? count * (part + 1) / D : 0;
    const int64_t rows_per = pt_arch_rows_per_example(&r->arch);
    const int classes = pt_arch_out_classes(&r->arch);
    const int64_t per_hidden = (int64_t)pt_arch_tokens(&r->arch) * r->arch.dim;
    /* with outputs kept, one micro-batch per pass: the head keeps only the last one's */
    const int micro = keep ? 1 : r->micro;
    const int64_t chunk = (int64_t)micro * r->max_micro;
    *out = (pt_eval_result){0};
    const int by_class = pt_eval_by_class(&r->arch);
    const size_t cells = by_class ? (size_t)classes * classes : 0;
    /* the four sums, then the counts by class, in one reduction */
    int64_t *ids = malloc((size_t)chunk * sizeof *ids);
    double *v = malloc((4 + cells) * sizeof *v);
    pt_stats st = {0};
    if (by_class)
        st.confusion = calloc(cells, sizeof *st.confusion);
    /* every rank fails together: one that left now would leave the others
     * waiting in the pipeline and the reduction */
    int rc = ids && v && (st.confusion || !by_class)
                 ? 0
                 : pt_fail(err, PT_ENOMEM, "out of memory for evaluation (its counts by class: "
                           "%zu bytes)", cells * sizeof *st.confusion);
    if ((rc = pt_run_agree(r, rc, err))) {
        free(ids);
        free(v);
        free(st.confusion);
        return rc;
    }
    if (r->active)
        pt_segment_set_loss_scale(r->seg, 1.0 / ((double)count * (double)rows_per));
    r->evaluating = 1;
    r->eval_hits = 0;
    /* Every rank, idle ones and replicas with a shorter share (or none, with
     * outputs kept) included, agrees once per round of `chunk` examples of
     * the longest share: a rank waits for the others one round at a time,
     * never for a whole pass, which can outlast run.timeout_s on a large
     * test split (the wait is what that limit bounds). A rank that fails
     * in a round returns at once, its error not agreed: its pipeline
     * neighbours may be waiting for its transfers, so the caller reports it
     * and ends the job, as for a failed step. */
    const int64_t longest = keep ? count : (count + D - 1) / D;
    int64_t rounds = (longest + chunk - 1) / chunk;
    if ((rc = pt_allreduce_max_i64(pt_comm_world(r->comm), &rounds, err)))
        rounds = 0; /* every rank fails alike: the agreement below ends it */
    for (int64_t k = 0; k < rounds && rc == 0; k++) {
        const int64_t first = lo + k * chunk;
        if (!r->active || first >= hi) {
            rc = pt_run_agree(r, rc, err);
            continue;
        }
        int n = (int)(hi - first < chunk ? hi - first : chunk);
        for (int i = 0; i < n; i++)
            ids[i] = first + i;
        int m = pt_run_stage(r, ds, ids, n, micro, 0);
        /* (a failure before this stage's transfers: the stages after it
         * wait for them) */
        rc = pt_test_fault("eval", r->rank, r->step, err);
        if (rc == 0)
            rc = pt_stage_exec_forward(r->exec, r->batches, m, &st, err);
        if (rc == 0 && keep && logits && pt_run_last_stage(r)) {
            float *at = logits + (size_t)first * rows_per * classes;
            for (int64_t row = 0; rc == 0 && row < n * rows_per; row++)
                rc = pt_segment_logits(r->seg, 0, (int)row, at + (size_t)row * classes, err);
        }
        if (rc == 0 && keep && hidden && pt_run_last_stage(r))
            for (int i = 0; rc == 0 && i < n; i++)
                rc = pt_segment_head_input(r->seg, 0, i, hidden + (size_t)(first + i) * per_hidden, err);
        if (rc && r->ranks > 1)
            break;
        rc = pt_run_agree(r, rc, err);
    }
    if (rc && r->ranks > 1 && !err->agreed) { /* this rank's own failure (see above) */
        free(ids);
        free(v);
        free(st.confusion);
        r->evaluating = 0;
        return rc;
    }
    free(ids);
    r->evaluating = 0;
    v[0] = st.loss, v[1] = (double)st.correct, v[2] = (double)st.rows, v[3] = (double)r->eval_hits;
    for (size_t i = 0; i < cells; i++) /* counts, exact in a double */
        v[4 + i] = (double)st.confusion[i];
    if ((rc = pt_run_agree(r, rc, err)) == 0)
        rc = pt_allreduce_sum(pt_comm_world(r->comm), v, 4 + cells, PT_DT_F64, err);
    if (rc) {
        free(st.confusion);
        free(v);
        return rc;
    }
    out->loss = v[0];
    out->accuracy = v[2] > 0 ? v[1] / v[2] : 0.0;
    out->examples = count;
    out->rows = (int64_t)v[2];
    out->cache_hits = (int64_t)v[3];
    if (by_class) {
        for (size_t i = 0; i < cells; i++)
            st.confusion[i] = (int64_t)v[4 + i];
        out->classes = classes;
        out->confusion = st.confusion;
    }
    free(v);
    return 0;
}

int pt_eval_by_class(const pt_arch *a)
{
    return a->kind != PT_MODEL_GPT && pt_arch_out_classes(a) <= PT_EVAL_MAX_CLASSES;
}

void pt_eval_result_free(pt_eval_result *e)
{
    free(e->confusion);
    e->confusion = NULL;
    e->classes = 0;
}

pt_class_figures pt_eval_class(const pt_eval_result *e, int k)
{
    pt_class_figures f = {0};
    const int C = e->classes;
    if (!e->confusion || k < 0 || k >= C)
        return f;
    for (int j = 0; j < C; j++) {
        f.examples += e->confusion[(size_t)k * C + j];
        f.predicted += e->confusion[(size_t)j * C + k];
    }
    f.correct = e->confusion[(size_t)k * C + k];
    f.precision = f.predicted > 0 ? (double)f.correct / (double)f.predicted : 0.0;
    f.recall = f.examples > 0 ? (double)f.correct / (double)f.examples : 0.0;
    f.f1 = f.precision + f.recall > 0 ? 2 * f.precision * f.recall / (f.precision + f.recall) : 0.0;
    return f;
}

pt_eval_averages pt_eval_means(const pt_eval_result *e)
{
    pt_eval_averages a = {0};
    int64_t total = 0;
    for (int k = 0; k < e->classes; k++) {
        const pt_class_figures f = pt_eval_class(e, k);
        if (f.examples == 0 && f.predicted == 0)
            continue;
        a.precision += f.precision;
        a.recall += f.recall;
        a.f1 += f.f1;
        a.weighted_precision += f.precision * (double)f.examples;
        a.weighted_recall += f.recall * (double)f.examples;
        a.weighted_f1 += f.f1 * (double)f.examples;
        total += f.examples;
        a.classes++;
    }
    if (a.classes > 0) {
        a.precision /= a.classes;
        a.recall /= a.classes;
        a.f1 /= a.classes;
    }
    a.weighted_precision = total > 0 ? a.weighted_precision / (double)total : 0.0;
    a.weighted_recall = total > 0 ? a.weighted_recall / (double)total : 0.0;
    a.weighted_f1 = total > 0 ? a.weighted_f1 / (double)total : 0.0;
    return a;
}

/* Index drawn from softmax(logits / temperature) restricted to the top k. */
static int sample_index(float *logits, int n, double temperature, int top_k, pt_rng *rng)
{
    if (top_k > 0 && top_k < n) {
        /* threshold = k-th largest logit; ties at the threshold stay in */
        float *sorted = malloc((size_t)n * sizeof *sorted);
        if (sorted) {
            memcpy(sorted, logits, (size_t)n * sizeof *sorted);
            for (int i = 0; i < top_k; i++) /* partial selection sort: k is small */
                for (int j = i + 1; j < n; j++)
                    if (sorted[j] > sorted[i]) {
                        float t = sorted[i];
                        sorted[i] = sorted[j];
                        sorted[j] = t;
                    }
            float threshold = sorted[top_k - 1];
            for (int i = 0; i < n; i++)
                if (logits[i] < threshold)
                    logits[i] = -INFINITY;
            free(sorted);
        }
    }
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < n; i++)
        sum += exp((logits[i] - mx) / temperature);
    double u = pt_rng_uniform(rng) * sum;
    for (int i = 0; i < n; i++) {
        u -= exp((logits[i] - mx) / temperature);
        if (u <= 0)
            return i;
    }
    return n - 1;
}

int pt_sample_text(pt_run *r, const char *prompt, int length, double temperature, int top_k,
                   uint64_t seed, char *out, pt_err *err)
{
    const int T = r->arch.context, V = r->arch.vocab;
    float *logits = malloc((size_t)V * sizeof *logits);
    if (!logits)
        return pt_fail(err, PT_ENOMEM, "out of memory for sampling");
    /* The window holds the last T bytes of prompt + sample; causal attention
     * means the zeros after position len never affect the logits read at len-1. */
    int len = 0;
    size_t plen = strlen(prompt);
    const char *p = plen > (size_t)T - 1 ? prompt + plen - (T - 1) : prompt;
    memset(r->tokens, 0, (size_t)T * sizeof(int32_t));
    for (; *p; p++)
        r->tokens[len++] = (unsigned char)*p;
    pt_rng rng;
    pt_rng_seed(&rng, seed, 3ULL << 32);
    r->batches[0] = (pt_batch){1, NULL, r->tokens, NULL, NULL, 0};
    const int runs = r->active && r->replica == 0;
    const int drawer = pt_mesh_rank(&r->mesh, 0, r->plan.stages - 1);
    int rc = 0;
    for (int i = 0; i < length && rc == 0; i++) {
        /* replica 0's last stage draws the next byte and tells every rank */
        int64_t next = 0;
        if (runs)
            rc = pt_stage_exec_forward(r->exec, r->batches, 1, NULL, err);
        if (rc == 0 && runs && pt_run_last_stage(r) &&
            (rc = pt_segment_logits(r->seg, 0, len - 1, logits, err)) == 0) {
            /* a model that diverged: nothing to draw from (every draw would
             * be the last byte) */
            for (int k = 0; k < V && rc == 0; k++)
                if (!isfinite(logits[k]))
                    rc = pt_fail(err, PT_EINPUT, "sampling: the model's logit of byte %d is %s "
                                 "(its weights diverged); no sample is drawn", k,
                                 isnan(logits[k]) ? "NaN" : "Inf");
            if (rc == 0)
                next = sample_index(logits, V, temperature, top_k, &rng);
        }
        if ((rc = pt_run_agree(r, rc, err)) ||
            (rc = pt_bcast(pt_comm_world(r->comm), &next, sizeof next, drawer, err)))
            break;
        out[i] = (char)next;
        if (len == T) {
            memmove(r->tokens, r->tokens + 1, (size_t)(T - 1) * sizeof(int32_t));
            len--;
        }
        r->tokens[len++] = (int32_t)next;
    }
    out[rc ? 0 : length] = '\0';
    free(logits);
    return rc;
}
