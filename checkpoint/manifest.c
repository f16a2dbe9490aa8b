/*
 * manifest.c: a checkpoint's manifest and its records (see checkpoint.h, and
 * save.c for the format): opened only in the directory of its own step,
 * every value range-checked before use; the records compared with the run
 * that reads them (architecture, labels, data and vocabulary digests). The
 * unit files it names are read by read.c.
 */
#include "checkpoint/manifest.h"

#include "formats/formats.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void pt_manifest_close(manifest *m)
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

int pt_manifest_file_name_ok(const char *file)
{
    return file && file[0] && strlen(file) < PT_CKPT_FILE_MAX && !strchr(file, '/') &&
           strcmp(file, "manifest") && strcmp(file, ".") && strcmp(file, "..");
}

/* The "units" and "files" records bound to each other (see manifest.h). */
static int check_units_and_files(const manifest *m, const char *path, pt_err *err)
{
    const char *file, *unit;
    const json_t *v, *u;
    json_object_foreach((json_t *)m->units, unit, u) {
        const char *holder = json_string_value(u);
        if (!pt_manifest_file_name_ok(holder))
            return pt_fail(err, PT_EINPUT, "'%s/manifest' does not say which file holds unit %.80s",
                           m->dir, unit);
        if (!json_object_get(m->files, holder))
            return pt_fail(err, PT_EINPUT, "'%s/manifest' names unit file '%s' for unit %.80s but "
                           "does not list its size and SHA-256", m->dir, holder, unit);
    }
    /* the files some unit is in, as a set: a hostile manifest of many
     * units and files is checked in linear time, not their product */
    json_t *used = json_object();
    if (!used)
        return pt_fail(err, PT_ENOMEM, "out of memory reading '%s'", path);
    int rc = 0;
    json_object_foreach((json_t *)m->units, unit, u)
        if (json_object_set_new(used, json_string_value(u), json_true()) != 0) {
            rc = pt_fail(err, PT_ENOMEM, "out of memory reading '%s'", path);
            break;
        }
    json_object_foreach((json_t *)m->files, file, v) {
        if (rc)
            break;
        if (!pt_manifest_file_name_ok(file))
            rc = pt_fail(err, PT_EINPUT, "'%s' lists a file named '%.80s', which is not a unit "
                         "file of this directory", path, file);
        else if (!json_object_get(used, file))
            rc = pt_fail(err, PT_EINPUT, "'%s' lists a file named '%.80s' that none of its units "
                         "is in: a manifest a save wrote lists its units' files only", path, file);
    }
    json_decref(used);
    return rc;
}

