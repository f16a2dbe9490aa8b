/*
 * backend.c: opening a backend by name and the public wrappers around the
 * ops table that code outside nn/ may use (memory and host copies only; the
 * math stays behind the units).
 *
 * A CPU backend of T threads owns a thread pool of T threads (nn/cpu_pool.h:
 * the caller and T - 1 workers, started here and joined when it closes),
 * and it is the only set of threads the backend runs on: OpenBLAS, which
 * the backward's products call from every thread of the pool, is set to one
 * thread on each of them. Debian's OpenBLAS is its OpenMP build, which
 * takes its thread count from the calling thread's OpenMP setting: a
 * thread that never set it would make OpenBLAS start OpenMP threads of its
 * own (and switch every later call to them), so each worker sets it first.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "nn/backend.h"
#include "nn/cpu_pool.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#ifdef PT_HAVE_CUDA
int pt_cuda_backend_open(pt_backend **out, int bf16, int device, int threads, pt_err *err);
#endif

/* The CPUs this process may run on (at least 1). */
static int usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

int pt_cpu_backend_open(pt_backend **out, const char *name, const pt_ops *ops, size_t real_size,
                        int threads, void (*thread_init)(void), pt_err *err)
{
    *out = NULL;
    pt_backend *be = calloc(1, sizeof *be);
    if (!be)
        return pt_fail(err, PT_ENOMEM, "out of memory opening the %s backend", name);
    be->ops = ops;
    be->name = name;
    be->real_size = be->act_size = real_size;
    be->threads = threads > 0 ? threads : usable_cpus();
    pt_pool *pool;
    const int rc = pt_pool_create(&pool, be->threads, thread_init);
    if (rc) {
        const int be_threads = be->threads;
        free(be);
        return pt_fail(err, rc == ENOMEM ? PT_ENOMEM : PT_ESYS,
                       "cannot start the %s backend's %d threads: %s", name, be_threads,
                       strerror(rc));
    }
    be->impl = pool;
    *out = be;
    return 0;
}

int pt_backend_open(pt_backend **out, const char *name, int threads, pt_err *err)
{
    *out = NULL;
    if (strcmp(name, "cpu") == 0)
        return pt_cpu_backend_open(out, "cpu", &pt_cpu_ops_f32, sizeof(float), threads, NULL, err);
    if (strcmp(name, "cpu64") == 0)
        return pt_fail(err, PT_EINPUT, "backend 'cpu64' (the float64 oracle) is not part of "
                       "this program: tests open it with pt_backend_open_cpu64 (pt_nn_oracle)");
    /* cuda, cuda-bf16, each with an optional :N (the GPU) */
    size_t base = strcspn(name, ":");
    int bf16 = base == 9 && strncmp(name, "cuda-bf16", 9) == 0;
    if ((base == 4 && strncmp(name, "cuda", 4) == 0) || bf16) {
        int device = 0;
        if (name[base] == ':') {
            char *end;
            long v = strtol(name + base + 1, &end, 10);
            if (end == name + base + 1 || *end || v < 0 || v > 1 << 20)
                return pt_fail(err, PT_EINPUT, "backend '%s': the GPU after ':' must be a number",
                               name);
            device = (int)v;
        }
#ifdef PT_HAVE_CUDA
        return pt_cuda_backend_open(out, bf16, device, threads, err);
#else
        (void)device;
        return pt_fail(err, PT_ENODEV,
                       "device '%s' was asked for, but this pipetrain was built without CUDA", name);
#endif
    }
    return pt_fail(err, PT_EINPUT, "unknown backend '%s' (expected cpu, cuda or cuda-bf16)",
                   name);
}

void pt_backend_close(pt_backend *be)
{
    if (be && be->ops->close)
        be->ops->close(be);
    free(be);
}

const char *pt_backend_name(const pt_backend *be) { return be->name; }
size_t pt_backend_real_size(const pt_backend *be) { return be->real_size; }
size_t pt_backend_act_size(const pt_backend *be) { return be->act_size; }
int pt_backend_threads(const pt_backend *be) { return be->threads; }

void pt_backend_waiting(const pt_backend *be, char *buf, size_t size)
{
    if (size)
        buf[0] = '\0';
    /* a CPU backend's impl is its pool, of be->threads threads */
    if (pt_backend_is_host(be) && be->threads > 1)
        pt_pool_describe(be->impl, buf, size);
}
void *pt_backend_alloc(pt_backend *be, size_t bytes) { return be->ops->alloc(be, bytes); }

void pt_backend_free(pt_backend *be, void *p)
{
    if (p)
        be->ops->free(be, p);
}

void pt_backend_copy(pt_backend *be, void *dst, const void *src, size_t bytes)
{
    be->ops->copy(be, dst, src, bytes);
}

void pt_backend_upload(pt_backend *be, void *dst, const void *host, size_t bytes)
{
    be->ops->upload(be, dst, host, bytes);
}

void pt_backend_download(pt_backend *be, void *host, const void *src, size_t bytes)
{
    be->ops->download(be, host, src, bytes);
}

void *pt_backend_device_stream(pt_backend *be, int *device, int *devices)
{
    *device = -1;
    *devices = 0;
    return be->ops->device_stream ? be->ops->device_stream(be, device, devices) : NULL;
}

int pt_backend_device_info(const pt_backend *be, pt_device_info *out)
{
    memset(out, 0, sizeof *out);
    if (!be->ops->device_info)
        return 0;
    be->ops->device_info(be, out);
    return 1;
}

int pt_backend_is_host(const pt_backend *be) { return strncmp(be->name, "cuda", 4) != 0; }

void pt_backend_release_work(pt_backend *be)
{
    if (be->ops->release_work)
        be->ops->release_work(be);
}

void pt_backend_act_from_host(pt_backend *be, void *dst, const float *src, size_t n)
{
    be->ops->act_from_f32(be, dst, src, n);
}

void pt_backend_act_to_host(pt_backend *be, float *dst, const void *src, size_t n)
{
    be->ops->act_to_f32(be, dst, src, n);
}

int pt_backend_sync(pt_backend *be, pt_err *err) { return be->ops->sync(be, err); }
