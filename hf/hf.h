/*
 * hf.h: the public interface of the hf module: Hugging Face BERT model files
 * (config.json and model.safetensors with transformers' tensor names) read
 * into and written from pipetrain's bert units.
 *
 * The mapping, per encoder layer N (HF names; a "bert." prefix, as
 * BertForSequenceClassification saves them, is accepted on reading):
 *   embeddings.word_embeddings.weight      -> embed.word.weight
 *   embeddings.position_embeddings.weight  -> embed.pos.weight
 *   embeddings.token_type_embeddings.weight-> embed.type.weight
 *   embeddings.LayerNorm.{weight,bias}     -> embed.ln.*
 *   encoder.layer.N.attention.self.{query,key,value}.{weight,bias}
 *                                          -> blocks.N.attn.qkv.* (rows q, k, v)
 *   encoder.layer.N.attention.output.dense.*      -> blocks.N.attn.proj.*
 *   encoder.layer.N.attention.output.LayerNorm.*  -> blocks.N.attn.ln.*
 *   encoder.layer.N.intermediate.dense.*          -> blocks.N.mlp.fc1.*
 *   encoder.layer.N.output.dense.*                -> blocks.N.mlp.fc2.*
 *   encoder.layer.N.output.LayerNorm.*            -> blocks.N.mlp.ln.*
 * The classifier (head.fc.*) is pipetrain's own and keeps its own names: it
 * is written under them, and read when the file has them (a pipetrain
 * export, to continue from it); otherwise it starts from the seed. Tensors a BERT file may
 * carry that the model does not use are ignored on reading: pooler.*,
 * embeddings.position_ids, classifier.*, cls.* (pre-training heads). Any other
 * tensor is refused, so a file with more layers than model.layers is an
 * error, not a silent truncation.
 *
 * Functions return 0 or a PT_E* code with a message naming the file and the
 * tensor or config field; nothing here prints or exits.
 */
#ifndef PT_HF_H
#define PT_HF_H

#include "nn/nn.h"

/* What a BERT config.json says (the fields pipetrain's bert depends on). */
typedef struct pt_hf_bert_config {
    /* pad_id: -1 where pad_token_id is null (no padding row) */
    int hidden, layers, heads, intermediate, vocab, positions, type_vocab, pad_id;
    double ln_eps;
    /* hidden_dropout_prob, attention_probs_dropout_prob (transformers' 0.1
     * where the file has none): what model.dropout and
     * model.attention_dropout's auto take */
    double hidden_dropout, attn_dropout;
    /* classifier_dropout where it is a number, else -1 (absent or null) */
    double classifier_dropout;
} pt_hf_bert_config;

/* Reads a config.json. Refused (PT_EINPUT, "PATH: field: problem"): not
 * JSON, model_type other than "bert", a missing or non-integer size, sizes
 * out of range, hidden_act other than "gelu" (the erf GELU), a
 * position_embedding_type other than "absolute", a dropout probability that
 * is not a number in [0, 1). */
int pt_hf_bert_config_read(const char *path, pt_hf_bert_config *out, pt_err *err);

/* The first difference between the config and the arch, as the pipetrain
 * config key that differs and a message ("model.dim is 64, but PATH says
 * hidden_size 384"); 0 and key "" when they agree. */
int pt_hf_bert_config_check(const pt_hf_bert_config *c, const pt_arch *a, const char *path,
                            const char **key, pt_err *err);

/* The model files under path: a directory holding model.safetensors (and
 * config.json), or a .safetensors file (with config.json beside it or not).
 * weights gets the safetensors path; config the config.json path, or "" when
 * there is none. */
int pt_hf_paths(const char *path, char *weights, size_t wn, char *config, size_t cn, pt_err *err);

/* Sets the parameters of the segment's encoder units (embed, blocks) from a
 * BERT model.safetensors, and the head's when the file has head.fc.weight
 * and head.fc.bias (else the head keeps its values). Strict: a missing
 * tensor, a shape that differs, a value that is NaN or Inf, or a tensor the
 * model has no place for is PT_EINPUT naming the file and the tensor. */
