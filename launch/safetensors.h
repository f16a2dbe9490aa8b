/*
 * safetensors.h: reading and writing the safetensors format, how pipetrain's
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
#ifndef PT_LAUNCH_SAFETENSORS_H
#define PT_LAUNCH_SAFETENSORS_H

#include "nn/nn.h"

#include <stddef.h>
#include <stdint.h>

#define PT_ST_MAX_NDIM 8
#define PT_ST_MAX_NAME 128                    /* names are shorter than this */
#define PT_ST_MAX_HEADER ((uint64_t)100000000) /* 100 MB, as the reference reader */

typedef struct pt_st_entry {
    char name[PT_ST_MAX_NAME];
    char dtype[8];     /* "F32", "F64", "F16", "BF16", "I64", ... as stored */
    int ndim;          /* 0..8; 0 is a scalar (one element) */
    int64_t shape[PT_ST_MAX_NDIM];
    uint64_t begin, end; /* byte offsets in the data section */
} pt_st_entry;

typedef struct pt_st_file pt_st_file;

/* Opens and validates a file: header length sane (<= 100 MB and within the
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

/* The metadata value for key, or NULL if absent. */
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

#endif
