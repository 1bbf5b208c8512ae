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
 *              A summary is B HV K (K + V) values, whatever T is: this is all that crosses
 *              the network (HV: the value heads, H unless grouped: a state, and so a map,
 *              is a value head's; its keys are read from its key head, as stage 05 reads them);
 *   3. replay: ranks 1 .. N-1 run stage 05 on their slices from their true start states.
 *
 * Cost per rank, slice of L = T / N tokens: the fold is stage 05 with V' = K + V values
 * (measured 1.4 times a replay at K = V = 64), the replay is stage 05; ranks 1 .. N-2 do both,
 * in about 2.4 L, while rank 0 replays 1.4 L in phase 1 (its weight, slice_of) and the last
 * rank waits, then replays L: T = (N + 0.4) L, a speedup of about (N + 0.4) / 2.4 over one
 * process, and none at N = 2 (rank 1 can only wait for rank 0).
 * Communication: one Exscan of B HV K (K + V) values (log N steps in Open MPI).
 * Inputs: each rank draws only its slice (gdn_problem_generate_slice); with --in every rank
 * reads the whole files and keeps its slice. --out: one o.npy, written by all ranks at
 * their offsets with MPI-IO (rank 0 writes the header); ht.npy by the last rank.
 * Errors are collective: a failure on any rank ends every rank, with one line from the
 * lowest failing rank (any_failed), never a hang. The slices, the errors, the timing loop,
 * --check-against and --out are the MPI driver's (driver.c), which the GPU twin
 * (context_parallel.cu) shares; this file is the CPU backend: the three phases.
 *
 * Build and run:  make bin/08_context_parallel && mpirun -np 2 bin/08_context_parallel --T 65536 --H 8 --threads 1
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#include <omp.h>

#include "../../common/error.h"
#include "../02_affine/affine.h"
#include "../05_wy_chunked/wy_chunked.h"
#include "driver.h"
#include "summaries.h"

#ifdef GDN_DOUBLE
#define MPI_REAL_T MPI_DOUBLE
#else
#define MPI_REAL_T MPI_FLOAT
#endif

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
    gdn_problem *slice;                /* the driver's; its h0 is the replay's start state */
    const real_t *h0;                  /* the problem's initial state, or NULL */
    gdn_settings settings;
    gdn_problem augmented;             /* v = [0 | v], h0 = [I | 0], K + V values */
    gdn_result augmented_out;
    real_t *summary, *prefix;
    MPI_Datatype summary_type;
    MPI_Op compose;
    int has_type, has_op;
} rank_state;

/* S_r = A h0 + B for every head: the prefix map applied to h0 (or to zero), into slice.h0. */
static void set_start_states(rank_state *c, size_t heads, const real_t *prefix, const real_t *h0)
{
    const size_t K = c->slice->K, V = c->slice->V;
    for (size_t head = 0; head < heads; head++) {
        affine_map map = affine_map_at((real_t *)prefix, head, K, V);
        real_t *start_state = c->slice->h0 + head * K * V;
        if (h0)
            apply_affine(start_state, map, h0 + head * K * V, K, V);
        else
            memcpy(start_state, map.B, K * V * sizeof(real_t));
    }
}

/* One forward pass into out; phase times in seconds[0..2]. */
static int forward(rank_state *c, gdn_result *out, double seconds[3])
{
    const size_t K = c->slice->K, V = c->slice->V, W = K + V, heads = c->slice->B * gdn_value_heads(c->slice);
    const int rank = context_parallel_rank(), has_tokens = c->slice->T > 0, first = rank == 0,
              last = rank + 1 == context_parallel_ranks();
    const real_t *h0 = c->h0;
    double start = MPI_Wtime();
    /* 1. Rank 0 knows its start state (h0): it replays now, and its summary is the constant
     *    map S -> its end state (A = 0). The last rank's summary is never used: it waits.
     *    The others fold: stage 05 on the augmented slice, whose final state is [A | B]. */
    if (has_tokens && first) {
        identity_summaries(c->prefix, heads, K, V);
        set_start_states(c, heads, c->prefix, h0);
        if (wy_chunked_stage.forward(c->slice, &c->settings, out))
            return -1;
        for (size_t head = 0; head < heads; head++) {
            affine_map map = affine_map_at(c->summary, head, K, V);
            memset(map.A, 0, K * K * sizeof(real_t));
            memcpy(map.B, out->ht + head * K * V, K * V * sizeof(real_t));
        }
    } else if (has_tokens && !last) {
        gdn_problem *a = &c->augmented;
        for (size_t token = 0; token < gdn_tokens(a); token++) /* values [0 | v] */
            memcpy(a->v + token * W + K, c->slice->v + token * V, V * sizeof(real_t));
        if (wy_chunked_stage.forward(a, &c->settings, &c->augmented_out))
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
        if (wy_chunked_stage.forward(c->slice, &c->settings, out))
            return -1;
    }
    double replayed = MPI_Wtime();
    seconds[0] = folded - start, seconds[1] = stitched - folded, seconds[2] = replayed - stitched;
    return 0;
}

