/*
 * cuda_backend.cu: opening and closing the CUDA backend, its memory ops and
 * host copies, error reporting, and the ops table (the math lives in
 * cuda_gemm.cu, cuda_norm.cu, cuda_attention.cu, cuda_embed.cu and
 * cuda_misc.cu).
 *
 * Two precisions share every kernel (templates over the activation type):
 * "cuda" keeps activations in float32; "cuda-bf16" keeps them in bf16 with
 * float32 parameters, gradients, moments and sums.
 *
 * Device memory: one arena (cuda_arena.h) over large cudaMalloc chunks; alloc
 * and free are host bookkeeping plus, for alloc, a zero fill on the stream.
 *
 * Host copies take ordinary (pageable) host pointers. Uploads go through a
 * pinned staging ring: the host data is copied into the ring, the ring is
 * copied to the device on the stream, and an event marks when that part of
 * the ring may be reused; so an upload returns as soon as the caller's
 * buffer may be reused, without waiting for queued work. Downloads wait for
 * the stream (their result is needed on return).
 */
#include "nn/cuda_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    LT_WORKSPACE = 32 << 20, /* cuBLASLt's recommendation for Hopper */
    RING_BYTES = 32 << 20,
    ARENA_MIN_CHUNK = 256 << 20
};

/* ----------------------------------------------------------------- errors */

void cuda_record(cuda_impl *c, int code, const char *fmt, ...)
{
    if (c->failed)
        return;
    c->failed = 1;
    c->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
}

int cuda_check_at(cuda_impl *c, cudaError_t e, const char *what, const char *file, int line)
{
    /* cudaErrorNotReady is a stream or event query's "still busy", not a failure */
    if (e == cudaSuccess || e == cudaErrorNotReady)
        return 0;
    cuda_record(c, PT_EBACKEND, "CUDA error in %s (%s:%d): %s: %s", what, file, line, cudaGetErrorName(e),
                cudaGetErrorString(e));
    return -1;
}

int cublas_check_at(cuda_impl *c, cublasStatus_t s, const char *what, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    cuda_record(c, PT_EBACKEND, "cuBLASLt error in %s (%s:%d): %s", what, file, line,
                PT_LT(GetStatusString)(s));
    return -1;
}

static int cuda_status(pt_backend *be, pt_err *err)
{
    cuda_impl *c = cuda_of(be);
    if (!c->failed)
        CUDA_CHECK(c, cudaStreamQuery(c->stream)); /* a fault in queued work, without waiting */
    return c->failed ? pt_fail(err, c->code, "%s", c->msg) : 0;
}

static int cuda_sync(pt_backend *be, pt_err *err)
{
    cuda_impl *c = cuda_of(be);
    if (!c->failed)
        CUDA_CHECK(c, cudaStreamSynchronize(c->stream));
    return cuda_status(be, err);
}

/* ------------------------------------------------------------------ arena */

static void *chunk_get(void *ctx, size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is an answer, not a failure of the backend */
        return NULL;
    }
    return p;
}

static void chunk_put(void *ctx, void *base)
{
    (void)cudaFree(base);
}

void *cuda_scratch(cuda_impl *c, int slot, size_t bytes)
{
    if (c->scratch[slot].bytes >= bytes && c->scratch[slot].p)
        return c->scratch[slot].p;
    if (c->scratch[slot].p)
        cuda_arena_free(&c->arena, c->scratch[slot].p);
    /* grow by half again, so a slowly growing need does not reallocate every call */
    size_t want = bytes + bytes / 2;
    c->scratch[slot].p = cuda_arena_alloc(&c->arena, want);
    c->scratch[slot].bytes = c->scratch[slot].p ? want : 0;
    if (!c->scratch[slot].p)
        cuda_record(c, PT_ENOMEM, "out of GPU memory: %zu bytes of scratch (slot %d)", want, slot);
    return c->scratch[slot].p;
}

static void *cuda_alloc(pt_backend *be, size_t bytes)
{
    cuda_impl *c = cuda_of(be);
    void *p = cuda_arena_alloc(&c->arena, bytes);
    if (!p)
        return NULL; /* the caller reports out of memory */
    /* zeroed, as the CPU backend's memory is */
    CUDA_CHECK(c, cudaMemsetAsync(p, 0, bytes ? bytes : 1, c->stream));
    return p;
}

static void cuda_free(pt_backend *be, void *p)
{
    cuda_impl *c = cuda_of(be);
    if (p && cuda_arena_free(&c->arena, p))
        cuda_record(c, PT_EINTERNAL, "free of %p, which is not a live block of the CUDA arena", p);
}

