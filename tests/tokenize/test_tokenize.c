/*
 * test_tokenize.c: the WordPiece tokenizer on a small vocabulary written by
 * the test: greedy longest match (and its lack of backtracking), "##"
 * continuations, [UNK] for an unmatchable and for a 101-code-point word,
 * punctuation and CJK splitting, accents and case, dropped control
 * characters, invalid UTF-8, truncation, vocabularies refused with the
 * line named, a vocabulary crafted against a hash index, and tokens that
 * share the index's 8-byte key. Parity with
 * Hugging Face on real text is tokenize_parity's.
 */
#include "tokenize/tokenize.h"
#include "tests/common/cunit_main.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static const char *VOCAB[] = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "un", "una", "##ffable", "##aff",
    "##able", "a", "##a", ",", "!", "$", "\xc2\xab", "\xc2\xbb", "\xe4\xb8\xad", "\xe5\x9b\xbd",
    "b", "x", "##y", "cafe", "σ", "ς", "Hello", "café", "CAFÉ", "cafe\xcc\x81", "Σ", "i\xcc\x87",
    "İ", "\xe4\xb8\xad\xe5\x9b\xbd", "##\xe5\x9b\xbd", NULL};

static char g_dir[256];
/* the special tokens every vocabulary file starts with */
#define SPECIALS "[PAD]\n[UNK]\n[CLS]\n[SEP]\n"

static void make_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/pt_test_tokenize_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CU_ASSERT_FATAL(mkdtemp(g_dir) != NULL);
}

