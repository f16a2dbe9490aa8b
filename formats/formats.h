/*
 * formats.h: the formats module's public interface: the generic file formats
 * pipetrain's files are built on, none of which knows what its bytes mean
 * for training:
 *  - crash-safe file writing (temporary name, fsync, rename) and small file
 *    utilities;
 *  - recfile: a CRC-checked container of tagged records (checkpoint files);
 *  - JSON (jansson) helpers;
 *  - safetensors, how weights travel to and from PyTorch.
 */
#ifndef PT_FORMATS_H
#define PT_FORMATS_H

#include "nn/nn.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <jansson.h>
#include <sys/types.h>

/*
 * Crash-safe file writing and the small file utilities the other formats
 * are built on (checkpoints, safetensors, manifests).
 *
 * Invariant kept by pt_wfile: a file at `path` is either the old one or the
 * complete new one, never a partial one, whatever the moment of a crash. The
 * new contents go to "<path>.tmp.<pid>.<random>" in the same directory (so the
 * final rename cannot cross file systems), are fsynced, renamed over `path`,
 * and the directory is fsynced so the rename itself survives a power loss. A
 * crashed writer leaves its temporary file behind; the random part means it
 * never blocks a later writer, and the owner of the directory removes such
 * leftovers (pt_is_temporary_name) when no writer of its own is running.
 *
 * Also here: explicit little-endian encoding helpers, because every multi-byte
 * integer pipetrain puts on disk is little-endian whatever the host is.
 */


/* A file being written under a temporary name; see the comment at the top. */
typedef struct pt_wfile pt_wfile;

/* Creates "<path>.tmp.<pid>.<random>" (O_CREAT | O_EXCL, mode 0644). Fails
 * with PT_ESYS if the directory is missing or not writable, and with
 * PT_EINPUT if path is there and is not a regular file (a directory, a
 * FIFO, a device) or is a symbolic link (even to a regular file: the rename
 * would replace the link), which are never replaced. */
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

/* Writes what is buffered, fsyncs the temporary file and closes it for
 * writing (nothing more can be written), keeping only the descriptor that
 * holds its lock: so that the disk holds it all (a full disk shows here),
 * every resource the commit needs is taken, and a later commit has only the
 * rename left that can fail (several outputs put in place as a group are
 * each synced first, and none is replaced when one cannot be). */
int pt_wfile_sync(pt_wfile *f, pt_err *err);

/* Closes and unlinks the temporary file and frees f. NULL-safe. */
void pt_wfile_abort(pt_wfile *f);

/* Unlinks the temporary files of every pt_wfile open now (the first
 * PT_WFILE_TRACKED of them), then takes back the directories tracked by
 * pt_mkdir_p_made tracked as pt_rmdir_made does, for a handler of a signal that
 * ends the process: async-signal-safe. */
enum { PT_WFILE_TRACKED = 16 };
void pt_wfile_remove_temporaries(void);

/* Outputs of several files put in place one after another (a bert export's
 * renames) as a group: between begin and end the calling thread blocks the
 * signals that come from outside (not those of a fault), so a stop is
 * delivered at end, once the group is in place; a handler that runs on
 * another thread meanwhile and asks pt_wfile_defer_signal(sig) first has the
 * signal put off (it returns 1 and does nothing else), and end raises it
 * again. So a stop never leaves some of the new files beside old ones.
 * Begin and end on one thread, not nested. */
void pt_wfile_group_begin(void);
void pt_wfile_group_end(void);
int pt_wfile_defer_signal(int sig);

/* pt_wfile_open + pt_wfile_write + pt_wfile_commit. */
int pt_write_file_atomic(const char *path, const void *data, size_t n, pt_err *err);

/* Reads a whole regular file. *data is malloc'd (the caller frees it), holds
 * *n bytes and one extra NUL byte after them, so text can be used as a C
 * string. PT_EINPUT if the file holds more than max_bytes bytes or is not a
 * regular file (a FIFO is refused, not waited on: pt_open_input); PT_ESYS
 * if it cannot be opened or read. */
int pt_read_file(const char *path, size_t max_bytes, void **data, size_t *n, pt_err *err);