static void cuda_zero(pt_backend *be, void *dst, size_t bytes)
{
    cuda_impl *c = cuda_of(be);
    if (!c->failed && bytes)
        CUDA_CHECK(c, cudaMemsetAsync(dst, 0, bytes, c->stream));
}

static void cuda_copy(pt_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_impl *c = cuda_of(be);
    if (!c->failed && bytes && dst != src)
        CUDA_CHECK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

/* ------------------------------------------------------------ staging ring */

static size_t ring_chunk(const cuda_ring *r)
{
    return r->cap / 4;
}

/* A region of `len` bytes (len <= cap / 4) free of queued copies. Waits only
 * for the copies whose space it needs: the newest live region it overlaps
 * (events on one stream complete in order, so every older one is done too),
 * or the oldest when all event slots are taken. */
static char *ring_take(cuda_impl *c, size_t len)
{
    cuda_ring *r = &c->ring;
    len = (len + 255) / 256 * 256;
    size_t start = r->head + len <= r->cap ? r->head : 0;
    size_t end = start + len;
    int wait = r->count == CUDA_RING_EVENTS ? 0 : -1; /* FIFO position to wait for */
    for (int i = 0; i < r->count; i++) {
        int k = (r->first + i) % CUDA_RING_EVENTS;
        if (r->live[k].start < end && start < r->live[k].end)
            wait = i;
    }
    if (wait >= 0) {
        CUDA_CHECK(c, cudaEventSynchronize(r->ev[(r->first + wait) % CUDA_RING_EVENTS]));
        r->first = (r->first + wait + 1) % CUDA_RING_EVENTS;
        r->count -= wait + 1;
    }
    r->head = end;
    r->live[(r->first + r->count) % CUDA_RING_EVENTS].start = start;
    r->live[(r->first + r->count) % CUDA_RING_EVENTS].end = end;
    return r->buf + start;
}

/* Marks the region taken last as in use by the copies queued so far. */
static void ring_queued(cuda_impl *c)
{
    cuda_ring *r = &c->ring;
    int k = (r->first + r->count) % CUDA_RING_EVENTS;
    CUDA_CHECK(c, cudaEventRecord(r->ev[k], c->stream));
    r->count++;
}

static void bf16_from_host(bf16 *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = __float2bfloat16_rn(src[i]);
}

static void bf16_to_host(float *dst, const bf16 *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = __bfloat162float(src[i]);
}

/* Raw bytes (to_bf16 = 0), or host floats as bf16, to device memory through the ring. */
static void upload_via_ring(cuda_impl *c, void *dst, const void *src, size_t bytes, int to_bf16)
{
    const size_t step = ring_chunk(&c->ring) / 4 * 4;
    const size_t elem = to_bf16 ? sizeof(float) : 1;
    for (size_t off = 0; off < bytes && !c->failed; off += step) {
        size_t len = bytes - off < step ? bytes - off : step;
        size_t out_len = to_bf16 ? len / elem * sizeof(bf16) : len;
        char *stage = ring_take(c, out_len);
        if (to_bf16)
            bf16_from_host((bf16 *)stage, (const float *)((const char *)src + off), len / elem);
        else
            memcpy(stage, (const char *)src + off, len);
        char *d = (char *)dst + (to_bf16 ? off / elem * sizeof(bf16) : off);
        CUDA_CHECK(c, cudaMemcpyAsync(d, stage, out_len, cudaMemcpyHostToDevice, c->stream));
        ring_queued(c);
    }
}

static void cuda_upload(pt_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_impl *c = cuda_of(be);
    if (!c->failed && bytes)
        upload_via_ring(c, dst, src, bytes, 0);
}

static void cuda_download(pt_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_impl *c = cuda_of(be);
    if (!bytes)
        return;
    if (c->failed || CUDA_CHECK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream)) ||
        CUDA_CHECK(c, cudaStreamSynchronize(c->stream)))
        memset(dst, 0, bytes); /* defined contents; the failure is reported by status */
}

static void cuda_from_f32(pt_backend *be, void *dst, const float *src, size_t n)
{
    cuda_upload(be, dst, src, n * sizeof(float));
}

static void cuda_to_f32(pt_backend *be, float *dst, const void *src, size_t n)
{
    cuda_download(be, dst, src, n * sizeof(float));
}

static void cuda_act_from_f32_bf16(pt_backend *be, void *dst, const float *src, size_t n)
{
    cuda_impl *c = cuda_of(be);
    if (!c->failed && n)
        upload_via_ring(c, dst, src, n * sizeof(float), 1);
}

