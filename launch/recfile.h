/*
 * recfile.h: a CRC-checked binary container of tagged records, the format
 * under every checkpoint file.
 *
 * Layout (all integers little-endian):
 *   header   8-byte magic chosen by the caller (e.g. "PTUNITS1"), u32 version,
 *            u32 reserved (0)
 *   records  u32 tag length (1..255), tag bytes (no NUL), u64 payload length,
 *            payload bytes; any number of records, tags unique
 *   trailer  u32 0xFFFFFFFF, u64 record count, u32 crc32 (zlib) of every byte
 *            before the crc field, 8 bytes "PTRECEND"
 *
 * The writer goes through pt_wfile, so a file either is complete or is not
 * there. The reader trusts nothing: it checks size, magic, trailer and the CRC
 * of the whole file before it parses a single record, then parses with bounds
 * checks against the real size; every defect is PT_EINPUT with a message naming
 * the file. Payloads are not aligned: callers memcpy them out.
 *
 * The reader maps the file read-only. Like any mmap reader it assumes nobody
 * truncates the file while it is open (that would raise SIGBUS); checkpoint
 * files are never modified in place, only replaced by rename.
 */
#ifndef PT_LAUNCH_RECFILE_H
#define PT_LAUNCH_RECFILE_H

#include "nn/nn.h"

#include <stddef.h>
#include <stdint.h>

#define PT_RECFILE_MAX_TAG 255

/* ------------------------------------------------------------------ writer */

typedef struct pt_recwriter pt_recwriter;

/* Starts a new file (under a temporary name until commit). */
int pt_recwriter_open(pt_recwriter **out, const char *path, const char magic[8],
                      uint32_t version, pt_err *err);

/* Adds one record. tag: 1..255 bytes, unique in the file (PT_EINPUT
 * otherwise). len may be 0 (data may then be NULL). */
int pt_recwriter_add(pt_recwriter *w, const char *tag, const void *data, uint64_t len,
                     pt_err *err);

/* For large payloads written in pieces: pt_recwriter_begin declares the tag and
 * the total length, then pt_recwriter_write calls must supply exactly that
 * many bytes before the next record or the commit (PT_EINTERNAL otherwise). */
int pt_recwriter_begin(pt_recwriter *w, const char *tag, uint64_t len, pt_err *err);
int pt_recwriter_write(pt_recwriter *w, const void *data, uint64_t len, pt_err *err);

/* Writes the trailer and moves the file into place atomically. Frees w in
 * every case; on failure nothing appears at the path. */
int pt_recwriter_commit(pt_recwriter *w, pt_err *err);

/* Drops the file being written and frees w. NULL-safe. */
void pt_recwriter_abort(pt_recwriter *w);

/* ------------------------------------------------------------------ reader */

typedef struct pt_recfile pt_recfile;

/* Opens and fully validates a file: PT_ESYS if it cannot be opened or mapped,
 * PT_EINPUT for anything wrong inside (too short, other magic, no end marker,
 * checksum mismatch, a record running past the trailer, a tag of length 0 or
 * over 255 or containing NUL, a record count different from the stored one,
 * duplicate tags, non-zero reserved field). *version gets the stored version;
 * the caller decides which versions it supports. */
int pt_recfile_open(pt_recfile **out, const char *path, const char magic[8], uint32_t *version,
                    pt_err *err);

/* Records in file order. */
int pt_recfile_count(const pt_recfile *f);

/* Record i (0 <= i < count; otherwise everything is set to NULL / 0). The tag
 * is not NUL-terminated; data points into the mapping, valid until close. */
void pt_recfile_get(const pt_recfile *f, int i, const char **tag, size_t *tag_len,
                    const void **data, uint64_t *len);

/* 0 and the payload of the record tagged `tag`, or PT_EINPUT with a message
 * naming the tag and the file. */
int pt_recfile_find(const pt_recfile *f, const char *tag, const void **data, uint64_t *len,
                    pt_err *err);

/* The path the file was opened with. */
const char *pt_recfile_path(const pt_recfile *f);

/* Unmaps and frees. NULL-safe. */
void pt_recfile_close(pt_recfile *f);

#endif
