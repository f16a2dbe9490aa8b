/*
 * read.c: reading checkpoints (see checkpoint.h, and save.c for the format
 * and how its files are bound to each other): their unit files, resuming a
 * run, loading weights for evaluation or export, and verifying a checkpoint
 * whole. The manifest and its records are manifest.c's.
 *
 * Nothing read is trusted: the manifest is used only in the directory of its
 * own step, a unit file only when its size, SHA-256 and own record agree with
 * the manifest, and every value is range-checked before it is used.
 */
#include "checkpoint/manifest.h"

#include "formats/formats.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The unit files of a manifest, opened one at a time as units ask for them
 * (a stage's units are consecutive, so each file is opened once). */
typedef struct unit_reader {
    const manifest *m;
    pt_recfile *f;
    char open_name[PT_CKPT_FILE_MAX];
} unit_reader;

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
    /* the size first: a file of another size is refused without reading
     * it (a sparse file of terabytes would take hours to hash) */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_size != (uint64_t)json_integer_value(bytes))
        return pt_fail(err, PT_EINPUT, "'%s' is not the file this checkpoint's manifest lists "
                       "(other size): it was changed, damaged or copied from another checkpoint",
                       path);
    unsigned char digest[32];
    uint64_t size;
    char hex[65];
    int rc = pt_sha256_file(path, digest, &size, err);
    if (rc)
        return pt_err_input(rc, err);
    pt_hex(digest, 32, hex);
    if (size != (uint64_t)json_integer_value(bytes) || strcmp(hex, json_string_value(sha)) != 0)
        return pt_fail(err, PT_EINPUT, "'%s' is not the file this checkpoint's manifest lists (%s): "
                       "it was changed, damaged or copied from another checkpoint",
                       path, size != (uint64_t)json_integer_value(bytes) ? "other size" : "other SHA-256");
    uint32_t version;
    if ((rc = pt_recfile_open(out, path, PT_CKPT_UNITS_MAGIC, &version, err)))
        return pt_err_input(rc, err);
    const void *text;
    uint64_t len;
    json_t *own = NULL;
    if (version != PT_CKPT_FORMAT)
        rc = pt_fail(err, PT_EINPUT, "'%s': unit file format %u, expected %d", path, version,
                     PT_CKPT_FORMAT);
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
    /* every other record is a part of a unit the manifest keeps in this
     * file: what no unit reads is not what a save wrote */
    for (int i = 0; rc == 0 && i < pt_recfile_count(*out); i++) {
        const char *tag;
        size_t tag_len;
        const void *data;
        uint64_t data_len;
        pt_recfile_get(*out, i, &tag, &tag_len, &data, &data_len);
        char unit[256];
        memcpy(unit, tag, tag_len); /* a record's tag is below 256 bytes, without NUL */
        unit[tag_len] = '\0';
        if (strcmp(unit, "checkpoint") == 0)
            continue;
        char *dot = strrchr(unit, '.');
        if (dot)
            *dot++ = '\0';
        const char *holder = dot ? json_string_value(json_object_get(m->units, unit)) : NULL;
        if (!dot || (strcmp(dot, "param") && strcmp(dot, "m") && strcmp(dot, "v")) || !holder ||
            strcmp(holder, file) != 0)
            rc = pt_fail(err, PT_EINPUT, "'%s' holds a record '%.*s' that is no part of a unit "
                         "this checkpoint's manifest keeps in it: the file was edited",
                         path, (int)(tag_len > 80 ? 80 : tag_len), tag);
    }
    if (rc) {
        pt_recfile_close(*out);
        *out = NULL;
    }
    return rc;
}

/* The record of one part of unit `info` in the file the manifest names for
 * it, checked to hold exactly the unit's floats. */
static int unit_record(unit_reader *ur, const pt_unit_info *info, pt_part part, const void **data,
                       uint64_t *len, pt_err *err)
{
    static const char *suffix[] = {"param", "grad", "m", "v"};
    const manifest *m = ur->m;
    const char *file = json_string_value(json_object_get(m->units, info->name));
    if (!pt_manifest_file_name_ok(file))
        return pt_fail(err, PT_EINPUT, "'%s/manifest' does not say which file holds unit %s",
                       m->dir, info->name);
    int rc;
    if (!ur->f || strcmp(file, ur->open_name) != 0) {
        pt_recfile_close(ur->f);
        ur->f = NULL;
        ur->open_name[0] = '\0';
        if ((rc = open_unit_file(m, file, &ur->f, err)))
            return rc;
        snprintf(ur->open_name, sizeof ur->open_name, "%s", file);
    }
    char tag[96];
    snprintf(tag, sizeof tag, "%s.%s", info->name, suffix[part]);
    if ((rc = pt_recfile_find(ur->f, tag, data, len, err)))
        return rc;
    if (*len != info->numel * sizeof(float))
        return pt_fail(err, PT_EINPUT, "'%s': %s holds %" PRIu64 " values; the model's unit has %zu",
                       pt_recfile_path(ur->f), tag, *len / sizeof(float), info->numel);
    /* A file whose digests were made again over forged values passes the
     * checks above: the values themselves must be ones training can have
     * written (finite; the second moment not negative), as a safetensors
     * file's weights must be finite. */
    const unsigned char *bytes = *data;
    for (size_t i = 0; i < info->numel; i++) {
        float x;
        memcpy(&x, bytes + i * sizeof x, sizeof x);
        if (!isfinite(x) || (part == PT_PART_V && x < 0.0f))
            return pt_fail(err, PT_EINPUT, "'%s': %s holds %g at element %zu; a checkpoint's values "
                           "must be finite%s", pt_recfile_path(ur->f), tag, (double)x, i,
                           part == PT_PART_V ? " and its second moments not negative" : "");
        /* the pages read are let go of as the check passes them: a unit
         * file is as large as a stage's training state */
        if ((i + 1) % PT_CKPT_PIECE == 0)
            pt_recfile_release(ur->f, bytes + (i + 1 - PT_CKPT_PIECE) * sizeof x,
                               PT_CKPT_PIECE * sizeof x);
    }
    pt_recfile_release(ur->f, bytes, *len);
    return 0;
}

