/*
 * cuda_emu.h (internal to nn/, tests only): a CPU emulation of the part of
 * CUDA the backend uses, so the backend's own kernels and ops (compiled by a
 * C++ compiler with PT_CUDA_EMU) run and are checked against the CPU backend
 * on machines without a GPU. It is not a second implementation of any op:
 * the code under test is the same source nvcc compiles.
 *
 * Execution model: the blocks of a grid run one after another; the threads of
 * a block are coroutines on one OS thread (each started on its own stack by
 * ucontext, then switched with _setjmp/_longjmp, which unlike swapcontext
 * make no system call to save the signal mask: that call was half the
 * tests' time; the target builds without _FORTIFY_SOURCE, whose longjmp
 * check refuses a jump to another stack). A thread runs until it
 * reaches a barrier (__syncthreads, __syncwarp, or a shuffle, which is two
 * warp barriers) or returns; a barrier releases when every live thread of its
 * scope has reached it. Threads that reach a different barrier than their
 * scope's others deadlock, which is reported and aborts (divergent barrier).
 * Between barriers the threads run in an order set by PT_CUDA_EMU_ORDER
 * (forward, reverse or shuffled): a missing barrier makes results depend on
 * that order, which the tests exploit by running under each.
 *
 * __shared__ variables are function statics (one block at a time shares
 * them); dynamic shared memory is a buffer per launch. WMMA fragments hold
 * their whole 16x16 tile in every lane, so the API's semantics are exact and
 * no element layout is assumed. "Device" memory is host memory; copies and
 * memsets happen at once; streams and events are no-ops. cuBLASLt is a
 * reference implementation of its documented semantics (cuda_emu_blas.h), so
 * the backend's GEMM arguments are checked too. Alignment that the real hardware
 * requires (16-byte vector accesses, 32-byte WMMA pointers) is asserted.
 *
 * Global state (the current block, the coroutine stacks) is acceptable here:
 * this file only ever runs inside single-threaded tests.
 */
#ifndef PT_NN_CUDA_EMU_H
#define PT_NN_CUDA_EMU_H

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>
#include <setjmp.h>
#include <ucontext.h>

/* ------------------------------------------------------------- qualifiers */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) alignas(n)