int pt_manifest_open(manifest *m, const char *dir, pt_err *err)
{
    char path[PT_CKPT_PATH];
    uint32_t version;
    memset(m, 0, sizeof *m);
    m->dir = dir;
    pt_path_join(path, dir, "manifest");
    int rc = pt_recfile_open(&m->f, path, PT_CKPT_MANIFEST_MAGIC, &version, err);
    struct stat st;
    char ckpts[PT_CKPT_PATH];
    if (rc && lstat(path, &st) != 0 && errno == ENOENT &&
        stat(pt_path_join(ckpts, dir, "checkpoints"), &st) == 0 && S_ISDIR(st.st_mode)) /* a run directory given for one of its checkpoints */
        return pt_fail(err, PT_EINPUT, "'%s' is a run directory, not a checkpoint: name one of "
                       "its checkpoints (%s/step_N; `pipetrain inspect %s` verifies the newest "
                       "and says its step)", dir, ckpts, dir);
    if (rc && lstat(path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
        /* say what is missing: the directory itself, or its manifest */
        const int gone = stat(dir, &st) != 0, e = errno;
        struct stat link;
        if (gone || !S_ISDIR(st.st_mode))
            return pt_fail(err, PT_EINPUT, "'%s': %s; a checkpoint is a directory holding a "
                           "manifest (RUN_DIR/checkpoints/step_N)", dir,
                           !gone ? "not a directory"
                           : e == ENOENT && lstat(dir, &link) == 0 ? "a symbolic link to nothing"
                           : e == ENOENT ? "no such directory"
                           : e == ENOTDIR ? "a part of the path is not a directory"
                                          : strerror(e));
        char hf[PT_CKPT_PATH];
        if (lstat(pt_path_join(hf, dir, "config.json"), &st) == 0 ||
            lstat(pt_path_join(hf, dir, "model.safetensors"), &st) == 0 ||
            lstat(pt_path_join(hf, dir, "pytorch_model.bin"), &st) == 0)
            return pt_fail(err, PT_EINPUT, "'%s' holds no manifest: it is not a checkpoint, but "
                           "looks like a Hugging Face model directory (a bert's `pipetrain "
                           "export`, or a pretrained model), which model.init_from takes; a "
                           "checkpoint is RUN_DIR/checkpoints/step_N", dir);
        return pt_fail(err, PT_EINPUT, "'%s' holds no manifest: it is not a checkpoint (an empty "
                       "directory, or a save that never finished); a checkpoint is "
                       "RUN_DIR/checkpoints/step_N", dir);
    }
    if (rc)
        return pt_err_input(rc, err);
    const void *text;
    uint64_t len;
    if (version != PT_CKPT_FORMAT)
        rc = pt_fail(err, PT_EINPUT, "'%s': checkpoint format %u; this pipetrain reads format %d",
                     path, version, PT_CKPT_FORMAT);
    else if ((rc = pt_recfile_find(m->f, "manifest", &text, &len, err)) == 0 &&
             len > PT_MANIFEST_MAX_BYTES)
        rc = pt_fail(err, PT_EINPUT, "'%s': its manifest record is %" PRIu64 " bytes; a save "
                     "writes at most %d MiB", path, len,
                     PT_MANIFEST_MAX_BYTES >> 20);
    else if (rc == 0 && (rc = pt_json_load(&m->j, text, (size_t)len, err)))
        pt_err_prefix(err, "'%s'", path);
    /* the record's own format field, written with the file's version */
    const json_t *format = json_object_get(m->j, "format");
    if (rc == 0 && !(json_is_integer(format) && json_integer_value(format) == PT_CKPT_FORMAT))
        rc = pt_fail(err, PT_EINPUT, "'%s': the manifest's format field is not %d, the format of "
                     "its file (the manifest was edited)", path, PT_CKPT_FORMAT);
    const json_t *id = json_object_get(m->j, "checkpoint"), *step = json_object_get(m->j, "step");
    m->units = json_object_get(m->j, "units");
    m->files = json_object_get(m->j, "files");
    if (rc == 0 && (!json_is_string(id) || json_string_length(id) != PT_CKPT_ID_CHARS ||
                    !json_is_integer(step) || json_integer_value(step) < 0 ||
                    !json_is_object(m->units) || !json_is_object(m->files)))
        rc = pt_fail(err, PT_EINPUT, "'%s': the manifest lacks its checkpoint id, step, units or "
                     "files (or one of them is malformed)", path);
    if (rc == 0 && json_integer_value(step) > PT_CKPT_MAX_STEP)
        rc = pt_fail(err, PT_EINPUT, "'%s': the manifest's step %" JSON_INTEGER_FORMAT " is past "
                     "any run's (at most %" PRId64 "): the manifest was edited", path,
                     json_integer_value(step), PT_CKPT_MAX_STEP);
    if (rc == 0)
        rc = check_units_and_files(m, path, err);
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
        pt_manifest_close(m);
    return rc;
}

/* The manifest's profile (the planner's measured inputs) into *out; a
 * manifest without one (none was saved before the format carried it) gives
 * an empty profile (ranks 0). */
int pt_manifest_profile(const manifest *m, const pt_arch *arch, pt_profile *out, pt_err *err)
{
    memset(out, 0, sizeof *out);
    const json_t *o = json_object_get(m->j, "profile");
    if (!o)
        return 0;
    char where[PT_CKPT_PATH + 16];
    snprintf(where, sizeof where, "'%s/manifest'", m->dir);
    return pt_profile_parse(o, arch, where, out, err);
}

int pt_checkpoint_read_profile(const char *dir, const pt_arch *arch, pt_profile *out, pt_err *err)
{
    manifest m;
    memset(out, 0, sizeof *out);
    int rc = pt_manifest_open(&m, dir, err);
    if (rc == 0) {
        rc = pt_manifest_profile(&m, arch, out, err);
        pt_manifest_close(&m);
    }
    return rc;
}

int pt_checkpoint_read_depth(const char *dir, int layers, int *depth, pt_err *err)
{
    manifest m;
    *depth = 0;
    int rc = pt_manifest_open(&m, dir, err);
    if (rc)
        return rc;
    const json_t *d = json_object_get(json_object_get(m.j, "freeze"), "depth");
    if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > layers)
        rc = pt_fail(err, PT_EINPUT, "'%s/manifest': freeze.depth is missing or not 0..%d", dir,
                     layers);
    else
        *depth = (int)json_integer_value(d);
    pt_manifest_close(&m);
    return rc;
}

