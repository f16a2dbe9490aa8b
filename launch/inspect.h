/*
 * inspect.h (internal to launch/): `pipetrain inspect`, what a checkpoint
 * holds, read without a run (inspect.c).
 */
#ifndef PT_LAUNCH_INSPECT_H
#define PT_LAUNCH_INSPECT_H

#include "nn/nn.h"

/* Verifies the checkpoint at path (or, for a run directory, its newest
 * checkpoint) and prints on stdout what it holds as one JSON object
 * (checkpoint/checkpoint.h, pt_checkpoint_describe), or with config the
 * configuration its run saved, as YAML that `train` reads back. A directory
 * that is neither, or a checkpoint that does not verify: bad input, named. */
int pt_inspect(const char *path, int config, pt_err *err);

#endif
