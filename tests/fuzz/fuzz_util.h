/*
 * fuzz_util.h: what the libFuzzer targets in tests/fuzz share.
 *
 * libFuzzer calls LLVMFuzzerTestOneInput(data, size) with no context, so a
 * target keeps its per-process setup (a private temporary directory, the
 * paths in it, fixtures) in one static struct made once, in
 * LLVMFuzzerInitialize, and never changed afterwards: the price of that
 * interface, and the only state of this kind in pipetrain. Per-input work
 * rewrites the same few files in that directory, so nothing grows with the
 * number of executions and process-wide setup is never repeated.
 *
 * A broken harness must not look like a clean run: every failure of the
 * harness itself (a file it cannot write, a fixture that does not verify)
 * and every broken invariant of a reader aborts, which libFuzzer reports as
 * a crash with the input that caused it.
 */
#ifndef PT_TESTS_FUZZ_UTIL_H
#define PT_TESTS_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Prints "fuzz: <message>" and aborts. */
void fuzz_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* A new private directory under $TMPDIR (or /tmp), removed with everything
 * in it when the process exits normally (a crashed run leaves it for the
 * post-mortem; scripts/fuzz.sh runs under a TMPDIR it removes). Once per
 * process. The returned string lives until exit. */
const char *fuzz_temp_dir(void);

/* dir/name into out (n bytes); aborts if it does not fit. */
char *fuzz_join(char *out, size_t n, const char *dir, const char *name);

/* Replaces the contents of path with n bytes, without fsync (speed matters
 * here, durability does not); aborts on failure. */
void fuzz_write(const char *path, const void *data, size_t n);

/* The same, gzip-compressed by zlib (the format gzopen writes). */
void fuzz_write_gzip(const char *path, const void *data, size_t n);

/* A whole file into a malloc'd buffer; aborts on failure. */
void *fuzz_read(const char *path, size_t *n);

/* A copy of n bytes with a NUL after them (malloc'd; aborts when out of
 * memory), for readers that take C strings. */
char *fuzz_strndup(const uint8_t *data, size_t n);

/* The libFuzzer entry points (declared here for -Wmissing-prototypes). */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
