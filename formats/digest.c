/*
 * digest.c: checksums and names: a size_t-clean CRC-32 (zlib), SHA-256 of
 * bytes and of a file (OpenSSL), hex, and unique ids (for checkpoints and
 * temporary file names).
 */
#include "formats/formats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <zlib.h>

/* A file is read for its digest in pieces of this many bytes. */
#define READ_BYTES ((size_t)1 << 20)

uint32_t pt_crc32(uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;
    uLong c = crc;
    while (n > 0) {
        /* zlib takes a uInt length */
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)c;
}

void pt_unique_id(char *out, size_t n)
{
    unsigned char bytes[32];
    size_t want = (n - 1) / 2 < sizeof bytes ? (n - 1) / 2 : sizeof bytes;
    if (getrandom(bytes, want, 0) != (ssize_t)want) {
        /* no entropy source: time, pid and an address still differ between
         * processes and calls, which is all a temporary name needs */
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        uint64_t mix[4] = {(uint64_t)t.tv_sec, (uint64_t)t.tv_nsec, (uint64_t)getpid(),
                           (uint64_t)(uintptr_t)&t};
        for (size_t i = 0; i < want; i++)
            bytes[i] = (unsigned char)(mix[i % 4] >> (8 * (i / 4 % 8)));
    }
    pt_hex(bytes, want, out);
}

int pt_sha256_file(const char *path, unsigned char digest[32], uint64_t *size, pt_err *err)
{
    int fd = pt_open_input(path, 0, err); /* not /dev/zero, which never ends */
    if (fd < 0)
        return err->code;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char *buf = malloc(READ_BYTES);
    int rc = 0;
    if (!ctx || !buf || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
        rc = pt_fail(err, PT_ENOMEM, "'%s': cannot start a SHA-256 digest", path);
    *size = 0;
    while (!rc) {
        ssize_t got = read(fd, buf, READ_BYTES);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = pt_fail(err, PT_ESYS, "'%s': cannot read: %s", path, strerror(errno));
        else if (got == 0)
            break;
        else if (EVP_DigestUpdate(ctx, buf, (size_t)got) != 1)
            rc = pt_fail(err, PT_EINTERNAL, "'%s': SHA-256 update failed", path);
        else
            *size += (uint64_t)got;
    }
    unsigned int len = 0;
    if (!rc && (EVP_DigestFinal_ex(ctx, digest, &len) != 1 || len != 32))
        rc = pt_fail(err, PT_EINTERNAL, "'%s': SHA-256 finish failed", path);
    EVP_MD_CTX_free(ctx);
    free(buf);
    close(fd);
    return rc;
}

struct pt_sha256 {
    EVP_MD_CTX *ctx;
    int failed;
};

pt_sha256 *pt_sha256_begin(void)
{
    pt_sha256 *h = calloc(1, sizeof *h);
    if (h && (!(h->ctx = EVP_MD_CTX_new()) || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1)) {
        EVP_MD_CTX_free(h->ctx);
        free(h);
        h = NULL;
    }
    return h;
}

void pt_sha256_add(pt_sha256 *h, const void *data, size_t n)
{
    if (h && !h->failed && n > 0 && EVP_DigestUpdate(h->ctx, data, n) != 1)
        h->failed = 1;
}

int pt_sha256_end(pt_sha256 *h, unsigned char digest[32], pt_err *err)
{
    if (!h)
        return pt_fail(err, PT_ENOMEM, "out of memory starting a SHA-256 digest");
    unsigned int len = 0;
    int rc = 0;
    if (h->failed || EVP_DigestFinal_ex(h->ctx, digest, &len) != 1 || len != 32)
        rc = pt_fail(err, PT_EINTERNAL, "a SHA-256 digest failed");
    EVP_MD_CTX_free(h->ctx);
    free(h);
    return rc;
}

void pt_hex(const unsigned char *bytes, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[bytes[i] >> 4];
        out[2 * i + 1] = hex[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}