/* Reads parameters (and moments when `moments`) of every unit of the
 * segment from the unit files the manifest names. keep: the reader is left
 * open there for the caller (its file already hashed), else closed. */
static int load_units(pt_segment *s, const manifest *m, int moments, unit_reader *keep,
                      pt_err *err)
{
    const pt_arch *arch = pt_segment_arch(s);
    const int first = pt_segment_first(s), count = pt_segment_count(s);
    int rc = 0;
    unit_reader local = {m, NULL, ""}, *ur = keep ? keep : &local;
    float *host = malloc(PT_CKPT_PIECE * sizeof *host); /* the record may not be aligned */
    if (!host)
        rc = pt_fail(err, PT_ENOMEM, "out of memory loading a checkpoint");
    for (int u = first; rc == 0 && u < first + count; u++) {
        pt_unit_info info;
        pt_unit_info_get(arch, u, &info);
        const pt_part parts[] = {PT_PART_PARAM, PT_PART_M, PT_PART_V};
        const int frozen = u - first < pt_segment_frozen(s);
        for (int k = 0; rc == 0 && k < (moments && !frozen ? 3 : 1); k++) {
            const void *data;
            uint64_t len;
            if ((rc = unit_record(ur, &info, parts[k], &data, &len, err)))
                break;
            for (size_t at = 0; rc == 0 && at < info.numel; at += PT_CKPT_PIECE) {
                size_t n = info.numel - at < PT_CKPT_PIECE ? info.numel - at : PT_CKPT_PIECE;
                const char *piece = (const char *)data + at * sizeof *host;
                memcpy(host, piece, n * sizeof *host);
                pt_recfile_release(ur->f, piece, n * sizeof *host);
                rc = pt_segment_unit_write(s, u, parts[k], at, n, host, err);
            }
        }
    }
    free(host);
    if (!keep)
        pt_recfile_close(ur->f);
    return rc;
}

/* The moments the checkpoint keeps for the segment's units (those past its
 * frozen prefix), checked as a resume reads them, not loaded (eval), through
 * the reader load_units left open (its file is not hashed again). */
static int check_moments(const manifest *m, pt_segment *s, unit_reader *ur, pt_err *err)
{
    saved_state st;
    int rc = pt_manifest_state(m, &st, err);
    const pt_arch *arch = pt_segment_arch(s);
    const int first = pt_segment_first(s), count = pt_segment_count(s);
    for (int u = first; rc == 0 && u < first + count; u++) {
        if (u < st.frozen)
            continue;
        pt_unit_info info;
        pt_unit_info_get(arch, u, &info);
        const void *data;
        uint64_t len;
        for (int k = 0; rc == 0 && k < 2; k++)
            rc = unit_record(ur, &info, k ? PT_PART_V : PT_PART_M, &data, &len, err);
    }
    return rc;
}

static int verify(const manifest *m, int config_optional, int files, pt_err *err);

int pt_checkpoint_load_segment(pt_segment *seg, const char *dir, pt_err *err)
{
    manifest m;
    int rc = pt_manifest_open(&m, dir, err);
    if (rc == 0) {
        /* the whole checkpoint first, as inspect and a resume check it */
        if ((rc = verify(&m, 0, 1, err)) == 0 &&
            (rc = pt_manifest_check_arch(pt_segment_arch(seg), &m, 0, NULL, err)) == 0 &&
            (rc = pt_manifest_check_data(&m, err)) == 0)
            rc = load_units(seg, &m, 0, NULL, err);
        pt_manifest_close(&m);
    }
    return rc;
}

/* Every rank reads the checkpoint itself: one given by a relative path, or
 * on a node whose copy of run.dir differs, may be another checkpoint than
 * rank 0's, and units of two would be mixed. Each rank's manifest id
 * against rank 0's (an unopened manifest: none; its own error stands).
 * Collective over the world. */
