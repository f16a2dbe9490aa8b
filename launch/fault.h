/*
 * fault.h (internal to launch/): the failure-injection hook the failure
 * tests use. PIPETRAIN_TEST_FAULT=RANK:STEP:KIND[:POINT] makes world rank RANK
 * fail at optimizer step STEP (1-based) at POINT: `step` (default, before the
 * step runs) or `checkpoint` (while saving, after the unit files are written
 * and before the manifest). KIND is `error` (a reported error), `crash`
 * (SIGKILL, as if the process were lost) or `hang` (stops answering).
 * Unset, it costs one getenv per call.
 */
#ifndef PT_LAUNCH_FAULT_H
#define PT_LAUNCH_FAULT_H

#include "nn/nn.h"

#include <stdint.h>

int pt_test_fault(const char *point, int rank, int64_t step, pt_err *err);

#endif
