/*
 * checkpoint.c: the checkpoint directory format (see checkpoint.h) on top of
 * recfile and jansson.
 *
 * Binding. Every save makes a checkpoint id (128 random bits). Each unit file
 * starts with a "checkpoint" record naming that id, the step and the file's
 * own name; the manifest names the id and lists every file with its size and
 * SHA-256. A reader uses a file only when its size and digest are the ones
 * the manifest lists and its record names the manifest's id, step and the
 * name it is found under; a manifest is used only in the step directory of
 * its own step. So files mixed between checkpoints, steps or runs are refused
 * with a message that says so, whatever else they hold.
 *
 * The manifest is one JSON record (training state, architecture, which file
 * holds which unit, the files' digests, the freeze state and the config as
 * YAML text); unit files hold float32 little-endian arrays, one record per
 * unit part.
 */
#include "launch/checkpoint.h"

#include "formats/formats.h"
#include "launch/session.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "unit files store float32 arrays in host order, which must be little-endian");

static const char MANIFEST_MAGIC[8] = {'P', 'T', 'C', 'K', 'M', 'A', 'N', '1'};
static const char UNITS_MAGIC[8] = {'P', 'T', 'U', 'N', 'I', 'T', 'S', '1'};
/* 2: JSON manifest binding its files by SHA-256 and checkpoint id */
enum { FORMAT_VERSION = 2 };
enum { ID_CHARS = 32, FILE_NAME_MAX = 64 };

/* A file the user pointed at that cannot be opened is bad input (exit
 * status 2), like a missing config, not an internal failure. */
static int input_error(int rc, pt_err *err)
{
    if (rc == PT_ESYS && err)
        err->code = PT_EINPUT;
    return rc == PT_ESYS ? PT_EINPUT : rc;
}

static void units_file(int stage, char *out, size_t n) { snprintf(out, n, "units-stage%d.bin", stage); }

/* ------------------------------------------------------------ arch record */

static const struct {
    const char *name; /* in the manifest */
    const char *says; /* what to tell the user: the config key behind it */
    size_t off;
} arch_fields[] = {
    {"kind", "model.kind", offsetof(pt_arch, kind)},
    {"dim", "model.dim", offsetof(pt_arch, dim)},
    {"layers", "model.layers", offsetof(pt_arch, layers)},
    {"heads", "model.heads", offsetof(pt_arch, heads)},
    {"mlp_hidden", "model.mlp_hidden", offsetof(pt_arch, mlp_hidden)},
    {"causal", "model.kind (causal attention)", offsetof(pt_arch, causal)},
    {"channels", "the image channels of the data", offsetof(pt_arch, channels)},
    {"height", "the image height of the data", offsetof(pt_arch, height)},
    {"width", "the image width of the data", offsetof(pt_arch, width)},
    {"patch", "model.patch", offsetof(pt_arch, patch)},
    {"classes", "model.classes", offsetof(pt_arch, classes)},
    {"vocab", "the vocabulary of the data", offsetof(pt_arch, vocab)},
    {"context", "model.context", offsetof(pt_arch, context)},
};
enum { ARCH_FIELDS = sizeof arch_fields / sizeof arch_fields[0] };
_Static_assert(sizeof(pt_model_kind) == sizeof(int), "arch fields are read as int");

static json_t *arch_json(const pt_arch *a)
{
    json_t *o = json_object();
    for (int i = 0; o && i < ARCH_FIELDS; i++)
        json_object_set_new(o, arch_fields[i].name,
                            json_integer(*(const int *)((const char *)a + arch_fields[i].off)));
    json_object_set_new(o, "init_std", json_real(a->init_std));
    json_object_set_new(o, "seed", json_integer((json_int_t)a->seed));
    return o;
}

static int arch_read(const json_t *o, pt_arch *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 0; i < ARCH_FIELDS; i++) {
        const json_t *v = json_object_get(o, arch_fields[i].name);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return -1;
        *(int *)((char *)a + arch_fields[i].off) = (int)json_integer_value(v);
    }
    const json_t *std = json_object_get(o, "init_std"), *seed = json_object_get(o, "seed");
    if ((a->kind != PT_MODEL_VIT && a->kind != PT_MODEL_GPT) || !json_is_number(std) ||
        !json_is_integer(seed) || json_integer_value(seed) < 0)
        return -1;
    a->init_std = json_number_value(std);
    a->seed = (uint64_t)json_integer_value(seed);
    return 0;
}

