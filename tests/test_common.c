/* test_common.c -- common/: generator, problem set-up, .npy I/O, comparison, command line. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <omp.h>

#include "../common/error.h"
#include "../common/half.h"
#include "../common/npy.h"
#include "../common/problem.h"
#include "../common/random.h"
#include "../common/scratch.h"
#include "../common/timing.h"
#include "../steps/01_naive_loop/naive_loop.h"
#include "test_support.h"

/* Values computed by an independent Python transcription of SplitMix64 (Steele et al.),
 * whose plain form gives the published first output 0x599ED017FB08FC85 for seed 1234567. */
START_TEST(generator_bits_are_pinned)
{
    ck_assert_uint_eq(random_bits(1, 1, 0), 0xb18a02f46d8d86c3ULL);
    ck_assert_uint_eq(random_bits(42, 5, 1000), 0x2f79952650040d17ULL);
    ck_assert_uint_eq(random_bits(0, 0, 0), 0x568a9b0b1a2c05ecULL);
}
END_TEST

START_TEST(generator_normals_have_unit_moments)
{
    const int n = 200000;
    double sum = 0, squares = 0;
    for (int i = 0; i < n; i++) {
        double x = random_normal(7, STREAM_TEST, (uint64_t)i);
        ck_assert(isfinite(x));
        sum += x;
        squares += x * x;
    }
    double mean = sum / n, variance = squares / n - mean * mean;
    /* standard errors: 1/sqrt(n) = 0.0022 for the mean, sqrt(2/n) = 0.0032 for the variance */
    ck_assert_msg(fabs(mean) < 0.012, "mean %g", mean);
    ck_assert_msg(fabs(variance - 1) < 0.016, "variance %g", variance);
}
END_TEST

START_TEST(problem_inputs_follow_the_contract)
{
    test_shape shape = {2, 40, 3, 16, 8};
    gdn_problem p = test_problem(shape, 1, 1), same = test_problem(shape, 1, 1), other = test_problem(shape, 1, 2);
    for (size_t token = 0; token < gdn_tokens(&p); token++) {
        double norm = 0;
        for (size_t i = 0; i < p.K; i++)
            norm += (double)p.k[token * p.K + i] * p.k[token * p.K + i];
        ck_assert_msg(fabs(sqrt(norm) - 1) < 1e-6, "|k| = %g at token %zu", sqrt(norm), token);
        ck_assert(p.g[token] < 0);
        ck_assert(p.beta[token] > 0 && p.beta[token] < 1);
        /* g = log(sigmoid(z)) and beta = sigmoid(z') are both in (0, 1) after exp */
        ck_assert(exp(p.g[token]) > 0 && exp(p.g[token]) < 1);
    }
    ck_assert_double_eq_tol(p.scale, 1 / sqrt(16.0), 1e-15);
    ck_assert_mem_eq(p.q, same.q, gdn_tokens(&p) * p.K * sizeof(real_t));
    ck_assert_mem_eq(p.h0, same.h0, gdn_state_count(&p) * sizeof(real_t));
    ck_assert(memcmp(p.v, other.v, gdn_tokens(&p) * p.V * sizeof(real_t)) != 0);
    gdn_problem_free(&p);
    gdn_problem_free(&same);
    gdn_problem_free(&other);
}
END_TEST

/* Stages on bf16 inputs: q, k and v become the nearest bf16 values (half.c's rounding, so a
 * second rounding changes nothing), and nothing else moves. Fresh random inputs. */
