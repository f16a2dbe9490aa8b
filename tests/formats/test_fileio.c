/*
 * test_fileio.c: crash-safe writes and the small file utilities of
 * formats/formats.h. The properties checked are the ones checkpoints rely on:
 * the committed file has exactly the bytes written; before commit (and after
 * abort) the old file is untouched and no temporary file remains; read limits
 * and mkdir -p behave like their descriptions.
 */
#include "formats/formats.h"
#include "tests/common/test_util.h"
#include "tests/common/cunit_main.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/resource.h>
#include <zlib.h>

/* A deterministic byte pattern that differs at every position of a block. */
static void fill_pattern(unsigned char *p, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (unsigned char)(x >> 24);
    }
}

static void test_commit_writes_exact_contents(void)
{
    char *dir = make_temp_dir();
    CU_ASSERT_FATAL(dir != NULL);
    char *path = join_path(dir, "data.bin");
    /* pieces around the 1 MiB buffer size: small, exactly-fitting, larger than the buffer */
    size_t sizes[] = {0, 1, 7, 1000, (1u << 20) - 1008, 1, (3u << 20) + 5, 13};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += sizes[i];
    unsigned char *expect = malloc(total);
    fill_pattern(expect, total, 1);
    pt_err err = {0};
    pt_wfile *f;
    CU_ASSERT_FATAL(pt_wfile_open(&f, path, &err) == 0);
    CU_ASSERT_STRING_EQUAL(pt_wfile_path(f), path);
    size_t at = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        CU_ASSERT(pt_wfile_write(f, expect + at, sizes[i], &err) == 0);
        at += sizes[i];
    }
    CU_ASSERT(pt_wfile_size(f) == total);
    uLong crc = crc32(0, expect, (uInt)total);
    CU_ASSERT(pt_wfile_crc(f) == (uint32_t)crc);
    CU_ASSERT(!file_exists(path)); /* nothing at the final path before commit */
    CU_ASSERT(count_entries(dir) == 1);
    CU_ASSERT(pt_wfile_commit(f, &err) == 0);

    void *data;
    size_t n;
    CU_ASSERT_FATAL(pt_read_file(path, total, &data, &n, &err) == 0);
    CU_ASSERT(n == total);
    CU_ASSERT(memcmp(data, expect, total) == 0);
    CU_ASSERT(((unsigned char *)data)[n] == 0);
    CU_ASSERT(count_entries(dir) == 1); /* the temporary name is gone */
    CU_ASSERT(pt_crc32(0, expect, total) == (uint32_t)crc);
    free(data);
    free(expect);
    free(path);
    free_temp_dir(dir);
}

static void test_abort_leaves_nothing(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "never.bin");
    pt_err err = {0};
    pt_wfile *f;
    CU_ASSERT_FATAL(pt_wfile_open(&f, path, &err) == 0);
    CU_ASSERT(pt_wfile_write(f, "partial", 7, &err) == 0);
    CU_ASSERT(count_entries(dir) == 1); /* the temporary file */
    pt_wfile_abort(f);
    CU_ASSERT(!file_exists(path));
    CU_ASSERT(count_entries(dir) == 0);
    pt_wfile_abort(NULL);
    free(path);
    free_temp_dir(dir);
}

/* What a signal handler calls: every open file's temporary name unlinked,
 * committed and aborted ones no longer tracked (a later call touches
 * nothing of theirs), a commit after the removal failing cleanly. */
static void test_remove_temporaries(void)
{
    char *dir = make_temp_dir();
    char *a = join_path(dir, "a.bin"), *b = join_path(dir, "b.bin"), *c = join_path(dir, "c.bin");
    pt_err err = {0};
    pt_wfile *fa, *fb, *fc;
    CU_ASSERT_FATAL(pt_wfile_open(&fc, c, &err) == 0);
    CU_ASSERT(pt_wfile_commit(fc, &err) == 0); /* done: c.bin stays */
    CU_ASSERT_FATAL(pt_wfile_open(&fa, a, &err) == 0);
    CU_ASSERT_FATAL(pt_wfile_open(&fb, b, &err) == 0);
    CU_ASSERT(pt_wfile_write(fa, "x", 1, &err) == 0);
    CU_ASSERT(count_entries(dir) == 3);
    pt_wfile_remove_temporaries();
    CU_ASSERT(count_entries(dir) == 1 && file_exists(c));
    CU_ASSERT(pt_wfile_commit(fa, &err) != 0); /* its temporary file is gone */
    pt_wfile_abort(fb);
    CU_ASSERT(count_entries(dir) == 1 && file_exists(c) && !file_exists(a));
    /* more files than are tracked: opening them still works */
    pt_wfile *many[PT_WFILE_TRACKED + 4];
    for (int i = 0; i < PT_WFILE_TRACKED + 4; i++)
        CU_ASSERT_FATAL(pt_wfile_open(&many[i], a, &err) == 0);
    pt_wfile_remove_temporaries();
    CU_ASSERT(count_entries(dir) == 1 + 4); /* c.bin and the 4 untracked */
    for (int i = 0; i < PT_WFILE_TRACKED + 4; i++)
        pt_wfile_abort(many[i]);
    CU_ASSERT(count_entries(dir) == 1);
    pt_wfile_remove_temporaries();
    CU_ASSERT(count_entries(dir) == 1 && file_exists(c));
    free(a);
    free(b);
    free(c);
    free_temp_dir(dir);
}

static void expect_contents(const char *path, const char *text)
{
    void *data;
    size_t n;
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_read_file(path, 1 << 20, &data, &n, &err) == 0);
    CU_ASSERT(n == strlen(text) && memcmp(data, text, n) == 0);
    free(data);
}

