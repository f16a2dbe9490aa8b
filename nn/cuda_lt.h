/*
 * cuda_lt.h (internal to nn/): cuBLASLt, which the CUDA backend's matrix
 * products call, is opened with dlopen when the backend first opens on a GPU,
 * not linked: the library's constructor alone takes about 200 MB of memory
 * and 0.1 s in every process that loads it, which a CPU run, or a process
 * that only plans or exports, has no use for. Calls go through a table of
 * its functions: PT_LT(Matmul)(...) is cublasLtMatmul(...). Under the CPU
 * emulation (PT_CUDA_EMU) they are the emulated functions themselves.
 */
#ifndef PT_NN_CUDA_LT_H
#define PT_NN_CUDA_LT_H

#include <stddef.h>

#ifdef PT_CUDA_EMU
#define PT_LT(fn) cublasLt##fn
static inline int cuda_lt_load(char *msg, size_t size)
{
    (void)msg;
    (void)size;
    return 0;
}
#else
#include <cublasLt.h>

#define PT_LT_FUNCTIONS(X)                                                                                   \
    X(Create) X(Destroy) X(GetStatusString) X(Matmul) X(MatmulAlgoGetHeuristic) X(MatmulDescCreate)          \
        X(MatmulDescDestroy) X(MatmulDescSetAttribute) X(MatmulPreferenceCreate) X(MatmulPreferenceDestroy) \
            X(MatmulPreferenceSetAttribute) X(MatrixLayoutCreate) X(MatrixLayoutDestroy)

struct cuda_lt_api {
#define PT_LT_MEMBER(fn) decltype(&::cublasLt##fn) fn;
    PT_LT_FUNCTIONS(PT_LT_MEMBER)
#undef PT_LT_MEMBER
};
extern cuda_lt_api cuda_lt;
#define PT_LT(fn) (cuda_lt.fn)

/* Opens cuBLASLt and fills cuda_lt, once per process (later calls return
 * the first one's result); 0, or -1 with why in msg. C linkage for
 * tests/gpu/test_cuda_lt.c. */
extern "C" int cuda_lt_load(char *msg, size_t size);
#endif

#endif
