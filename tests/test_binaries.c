/* test_binaries.c -- the stage binaries themselves: .npy round trips, NumPy interchange,
 * every bad input answered by one error line and a non-zero exit, and outputs that are not
 * finite refused the same way, with nothing written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/error.h"
#include "../common/npy.h"
#include "../steps/01_naive_loop/naive_loop.h"
#include "../steps/02_affine/affine.h"
#include "../steps/03_parallel_scan/parallel_scan.h"
#include "../steps/04_two_phase_scan/two_phase_scan.h"
#include "../steps/05_wy_chunked/wy_chunked.h"
#include "test_support.h"

#ifndef BIN_DIR
#define BIN_DIR "bin"
#endif

static const gdn_stage *const cpu_stages[] = {&naive_loop_stage, &affine_stage, &parallel_scan_stage,
                                              &two_phase_scan_stage, &wy_chunked_stage};
static const int cpu_stage_count = sizeof cpu_stages / sizeof *cpu_stages;

/* Run bin/<stage> <arguments>; returns its exit status, with stdout and stderr captured. */
static int run_binary(const char *stage, const char *arguments, char *out, size_t out_size, char *err,
                      size_t err_size)
{
    return test_run_program("", stage, arguments, out, out_size, err, err_size);
}

static double read_field(const char *line, const char *key) { return test_read_field(line, key); }

/* --in/--out: a problem saved by the library, run by the binary, equals the in-process run bit for bit. */
START_TEST(binary_in_out_round_trip_equals_in_process)
{
    const gdn_stage *stage = cpu_stages[_i];
    test_shape shape = {2, 21, 3, 8, 5};
    gdn_problem p = test_problem(shape, 1, 800 + _i);
    char in[64], out[64], arguments[256], text[1024], errors[1024], path[128];
    test_make_temp_dir(in, sizeof in);
    test_make_temp_dir(out, sizeof out);
    ck_assert_int_eq(gdn_problem_save(&p, in), 0);
    snprintf(arguments, sizeof arguments, "--in %s --out %s --reps 1 --threads 2", in, out);
    ck_assert_msg(run_binary(stage->name, arguments, text, sizeof text, errors, sizeof errors) == 0, "%s", errors);
    ck_assert_ptr_nonnull(strstr(text, "result stage="));
    gdn_result r = test_run(stage, &p, 2, 0, 0);
    npy_array o, ht;
    snprintf(path, sizeof path, "%s/o.npy", out);
    ck_assert_msg(npy_read(path, &o) == 0, "%s", gdn_last_error());
    snprintf(path, sizeof path, "%s/ht.npy", out);
    ck_assert_msg(npy_read(path, &ht) == 0, "%s", gdn_last_error());
    ck_assert_uint_eq(o.count, gdn_tokens(&p) * p.V);
    ck_assert_uint_eq(ht.count, gdn_state_count(&p));
    for (size_t i = 0; i < o.count; i++)
        ck_assert_msg(o.data[i] == (double)r.o[i], "o[%zu]: file %.9g, in process %.9g", i, o.data[i], r.o[i]);
    for (size_t i = 0; i < ht.count; i++)
        ck_assert_msg(ht.data[i] == (double)r.ht[i], "ht[%zu] differs", i);
    npy_free(&o);
    npy_free(&ht);
    gdn_result_free(&r);
    gdn_problem_free(&p);
    test_remove_dir(in);
    test_remove_dir(out);
}
END_TEST

/* tests/data/numpy_problem was written by np.save; numpy_expected by a float64 NumPy loop
 * (tests/data/numpy_fixture.py). 1e-5 relative: a float stage's rounding (tolerances.h) is far
 * below it, and any mistake of algebra or layout far above. */
START_TEST(binary_reads_numpy_and_matches_numpy_float64)
{
    char text[1024], errors[1024];
    char arguments[] = "--in tests/data/numpy_problem --check-against tests/data/numpy_expected --reps 1";
    int status = run_binary(cpu_stages[_i]->name, arguments, text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status == 0, "%s", errors);
    double error = read_field(text, "err_ref=");
    ck_assert_msg(error <= 1e-5, "%s: %.3e against NumPy's float64 result", cpu_stages[_i]->name, error);
    ck_assert_uint_eq((unsigned)read_field(text, " T="), 37);
}
END_TEST