/* Two values of an architecture field as the user says them: an enum key
 * (model.kind) in its words, other fields as numbers. */
static void arch_values(const char *field, int was, int is, char *sw, char *si, size_t n)
{
    const char *ww = pt_config_word(field, was), *wi = pt_config_word(field, is);
    if (strcmp(ww, "?") != 0 && strcmp(wi, "?") != 0) {
        snprintf(sw, n, "%s", ww);
        snprintf(si, n, "%s", wi);
    } else {
        snprintf(sw, n, "%d", was);
        snprintf(si, n, "%d", is);
    }
}

/* The manifest's architecture record, which must describe a model (a
 * forged record with, say, one class is refused naming the manifest, as the
 * config it came from would have been). */
static int read_arch(const manifest *m, pt_arch *arch, pt_err *err)
{
    const char *bad, *allowed;
    if (pt_ckpt_arch_read(json_object_get(m->j, "arch"), arch, &bad, &allowed))
        return pt_fail(err, PT_EINPUT, "'%s/manifest': the architecture record%s%s%s is missing or "
                       "malformed; allowed: %s", m->dir, *bad ? "'s '" : "", bad, *bad ? "'" : "",
                       allowed);
    const int rc = pt_arch_check(arch, err);
    if (rc)
        pt_err_prefix(err, "'%s/manifest': the architecture record", m->dir);
    return rc;
}

/* The manifest's config record (YAML text, over the defaults). */
static int config_record(const manifest *m, pt_config *cfg, pt_err *err)
{
    pt_config_defaults(cfg);
    char name[PT_CKPT_PATH];
    snprintf(name, sizeof name, "%s/manifest (config record)", m->dir);
    const json_t *config = json_object_get(m->j, "config");
    int rc;
    if (!json_is_string(config))
        rc = pt_fail(err, PT_EINPUT, "'%s/manifest' holds no config", m->dir);
    else
        rc = pt_config_load_text(cfg, json_string_value(config), json_string_length(config), name, err);
    /* a version that read a freeze cap above the model's blocks as "all"
     * saved it so; now refused, it reads as the same cap */
    if (rc == 0 && cfg->freeze.max_depth > cfg->model.layers)
        cfg->freeze.max_depth = cfg->model.layers;
    /* a text classification run records how it tokenized; one from before
     * data.lowercase and its siblings were keys records none (auto), and it
     * was uncased, the one tokenizer pipetrain had */
    if (rc == 0 && cfg->data.kind == PT_DATA_TEXT_CLASSIFICATION) {
        int *const norm[3] = {&cfg->data.lowercase, &cfg->data.strip_accents,
                              &cfg->data.split_cjk};
        for (int i = 0; i < 3; i++)
            if (*norm[i] == PT_AUTO)
                *norm[i] = 1;
    }
    return rc;
}

