/* test_layouts.c -- grouped value heads and packed batches (docs/contract.md section 1):
 * the oracle against the same problem in the plain layout, the CPU stages 01-05 each against
 * the oracle and the stage before over HV / H in {1, 2, 3, 4} and mixes of lengths, and every
 * way such inputs can be wrong, refused in one line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/npy.h"
#include "../common/oracle.h"
#include "../steps/01_naive_loop/naive_loop.h"
#include "../steps/02_affine/affine.h"
#include "../steps/03_parallel_scan/parallel_scan.h"
#include "../steps/04_two_phase_scan/two_phase_scan.h"
#include "../steps/05_wy_chunked/wy_chunked.h"
#include "test_support.h"

enum { KEY_HEADS = 2, KEYS = 16, VALUES = 24 };

/* The mixes of lengths: 0, two rows of 77 tokens (not packed); 1, lengths around a chunk of 64;
 * 2, one long sequence beside 24 short ones. */
enum { MIXES = 3, SHORT_ONES = 24 };
static size_t mix_lengths(int mix, size_t lengths[SHORT_ONES + 1])
{
    static const size_t around_a_chunk[4] = {1, 63, 64, 65};
    if (mix == 1) {
        memcpy(lengths, around_a_chunk, sizeof around_a_chunk);
        return 4;
    }
    lengths[0] = 600;
    for (size_t i = 1; i <= SHORT_ONES; i++)
        lengths[i] = 1 + (i * 37) % 70;
    return SHORT_ONES + 1;
}

static gdn_problem mix_problem(int mix, size_t ratio, int with_h0, int case_number)
{
    size_t lengths[SHORT_ONES + 1];
    gdn_layout l = {.B = 2, .T = 77, .H = KEY_HEADS, .HV = KEY_HEADS * ratio, .K = KEYS, .V = VALUES,
                    .with_h0 = with_h0};
    if (mix > 0) {
        l.sequences = mix_lengths(mix, lengths), l.lengths = lengths, l.B = 1, l.T = 0;
        for (size_t n = 0; n < l.sequences; n++)
            l.T += lengths[n];
    }
    return test_layout_problem(&l, case_number);
}

static void oracle_of(const gdn_problem *p, double **o, double **ht)
{
    *o = malloc(gdn_tokens(p) * p->V * sizeof **o);
    *ht = malloc(gdn_state_count(p) * sizeof **ht);
    ck_assert(*o && *ht);
    ck_assert_int_eq(gdn_oracle(p, *o, *ht), 0);
}

/* Grouped value heads read their key head: the oracle gives, bit for bit, what it gives on the
 * plain problem whose q and k are repeated for every value head. _i: ratio 2-5, with and
 * without h0. */
START_TEST(oracle_grouped_equals_keys_repeated)
{
    const size_t ratio = 2 + (size_t)_i % 4;
    gdn_problem p = mix_problem(0, ratio, _i / 4, 7100 + _i);
    gdn_layout plain_layout = {.B = p.B, .T = p.T, .H = p.HV, .K = p.K, .V = p.V, .with_h0 = _i / 4};
    gdn_problem plain;
    ck_assert_int_eq(gdn_problem_alloc_layout(&plain, &plain_layout), 0);
    for (size_t position = 0; position < p.B * p.T; position++)
        for (size_t h = 0; h < p.HV; h++) {
            /* FLA's rule written out: value head h reads key head h / (HV / H) */
            size_t to = (position * p.HV + h) * p.K, from = (position * p.H + h / ratio) * p.K;
            memcpy(plain.q + to, p.q + from, p.K * sizeof(real_t));
            memcpy(plain.k + to, p.k + from, p.K * sizeof(real_t));
        }
    memcpy(plain.v, p.v, gdn_tokens(&p) * p.V * sizeof(real_t));
    memcpy(plain.g, p.g, gdn_tokens(&p) * sizeof(real_t));
    memcpy(plain.beta, p.beta, gdn_tokens(&p) * sizeof(real_t));
    if (p.h0)
        memcpy(plain.h0, p.h0, gdn_state_count(&p) * sizeof(real_t));
    double *o, *ht, *plain_o, *plain_ht;
    oracle_of(&p, &o, &ht);
    oracle_of(&plain, &plain_o, &plain_ht);
    ck_assert_msg(gdn_tokens(&p) == gdn_tokens(&plain) && gdn_state_count(&p) == gdn_state_count(&plain), "sizes");
    ck_assert_msg(memcmp(o, plain_o, gdn_tokens(&p) * p.V * sizeof *o) == 0, "o differs, HV/H = %zu", ratio);
    ck_assert_msg(memcmp(ht, plain_ht, gdn_state_count(&p) * sizeof *ht) == 0, "ht differs, HV/H = %zu", ratio);
    ck_assert(isfinite(o[0]) && o[0] != 0.0); /* a result, not zeros */
    free(o), free(ht), free(plain_o), free(plain_ht);
    gdn_problem_free(&plain);
    gdn_problem_free(&p);
}
END_TEST

