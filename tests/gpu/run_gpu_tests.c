/* run_gpu_tests.c -- the Check runner of the GPU stages (tests/gpu/).
 *
 *     run_gpu_tests            every GPU suite
 *     run_gpu_tests SUITE      that suite only (`make check SUITE=...`)
 *
 * Separate from tests/run_tests.c because it runs without fork (CK_NOFORK): a CUDA context
 * does not survive fork(), and one context for the whole run is also faster than one per
 * test. Where no CUDA device answers it prints one line saying why and runs only the suites
 * of host code (stage 07's choice of segments, stage 06's split of kernel 1 and its chains'
 * form, stage 13's workspace), so `make test` passes on machines without a GPU (CI); on a GPU
 * machine every test runs. Quiet where everything passes, as run_tests is: one summary line. */
#include <stdio.h>
#include <stdlib.h>

#include "../../common/device.h"
#include "../test_support.h"

int main(int argc, char **argv)
{
    if (argc > 2) {
        fprintf(stderr, "usage: %s [SUITE]\n", argv[0]);
        return EXIT_FAILURE;
    }
    const char *only = argc > 1 ? argv[1] : NULL;
    SRunner *runner = srunner_create(segment_choice_suite());
    srunner_add_suite(runner, warp_specialized_choice_suite());
    srunner_add_suite(runner, backward_workspace_suite());
    int device = gdn_cuda_device_present();
    if (device) {
        srunner_add_suite(runner, gpu_stages_suite());
        srunner_add_suite(runner, tensor_core_stage_suite());
        srunner_add_suite(runner, sequence_parallel_suite());
        srunner_add_suite(runner, context_parallel_cuda_suite());
        srunner_add_suite(runner, gpu_backward_suite());
    } else
        printf("GPU suites skipped: %s; only the host code of the GPU stages is tested\n", gdn_last_error());
    srunner_set_fork_status(runner, CK_NOFORK);
    srunner_run(runner, only, NULL, CK_SILENT);
    int ran = srunner_ntests_run(runner), failed = srunner_ntests_failed(runner);
    if (ran > 0)
        srunner_print(runner, CK_ENV);
    else if (device) /* without a device, the skip line above says why nothing ran */
        fprintf(stderr, "%s: no suite named '%s' (`make check` lists them)\n", argv[0], only ? only : "");
    srunner_free(runner);
    return failed == 0 && (ran > 0 || !device) ? EXIT_SUCCESS : EXIT_FAILURE;
}
