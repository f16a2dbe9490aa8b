/*
 * save.c: the checkpoint directory format (see checkpoint.h) on top of
 * recfile and jansson, and saving checkpoints; read.c reads them (format.h
 * holds what both sides share).
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
#include "checkpoint/format.h"
#include "formats/formats.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "unit files store float32 arrays in host order, which must be little-endian");

static void units_file(int stage, char *out, size_t n) { snprintf(out, n, "units-stage%d.bin", stage); }

/* ------------------------------------------------------------ arch record */

static const struct {
    const char *name; /* in the manifest */
    const char *says; /* what to tell the user: the config key behind it */
    const char *key;  /* the config key that sets it (images: data.image_size for generated
                       * ones; pt_ckpt_arch_key says which for files) */
    size_t off;
    int since_bert;   /* 1: absent from manifests written before bert existed (read as 0) */
} arch_fields[] = {
    {"kind", "model.kind", "model.kind", offsetof(pt_arch, kind), 0},
    {"dim", "model.dim", "model.dim", offsetof(pt_arch, dim), 0},
    {"layers", "model.layers", "model.layers", offsetof(pt_arch, layers), 0},
    {"heads", "model.heads", "model.heads", offsetof(pt_arch, heads), 0},
    {"mlp_hidden", "model.mlp_hidden", "model.mlp_hidden", offsetof(pt_arch, mlp_hidden), 0},
    {"causal", "model.kind (causal attention)", "model.kind", offsetof(pt_arch, causal), 0},
    {"channels", "the image channels of the data", "data.image_size", offsetof(pt_arch, channels), 0},
    {"height", "the image height of the data", "data.image_size", offsetof(pt_arch, height), 0},
    {"width", "the image width of the data", "data.image_size", offsetof(pt_arch, width), 0},
    {"patch", "model.patch", "model.patch", offsetof(pt_arch, patch), 0},
    {"classes", "model.classes", "model.classes", offsetof(pt_arch, classes), 0},
    {"vocab", "the vocabulary of the data", "model.vocab", offsetof(pt_arch, vocab), 0},
    {"context", "model.context", "model.context", offsetof(pt_arch, context), 0},
    {"positions", "model.positions", "model.positions", offsetof(pt_arch, positions), 1},
    {"type_vocab", "model.type_vocab", "model.type_vocab", offsetof(pt_arch, type_vocab), 1},
    {"pad_id", "the [PAD] id", "data.vocab", offsetof(pt_arch, pad_id), 1},
};
enum { ARCH_FIELDS = sizeof arch_fields / sizeof arch_fields[0] };
_Static_assert(sizeof(pt_model_kind) == sizeof(int), "arch fields are read as int");

json_t *pt_ckpt_arch_json(const pt_arch *a)
{
    json_t *o = json_object();
    for (int i = 0; o && i < ARCH_FIELDS; i++)
        json_object_set_new(o, arch_fields[i].name,
                            json_integer(*(const int *)((const char *)a + arch_fields[i].off)));
    json_object_set_new(o, "init_std", json_real(a->init_std));
    json_object_set_new(o, "ln_eps", json_real(a->ln_eps));
    json_object_set_new(o, "hidden_dropout", json_real(a->hidden_dropout));
    json_object_set_new(o, "attn_dropout", json_real(a->attn_dropout));
    json_object_set_new(o, "seed", json_integer((json_int_t)a->seed));
    return o;
}

/* A probability in [0, 1) at key, or absent (0: manifests from before
 * dropout, whose runs had none). */
static int read_dropout(const json_t *o, const char *key, double *out)
{
    const json_t *v = json_object_get(o, key);
    *out = v ? json_number_value(v) : 0;
    return !v || (json_is_number(v) && *out >= 0 && *out < 1) ? 0 : -1;
}

/* -1 with *bad the field and *allowed what it may be */
static int bad_field(const char **bad, const char **allowed, const char *field, const char *what)
{
    *bad = field;
    *allowed = what;
    return -1;
}

