/*
 * cpu64.c: opens the float64 oracle backend ("cpu64"), the CPU backend's op
 * files compiled with PT_REAL_F64 (nn/CMakeLists.txt). Its matrix products
 * are OpenBLAS's dgemm, run single-threaded on every thread of the pool (the
 * pool splits the work; OpenBLAS's OpenMP build would otherwise start its
 * own threads inside each task).
 */
#include "nn/backend.h"

#include <cblas.h>

static void blas_one_thread(void) { openblas_set_num_threads(1); }

int pt_backend_open_cpu64(pt_backend **out, int threads, pt_err *err)
{
    blas_one_thread();
    return pt_cpu_backend_open(out, "cpu64", &pt_cpu_ops_f64, sizeof(double), threads,
                               blas_one_thread, err);
}
