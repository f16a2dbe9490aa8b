/*
 * checkpoint.c: the checkpoint directory format (see checkpoint.h) on top of
 * recfile. The manifest's records are short "key=value" texts, so a user can
 * read them with any tool that skips the binary frame; unit files hold
 * float32 little-endian arrays.
 */
#include "launch/checkpoint.h"

#include "launch/fault.h"
#include "formats/formats.h"

#include <dirent.h>
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
enum { FORMAT_VERSION = 1 };

/* dir/name into out (PATH_BUF bytes); empty when it does not fit, so the
 * open that follows fails with a message instead of using a cut path. */
enum { PATH_BUF = 2 * PT_PATH_MAX };

static char *join(char *out, const char *dir, const char *name)
{
    int len = snprintf(out, PATH_BUF, "%s/%s", dir, name);
    if (len < 0 || len >= PATH_BUF)
        out[0] = '\0';
    return out;
}

/* A checkpoint file the user pointed at that cannot be opened is bad input
 * (exit status 2), like a missing config, not an internal failure. */
static int input_error(int rc, pt_err *err)
{
    if (rc == PT_ESYS && err)
        err->code = PT_EINPUT;
    return rc == PT_ESYS ? PT_EINPUT : rc;
}

/* ------------------------------------------------------- key=value texts */

typedef struct text {
    char *buf;
    size_t len;
    FILE *f;
} text;

static int text_open(text *t) { return (t->f = open_memstream(&t->buf, &t->len)) ? 0 : -1; }

static void text_close(text *t)
{
    if (t->f)
        fclose(t->f);
    free(t->buf);
    memset(t, 0, sizeof *t);
}

/* Value of `key=` in a record of key=value lines (copied into out). */
static int kv_get(const char *data, size_t len, const char *key, char *out, size_t n)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < len;) {
        size_t end = i;
        while (end < len && data[end] != '\n')
            end++;
        if (end - i > kl && memcmp(data + i, key, kl) == 0 && data[i + kl] == '=') {
            size_t vl = end - i - kl - 1;
            if (vl >= n)
                return -1;
            memcpy(out, data + i + kl + 1, vl);
            out[vl] = '\0';
            return 0;
        }
        i = end + 1;
    }
    return -1;
}

static int kv_i64(const char *data, size_t len, const char *key, int64_t *v)
{
    char buf[64], *end;
    if (kv_get(data, len, key, buf, sizeof buf))
        return -1;
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    if (errno || end == buf || *end)
        return -1;
    *v = x;
    return 0;
}

static int kv_f64(const char *data, size_t len, const char *key, double *v)
{
    char buf[64], *end;
    if (kv_get(data, len, key, buf, sizeof buf))
        return -1;
    *v = strtod(buf, &end);
    return end == buf || *end ? -1 : 0;
}

/* ------------------------------------------------------------ arch record */

static void arch_write(FILE *f, const pt_arch *a)
{
    fprintf(f, "kind=%d\ndim=%d\nlayers=%d\nheads=%d\nmlp_hidden=%d\ncausal=%d\n", (int)a->kind,
            a->dim, a->layers, a->heads, a->mlp_hidden, a->causal);
    fprintf(f, "channels=%d\nheight=%d\nwidth=%d\npatch=%d\nclasses=%d\nvocab=%d\ncontext=%d\n",
            a->channels, a->height, a->width, a->patch, a->classes, a->vocab, a->context);
    fprintf(f, "init_std=%.17g\nseed=%" PRIu64 "\n", a->init_std, a->seed);
}

