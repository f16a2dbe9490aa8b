/*
 * test_checkpoint_verify.c: pt_checkpoint_verify and pt_checkpoint_read_config
 * (checkpoint/checkpoint.h) on the checkpoint of a tiny real run (the fuzz
 * fixture, tests/fuzz/fixtures/step_0000000002, written by
 * tests/fuzz/make_corpus.py): it verifies; then one defect at a time, each
 * refused with PT_EINPUT and a message that names it. Manifests with one
 * field changed are rebuilt from the fixture's JSON, so each check is
 * reached behind a valid CRC.
 */
#include "formats/formats.h"
#include "checkpoint/checkpoint.h"
#include "tests/common/test_util.h"
#include "tests/common/cunit_main.h"

#ifndef PT_FIXTURES
#error "PT_FIXTURES: tests/fuzz/fixtures (set by tests/checkpoint/CMakeLists.txt)"
#endif

#define STEP "step_0000000002"

/* A run directory holding a copy of the fixture checkpoint. */
typedef struct fixture {
    char *root, *step_dir;
    json_t *manifest; /* the fixture's manifest record */
} fixture;

static void copy(const char *from_dir, const char *to_dir, const char *name)
{
    char *from = join_path(from_dir, name), *to = join_path(to_dir, name);
    size_t n = 0;
    unsigned char *bytes = read_raw(from, &n);
    CU_ASSERT_FATAL(bytes != NULL);
    CU_ASSERT_FATAL(write_raw(to, bytes, n) == 0);
    free(bytes);
    free(from);
    free(to);
}

static fixture make(const char *step_name)
{
    fixture f;
    pt_err err;
    f.root = make_temp_dir();
    CU_ASSERT_FATAL(f.root != NULL);
    char *checkpoints = join_path(f.root, "checkpoints");
    f.step_dir = join_path(checkpoints, step_name);
    CU_ASSERT_FATAL(mkdir(checkpoints, 0755) == 0 && mkdir(f.step_dir, 0755) == 0);
    free(checkpoints);
    copy(PT_FIXTURES "/" STEP, f.step_dir, "manifest");
    copy(PT_FIXTURES "/" STEP, f.step_dir, "units-stage0.bin");
    pt_recfile *rf;
    uint32_t version;
    char *path = join_path(f.step_dir, "manifest");
    CU_ASSERT_FATAL(pt_recfile_open(&rf, path, "PTCKMAN1", &version, &err) == 0);
    const void *text;
    uint64_t len;
    CU_ASSERT_FATAL(pt_recfile_find(rf, "manifest", &text, &len, &err) == 0);
    CU_ASSERT_FATAL(pt_json_load(&f.manifest, text, (size_t)len, &err) == 0);
    pt_recfile_close(rf);
    free(path);
    return f;
}

static void drop(fixture *f)
{
    json_decref(f->manifest);
    free(f->step_dir);
    free_temp_dir(f->root);
}

/* Replaces the manifest with m (a valid recfile around its JSON). */
static void write_manifest(const fixture *f, const json_t *m)
{
    pt_err err;
    char *text = json_dumps(m, JSON_COMPACT), *path = join_path(f->step_dir, "manifest");
    pt_recwriter *w = NULL;
    CU_ASSERT_FATAL(text && pt_recwriter_open(&w, path, "PTCKMAN1", 2, &err) == 0);
    CU_ASSERT_FATAL(pt_recwriter_add(w, "manifest", text, strlen(text), &err) == 0);
    CU_ASSERT_FATAL(pt_recwriter_commit(w, &err) == 0);
    free(text);
    free(path);
}

/* verify refuses the checkpoint with PT_EINPUT and a message holding needle. */
static void refused(const fixture *f, const char *needle)
{
    pt_err err = {0};
    CU_ASSERT(pt_checkpoint_verify(f->step_dir, &err) == PT_EINPUT);
    if (!strstr(err.msg, needle))
        fprintf(stderr, "\n  expected '%s' in: %s\n", needle, err.msg);
    CU_ASSERT(strstr(err.msg, needle) != NULL);
}

static void test_fixture_verifies(void)
{
    fixture f = make(STEP);
    pt_err err = {0};
    CU_ASSERT(pt_checkpoint_verify(f.step_dir, &err) == 0);
    pt_config *cfg = malloc(sizeof *cfg);
    pt_arch arch;
    CU_ASSERT_FATAL(cfg != NULL);
    CU_ASSERT(pt_checkpoint_read_config(f.step_dir, cfg, &arch, &err) == 0);
    CU_ASSERT(arch.kind == PT_MODEL_VIT && arch.dim == 4 && arch.layers == 1);
    CU_ASSERT(cfg->model.dim == 4 && cfg->train.batch == 8);
    free(cfg);
    drop(&f);
}

