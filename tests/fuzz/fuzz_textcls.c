/*
 * fuzz_textcls.c: libFuzzer target for the text-classification loader
 * (data/textcls.c): a training file, then a test file or a split of the
 * training file, tokenized with a small fixed vocabulary.
 *
 * Input: a 5-byte preamble, then the two files' bytes.
 *   byte 0   bit 0: the training file is JSONL (else TSV); bit 1: the test
 *            file is JSONL; bit 2: load the test file (else split the
 *            training file); bits 3, 4, 5: tokenize without lowercasing,
 *            without stripping accents, without splitting CJK (pt_normalize;
 *            all clear: the uncased default)
 *   byte 1   context - 2 (2..257)
 *   byte 2   the test fraction is (byte + 1) / 256 (1 itself is refused)
 *   byte 3-4 little-endian length of the training part (cut to what is
 *            there); the test file is the rest.
 *
 * A loaded dataset must keep data.h's promises: labels below classes, label
 * names strictly increasing in byte order, non-empty, without control bytes,
 * every example [CLS] ids [SEP] then [PAD]s with ids of the vocabulary; a
 * test file has the training file's classes; a split keeps every example
 * once and gives round(fraction * count) to the test side.
 */
#include "tests/fuzz/fuzz_util.h"

#include "data/data.h"

#include <math.h>
#include <string.h>

static const char VOCAB[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\nlord\ngod\n##s\n##ed\nsaid\n,\n.\n"
                            "\xe4\xb8\xad\ncafe\n";

static struct {
    char tsv[2][1024], jsonl[2][1024];
    pt_vocab *vocab;
} ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = fuzz_temp_dir();
    fuzz_join(ctx.tsv[0], sizeof ctx.tsv[0], dir, "train.tsv");
    fuzz_join(ctx.tsv[1], sizeof ctx.tsv[1], dir, "test.tsv");
    fuzz_join(ctx.jsonl[0], sizeof ctx.jsonl[0], dir, "train.jsonl");
    fuzz_join(ctx.jsonl[1], sizeof ctx.jsonl[1], dir, "test.jsonl");
    char vocab[1024];
    fuzz_join(vocab, sizeof vocab, dir, "vocab.txt");
    fuzz_write(vocab, VOCAB, sizeof VOCAB - 1);
    pt_err err;
    if (pt_vocab_load(&ctx.vocab, vocab, &err))
        fuzz_die("the fixed vocabulary does not load: %s", err.msg);
    return 0;
}

static void check(const pt_dataset *ds, int context)
{
    const pt_vocab_special sp = pt_vocab_specials(ctx.vocab);
    const int32_t size = pt_vocab_size(ctx.vocab);
    if (ds->kind != PT_DATA_TEXTCLS || ds->count < 1 || ds->context != context ||
        ds->classes < 1 || ds->classes > PT_TEXTCLS_MAX_CLASSES || !ds->tokens || !ds->labels ||
        !ds->label_names || ds->images || ds->bytes)
        fuzz_die("a loaded dataset is inconsistent");
    for (int k = 0; k < ds->classes; k++) {
        const char *name = ds->label_names[k];
        size_t n = strlen(name);
        if (n < 1 || n > PT_TEXTCLS_MAX_LABEL || name[0] == ' ' || name[n - 1] == ' ')
            fuzz_die("label name %d ('%s') is empty, too long or spaced", k, name);
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
                fuzz_die("label name %d holds a control byte", k);
        if (k && strcmp(ds->label_names[k - 1], name) >= 0)
            fuzz_die("label names %d and %d are not in increasing byte order", k - 1, k);
    }
    for (int64_t i = 0; i < ds->count; i++) {
        if (ds->labels[i] < 0 || ds->labels[i] >= ds->classes)
            fuzz_die("label %d of example %lld is not below %d", ds->labels[i], (long long)i,
                     ds->classes);
        const int32_t *t = ds->tokens + (size_t)i * (size_t)context;
        int end = 1;
        while (end < context && t[end] != sp.sep)
            end++;
        if (t[0] != sp.cls || end == context)
            fuzz_die("example %lld is not [CLS] ... [SEP]", (long long)i);
        for (int k = 1; k < end; k++)
            if (t[k] < 0 || t[k] >= size || t[k] == sp.cls || t[k] == sp.pad)
                fuzz_die("example %lld holds id %d at %d", (long long)i, t[k], k);
        for (int k = end + 1; k < context; k++)
            if (t[k] != sp.pad)
                fuzz_die("example %lld is not padded after its [SEP]", (long long)i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    const int flags = data[0], context = data[1] + 2;
    const double fraction = (data[2] + 1) / 256.0;
    size_t train_n = (size_t)data[3] | (size_t)data[4] << 8;
    data += 5;
    size -= 5;
    if (train_n > size)
        train_n = size;
    pt_vocab_set_normalize(ctx.vocab, (pt_normalize){!(flags & 8), !(flags & 16), !(flags & 32)});
    const char *train_path = flags & 1 ? ctx.jsonl[0] : ctx.tsv[0];
    const char *test_path = flags & 2 ? ctx.jsonl[1] : ctx.tsv[1];
    fuzz_write(train_path, data, train_n);
    pt_dataset train, test;
    pt_err err;
    memset(&test, 0, sizeof test);
    if (pt_textcls_load(&train, train_path, ctx.vocab, context, NULL, &err) == 0) {
        check(&train, context);
        const int64_t count = train.count;
        if (flags & 4) {
            fuzz_write(test_path, data + train_n, size - train_n);
            if (pt_textcls_load(&test, test_path, ctx.vocab, context, &train, &err) == 0) {
                check(&test, context);
                if (test.classes != train.classes)
                    fuzz_die("the test file has %d classes, the training file %d", test.classes,
                             train.classes);
                for (int k = 0; k < test.classes; k++)
                    if (strcmp(test.label_names[k], train.label_names[k]))
                        fuzz_die("the test file names class %d otherwise", k);
            }
        } else if (pt_textcls_split(&train, fraction, &test, &err) == 0) {
            check(&train, context);
            check(&test, context);
            if (test.count != (int64_t)floor(fraction * (double)count + 0.5) ||
                train.count + test.count != count)
                fuzz_die("a split of %lld examples by %g gave %lld and %lld", (long long)count,
                         fraction, (long long)train.count, (long long)test.count);
        } else if (train.count != count) {
            fuzz_die("a refused split changed the training set");
        }
    }
    pt_dataset_free(&train);
    pt_dataset_free(&test);
    return 0;
}