/* Creates a directory and any missing parents, like `mkdir -p`: an existing
 * directory is fine, an existing non-directory is PT_ESYS. Each directory it
 * creates is durable when it returns (its parent fsynced). */
int pt_mkdir_p(const char *path, mode_t mode, pt_err *err);
/* The same, with *made the length of the path's shortest prefix it created
 * (0 when every directory was there), for pt_rmdir_made to take back what
 * a failed output left: path and its parents down to that prefix, each
 * only while empty (also after a failure part of the way: *made is set
 * then too). A '.' or '..' after a component that does not exist yet is
 * refused (PT_EINPUT), before anything is made: the prefix would not name
 * what was made. With slot, the path is tracked before the first mkdir,
 * and each level as it is made, so that a signal's
 * pt_wfile_remove_temporaries takes them back too; *slot is the slot to
 * untrack once the output is written (-1: none free, or slot NULL; untrack
 * of -1 does nothing). */
int pt_mkdir_p_made(const char *path, mode_t mode, size_t *made, int *slot, pt_err *err);
void pt_rmdir_made(const char *path, size_t made);
/* Of two such prefix lengths of one path, the one that takes back more: the
 * shorter nonzero one (0: neither made anything). */
size_t pt_made_either(size_t a, size_t b);
/* PT_EINPUT when a '.' or '..' component of path follows one that does not
 * exist (yet): pt_mkdir_p_made's refusal, for a caller to make before its
 * work. */
int pt_path_dots_after_missing(const char *path, pt_err *err);
void pt_made_dirs_untrack(int slot);

/* fsyncs a directory, making renames and creations in it durable. File systems
 * that cannot fsync a directory (EINVAL) are treated as success. */
int pt_fsync_dir(const char *dir, pt_err *err);

/* Opens a line log (JSON lines, written by appending) for appending,
 * creating it (0644) if missing. Only a regular file is written: a symbolic
 * link, a FIFO, a device or a directory at path is refused (PT_EINPUT),
 * never written through and never waited on. */
int pt_log_open(const char *path, FILE **out, pt_err *err);
/* Removes a last line cut short (a run that stopped while writing it, a full
 * disk) from the log f (path names it) opened by pt_log_open and not yet
 * written, so the next line starts on a line of its own; *cut gets the
 * bytes removed (0: none). Only for the log's one writer: another that is
 * writing it may be in the middle of a line. */
int pt_log_cut(FILE *f, const char *path, int64_t *cut, pt_err *err);

/* Reads exactly n bytes at offset of the open file fd (path names it in
 * messages): PT_ESYS if the read fails, PT_EINPUT if the file ends first. */
int pt_pread_all(int fd, void *buf, size_t n, uint64_t offset, const char *path, pt_err *err);

/* The marker in temporary names, and whether a file name has it. */
#define PT_TEMP_MARK ".tmp."
int pt_is_temporary_name(const char *name);

/* Removes the temporary files killed writers of path left beside it
 * ("path.tmp.PID.ID" exactly as pt_wfile_open names them, regular files
 * only); returns how many. A writer holds an exclusive flock on its
 * temporary file for as long as it lives, so a file that can be locked has
 * none: a live writer's (of this process, another PID namespace, or another
 * host over a file system with locks) is left alone. Best effort: nothing it
 * cannot read, lock or remove is an error. */
int pt_remove_dead_temporaries(const char *path);

/* n - 1 random hex digits (at most 64) and a NUL into out: names that must
 * not collide across processes, reboots and machines. */
void pt_unique_id(char *out, size_t n);

/* SHA-256 of a whole file, and its size. */
int pt_sha256_file(const char *path, unsigned char digest[32], uint64_t *size, pt_err *err);
/* SHA-256 of bytes given in parts: pt_sha256_begin, any number of
 * pt_sha256_add, then pt_sha256_end (which frees the digest in progress,
 * also after a failure; NULL from begin means out of memory, and add and
 * end then fail). 0 or PT_ENOMEM / PT_EINTERNAL with the message. */