static void test_existing_file_replaced_only_on_commit(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "state.txt");
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_write_file_atomic(path, "old contents", 12, &err) == 0);

    pt_wfile *f;
    CU_ASSERT_FATAL(pt_wfile_open(&f, path, &err) == 0);
    CU_ASSERT(pt_wfile_write(f, "new", 3, &err) == 0);
    expect_contents(path, "old contents");
    pt_wfile_abort(f);
    expect_contents(path, "old contents");
    CU_ASSERT(count_entries(dir) == 1);

    CU_ASSERT_FATAL(pt_wfile_open(&f, path, &err) == 0);
    CU_ASSERT(pt_wfile_write(f, "new", 3, &err) == 0);
    expect_contents(path, "old contents");
    CU_ASSERT(pt_wfile_commit(f, &err) == 0);
    expect_contents(path, "new");
    CU_ASSERT(count_entries(dir) == 1);
    free(path);
    free_temp_dir(dir);
}

/* A crashed writer's temporary file, even one carrying this very pid (PID 1
 * in a container restarts with the same pid every time), neither blocks a
 * new write nor is clobbered by it. */
static void test_leftover_temp_file_neither_blocks_nor_is_clobbered(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "x.bin");
    char tmp[4096], tmp2[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    snprintf(tmp2, sizeof tmp2, "%s.tmp.%ld.0123456789abcdef", path, (long)getpid());
    CU_ASSERT_FATAL(write_raw(tmp, "someone else's", 14) == 0);
    CU_ASSERT_FATAL(write_raw(tmp2, "another crash", 13) == 0);
    CU_ASSERT(pt_is_temporary_name(tmp) && pt_is_temporary_name(tmp2) && !pt_is_temporary_name(path));
    pt_err err = {0};
    for (int round = 0; round < 50; round++) {
        char text[32];
        int n = snprintf(text, sizeof text, "round %d", round);
        CU_ASSERT_FATAL(pt_write_file_atomic(path, text, (size_t)n, &err) == 0);
        expect_contents(path, text);
    }
    /* two writers of one path at once get two temporary files */
    pt_wfile *a = NULL, *b = NULL;
    CU_ASSERT_FATAL(pt_wfile_open(&a, path, &err) == 0);
    CU_ASSERT_FATAL(pt_wfile_open(&b, path, &err) == 0);
    CU_ASSERT(count_entries(dir) == 5);
    pt_wfile_abort(a);
    pt_wfile_abort(b);
    expect_contents(tmp, "someone else's");
    expect_contents(tmp2, "another crash");
    CU_ASSERT(count_entries(dir) == 3);
    free(path);
    free_temp_dir(dir);
}

static void test_unique_ids_and_sha256(void)
{
    char a[33], b[33];
    pt_unique_id(a, sizeof a);
    pt_unique_id(b, sizeof b);
    CU_ASSERT(strlen(a) == 32 && strlen(b) == 32 && strcmp(a, b) != 0);
    char *dir = make_temp_dir();
    char *path = join_path(dir, "abc");
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_write_file_atomic(path, "abc", 3, &err) == 0);
    unsigned char d[32];
    uint64_t size = 0;
    char hex[65];
    CU_ASSERT_FATAL(pt_sha256_file(path, d, &size, &err) == 0);
    pt_hex(d, 32, hex);
    /* FIPS 180-2, appendix B.1 */
    CU_ASSERT_STRING_EQUAL(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CU_ASSERT(size == 3);
    /* in parts (an empty part among them), the same digest as at once */
    pt_sha256 *h = pt_sha256_begin();
    pt_sha256_add(h, "a", 1);
    pt_sha256_add(h, "", 0);
    pt_sha256_add(h, "bc", 2);
    unsigned char parts[32];
    CU_ASSERT_FATAL(pt_sha256_end(h, parts, &err) == 0);
    CU_ASSERT(memcmp(parts, d, 32) == 0);
    /* FIPS 180-2, appendix B.2, in parts of 7 bytes */
    static const char two[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    h = pt_sha256_begin();
    for (size_t at = 0; at < sizeof two - 1; at += 7)
        pt_sha256_add(h, two + at, sizeof two - 1 - at < 7 ? sizeof two - 1 - at : 7);
    CU_ASSERT_FATAL(pt_sha256_end(h, parts, &err) == 0);
    pt_hex(parts, 32, hex);
    CU_ASSERT_STRING_EQUAL(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* a digest that could not start fails at its end, not before */
    pt_sha256_add(NULL, "abc", 3);
    CU_ASSERT(pt_sha256_end(NULL, parts, &err) == PT_ENOMEM);
    /* what is not a regular file is refused before it is read: a
     * directory, /dev/zero (which never ends), a FIFO (which would block) */
    CU_ASSERT(pt_sha256_file(dir, d, &size, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "not a regular file (a directory)") != NULL);
    CU_ASSERT(pt_sha256_file("/dev/zero", d, &size, &err) == PT_EINPUT);
    char *fifo = join_path(dir, "fifo");
    CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
    CU_ASSERT(pt_sha256_file(fifo, d, &size, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "(a FIFO)") != NULL);
    unlink(fifo);
    free(fifo);
    free(path);
    free_temp_dir(dir);
}

static void test_open_in_missing_directory_fails(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "no/such/dir/file.bin");
    pt_err err = {0};
    pt_wfile *f = NULL;
    CU_ASSERT(pt_wfile_open(&f, path, &err) == PT_ESYS);
    CU_ASSERT(strstr(err.msg, "no/such/dir/file.bin") != NULL);
    CU_ASSERT(pt_write_file_atomic(path, "x", 1, &err) == PT_ESYS);
    CU_ASSERT(pt_wfile_open(&f, "", &err) == PT_EINPUT);
    free(path);
    free_temp_dir(dir);
}

static void test_commit_onto_directory_fails_cleanly(void)
{
    /* a directory there when the file is opened: refused at once, nothing
     * created; one made there while the file is written (rename(file,
     * non-empty dir) fails at commit): the temporary file must be removed */
    char *dir = make_temp_dir();
    char *target = join_path(dir, "sub");
    char *inner = join_path(target, "keep");
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_mkdir_p(inner, 0755, &err) == 0);
    pt_wfile *f = NULL;
    CU_ASSERT(pt_wfile_open(&f, target, &err) == PT_EINPUT && f == NULL);
    CU_ASSERT(strstr(err.msg, "not a regular file (a directory)") != NULL);
    CU_ASSERT(count_entries(dir) == 1);
    CU_ASSERT_FATAL(rmdir(inner) == 0 && rmdir(target) == 0);
    CU_ASSERT_FATAL(pt_wfile_open(&f, target, &err) == 0);
    CU_ASSERT_FATAL(pt_mkdir_p(inner, 0755, &err) == 0);
    CU_ASSERT(pt_wfile_write(f, "abc", 3, &err) == 0);
    CU_ASSERT(pt_wfile_commit(f, &err) == PT_ESYS);
    CU_ASSERT(strstr(err.msg, "rename") != NULL);
    CU_ASSERT(count_entries(dir) == 1);
    free(inner);
    free(target);
    free_temp_dir(dir);
}

