/*
 * tokenize.h: the public interface of the tokenize module: BERT's WordPiece
 * tokenizer (a vocab.txt, the normalisation of text, and the encoding of one
 * text as [CLS] pieces [SEP]), giving the same ids as Hugging Face's
 * `tokenizers` (BertWordPieceTokenizer with the same lowercase,
 * strip_accents and handle_chinese_chars; BertTokenizerFast with the same
 * do_lower_case, strip_accents and tokenize_chinese_chars).
 *
 * The steps, in Hugging Face's order (Unicode properties from utf8proc):
 *  1. bytes to code points. Input is not trusted: every maximal invalid UTF-8
 *     subpart (the rule Python's decoder follows with errors='replace') reads
 *     as U+FFFD, which step 2 drops; so invalid bytes are removed, and the
 *     valid text around them joins up ("a\xffb" reads "ab");
 *  2. cleaning: U+0000, U+FFFD and "control" characters (general category
 *     Cc, Cf or Co, except \t \n \r) are dropped; whitespace (\t \n \r and
 *     categories Zs, Zl, Zp: what Rust's char::is_whitespace leaves once the
 *     controls are gone) separates words;
 *  3. with split_cjk, CJK ideographs (U+4E00-9FFF, 3400-4DBF, 20000-2A6DF,
 *     2A700-2B73F, 2B740-2B81F, 2B920-2CEAF, F900-FAFF, 2F800-2FA1F) are
 *     words of their own. 2B920, not 2B820 as in Google's BERT: Hugging
 *     Face's table says so, and parity with it is the point (U+2B820-2B91F
 *     stay inside words);
 *  4. per word: with strip_accents, NFD and then every Mn (accent) dropped;
 *     then with lowercase, each code point lowercased as Rust's
 *     char::to_lowercase does (U+0130 becomes "i" U+0307, its one
 *     multi-character lowercase, which NFD has already split when accents
 *     are stripped). Without strip_accents the text is not decomposed at all;
 *  5. punctuation splits words: every character of category P* and every
 *     ASCII character in 33-47, 58-64, 91-96, 123-126 is a word of its own;
 *  6. WordPiece: a word of more than 100 code points is [UNK]; otherwise the
 *     longest vocabulary entry that starts the word, then the longest
 *     "##"-prefixed entry at each following position; if some position has
 *     none, the whole word is [UNK].
 *
 * Functions that can fail return 0 or a PT_E* code and fill the pt_err
 * (nn/nn.h); nothing here prints or exits.
 */
#ifndef PT_TOKENIZE_H
#define PT_TOKENIZE_H

#include "nn/nn.h"

#include <stddef.h>
#include <stdint.h>

/* Largest accepted vocabulary: tokens (lines), and bytes in one token. */
#define PT_VOCAB_MAX_TOKENS (1 << 24)
#define PT_VOCAB_MAX_TOKEN_BYTES 255

/* A word of more than this many code points (after normalisation) is [UNK]
 * (Hugging Face's max_input_chars_per_word). */
#define PT_WORDPIECE_MAX_WORD_CHARS 100

typedef struct pt_vocab pt_vocab;

/* Reads a vocab.txt: one token per line, id = line number from 0; lines end
 * in "\n" (a "\r" before it is dropped too), the last may lack it. Refused
 * with PT_EINPUT and a message "PATH:LINE: ..." for: an empty line, a token
 * of more than PT_VOCAB_MAX_TOKEN_BYTES bytes, a token that is not valid
 * UTF-8 or holds an ASCII space or control byte (no word can ever match it:
 * words never contain them), a token seen before (the message names both
 * lines; Hugging Face would silently keep the later id), more than
 * PT_VOCAB_MAX_TOKENS lines; and "PATH: ..." for an empty file or one
 * without all of [CLS], [SEP], [UNK] and [PAD]. PT_ESYS if the file cannot
 * be opened or read, PT_ENOMEM. On failure *out is NULL. */
int pt_vocab_load(pt_vocab **out, const char *path, pt_err *err);

