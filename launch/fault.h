/*
 * fault.h (internal to launch/): the failure-injection hook the failure
 * tests use. PIPETRAIN_TEST_FAULT=RANK:STEP:KIND[:POINT] makes world rank RANK
 * fail at optimizer step STEP (1-based) at POINT: `step` (default, before the
 * step runs), or one of the phases of saving the checkpoint of step STEP:
 * `checkpoint-prepared` (the step directory is empty), `checkpoint-writing`
 * (a unit file is half written under its temporary name), `checkpoint` (the
 * unit files are written, the manifest is not) and `checkpoint-manifest` (the
 * manifest is written, older checkpoints are not pruned yet). KIND is `error`
 * (a reported error), `crash` (SIGKILL, as if the process were lost) or
 * `hang` (stops answering).
 * Unset, it costs one getenv per call.
 */
#ifndef PT_LAUNCH_FAULT_H
#define PT_LAUNCH_FAULT_H

#include "nn/nn.h"

#include <stdint.h>

int pt_test_fault(const char *point, int rank, int64_t step, pt_err *err);

#endif
