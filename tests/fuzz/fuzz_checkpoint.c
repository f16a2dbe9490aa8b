/*
 * fuzz_checkpoint.c: libFuzzer target for the checkpoint manifest reader
 * (checkpoint/manifest.c and read.c): pt_checkpoint_read_config, what export and
 * eval read, and pt_checkpoint_verify, everything a resume reads, on a
 * manifest made from the input.
 *
 * Setup, once per process: a private RUN/checkpoints/step_0000000002/ with
 * the real unit file of a tiny training run (fixtures/step_0000000002, made
 * by make_corpus.py) and, to prove the setup right, that run's own manifest,
 * which must read and verify cleanly.
 *
 * Input, two modes:
 *  - starting with the manifest magic "PTCKMAN1": the manifest file's bytes
 *    as they are (the recfile envelope, version and CRC are fuzzed too);
 *  - anything else: the text of the manifest's JSON record; the harness
 *    builds a valid recfile around it (magic, version 2, one "manifest"
 *    record, trailer, CRC), so mutations reach the JSON and the checks of
 *    every field behind it instead of dying at the CRC. A JSON seed that
 *    keeps the real checkpoint id, step and unit file digest reaches the unit
 *    file checks as well.
 */
#include "tests/fuzz/fuzz_util.h"

#include "formats/formats.h"
#include "checkpoint/checkpoint.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef PT_FUZZ_FIXTURES
#error "PT_FUZZ_FIXTURES: the directory holding step_0000000002/ (set by tests/fuzz/CMakeLists.txt)"
#endif

#define STEP_DIR "step_0000000002"

static struct {
    char dir[1024];      /* RUN/checkpoints/step_0000000002 */
    char manifest[1100]; /* dir/manifest */
    pt_config *cfg;      /* pt_checkpoint_read_config's output, ~12 KB: made once */
} ctx;

static void copy_fixture(const char *name)
{
    char from[1024], to[1100];
    size_t n;
    void *bytes = fuzz_read(fuzz_join(from, sizeof from, PT_FUZZ_FIXTURES "/" STEP_DIR, name), &n);
    fuzz_write(fuzz_join(to, sizeof to, ctx.dir, name), bytes, n);
    free(bytes);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char run[1024], checkpoints[1024];
    fuzz_join(run, sizeof run, fuzz_temp_dir(), "run");
    fuzz_join(checkpoints, sizeof checkpoints, run, "checkpoints");
    fuzz_join(ctx.dir, sizeof ctx.dir, checkpoints, STEP_DIR);
    if (mkdir(run, 0755) || mkdir(checkpoints, 0755) || mkdir(ctx.dir, 0755))
        fuzz_die("cannot make %s", ctx.dir);
    fuzz_join(ctx.manifest, sizeof ctx.manifest, ctx.dir, "manifest");
    if (!(ctx.cfg = malloc(sizeof *ctx.cfg)))
        fuzz_die("out of memory");
    copy_fixture("units-stage0.bin");
    copy_fixture("manifest");
    pt_err err;
    pt_arch arch;
    if (pt_checkpoint_read_config(ctx.dir, ctx.cfg, &arch, &err) != 0 ||
        pt_checkpoint_verify(ctx.dir, &err) != 0)
        fuzz_die("the fixture checkpoint does not verify: %s", err.msg);
    return 0;
}

/* A manifest file holding one "manifest" record of n bytes of JSON text. */
static uint8_t *frame(const uint8_t *json, size_t n, size_t *out_len)
{
    static const char tag[] = "manifest";
    const size_t tag_len = sizeof tag - 1;
    const size_t len = 16 + 4 + tag_len + 8 + n + 24;
    uint8_t *f = malloc(len), *p = f;
    if (!f)
        fuzz_die("out of memory");
    memcpy(p, "PTCKMAN1", 8);
    pt_put_le32(p + 8, 2); /* format version */
    pt_put_le32(p + 12, 0);
    p += 16;
    pt_put_le32(p, (uint32_t)tag_len);
    memcpy(p + 4, tag, tag_len);
    pt_put_le64(p + 4 + tag_len, n);
    p += 4 + tag_len + 8;
    if (n)
        memcpy(p, json, n);
    p += n;
    pt_put_le32(p, 0xFFFFFFFFu);
    pt_put_le64(p + 4, 1); /* records */
    pt_put_le32(p + 12, pt_crc32(0, f, (size_t)(p + 12 - f)));
    memcpy(p + 16, "PTRECEND", 8);
    *out_len = len;
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 8 && memcmp(data, "PTCKMAN1", 8) == 0) {
        fuzz_write(ctx.manifest, data, size);
    } else {
        size_t len;
        uint8_t *file = frame(data, size, &len);
        fuzz_write(ctx.manifest, file, len);
        free(file);
    }
    pt_err err;
    pt_arch arch;
    pt_checkpoint_read_config(ctx.dir, ctx.cfg, &arch, &err);
    pt_checkpoint_verify(ctx.dir, &err);
    return 0;
}
