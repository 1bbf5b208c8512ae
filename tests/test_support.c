#include "test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/wait.h>

#include <omp.h>

#include "../common/npy.h"
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
    gdn_layout l = {.B = shape.B, .T = shape.T, .H = shape.H, .K = shape.K, .V = shape.V, .with_h0 = with_h0};
    return test_layout_problem(&l, case_number);
}

gdn_problem test_layout_problem(const gdn_layout *l, int case_number)
{
    gdn_problem p;
    ck_assert_msg(gdn_problem_alloc_layout(&p, l) == 0, "%s", gdn_last_error());
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
    gdn_settings s = {.B = p->B, .T = p->T, .H = p->H, .K = p->K, .V = p->V, .reps = 1, .threads = threads,
                      .chunk = chunk, .segments = segments};
    omp_set_num_threads(threads);
    return test_run_settings(stage, p, &s);
}

gdn_result test_run_settings(const gdn_stage *stage, const gdn_problem *p, gdn_settings *s)
{
    gdn_result r;
    if (stage->resolve_options) /* defaults for options left at 0, as the binaries do */
        stage->resolve_options(p, s);
    ck_assert_msg(gdn_result_alloc(&r, p) == 0, "%s", gdn_last_error());
    ck_assert_msg(gdn_stage_run_once(stage, p, s, &r) == 0, "%s failed: %s", stage->name, gdn_last_error());
    return r;
}

const test_shape test_bf16_shapes[] = {{1, 1, 1, 64, 64},    {1, 100, 3, 64, 64}, {1, 300, 2, 128, 128},
                                       {2, 150, 1, 100, 72}, {4, 70, 64, 32, 32}, {2, 77, 40, 64, 30},
                                       {1, 1000, 1, 64, 64}, {1, 64, 2, 128, 16},
                                       /* V past 128: stage 06's kernel 1 takes v in slices of 128 columns
                                        * (200: a partial second slice), its kernel 3 128 columns a block
                                        * where V is a multiple of 128 (256: two blocks) */
                                       {1, 200, 2, 64, 200}, {2, 100, 2, 32, 256},
                                       /* 256 one-tile chain blocks at K = 128: two waves with
                                        * stage 06's deepest ring, one with two slots, which
                                        * chain_launch_shape then picks */
                                       {2, 130, 16, 128, 128},
                                       /* 640 one-tile chain blocks: 4-tile blocks, whose
                                        * consumer warps carry two n-tiles (chain_ntiles) */
                                       {4, 100, 40, 128, 64},
                                       /* 128 heads of K = V = 128: 8-tile chain blocks, one a
                                        * head (4-tile ones with --precise: widest_chain_tiles) */
                                       {1, 130, 128, 128, 128},
                                       /* 96 heads: 8-tile blocks only because they carry output
                                        * warps (from 70 % of the SMs: widest_blocks_percent) */
                                       {1, 130, 96, 128, 128},
                                       /* 32 heads of K = V = 64: the chains make Vnew from v
                                        * (stage 06's chain_from_values_pays), a partial last chunk */
                                       {2, 200, 16, 64, 64}};
const int test_bf16_shape_count = sizeof test_bf16_shapes / sizeof test_bf16_shapes[0];

test_backward_result test_run_backward(const gdn_backward_stage *stage, const gdn_problem *p, const gdn_cotangents *c,
                                       size_t chunk)
{
    test_backward_result b;
    gdn_settings s = {.reps = 1, .threads = 2, .chunk = chunk};
    if (stage->resolve_options)
        stage->resolve_options(p, &s);
    ck_assert_msg(gdn_backward_run_once(stage, p, c, &s, &b.r, &b.g) == 0, "%s: %s", stage->name, gdn_last_error());
    return b;
}

void test_backward_result_free(test_backward_result *b)
{
    gdn_result_free(&b->r);
    gdn_gradients_free(&b->g);
}

void test_describe_shape(char *what, size_t size, test_shape shape, int with_h0)
{
    snprintf(what, size, "B=%zu T=%zu H=%zu K=%zu V=%zu h0=%d", shape.B, shape.T, shape.H, shape.K, shape.V, with_h0);
}

const char *const test_extreme_gate_names[3] = {"gates of -1e4", "no decay", "beta 0 or 1"};

void test_set_extreme_gates(gdn_problem *p, int which, uint64_t seed)
{
    for (size_t i = 0; i < gdn_tokens(p); i++) {
        double u = random_uniform(seed, STREAM_TEST, i);
        if (which == 0)
            p->g[i] = u < 0.1 ? (real_t)-1e4 : p->g[i];
        else if (which == 1)
            p->g[i] = 0;
        else
            p->beta[i] = u < 0.5 ? 0 : 1, p->g[i] = u < 0.25 || u > 0.9 ? (real_t)-1e4 : 0;
    }
}