START_TEST(problem_rounds_inputs_to_bf16)
{
    gdn_problem p, before;
    ck_assert_int_eq(gdn_problem_alloc(&p, 2, 37, 3, 16, 8, 1), 0);
    ck_assert_int_eq(gdn_problem_alloc(&before, 2, 37, 3, 16, 8, 1), 0);
    gdn_problem_generate(&p, 77);
    gdn_problem_generate(&before, 77);
    gdn_problem_round_to_bf16(&p);
    size_t tokens = gdn_tokens(&p), changed = 0;
    const real_t *rounded[3] = {p.q, p.k, p.v}, *original[3] = {before.q, before.k, before.v};
    size_t counts[3] = {tokens * p.K, tokens * p.K, tokens * p.V};
    for (int i = 0; i < 3; i++)
        for (size_t j = 0; j < counts[i]; j++) {
            float want = bf16_to_float(float_to_bf16((float)original[i][j]));
            ck_assert_msg((float)rounded[i][j] == want, "tensor %d element %zu: %g, want %g", i, j,
                          (double)rounded[i][j], (double)want);
            ck_assert_msg(fabs((double)rounded[i][j] - (double)original[i][j]) <= fabs((double)original[i][j]) / 256,
                          "tensor %d element %zu moved more than half a bf16 step", i, j);
            changed += rounded[i][j] != original[i][j];
        }
    ck_assert_msg(changed > counts[0], "rounding changed only %zu values", changed); /* float values are rarely bf16 */
    ck_assert_int_eq(memcmp(p.g, before.g, tokens * sizeof *p.g), 0);
    ck_assert_int_eq(memcmp(p.beta, before.beta, tokens * sizeof *p.beta), 0);
    ck_assert_int_eq(memcmp(p.h0, before.h0, gdn_state_count(&p) * sizeof *p.h0), 0);
    gdn_problem_free(&p);
    gdn_problem_free(&before);
}
END_TEST

START_TEST(problem_too_large_is_refused_with_its_bytes)
{
    gdn_problem p;
    size_t bytes;
    char expected[96];
    ck_assert_int_eq(gdn_problem_bytes(1, (size_t)1 << 36, 8, 128, 128, 0, &bytes), 0);
    /* (2 K + 2 V + 2) values per token and K V per head, times the element size */
    ck_assert_uint_eq(bytes, (((size_t)1 << 39) * 514 + 8 * 128 * 128) * sizeof(real_t));
    snprintf(expected, sizeof expected, "the problem needs %zu bytes", bytes);
    ck_assert_int_ne(gdn_problem_alloc(&p, 1, (size_t)1 << 36, 8, 128, 128, 0), 0);
    ck_assert_msg(strstr(gdn_last_error(), expected) != NULL, "%s", gdn_last_error());
    ck_assert_int_ne(gdn_problem_alloc(&p, (size_t)1 << 40, (size_t)1 << 40, 1, 4, 4, 0), 0);
    ck_assert_msg(strstr(gdn_last_error(), "overflow") != NULL, "%s", gdn_last_error());
}
END_TEST

START_TEST(npy_round_trip_and_numpy_header)
{
    char dir[64], path[128];
    test_make_temp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/x.npy", dir);
    real_t values[6] = {1.5, -2, 3.25, 1e-7, -1e7, 0.1};
    size_t shape[2] = {2, 3};
    ck_assert_int_eq(npy_write(path, values, 2, shape), 0);

    /* the header NumPy expects: magic, version 1.0, length, dict, padded to 64 with '\n' last */
    FILE *file = fopen(path, "rb");
    unsigned char bytes[128];
    ck_assert_uint_eq(fread(bytes, 1, 128, file), 128);
    fclose(file);
    ck_assert_mem_eq(bytes, "\x93NUMPY\x01\x00", 8);
    size_t header = bytes[8] | bytes[9] << 8;
    ck_assert_uint_eq((10 + header) % 64, 0);
    ck_assert_int_eq(bytes[10 + header - 1], '\n');
    const char *dict = sizeof(real_t) == 4 ? "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
                                           : "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
    ck_assert_mem_eq(bytes + 10, dict, strlen(dict));

    npy_array read;
    ck_assert_msg(npy_read(path, &read) == 0, "%s", gdn_last_error());
    ck_assert_uint_eq(read.ndim, 2);
    ck_assert_uint_eq(read.shape[0], 2);
    ck_assert_uint_eq(read.shape[1], 3);
    for (int i = 0; i < 6; i++)
        ck_assert(read.data[i] == (double)values[i]);
    npy_free(&read);
    test_remove_dir(dir);
}
END_TEST

static const struct {
    const char *dict;
    size_t data_bytes;
    const char *message;
} bad_npy[] = {
    {"{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", 24, "dtype '<i4' is not supported"},
    {"{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24, "dtype '>f4' is not supported"},
    {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24, "Fortran order is not supported"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20, "truncated: shape (2, 3) needs 24"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28, "4 bytes after the data"},
    {"{'descr': '<f4', 'shape': (2, 3), }", 24, "malformed header"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 24, "malformed header (bad number"},
    {"['descr', '<f4']", 24, "malformed header"},
    {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 3), }", 24, "'fortran_order' must be True or False"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ", 24, "malformed header (a key of the dict"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x", 24, "malformed header (text after the dict)"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (6,), }", 24, "key 'shape' given twice"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1, }", 24, "key 'extra' unknown"},
};

