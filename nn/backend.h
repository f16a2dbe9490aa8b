/*
 * backend.h (internal to nn/): the ops table every backend implements and the
 * units are written against. Units never touch memory directly: each step of
 * a layer is one call here, so a layer is written once for every backend.
 *
 * Buffers marked "act" hold activation elements (pt_backend_act_size bytes),
 * buffers marked "par" hold parameter, gradient or moment elements
 * (pt_backend_real_size bytes). Integer buffers (tokens, targets) are int32 in
 * backend memory. Shapes are row-major; n is examples, T tokens, d model
 * width.
 *
 * Accumulation: every op that produces a parameter gradient adds into it
 * (gradients accumulate over micro-batches). Activations and activation
 * gradients are overwritten; where a unit needs a residual sum, the op takes
 * the tensor to add (`add`, which may alias the output) so the sum costs no
 * extra pass over memory.
 */
#ifndef PT_NN_BACKEND_H
#define PT_NN_BACKEND_H

#include "nn/dropout.h"
#include "nn/nn.h"

typedef struct pt_adamw_args {
    double lr, beta1, beta2, eps;
    double weight_decay;  /* already 0 for parameters without decay */
    double bias_corr1;    /* 1 - beta1^step */
    double bias_corr2;    /* 1 - beta2^step */
    double grad_scale;
} pt_adamw_args;

/* One dropout site of one call (see nn/dropout.h): element e of example b is
 * kept when pt_dropout_bits(pt_dropout_row(key, ids[b]), e) >=
 * pt_dropout_threshold(p), and a kept element is scaled by 1 / (1 - p). */
typedef struct pt_dropout {
    double p;           /* probability of dropping, in [0, 1) */
    uint64_t key;       /* pt_dropout_key(seed, step, unit, site) */
    const int64_t *ids; /* [n] in backend memory: each example's id in its data set */
} pt_dropout;