/* A packed batch is its sequences run one by one, each from its own h0: the oracle's o and ht
 * bit for bit. _i: mixes 1 and 2, ratios 1 and 3, with and without h0. */
START_TEST(oracle_packed_equals_each_sequence_alone)
{
    const int mix = 1 + _i % 2;
    const size_t ratio = _i / 2 % 2 ? 3 : 1;
    gdn_problem p = mix_problem(mix, ratio, _i / 4, 7200 + _i);
    const size_t HV = p.HV, K = p.K, V = p.V;
    double *o, *ht;
    oracle_of(&p, &o, &ht);
    for (size_t n = 0; n < p.sequences; n++) {
        size_t start = gdn_sequence_start(&p, n), length = gdn_sequence_length(&p, n);
        gdn_layout alone_layout = {.B = 1, .T = length, .H = p.H, .HV = HV, .K = K, .V = V, .with_h0 = p.h0 != NULL};
        gdn_problem alone;
        ck_assert_int_eq(gdn_problem_alloc_layout(&alone, &alone_layout), 0);
        memcpy(alone.q, p.q + start * p.H * K, length * p.H * K * sizeof(real_t));
        memcpy(alone.k, p.k + start * p.H * K, length * p.H * K * sizeof(real_t));
        memcpy(alone.v, p.v + start * HV * V, length * HV * V * sizeof(real_t));
        memcpy(alone.g, p.g + start * HV, length * HV * sizeof(real_t));
        memcpy(alone.beta, p.beta + start * HV, length * HV * sizeof(real_t));
        if (p.h0)
            memcpy(alone.h0, p.h0 + n * HV * K * V, HV * K * V * sizeof(real_t));
        double *alone_o, *alone_ht;
        oracle_of(&alone, &alone_o, &alone_ht);
        ck_assert_msg(memcmp(alone_o, o + start * HV * V, length * HV * V * sizeof *o) == 0, "o of sequence %zu", n);
        ck_assert_msg(memcmp(alone_ht, ht + n * HV * K * V, HV * K * V * sizeof *ht) == 0, "ht of sequence %zu", n);
        free(alone_o), free(alone_ht);
        gdn_problem_free(&alone);
    }
    free(o), free(ht);
    gdn_problem_free(&p);
}
END_TEST

/* Each CPU stage against the oracle and against the stage before it, over every ratio, every
 * mix, with and without h0. _i: 24 cases; 04's segments 2, 5 or 9 (more than the shortest
 * sequences have tokens), 05's chunk 16, 64 or 100. */
START_TEST(cpu_stages_over_ratios_and_mixes)
{
    static const size_t chunks[3] = {16, 64, 100}, segments[3] = {2, 5, 9};
    const gdn_stage *stages[5] = {&naive_loop_stage, &affine_stage, &parallel_scan_stage, &two_phase_scan_stage,
                                  &wy_chunked_stage};
    const size_t ratio = 1 + (size_t)_i % 4;
    const int mix = _i / 4 % MIXES, with_h0 = _i / 12;
    gdn_problem p = mix_problem(mix, ratio, with_h0, 7300 + _i);
    gdn_result results[5];
    for (int i = 0; i < 5; i++) {
        char what[128];
        snprintf(what, sizeof what, "%s: HV/H=%zu mix %d h0=%d", stages[i]->name, ratio, mix, with_h0);
        results[i] = test_run(stages[i], &p, 2, chunks[_i % 3], segments[_i % 3]);
        assert_close(test_against_oracle(&p, &results[i]), GDN_TOLERANCE_VS_ORACLE, what);
        if (i > 0)
            assert_close(test_against_result(&p, &results[i], &results[i - 1]), GDN_TOLERANCE_VS_STAGE, what);
    }
    for (int i = 0; i < 5; i++)
        gdn_result_free(&results[i]);
    gdn_problem_free(&p);
}
END_TEST