START_TEST(npy_bad_files_are_refused_by_name)
{
    char dir[64], path[128];
    test_make_temp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bad.npy", dir);
    test_write_raw_npy(path, bad_npy[_i].dict, bad_npy[_i].data_bytes);
    npy_array read;
    ck_assert_int_ne(npy_read(path, &read), 0);
    ck_assert_ptr_null(read.data);
    ck_assert_msg(strstr(gdn_last_error(), bad_npy[_i].message) && strstr(gdn_last_error(), "bad.npy"),
                  "case %d: got '%s', want '%s'", _i, gdn_last_error(), bad_npy[_i].message);
    test_remove_dir(dir);
}
END_TEST

START_TEST(npy_not_npy_and_missing)
{
    char dir[64], path[128];
    test_make_temp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/text.npy", dir);
    FILE *file = fopen(path, "w");
    fputs("hello, not numpy\n", file);
    fclose(file);
    npy_array read;
    ck_assert_int_ne(npy_read(path, &read), 0);
    ck_assert_ptr_nonnull(strstr(gdn_last_error(), "not a .npy file"));
    snprintf(path, sizeof path, "%s/absent.npy", dir);
    ck_assert_int_ne(npy_read(path, &read), 0);
    ck_assert_ptr_nonnull(strstr(gdn_last_error(), "absent.npy: cannot open"));
    test_remove_dir(dir);
}
END_TEST

/* What is not a regular file is refused by name, and opening it does not wait: a FIFO's open
 * would block until a writer came. A path too long for the buffer is an error, never a shortened
 * path (another file); an optional file is there when a link to nowhere is, so that reading it
 * names the fault instead of dropping the file. */
