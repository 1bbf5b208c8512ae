/* test_support.h -- helpers shared by the Check suites: problems, runs, comparisons. */
#ifndef GDN_TEST_SUPPORT_H
#define GDN_TEST_SUPPORT_H

#include <check.h>

#include "../common/backward_stage.h"
#include "../common/compare.h"
#include "../common/error.h"
#include "../common/problem.h"
#include "../common/stage.h"
#include "../common/tolerances.h"

typedef struct {
    size_t B, T, H, K, V;
} test_shape;

/* The shape grid every stage is tested over: T = 1, odd T, K != V, B > 1, H > 1. */
extern const test_shape test_grid[];
extern const int test_grid_count;

/* A fresh problem for this case: the seed is derived from the case number, so every
 * case draws different inputs and a failure can be reproduced. */
gdn_problem test_problem(test_shape shape, int with_h0, int case_number);
/* The same for any layout (grouped value heads, a packed batch). */
gdn_problem test_layout_problem(const gdn_layout *l, int case_number);
/* Overwrite g with values spread log-uniformly over [low, high] (both < 0). */
void test_set_gates(gdn_problem *p, double low, double high, int case_number);

/* Numerical edge cases (no decay over a long sequence, gates that underflow, beta 0 and 1,
 * zero keys, K or V of 1, one token): case `which` of test_edge_case_count, fresh inputs. */
extern const char *const test_edge_case_names[];
extern const int test_edge_case_count;
gdn_problem test_edge_case(int which, int case_number);

/* Run a stage through its runner (outputs poisoned first) with the given threads (CPU) or on
 * the GPU; fails the test on error. */
gdn_result test_run(const gdn_stage *stage, const gdn_problem *p, int threads, size_t chunk, size_t segments);
/* The same with settings of the caller's (e.g. --precise); the stage's resolve_options fills in
 * its defaults in *s first, so the caller sees what ran (e.g. the automatic --segments). */
gdn_result test_run_settings(const gdn_stage *stage, const gdn_problem *p, gdn_settings *s);
/* A backward stage's outputs: o, ht and the gradients. Run once on p and the cotangents c (2
 * threads; chunk 0: the stage's default), or the test fails naming the stage's error. */
typedef struct {
    gdn_result r;
    gdn_gradients g;
} test_backward_result;
test_backward_result test_run_backward(const gdn_backward_stage *stage, const gdn_problem *p, const gdn_cotangents *c,
                                       size_t chunk);
void test_backward_result_free(test_backward_result *b);

/* The GPU stages on bf16 inputs (06, 07) are also tested on these shapes: one token with
 * K = V = 64, chunks and a partial one, K = V = 128, K and V off the multiples of 16, B H = 256,
 * V tiles past V, one head of 1000 tokens, V past 128 (06 takes v in slices of 128 columns;
 * 256: two 128-column output blocks). */
extern const test_shape test_bf16_shapes[];
extern const int test_bf16_shape_count;
/* "B=.. T=.. H=.. K=.. V=.. h0=..", to name a case in a failure message. */
void test_describe_shape(char *what, size_t size, test_shape shape, int with_h0);
/* Extreme gates, case `which` of 3 (names below): 0, a tenth of the gates -1e4 (alpha
 * underflows to 0); 1, no decay at all (g = 0); 2, beta exactly 0 or 1 and g -1e4 or 0.
 * Draws from random_uniform(seed, STREAM_TEST, token). */
extern const char *const test_extreme_gate_names[3];
void test_set_extreme_gates(gdn_problem *p, int which, uint64_t seed);
/* A stage that keeps K-wide tiles in shared memory refuses K = 129 with an error naming it. */
void test_refuses_keys_of_129(const gdn_stage *stage, size_t segments, int case_number);
/* Batch invariance: copy every input of `alone` (B = 1, plain layout) into sequence 0 and the
 * first heads of `batch` (plain layout, same T, K and V, at least as many heads), so that those
 * heads of that sequence are the same problem; and whether a result of `batch` gives them the
 * same o and ht as a result of `alone`, bit for bit (the first index that differs in *where,
 * -1 if none). */
