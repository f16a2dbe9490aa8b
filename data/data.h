/*
 * data.h: the public interface of the data module: datasets (IDX images, byte
 * text, synthetic images and text, text classification: labelled texts
 * tokenized by tokenize/), random image augmentation, and the sampler that
 * orders an epoch and shards each global batch over data-parallel replicas.
 *
 * Invariants kept throughout:
 *  - a pt_dataset owns its arrays; a loader either fills the dataset completely
 *    and returns 0, or returns a PT_E* code with the dataset zeroed (so
 *    pt_dataset_free is always safe to call);
 *  - every random choice is a pure function of a seed and the identity of what
 *    it decides (an epoch, an example), never of the order of calls, the batch
 *    size, the number of replicas or the rank;
 *  - nothing here knows about ranks or models: a replica is just an index r of
 *    D, and batches are plain host arrays in the layout nn's pt_batch expects.
 *
 * Error messages name the file, the position and what was expected, e.g.
 * "train-images.gz: truncated: header says 60000 images of 28x28 (47040000
 * bytes) but the file ends after 1234 bytes of pixels".
 */
#ifndef PT_DATA_H
#define PT_DATA_H

#include "nn/nn.h"
#include "tokenize/tokenize.h"

#include <stdint.h>

/* --------------------------------------------------------------- datasets */

typedef enum { PT_DATA_IMAGES = 0, PT_DATA_TEXT = 1, PT_DATA_TEXTCLS = 2 } pt_data_kind;

typedef struct pt_dataset {
    pt_data_kind kind;
    int64_t count; /* examples */
    /* images (classes and labels: also text classification's) */
    int channels, height, width, classes;
    float *images;    /* [count, C*H*W], (pixel/255 - mean) / std */
    int32_t *labels;  /* [count], each in [0, classes) */
    float zero_pixel; /* what a 0 pixel becomes after normalisation (-mean/std; 0 for
                         synthetic images): the fill of padded crops */
    /* text (byte-level: a token is a byte, vocab 256) */
    int context;    /* tokens per example (text and text classification) */
    uint8_t *bytes; /* the text of this split */
    int64_t nbytes;
    /* text classification (with context, labels and classes above) */
    int32_t *tokens;    /* [count, context]: [CLS] pieces [SEP], then [PAD] to context */
    char **label_names; /* [classes]: the name of class k, in increasing byte order */
    /* a .jsonl file: the first line whose label is a JSON integer, and the
     * first whose label is a JSON string (0: none); a label is its name, so
     * the integer 1 and the string "1" are one class */
    int64_t int_label_line, string_label_line;
} pt_dataset;

/* Largest accepted values, so that sizes computed from a file's header or a
 * config can neither overflow nor ask for absurd amounts of memory. */
#define PT_DATA_MAX_COUNT 2147483647LL /* examples in one dataset */
#define PT_DATA_MAX_SIDE 16384         /* image height or width */
#define PT_DATA_MAX_CHANNELS 64
#define PT_DATA_MAX_CLASSES (1 << 20)
#define PT_DATA_MAX_CONTEXT (1 << 20)
/* Text classification files: bytes in one line (without its newline),
 * distinct labels, and bytes in one label. */
#define PT_TEXTCLS_MAX_LINE (1 << 20)
#define PT_TEXTCLS_MAX_CLASSES 4096
#define PT_TEXTCLS_MAX_LABEL 256

/* Gzip'd (or plain: zlib's gzread reads both) IDX files: images magic 0x00000803
 * with dims [count, rows, cols] (uint8), labels magic 0x00000801 with [count]
 * (uint8). Checks magic, dimensions (ndim, nonzero, at most PT_DATA_MAX_*),
 * that both files have the same count, that neither is truncated nor has
 * trailing bytes (nor a corrupt gzip stream), and that every label is
 * < classes (1 <= classes <= 256). std must be > 0; mean and std finite.
 * channels = 1, zero_pixel = -mean/std. Memory grows with the data actually
 * read, so a header that lies about its size fails as truncated, not as an
 * allocation of the size it claims.
 * Errors: PT_ESYS (cannot open or read), PT_EINPUT (bad content or
 * arguments), PT_ENOMEM. */