static int same_checkpoint(pt_run *r, const manifest *m, int rc, const char *dir, pt_err *err)
{
    char id[PT_CKPT_ID_CHARS + 1] = "";
    if (m->j && m->id)
        snprintf(id, sizeof id, "%s", m->id);
    char root[sizeof id];
    memcpy(root, id, sizeof id);
    int got = pt_bcast(pt_comm_world(r->comm), root, sizeof root, 0, err);
    if (rc)
        return rc;
    if (got)
        return got;
    if (*root && strcmp(id, root) != 0)
        return pt_fail(err, PT_EINPUT,
                       "checkpoint '%s' is not the one rank 0 reads (checkpoint id %s here, %s "
                       "on rank 0): every rank must read one checkpoint (a path from other "
                       "working directories, or a run.dir the nodes do not share?)",
                       dir, id, root);
    return 0;
}

/* Generated data has no digest: its examples are a function of run.seed
 * and data.synthetic_examples (with the model's sizes, which the checkpoint
 * checks). Where either differs from the saved run's, the evaluation draws
 * other test examples, and those of one seed may be another seed's
 * training examples: said once. */
static void note_other_generated(const pt_config *now, const manifest *m)
{
    pt_config *was = malloc(sizeof *was); /* large: keep it off the stack */
    pt_arch arch;
    pt_err ignored;
    char seed[256] = "", count[256] = "";
    if (was && pt_manifest_config(m, was, &arch, &ignored) == 0) {
        const int s = pt_config_differences(was, now, "run.seed", seed, sizeof seed);
        const int n = pt_config_differences(was, now, "data.synthetic_examples", count, sizeof count);
        if (s > 0 || n > 0)
            fprintf(stderr,
                    "pipetrain: note: evaluating %s on other generated test examples than its "
                    "run evaluated (%s%s%s): some may be examples it trained on\n",
                    m->dir, seed, s > 0 && n > 0 ? ", " : "", count);
    }
    free(was);
}

/* An evaluation of a checkpoint on other test examples than its run
 * evaluated is allowed (another test file is a use), but where the test
 * split comes from the training data (another data.test_fraction), some
 * of its examples may be ones the model trained on: said once. */
static void note_other_test_split(const pt_ckpt_run *c, const manifest *m)
{
    const char *sha;
    int64_t n;
    pt_err ignored;
    const int kind = c->cfg->data.kind;
    if (c->run->rank == 0 && (kind == PT_DATA_SYNTH_IMAGES || kind == PT_DATA_SYNTH_TEXT)) {
        note_other_generated(c->cfg, m);
        return;
    }
    if (c->run->rank != 0 || !c->test || !c->test_sha256 || !*c->test_sha256 ||
        pt_manifest_data(m, "test", &sha, &n, &ignored) || !sha ||
        (strcmp(sha, c->test_sha256) == 0 && n == c->test->count))
        return;
    pt_config *was = malloc(sizeof *was); /* large: keep it off the stack */
    pt_arch arch;
    char diff[1024] = "";
    if (was && pt_manifest_config(m, was, &arch, &ignored) == 0 &&
        pt_config_differences(was, c->cfg, "data.", diff, sizeof diff) <= 0)
        diff[0] = '\0';
    fprintf(stderr,
            "pipetrain: note: evaluating %s on other test examples than its run evaluated (%" PRId64
            " examples, SHA-256 %.16s... then; %" PRId64 ", %.16s... now%s%s): where they come from "
            "the training data, some may be examples it trained on\n",
            m->dir, n, sha, c->test->count, c->test_sha256, *diff ? "; " : "", diff);
    free(was);
}

/* The differences between a and b (as pt_config_differences) in the keys
 * that decide how many training examples b's data.kind makes: the kind,
 * where the examples come from, and what splits the test examples off them;
 * not those that change only their order, pixels or test split
 * (data.shuffle, data.mean, data.test_images, ...). Returns how many. */
static int train_count_differences(const pt_config *a, const pt_config *b, char *out, size_t n)
{
    const char *keys[4] = {"data.kind", NULL, NULL, NULL};
    switch (b->data.kind) {
    case PT_DATA_FASHION_MNIST:
    case PT_DATA_IDX:
        keys[1] = "data.train_images";
        keys[2] = "data.train_labels";
        break;
    case PT_DATA_TEXT_FILE:
    case PT_DATA_KJV:
        keys[1] = "data.text";
        keys[2] = "data.test_fraction";
        break;
    case PT_DATA_TEXT_CLASSIFICATION:
        /* a test file takes nothing from the training file; none cuts the
         * test split from it (data.test_fraction) */
        keys[1] = "data.train_file";
        keys[2] = !*a->data.test_file != !*b->data.test_file ? "data.test_file" : "";
        keys[3] = *b->data.test_file ? "" : "data.test_fraction";
        break;
    default:
        keys[1] = "data.synthetic_examples";
        break;
    }
    int count = 0;
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < 4 && keys[i]; i++) {
        char one[1024];
        if (!*keys[i] || pt_config_differences(a, b, keys[i], one, sizeof one) <= 0)
            continue;
        const size_t sep = count++ ? 2 : 0, len = strlen(one);
        if (used + sep + len < n) { /* else cut: the rest is not written */
            memcpy(out + used, ", ", sep);
            memcpy(out + used + sep, one, len + 1);
            used += sep + len;
        }
    }
    return count;
}

