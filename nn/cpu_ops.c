/*
 * cpu_ops.c: the CPU backend's ops table, its memory ops (allocation, copies,
 * fills) and its scratch. The ops themselves are in one file per kind
 * (nn/cpu_real.h lists them): cpu_linear.c (our own kernels for the float32
 * products, nn/cpu_gemm.h; OpenBLAS for the float64 oracle's, one
 * single-threaded call per block of the output), cpu_norm.c, cpu_embed.c,
 * cpu_attention.c, cpu_attention_first.c and cpu_misc.c, all as tasks on the
 * backend's thread pool (nn/cpu_pool.h, in be->impl).
 * Every one of these files is compiled twice, once with PT_REAL_F64
 * undefined (float32: the training backend, `pt_cpu_ops_f32`) and once with
 * it defined (float64: the finite-difference oracle, `pt_cpu_ops_f64`); the
 * two differ only in the typedef and the math functions (nn/cpu_real.h).
 *
 * Determinism: tasks are sized by the problem alone (cpu_real.h, per_task),
 * each writes its own part of the output, and every reduction runs over
 * fixed-size chunks whose partial sums are added in chunk order, so results
 * depend neither on the thread count nor on which thread ran which task.
 * The float32 products fix each element's arithmetic whatever the split
 * (nn/cpu_gemm.h); OpenBLAS, for the float64 oracle, runs single-threaded
 * (the backend sets it so on every thread of the pool), so no split of its
 * own enters a result either.
 *
 * Each parallel loop is a task function over a range of the loop's items
 * with the loop body as it was, and a job struct carrying the loop's
 * variables under their own names.
 */
#include "nn/cpu_real.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifdef PT_REAL_F64
#define OPS_NAME pt_cpu_ops_f64
#else
#define OPS_NAME pt_cpu_ops_f32
#endif

/* Scratch of a few kilobytes inside an op: if even that fails the process is
 * out of memory and no error path could do anything useful. Aligned to 64
 * bytes so that a vectorised loop over it starts at the same offset from an
 * alignment boundary for every thread and call: the compiler's choice of
 * which iterations run in a scalar peel then never depends on where malloc
 * happened to put the block (attention's softmax relies on this). */
void *CPU_FN(pt_cpu_scratch)(size_t bytes)
{
    size_t size = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, size ? size : 64);
    if (p)
        memset(p, 0, size ? size : 64);
    if (!p) {
        fprintf(stderr, "pipetrain: out of memory allocating %zu bytes of CPU scratch\n", bytes);
        abort();
    }
    return p;
}

/* ----------------------------------------------------------------- memory */

/* Allocations of at least HUGE_PAGE bytes (the arenas that hold a
 * segment's activations, gradients and optimizer state) start on a huge
 * page boundary, and their whole huge pages are offered to the kernel as
 * transparent huge pages: a hint, which it follows where
 * /sys/kernel/mm/transparent_hugepage/enabled says `madvise` (the usual
 * default, under which nothing gets huge pages unasked) or `always`. The
 * products read their operands' rows kilobytes apart: with 4 KiB pages a
 * row of a wide layer's activations or gradients is a page of its own, and
 * a weight gradient over a batch's rows walks thousands of pages, more than
 * the TLB holds. Wide ViT, THP `never` against `madvise` with the same
 * binary: docs/PERFORMANCE.md, "Huge pages". Where an allocation sits
 * changes no result. */
#define HUGE_PAGE ((size_t)2 << 20)

static void *cpu_alloc(pt_backend *be, size_t bytes)
{
    (void)be;
    size_t size = (bytes + 63) / 64 * 64;
    if (size == 0)
        size = 64;
    void *p = NULL;
    if (size >= HUGE_PAGE && posix_memalign(&p, HUGE_PAGE, size) == 0) {
#ifdef MADV_HUGEPAGE
        (void)madvise(p, size / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE);
#endif
    } else {
        p = aligned_alloc(64, size);
    }
    if (p)
        memset(p, 0, size);
    return p;
}

static void cpu_free(pt_backend *be, void *p)
{
    (void)be;
    free(p);
}

/* A copy or a fill in pieces of TASK_WORK floats' bytes, a task each: it
 * moves bits only, so the split changes nothing but which core moves them. */
