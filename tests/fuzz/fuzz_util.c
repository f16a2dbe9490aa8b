/*
 * fuzz_util.c: the temporary directory and plain file helpers of the fuzz
 * targets (see fuzz_util.h).
 */
#include "tests/fuzz/fuzz_util.h"

#include "tests/common/test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <zlib.h>

void fuzz_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* The directory to remove at exit: set once by fuzz_temp_dir. */
static char *temp_dir;

static void remove_temp_dir(void)
{
    free_temp_dir(temp_dir);
    temp_dir = NULL;
}

const char *fuzz_temp_dir(void)
{
    if (temp_dir)
        fuzz_die("fuzz_temp_dir called twice");
    if (!(temp_dir = make_temp_dir()))
        fuzz_die("cannot make a temporary directory: %s", strerror(errno));
    atexit(remove_temp_dir);
    return temp_dir;
}

char *fuzz_join(char *out, size_t n, const char *dir, const char *name)
{
    int k = snprintf(out, n, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= n)
        fuzz_die("path too long: %s/%s", dir, name);
    return out;
}

void fuzz_write(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        fuzz_die("cannot write %s: %s", path, strerror(errno));
    for (size_t done = 0; done < n;) {
        ssize_t k = write(fd, (const char *)data + done, n - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            fuzz_die("cannot write %s: %s", path, strerror(errno));
        done += (size_t)k;
    }
    if (close(fd) != 0)
        fuzz_die("cannot write %s: %s", path, strerror(errno));
}

void fuzz_write_gzip(const char *path, const void *data, size_t n)
{
    gzFile gz = gzopen(path, "wb");
    if (!gz)
        fuzz_die("cannot write %s", path);
    /* gzwrite of 0 bytes is fine: the result is an empty gzip stream */
    if ((n > 0 && gzwrite(gz, data, (unsigned)n) != (int)n) || gzclose(gz) != Z_OK)
        fuzz_die("cannot write %s (gzip)", path);
}

void *fuzz_read(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fuzz_die("cannot read %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += k;
        if (len == cap)
            buf = realloc(buf, cap *= 2);
    }
    if (!buf || ferror(f))
        fuzz_die("cannot read %s", path);
    fclose(f);
    *n = len;
    return buf;
}

char *fuzz_strndup(const uint8_t *data, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        fuzz_die("out of memory");
    memcpy(s, data, n);
    s[n] = '\0';
    return s;
}
