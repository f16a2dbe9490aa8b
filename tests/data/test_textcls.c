/*
 * test_textcls.c: text-classification datasets: TSV and JSONL files read
 * alike (CRLF, blank lines, a byte order mark, a last line without newline,
 * tabs inside a JSON text, integer labels), classes numbered in byte order of
 * their names, the seed-free test split (the same every time, disjoint,
 * round(fraction * count) examples, file order kept, not the tail of the
 * file), a test file's labels taken from the training file's, gathering,
 * and hostile files each refused with "FILE:LINE: what" (the ASan build
 * checks that no path leaks or overruns). The KJV demo file is read when
 * scripts/setup.sh has made it (PT_DATASETS_DIR, set by CMake).
 * The suite is registered in test_data.c.
 */
#include "data/data.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void test_textcls_tsv(void);
void test_textcls_jsonl(void);
void test_textcls_label_order(void);
void test_textcls_split(void);
void test_textcls_test_file(void);
void test_textcls_hostile(void);
void test_textcls_limits(void);
void test_textcls_kjv(void);

/* ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, then the words in order */
static const char *VOCAB[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "in", "the", "beginning",
                              "god", "a", "b", ",", NULL};
enum { PAD = 0, UNK = 1, CLS = 2, SEP = 3, IN = 4, THE = 5, BEGINNING = 6, GOD = 7, A = 8,
       B = 9, COMMA = 10 };

static char g_dir[256];

static void make_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/pt_test_textcls_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CU_ASSERT_FATAL(mkdtemp(g_dir) != NULL);
}

static void remove_dir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    CU_ASSERT(system(cmd) == 0);
}