/* The architecture record, and that the config record makes it. */
static int arch_record(const manifest *m, const pt_config *cfg, pt_arch *arch, pt_err *err)
{
    int rc = read_arch(m, arch, err);
    if (rc == 0) {
        /* a save writes both records from one config: an architecture the
         * config record does not make (images from files aside, whose size
         * the files give) is an edited manifest */
        pt_arch made;
        pt_config_arch(cfg, &made);
        if (made.kind == PT_MODEL_VIT && cfg->data.kind != PT_DATA_SYNTH_IMAGES) {
            made.channels = arch->channels;
            made.height = arch->height;
            made.width = arch->width;
        }
        int was, is;
        char sw[32], si[32];
        const char *field = pt_ckpt_arch_difference(arch, &made, &was, &is);
        if (field) {
            arch_values(field, was, is, sw, si, sizeof sw);
            rc = pt_fail(err, PT_EINPUT, "'%s/manifest': its architecture record has %s = %s, "
                         "which its config record makes %s: the manifest was edited", m->dir,
                         field, sw, si);
        }
        /* and its numbers (a dropout at auto came from model.init_from's
         * config.json, which is not here to ask) */
        const char *key = NULL;
        if (!field && pt_arch_ln_eps(arch) != pt_arch_ln_eps(&made))
            key = "model.ln_eps";
        else if (!field && arch->init_std != made.init_std)
            key = "model.init_std";
        else if (!field && arch->seed != made.seed)
            key = "run.seed";
        else if (!field && cfg->model.hidden_dropout >= 0 &&
                 arch->hidden_dropout != made.hidden_dropout)
            key = "model.dropout";
        else if (!field && cfg->model.attn_dropout >= 0 && arch->attn_dropout != made.attn_dropout)
            key = "model.attention_dropout";
        if (key)
            rc = pt_fail(err, PT_EINPUT, "'%s/manifest': its architecture record's %s is not the "
                         "one its config record makes: the manifest was edited", m->dir, key);
    }
    return rc;
}

int pt_manifest_config(const manifest *m, pt_config *cfg, pt_arch *arch, pt_err *err)
{
    int rc = config_record(m, cfg, err);
    return rc ? rc : arch_record(m, cfg, arch, err);
}

int pt_manifest_config_if_read(const manifest *m, pt_config *cfg, pt_arch *arch, int *read,
                               pt_err *err)
{
    pt_err why;
    *read = config_record(m, cfg, &why) == 0;
    /* let be only for a key or word of a newer pipetrain: YAML that does
     * not read, or a key twice, no pipetrain writes */
    if (!*read && !cfg->unknown_names) {
        *err = why;
        return why.code;
    }
    return *read ? arch_record(m, cfg, arch, err) : read_arch(m, arch, err);
}

int pt_checkpoint_read_config(const char *dir, pt_config *cfg, pt_arch *arch, pt_err *err)
{
    manifest m;
    int rc = pt_manifest_open(&m, dir, err);
    if (rc)
        return rc;
    rc = pt_manifest_config(&m, cfg, arch, err);
    pt_manifest_close(&m);
    return rc;
}

int pt_checkpoint_read_config_record(const char *dir, pt_config *cfg, pt_err *err)
{
    manifest m;
    int rc = pt_manifest_open(&m, dir, err);
    if (rc)
        return rc;
    rc = config_record(&m, cfg, err);
    pt_manifest_close(&m);
    return rc;
}

int pt_checkpoint_read_cwd(const char *dir, char *out, size_t n, pt_err *err)
{
    manifest m;
    out[0] = '\0';
    int rc = pt_manifest_open(&m, dir, err);
    if (rc)
        return rc;
    const json_t *cwd = json_object_get(m.j, "cwd");
    if (cwd && (!json_is_string(cwd) || json_string_value(cwd)[0] != '/' ||
                strlen(json_string_value(cwd)) >= n))
        rc = pt_fail(err, PT_EINPUT, "%s/manifest: cwd: not an absolute path of at most %zu bytes",
                     dir, n - 1);
    else if (cwd)
        snprintf(out, n, "%s", json_string_value(cwd));
    pt_manifest_close(&m);
    return rc;
}

/* The two numbers, each as the shortest text that reads back as it (so two
 * that differ never print alike). */
static void two_numbers(double a, double b, char *sa, char *sb, size_t n)
{
    pt_number_text(a, sa, n);
    pt_number_text(b, sb, n);
}

/* The manifest's class labels ("labels": one string per class, in the
 * classifier's row order; saved for text classification): their count in
 * *n (0 when the manifest has none, as before the format carried them).
 * Each must be a non-empty string, and there must be 1 to arch_classes
 * (model.classes may exceed the labels of the data). */