static void test_read_file_limits(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "hundred.bin");
    unsigned char bytes[100];
    fill_pattern(bytes, sizeof bytes, 2);
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_write_file_atomic(path, bytes, sizeof bytes, &err) == 0);
    void *data = NULL;
    size_t n = 0;
    CU_ASSERT(pt_read_file(path, 100, &data, &n, &err) == 0);
    CU_ASSERT(n == 100 && memcmp(data, bytes, 100) == 0);
    free(data);
    CU_ASSERT(pt_read_file(path, 99, &data, &n, &err) == PT_EINPUT);
    CU_ASSERT(data == NULL && n == 0);
    CU_ASSERT(strstr(err.msg, "larger than the limit of 99 bytes") != NULL);
    CU_ASSERT(strstr(err.msg, "hundred.bin") != NULL);
    CU_ASSERT(pt_read_file(path, SIZE_MAX, &data, &n, &err) == 0);
    CU_ASSERT(n == 100);
    free(data);

    /* an empty file gives an empty, NUL-terminated buffer */
    char *empty = join_path(dir, "empty");
    CU_ASSERT_FATAL(pt_write_file_atomic(empty, NULL, 0, &err) == 0);
    CU_ASSERT(pt_read_file(empty, 0, &data, &n, &err) == 0);
    CU_ASSERT(n == 0 && data && ((char *)data)[0] == '\0');
    free(data);

    /* not a regular file: the size is unknown in advance, the limit still holds */
    CU_ASSERT(pt_read_file("/dev/zero", 5000, &data, &n, &err) == PT_EINPUT);
    CU_ASSERT(data == NULL);

    char *missing = join_path(dir, "missing");
    CU_ASSERT(pt_read_file(missing, 10, &data, &n, &err) == PT_ESYS);
    CU_ASSERT(strstr(err.msg, "missing") != NULL);
    CU_ASSERT(pt_read_file(dir, 10, &data, &n, &err) == PT_EINPUT); /* a directory */
    CU_ASSERT(strstr(err.msg, "not a regular file (a directory)") != NULL);
    /* a FIFO (one put where a caller found a file): refused, not waited on
     * for a writer that never comes (the alarm ends a test that waits) */
    char *fifo = join_path(dir, "fifo");
    CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
    alarm(20);
    CU_ASSERT(pt_read_file(fifo, 10, &data, &n, &err) == PT_EINPUT);
    alarm(0);
    CU_ASSERT(data == NULL && strstr(err.msg, "FIFO") != NULL);
    unlink(fifo);
    free(fifo);
    free(missing);
    free(empty);
    free(path);
    free_temp_dir(dir);
}

static void test_mkdir_p(void)
{
    char *dir = make_temp_dir();
    char *deep = join_path(dir, "a/b//c/");
    pt_err err = {0};
    CU_ASSERT(pt_mkdir_p(deep, 0755, &err) == 0);
    char *c = join_path(dir, "a/b/c");
    struct stat st;
    CU_ASSERT(stat(c, &st) == 0 && S_ISDIR(st.st_mode));
    CU_ASSERT(pt_mkdir_p(deep, 0755, &err) == 0); /* already there */
    CU_ASSERT(pt_mkdir_p(dir, 0755, &err) == 0);

    char *file = join_path(dir, "a/file");
    CU_ASSERT_FATAL(pt_write_file_atomic(file, "x", 1, &err) == 0);
    char *through = join_path(dir, "a/file/sub");
    /* a file where the path needs a directory: the path named is bad input */
    CU_ASSERT(pt_mkdir_p(through, 0755, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "a/file") != NULL);
    CU_ASSERT(pt_mkdir_p(file, 0755, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "Not a directory") != NULL);
    CU_ASSERT(pt_mkdir_p("", 0755, &err) == PT_EINPUT);

    CU_ASSERT(pt_fsync_dir(c, &err) == 0);
    CU_ASSERT(pt_fsync_dir(through, &err) == PT_ESYS);
    free(through);
    free(file);
    free(c);
    free(deep);
    free_temp_dir(dir);
}

