/*
 * fuzz_config.c: libFuzzer target for the config reader (config/config.c).
 *
 * Input: YAML text, optionally followed by a NUL byte and `--set`
 * assignments separated by NUL bytes ("key=value"), so one input exercises
 * both ways a config is written. The YAML goes through pt_config_load_text
 * over the defaults, each assignment through pt_config_set, and a config
 * that loads through pt_config_validate (which stats the input files it
 * names; harmless here) and pt_config_check_disk_tier (which makes and
 * removes a probe file in a cache.disk_dir that is there).
 *
 * Invariant checked: a config that was accepted round-trips through
 * pt_config_write_yaml, the form a checkpoint stores it in: the YAML written
 * loads without error and writes back byte for byte the same. Otherwise a
 * run could save checkpoints that export and eval cannot read.
 */
#include "tests/fuzz/fuzz_util.h"

#include "config/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The config as YAML, malloc'd (NUL-terminated; *n bytes). */
static char *as_yaml(const pt_config *c, size_t *n)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, n);
    if (!f || pt_config_write_yaml(c, f) != 0 || fclose(f) != 0)
        fuzz_die("cannot write the config as YAML");
    return text;
}

static void check_round_trip(const pt_config *c)
{
    size_t n1, n2;
    char *first = as_yaml(c, &n1);
    pt_config *again = malloc(sizeof *again);
    if (!again)
        fuzz_die("out of memory");
    pt_config_defaults(again);
    pt_err err;
    if (pt_config_load_text(again, first, n1, "written", &err) != 0)
        fuzz_die("an accepted config, written as YAML, does not load back: %s\n--- YAML ---\n%s",
                 err.msg, first);
    char *second = as_yaml(again, &n2);
    if (n1 != n2 || memcmp(first, second, n1) != 0)
        fuzz_die("an accepted config changes when written and read back:\n--- first ---\n%s"
                 "--- second ---\n%s", first, second);
    free(second);
    free(again);
    free(first);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_config *c = malloc(sizeof *c); /* ~12 KB */
    if (!c)
        fuzz_die("out of memory");
    pt_config_defaults(c);
    pt_err err;
    const uint8_t *nul = memchr(data, 0, size);
    const size_t yaml_len = nul ? (size_t)(nul - data) : size;
    int rc = pt_config_load_text(c, (const char *)data, yaml_len, "fuzz.yaml", &err);
    for (size_t at = yaml_len + 1; rc == 0 && at <= size && nul;) {
        const uint8_t *end = memchr(data + at, 0, size - at);
        size_t len = end ? (size_t)(end - (data + at)) : size - at;
        char *assignment = fuzz_strndup(data + at, len);
        rc = pt_config_set(c, assignment, &err);
        free(assignment);
        at += len + 1;
    }
    if (rc == 0) {
        check_round_trip(c);
        rc = pt_config_validate(c, &err);
        if (rc == 0)
            rc = pt_config_check_disk_tier(c, &err);
    }
    free(c);
    return 0;
}