/* No chunk spans two sequences, whatever the chunk: stage 05 with every chunk 1-128 against
 * stage 01 on lengths around a chunk of 64 and one of 130. _i: the chunk - 1. */
START_TEST(wy_chunked_packed_every_chunk)
{
    static const size_t lengths[5] = {1, 63, 64, 65, 130};
    gdn_layout l = {.B = 1, .T = 323, .H = KEY_HEADS, .HV = 2 * KEY_HEADS, .K = KEYS, .V = VALUES,
                    .lengths = lengths, .sequences = 5, .with_h0 = _i % 2};
    gdn_problem p = test_layout_problem(&l, 7400 + _i);
    char what[64];
    snprintf(what, sizeof what, "chunk %d", _i + 1);
    gdn_result loop = test_run(&naive_loop_stage, &p, 2, 0, 0);
    gdn_result chunked = test_run(&wy_chunked_stage, &p, 2, (size_t)_i + 1, 0);
    assert_close(test_against_result(&p, &chunked, &loop), GDN_TOLERANCE_VS_STAGE, what);
    gdn_result_free(&loop);
    gdn_result_free(&chunked);
    gdn_problem_free(&p);
}
END_TEST

/* Equal lengths packed are the same problem as B rows: 01 and 05 give the same bits. */
START_TEST(packed_equal_lengths_equal_rows)
{
    const size_t lengths[3] = {90, 90, 90};
    gdn_layout rows_layout = {.B = 3, .T = 90, .H = KEY_HEADS, .HV = 3 * KEY_HEADS, .K = KEYS, .V = VALUES,
                              .with_h0 = 1};
    gdn_layout packed_layout = rows_layout;
    packed_layout.B = 1, packed_layout.T = 270, packed_layout.lengths = lengths, packed_layout.sequences = 3;
    gdn_problem rows = test_layout_problem(&rows_layout, 7500), packed = test_layout_problem(&packed_layout, 7500);
    const gdn_stage *stages[2] = {&naive_loop_stage, &wy_chunked_stage};
    for (int i = 0; i < 2; i++) {
        gdn_result a = test_run(stages[i], &rows, 2, 0, 0), b = test_run(stages[i], &packed, 2, 0, 0);
        ck_assert_msg(memcmp(a.o, b.o, gdn_tokens(&rows) * rows.V * sizeof(real_t)) == 0, "%s: o", stages[i]->name);
        ck_assert_msg(memcmp(a.ht, b.ht, gdn_state_count(&rows) * sizeof(real_t)) == 0, "%s: ht", stages[i]->name);
        gdn_result_free(&a);
        gdn_result_free(&b);
    }
    gdn_problem_free(&rows);
    gdn_problem_free(&packed);
}
END_TEST

/* --- files and command lines --- */

enum fault {
    NOT_INCREASING, LAST_NOT_T, FIRST_NOT_0, FLOAT_OFFSETS, TWO_D_OFFSETS, HV_NOT_MULTIPLE, STATES_NOT_N,
    ROWS_WITH_OFFSETS, STAGE_10_GROUPED, STAGE_10_PACKED, NO_FAULT
};
static const struct {
    enum fault fault;
    const char *binary, *message;
} file_faults[] = {
    {NOT_INCREASING, "01_naive_loop", "/cu_seqlens.npy: offsets not increasing: element 2 (5) after 5"},
    {LAST_NOT_T, "05_wy_chunked", "/cu_seqlens.npy: the last offset is 11, not T=12"},
    {FIRST_NOT_0, "01_naive_loop", "/cu_seqlens.npy: the first offset is 1, not 0"},
    {FLOAT_OFFSETS, "05_wy_chunked", "/cu_seqlens.npy: dtype '<f8' is not supported (want '<i4' int32 or '<i8'"},
    {TWO_D_OFFSETS, "01_naive_loop", "/cu_seqlens.npy: shape (1, 3) should be (N + 1,)"},
    {HV_NOT_MULTIPLE, "01_naive_loop", "/v.npy: HV=3 value heads is not a multiple of q's H=2 key heads"},
    {STATES_NOT_N, "05_wy_chunked", "/h0.npy: shape (3, 4, 4, 4) disagrees with the other tensors, which say (2, 4, 4, 4) [N, HV, K, V]"},
    {ROWS_WITH_OFFSETS, "01_naive_loop", "/cu_seqlens.npy: a packed batch is one row of tokens, but q has B=2 rows"},
    {STAGE_10_GROUPED, "10_backward_chunked", "10_backward_chunked runs HV = H only; these inputs have grouped value heads (HV=4 over H=2)"},
    {STAGE_10_PACKED, "10_backward_chunked", "10_backward_chunked runs B sequences of T tokens only; these inputs are a packed batch of 2"},
};