/* pt_mkdir_p_made says from where it created directories, and
 * pt_rmdir_made takes back those (each only while empty), never one that
 * was there before. */
static void test_mkdir_p_made(void)
{
    char *dir = make_temp_dir();
    pt_err err = {0};
    size_t made = 99;
    CU_ASSERT(pt_mkdir_p_made(dir, 0755, &made, NULL, &err) == 0 && made == 0); /* all there */
    pt_rmdir_made(dir, made);
    struct stat st;
    CU_ASSERT(stat(dir, &st) == 0);

    char *a = join_path(dir, "a"), *deep = join_path(dir, "a/b//c/"), *c = join_path(dir, "a/b/c");
    CU_ASSERT(pt_mkdir_p_made(deep, 0755, &made, NULL, &err) == 0 && made == strlen(a));
    pt_rmdir_made(deep, made);
    CU_ASSERT(stat(a, &st) != 0 && errno == ENOENT); /* a, b and c taken back */
    CU_ASSERT(stat(dir, &st) == 0);                  /* the parent that was there stays */

    CU_ASSERT_FATAL(pt_mkdir_p(a, 0755, &err) == 0); /* a there before: only b and c made */
    CU_ASSERT(pt_mkdir_p_made(deep, 0755, &made, NULL, &err) == 0 && made == strlen(a) + 2);
    char *file = join_path(dir, "a/b/kept");
    CU_ASSERT_FATAL(pt_write_file_atomic(file, "x", 1, &err) == 0);
    pt_rmdir_made(deep, made); /* c goes; b holds a file: b and a stay */
    CU_ASSERT(stat(c, &st) != 0 && stat(file, &st) == 0 && stat(a, &st) == 0);
    /* two makings of one path: the shorter prefix made takes back more */
    CU_ASSERT(pt_made_either(0, 0) == 0 && pt_made_either(0, 7) == 7 && pt_made_either(7, 0) == 7);
    CU_ASSERT(pt_made_either(5, 7) == 5 && pt_made_either(7, 5) == 5 && pt_made_either(5, 5) == 5);

    char *under = join_path(dir, "a/kept/x/y");
    char *blocker = join_path(dir, "a/kept");
    CU_ASSERT_FATAL(pt_write_file_atomic(blocker, "x", 1, &err) == 0);
    /* a file where a directory goes: the user's path is no directory */
    CU_ASSERT(pt_mkdir_p_made(under, 0755, &made, NULL, &err) == PT_EINPUT && made == 0);

    /* '.' or '..' after a level that is not there yet: refused, nothing
     * made (taking back 'new/../a' would climb into a, made before) */
    const char *dotted[] = {"a/new/../kept2", "a/new/.", "a/new/./x", "new/../a/x"};
    for (size_t i = 0; i < sizeof dotted / sizeof *dotted; i++) {
        char *p = join_path(dir, dotted[i]), *n = join_path(dir, i == 3 ? "new" : "a/new");
        CU_ASSERT(pt_mkdir_p_made(p, 0755, &made, NULL, &err) == PT_EINPUT && made == 0);
        CU_ASSERT(strstr(err.msg, "does not exist yet") != NULL);
        CU_ASSERT(stat(n, &st) != 0 && errno == ENOENT);
        free(p);
        free(n);
    }
    char *there = join_path(dir, "a/b/../b2"); /* '..' after levels that are there: fine */
    CU_ASSERT(pt_mkdir_p_made(there, 0755, &made, NULL, &err) == 0 && made == strlen(there));
    pt_rmdir_made(there, made);
    free(there);

    /* a creation that fails part of the way (a name too long for the file
     * system) says what it made, and all of it is taken back */
    char longname[400];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    char *n1 = join_path(dir, "n1"), *n2 = join_path(dir, "n1/n2");
    char *part = malloc(strlen(n2) + sizeof longname + 8);
    CU_ASSERT_FATAL(part != NULL);
    sprintf(part, "%s/%s/n3", n2, longname);
    CU_ASSERT(pt_mkdir_p_made(part, 0755, &made, NULL, &err) == PT_EINPUT && made == strlen(n1));
    CU_ASSERT(stat(n2, &st) == 0);
    pt_rmdir_made(part, made);
    CU_ASSERT(stat(n1, &st) != 0 && errno == ENOENT);

    /* tracked: the handler of a stop signal takes back each level made
     * (here: called by hand, as after a creation stopped part of the way) */
    int slot = -7;
    CU_ASSERT(pt_mkdir_p_made(part, 0755, &made, &slot, &err) == PT_EINPUT && slot >= 0);
    CU_ASSERT(stat(n2, &st) == 0);
    pt_wfile_remove_temporaries();
    CU_ASSERT(stat(n1, &st) != 0 && errno == ENOENT);
    CU_ASSERT(stat(a, &st) == 0 && stat(dir, &st) == 0); /* what was there stays */
    pt_made_dirs_untrack(slot);
    CU_ASSERT(pt_mkdir_p_made(n2, 0755, &made, &slot, &err) == 0 && slot >= 0);
    pt_made_dirs_untrack(slot); /* written: untracked, a signal leaves it */
    pt_wfile_remove_temporaries();
    CU_ASSERT(stat(n2, &st) == 0);
    pt_rmdir_made(n2, made);
    CU_ASSERT(stat(n1, &st) != 0 && errno == ENOENT);
    free(part);
    free(n1);
    free(n2);
    free(blocker);
    free(under);
    free(file);
    free(c);
    free(deep);
    free(a);
    free_temp_dir(dir);
}

