/*
 * weights.c: parameters of a segment to and from safetensors. The tensor
 * list comes from nn's unit descriptions, so names, shapes and order are the
 * ones the model defines; nothing here knows a layer. Loaded weights must be
 * finite: a NaN or Inf is refused naming the file and the tensor.
 */
#include "interop/interop.h"

#include "formats/formats.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The index in f of parameter p with its shape (*at). */
static int find_param(pt_st_file *f, const char *path, const pt_param_info *p, int *at, pt_err *err)
{
    const int i = pt_st_find(f, p->name);
    if (i < 0)
        return pt_fail(err, PT_EINPUT, "'%s' has no tensor '%s' (the model needs it)", path, p->name);
    const pt_st_entry *e = pt_st_entry_at(f, i);
    int same = e->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++)
        same = e->shape[d] == p->shape[d];
    if (!same) {
        char want[96], got[96];
        pt_st_shape_text(p->ndim, p->shape, want, sizeof want);
        pt_st_shape_text(e->ndim, e->shape, got, sizeof got);
        return pt_fail(err, PT_EINPUT, "'%s': tensor '%s' has shape %s; the model needs %s", path,
                       p->name, got, want);
    }
    *at = i;
    return 0;
}

/* A tensor of f that no unit of the whole model has, refused naming it. */
static int unknown_tensor(const pt_arch *a, const pt_st_file *f, const char *path, pt_err *err)
{
    for (int i = 0; i < pt_st_count(f); i++) {
        const char *name = pt_st_entry_at(f, i)->name;
        int known = 0;
        for (int u = 0; !known && u < pt_arch_units(a); u++) {
            pt_unit_info info;
            pt_unit_info_get(a, u, &info);
            for (int k = 0; k < info.n_params; k++)
                known |= strcmp(info.params[k].name, name) == 0;
        }
        if (!known)
            return pt_fail(err, PT_EINPUT,
                           "'%s' has tensor '%s', which this model does not have (model.* keys "
                           "differ from the model that was saved?)",
                           path, name);
    }
    return 0;
}

int pt_weights_check_shapes(const pt_arch *a, const char *path, pt_err *err)
{
    pt_st_file *f;
    int rc = pt_st_open(&f, path, err);
    if (rc)
        return rc;
    for (int u = 0; rc == 0 && u < pt_arch_units(a); u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        for (int k = 0, at; rc == 0 && k < info.n_params; k++)
            rc = find_param(f, path, &info.params[k], &at, err);
    }
    if (rc == 0)
        rc = unknown_tensor(a, f, path, err);
    pt_st_close(f);
    return rc;
}

int pt_weights_check_recorded(const pt_arch *a, const char *path, const char **key, int *recorded,
                              pt_err *err)
{
    *key = NULL;
    *recorded = 0;
    pt_st_file *f;
    int rc = pt_st_open(&f, path, err);
    if (rc)
        return rc;
    const char *heads = pt_st_metadata(f, "model.heads"), *eps = pt_st_metadata(f, "model.ln_eps");
    char *end = "";
    long h = 0;
    double e = 0;
    if (heads) {
        errno = 0;
        h = strtol(heads, &end, 10);
    }
    if (heads && (errno || end == heads || *end || h < 1 || h > INT32_MAX))
        rc = pt_fail(err, PT_EINPUT, "'%s': its metadata's model.heads is '%.40s', not a count of "
                     "heads", path, heads);
    if (rc == 0 && eps) {
        e = strtod(eps, &end);
        if (end == eps || *end || !(e > 0 && e < 1))
            rc = pt_fail(err, PT_EINPUT, "'%s': its metadata's model.ln_eps is '%.40s', not a "
                         "LayerNorm epsilon", path, eps);
    }
    if (rc == 0 && heads && h != a->heads) {
        *key = "model.heads";
        rc = pt_fail(err, PT_EINPUT, "%d, but model.init_from's weights '%s' are of a model of "
                     "%ld heads (their metadata's model.heads): split into %d they compute "
                     "another function; set model.heads: %ld",
                     a->heads, path, h, a->heads, h);
    }
    if (rc == 0 && eps && e != pt_arch_ln_eps(a)) {
        *key = "model.ln_eps";
        char mine[40];
        pt_number_text(pt_arch_ln_eps(a), mine, sizeof mine);
        rc = pt_fail(err, PT_EINPUT, "%s, but model.init_from's weights '%s' are of a model "
                     "trained with %s (their metadata's model.ln_eps); set model.ln_eps: %s",
                     mine, path, eps, eps);
    }
    *recorded = (heads ? PT_RECORDED_HEADS : 0) | (eps ? PT_RECORDED_LN_EPS : 0);
    pt_st_close(f);
    return rc;
}

