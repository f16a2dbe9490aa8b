/*
 * gzio.c: reading dataset files through zlib's gz* interface, which reads
 * gzip'd and plain files alike, and turning zlib's error states into pt_err
 * messages that name the file and how far into it the problem is.
 *
 * zlib reports a damaged deflate stream as a failed read (Z_DATA_ERROR) but a
 * stream that simply stops as a short read with Z_BUF_ERROR set; callers see
 * the first as PT_EINPUT "corrupt" and the second as a short read they report
 * as "truncated" (with cut_short telling them why).
 */
#include "data/data_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pt_gz_open(gzFile *out, const char *path, pt_err *err)
{
    *out = NULL;
    int fd = pt_open_input(path, 0, err); /* a FIFO would block, /dev/zero never end */
    if (fd < 0)
        return err->code;
    errno = 0;
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        int e = errno;
        close(fd);
        if (e == 0) /* zlib could not allocate its state */
            return pt_fail(err, PT_ENOMEM, "%s: cannot open: out of memory", path);
        return pt_fail(err, PT_ESYS, "%s: cannot open: %s", path, strerror(e));
    }
    /* Bigger than zlib's 8 KiB default: fewer read() calls on 30-50 MB files. */
    gzbuffer(gz, 1 << 17);
    *out = gz;
    return 0;
}

/* zlib's message for gz without the name zlib knows the file by, which
 * starts it: pt_gz_open opens with gzdopen, so that is "<fd:N>" (the
 * descriptor, which means nothing to a reader; ours name the path). */
static const char *zlib_message(gzFile gz, int *errnum)
{
    const char *msg = gzerror(gz, errnum);
    if (strncmp(msg, "<fd:", 4) != 0)
        return msg;
    const char *p = msg + 4;
    while (*p >= '0' && *p <= '9')
        p++;
    return p > msg + 4 && p[0] == '>' && p[1] == ':' && p[2] == ' ' ? p + 3 : msg;
}

/* Turns the error state of gz (after gzread returned -1) into a pt_err. */
static int read_failure(gzFile gz, const char *path, const char *what, uint64_t at, pt_err *err)
{
    int errnum = Z_OK;
    const char *msg = zlib_message(gz, &errnum);
    unsigned long long pos = (unsigned long long)at;
    if (errnum == Z_ERRNO) /* zlib's message is strerror(errno) here */
        return pt_fail(err, PT_ESYS, "%s: read failed after %llu bytes of %s: %s", path, pos,
                       what, msg);
    if (errnum == Z_MEM_ERROR)
        return pt_fail(err, PT_ENOMEM, "%s: out of memory decompressing after %llu bytes of %s",
                       path, pos, what);
    /* The CRC-32 and length of a member's data follow that data, in its
     * trailer: a mismatch is found at the member's end, however far zlib
     * had decompressed ahead of what we had read (a small file fails on its
     * first read), so no position is given. */
    const int crc = strstr(msg, "incorrect data check") != NULL;
    if (crc || strstr(msg, "incorrect length check"))
        return pt_fail(err, PT_EINPUT,
                       "%s: corrupt gzip data: the %s in the gzip trailer, after the compressed "
                       "data, does not match the data decompressed (zlib: %s)",
                       path, crc ? "checksum (CRC-32)" : "length", msg);
    /* zlib decompresses ahead of what we asked for, so the damage can lie
     * anywhere after `pos`: say where we were, not where it is. */
    return pt_fail(err, PT_EINPUT,
                   "%s: corrupt gzip data (zlib: %s), found after %llu decompressed bytes while "
                   "reading the %s",
                   path, msg, pos, what);
}

int pt_gz_read(gzFile gz, const char *path, void *buf, size_t len, size_t *got, int *cut_short,
               const char *what, uint64_t offset, pt_err *err)
{
    size_t total = 0;
    *got = 0;
    if (cut_short)
        *cut_short = 0;
    while (total < len) {
        /* gzread counts in unsigned and answers in int: stay well inside both. */
        size_t left = len - total;
        unsigned want = left > (1u << 30) ? 1u << 30 : (unsigned)left;
        int r = gzread(gz, (char *)buf + total, want);
        if (r < 0)
            return read_failure(gz, path, what, offset + total, err);
        if (r == 0)
            break;
        total += (size_t)r;
    }
    *got = total;
    if (total < len && cut_short) {
        int errnum = Z_OK;
        gzerror(gz, &errnum);
        *cut_short = errnum == Z_BUF_ERROR;
    }
    return 0;
}

/* zlib's gzread ends a gzip file at the first member that is followed by
 * bytes that do not start another member, and drops those bytes unread (as
 * gzip -d warns of "trailing garbage"). So the raw file is walked again here,
 * member by member, inflating into scratch: whatever follows the last member
 * is refused, as extra data after the declared size is. */