int pt_ckpt_arch_read(const json_t *o, pt_arch *a, const char **bad, const char **allowed)
{
    memset(a, 0, sizeof *a);
    *bad = *allowed = "";
    if (!json_is_object(o))
        return bad_field(bad, allowed, "", "an object");
    for (int i = 0; i < ARCH_FIELDS; i++) {
        const json_t *v = json_object_get(o, arch_fields[i].name);
        if (!v && arch_fields[i].since_bert)
            continue;
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return bad_field(bad, allowed, arch_fields[i].name, "an integer from 0 to 2147483647");
        *(int *)((char *)a + arch_fields[i].off) = (int)json_integer_value(v);
    }
    const json_t *std = json_object_get(o, "init_std"), *seed = json_object_get(o, "seed");
    const json_t *eps = json_object_get(o, "ln_eps");
    if (a->kind != PT_MODEL_VIT && a->kind != PT_MODEL_GPT && a->kind != PT_MODEL_BERT)
        return bad_field(bad, allowed, "kind", "0 (vit), 1 (gpt) or 2 (bert)");
    if (!json_is_number(std) || !isfinite(json_number_value(std)))
        return bad_field(bad, allowed, "init_std", "a finite number");
    if (!json_is_integer(seed) || json_integer_value(seed) < 0)
        return bad_field(bad, allowed, "seed", "an integer >= 0");
    if (eps && !(json_is_number(eps) && json_number_value(eps) >= 0 && json_number_value(eps) < 1))
        return bad_field(bad, allowed, "ln_eps", "a number >= 0 and < 1, or absent");
    if (read_dropout(o, "hidden_dropout", &a->hidden_dropout))
        return bad_field(bad, allowed, "hidden_dropout", "a number >= 0 and < 1, or absent");
    if (read_dropout(o, "attn_dropout", &a->attn_dropout))
        return bad_field(bad, allowed, "attn_dropout", "a number >= 0 and < 1, or absent");
    a->ln_eps = eps ? json_number_value(eps) : 0;
    a->init_std = json_number_value(std);
    a->seed = (uint64_t)json_integer_value(seed);
    return 0;
}

const char *pt_ckpt_arch_key(const char *says, const pt_config *c, int evaluating)
{
    for (int i = 0; i < ARCH_FIELDS; i++)
        if (strcmp(says, arch_fields[i].says) == 0) {
            const char *key = arch_fields[i].key;
            /* images from files: their size is the files' (an evaluation
             * reads the test split's alone) */
            if (strcmp(key, "data.image_size") == 0 && c->data.kind != PT_DATA_SYNTH_IMAGES)
                return evaluating ? "data.test_images" : pt_config_data_key(c);
            return key;
        }
    return says; /* a key already (model.ln_eps, model.dropout, ...) */
}

const char *pt_ckpt_arch_difference(const pt_arch *saved, const pt_arch *now, int *was, int *is)
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
    char name[PT_CKPT_FILE_MAX]; /* "" when this rank wrote nothing */
    uint64_t bytes;
    unsigned char sha256[32];
} file_entry;

/* A checkpoint holds finite numbers only: a NaN or Inf in the weights or
 * moments (a diverged update) is refused rather than saved, so the newest
 * checkpoint stays one a resume, eval or export can use. */
static int all_finite(const float *x, size_t n, size_t at, const char *tag, int64_t step,
                      pt_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return pt_fail(err, PT_EINPUT, "%s holds %s at element %zu after step %lld: training "
                           "diverged, and this is not saved (try a lower train.lr or a "
                           "train.grad_clip)", tag, isnan(x[i]) ? "NaN" : "Inf", at + i,
                           (long long)step);
    return 0;
}

/* One part of a unit as a record, through a host buffer of PT_CKPT_PIECE
 * values: saving needs no copy of the largest unit beside the training
 * state (which the memory planner does not count). */
static int write_part(pt_recwriter *w, const pt_segment *s, int u, pt_part part,
                      const pt_unit_info *info, const char *tag, int64_t step, float *host,
                      pt_err *err)
{
    int rc = pt_recwriter_begin(w, tag, info->numel * sizeof *host, err);
    for (size_t at = 0; rc == 0 && at < info->numel; at += PT_CKPT_PIECE) {
        size_t n = info->numel - at < PT_CKPT_PIECE ? info->numel - at : PT_CKPT_PIECE;
        if ((rc = pt_segment_unit_read(s, u, part, at, n, host, err)) == 0 &&
            (rc = all_finite(host, n, at, tag, step, err)) == 0)
            rc = pt_recwriter_write(w, host, n * sizeof *host, err);
        /* the other ranks wait for this save: it is making progress */
        pt_comm_busy("writing its checkpoint");
    }
    return rc;
}