static void cuda_act_to_f32_bf16(pt_backend *be, float *dst, const void *src, size_t n)
{
    cuda_impl *c = cuda_of(be);
    const size_t step = ring_chunk(&c->ring) / sizeof(bf16);
    for (size_t off = 0; off < n; off += step) {
        size_t len = n - off < step ? n - off : step;
        if (c->failed) {
            memset(dst + off, 0, len * sizeof *dst);
            continue;
        }
        bf16 *stage = (bf16 *)ring_take(c, len * sizeof(bf16));
        CUDA_CHECK(c, cudaMemcpyAsync(stage, (const bf16 *)src + off, len * sizeof(bf16),
                                      cudaMemcpyDeviceToHost, c->stream));
        int k = (c->ring.first + c->ring.count) % CUDA_RING_EVENTS;
        ring_queued(c);
        if (CUDA_CHECK(c, cudaEventSynchronize(c->ring.ev[k])))
            memset(dst + off, 0, len * sizeof *dst);
        else
            bf16_to_host(dst + off, stage, len);
    }
}

/* ------------------------------------------------------------ open, close */

static size_t cuda_attention_saved_bytes(const pt_backend *be, int n, int T, int H)
{
    /* the log-sum-exp of every query row, float32 (see cuda_attention.cu) */
    return (size_t)n * H * T * sizeof(float);
}

static void release(cuda_impl *c)
{
    if (c->stream)
        (void)cudaStreamSynchronize(c->stream);
    cuda_gemm_cache_free(c);
    if (c->lt)
        PT_LT(Destroy)(c->lt);
    for (int k = 0; k < CUDA_RING_EVENTS; k++)
        if (c->ring.ev[k])
            (void)cudaEventDestroy(c->ring.ev[k]);
    if (c->ring.buf)
        (void)cudaFreeHost(c->ring.buf);
    if (c->host_result)
        (void)cudaFreeHost(c->host_result);
    cuda_arena_release(&c->arena); /* the workspace, scratch and every live block */
    if (c->stream)
        (void)cudaStreamDestroy(c->stream);
    free(c);
}

static void cuda_close(pt_backend *be)
{
    if (be->impl)
        release(cuda_of(be));
    be->impl = NULL;
}

/* The setup steps of open that can fail; returns 0 or a PT_E* code in err. */
static int setup(cuda_impl *c, pt_err *err)
{
    cudaDeviceProp prop;
    if (CUDA_CHECK(c, cudaGetDevice(&c->device)) || CUDA_CHECK(c, cudaGetDeviceProperties(&prop, c->device)))
        return pt_fail(err, c->code, "%s", c->msg);
    snprintf(c->device_name, sizeof c->device_name, "%s", prop.name);
    memcpy(c->uuid, prop.uuid.bytes, sizeof c->uuid);
    c->total_memory = prop.totalGlobalMem;
    c->sm_count = prop.multiProcessorCount;
    c->smem_optin = prop.sharedMemPerBlockOptin;
    c->grid_y_max = prop.maxGridSize[1] > 0 ? prop.maxGridSize[1] : 65535;
    /* tests: a lower limit, so that small shapes take the paths of huge ones */
    const char *gy = getenv("PT_CUDA_GRID_Y");
    const long gy_max = gy ? strtol(gy, NULL, 10) : 0;
    if (gy_max >= 1 && gy_max < c->grid_y_max)
        c->grid_y_max = (int)gy_max;
    if (prop.major < 8)
        return pt_fail(err, PT_EBACKEND,
                       "GPU %d (%s) has compute capability %d.%d; the CUDA backend needs 8.0 or "
                       "newer (bf16 tensor cores)",
                       c->device, prop.name, prop.major, prop.minor);
    char why[512];
    if (cuda_lt_load(why, sizeof why))
        return pt_fail(err, PT_EBACKEND, "%s", why);
    if (CUDA_CHECK(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) ||
        CUBLAS_CHECK(c, PT_LT(Create)(&c->lt)))
        return pt_fail(err, c->code, "%s", c->msg);
    cuda_arena_init(&c->arena, ARENA_MIN_CHUNK, chunk_get, chunk_put, c);
    c->lt_ws_bytes = LT_WORKSPACE;
    c->lt_ws = cuda_arena_alloc(&c->arena, c->lt_ws_bytes);
    c->dev_result = cuda_arena_alloc(&c->arena, 64);
    if (!c->lt_ws || !c->dev_result)
        return pt_fail(err, PT_ENOMEM, "out of GPU memory opening the CUDA backend on %s", prop.name);
    c->ring.cap = RING_BYTES;
    if (CUDA_CHECK(c, cudaHostAlloc((void **)&c->ring.buf, c->ring.cap, cudaHostAllocDefault)) ||
        CUDA_CHECK(c, cudaHostAlloc(&c->host_result, 64, cudaHostAllocDefault)))
        return pt_fail(err, c->code, "%s", c->msg);
    for (int k = 0; k < CUDA_RING_EVENTS; k++)
        if (CUDA_CHECK(c, cudaEventCreateWithFlags(&c->ring.ev[k], cudaEventDisableTiming)))
            return pt_fail(err, c->code, "%s", c->msg);
    /* fails with a clear message when the binary has no code for this GPU */
    if (cuda_attention_setup(c))
        return pt_fail(err, c->code, "%s", c->msg);
    const char *gemm = getenv("PT_CUDA_GEMM");
    c->no_cublaslt = gemm && strcmp(gemm, "fallback") == 0;
    return 0;
}

