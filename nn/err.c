/*
 * err.c: filling pt_err. Errors travel up as (code, message) in a struct the
 * caller owns; there is no global "last error".
 */
#include "nn/nn.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int pt_fail(pt_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
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