START_TEST(binary_checks_against_oracle_and_reports)
{
    char text[1024], errors[1024];
    int status = run_binary(cpu_stages[_i]->name, "--B 2 --T 40 --H 2 --K 16 --V 8 --h0 --reps 3 --check-against oracle",
                            text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status == 0, "%s", errors);
    ck_assert_ptr_nonnull(strstr(text, "precision=" REAL_NAME));
    ck_assert(read_field(text, "median_ms=") > 0);
    ck_assert(read_field(text, "gflops=") > 0);
    ck_assert(read_field(text, "err_oracle=") <= GDN_TOLERANCE_VS_ORACLE);
    ck_assert_ptr_null(strchr(strchr(text, '\n') + 1, '\n')); /* one line */
}
END_TEST

/* Bad inputs through a binary: each arguments line, after set-up, gives this message. */
enum setup { PLAIN, NPY_DTYPE, NPY_FORTRAN, NPY_TRUNCATED, NPY_SHAPE, NPY_HEADER, GATE_POSITIVE, Q_NAN, K_INF, BETA_ABOVE,
             REF_SHAPE, Q_FIFO, H0_LINK };
static const struct {
    enum setup setup;
    const char *arguments; /* %s is the temporary folder */
    const char *message;
    unsigned only_stages_with; /* 0: every stage; else only stages taking this option; */
    unsigned only_stages_without; /* or only stages not taking it */
} bad_inputs[] = {
    {PLAIN, "--frobnicate", "unknown option '--frobnicate'", 0, 0},
    {PLAIN, "--T", "--T needs a value", 0, 0},
    {PLAIN, "--T ten", "--T needs a positive integer, got 'ten'", 0, 0},
    {PLAIN, "--K 0", "--K must be positive, got 0", 0, 0},
    {PLAIN, "--V -4", "--V needs a positive integer, got '-4'", 0, 0},
    {PLAIN, "--chunk 8", "--chunk is not an option of", 0, GDN_OPTION_CHUNK},
    {PLAIN, "--segments 3", "--segments is not an option of", 0, GDN_OPTION_SEGMENTS},
    {PLAIN, "--precise", "--precise is not an option of", 0, GDN_OPTION_PRECISE},
    {PLAIN, "--chunk 129", "--chunk must be between 1 and 128, got 129", GDN_OPTION_CHUNK, 0},
    {PLAIN, "--chunk 0", "--chunk must be positive, got 0", GDN_OPTION_CHUNK, 0},
    {PLAIN, "--segments x", "--segments needs a positive integer, got 'x'", GDN_OPTION_SEGMENTS, 0},
    {PLAIN, "--T 1099511627776 --K 1024 --V 1024", "the problem needs", 0, 0},
    {PLAIN, "--in %s/absent", "absent/q.npy: cannot open", 0, 0},
    {NPY_DTYPE, "--in %s", "k.npy: dtype '<i4' is not supported", 0, 0},
    {NPY_FORTRAN, "--in %s", "v.npy: Fortran order is not supported", 0, 0},
    {NPY_TRUNCATED, "--in %s", "q.npy: truncated", 0, 0},
    {NPY_SHAPE, "--in %s", "v.npy: shape (1, 9, 2, 4) disagrees with the other tensors", 0, 0},
    {NPY_HEADER, "--in %s", "beta.npy: malformed header", 0, 0},
    {GATE_POSITIVE, "--in %s", "/g.npy: element 3 (b=0, t=1, h=1) is 0.5, outside [-inf, 0]", 0, 0},
    {Q_NAN, "--in %s", "/q.npy: element 5 (b=0, t=0, h=1) is nan; inputs must be finite", 0, 0},
    {K_INF, "--in %s", "/k.npy: element 9 (b=0, t=1, h=0) is -inf; inputs must be finite", 0, 0},
    {BETA_ABOVE, "--in %s", "/beta.npy: element 4 (b=0, t=2, h=0) is 1.5, outside [0, 1]", 0, 0},
    {PLAIN, "--no-input-check", "--no-input-check applies to --in only", 0, 0},
    {REF_SHAPE, "--T 8 --H 2 --K 4 --V 4 --check-against %s", "o.npy: shape (1, 8, 1, 4) does not match", 0, 0},
    {Q_FIFO, "--in %s", "/q.npy: not a regular file", 0, 0},
    {H0_LINK, "--in %s", "/h0.npy: cannot open: No such file or directory", 0, 0},
    {PLAIN, "--reps 2 --reps 3", "--reps given twice", 0, 0},
};

