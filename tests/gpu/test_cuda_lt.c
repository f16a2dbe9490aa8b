/*
 * test_cuda_lt.c (label unit; CUDA builds): cuBLASLt is not linked but
 * opened when the CUDA backend opens on a GPU (nn/cuda_lt.h), so a process
 * that trains on the CPU never maps it (its constructor alone took about
 * 200 MB and 0.1 s in every process). Runs without a GPU: a CUDA backend
 * that finds no device leaves the library unopened; the loader then opens
 * it (the toolkit is installed where this builds) and finds every function
 * the backend calls, and a second call gives the same answer.
 */
#include "tests/common/cunit_main.h"

#include "nn/nn.h"

#include <stdio.h>
#include <string.h>

int cuda_lt_load(char *msg, size_t size); /* nn/cuda_lt.cu */

/* Whether a library whose file name starts with name is mapped. */
static int mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        const char *slash = strrchr(line, '/');
        if (slash && strncmp(slash + 1, name, strlen(name)) == 0)
            found = 1;
    }
    fclose(f);
    return found;
}

static void opened_only_when_asked(void)
{
    CU_ASSERT_FALSE(mapped("libcublasLt.so"));
    pt_backend *be = NULL;
    pt_err err = {0};
    const int rc = pt_backend_open(&be, "cuda", 1, &err);
    if (rc == 0) { /* a GPU: the backend opened the library */
        CU_ASSERT_TRUE(mapped("libcublasLt.so"));
        pt_backend_close(be);
    } else {
        CU_ASSERT_EQUAL(rc, PT_ENODEV);
        CU_ASSERT_FALSE(mapped("libcublasLt.so"));
    }
    char msg[512] = "";
    CU_ASSERT_EQUAL(cuda_lt_load(msg, sizeof msg), 0);
    if (msg[0])
        printf("\n  %s", msg);
    CU_ASSERT_TRUE(mapped("libcublasLt.so"));
    CU_ASSERT_EQUAL(cuda_lt_load(msg, sizeof msg), 0);
}

static const pt_test tests[] = {{"opened_only_when_asked", opened_only_when_asked}, {NULL, NULL}};

static const pt_test_suite suites[] = {{"cuda_lt", tests}, {NULL, NULL}};