START_TEST(npy_refuses_what_is_not_a_file)
{
    char dir[64], path[128], long_dir[4100];
    test_make_temp_dir(dir, sizeof dir);
    npy_array read;
    snprintf(path, sizeof path, "%s/fifo.npy", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    ck_assert_int_ne(npy_read(path, &read), 0);
    ck_assert_ptr_nonnull(strstr(gdn_last_error(), "fifo.npy: not a regular file"));
    snprintf(path, sizeof path, "%s/folder.npy", dir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_assert_int_ne(npy_read_integers(path, &read), 0);
    ck_assert_ptr_nonnull(strstr(gdn_last_error(), "folder.npy: not a regular file"));

    int present = -1;
    snprintf(path, sizeof path, "%s/absent.npy", dir);
    ck_assert_int_eq(npy_present(path, &present), 0);
    ck_assert_int_eq(present, 0);
    snprintf(path, sizeof path, "%s/nowhere.npy", dir);
    ck_assert_int_eq(symlink("no/such/target.npy", path), 0);
    ck_assert_int_eq(npy_present(path, &present), 0);
    ck_assert_int_eq(present, 1);
    ck_assert_int_ne(npy_read(path, &read), 0);
    ck_assert_ptr_nonnull(strstr(gdn_last_error(), "nowhere.npy: cannot open"));

    memset(long_dir, 'd', sizeof long_dir - 1);
    long_dir[sizeof long_dir - 1] = '\0';
    char joined[4096] = "untouched";
    ck_assert_int_ne(npy_path(joined, sizeof joined, long_dir, "o"), 0);
    ck_assert_ptr_nonnull(strstr(gdn_last_error(), "/o.npy: the path is longer than 4095 bytes"));
    ck_assert_ptr_null(strchr(gdn_last_error(), '\n'));
    ck_assert_int_eq(npy_path(joined, sizeof joined, dir, "o"), 0);
    snprintf(path, sizeof path, "%s/o.npy", dir);
    ck_assert_str_eq(joined, path);
    test_remove_dir(dir);
}
END_TEST

/* A '<f8' file of these doubles, whatever the build's precision (a float build writes '<f4') */
static void write_f8(const char *path, const char *shape, const double *values, size_t count)
{
    char dict[128];
    snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': %s, }", shape);
    test_write_npy_bytes(path, dict, values, count * sizeof *values);
}

/* Values a '<f8' file holds that the rounding to real_t would hide: g = 1e-50 and beta just above
 * 1 round into their ranges in float, and 1e300 past float's range becomes Inf. Each is refused
 * naming the file's own value; in double only the range faults are (1e300 is a double). */
START_TEST(problem_load_refuses_what_rounding_would_hide)
{
    enum { COUNT = 1 * 8 * 2 };
    static const struct {
        const char *name;
        int element;
        double value;
        const char *message; /* NULL: loads */
        int float_only;
    } cases[] = {
        {"g", 3, 1e-50, "1e-50, outside [-inf, 0]", 0},
        {"beta", 4, 1 + 1e-12, "1.0000000000010001, outside [0, 1]", 0},
        {"v", 7, 1e300, "1e+300, beyond float's range", 1},
    };
    char dir[64], path[128];
    test_make_temp_dir(dir, sizeof dir);
    gdn_problem p = test_problem((test_shape){1, 8, 2, 4, 4}, 0, 990 + _i);
    ck_assert_int_eq(gdn_problem_save(&p, dir), 0);
    const int v_case = strcmp(cases[_i].name, "v") == 0;
    const size_t count = v_case ? COUNT * 4 : COUNT;
    const real_t *from = v_case ? p.v : strcmp(cases[_i].name, "g") == 0 ? p.g : p.beta;
    double values[COUNT * 4];
    for (size_t i = 0; i < count; i++)
        values[i] = (double)from[i];
    values[cases[_i].element] = cases[_i].value;
    snprintf(path, sizeof path, "%s/%s.npy", dir, cases[_i].name);
    write_f8(path, v_case ? "(1, 8, 2, 4)" : "(1, 8, 2)", values, count);
    gdn_problem loaded;
    const int refused = !cases[_i].float_only || sizeof(real_t) == sizeof(float);
    ck_assert_int_eq(gdn_problem_load(&loaded, dir, 1), refused ? -1 : 0);
    if (refused) {
        char named[32]; /* the element by its file and flat index (in double, with its (b, t, h) too) */
        snprintf(named, sizeof named, "/%s.npy: element %d ", cases[_i].name, cases[_i].element);
        ck_assert_msg(strstr(gdn_last_error(), named) != NULL && strstr(gdn_last_error(), cases[_i].message) != NULL,
                      "got '%s'", gdn_last_error());
        ck_assert_ptr_null(strchr(gdn_last_error(), '\n'));
    } else {
        ck_assert_double_eq(loaded.v[cases[_i].element], cases[_i].value);
        gdn_problem_free(&loaded);
    }
    gdn_problem_free(&p);
    test_remove_dir(dir);
}
END_TEST

/* Per-thread scratch past the machine's memory is refused with its byte count, as the problem
 * is, and a size that overflows is refused as such, whatever the thread count (2^50 bytes a
 * thread fits a 64-bit count up to 16384 threads); a fitting one is 64-byte aligned. */
START_TEST(scratch_refuses_what_cannot_fit)
{
    gdn_scratch scratch;
    ck_assert_int_eq(gdn_scratch_alloc(&scratch, (size_t)1 << 50), -1);
    ck_assert_msg(strstr(gdn_last_error(), "the threads' scratch needs") != NULL, "got '%s'", gdn_last_error());
    ck_assert_ptr_null(scratch.base);
    ck_assert_int_eq(gdn_scratch_alloc(&scratch, SIZE_MAX - 10), -1);
    ck_assert_msg(strstr(gdn_last_error(), "overflows a 64-bit byte count") != NULL, "got '%s'", gdn_last_error());
    ck_assert_int_eq(gdn_scratch_alloc(&scratch, 100), 0);
    ck_assert_uint_eq(scratch.stride, 128);
    ck_assert_uint_eq((uintptr_t)gdn_scratch_mine(&scratch) % 64, 0);
    gdn_scratch_free(&scratch);
}
END_TEST

/* A save whose path would not fit writes nothing, not a file of a shortened name. */
/* A folder whose q.npy says 4e12 values (a sparse file: its size agrees, its pages are not there)
 * is refused by the memory it would take, counted from the headers before any data is read. */
START_TEST(problem_load_counts_its_memory_first)
{
    char dir[64], path[128];
    test_make_temp_dir(dir, sizeof dir);
    static const char *const small[4] = {"k", "v", "g", "beta"}; /* one value each: the shapes are checked later */
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s.npy", dir, small[i]);
        test_write_raw_npy(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1), }", 4);
    }
    snprintf(path, sizeof path, "%s/q.npy", dir);
    test_write_raw_npy(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1000000000, 1, 4000), }", 0);
    FILE *file = fopen(path, "r+b");
    ck_assert_ptr_nonnull(file);
    ck_assert_int_eq(fseek(file, 0, SEEK_END), 0);
    const long header = ftell(file);
    fclose(file);
    if (truncate(path, header + 16000000000000L) != 0) { /* 16 TB, sparse; a file system without them says so */
        fprintf(stderr, "problem_load_counts_its_memory_first: skipped: %s holds no 16 TB sparse file\n", dir);
        test_remove_dir(dir);
        return;
    }
    gdn_problem p;
    ck_assert_int_eq(gdn_problem_load(&p, dir, 1), -1);
    char needs[64]; /* each value staged as a double and kept as a real_t */
    snprintf(needs, sizeof needs, "needs %zu bytes", (size_t)4000000000004 * (sizeof(double) + sizeof(real_t)));
    ck_assert_msg(strstr(gdn_last_error(), needs) != NULL, "got '%s', want '%s'", gdn_last_error(), needs);
    ck_assert_ptr_nonnull(strstr(gdn_last_error(), "more than this machine's memory"));
    test_remove_dir(dir);
}
END_TEST

