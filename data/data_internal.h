/*
 * data_internal.h: declarations shared by the files of data/ and by nothing
 * else: reading plain or gzip'd files with errors that name the file, applying
 * an augmentation to one image, and the RNG stream numbers data/ uses.
 *
 * The stream bases keep every random consumer of data/ on its own sequence,
 * and all of them away from nn/'s streams (small integers: unit indices).
 */
#ifndef PT_DATA_INTERNAL_H
#define PT_DATA_INTERNAL_H

#include "data/data.h"

#include <stddef.h>
#include <zlib.h>

#define PT_STREAM_EPOCH_ORDER (1ull << 32)     /* + epoch: the sampler's shuffle */
#define PT_STREAM_AUGMENT (2ull << 32)         /* + epoch: that epoch's augmentation key */
#define PT_STREAM_PROTOTYPE (3ull << 32)       /* + class: synthetic image prototypes */
#define PT_STREAM_SYNTH_EXAMPLE (4ull << 32)   /* + example: synthetic label and noise */
#define PT_STREAM_SYNTH_TEXT (5ull << 32)      /* synthetic text: chain and sample */
#define PT_STREAM_TEXTCLS_SPLIT (6ull << 32)   /* text classification: the test split */

/* Opens path for reading, gzip'd or plain. PT_ESYS with strerror on failure. */
int pt_gz_open(gzFile *out, const char *path, pt_err *err);

/* Reads up to len bytes into buf; *got is the number read, less than len only
 * at the end of the data. A corrupt gzip stream is PT_EINPUT, a failed read
 * PT_ESYS; the message says it happened after `offset` bytes of `what`.
 * *cut_short is set to 1 when the data ended because the gzip stream is
 * incomplete (may be NULL). */
int pt_gz_read(gzFile gz, const char *path, void *buf, size_t len, size_t *got, int *cut_short,
               const char *what, uint64_t offset, pt_err *err);

/* Checks that gz has no data left after the `offset` bytes already read
 * (PT_EINPUT "trailing bytes" otherwise, counted up to a limit). Reading to
 * the end also drives zlib through the gzip trailer, so a CRC mismatch is
 * reported here as corrupt, and a stream that stops before its trailer as
 * truncated. `what` names the content in messages ("images", "labels"). */
int pt_gz_expect_end(gzFile gz, const char *path, uint64_t offset, const char *what,
                     pt_err *err);

/* After gz was read to its end: a gzip file (not a plain one) walked again,
 * member by member, from the raw file, since gzread drops what follows a
 * member when it does not start another: PT_EINPUT "trailing bytes" for
 * anything after the last member, also an incomplete member there. On
 * entry *cut_short says whether gzread found the stream cut short; on
 * return it says whether the data's own member is (not bytes after it). */
int pt_gz_check_members(gzFile gz, const char *path, int *cut_short, pt_err *err);

/* Writes image `src` ([C, H, W], channel-major) of example `id` to dst with
 * the augmentation of (seed, epoch, id). ds gives the geometry and the pad value. */
void pt_augment_image(const pt_dataset *ds, const pt_augment *aug, uint64_t seed, int64_t epoch,
                      int64_t id, const float *src, float *dst);

#endif