int pt_manifest_labels(const manifest *m, int arch_classes, const json_t **out, int *n, pt_err *err)
{
    const json_t *labels = json_object_get(m->j, "labels");
    *out = labels;
    *n = 0;
    if (!labels)
        return 0;
    const size_t count = json_is_array(labels) ? json_array_size(labels) : 0;
    int ok = count >= 1 && count <= (size_t)arch_classes;
    for (size_t k = 0; ok && k < count; k++) {
        const json_t *v = json_array_get(labels, k);
        ok = json_is_string(v) && json_string_length(v) > 0;
    }
    if (!ok)
        return pt_fail(err, PT_EINPUT, "'%s/manifest': labels is not a list of 1 to %d class names",
                       m->dir, arch_classes);
    /* each a label the data could have had, in the data's order (byte
     * order, so distinct): a forged list would name classifier rows wrongly
     * in an export's id2label */
    char at[PT_CKPT_PATH + 32];
    snprintf(at, sizeof at, "'%s/manifest': labels", m->dir);
    for (size_t k = 0; k < count; k++) {
        const json_t *v = json_array_get(labels, k);
        int rc = pt_textcls_check_label(at, (int64_t)k + 1, json_string_value(v),
                                        json_string_length(v), 1, err);
        if (rc)
            return rc;
        if (k > 0 && strcmp(json_string_value(json_array_get(labels, k - 1)), json_string_value(v)) >= 0)
            return pt_fail(err, PT_EINPUT, "'%s/manifest': labels %zu and %zu ('%.200s', '%.200s') are "
                           "not in byte order, the order of a data set's classes", m->dir, k, k + 1,
                           json_string_value(json_array_get(labels, k - 1)), json_string_value(v));
    }
    *n = (int)count;
    return 0;
}

/* The labels the checkpoint's classifier was trained with against the
 * data's now (text classification): the same names in the same order, or
 * bad input, since every row of the classifier would stand for another
 * label. A checkpoint without labels is not checked. The labels are
 * checked against the checkpoint's own model (its classifier's rows); a
 * config whose model differs from it (model.classes, model.kind) is left
 * to pt_manifest_check_arch, which names the key: measured against the
 * config's classes, a good checkpoint's labels read as a damaged manifest. */
int pt_manifest_check_labels(const manifest *m, const pt_arch *arch, const pt_dataset *train,
                             const char *train_file, pt_err *err)
{
    /* the checkpoint's own model, where its config record reads (one of a
     * newer pipetrain may not: then the config's model stands in) */
    pt_config *saved = malloc(sizeof *saved);
    if (!saved)
        return pt_fail(err, PT_ENOMEM, "out of memory reading the config of %s", m->dir);
    pt_arch own;
    pt_err quiet = {0};
    const int known = pt_manifest_config(m, saved, &own, &quiet) == 0;
    free(saved);
    if (!known)
        own = *arch;
    const json_t *labels;
    int n;
    int rc = pt_manifest_labels(m, own.classes, &labels, &n, err);
    if (rc || n == 0 || own.kind != arch->kind || own.classes != arch->classes ||
        train->kind != PT_DATA_TEXTCLS || !train->label_names)
        return rc;
    for (int k = 0; k < n || k < train->classes; k++) {
        const char *was = k < n ? json_string_value(json_array_get(labels, (size_t)k)) : "(none)";
        const char *is = k < train->classes ? train->label_names[k] : "(none)";
        if (k >= n || k >= train->classes || strcmp(was, is) != 0)
            return pt_fail(err, PT_EINPUT,
                           "checkpoint %s was trained with class %d = '%.200s' (of %d labels, '%.200s' "
                           "to '%.200s'), but '%s' (data.train_file) makes class %d '%.200s': the "
                           "classifier's rows would stand for other labels; use the data it was "
                           "trained with", m->dir, k, was, n,
                           json_string_value(json_array_get(labels, 0)),
                           json_string_value(json_array_get(labels, (size_t)n - 1)), train_file, k, is);
    }
    return 0;
}