static void write_offsets(const char *dir, const char *dict, const void *data, size_t bytes)
{
    char path[128];
    snprintf(path, sizeof path, "%s/cu_seqlens.npy", dir);
    test_write_npy_bytes(path, dict, data, bytes);
}

/* A folder of a packed batch (lengths 5 and 7, HV = 4 over H = 2, h0) with one fault; the binary
 * refuses it in one line and exits 1. */
START_TEST(bad_layout_files_refused)
{
    char dir[64], arguments[256], text[1024], errors[1024];
    const size_t lengths[2] = {5, 7};
    test_make_temp_dir(dir, sizeof dir);
    gdn_layout l = {.B = 1, .T = 12, .H = 2, .HV = 4, .K = 4, .V = 4, .lengths = lengths, .sequences = 2, .with_h0 = 1};
    if (file_faults[_i].fault == ROWS_WITH_OFFSETS)
        l.B = 2, l.lengths = NULL;
    if (file_faults[_i].fault == STAGE_10_PACKED) /* packed only: HV = H */
        l.HV = 2;
    gdn_problem p = test_layout_problem(&l, 7600 + _i);
    ck_assert_int_eq(gdn_problem_save(&p, dir), 0);
    const int64_t not_increasing[4] = {0, 5, 5, 12}, last_short[3] = {0, 5, 11}, first_one[3] = {1, 5, 12},
                  rows[3] = {0, 5, 12};
    const double as_float[3] = {0, 5, 12};
    const char *one_d = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }";
    switch (file_faults[_i].fault) {
    case NOT_INCREASING:
        write_offsets(dir, "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", not_increasing, 32);
        break;
    case LAST_NOT_T: write_offsets(dir, one_d, last_short, 24); break;
    case FIRST_NOT_0: write_offsets(dir, one_d, first_one, 24); break;
    case FLOAT_OFFSETS: write_offsets(dir, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", as_float, 24); break;
    case TWO_D_OFFSETS: write_offsets(dir, "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 3), }", rows, 24); break;
    case HV_NOT_MULTIPLE: {
        size_t v_shape[4] = {1, 12, 3, 4}, gate_shape[3] = {1, 12, 3};
        ck_assert_int_eq(gdn_save_tensor(dir, "v", p.v, 4, v_shape), 0);
        ck_assert_int_eq(gdn_save_tensor(dir, "g", p.g, 3, gate_shape), 0);
        ck_assert_int_eq(gdn_save_tensor(dir, "beta", p.beta, 3, gate_shape), 0);
        break;
    }
    case STATES_NOT_N: {
        size_t shape[4] = {3, 4, 4, 4};
        real_t h0[3 * 4 * 4 * 4] = {1};
        ck_assert_int_eq(gdn_save_tensor(dir, "h0", h0, 4, shape), 0);
        break;
    }
    case ROWS_WITH_OFFSETS: write_offsets(dir, one_d, rows, 24); break;
    case STAGE_10_GROUPED: case STAGE_10_PACKED: case NO_FAULT: break;
    }
    snprintf(arguments, sizeof arguments, "--in %s --reps 1", dir);
    int status = test_run_program("", file_faults[_i].binary, arguments, text, sizeof text, errors, sizeof errors);
    test_assert_refused(status, text, errors, file_faults[_i].message);
    gdn_problem_free(&p);
    test_remove_dir(dir);
}
END_TEST