/* ------------------------------------------------------------ vector types */

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct uint3 {
    unsigned x, y, z;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
static inline float2 make_float2(float x, float y)
{
    return {x, y};
}
static inline float4 make_float4(float x, float y, float z, float w)
{
    return {x, y, z, w};
}

/* ------------------------------------------------------------------- bf16 */

struct __nv_bfloat16 {
    unsigned short x;
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
static inline float __bfloat162float(__nv_bfloat16 h)
{
    uint32_t u = (uint32_t)h.x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN */
        return {(unsigned short)((u >> 16) | 0x40)};
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return {(unsigned short)(u >> 16)};
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h)
{
    return {__bfloat162float(h.x), __bfloat162float(h.y)};
}
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b)
{
    return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}

/* ------------------------------------------------------------------- math */

/* The product rounded once, never contracted into a fused multiply-add
 * with what the caller adds (as CUDA's __fmul_rn): the volatile store makes
 * it a value of its own, which -ffp-contract=fast cannot fuse. */
static inline float __fmul_rn(float a, float b)
{
    volatile float r = a * b;
    return r;
}
static inline float normcdff(float x)
{
    return 0.5f * erfcf(-x * 0.70710678118654752f);
}
static inline int min(int a, int b)
{
    return a < b ? a : b;
}
static inline int max(int a, int b)
{
    return a > b ? a : b;
}
static inline void __trap(void)
{
    abort();
}

/* ------------------------------------------------------------- scheduler */

namespace emu
{

enum { RUN = 0, AT_BLOCK = 1, AT_WARP = 2, DONE = 3 };
enum { STACK_BYTES = 256 * 1024, MAX_THREADS = 1024 };

struct thread_state {
    ucontext_t ctx; /* its start, on its stack */
    jmp_buf at;     /* where it waits, once started */
    uint3 idx;
    int warp, lane, wait, started;
};

struct block_state {
    dim3 grid, block;
    uint3 bid;
    std::vector<thread_state> th;
    jmp_buf sched;
    int cur;
    const std::function<void()> *body;
    unsigned char *smem;
    double shfl[MAX_THREADS / 32][32];
};

inline block_state *&current()
{
    static block_state *b;
    return b;
}
inline thread_state *me()
{
    return &current()->th[current()->cur];
}

/* Coroutine stacks, kept from launch to launch and freed at exit. */
struct stack_pool {
    std::vector<char *> v;
    ~stack_pool()
    {
        for (char *p : v)
            free(p);
    }
};
inline std::vector<char *> &stacks()
{
    static stack_pool s;
    return s.v;
}

/* 0 forward, 1 reverse, 2 shuffled (fixed seed) */
inline int order_mode()
{
    const char *s = getenv("PT_CUDA_EMU_ORDER");
    return !s ? 0 : strcmp(s, "reverse") == 0 ? 1 : strcmp(s, "shuffle") == 0 ? 2 : 0;
}

inline void wait_at(int what)
{
    thread_state *t = me();
    t->wait = what;
    if (!_setjmp(t->at))
        _longjmp(current()->sched, 1);
}

inline void entry()
{
    (*current()->body)();
    me()->wait = DONE;
    _longjmp(current()->sched, 1); /* never returns: its stack is left as it is */
}

/* Runs thread t of block b until it waits or ends (a function of its own,
 * so that no caller's variable lives across the _setjmp). */
__attribute__((noinline)) inline void switch_to(block_state *b, thread_state *t)
{
    if (!_setjmp(b->sched)) {
        if (!t->started) {
            t->started = 1;
            setcontext(&t->ctx);
        }
        _longjmp(t->at, 1);
    }
}

inline void run_block(block_state *b, unsigned long long *seed)
{
    const int n = (int)(b->block.x * b->block.y * b->block.z);
    if (n > MAX_THREADS) {
        fprintf(stderr, "cuda_emu: %d threads per block\n", n);
        abort();
    }
    b->th.assign(n, thread_state());
    while ((int)stacks().size() < n)
        stacks().push_back((char *)malloc(STACK_BYTES));
    for (int k = 0; k < n; k++) {
        thread_state &t = b->th[k];
        t.idx.x = k % b->block.x;
        t.idx.y = k / b->block.x % b->block.y;
        t.idx.z = k / (b->block.x * b->block.y);
        t.warp = k / 32;
        t.lane = k % 32;
        t.wait = RUN;
        t.started = 0;
        getcontext(&t.ctx);
        t.ctx.uc_stack.ss_sp = stacks()[k];
        t.ctx.uc_stack.ss_size = STACK_BYTES;
        t.ctx.uc_link = NULL; /* entry never returns */
        makecontext(&t.ctx, entry, 0);
    }
    std::vector<int> order(n);
    const int mode = order_mode();
    for (int k = 0; k < n; k++)
        order[k] = mode == 1 ? n - 1 - k : k;
    for (;;) {
        if (mode == 2)
            for (int k = n - 1; k > 0; k--) {
                *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
                std::swap(order[k], order[(int)((*seed >> 33) % (unsigned long long)(k + 1))]);
            }
        for (int k : order)
            if (b->th[k].wait == RUN) {
                b->cur = k;
                switch_to(b, &b->th[k]);
            }
        int live = 0, at_block = 0, released = 0;
        for (int w = 0; w * 32 < n; w++) {
            int lw = 0, aw = 0;
            for (int k = w * 32; k < n && k < w * 32 + 32; k++) {
                lw += b->th[k].wait != DONE;
                aw += b->th[k].wait == AT_WARP;
            }
            if (lw > 0 && aw == lw) {
                for (int k = w * 32; k < n && k < w * 32 + 32; k++)
                    if (b->th[k].wait != DONE) /* a thread that returned stays returned */
                        b->th[k].wait = RUN;
                released = 1;
            }
        }
        for (int k = 0; k < n; k++) {
            live += b->th[k].wait != DONE;
            at_block += b->th[k].wait == AT_BLOCK;
        }
        if (live == 0)
            return;
        if (at_block == live) {
            for (int k = 0; k < n; k++)
                if (b->th[k].wait != DONE)
                    b->th[k].wait = RUN;
            released = 1;
        }
        if (!released) {
            fprintf(stderr,
                    "cuda_emu: divergent barriers in block (%u,%u,%u): threads wait at "
                    "different barriers\n",
                    b->bid.x, b->bid.y, b->bid.z);
            abort();
        }
    }
}

/* The grid's y and z limit: a GPU's 65535, or PT_EMU_GRID_YZ (tests make it
 * small to reach the limit with small shapes). */
inline unsigned grid_yz_max()
{
    const char *v = getenv("PT_EMU_GRID_YZ");
    const long n = v ? strtol(v, NULL, 10) : 0;
    return n >= 1 && n <= 65535 ? (unsigned)n : 65535u;
}

inline void launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()> &body)
{
    static unsigned long long seed = 12345;
    /* a launch a GPU refuses (cudaErrorInvalidConfiguration) is a bug here */
    const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || grid.x > 2147483647u || grid.y > grid_yz_max() ||
        grid.z > grid_yz_max() || !threads || threads > 1024 || block.z > 64) {
        fprintf(stderr, "cuda_emu: launch of grid (%u,%u,%u), block (%u,%u,%u) is past the "
                "device's limits (grid y and z at most %u)\n", grid.x, grid.y, grid.z, block.x,
                block.y, block.z, grid_yz_max());
        abort();
    }
    block_state *b = new block_state();
    b->grid = grid;
    b->block = block;
    b->body = &body;
    std::vector<unsigned char> smem(smem_bytes + 256);
    /* dynamic shared memory: 128-byte aligned, garbage-filled as on a GPU */
    b->smem = (unsigned char *)(((uintptr_t)smem.data() + 127) / 128 * 128);
    for (size_t i = 0; i < smem_bytes; i++)
        b->smem[i] = (unsigned char)(i * 131 + 7);
    block_state *saved = current();
    current() = b;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                b->bid.x = x, b->bid.y = y, b->bid.z = z;
                run_block(b, &seed);
            }
    current() = saved;
    delete b;
}