int pt_hf_bert_load(pt_segment *s, const char *weights_path, int *head_loaded, pt_err *err);
/* The same file's header only, before anything is built: every tensor the
 * model a needs is there with its shape (PT_EINPUT naming the file and the
 * tensor, as the load would). */
int pt_hf_bert_check_shapes(const pt_arch *a, const char *weights_path, pt_err *err);

/* The class names of a config.json's id2label in class order (what
 * pipetrain's export writes, and transformers' classifiers carry): *names
 * gets n malloc'd strings in a malloc'd array, or NULL and n = 0 when the
 * file has no id2label. Keys must be 0..n-1 once each and values strings
 * (PT_EINPUT naming the file). Free with pt_hf_labels_free. */
int pt_hf_bert_labels_read(const char *path, char ***names, int *n, pt_err *err);
void pt_hf_labels_free(char **names, int n);

/* How a tokenizer_config.json (transformers' BertTokenizer keys) says text
 * is normalised, each 0 or 1: do_lower_case (1 where absent),
 * strip_accents (-1 where absent or null: transformers then follows
 * do_lower_case), tokenize_chinese_chars (1 where absent). */
typedef struct pt_hf_normalizer {
    int lowercase, strip_accents, split_cjk;
} pt_hf_normalizer;

/* Reads a tokenizer_config.json's fields of `want` (bit 0 do_lower_case,
 * bit 1 strip_accents, bit 2 tokenize_chinese_chars; the others keep their
 * defaults): *found 0 and the defaults when path is not there; PT_EINPUT
 * naming the file (and the field, whose bit number goes to *field, else -1)
 * when it is a link to nothing, not a regular file, not a JSON object, or
 * a wanted field is of another type (a boolean, or null for strip_accents).
 * Numbers are read as reals, so an integer beyond 64 bits elsewhere (what
 * transformers writes for an unknown model_max_length) is no error. */
int pt_hf_tokenizer_config_read(const char *path, int want, pt_hf_normalizer *out, int *found,
                                int *field, pt_err *err);

/* The tokenizer an export carries: vocab.txt's bytes (vocab lines), the
 * tokens per example the model trained with, and its normalisation (each 0
 * or 1, strip_accents included). */
typedef struct pt_hf_tokenizer {
    const char *vocab;
    size_t vocab_bytes;
    int context;
    pt_hf_normalizer norm;
} pt_hf_tokenizer;

/* Checks that a vocab.txt's bytes hold at most `lines` lines (the last may
 * lack its newline), the model's vocabulary: fewer is a padded embedding,
 * as training allows: 0, or PT_EINPUT naming path. */
int pt_hf_vocab_check(const char *path, const char *text, size_t n, int lines, pt_err *err);

/* Writes the segment's units (the whole model) under Hugging Face's names
 * into dir/model.safetensors and the matching dir/config.json (BertModel,
 * with the dropout probabilities the model trained with, and id2label and
 * label2id from labels[0..n_labels) when n_labels > 0), and with tok
 * dir/vocab.txt and dir/tokenizer_config.json (BertTokenizer with tok's
 * do_lower_case, strip_accents and tokenize_chinese_chars, special tokens
 * in texts split as text, as tokenize/ does; tok NULL: none, and a
 * vocab.txt or tokenizer_config.json in dir is left as it is: the caller
 * decides whether the directory may hold one, interop/export.c refuses it),
 * each atomically, config.json last; what cannot be written fails before
 * any file is replaced. dir is created if missing.
 * The classifier goes into model.safetensors as head.fc.weight and
 * head.fc.bias. */
int pt_hf_bert_save(const pt_segment *s, const char *dir, const char *const *labels, int n_labels,
                    const pt_hf_tokenizer *tok, pt_err *err);

#endif