/* NULL-safe. */
void pt_vocab_free(pt_vocab *v);

/* Number of tokens (= 1 + the largest id). */
int32_t pt_vocab_size(const pt_vocab *v);

/* Whether the file's last line ended without a "\n" (allowed: what a copy
 * cut short leaves, too). */
int pt_vocab_unended(const pt_vocab *v);

/* The id of a token (n bytes), or -1 if it is not in the vocabulary. */
int32_t pt_vocab_id(const pt_vocab *v, const char *token, size_t n);

/* The token of an id (NUL-terminated), or NULL if id is out of range. */
const char *pt_vocab_token(const pt_vocab *v, int32_t id);

typedef struct pt_vocab_special {
    int32_t cls, sep, unk, pad;
} pt_vocab_special;

pt_vocab_special pt_vocab_specials(const pt_vocab *v);

/* How a text is normalised before it is split (steps 3 and 4 above; Hugging
 * Face's BertNormalizer options, each 0 or 1). A vocabulary loads uncased,
 * {1, 1, 1}, as BERT's uncased models and transformers' defaults. */
typedef struct pt_normalize {
    int lowercase;     /* do_lower_case */
    int strip_accents; /* NFD, then Mn dropped (transformers: strip_accents, or do_lower_case where it is None) */
    int split_cjk;     /* tokenize_chinese_chars */
} pt_normalize;

void pt_vocab_set_normalize(pt_vocab *v, pt_normalize n);
pt_normalize pt_vocab_normalize(const pt_vocab *v);

/* Whether code point c prints as nothing or as a space other than U+0020:
 * Unicode's control, format and separator categories (Cc, Cf, Zs, Zl, Zp),
 * default-ignorable code points (zero-width and direction marks, variation
 * selectors, fillers, tags, ...), from utf8proc's tables, and U+2800
 * BRAILLE PATTERN BLANK (a symbol that prints as a space). */
int pt_unicode_invisible(uint32_t c);
/* Whether c is in Unicode's Default_Ignorable_Code_Point ranges, the
 * reserved code points there included (utf8proc knows only the assigned). */
int pt_unicode_reserved_ignorable(uint32_t c);

/* Whether code point c is a combining mark (Mn, Mc, Me): it prints on the
 * character before it. */
int pt_unicode_combining(uint32_t c);

/* Whether the valid UTF-8 text s (n bytes, NUL-terminated, no NUL inside)
 * is in Unicode normalization form C, the form two spellings of one
 * accented word share ("e" + U+0301 is "é" in NFC); -1 when out of memory. */
int pt_unicode_is_nfc(const char *s, size_t n);

/* s (n bytes, any bytes) for a terminal: each byte of an ill-formed UTF-8
 * subpart, of a C0 or C1 control character but newline and tab, and of a
 * bidirectional embedding or isolate (U+202A-202E, U+2066-2069) as \xNN, the rest
 * as it is, into out (NUL-terminated, cut at a whole character to fit cap
 * >= 1 bytes). */
void pt_utf8_printable(const char *s, size_t n, char *out, size_t cap);
/* The same with each backslash doubled, so that what reads \xNN is always
 * an escaped byte: for bytes a model made (a sample), where a backslash is
 * as likely as any other byte. */
void pt_utf8_printable_bytes(const char *s, size_t n, char *out, size_t cap);

/* Encodes text (n bytes, any bytes: see step 1 above) for classification:
 * ids = [CLS] pieces [SEP], truncated to at most max_ids ids by keeping the
 * first max_ids - 2 pieces (as Hugging Face's truncation to max_length with
 * the special tokens added). *count = the ids written (the attention length,
 * 2 <= *count <= max_ids); ids[*count .. max_ids) are set to [PAD].
 * PT_EINPUT if max_ids < 2 or text is NULL with n > 0; PT_ENOMEM. */
int pt_tokenize(const pt_vocab *v, const char *text, size_t n, int32_t *ids, int max_ids,
                int *count, pt_err *err);

#endif
