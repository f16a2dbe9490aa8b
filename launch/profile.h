/*
 * profile.h (internal to launch/): the planner's measured inputs (train.h's
 * pt_profile) as JSON. Every checkpoint's manifest carries the profile its
 * run planned from, so a resume plans the same layouts; every training run
 * writes RUN_DIR/profile.json; pipeline.profile hands such a file to a new
 * run. Files are untrusted: every value is checked, and an error names the
 * file and the key.
 */
#ifndef PT_LAUNCH_PROFILE_H
#define PT_LAUNCH_PROFILE_H

#include "train/train.h"

#include <jansson.h>

/* The profile as a JSON object (with the model it was measured for); NULL
 * when out of memory. */
json_t *pt_profile_json(const pt_profile *p, const pt_arch *arch);
/* Parses a profile object into *out (free with pt_profile_free). It must
 * have been measured for the model `arch`. `where` names the file in
 * errors. PT_EINPUT when anything is malformed or out of range. */
int pt_profile_parse(const json_t *o, const pt_arch *arch, const char *where, pt_profile *out,
                     pt_err *err);
/* A profile file (profile.json), read and parsed. */
int pt_profile_read(const char *path, const pt_arch *arch, pt_profile *out, pt_err *err);
/* Writes one atomically. */
int pt_profile_write(const char *path, const pt_profile *p, const pt_arch *arch, pt_err *err);

#endif