/* Replace one tensor of the problem folder by a hand-made .npy. */
static void write_npy_text(const char *dir, const char *name, const char *dict, size_t data_bytes)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    test_write_raw_npy(path, dict, data_bytes);
}

START_TEST(binary_bad_input_one_line_and_exit_status)
{
    char dir[64], arguments[512], text[1024], errors[1024];
    test_make_temp_dir(dir, sizeof dir);
    test_shape shape = {1, 8, 2, 4, 4};
    gdn_problem p = test_problem(shape, 0, 900 + _i);
    ck_assert_int_eq(gdn_problem_save(&p, dir), 0);
    switch (bad_inputs[_i].setup) {
    case NPY_DTYPE: write_npy_text(dir, "k", "{'descr': '<i4', 'fortran_order': False, 'shape': (1, 8, 2, 4), }", 256); break;
    case NPY_FORTRAN: write_npy_text(dir, "v", "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 8, 2, 4), }", 256); break;
    case NPY_TRUNCATED: write_npy_text(dir, "q", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 8, 2, 4), }", 100); break;
    case NPY_SHAPE: write_npy_text(dir, "v", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 9, 2, 4), }", 288); break;
    case NPY_HEADER: write_npy_text(dir, "beta", "{'descr': '<f4', 'fortran_order': False, }", 64); break;
    case GATE_POSITIVE: p.g[3] = (real_t)0.5; ck_assert_int_eq(gdn_problem_save(&p, dir), 0); break;
    case Q_NAN: p.q[5] = (real_t)NAN; ck_assert_int_eq(gdn_problem_save(&p, dir), 0); break;
    case K_INF: p.k[9] = (real_t)-INFINITY; ck_assert_int_eq(gdn_problem_save(&p, dir), 0); break;
    case BETA_ABOVE: p.beta[4] = (real_t)1.5; ck_assert_int_eq(gdn_problem_save(&p, dir), 0); break;
    case Q_FIFO: /* an open that would wait for a writer */
    case H0_LINK: { /* an optional file that is there but cannot be read: refused, not dropped */
        char path[128];
        snprintf(path, sizeof path, "%s/%s.npy", dir, bad_inputs[_i].setup == Q_FIFO ? "q" : "h0");
        remove(path);
        ck_assert_int_eq(bad_inputs[_i].setup == Q_FIFO ? mkfifo(path, 0600) : symlink("no/such/h0.npy", path), 0);
        break;
    }
    case REF_SHAPE: {
        gdn_problem wrong = test_problem((test_shape){1, 8, 1, 4, 4}, 0, 1);
        gdn_result r = test_run(&naive_loop_stage, &wrong, 1, 0, 0);
        ck_assert_int_eq(gdn_result_save(&r, &wrong, dir), 0);
        gdn_result_free(&r);
        gdn_problem_free(&wrong);
        break;
    }
    default: break;
    }
    snprintf(arguments, sizeof arguments, bad_inputs[_i].arguments, dir);
    int tried = 0;
    for (int s = 0; s < cpu_stage_count; s++) {
        unsigned options = cpu_stages[s]->options;
        if ((bad_inputs[_i].only_stages_with && !(options & bad_inputs[_i].only_stages_with)) ||
            (options & bad_inputs[_i].only_stages_without))
            continue;
        tried++;
        int status = run_binary(cpu_stages[s]->name, arguments, text, sizeof text, errors, sizeof errors);
        ck_assert_msg(status != 0, "%s %s: exit status 0", cpu_stages[s]->name, arguments);
        ck_assert_msg(strstr(errors, bad_inputs[_i].message) != NULL, "%s %s: got '%s', want '%s'",
                      cpu_stages[s]->name, arguments, errors, bad_inputs[_i].message);
        ck_assert_msg(strncmp(errors, cpu_stages[s]->name, strlen(cpu_stages[s]->name)) == 0, "%s", errors);
        ck_assert_msg(strchr(errors, '\n') == errors + strlen(errors) - 1, "not one line: '%s'", errors);
        ck_assert_str_eq(text, ""); /* no result line for a refused run */
    }
    ck_assert_int_gt(tried, 0);
    gdn_problem_free(&p);
    test_remove_dir(dir);
}
END_TEST