static int gzip_members_end_the_file(const char *path, int *cut_first, pt_err *err)
{
    *cut_first = 0;
    int fd = pt_open_input(path, 0, err);
    if (fd < 0)
        return err->code;
    enum { IN = 1 << 16, OUT = 1 << 16 };
    unsigned char *in = malloc(IN), *out = malloc(OUT);
    z_stream z;
    memset(&z, 0, sizeof z);
    int rc = in && out && inflateInit2(&z, 15 + 16) == Z_OK
                 ? 0
                 : pt_fail(err, PT_ENOMEM, "%s: out of memory checking the gzip stream", path);
    const int ready = rc == 0;
    uint64_t raw = 0, member_at = 0; /* bytes of the file before z.next_in; where the member began */
    int in_member = 1, eof = 0, members = 0;
    while (rc == 0) {
        if (z.avail_in == 0 && !eof) {
            ssize_t got = read(fd, in, IN);
            if (got < 0) {
                rc = pt_fail(err, PT_ESYS, "%s: read failed: %s", path, strerror(errno));
                break;
            }
            eof = got == 0;
            z.next_in = in;
            z.avail_in = (uInt)got;
        }
        if (!in_member) {
            if (z.avail_in == 0 && eof)
                break; /* the last member ended the file */
            if (z.avail_in < 2 && !eof) { /* a member's magic may straddle reads */
                memmove(in, z.next_in, z.avail_in);
                ssize_t got = read(fd, in + z.avail_in, IN - z.avail_in);
                if (got < 0) {
                    rc = pt_fail(err, PT_ESYS, "%s: read failed: %s", path, strerror(errno));
                    break;
                }
                eof = got == 0;
                z.next_in = in;
                z.avail_in += (uInt)got;
                continue;
            }
            if (z.avail_in < 2 || z.next_in[0] != 0x1f || z.next_in[1] != 0x8b) {
                rc = pt_fail(err, PT_EINPUT, "%s: trailing bytes after the gzip data, from byte "
                             "%llu of the file (not another gzip member)", path,
                             (unsigned long long)raw);
                break;
            }
            inflateReset(&z);
            in_member = 1;
            member_at = raw;
        }
        const uInt before = z.avail_in;
        z.next_out = out;
        z.avail_out = OUT;
        int zr = inflate(&z, Z_NO_FLUSH);
        raw += before - z.avail_in;
        if (zr == Z_STREAM_END) {
            in_member = 0;
            members++;
        } else if (zr == Z_BUF_ERROR && eof && z.avail_in == 0) {
            /* cut short: the data's own member is the caller's to call
             * truncated; an incomplete one after it is trailing bytes */
            if (members > 0)
                rc = pt_fail(err, PT_EINPUT, "%s: trailing bytes after the gzip data, from byte "
                             "%llu of the file (the start of another gzip member, cut short)",
                             path, (unsigned long long)member_at);
            else
                *cut_first = 1;
            break;
        }
        else if (zr != Z_OK && zr != Z_BUF_ERROR)
            rc = pt_fail(err, zr == Z_MEM_ERROR ? PT_ENOMEM : PT_EINPUT,
                         "%s: corrupt gzip data (zlib: %s)", path, z.msg ? z.msg : "?");
    }
    if (ready)
        inflateEnd(&z);
    free(in);
    free(out);
    close(fd);
    return rc;
}

int pt_gz_expect_end(gzFile gz, const char *path, uint64_t offset, const char *what,
                     pt_err *err)
{
    /* Counting (rather than stopping at the first extra byte) makes the
     * message useful; the limit keeps a huge wrong file from being read whole. */
    const uint64_t limit = (uint64_t)1 << 20;
    char scratch[1 << 14];
    uint64_t rest = 0;
    size_t got;
    int cut = 0;
    do {
        int rc = pt_gz_read(gz, path, scratch, sizeof scratch, &got, &cut, "trailing data",
                            offset + rest, err);
        if (rc)
            return rc;
        rest += got;
    } while (got == sizeof scratch && rest <= limit);
    if (rest > 0)
        return pt_fail(err, PT_EINPUT,
                       "%s: %s%llu trailing byte%s after the %s the header declares (the data "
                       "should end after %llu bytes)",
                       path, rest > limit ? "more than " : "",
                       (unsigned long long)(rest > limit ? limit : rest), rest == 1 ? "" : "s",
                       what, (unsigned long long)offset);
    int rc = pt_gz_check_members(gz, path, &cut, err);
    if (rc == 0 && cut)
        return pt_fail(err, PT_EINPUT,
                       "%s: truncated gzip stream: all %llu bytes of data are there but the "
                       "stream stops before its trailer (the CRC that checks them)",
                       path, (unsigned long long)offset);
    return rc;
}

int pt_gz_check_members(gzFile gz, const char *path, int *cut_short, pt_err *err)
{
    int cut_first = 0;
    if (gzdirect(gz))
        return 0;
    int rc = gzip_members_end_the_file(path, &cut_first, err);
    /* gzread's "cut short" stands only when the walk agrees that the data's
     * own member is what stops early (not bytes of another after it) */
    *cut_short = rc == 0 && *cut_short && cut_first;
    return rc;
}
