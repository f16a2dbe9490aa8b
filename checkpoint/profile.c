/*
 * profile.c: the planner's measured inputs as JSON (checkpoint.h).
 *
 *   {"format": "pipetrain-profile-1", "model": {...the manifest's arch...},
 *    "ranks": R, "node_of": [R node indexes], "cores": C, "threads": T,
 *    "backend": "cpu", "ram_bytes_per_rank": B, "links": {"intra_bytes_per_s", "inter_bytes_per_s",
 *    "latency_s"}, "costs": {"batch": [small, large],
 *    "boundary_bytes_per_example", "units": [{"fwd": [2], "bwd": [2],
 *    "param_bytes", "state_bytes", "saved_bytes": [2], "scratch_bytes": [2]}]}}
 *
 * Numbers are written with 17 significant digits (jansson's default), so a
 * profile read back is the same doubles and plans the same layouts.
 */
#include "checkpoint/format.h"

#include "formats/formats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROFILE_FORMAT "pipetrain-profile-1"
/* bounds of what a profile may claim, generous for any machine we plan for
 * and small enough that the planner's sums of them stay finite */
enum { MAX_RANKS = 1 << 20, MAX_CORES = 1 << 20, MAX_THREADS = 1 << 16, MAX_BATCH = 1 << 24,
       MAX_FILE = 16 << 20 }; /* a million ranks and 4096 units: about 10 MiB */
#define MAX_SECONDS 1e6   /* a unit's time per micro-batch; a latency */
#define MAX_BYTES 1e17    /* a unit's memory; bytes per example at a stage boundary */
#define MAX_RATE 1e15     /* a link's bytes per second */

static json_t *pair(const double v[2])
{
    return json_pack("[o, o]", pt_json_number(v[0]), pt_json_number(v[1]));
}

json_t *pt_profile_json(const pt_profile *p, const pt_arch *arch)
{
    json_t *nodes = json_array(), *units = json_array();
    int failed = !nodes || !units;
    for (int q = 0; !failed && q < p->ranks; q++)
        failed = json_array_append_new(nodes, json_integer(p->node_of[q])) != 0;
    for (int u = 0; !failed && u < p->cost.units; u++) {
        const pt_unit_cost *c = &p->cost.unit[u];
        failed = json_array_append_new(units, json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}", "fwd", pair(c->fwd),
                                               "bwd", pair(c->bwd), "param_bytes",
                                               pt_json_number(c->param_bytes), "state_bytes",
                                               pt_json_number(c->state_bytes), "saved_bytes",
                                               pair(c->saved_bytes), "scratch_bytes",
                                               pair(c->scratch_bytes))) != 0;
    }
    if (failed) {
        json_decref(nodes);
        json_decref(units);
        return NULL;
    }
    return json_pack("{s:s, s:o, s:i, s:o, s:i, s:i, s:s, s:o, s:{s:o, s:o, s:o}, s:{s:[i, i], s:o, s:o}}",
                     "format", PROFILE_FORMAT, "model", pt_ckpt_arch_json(arch), "ranks", p->ranks,
                     "node_of", nodes, "cores", p->cores, "threads", p->threads, "backend",
                     p->backend, "ram_bytes_per_rank", pt_json_number(p->memory_per_rank), "links", "intra_bytes_per_s", pt_json_number(p->bw_intra),
                     "inter_bytes_per_s", pt_json_number(p->bw_inter), "latency_s",
                     pt_json_number(p->latency), "costs", "batch", p->cost.batch[0],
                     p->cost.batch[1], "boundary_bytes_per_example",
                     pt_json_number(p->cost.boundary_bytes_per_example), "units", units);
}

/* ---------------------------------------------------------------- reading */

static int bad(pt_err *err, const char *where, const char *key, const char *what)
{
    return pt_fail(err, PT_EINPUT, "%s: profile key '%s' %s", where, key, what);
}

static int get_int(const json_t *o, const char *name, const char *key, long long lo, long long hi,
                   int *v, const char *where, pt_err *err)
{
    const json_t *j = json_object_get(o, name);
    char what[96];
    snprintf(what, sizeof what, "must be an integer from %lld to %lld", lo, hi);
    if (!json_is_integer(j) || json_integer_value(j) < lo || json_integer_value(j) > hi)
        return bad(err, where, key, j ? what : "is missing");
    *v = (int)json_integer_value(j);
    return 0;
}

/* A number from 0 to max (not -0). */
static int get_num(const json_t *j, const char *key, double max, double *v, const char *where,
                   pt_err *err)
{
    const double x = json_is_number(j) ? json_number_value(j) : -1;
    if (!(x >= 0 && x <= max) || signbit(x)) {
        char what[64];
        snprintf(what, sizeof what, "must be a number from 0 to %g", max);
        return bad(err, where, key, j ? what : "is missing");
    }
    *v = x;
    return 0;
}

static int get_pair(const json_t *o, const char *name, const char *prefix, double max, double v[2],
                    const char *where, pt_err *err);

