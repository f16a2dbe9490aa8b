/*
 * test_eval_figures.c: the figures by class evaluation reports
 * (pt_eval_class, pt_eval_means) on confusion matrices worked out by hand,
 * with scikit-learn's classification_report as the definition: a class
 * with examples it never predicts, one predicted without examples (both
 * 0 precision and recall, both in the means), one with neither (left out of
 * the means), and no counts at all.
 */
#include "train/train.h"
#include "tests/common/cunit_main.h"

#include <math.h>

#define NEAR(a, b) CU_ASSERT(fabs((a) - (b)) < 1e-12)

static void test_hand_matrix(void)
{
    /* rows: the test class, columns: the predicted class */
    int64_t m[5][5] = {{3, 0, 0, 1, 0},  /* 4 examples, 3 right, one taken for class 3 */
                       {2, 0, 0, 0, 0},  /* 2 examples, never predicted */
                       {0, 0, 0, 0, 0},  /* neither examples nor predictions */
                       {0, 0, 0, 0, 0},  /* no examples, predicted twice */
                       {0, 0, 0, 1, 2}}; /* 3 examples, 2 right */
    pt_eval_result e = {0};
    e.classes = 5;
    e.confusion = &m[0][0];
    const pt_class_figures c0 = pt_eval_class(&e, 0), c1 = pt_eval_class(&e, 1),
                           c2 = pt_eval_class(&e, 2), c3 = pt_eval_class(&e, 3),
                           c4 = pt_eval_class(&e, 4);
    CU_ASSERT(c0.examples == 4 && c0.predicted == 5 && c0.correct == 3);
    NEAR(c0.precision, 0.6);
    NEAR(c0.recall, 0.75);
    NEAR(c0.f1, 2.0 / 3.0);
    CU_ASSERT(c1.examples == 2 && c1.predicted == 0 && c1.correct == 0);
    CU_ASSERT(c1.precision == 0 && c1.recall == 0 && c1.f1 == 0);
    CU_ASSERT(c2.examples == 0 && c2.predicted == 0);
    CU_ASSERT(c3.examples == 0 && c3.predicted == 2 && c3.precision == 0 && c3.recall == 0);
    CU_ASSERT(c4.examples == 3 && c4.predicted == 2 && c4.correct == 2);
    NEAR(c4.precision, 1.0);
    NEAR(c4.recall, 2.0 / 3.0);
    NEAR(c4.f1, 0.8);
    const pt_eval_averages a = pt_eval_means(&e);
    CU_ASSERT_EQUAL(a.classes, 4); /* class 2 has neither */
    NEAR(a.precision, (0.6 + 0 + 0 + 1.0) / 4);
    NEAR(a.recall, (0.75 + 0 + 0 + 2.0 / 3.0) / 4);
    NEAR(a.f1, (2.0 / 3.0 + 0 + 0 + 0.8) / 4);
    NEAR(a.weighted_precision, (0.6 * 4 + 1.0 * 3) / 9);
    NEAR(a.weighted_recall, (0.75 * 4 + 2.0 / 3.0 * 3) / 9); /* the accuracy, 5 of 9 */
    NEAR(a.weighted_f1, (2.0 / 3.0 * 4 + 0.8 * 3) / 9);
    /* out of range: nothing */
    const pt_class_figures out = pt_eval_class(&e, 5);
    CU_ASSERT(out.examples == 0 && out.predicted == 0 && out.f1 == 0);
}

static void test_no_counts(void)
{
    int64_t m[3][3] = {{0}};
    pt_eval_result e = {0};
    e.classes = 3;
    e.confusion = &m[0][0];
    const pt_eval_averages a = pt_eval_means(&e);
    CU_ASSERT(a.classes == 0 && a.precision == 0 && a.recall == 0 && a.f1 == 0 &&
              a.weighted_precision == 0 && a.weighted_recall == 0 && a.weighted_f1 == 0);
    pt_eval_result none = {0}; /* a gpt's: no counts by class */
    const pt_eval_averages b = pt_eval_means(&none);
    CU_ASSERT(b.classes == 0 && b.f1 == 0);
    CU_ASSERT(pt_eval_class(&none, 0).examples == 0);
}

static void test_by_class(void)
{
    pt_arch a = {0};
    a.kind = PT_MODEL_BERT;
    a.classes = 8;
    CU_ASSERT(pt_eval_by_class(&a));
    a.classes = PT_EVAL_MAX_CLASSES + 1;
    CU_ASSERT(!pt_eval_by_class(&a));
    a.kind = PT_MODEL_GPT;
    a.vocab = 256;
    CU_ASSERT(!pt_eval_by_class(&a));
}

static const pt_test figures_tests[] = {{"hand_matrix", test_hand_matrix},
                                        {"no_counts", test_no_counts},
                                        {"by_class", test_by_class},
                                        {NULL, NULL}};
static const pt_test_suite suites[] = {{"eval_figures", figures_tests}, {NULL, NULL}};
