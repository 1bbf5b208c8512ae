/* run_tests.c -- the one Check runner: every suite, each test in its own process (CK_FORK),
 * so a crash fails one test instead of the run. Exit status 0 only if every test passed. */
#include <stdlib.h>

#include "test_support.h"

int main(void)
{
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
    srunner_set_fork_status(runner, CK_FORK);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
