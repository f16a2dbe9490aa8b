/*
 * cuda_lt.cu: opens cuBLASLt at run time (cuda_lt.h says why). The library
 * is looked for by its soname, as the loader would (LD_LIBRARY_PATH, the
 * program's run path, the system's directories), then where the build found
 * it.
 */
#include "nn/cuda_lt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

cuda_lt_api cuda_lt;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char failure[512]; /* empty once loaded */

static void load(void)
{
    char first[240] = "";
    void *lib = dlopen(PT_CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(first, sizeof first, "%s", why ? why : "not found");
        lib = dlopen(PT_CUBLASLT_PATH, RTLD_NOW | RTLD_LOCAL);
    }
    if (!lib) {
        const char *why = dlerror();
        snprintf(failure, sizeof failure,
                 "cannot load cuBLASLt, which the CUDA backend's matrix products need: %s; %.200s",
                 first, why ? why : "not found");
        return;
    }
    cuda_lt_api api;
#define PT_LT_RESOLVE(fn)                                                                                    \
    if (!(*(void **)&api.fn = dlsym(lib, "cublasLt" #fn))) {                                                 \
        snprintf(failure, sizeof failure, "%s has no function cublasLt" #fn, PT_CUBLASLT_SONAME);            \
        dlclose(lib);                                                                                        \
        return;                                                                                              \
    }
    PT_LT_FUNCTIONS(PT_LT_RESOLVE)
#undef PT_LT_RESOLVE
    cuda_lt = api;
    failure[0] = 0;
}

extern "C" int cuda_lt_load(char *msg, size_t size)
{
    pthread_once(&once, load);
    if (!failure[0])
        return 0;
    if (size)
        snprintf(msg, size, "%s", failure);
    return -1;
}
