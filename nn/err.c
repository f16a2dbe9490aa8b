/*
 * err.c: filling pt_err, and the notes of where the code is that a signal
 * handler prints. Errors travel up as (code, message) in a struct the
 * caller owns; there is no global "last error".
 */
#include "nn/nn.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *pt_note_vprintf(pt_note *n, const char *volatile *slot, const char *fmt, va_list ap)
{
    char *buf = n->buf[n->next];
    n->next = 1 - n->next;
    vsnprintf(buf, sizeof n->buf[0] - 1, fmt, ap);
    pt_note_publish(slot, buf);
    return buf;
}

const char *pt_note_printf(pt_note *n, const char *volatile *slot, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *s = pt_note_vprintf(n, slot, fmt, ap);
    va_end(ap);
    return s;
}

void pt_note_publish(const char *volatile *slot, const char *s)
{
    if (slot)
        __atomic_store_n(slot, s, __ATOMIC_RELEASE);
}

int pt_note_is_published(const pt_note *n, const char *volatile *slot)
{
    if (!slot)
        return 0;
    const char *now = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    return now == n->buf[0] || now == n->buf[1];
}

int pt_fail(pt_err *err, int code, const char *fmt, ...)
{
    const int e = errno; /* the failed call's, before formatting can change it */
    if (err) {
        err->sys_errno = code == PT_ESYS ? e : 0;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
        err->relayed = 0;
        err->agreed = 0;
    }
    return code;
}

int pt_err_prefix(pt_err *err, const char *fmt, ...)
{
    if (!err)
        return PT_EINTERNAL;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof prefix - 2, fmt, ap);
    va_end(ap);
    if (n < 0)
        return err->code;
    size_t plen = strlen(prefix);
    memcpy(prefix + plen, ": ", 3);
    plen += 2;
    /* Shift the old message right (truncating its end) and put the prefix in front. */
    size_t old = strnlen(err->msg, sizeof err->msg - 1);
    size_t keep = old + plen < sizeof err->msg ? old : sizeof err->msg - 1 - plen;
    memmove(err->msg + plen, err->msg, keep);
    err->msg[plen + keep] = '\0';
    memcpy(err->msg, prefix, plen);
    return err->code;
}

void pt_number_text(double v, char *out, size_t n)
{
    if (!out || n == 0)
        return;
    /* at least the integer part's digits up to 1e15: 600, not 6e+02 */
    int first = 1;
    for (double a = fabs(v); a >= 10 && first < 16; a /= 10)
        first++;
    for (int digits = first; digits <= 17; digits++) {
        snprintf(out, n, "%.*g", digits, v);
        if (strtod(out, NULL) == v)
            break;
    }
}

const char *pt_file_kind(unsigned mode)
{
    const mode_t m = (mode_t)mode;
    return S_ISREG(m)    ? "a regular file"
           : S_ISDIR(m)  ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a file";
}

/* errno values that say the system ran out of something, not that the
 * input is bad */
static int system_short(int e)
{
    return e == EMFILE || e == ENFILE || e == ENOMEM || e == ENOSPC || e == EDQUOT;
}

int pt_err_input(int rc, pt_err *err)
{
    if (rc != PT_ESYS || (err && system_short(err->sys_errno)))
        return rc;
    if (err)
        err->code = PT_EINPUT;
    return PT_EINPUT;
}

static int input_kind_ok(mode_t m, int streams_ok)
{
    return S_ISREG(m) || (streams_ok && (S_ISFIFO(m) || S_ISCHR(m)));
}

int pt_open_input(const char *path, int streams_ok, pt_err *err)
{
    struct stat st;
    if (stat(path, &st) == 0 && !input_kind_ok(st.st_mode, streams_ok)) {
        pt_fail(err, PT_EINPUT, "'%s' is not a regular file (%s)", path, pt_file_kind(st.st_mode));
        return -1;
    }
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        pt_fail(err, PT_ESYS, "'%s': cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        pt_fail(err, PT_ESYS, "'%s': cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!input_kind_ok(st.st_mode, streams_ok)) { /* it changed since the stat */
        pt_fail(err, PT_EINPUT, "'%s' is not a regular file (%s)", path, pt_file_kind(st.st_mode));
        close(fd);
        return -1;
    }
    /* a pipe's writer is waited for; a device is read as far as it has
     * something to give (a terminal or /dev/ptmx would wait forever) */
    if (S_ISCHR(st.st_mode))
        return fd;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
        pt_fail(err, PT_ESYS, "'%s': fcntl: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}