int pt_checkpoint_load_weights(const pt_ckpt_run *c, const char *dir, pt_err *err)
{
    pt_run *r = c->run;
    manifest m;
    int rc = pt_manifest_open(&m, dir, err); /* every rank: the labels */
    rc = same_checkpoint(r, &m, rc, dir, err); /* first: any other check would mislead */
    /* the manifest as inspect and a resume check it (rank 0; the agreement
     * below tells the others), and each rank its own units' moments: weights
     * beside a damaged or edited state are refused too */
    if (rc == 0 && r->rank == 0)
        rc = verify(&m, 1, 0, err);
    if (rc == 0) {
        /* the test split keeps the training file's classes and labels */
        rc = pt_manifest_check_labels(&m, &r->arch, c->test, c->cfg->data.train_file, err);
        if (rc == 0 && (rc = pt_manifest_check_data(&m, err)) == 0)
            rc = pt_manifest_check_vocab(&m, c->cfg->data.vocab, c->vocab_sha256, err);
        const char *key = NULL;
        unit_reader ur = {&m, NULL, ""};
        if (rc == 0 && r->active &&
            (rc = pt_manifest_check_arch(pt_segment_arch(r->seg), &m, 0, &key, err)) == 0 &&
            (rc = load_units(r->seg, &m, 0, &ur, err)) == 0)
            rc = check_moments(&m, r->seg, &ur, err);
        else if (rc == PT_EINPUT && key) /* the config's line that makes the other model */
            pt_config_key_prefix(c->cfg, err, pt_ckpt_arch_key(key, c->cfg, 1));
        pt_recfile_close(ur.f);
        if (rc == 0)
            note_other_test_split(c, &m);
    }
    if (m.j || m.f)
        pt_manifest_close(&m);
    return pt_run_agree(r, rc, err);
}

/* How many of the data settings that differ between a and b (as
 * pt_config_differences) name only where the test examples come from: the
 * test images and labels, or another test file where both runs have one (a
 * test file added or dropped changes what the training file gives). */
static int test_only_differences(const pt_config *a, const pt_config *b)
{
    char ignored[8];
    int count = pt_config_differences(a, b, "data.test_images", ignored, sizeof ignored) +
                pt_config_differences(a, b, "data.test_labels", ignored, sizeof ignored);
    if (!*a->data.test_file == !*b->data.test_file)
        count += pt_config_differences(a, b, "data.test_file", ignored, sizeof ignored);
    return count;
}

/* Other data settings than the checkpoint's (another file, more examples,
 * shuffle off) are allowed (the batch and seed are checked, and an epoch
 * that no longer fits its position is refused), but the resume is then no
 * longer the run that did not stop: said once, on stderr. */
