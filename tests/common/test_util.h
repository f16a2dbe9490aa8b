/*
 * test_util.h: helpers shared by the file-format tests (formats/, checkpoint/, fuzz): a fresh
 * temporary directory per test (removed afterwards, with everything in it),
 * raw file writes that bypass pt_wfile (to plant damaged files), and
 * directory listings (to prove no temporary file is left behind).
 */
#ifndef PT_TESTS_LAUNCH_TEST_UTIL_H
#define PT_TESTS_LAUNCH_TEST_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdtemp under $TMPDIR (or /tmp); the returned path is malloc'd. */
static inline char *make_temp_dir(void)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    size_t n = strlen(base) + 32;
    char *dir = malloc(n);
    snprintf(dir, n, "%s/pt_launch_XXXXXX", base);
    if (!mkdtemp(dir)) {
        free(dir);
        return NULL;
    }
    return dir;
}

static inline char *join_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* rm -r, for the test's own temporary directory only. */
static inline void remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char *child = join_path(path, e->d_name);
            remove_tree(child);
            free(child);
        }
        if (d)
            closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static inline void free_temp_dir(char *dir)
{
    if (dir)
        remove_tree(dir);
    free(dir);
}

/* Entries in a directory other than . and .. */
static inline int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static inline int write_raw(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* Whole file, malloc'd (NULL if unreadable). */
static inline unsigned char *read_raw(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1024, len = 0;
    unsigned char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *n = len;
    return buf;
}

static inline int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

#endif