void test_refuses_keys_of_129(const gdn_stage *stage, size_t segments, int case_number)
{
    test_shape shape = {1, 4, 1, 129, 8};
    gdn_problem p = test_problem(shape, 0, case_number);
    gdn_problem_round_to_bf16(&p);
    gdn_result r;
    ck_assert_int_eq(gdn_result_alloc(&r, &p), 0);
    gdn_settings s = {.reps = 1, .threads = 1, .segments = segments};
    if (stage->resolve_options)
        stage->resolve_options(&p, &s);
    ck_assert_int_ne(gdn_stage_run_once(stage, &p, &s, &r), 0);
    ck_assert_msg(strstr(gdn_last_error(), "K = 129") != NULL, "%s", gdn_last_error());
    gdn_result_free(&r);
    gdn_problem_free(&p);
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

void test_write_npy_bytes(const char *path, const char *dict, const void *data, size_t bytes)
{
    test_write_raw_npy(path, dict, 0);
    FILE *file = fopen(path, "ab");
    ck_assert_ptr_nonnull(file);
    ck_assert_uint_eq(fwrite(data, 1, bytes, file), bytes);
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

void test_assert_not_written(const char *dir, const char *const *names, size_t count, const char *what)
{
    char path[4200];
    for (size_t i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        ck_assert_msg(access(path, F_OK) != 0, "%s: %s written", what, path);
    }
}

/* The numerical edge cases every stage is run on (tests/test_edge_cases.c, tests/gpu/). */
const char *const test_edge_case_names[] = {
    "g = 0 (no decay) over T = 65536", "g = -1e4 (alpha underflows to 0)", "g = -200 (alpha below float's range)",
    "beta = 0 (no write), with h0",    "beta = 1",                          "k = 0 for every third token",
    "K = 1",                           "V = 1",                             "K = V = 1",
    "T = 1 with h0",
};
const int test_edge_case_count = sizeof test_edge_case_names / sizeof *test_edge_case_names;

gdn_problem test_edge_case(int which, int case_number)
{
    static const test_shape shapes[] = {{1, 65536, 1, 4, 4}, {1, 100, 2, 8, 8}, {1, 100, 2, 8, 8}, {1, 40, 2, 8, 8},
                                        {2, 50, 2, 8, 12},   {1, 90, 2, 8, 8},  {2, 60, 2, 1, 5},  {2, 60, 2, 6, 1},
                                        {1, 70, 3, 1, 1},    {3, 1, 2, 16, 8}};
    int with_h0 = which == 3 || which == 9 || which == 1;
    gdn_problem p = test_problem(shapes[which], with_h0, case_number);
    for (size_t i = 0; i < gdn_tokens(&p); i++) {
        switch (which) {
        case 0: p.g[i] = 0; break;
        case 1: p.g[i] = (real_t)-1e4; break;
        case 2: p.g[i] = (real_t)-200; break;
        case 3: p.beta[i] = 0; break;
        case 4: p.beta[i] = 1; break;
        case 5:
            if (i % 3 == 0)
                for (size_t c = 0; c < p.K; c++)
                    p.k[i * p.K + c] = 0;
            break;
        default: break;
        }
    }
    return p;
}

/* o.npy and ht.npy in dir (written by a binary with --out) as a result of p's shape; the
 * test fails where a file is missing or holds the wrong number of values. */
gdn_result test_read_outputs(const char *dir, const gdn_problem *p)
{
    char path[4096];
    npy_array o, ht;
    gdn_result r = {0};
    ck_assert_int_eq(gdn_result_alloc(&r, p), 0);
    snprintf(path, sizeof path, "%s/o.npy", dir);
    ck_assert_msg(npy_read(path, &o) == 0, "%s", gdn_last_error());
    snprintf(path, sizeof path, "%s/ht.npy", dir);
    ck_assert_msg(npy_read(path, &ht) == 0, "%s", gdn_last_error());
    ck_assert_uint_eq(o.count, gdn_tokens(p) * p->V);
    ck_assert_uint_eq(ht.count, gdn_state_count(p));
    for (size_t i = 0; i < o.count; i++)
        r.o[i] = (real_t)o.data[i];
    for (size_t i = 0; i < ht.count; i++)
        r.ht[i] = (real_t)ht.data[i];
    npy_free(&o);
    npy_free(&ht);
    return r;
}

const char *test_mpirun_line(const char *binary, int ranks, int say)
{
    static char line[256];
    char path[256];
    snprintf(path, sizeof path, "%s/%s", BIN_DIR, binary);
    if (access(path, X_OK) != 0 || system("command -v mpirun >/dev/null 2>&1") != 0) {
        if (say)
            printf("%s: mpirun tests skipped: %s\n", binary,
                   access(path, X_OK) != 0 ? "the binary was not built (no mpicc, or a sanitizer build)" : "no mpirun");
        return NULL;
    }
    /* as root, Open MPI asks for consent; -q keeps mpirun's own banners out of stderr (the
     * program's one line is what is tested), and --oversubscribe makes more ranks than cores no
     * launcher error for -q to hide; the vader setting avoids CMA, which containers forbid */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    /* in `make SANITIZE=1 test`: Open MPI's own leaks suppressed (tests/lsan-openmpi.supp), which
     * needs its plugins kept loaded and full stacks; ignored by other builds */
    setenv("LSAN_OPTIONS", "suppressions=tests/lsan-openmpi.supp:fast_unwind_on_malloc=0:print_suppressions=0", 1);
    setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 1);
    snprintf(line, sizeof line,
             "mpirun -q --oversubscribe -np %d --mca btl_vader_single_copy_mechanism none -x LSAN_OPTIONS "
             "-x OMPI_MCA_mca_base_component_disable_dlclose",
             ranks);
    return line;
}

void test_assert_refused(int status, const char *text, const char *errors, const char *message)
{
    ck_assert_int_ne(status, 0);
    ck_assert_msg(strstr(errors, message) != NULL, "%s", errors);
    ck_assert_msg(strchr(errors, '\n') == strrchr(errors, '\n'), "more than one line: '%s'", errors);
    ck_assert_str_eq(text, "");
}

int test_run_program(const char *launcher, const char *binary, const char *arguments, char *out, size_t out_size,
                     char *err, size_t err_size)
{
    char dir[64], command[8192], path[128];
    test_make_temp_dir(dir, sizeof dir);
    snprintf(command, sizeof command, "%s %s/%s %s >%s/stdout 2>%s/stderr", launcher, BIN_DIR, binary, arguments, dir,
             dir);
    int status = system(command);
    ck_assert_msg(WIFEXITED(status), "%s did not exit normally (crashed?)", command);
    const char *names[2] = {"stdout", "stderr"};
    char *buffers[2] = {out, err};
    size_t sizes[2] = {out_size, err_size};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *file = fopen(path, "r");
        ck_assert_ptr_nonnull(file);
        size_t n = fread(buffers[i], 1, sizes[i] - 1, file);
        buffers[i][n] = '\0';
        fclose(file);
    }
    test_remove_dir(dir);
    return WEXITSTATUS(status);
}

