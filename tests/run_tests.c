/* run_tests.c -- the one Check runner: every suite, each test in its own process (CK_FORK),
 * so a crash fails one test instead of the run. Exit status 0 only if every test passed.
 *
 *     run_tests            every suite
 *     run_tests SUITE      that suite only (`make check SUITE=...`)
 *
 * Quiet where everything passes: one summary line; each failure adds its file, line and
 * message. CK_VERBOSITY=verbose lists every test. */
#include <stdio.h>
#include <stdlib.h>

#include "test_support.h"

int main(int argc, char **argv)
{
    if (argc > 2) {
        fprintf(stderr, "usage: %s [SUITE]\n", argv[0]);
        return EXIT_FAILURE;
    }
    SRunner *runner = srunner_create(common_suite());
    srunner_add_suite(runner, half_suite());
    srunner_add_suite(runner, naive_loop_suite());
    srunner_add_suite(runner, affine_suite());
    srunner_add_suite(runner, parallel_scan_suite());
    srunner_add_suite(runner, two_phase_scan_suite());
    srunner_add_suite(runner, wy_chunked_suite());
    srunner_add_suite(runner, edge_cases_suite());
    srunner_add_suite(runner, fuzz_corpus_suite());
    srunner_add_suite(runner, context_parallel_suite());
    srunner_add_suite(runner, binaries_suite());
    srunner_add_suite(runner, backward_suite());
    srunner_add_suite(runner, layouts_suite());
    srunner_set_fork_status(runner, CK_FORK);
    srunner_run(runner, argc > 1 ? argv[1] : NULL, NULL, CK_SILENT);
    int ran = srunner_ntests_run(runner), failed = srunner_ntests_failed(runner);
    if (ran == 0)
        fprintf(stderr, "%s: no suite named '%s' (`make check` lists them)\n", argv[0], argc > 1 ? argv[1] : "");
    else
        srunner_print(runner, CK_ENV);
    srunner_free(runner);
    return ran > 0 && failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
