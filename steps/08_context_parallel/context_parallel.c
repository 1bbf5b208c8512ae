/* 08_context_parallel -- stage 04's three phases across processes, stitched by one MPI collective.
 *
 * The idea (docs/08_context_parallel.md): when one sequence outgrows one machine, give each
 * of N processes (ranks) a contiguous slice of it, whole chunks, for every batch and head:
 *   1. fold:   each rank folds its slice into one map per head, S -> A S + B (eq. 6 of
 *              docs/04_two_phase_scan.md), with stage 05's chunked form run on the augmented
 *              state [A | B] from [I | 0] with values [0 | v] (the form is linear in the
 *              state and the values together, so its final state is the map). Rank 0 knows
 *              its start (h0), so it replays instead and sends the constant map S -> its end
 *              state (stage 04's schedule); the last rank's map is never needed: it waits;
 *   2. stitch: MPI_Exscan with a user-defined, non-commutative operator (summaries.c) gives
 *              rank r the composition of ranks 0 .. r-1; applied to h0 it is r's start state.
 *              A summary is B H K (K + V) values, whatever T is: this is all that crosses
 *              the network;
 *   3. replay: ranks 1 .. N-1 run stage 05 on their slices from their true start states.
 *
 * Cost per rank, slice of L = T / N tokens: the fold is stage 05 with V' = K + V values
 * (measured 1.4 times a replay at K = V = 64), the replay is stage 05; ranks 1 .. N-2 do both,
 * in about 2.4 L, while rank 0 replays 1.4 L in phase 1 (its weight, slice_of) and the last
 * rank waits, then replays L: T = (N + 0.4) L, a speedup of about (N + 0.4) / 2.4 over one
 * process, and none at N = 2 (rank 1 can only wait for rank 0).
 * Communication: one Exscan of B H K (K + V) values (log N steps in Open MPI).
 * Inputs: each rank draws only its slice (gdn_problem_generate_slice); with --in every rank
 * reads the whole files and keeps its slice. --out: one o.npy, written by all ranks at
 * their offsets with MPI-IO (rank 0 writes the header); ht.npy by the last rank.
 * Errors are collective: a failure on any rank ends every rank, with one line from the
 * lowest failing rank (any_failed), never a hang.
 *
 * Build and run:  make bin/08_context_parallel && mpirun -np 2 bin/08_context_parallel --T 65536 --H 8 --threads 1
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include <mpi.h>
#include <omp.h>

#include "../../common/compare.h"
#include "../../common/error.h"
#include "../../common/npy.h"
#include "../../common/stage.h"
#include "../../common/timing.h"
#include "../../common/tolerances.h"
#include "../02_affine/affine.h"
#include "../05_wy_chunked/wy_chunked.h"
#include "summaries.h"

#ifdef GDN_DOUBLE
#define MPI_REAL_T MPI_DOUBLE
#else
#define MPI_REAL_T MPI_FLOAT
#endif

static int rank, ranks;

/* Every rank learns whether any rank failed; the lowest failing rank prints its one line. */
static int any_failed(int failed)
{
    int mine = failed ? rank : INT_MAX, first;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == INT_MAX)
        return 0;
    if (first == rank)
        fprintf(stderr, "08_context_parallel: error: %s (rank %d of %d)\n", gdn_last_error(), rank, ranks);
    return 1;
}

/* Rank 0 replays in phase 1 while ranks 1 .. N-2 fold, and a fold costs FOLD_OVER_REPLAY
 * replays (measured with bin/08 at K = V = 64: 1.4), so rank 0 gets that many times the
 * others' share and finishes phase 1 with them (stage 04's weight w, eq. 8). */
#define FOLD_OVER_REPLAY 1.4

/* Chunks before rank r: the weights of ranks 0 .. r-1 (w, then 1 each) out of w + N - 1. */
static size_t chunks_before(int r, size_t chunks)
{
    double weight = r == 0 ? 0.0 : FOLD_OVER_REPLAY + (double)(r - 1), total = FOLD_OVER_REPLAY + (double)(ranks - 1);
    return r >= ranks ? chunks : (size_t)((double)chunks * weight / total);
}

/* Rank r's tokens, whole chunks (a rank may get none when there are fewer chunks than ranks;
 * the last rank always gets at least one, since its weight share is below 1). */