double test_read_field(const char *line, const char *key)
{
    const char *at = strstr(line, key);
    ck_assert_msg(at != NULL, "no %s in '%s'", key, line);
    return strtod(at + strlen(key), NULL);
}

void test_embed_alone(gdn_problem *batch, const gdn_problem *alone)
{
    const size_t T = alone->T, H = alone->H, K = alone->K, V = alone->V, HB = batch->H;
    ck_assert(alone->B == 1 && batch->T == T && batch->K == K && batch->V == V && HB >= H && !alone->offsets && !batch->offsets);
    ck_assert(gdn_value_heads(alone) == H && gdn_value_heads(batch) == HB && (alone->h0 != NULL) == (batch->h0 != NULL));
    for (size_t t = 0; t < T; t++)
        for (size_t h = 0; h < H; h++) { /* sequence 0, token t, head h: row t H (alone) and t HB (batch) */
            const size_t from = t * H + h, to = t * HB + h;
            memcpy(batch->q + to * K, alone->q + from * K, K * sizeof(real_t));
            memcpy(batch->k + to * K, alone->k + from * K, K * sizeof(real_t));
            memcpy(batch->v + to * V, alone->v + from * V, V * sizeof(real_t));
            batch->g[to] = alone->g[from];
            batch->beta[to] = alone->beta[from];
        }
    if (alone->h0)
        memcpy(batch->h0, alone->h0, H * K * V * sizeof(real_t)); /* states [N][HV][K][V]: sequence 0's first heads */
}

int test_same_bits_as_alone(const gdn_problem *batch, const gdn_result *in_batch, const gdn_problem *alone,
                            const gdn_result *by_itself, long *where)
{
    const size_t T = alone->T, H = alone->H, K = alone->K, V = alone->V, HB = batch->H;
    for (size_t t = 0; t < T; t++)
        for (size_t h = 0; h < H; h++)
            if (memcmp(in_batch->o + (t * HB + h) * V, by_itself->o + (t * H + h) * V, V * sizeof(real_t)) != 0) {
                *where = (long)((t * H + h) * V);
                return 0;
            }
    if (memcmp(in_batch->ht, by_itself->ht, H * K * V * sizeof(real_t)) != 0) {
        *where = (long)(T * H * V); /* past o: the states */
        return 0;
    }
    *where = -1;
    return 1;
}