/* Writes n bytes to g_dir/name; path receives the full path. */
static void write_bytes(char *path, size_t size, const char *name, const void *data, size_t n)
{
    snprintf(path, size, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    CU_ASSERT_FATAL(n == 0 || fwrite(data, 1, n, f) == n);
    CU_ASSERT_FATAL(fclose(f) == 0);
}

static void write_text(char *path, size_t size, const char *name, const char *text)
{
    write_bytes(path, size, name, text, strlen(text));
}

static pt_vocab *small_vocab(void)
{
    char text[512] = "", path[512];
    for (int i = 0; VOCAB[i]; i++) {
        strcat(text, VOCAB[i]);
        strcat(text, "\n");
    }
    write_text(path, sizeof path, "vocab.txt", text);
    pt_vocab *v = NULL;
    pt_err err = {0};
    int rc = pt_vocab_load(&v, path, &err);
    if (rc)
        printf("%s\n", err.msg);
    CU_ASSERT_FATAL(rc == 0);
    return v;
}

static int is_zeroed(const pt_dataset *ds)
{
    return ds->count == 0 && !ds->tokens && !ds->labels && !ds->label_names && ds->classes == 0 &&
           ds->context == 0;
}

/* Loads path expecting success; prints the message otherwise. */
static void load_ok(pt_dataset *ds, const char *path, const pt_vocab *v, int context,
                    const pt_dataset *from)
{
    pt_err err = {0};
    int rc = pt_textcls_load(ds, path, v, context, from, &err);
    if (rc)
        printf("\n    unexpected: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(ds->kind, PT_DATA_TEXTCLS);
    CU_ASSERT_EQUAL(ds->context, context);
}

/* Example i's tokens equal want (ids until a -1), then [PAD]s. */
static int tokens_are(const pt_dataset *ds, int64_t i, const int32_t *want)
{
    const int32_t *t = ds->tokens + (size_t)i * ds->context;
    int k = 0;
    for (; want[k] >= 0; k++)
        if (k >= ds->context || t[k] != want[k])
            return 0;
    for (; k < ds->context; k++)
        if (t[k] != PAD)
            return 0;
    return 1;
}

/* The examples of the TSV and JSONL tests: (label, text) and their tokens. */
#define END (-1)
static const int32_t TOK0[] = {CLS, IN, THE, BEGINNING, SEP, END};
static const int32_t TOK1[] = {CLS, GOD, SEP, END};
static const int32_t TOK2[] = {CLS, A, B, COMMA, A, SEP, END}; /* spaces and tabs separate words */
static const int32_t TOK3[] = {CLS, THE, UNK, SEP, END};
static const int32_t TOK4[] = {CLS, A, A, A, A, A, A, SEP, END}; /* context 8: truncated */

static void check_five(const pt_dataset *ds)
{
    CU_ASSERT_EQUAL_FATAL(ds->count, 5);
    CU_ASSERT_EQUAL_FATAL(ds->classes, 3);
    CU_ASSERT_STRING_EQUAL(ds->label_names[0], "law");
    CU_ASSERT_STRING_EQUAL(ds->label_names[1], "prophets");
    CU_ASSERT_STRING_EQUAL(ds->label_names[2], "wisdom");
    static const int32_t want[] = {0, 2, 1, 0, 2};
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(ds->labels[i], want[i]);
    CU_ASSERT(tokens_are(ds, 0, TOK0));
    CU_ASSERT(tokens_are(ds, 1, TOK1));
    CU_ASSERT(tokens_are(ds, 2, TOK2));
    CU_ASSERT(tokens_are(ds, 3, TOK3));
    CU_ASSERT(tokens_are(ds, 4, TOK4));
}

void test_textcls_tsv(void)
{
    make_dir();
    pt_vocab *v = small_vocab();
    char path[512];
    /* a byte order mark, CRLF and LF, blank and whitespace lines (tabs
     * too), a last line without newline */
    write_text(path, sizeof path, "five.tsv",
               "\xef\xbb\xbflaw\tIn the Beginning\r\n"
               "\n"
               "wisdom\tGod\n"
               "   \t  \r\n"
               "prophets\ta  b, a\n"
               "\r\n"
               "law\tthe unknown\n"
               "\t\n"
               "wisdom\ta a a a a a a a a a");
    pt_dataset ds;
    load_ok(&ds, path, v, 8, NULL);
    check_five(&ds);

    /* context 2 leaves no room for a word: every example is [CLS] [SEP],
     * and the texts are not empty for that (a text with no word is) */
    pt_dataset two;
    load_ok(&two, path, v, 2, NULL);
    CU_ASSERT_EQUAL(two.count, ds.count);
    pt_dataset_free(&two);

    /* gathering: tokens as loaded, targets the labels, any order */
    int64_t ids[] = {4, 0, 2};
    int32_t tokens[3 * 8], targets[3];
    pt_dataset_gather(&ds, ids, 3, NULL, 1, 0, NULL, tokens, targets);
    for (int j = 0; j < 3; j++) {
        CU_ASSERT(memcmp(tokens + j * 8, ds.tokens + ids[j] * 8, 8 * sizeof *tokens) == 0);
        CU_ASSERT_EQUAL(targets[j], ds.labels[ids[j]]);
    }
    /* augmentation is for images */
    pt_augment flip = {1, 0};
    pt_err err = {0};
    CU_ASSERT_EQUAL(pt_augment_check(&flip, &ds, &err), PT_EINPUT);
    CU_ASSERT_EQUAL(pt_augment_check(NULL, &ds, &err), 0);
    pt_dataset_free(&ds);
    CU_ASSERT(is_zeroed(&ds));
    pt_dataset_free(&ds); /* twice is safe */

    /* the name decides the format, in any case */
    write_text(path, sizeof path, "upper.TSV", "law\tgod\nlaw\tthe\n");
    load_ok(&ds, path, v, 4, NULL);
    CU_ASSERT_EQUAL(ds.count, 2);
    CU_ASSERT_EQUAL(ds.classes, 1);
    pt_dataset_free(&ds);

    /* only a first line is a header: later, "label<TAB>text" is an example,
     * and so is a first line with other words */
    write_text(path, sizeof path, "late.tsv", "law\tgod\nlabel\ttext\n");
    load_ok(&ds, path, v, 4, NULL);
    CU_ASSERT_EQUAL(ds.count, 2);
    CU_ASSERT_EQUAL(ds.classes, 2);
    pt_dataset_free(&ds);
    /* a header needs a name of each column: a first line "label<TAB>text
     * god", a class named "class", or a text "sentence" of a class named
     * "law", is an example */
    const char *const examples[][2] = {{"labels.tsv", "label\ttext god\nlaw\tgod\n"},
                                       {"class.tsv", "class\tgod\nlaw\tgod\n"},
                                       {"sentence.tsv", "law\tsentence\nlaw\tgod\n"}};
    for (size_t i = 0; i < sizeof examples / sizeof *examples; i++) {
        write_text(path, sizeof path, examples[i][0], examples[i][1]);
        load_ok(&ds, path, v, 4, NULL);
        CU_ASSERT_EQUAL(ds.count, 2);
        pt_dataset_free(&ds);
    }
    pt_vocab_free(v);
    remove_dir();
}

void test_textcls_jsonl(void)
{
    make_dir();
    pt_vocab *v = small_vocab();
    char path[512];
    write_text(path, sizeof path, "five.jsonl",
               "{\"text\": \"In the Beginning\", \"label\": \"law\"}\r\n"
               "\n"
               "{\"label\": \"wisdom\", \"id\": 7, \"text\": \"God\"}\n"
               "  \r\n"
               "{\"text\": \"a\\tb,\\ta\", \"label\": \"prophets\", \"extra\": [1, {\"x\": null}]}\n"
               "{\"text\": \"the unknown\", \"label\": \"l\\u0061w\"}\n"
               "\t\n"
               "  {\"text\": \"a a a a a a a a a a\", \"label\": \"wisdom\"}  ");
    pt_dataset ds;
    load_ok(&ds, path, v, 8, NULL);
    check_five(&ds);
    pt_dataset_free(&ds);

    /* integer labels are named by their digits, and sorted as names */
    write_text(path, sizeof path, "ints.jsonl",
               "{\"text\": \"a\", \"label\": 2}\n"
               "{\"text\": \"b\", \"label\": 10}\n"
               "{\"text\": \"a\", \"label\": \"2\"}\n"
               "{\"text\": \"b\", \"label\": -1}\n");
    load_ok(&ds, path, v, 4, NULL);
    CU_ASSERT_EQUAL_FATAL(ds.classes, 3);
    CU_ASSERT_STRING_EQUAL(ds.label_names[0], "-1");
    CU_ASSERT_STRING_EQUAL(ds.label_names[1], "10");
    CU_ASSERT_STRING_EQUAL(ds.label_names[2], "2");
    static const int32_t want[] = {2, 1, 2, 0};
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(ds.labels[i], want[i]);
    pt_dataset_free(&ds);

    /* "\u0000" in a text (valid JSON: json.dumps writes a NUL so) is
     * dropped by the tokenizer, as a raw NUL in a TSV text is */
    pt_dataset plain;
    write_text(path, sizeof path, "nul.jsonl", "{\"text\": \"g\\u0000od\\u0000\", \"label\": \"law\"}\n");
    load_ok(&ds, path, v, 6, NULL);
    write_text(path, sizeof path, "plain.jsonl", "{\"text\": \"god\", \"label\": \"law\"}\n");
    load_ok(&plain, path, v, 6, NULL);
    CU_ASSERT_EQUAL_FATAL(ds.count, 1);
    CU_ASSERT(memcmp(ds.tokens, plain.tokens, 6 * sizeof *ds.tokens) == 0);
    pt_dataset_free(&ds);
    pt_dataset_free(&plain);
    pt_vocab_free(v);
    remove_dir();
}

void test_textcls_label_order(void)
{
    make_dir();
    pt_vocab *v = small_vocab();
    char path[512];
    /* byte order: digits < upper case < lower case < UTF-8 beyond ASCII */
    write_text(path, sizeof path, "order.tsv",
               "zeta\ta\nAlpha\ta\nbeta\ta\nalpha\ta\n\xc3\xa9t\xc3\xa9\ta\nbeta\tb\n9\ta\n"
               "alpha beta\ta\n");
    pt_dataset ds;
    load_ok(&ds, path, v, 4, NULL);
    static const char *names[] = {"9", "Alpha", "alpha", "alpha beta", "beta", "zeta",
                                  "\xc3\xa9t\xc3\xa9"};
    CU_ASSERT_EQUAL_FATAL(ds.classes, 7);
    for (int k = 0; k < 7; k++)
        CU_ASSERT_STRING_EQUAL(ds.label_names[k], names[k]);
    static const int32_t want[] = {5, 1, 4, 2, 6, 4, 0, 3};
    CU_ASSERT_EQUAL_FATAL(ds.count, 8);
    for (int i = 0; i < 8; i++)
        CU_ASSERT_EQUAL(ds.labels[i], want[i]);
    pt_dataset_free(&ds);
    pt_vocab_free(v);
    remove_dir();
}

/* N examples ordered by label (4 labels of N/4 lines each, as the KJV demo
 * is ordered by part of the Bible); example i is i + 1 words "a", so its
 * tokens tell which line it came from. */
enum { SPLIT_N = 40, SPLIT_CTX = 48 };

static void write_numbered(char *path, size_t size, const char *name, int n)
{
    size_t cap = (size_t)n * (2 * (size_t)n + 16) + 1, used = 0;
    char *text = malloc(cap);
    CU_ASSERT_FATAL(text != NULL);
    for (int i = 0; i < n; i++) {
        used += (size_t)snprintf(text + used, cap - used, "c%d\t", i * 4 / n);
        for (int k = 0; k <= i; k++)
            used += (size_t)snprintf(text + used, cap - used, "a ");
        text[used++] = '\n';
    }
    write_bytes(path, size, name, text, used);
    free(text);
}

/* Which line example i of ds came from (by its number of "a" tokens). */
static int line_of(const pt_dataset *ds, int64_t i)
{
    const int32_t *t = ds->tokens + (size_t)i * ds->context;
    int n = 0;
    while (n + 1 < ds->context && t[n + 1] == A)
        n++;
    return n - 1;
}

void test_textcls_split(void)
{
    make_dir();
    pt_vocab *v = small_vocab();
    char path[512];
    write_numbered(path, sizeof path, "numbered.tsv", SPLIT_N);
    pt_dataset train, test, train2, test2;
    load_ok(&train, path, v, SPLIT_CTX, NULL);
    CU_ASSERT_EQUAL_FATAL(train.count, SPLIT_N);
    for (int i = 0; i < SPLIT_N; i++)
        CU_ASSERT_EQUAL(line_of(&train, i), i);
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_textcls_split(&train, 0.25, &test, &err), 0);
    CU_ASSERT_EQUAL(test.count, 10);
    CU_ASSERT_EQUAL(train.count, 30);
    CU_ASSERT(test.kind == PT_DATA_TEXTCLS && test.context == SPLIT_CTX && test.classes == 4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(test.label_names);
    CU_ASSERT(test.label_names != train.label_names);
    for (int k = 0; k < 4; k++)
        CU_ASSERT_STRING_EQUAL(test.label_names[k], train.label_names[k]);

    /* disjoint, together every line once, the training split in file order
     * and the test split not (shuffled, so its head is a uniform sample),
     * labels moved with their texts, and the test split spread over the file */
    int test_in_order = 1;
    int seen[SPLIT_N] = {0}, test_classes[4] = {0};
    for (int split = 0; split < 2; split++) {
        const pt_dataset *ds = split ? &test : &train;
        int prev = -1;
        for (int64_t i = 0; i < ds->count; i++) {
            int line = line_of(ds, i);
            CU_ASSERT_FATAL(line >= 0 && line < SPLIT_N);
            seen[line]++;
            if (split)
                test_in_order &= line > prev;
            else
                CU_ASSERT(line > prev);
            prev = line;
            CU_ASSERT_EQUAL(ds->labels[i], line * 4 / SPLIT_N);
            if (split)
                test_classes[ds->labels[i]]++;
        }
    }
    for (int i = 0; i < SPLIT_N; i++)
        CU_ASSERT_EQUAL(seen[i], 1);
    int classes_in_test = 0;
    for (int k = 0; k < 4; k++)
        classes_in_test += test_classes[k] > 0;
    CU_ASSERT(classes_in_test >= 3); /* not the tail of a file ordered by label */
    CU_ASSERT(!test_in_order);

    /* the same split every time (no seed is involved) */
    load_ok(&train2, path, v, SPLIT_CTX, NULL);
    CU_ASSERT_EQUAL_FATAL(pt_textcls_split(&train2, 0.25, &test2, &err), 0);
    CU_ASSERT_EQUAL_FATAL(test2.count, test.count);
    CU_ASSERT(memcmp(test.tokens, test2.tokens, sizeof(int32_t) * SPLIT_CTX * 10) == 0);
    CU_ASSERT(memcmp(train.tokens, train2.tokens, sizeof(int32_t) * SPLIT_CTX * 30) == 0);
    pt_dataset_free(&train2);
    pt_dataset_free(&test2);
    pt_dataset_free(&test);
    pt_dataset_free(&train);

    /* sizes: round(fraction * count) */
    static const struct {
        double fraction;
        int64_t n_test;
    } sizes[] = {{0.1, 4}, {0.03, 1}, {0.04, 2}, {0.5, 20}, {0.9, 36}, {0.98, 39}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        load_ok(&train, path, v, SPLIT_CTX, NULL);
        CU_ASSERT_EQUAL_FATAL(pt_textcls_split(&train, sizes[s].fraction, &test, &err), 0);
        CU_ASSERT_EQUAL(test.count, sizes[s].n_test);
        CU_ASSERT_EQUAL(train.count, SPLIT_N - sizes[s].n_test);
        pt_dataset_free(&train);
        pt_dataset_free(&test);
    }

    /* a split that leaves either side empty, or is no fraction, is refused
     * and changes nothing */
    static const double bad[] = {0.01, 0.99, 0.0, 1.0, -0.5, NAN};
    load_ok(&train, path, v, SPLIT_CTX, NULL);
    int32_t *tokens = train.tokens;
    for (size_t s = 0; s < sizeof bad / sizeof bad[0]; s++) {
        memset(&test, 0x5a, sizeof test);
        CU_ASSERT_EQUAL(pt_textcls_split(&train, bad[s], &test, &err), PT_EINPUT);
        printf("\n    fraction %-6g -> %s", bad[s], err.msg);
        CU_ASSERT(s >= 2 || strstr(err.msg, "both need at least one") != NULL);
        CU_ASSERT(is_zeroed(&test));
        CU_ASSERT(train.count == SPLIT_N && train.tokens == tokens);
    }
    printf("\n");
    pt_dataset_free(&train);
    pt_vocab_free(v);
    remove_dir();
}

void test_textcls_test_file(void)
{
    make_dir();
    pt_vocab *v = small_vocab();
    char train_path[512], test_path[512], bad_path[512];
    write_text(train_path, sizeof train_path, "train.tsv", "b\tgod\na\tthe\nc\tin\n");
    write_text(test_path, sizeof test_path, "test.jsonl",
               "{\"text\": \"the\", \"label\": \"c\"}\n{\"text\": \"in\", \"label\": \"a\"}\n");
    pt_dataset train, test;
    load_ok(&train, train_path, v, 4, NULL);
    load_ok(&test, test_path, v, 4, &train);
    CU_ASSERT_EQUAL_FATAL(test.count, 2);
    CU_ASSERT_EQUAL(test.classes, 3);
    CU_ASSERT_EQUAL(test.labels[0], 2);
    CU_ASSERT_EQUAL(test.labels[1], 0);
    CU_ASSERT(test.label_names != train.label_names);
    CU_ASSERT_STRING_EQUAL(test.label_names[2], "c");
    pt_dataset_free(&test);

    /* a label the training file does not have: the test file and line named */
    write_text(bad_path, sizeof bad_path, "bad.tsv", "a\tgod\n\nd\tthe\n");
    pt_err err = {0};
    CU_ASSERT_EQUAL(pt_textcls_load(&test, bad_path, v, 4, &train, &err), PT_EINPUT);
    printf("\n    unknown test label -> %s\n", err.msg);
    char want[600];
    snprintf(want, sizeof want, "%s:3: label 'd' is not among the 3 labels", bad_path);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
    CU_ASSERT(is_zeroed(&test));
    /* against a training file of one label: that label named */
    pt_dataset one;
    char one_path[512];
    write_text(one_path, sizeof one_path, "one.tsv", "b\tgod\nb\tthe\n");
    load_ok(&one, one_path, v, 4, NULL);
    CU_ASSERT_EQUAL(pt_textcls_load(&test, bad_path, v, 4, &one, &err), PT_EINPUT);
    printf("    against one label -> %s\n", err.msg);
    snprintf(want, sizeof want, "%s:1: label 'a' is not the training file's one label 'b'", bad_path);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
    CU_ASSERT(is_zeroed(&test));
    pt_dataset_free(&one);
    /* labels only from a text-classification dataset */
    pt_dataset images;
    CU_ASSERT_EQUAL_FATAL(pt_synthetic_images(&images, 4, 1, 2, 2, 2, 1, &err), 0);
    CU_ASSERT_EQUAL(pt_textcls_load(&test, test_path, v, 4, &images, &err), PT_EINPUT);
    CU_ASSERT(is_zeroed(&test));
    pt_dataset_free(&images);
    pt_dataset_free(&train);
    pt_vocab_free(v);
    remove_dir();
}

/* ------------------------------------------------------- hostile files */

typedef struct {
    const char *name; /* the file's name decides its format */
    const char *text; /* NULL: built by the test */
    size_t len;       /* 0: strlen(text) */
    int line;         /* the line the message must name; 0: "NAME: " */
    const char *word;
} hostile;

#define H(name, text, line, word) {name, text, sizeof(text) - 1, line, word}
static const hostile HOSTILE[] = {
    H("no-tab.tsv", "law\tgod\nlaw god\n", 2, "no tab"),
    H("empty-label.tsv", "\tgod\n", 1, "empty label"),
    H("label-space.tsv", "law\tgod\nlaw \tgod\n", 2, "starts or ends with a space"),
    H("label-leading-space.tsv", " law\tgod\n", 1, "starts or ends with a space"),
    H("label-nul.tsv", "la\0w\tgod\n", 1, "control byte 0x00"),
    H("label-control.tsv", "\n\nl\x1b[31m\tgod\n", 3, "control byte 0x1b"),
    H("label-not-utf8.tsv", "l\xff\tgod\n", 1, "not valid UTF-8"),
    H("label-overlong-utf8.tsv", "l\xc0\xaf\tgod\n", 1, "not valid UTF-8"),
    H("label-surrogate.tsv", "l\xed\xa0\x80\tgod\n", 1, "not valid UTF-8"),
    H("label-cut-utf8.tsv", "l\xe2\x82\tgod\n", 1, "not valid UTF-8"),
    /* characters that print as nothing or as a space: 'law' and one of
     * these would look alike and be two classes */
    H("label-bom-line-2.tsv", "law\tgod\n\xef\xbb\xbflaw\tgod\n", 2, "U+FEFF at byte 1"),
    H("label-nbsp.tsv", "\xc2\xa0law\tgod\n", 1, "U+00A0 at byte 1"),
    H("label-zero-width.tsv", "la\xe2\x80\x8bw\tgod\n", 1, "U+200B at byte 3"),
    H("label-rtl-mark.tsv", "law\xe2\x80\x8f\tgod\n", 1, "U+200F"),
    H("label-c1-control.tsv", "l\xc2\x85" "aw\tgod\n", 1, "U+0085"),
    H("label-ideographic-space.tsv", "major\xe3\x80\x80prophets\tgod\n", 1, "U+3000"),
    H("label-arabic-mark.tsv", "law\xd8\x9c\tgod\n", 1, "U+061C"),
    H("label-variation-selector.tsv", "law\xef\xb8\x8f\tgod\n", 1, "U+FE0F"),
    H("label-hangul-filler.tsv", "\xe3\x85\xa4law\tgod\n", 1, "U+3164"),
    H("label-tag.tsv", "law\xf3\xa0\x81\x81\tgod\n", 1, "U+E0041"),
    /* default-ignorable code points not yet assigned: drawn as nothing
     * too (utf8proc calls them unassigned, not ignorable) */
    H("label-reserved-invisible-operator.tsv", "law\xe2\x81\xa5\tgod\n", 1, "U+2065"),
    H("label-reserved-specials.tsv", "law\xef\xbf\xb0\tgod\n", 1, "U+FFF0"),
    H("label-reserved-tag.tsv", "law\xf3\xa0\x82\x80\tgod\n", 1, "U+E0080"),
    /* the name reports give a class without a label */
    H("label-placeholder.tsv", "law\tgod\n(class 3, no label)\tgod\n", 2,
      "the form reports give a class without a label"),
    H("json-label-nbsp.jsonl", "{\"text\": \"god\", \"label\": \"law\\u00a0\"}\n", 1,
      "U+00A0 at byte 4"),
    H("empty-text.tsv", "law\tgod\nlaw\t\n", 2, "empty text"),
    H("blank-text.tsv", "law\t \f \r\n", 1, "empty text"),
    /* no token either: what the tokenizer drops, and nothing else */
    H("text-only-nul.tsv", "law\tgod\nlaw\t\0\0\n", 2, "every character in it is one the tokenizer drops"),
    H("text-only-bad-utf8.tsv", "law\t\xff\xfe\n", 1, "empty text"),
    H("text-only-zero-width.tsv", "law\t\xe2\x80\x8b\xe2\x80\x8b\n", 1, "empty text"),
    H("json-text-only-nul.jsonl", "{\"text\": \"\\u0000\", \"label\": \"law\"}\n", 1, "empty text"),
    /* labels that print like another: NFD spelling, a leading combining
     * mark, the braille blank */
    H("label-nfd.tsv", "caf\xc3\xa9\tgod\ncafe\xcc\x81\tgod\n", 2, "not in Unicode normalization form C"),
    H("label-combining.tsv", "\xcc\x81\tgod\n", 1, "starts with U+0301, a combining mark"),
    H("label-braille-blank.tsv", "a\xe2\xa0\x80\tgod\n", 1, "U+2800"),
    H("json-label-nfd.jsonl", "{\"text\": \"god\", \"label\": \"cafe\\u0301\"}\n", 1, "form C"),
    /* a lone "\r" inside a line: old Mac line ends would read as one line */
    H("cr-only.tsv", "law\tin the\rlaw\tbeginning\r", 1, "carriage return (byte 0x0d) at byte 11"),
    H("cr-inside.tsv", "law\tgod\r\nlaw\tin\rthe\r\n", 2, "lone \"\\r\""),
    H("cr-in-label.tsv", "la\rw\tgod\n", 1, "carriage return"),
    H("cr-only.jsonl", "{\"text\": \"god\", \"label\": \"law\"}\r{\"text\": \"in\", \"label\": \"law\"}\r",
      1, "lone \"\\r\""),
    H("bad-json.jsonl", "{\"text\": \"god\", \"label\": \"law\"}\n{\"text\": \"god\",\n", 2,
      "bad JSON"),
    H("json-trailing.jsonl", "{\"text\": \"god\", \"label\": \"law\"} x\n", 1, "bad JSON"),
    H("json-two-objects.jsonl", "{\"text\": \"god\", \"label\": \"law\"}{\"a\": 1}\n", 1,
      "bad JSON"),
    H("json-duplicate.jsonl", "{\"text\": \"god\", \"label\": \"law\", \"label\": \"x\"}\n", 1,
      "bad JSON"),
    /* "\u0000" is valid JSON: in a text it is dropped (test_textcls_jsonl),
     * in a label refused like a raw control byte */
    H("json-nul-in-label.jsonl", "{\"text\": \"god\", \"label\": \"l\\u0000aw\"}\n", 1,
      "control byte 0x00"),
    H("json-newlines-text.jsonl", "{\"text\": \"\\n\\r\\n\\t \", \"label\": \"law\"}\n", 1,
      "empty text"),
    H("json-bad-utf8.jsonl", "{\"text\": \"g\xff\", \"label\": \"law\"}\n", 1, "bad JSON"),
    H("json-list.jsonl", "[\"god\", \"law\"]\n", 1, "an array, not an object"),
    H("json-string.jsonl", "\"god\"\n", 1, "a string, not an object"),
    H("json-no-text.jsonl", "{\"txt\": \"god\", \"label\": \"law\"}\n", 1, "no \"text\" key"),
    H("json-no-label.jsonl", "\n{\"text\": \"god\"}\n", 2, "no \"label\" key"),
    H("json-text-number.jsonl", "{\"text\": 3, \"label\": \"law\"}\n", 1,
      "\"text\" is an integer; allowed: a string"),
    H("json-text-null.jsonl", "{\"text\": null, \"label\": \"law\"}\n", 1, "\"text\" is null"),
    H("json-label-real.jsonl", "{\"text\": \"god\", \"label\": 1.5}\n", 1,
      "\"label\" is a real number; allowed: a string or an integer"),
    H("json-label-bool.jsonl", "{\"text\": \"god\", \"label\": true}\n", 1,
      "\"label\" is a boolean"),
    H("json-label-object.jsonl", "{\"text\": \"god\", \"label\": {}}\n", 1,
      "\"label\" is an object"),
    H("json-label-huge.jsonl", "{\"text\": \"god\", \"label\": 99999999999999999999999}\n", 1,
      "bad JSON"),
    H("json-label-empty.jsonl", "{\"text\": \"god\", \"label\": \"\"}\n", 1, "empty label"),
    H("json-label-newline.jsonl", "{\"text\": \"god\", \"label\": \"a\\nb\"}\n", 1,
      "control byte 0x0a"),
    H("json-empty-text.jsonl", "{\"text\": \" \", \"label\": \"law\"}\n", 1, "empty text"),
    /* a column header, which would train as an example of class "label" */
    H("header.tsv", "label\ttext\nlaw\tgod\n", 1, "a column header ('label<TAB>text')"),
    H("header-reversed.tsv", "\xef\xbb\xbf\n Text\tLABEL \r\nlaw\tgod\n", 2,
      "a column header ('Text<TAB>LABEL')"),
    /* only the second field is compared: a header with more columns is one,
     * and one whose second column is empty is a line of three */
    H("header-three-columns.tsv", "label\ttext\tid\nlaw\tgod\t1\n", 1,
      "a column header ('label<TAB>text')"),
    H("header-reversed-more.tsv", "TEXT\tlabel \tsource\tid\n", 1,
      "a column header ('TEXT<TAB>label')"),
    /* other names of the two columns; the other order (GLUE's SST-2 writes
     * sentence<TAB>label) is named as such */
    H("header-sentence.tsv", "label\tsentence\nlaw\tgod\n", 1,
      "a column header ('label<TAB>sentence'); a .tsv file here has none"),
    H("header-sst2.tsv", "sentence\tlabel\nit is good\t1\n", 1,
      "a column header ('sentence<TAB>label') saying the lines are TEXT<TAB>LABEL"),
    H("header-category-review.tsv", "Category\tReview\tid\n", 1,
      "a column header ('Category<TAB>Review')"),
    H("header-two-tabs.tsv", "label\t\ttext\nlaw\tgod\n", 1,
      "3 tab-separated fields (a second tab at byte 7)"),
    /* a field cannot hold a tab: a second one starts a column that would
     * otherwise be read as part of the text */
    H("three-columns.tsv", "law\tgod\nwisdom\tin the beginning\t17\n", 2,
      "3 tab-separated fields (a second tab at byte 24); a line is LABEL<TAB>TEXT"),
    H("tab-at-end.tsv", "law\tgod\t\r\n", 1, "3 tab-separated fields"),
    H("four-columns.tsv", "\xef\xbb\xbflaw\tgod\tx\ty\n", 1,
      "4 tab-separated fields (a second tab at byte 8)"),
    H("empty.tsv", "", 0, "no examples"),
    H("blank.jsonl", "\n \r\n\t\n", 0, "no examples"),
    H("only-bom.tsv", "\xef\xbb\xbf\n", 0, "no examples"),
    H("wrong.csv", "law,god\n", 0, "unknown file type"),
    H("no-extension", "law\tgod\n", 0, "unknown file type"),
    {NULL, NULL, 0, 0, NULL},
};

/* Loads path expecting PT_EINPUT with "PATH:LINE: " (or "PATH: ") and word
 * in the message, and a zeroed dataset. */
static void expect_refused(const char *what, const char *path, const pt_vocab *v, int context,
                           int line, const char *word)
{
    pt_dataset ds;
    pt_err err = {0};
    int rc = pt_textcls_load(&ds, path, v, context, NULL, &err);
    printf("\n    %-28s -> %.200s", what, err.msg);
    CU_ASSERT_EQUAL(rc, PT_EINPUT);
    CU_ASSERT_EQUAL(err.code, PT_EINPUT);
    char want[600];
    if (line)
        snprintf(want, sizeof want, "%s:%d: ", path, line);
    else
        snprintf(want, sizeof want, "%s: ", path);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
    if (word)
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, word));
    CU_ASSERT(is_zeroed(&ds));
}

