/*
 * progress.h (internal to launch/): what a run tells the user and writes for
 * tools. On a terminal, one progress line redrawn in place (step, epoch,
 * loss, samples/s, ETA); otherwise plain lines every `every` steps. Metrics
 * go to a JSON-lines file, one object per event: "event" is "start" (a run
 * of the job begins), "step", "eval", "epoch" (epoch timing), "freeze" (a
 * freeze decision) or "replan".
 */
#ifndef PT_LAUNCH_PROGRESS_H
#define PT_LAUNCH_PROGRESS_H

#include "config/config.h"
#include "formats/formats.h"
#include "nn/nn.h"

#include <stdint.h>
#include <stdio.h>

enum { PT_RATE_RING = 4096 };
#define PT_RATE_WINDOW_S 2.0

typedef struct pt_progress {
    FILE *metrics;      /* NULL: no metrics file */
    char metrics_path[PT_PATH_MAX + 32];
    int metrics_errno;  /* the first failed write's errno (then nothing more is written); 0 */
    int tty;            /* stderr is a terminal */
    int quiet;          /* print nothing (ranks other than 0) */
    int64_t every;      /* steps between plain lines */
    double start;       /* monotonic seconds at open */
    double last_draw;   /* monotonic seconds of the last redraw */
    /* samples/s: the last steps' examples and own seconds (a ring), over
     * at least PT_RATE_WINDOW_S of step time; this process's first step
     * (first touches of memory) counts only until others follow it */
    struct { double s; int64_t n; } ring[PT_RATE_RING];
    int64_t steps;           /* steps reported by this process */
    double rate;             /* last samples/s */
    double first_end;        /* monotonic seconds at the end of this process's first step */
    int line_open;           /* a progress line is drawn without a newline */
} pt_progress;

double pt_now(void);      /* monotonic seconds */
double pt_unix_time(void); /* seconds since 1970 (the wall clock, for logs) */

/* The progress lines (to stderr; none when quiet). */
void pt_progress_open(pt_progress *p, int64_t every, int quiet);
/* RUN_DIR/metrics.jsonl at metrics_path, opened for the progress events
 * (under run.dir's lock: pt_session_open_logs). */
int pt_progress_open_log(pt_progress *p, const char *metrics_path, pt_err *err);
void pt_progress_close(pt_progress *p);

typedef struct pt_step_report {
    int64_t step, total_steps;
    int64_t epoch, epochs;
    int64_t epoch_step, epoch_steps;
    double loss, lr, grad_norm;
    double accuracy; /* the step's rows the model got right while training; NaN: no rows */
    int64_t samples; /* examples in this step */
    double step_s;   /* the step's own wall seconds (no evaluation, checkpoint or logging) */
    /* this rank's gradient all-reduce: bytes sent, seconds in all, seconds
     * left exposed after compute */
    int64_t allreduce_bytes;
    double allreduce_s, allreduce_exposed_s;
} pt_step_report;

void pt_progress_step(pt_progress *p, const pt_step_report *s);
/* Free-form line (ends any open progress line first). */
void pt_progress_note(pt_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A new metrics record {"event": event} to fill with json_object_set_new;
 * NULL when out of memory (pt_progress_metrics then drops it). */
json_t *pt_metrics_event(const char *event);
/* Writes one metrics record as a line and releases it (takes the reference;
 * NULL-safe). */
void pt_progress_metrics(pt_progress *p, json_t *record);
/* Writes record as one JSON line to f (flushed) and releases it: 0, or the
 * errno of a failed write (EIO when the C library gives none). */
int pt_json_line(FILE *f, json_t *record);

#endif