/* More segments than tokens: clamped to T, said on stderr, and still equal to the oracle. */
START_TEST(binary_two_phase_scan_clamps_segments_and_says_so)
{
    char text[1024], errors[1024];
    int status = run_binary("04_two_phase_scan", "--T 5 --H 2 --K 8 --V 8 --segments 9 --reps 1 --check-against oracle",
                            text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status == 0, "%s", errors);
    ck_assert_msg(strstr(errors, "9 segments for T=5 tokens; clamped to 5") != NULL, "stderr: '%s'", errors);
    ck_assert_uint_eq((unsigned)read_field(text, "segments="), 5);
    ck_assert(read_field(text, "err_oracle=") <= GDN_TOLERANCE_VS_ORACLE);
}
END_TEST

/* --no-input-check skips the one validating pass: the bad value reaches the stage and its
 * output, where without the option the same folder is refused by name. The output check still
 * holds: the NaN in o is an error that names it and its cause, and nothing is written. */
START_TEST(binary_no_input_check_skips_validation)
{
    char dir[64], arguments[256], text[1024], errors[1024];
    test_make_temp_dir(dir, sizeof dir);
    gdn_problem p = test_problem((test_shape){1, 8, 2, 4, 4}, 0, 950);
    p.q[5] = (real_t)NAN; /* token (t=0, h=1): its o row is NaN */
    ck_assert_int_eq(gdn_problem_save(&p, dir), 0);
    snprintf(arguments, sizeof arguments, "--in %s --reps 1 --no-input-check --out %s/out", dir, dir);
    int status = run_binary("01_naive_loop", arguments, text, sizeof text, errors, sizeof errors);
    test_assert_refused(status, text, errors,
                        "01_naive_loop: error: o at (b=0, t=0, h=1, column 0) is NaN, an input is NaN or Inf itself "
                        "(--no-input-check skipped the check that refuses it)");
    snprintf(arguments, sizeof arguments, "%s/out/o.npy", dir);
    ck_assert_msg(access(arguments, F_OK) != 0, "%s written", arguments);
    gdn_problem_free(&p);
    test_remove_dir(dir);
}
END_TEST

/* A gate of -inf (alpha = 0) passes --no-input-check: the loops read it as a reset, the chunked
 * forms subtract cumulative gates and get NaN. Each stage either runs to finite outputs or is
 * refused with that cause, never with "a fault of the stage". */
START_TEST(binary_gate_minus_inf_runs_or_names_the_gate)
{
    const gdn_stage *stage = cpu_stages[_i];
    char dir[64], arguments[256], text[1024], errors[1024];
    test_make_temp_dir(dir, sizeof dir);
    gdn_problem p = test_problem((test_shape){1, 16, 2, 4, 4}, 0, 970 + _i);
    p.g[3] = (real_t)-INFINITY;
    ck_assert_int_eq(gdn_problem_save(&p, dir), 0);
    snprintf(arguments, sizeof arguments, "--in %s --reps 1 --threads 2 --no-input-check", dir);
    int status = run_binary(stage->name, arguments, text, sizeof text, errors, sizeof errors);
    if (status != 0)
        test_assert_refused(status, text, errors, ", a gate g is -inf (--no-input-check skipped the check that refuses it)");
    else
        ck_assert_ptr_nonnull(strstr(text, "result stage="));
    gdn_problem_free(&p);
    test_remove_dir(dir);
}
END_TEST