int pt_checkpoint_read_labels(const char *dir, int classes, char ***names, int *n, pt_err *err)
{
    manifest m;
    *names = NULL;
    *n = 0;
    int rc = pt_manifest_open(&m, dir, err);
    if (rc)
        return rc;
    const json_t *labels;
    int count;
    if ((rc = pt_manifest_labels(&m, classes, &labels, &count, err)) == 0 && count > 0) {
        char **out = calloc((size_t)count, sizeof *out);
        for (int k = 0; out && k < count; k++)
            if (!(out[k] = strdup(json_string_value(json_array_get(labels, (size_t)k))))) {
                for (int j = 0; j < k; j++)
                    free(out[j]);
                free(out);
                out = NULL;
            }
        if (out) {
            *names = out;
            *n = count;
        } else {
            rc = pt_fail(err, PT_ENOMEM, "out of memory reading the labels of %s", dir);
        }
    }
    pt_manifest_close(&m);
    return rc;
}

/* One part ("train", "test", "vocab") of the manifest's "data" record (what
 * the run was fed, identity.c): *sha256 its 64 hex digits and *examples its
 * count (-1 for the vocabulary), or *sha256 NULL when the manifest records
 * none (saved before it did, or not known). Anything else is malformed. */
int pt_manifest_data(const manifest *m, const char *part, const char **sha256, int64_t *examples,
                     pt_err *err)
{
    *sha256 = NULL;
    *examples = -1;
    const json_t *data = json_object_get(m->j, "data");
    if (!data)
        return 0;
    if (!json_is_object(data))
        return pt_fail(err, PT_EINPUT, "'%s/manifest': data is not an object", m->dir);
    const json_t *o = json_object_get(data, part);
    if (!o)
        return 0;
    const json_t *sha = json_object_get(o, "sha256"), *count = json_object_get(o, "examples");
    const char *hex = json_string_value(sha);
    int good = hex && strlen(hex) == 64 && strspn(hex, "0123456789abcdef") == 64 &&
               (strcmp(part, "vocab") == 0 ? count == NULL
                                           : json_is_integer(count) && json_integer_value(count) >= 0);
    if (!good)
        return pt_fail(err, PT_EINPUT, "'%s/manifest': data.%s is malformed (an object with a "
                       "sha256 of 64 hex digits%s expected)", m->dir, part,
                       strcmp(part, "vocab") == 0 ? "" : " and a count of examples");
    *sha256 = hex;
    if (count)
        *examples = (int64_t)json_integer_value(count);
    return 0;
}