int pt_weights_load(pt_segment *s, const char *path, pt_err *err)
{
    const pt_arch *a = pt_segment_arch(s);
    pt_st_file *f;
    int rc = pt_st_open(&f, path, err);
    if (rc)
        return rc;
    int used = 0;
    float *host = NULL;
    for (int u = pt_segment_first(s); rc == 0 && u < pt_segment_first(s) + pt_segment_count(s); u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        free(host);
        host = malloc(info.numel * sizeof *host);
        if (!host) {
            rc = pt_fail(err, PT_ENOMEM, "out of memory loading '%s'", path);
            break;
        }
        for (int k = 0; rc == 0 && k < info.n_params; k++) {
            const pt_param_info *p = &info.params[k];
            int i = -1;
            if ((rc = find_param(f, path, p, &i, err)) ||
                (rc = pt_st_read_f32(f, i, host + p->offset, p->numel, err)))
                break;
            used++;
            /* a NaN or Inf would only show later, as a loss of nan at step 1 */
            const float *w = host + p->offset;
            for (size_t j = 0; j < p->numel; j++)
                if (!isfinite(w[j])) {
                    rc = pt_fail(err, PT_EINPUT,
                                 "'%s': tensor '%s' holds %s at element %zu of %zu%s; weights "
                                 "must be finite numbers",
                                 path, p->name, isnan(w[j]) ? "NaN" : "Inf", j, p->numel,
                                 isnan(w[j]) ? "" : " (or a number beyond float32's range)");
                    break;
                }
        }
        if (rc == 0)
            rc = pt_segment_unit_set(s, u, PT_PART_PARAM, host, err);
    }
    free(host);
    /* what this segment did not use may be another stage's: every name is
     * looked up in the whole model, so the file is refused or taken alike
     * whatever the layout */
    if (rc == 0 && used != pt_st_count(f))
        rc = unknown_tensor(a, f, path, err);
    pt_st_close(f);
    return rc;
}

int pt_weights_save(const pt_segment *s, const char *path, const char *const *meta, pt_err *err)
{
    const pt_arch *a = pt_segment_arch(s);
    const int first = pt_segment_first(s), count = pt_segment_count(s);
    int n = 0;
    size_t total = 0;
    for (int u = first; u < first + count; u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        n += info.n_params;
        total += info.numel;
    }
    float *host = malloc(total * sizeof *host);
    pt_st_tensor *t = calloc((size_t)n, sizeof *t);
    pt_param_info *params = calloc((size_t)n, sizeof *params);
    int rc = 0;
    if (!host || !t || !params) {
        rc = pt_fail(err, PT_ENOMEM, "out of memory writing '%s'", path);
        goto done;
    }
    size_t at = 0;
    int i = 0;
    for (int u = first; u < first + count && rc == 0; u++) {
        pt_unit_info info;
        pt_unit_info_get(a, u, &info);
        if ((rc = pt_segment_unit_get(s, u, PT_PART_PARAM, host + at, err)))
            break;
        for (int k = 0; k < info.n_params; k++, i++) {
            params[i] = info.params[k];
            t[i] = (pt_st_tensor){params[i].name, params[i].ndim, params[i].shape,
                                  host + at + params[i].offset};
        }
        at += info.numel;
    }
    if (rc == 0)
        rc = pt_st_write(path, t, n, meta, err);
done:
    free(host);
    free(t);
    free(params);
    return rc;
}