static const struct {
    const char *binary, *arguments, *message;
} command_faults[] = {
    {"01_naive_loop", "--H 2 --HV 3", "--HV 3 is not a multiple of --H 2"},
    {"05_wy_chunked", "--lengths 4,0", "--lengths must be positive, got 0"},
    {"05_wy_chunked", "--lengths 4,,5", "--lengths needs a positive integer, got an empty value"},
    {"01_naive_loop", "--lengths 4,x", "--lengths needs a positive integer, got 'x'"},
    {"01_naive_loop", "--lengths 3,4 --B 2", "--lengths sets B = 1 and T to their sum; drop --B and --T"},
    {"05_wy_chunked", "--T 9 --lengths 3,4", "--lengths sets B = 1 and T to their sum; drop --B and --T"},
    {"10_backward_chunked", "--HV 8", "--HV is not an option of 10_backward_chunked: it runs HV = H only"},
    {"10_backward_chunked", "--lengths 3,4", "--lengths is not an option of 10_backward_chunked"},
    {"01_naive_loop", "--in tests/data/numpy_problem --HV 8", "--in takes sizes, seed and h0 from the folder's files"},
    {"make_problem", "--seed 1 --seed 2", "--seed given twice"},
    {"make_problem", "--B 2 --T 8 --B 3", "--B given twice"},
    {"make_problem", "--lengths 3,5 --lengths 4,4", "--lengths given twice"},
    {"make_problem", "--h0 --T 8 --h0", "--h0 given twice"},
};

START_TEST(bad_layout_options_refused)
{
    char text[1024], errors[1024];
    int status = test_run_program("", command_faults[_i].binary, command_faults[_i].arguments, text, sizeof text,
                                  errors, sizeof errors);
    test_assert_refused(status, text, errors, command_faults[_i].message);
}
END_TEST

/* make_problem writes a packed, grouped problem with int64 offsets; a stage reads it (and the
 * same offsets as int32) and gives, bit for bit, what it gives on the problem it draws itself
 * from the same options, at any seed a stage takes (the last case: 2^64 - 1). */
START_TEST(drawn_and_read_layouts_agree)
{
    char dir[64], drawn[80], read[80], arguments[512], text[1024], errors[1024];
    test_make_temp_dir(dir, sizeof dir);
    const char *sizes = _i < 2 ? "--lengths 1,63,64,65,130 --H 2 --HV 6 --K 16 --V 24 --h0 --seed 77"
                               : "--lengths 1,63,64,65,130 --H 2 --HV 6 --K 16 --V 24 --h0 --seed 18446744073709551615";
    snprintf(arguments, sizeof arguments, "%s %s/problem", sizes, dir);
    ck_assert_int_eq(test_run_program("", "make_problem", arguments, text, sizeof text, errors, sizeof errors), 0);
    if (_i == 1) { /* the same offsets as int32 */
        const int32_t offsets[6] = {0, 1, 64, 128, 193, 323};
        char problem[80];
        snprintf(problem, sizeof problem, "%s/problem", dir);
        write_offsets(problem, "{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }", offsets, sizeof offsets);
    }
    snprintf(drawn, sizeof drawn, "%s/drawn", dir);
    snprintf(read, sizeof read, "%s/read", dir);
    snprintf(arguments, sizeof arguments, "%s --reps 1 --check-against oracle --out %s", sizes, drawn);
    ck_assert_msg(test_run_program("", "05_wy_chunked", arguments, text, sizeof text, errors, sizeof errors) == 0, "%s",
                  errors);
    ck_assert_msg(strstr(text, "HV=6 sequences=5") != NULL, "%s", text);
    snprintf(arguments, sizeof arguments, "--in %s/problem --reps 1 --check-against %s --out %s", dir, drawn, read);
    ck_assert_msg(test_run_program("", "05_wy_chunked", arguments, text, sizeof text, errors, sizeof errors) == 0, "%s",
                  errors);
    ck_assert_msg(strstr(text, "err_ref=0.000e+00") != NULL, "read and drawn differ: %s", text);
    /* the shapes written: o [1, 323, 6, 24], ht [5, 6, 16, 24] */
    const char *names[2] = {"o", "ht"};
    const size_t shapes[2][4] = {{1, 323, 6, 24}, {5, 6, 16, 24}};
    for (int i = 0; i < 2; i++) {
        char path[128];
        npy_array a;
        snprintf(path, sizeof path, "%s/%s.npy", read, names[i]);
        ck_assert_msg(npy_read_shaped(path, 4, shapes[i], names[i], &a) == 0, "%s", gdn_last_error());
        npy_free(&a);
    }
    /* a plain problem written over it leaves no h0 or offsets behind for the next --in to read */
    snprintf(arguments, sizeof arguments, "--T 8 --H 1 --K 4 --V 4 %s/problem", dir);
    ck_assert_int_eq(test_run_program("", "make_problem", arguments, text, sizeof text, errors, sizeof errors), 0);
    char problem[80];
    snprintf(problem, sizeof problem, "%s/problem", dir);
    const char *const optional[2] = {"h0.npy", "cu_seqlens.npy"};
    test_assert_not_written(problem, optional, 2, "make_problem over a packed problem with h0");
    /* a write that fails part way (a folder named dht.npy in the way, as a full disk would fail
       it) leaves none of the problem's files */
    char blocked[128];
    snprintf(blocked, sizeof blocked, "%s/dht.npy", problem);
    ck_assert_int_eq(unlink(blocked), 0); /* the plain problem's */
    ck_assert_int_eq(mkdir(blocked, 0700), 0);
    snprintf(arguments, sizeof arguments, "--T 8 --H 1 --K 4 --V 4 --h0 %s", problem);
    ck_assert_int_ne(test_run_program("", "make_problem", arguments, text, sizeof text, errors, sizeof errors), 0);
    const char *const inputs[6] = {"q.npy", "k.npy", "v.npy", "g.npy", "beta.npy", "do.npy"};
    test_assert_not_written(problem, inputs, 6, "make_problem stopped by dht.npy");
    rmdir(blocked);
    test_remove_dir(dir);
}
END_TEST