/* A measured time: a pair of numbers above 0 (nothing runs in no time; a
 * profile of zeros would leave the planner nothing to choose by). */
static int get_times(const json_t *o, const char *name, const char *prefix, double v[2],
                     const char *where, pt_err *err)
{
    int rc = get_pair(o, name, prefix, MAX_SECONDS, v, where, err);
    /* a measurement: at least the clock's tick (a nanosecond); smaller
     * ones (5e-324) vanish from the planner's sums, which then read as
     * nothing profiled */
    for (int i = 0; rc == 0 && i < 2; i++)
        if (!(v[i] >= 1e-9)) {
            char key[112];
            snprintf(key, sizeof key, "%s.%s[%d]", prefix, name, i);
            rc = bad(err, where, key, "must be a time of at least 1e-09 seconds (a measurement)");
        }
    return rc;
}

static int get_pair(const json_t *o, const char *name, const char *prefix, double max, double v[2],
                    const char *where, pt_err *err)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", prefix, name);
    const json_t *a = json_object_get(o, name);
    if (!json_is_array(a) || json_array_size(a) != 2)
        return bad(err, where, key, a ? "must be a list of 2 numbers" : "is missing");
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < 2; i++) {
        char item[112];
        snprintf(item, sizeof item, "%s[%zu]", key, i);
        rc = get_num(json_array_get(a, i), item, max, &v[i], where, err);
    }
    return rc;
}

static int parse_unit(const json_t *o, int u, pt_unit_cost *c, const char *where, pt_err *err)
{
    char key[64];
    snprintf(key, sizeof key, "costs.units[%d]", u);
    if (!json_is_object(o))
        return bad(err, where, key, "must be a mapping");
    char k2[96];
    int rc = get_times(o, "fwd", key, c->fwd, where, err);
    if (rc == 0)
        rc = get_times(o, "bwd", key, c->bwd, where, err);
    if (rc == 0)
        rc = get_pair(o, "saved_bytes", key, MAX_BYTES, c->saved_bytes, where, err);
    if (rc == 0)
        rc = get_pair(o, "scratch_bytes", key, MAX_BYTES, c->scratch_bytes, where, err);
    if (rc == 0) {
        snprintf(k2, sizeof k2, "%s.param_bytes", key);
        rc = get_num(json_object_get(o, "param_bytes"), k2, MAX_BYTES, &c->param_bytes, where, err);
    }
    if (rc == 0) {
        snprintf(k2, sizeof k2, "%s.state_bytes", key);
        rc = get_num(json_object_get(o, "state_bytes"), k2, MAX_BYTES, &c->state_bytes, where, err);
    }
    return rc;
}

static int parse_model(const json_t *o, const pt_arch *arch, const char *where, pt_err *err)
{
    pt_arch saved;
    memset(&saved, 0, sizeof saved);
    const char *field, *allowed;
    if (pt_ckpt_arch_read(json_object_get(o, "model"), &saved, &field, &allowed)) {
        if (!json_object_get(o, "model"))
            return bad(err, where, "model", "is missing");
        char key[64], what[128];
        snprintf(key, sizeof key, "model%s%s", *field ? "." : "", field);
        snprintf(what, sizeof what, "is missing or malformed; allowed: %s", allowed);
        return bad(err, where, key, what);
    }
    int was = 0, is = 0;
    const char *key = pt_ckpt_arch_difference(&saved, arch, &was, &is);
    if (key)
        return pt_fail(err, PT_EINPUT, "%s: the profile was measured for another model (%s was %d "
                       "there, is %d here)", where, key, was, is);
    return 0;
}