static void test_write_after_failure_is_refused(void)
{
    /* A file-size limit makes the kernel refuse writes (EFBIG) like a full disk would. */
    char *dir = make_temp_dir();
    char *path = join_path(dir, "big.bin");
    struct rlimit old;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old;
    small.rlim_cur = 1u << 20;
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &small) == 0);

    size_t n = 3u << 20;
    unsigned char *bytes = calloc(1, n);
    pt_err err = {0};
    pt_wfile *f;
    CU_ASSERT_FATAL(pt_wfile_open(&f, path, &err) == 0);
    CU_ASSERT(pt_wfile_write(f, bytes, n, &err) == PT_ESYS);
    CU_ASSERT(strstr(err.msg, "big.bin") != NULL);
    CU_ASSERT(pt_wfile_write(f, bytes, 1, &err) == PT_EINTERNAL);
    CU_ASSERT(pt_wfile_commit(f, &err) == PT_EINTERNAL);
    CU_ASSERT(!file_exists(path));
    CU_ASSERT(count_entries(dir) == 0);

    /* the same through pt_write_file_atomic */
    CU_ASSERT(pt_write_file_atomic(path, bytes, n, &err) == PT_ESYS);
    CU_ASSERT(count_entries(dir) == 0);

    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    free(bytes);
    free(path);
    free_temp_dir(dir);
}

/* pt_log_open and pt_log_cut on contents; returns the bytes left and *cut. */
static unsigned char *log_after(const char *path, const void *data, size_t n, int64_t *cut,
                                size_t *left)
{
    CU_ASSERT_FATAL(write_raw(path, data, n) == 0);
    FILE *f = NULL;
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_log_open(path, &f, &err) == 0);
    CU_ASSERT_FATAL(pt_log_cut(f, path, cut, &err) == 0);
    CU_ASSERT(fputs("next\n", f) >= 0 && fclose(f) == 0);
    return read_raw(path, left);
}

static void test_log_open(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "log.jsonl");
    int64_t cut = -1;
    size_t n = 0;
    /* missing: created; whole lines: kept; a cut last line: removed */
    FILE *f = NULL;
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_log_open(path, &f, &err) == 0 && pt_log_cut(f, path, &cut, &err) == 0);
    CU_ASSERT(cut == 0);
    fclose(f);
    unsigned char *got = log_after(path, "a\nb\n", 4, &cut, &n);
    CU_ASSERT(cut == 0 && n == 9 && memcmp(got, "a\nb\nnext\n", 9) == 0);
    free(got);
    got = log_after(path, "a\nb\nhalf", 8, &cut, &n);
    CU_ASSERT(cut == 4 && n == 9 && memcmp(got, "a\nb\nnext\n", 9) == 0);
    free(got);
    got = log_after(path, "no newline at all", 17, &cut, &n);
    CU_ASSERT(cut == 17 && n == 5 && memcmp(got, "next\n", 5) == 0);
    free(got);
    /* a cut line longer than the 64 KiB the search reads at a time */
    const size_t big = 200000;
    char *text = malloc(big);
    CU_ASSERT_FATAL(text != NULL);
    memset(text, 'x', big);
    text[9] = '\n';
    got = log_after(path, text, big, &cut, &n);
    CU_ASSERT(cut == (int64_t)(big - 10) && n == 15 && memcmp(got + 10, "next\n", 5) == 0);
    free(got);
    free(text);
    /* not regular files: refused, never waited on or written through */
    char *fifo = join_path(dir, "fifo"), *link = join_path(dir, "link");
    CU_ASSERT_FATAL(mkfifo(fifo, 0644) == 0 && symlink(path, link) == 0);
    CU_ASSERT(pt_log_open(fifo, &f, &err) == PT_EINPUT && f == NULL);
    CU_ASSERT(strstr(err.msg, "not a regular file (a FIFO)") != NULL);
    CU_ASSERT(pt_log_open(link, &f, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "symbolic link") != NULL);
    CU_ASSERT(pt_log_open(dir, &f, &err) == PT_EINPUT);
    CU_ASSERT(pt_log_open("/dev/null", &f, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "(a device)") != NULL);
    free(fifo);
    free(link);
    free(path);
    free_temp_dir(dir);
}

/* pt_remove_dead_temporaries: only names exactly as pt_wfile_open makes
 * them ("NAME.tmp.PID.<16 hex>"), regular files no one holds a lock on; a
 * live writer's (locked: this process's own included, whatever its pid),
 * a link, a directory, or a name that merely looks like one are left. */
/* Names up to the file system's 255 bytes can be written: their temporary
 * names keep as much of the name as fits (they used to append to all of it
 * and fail past about 220 bytes); a dead one is found and removed by the
 * next write of that name, a live one is left. */
static void test_long_names(void)
{
    char *dir = make_temp_dir();
    CU_ASSERT_FATAL(dir != NULL);
    pt_err err = {0};
    for (size_t len = 200; len <= 255; len += 5) {
        char name[256];
        memset(name, 'a' + (char)(len % 26), len);
        name[len] = '\0';
        char *path = join_path(dir, name);
        CU_ASSERT(pt_write_file_atomic(path, "x", 1, &err) == 0);
        pt_wfile *w = NULL; /* live, then left as a killed writer would */
        CU_ASSERT_FATAL(pt_wfile_open(&w, path, &err) == 0);
        CU_ASSERT(pt_remove_dead_temporaries(path) == 0); /* its writer lives */
        const pid_t child = fork();
        if (child == 0) { /* a writer that dies with its file open */
            pt_wfile *c = NULL;
            _exit(pt_wfile_open(&c, path, &err) == 0 ? 0 : 1);
        }
        int status;
        CU_ASSERT(waitpid(child, &status, 0) == child && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0);
        CU_ASSERT(pt_remove_dead_temporaries(path) == 1); /* the dead one only */
        CU_ASSERT(pt_wfile_commit(w, &err) == 0);
        CU_ASSERT(unlink(path) == 0);
        free(path);
    }
    DIR *d = opendir(dir);
    int left = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        left += e->d_name[0] != '.';
    if (d)
        closedir(d);
    CU_ASSERT(left == 0);
    free_temp_dir(dir);
}

