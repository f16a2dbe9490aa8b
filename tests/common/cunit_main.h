/*
 * cunit_main.h: the main() every CUnit test program shares. A test file
 * defines `static const pt_test_suite suites[]` (NULL-terminated lists of
 * named tests) and includes this header last. The exit status is the number
 * of failures (capped at 255), so ctest sees every failure.
 */
#ifndef PT_TESTS_CUNIT_MAIN_H
#define PT_TESTS_CUNIT_MAIN_H

#include <CUnit/Basic.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    void (*fn)(void);
} pt_test;

typedef struct {
    const char *name;
    const pt_test *tests;
} pt_test_suite;

static const pt_test_suite suites[];

int main(int argc, char **argv)
{
    /* optional argument: run only the tests whose name contains it */
    const char *only = argc > 1 ? argv[1] : NULL;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 255;
    for (const pt_test_suite *s = suites; s->name; s++) {
        CU_pSuite suite = CU_add_suite(s->name, NULL, NULL);
        for (const pt_test *t = s->tests; t->name; t++)
            if (!only || strstr(t->name, only))
                CU_add_test(suite, t->name, t->fn);
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed > 255 ? 255 : (int)failed;
}

#endif