void test_textcls_hostile(void)
{
    make_dir();
    pt_vocab *v = small_vocab();
    char path[512];
    for (const hostile *h = HOSTILE; h->name; h++) {
        write_bytes(path, sizeof path, h->name, h->text, h->len);
        expect_refused(h->name, path, v, 8, h->line, h->word);
    }

    /* JSON nested deeper than jansson parses: refused, not a stack overflow */
    enum { DEEP = 100000 };
    char *deep = malloc(2 * DEEP + 2);
    CU_ASSERT_FATAL(deep != NULL);
    memset(deep, '[', DEEP);
    memset(deep + DEEP, ']', DEEP);
    deep[2 * DEEP] = '\n';
    write_bytes(path, sizeof path, "deep.jsonl", deep, 2 * DEEP + 1);
    expect_refused("deep.jsonl", path, v, 8, 1, "bad JSON");
    free(deep);

    /* old Mac line ends over more than the 1 MiB a line may hold: the
     * refusal says why the "line" is so long */
    const char rec[] = "law\tin the beginning\r";
    const size_t reps = (2u << 20) / (sizeof rec - 1);
    char *mac = malloc(reps * (sizeof rec - 1));
    CU_ASSERT_FATAL(mac != NULL);
    for (size_t i = 0; i < reps; i++)
        memcpy(mac + i * (sizeof rec - 1), rec, sizeof rec - 1);
    write_bytes(path, sizeof path, "mac.tsv", mac, reps * (sizeof rec - 1));
    expect_refused("mac.tsv", path, v, 8, 1, "lone \"\\r\"");
    free(mac);

    /* not a file, no file, no vocabulary, a context without room */
    pt_dataset ds;
    pt_err err = {0};
    snprintf(path, sizeof path, "%s/adir.tsv", g_dir);
    CU_ASSERT_FATAL(mkdir(path, 0755) == 0);
    CU_ASSERT_EQUAL(pt_textcls_load(&ds, path, v, 8, NULL, &err), PT_EINPUT);
    printf("\n    %-28s -> %s", "a directory", err.msg);
    CU_ASSERT(strstr(err.msg, "not a regular file (a directory)") != NULL);
    CU_ASSERT(is_zeroed(&ds));
    snprintf(path, sizeof path, "%s/missing.tsv", g_dir);
    CU_ASSERT_EQUAL(pt_textcls_load(&ds, path, v, 8, NULL, &err), PT_ESYS);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "missing.tsv"));
    CU_ASSERT(is_zeroed(&ds));
    write_text(path, sizeof path, "good.tsv", "law\tgod\n");
    CU_ASSERT_EQUAL(pt_textcls_load(&ds, path, NULL, 8, NULL, &err), PT_EINPUT);
    CU_ASSERT(is_zeroed(&ds));
    expect_refused("context 1", path, v, 1, 0, "context");
    expect_refused("context above the limit", path, v, PT_DATA_MAX_CONTEXT + 1, 0, "context");
    CU_ASSERT_EQUAL(pt_textcls_check_path(path, &err), 0);
    CU_ASSERT_EQUAL(pt_textcls_check_path("x.JSONL", &err), 0);
    CU_ASSERT_EQUAL(pt_textcls_check_path("x.txt", &err), PT_EINPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "x.txt: unknown file type"));
    printf("\n");
    pt_vocab_free(v);
    remove_dir();
}