void test_embed_alone(gdn_problem *batch, const gdn_problem *alone);
int test_same_bits_as_alone(const gdn_problem *batch, const gdn_result *in_batch, const gdn_problem *alone,
                            const gdn_result *by_itself, long *where);

/* Compare a result with the fp64 oracle, or with another result. */
gdn_difference test_against_oracle(const gdn_problem *p, const gdn_result *r);
gdn_difference test_against_result(const gdn_problem *p, const gdn_result *r, const gdn_result *reference);

/* Assert d is finite and within tolerance, naming what was compared. */
#define assert_close(d, tolerance, what)                                                                        \
    ck_assert_msg(gdn_within((d), (tolerance)), "%s: relative error %.3e (max abs %.3e, %zu non-finite) > %.1e", \
                  (what), (d).relative, (d).max_absolute, (d).non_finite, (double)(tolerance))

/* A hand-made .npy: magic, version 1.0, the given header dict (padded to 64 bytes as NumPy
 * does), then data_bytes zero bytes. For testing how malformed files are refused. */
void test_write_raw_npy(const char *path, const char *dict, size_t data_bytes);
/* The same header, then these bytes as its data. */
void test_write_npy_bytes(const char *path, const char *dict, const void *data, size_t bytes);

/* o.npy and ht.npy in dir (written by a binary with --out) as a result of p's shape; the
 * test fails where a file is missing or holds the wrong number of values. */
gdn_result test_read_outputs(const char *dir, const gdn_problem *p);
/* The mpirun line for `ranks` processes of bin/BINARY, or NULL where Open MPI or the binary
 * is missing (said, with `say`, by one caller per run). */
const char *test_mpirun_line(const char *binary, int ranks, int say);
/* Run BIN_DIR/binary with arguments, after launcher ("" or an mpirun line); stdout and stderr
 * captured; returns the exit status (a crash fails the test). */
int test_run_program(const char *launcher, const char *binary, const char *arguments, char *out, size_t out_size,
                     char *err, size_t err_size);
/* A run that must be refused: non-zero status, `message` in one line of errors (however many
 * ranks ran), and no result line. */
void test_assert_refused(int status, const char *text, const char *errors, const char *message);
/* The number after key in a result line (the test fails when key is missing). */
double test_read_field(const char *line, const char *key);

/* Temporary folders for the binaries' tests. */
void test_make_temp_dir(char *path, size_t size);
void test_remove_dir(const char *path);
/* None of the count files names[i] is in dir: what a refused or failed run must leave (no
 * output to pass for a result); `what` starts the failure message. */
void test_assert_not_written(const char *dir, const char *const *names, size_t count, const char *what);

Suite *common_suite(void);
Suite *half_suite(void);
Suite *naive_loop_suite(void);
Suite *affine_suite(void);
Suite *parallel_scan_suite(void);
Suite *two_phase_scan_suite(void);
Suite *wy_chunked_suite(void);
Suite *binaries_suite(void);
Suite *backward_suite(void);
Suite *layouts_suite(void);
Suite *edge_cases_suite(void);
Suite *fuzz_corpus_suite(void);
Suite *context_parallel_suite(void);
Suite *gpu_stages_suite(void); /* tests/gpu/, in their own runner */
Suite *tensor_core_stage_suite(void);
Suite *sequence_parallel_suite(void);
Suite *segment_choice_suite(void);
Suite *warp_specialized_choice_suite(void); /* host code of stage 06: runs with or without a GPU */
Suite *context_parallel_cuda_suite(void); /* host code of stage 07: runs with or without a GPU */
Suite *gpu_backward_suite(void);          /* tests/gpu/: the GPU backward stages (needs a GPU) */
Suite *backward_workspace_suite(void);    /* host code of stage 13's workspace: runs with or without a GPU */

#endif