int pt_idx_load(pt_dataset *ds, const char *images_path, const char *labels_path, int classes,
                double mean, double std, pt_err *err);

/* Fashion-MNIST's name of class k (as its authors list them), or NULL
 * beyond its 10 classes: for reports. */
const char *pt_fashion_mnist_class(int k);

/* The image count and size an IDX images file's header gives (its magic
 * and dimensions checked as pt_idx_load checks them), without reading the
 * pixels: what the model must fit, and the memory the pixels would take,
 * can be checked before a large (or hostile: gzip inflates up to a
 * thousandfold) file is decompressed. */
int pt_idx_image_size(const char *images_path, int64_t *count, int *rows, int *cols, pt_err *err);

/* The most memory a loaded file may take (bytes; 0 = no limit, the
 * default): data.text's bytes as read (after gzip: a small file can inflate
 * to gigabytes), a text classification file's examples at the context's
 * tokens each. Beyond it the load is refused (PT_EINPUT naming the file and
 * the limit) before the memory is taken, not failed at an allocation. Set
 * by the launcher from the memory each rank has; process-wide. */
void pt_data_set_memory_limit(int64_t bytes);
/* Bytes a loaded split holds in memory (its pixels, labels, text or
 * tokens and label names): what each rank keeps beside its model. */
double pt_dataset_bytes(const pt_dataset *ds);
int64_t pt_data_memory_limit(void);
/* The words every such refusal holds (for a caller telling it apart). */
#define PT_DATA_TOO_BIG "a data file may take here"

/* Byte-level text, plain or gzip'd. The split is bytes [floor(begin*n),
 * floor(end*n)) of the n bytes of the file (0 <= begin < end <= 1). Example i
 * covers bytes [i*context, i*context + context + 1) of the split: tokens are
 * the first `context`, targets the last `context` (shifted by one).
 * count = (split_bytes - 1) / context; an error (PT_EINPUT) if that is < 1.
 * 1 <= context <= PT_DATA_MAX_CONTEXT. */
int pt_text_load(pt_dataset *ds, const char *path, int context, double begin, double end,
                 pt_err *err);

/* Text classification: (text, label) pairs from a file chosen by its name:
 *  - NAME.tsv: each line LABEL<TAB>TEXT, with one tab (a TSV field cannot
 *    hold a tab, so a second would start a third column); a first line
 *    "label<TAB>text" or "text<TAB>label" (any case, with more columns or
 *    not) is a column header, refused;
 *  - NAME.jsonl: each line one JSON object with a string "text" and a
 *    "label" that is a string or an integer (whose name is its decimal
 *    digits: 10 sorts before 2); other keys are ignored.
 * Lines end in "\n" or "\r\n"; the last may lack it; a UTF-8 byte order
 * mark at the start is skipped, and so are lines of nothing but ASCII
 * whitespace. Texts are tokenized at load (pt_tokenize with max_ids =
 * context: [CLS] pieces [SEP], truncated, then [PAD]). Memory grows with the
 * lines read: the tokens take 4 * context bytes per example.
 *
 * Without classes_from (a training file), the classes are the distinct
 * labels of the file, numbered in increasing byte order of their names
 * (strcmp), and label_names lists them. With classes_from (a test file: a
 * loaded text-classification dataset), its classes and label names are
 * used, and a label that is not among them is refused.
 *
 * Refused with PT_EINPUT and "PATH:LINE: what is wrong": a line longer than
 * PT_TEXTCLS_MAX_LINE bytes; TSV without a tab or with more than one; JSON
 * that does not parse (duplicate keys included), is not an object, lacks
 * "text" or "label", or
 * has either of another type; a label that is empty, longer than
 * PT_TEXTCLS_MAX_LABEL bytes, not UTF-8, holding a control byte, or starting
 * or ending with a space; an empty (or whitespace) text; more than
 * PT_TEXTCLS_MAX_CLASSES distinct labels or PT_DATA_MAX_COUNT examples. And
 * with "PATH: ...": a name ending neither in .tsv nor .jsonl, a file without
 * examples, context outside [2, PT_DATA_MAX_CONTEXT]. PT_ESYS if the file
 * cannot be opened or read, PT_ENOMEM. */