/* Writes text to g_dir/name; path receives the full path. */
static void write_text(char *path, size_t size, const char *name, const char *text, size_t n)
{
    snprintf(path, size, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    CU_ASSERT_FATAL(fwrite(text, 1, n, f) == n);
    CU_ASSERT_FATAL(fclose(f) == 0);
}

/* The vocabulary of head's lines, then tokens' (NULL-terminated), loaded
 * from a file the test writes and removes. */
static pt_vocab *vocab_of(const char *head, const char *const *tokens)
{
    char text[1024], path[512];
    snprintf(text, sizeof text, "%s", head);
    for (int i = 0; tokens[i]; i++) {
        CU_ASSERT_FATAL(strlen(text) + strlen(tokens[i]) + 2 <= sizeof text);
        strcat(text, tokens[i]);
        strcat(text, "\n");
    }
    make_dir();
    write_text(path, sizeof path, "vocab.txt", text, strlen(text));
    pt_vocab *v = NULL;
    pt_err err = {0};
    int rc = pt_vocab_load(&v, path, &err);
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    CU_ASSERT_FATAL(rc == 0);
    unlink(path);
    rmdir(g_dir);
    return v;
}

static pt_vocab *small_vocab(void) { return vocab_of("", VOCAB); }

/* Encodes text (n bytes) with room for max_ids and returns the tokens
 * joined by spaces (static buffer), "ERROR" on failure. */
static const char *enc_n(const pt_vocab *v, const char *text, size_t n, int max_ids)
{
    static char out[65536];
    int32_t *ids = malloc((size_t)max_ids * sizeof *ids);
    CU_ASSERT_FATAL(ids != NULL);
    int count = -1;
    pt_err err = {0};
    if (pt_tokenize(v, text, n, ids, max_ids, &count, &err)) {
        free(ids);
        return "ERROR";
    }
    CU_ASSERT(count >= 2 && count <= max_ids);
    out[0] = 0;
    size_t used = 0;
    for (int i = 0; i < count; i++) {
        const char *t = pt_vocab_token(v, ids[i]);
        CU_ASSERT_FATAL(t != NULL);
        used += (size_t)snprintf(out + used, sizeof out - used, "%s%s", i ? " " : "", t);
        CU_ASSERT_FATAL(used < sizeof out);
    }
    for (int i = count; i < max_ids; i++)
        CU_ASSERT(ids[i] == pt_vocab_specials(v).pad);
    free(ids);
    return out;
}

static const char *enc(const pt_vocab *v, const char *text)
{
    return enc_n(v, text, strlen(text), 4096);
}

#define EXPECT_ENC(v, text, want)                                                               \
    do {                                                                                        \
        const char *got_ = enc(v, text);                                                        \
        if (strcmp(got_, want))                                                                 \
            fprintf(stderr, "\n  '%s': got '%s', want '%s'\n", text, got_, want);               \
        CU_ASSERT_STRING_EQUAL(got_, want);                                                     \
    } while (0)

static void test_vocab_basics(void)
{
    pt_vocab *v = small_vocab();
    int n = 0;
    while (VOCAB[n])
        n++;
    CU_ASSERT(pt_vocab_size(v) == n);
    for (int i = 0; i < n; i++) {
        CU_ASSERT(pt_vocab_id(v, VOCAB[i], strlen(VOCAB[i])) == i);
        CU_ASSERT_STRING_EQUAL(pt_vocab_token(v, i), VOCAB[i]);
    }
    CU_ASSERT(pt_vocab_id(v, "hell", 4) == -1);
    CU_ASSERT(pt_vocab_id(v, "##hello", 7) == -1);
    /* a zero byte (none in a token) reads like no byte in the first 8 */
    CU_ASSERT(pt_vocab_id(v, "hello\0", 6) == -1 && pt_vocab_id(v, "hello\0\0\0\0", 9) == -1);
    CU_ASSERT(pt_vocab_id(v, "un\0", 3) == -1 && pt_vocab_id(v, "", 0) == -1);
    CU_ASSERT(pt_vocab_token(v, -1) == NULL && pt_vocab_token(v, n) == NULL);
    pt_vocab_special sp = pt_vocab_specials(v);
    CU_ASSERT(sp.pad == 0 && sp.unk == 1 && sp.cls == 2 && sp.sep == 3);
    pt_vocab_free(v);
    pt_vocab_free(NULL);
}

static void test_greedy(void)
{
    pt_vocab *v = small_vocab();
    EXPECT_ENC(v, "", "[CLS] [SEP]");
    EXPECT_ENC(v, "   \t\n ", "[CLS] [SEP]");
    EXPECT_ENC(v, "hello world", "[CLS] hello world [SEP]");
    /* longest first: "una" beats "un", then "##ffable" */
    EXPECT_ENC(v, "unaffable", "[CLS] una ##ffable [SEP]");
    /* no backtracking: una + "##ble" fails, so the word is [UNK] although
     * un + ##able would have covered it */
    EXPECT_ENC(v, "unable", "[CLS] [UNK] [SEP]");
    /* a failure anywhere makes the whole word [UNK], not just its tail */
    EXPECT_ENC(v, "unaffablez hello", "[CLS] [UNK] hello [SEP]");
    EXPECT_ENC(v, "xyyy", "[CLS] x ##y ##y ##y [SEP]");
    EXPECT_ENC(v, "zzz", "[CLS] [UNK] [SEP]");
    pt_vocab_free(v);
}

static void test_long_words(void)
{
    pt_vocab *v = small_vocab();
    char word[200];
    memset(word, 'a', sizeof word);
    char want[2048] = "[CLS] a";
    for (int i = 1; i < 100; i++)
        strcat(want, " ##a");
    strcat(want, " [SEP]");
    CU_ASSERT_STRING_EQUAL(enc_n(v, word, 100, 4096), want);
    CU_ASSERT_STRING_EQUAL(enc_n(v, word, 101, 4096), "[CLS] [UNK] [SEP]");
    /* the limit counts code points after normalisation: 100 "á" (each 3 code
     * points before the accent goes, 2 bytes precomposed) is still a word */
    char acc[400];
    for (int i = 0; i < 100; i++)
        memcpy(acc + 2 * i, "\xc3\xa1", 2);
    CU_ASSERT_STRING_EQUAL(enc_n(v, acc, 200, 4096), want);
    /* punctuation splits a long run before the length is counted */
    char split[300];
    memset(split, 'a', 150);
    split[50] = ',';
    split[100] = ',';
    const char *got = enc_n(v, split, 150, 4096);
    CU_ASSERT(strncmp(got, "[CLS] a ##a", 11) == 0);
    CU_ASSERT(strstr(got, "[UNK]") == NULL);
    pt_vocab_free(v);
}

static void test_punct_cjk(void)
{
    pt_vocab *v = small_vocab();
    EXPECT_ENC(v, "hello,world!", "[CLS] hello , world ! [SEP]");
    EXPECT_ENC(v, "a$a", "[CLS] a $ a [SEP]");
    /* « and » are Unicode punctuation (Pi, Pf) */
    EXPECT_ENC(v, "\xc2\xabhello\xc2\xbb", "[CLS] \xc2\xab hello \xc2\xbb [SEP]");
    /* ASCII symbols 33-47 etc. are split even when not in the vocabulary */
    EXPECT_ENC(v, "hello#world", "[CLS] hello [UNK] world [SEP]");
    EXPECT_ENC(v, "\xe4\xb8\xad\xe5\x9b\xbd", "[CLS] \xe4\xb8\xad \xe5\x9b\xbd [SEP]");
    EXPECT_ENC(v, "a\xe4\xb8\xad" "b", "[CLS] a \xe4\xb8\xad b [SEP]");
    /* a CJK compatibility ideograph (U+F9A8) is split too, and then
     * decomposes (NFD) to U+4EE4, not in this vocabulary */
    EXPECT_ENC(v, "a\xef\xa6\xa8" "b", "[CLS] a [UNK] b [SEP]");
    pt_vocab_free(v);
}

/* cp as UTF-8 into out (4 bytes and a 0 at most) */
static void utf8(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)), out[3] = 0;
    } else {
        out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        out[2] = (char)(0x80 | (cp >> 6 & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F)), out[4] = 0;
    }
}