typedef struct pt_sha256 pt_sha256;
pt_sha256 *pt_sha256_begin(void);
void pt_sha256_add(pt_sha256 *h, const void *data, size_t n);
int pt_sha256_end(pt_sha256 *h, unsigned char digest[32], pt_err *err);

/* n bytes as 2n lower-case hex digits and a NUL. */
void pt_hex(const unsigned char *bytes, size_t n, char *out);

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

/*
 * recfile: a CRC-checked binary container of tagged records, the format
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

/* Lets go of the resident pages behind [data, data + len) of the mapping (a
 * record read and used): they are read again from the file should they be
 * touched later. The data stays valid. */
void pt_recfile_release(const pt_recfile *f, const void *data, uint64_t len);

/* Unmaps and frees. NULL-safe. */
void pt_recfile_close(pt_recfile *f);

/*
 * JSON, through jansson: every JSON pipetrain reads (safetensors headers,
 * checkpoint manifests) or writes (metrics, manifests, safetensors headers)
 * goes through it. These helpers fix the choices every caller must make the
 * same way.
 */

/* Parses n bytes (a NUL byte is an error, as is a \u0000 escape) into *out.
 * Duplicate object keys are refused: a header with two values for one key
 * has no meaning we could pick. Errors are PT_EINPUT "line L, column C: what";
 * callers prefix the file name. */
int pt_json_load(json_t **out, const char *text, size_t n, pt_err *err);
/* The same, every number read as a real: for files whose integers may be
 * beyond 64 bits (transformers writes an unknown model_max_length as
 * int(1e30)) and which are read for other fields. */
int pt_json_load_reals(json_t **out, const char *text, size_t n, pt_err *err);
/* The same for JSON that other programs write (a Hugging Face config.json or
 * tokenizer_config.json, a safetensors header), with flags: PT_JSON_REALS,
 * every number read as a real (an integer past 64 bits is no error);
 * PT_JSON_LAST_KEY_WINS, a key given twice in an object taken at its last
 * value, as Python's json and so transformers read it (without it, refused).
 * A \u0000 escape in a string is valid JSON there (Python's json writes one,
 * in fields pipetrain never reads), so it is kept, and a string such a file
 * gives must be read through pt_json_cstr; in an object key (which jansson
 * cannot hold) it is read as U+FFFD. */
enum { PT_JSON_REALS = 1, PT_JSON_LAST_KEY_WINS = 2 };
int pt_json_load_foreign(json_t **out, const char *text, size_t n, int flags, pt_err *err);
/* j's text when j is a string without a NUL character in it; NULL when j is
 * no string or holds one (it would read as a shorter text in C). */
const char *pt_json_cstr(const json_t *j);

/* A JSON number for v, or null when v is not finite (JSON has no NaN or
 * infinity); NULL only when out of memory. */
json_t *pt_json_number(double v);
/* A JSON string of text that may not be UTF-8 (a path from the command
 * line): itself where it is, else with each byte that is not part of a
 * valid UTF-8 character as U+FFFD (JSON holds only Unicode text); NULL only
 * when out of memory. */
json_t *pt_json_text(const char *s);

/* The integer at key of obj into *v: PT_EINPUT naming `what` and the key if
 * it is missing or not an integer. */
int pt_json_get_i64(const json_t *obj, const char *key, int64_t *v, const char *what, pt_err *err);
/* The same for any number (integer or real). */
int pt_json_get_f64(const json_t *obj, const char *key, double *v, const char *what, pt_err *err);

/*
 * safetensors: reading and writing the safetensors format, how pipetrain's
 * weights travel to and from PyTorch (shapes and names follow nn.Linear).
 *
 * Format: u64 little-endian header length N, N bytes of JSON header, then the
 * data section. The header maps each tensor name to {"dtype": str, "shape":
 * [ints], "data_offsets": [begin, end]} (offsets relative to the start of the
 * data section, little-endian element data) and may hold "__metadata__", an
 * object of string -> string.
 *
 * The reader validates the whole header at open (see pt_st_open) and reads
 * tensor data with pread, so a file that shrinks while open gives an error,
 * not a crash. The writer writes float32 only, with the header padded by
 * spaces to a multiple of 8 bytes so the data section is 8-byte aligned, and
 * goes through pt_wfile so the file appears complete or not at all.
 */