int pt_textcls_load(pt_dataset *ds, const char *path, const pt_vocab *vocab, int context,
                    const pt_dataset *classes_from, pt_err *err);

/* 0 if the n bytes at s are a label pt_textcls_load accepts, else
 * PT_EINPUT with "AT:LINENO: what is wrong" (the rules above, and no
 * character that prints as nothing or as a space, no combining mark first,
 * normalization form C, not the form reports give a class without a label),
 * or PT_ENOMEM. stored: a label read back from a checkpoint, held to the
 * rules its run was (not the two that came later: reserved default-ignorable
 * code points, the placeholder's form), so that a saved run still loads. */
int pt_textcls_check_label(const char *at, int64_t lineno, const char *s, size_t n, int stored,
                           pt_err *err);

/* 0 if path's name is one pt_textcls_load reads (.tsv or .jsonl, in any
 * case), else PT_EINPUT with its message. Looks at the name only. */
int pt_textcls_check_path(const char *path, pt_err *err);

/* Whether ds's labels (text classification) are all integers as Python's
 * str(int) writes them, and their byte order (the classes' order) is not
 * their order by value: then *k is the first class out of that order, and
 * *instead the class whose label order by value would put there. 0 for
 * labels in value order, labels that are not all integers, other data, and
 * when out of memory. */
int pt_textcls_out_of_value_order(const pt_dataset *ds, int *k, int *instead);

/* Splits a test set off a loaded text-classification dataset, the same way
 * whatever the seed of the run: n_test = round(fraction * count) examples,
 * those whose indices come first in 0..count-1 shuffled as the sampler
 * shuffles an epoch (Fisher-Yates) with an RNG seeded by pt_rng_seed(0,
 * 6 << 32). test gets them in that shuffled order (so its first examples are a
 * uniform sample: what train.eval_examples evaluates), and all keeps the rest
 * in file order; both
 * keep all's classes and label names. A file in the order of its labels is
 * thus split evenly. PT_EINPUT unless 0 < fraction < 1 and both splits get
 * at least one example; then, and on PT_ENOMEM, all is unchanged and test
 * zeroed. */
int pt_textcls_split(pt_dataset *all, double fraction, pt_dataset *test, pt_err *err);

/* Synthetic data for tests, deterministic from seed.
 * Images: each class has a fixed random prototype (N(0,1) per pixel); an
 * example is its prototype plus N(0, 0.5^2) noise, with a uniformly random
 * label. Prototypes depend on the seed, so a held-out split must come from the
 * same draw: example i depends only on (seed, i), so draw count + held-out
 * examples and split off the tail. zero_pixel = 0. */
int pt_synthetic_images(pt_dataset *ds, int64_t count, int channels, int height, int width,
                        int classes, uint64_t seed, pt_err *err);
/* Text: nbytes drawn from an order-1 Markov chain over the 8 bytes 'a'..'h'
 * in which each byte has a favourite successor (so the text is learnable).
 * The chain is the same for every seed and the seed picks the walk, so two
 * seeds give a training and a held-out sample of one distribution.
 * nbytes must be >= context + 1. */
int pt_synthetic_text(pt_dataset *ds, int64_t nbytes, int context, uint64_t seed, pt_err *err);

/* Frees the dataset's arrays and zeroes it. Safe on a zeroed or already-freed
 * dataset. */
void pt_dataset_free(pt_dataset *ds);