static const struct {
    const char *name; /* in the manifest */
    const char *says; /* what to tell the user: the config key behind it */
    size_t off;
} arch_fields[] = {
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

static int arch_read(const char *data, size_t len, pt_arch *a)
{
    memset(a, 0, sizeof *a);
    int64_t v;
    if (kv_i64(data, len, "kind", &v) || (v != PT_MODEL_VIT && v != PT_MODEL_GPT))
        return -1;
    a->kind = (pt_model_kind)v;
    for (size_t i = 0; i < sizeof arch_fields / sizeof arch_fields[0]; i++) {
        if (kv_i64(data, len, arch_fields[i].name, &v) || v < 0 || v > INT32_MAX)
            return -1;
        *(int *)((char *)a + arch_fields[i].off) = (int)v;
    }
    if (kv_f64(data, len, "init_std", &a->init_std) || kv_i64(data, len, "seed", &v))
        return -1;
    a->seed = (uint64_t)v;
    return 0;
}

/* Names the first architecture field that differs, or returns NULL. */
static const char *arch_difference(const pt_arch *saved, const pt_arch *now, int *was, int *is)
{
    if (saved->kind != now->kind) {
        *was = saved->kind;
        *is = now->kind;
        return "model.kind";
    }
    for (size_t i = 0; i < sizeof arch_fields / sizeof arch_fields[0]; i++) {
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

static void step_dir(const char *run_dir, int64_t step, char *out, size_t n)
{
    int len = snprintf(out, n, "%s/checkpoints/step_%010" PRId64, run_dir, step);
    if (len < 0 || (size_t)len >= n)
        out[0] = '\0';
}

static int write_units(const pt_run *r, const char *path, pt_err *err)
{
    pt_recwriter *w;
    int rc = pt_recwriter_open(&w, path, UNITS_MAGIC, FORMAT_VERSION, err);
    if (rc)
        return rc;
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

static void units_file(int stage, char *out, size_t n) { snprintf(out, n, "units-stage%d.bin", stage); }

static int write_manifest(const pt_run *r, const char *dir, pt_err *err)
{
    char path[PATH_BUF];
    join(path, dir, "manifest");
    text state = {0}, arch = {0}, units = {0}, config = {0}, freeze = {0};
    int rc = 0;
    if (text_open(&state) || text_open(&arch) || text_open(&units) || text_open(&config) ||
        text_open(&freeze)) {
        rc = pt_fail(err, PT_ENOMEM, "out of memory writing a manifest");
        goto done;
    }
    fprintf(state.f, "format=%d\nstep=%" PRId64 "\nepoch=%" PRId64 "\nepoch_step=%" PRId64 "\n",
            FORMAT_VERSION, r->step, r->epoch, r->epoch_step);
    fprintf(state.f, "batch=%lld\nseed=%lld\n", r->cfg.train.batch, r->cfg.run.seed);
    fprintf(state.f, "lr.kind=%d\nlr.base=%.17g\nlr.min=%.17g\nlr.warmup=%" PRId64 "\nlr.total=%" PRId64 "\n",
            (int)r->lr.kind, r->lr.base, r->lr.min_lr, r->lr.warmup, r->lr.total);
    fprintf(state.f, "frozen_units=%d\n", r->frozen_units);
    arch_write(arch.f, &r->arch);
    for (int st = 0; st < r->plan.stages; st++) {
        char file[64];
        units_file(st, file, sizeof file);
        for (int u = r->plan.bounds[st]; u < r->plan.bounds[st + 1]; u++) {
            pt_unit_info info;
            pt_unit_info_get(&r->arch, u, &info);
            fprintf(units.f, "%s=%s\n", info.name, file);
        }
    }
    pt_config_write_yaml(&r->cfg, config.f);
    pt_freeze_save(&r->freeze, freeze.f);
    fflush(freeze.f);
    fflush(state.f);
    fflush(arch.f);
    fflush(units.f);
    fflush(config.f);

    pt_recwriter *w;
    if ((rc = pt_recwriter_open(&w, path, MANIFEST_MAGIC, FORMAT_VERSION, err)))
        goto done;
    if ((rc = pt_recwriter_add(w, "state", state.buf, state.len, err)) ||
        (rc = pt_recwriter_add(w, "arch", arch.buf, arch.len, err)) ||
        (rc = pt_recwriter_add(w, "units", units.buf, units.len, err)) ||
        (rc = pt_recwriter_add(w, "config", config.buf, config.len, err)) ||
        (rc = pt_recwriter_add(w, "freeze", freeze.buf, freeze.len, err))) {
        pt_recwriter_abort(w);
        goto done;
    }
    rc = pt_recwriter_commit(w, err);
done:
    text_close(&state);
    text_close(&arch);
    text_close(&units);
    text_close(&config);
    text_close(&freeze);
    return rc;
}

static int is_checkpoint_name(const char *name, int64_t *step)
{
    char *end;
    if (strncmp(name, "step_", 5) != 0)
        return 0;
    long long v = strtoll(name + 5, &end, 10);
    if (end == name + 5 || *end || v < 0)
        return 0;
    *step = v;
    return 1;
}

static int has_manifest(const char *dir)
{
    char path[PATH_BUF];
    struct stat st;
    join(path, dir, "manifest");
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[PATH_BUF];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && *join(path, dir, e->d_name))
            unlink(path);
    closedir(d);
    rmdir(dir);
}

/* Keeps the newest `keep` complete checkpoints; removes older ones and
 * incomplete directories other than `current`. */
static void prune(const char *run_dir, int keep, int64_t current)
{
    char root[PATH_BUF], path[PATH_BUF];
    DIR *d = opendir(join(root, run_dir, "checkpoints"));
    if (!d)
        return;
    int64_t steps[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        int64_t step;
        if (!is_checkpoint_name(e->d_name, &step))
            continue;
        join(path, root, e->d_name);
        if (has_manifest(path))
            steps[n++] = step;
        else if (step != current)
            remove_dir(path);
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        int newer = 0;
        for (int j = 0; j < n; j++)
            newer += steps[j] > steps[i];
        if (newer >= keep) {
            step_dir(run_dir, steps[i], path, sizeof path);
            remove_dir(path);
        }
    }
}

int pt_checkpoint_save(pt_run *r, pt_err *err)
{
    char dir[PATH_BUF], path[PATH_BUF], file[64];
    step_dir(r->cfg.run.dir, r->step, dir, sizeof dir);
    /* every stage writes its units, then (all of them done) rank 0 the manifest */
    int rc = r->stage == 0 ? pt_mkdir_p(dir, 0755, err) : 0;
    if ((rc = pt_agree(r->pipe, rc, err)))
        return pt_err_prefix(err, "saving checkpoint %s", dir);
    units_file(r->stage, file, sizeof file);
    rc = write_units(r, join(path, dir, file), err);
    if (rc == 0)
        rc = pt_test_fault("checkpoint", r->rank, r->step, err);
    if ((rc = pt_agree(r->pipe, rc, err)))
        return pt_err_prefix(err, "saving checkpoint %s", dir);
    if (r->stage == 0) {
        rc = write_manifest(r, dir, err);
        if (rc == 0)
            prune(r->cfg.run.dir, r->cfg.train.keep_checkpoints, r->step);
    }
    if ((rc = pt_agree(r->pipe, rc, err)))
        return pt_err_prefix(err, "saving checkpoint %s", dir);
    return 0;
}

/* ------------------------------------------------------------------ load */

int pt_checkpoint_latest(const char *run_dir, char *out, size_t n, pt_err *err)
{
    char root[PATH_BUF], path[PATH_BUF];
    DIR *d = opendir(join(root, run_dir, "checkpoints"));
    int64_t best = -1;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            int64_t step;
            if (!is_checkpoint_name(e->d_name, &step) || step <= best)
                continue;
            if (has_manifest(join(path, root, e->d_name)))
                best = step;
        }
        closedir(d);
    }
    if (best < 0)
        return pt_fail(err, PT_EINPUT, "no checkpoint in '%s'", root);
    step_dir(run_dir, best, out, n);
    return 0;
}

typedef struct manifest {
    pt_recfile *f;
    const char *state, *arch, *units, *config, *freeze;
    uint64_t state_len, arch_len, units_len, config_len, freeze_len;
} manifest;

static int manifest_open(manifest *m, const char *dir, pt_err *err)
{
    char path[PATH_BUF];
    uint32_t version;
    memset(m, 0, sizeof *m);
    join(path, dir, "manifest");
    int rc = pt_recfile_open(&m->f, path, MANIFEST_MAGIC, &version, err);
    if (rc)
        return input_error(rc, err);
    const void *p[5];
    if (version != FORMAT_VERSION)
        rc = pt_fail(err, PT_EINPUT, "'%s': checkpoint format %u; this pipetrain reads format %d",
                     path, version, FORMAT_VERSION);
    else if ((rc = pt_recfile_find(m->f, "state", &p[0], &m->state_len, err)) == 0 &&
             (rc = pt_recfile_find(m->f, "arch", &p[1], &m->arch_len, err)) == 0 &&
             (rc = pt_recfile_find(m->f, "units", &p[2], &m->units_len, err)) == 0 &&
             (rc = pt_recfile_find(m->f, "config", &p[3], &m->config_len, err)) == 0)
        rc = pt_recfile_find(m->f, "freeze", &p[4], &m->freeze_len, err);
    if (rc) {
        pt_recfile_close(m->f);
        m->f = NULL;
        return rc;
    }
    m->state = p[0];
    m->arch = p[1];
    m->units = p[2];
    m->config = p[3];
    m->freeze = p[4];
    return 0;
}

int pt_checkpoint_read_config(const char *dir, pt_config *cfg, pt_arch *arch, pt_err *err)
{
    manifest m;
    int rc = manifest_open(&m, dir, err);
    if (rc)
        return rc;
    pt_config_defaults(cfg);
    char name[PATH_BUF];
    snprintf(name, sizeof name, "%s/manifest (config record)", dir);
    rc = pt_config_load_text(cfg, m.config, m.config_len, name, err);
    if (rc == 0 && arch_read(m.arch, m.arch_len, arch))
        rc = pt_fail(err, PT_EINPUT, "'%s/manifest': the architecture record is malformed", dir);
    pt_recfile_close(m.f);
    return rc;
}

/* Reads parameters (and moments when `moments`) of every unit of the run's
 * segment from the unit files the manifest names. */
static int load_units(pt_run *r, const char *dir, const manifest *m, int moments, pt_err *err)
{
    pt_segment *s = r->seg;
    const int first = pt_segment_first(s), count = pt_segment_count(s);
    int rc = 0;
    pt_recfile *f = NULL;
    char open_name[256] = "";
    for (int u = first; rc == 0 && u < first + count; u++) {
        pt_unit_info info;
        pt_unit_info_get(&r->arch, u, &info);
        char file[256], path[PATH_BUF];
        if (kv_get(m->units, m->units_len, info.name, file, sizeof file) || strchr(file, '/')) {
            rc = pt_fail(err, PT_EINPUT, "'%s/manifest' does not say which file holds unit %s", dir,
                         info.name);
            break;
        }
        if (strcmp(file, open_name) != 0) {
            uint32_t version;
            pt_recfile_close(f);
            f = NULL;
            if ((rc = pt_recfile_open(&f, join(path, dir, file), UNITS_MAGIC, &version, err))) {
                rc = input_error(rc, err);
                break;
            }
            if (version != FORMAT_VERSION) {
                rc = pt_fail(err, PT_EINPUT, "'%s': unit file format %u, expected %d", path,
                             version, FORMAT_VERSION);
                break;
            }
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

static int check_arch(const pt_run *r, const char *dir, const manifest *m, pt_err *err)
{
    pt_arch saved;
    if (arch_read(m->arch, m->arch_len, &saved))
        return pt_fail(err, PT_EINPUT, "'%s/manifest': the architecture record is malformed", dir);
    int was, is;
    const char *field = arch_difference(&saved, &r->arch, &was, &is);
    if (field)
        return pt_fail(err, PT_EINPUT,
                       "checkpoint %s holds a model with %s = %d, this config makes %s = %d",
                       dir, field, was, field, is);
    return 0;
}

int pt_checkpoint_load_weights(pt_run *r, const char *dir, pt_err *err)
{
    manifest m;
    int rc = manifest_open(&m, dir, err);
    if (rc == 0) {
        if ((rc = check_arch(r, dir, &m, err)) == 0)
            rc = load_units(r, dir, &m, 0, err);
        pt_recfile_close(m.f);
    }
    return pt_agree(r->pipe, rc, err);
}

static int load_state(pt_run *r, const char *dir, pt_err *err);

int pt_checkpoint_load(pt_run *r, const char *dir, pt_err *err)
{
    return pt_agree(r->pipe, load_state(r, dir, err), err);
}

static int load_state(pt_run *r, const char *dir, pt_err *err)
{
    manifest m;
    int rc = manifest_open(&m, dir, err);
    if (rc)
        return rc;
    int64_t step = 0, epoch = 0, epoch_step = 0, batch = 0, seed = 0, kind = 0, warmup = 0,
            total = 0, frozen = 0;
    double base = 0, min_lr = 0;
    const char *s = m.state;
    size_t sl = m.state_len;
    if (kv_i64(s, sl, "step", &step) || kv_i64(s, sl, "epoch", &epoch) ||
        kv_i64(s, sl, "epoch_step", &epoch_step) || kv_i64(s, sl, "batch", &batch) ||
        kv_i64(s, sl, "seed", &seed) || kv_i64(s, sl, "lr.kind", &kind) ||
        kv_f64(s, sl, "lr.base", &base) || kv_f64(s, sl, "lr.min", &min_lr) ||
        kv_i64(s, sl, "lr.warmup", &warmup) || kv_i64(s, sl, "lr.total", &total) ||
        kv_i64(s, sl, "frozen_units", &frozen) || step < 0 || epoch < 0 || epoch_step < 0 ||
        kind < 0 || kind > PT_LR_LINEAR) {
        rc = pt_fail(err, PT_EINPUT, "'%s/manifest': the state record is malformed", dir);
    } else if ((rc = check_arch(r, dir, &m, err)) == 0) {
        if (batch != r->cfg.train.batch)
            rc = pt_fail(err, PT_EINPUT,
                         "checkpoint %s was saved with train.batch = %" PRId64 ", this config has %lld; "
                         "the data position is only exact with the same batch",
                         dir, batch, r->cfg.train.batch);
        else if (seed != r->cfg.run.seed)
            rc = pt_fail(err, PT_EINPUT,
                         "checkpoint %s was saved with run.seed = %" PRId64 ", this config has %lld; "
                         "set it back to resume the same data order",
                         dir, seed, r->cfg.run.seed);
        else if (epoch_step > 0 && epoch_step >= pt_sampler_steps(&r->sampler))
            rc = pt_fail(err, PT_EINPUT,
                         "checkpoint %s is %" PRId64 " batches into an epoch of %" PRId64
                         " batches: the training data changed",
                         dir, epoch_step, pt_sampler_steps(&r->sampler));
        else if ((rc = pt_freeze_load(&r->freeze, m.freeze, m.freeze_len, err)))
            pt_err_prefix(err, "'%s/manifest'", dir);
        else if (frozen != pt_freeze_units(r->freeze.depth))
            rc = pt_fail(err, PT_EINPUT,
                         "'%s/manifest': frozen_units = %" PRId64 " does not match %d frozen blocks",
                         dir, frozen, r->freeze.depth);
        else if (frozen > 0) {
            /* lay the stages out for the frozen prefix first: which units each
             * rank holds, and which of them keep moments, depend on it */
            r->frozen_units = (int)frozen;
            rc = pt_layout_replan(r, err);
        }
    }
    if (rc == 0 && (rc = load_units(r, dir, &m, 1, err)) == 0) {
        r->step = step;
        r->epoch = epoch;
        r->epoch_step = epoch_step;
        /* The schedule follows the config, as a PyTorch scheduler follows the
         * arguments it is built with: resuming with more epochs or another
         * train.lr trains the new steps with the new schedule. Only a changed
         * schedule is worth a note; with the same config the steps are exact. */
        const int same = (int)kind == (int)r->lr.kind && base == r->lr.base &&
                         min_lr == r->lr.min_lr && warmup == r->lr.warmup && total == r->lr.total;
        if (!same && r->rank == 0)
            fprintf(stderr,
                    "pipetrain: note: the learning-rate schedule differs from the checkpoint's "
                    "(%s, lr %g, min_lr %g, warm-up %" PRId64 ", over %" PRId64 " steps, now "
                    "%s, lr %g, min_lr %g, warm-up %" PRId64 ", over %" PRId64 "); step %" PRId64
                    " onwards follows the new one\n",
                    pt_config_word("train.schedule", (int)kind), base, min_lr, warmup, total,
                    pt_config_word("train.schedule", (int)r->lr.kind), r->lr.base, r->lr.min_lr,
                    r->lr.warmup, r->lr.total, step + 1);
    }
    pt_recfile_close(m.f);
    return rc;
}