/* Whether s is valid UTF-8 (lead and continuation bytes only; enough for
 * telling a cut character). */
static int utf8_whole(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        const int n = *u < 0x80 ? 1 : (*u & 0xE0) == 0xC0 ? 2 : (*u & 0xF0) == 0xE0 ? 3
                                  : (*u & 0xF8) == 0xF0 ? 4 : 0;
        if (n == 0)
            return 0;
        for (int i = 1; i < n; i++)
            if ((u[i] & 0xC0) != 0x80)
                return 0;
        u += n;
    }
    return 1;
}

/* A long name of 2-, 3- and 4-byte characters, at every alignment: its
 * temporary name is cut between characters, never inside one (a name that is
 * not valid UTF-8 is refused by some file systems where the whole name is
 * fine), and the write and the sweep work as for ASCII names. */
static void test_long_utf8_names(void)
{
    char *dir = make_temp_dir();
    CU_ASSERT_FATAL(dir != NULL);
    pt_err err = {0};
    const char *chars[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9d\x84\x9e"};
    for (int c = 0; c < 3; c++)
        for (int shift = 0; shift < 4; shift++) {
            char name[256];
            size_t len = (size_t)shift;
            memset(name, 'x', len);
            const size_t w = strlen(chars[c]);
            while (len + w <= 255) {
                memcpy(name + len, chars[c], w);
                len += w;
            }
            name[len] = '\0';
            char *path = join_path(dir, name);
            pt_wfile *wf = NULL;
            CU_ASSERT_FATAL(pt_wfile_open(&wf, path, &err) == 0);
            int temps = 0;
            DIR *d = opendir(dir);
            for (struct dirent *e; d && (e = readdir(d)) != NULL;)
                if (e->d_name[0] != '.') {
                    temps++;
                    CU_ASSERT(utf8_whole(e->d_name));
                    CU_ASSERT(strstr(e->d_name, ".tmp.") != NULL);
                    CU_ASSERT(strlen(e->d_name) <= 255);
                }
            if (d)
                closedir(d);
            CU_ASSERT(temps == 1);
            CU_ASSERT(pt_remove_dead_temporaries(path) == 0); /* its writer lives */
            CU_ASSERT(pt_wfile_write(wf, "x", 1, &err) == 0);
            CU_ASSERT(pt_wfile_commit(wf, &err) == 0);
            CU_ASSERT(access(path, F_OK) == 0);
            CU_ASSERT(unlink(path) == 0);
            free(path);
        }
    free_temp_dir(dir);
}

/* pt_json_text: valid UTF-8 as it is; each byte of an invalid sequence
 * (a lone or cut byte, an overlong form, a surrogate, past U+10FFFF) as one
 * U+FFFD, what is around it kept; never NULL for a path that is not UTF-8
 * (json_string alone gives NULL, and inspect lost its "checkpoint"). */
static void test_json_text(void)
{
    const char *cases[][2] = {
        {"runs/x", "runs/x"},
        {"caf\xc3\xa9/\xe2\x82\xac/\xf0\x9d\x84\x9e", "caf\xc3\xa9/\xe2\x82\xac/\xf0\x9d\x84\x9e"},
        {"r\xffn", "r\xef\xbf\xbdn"},
        {"end\xc3", "end\xef\xbf\xbd"},
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"a\xed\xa0\x80" "b", "a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "b"},
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xe2\x82" "x\xc3\xa9", "\xef\xbf\xbd\xef\xbf\xbd" "x\xc3\xa9"},
        {"", ""}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = pt_json_text(cases[i][0]);
        CU_ASSERT_FATAL(j != NULL);
        CU_ASSERT_STRING_EQUAL(json_string_value(j), cases[i][1]);
        json_decref(j);
    }
}

/* pt_json_load_foreign: \u0000 in a string value kept (pt_json_cstr then
 * NULL), in an object key read as U+FFFD (jansson holds no NUL in a key),
 * an escaped backslash before "u0000" in a key left alone, and a parse
 * error's column that of the text as given. */
static void test_json_load_foreign(void)
{
    const char *text = "{\"a\\u0000b\": 1, \"v\": \"x\\u0000y\", \"w\": \"ok\", "
                       "\"c\\\\u0000\" : 2, \"d\": {\"\\u0000\":3}}";
    json_t *j = NULL;
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_json_load_foreign(&j, text, strlen(text), 0, &err) == 0);
    CU_ASSERT(json_integer_value(json_object_get(j, "a\xef\xbf\xbd" "b")) == 1);
    const json_t *v = json_object_get(j, "v");
    CU_ASSERT(json_string_length(v) == 3 && memcmp(json_string_value(v), "x\0y", 3) == 0);
    CU_ASSERT(pt_json_cstr(v) == NULL);
    CU_ASSERT(pt_json_cstr(json_object_get(j, "w")) &&
              strcmp(pt_json_cstr(json_object_get(j, "w")), "ok") == 0);
    CU_ASSERT(json_integer_value(json_object_get(j, "c\\u0000")) == 2);
    CU_ASSERT(json_integer_value(json_object_get(json_object_get(j, "d"), "\xef\xbf\xbd")) == 3);
    CU_ASSERT(pt_json_cstr(json_object_get(j, "none")) == NULL);
    json_decref(j);
    /* pipetrain's own files stay strict */
    CU_ASSERT(pt_json_load(&j, text, strlen(text), &err) == PT_EINPUT);
    const char *bad = "{\"k\\u0000\": tru}";
    CU_ASSERT(pt_json_load_foreign(&j, bad, strlen(bad), 0, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "line 1, column 15 (byte 15)") != NULL); /* the \u0000 counts 6 */
    /* a raw NUL byte is named, not read as the end of the text */
    const char raw[] = "{\"a\": 1,\n \"b\": \"x\0y\"}";
    CU_ASSERT(pt_json_load_foreign(&j, raw, sizeof raw - 1, 0, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "line 2 (byte 17): a NUL byte") != NULL);
    if (!strstr(err.msg, "line 2 (byte 17): a NUL byte"))
        printf("\n  raw NUL: %s\n", err.msg);
    CU_ASSERT(pt_json_load(&j, raw, sizeof raw - 1, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "a NUL byte") != NULL);
    /* a NUL after the error is not blamed */
    const char late[] = "{\"a\": tru}\0";
    CU_ASSERT(pt_json_load_foreign(&j, late, sizeof late - 1, 0, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "NUL") == NULL && strstr(err.msg, "column 9") != NULL);
    if (strstr(err.msg, "NUL") || !strstr(err.msg, "column 9"))
        printf("\n  late NUL: %s\n", err.msg);    /* a key twice: refused, or (as Python's json reads it) its last value;
     * an integer past 64 bits: refused, or read as a real */
    const char *twice = "{\"a\": 1, \"b\": 2, \"a\": 3}";
    CU_ASSERT(pt_json_load_foreign(&j, twice, strlen(twice), 0, &err) == PT_EINPUT);
    CU_ASSERT(pt_json_load(&j, twice, strlen(twice), &err) == PT_EINPUT);
    CU_ASSERT_FATAL(pt_json_load_foreign(&j, twice, strlen(twice), PT_JSON_LAST_KEY_WINS, &err) == 0);
    CU_ASSERT(json_integer_value(json_object_get(j, "a")) == 3 && json_object_size(j) == 2);
    json_decref(j);
    const char *big = "{\"r\": 100000000000000000000000000000, \"n\": 384}";
    CU_ASSERT(pt_json_load_foreign(&j, big, strlen(big), PT_JSON_LAST_KEY_WINS, &err) == PT_EINPUT);
    CU_ASSERT_FATAL(pt_json_load_foreign(&j, big, strlen(big), PT_JSON_REALS, &err) == 0);
    CU_ASSERT(json_real_value(json_object_get(j, "r")) == 1e29 &&
              json_real_value(json_object_get(j, "n")) == 384.0);
    json_decref(j);
}

