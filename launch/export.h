/*
 * export.h (internal to launch/): `pipetrain export`, a checkpoint's weights
 * written for PyTorch (export.c).
 */
#ifndef PT_LAUNCH_EXPORT_H
#define PT_LAUNCH_EXPORT_H

#include "nn/nn.h"

/* Writes checkpoint ckpt's weights to out: one safetensors file with the
 * PyTorch reference model's names, or for model.kind bert a Hugging Face
 * model directory (model.safetensors, config.json, and the run's vocab.txt
 * with a tokenizer_config.json while data.vocab is still the run's). Every
 * output is checked before the work (outputs/outputs.h): bad input, with the
 * path named, when it cannot be written or would replace an input. version
 * goes into the file's metadata. Prints what it wrote. */
int pt_export(const char *ckpt, const char *out, const char *version, pt_err *err);

#endif
