/*
 * progress.c: the progress line, plain log lines and the metrics file.
 * Metrics lines are JSON objects written by jansson; numbers keep 17
 * significant digits (a double round-trips), so tests can compare runs bit
 * for bit from them, and a non-finite number is written as null.
 */
#include "launch/progress.h"

#include "tokenize/tokenize.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double pt_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double pt_unix_time(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void pt_progress_open(pt_progress *p, int64_t every, int quiet)
{
    memset(p, 0, sizeof *p);
    p->tty = isatty(STDERR_FILENO);
    p->quiet = quiet;
    p->every = every > 0 ? every : 1;
    p->start = pt_now();
}

int pt_progress_open_log(pt_progress *p, const char *metrics_path, pt_err *err)
{
    int rc = pt_log_open(metrics_path, &p->metrics, err);
    if (rc == 0)
        snprintf(p->metrics_path, sizeof p->metrics_path, "%s", metrics_path);
    return rc;
}

void pt_progress_close(pt_progress *p)
{
    if (p->line_open)
        fputc('\n', stderr);
    p->line_open = 0;
    if (p->metrics)
        fclose(p->metrics);
    p->metrics = NULL;
}

static void format_duration(double s, char *out, size_t n)
{
    if (!(s >= 0) || s > 1e8)
        snprintf(out, n, "?");
    else if (s < 60)
        snprintf(out, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(out, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(out, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

void pt_progress_step(pt_progress *p, const pt_step_report *s)
{
    double now = pt_now();
    if (p->steps == 0)
        p->first_end = now;
    p->ring[p->steps % PT_RATE_RING].s = s->step_s;
    p->ring[p->steps % PT_RATE_RING].n = s->samples;
    p->steps++;
    /* samples/s over the newest steps that together took at least the
     * window (all of them while fewer), without the first step once there
     * are others: steady, and not lowered by evaluations or checkpoints */
    double secs = 0.0;
    int64_t n = 0;
    const int64_t oldest = p->steps > PT_RATE_RING ? p->steps - PT_RATE_RING : (p->steps > 1);
    for (int64_t i = p->steps - 1; i >= oldest && secs < PT_RATE_WINDOW_S; i--) {
        secs += p->ring[i % PT_RATE_RING].s;
        n += p->ring[i % PT_RATE_RING].n;
    }
    if (secs > 0.0)
        p->rate = (double)n / secs;
    if (p->metrics) {
        json_t *o = pt_metrics_event("step");
        json_object_set_new(o, "step", json_integer(s->step));
        json_object_set_new(o, "epoch", json_integer(s->epoch));
        json_object_set_new(o, "loss", pt_json_number(s->loss));
        json_object_set_new(o, "train_accuracy", pt_json_number(s->accuracy));
        json_object_set_new(o, "lr", pt_json_number(s->lr));
        json_object_set_new(o, "grad_norm", pt_json_number(s->grad_norm));
        json_object_set_new(o, "samples_per_s", pt_json_number(p->rate));
        json_object_set_new(o, "step_s", pt_json_number(s->step_s));
        json_object_set_new(o, "allreduce_bytes", json_integer(s->allreduce_bytes));
        json_object_set_new(o, "allreduce_s", pt_json_number(s->allreduce_s));
        json_object_set_new(o, "allreduce_exposed_s", pt_json_number(s->allreduce_exposed_s));
        json_object_set_new(o, "time_s", pt_json_number(now - p->start));
        pt_progress_metrics(p, o);
    }
    if (p->quiet)
        return;
    /* the wall time per step since this process's first step, evaluations
     * and checkpoints included (they recur); the first step's own time
     * until there is more */
    const double per_step = p->steps > 1 ? (now - p->first_end) / (double)(p->steps - 1) : s->step_s;
    char eta[32];
    format_duration(per_step * (double)(s->total_steps - s->step), eta, sizeof eta);
    if (p->tty) {
        if (now - p->last_draw < 0.2 && s->step != s->total_steps)
            return;
        p->last_draw = now;
        fprintf(stderr, "\r\033[Kepoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %s",
                (long long)s->epoch + 1, (long long)s->epochs, (long long)s->step,
                (long long)s->total_steps, s->loss, p->rate, eta);
        p->line_open = 1;
    } else if (s->step % p->every == 0 || s->step == s->total_steps) {
        fprintf(stderr,
                "epoch %lld/%lld step %lld/%lld loss %.4f lr %.3g grad_norm %.3g %.0f samples/s "
                "ETA %s\n",
                (long long)s->epoch + 1, (long long)s->epochs, (long long)s->step,
                (long long)s->total_steps, s->loss, s->lr, s->grad_norm, p->rate, eta);
    }
    fflush(stderr);
}

void pt_progress_note(pt_progress *p, const char *fmt, ...)
{
    if (p->quiet)
        return;
    /* the whole line in one write: stderr is unbuffered, and under mpirun
     * another rank's output could land between the text and its newline */
    char line[4096], *text = line;
    const int open = p->line_open;
    p->line_open = 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + open, sizeof line - open - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n + open + 1 >= sizeof line && (text = malloc((size_t)n + open + 2))) {
        va_start(ap, fmt);
        vsnprintf(text + open, (size_t)n + 1, fmt, ap);
        va_end(ap);
    } else if (!text) { /* no room for the longer line: the first part of it */
        text = line;
        n = (int)(sizeof line - open - 2);
    }
    /* controls but newline and tab, bytes that are not UTF-8 and
     * bidirectional controls as \xNN (a run.dir holding a carriage return
     * redrew the line), where there is memory for it */
    const size_t cap = 4 * (size_t)n + 3;
    char *shown = malloc(cap + 1);
    if (shown) {
        shown[0] = '\n';
        pt_utf8_printable(text + open, (size_t)n, shown + open, cap - open);
        const size_t len = strlen(shown + open) + open;
        shown[len] = '\n';
        fwrite(shown, 1, len + 1, stderr);
        free(shown);
    } else {
        if (open)
            text[0] = '\n';
        text[open + n] = '\n';
        fwrite(text, 1, (size_t)n + open + 1, stderr);
    }
    fflush(stderr);
    if (text != line)
        free(text);
}

json_t *pt_metrics_event(const char *event)
{
    return json_pack("{s:s}", "event", event);
}

int pt_json_line(FILE *f, json_t *record)
{
    /* json_object_set_new on a NULL record is a no-op, so a failed
     * allocation anywhere ends here as a dropped line, never a crash */
    char *text = record ? json_dumps(record, JSON_PRESERVE_ORDER) : NULL;
    int rc = 0;
    if (text) {
        errno = 0;
        if (fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f) != 0 || ferror(f))
            rc = errno ? errno : EIO;
    }
    free(text);
    json_decref(record);
    return rc;
}

void pt_progress_metrics(pt_progress *p, json_t *record)
{
    if (p->metrics && !p->metrics_errno)
        p->metrics_errno = pt_json_line(p->metrics, record);
    else
        json_decref(record);
}
