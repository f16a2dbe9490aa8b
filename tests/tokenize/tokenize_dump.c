/*
 * tokenize_dump: the C side of tokenize_parity. Usage:
 *
 *   tokenize_dump VOCAB LINES MAX_IDS [NORMALIZE]
 *
 * Reads the vocabulary and the file LINES, cuts LINES at every "\n" byte
 * (nothing else: "\r", U+2028 and friends stay inside a line; a last empty
 * piece after a final "\n" is no line) and prints, for each line, the ids of
 * pt_tokenize ([CLS] pieces [SEP]) separated by spaces. MAX_IDS 0 means no
 * truncation. NORMALIZE, three digits 0 or 1, sets lowercase, strip_accents
 * and split_cjk (pt_normalize); without it the vocabulary's default (111,
 * uncased). Exit status 1 with the message on stderr on any error.
 */
#include "tokenize/tokenize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *msg)
{
    fprintf(stderr, "tokenize_dump: %s\n", msg);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5)
        return die("usage: tokenize_dump VOCAB LINES MAX_IDS [NORMALIZE]");
    pt_err err = {0};
    pt_vocab *v = NULL;
    if (pt_vocab_load(&v, argv[1], &err))
        return die(err.msg);
    if (argc == 5) {
        const char *m = argv[4];
        if (strlen(m) != 3 || strspn(m, "01") != 3)
            return die("NORMALIZE is three digits 0 or 1: lowercase, strip_accents, split_cjk");
        pt_vocab_set_normalize(v, (pt_normalize){m[0] == '1', m[1] == '1', m[2] == '1'});
    }
    long max_ids = strtol(argv[3], NULL, 10);
    FILE *f = fopen(argv[2], "rb");
    if (!f)
        return die("cannot open the lines file");
    size_t cap = 1 << 20, n = 0;
    char *text = malloc(cap);
    if (!text)
        return die("out of memory");
    size_t got;
    while ((got = fread(text + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *t = realloc(text, cap *= 2);
            if (!t)
                return die("out of memory");
            text = t;
        }
    }
    if (ferror(f))
        return die("cannot read the lines file");
    fclose(f);
    size_t longest = 0;
    for (size_t a = 0, i = 0; i <= n; i++)
        if (i == n || text[i] == '\n') {
            if (i - a > longest)
                longest = i - a;
            a = i + 1;
        }
    /* MAX_IDS 0 asks for all ids: a piece holds at least one code point and
     * a canonical decomposition at most 4, so 4 per byte is room enough (the
     * check below would catch a wrong estimate) */
    size_t room = max_ids > 0 ? (size_t)max_ids : 4 * longest + 2;
    if (room > 0x7fffffff)
        return die("line too long");
    int32_t *ids = malloc(room * sizeof *ids);
    if (!ids)
        return die("out of memory");
    size_t a = 0;
    while (a < n) {
        char *nl = memchr(text + a, '\n', n - a);
        size_t len = nl ? (size_t)(nl - (text + a)) : n - a;
        int count = 0;
        if (pt_tokenize(v, text + a, len, ids, (int)room, &count, &err))
            return die(err.msg);
        if (max_ids == 0 && (size_t)count == room)
            return die("a line filled the whole output: the room estimate is wrong");
        for (int i = 0; i < count; i++)
            printf(i ? " %d" : "%d", (int)ids[i]);
        putchar('\n');
        a += len + 1;
    }
    free(ids);
    free(text);
    pt_vocab_free(v);
    return fflush(stdout) ? 1 : 0;
}