/* npy_read_integers: int32 and int64 exactly, a float file and a value past 2^53 refused; npy_read
 * refuses integers. */
START_TEST(npy_integers)
{
    char dir[64], path[128];
    test_make_temp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/cu_seqlens.npy", dir);
    const int64_t wide[3] = {0, ((int64_t)1 << 53) - 1, 3};
    npy_array a;
    write_offsets(dir, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", wide, sizeof wide);
    ck_assert_int_eq(npy_read_integers(path, &a), 0);
    ck_assert(a.count == 3 && a.data[1] == 9007199254740991.0 && a.data[2] == 3.0);
    npy_free(&a);
    ck_assert_int_ne(npy_read(path, &a), 0);
    ck_assert_ptr_nonnull(strstr(gdn_last_error(), "dtype '<i8' is not supported"));
    const int64_t too_large[2] = {0, ((int64_t)1 << 53) + 1};
    write_offsets(dir, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", too_large, sizeof too_large);
    ck_assert_int_ne(npy_read_integers(path, &a), 0);
    ck_assert_ptr_nonnull(strstr(gdn_last_error(), "element 1 (9007199254740993) is too large"));
    const int32_t narrow[4] = {0, -7, 2147483647, 5};
    write_offsets(dir, "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", narrow, sizeof narrow);
    ck_assert_int_eq(npy_read_integers(path, &a), 0);
    ck_assert(a.count == 4 && a.data[1] == -7.0 && a.data[2] == 2147483647.0);
    npy_free(&a);
    const int64_t written[3] = {0, 12, 40};
    ck_assert_int_eq(npy_write_int64(path, written, 3), 0);
    ck_assert_int_eq(npy_read_integers(path, &a), 0);
    ck_assert(a.ndim == 1 && a.count == 3 && a.data[2] == 40.0);
    npy_free(&a);
    test_remove_dir(dir);
}
END_TEST

/* Byte counts past 64 bits are refused, whichever term overflows (a wrapped count would pass the
 * memory check). */
START_TEST(layout_bytes_refuse_overflow)
{
    const gdn_layout values = {.B = 1, .T = 1024, .H = 1, .HV = 2048, .K = 4096, .V = ((size_t)1 << 40) - 1};
    const gdn_layout states = {.B = 1, .T = 1, .H = (size_t)1 << 21, .K = 1, .V = (size_t)1 << 40, .with_h0 = 1};
    const gdn_layout fits = {.B = 1, .T = 4096, .H = 2, .HV = 8, .K = 64, .V = 64, .with_h0 = 1};
    size_t bytes = 0;
    ck_assert_int_ne(gdn_layout_bytes(&values, &bytes), 0);
    ck_assert_ptr_nonnull(strstr(gdn_last_error(), "overflow"));
    ck_assert_int_ne(gdn_layout_bytes(&states, &bytes), 0);
    ck_assert_int_eq(gdn_layout_bytes(&fits, &bytes), 0);
    /* q, k: 2 x 4096 x 2 x 64; v, o: 2 x 4096 x 8 x 64; g, beta: 2 x 4096 x 8; h0, ht: 2 x 8 x 64 x 64 */
    ck_assert_uint_eq(bytes, (2u * 4096 * 2 * 64 + 2u * 4096 * 8 * 64 + 2u * 4096 * 8 + 2u * 8 * 64 * 64) * sizeof(real_t));
}
END_TEST

/* Stages 01 and 05 give a sequence the same bits whatever the batch and the heads around it
 * (OpenMP runs each (sequence, head) on its own, in the same order; stage 04 does not: it picks
 * its segments by the heads and threads): what --batch-invariant asks of the GPU stages, and a
 * check of test_embed_alone and test_same_bits_as_alone, which the GPU suites use for it.
 * _i: (stage 01 or 05, case). */
START_TEST(cpu_stages_batch_invariant)
{
    const gdn_stage *stages[2] = {&naive_loop_stage, &wy_chunked_stage};
    static const test_shape alone[2] = {{1, 130, 2, 24, 40}, {1, 70, 1, 16, 16}}, batch[2] = {{3, 130, 5, 24, 40}, {2, 70, 4, 16, 16}};
    const gdn_stage *stage = stages[_i / 2];
    gdn_problem p = test_problem(alone[_i % 2], 1, 1470 + 2 * _i), many = test_problem(batch[_i % 2], 1, 1471 + 2 * _i);
    test_embed_alone(&many, &p);
    gdn_result by_itself = test_run(stage, &p, 2, 0, 0), in_batch = test_run(stage, &many, 2, 0, 0);
    long where;
    ck_assert_msg(test_same_bits_as_alone(&many, &in_batch, &p, &by_itself, &where), "%s: the sequence's bits differ in the batch at %ld",
                  stage->name, where);
    /* and the check sees a difference: the sequence's last state value changed */
    real_t *last = &in_batch.ht[p.H * p.K * p.V - 1];
    *last = *last == 0 ? 1 : -*last;
    ck_assert(!test_same_bits_as_alone(&many, &in_batch, &p, &by_itself, &where) && where == (long)(p.T * p.H * p.V));
    gdn_result_free(&in_batch);
    gdn_result_free(&by_itself);
    gdn_problem_free(&many);
    gdn_problem_free(&p);
}
END_TEST

Suite *layouts_suite(void)
{
    Suite *suite = suite_create("layouts");
    TCase *oracle = tcase_create("oracle");
    tcase_add_loop_test(oracle, oracle_grouped_equals_keys_repeated, 0, 8);
    tcase_add_loop_test(oracle, oracle_packed_equals_each_sequence_alone, 0, 8);
    suite_add_tcase(suite, oracle);
    TCase *stages = tcase_create("stages");
    tcase_set_timeout(stages, 120);
    tcase_add_loop_test(stages, cpu_stages_over_ratios_and_mixes, 0, 24);
    tcase_add_loop_test(stages, wy_chunked_packed_every_chunk, 0, 128);
    tcase_add_test(stages, packed_equal_lengths_equal_rows);
    tcase_add_loop_test(stages, cpu_stages_batch_invariant, 0, 4);
    suite_add_tcase(suite, stages);
    TCase *inputs = tcase_create("inputs");
    tcase_set_timeout(inputs, 60);
    tcase_add_loop_test(inputs, bad_layout_files_refused, 0, (int)(sizeof file_faults / sizeof file_faults[0]));
    tcase_add_loop_test(inputs, bad_layout_options_refused, 0, (int)(sizeof command_faults / sizeof command_faults[0]));
    tcase_add_loop_test(inputs, drawn_and_read_layouts_agree, 0, 3);
    tcase_add_test(inputs, npy_integers);
    tcase_add_test(inputs, layout_bytes_refuse_overflow);
    suite_add_tcase(suite, inputs);
    return suite;
}