static void slice_of(int r, size_t T, size_t C, size_t *begin, size_t *end)
{
    size_t chunks = (T + C - 1) / C, first = chunks_before(r, chunks), last = chunks_before(r + 1, chunks);
    *begin = first * C < T ? first * C : T;
    *end = last * C < T ? last * C : T;
}

/* Copy tokens begin .. end - 1 of every (b, h) of the whole problem into the slice problem. */
static void copy_slice(gdn_problem *slice, const gdn_problem *whole, size_t begin)
{
    for (size_t b = 0; b < slice->B; b++) {
        size_t from = gdn_token(whole, b, begin, 0), to = gdn_token(slice, b, 0, 0), n = slice->T * slice->H;
        memcpy(slice->q + to * slice->K, whole->q + from * whole->K, n * whole->K * sizeof(real_t));
        memcpy(slice->k + to * slice->K, whole->k + from * whole->K, n * whole->K * sizeof(real_t));
        memcpy(slice->v + to * slice->V, whole->v + from * whole->V, n * whole->V * sizeof(real_t));
        memcpy(slice->g + to, whole->g + from, n * sizeof(real_t));
        memcpy(slice->beta + to, whole->beta + from, n * sizeof(real_t));
    }
    if (whole->h0)
        memcpy(slice->h0, whole->h0, gdn_state_count(whole) * sizeof(real_t));
}

/* This rank's slice of the problem, tokens *begin .. of sizes[1]: drawn (only the slice) or
 * read (whole, then sliced). The slice always has an h0 buffer: the replay's start state.
 * *h0 is a copy of the problem's h0, or NULL when it has none. */
static int load_slice(const gdn_settings *s, gdn_problem *slice, size_t sizes[5], size_t *begin, real_t **h0)
{
    gdn_problem whole = {0};
    size_t end;
    if (s->in_dir) {
        if (gdn_problem_load(&whole, s->in_dir, s->check_inputs))
            return -1;
        sizes[0] = whole.B, sizes[1] = whole.T, sizes[2] = whole.H, sizes[3] = whole.K, sizes[4] = whole.V;
    } else {
        sizes[0] = s->B, sizes[1] = s->T, sizes[2] = s->H, sizes[3] = s->K, sizes[4] = s->V;
    }
    slice_of(rank, sizes[1], s->chunk, begin, &end);
    int status = 0;
    if (end > *begin) {
        status = gdn_problem_alloc(slice, sizes[0], end - *begin, sizes[2], sizes[3], sizes[4], 1);
        if (status == 0 && s->in_dir)
            copy_slice(slice, &whole, *begin);
        else if (status == 0)
            gdn_problem_generate_slice(slice, s->seed, sizes[1], *begin);
        int with_h0 = s->in_dir ? whole.h0 != NULL : s->with_h0;
        if (status == 0 && with_h0) {
            *h0 = malloc(gdn_state_count(slice) * sizeof(real_t));
            if (*h0)
                memcpy(*h0, slice->h0, gdn_state_count(slice) * sizeof(real_t));
            else
                status = gdn_set_error("out of memory for h0");
        }
    } else if (s->in_dir) {
        slice->B = whole.B, slice->H = whole.H, slice->K = whole.K, slice->V = whole.V; /* T = 0: no tokens */
    } else {
        slice->B = s->B, slice->H = s->H, slice->K = s->K, slice->V = s->V;
    }
    gdn_problem_free(&whole);
    return status;
}

static int mkdir_for_outputs(const char *dir)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return gdn_set_error("%s: cannot create folder: %s", dir, strerror(errno));
    return 0;
}

/* Per (b, h): K x K then K x V, from the augmented state X = [A | B] (K x (K + V), row-major). */
static void summary_from_augmented(real_t *summary, const real_t *X, size_t heads, size_t K, size_t V)
{
    for (size_t head = 0; head < heads; head++) {
        affine_map map = affine_map_at(summary, head, K, V);
        const real_t *rows = X + head * K * (K + V);
        for (size_t i = 0; i < K; i++) {
            memcpy(map.A + i * K, rows + i * (K + V), K * sizeof(real_t));
            memcpy(map.B + i * V, rows + i * (K + V) + K, V * sizeof(real_t));
        }
    }
}

/* The MPI operator: inout = inout o in, the lower ranks' summary (in) applied first.
 * MPI_User_function carries no pointer for user data, so the sizes and the scratch map
 * travel in these file-scope variables, set once before the first MPI_Exscan. */
