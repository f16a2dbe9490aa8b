/*
 * schema.h (internal to config/): one row per configuration key, and the
 * helpers config.c, yaml.c and check.c share. See schema.c for the table and
 * config.c for how it is applied.
 */
#ifndef PT_CONFIG_SCHEMA_H
#define PT_CONFIG_SCHEMA_H

#include "config/config.h"

#include <stddef.h>

typedef enum { PT_K_INT, PT_K_I64, PT_K_FLOAT, PT_K_BOOL, PT_K_STR, PT_K_ENUM } pt_key_type;

enum {
    PT_F_MIN_EXCL = 1, /* the minimum itself is not allowed */
    PT_F_MAX_EXCL = 2, /* the maximum itself is not allowed */
    PT_F_AUTO = 4,     /* integer, number or boolean key that also accepts `auto` (stored as PT_AUTO) */
    PT_F_FILE = 8,     /* a path to an existing file, checked when the data kind uses it */
    PT_F_DIR = 16      /* a directory: a trailing '/' is dropped (the root stays '/'), so the
                        * paths composed from it and the messages naming them have no '//' */
};

typedef struct pt_key_spec {
    const char *key;
    pt_key_type type;
    size_t offset, size; /* of the field in pt_config */
    double min, max;     /* numbers: allowed range */
    const char *const *words; /* enums: the allowed words (NULL-terminated), stored as their index */
    int flags;
    const char *def;     /* default, written as in YAML */
    const char *doc;
} pt_key_spec;

extern const pt_key_spec pt_config_keys[];
extern const int pt_config_key_count;

/* Index of key in pt_config_keys, or -1. */
int pt_config_find_key(const char *key);
/* Whether name is a section: the part before the dot of some key. */
int pt_config_is_section(const char *name);
/* " (did you mean 'x'?)" for the closest known key, or a pointer to `pipetrain keys`. */
void pt_config_suggest(const char *key, char *out, size_t n);
/* The same for a name used as a section: the nearest section by its name
 * (" (did you mean section 'train'?)"), else as pt_config_suggest. */
void pt_config_suggest_section(const char *name, char *out, size_t n);
/* Parses text into key ki of c. where: "FILE:LINE", "--set" or "default". */
int pt_config_set_value(pt_config *c, int ki, const char *text, const char *where, pt_err *err);
/* PT_EINPUT "WHERE: KEY: WHY 'TEXT'; allowed: ..." */
int pt_config_bad_value(pt_err *err, const char *where, const pt_key_spec *k, const char *text,
                        const char *why);

#endif