static int write_units(const pt_run *r, const char *path, const char *id, const char *name,
                       pt_err *err)
{
    pt_recwriter *w;
    int rc = pt_recwriter_open(&w, path, PT_CKPT_UNITS_MAGIC, PT_CKPT_FORMAT, err);
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
    float *host = malloc(PT_CKPT_PIECE * sizeof *host);
    if (!host && rc == 0)
        rc = pt_fail(err, PT_ENOMEM, "out of memory saving a checkpoint");
    for (int u = first; rc == 0 && u < first + count; u++) {
        pt_unit_info info;
        pt_unit_info_get(&r->arch, u, &info);
        static const char *suffix[] = {"param", "grad", "m", "v"};
        const pt_part parts[] = {PT_PART_PARAM, PT_PART_M, PT_PART_V};
        /* the run's frozen prefix, not the segment's: a save between a
         * freeze decision and its re-plan holds the new one (a unit frozen
         * since the segment was built keeps no moments in the checkpoint,
         * as after the re-plan) */
        const int frozen = u < r->frozen_units;
        for (int k = 0; rc == 0 && k < (frozen ? 1 : 3); k++) {
            char tag[96];
            snprintf(tag, sizeof tag, "%s.%s", info.name, suffix[parts[k]]);
            rc = write_part(w, s, u, parts[k], &info, tag, r->step, host, err);
        }
    }
    free(host);
    if (rc) {
        pt_recwriter_abort(w);
        return rc;
    }
    return pt_recwriter_commit(w, err);
}

static json_t *manifest_json(const pt_ckpt_run *c, const char *id, const file_entry *files, int n)
{
    const pt_run *r = c->run;
    json_t *units = json_object(), *listed = json_object();
    for (int st = 0; st < r->plan.stages; st++) {
        char file[PT_CKPT_FILE_MAX];
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
        pt_config_write_yaml(c->cfg, f);
        fclose(f);
    }
    json_t *m = json_pack(
        "{s:i, s:s, s:I, s:I, s:I, s:I, s:I, s:{s:i, s:f, s:f, s:I, s:I}, s:i, s:o, s:o, s:o, s:o, "
        "s:s?}",
        "format", PT_CKPT_FORMAT, "checkpoint", id, "step", (json_int_t)r->step, "epoch",
        (json_int_t)r->epoch, "epoch_step", (json_int_t)r->epoch_step, "batch",
        (json_int_t)c->cfg->train.batch, "seed", (json_int_t)c->cfg->run.seed, "lr", "kind",
        (int)r->lr.kind, "base", r->lr.base, "min", r->lr.min_lr, "warmup", (json_int_t)r->lr.warmup,
        "total", (json_int_t)r->lr.total, "frozen_units", r->frozen_units, "arch", pt_ckpt_arch_json(&r->arch),
        "freeze", pt_freeze_to_json(&r->freeze), "units", units, "files", listed, "config", config);
    free(config);
    /* the directory the config's relative paths were read from, so that an
     * export from another one finds (and spares) the run's inputs */
    char cwd[PT_PATH_MAX];
    json_t *where = m && getcwd(cwd, sizeof cwd) ? json_string(cwd) : NULL; /* NULL: not UTF-8 */
    if (where && json_object_set_new(m, "cwd", where)) {
        json_decref(m);
        m = NULL;
    }
    /* text classification: the label of each class (row of the classifier),
     * so that a resume, an evaluation or an export with other data cannot
     * silently give the rows other meanings */
    if (m && c->train->kind == PT_DATA_TEXTCLS && c->train->label_names) {
        json_t *labels = json_array();
        for (int k = 0; labels && k < c->train->classes; k++)
            if (json_array_append_new(labels, json_string(c->train->label_names[k]))) {
                json_decref(labels);
                labels = NULL;
            }
        if (!labels || json_object_set_new(m, "labels", labels)) {
            json_decref(m);
            m = NULL;
        }
    }
    /* what the run is fed (identity.c), so that a resume or an evaluation
     * with a changed file under the same keys is told, not silent */
    if (m) {
        const char *sha[3] = {c->train_sha256, c->test_sha256, c->vocab_sha256};
        const pt_dataset *ds[3] = {c->train, c->test, NULL};
        static const char *const part[3] = {"train", "test", "vocab"};
        json_t *data = json_object();
        int failed = !data;
        for (int k = 0; k < 3 && !failed; k++) {
            if (!sha[k] || !*sha[k])
                continue;
            json_t *o = ds[k] ? json_pack("{s:I, s:s}", "examples", (json_int_t)ds[k]->count,
                                          "sha256", sha[k])
                              : json_pack("{s:s}", "sha256", sha[k]);
            failed = !o || json_object_set_new(data, part[k], o);
        }
        if (!failed && json_object_size(data) == 0) {
            json_decref(data); /* nothing known: no record */
        } else if (failed || json_object_set_new(m, "data", data)) {
            if (failed)
                json_decref(data);
            json_decref(m);
            m = NULL;
        }
    }
    /* the planner's measured inputs, so a resume plans the same layouts */
    pt_profile prof;
    pt_err ignored;
    if (m && pt_layout_profile(r, &prof, &ignored) == 0) {
        json_t *pj = pt_profile_json(&prof, &r->arch);
        pt_profile_free(&prof);
        if (!pj || json_object_set_new(m, "profile", pj)) {
            json_decref(m);
            m = NULL;
        }
    } else {
        json_decref(m);
        m = NULL;
    }
    return m;
}