int pt_manifest_check_data(const manifest *m, pt_err *err)
{
    static const char *const parts[] = {"train", "test", "vocab"};
    const char *sha;
    int64_t n;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        int rc = pt_manifest_data(m, parts[i], &sha, &n, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* The vocabulary a checkpoint was trained with against this run's: the
 * embedding rows stand for that vocabulary's tokens, so another one (even
 * of the same size) is refused. Not checked when either is not known. */
int pt_manifest_check_vocab(const manifest *m, const char *path, const char *now, pt_err *err)
{
    const char *was;
    int64_t n;
    int rc = pt_manifest_data(m, "vocab", &was, &n, err);
    if (rc || !was || !now || !*now || strcmp(was, now) == 0)
        return rc;
    return pt_fail(err, PT_EINPUT,
                   "'%.900s' (data.vocab) is not the vocabulary checkpoint %s was trained with "
                   "(its tokens' SHA-256 is %.16s..., the checkpoint's %.16s...): the embedding "
                   "rows stand for that vocabulary's tokens (to go on with another one on "
                   "purpose, export the checkpoint and start a run from the export with "
                   "model.init_from)", path, m->dir, now, was);
}

int pt_checkpoint_check_vocab(const char *dir, const char *path, const char *sha256, pt_err *err)
{
    manifest m;
    int rc = pt_manifest_open(&m, dir, err);
    if (rc == 0) {
        rc = pt_manifest_check_vocab(&m, path, sha256, err);
        pt_manifest_close(&m);
    }
    return rc;
}

/* training: resuming, where the dropout probabilities are part of the run
 * (a different one would not continue the same training); reading weights
 * to evaluate or export, they do not matter. */
int pt_manifest_check_arch(const pt_arch *now, const manifest *m, int training, const char **key,
                           pt_err *err)
{
    const char *ignored;
    if (!key)
        key = &ignored;
    *key = NULL;
    pt_arch saved;
    int rc = read_arch(m, &saved, err);
    if (rc)
        return rc;
    int was, is;
    const char *field = pt_ckpt_arch_difference(&saved, now, &was, &is);
    if (field) {
        char sw[32], si[32];
        arch_values(field, was, is, sw, si, sizeof sw);
        *key = field;
        return pt_fail(err, PT_EINPUT,
                       "checkpoint %s holds a model with %s = %s, this config makes %s = %s",
                       m->dir, field, sw, field, si);
    }
    /* the epsilon in use: 0 in either means the default */
    const double a = pt_arch_ln_eps(&saved), b = pt_arch_ln_eps(now);
    char sa[32], sb[32]; /* short when that tells them apart */
    if (a != b) {
        two_numbers(a, b, sa, sb, sizeof sa);
        *key = "model.ln_eps";
        return pt_fail(err, PT_EINPUT,
                       "checkpoint %s holds a model with model.ln_eps = %s, this config makes "
                       "model.ln_eps = %s", m->dir, sa, sb);
    }
    const struct {
        const char *key;
        double was, is;
    } drop[2] = {{"model.dropout", saved.hidden_dropout, now->hidden_dropout},
                 {"model.attention_dropout", saved.attn_dropout, now->attn_dropout}};
    for (int i = 0; training && i < 2; i++)
        if (drop[i].was != drop[i].is) {
            two_numbers(drop[i].was, drop[i].is, sa, sb, sizeof sa);
            *key = drop[i].key;
            return pt_fail(err, PT_EINPUT,
                           "checkpoint %s was trained with %s = %s, this config makes %s = %s "
                           "(auto takes model.init_from's config.json for bert); set it to %s to "
                           "resume", m->dir, drop[i].key, sa, drop[i].key, sb, sa);
        }
    /* every unit the manifest keeps is one of that model's (a save lists
     * exactly those): one more is an edited manifest */
    const char *unit;
    const json_t *v;
    json_object_foreach((json_t *)m->units, unit, v) {
        int known = 0;
        for (int u = 0; !known && u < pt_arch_units(now); u++) {
            pt_unit_info info;
            pt_unit_info_get(now, u, &info);
            known = strcmp(info.name, unit) == 0;
        }
        if (!known)
            return pt_fail(err, PT_EINPUT, "'%s/manifest' lists a unit '%.80s' that the model it "
                           "holds has not: the manifest was edited", m->dir, unit);
    }
    return 0;
}

int pt_manifest_state(const manifest *m, saved_state *st, pt_err *err)
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
    /* every epoch before this one took a step at least, and this one
     * epoch_step of them: a save writes epoch + epoch_step <= step */
    if (st->epoch > m->step || st->epoch_step > m->step - st->epoch)
        return pt_fail(err, PT_EINPUT, "'%s/manifest': epoch %" PRId64 " and epoch_step %" PRId64
                       " do not fit step %" PRId64 " (every epoch takes a step at least): the "
                       "manifest was edited", m->dir, st->epoch, st->epoch_step, m->step);
    /* what a config can set (train.batch, run.seed, train.lr and
     * train.min_lr, the warm-up and the steps): a save writes nothing else */
    if (st->batch < 1 || st->seed < 0 || st->lr.warmup < 0 || st->lr.total < 0 ||
        !(st->lr.base > 0 && st->lr.base <= 10) || !(st->lr.min_lr >= 0 && st->lr.min_lr <= 10))
        return pt_fail(err, PT_EINPUT, "%s: batch %" PRId64 ", seed %" PRId64 ", lr.base %g, lr.min "
                       "%g, lr.warmup %" PRId64 " or lr.total %" PRId64 " out of range", what,
                       st->batch, st->seed, st->lr.base, st->lr.min_lr, st->lr.warmup, st->lr.total);
    if (st->lr.min_lr > st->lr.base)
        return pt_fail(err, PT_EINPUT, "%s: lr.min %g above lr.base %g, which no config sets (the "
                       "manifest was edited)", what, st->lr.min_lr, st->lr.base);
    st->lr.kind = (pt_lr_kind)kind;
    return 0;
}