static void test_remove_dead_temporaries(void)
{
    char *dir = make_temp_dir();
    CU_ASSERT_FATAL(dir != NULL);
    char *path = join_path(dir, "out.st");
    const char *hex = "0123456789abcdef";
    const int pid = (int)getpid();
    char name[128];
    const char *keep[] = {"out.st", "out.stx.tmp.%d.%s", "other.tmp.%d.%s", "out.st.tmp.%d.",
                          "out.st.tmp.x%d.%s", "out.st.tmp.-%d.%s", "out.st.tmp.+%d.%s",
                          "out.st.tmp. %d.%s", "out.st.tmp.0%d.%s", "out.st.tmp.%d.my-notes",
                          "out.st.tmp.99999999999.%s", "out.st.tmp.%d.%.15s",
                          "out.st.tmp.%d.%s0", "out.st.tmp.%d.0123456789ABCDEF", "out.st.tmp.%d%s"};
    pt_err err = {0};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        if (strstr(keep[i], "%d"))
            snprintf(name, sizeof name, keep[i], pid, hex);
        else
            snprintf(name, sizeof name, keep[i], hex);
        char *p = join_path(dir, name);
        CU_ASSERT_FATAL(pt_write_file_atomic(p, "k", 1, &err) == 0);
        free(p);
    }
    /* a live writer: pt_wfile_open's file, open and locked */
    pt_wfile *w = NULL;
    CU_ASSERT_FATAL(pt_wfile_open(&w, path, &err) == 0);
    char *live = NULL; /* its temporary file: the one name of the form there now */
    snprintf(name, sizeof name, "out.st.tmp.%d.", pid);
    DIR *d = opendir(dir);
    CU_ASSERT_FATAL(d != NULL);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, name, strlen(name)) == 0 && strlen(e->d_name) == strlen(name) + 16 &&
            strspn(e->d_name + strlen(name), "0123456789abcdef") == 16) {
            CU_ASSERT(live == NULL);
            live = join_path(dir, e->d_name);
        }
    closedir(d);
    CU_ASSERT_FATAL(live != NULL);
    snprintf(name, sizeof name, "out.st.tmp.%d.%.12s0000", pid, hex);
    char *link = join_path(dir, name);
    CU_ASSERT_FATAL(symlink(path, link) == 0);
    snprintf(name, sizeof name, "out.st.tmp.%d.%.12s1111", pid, hex);
    char *sub = join_path(dir, name);
    CU_ASSERT_FATAL(mkdir(sub, 0755) == 0);
    /* killed writers' leftovers (no lock): any pid, this one's too */
    snprintf(name, sizeof name, "out.st.tmp.%d.%s", pid, hex);
    char *gone1 = join_path(dir, name);
    snprintf(name, sizeof name, "out.st.tmp.1.%.12s2222", hex);
    char *gone2 = join_path(dir, name);
    CU_ASSERT_FATAL(pt_write_file_atomic(gone1, "d", 1, &err) == 0);
    CU_ASSERT_FATAL(pt_write_file_atomic(gone2, "d", 1, &err) == 0);

    CU_ASSERT_EQUAL(pt_remove_dead_temporaries(path), 2);
    struct stat st;
    CU_ASSERT(stat(gone1, &st) != 0 && stat(gone2, &st) != 0);
    CU_ASSERT(stat(live, &st) == 0 && lstat(link, &st) == 0 && stat(sub, &st) == 0);
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        if (strstr(keep[i], "%d"))
            snprintf(name, sizeof name, keep[i], pid, hex);
        else
            snprintf(name, sizeof name, keep[i], hex);
        char *p = join_path(dir, name);
        CU_ASSERT(stat(p, &st) == 0);
        unlink(p);
        free(p);
    }
    /* the writer finishes unharmed; its leftover would be gone after an abort */
    CU_ASSERT(pt_wfile_write(w, "x", 1, &err) == 0 && pt_wfile_commit(w, &err) == 0);
    CU_ASSERT(stat(path, &st) == 0 && st.st_size == 1);
    CU_ASSERT_EQUAL(pt_remove_dead_temporaries(path), 0);
    CU_ASSERT_EQUAL(pt_remove_dead_temporaries("/nonexistent/dir/out.st"), 0);
    unlink(path);
    unlink(link);
    rmdir(sub);
    free(live), free(link), free(sub), free(gone1), free(gone2), free(path);
    free_temp_dir(dir);
}

