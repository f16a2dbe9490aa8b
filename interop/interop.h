/*
 * interop.h: model weights exchanged with other programs. model.init_from,
 * the weights a run starts from: pipetrain's own safetensors (the PyTorch
 * reference model's names), or for a bert a Hugging Face BERT directory,
 * whose config.json must describe the model.* keys, sets the dropout left
 * at auto and names the labels a classifier was trained for, and whose
 * vocab.txt and tokenizer_config.json are compared with the run's. The
 * tokenizer_config.json beside data.vocab, which the normalisation keys at
 * auto read. `pipetrain export`: a checkpoint's weights written back for
 * PyTorch, or for transformers as a Hugging Face model directory.
 * weights.c: the PyTorch-named safetensors; init_from.c: model.init_from;
 * tokenizer.c: data.vocab's tokenizer_config.json; export.c: the export.
 * The Hugging Face file formats themselves are hf/'s.
 */
#ifndef PT_INTEROP_H
#define PT_INTEROP_H

#include "config/config.h"
#include "data/data.h"
#include "hf/hf.h"
#include "nn/nn.h"

/* --- weights.c: safetensors named and shaped like the PyTorch reference
 * model (tests/reference/model.py), so a PyTorch user loads them with
 * load_state_dict. */

/* Sets every parameter of the segment's units from the file. Strict, like
 * load_state_dict(strict=True): a missing tensor, a shape that differs, a
 * tensor the segment does not have or a value that is NaN or Inf is an error
 * (PT_EINPUT) naming the file and the tensor. */
int pt_weights_load(pt_segment *s, const char *path, pt_err *err);
/* The file's header only, before anything is built: every parameter of
 * model a is there with its shape (PT_EINPUT naming the file and tensor). */
int pt_weights_check_shapes(const pt_arch *a, const char *path, pt_err *err);
/* What the weights' shapes cannot tell, as the file's metadata records it
 * (pipetrain export writes model.heads and model.ln_eps): one that differs
 * from model a is PT_EINPUT with *key the model.* key, a value that is not
 * one PT_EINPUT with *key NULL; *recorded: which the file records
 * (PT_RECORDED_HEADS | PT_RECORDED_LN_EPS). */
enum { PT_RECORDED_HEADS = 1, PT_RECORDED_LN_EPS = 2 };
int pt_weights_check_recorded(const pt_arch *a, const char *path, const char **key, int *recorded,
                              pt_err *err);
/* Writes every parameter of the segment's units. meta: NULL or a
 * NULL-terminated key, value, ... list stored as safetensors metadata. */
int pt_weights_save(const pt_segment *s, const char *path, const char *const *meta, pt_err *err);

/* --- init_from.c: model.init_from. Errors are PT_EINPUT naming the key
 * (model.init_from, or the model.* key its config.json contradicts) and the
 * file. */

/* Before anything is built (its headers only): its config.json describes
 * the model.* keys, and every tensor the model a needs is there with its
 * shape; the load's messages. */
int pt_init_from_check(const pt_config *c, const pt_arch *a, pt_err *err);
/* Its weights into seg (a classifier's labels checked against data's;
 * `note`: this process says when they cannot be). */
int pt_init_from_load(pt_segment *seg, const pt_config *c, const pt_dataset *data, int note,
                      pt_err *err);
/* Its files' digest ("" when none or unreadable), which every rank
 * compares with rank 0's. */
void pt_init_from_digest(const pt_config *c, char hex[65]);
/* model.dropout and model.attention_dropout left at auto, into a: 0, or for
 * a bert the config.json beside its weights' (checked against the model.*
 * keys then, before the model is allocated). `note`: this process says
 * when that file's classifier_dropout is not used. */
int pt_init_from_dropout(const pt_config *c, pt_arch *a, int note, pt_err *err);
/* A vit or gpt taking its weights: a note naming what of model.heads and
 * model.ln_eps the file does not record (pt_weights_check_recorded). A
 * bert taking its weights: a note when data.vocab differs from the
 * vocab.txt beside them (the ids reach rows pretrained for other tokens),
 * one when the run normalises texts otherwise than the
 * tokenizer_config.json beside them says, and one when no config.json is
 * beside them (model.heads and model.ln_eps go unchecked; for a run that
 * trains, dropout left at auto is 0). One process of a job calls it. */
void pt_init_from_notes(const pt_config *c, int training);
/* The files it reads or would read, for commands that must not write over
 * them: the weights, and for a bert the config.json, vocab.txt and
 * tokenizer_config.json beside them (whether they exist or not: one written
 * there would be read next time); "" for none. Each buffer holds
 * PT_PATH_MAX + 32 bytes; tokenizer may be NULL. */
void pt_init_from_files(const pt_config *c, char *weights, char *config, char *vocab,
                        char *tokenizer);

/* --- tokenizer.c */

/* The tokenizer_config.json beside data.vocab (whether it exists or not),
 * which data.lowercase, data.strip_accents and data.split_cjk at auto read;
 * out holds PT_PATH_MAX + 32 bytes. */
void pt_tokenizer_config_path(const pt_config *c, char *out);
/* data.lowercase, data.strip_accents and data.split_cjk, those at auto
 * taken from that file (tokenizer.c says how) and set in c: each 0 or 1 in
 * out. PT_EINPUT naming the key and the file when it cannot be read. */
int pt_resolve_normalize(pt_config *c, pt_hf_normalizer *out, pt_err *err);

/* --- export.c: `pipetrain export` */

/* Writes checkpoint ckpt's weights to out: one safetensors file with the
 * PyTorch reference model's names, or for model.kind bert a Hugging Face
 * model directory (model.safetensors, config.json, and the run's vocab.txt
 * with a tokenizer_config.json while data.vocab is still the run's). Every
 * output is checked before the work (outputs/outputs.h): bad input, with the
 * path named, when it cannot be written or would replace an input. version
 * goes into the file's metadata. Prints what it wrote. */
int pt_export(const char *ckpt, const char *out, const char *version, pt_err *err);

#endif