/* Names the first architecture field that differs, or returns NULL. */
static const char *arch_difference(const pt_arch *saved, const pt_arch *now, int *was, int *is)
{
    for (int i = 0; i < ARCH_FIELDS; i++) {
        int a = *(const int *)((const char *)saved + arch_fields[i].off);
        int b = *(const int *)((const char *)now + arch_fields[i].off);
        if (a != b) {
            *was = a;
            *is = b;
            return arch_fields[i].says;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------ save */

/* What a unit-owning rank tells the manifest writer about its file. */
typedef struct file_entry {
    char name[FILE_NAME_MAX]; /* "" when this rank wrote nothing */
    uint64_t bytes;
    unsigned char sha256[32];
} file_entry;

static int write_units(const pt_run *r, const char *path, const char *id, const char *name,
                       pt_err *err)
{
    pt_recwriter *w;
    int rc = pt_recwriter_open(&w, path, UNITS_MAGIC, FORMAT_VERSION, err);
    if (rc)
        return rc;
    json_t *own = json_pack("{s:s, s:I, s:s}", "checkpoint", id, "step", (json_int_t)r->step,
                            "file", name);
    char *text = own ? json_dumps(own, JSON_COMPACT) : NULL;
    json_decref(own);
    rc = text ? pt_recwriter_add(w, "checkpoint", text, strlen(text), err)
              : pt_fail(err, PT_ENOMEM, "out of memory saving a checkpoint");
    free(text);
    if (rc == 0)
        rc = pt_test_fault("checkpoint-writing", r->rank, r->step, err);
    const pt_segment *s = r->seg;
    const int first = pt_segment_first(s), count = pt_segment_count(s);
    float *host = NULL;
    for (int u = first; rc == 0 && u < first + count; u++) {
        pt_unit_info info;
        pt_unit_info_get(&r->arch, u, &info);
        free(host);
        host = malloc(info.numel * sizeof *host + 1);
        if (!host) {
            rc = pt_fail(err, PT_ENOMEM, "out of memory saving a checkpoint");
            break;
        }
        static const char *suffix[] = {"param", "grad", "m", "v"};
        const pt_part parts[] = {PT_PART_PARAM, PT_PART_M, PT_PART_V};
        const int frozen = u - first < pt_segment_frozen(s);
        for (int k = 0; rc == 0 && k < (frozen ? 1 : 3); k++) {
            char tag[96];
            snprintf(tag, sizeof tag, "%s.%s", info.name, suffix[parts[k]]);
            if ((rc = pt_segment_unit_get(s, u, parts[k], host, err)) == 0)
                rc = pt_recwriter_add(w, tag, host, info.numel * sizeof *host, err);
        }
    }
    free(host);
    if (rc) {
        pt_recwriter_abort(w);
        return rc;
    }
    return pt_recwriter_commit(w, err);
}

static json_t *manifest_json(const pt_session *ss, const char *id, const file_entry *files, int n)
{
    const pt_run *r = &ss->run;
    json_t *units = json_object(), *listed = json_object();
    for (int st = 0; st < r->plan.stages; st++) {
        char file[FILE_NAME_MAX];
        units_file(st, file, sizeof file);
        for (int u = r->plan.bounds[st]; u < r->plan.bounds[st + 1]; u++) {
            pt_unit_info info;
            pt_unit_info_get(&r->arch, u, &info);
            json_object_set_new(units, info.name, json_string(file));
        }
    }
    for (int i = 0; i < n; i++) {
        if (!files[i].name[0])
            continue;
        char hex[65];
        pt_hex(files[i].sha256, 32, hex);
        json_object_set_new(listed, files[i].name,
                            json_pack("{s:I, s:s}", "bytes", (json_int_t)files[i].bytes, "sha256", hex));
    }
    char *config = NULL;
    size_t config_len = 0;
    FILE *f = open_memstream(&config, &config_len);
    if (f) {
        pt_config_write_yaml(&ss->cfg, f);
        fclose(f);
    }
    json_t *m = json_pack(
        "{s:i, s:s, s:I, s:I, s:I, s:I, s:I, s:{s:i, s:f, s:f, s:I, s:I}, s:i, s:o, s:o, s:o, s:o, "
        "s:s?}",
        "format", FORMAT_VERSION, "checkpoint", id, "step", (json_int_t)r->step, "epoch",
        (json_int_t)r->epoch, "epoch_step", (json_int_t)r->epoch_step, "batch",
        (json_int_t)ss->cfg.train.batch, "seed", (json_int_t)ss->cfg.run.seed, "lr", "kind",
        (int)r->lr.kind, "base", r->lr.base, "min", r->lr.min_lr, "warmup", (json_int_t)r->lr.warmup,
        "total", (json_int_t)r->lr.total, "frozen_units", r->frozen_units, "arch", arch_json(&r->arch),
        "freeze", pt_freeze_to_json(&r->freeze), "units", units, "files", listed, "config", config);
    free(config);
    return m;
}

static int write_manifest(const pt_session *s, const char *dir, const char *id,
                          const file_entry *files, int n, pt_err *err)
{
    char path[PT_CKPT_PATH];
    pt_path_join(path, dir, "manifest");
    json_t *m = manifest_json(s, id, files, n);
    char *text = m && json_object_size(m) ? json_dumps(m, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(m);
    if (!text)
        return pt_fail(err, PT_ENOMEM, "out of memory writing the manifest of %s", dir);
    pt_recwriter *w;
    int rc = pt_recwriter_open(&w, path, MANIFEST_MAGIC, FORMAT_VERSION, err);
    if (rc == 0 && (rc = pt_recwriter_add(w, "manifest", text, strlen(text), err)))
        pt_recwriter_abort(w);
    else if (rc == 0)
        rc = pt_recwriter_commit(w, err);
    free(text);
    return rc;
}

int pt_checkpoint_save(pt_session *s, pt_err *err)
{
    pt_run *r = &s->run;
    pt_group *world = pt_comm_world(s->comm);
    char dir[PT_CKPT_PATH], path[PT_CKPT_PATH];
    pt_step_dir(s->cfg.run.dir, r->step, dir, sizeof dir);
    /* rank 0 (replica 0's stage 0) makes the id and an empty step directory;
     * replica 0's stages write their units (each unit once) and report the
     * file's digest; rank 0 writes the manifest last, naming them all */
    char id[ID_CHARS + 1] = "";
    int rc = 0;
    if (r->rank == 0) {
        pt_unique_id(id, sizeof id);
        rc = pt_rundir_prepare_step(dir, err);
        if (rc == 0)
            rc = pt_test_fault("checkpoint-prepared", r->rank, r->step, err);
    }
    if ((rc = pt_run_agree(r, rc, err)) || (rc = pt_bcast(world, id, sizeof id, 0, err)))
        return pt_err_prefix(err, "saving checkpoint %s", dir);
    file_entry mine;
    memset(&mine, 0, sizeof mine);
    if (pt_run_writes_units(r)) {
        units_file(r->stage, mine.name, sizeof mine.name);
        rc = write_units(r, pt_path_join(path, dir, mine.name), id, mine.name, err);
        if (rc == 0)
            rc = pt_sha256_file(path, mine.sha256, &mine.bytes, err);
    }
    if (rc == 0)
        rc = pt_test_fault("checkpoint", r->rank, r->step, err);
    if ((rc = pt_run_agree(r, rc, err)))
        return pt_err_prefix(err, "saving checkpoint %s", dir);
    const int n = r->ranks;
    file_entry *all = calloc((size_t)n, sizeof *all);
    rc = all ? pt_allgather(world, &mine, all, sizeof mine, err)
             : pt_fail(err, PT_ENOMEM, "out of memory saving a checkpoint");
    if (rc == 0 && r->rank == 0) {
        rc = write_manifest(s, dir, id, all, n, err);
        if (rc == 0)
            rc = pt_test_fault("checkpoint-manifest", r->rank, r->step, err);
        if (rc == 0)
            pt_rundir_prune(s->cfg.run.dir, s->cfg.train.keep_checkpoints, r->step);
    }
    free(all);
    if ((rc = pt_run_agree(r, rc, err)))
        return pt_err_prefix(err, "saving checkpoint %s", dir);
    return 0;
}

/* ------------------------------------------------------------------ load */

typedef struct manifest {
    pt_recfile *f;
    json_t *j;
    const char *dir;
    const char *id;
    int64_t step;
    const json_t *units, *files;
} manifest;

static void manifest_close(manifest *m)
{
    json_decref(m->j);
    pt_recfile_close(m->f);
    memset(m, 0, sizeof *m);
}

/* The step in a directory's name "step_N" (trailing slashes ignored), or -1
 * when it is not named so (a checkpoint copied elsewhere by the user). */
static int64_t step_of_dir(const char *dir)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    size_t at = len;
    while (at > 0 && dir[at - 1] != '/')
        at--;
    char name[64];
    if (len - at >= sizeof name)
        return -1;
    memcpy(name, dir + at, len - at);
    name[len - at] = '\0';
    int64_t step;
    return pt_checkpoint_dir_step(name, &step) ? step : -1;
}

static int manifest_open(manifest *m, const char *dir, pt_err *err)
{
    char path[PT_CKPT_PATH];
    uint32_t version;
    memset(m, 0, sizeof *m);
    m->dir = dir;
    pt_path_join(path, dir, "manifest");
    int rc = pt_recfile_open(&m->f, path, MANIFEST_MAGIC, &version, err);
    if (rc)
        return input_error(rc, err);
    const void *text;
    uint64_t len;
    if (version != FORMAT_VERSION)
        rc = pt_fail(err, PT_EINPUT, "'%s': checkpoint format %u; this pipetrain reads format %d",
                     path, version, FORMAT_VERSION);
    else if ((rc = pt_recfile_find(m->f, "manifest", &text, &len, err)) == 0 &&
             (rc = pt_json_load(&m->j, text, (size_t)len, err)))
        pt_err_prefix(err, "'%s'", path);
    const json_t *id = json_object_get(m->j, "checkpoint"), *step = json_object_get(m->j, "step");
    m->units = json_object_get(m->j, "units");
    m->files = json_object_get(m->j, "files");
    if (rc == 0 && (!json_is_string(id) || json_string_length(id) != ID_CHARS ||
                    !json_is_integer(step) || json_integer_value(step) < 0 ||
                    !json_is_object(m->units) || !json_is_object(m->files)))
        rc = pt_fail(err, PT_EINPUT, "'%s': the manifest lacks its checkpoint id, step, units or "
                     "files (or one of them is malformed)", path);
    if (rc == 0) {
        m->id = json_string_value(id);
        m->step = (int64_t)json_integer_value(step);
        int64_t named = step_of_dir(dir);
        if (named >= 0 && named != m->step)
            rc = pt_fail(err, PT_EINPUT, "'%s' is the manifest of step %" PRId64 " but lies in the "
                         "directory of step %" PRId64 ": files of different checkpoints were mixed",
                         path, m->step, named);
    }
    if (rc)
        manifest_close(m);
    return rc;
}

int pt_checkpoint_read_config(const char *dir, pt_config *cfg, pt_arch *arch, pt_err *err)
{
    manifest m;
    int rc = manifest_open(&m, dir, err);
    if (rc)
        return rc;
    pt_config_defaults(cfg);
    char name[PT_CKPT_PATH];
    snprintf(name, sizeof name, "%s/manifest (config record)", dir);
    const json_t *config = json_object_get(m.j, "config");
    if (!json_is_string(config))
        rc = pt_fail(err, PT_EINPUT, "'%s/manifest' holds no config", dir);
    else
        rc = pt_config_load_text(cfg, json_string_value(config), json_string_length(config), name, err);
    if (rc == 0 && arch_read(json_object_get(m.j, "arch"), arch))
        rc = pt_fail(err, PT_EINPUT, "'%s/manifest': the architecture record is malformed", dir);
    manifest_close(&m);
    return rc;
}

/* Opens unit file `file` of the checkpoint after checking that it is the one
 * the manifest lists (size, SHA-256) and that it names the manifest's
 * checkpoint id, step and its own name. */
static int open_unit_file(const manifest *m, const char *file, pt_recfile **out, pt_err *err)
{
    char path[PT_CKPT_PATH];
    pt_path_join(path, m->dir, file);
    const json_t *listed = json_object_get(m->files, file);
    const json_t *bytes = json_object_get(listed, "bytes"), *sha = json_object_get(listed, "sha256");
    if (!json_is_integer(bytes) || !json_is_string(sha) || json_string_length(sha) != 64)
        return pt_fail(err, PT_EINPUT, "'%s/manifest' names unit file '%s' but does not list its "
                       "size and SHA-256", m->dir, file);
    unsigned char digest[32];
    uint64_t size;
    char hex[65];
    int rc = pt_sha256_file(path, digest, &size, err);
    if (rc)
        return input_error(rc, err);
    pt_hex(digest, 32, hex);
    if (size != (uint64_t)json_integer_value(bytes) || strcmp(hex, json_string_value(sha)) != 0)
        return pt_fail(err, PT_EINPUT, "'%s' is not the file this checkpoint's manifest lists (%s): "
                       "it was changed, damaged or copied from another checkpoint",
                       path, size != (uint64_t)json_integer_value(bytes) ? "other size" : "other SHA-256");
    uint32_t version;
    if ((rc = pt_recfile_open(out, path, UNITS_MAGIC, &version, err)))
        return input_error(rc, err);
    const void *text;
    uint64_t len;
    json_t *own = NULL;
    if (version != FORMAT_VERSION)
        rc = pt_fail(err, PT_EINPUT, "'%s': unit file format %u, expected %d", path, version,
                     FORMAT_VERSION);
    else if ((rc = pt_recfile_find(*out, "checkpoint", &text, &len, err)) == 0 &&
             (rc = pt_json_load(&own, text, (size_t)len, err)))
        pt_err_prefix(err, "'%s'", path);
    const char *id = json_string_value(json_object_get(own, "checkpoint"));
    const char *name = json_string_value(json_object_get(own, "file"));
    const json_t *step = json_object_get(own, "step");
    if (rc == 0 && (!id || !name || !json_is_integer(step) || strcmp(id, m->id) != 0 ||
                    strcmp(name, file) != 0 || json_integer_value(step) != m->step))
        rc = pt_fail(err, PT_EINPUT, "'%s' belongs to checkpoint %.32s (step %lld, file %s), not to "
                     "this manifest's %s (step %" PRId64 "): files of different checkpoints were mixed",
                     path, id ? id : "?", json_is_integer(step) ? (long long)json_integer_value(step) : -1LL,
                     name ? name : "?", m->id, m->step);
    json_decref(own);
    if (rc) {
        pt_recfile_close(*out);
        *out = NULL;
    }
    return rc;
}

/* Reads parameters (and moments when `moments`) of every unit of the
 * segment from the unit files the manifest names. */
static int load_units(pt_segment *s, const manifest *m, int moments, pt_err *err)
{
    const pt_arch *arch = pt_segment_arch(s);
    const int first = pt_segment_first(s), count = pt_segment_count(s);
    int rc = 0;
    pt_recfile *f = NULL;
    char open_name[FILE_NAME_MAX] = "";
    for (int u = first; rc == 0 && u < first + count; u++) {
        pt_unit_info info;
        pt_unit_info_get(arch, u, &info);
        const char *file = json_string_value(json_object_get(m->units, info.name));
        if (!file || strlen(file) >= FILE_NAME_MAX || strchr(file, '/') || !strcmp(file, "manifest")) {
            rc = pt_fail(err, PT_EINPUT, "'%s/manifest' does not say which file holds unit %s",
                         m->dir, info.name);
            break;
        }
        if (strcmp(file, open_name) != 0) {
            pt_recfile_close(f);
            f = NULL;
            if ((rc = open_unit_file(m, file, &f, err)))
                break;
            snprintf(open_name, sizeof open_name, "%s", file);
        }
        static const char *suffix[] = {"param", "grad", "m", "v"};
        const pt_part parts[] = {PT_PART_PARAM, PT_PART_M, PT_PART_V};
        const int frozen = u - first < pt_segment_frozen(s);
        for (int k = 0; rc == 0 && k < (moments && !frozen ? 3 : 1); k++) {
            char tag[96];
            const void *data;
            uint64_t len;
            snprintf(tag, sizeof tag, "%s.%s", info.name, suffix[parts[k]]);
            if ((rc = pt_recfile_find(f, tag, &data, &len, err)))
                break;
            if (len != info.numel * sizeof(float)) {
                rc = pt_fail(err, PT_EINPUT,
                             "'%s': %s holds %" PRIu64 " values; the model's unit has %zu",
                             pt_recfile_path(f), tag, len / sizeof(float), info.numel);
                break;
            }
            float *host = malloc(len + 1);
            if (!host) {
                rc = pt_fail(err, PT_ENOMEM, "out of memory loading a checkpoint");
                break;
            }
            memcpy(host, data, len);
            rc = pt_segment_unit_set(s, u, parts[k], host, err);
            free(host);
        }
    }
    pt_recfile_close(f);
    return rc;
}

static int check_arch(const pt_arch *now, const manifest *m, pt_err *err)
{
    pt_arch saved;
    if (arch_read(json_object_get(m->j, "arch"), &saved))
        return pt_fail(err, PT_EINPUT, "'%s/manifest': the architecture record is malformed", m->dir);
    int was, is;
    const char *field = arch_difference(&saved, now, &was, &is);
    if (field)
        return pt_fail(err, PT_EINPUT,
                       "checkpoint %s holds a model with %s = %d, this config makes %s = %d",
                       m->dir, field, was, field, is);
    return 0;
}

int pt_checkpoint_load_segment(pt_segment *seg, const char *dir, pt_err *err)
{
    manifest m;
    int rc = manifest_open(&m, dir, err);
    if (rc == 0) {
        if ((rc = check_arch(pt_segment_arch(seg), &m, err)) == 0)
            rc = load_units(seg, &m, 0, err);
        manifest_close(&m);
    }
    return rc;
}

int pt_checkpoint_load_weights(pt_session *s, const char *dir, pt_err *err)
{
    int rc = s->run.active ? pt_checkpoint_load_segment(s->run.seg, dir, err) : 0;
    return pt_run_agree(&s->run, rc, err);
}

/* The training state of the manifest (everything but units and arch). */
typedef struct saved_state {
    int64_t epoch, epoch_step, batch, seed, frozen;
    pt_lr_schedule lr;
} saved_state;

static int read_state(const manifest *m, saved_state *st, pt_err *err)
{
    char what[PT_CKPT_PATH + 32];
    snprintf(what, sizeof what, "'%s/manifest': the state is malformed", m->dir);
    const json_t *lr = json_object_get(m->j, "lr");
    int64_t kind = 0;
    int rc;
    if ((rc = pt_json_get_i64(m->j, "epoch", &st->epoch, what, err)) ||
        (rc = pt_json_get_i64(m->j, "epoch_step", &st->epoch_step, what, err)) ||
        (rc = pt_json_get_i64(m->j, "batch", &st->batch, what, err)) ||
        (rc = pt_json_get_i64(m->j, "seed", &st->seed, what, err)) ||
        (rc = pt_json_get_i64(m->j, "frozen_units", &st->frozen, what, err)) ||
        (rc = pt_json_get_i64(lr, "kind", &kind, what, err)) ||
        (rc = pt_json_get_f64(lr, "base", &st->lr.base, what, err)) ||
        (rc = pt_json_get_f64(lr, "min", &st->lr.min_lr, what, err)) ||
        (rc = pt_json_get_i64(lr, "warmup", &st->lr.warmup, what, err)) ||
        (rc = pt_json_get_i64(lr, "total", &st->lr.total, what, err)))
        return rc;
    if (st->epoch < 0 || st->epoch_step < 0 || kind < 0 || kind > PT_LR_LINEAR)
        return pt_fail(err, PT_EINPUT, "%s: epoch %" PRId64 ", epoch_step %" PRId64
                       ", lr.kind %" PRId64 " out of range", what, st->epoch, st->epoch_step, kind);
    st->lr.kind = (pt_lr_kind)kind;
    return 0;
}

static int load_state(pt_session *ss, const char *dir, pt_err *err)
{
    pt_run *r = &ss->run;
    manifest m;
    saved_state st;
    memset(&st, 0, sizeof st);
    /* every rank goes through the same collectives whatever fails where */
    int rc = manifest_open(&m, dir, err);
    if (rc == 0 && (rc = read_state(&m, &st, err)) == 0 && (rc = check_arch(&r->arch, &m, err)) == 0) {
        if (st.batch != ss->cfg.train.batch)
            rc = pt_fail(err, PT_EINPUT,
                         "checkpoint %s was saved with train.batch = %" PRId64 ", this config has %lld; "
                         "the data position is only exact with the same batch",
                         dir, st.batch, ss->cfg.train.batch);
        else if (st.seed != ss->cfg.run.seed)
            rc = pt_fail(err, PT_EINPUT,
                         "checkpoint %s was saved with run.seed = %" PRId64 ", this config has %lld; "
                         "set it back to resume the same data order",
                         dir, st.seed, ss->cfg.run.seed);
        else if (st.epoch_step > 0 && st.epoch_step >= pt_sampler_steps(&r->sampler))
            rc = pt_fail(err, PT_EINPUT,
                         "checkpoint %s is %" PRId64 " batches into an epoch of %" PRId64
                         " batches: the training data changed",
                         dir, st.epoch_step, pt_sampler_steps(&r->sampler));
        else if ((rc = pt_freeze_from_json(&r->freeze, json_object_get(m.j, "freeze"), err)))
            pt_err_prefix(err, "'%s/manifest'", dir);
        else if (st.frozen != pt_freeze_units(r->freeze.depth))
            rc = pt_fail(err, PT_EINPUT,
                         "'%s/manifest': frozen_units = %" PRId64 " does not match %d frozen blocks",
                         dir, st.frozen, r->freeze.depth);
    }
    /* every rank learns whether the state was good before the layout changes */
    if ((rc = pt_run_agree(r, rc, err)) == 0 && st.frozen > 0) {
        /* lay the stages out for the frozen prefix first: which units each
         * rank holds, and which of them keep moments, depend on it */
        r->frozen_units = (int)st.frozen;
        rc = pt_layout_replan(r, NULL, err);
    }
    if (rc == 0 && r->active)
        rc = load_units(r->seg, &m, 1, err);
    if (rc == 0) {
        r->step = m.step;
        r->epoch = st.epoch;
        r->epoch_step = st.epoch_step;
        /* The schedule follows the config, as a PyTorch scheduler follows the
         * arguments it is built with: resuming with more epochs or another
         * train.lr trains the new steps with the new schedule. Only a changed
         * schedule is worth a note; with the same config the steps are exact. */
        const pt_lr_schedule *was = &st.lr, *now = &r->lr;
        const int same = was->kind == now->kind && was->base == now->base &&
                         was->min_lr == now->min_lr && was->warmup == now->warmup &&
                         was->total == now->total;
        if (!same && r->rank == 0)
            fprintf(stderr,
                    "pipetrain: note: the learning-rate schedule differs from the checkpoint's "
                    "(%s, lr %g, min_lr %g, warm-up %" PRId64 ", over %" PRId64 " steps, now "
                    "%s, lr %g, min_lr %g, warm-up %" PRId64 ", over %" PRId64 "); step %" PRId64
                    " onwards follows the new one\n",
                    pt_config_word("train.schedule", (int)was->kind), was->base, was->min_lr,
                    was->warmup, was->total, pt_config_word("train.schedule", (int)now->kind),
                    now->base, now->min_lr, now->warmup, now->total, m.step + 1);
    }
    if (m.j || m.f)
        manifest_close(&m);
    return rc;
}

int pt_checkpoint_load(pt_session *s, const char *dir, pt_err *err)
{
    return pt_run_agree(&s->run, load_state(s, dir, err), err);
}
