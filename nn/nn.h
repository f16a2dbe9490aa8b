/*
 * nn.h: the public interface of the nn module: errors, the RNG, model
 * architectures and their units, backends, segments (a contiguous run of units
 * with its memory), the optimizer and learning-rate schedules.
 *
 * Everything here is about one process and one device. Nothing in nn/ knows
 * about ranks: a pipeline stage is just a segment covering some units, a frozen
 * prefix is just a count of leading units that get no backward.
 *
 * Conventions kept throughout:
 *  - functions that can fail return 0 on success or a PT_E* code, and fill the
 *    caller's pt_err with a message that names the problem;
 *  - shapes are written [rows, cols] and stored row-major; linear weights are
 *    [out, in] as in PyTorch's nn.Linear;
 *  - "backend memory" is memory owned by a backend (host memory for the CPU
 *    backends, device memory for CUDA); host-side data is passed as float or
 *    int32 and the backend copies it in.
 */
#ifndef PT_NN_H
#define PT_NN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ errors */

enum pt_code {
    PT_OK = 0,
    PT_EINPUT = 1,    /* bad user input: config, command line, dataset, checkpoint */
    PT_ESYS = 2,      /* the operating system refused: open, write, mmap, ... */
    PT_ENOMEM = 3,    /* an allocation failed */
    PT_EBACKEND = 4,  /* the compute backend, or the device under it, failed */
    PT_EINTERNAL = 5, /* a broken invariant: a bug in pipetrain */
    PT_EPEER = 6,     /* another rank failed or stopped answering */
    PT_ESTOPPED = 7,  /* stopped on request (a signal), state saved */
    PT_ENODEV = 8     /* pt_backend_open only: no device of the kind asked for here (no
                         GPU, or a build without CUDA), as against one that is here and
                         fails (PT_EBACKEND); the caller decides what it means (a setting
                         to change, or the CPU instead) and returns one of the above */
};

typedef struct pt_err {
    int code;
    int relayed; /* 1: the failure happened elsewhere and is reported there;
                    msg only relays that it happened */
    int agreed;  /* 1: every rank learned of this failure in an agreement after
                    it (pt_group_agree), so no rank waits on this one and the
                    job may end without an abort; pt_fail clears it */
    char msg[4096]; /* room for two paths of PT_PATH_MAX and what is wrong */
    int sys_errno; /* PT_ESYS: errno as pt_fail was called (0 otherwise) */
} pt_err;