START_TEST(result_save_refuses_a_path_too_long)
{
    char dir[64], long_dir[4200];
    test_make_temp_dir(dir, sizeof dir);
    gdn_problem p = test_problem((test_shape){1, 4, 1, 4, 4}, 0, 995);
    gdn_result r = test_run(&naive_loop_stage, &p, 1, 0, 0);
    /* dir/./././... : an existing folder, so that only the names' length can fail */
    int used = snprintf(long_dir, sizeof long_dir, "%s", dir);
    while (used < 4092)
        used += snprintf(long_dir + used, sizeof long_dir - (size_t)used, "/.");
    ck_assert_int_eq(gdn_result_save(&r, &p, long_dir), -1);
    ck_assert_msg(strstr(gdn_last_error(), "the path is longer than 4095 bytes") != NULL, "got '%s'", gdn_last_error());
    const char *shortened[] = {"o.np", "o.n", "o.", "o", "ht.np", "ht.n", "ht.", "ht"};
    test_assert_not_written(dir, shortened, sizeof shortened / sizeof *shortened, "a shortened name");
    gdn_result_free(&r);
    gdn_problem_free(&p);
    test_remove_dir(dir);
}
END_TEST

START_TEST(compare_measures_and_fails_on_nan)
{
    real_t x[4] = {1, 2, 3, 4};
    double ref[4] = {1, 2, 3, 5};
    gdn_difference d = gdn_compare(x, ref, 4);
    ck_assert_double_eq_tol(d.relative, 1 / sqrt(39.0), 1e-12);
    ck_assert_double_eq_tol(d.max_absolute, 1, 1e-12);
    ck_assert(gdn_within(d, 0.2));
    ck_assert(!gdn_within(d, 0.1));
    x[2] = (real_t)NAN;
    d = gdn_compare(x, ref, 4);
    ck_assert_uint_eq(d.non_finite, 1);
    ck_assert(!gdn_within(d, 1e300));
    x[2] = 3;
    ref[0] = INFINITY;
    ck_assert(!gdn_within(gdn_compare(x, ref, 4), 1e300));
}
END_TEST

/* A corrupt reference (1e300, whose square is inf) is a relative error near 1, not inf / inf = NaN
 * read as a pass; the worse of two comparisons keeps a NaN; a tensor compared in two parts
 * (stage 08's ranks) gives the relative error of the whole. */
START_TEST(compare_survives_huge_values)
{
    real_t x[4] = {1, 2, 3, 4};
    double ref[4] = {1, 2, 3, 1e300};
    gdn_difference d = gdn_compare(x, ref, 4);
    ck_assert_uint_eq(d.non_finite, 0);
    ck_assert_double_eq_tol(d.relative, 1, 1e-12);
    ck_assert(!gdn_within(d, 0.5));
    gdn_difference nan = {NAN, 0, 0}, fine = {1e-9, 0, 0};
    ck_assert(isnan(gdn_worse(nan, fine).relative) && isnan(gdn_worse(fine, nan).relative));
    ck_assert(!gdn_within(gdn_worse(fine, nan), 1));
    double whole_ref[6] = {1, -2, 3, 4, 5, 6};
    real_t whole_x[6] = {1.5f, -2, 3, 4.25f, 5, 5};
    double extremes[3] = {0, 0, 0}, sums[2] = {0, 0};
    gdn_difference_extremes(whole_x, whole_ref, 2, extremes);
    gdn_difference_extremes(whole_x + 2, whole_ref + 2, 4, extremes);
    gdn_difference_squares(whole_x, whole_ref, 2, extremes, sums);
    gdn_difference_squares(whole_x + 2, whole_ref + 2, 4, extremes, sums);
    ck_assert_double_eq_tol(gdn_relative_from(extremes, sums), gdn_compare(whole_x, whole_ref, 6).relative, 1e-15);
    ck_assert_double_eq_tol(gdn_relative_from(extremes, sums), sqrt(1.3125 / 91), 1e-12);
}
END_TEST