typedef struct {
    char *dst;
    const char *src; /* NULL: zero */
    size_t bytes;
} move_job;

enum { MOVE_BYTES = TASK_WORK * sizeof(float) };

static void move_task(void *ctx, long t, int thread)
{
    (void)thread;
    const move_job *j = ctx;
    const size_t at = (size_t)t * MOVE_BYTES;
    const size_t len = j->bytes - at < MOVE_BYTES ? j->bytes - at : MOVE_BYTES;
    if (j->src)
        memcpy(j->dst + at, j->src + at, len);
    else
        memset(j->dst + at, 0, len);
}

static void move(pt_backend *be, void *dst, const void *src, size_t bytes)
{
    move_job j = {dst, src, bytes};
    pt_pool_run(PAR_POOL(be, bytes / sizeof(float)), tasks_for((long)bytes, MOVE_BYTES),
                move_task, &j);
}

static void cpu_memcpy(pt_backend *be, void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        move(be, dst, src, bytes);
}

static void cpu_zero(pt_backend *be, void *dst, size_t bytes)
{
    if (bytes)
        move(be, dst, NULL, bytes);
}

static void cpu_from_f32(pt_backend *be, void *dst, const float *src, size_t n)
{
    (void)be;
    real *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = (real)src[i];
}

static void cpu_to_f32(pt_backend *be, float *dst, const void *src, size_t n)
{
    (void)be;
    const real *s = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)s[i];
}

static int cpu_sync(pt_backend *be, pt_err *err)
{
    (void)be;
    (void)err;
    return 0;
}

static void cpu_close(pt_backend *be)
{
    pt_pool_destroy(be->impl);
    be->impl = NULL;
}

const pt_ops OPS_NAME = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .zero = cpu_zero,
    .copy = cpu_memcpy,
    .par_from_f32 = cpu_from_f32,
    .par_to_f32 = cpu_to_f32,
    .act_from_f32 = cpu_from_f32,
    .act_to_f32 = cpu_to_f32,
    .sync = cpu_sync,
    .close = cpu_close,
    .linear_fwd = CPU_FN(pt_cpu_linear_fwd),
    .linear_bwd = CPU_FN(pt_cpu_linear_bwd),
    .layernorm_fwd = CPU_FN(pt_cpu_layernorm_fwd),
    .layernorm_bwd = CPU_FN(pt_cpu_layernorm_bwd),
    .gelu_fwd = CPU_FN(pt_cpu_gelu_fwd),
    .gelu_bwd = CPU_FN(pt_cpu_gelu_bwd),
    .attention_fwd = CPU_FN(pt_cpu_attention_fwd),
    .attention_bwd = CPU_FN(pt_cpu_attention_bwd),
    .attention_work_bytes = CPU_FN(pt_cpu_attention_work_bytes),
#ifndef PT_REAL_F64
    .linear_bwd_mul = CPU_FN(pt_cpu_linear_bwd_mul), /* the float64 oracle composes it (nn/backend.h) */
    .linear_work_bytes = CPU_FN(pt_cpu_linear_work_bytes),
    .release_work = CPU_FN(pt_cpu_release_work),
#endif
    .attention_first_fwd = CPU_FN(pt_cpu_attention_first_fwd),
    .attention_first_bwd = CPU_FN(pt_cpu_attention_first_bwd),
    .patchify = CPU_FN(pt_cpu_patchify),
    .vit_assemble_fwd = CPU_FN(pt_cpu_vit_assemble_fwd),
    .vit_assemble_bwd = CPU_FN(pt_cpu_vit_assemble_bwd),
    .token_embed_fwd = CPU_FN(pt_cpu_token_embed_fwd),
    .token_embed_bwd = CPU_FN(pt_cpu_token_embed_bwd),
    .copy_rows = CPU_FN(pt_cpu_copy_rows),
    .mean_pool_fwd = CPU_FN(pt_cpu_mean_pool_fwd),
    .mean_pool_bwd = CPU_FN(pt_cpu_mean_pool_bwd),
    .dropout = CPU_FN(pt_cpu_dropout),
    .cross_entropy = CPU_FN(pt_cpu_cross_entropy),
    .adamw = CPU_FN(pt_cpu_adamw),
    .sumsq = CPU_FN(pt_cpu_sumsq),
    .scale = CPU_FN(pt_cpu_scale),
};