static size_t op_heads, op_K, op_V;
static real_t *op_scratch;
static void compose_operator(void *in, void *inout, int *count, MPI_Datatype *type)
{
    (void)type;
    for (int n = 0; n < *count; n++) { /* count summaries (always 1 here) */
        size_t offset = (size_t)n * summary_values(op_heads, op_K, op_V);
        combine_summaries((const real_t *)in + offset, (real_t *)inout + offset, op_heads, op_K, op_V, op_scratch);
    }
}

typedef struct {
    gdn_problem slice, augmented;      /* augmented: v = [0 | v], h0 = [I | 0], K + V values */
    gdn_result out, augmented_out;
    real_t *summary, *prefix;
    MPI_Datatype summary_type;
    MPI_Op compose;
} rank_state;

/* S_r = A h0 + B for every head: the prefix map applied to h0 (or to zero), into slice.h0. */
static void set_start_states(rank_state *c, size_t heads, const real_t *prefix, const real_t *h0)
{
    const size_t K = c->slice.K, V = c->slice.V;
    for (size_t head = 0; head < heads; head++) {
        affine_map map = affine_map_at((real_t *)prefix, head, K, V);
        real_t *start_state = c->slice.h0 + head * K * V;
        if (h0)
            apply_affine(start_state, map, h0 + head * K * V, K, V);
        else
            memcpy(start_state, map.B, K * V * sizeof(real_t));
    }
}

/* One forward pass; phase times in seconds[0..2]. */
static int forward(rank_state *c, const gdn_settings *s, size_t heads, const real_t *h0, double seconds[3])
{
    const size_t K = c->slice.K, V = c->slice.V, W = K + V;
    const int has_tokens = c->slice.T > 0, first = rank == 0, last = rank + 1 == ranks;
    gdn_settings chunked = *s;
    double start = MPI_Wtime();
    /* 1. Rank 0 knows its start state (h0): it replays now, and its summary is the constant
     *    map S -> its end state (A = 0). The last rank's summary is never used: it waits.
     *    The others fold: stage 05 on the augmented slice, whose final state is [A | B]. */
    if (has_tokens && first) {
        identity_summaries(c->prefix, heads, K, V);
        set_start_states(c, heads, c->prefix, h0);
        if (wy_chunked_stage.forward(&c->slice, &chunked, &c->out))
            return -1;
        for (size_t head = 0; head < heads; head++) {
            affine_map map = affine_map_at(c->summary, head, K, V);
            memset(map.A, 0, K * K * sizeof(real_t));
            memcpy(map.B, c->out.ht + head * K * V, K * V * sizeof(real_t));
        }
    } else if (has_tokens && !last) {
        gdn_problem *a = &c->augmented;
        for (size_t token = 0; token < gdn_tokens(a); token++) /* values [0 | v] */
            memcpy(a->v + token * W + K, c->slice.v + token * V, V * sizeof(real_t));
        if (wy_chunked_stage.forward(a, &chunked, &c->augmented_out))
            return -1;
        summary_from_augmented(c->summary, c->augmented_out.ht, heads, K, V);
    } else {
        identity_summaries(c->summary, heads, K, V);
    }
    MPI_Barrier(MPI_COMM_WORLD); /* so that the stitch's time is communication, not waiting */
    double folded = MPI_Wtime();
    /* 2. stitch: rank r receives summaries 0 .. r-1 composed; rank 0's buffer is undefined */
    MPI_Exscan(c->summary, c->prefix, 1, c->summary_type, c->compose, MPI_COMM_WORLD);
    double stitched = MPI_Wtime();
    /* 3. replay from the true start state S_r = A_prefix h0 + B_prefix (rank 0 has replayed) */
    if (has_tokens && !first) {
        set_start_states(c, heads, c->prefix, h0);
        if (wy_chunked_stage.forward(&c->slice, &chunked, &c->out))
            return -1;
    }
    double replayed = MPI_Wtime();
    seconds[0] = folded - start, seconds[1] = stitched - folded, seconds[2] = replayed - stitched;
    return 0;
}