inline void check_align(const void *p, size_t n, const char *what)
{
    if ((uintptr_t)p % n) {
        fprintf(stderr, "cuda_emu: %s at %p is not %zu-byte aligned\n", what, p, n);
        abort();
    }
}

template <typename V>
inline V shfl_xor(V v, int mask)
{
    thread_state *t = me();
    block_state *b = current();
    b->shfl[t->warp][t->lane] = (double)v;
    wait_at(AT_WARP);
    V r = (V)b->shfl[t->warp][t->lane ^ mask];
    wait_at(AT_WARP);
    return r;
}

} /* namespace emu */

#define threadIdx (emu::me()->idx)
#define blockIdx (emu::current()->bid)
#define blockDim (emu::current()->block)
#define gridDim (emu::current()->grid)

static inline void __syncthreads(void)
{
    emu::wait_at(emu::AT_BLOCK);
}
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    emu::wait_at(emu::AT_WARP);
}
static inline float __shfl_xor_sync(unsigned, float v, int m)
{
    return emu::shfl_xor(v, m);
}
static inline double __shfl_xor_sync(unsigned, double v, int m)
{
    return emu::shfl_xor(v, m);
}
static inline int __shfl_xor_sync(unsigned, int v, int m)
{
    return emu::shfl_xor(v, m);
}

#define PT_LAUNCH(kernel, grid, block, smem, stream, ...)                                                    \
    emu::launch(dim3(grid), dim3(block), (size_t)(smem), [=]() { kernel(__VA_ARGS__); })
#define PT_DYNAMIC_SMEM(name) unsigned char *name = emu::current()->smem
#define PT_CHECK_ALIGN(p, n) emu::check_align((p), (n), #p)

/* ------------------------------------------------------------------ WMMA */

namespace nvcuda
{
namespace wmma
{
struct row_major {
};
struct col_major {
};
struct matrix_a {
};
struct matrix_b {
};
struct accumulator {
};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    T v[16 * 16]; /* (row, col) at v[row * 16 + col]; every lane holds the whole tile */
};

template <typename T>
inline float as_float(T x)
{
    return __bfloat162float(x);
}
template <>
inline float as_float<float>(float x)
{
    return x;
}

inline void check_ldm(const void *p, unsigned ldm, size_t elem)
{
    emu::check_align(p, 32, "wmma pointer");
    if ((ldm * elem) % 16) {
        fprintf(stderr, "cuda_emu: wmma ldm %u is not a multiple of 16 bytes\n", ldm);
        abort();
    }
}

template <typename Use, typename T, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm)
{
    check_ldm(p, ldm, sizeof(T));
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.v[r * 16 + c] =
                std::is_same<L, row_major>::value ? p[(size_t)r * ldm + c] : p[r + (size_t)c * ldm];
}

template <typename T>
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float, T> &f, float v)
{
    for (int i = 0; i < 256; i++)
        f.v[i] = v;
}

