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
#include <string.h>

cuda_lt_api cuda_lt;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char failure[512]; /* empty once loaded */

/* Opens name and resolves every function into *api: 0, or -1 with why in
 * failure. */
static int try_load(const char *name, cuda_lt_api *api)
{
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(failure, sizeof failure, "%.400s", why ? why : name);
        return -1;
    }
#define PT_LT_RESOLVE(fn)                                                                                    \
    if (!(*(void **)&api->fn = dlsym(lib, "cublasLt" #fn))) {                                                \
        snprintf(failure, sizeof failure, "%.400s has no function cublasLt" #fn, name);                      \
        dlclose(lib);                                                                                        \
        return -1;                                                                                           \
    }
    PT_LT_FUNCTIONS(PT_LT_RESOLVE)
#undef PT_LT_RESOLVE
    return 0;
}

static void load(void)
{
    const char *names[] = {PT_CUBLASLT_SONAME, PT_CUBLASLT_PATH};
    char why[2][sizeof failure];
    for (int k = 0; k < 2; k++) {
        cuda_lt_api api;
        if (try_load(names[k], &api) == 0) {
            cuda_lt = api;
            failure[0] = 0;
            return;
        }
        memcpy(why[k], failure, sizeof failure);
    }
    snprintf(failure, sizeof failure,
             "cannot load cuBLASLt, which the CUDA backend's matrix products need: %.200s; %.200s",
             why[0], why[1]);
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