/* Sums over this rank's part for a relative L2 error: |x - ref|^2, |ref|^2, max |x - ref|, non-finite. */
static void add_difference(double sums[4], const real_t *x, const double *ref, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        double d = (double)x[i] - ref[i];
        if (!isfinite(d) || !isfinite(ref[i]))
            sums[3] += 1;
        else {
            sums[0] += d * d, sums[1] += ref[i] * ref[i];
            sums[2] = fabs(d) > sums[2] ? fabs(d) : sums[2];
        }
    }
}

/* --check-against DIR: this rank's rows of DIR/o.npy, and ht on the last rank; reduced on rank 0. */
static int check_against(const char *dir, const gdn_problem *slice, const gdn_result *out, size_t sizes[5],
                         size_t begin, double *relative, double *max_absolute, double *non_finite)
{
    char path[4096];
    double local[2][4] = {{0}}, total[2][4];
    size_t B = sizes[0], T = sizes[1], H = sizes[2], K = sizes[3], V = sizes[4];
    int status = 0;
    npy_array o = {0}, ht = {0};
    snprintf(path, sizeof path, "%s/o.npy", dir);
    if (npy_read(path, &o) || o.ndim != 4 || o.shape[0] != B || o.shape[1] != T || o.shape[2] != H ||
        o.shape[3] != V)
        status = o.data ? gdn_set_error("%s: shape does not match o [B, T, H, V]", path) : -1;
    snprintf(path, sizeof path, "%s/ht.npy", dir);
    if (status == 0 && (npy_read(path, &ht) || ht.ndim != 4 || ht.shape[0] != B || ht.shape[1] != H ||
                        ht.shape[2] != K || ht.shape[3] != V))
        status = ht.data ? gdn_set_error("%s: shape does not match ht [B, H, K, V]", path) : -1;
    if (status == 0 && slice->T > 0) {
        for (size_t b = 0; b < B; b++)
            add_difference(local[0], out->o + gdn_token(slice, b, 0, 0) * V,
                           o.data + ((b * T + begin) * H) * V, slice->T * H * V);
        if (rank == ranks - 1)
            add_difference(local[1], out->ht, ht.data, B * H * K * V);
    }
    npy_free(&o);
    npy_free(&ht);
    if (any_failed(status != 0))
        return -1;
    MPI_Reduce(local[0], total[0], 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(local[1], total[1], 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&local[0][2], &total[0][2], 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&local[1][2], &total[1][2], 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&local[0][3], &total[0][3], 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&local[1][3], &total[1][3], 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double o_error = sqrt(total[0][0]) / (total[0][1] > 0 ? sqrt(total[0][1]) : 1);
        double ht_error = sqrt(total[1][0]) / (total[1][1] > 0 ? sqrt(total[1][1]) : 1);
        *relative = o_error > ht_error ? o_error : ht_error;
        *max_absolute = total[0][2] > total[1][2] ? total[0][2] : total[1][2];
        *non_finite = total[0][3] + total[1][3];
    }
    return 0;
}

/* --out DIR: o.npy written by every rank at its rows' offsets (MPI-IO), ht.npy by the last rank. */
static int write_outputs(const char *dir, const gdn_problem *slice, const gdn_result *out, size_t sizes[5],
                         size_t begin)
{
    char path[4096];
    size_t B = sizes[0], T = sizes[1], H = sizes[2], K = sizes[3], V = sizes[4];
    size_t o_shape[4] = {B, T, H, V}, ht_shape[4] = {B, H, K, V};
    unsigned char header[NPY_HEADER_MAX];
    size_t header_bytes = npy_header(header, 4, o_shape);
    int status = 0;
    if (rank == 0 && mkdir_for_outputs(dir))
        status = -1;
    if (any_failed(status))
        return -1;
    snprintf(path, sizeof path, "%s/o.npy", dir);
    MPI_File file;
    int opened = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &file);
    if (any_failed(opened != MPI_SUCCESS && gdn_set_error("%s: MPI_File_open failed", path)))
        return -1;
    MPI_File_set_size(file, 0); /* a longer file from an earlier run must not keep its tail */
    if (rank == 0 && MPI_File_write_at(file, 0, header, (int)header_bytes, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        status = gdn_set_error("%s: writing the header failed", path);
    for (size_t b = 0; b < B && slice->T > 0 && status == 0; b++) {
        MPI_Offset at = (MPI_Offset)(header_bytes + (b * T + begin) * H * V * sizeof(real_t));
        size_t count = slice->T * H * V; /* written in pieces MPI's int count can hold */
        const real_t *from = out->o + gdn_token(slice, b, 0, 0) * V;
        for (size_t done = 0; done < count && status == 0;) {
            int piece = count - done > (size_t)1 << 28 ? 1 << 28 : (int)(count - done);
            if (MPI_File_write_at(file, at + (MPI_Offset)(done * sizeof(real_t)), from + done, piece, MPI_REAL_T,
                                  MPI_STATUS_IGNORE) != MPI_SUCCESS)
                status = gdn_set_error("%s: writing rows at offset %lld failed", path, (long long)at);
            done += (size_t)piece;
        }
    }
    MPI_File_close(&file);
    if (status == 0 && rank == ranks - 1) {
        snprintf(path, sizeof path, "%s/ht.npy", dir);
        status = npy_write(path, out->ht, 4, ht_shape);
    }
    return any_failed(status != 0) ? -1 : 0;
}

static const gdn_stage context_parallel_stage = {
    .name = "08_context_parallel",
    .idea = "the sequence split across MPI processes: fold slices, one MPI_Exscan, replay (run with mpirun)",
    .options = GDN_OPTION_CHUNK,
};

/* The augmented slice for the fold: q, k, g, beta shared with the slice; v = [0 | v] and
 * h0 = [I | 0] of its own, K + V values wide. */
static int make_augmented(rank_state *c)
{
    const gdn_problem *p = &c->slice;
    gdn_problem *a = &c->augmented;
    *a = (gdn_problem){.B = p->B, .T = p->T, .H = p->H, .K = p->K, .V = p->K + p->V, .scale = p->scale,
                       .q = p->q, .k = p->k, .g = p->g, .beta = p->beta};
    a->v = calloc(gdn_tokens(a) * a->V, sizeof(real_t)); /* the [0 | ...] half stays zero */
    a->h0 = malloc(gdn_state_count(a) * sizeof(real_t));
    if (!a->v || !a->h0)
        return gdn_set_error("out of memory for the fold's augmented slice (%zu values)", gdn_tokens(a) * a->V);
    for (size_t head = 0; head < a->B * a->H; head++) /* h0 = [I | 0]: the same every pass, set once */
        for (size_t i = 0; i < a->K; i++)
            for (size_t j = 0; j < a->V; j++)
                a->h0[(head * a->K + i) * a->V + j] = i == j ? 1 : 0;
    return gdn_result_alloc(&c->augmented_out, a);
}

static void release(rank_state *c, real_t *h0)
{
    free(c->augmented.v);
    free(c->augmented.h0);
    gdn_result_free(&c->augmented_out);
    gdn_result_free(&c->out);
    gdn_problem_free(&c->slice);
    free(c->summary);
    free(c->prefix);
    free(op_scratch);
    free(h0);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) /* one --help, one result line: rank 0's */
        return 1;
    gdn_settings s;
    int parsed = gdn_parse_command_line(argc, argv, &context_parallel_stage, &s);
    if (parsed > 0)
        return MPI_Finalize(), 0;
    if (parsed == 0 && s.check_oracle)
        parsed = gdn_set_error("--check-against oracle is not offered under MPI; compare with a folder another stage "
                               "wrote with --out (stage 05's)");
    if (any_failed(parsed < 0))
        return MPI_Finalize(), 1;
    if (s.chunk == 0)
        s.chunk = 64;
    omp_set_num_threads(s.threads);

    rank_state c = {0};
    size_t sizes[5] = {0}, begin = 0;
    real_t *h0 = NULL;
    int status = load_slice(&s, &c.slice, sizes, &begin, &h0);
    if (status == 0 && s.scale > 0)
        c.slice.scale = s.scale;
    const size_t heads = sizes[0] * sizes[2], K = sizes[3], V = sizes[4], values = summary_values(heads, K, V);
    if (status == 0 && values > INT_MAX)
        status = gdn_set_error("a summary of %zu values is more than one MPI datatype can describe", values);
    if (status == 0 && c.slice.T > 0 && (gdn_result_alloc(&c.out, &c.slice) || (rank > 0 && rank + 1 < ranks && make_augmented(&c))))
        status = -1;
    c.summary = malloc(values * sizeof(real_t));
    c.prefix = malloc(values * sizeof(real_t));
    op_scratch = malloc(K * (K + V) * sizeof(real_t));
    if (status == 0 && (!c.summary || !c.prefix || !op_scratch))
        status = gdn_set_error("out of memory for the summaries (%zu values)", values);
    if (any_failed(status != 0)) {
        release(&c, h0);
        return MPI_Finalize(), 1;
    }
    op_heads = heads, op_K = K, op_V = V;
    MPI_Type_contiguous((int)values, MPI_REAL_T, &c.summary_type);
    MPI_Type_commit(&c.summary_type);
    MPI_Op_create(compose_operator, 0 /* not commutative: the order of the ranks matters */, &c.compose);

    /* a warm-up, reps timed runs, a checked run; outputs poisoned before the first and last */
    double *times = calloc(4 * (size_t)s.reps, sizeof *times);
    for (int rep = -1; rep <= s.reps && status == 0; rep++) {
        double phases[3], worst[3];
        if ((rep < 0 || rep == s.reps) && c.slice.T > 0)
            gdn_result_poison(&c.out, &c.slice);
        MPI_Barrier(MPI_COMM_WORLD);
        status = forward(&c, &s, heads, h0, phases);
        if (any_failed(status != 0))
            break;
        MPI_Reduce(phases, worst, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD); /* the slowest rank's */
        if (rank == 0 && rep >= 0 && rep < s.reps && times)
            for (int i = 0; i < 3; i++)
                times[(size_t)i * (size_t)s.reps + (size_t)rep] = worst[i];
    }
    double flops = 0, local_flops = c.slice.T ? wy_chunked_flops(&c.slice, &s) : 0, medians[3] = {0};
    if (status == 0 && c.augmented.v)
        local_flops += wy_chunked_flops(&c.augmented, &s);
    MPI_Reduce(&local_flops, &flops, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    double relative = 0, max_absolute = 0, non_finite = 0;
    char checks[160] = "";
    int check_failed = 0;
    if (status == 0 && s.check_dir) {
        status = check_against(s.check_dir, &c.slice, &c.out, sizes, begin, &relative, &max_absolute, &non_finite);
        if (status == 0 && rank == 0) {
            snprintf(checks, sizeof checks, " err_ref=%.3e maxabs_ref=%.3e", relative, max_absolute);
            if (non_finite > 0 || !(relative <= GDN_TOLERANCE_VS_STAGE)) {
                fprintf(stderr, "08_context_parallel: error: differs from %s: relative %.3e > tolerance %.0e%s\n",
                        s.check_dir, relative, GDN_TOLERANCE_VS_STAGE, non_finite > 0 ? " (NaN or Inf)" : "");
                check_failed = 1;
            }
        }
    }
    if (status == 0 && s.out_dir)
        status = write_outputs(s.out_dir, &c.slice, &c.out, sizes, begin);
    if (status == 0 && rank == 0) {
        double total[64] = {0}, *sum = s.reps <= 64 ? total : calloc((size_t)s.reps, sizeof *sum);
        for (int rep = 0; sum && times && rep < s.reps; rep++)
            sum[rep] = times[rep] + times[s.reps + rep] + times[2 * s.reps + rep];
        for (int i = 0; i < 3 && times; i++)
            medians[i] = gdn_median(times + (size_t)i * (size_t)s.reps, (size_t)s.reps);
        double median = sum ? gdn_median(sum, (size_t)s.reps) : 0;
        printf("result stage=08_context_parallel precision=%s B=%zu T=%zu H=%zu K=%zu V=%zu h0=%d ranks=%d "
               "threads=%d chunk=%zu reps=%d median_ms=%.4f phase1_ms=%.4f exscan_ms=%.4f phase3_ms=%.4f "
               "summary_bytes=%zu gflops=%.3f%s\n",
               REAL_NAME, sizes[0], sizes[1], sizes[2], K, V, h0 != NULL, ranks, s.threads, s.chunk, s.reps,
               1e3 * median, 1e3 * medians[0], 1e3 * medians[1], 1e3 * medians[2], values * sizeof(real_t),
               flops / median * 1e-9, checks);
        if (sum != total)
            free(sum);
    }
    MPI_Bcast(&check_failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(times);
    MPI_Op_free(&c.compose);
    MPI_Type_free(&c.summary_type);
    release(&c, h0);
    MPI_Finalize();
    return status != 0 || check_failed ? 1 : 0;
}