template <typename TA, typename LA, typename TB, typename LB>
inline void
mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, TA, LA> &a,
         const fragment<matrix_b, 16, 16, 16, TB, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c)
{
    float out[256];
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float s = c.v[m * 16 + n];
            for (int k = 0; k < 16; k++)
                s += as_float(a.v[m * 16 + k]) * as_float(b.v[k * 16 + n]);
            out[m * 16 + n] = s;
        }
    memcpy(d.v, out, sizeof out);
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                              layout_t layout)
{
    check_ldm(p, ldm, sizeof(float));
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            (layout == mem_row_major ? p[(size_t)r * ldm + c] : p[r + (size_t)c * ldm]) = f.v[r * 16 + c];
}
} /* namespace wmma */
} /* namespace nvcuda */

/* ---------------------------------------------------------------- runtime */

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorUnsupportedPtxVersion = 222,
    cudaErrorNotReady = 600
} cudaError_t;
typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;
enum { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2, cudaHostAllocDefault = 0 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };

struct cudaUUID_t {
    char bytes[16];
};
struct cudaDeviceProp {
    char name[256];
    cudaUUID_t uuid;
    size_t totalGlobalMem;
    int major, minor, multiProcessorCount;
    size_t sharedMemPerBlockOptin;
    int maxGridSize[3];
};

static inline const char *cudaGetErrorName(cudaError_t e)
{
    return e ? "cudaErrorEmulated" : "cudaSuccess";
}
static inline const char *cudaGetErrorString(cudaError_t e)
{
    return e ? "emulated error" : "no error";
}
static inline cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}
/* One GPU, or what PT_CUDA_EMU_DEVICES says (tests of the backend's
 * opening): "none" (the driver finds 0 devices), "nodriver" (no driver
 * installed), "broken" (one device, which fails to be set). */
static inline const char *emu_devices(void)
{
    const char *v = getenv("PT_CUDA_EMU_DEVICES");
    return v ? v : "";
}
static inline cudaError_t cudaGetDeviceCount(int *n)
{
    const int nodriver = strcmp(emu_devices(), "nodriver") == 0;
    *n = nodriver || strcmp(emu_devices(), "none") == 0 ? 0 : 1;
    return nodriver ? cudaErrorInsufficientDriver : cudaSuccess;
}
static inline cudaError_t cudaSetDevice(int d)
{
    return d == 0 && strcmp(emu_devices(), "broken") != 0 ? cudaSuccess : cudaErrorInvalidDevice;
}
static inline cudaError_t cudaGetDevice(int *d)
{
    *d = 0;
    return cudaSuccess;
}
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulation of CUDA");
    /* an H100's 80 GB, or PT_CUDA_EMU_MEMORY_MIB (tests of planning) */
    const char *mib = getenv("PT_CUDA_EMU_MEMORY_MIB");
    const long long m = mib ? strtoll(mib, NULL, 10) : 0;
    p->totalGlobalMem = m > 0 ? (size_t)m << 20 : (size_t)81559 << 20;
    memcpy(p->uuid.bytes, "CPU emulation 0", 16);
    p->major = 9;
    p->multiProcessorCount = 132;
    p->sharedMemPerBlockOptin = 227 * 1024;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = p->maxGridSize[2] = (int)emu::grid_yz_max();
    return cudaSuccess;
}
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned)
{
    *s = (cudaStream_t)1;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t)
{
    return cudaSuccess;
}
static inline cudaError_t cudaStreamQuery(cudaStream_t)
{
    return cudaSuccess;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t)
{
    return cudaSuccess;
}
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned)
{
    *e = (cudaEvent_t)1;
    return cudaSuccess;
}
static inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t)
{
    return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t)
{
    return cudaSuccess;
}
static inline cudaError_t cudaEventDestroy(cudaEvent_t)
{
    return cudaSuccess;
}
static inline cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = aligned_alloc(256, (n + 255) / 256 * 256);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaHostAlloc(void **p, size_t n, unsigned)
{
    return cudaMalloc(p, n);
}
static inline cudaError_t cudaFreeHost(void *p)
{
    return cudaFree(p);
}
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t)
{
    memset(p, v, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t)
{
    memmove(d, s, n);
    return cudaSuccess;
}
static inline cudaError_t cudaFuncSetAttribute(const void *, cudaFuncAttribute, int)
{
    return cudaSuccess;
}

#include "nn/cuda_emu_blas.h"

#endif