int pt_profile_parse(const json_t *o, const pt_arch *arch, const char *where, pt_profile *out,
                     pt_err *err)
{
    memset(out, 0, sizeof *out);
    if (!json_is_object(o))
        return pt_fail(err, PT_EINPUT, "%s: a profile must be a JSON object", where);
    const json_t *format = json_object_get(o, "format");
    if (!json_is_string(format) || strcmp(json_string_value(format), PROFILE_FORMAT) != 0)
        return bad(err, where, "format", "must be \"" PROFILE_FORMAT "\" (not a pipetrain profile, "
                   "or one of another version)");
    int rc = parse_model(o, arch, where, err);
    if (rc == 0)
        rc = get_int(o, "ranks", "ranks", 1, MAX_RANKS, &out->ranks, where, err);
    if (rc == 0)
        rc = get_int(o, "cores", "cores", 1, MAX_CORES, &out->cores, where, err);
    if (rc == 0)
        rc = get_int(o, "threads", "threads", 1, MAX_THREADS, &out->threads, where, err);
    const json_t *be = json_object_get(o, "backend");
    if (rc == 0 && (!json_is_string(be) || json_string_length(be) == 0 ||
                    json_string_length(be) >= sizeof out->backend ||
                    strlen(json_string_value(be)) != json_string_length(be)))
        rc = bad(err, where, "backend", be ? "must be a backend name" : "is missing");
    if (rc == 0)
        snprintf(out->backend, sizeof out->backend, "%s", json_string_value(be));
    const json_t *nodes = json_object_get(o, "node_of");
    if (rc == 0 && (!json_is_array(nodes) || json_array_size(nodes) != (size_t)out->ranks))
        rc = bad(err, where, "node_of", nodes ? "must list one node index per rank" : "is missing");
    if (rc == 0 && !(out->node_of = malloc((size_t)out->ranks * sizeof *out->node_of)))
        rc = pt_fail(err, PT_ENOMEM, "out of memory for a profile");
    for (int q = 0; rc == 0 && q < out->ranks; q++) {
        const json_t *j = json_array_get(nodes, (size_t)q);
        char key[48];
        snprintf(key, sizeof key, "node_of[%d]", q);
        if (!json_is_integer(j) || json_integer_value(j) < 0 || json_integer_value(j) >= out->ranks)
            rc = bad(err, where, key, "must be a node index from 0 to ranks - 1");
        else
            out->node_of[q] = (int)json_integer_value(j);
    }
    if (rc == 0)
        rc = get_num(json_object_get(o, "ram_bytes_per_rank"), "ram_bytes_per_rank", MAX_BYTES,
                     &out->memory_per_rank, where, err);
    const json_t *links = json_object_get(o, "links");
    if (rc == 0 && !json_is_object(links))
        rc = bad(err, where, "links", links ? "must be a mapping" : "is missing");
    if (rc == 0)
        rc = get_num(json_object_get(links, "intra_bytes_per_s"), "links.intra_bytes_per_s",
                     MAX_RATE, &out->bw_intra, where, err);
    if (rc == 0)
        rc = get_num(json_object_get(links, "inter_bytes_per_s"), "links.inter_bytes_per_s",
                     MAX_RATE, &out->bw_inter, where, err);
    if (rc == 0)
        rc = get_num(json_object_get(links, "latency_s"), "links.latency_s", MAX_SECONDS,
                     &out->latency, where, err);
    const json_t *costs = json_object_get(o, "costs");
    if (rc == 0 && !json_is_object(costs))
        rc = bad(err, where, "costs", costs ? "must be a mapping" : "is missing");
    const json_t *units = json_object_get(costs, "units");
    const json_t *batch = json_object_get(costs, "batch");
    if (rc == 0 && (!json_is_array(units) ||
                    (json_array_size(units) != 0 && json_array_size(units) != (size_t)pt_arch_units(arch))))
        rc = bad(err, where, "costs.units", units ? "must list the costs of every unit of the model "
                 "(or none)" : "is missing");
    if (rc == 0 && (!json_is_array(batch) || json_array_size(batch) != 2))
        rc = bad(err, where, "costs.batch", batch ? "must be a list of 2 micro-batch sizes" : "is missing");
    for (int i = 0; rc == 0 && i < 2; i++) {
        const json_t *j = json_array_get(batch, (size_t)i);
        char key[32];
        snprintf(key, sizeof key, "costs.batch[%d]", i);
        if (!json_is_integer(j) || json_integer_value(j) < 0 || json_integer_value(j) > MAX_BATCH)
            rc = bad(err, where, key, "must be an integer from 0 to 16777216");
        else
            out->cost.batch[i] = (int)json_integer_value(j);
    }
    if (rc == 0)
        rc = get_num(json_object_get(costs, "boundary_bytes_per_example"),
                     "costs.boundary_bytes_per_example", MAX_BYTES,
                     &out->cost.boundary_bytes_per_example, where, err);
    if (rc == 0) {
        out->cost.units = (int)json_array_size(units);
        if (!(out->cost.unit = calloc((size_t)out->cost.units + 1, sizeof *out->cost.unit)))
            rc = pt_fail(err, PT_ENOMEM, "out of memory for a profile");
    }
    for (int u = 0; rc == 0 && u < out->cost.units; u++)
        rc = parse_unit(json_array_get(units, (size_t)u), u, &out->cost.unit[u], where, err);
    if (rc)
        pt_profile_free(out);
    return rc;
}

int pt_profile_read(const char *path, const pt_arch *arch, pt_profile *out, pt_err *err)
{
    memset(out, 0, sizeof *out);
    void *text = NULL;
    size_t n = 0;
    json_t *o = NULL;
    int rc = pt_read_file(path, MAX_FILE, &text, &n, err);
    if (rc == 0 && (rc = pt_json_load(&o, text, n, err)))
        pt_err_prefix(err, "'%s'", path);
    free(text);
    if (rc == 0) {
        char where[PT_PATH_MAX + 8];
        snprintf(where, sizeof where, "'%s'", path);
        rc = pt_profile_parse(o, arch, where, out, err);
    }
    json_decref(o);
    return pt_err_input(rc, err);
}

int pt_profile_write(const char *path, const pt_profile *p, const pt_arch *arch, pt_err *err)
{
    json_t *o = pt_profile_json(p, arch);
    char *text = o ? json_dumps(o, JSON_INDENT(1)) : NULL;
    json_decref(o);
    if (!text)
        return pt_fail(err, PT_ENOMEM, "out of memory writing the profile %s", path);
    int rc = pt_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}