#define PT_ST_MAX_NDIM 8
#define PT_ST_MAX_NAME 128                    /* names are shorter than this */
/* The reference reader allows 100 MB; real checkpoints' headers are a few
 * KiB to a few MiB (a tensor's entry is about 100 bytes), and jansson's tree
 * of a header takes about 20 times its size: a forged 100 MB one took 2 GB
 * and a minute to read, for tensors of no size */
#define PT_ST_MAX_HEADER ((uint64_t)16 << 20)

typedef struct pt_st_entry {
    char name[PT_ST_MAX_NAME];
    char dtype[8];     /* "F32", "F64", "F16", "BF16", "I64", ... as stored */
    int ndim;          /* 0..8; 0 is a scalar (one element) */
    int64_t shape[PT_ST_MAX_NDIM];
    uint64_t begin, end; /* byte offsets in the data section */
} pt_st_entry;

typedef struct pt_st_file pt_st_file;

/* Opens and validates a file: header length sane (<= 16 MiB and within the
 * file), JSON valid, the header an object, every entry an object with the three
 * fields of the right types, dtype known (F64 F32 F16 BF16 F8_E4M3 F8_E5M2
 * I64 I32 I16 I8 U64 U32 U16 U8 BOOL), at most 8 dimensions each >= 0,
 * begin <= end <= data size, end - begin == numel * dtype size, no two tensors
 * overlap, no duplicate names, names shorter than 128 bytes without NUL,
 * "__metadata__" an object of strings. Anything else is PT_EINPUT with a
 * message naming the file, the tensor and the defect; PT_ESYS if the file
 * cannot be opened or read. */
int pt_st_open(pt_st_file **out, const char *path, pt_err *err);

/* Tensors, in header order. */
int pt_st_count(const pt_st_file *f);
const pt_st_entry *pt_st_entry_at(const pt_st_file *f, int i); /* NULL if out of range */

/* Index of the tensor called name, or -1 (binary search). */
int pt_st_find(const pt_st_file *f, const char *name);

/* Elements of entry e (1 for a scalar). */
uint64_t pt_st_numel(const pt_st_entry *e);

/* Reads tensor i converted to float from F32, F64, F16 or BF16 (F64 values
 * beyond float's range become infinities). n must equal the element count:
 * otherwise PT_EINPUT naming the tensor, the expected count and the stored
 * shape. Other dtypes are PT_EINPUT. */
int pt_st_read_f32(const pt_st_file *f, int i, float *out, size_t n, pt_err *err);

/* A shape as messages write it, "[384, 1536]" (NUL-terminated, cut to n). */
void pt_st_shape_text(int ndim, const int64_t *shape, char *out, size_t n);

/* The metadata value for key, or NULL if absent (or holding a NUL
 * character, which a C string cannot give whole). */
const char *pt_st_metadata(const pt_st_file *f, const char *key);

/* Closes and frees. NULL-safe. */
void pt_st_close(pt_st_file *f);

/* One tensor to write: shape may be NULL when ndim is 0; data holds the
 * product of the shape floats (NULL allowed when that is 0). */
typedef struct pt_st_tensor {
    const char *name;
    int ndim;
    const int64_t *shape;
    const float *data;
} pt_st_tensor;

/* Writes n F32 tensors in the given order, atomically. meta: NULL or a
 * NULL-terminated list of key, value, key, value, ... strings. Names must be
 * unique, valid UTF-8, shorter than 128 bytes and not "__metadata__"; bad
 * arguments are PT_EINPUT and leave nothing on disk. */
int pt_st_write(const char *path, const pt_st_tensor *t, int n, const char *const *meta,
                pt_err *err);
/* The same, written and synced under the temporary name only: *staged is
 * the file for pt_wfile_commit (or pt_wfile_abort) to finish, with others
 * written beside it. */
int pt_st_write_staged(const char *path, const pt_st_tensor *t, int n, const char *const *meta,
                       pt_wfile **staged, pt_err *err);

#endif