/* ----------------------------------------------------------- augmentation */

/* Random input augmentation for images (none for text). Randomness is a pure
 * function of (seed, epoch, example id), so it is reproducible and independent
 * of batching and ranks. */
typedef struct pt_augment {
    int hflip;    /* flip left-right with probability 1/2 */
    int crop_pad; /* pad by this many pixels (with zero_pixel, the value of a 0 pixel
                     after normalisation) and crop back at a random offset; 0 = off */
} pt_augment;

/* 1 if aug (which may be NULL) changes anything, else 0. */
int pt_augment_active(const pt_augment *aug);

/* Checks aug against ds (PT_EINPUT): crop_pad in [0, min(height, width)], and
 * no active augmentation on a text (or text-classification) dataset. aug may
 * be NULL (valid). */
int pt_augment_check(const pt_augment *aug, const pt_dataset *ds, pt_err *err);

/* Copies examples ids[0..n) (each in [0, count)) into host batch buffers:
 * images: images [n, C*H*W] and targets [n] (the labels); tokens is unused.
 * text:   tokens [n, context] and targets [n, context] (bytes as int32);
 *         images and aug are unused.
 * text classification: tokens [n, context] (as loaded) and targets [n] (the
 *         labels); images and aug are unused.
 * aug may be NULL (no augmentation). Example j of the batch gets the same
 * values whatever the other ids are. */
void pt_dataset_gather(const pt_dataset *ds, const int64_t *ids, int n, const pt_augment *aug,
                       uint64_t seed, int64_t epoch, float *images, int32_t *tokens,
                       int32_t *targets);

/* ---------------------------------------------------------------- sampler */

/* Deterministic epoch order and sharding of a fixed global batch over
 * replicas. Because a global batch is the same set of examples whatever D is,
 * changing the number of replicas between two steps (an elastic re-plan)
 * neither loses nor repeats an example of the epoch. */
typedef struct pt_sampler {
    int64_t count, batch; /* examples; global batch */
    uint64_t seed;
    int shuffle;
    int64_t epoch; /* epoch whose order is in perm; -1 before the first set_epoch */
    int64_t *perm; /* [count] */
} pt_sampler;

/* Error (PT_EINPUT) if batch < 1 or batch > count (or batch > INT32_MAX),
 * naming both numbers; PT_ENOMEM if perm cannot be allocated. Until the first
 * pt_sampler_set_epoch, perm holds 0..count-1. */
int pt_sampler_init(pt_sampler *s, int64_t count, int64_t global_batch, uint64_t seed, int shuffle,
                    pt_err *err);
/* Frees perm and zeroes s; safe on a zeroed or already-freed sampler. */
void pt_sampler_free(pt_sampler *s);
/* Order of epoch e: perm starts as 0..count-1; when shuffle is on it is then
 * permuted by Fisher-Yates (for i = count-1 down to 1: swap perm[i] and
 * perm[pt_rng_below(rng, i + 1)]) with rng seeded by pt_rng_seed(seed,
 * (1ull << 32) + e). The order depends on nothing but (seed, shuffle, e). */
void pt_sampler_set_epoch(pt_sampler *s, int64_t epoch);
/* Global batches per epoch: count / batch (the last partial batch is dropped). */
int64_t pt_sampler_steps(const pt_sampler *s);
/* Replica r of D (0 <= r < D) gets a contiguous slice of global batch `step`
 * (0 <= step < steps) of the current epoch, i.e. of perm[step*batch,
 * (step+1)*batch): sizes differ by at most one, the first (batch % D) replicas
 * take one extra, and the slices follow one another in replica order.
 * *ids points into perm. D may be larger than the batch (some slices are
 * empty: *n = 0). Out-of-range arguments give an empty slice (*ids = NULL). */
void pt_sampler_slice(const pt_sampler *s, int64_t step, int replica, int replicas,
                      const int64_t **ids, int *n);

#endif