/* A line of exactly PT_TEXTCLS_MAX_LINE bytes is read, one more is refused
 * (also as a last line without newline, and in JSONL); 4096 labels are
 * allowed, the 4097th is refused on its line; a label of 256 bytes is
 * allowed, 257 refused. */
void test_textcls_limits(void)
{
    make_dir();
    pt_vocab *v = small_vocab();
    char path[512];
    const size_t max = PT_TEXTCLS_MAX_LINE;
    char *text = malloc(3 * max + 64);
    CU_ASSERT_FATAL(text != NULL);

    /* line 2 of exactly max bytes (then "\r\n"), line 3 of max + 1 */
    size_t n = (size_t)sprintf(text, "law\tgod\n");
    size_t line2 = n;
    n += (size_t)sprintf(text + n, "law\t");
    memset(text + n, 'a', max - (n - line2));
    for (size_t k = n + 1; k < line2 + max; k += 2)
        text[k] = ' ';
    n = line2 + max;
    n += (size_t)sprintf(text + n, "\r\n");
    pt_dataset ds;
    write_bytes(path, sizeof path, "at-limit.tsv", text, n);
    load_ok(&ds, path, v, 8, NULL);
    CU_ASSERT_EQUAL(ds.count, 2);
    pt_dataset_free(&ds);
    size_t line3 = n;
    n += (size_t)sprintf(text + n, "law\t");
    memset(text + n, 'a', max + 1 - (n - line3));
    n = line3 + max + 1;
    write_bytes(path, sizeof path, "over-limit-last.tsv", text, n);
    expect_refused("line of 1 MiB + 1, last", path, v, 8, 3, "longer than 1048576 bytes");
    text[n] = '\n';
    write_bytes(path, sizeof path, "over-limit.tsv", text, n + 1);
    expect_refused("line of 1 MiB + 1", path, v, 8, 3, "longer than 1048576 bytes");
    /* one line of 3 MiB and no newline: refused after 1 MiB of it */
    memset(text, 'x', 3 * max);
    write_bytes(path, sizeof path, "one-long-line.jsonl", text, 3 * max);
    expect_refused("3 MiB without newline", path, v, 8, 1, "longer than");

    /* labels: 4096 distinct ones, then one more */
    const int classes = PT_TEXTCLS_MAX_CLASSES;
    n = 0;
    for (int k = 0; k <= classes; k++)
        n += (size_t)sprintf(text + n, "L%05d\tgod\n", (k * 7919) % (classes + 1));
    write_bytes(path, sizeof path, "too-many-labels.tsv", text, n);
    expect_refused("4097 labels", path, v, 4, classes + 1, "at most 4096 distinct labels");
    write_bytes(path, sizeof path, "most-labels.tsv", text, n - strlen("L00000\tgod\n"));
    load_ok(&ds, path, v, 4, NULL);
    CU_ASSERT_EQUAL(ds.classes, classes);
    for (int k = 1; k < ds.classes; k++)
        CU_ASSERT(strcmp(ds.label_names[k - 1], ds.label_names[k]) < 0);
    CU_ASSERT_EQUAL_FATAL(ds.count, classes);
    for (int64_t i = 0; i < ds.count; i++) { /* the class of each line names its label */
        char name[16];
        snprintf(name, sizeof name, "L%05d", (int)((i * 7919) % (classes + 1)));
        CU_ASSERT_STRING_EQUAL(ds.label_names[ds.labels[i]], name);
    }
    pt_dataset_free(&ds);

    /* label length */
    memset(text, 'l', PT_TEXTCLS_MAX_LABEL + 1);
    memcpy(text + PT_TEXTCLS_MAX_LABEL, "\tgod\n", 6);
    write_text(path, sizeof path, "label-at-limit.tsv", text);
    load_ok(&ds, path, v, 4, NULL);
    CU_ASSERT_EQUAL(strlen(ds.label_names[0]), PT_TEXTCLS_MAX_LABEL);
    pt_dataset_free(&ds);
    memset(text, 'l', PT_TEXTCLS_MAX_LABEL + 1);
    memcpy(text + PT_TEXTCLS_MAX_LABEL + 1, "\tgod\n", 6);
    write_text(path, sizeof path, "label-over-limit.tsv", text);
    expect_refused("label of 257 bytes", path, v, 4, 1, "at most 256 bytes");

    /* a memory limit: every example keeps `context` tokens (36 bytes at
     * context 8), so 100 examples fit in 4096 bytes and 200 do not */
    n = 0;
    for (int k = 0; k < 200; k++)
        n += (size_t)sprintf(text + n, "law\tgod\n");
    pt_data_set_memory_limit(4096);
    write_bytes(path, sizeof path, "fits.tsv", text, n / 2);
    load_ok(&ds, path, v, 8, NULL);
    CU_ASSERT_EQUAL(ds.count, 100);
    pt_dataset_free(&ds);
    write_bytes(path, sizeof path, "past-the-memory-limit.tsv", text, n);
    expect_refused("200 examples past 4096 bytes", path, v, 8, 114, PT_DATA_TOO_BIG);
    pt_data_set_memory_limit(0);
    printf("\n");
    free(text);
    pt_vocab_free(v);
    remove_dir();
}