/* Descriptors this process has open now. */
static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

/* A synced file has taken every descriptor it needs for its commit: it
 * holds one (its lock's, against a sweep) and is written through no more,
 * so several outputs staged as a group are all synced before any is put in
 * place, and none is when one could not be (tests/launch: an export out of
 * descriptors). Committed, or aborted, it leaves no descriptor open. */
static void test_synced_file_holds_what_its_commit_needs(void)
{
    char *dir = make_temp_dir();
    CU_ASSERT_FATAL(dir != NULL);
    char *path = join_path(dir, "out.st");
    pt_err err = {0};
    const int before = open_fds();
    CU_ASSERT_FATAL(before > 0);
    for (int commit = 0; commit < 2; commit++) {
        pt_wfile *w = NULL;
        CU_ASSERT_FATAL(pt_wfile_open(&w, path, &err) == 0);
        CU_ASSERT(pt_wfile_write(w, "abc", 3, &err) == 0 && pt_wfile_sync(w, &err) == 0);
        CU_ASSERT_EQUAL(open_fds(), before + 1); /* one: the lock's */
        CU_ASSERT(pt_wfile_write(w, "d", 1, &err) == PT_EINTERNAL);
        CU_ASSERT(pt_wfile_sync(w, &err) == 0); /* again: nothing to do */
        CU_ASSERT_EQUAL(pt_remove_dead_temporaries(path), 0); /* still held */
        if (commit) {
            CU_ASSERT(pt_wfile_commit(w, &err) == 0);
            size_t n = 0;
            void *data = NULL;
            CU_ASSERT(pt_read_file(path, 16, &data, &n, &err) == 0 && n == 3 &&
                      memcmp(data, "abc", 3) == 0);
            free(data);
        } else {
            pt_wfile_abort(w);
            struct stat st;
            CU_ASSERT(stat(path, &st) != 0);
        }
        CU_ASSERT_EQUAL(open_fds(), before);
    }
    CU_ASSERT_EQUAL(pt_remove_dead_temporaries(path), 0);
    unlink(path);
    free(path);
    free_temp_dir(dir);
}

static void test_little_endian_codecs(void)
{
    unsigned char b[8];
    pt_put_le32(b, 0x11223344u);
    CU_ASSERT(b[0] == 0x44 && b[1] == 0x33 && b[2] == 0x22 && b[3] == 0x11);
    CU_ASSERT(pt_get_le32(b) == 0x11223344u);
    pt_put_le64(b, 0x0102030405060708ull);
    CU_ASSERT(b[0] == 8 && b[7] == 1);
    CU_ASSERT(pt_get_le64(b) == 0x0102030405060708ull);
}

static const pt_test fileio_tests[] = {
    {"commit_writes_exact_contents", test_commit_writes_exact_contents},
    {"abort_leaves_nothing", test_abort_leaves_nothing},
    {"remove_temporaries", test_remove_temporaries},
    {"existing_file_replaced_only_on_commit", test_existing_file_replaced_only_on_commit},
    {"leftover_temp_file_neither_blocks_nor_is_clobbered",
     test_leftover_temp_file_neither_blocks_nor_is_clobbered},
    {"unique_ids_and_sha256", test_unique_ids_and_sha256},
    {"open_in_missing_directory_fails", test_open_in_missing_directory_fails},
    {"commit_onto_directory_fails_cleanly", test_commit_onto_directory_fails_cleanly},
    {"read_file_limits", test_read_file_limits},
    {"mkdir_p", test_mkdir_p},
    {"mkdir_p_made", test_mkdir_p_made},
    {"write_after_failure_is_refused", test_write_after_failure_is_refused},
    {"little_endian_codecs", test_little_endian_codecs},
    {"remove_dead_temporaries", test_remove_dead_temporaries},
    {"synced_file_holds_what_its_commit_needs", test_synced_file_holds_what_its_commit_needs},
    {"long_names", test_long_names},
    {"long_utf8_names", test_long_utf8_names},
    {"json_text", test_json_text},
    {"json_load_foreign", test_json_load_foreign},
    {"log_open", test_log_open},
    {NULL, NULL}};

static const pt_test_suite suites[] = {{"fileio", fileio_tests}, {NULL, NULL}};
