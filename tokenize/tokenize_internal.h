/*
 * tokenize_internal.h: private to tokenize/: the vocabulary's layout and the
 * UTF-8 decoder shared by the vocabulary reader and the tokenizer.
 */
#ifndef PT_TOKENIZE_INTERNAL_H
#define PT_TOKENIZE_INTERNAL_H

#include "tokenize/tokenize.h"

#include <stddef.h>
#include <stdint.h>

struct pt_vocab {
    int32_t count;     /* tokens */
    char *text;        /* every token, NUL-terminated, one after another */
    size_t text_bytes; /* used bytes of text */
    uint32_t *off;     /* [count] offset of each token in text */
    uint8_t *len;      /* [count] bytes of each token */
    size_t max_len;    /* the longest token's bytes: longer strings are not looked up */
    int32_t *sorted;   /* [count] every id, in the order of their tokens' bytes (vocab.c) */
    uint64_t *keys;    /* [count] sorted[i]'s token's first 8 bytes (vocab.c's prefix_key) */
    pt_vocab_special special;
    pt_normalize norm;
    int unended;       /* the last line had no "\n" (pt_vocab_unended) */
};

/* What pt_utf8_next reports for an ill-formed subpart (U+FFFD). */
#define PT_UTF8_INVALID 0xFFFDu

/* Decodes the code point at s (n >= 1 bytes) and returns the bytes it takes.
 * An ill-formed sequence gives PT_UTF8_INVALID and takes its maximal subpart
 * (at least one byte): the longest prefix that could start a well-formed
 * sequence, as Unicode recommends and Python's decoder does. A literal U+FFFD
 * in the input also gives 0xFFFD (3 bytes). */
size_t pt_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

#endif