/* The demo data of scripts/setup.sh with all-MiniLM-L6-v2's vocabulary. */
void test_textcls_kjv(void)
{
    const char *dir = getenv("PT_DATASETS_DIR");
    char tsv[512], vocab[512];
    snprintf(tsv, sizeof tsv, "%s/kjv_books.tsv", dir ? dir : "datasets");
    snprintf(vocab, sizeof vocab, "%s/minilm/vocab.txt", dir ? dir : "datasets");
    if (access(tsv, R_OK) != 0 || access(vocab, R_OK) != 0) {
        printf("skipped: %s or %s is missing (scripts/setup.sh makes them) ", tsv, vocab);
        return;
    }
    pt_vocab *v = NULL;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_vocab_load(&v, vocab, &err), 0);
    pt_dataset train, test;
    load_ok(&train, tsv, v, 128, NULL);
    CU_ASSERT_EQUAL(train.count, 31102);
    static const char *names[] = {"epistles",       "gospels_acts", "history",    "law",
                                  "major_prophets", "minor_prophets", "revelation", "wisdom"};
    CU_ASSERT_EQUAL_FATAL(train.classes, 8);
    for (int k = 0; k < 8; k++)
        CU_ASSERT_STRING_EQUAL(train.label_names[k], names[k]);
    CU_ASSERT_EQUAL(train.labels[0], 3); /* Genesis 1:1 */
    CU_ASSERT_EQUAL(train.labels[train.count - 1], 6);
    /* "In the beginning God created the heaven and the earth." */
    static const int32_t genesis[] = {101, 1999, 1996, 2927, 2643, 2580, 1996, 6014, 1998,
                                      1996, 3011, 1012, 102, END};
    CU_ASSERT(tokens_are(&train, 0, genesis));
    CU_ASSERT_EQUAL_FATAL(pt_textcls_split(&train, 0.1, &test, &err), 0);
    CU_ASSERT_EQUAL(test.count, 3110);
    CU_ASSERT_EQUAL(train.count, 31102 - 3110);
    int per_class[8] = {0};
    for (int64_t i = 0; i < test.count; i++)
        per_class[test.labels[i]]++;
    for (int k = 0; k < 8; k++) /* every part of the Bible is tested */
        CU_ASSERT(per_class[k] > 0);
    pt_dataset_free(&train);
    pt_dataset_free(&test);
    pt_vocab_free(v);
}
