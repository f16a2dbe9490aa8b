/*
 * evaluate.c: test-split evaluation and text sampling. Evaluation walks the
 * test split in file order in chunks of the micro-batch size, so its result
 * does not depend on shuffling or on the training batch layout.
 */
#include "launch/run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int pt_evaluate(pt_run *r, int64_t limit, float *logits, pt_eval_result *out, pt_err *err)
{
    const pt_dataset *ds = &r->test;
    int64_t count = limit > 0 && limit < ds->count ? limit : ds->count;
    int64_t *ids = malloc((size_t)r->max_micro * sizeof *ids);
    if (!ids)
        return pt_fail(err, PT_ENOMEM, "out of memory for evaluation");
    pt_segment_set_loss_scale(r->seg, 1.0 / ((double)count * (double)pt_arch_rows_per_example(&r->arch)));
    pt_stats st = {0};
    int rc = 0;
    for (int64_t first = 0; first < count && rc == 0; first += r->max_micro) {
        int n = (int)(count - first < r->max_micro ? count - first : r->max_micro);
        for (int i = 0; i < n; i++)
            ids[i] = first + i;
        pt_batch batch;
        pt_run_stage(r, ds, ids, n, 0, &batch);
        rc = pt_segment_forward(r->seg, 0, &batch, NULL, NULL, 0, &st, err);
        if (logits) {
            const int64_t rows = n * pt_arch_rows_per_example(&r->arch);
            const int classes = pt_arch_out_classes(&r->arch);
            float *at = logits + (size_t)first * pt_arch_rows_per_example(&r->arch) * classes;
            for (int64_t row = 0; rc == 0 && row < rows; row++)
                rc = pt_segment_logits(r->seg, 0, (int)row, at + (size_t)row * classes, err);
        }
    }
    free(ids);
    if (rc)
        return rc;
    out->loss = st.loss;
    out->accuracy = st.rows ? (double)st.correct / (double)st.rows : 0.0;
    out->examples = count;
    out->rows = st.rows;
    return 0;
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
    pt_batch batch = {1, NULL, r->tokens, NULL};
    int rc = 0;
    for (int i = 0; i < length && rc == 0; i++) {
        if ((rc = pt_segment_forward(r->seg, 0, &batch, NULL, NULL, 0, NULL, err)) ||
            (rc = pt_segment_logits(r->seg, 0, len - 1, logits, err)))
            break;
        int next = sample_index(logits, V, temperature, top_k, &rng);
        out[i] = (char)next;
        if (len == T) {
            memmove(r->tokens, r->tokens + 1, (size_t)(T - 1) * sizeof(int32_t));
            len--;
        }
        r->tokens[len++] = next;
    }
    out[rc ? 0 : length] = '\0';
    free(logits);
    return rc;
}