static void note_data_changes(const pt_ckpt_run *c, const manifest *m)
{
    const pt_config *now = c->cfg;
    pt_config *was = malloc(sizeof *was); /* large: keep it off the stack */
    pt_arch arch;
    pt_err ignored;
    char diff[1024];
    const int have = was && pt_manifest_config(m, was, &arch, &ignored) == 0;
    const int changed_data = have ? pt_config_differences(was, now, "data.", diff, sizeof diff) : 0;
    const int test_only = changed_data > 0 && changed_data == test_only_differences(was, now);
    if (test_only) {
        fprintf(stderr,
                "pipetrain: note: resuming %s with other test data settings than it was saved "
                "with (%s): its evaluations are not comparable with the saved run's\n",
                m->dir, diff);
    } else if (changed_data > 0) {
        fprintf(stderr,
                "pipetrain: note: resuming %s with other data settings than it was saved with "
                "(%s): the data order and position are only exact with the same data\n",
                m->dir, diff);
    }
    if (have && (changed_data == 0 || test_only)) {
        /* the same settings, other examples: a file changed in place (with
         * only the test source's settings changed, the training split's) */
        static const char *const splits[] = {"train", "test"};
        for (int i = 0; i < (test_only ? 1 : 2); i++) {
            const char *is = i == 0 ? c->train_sha256 : c->test_sha256, *sha;
            const pt_dataset *ds = i == 0 ? c->train : c->test;
            int64_t n;
            char from[2 * PT_PATH_MAX + 80];
            if (pt_manifest_data(m, splits[i], &sha, &n, &ignored) || !sha || !is || !*is ||
                (strcmp(sha, is) == 0 && n == ds->count))
                continue;
            pt_config_data_source(now, i, from, sizeof from);
            fprintf(stderr,
                    "pipetrain: note: resuming %s on other %s examples than it was saved with, "
                    "from the same settings: %s changed since (%" PRId64 " examples, SHA-256 "
                    "%.16s... then; %" PRId64 ", %.16s... now); %s\n",
                    m->dir, i == 0 ? "training" : "test", from, n, sha, ds->count, is,
                    i == 0 ? "the data order and position are only exact with the same data"
                           : "its evaluations are not comparable with the saved run's");
        }
    }
    /* the optimizer's and the freezing's settings (the learning rate has
     * its own note): allowed, as a changed PyTorch optimizer would be, but
     * the steps from here are not the run that did not stop; frozen blocks
     * stay frozen whatever the freezing says now */
    static const char *const training[] = {"train.weight_decay", "train.beta1", "train.beta2",
                                           "train.eps", "train.grad_clip", "freeze."};
    char all[1024] = "";
    int changed = 0;
    for (size_t i = 0; have && i < sizeof training / sizeof *training; i++) {
        if (pt_config_differences(was, now, training[i], diff, sizeof diff) > 0) {
            size_t at = strlen(all);
            snprintf(all + at, sizeof all - at, "%s%.*s", changed ? ", " : "",
                     (int)(sizeof all - 1 - at), diff);
            changed = 1;
        }
    }
    if (changed)
        fprintf(stderr,
                "pipetrain: note: resuming %s with other optimizer or freezing settings than it was "
                "saved with (%s): the steps from here follow them (blocks frozen so far stay "
                "frozen)\n",
                m->dir, all);
    /* where a fresh run's weights come from: a resume continues the
     * checkpoint's, whatever these say now (a bert's model.init_from is
     * still read for its config.json: the dropout that auto takes) */
    if (have && pt_config_differences(was, now, "model.init_", diff, sizeof diff) > 0)
        fprintf(stderr,
                "pipetrain: note: resuming %s with other initial weights than it was saved with "
                "(%s): none are loaded, a resume continues the checkpoint's weights\n",
                m->dir, diff);
    /* the arithmetic's precision: allowed (a run moved to another device
     * kind), but the steps from here round otherwise */
    if (have && pt_config_differences(was, now, "run.precision", diff, sizeof diff) > 0)
        fprintf(stderr,
                "pipetrain: note: resuming %s with another run.precision than it was saved with "
                "(%s): the steps from here round otherwise than the saved run's would have\n",
                m->dir, diff);
    free(was);
}