static void test_damaged_or_missing_files(void)
{
    fixture f = make(STEP);
    char *units = join_path(f.step_dir, "units-stage0.bin");
    size_t n = 0;
    unsigned char *bytes = read_raw(units, &n);
    CU_ASSERT_FATAL(bytes != NULL && n > 100);
    bytes[100] ^= 1;
    CU_ASSERT_FATAL(write_raw(units, bytes, n) == 0);
    refused(&f, "other SHA-256");
    CU_ASSERT_FATAL(write_raw(units, bytes, n - 1) == 0);
    refused(&f, "other size");
    CU_ASSERT_FATAL(unlink(units) == 0);
    refused(&f, "units-stage0.bin");
    char *manifest = join_path(f.step_dir, "manifest");
    CU_ASSERT_FATAL(unlink(manifest) == 0);
    refused(&f, "manifest");
    free(manifest);
    free(bytes);
    free(units);
    drop(&f);
}

static void test_manifest_in_another_step(void)
{
    fixture f = make("step_0000000003");
    refused(&f, "lies in the directory of step 3");
    drop(&f);
}

/* One field of the manifest changed: path is "key" or "object/key". */
static void refused_with(const char *path, json_t *value, const char *needle)
{
    fixture f = make(STEP);
    json_t *m = json_deep_copy(f.manifest), *obj = m;
    const char *slash = strchr(path, '/');
    char key[64];
    snprintf(key, sizeof key, "%s", slash ? slash + 1 : path);
    if (slash) {
        char outer[64];
        snprintf(outer, sizeof outer, "%.*s", (int)(slash - path), path);
        obj = json_object_get(m, outer);
    }
    CU_ASSERT_FATAL(json_is_object(obj));
    json_object_set_new(obj, key, value);
    write_manifest(&f, m);
    refused(&f, needle);
    json_decref(m);
    drop(&f);
}

static void test_bad_fields(void)
{
    refused_with("frozen_units", json_integer(3), "does not match 0 frozen blocks");
    refused_with("arch/heads", json_integer(3), "must be a multiple of model.heads");
    refused_with("arch/layers", json_integer(0), "model.layers is 0");
    refused_with("epoch", json_integer(-1), "out of range");
    refused_with("lr", json_string("fast"), "\"kind\" is missing");
    refused_with("freeze/depth", json_integer(2), "freeze state");
    refused_with("config", json_string("model: {dim: x}"), "model.dim");
    refused_with("units/head", json_string("../units-stage0.bin"), "which file holds unit head");
    refused_with("units/head", json_string("manifest"), "which file holds unit head");
    refused_with("files/units-stage1.bin", json_pack("{s:i, s:s}", "bytes", 1, "sha256", "00"),
                 "units-stage1.bin");
    refused_with("files/../x", json_pack("{s:i, s:s}", "bytes", 1, "sha256", "00"),
                 "not a unit file of this directory");
    refused_with("checkpoint", json_string("00000000000000000000000000000000"),
                 "files of different checkpoints were mixed");
    /* values no config can make (a forged manifest) */
    refused_with("batch", json_integer(0), "out of range");
    refused_with("seed", json_integer(-1), "out of range");
    refused_with("lr/total", json_integer(-4), "out of range");
    refused_with("lr/warmup", json_integer(-1), "out of range");
    refused_with("lr/base", json_real(1e308), "out of range");
    refused_with("lr/min", json_real(-0.5), "out of range");
    /* the directory its run started in: absolute, as export reads it */
    refused_with("cwd", json_string("rel/x"), "cwd");
    refused_with("cwd", json_integer(3), "cwd");
    /* a unit the model has not, in a file that is listed */
    refused_with("units/blocks.7.mlp", json_string("units-stage0.bin"),
                 "lists a unit 'blocks.7.mlp' that the model it holds has not");
}

static const pt_test verify_tests[] = {
    {"fixture_verifies", test_fixture_verifies},
    {"damaged_or_missing_files", test_damaged_or_missing_files},
    {"manifest_in_another_step", test_manifest_in_another_step},
    {"bad_fields", test_bad_fields},
    {NULL, NULL}};

static const pt_test_suite suites[] = {{"checkpoint_verify", verify_tests}, {NULL, NULL}};