static void *cuda_device_stream(pt_backend *be, int *device, int *devices)
{
    cuda_impl *c = cuda_of(be);
    *device = c->device;
    *devices = c->device_count;
    return (void *)c->stream;
}

/* The memory a run plans for: the GPU's less a reserve of 1 GiB and a tenth
 * of it (half of it at most): the CUDA context, cuBLASLt's workspace and
 * its own, the scratch buffers (kept at 1.5 times the largest need: a bf16
 * copy of the largest weight, attention's per-row figures, the sort of
 * token ids) and the arena's chunks rounded up, none of which the planner
 * counts. The total, not what is free when the run opens: the same GPU
 * gives every run the same figure, so a resume plans the same layout. */
static void cuda_device_info(const pt_backend *be, pt_device_info *out)
{
    const cuda_impl *c = (const cuda_impl *)be->impl;
    out->index = c->device;
    out->count = c->device_count;
    memcpy(out->uuid, c->uuid, sizeof out->uuid);
    const double total = (double)c->total_memory, reserve = (double)(1u << 30) + total / 10;
    out->memory = total - (reserve < total / 2 ? reserve : total / 2);
}

extern "C" int pt_cuda_backend_open(pt_backend **out, int use_bf16, int device, int threads,
                                    pt_err *err)
{
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pt_fail(err, PT_ENODEV, "no CUDA device: cudaGetDeviceCount returned %s (%s)%s",
                       cudaGetErrorName(e), cudaGetErrorString(e),
                       e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice
                           ? "; is the NVIDIA driver installed and a GPU visible "
                             "(CUDA_VISIBLE_DEVICES)?"
                           : "");
    }
    if (count == 0)
        return pt_fail(err, PT_ENODEV, "no CUDA device: cudaGetDeviceCount found 0 devices");
    /* more ranks on a node than GPUs share them round-robin */
    e = cudaSetDevice(device % count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pt_fail(err, PT_EBACKEND, "cudaSetDevice(%d) returned %s (%s)", device % count,
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }

    pt_backend *be = (pt_backend *)calloc(1, sizeof *be);
    cuda_impl *c = (cuda_impl *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return pt_fail(err, PT_ENOMEM, "out of memory opening the CUDA backend");
    }
    c->use_bf16 = use_bf16;
    c->device_count = count;
    int rc = setup(c, err);
    if (rc) {
        pt_err_prefix(err, "opening the CUDA backend");
        release(c);
        free(be);
        return rc;
    }
    pt_ops *o = &c->ops;
    o->alloc = cuda_alloc;
    o->free = cuda_free;
    o->upload = cuda_upload;
    o->download = cuda_download;
    o->zero = cuda_zero;
    o->copy = cuda_copy;
    o->par_from_f32 = cuda_from_f32;
    o->par_to_f32 = cuda_to_f32;
    o->act_from_f32 = use_bf16 ? cuda_act_from_f32_bf16 : cuda_from_f32;
    o->act_to_f32 = use_bf16 ? cuda_act_to_f32_bf16 : cuda_to_f32;
    o->sync = cuda_sync;
    o->attention_saved_bytes = cuda_attention_saved_bytes;
    o->close = cuda_close;
    o->device_stream = cuda_device_stream;
    o->device_info = cuda_device_info;
    o->status = cuda_status;
    cuda_fill_gemm_ops(o, use_bf16);
    cuda_fill_norm_ops(o, use_bf16);
    cuda_fill_misc_ops(o, use_bf16);
    cuda_fill_embed_ops(o, use_bf16);
    cuda_fill_attention_ops(o, use_bf16);

    be->ops = o;
    be->name = use_bf16 ? "cuda-bf16" : "cuda";
    be->real_size = sizeof(float);
    be->act_size = use_bf16 ? sizeof(bf16) : sizeof(float);
    be->threads = threads > 0 ? threads : 1;
    be->impl = c;
    *out = be;
    return 0;
}
