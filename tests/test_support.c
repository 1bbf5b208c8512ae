#include "test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "../common/oracle.h"
#include "../common/random.h"

const test_shape test_grid[] = {
    {1, 1, 1, 4, 4},    /* a single token */
    {1, 7, 1, 8, 5},    /* odd T, K != V */
    {2, 33, 3, 16, 8},  /* B > 1, H > 1 */
    {1, 64, 2, 8, 16},  /* V > K, T a power of two */
    {3, 50, 2, 12, 12}, /* sizes that are not powers of two */
    {1, 129, 1, 32, 32} /* one past a power of two */
};
const int test_grid_count = sizeof test_grid / sizeof test_grid[0];

/* GDN_TEST_SEED shifts every case's seed, to run the suite on other inputs. */
static uint64_t base_seed(void)
{
    const char *text = getenv("GDN_TEST_SEED");
    return text ? strtoull(text, NULL, 10) : 20261129u;
}

gdn_problem test_problem(test_shape shape, int with_h0, int case_number)
{
    gdn_problem p;
    ck_assert_msg(gdn_problem_alloc(&p, shape.B, shape.T, shape.H, shape.K, shape.V, with_h0) == 0, "%s",
                  gdn_last_error());
    gdn_problem_generate(&p, base_seed() * 1000003u + (uint64_t)case_number);
    return p;
}

void test_set_gates(gdn_problem *p, double low, double high, int case_number)
{
    for (size_t i = 0; i < gdn_tokens(p); i++) {
        double u = random_uniform(base_seed(), STREAM_TEST + (uint64_t)case_number, i);
        p->g[i] = (real_t)(-exp(log(-low) + u * (log(-high) - log(-low))));
    }
}

gdn_result test_run(const gdn_stage *stage, const gdn_problem *p, int threads, size_t chunk, size_t segments)
{
    gdn_result r;
    gdn_settings s = {.B = p->B, .T = p->T, .H = p->H, .K = p->K, .V = p->V, .reps = 1, .threads = threads,
                      .chunk = chunk, .segments = segments};
    omp_set_num_threads(threads);
    if (stage->resolve_options) /* defaults for options left at 0, as the binaries do */
        stage->resolve_options(p, &s);
    ck_assert_msg(gdn_result_alloc(&r, p) == 0, "%s", gdn_last_error());
    ck_assert_msg(gdn_stage_run_once(stage, p, &s, &r) == 0, "%s failed: %s", stage->name, gdn_last_error());
    return r;
}

gdn_difference test_against_oracle(const gdn_problem *p, const gdn_result *r)
{
    size_t o_count = gdn_tokens(p) * p->V, ht_count = gdn_state_count(p);
    double *o = malloc((o_count + ht_count) * sizeof *o);
    ck_assert_ptr_nonnull(o);
    ck_assert_msg(gdn_oracle(p, o, o + o_count) == 0, "%s", gdn_last_error());
    gdn_difference d = gdn_worse(gdn_compare(r->o, o, o_count), gdn_compare(r->ht, o + o_count, ht_count));
    free(o);
    return d;
}

static gdn_difference compare_reals(const real_t *x, const real_t *reference, size_t count)
{
    double *wide = malloc(count * sizeof *wide);
    ck_assert_ptr_nonnull(wide);
    for (size_t i = 0; i < count; i++)
        wide[i] = reference[i];
    gdn_difference d = gdn_compare(x, wide, count);
    free(wide);
    return d;
}

gdn_difference test_against_result(const gdn_problem *p, const gdn_result *r, const gdn_result *reference)
{
    return gdn_worse(compare_reals(r->o, reference->o, gdn_tokens(p) * p->V),
                     compare_reals(r->ht, reference->ht, gdn_state_count(p)));
}

void test_write_raw_npy(const char *path, const char *dict, size_t data_bytes)
{
    char header[256];
    int length = snprintf(header, sizeof header, "%s", dict);
    ck_assert(length > 0 && (size_t)length + 64 < sizeof header);
    size_t padded = (10 + (size_t)length + 1 + 63) / 64 * 64 - 10;
    memset(header + length, ' ', padded - (size_t)length - 1);
    header[padded - 1] = '\n';
    FILE *file = fopen(path, "wb");
    ck_assert_ptr_nonnull(file);
    unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)padded, 0};
    fwrite(prefix, 1, 10, file);
    fwrite(header, 1, padded, file);
    for (size_t i = 0; i < data_bytes; i++)
        fputc(0, file);
    fclose(file);
}

void test_make_temp_dir(char *path, size_t size)
{
    snprintf(path, size, "/tmp/gdn-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(path));
}

void test_remove_dir(const char *path)
{
    char command[4200];
    snprintf(command, sizeof command, "rm -rf '%s'", path);
    ck_assert_int_eq(system(command), 0);
}