static int load_state(const pt_ckpt_run *c, const char *dir, pt_err *err)
{
    pt_run *r = c->run;
    manifest m;
    saved_state st;
    memset(&st, 0, sizeof st);
    /* every rank goes through the same collectives whatever fails where */
    int rc = pt_manifest_open(&m, dir, err);
    rc = same_checkpoint(r, &m, rc, dir, err); /* first: any other check would mislead */
    /* the config's key that differs from the saved run (a model's, the batch, the seed) */
    const char *arch_key = NULL;
    if (rc == 0 && (rc = pt_manifest_state(&m, &st, err)) == 0 &&
        (rc = pt_manifest_check_arch(&r->arch, &m, 1, &arch_key, err)) == 0 &&
        (rc = pt_manifest_check_labels(&m, &r->arch, c->train, c->cfg->data.train_file, err)) == 0 &&
        (rc = pt_manifest_check_vocab(&m, c->cfg->data.vocab, c->vocab_sha256, err)) == 0 &&
        (rc = pt_manifest_check_data(&m, err)) == 0) {
        if (st.batch != c->cfg->train.batch) {
            arch_key = "train.batch";
            rc = pt_fail(err, PT_EINPUT,
                         "checkpoint %s was saved with train.batch = %" PRId64 ", this config has %lld; "
                         "the data position is only exact with the same batch",
                         dir, st.batch, c->cfg->train.batch);
        } else if (st.seed != c->cfg->run.seed) {
            arch_key = "run.seed";
            rc = pt_fail(err, PT_EINPUT,
                         "checkpoint %s was saved with run.seed = %" PRId64 ", this config has %lld; "
                         "set it back to resume the same data order",
                         dir, st.seed, c->cfg->run.seed);
        } else if (st.epoch_step > 0 && st.epoch_step >= pt_sampler_steps(&r->sampler)) {
            /* the key that changed the data, named as the others are: the
             * first key that decides the count of training examples and
             * differs from the saved run's, else the file the training
             * examples come from (changed in place) */
            static char key[64];
            char diff[1024] = "", from[2 * PT_PATH_MAX + 80];
            pt_config *was = malloc(sizeof *was); /* large: keep it off the stack */
            pt_arch saved;
            pt_err ignored;
            if (was && pt_manifest_config(&m, was, &saved, &ignored) == 0 &&
                train_count_differences(was, c->cfg, diff, sizeof diff) > 0) {
                snprintf(key, sizeof key, "%.*s", (int)strcspn(diff, " "), diff);
                arch_key = key;
            } else {
                diff[0] = '\0';
                arch_key = pt_config_data_key(c->cfg);
            }
            free(was);
            pt_config_data_source(c->cfg, 0, from, sizeof from);
            rc = pt_fail(err, PT_EINPUT,
                         "checkpoint %s is %" PRId64 " batches into an epoch of %" PRId64
                         " batches: the training data changed (%s%s); resume with the data it "
                         "was saved with, or start a new run",
                         dir, st.epoch_step, pt_sampler_steps(&r->sampler),
                         *diff ? diff : from, *diff ? "" : ", changed since");
        }
        else if ((rc = pt_freeze_from_json(&r->freeze, json_object_get(m.j, "freeze"), m.step, err)))
            pt_err_prefix(err, "'%s/manifest'", dir);
        else if (st.frozen != pt_freeze_units(r->freeze.depth))
            rc = pt_fail(err, PT_EINPUT,
                         "'%s/manifest': frozen_units = %" PRId64 " does not match %d frozen blocks",
                         dir, st.frozen, r->freeze.depth);
        else {
            pt_profile prof; /* used before the load (setup.c); here only checked */
            if ((rc = pt_manifest_profile(&m, &r->arch, &prof, err)) == 0)
                pt_profile_free(&prof);
        }
    }
    /* the rest of the manifest as inspect checks it (rank 0; the agreement
     * below tells the others): the config record; each rank's units'
     * records are checked as they load */
    if (rc == 0 && r->rank == 0)
        rc = verify(&m, 0, 0, err);
    if (rc == PT_EINPUT && arch_key)
        pt_config_key_prefix(c->cfg, err, pt_ckpt_arch_key(arch_key, c->cfg, 0));
    if (rc == 0 && r->rank == 0)
        note_data_changes(c, &m);
    /* every rank learns whether the state was good before the layout changes */
    /* the first layout was planned for the prefix rank 0 read before the
     * lock (layout.c); the checkpoint resolved under it may be another */
    if ((rc = pt_run_agree(r, rc, err)) == 0 && st.frozen < r->frozen_units)
        rc = pt_fail(err, PT_EINPUT, "checkpoint %s has %" PRId64 " frozen units, fewer than the "
                     "%d of the one this job planned from: run.dir changed while it started; "
                     "start it again", dir, st.frozen, r->frozen_units);
    else if (rc == 0 && st.frozen > r->frozen_units) {
        /* lay the stages out for the frozen prefix first: which units each
         * rank holds, and which of them keep moments, depend on it */
        r->frozen_units = (int)st.frozen;
        rc = pt_layout_replan(r, NULL, err);
    }
    if (rc == 0 && r->active)
        rc = load_units(r->seg, &m, 1, NULL, err);
    if (rc == 0) {
        r->step = m.step;
        r->epoch = st.epoch;
        r->epoch_step = st.epoch_step;
        /* The run ends with epoch train.epochs of the data it has now. With
         * the saved data that is per_epoch * epochs steps, as pt_run_open
         * counted; with another number of batches per epoch the epochs
         * trained keep the steps they had, and only the rest are counted
         * with the new one. */
        const int64_t per_epoch = pt_sampler_steps(&r->sampler);
        /* (in int64 without overflow whatever the manifest's counts: one
         * past any run's end, or before its step, saturates) */
        int64_t rest, total;
        if (__builtin_mul_overflow(r->spec.epochs - r->epoch, per_epoch, &rest) ||
            __builtin_add_overflow(r->step - r->epoch_step, rest, &total))
            total = r->spec.epochs > r->epoch ? INT64_MAX : 0;
        if (r->spec.max_steps > 0 && r->spec.max_steps < total)
            total = r->spec.max_steps;
        r->total_steps = total > 0 ? total : 0;
        r->lr.total = r->total_steps;
        /* The schedule follows the config, as a PyTorch scheduler follows the
         * arguments it is built with: resuming with more epochs or another
         * train.lr trains the new steps with the new schedule. Only a changed
         * schedule is worth a note; with the same config the steps are exact. */
        const pt_lr_schedule *was = &st.lr, *now = &r->lr;
        /* (a constant schedule never reaches its min_lr) */
        const int same = was->kind == now->kind && was->base == now->base &&
                         (was->min_lr == now->min_lr || now->kind == PT_LR_CONSTANT) &&
                         was->warmup == now->warmup && was->total == now->total;
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
        pt_manifest_close(&m);
    return rc;
}

int pt_checkpoint_load(const pt_ckpt_run *c, const char *dir, pt_err *err)
{
    return pt_run_agree(c->run, load_state(c, dir, err), err);
}

/* The units of a whole model as a resume of any layout reads them (frozen
 * units without moments), then every file the manifest lists, each opened
 * and checked even if no unit names it. */
static int verify_files(const manifest *m, const pt_arch *arch, int64_t frozen, pt_err *err)
{
    unit_reader ur = {m, NULL, ""};
    int rc = 0;
    for (int u = 0; rc == 0 && u < pt_arch_units(arch); u++) {
        pt_unit_info info;
        pt_unit_info_get(arch, u, &info);
        const pt_part parts[] = {PT_PART_PARAM, PT_PART_M, PT_PART_V};
        for (int k = 0; rc == 0 && k < (u < frozen ? 1 : 3); k++) {
            const void *data;
            uint64_t len;
            rc = unit_record(&ur, &info, parts[k], &data, &len, err);
        }
    }
    pt_recfile_close(ur.f);
    const char *file;
    const json_t *listed;
    json_object_foreach((json_t *)m->files, file, listed) {
        pt_recfile *f = NULL;
        if (rc)
            break;
        if (!pt_manifest_file_name_ok(file))
            rc = pt_fail(err, PT_EINPUT, "'%s/manifest' lists a file named '%.80s', which is not a "
                         "unit file of this directory", m->dir, file);
        else
            rc = open_unit_file(m, file, &f, err);
        pt_recfile_close(f);
    }
    return rc;
}

/* pt_checkpoint_verify of a manifest its caller has open (and goes on to
 * read: what is checked is what is read); config_optional: a config record that does not
 * read (a newer pipetrain's key) is let be, for a command that needs only
 * the weights (eval with its tokenizer keys set); files 0: the manifest's
 * records alone, for a resume or an eval on several ranks, where each rank
 * checks the records of its own units (one rank reading every file while the
 * others wait would make a wait as long as the whole checkpoint's reading,
 * past run.timeout_s for a large one). */
static int verify(const manifest *m, int config_optional, int files, pt_err *err)
{
    const char *dir = m->dir;
    int rc = 0;
    pt_config *cfg = malloc(sizeof *cfg); /* large: keep it off the stack */
    pt_arch arch;
    saved_state st;
    pt_freeze_state freeze;
    memset(&freeze, 0, sizeof freeze);
    if (!cfg)
        rc = pt_fail(err, PT_ENOMEM, "out of memory checking checkpoint %s", dir);
    int read = 1;
    if (rc == 0)
        rc = config_optional ? pt_manifest_config_if_read(m, cfg, &arch, &read, err)
                             : pt_manifest_config(m, cfg, &arch, err);
    if (rc == 0)
        rc = pt_manifest_state(m, &st, err);
    /* the state's batch and seed are the config record's */
    if (rc == 0 && read && (st.batch != cfg->train.batch || st.seed != cfg->run.seed))
        rc = pt_fail(err, PT_EINPUT, "'%s/manifest': its state's %s is not its config record's: "
                     "the manifest was edited", dir,
                     st.batch != cfg->train.batch ? "train.batch" : "run.seed");
    /* its own architecture: the units it lists must be that model's */
    if (rc == 0)
        rc = pt_manifest_check_arch(&arch, m, 0, NULL, err);
    if (rc == 0) {
        const pt_freeze_config none = {PT_FREEZE_NONE, 0, 0};
        rc = pt_freeze_init(&freeze, &none, arch.layers, err);
    }
    if (rc == 0 && (rc = pt_freeze_from_json(&freeze, json_object_get(m->j, "freeze"), m->step, err)))
        pt_err_prefix(err, "'%s/manifest'", dir);
    if (rc == 0 && st.frozen != pt_freeze_units(freeze.depth))
        rc = pt_fail(err, PT_EINPUT, "'%s/manifest': frozen_units = %" PRId64 " does not match %d "
                     "frozen blocks", dir, st.frozen, freeze.depth);
    pt_profile prof;
    if (rc == 0 && (rc = pt_manifest_profile(m, &arch, &prof, err)) == 0)
        pt_profile_free(&prof);
    const json_t *labels;
    int count;
    if (rc == 0)
        rc = pt_manifest_labels(m, arch.classes, &labels, &count, err);
    if (rc == 0 && read && count > 0 && cfg->data.kind != PT_DATA_TEXT_CLASSIFICATION)
        rc = pt_fail(err, PT_EINPUT, "'%s/manifest' holds class labels, but its config record "
                     "trains on %s data, which has none: the manifest was edited", dir,
                     pt_config_word("data.kind", cfg->data.kind));
    if (rc == 0)
        rc = pt_manifest_check_data(m, err);
    char cwd[PT_PATH_MAX]; /* the directory its run started in, as export reads it */
    if (rc == 0)
        rc = pt_checkpoint_read_cwd(dir, cwd, sizeof cwd, err);
    if (rc == 0 && files)
        rc = verify_files(m, &arch, st.frozen, err);
    pt_freeze_free(&freeze);
    free(cfg);
    return rc;
}

int pt_checkpoint_verify(const char *dir, pt_err *err)
{
    manifest m;
    int rc = pt_manifest_open(&m, dir, err);
    if (rc == 0) {
        rc = verify(&m, 0, 1, err);
        pt_manifest_close(&m);
    }
    return rc;
}

/* A string of the manifest or JSON null (a field an older format lacks). */
static json_t *string_or_null(const json_t *v)
{
    return json_is_string(v) ? json_string(json_string_value(v)) : json_null();
}

/* The "data" record's part as {"sha256", "examples"} or null. */
static int describe_data(const manifest *m, const char *part, json_t *out, pt_err *err)
{
    const char *sha;
    int64_t examples;
    int rc = pt_manifest_data(m, part, &sha, &examples, err);
    if (rc)
        return rc;
    json_t *o = json_null();
    if (sha) {
        o = json_object();
        json_object_set_new(o, "sha256", json_string(sha));
        if (examples >= 0)
            json_object_set_new(o, "examples", json_integer((json_int_t)examples));
    }
    json_object_set_new(out, part, o);
    return 0;
}

int pt_checkpoint_describe(const char *dir, pt_config *cfg, json_t **out, pt_err *err)
{
    *out = NULL;
    manifest m;
    int rc = pt_manifest_open(&m, dir, err);
    if (rc)
        return rc;
    if ((rc = verify(&m, 0, 1, err))) {
        pt_manifest_close(&m);
        return rc;
    }
    pt_arch arch;
    saved_state st;
    const json_t *labels = NULL;
    int count = 0;
    if ((rc = pt_manifest_config(&m, cfg, &arch, err)) ||
        (rc = pt_manifest_state(&m, &st, err)) ||
        (rc = pt_manifest_labels(&m, arch.classes, &labels, &count, err))) {
        pt_manifest_close(&m);
        return rc;
    }
    const json_t *depth = json_object_get(json_object_get(m.j, "freeze"), "depth");
    size_t params = 0;
    for (int u = 0; u < pt_arch_units(&arch); u++) {
        pt_unit_info info;
        pt_unit_info_get(&arch, u, &info);
        params += info.numel;
    }
    json_t *o = json_object(), *model = json_object(), *lr = json_object(), *data = json_object();
    json_object_set_new(o, "checkpoint", pt_json_text(dir));
    json_object_set_new(o, "id", json_string(m.id));
    json_object_set_new(o, "step", json_integer((json_int_t)m.step));
    json_object_set_new(o, "epoch", json_integer((json_int_t)st.epoch));
    json_object_set_new(o, "epoch_step", json_integer((json_int_t)st.epoch_step));
    json_object_set_new(o, "batch", json_integer((json_int_t)st.batch));
    json_object_set_new(o, "seed", json_integer((json_int_t)st.seed));
    json_object_set_new(model, "kind", json_string(pt_config_word("model.kind", arch.kind)));
    json_object_set_new(model, "parameters", json_integer((json_int_t)params));
    json_object_set_new(model, "dim", json_integer(arch.dim));
    json_object_set_new(model, "layers", json_integer(arch.layers));
    json_object_set_new(model, "heads", json_integer(arch.heads));
    json_object_set_new(model, "mlp_hidden", json_integer(arch.mlp_hidden));
    json_object_set_new(model, "tokens", json_integer(pt_arch_tokens(&arch)));
    json_object_set_new(model, "classes", json_integer(pt_arch_out_classes(&arch)));
    json_object_set_new(o, "model", model);
    /* verified: an integer from 0 to the blocks */
    json_object_set_new(o, "frozen_blocks", json_integer(json_integer_value(depth)));
    json_object_set_new(lr, "schedule", json_string(pt_config_word("train.schedule", st.lr.kind)));
    json_object_set_new(lr, "peak", pt_json_number(st.lr.base));
    json_object_set_new(lr, "min", pt_json_number(st.lr.min_lr));
    json_object_set_new(lr, "warmup_steps", json_integer((json_int_t)st.lr.warmup));
    json_object_set_new(lr, "total_steps", json_integer((json_int_t)st.lr.total));
    json_object_set_new(lr, "next", pt_json_number(pt_lr_at(&st.lr, m.step)));
    json_object_set_new(o, "lr", lr);
    json_t *names = json_null();
    if (count) {
        names = json_array();
        for (int i = 0; i < count; i++)
            json_array_append_new(names, json_string(json_string_value(json_array_get(labels, i))));
    }
    json_object_set_new(o, "labels", names);
    const char *parts[3] = {"train", "test", "vocab"};
    for (int i = 0; rc == 0 && i < 3; i++)
        rc = describe_data(&m, parts[i], data, err);
    json_object_set_new(o, "data", data);
    json_object_set_new(o, "started_in", string_or_null(json_object_get(m.j, "cwd")));
    json_int_t bytes = 0;
    const char *name;
    const json_t *file;
    json_object_foreach((json_t *)m.files, name, file)
        bytes += json_integer_value(json_object_get(file, "bytes"));
    json_object_set_new(o, "files", json_integer((json_int_t)json_object_size(m.files)));
    json_object_set_new(o, "bytes", json_integer(bytes));
    pt_manifest_close(&m);
    if (rc) {
        json_decref(o);
        return rc;
    }
    *out = o;
    return 0;
}
