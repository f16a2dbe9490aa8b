/*
 * fileio.h: crash-safe file writing and the small file utilities the file
 * formats of launch/ are built on (checkpoints, safetensors, manifests).
 *
 * Invariant kept by pt_wfile: a file at `path` is either the old one or the
 * complete new one, never a partial one, whatever the moment of a crash. The
 * new contents go to "<path>.tmp.<pid>" in the same directory (so the final
 * rename cannot cross file systems), are fsynced, renamed over `path`, and the
 * directory is fsynced so the rename itself survives a power loss.
 *
 * Also here: explicit little-endian encoding helpers, because every multi-byte
 * integer pipetrain puts on disk is little-endian whatever the host is.
 */
#ifndef PT_LAUNCH_FILEIO_H
#define PT_LAUNCH_FILEIO_H

#include "nn/nn.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A file being written under a temporary name; see the comment at the top. */
typedef struct pt_wfile pt_wfile;

/* Creates "<path>.tmp.<pid>" (O_CREAT | O_EXCL, mode 0644). Fails with PT_ESYS
 * if the directory is missing or a temporary file of that name already exists
 * (a leftover of a crashed process with the same pid, or a second writer of
 * the same path in this process). */
int pt_wfile_open(pt_wfile **out, const char *path, pt_err *err);

/* Appends n bytes (buffered). Tracks the crc32 (zlib's) and size of what was
 * written. After a failed write the file can only be aborted: later writes and
 * pt_wfile_commit fail with PT_EINTERNAL, so a partial file is never committed
 * by a caller that forgot to check. */
int pt_wfile_write(pt_wfile *f, const void *data, size_t n, pt_err *err);

/* crc32 of everything written so far (0 for nothing). */
uint32_t pt_wfile_crc(const pt_wfile *f);

/* Bytes written so far. */
uint64_t pt_wfile_size(const pt_wfile *f);

/* The final path the file will have once committed. */
const char *pt_wfile_path(const pt_wfile *f);

/* Flushes, fsyncs, closes, renames the temporary file to the final path and
 * fsyncs the directory. Frees f in every case; on failure the temporary file is
 * removed and whatever was at the final path before is untouched (unless only
 * the directory fsync failed: then the new file is in place but its rename may
 * not survive a power loss, and the error says so). */
int pt_wfile_commit(pt_wfile *f, pt_err *err);

/* Closes and unlinks the temporary file and frees f. NULL-safe. */
void pt_wfile_abort(pt_wfile *f);

/* pt_wfile_open + pt_wfile_write + pt_wfile_commit. */
int pt_write_file_atomic(const char *path, const void *data, size_t n, pt_err *err);

/* Reads a whole file. *data is malloc'd (the caller frees it), holds *n bytes
 * and one extra NUL byte after them, so text can be used as a C string.
 * PT_EINPUT if the file holds more than max_bytes bytes; PT_ESYS if it cannot
 * be opened or read. */
int pt_read_file(const char *path, size_t max_bytes, void **data, size_t *n, pt_err *err);

/* Creates a directory and any missing parents, like `mkdir -p`: an existing
 * directory is fine, an existing non-directory is PT_ESYS. */
int pt_mkdir_p(const char *path, mode_t mode, pt_err *err);

/* fsyncs a directory, making renames and creations in it durable. File systems
 * that cannot fsync a directory (EINVAL) are treated as success. */
int pt_fsync_dir(const char *dir, pt_err *err);

/* Reads exactly n bytes at offset of the open file fd (path names it in
 * messages): PT_ESYS if the read fails, PT_EINPUT if the file ends first. */
int pt_pread_all(int fd, void *buf, size_t n, uint64_t offset, const char *path, pt_err *err);

/* zlib's crc32 continued over n bytes (any n, unlike zlib's uInt length). */
uint32_t pt_crc32(uint32_t crc, const void *data, size_t n);

/* --------------------------------------------------- little-endian codecs */

static inline void pt_put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline void pt_put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t pt_get_le32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t pt_get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