typedef struct pt_ops {
    /* memory */
    void *(*alloc)(pt_backend *be, size_t bytes);
    void (*free)(pt_backend *be, void *p);
    void (*upload)(pt_backend *be, void *dst, const void *src, size_t bytes);   /* raw bytes */
    void (*download)(pt_backend *be, void *dst, const void *src, size_t bytes); /* raw bytes */
    void (*zero)(pt_backend *be, void *dst, size_t bytes);
    void (*copy)(pt_backend *be, void *dst, const void *src, size_t bytes);
    /* host float <-> par elements */
    void (*par_from_f32)(pt_backend *be, void *dst, const float *src, size_t n);
    void (*par_to_f32)(pt_backend *be, float *dst, const void *src, size_t n);
    /* host float <-> act elements */
    void (*act_from_f32)(pt_backend *be, void *dst, const float *src, size_t n);
    void (*act_to_f32)(pt_backend *be, float *dst, const void *src, size_t n);
    int (*sync)(pt_backend *be, pt_err *err);

    /* y[rows,out] = add + x[rows,in] . w[out,in]^T + b[out]; b and add may be NULL. */
    void (*linear_fwd)(pt_backend *be, void *y, const void *x, const void *w, const void *b,
                       int rows, int out, int in, const void *add);
    /* dx[rows,in] = dy . w;  dw[out,in] += dy^T . x;  db[out] += sum_rows dy.
     * dx, dw, db may each be NULL (not wanted). */
    void (*linear_bwd)(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                       const void *x, const void *w, int rows, int out, int in);
    /* y = (x - mean) * rstd * w + b per row of length dim, rstd = 1 / sqrt(var + eps)
     * (biased variance); saves mean, rstd [rows]. */
    void (*layernorm_fwd)(pt_backend *be, void *y, void *mean, void *rstd, const void *x,
                          const void *w, const void *b, int rows, int dim, double eps);
    /* dx = add + (gradient through the norm); dw, db += ...; dx and add may be NULL. */
    void (*layernorm_bwd)(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                          const void *x, const void *mean, const void *rstd, const void *w,
                          int rows, int dim, const void *add);
    /* y = x * Phi(x) (erf form) and, unless dydx is NULL, the derivative
     * dydx = Phi(x) + x phi(x), for the backward (the forward has both parts
     * at hand; the backward is then one product). dydx may alias x, so a
     * unit can keep the derivative where the input was; y may not.
     * gelu_bwd: dx = dy * dydx (the forward's dydx); dx may alias dy. */
    void (*gelu_fwd)(pt_backend *be, void *y, void *dydx, const void *x, size_t n);
    void (*gelu_bwd)(pt_backend *be, void *dx, const void *dy, const void *dydx, size_t n);
    /* Multi-head scaled dot-product attention.
     * qkv [n, T, 3, H, hd] (the output of one fused projection), out [n, T, H*hd],
     * probs: what forward keeps for backward, attention_saved_bytes long (the
     * CPU keeps the softmax probabilities [n, H, T, T]; the layout is the
     * backend's own).
     * lens: NULL, or int32 [n] in backend memory, 1 <= lens[b] <= T: example b's
     * queries see only its keys j < lens[b] (a padding mask; the positions from
     * lens[b] on are padding). Outputs of padded query rows are still written
     * (they attend to the real keys), and the gradients of padded keys and
     * values are 0.
     * drop: NULL, or dropout on the probabilities (BERT's attention dropout):
     * out = (P * mask / (1 - p)) V, the mask element of example b, head h,
     * query i, key j being e = (h T + i) T + j. probs still keeps what the
     * backend keeps without it; backward makes the same mask again from drop
     * (which must be the forward's).
     * Backward also gets the forward's out (the CUDA backend takes
     * rowsum(dout * out) from it rather than computing out again). */
    void (*attention_fwd)(pt_backend *be, void *out, void *probs, const void *qkv, int n,
                          int T, int H, int hd, int causal, const int32_t *lens,
                          const pt_dropout *drop);
    void (*attention_bwd)(pt_backend *be, void *dqkv, const void *dout, const void *qkv,
                          const void *probs, const void *out, int n, int T, int H, int hd,
                          int causal, const int32_t *lens, const pt_dropout *drop);
    /* Mean over each example's first lens[b] positions (lens: int32 [n] in
     * backend memory, 1 <= lens[b] <= T): y[b] = sum_{t < lens[b]} x[b, t] /
     * lens[b], summed in order of t; x [n, T, d], y [n, d]. Backward overwrites
     * dx [n, T, d]: dy[b] / lens[b] at t < lens[b], 0 at the padding. */
    void (*mean_pool_fwd)(pt_backend *be, void *y, const void *x, const int32_t *lens, int n,
                          int T, int d);
    void (*mean_pool_bwd)(pt_backend *be, void *dx, const void *dy, const int32_t *lens, int n,
                          int T, int d);
    /* Inverted dropout over n examples of `per` elements ([n, per] each):
     * y = add + x * mask / (1 - p) (add may be NULL: y = x * mask / (1 - p)),
     * the product rounded once into the sum (a fused multiply-add); a dropped
     * element gives add (or 0). y may alias x or add. Its own backward:
     * dx = dropout(dy) with add NULL and the forward's drop. */
    void (*dropout)(pt_backend *be, void *y, const void *x, const void *add, int n, size_t per,
                    const pt_dropout *drop);
    /* images [n, C, H, W] -> patches [n, (H/p)*(W/p), C*p*p] in (c, py, px) order. */
    void (*patchify)(pt_backend *be, void *patches, const void *images, int n, int C, int H,
                     int W, int p);
    /* ViT token assembly: x[b,0] = cls + pos[0]; x[b,1+i] = proj[b,i] + pos[1+i]. */
    void (*vit_assemble_fwd)(pt_backend *be, void *x, const void *proj, const void *cls,
                             const void *pos, int n, int T, int d);
    /* dproj[b,i] = dx[b,1+i]; dcls += sum_b dx[b,0]; dpos += sum_b dx[b,:]. */
    void (*vit_assemble_bwd)(pt_backend *be, void *dproj, void *dcls, void *dpos, const void *dx,
                             int n, int T, int d);
    /* x[b,t] = wte[tokens[b,t]] + wpe[t]. */
    void (*token_embed_fwd)(pt_backend *be, void *x, const int32_t *tokens, const void *wte,
                            const void *wpe, int n, int T, int d);
    /* dwte[tokens[b,t]] += dx[b,t]; dwpe[t] += sum_b dx[b,t]. */
    void (*token_embed_bwd)(pt_backend *be, void *dwte, void *dwpe, const void *dx,
                            const int32_t *tokens, int n, int T, int d);
    /* dst[r, :cols] (+)= src[r, :cols] for rows with given strides (elements). */
    void (*copy_rows)(pt_backend *be, void *dst, int dst_stride, const void *src, int src_stride,
                      int rows, int cols, int accumulate);
    /* Softmax cross-entropy per row of logits [rows, classes] against targets.
     * dlogits (may be NULL) = (softmax - onehot) * scale. Returns the sum of row
     * losses (unscaled), adds to *correct the rows whose argmax is the target. */
    double (*cross_entropy)(pt_backend *be, void *dlogits, const void *logits,
                            const int32_t *targets, int rows, int classes, double scale,
                            int64_t *correct);
    /* AdamW on n elements (see pt_adamw in nn.h). */
    void (*adamw)(pt_backend *be, void *p, const void *g, void *m, void *v, size_t n,
                  const pt_adamw_args *args);
    double (*sumsq)(pt_backend *be, const void *x, size_t n); /* par elements */
    void (*scale)(pt_backend *be, void *x, size_t n, double f); /* par elements */

    /* Optional (NULL: the default stated). */
    /* linear_bwd, with dx = (dy . w) * mul element by element (mul
     * [rows, in], not aliasing dx; each product rounded once): the backward
     * of a linear layer whose input was GELU's output, mul being the
     * forward's dydx, in the pass that writes dx. dx may not be NULL. The
     * same bits as linear_bwd and then gelu_bwd(dx, dx, mul), which is what
     * pt_linear_bwd_mul runs where this is NULL. */
    void (*linear_bwd_mul)(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                           const void *x, const void *w, int rows, int out, int in,
                           const void *mul);
    /* Attention of each example's first query (position 0) alone,
     * bidirectional, without mask or dropout: ViT's [CLS], all its last block
     * needs in training. NULL: the unit runs attention_fwd and _bwd over
     * every query. The query comes apart from the keys and values, since no
     * other position's query is needed (nor computed): q0 [n, H*hd] (row b:
     * example b's query at position 0), kv [n, T, 2, H, hd] (each position's
     * key, then its value). out0 [n, H*hd]: row b is position 0's output of
     * attention_fwd; probs0 [n, H, T] act elements: what backward needs.
     * Backward overwrites dq0 [n, H*hd] and dkv [n, T, 2, H, hd], for the
     * output gradient dout0 [n, H*hd] at position 0 (and 0 elsewhere). */
    void (*attention_first_fwd)(pt_backend *be, void *out0, void *probs0, const void *q0,
                                const void *kv, int n, int T, int H, int hd);
    void (*attention_first_bwd)(pt_backend *be, void *dq0, void *dkv, const void *dout0,
                                const void *q0, const void *kv, const void *probs0, int n, int T,
                                int H, int hd);
    /* Bytes attention keeps per micro-batch for backward; default
     * n * H * T * T act elements (the probabilities). A flash-style backend
     * keeps only each row's log-sum-exp. */
    size_t (*attention_saved_bytes)(const pt_backend *be, int n, int T, int H);
    /* Bytes attention_fwd or attention_bwd allocate for themselves while
     * they run (freed before they return), with or without dropout on the
     * probabilities: memory the planner counts beside a unit's scratch.
     * NULL: none. */
    size_t (*attention_work_bytes)(const pt_backend *be, int n, int T, int H, int hd, int dropout);
    /* Working memory that linear_fwd and linear_bwd(_mul) keep on the
     * calling thread between calls, for weights of out x in over `rows`
     * rows: *pack (the packed weights, forward's or backward's, the larger)
     * and *parts (a weight gradient's partial sums). Each is kept at the
     * largest any call has needed, so a device holds the largest *pack and
     * the largest *parts over its layers. NULL: none. */
    void (*linear_work_bytes)(const pt_backend *be, int rows, int out, int in, size_t *pack,
                              size_t *parts);
    /* Lets go of what linear_work_bytes counts, on the calling thread. NULL:
     * nothing kept. */
    void (*release_work)(pt_backend *be);
    /* The device's stream (a cudaStream_t) and index, and how many devices
     * the process sees: for a communication library that queues on the same
     * stream. NULL: not a device backend. */
    void *(*device_stream)(pt_backend *be, int *device, int *devices);
    /* The device's identity and the memory a run plans under (nn.h
     * pt_device_info). NULL: not a device backend. */
    void (*device_info)(const pt_backend *be, pt_device_info *out);
    /* Releases the backend's own state (handles, streams, arenas). */
    void (*close)(pt_backend *be);
    /* The first error any op met since the backend opened (ops return nothing;
     * an asynchronous device records errors and reports them here), without
     * waiting for queued work. Default: never an error. */
    int (*status)(pt_backend *be, pt_err *err);
} pt_ops;