static int write_manifest(const pt_ckpt_run *c, const char *dir, const char *id,
                          const file_entry *files, int n, pt_err *err)
{
    char path[PT_CKPT_PATH];
    pt_path_join(path, dir, "manifest");
    json_t *m = manifest_json(c, id, files, n);
    char *text = m && json_object_size(m) ? json_dumps(m, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(m);
    if (!text)
        return pt_fail(err, PT_ENOMEM, "out of memory writing the manifest of %s", dir);
    pt_recwriter *w;
    int rc = pt_recwriter_open(&w, path, PT_CKPT_MANIFEST_MAGIC, PT_CKPT_FORMAT, err);
    if (rc == 0 && (rc = pt_recwriter_add(w, "manifest", text, strlen(text), err)))
        pt_recwriter_abort(w);
    else if (rc == 0)
        rc = pt_recwriter_commit(w, err);
    free(text);
    return rc;
}

/* A write into run.dir that failed because run.dir was moved or replaced
 * meanwhile: that is what the error says (rank 0, which holds the lock). */
static int moved_meanwhile(const pt_ckpt_run *c, int rc, pt_err *err)
{
    pt_err moved;
    if (rc && c->run->rank == 0 && pt_rundir_lock_check(c->lock, c->cfg->run.dir, &moved)) {
        *err = moved;
        return moved.code;
    }
    return rc;
}

int pt_checkpoint_save(const pt_ckpt_run *c, pt_err *err)
{
    pt_run *r = c->run;
    pt_group *world = pt_comm_world(r->comm);
    char dir[PT_CKPT_PATH], path[PT_CKPT_PATH];
    pt_step_dir(c->cfg->run.dir, r->step, dir, sizeof dir);
    /* rank 0 (replica 0's stage 0) makes the id and an empty step directory;
     * replica 0's stages write their units (each unit once) and report the
     * file's digest; rank 0 writes the manifest last, naming them all */
    char id[PT_CKPT_ID_CHARS + 1] = "";
    int rc = 0;
    if (r->rank == 0) {
        pt_unique_id(id, sizeof id);
        rc = pt_rundir_lock_check(c->lock, c->cfg->run.dir, err);
        if (rc == 0)
            rc = pt_rundir_prepare_step(c->cfg->run.dir, r->step, err);
        if (rc == 0) /* records checkpoints/ when this save made it */
            rc = pt_rundir_lock_check(c->lock, c->cfg->run.dir, err);
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
        rc = moved_meanwhile(c, rc, err);
    }
    if (rc == 0)
        rc = pt_test_fault("checkpoint", r->rank, r->step, err);
    if ((rc = pt_run_agree(r, rc, err)))
        return pt_err_prefix(err, "saving checkpoint %s", dir);
    const int n = r->ranks;
    file_entry *all = calloc((size_t)n, sizeof *all);
    /* every rank enters the all-gather, or none does */
    rc = pt_run_agree(r, all ? 0 : pt_fail(err, PT_ENOMEM, "out of memory saving a checkpoint"), err);
    if (rc == 0)
        rc = pt_allgather(world, &mine, all, sizeof mine, err);
    if (rc == 0 && r->rank == 0) {
        rc = moved_meanwhile(c, write_manifest(c, dir, id, all, n, err), err);
        if (rc == 0)
            rc = pt_test_fault("checkpoint-manifest", r->rank, r->step, err);
        /* the units took a while: checked again before anything is removed */
        if (rc == 0 && pt_rundir_lock_check(c->lock, c->cfg->run.dir, err) == 0)
            pt_rundir_prune(c->cfg->run.dir, c->cfg->train.keep_checkpoints, r->step);
        else if (rc == 0)
            rc = err->code;
    }
    free(all);
    if ((rc = pt_run_agree(r, rc, err)))
        return pt_err_prefix(err, "saving checkpoint %s", dir);
    return 0;
}