START_TEST(median_of_runs)
{
    double odd[5] = {5, 1, 4, 2, 3}, even[4] = {4, 1, 3, 2};
    ck_assert_double_eq(gdn_median(odd, 5), 3);
    ck_assert_double_eq(gdn_median(even, 4), 2.5);
    double start = gdn_now_seconds();
    ck_assert(gdn_now_seconds() >= start);
}
END_TEST

/* The command line, in process: each bad input gives its one-line reason. */
static const struct {
    const char *arguments[4];
    const char *message;
} bad_command_lines[] = {
    {{"--bogus"}, "unknown option '--bogus'"},
    {{"--T"}, "--T needs a value"},
    {{"--T", "abc"}, "--T needs a positive integer, got 'abc'"},
    {{"--T", "0"}, "--T must be positive, got 0"},
    {{"--K", "-3"}, "--K needs a positive integer, got '-3'"},
    {{"--V", "12x"}, "--V needs a positive integer, got '12x'"},
    {{"--B", "1e3"}, "--B needs a positive integer, got '1e3'"},
    {{"--H", "99999999999999999999"}, "--H: 99999999999999999999 is too large"},
    {{"--reps", "0"}, "--reps must be positive, got 0"},
    {{"--threads", ""}, "--threads needs a positive integer, got an empty value"},
    {{"--seed", "-1"}, "--seed needs a non-negative integer"},
    {{"--scale", "nan"}, "--scale needs a positive finite number, got 'nan'"},
    {{"--scale", "-1"}, "--scale needs a positive finite number, got '-1'"},
    {{"--chunk", "16"}, "--chunk is not an option of 01_naive_loop"},
    {{"--segments", "4"}, "--segments is not an option of 01_naive_loop"},
    {{"--precise"}, "--precise is not an option of 01_naive_loop"},
    {{"extra"}, "unexpected argument 'extra'"},
    {{"--in", "somewhere", "--T", "5"}, "--in takes sizes, seed and h0 from the folder's files"},
    {{"--check-against", "oracle", "--check-against", "oracle"}, "--check-against oracle given twice"},
    {{"--rep", "3"}, "unknown option '--rep' (did you mean --reps? options are spelled out in full)"},
    {{"--T", "5", "--T=6"}, "--T given twice"},
    {{"--out", "a", "--out", "b"}, "--out given twice"},
    {{"--scale", " 2"}, "--scale needs a positive finite number, got ' 2'"},
};

START_TEST(command_line_refuses_bad_options)
{
    char *argv[6] = {"01_naive_loop"};
    int argc = 1;
    for (int i = 0; i < 4 && bad_command_lines[_i].arguments[i]; i++)
        argv[argc++] = (char *)bad_command_lines[_i].arguments[i];
    gdn_settings s;
    ck_assert_int_eq(gdn_parse_command_line(argc, argv, &naive_loop_stage, &s), -1);
    ck_assert_msg(strstr(gdn_last_error(), bad_command_lines[_i].message) != NULL, "case %d: got '%s', want '%s'", _i,
                  gdn_last_error(), bad_command_lines[_i].message);
    ck_assert_ptr_null(strchr(gdn_last_error(), '\n'));
}
END_TEST

/* What the build cannot hold: a scale that is 0 or subnormal in real_t (o would be zeros or lose
 * its bits), and more OpenMP threads than --threads allows, from OMP_NUM_THREADS's default. */
