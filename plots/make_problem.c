/* make_problem.c -- write a generated problem as .npy files, for peers that read NumPy (FLA).
 *
 *     bin/make_problem --B 1 --T 16384 --H 8 --K 64 --V 64 --seed 1 --h0 1 DIR
 *
 * The inputs are exactly those every stage binary draws for the same sizes and seed
 * (gdn_problem_generate), so a peer timed on DIR runs on our stages' inputs, and its
 * outputs can be compared with a stage's --out. --h0 1 adds a random initial state (as
 * a stage's --h0 does); without it the state starts at zero.
 */
#include <stdio.h>

#include "../common/error.h"
#include "../common/problem.h"
#include "../common/stage.h"

int main(int argc, char **argv)
{
    static const char *const names[] = {"B", "T", "H", "K", "V", "seed", "h0", NULL};
    size_t values[7] = {1, 1024, 4, 64, 64, 1, 0};
    if (argc < 2 || argv[argc - 1][0] == '-') {
        fprintf(stderr, "usage: make_problem [--B N --T N --H N --K N --V N --seed N --h0 1] DIR\n");
        return 1;
    }
    const char *dir = argv[argc - 1];
    gdn_tool_options(argc - 1, argv, "make_problem", names, values, (size_t)1 << 40);
    gdn_problem p;
    if (gdn_problem_alloc(&p, values[0], values[1], values[2], values[3], values[4], values[6] == 1) != 0) {
        fprintf(stderr, "make_problem: error: %s\n", gdn_last_error());
        return 1;
    }
    gdn_problem_generate(&p, values[5]);
    if (gdn_problem_save(&p, dir) != 0) {
        fprintf(stderr, "make_problem: error: %s\n", gdn_last_error());
        return 1;
    }
    gdn_problem_free(&p);
    return 0;
}
