/*
 * weights.h (internal to launch/): model weights as safetensors, named and
 * shaped like the PyTorch reference model (tests/reference/model.py), so a
 * PyTorch user loads them with load_state_dict.
 */
#ifndef PT_LAUNCH_WEIGHTS_H
#define PT_LAUNCH_WEIGHTS_H

#include "nn/nn.h"

/* Sets every parameter of the segment's units from the file. Strict, like
 * load_state_dict(strict=True): a missing tensor, a shape that differs, a
 * tensor the segment does not have or a value that is NaN or Inf is an error
 * (PT_EINPUT) naming the file and the tensor. */
int pt_weights_load(pt_segment *s, const char *path, pt_err *err);
/* The file's header only, before anything is built: every parameter of
 * model a is there with its shape (PT_EINPUT naming the file and tensor). */
int pt_weights_check_shapes(const pt_arch *a, const char *path, pt_err *err);

/* Writes every parameter of the segment's units. meta: NULL or a
 * NULL-terminated key, value, ... list stored as safetensors metadata. */
int pt_weights_save(const pt_segment *s, const char *path, const char *const *meta, pt_err *err);

#endif