START_TEST(command_line_refuses_what_the_build_cannot_hold)
{
    gdn_settings s;
    /* in double, strtod already says ERANGE for a subnormal result: the first check's message */
    const int in_float = sizeof(real_t) == 4;
    char *tiny[] = {"01_naive_loop", "--scale", in_float ? "1e-50" : "1e-320"};
    ck_assert_int_eq(gdn_parse_command_line(3, tiny, &naive_loop_stage, &s), -1);
    ck_assert_msg(strstr(gdn_last_error(), in_float ? "is 0 in this build's float" : "--scale needs a positive finite number"),
                  "got '%s'", gdn_last_error());
    char *small[] = {"01_naive_loop", "--scale", in_float ? "1e-40" : "1e-310"}; /* subnormal */
    ck_assert_int_eq(gdn_parse_command_line(3, small, &naive_loop_stage, &s), -1);
    ck_assert_msg(strstr(gdn_last_error(), in_float ? "is subnormal in this build's float" : "--scale needs a positive finite number"),
                  "got '%s'", gdn_last_error());
    const int threads = omp_get_max_threads();
    omp_set_num_threads(5000);
    char *plain[] = {"01_naive_loop"};
    const int status = gdn_parse_command_line(1, plain, &naive_loop_stage, &s);
    omp_set_num_threads(threads);
    ck_assert_int_eq(status, -1);
    ck_assert_msg(strstr(gdn_last_error(), "5000 OpenMP threads (OMP_NUM_THREADS) is more than 4096") != NULL, "got '%s'",
                  gdn_last_error());
}
END_TEST

START_TEST(command_line_reads_good_options)
{
    char *argv[] = {"01_naive_loop", "--B", "2", "--T=33", "--H", "3", "--K", "16", "--V", "8", "--seed", "9",
                    "--h0", "--reps", "7", "--threads", "2", "--scale", "0.5", "--check-against", "oracle",
                    "--check-against", "some/dir", "--out", "o"};
    gdn_settings s;
    ck_assert_int_eq(gdn_parse_command_line((int)(sizeof argv / sizeof *argv), argv, &naive_loop_stage, &s), 0);
    ck_assert_uint_eq(s.B, 2);
    ck_assert_uint_eq(s.T, 33);
    ck_assert_uint_eq(s.H, 3);
    ck_assert_uint_eq(s.K, 16);
    ck_assert_uint_eq(s.V, 8);
    ck_assert_uint_eq(s.seed, 9);
    ck_assert_int_eq(s.with_h0, 1);
    ck_assert_int_eq(s.reps, 7);
    ck_assert_int_eq(s.threads, 2);
    ck_assert_double_eq(s.scale, 0.5);
    ck_assert_int_eq(s.check_oracle, 1);
    ck_assert_str_eq(s.check_dir, "some/dir");
    ck_assert_str_eq(s.out_dir, "o");
}
END_TEST

Suite *common_suite(void)
{
    Suite *suite = suite_create("common");
    TCase *generator = tcase_create("generator");
    tcase_add_test(generator, generator_bits_are_pinned);
    tcase_add_test(generator, generator_normals_have_unit_moments);
    tcase_add_test(generator, problem_inputs_follow_the_contract);
    tcase_add_test(generator, problem_rounds_inputs_to_bf16);
    tcase_add_test(generator, problem_too_large_is_refused_with_its_bytes);
    suite_add_tcase(suite, generator);
    TCase *npy = tcase_create("npy");
    tcase_add_test(npy, npy_round_trip_and_numpy_header);
    tcase_add_loop_test(npy, npy_bad_files_are_refused_by_name, 0, (int)(sizeof bad_npy / sizeof *bad_npy));
    tcase_add_test(npy, npy_not_npy_and_missing);
    tcase_add_test(npy, npy_refuses_what_is_not_a_file);
    tcase_add_loop_test(npy, problem_load_refuses_what_rounding_would_hide, 0, 3);
    tcase_add_test(npy, result_save_refuses_a_path_too_long);
    tcase_add_test(npy, problem_load_counts_its_memory_first);
    tcase_add_test(npy, scratch_refuses_what_cannot_fit);
    suite_add_tcase(suite, npy);
    TCase *checks = tcase_create("compare_and_cli");
    tcase_add_test(checks, compare_measures_and_fails_on_nan);
    tcase_add_test(checks, compare_survives_huge_values);
    tcase_add_test(checks, command_line_refuses_what_the_build_cannot_hold);
    tcase_add_test(checks, median_of_runs);
    tcase_add_loop_test(checks, command_line_refuses_bad_options, 0,
                        (int)(sizeof bad_command_lines / sizeof *bad_command_lines));
    tcase_add_test(checks, command_line_reads_good_options);
    suite_add_tcase(suite, checks);
    return suite;
}