struct pt_backend {
    const pt_ops *ops;
    const char *name;
    size_t real_size; /* par element bytes */
    size_t act_size;  /* act element bytes */
    int threads;
    void *impl;       /* backend-private state */
};

extern const pt_ops pt_cpu_ops_f32;
extern const pt_ops pt_cpu_ops_f64; /* in pt_nn_oracle only (nn/cpu64.c) */

/* A CPU backend over ops with real_size-byte elements and its thread pool
 * (threads: 0 = one per CPU the process may run on); thread_init, if not
 * NULL, runs first on each of the pool's threads. */
int pt_cpu_backend_open(pt_backend **out, const char *name, const pt_ops *ops, size_t real_size,
                        int threads, void (*thread_init)(void), pt_err *err);

/* linear_bwd_mul where the backend has it, else linear_bwd and gelu_bwd */
static inline void pt_linear_bwd_mul(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                                     const void *x, const void *w, int rows, int out, int in,
                                     const void *mul)
{
    if (be->ops->linear_bwd_mul) {
        be->ops->linear_bwd_mul(be, dx, dw, db, dy, x, w, rows, out, in, mul);
        return;
    }
    be->ops->linear_bwd(be, dx, dw, db, dy, x, w, rows, out, in);
    be->ops->gelu_bwd(be, dx, dx, mul, (size_t)rows * in);
}

#endif