/* Formats msg into err (if err is non-NULL) and returns code. */
int pt_fail(pt_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes err->msg with "context: " (keeps the code). Returns err->code. */
int pt_err_prefix(pt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A note of what the code is doing, for a signal handler that may read it
 * at any moment (the line a rank prints when a stop signal comes): written
 * into whichever of its two buffers was not written last, then published,
 * by a release store of its address into a slot the handler reads. So the
 * string a handler finds is never the one being written, as long as the
 * slot holds only the note's latest string (or another that outlives it:
 * pt_note_publish), and it is whole. A
 * zeroed note is ready; the last byte of each buffer is never written and
 * stays 0. */
typedef struct {
    char buf[2][256];
    int next;
} pt_note;

/* Formats into n's other buffer and, when slot is not NULL, publishes it
 * there; returns the new string. */
const char *pt_note_printf(pt_note *n, const char *volatile *slot, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *pt_note_vprintf(pt_note *n, const char *volatile *slot, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Publishes s, which must outlive every reader of the slot (a string
 * literal, or another note's), into *slot when slot is not NULL. */
void pt_note_publish(const char *volatile *slot, const char *s);

/* Whether *slot is one of n's strings: its owner replaces it (with
 * pt_note_publish) before n's memory is freed. */
int pt_note_is_published(const pt_note *n, const char *volatile *slot);

/* Opens a file the user named (config, data, vocabulary, weights,
 * checkpoint) for reading: its descriptor, or -1 with err set. What is not
 * a regular file (through links) is bad input, PT_EINPUT "'PATH' is not a
 * regular file (a FIFO)": a FIFO, a device such as /dev/zero, a socket or a
 * directory would block or never end. With streams_ok, a FIFO or a
 * character device is taken too, for a caller that bounds what it reads
 * (a config from `<(...)` or /dev/stdin); a FIFO with no writer then reads
 * as empty instead of blocking the open. The type is checked before the
 * open (no device is opened that is refused) and again on the descriptor.
 * PT_ESYS when it cannot be opened. */
int pt_open_input(const char *path, int streams_ok, pt_err *err);

/* A file the user named that cannot be opened or read is bad input too:
 * PT_ESYS becomes PT_EINPUT (in err as well), unless the system ran out of
 * descriptors or memory (EMFILE, ENFILE, ENOMEM: the same input would do
 * elsewhere); other codes pass. */
int pt_err_input(int rc, pt_err *err);

/* What a file of this st_mode is, for messages: "a regular file", "a
 * directory", "a FIFO", "a character device", ... */
const char *pt_file_kind(unsigned mode);

/* v as the shortest text that reads back as the same double (0.1, not
 * 0.10000000000000001; 0.999999999, not %g's 1), without an exponent for
 * whole numbers below 1e16 (600, not 6e+02), for messages and configs. */
void pt_number_text(double v, char *out, size_t n);

/* --------------------------------------------------------------------- rng */

/* xoshiro256** seeded through splitmix64 from (seed, stream). Streams make
 * independent sequences for independent purposes (a unit's init, an epoch's
 * permutation), so no result depends on the order things are created in. */
typedef struct pt_rng {
    uint64_t s[4];
} pt_rng;

void pt_rng_seed(pt_rng *rng, uint64_t seed, uint64_t stream);
uint64_t pt_rng_next(pt_rng *rng);
double pt_rng_uniform(pt_rng *rng);             /* [0, 1) with 53 random bits */
double pt_rng_normal(pt_rng *rng);              /* N(0, 1), Box-Muller */
uint64_t pt_rng_below(pt_rng *rng, uint64_t n); /* uniform in [0, n), unbiased; n > 0 */

/* ------------------------------------------------------------ architecture */

typedef enum { PT_MODEL_VIT = 0, PT_MODEL_GPT = 1, PT_MODEL_BERT = 2 } pt_model_kind;

typedef struct pt_arch {
    pt_model_kind kind;
    int dim;        /* d_model */
    int layers;     /* transformer blocks; 2 units each */
    int heads;      /* attention heads; dim % heads == 0 */
    int mlp_hidden; /* hidden width of the MLP (usually 4 * dim) */
    int causal;     /* 1: causal attention (GPT); 0: bidirectional (ViT, BERT) */
    /* ViT (classes: BERT too) */
    int channels, height, width, patch, classes;
    /* GPT and BERT: tokens per example */
    int vocab, context;
    /* BERT (a post-LN encoder with a mean-pooled classifier, see
     * docs/ARCHITECTURE.md): rows of the position table (>= context; Hugging
     * Face's max_position_embeddings), rows of the token-type table (every
     * token has type 0), and the [PAD] id: an example's tokens from its first
     * [PAD] on are padding, which attention and pooling leave out. */
    int positions, type_vocab, pad_id;
    /* LayerNorm epsilon; 0 means 1e-5 (ViT and GPT) */
    double ln_eps;
    /* BERT's training-time dropout probabilities, in [0, 1) (0 for ViT and
     * GPT): hidden_dropout on the embeddings' output, on the attention's and
     * the MLP's output projections before their residual adds and on the
     * pooled vector before the classifier; attn_dropout on the attention
     * probabilities. Only a training forward of an active (not frozen) unit
     * drops anything: evaluation and frozen units run in inference form.
     * The masks are pure functions of (seed, pt_batch.step, pt_batch.ids,
     * unit, site, element), see nn/dropout.h. */
    double hidden_dropout, attn_dropout;
    /* initialisation: see docs/ARCHITECTURE.md "Initialisation" */
    double init_std;
    uint64_t seed;
    /* ViT: 0 (the default) computes the last block's attention, attention
     * projection and MLP, in a training call of the active block, only at
     * the [CLS] position, the one row of its output the head reads (the
     * other rows carry the block's input on, as if the branches added
     * nothing there); the loss and every gradient are those of the full
     * block, up to rounding. 1 computes every position: the reference the
     * tests compare against. Evaluation and a frozen block compute every
     * position. Not part of a model's identity (checkpoints do not keep it). */
    int full_last_block;
} pt_arch;

/* Checks every field for range and consistency; the message names the field. */
int pt_arch_check(const pt_arch *a, pt_err *err);
int pt_arch_tokens(const pt_arch *a);         /* ViT: 1 + patches; GPT, BERT: context */
int pt_arch_units(const pt_arch *a);          /* embed + 2 * layers + head */
int pt_arch_out_classes(const pt_arch *a);    /* ViT, BERT: classes; GPT: vocab */
int pt_arch_input_floats(const pt_arch *a);   /* ViT: C*H*W per example; GPT, BERT: 0 */
int64_t pt_arch_rows_per_example(const pt_arch *a); /* loss terms: ViT, BERT 1; GPT context */
double pt_arch_ln_eps(const pt_arch *a);      /* the LayerNorm epsilon in use */
/* BERT: the number of real (not padding) tokens of each of n examples
 * [n, context]: the position of the first pad_id, at least 1; context when
 * there is none. Other kinds: context (or the token count) for every example. */
void pt_arch_token_lengths(const pt_arch *a, const int32_t *tokens, int n, int32_t *lens);
/* Forward FLOPs of one example through unit u (multiply-add = 2 FLOPs). */
double pt_arch_unit_flops(const pt_arch *a, int u);

typedef enum { PT_UNIT_EMBED, PT_UNIT_ATTN, PT_UNIT_MLP, PT_UNIT_HEAD } pt_unit_role;

#define PT_MAX_UNIT_PARAMS 8

typedef struct pt_param_info {
    char name[96];     /* full PyTorch-style name, e.g. "blocks.3.attn.qkv.weight" */
    int ndim;
    int64_t shape[4];
    size_t offset;     /* elements from the start of the unit's parameter blob */
    size_t numel;
    int decay;         /* 1: AdamW weight decay applies (matrix weights only) */
    int init;          /* PT_INIT_* */
    double init_std;   /* for PT_INIT_NORMAL */
} pt_param_info;

enum { PT_INIT_ZERO, PT_INIT_ONE, PT_INIT_NORMAL };

typedef struct pt_unit_info {
    char name[40];     /* "embed", "blocks.3.attn", "blocks.3.mlp", "head" */
    pt_unit_role role;
    int block;         /* transformer block index, -1 for embed and head */
    int n_params;
    pt_param_info params[PT_MAX_UNIT_PARAMS];
    size_t numel;      /* parameters in this unit */
} pt_unit_info;

/* Describes unit u (0 <= u < pt_arch_units(a)): name, parameters, layout. */
void pt_unit_info_get(const pt_arch *a, int u, pt_unit_info *out);
/* Index of the unit called name, or -1. */
int pt_unit_find(const pt_arch *a, const char *name);


/* ---------------------------------------------------------------- backends */

typedef struct pt_backend pt_backend;

/* name: "cpu" (float32, the training backend), "cuda" or "cuda-bf16" (where
 * built with CUDA and a GPU exists; float32 or bf16 activations), optionally
 * followed by ":N" to use GPU N modulo the number of GPUs (one rank per GPU:
 * N = local rank). threads: threads for the CPU backends, the caller included
 * (0 = one per CPU the process may run on); a CPU backend starts threads - 1
 * workers when it opens and joins them when it closes. A GPU backend where
 * there is no GPU to use, or a build without CUDA: PT_ENODEV; a GPU that is
 * there but fails to open: PT_EBACKEND; a name it does not know: PT_EINPUT. */
int pt_backend_open(pt_backend **out, const char *name, int threads, pt_err *err);
/* "cpu64": the same CPU op code in float64, the finite-difference oracle of
 * the tests. It is in the library pt_nn_oracle (with OpenBLAS, which its
 * matrix products call), not in pt_nn, so the trainer carries neither. */
int pt_backend_open_cpu64(pt_backend **out, int threads, pt_err *err);
void pt_backend_close(pt_backend *be);
const char *pt_backend_name(const pt_backend *be);
size_t pt_backend_real_size(const pt_backend *be); /* bytes per parameter element */
size_t pt_backend_act_size(const pt_backend *be);  /* bytes per activation element */
int pt_backend_threads(const pt_backend *be);
/* How the backend's threads wait for each other, in words, into buf ("" for
 * a backend with no threads of its own to wait). */
void pt_backend_waiting(const pt_backend *be, char *buf, size_t size);
/* Backend memory; NULL on failure. Freed with pt_backend_free. */
void *pt_backend_alloc(pt_backend *be, size_t bytes);
void pt_backend_free(pt_backend *be, void *p);
/* Copies bytes within backend memory, and between host and backend memory
 * (complete when they return). */
void pt_backend_copy(pt_backend *be, void *dst, const void *src, size_t bytes);
void pt_backend_upload(pt_backend *be, void *dst, const void *host, size_t bytes);
void pt_backend_download(pt_backend *be, void *host, const void *src, size_t bytes);
/* A device backend's stream (a cudaStream_t, as void *), its device index
 * and the number of devices the process sees; NULL for host backends. */
void *pt_backend_device_stream(pt_backend *be, int *device, int *devices);
/* What the planner and the transports know of a device backend's device. */
typedef struct pt_device_info {
    int index, count;      /* the device, as the process numbers those it sees; how many */
    unsigned char uuid[16]; /* the same GPU has the same in every process */
    double memory;         /* bytes a run may plan for on it: the device's memory less
                              what the backend and its libraries keep (README,
                              pipeline.memory_gib) */
} pt_device_info;
/* Fills *out and returns 1 for a device backend; 0 for a host backend. */
int pt_backend_device_info(const pt_backend *be, pt_device_info *out);
/* Whether backend memory is host memory (MPI can send it directly). */
int pt_backend_is_host(const pt_backend *be);
/* Host <-> backend copies of activations (n activation elements, host float). */
void pt_backend_act_from_host(pt_backend *be, void *dst, const float *src, size_t n);
void pt_backend_act_to_host(pt_backend *be, float *dst, const void *src, size_t n);
/* Waits for all queued work (no-op on the CPU). */
int pt_backend_sync(pt_backend *be, pt_err *err);
/* Lets go of the working memory the calling thread's ops keep between
 * calls (pt_arch_linear_work_bytes): after timing units at sizes larger
 * than training's, which left it at their size. */
void pt_backend_release_work(pt_backend *be);

/* Op timing (run.profile_ops, nn/op_profile.c). pt_backend_profile_ops puts
 * a timing layer in front of a host backend's ops (PT_EINPUT for a device
 * backend); a backend without it is not slowed at all. While recording is
 * on, every op call adds its wall time and nominal FLOPs and bytes to one
 * row per (op, shape); the results do not change. pt_op_profile_stats copies
 * up to max rows out and returns how many (0 without the layer). */
typedef struct pt_op_stat {
    char op[24];     /* the ops-table entry, e.g. linear_fwd */
    char shape[64];  /* what tells this row from the op's others */
    int64_t calls;
    double seconds, flops, bytes;
    double best; /* the fastest call's seconds: the op undisturbed, where the
                    sum also holds the calls a busy machine slowed */
} pt_op_stat;
int pt_backend_profile_ops(pt_backend *be, pt_err *err);
void pt_op_profile_record(pt_backend *be, int on);
int pt_op_profile_stats(const pt_backend *be, pt_op_stat *out, int max);
/* Single-precision FLOP/s of `threads` threads running independent FMA
 * chains of the widest vector the build uses (about half a second); how
 * (may be NULL) gets how it was measured. */
double pt_cpu_peak_flops(int threads, char *how, size_t how_size);
/* The same chains on the calling thread alone for `rounds` rounds (a burst
 * of register-only arithmetic, for timing a core); returns the FLOPs done. */
double pt_cpu_fma_burst(long rounds);

/* Memory a unit needs on a backend for micro-batches of n examples: its
 * saved activations per micro-batch in flight, and its scratch (shared by
 * all units of a segment, so a segment needs the largest). */
size_t pt_unit_saved_bytes(const pt_arch *a, const pt_backend *be, int unit, int n);
size_t pt_unit_scratch_bytes(const pt_arch *a, const pt_backend *be, int unit, int n);
/* What a backend keeps beside every segment of the model for its linear
 * layers at micro-batches of up to n examples (pt_ops.linear_work_bytes:
 * the CPU's packed weights, and a weight gradient's partial sums, which
 * grow with the rows to a cap; each kept per thread at the largest any
 * layer needed): counted once per device. Never less for a larger n. */
size_t pt_arch_linear_work_bytes(const pt_arch *a, const pt_backend *be, int n);
/* The same in its two parts: the packed weights and the partial sums. */
void pt_arch_linear_work(const pt_arch *a, const pt_backend *be, int n, size_t *pack,
                         size_t *parts);

/* ----------------------------------------------------------------- batches */

/* One micro-batch, in host memory, as the data module produces it. */
typedef struct pt_batch {
    int n;                  /* examples */
    const float *images;    /* ViT: [n, C*H*W], already normalised */
    const int32_t *tokens;  /* GPT, BERT: [n, context] */
    const int32_t *targets; /* ViT, BERT: [n] class labels; GPT: [n, context] next tokens */
    /* Dropout's identity of the examples (needed by a training forward with
     * dropout, see pt_arch.hidden_dropout): each example's index in its data
     * set, and the optimizer step (from 0) the micro-batch belongs to. */
    const int64_t *ids;     /* [n], or NULL */
    int64_t step;
} pt_batch;

/* What a forward pass through the head reports. loss is the sum of per-row
 * losses times the segment's loss scale, so summing it over micro-batches and
 * replicas gives the mean over the global batch. */
typedef struct pt_stats {
    double loss;
    int64_t correct; /* rows whose argmax equals the target */
    int64_t rows;    /* loss terms seen */
    /* NULL, or a classifier's (ViT, BERT) counts by class: the head adds 1
     * to confusion[target * classes + predicted] for each row, predicted
     * being the first of the highest logits as floats (with finite logits,
     * the argmax `correct` counts: the two sums of hits agree) */
    int64_t *confusion;
} pt_stats;

/* ---------------------------------------------------------------- segments */

/* A segment is a contiguous run of units [first, first + count) instantiated on
 * a backend: their parameters, gradients and AdamW moments (each one blob in
 * unit order, so the active units' gradients are one contiguous range), and
 * the activations saved by forward for backward, in `slots` independent slots
 * (one per micro-batch in flight). */
typedef struct pt_segment pt_segment;

typedef struct pt_segment_spec {
    int first, count; /* units */
    int max_batch;    /* most examples in one forward call */
    int slots;        /* micro-batches whose activations can be held at once */
    /* units [first, first + frozen) are frozen from the start (as after
     * pt_segment_freeze): no gradient or moment memory is ever allocated for
     * them, so a layout with a frozen prefix never holds, even for a moment,
     * the training state of the whole segment. 0: none. */
    int frozen;
    /* 1: the last slot runs forwards of the frozen units only (a frozen
     * prefix's source): it holds their outputs, and no saved activations */
    int prefix_slot;
} pt_segment_spec;

int pt_segment_create(pt_segment **out, const pt_arch *a, pt_backend *be,
                      const pt_segment_spec *spec, pt_err *err);
void pt_segment_destroy(pt_segment *s);

int pt_segment_first(const pt_segment *s);
int pt_segment_count(const pt_segment *s);
const pt_arch *pt_segment_arch(const pt_segment *s);
pt_backend *pt_segment_backend(const pt_segment *s);
/* Elements in one boundary activation for n examples ([n, tokens, dim]). */
size_t pt_segment_act_elems(const pt_segment *s, int n);

/* Deterministic initialisation of every unit from (arch.seed, unit index):
 * the same unit gets the same weights whatever segment it lives in. */
int pt_segment_init_params(pt_segment *s, pt_err *err);

/* The parts of a unit's state, as a host float32 copy (for checkpoints,
 * export, moving units between ranks). */
typedef enum { PT_PART_PARAM, PT_PART_GRAD, PT_PART_M, PT_PART_V } pt_part;
size_t pt_segment_unit_numel(const pt_segment *s, int unit);
int pt_segment_unit_get(const pt_segment *s, int unit, pt_part part, float *host, pt_err *err);
int pt_segment_unit_set(pt_segment *s, int unit, pt_part part, const float *host, pt_err *err);
/* Elements [at, at + n) of a unit's part: a checkpoint moves a unit in
 * pieces of bounded size, so that saving or loading one needs no host copy
 * of the largest unit. */
int pt_segment_unit_read(const pt_segment *s, int unit, pt_part part, size_t at, size_t n,
                         float *host, pt_err *err);
int pt_segment_unit_write(pt_segment *s, int unit, pt_part part, size_t at, size_t n,
                          const float *host, pt_err *err);
/* Backend memory of a unit's part (pt_segment_unit_numel elements of
 * pt_backend_real_size bytes), or NULL when the unit is not in the segment or
 * is frozen and the part is not PT_PART_PARAM. For moving state between ranks
 * without conversions, and for tests. */
void *pt_segment_unit_data(pt_segment *s, int unit, pt_part part);

/* Units [first, first + frozen) get no backward and no optimizer step, and
 * their gradient and moment memory is released. frozen only grows. */
int pt_segment_freeze(pt_segment *s, int frozen, pt_err *err);
int pt_segment_frozen(const pt_segment *s);

/* Loss scale used by the head: 1 / (loss terms in the global batch). */
void pt_segment_set_loss_scale(pt_segment *s, double scale);

/* Forward one micro-batch through the segment.
 * x_in: [n, T, d] backend activation from the previous stage, or NULL when the
 *       segment starts with the embedding (which reads batch->images/tokens).
 *       It must stay valid until pt_segment_backward of the same slot.
 * y_out: [n, T, d] backend activation for the next stage, or NULL when the
 *       segment ends with the head (which adds its loss to *stats).
 * train: 0 for evaluation (nothing kept for backward). */
int pt_segment_forward(pt_segment *s, int slot, const pt_batch *batch, const void *x_in,
                       void *y_out, int train, pt_stats *stats, pt_err *err);
/* Forward through the segment's units [from, to) only (0-based within the
 * segment): x_in enters unit `from`, y_out receives what leaves unit to-1.
 * Training is allowed when the skipped units [0, from) are frozen and to is
 * the segment's end (backward then starts from x_in at unit `from`). For
 * running a frozen prefix, or continuing a cached activation. */
int pt_segment_forward_range(pt_segment *s, int slot, int from, int to, const pt_batch *batch,
                             const void *x_in, void *y_out, int train, pt_stats *stats,
                             pt_err *err);

/* Backward of the micro-batch that ran forward in `slot`. Adds parameter
 * gradients of the active units into the gradient blob.
 * dy: [n, T, d] gradient of y_out (NULL when the segment ends with the head).
 * dx: [n, T, d] receives the gradient of x_in; NULL when nobody needs it. */
int pt_segment_backward(pt_segment *s, int slot, const pt_batch *batch, const void *dy,
                        void *dx, pt_err *err);

/* Called after the backward of each unit in pt_segment_backward, with the
 * unit's model index, when set (NULL fn: none). Lets a caller start moving a
 * unit's finished gradient while the units before it are still computed. */
typedef void (*pt_unit_done_fn)(void *ctx, int unit);
void pt_segment_set_backward_hook(pt_segment *s, pt_unit_done_fn fn, void *ctx);

/* Logits of row r of the last forward in `slot` (segment must end with the
 * head); out gets pt_arch_out_classes() floats. */
int pt_segment_logits(pt_segment *s, int slot, int row, float *out, pt_err *err);
/* What entered the head in the last forward in `slot`, for example `example`
 * of that micro-batch (segment must end with the head): the final hidden
 * states, [T, d] (pt_arch_tokens x dim) floats into out. For BERT (post-LN)
 * they are the encoder's last hidden states; for ViT and GPT (pre-LN) the
 * residual stream before the head's final LayerNorm. */
int pt_segment_head_input(pt_segment *s, int slot, int example, float *out, pt_err *err);

/* Gradient blob of the active units: backend memory, count elements of
 * pt_backend_real_size bytes, contiguous (for all-reduce). */
void *pt_segment_grads(pt_segment *s, size_t *count);
void pt_segment_zero_grads(pt_segment *s);
/* Sum of squares of the active units' gradients (for global-norm clipping). */
double pt_segment_grad_sumsq(pt_segment *s);
/* The same per unit: out[i] for unit first + i (0 for frozen units). Summing
 * these in unit order gives a norm that does not depend on how the model is
 * cut into segments. */
void pt_segment_unit_grad_sumsq(pt_segment *s, double *out);
/* Multiplies the active gradients by f (e.g. 1/replicas after a sum all-reduce). */
void pt_segment_scale_grads(pt_segment *s, double f);

/* ---------------------------------------------------------------- optimizer */

/* torch.optim.AdamW, decoupled weight decay with bias correction. step is the
 * 1-based count of updates including this one. grad_scale multiplies every
 * gradient first (the clipping coefficient, 1.0 for none). Weight decay applies
 * to parameters whose pt_param_info.decay is 1. */
typedef struct pt_adamw {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step;
    double grad_scale;
} pt_adamw;

int pt_segment_adamw(pt_segment *s, const pt_adamw *opt, pt_err *err);

/* Clipping coefficient as torch.nn.utils.clip_grad_norm_: min(1, max_norm /
 * (norm + 1e-6)); max_norm <= 0 disables clipping (returns 1). */
double pt_clip_coef(double total_norm, double max_norm);

/* ------------------------------------------------------------ LR schedules */

typedef enum { PT_LR_CONSTANT, PT_LR_COSINE, PT_LR_LINEAR } pt_lr_kind;

/* Learning rate for update number step (0-based), as torch's SequentialLR of
 * LinearLR warm-up over `warmup` steps (from base/warmup towards base) and
 * then constant, CosineAnnealingLR or LinearLR decay over the remaining
 * total - warmup steps, reaching min_lr at step `total` (see optim.c). */
typedef struct pt_lr_schedule {
    pt_lr_kind kind;
    double base, min_lr;
    int64_t warmup, total;
} pt_lr_schedule;

double pt_lr_at(const pt_lr_schedule *s, int64_t step);

#endif