/* "a" cp "b": split in three where cp is punctuation or CJK (cp itself,
 * or [UNK] where the vocabulary lacks it), one word ([UNK]) otherwise */
static void expect_split(const pt_vocab *v, uint32_t cp, int split)
{
    char c[8], text[16], want[64];
    utf8(cp, c);
    snprintf(text, sizeof text, "a%sb", c);
    if (split)
        snprintf(want, sizeof want, "[CLS] a %s b [SEP]",
                 pt_vocab_id(v, c, strlen(c)) >= 0 ? c : "[UNK]");
    else
        snprintf(want, sizeof want, "[CLS] [UNK] [SEP]");
    const char *got = enc(v, text);
    if (strcmp(got, want))
        fprintf(stderr, "\n  U+%04X between letters: got '%s', want '%s'\n", (unsigned)cp, got, want);
    CU_ASSERT_STRING_EQUAL(got, want);
}

/* What splits a word, class by class: every ASCII byte that is not a
 * letter, digit or space; a character of each Unicode punctuation category
 * (Pc, Pd, Ps, Pe, Pi, Pf, Po) and not a symbol (So, Sm); the first and last
 * code point of each CJK range and the one past it. */
static void test_split_classes(void)
{
    pt_vocab *v = small_vocab();
    for (uint32_t c = 33; c < 127; c++)
        if (!(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z'))
            expect_split(v, c, 1);
    static const uint32_t punct[] = {0x203F, 0x2010, 0x300C, 0x300D, 0xAB, 0xBB, 0xBF, 0xA7};
    for (size_t i = 0; i < sizeof punct / sizeof *punct; i++)
        expect_split(v, punct[i], 1);
    expect_split(v, 0xA9, 0);  /* (c), So */
    expect_split(v, 0xD7, 0);  /* multiplication sign, Sm */
    static const uint32_t cjk[][2] = {{0x4E00, 0x9FFF},   {0x3400, 0x4DBF},   {0x20000, 0x2A6DF},
                                      {0x2A700, 0x2B73F}, {0x2B740, 0x2B81F}, {0x2B920, 0x2CEAF},
                                      {0xF900, 0xFAFF},   {0x2F800, 0x2FA1F}};
    for (size_t i = 0; i < sizeof cjk / sizeof *cjk; i++) {
        expect_split(v, cjk[i][0], 1);
        expect_split(v, cjk[i][1], 1);
    }
    /* past the ranges: a Yijing hexagram (So), and 2B820 (in Google's range,
     * not in Hugging Face's tokenizers') */
    expect_split(v, 0x4DC0, 0);
    expect_split(v, 0x2B820, 0);
    pt_vocab_free(v);
}

static void test_normalise(void)
{
    pt_vocab *v = small_vocab();
    EXPECT_ENC(v, "H\xc3\xa9llo", "[CLS] hello [SEP]");     /* precomposed é */
    EXPECT_ENC(v, "He\xcc\x81llo", "[CLS] hello [SEP]");    /* e + combining acute */
    EXPECT_ENC(v, "HELLO W\xc3\x96RLD", "[CLS] hello world [SEP]");
    EXPECT_ENC(v, "CAF\xc3\x89", "[CLS] cafe [SEP]");
    /* İ (U+0130): its full lowercase is i + U+0307, which never matters
     * since NFD takes the dot off first */
    EXPECT_ENC(v, "\xc4\xb0", "[CLS] [UNK] [SEP]");
    /* per code point lowercase: final sigma is not made ς (as in HF) */
    EXPECT_ENC(v, "\xce\xa3", "[CLS] σ [SEP]");
    pt_vocab_free(v);

    /* canonical order stops at an Mn of class 0 (U+034F) although it is
     * dropped: U+1D16D (class 226) stays before U+1D165 (216) across it, as
     * in Hugging Face's NFD-then-strip; without it they are sorted */
    char path[512];
    make_dir();
    const char marks[] = SPECIALS "a\n##\xf0\x9d\x85\xad\xf0\x9d\x85\xa5\n"
                                  "##\xf0\x9d\x85\xa5\xf0\x9d\x85\xad\n";
    write_text(path, sizeof path, "vocab.txt", marks, sizeof marks - 1);
    pt_err err = {0};
    pt_vocab *m = NULL;
    CU_ASSERT_FATAL(pt_vocab_load(&m, path, &err) == 0);
    EXPECT_ENC(m, "a\xf0\x9d\x85\xad\xcd\x8f\xf0\x9d\x85\xa5",
               "[CLS] a ##\xf0\x9d\x85\xad\xf0\x9d\x85\xa5 [SEP]");
    EXPECT_ENC(m, "a\xf0\x9d\x85\xad\xf0\x9d\x85\xa5",
               "[CLS] a ##\xf0\x9d\x85\xa5\xf0\x9d\x85\xad [SEP]");
    pt_vocab_free(m);
    unlink(path);
    rmdir(g_dir);
}

/* The normalisation options (Hugging Face's lowercase, strip_accents and
 * handle_chinese_chars), each on its own and together. */
static void test_normalise_options(void)
{
    pt_vocab *v = small_vocab();
    pt_normalize d = pt_vocab_normalize(v);
    CU_ASSERT(d.lowercase == 1 && d.strip_accents == 1 && d.split_cjk == 1);
    /* cased, accents kept: no decomposition at all, so a precomposed é and
     * e + U+0301 stay different words */
    pt_vocab_set_normalize(v, (pt_normalize){0, 0, 1});
    EXPECT_ENC(v, "Hello hello", "[CLS] Hello hello [SEP]");
    EXPECT_ENC(v, "caf\xc3\xa9 CAF\xc3\x89", "[CLS] café CAFÉ [SEP]");
    EXPECT_ENC(v, "cafe\xcc\x81", "[CLS] cafe\xcc\x81 [SEP]");
    EXPECT_ENC(v, "\xce\xa3 \xc4\xb0", "[CLS] Σ İ [SEP]");
    EXPECT_ENC(v, "HELLO", "[CLS] [UNK] [SEP]");
    /* lowercased, accents kept: É lowercases to é without decomposing; İ to
     * i + U+0307 (Rust's to_lowercase), two code points */
    pt_vocab_set_normalize(v, (pt_normalize){1, 0, 1});
    EXPECT_ENC(v, "CAF\xc3\x89 Hello", "[CLS] café hello [SEP]");
    EXPECT_ENC(v, "CAFE\xcc\x81", "[CLS] cafe\xcc\x81 [SEP]");
    EXPECT_ENC(v, "\xc4\xb0", "[CLS] i\xcc\x87 [SEP]");
    EXPECT_ENC(v, "\xce\xa3", "[CLS] σ [SEP]");
    /* cased, accents stripped: NFD and Mn dropped, case kept */
    pt_vocab_set_normalize(v, (pt_normalize){0, 1, 1});
    EXPECT_ENC(v, "caf\xc3\xa9 Hello", "[CLS] cafe Hello [SEP]");
    EXPECT_ENC(v, "CAF\xc3\x89", "[CLS] [UNK] [SEP]"); /* CAFE is not in the vocabulary */
    /* CJK left inside words: 中国 is one word, then WordPiece */
    pt_vocab_set_normalize(v, (pt_normalize){1, 1, 0});
    EXPECT_ENC(v, "\xe4\xb8\xad\xe5\x9b\xbd", "[CLS] \xe4\xb8\xad\xe5\x9b\xbd [SEP]");
    EXPECT_ENC(v, "a\xe4\xb8\xad", "[CLS] [UNK] [SEP]");
    pt_vocab_set_normalize(v, (pt_normalize){1, 1, 1});
    EXPECT_ENC(v, "\xe4\xb8\xad\xe5\x9b\xbd", "[CLS] \xe4\xb8\xad \xe5\x9b\xbd [SEP]");
    /* values other than 0 and 1 read as 1 */
    pt_vocab_set_normalize(v, (pt_normalize){7, 0, -1});
    d = pt_vocab_normalize(v);
    CU_ASSERT(d.lowercase == 1 && d.strip_accents == 0 && d.split_cjk == 1);
    pt_vocab_free(v);
}

static void test_cleaning(void)
{
    pt_vocab *v = small_vocab();
    EXPECT_ENC(v, "hel\x01lo", "[CLS] hello [SEP]");              /* Cc dropped */
    EXPECT_ENC(v, "hel\x7flo wor\x1bld", "[CLS] hello world [SEP]");
    EXPECT_ENC(v, "hel\xe2\x80\x8dlo", "[CLS] hello [SEP]");      /* ZWJ (Cf) dropped */
    EXPECT_ENC(v, "\xef\xbb\xbfhello", "[CLS] hello [SEP]");      /* BOM (Cf) */
    EXPECT_ENC(v, "hel\xee\x80\x80lo", "[CLS] hello [SEP]");      /* private use (Co) */
    EXPECT_ENC(v, "hel\xef\xbf\xbdlo", "[CLS] hello [SEP]");      /* U+FFFD */
    EXPECT_ENC(v, "hello\x0bworld", "[CLS] [UNK] [SEP]");         /* \v is Cc: dropped, joins */
    EXPECT_ENC(v, "hello\tworld\r\nx", "[CLS] hello world x [SEP]");
    EXPECT_ENC(v, "hello\xc2\xa0world", "[CLS] hello world [SEP]"); /* NBSP (Zs) */
    EXPECT_ENC(v, "hello\xe2\x80\xa8world", "[CLS] hello world [SEP]"); /* U+2028 (Zl) */
    EXPECT_ENC(v, "hello\xe3\x80\x80world", "[CLS] hello world [SEP]"); /* ideographic space */
    CU_ASSERT_STRING_EQUAL(enc_n(v, "hel\0lo", 6, 64), "[CLS] hello [SEP]");
    pt_vocab_free(v);
}

static void test_invalid_utf8(void)
{
    pt_vocab *v = small_vocab();
    EXPECT_ENC(v, "hel\xfflo", "[CLS] hello [SEP]");
    EXPECT_ENC(v, "\xe0\x80hello", "[CLS] hello [SEP]");         /* overlong start */
    EXPECT_ENC(v, "\xed\xa0\x80hello", "[CLS] hello [SEP]");     /* a surrogate */
    EXPECT_ENC(v, "\xf4\x90\x80\x80hello", "[CLS] hello [SEP]"); /* above U+10FFFF */
    EXPECT_ENC(v, "hello\xe4\xb8", "[CLS] hello [SEP]");         /* cut at the end */
    /* the maximal subpart: a lead byte followed by ASCII takes only itself,
     * so no letter is swallowed */
    EXPECT_ENC(v, "\xe4hello \xf0\x9f" "a", "[CLS] hello a [SEP]");
    EXPECT_ENC(v, "\xc3hello", "[CLS] hello [SEP]");
    /* every byte value alone, and random bytes: no crash, a valid encoding */
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        CU_ASSERT(strcmp(enc_n(v, &c, 1, 8), "ERROR") != 0);
    }
    unsigned seed = 12345;
    char buf[4096];
    for (int t = 0; t < 200; t++) {
        for (size_t i = 0; i < sizeof buf; i++) {
            seed = seed * 1103515245u + 12345u;
            buf[i] = (char)(seed >> 16);
        }
        size_t n = (size_t)(seed >> 8) % sizeof buf;
        CU_ASSERT(strcmp(enc_n(v, buf, n, 64), "ERROR") != 0);
    }
    pt_vocab_free(v);
}

static void test_truncation(void)
{
    pt_vocab *v = small_vocab();
    const char *t = "hello world hello world";
    CU_ASSERT_STRING_EQUAL(enc_n(v, t, strlen(t), 4), "[CLS] hello world [SEP]");
    CU_ASSERT_STRING_EQUAL(enc_n(v, t, strlen(t), 5), "[CLS] hello world hello [SEP]");
    CU_ASSERT_STRING_EQUAL(enc_n(v, t, strlen(t), 6), "[CLS] hello world hello world [SEP]");
    CU_ASSERT_STRING_EQUAL(enc_n(v, t, strlen(t), 9), "[CLS] hello world hello world [SEP]");
    CU_ASSERT_STRING_EQUAL(enc_n(v, t, strlen(t), 2), "[CLS] [SEP]");
    /* a word's pieces are cut like any others */
    CU_ASSERT_STRING_EQUAL(enc_n(v, "unaffable", 9, 3), "[CLS] una [SEP]");
    int32_t ids[8];
    int count = 0;
    pt_err err = {0};
    CU_ASSERT(pt_tokenize(v, t, strlen(t), ids, 1, &count, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "max_ids 1") != NULL);
    CU_ASSERT(pt_tokenize(v, NULL, 3, ids, 8, &count, &err) == PT_EINPUT);
    CU_ASSERT(pt_tokenize(v, NULL, 0, ids, 8, &count, &err) == 0 && count == 2);
    pt_vocab_free(v);
}

/* Loading `text` as a vocabulary fails with code, and the message holds each
 * of the needles. */
static void expect_refused(const char *text, size_t n, int code, const char *n1, const char *n2)
{
    char path[512];
    make_dir();
    write_text(path, sizeof path, "vocab.txt", text, n);
    pt_vocab *v = (pt_vocab *)1;
    pt_err err = {0};
    int rc = pt_vocab_load(&v, path, &err);
    CU_ASSERT(rc == code);
    CU_ASSERT(v == NULL);
    CU_ASSERT(strstr(err.msg, path) != NULL);
    if (n1 && !strstr(err.msg, n1))
        fprintf(stderr, "\n  message '%s' lacks '%s'\n", err.msg, n1);
    CU_ASSERT(!n1 || strstr(err.msg, n1) != NULL);
    CU_ASSERT(!n2 || strstr(err.msg, n2) != NULL);
    unlink(path);
    rmdir(g_dir);
}


static void test_vocab_errors(void)
{
    char path0[512];
    pt_vocab *v = (pt_vocab *)1;
    pt_err err = {0};
    CU_ASSERT(pt_vocab_load(&v, "/nonexistent/vocab.txt", &err) == PT_ESYS);
    CU_ASSERT(v == NULL && strstr(err.msg, "/nonexistent/vocab.txt") != NULL);

    const char dup[] = SPECIALS "hello\nworld\nhello\n";
    expect_refused(dup, sizeof dup - 1, PT_EINPUT, ":7: duplicate token 'hello'", "line 5");
    /* of several duplicates, the earliest line that repeats a token, whatever
     * the tokens' order ('a' sorts first but repeats later), and the line its
     * token first stood on (not the line of its previous repeat) */
    const char dups[] = SPECIALS "b\na\nb\na\nb\n";
    expect_refused(dups, sizeof dups - 1, PT_EINPUT, ":7: duplicate token 'b'", "first on line 5)");
    const char dups3[] = SPECIALS "z\nq\nq\nz\nz\n";
    expect_refused(dups3, sizeof dups3 - 1, PT_EINPUT, ":7: duplicate token 'q'",
                   "first on line 6)");
    const char dup_last[] = SPECIALS "ab\na\nabc\nb\n[UNK]\n";
    expect_refused(dup_last, sizeof dup_last - 1, PT_EINPUT, ":9: duplicate token '[UNK]'",
                   "first on line 2)");
    const char empty_line[] = SPECIALS "hello\n\nworld\n";
    expect_refused(empty_line, sizeof empty_line - 1, PT_EINPUT, ":6: empty line", NULL);
    char long_tok[600] = SPECIALS;
    memset(long_tok + strlen(long_tok), 'x', 300);
    expect_refused(long_tok, strlen(long_tok), PT_EINPUT, ":5: token of 300 bytes", NULL);
    strcat(long_tok, "\r\nhello\n"); /* a CRLF line end is not counted */
    expect_refused(long_tok, strlen(long_tok), PT_EINPUT, ":5: token of 300 bytes", NULL);
    /* tokens at the longest (255 bytes, and with "\r") load; 256 does not */
    for (int cr = 0; cr < 2; cr++) {
        char edge[600] = SPECIALS;
        memset(edge + strlen(edge), 'y', 255);
        strcat(edge, cr ? "\r\nz\r\n" : "\nz\n");
        make_dir();
        write_text(path0, sizeof path0, "vocab.txt", edge, strlen(edge));
        v = NULL;
        CU_ASSERT(pt_vocab_load(&v, path0, &err) == 0 && pt_vocab_size(v) == 6);
        CU_ASSERT(!pt_vocab_unended(v)); /* its last line ends */
        pt_vocab_free(v);
        unlink(path0);
        /* without its last newline (or "\r\n"): the same tokens, unended */
        write_text(path0, sizeof path0, "vocab.txt", edge, strlen(edge) - (cr ? 2 : 1));
        v = NULL;
        CU_ASSERT(pt_vocab_load(&v, path0, &err) == 0 && pt_vocab_size(v) == 6 &&
                  strcmp(pt_vocab_token(v, 5), "z") == 0 && pt_vocab_unended(v));
        pt_vocab_free(v);
        unlink(path0);
        rmdir(g_dir);
        memset(edge + strlen(SPECIALS), 'y', 256);
        edge[strlen(SPECIALS) + 256] = '\n';
        edge[strlen(SPECIALS) + 257] = '\0';
        expect_refused(edge, strlen(edge), PT_EINPUT, ":5: token of 256 bytes", NULL);
    }
    const char space[] = SPECIALS "hello world\n";
    expect_refused(space, sizeof space - 1, PT_EINPUT, ":5: token holds a space", NULL);
    const char bad_utf8[] = SPECIALS "ok\nhel\xfflo\n";
    expect_refused(bad_utf8, sizeof bad_utf8 - 1, PT_EINPUT, ":6: token is not valid UTF-8",
                   NULL);
    /* a white space that Hugging Face trims from the line's end */
    const char nbsp_end[] = SPECIALS "a\na\xc2\xa0\n";
    expect_refused(nbsp_end, sizeof nbsp_end - 1, PT_EINPUT, ":6: token ends with U+00A0",
                   "trims");
    const char ideo_end[] = SPECIALS "x\xe3\x80\x80\n";
    expect_refused(ideo_end, sizeof ideo_end - 1, PT_EINPUT, ":5: token ends with U+3000", NULL);
    /* each of Unicode's other white spaces outside ASCII */
    static const uint32_t spaces[] = {0x85,   0x1680, 0x2000, 0x2005, 0x200A,
                                      0x2028, 0x2029, 0x202F, 0x205F};
    for (size_t i = 0; i < sizeof spaces / sizeof *spaces; i++) {
        char sp[8], text[64], want[64];
        utf8(spaces[i], sp);
        snprintf(text, sizeof text, SPECIALS "x%s\n", sp);
        snprintf(want, sizeof want, ":5: token ends with U+%04X", (unsigned)spaces[i]);
        expect_refused(text, strlen(text), PT_EINPUT, want, NULL);
    }
    const char nul[] = SPECIALS "he\0llo\n";
    expect_refused(nul, sizeof nul - 1, PT_EINPUT, ":5: token holds a space or control byte 0x00",
                   NULL);
    const char no_pad[] = "[UNK]\n[CLS]\n[SEP]\nhello\n";
    expect_refused(no_pad, sizeof no_pad - 1, PT_EINPUT, "no [PAD] token", NULL);
    const char no_cls[] = "[PAD]\n[UNK]\n[SEP]\n";
    expect_refused(no_cls, sizeof no_cls - 1, PT_EINPUT, "no [CLS] token", NULL);
    expect_refused("", 0, PT_EINPUT, "empty vocabulary", NULL);

    /* CRLF line ends and a missing last newline are fine */
    char path[512];
    make_dir();
    /* a literal U+FFFD loads as a token, as Hugging Face loads it (no text
     * reaches it: cleaning drops U+FFFD, invalid UTF-8's included, on both
     * sides); a white space inside a token is kept */
    const char fffd[] = SPECIALS "a\n\xef\xbf\xbd\nx\xc2\xa0y\n";
    write_text(path, sizeof path, "vocab.txt", fffd, sizeof fffd - 1);
    v = NULL;
    CU_ASSERT_FATAL(pt_vocab_load(&v, path, &err) == 0);
    CU_ASSERT(pt_vocab_size(v) == 7 && pt_vocab_id(v, "\xef\xbf\xbd", 3) == 5);
    CU_ASSERT_STRING_EQUAL(enc(v, "\xff a \xef\xbf\xbd"), "[CLS] a [SEP]");
    pt_vocab_free(v);
    unlink(path);
    const char crlf[] = "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\nhello";
    write_text(path, sizeof path, "vocab.txt", crlf, sizeof crlf - 1);
    v = NULL;
    CU_ASSERT_FATAL(pt_vocab_load(&v, path, &err) == 0);
    CU_ASSERT(pt_vocab_size(v) == 5 && pt_vocab_id(v, "hello", 5) == 4);
    CU_ASSERT_STRING_EQUAL(enc(v, "Hello"), "[CLS] hello [SEP]");
    pt_vocab_free(v);
    unlink(path);
    rmdir(g_dir);
}

/* Writes to out (room for SPECIALS and 11 bytes a token) the special tokens
 * and `count` distinct 10-byte printable ASCII tokens whose FNV-1a hashes
 * (with the offset basis the vocabulary's hash index once used) agree in
 * their low `bits` bits: in such a table, every token in one probed run. The
 * low bits of FNV-1a depend on the low bits of its state alone, and the
 * prime is odd, so the last byte is solved for: ((h ^ byte) * prime) has
 * the low bits wanted when (h ^ byte) has those of wanted * prime^-1.
 * Returns the bytes written. */
static size_t colliding_vocab(char *out, int count, int bits)
{
    const uint64_t prime = 1099511628211ULL, mask = (1ULL << bits) - 1;
    uint64_t inverse = prime; /* Newton's iteration doubles the correct low bits */
    for (int i = 0; i < 6; i++)
        inverse *= 2 - prime * inverse;
    const uint64_t before_last = (0x2f5ULL * inverse) & mask; /* 0x2f5: any wanted bits */
    size_t used = strlen(SPECIALS);
    memcpy(out, SPECIALS, used);
    int made = 0;
    for (uint64_t prefix = 0; made < count; prefix++) {
        char t[10];
        uint64_t h = 1469598103934665603ULL, p = prefix;
        for (int i = 0; i < 8; i++, p /= 26) {
            t[i] = (char)('a' + p % 26);
            h = (h ^ (unsigned char)t[i]) * prime;
        }
        for (int c = '!'; c <= '~' && made < count; c++) {
            uint64_t last = ((h ^ (uint64_t)c) * prime ^ before_last) & mask;
            if (last < '!' || last > '~')
                continue;
            t[8] = (char)c;
            t[9] = (char)last;
            memcpy(out + used, t, 10);
            out[used + 10] = '\n';
            used += 11;
            made++;
        }
    }
    return used;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 80,000 tokens that share FNV-1a's low 18 bits: through the hash table
 * once indexed by them, loading took 36 s (300,000 did not load in 2
 * minutes), and every lookup walked their run. Sorted, they load as fast as
 * any others, and each one is found. */
static void test_vocab_crafted(void)
{
    enum { COUNT = 80000 };
    char *text = malloc(strlen(SPECIALS) + 11 * (size_t)COUNT);
    CU_ASSERT_FATAL(text != NULL);
    size_t n = colliding_vocab(text, COUNT, 18);
    char path[512];
    make_dir();
    write_text(path, sizeof path, "vocab.txt", text, n);
    pt_vocab *v = NULL;
    pt_err err = {0};
    double t0 = seconds_now();
    int rc = pt_vocab_load(&v, path, &err);
    double took = seconds_now() - t0;
    if (rc)
        fprintf(stderr, "\n  %s\n", err.msg);
    CU_ASSERT_FATAL(rc == 0);
    if (took > 5.0) /* a fraction of a second, even under ASan */
        fprintf(stderr, "\n  loading %d crafted tokens took %.1f s\n", COUNT, took);
    CU_ASSERT(took <= 5.0);
    CU_ASSERT(pt_vocab_size(v) == COUNT + 4);
    int found = 0;
    t0 = seconds_now();
    for (int i = 0; i < COUNT; i++) {
        const char *t = text + strlen(SPECIALS) + 11 * (size_t)i;
        found += pt_vocab_id(v, t, 10) == i + 4;
    }
    took = seconds_now() - t0;
    CU_ASSERT(found == COUNT);
    CU_ASSERT(took <= 5.0);
    CU_ASSERT(pt_vocab_id(v, "zzzzzzzzzz", 10) == -1); /* a prefix never reached */
    pt_vocab_free(v);
    free(text);
    unlink(path);
    rmdir(g_dir);
}

/* Tokens that share their first 8 bytes (the index's integer key) and
 * differ after them or in length, one of exactly 8 bytes among them: each
 * is found under its own id, a piece with their prefix that is not one of
 * them is not found, and the greedy match takes the longest. */
static void test_vocab_shared_prefix(void)
{
    static const char *tokens[] = {"beginnings", "beginnin", "beginningless", "beginning", "##s",
                                   "##z", "abcdefghij", "abcdefgh", "abcdefgg", "abcdefghi",
                                   "abcdefgi", "beginninga", NULL};
    pt_vocab *v = vocab_of(SPECIALS, tokens);
    for (int i = 0; tokens[i]; i++) {
        int32_t id = pt_vocab_id(v, tokens[i], strlen(tokens[i]));
        if (id != i + 4)
            fprintf(stderr, "\n  '%s': id %d, want %d\n", tokens[i], id, i + 4);
        CU_ASSERT(id == i + 4);
    }
    static const char *absent[] = {"beginningz", "beginningles", "beginningsa", "abcdefghijk",
                                   "abcdefgj", "abcdefgha", "beginni", "beginninb", NULL};
    for (int i = 0; absent[i]; i++)
        CU_ASSERT(pt_vocab_id(v, absent[i], strlen(absent[i])) == -1);
    EXPECT_ENC(v, "beginningz beginnings beginninglessz abcdefghijs",
               "[CLS] beginning ##z beginnings beginningless ##z abcdefghij ##s [SEP]");
    pt_vocab_free(v);
}

/* pt_utf8_printable: valid text (accents, CJK, emoji, U+FFFD itself,
 * newline and tab) passes as it is; each byte of an ill-formed subpart and
 * each other control character becomes \xNN; a short buffer cuts at a
 * whole character. */
static void test_printable(void)
{
    char out[128];
    const char ok[] = "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x99\x82 \xef\xbf\xbd\n\tend";
    pt_utf8_printable(ok, sizeof ok - 1, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, ok);
    const char bad[] = "a\xff\xc3" "b\x01\x7f\xe4\xb8";
    pt_utf8_printable(bad, sizeof bad - 1, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "a\\xff\\xc3b\\x01\\x7f\\xe4\\xb8");
    const char nul[] = {'x', 0, 'y'};
    pt_utf8_printable(nul, 3, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "x\\x00y");
    pt_utf8_printable(ok, sizeof ok - 1, out, 6); /* "caf" + "\xc3\xa9" fills 5 and the NUL */
    CU_ASSERT_STRING_EQUAL(out, "caf\xc3\xa9");
    pt_utf8_printable(ok, sizeof ok - 1, out, 5); /* "é" does not fit whole */
    CU_ASSERT_STRING_EQUAL(out, "caf");
    pt_utf8_printable(bad, sizeof bad - 1, out, 5); /* nor "\xff" */
    CU_ASSERT_STRING_EQUAL(out, "a");
    /* C1 controls (CSI as two bytes) and a right-to-left override */
    pt_utf8_printable("a\xc2\x9b" "1m\xe2\x80\xaez", 9, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "a\\xc2\\x9b1m\\xe2\\x80\\xaez");
    pt_utf8_printable("", 0, out, 1);
    CU_ASSERT_STRING_EQUAL(out, "");
    /* a backslash is itself there, doubled in the bytes form (and cut whole) */
    pt_utf8_printable("a\\x41\xff", 6, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "a\\x41\\xff");
    pt_utf8_printable_bytes("a\\x41\xff", 6, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "a\\\\x41\\xff");
    pt_utf8_printable_bytes("a\\", 2, out, 3);
    CU_ASSERT_STRING_EQUAL(out, "a");
}

static const pt_test tokenize_tests[] = {
    {"printable", test_printable},
    {"vocab_basics", test_vocab_basics},
    {"greedy", test_greedy},
    {"long_words", test_long_words},
    {"punct_cjk", test_punct_cjk},
    {"split_classes", test_split_classes},
    {"normalise", test_normalise},
    {"normalise_options", test_normalise_options},
    {"cleaning", test_cleaning},
    {"invalid_utf8", test_invalid_utf8},
    {"truncation", test_truncation},
    {"vocab_errors", test_vocab_errors},
    {"vocab_crafted", test_vocab_crafted},
    {"vocab_shared_prefix", test_vocab_shared_prefix},
    {NULL, NULL}};

static const pt_test_suite suites[] = {{"tokenize", tokenize_tests}, {NULL, NULL}};