/* Rank 0 replays in phase 1 while ranks 1 .. N-2 fold, and a fold costs FOLD_OVER_REPLAY
 * replays (measured with bin/08 at K = V = 64: 1.4), so rank 0 gets that many times the
 * others' share and finishes phase 1 with them (stage 04's weight w, eq. 8; the driver's
 * slice_of). */
#define FOLD_OVER_REPLAY 1.4

static const gdn_stage context_parallel_stage = {
    .name = "08_context_parallel",
    .idea = "the sequence split across MPI processes: fold slices, one MPI_Exscan, replay (run with mpirun)",
    .options = GDN_OPTION_CHUNK | GDN_OPTION_VALUE_HEADS,
};

/* The augmented slice for the fold: q, k, g, beta shared with the slice; v = [0 | v] and
 * h0 = [I | 0] of its own, K + V values wide. */
static int make_augmented(rank_state *c)
{
    const gdn_problem *p = c->slice;
    gdn_problem *a = &c->augmented;
    *a = (gdn_problem){.B = p->B, .T = p->T, .H = p->H, .K = p->K, .V = p->K + p->V, .HV = p->HV, .scale = p->scale,
                       .q = p->q, .k = p->k, .g = p->g, .beta = p->beta};
    a->v = calloc(gdn_tokens(a) * a->V, sizeof(real_t)); /* the [0 | ...] half stays zero */
    a->h0 = malloc(gdn_state_count(a) * sizeof(real_t));
    if (!a->v || !a->h0)
        return gdn_set_error("out of memory for the fold's augmented slice (%zu values)", gdn_tokens(a) * a->V);
    for (size_t head = 0; head < a->B * gdn_value_heads(a); head++) /* h0 = [I | 0]: the same every pass, set once */
        for (size_t i = 0; i < a->K; i++)
            for (size_t j = 0; j < a->V; j++)
                a->h0[(head * a->K + i) * a->V + j] = i == j ? 1 : 0;
    return gdn_result_alloc(&c->augmented_out, a);
}


static void cpu_close(void *context)
{
    rank_state *c = (rank_state *)context;
    if (!c)
        return;
    if (c->has_op)
        MPI_Op_free(&c->compose);
    if (c->has_type)
        MPI_Type_free(&c->summary_type);
    free(c->augmented.v);
    free(c->augmented.h0);
    gdn_result_free(&c->augmented_out);
    free(c->summary);
    free(c->prefix);
    free(op_scratch);
    op_scratch = NULL;
    free(c);
}

static int cpu_open(gdn_problem *slice, gdn_settings *s, const real_t *h0, void **context)
{
    rank_state *c = (rank_state *)calloc(1, sizeof *c);
    if (!(*context = c))
        return gdn_set_error("out of memory");
    c->slice = slice, c->h0 = h0, c->settings = *s;
    omp_set_num_threads(s->threads);
    const int rank = context_parallel_rank(), ranks = context_parallel_ranks();
    const size_t heads = slice->B * gdn_value_heads(slice), K = slice->K, V = slice->V, values = summary_values(heads, K, V);
    if (values > INT_MAX)
        return gdn_set_error("a summary of %zu values is more than one MPI datatype can describe", values);
    if (slice->T > 0 && rank > 0 && rank + 1 < ranks && make_augmented(c))
        return -1;
    c->summary = malloc(values * sizeof(real_t));
    c->prefix = malloc(values * sizeof(real_t));
    op_scratch = malloc(K * (K + V) * sizeof(real_t));
    if (!c->summary || !c->prefix || !op_scratch)
        return gdn_set_error("out of memory for the summaries (%zu values)", values);
    op_heads = heads, op_K = K, op_V = V;
    MPI_Type_contiguous((int)values, MPI_REAL_T, &c->summary_type);
    MPI_Type_commit(&c->summary_type);
    c->has_type = 1;
    MPI_Op_create(compose_operator, 0 /* not commutative: the order of the ranks matters */, &c->compose);
    c->has_op = 1;
    return 0;
}

static int cpu_run(void *context, int poisoned, gdn_result *out, double seconds[3])
{
    rank_state *c = (rank_state *)context;
    if (poisoned)
        gdn_result_poison(out, c->slice);
    return forward(c, out, seconds);
}

static double cpu_flops(void *context)
{
    rank_state *c = (rank_state *)context;
    double flops = c->slice->T ? wy_chunked_flops(c->slice, &c->settings) : 0;
    return c->augmented.v ? flops + wy_chunked_flops(&c->augmented, &c->settings) : flops;
}

int main(int argc, char **argv)
{
    static const context_parallel_backend cpu = {&context_parallel_stage, "exscan", FOLD_OVER_REPLAY,
                                                 cpu_open, cpu_run, cpu_flops, cpu_close};
    return context_parallel_main(argc, argv, &cpu);
}
