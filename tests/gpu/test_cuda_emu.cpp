/*
 * test_cuda_emu: the CPU emulation of CUDA (nn/cuda_emu.h) itself, on
 * patterns that are legal CUDA: threads that return before the others reach
 * a barrier (__syncthreads, and __syncwarp in a partial warp) stay returned,
 * and the rest are released and finish. The emulation used to resume the
 * returned threads from stale state (a crash, or code run twice). Run under
 * each thread order (PT_CUDA_EMU_ORDER).
 */
#include "nn/cuda_emu.h"

#include <cstdio>

/* threads at or above `live` return; the rest meet at a block barrier */
__global__ void early_return_block(int *out, int live)
{
    const int t = threadIdx.x;
    if (t >= live)
        return;
    __shared__ int seen[256];
    seen[t] = t + 1;
    __syncthreads();
    out[t] = seen[live - 1 - t] + 1000 * (out[t] + 1); /* out[t] counts the runs */
}

/* half the lanes return; the others meet at a warp barrier of their mask */
__global__ void early_return_warp(int *out)
{
    const int t = threadIdx.x;
    if (t >= 16)
        return;
    __shared__ int seen[32];
    seen[t] = t;
    __syncwarp(0xffffu);
    out[t] = seen[15 - t] + 1000 * (out[t] + 1);
}

int main(void)
{
    int failed = 0;
    static int buf[256];
    int *out = buf; /* a pointer: the launch's lambda copies what it captures */
    for (int live = 1; live <= 256; live += 39) {
        for (int i = 0; i < 256; i++)
            out[i] = 0;
        PT_LAUNCH(early_return_block, 1, 256, 0, 0, out, live);
        for (int t = 0; t < 256; t++) {
            const int want = t < live ? (live - t) + 1000 : 0;
            if (out[t] != want) {
                fprintf(stderr, "block, %d live: thread %d wrote %d, expected %d\n", live, t, out[t],
                        want);
                failed = 1;
                break;
            }
        }
    }
    for (int i = 0; i < 32; i++)
        out[i] = 0;
    PT_LAUNCH(early_return_warp, 1, 32, 0, 0, out);
    for (int t = 0; t < 32; t++) {
        const int want = t < 16 ? (15 - t) + 1000 : 0;
        if (out[t] != want) {
            fprintf(stderr, "warp: lane %d wrote %d, expected %d\n", t, out[t], want);
            failed = 1;
            break;
        }
    }
    printf("cuda_emu early returns: %s\n", failed ? "FAILED" : "passed");
    return failed;
}
