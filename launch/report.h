/*
 * report.h (internal to launch/): eval's figures by class, as a table on
 * stdout and as --report's JSON (report.c). The figures themselves come from
 * train/ (pt_eval_class, pt_eval_means).
 */
#ifndef PT_LAUNCH_REPORT_H
#define PT_LAUNCH_REPORT_H

#include "launch/session.h"

/* Each class's examples, predictions, precision, recall and F1 (up to 100
 * classes; above that only the means), then the macro and weighted means. */
void pt_report_print(const pt_session *s, const pt_eval_result *ev);

/* --report: the same figures, named, with the confusion matrix, written
 * atomically to path (which the caller has checked). */
int pt_report_write(const char *path, const pt_session *s, const char *checkpoint,
                    const pt_eval_result *ev, pt_err *err);

#endif
