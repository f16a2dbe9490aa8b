/*
 * tokenizer.c: the tokenizer_config.json beside data.vocab, which the
 * normalisation keys left at auto (data.lowercase, data.strip_accents,
 * data.split_cjk) read, as transformers' AutoTokenizer does.
 */
#include "interop/interop.h"

#include <stdio.h>
#include <string.h>

void pt_tokenizer_config_path(const pt_config *c, char *out)
{
    const char *slash = strrchr(c->data.vocab, '/');
    snprintf(out, PT_PATH_MAX + 32, "%.*stokenizer_config.json",
             slash ? (int)(slash - c->data.vocab + 1) : 0, c->data.vocab);
}

/* How the texts are normalised, into out and c: data.lowercase, data.strip_accents and
 * data.split_cjk, where left at auto from the tokenizer_config.json beside
 * data.vocab as transformers' AutoTokenizer reads it (do_lower_case,
 * strip_accents, tokenize_chinese_chars; uncased, with accents stripped,
 * where there is none, and strip_accents following data.lowercase where it
 * names none). A value set in the config wins, as a from_pretrained keyword
 * does. The values go into the session's config, so the checkpoints record
 * them: an eval, an export or a resume of one tokenizes as the run did,
 * whatever that file says later. */
int pt_resolve_normalize(pt_config *c, pt_hf_normalizer *out, pt_err *err)
{
    int *const value[3] = {&c->data.lowercase, &c->data.strip_accents, &c->data.split_cjk};
    static const char *const key[3] = {"data.lowercase", "data.strip_accents", "data.split_cjk"};
    int first_auto = -1, want = 0;
    for (int i = 2; i >= 0; i--)
        if (*value[i] == PT_AUTO) {
            first_auto = i;
            want |= 1 << i;
        }
    if (first_auto >= 0) {
        char path[PT_PATH_MAX + 32];
        pt_hf_normalizer hn;
        int found, field;
        pt_tokenizer_config_path(c, path);
        if (pt_hf_tokenizer_config_read(path, want, &hn, &found, &field, err))
            return pt_config_key_prefix(c, err, key[field >= 0 ? field : first_auto]);
        if (c->data.lowercase == PT_AUTO)
            c->data.lowercase = hn.lowercase;
        if (c->data.strip_accents == PT_AUTO)
            c->data.strip_accents = hn.strip_accents >= 0 ? hn.strip_accents : c->data.lowercase;
        if (c->data.split_cjk == PT_AUTO)
            c->data.split_cjk = hn.split_cjk;
    }
    *out = (pt_hf_normalizer){c->data.lowercase, c->data.strip_accents, c->data.split_cjk};
    return 0;
}
