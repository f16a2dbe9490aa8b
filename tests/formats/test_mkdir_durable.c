/*
 * test_mkdir_durable.c: every directory pt_mkdir_p creates has its parent
 * fsynced before pt_mkdir_p returns, so that a checkpoint's new step
 * directory is on disk before older checkpoints are removed. Built with
 * -Wl,--wrap=fsync: each fsync the formats library makes goes through
 * __wrap_fsync, which records the directory the descriptor names.
 */
#include "formats/formats.h"
#include "tests/common/test_util.h"
#include "tests/common/cunit_main.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int __real_fsync(int fd);
int __wrap_fsync(int fd);

enum { MAX_SYNCED = 64 };
static char synced[MAX_SYNCED][PATH_MAX];
static int nsynced;

int __wrap_fsync(int fd)
{
    char link[64], target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, target, sizeof target - 1);
    struct stat st;
    if (n > 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && nsynced < MAX_SYNCED) {
        target[n] = '\0';
        snprintf(synced[nsynced++], PATH_MAX, "%s", target);
    }
    return __real_fsync(fd);
}

static int was_synced(const char *dir)
{
    char real[PATH_MAX];
    if (!realpath(dir, real))
        return 0;
    for (int i = 0; i < nsynced; i++)
        if (strcmp(synced[i], real) == 0)
            return 1;
    return 0;
}

static void test_created_directories_are_durable(void)
{
    char *dir = make_temp_dir();
    CU_ASSERT_FATAL(dir != NULL);
    char *a = join_path(dir, "a"), *b = join_path(dir, "a/b"), *deep = join_path(dir, "a/b//c/");
    pt_err err = {0};
    nsynced = 0;
    CU_ASSERT_FATAL(pt_mkdir_p(deep, 0755, &err) == 0);
    /* the parents of a, b and c: each new entry is on disk */
    CU_ASSERT(was_synced(dir));
    CU_ASSERT(was_synced(a));
    CU_ASSERT(was_synced(b));
    /* nothing new, nothing synced */
    nsynced = 0;
    CU_ASSERT(pt_mkdir_p(deep, 0755, &err) == 0);
    CU_ASSERT_EQUAL(nsynced, 0);
    /* one new leaf under existing parents: its parent alone */
    char *d = join_path(dir, "a/b/d");
    nsynced = 0;
    CU_ASSERT(pt_mkdir_p(d, 0755, &err) == 0);
    CU_ASSERT_EQUAL(nsynced, 1);
    CU_ASSERT(was_synced(b));
    free(d);
    free(deep);
    free(b);
    free(a);
    free_temp_dir(dir);
}

static void test_relative_directory_syncs_the_working_directory(void)
{
    char *dir = make_temp_dir();
    CU_ASSERT_FATAL(dir != NULL);
    char cwd[PATH_MAX];
    CU_ASSERT_FATAL(getcwd(cwd, sizeof cwd) != NULL);
    CU_ASSERT_FATAL(chdir(dir) == 0);
    pt_err err = {0};
    nsynced = 0;
    CU_ASSERT(pt_mkdir_p("fresh", 0755, &err) == 0);
    CU_ASSERT(was_synced("."));
    CU_ASSERT_FATAL(chdir(cwd) == 0);
    free_temp_dir(dir);
}

static const pt_test durable_tests[] = {
    {"created_directories_are_durable", test_created_directories_are_durable},
    {"relative_directory_syncs_the_working_directory",
     test_relative_directory_syncs_the_working_directory},
    {NULL, NULL}};

static const pt_test_suite suites[] = {{"mkdir_durable", durable_tests}, {NULL, NULL}};
