/*
 * report.c: eval's figures by class (report.h). A class is named by its
 * text-classification label, Fashion-MNIST's name, or its number.
 */
#include "launch/report.h"

#include "formats/formats.h"
#include "tokenize/tokenize.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Class k's name in reports: the text classification label, Fashion-MNIST's
 * own name, or its number; a class past a text classification's labels (a
 * model.classes above their count) says it has none, so that it cannot
 * read as a label that is a number. */
static const char *class_name(const pt_session *s, int k, char *buf, size_t n)
{
    const pt_dataset *ds = s->test.label_names ? &s->test : &s->train;
    if (ds->label_names && k < ds->classes)
        return ds->label_names[k];
    if (ds->label_names) {
        snprintf(buf, n, "(class %d, no label)", k);
        return buf;
    }
    if (s->cfg.data.kind == PT_DATA_FASHION_MNIST && pt_fashion_mnist_class(k))
        return pt_fashion_mnist_class(k);
    snprintf(buf, n, "%d", k);
    return buf;
}

void pt_report_print(const pt_session *s, const pt_eval_result *ev)
{
    const pt_eval_averages avg = pt_eval_means(ev);
    if (ev->classes <= 100) {
        printf("by class (predicted: the highest logit; precision, recall and F1 as scikit-learn's "
               "classification_report):\n  examples  predicted  precision  recall      F1  class\n");
        for (int k = 0; k < ev->classes; k++) {
            const pt_class_figures f = pt_eval_class(ev, k);
            char buf[48];
            printf("  %8lld  %9lld     %6.4f  %6.4f  %6.4f  %s\n", (long long)f.examples,
                   (long long)f.predicted, f.precision, f.recall, f.f1, class_name(s, k, buf, sizeof buf));
        }
    }
    printf("macro avg: precision %.4f, recall %.4f, F1 %.4f (%d classes with examples or "
           "predictions)\nweighted avg: precision %.4f, recall %.4f, F1 %.4f\n",
           avg.precision, avg.recall, avg.f1, avg.classes, avg.weighted_precision,
           avg.weighted_recall, avg.weighted_f1);
}

int pt_report_write(const char *path, const pt_session *s, const char *checkpoint,
                    const pt_eval_result *ev, pt_err *err)
{
    json_t *o = json_object(), *classes = json_array(), *conf = json_array();
    const pt_eval_averages avg = pt_eval_means(ev);
    /* a path that is not UTF-8, escaped as the messages show it */
    char shown[4 * PT_PATH_MAX + 64];
    pt_utf8_printable(checkpoint, strlen(checkpoint), shown, sizeof shown);
    json_object_set_new(o, "checkpoint", json_string(shown));
    json_object_set_new(o, "examples", json_integer(ev->examples));
    json_object_set_new(o, "test_loss", pt_json_number(ev->loss));
    json_object_set_new(o, "test_accuracy", pt_json_number(ev->accuracy));
    for (int k = 0; k < ev->classes; k++) {
        const pt_class_figures f = pt_eval_class(ev, k);
        char buf[48];
        json_t *c = json_object(), *row = json_array();
        json_object_set_new(c, "class", json_integer(k));
        json_object_set_new(c, "name", json_string(class_name(s, k, buf, sizeof buf)));
        json_object_set_new(c, "examples", json_integer(f.examples));
        json_object_set_new(c, "predicted", json_integer(f.predicted));
        json_object_set_new(c, "correct", json_integer(f.correct));
        json_object_set_new(c, "precision", pt_json_number(f.precision));
        json_object_set_new(c, "recall", pt_json_number(f.recall));
        json_object_set_new(c, "f1", pt_json_number(f.f1));
        json_array_append_new(classes, c);
        for (int j = 0; j < ev->classes; j++)
            json_array_append_new(row, json_integer(ev->confusion[(size_t)k * ev->classes + j]));
        json_array_append_new(conf, row);
    }
    json_object_set_new(o, "classes", classes);
    json_t *m = json_object();
    json_object_set_new(m, "precision", pt_json_number(avg.precision));
    json_object_set_new(m, "recall", pt_json_number(avg.recall));
    json_object_set_new(m, "f1", pt_json_number(avg.f1));
    json_object_set_new(m, "classes", json_integer(avg.classes));
    json_object_set_new(o, "macro_avg", m);
    json_t *w = json_object();
    json_object_set_new(w, "precision", pt_json_number(avg.weighted_precision));
    json_object_set_new(w, "recall", pt_json_number(avg.weighted_recall));
    json_object_set_new(w, "f1", pt_json_number(avg.weighted_f1));
    json_object_set_new(o, "weighted_avg", w);
    json_object_set_new(o, "confusion", conf); /* [test class][predicted class] */
    char *text = json_dumps(o, JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!text)
        return pt_fail(err, PT_ENOMEM, "out of memory for --report '%s'", path);
    const size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (!line) {
        free(text);
        return pt_fail(err, PT_ENOMEM, "out of memory for --report '%s'", path);
    }
    line[n] = '\n', line[n + 1] = '\0';
    const int rc = pt_write_file_atomic(path, line, n + 1, err);
    free(line);
    return rc;
}