/* Finite inputs, outputs that are not: every key entry 1e20 (beta |k|^2 near 1e40), so each
 * token's I - beta k k^T multiplies the state by about -1e40 and it overflows within a few
 * tokens, in float and in double. The run is an error naming the first bad value of o and the
 * cause, with no result line and no o.npy or ht.npy; the same folder with the generator's
 * unit keys runs and writes both. */
START_TEST(binary_non_finite_output_is_an_error_and_writes_nothing)
{
    const gdn_stage *stage = cpu_stages[_i];
    char in[64], out[64], arguments[256], text[1024], errors[1024], path[160];
    test_make_temp_dir(in, sizeof in);
    test_make_temp_dir(out, sizeof out);
    gdn_problem p = test_problem((test_shape){1, 16, 2, 4, 4}, 0, 960 + _i);
    real_t *unit_keys = malloc(gdn_tokens(&p) * p.K * sizeof *unit_keys);
    ck_assert_ptr_nonnull(unit_keys);
    memcpy(unit_keys, p.k, gdn_tokens(&p) * p.K * sizeof *unit_keys);
    for (size_t i = 0; i < gdn_tokens(&p) * p.K; i++)
        p.k[i] = (real_t)1e20;
    ck_assert_int_eq(gdn_problem_save(&p, in), 0);
    snprintf(arguments, sizeof arguments, "--in %s --out %s/o --reps 1 --threads 2", in, out);
    int status = run_binary(stage->name, arguments, text, sizeof text, errors, sizeof errors);
    test_assert_refused(status, text, errors, ": error: o at (b=0, t=");
    ck_assert_msg(strncmp(errors, stage->name, strlen(stage->name)) == 0, "%s", errors);
    ck_assert_msg(strstr(errors, "from finite inputs: beta |k|^2 reaches") != NULL &&
                      strstr(errors, "keys are meant to have unit length: scale k down") != NULL,
                  "%s: no cause in '%s'", stage->name, errors);
    const char *files[2] = {"o.npy", "ht.npy"};
    snprintf(path, sizeof path, "%s/o", out);
    test_assert_not_written(path, files, 2, stage->name);
    memcpy(p.k, unit_keys, gdn_tokens(&p) * p.K * sizeof *unit_keys);
    ck_assert_int_eq(gdn_problem_save(&p, in), 0);
    status = run_binary(stage->name, arguments, text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status == 0, "%s: %s", stage->name, errors);
    ck_assert_ptr_nonnull(strstr(text, "result stage="));
    for (int f = 0; f < 2; f++) {
        snprintf(path, sizeof path, "%s/o/%s", out, files[f]);
        ck_assert_msg(access(path, F_OK) == 0, "%s: %s not written", stage->name, path);
    }
    free(unit_keys);
    gdn_problem_free(&p);
    test_remove_dir(in);
    test_remove_dir(out);
}
END_TEST

Suite *binaries_suite(void)
{
    Suite *suite = suite_create("binaries");
    TCase *files = tcase_create("files");
    tcase_set_timeout(files, 60);
    tcase_add_loop_test(files, binary_in_out_round_trip_equals_in_process, 0, cpu_stage_count);
    tcase_add_loop_test(files, binary_reads_numpy_and_matches_numpy_float64, 0, cpu_stage_count);
    tcase_add_loop_test(files, binary_checks_against_oracle_and_reports, 0, cpu_stage_count);
    tcase_add_test(files, binary_two_phase_scan_clamps_segments_and_says_so);
    tcase_add_test(files, binary_no_input_check_skips_validation);
    tcase_add_loop_test(files, binary_non_finite_output_is_an_error_and_writes_nothing, 0, cpu_stage_count);
    tcase_add_loop_test(files, binary_gate_minus_inf_runs_or_names_the_gate, 0, cpu_stage_count);
    suite_add_tcase(suite, files);
    TCase *bad = tcase_create("bad_input");
    tcase_set_timeout(bad, 60);
    tcase_add_loop_test(bad, binary_bad_input_one_line_and_exit_status, 0, (int)(sizeof bad_inputs / sizeof *bad_inputs));
    suite_add_tcase(suite, bad);
    return suite;
}
