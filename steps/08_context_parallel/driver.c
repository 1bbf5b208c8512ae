/* driver.c -- stage 08's MPI driver (driver.h): slices, collective errors, the timing loop,
 * --check-against and --out, for either backend. The ideas are in the backends' headers
 * (context_parallel.c, context_parallel.cu) and in docs/08_context_parallel.md. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include <mpi.h>

#include "../../common/compare.h"
#include "../../common/error.h"
#include "../../common/npy.h"
#include "../../common/timing.h"
#include "../../common/tolerances.h"
#include "driver.h"

#ifdef GDN_DOUBLE
#define MPI_REAL_T MPI_DOUBLE
#else
#define MPI_REAL_T MPI_FLOAT
#endif

static int rank, ranks, local_rank;
static const context_parallel_backend *backend;

int context_parallel_rank(void) { return rank; }
int context_parallel_ranks(void) { return ranks; }
int context_parallel_local_rank(void) { return local_rank; }
void context_parallel_barrier(void) { MPI_Barrier(MPI_COMM_WORLD); }
double context_parallel_wtime(void) { return MPI_Wtime(); }

int context_parallel_allgather(const float *mine, float *all, size_t count)
{
    if (count > INT_MAX)
        return gdn_set_error("%zu values are more than one MPI_Allgather can send", count);
    if (MPI_Allgather(mine, (int)count, MPI_FLOAT, all, (int)count, MPI_FLOAT, MPI_COMM_WORLD) != MPI_SUCCESS)
        return gdn_set_error("MPI_Allgather of %zu values failed", count);
    return 0;
}

/* Every rank learns whether any rank failed; the lowest failing rank prints its one line,
 * once: a backend that asked inside a pass (before a collective of its own) has the pass fail
 * on every rank, and the driver's asking again after the pass prints nothing more. */
int context_parallel_any_failed(int failed)
{
    static int reported;
    int mine = failed ? rank : INT_MAX, first;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == INT_MAX)
        return 0;
    if (first == rank && !reported)
        fprintf(stderr, "%s: error: %s (rank %d of %d)\n", backend->stage->name, gdn_last_error(), rank, ranks);
    reported = 1;
    return 1;
}

/* Chunks before rank r: the weights of ranks 0 .. r-1 (w, then 1 each) out of w + N - 1.
 * w is the backend's first_weight: the CPU backend's rank 0 replays while the others fold,
 * and a fold costs 1.4 replays there, so it gets 1.4 times the others' share (stage 04's
 * weight, eq. 8); the GPU backend's ranks all do the same work (w = 1). */
static size_t chunks_before(int r, size_t chunks)
{
    const double w = backend->first_weight;
    double weight = r == 0 ? 0.0 : w + (double)(r - 1), total = w + (double)(ranks - 1);
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

/* Copy tokens begin .. end - 1 of every (b, h) of the whole problem into the slice problem:
 * q and k by key heads, v, g and beta by value heads (HV of them: grouped value heads). */
static void copy_slice(gdn_problem *slice, const gdn_problem *whole, size_t begin)
{
    const size_t HV = gdn_value_heads(whole);
    for (size_t b = 0; b < slice->B; b++) {
        size_t keys_from = gdn_key_token(whole, b * whole->T + begin, 0), keys_to = gdn_key_token(slice, b * slice->T, 0),
               keys = slice->T * slice->H;
        size_t from = gdn_token(whole, b, begin, 0), to = gdn_token(slice, b, 0, 0), n = slice->T * HV;
        memcpy(slice->q + keys_to * slice->K, whole->q + keys_from * whole->K, keys * whole->K * sizeof(real_t));
        memcpy(slice->k + keys_to * slice->K, whole->k + keys_from * whole->K, keys * whole->K * sizeof(real_t));
        memcpy(slice->v + to * slice->V, whole->v + from * whole->V, n * whole->V * sizeof(real_t));
        memcpy(slice->g + to, whole->g + from, n * sizeof(real_t));
        memcpy(slice->beta + to, whole->beta + from, n * sizeof(real_t));
    }
    if (whole->h0)
        memcpy(slice->h0, whole->h0, gdn_state_count(whole) * sizeof(real_t));
}

/* This rank's slice of the problem, tokens *begin .. of the whole's T: drawn (only the slice)
 * or read (whole, then sliced). *whole_sizes: the whole problem's sizes (lengths none: a packed
 * batch is refused). The slice always has an h0 buffer: the replay's start state. *h0 is a
 * copy of the problem's h0, or NULL when it has none. */
static int load_slice(const gdn_settings *s, gdn_problem *slice, gdn_layout *whole_sizes, size_t *begin, real_t **h0)
{
    gdn_problem whole = {0};
    gdn_layout *w = whole_sizes;
    size_t end;
    if (s->in_dir) {
        if (gdn_problem_load(&whole, s->in_dir, s->check_inputs) || gdn_check_layout(backend->stage, &whole)) {
            gdn_problem_free(&whole);
            return -1;
        }
        *w = (gdn_layout){.B = whole.B, .T = whole.T, .H = whole.H, .K = whole.K, .V = whole.V, .HV = gdn_value_heads(&whole)};
    } else {
        *w = (gdn_layout){.B = s->B, .T = s->T, .H = s->H, .K = s->K, .V = s->V, .HV = s->HV ? s->HV : s->H};
    }
    w->with_h0 = s->in_dir ? whole.h0 != NULL : s->with_h0; /* every rank's, tokens or none (the result line) */
    slice_of(rank, w->T, s->chunk, begin, &end);
    int status = 0;
    if (end > *begin) {
        const gdn_layout mine = {.B = w->B, .T = end - *begin, .H = w->H, .K = w->K, .V = w->V, .HV = w->HV, .with_h0 = 1};
        status = gdn_problem_alloc_layout(slice, &mine);
        if (status == 0 && s->in_dir)
            copy_slice(slice, &whole, *begin);
        else if (status == 0)
            gdn_problem_generate_slice(slice, s->seed, w->T, *begin);
        if (status == 0 && w->with_h0) {
            *h0 = malloc(gdn_state_count(slice) * sizeof(real_t));
            if (*h0)
                memcpy(*h0, slice->h0, gdn_state_count(slice) * sizeof(real_t));
            else
                status = gdn_set_error("out of memory for h0");
        }
    } else { /* T = 0: no tokens */
        slice->B = w->B, slice->H = w->H, slice->HV = w->HV, slice->K = w->K, slice->V = w->V;
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

/* This rank's parts of o (its rows of each sequence) and of ht (the last rank's): pass 0 adds
 * their extremes, pass 1 their squares scaled by the whole tensors' extremes (common/compare.h) */
static void add_parts(int pass, const gdn_problem *slice, const gdn_result *out, const npy_array *o,
                      const npy_array *ht, const gdn_layout *whole, size_t begin, double extremes[2][3], double sums[2][2])
{
    const size_t B = whole->B, T = whole->T, HV = whole->HV, K = whole->K, V = whole->V;
    for (size_t b = 0; b < B && slice->T > 0; b++) {
        const real_t *x = out->o + gdn_token(slice, b, 0, 0) * V;
        const double *ref = o->data + ((b * T + begin) * HV) * V;
        if (pass == 0)
            gdn_difference_extremes(x, ref, slice->T * HV * V, extremes[0]);
        else
            gdn_difference_squares(x, ref, slice->T * HV * V, extremes[0], sums[0]);
    }
    if (rank == ranks - 1 && slice->T > 0) {
        if (pass == 0)
            gdn_difference_extremes(out->ht, ht->data, B * HV * K * V, extremes[1]);
        else
            gdn_difference_squares(out->ht, ht->data, B * HV * K * V, extremes[1], sums[1]);
    }
}

/* --check-against DIR: this rank's rows of DIR/o.npy, and ht on the last rank; reduced on rank 0. */
static int check_against(const char *dir, const gdn_problem *slice, const gdn_result *out, const gdn_layout *whole,
                         size_t begin, double *relative, double *max_absolute, double *non_finite)
{
    char path[4096];
    double local[2][3] = {{0}}, extremes[2][3], counts[2], sums_here[2][2] = {{0}}, sums[2][2];
    const size_t B = whole->B, T = whole->T, HV = whole->HV, K = whole->K, V = whole->V;
    npy_array o = {0}, ht = {0};
    int status = npy_path(path, sizeof path, dir, "o");
    if (status == 0 && (npy_read(path, &o) || o.ndim != 4 || o.shape[0] != B || o.shape[1] != T || o.shape[2] != HV ||
                        o.shape[3] != V))
        status = o.data ? gdn_set_error("%s: shape does not match o [B, T, HV, V]", path) : -1;
    if (status == 0)
        status = npy_path(path, sizeof path, dir, "ht");
    if (status == 0 && (npy_read(path, &ht) || ht.ndim != 4 || ht.shape[0] != B || ht.shape[1] != HV ||
                        ht.shape[2] != K || ht.shape[3] != V))
        status = ht.data ? gdn_set_error("%s: shape does not match ht [B, HV, K, V]", path) : -1;
    if (status == 0)
        add_parts(0, slice, out, &o, &ht, whole, begin, local, NULL);
    if (context_parallel_any_failed(status != 0)) {
        npy_free(&o);
        npy_free(&ht);
        return -1;
    }
    /* every rank needs the whole tensors' largest values to scale its squares */
    for (int t = 0; t < 2; t++) {
        MPI_Allreduce(local[t], extremes[t], 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Reduce(&local[t][2], &counts[t], 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    }
    add_parts(1, slice, out, &o, &ht, whole, begin, extremes, sums_here);
    npy_free(&o);
    npy_free(&ht);
    MPI_Reduce(sums_here, sums, 4, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        const double o_error = gdn_relative_from(extremes[0], sums[0]), ht_error = gdn_relative_from(extremes[1], sums[1]);
        *relative = isnan(o_error) || o_error > ht_error ? o_error : ht_error;
        *max_absolute = extremes[0][0] > extremes[1][0] ? extremes[0][0] : extremes[1][0];
        *non_finite = counts[0] + counts[1];
    }
    return 0;
}

/* An output that is not finite is an error before anything is compared or written
 * (common/problem.h): the ranks agree on the first such value of the whole outputs, and its
 * rank names it, with a cause drawn from every rank's inputs. h0 is the problem's initial
 * state (NULL for none), not the slice's h0 buffer, which holds the replay's start state. */
static int outputs_finite(const gdn_problem *slice, const gdn_result *out, real_t *h0, const gdn_layout *whole,
                          size_t begin)
{
    uint64_t mine = GDN_ALL_FINITE, first;
    if (slice->T > 0)
        mine = gdn_result_first_non_finite(slice, out, begin, whole->T, rank == ranks - 1);
    MPI_Allreduce(&mine, &first, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    if (first == GDN_ALL_FINITE)
        return 0;
    gdn_problem inputs = *slice;
    inputs.h0 = h0;
    enum { EXTREMES = sizeof(gdn_input_extremes) / sizeof(double) };
    _Static_assert(sizeof(gdn_input_extremes) == EXTREMES * sizeof(double), "reduced as doubles");
    gdn_input_extremes local = {0}, all;
    if (slice->T > 0)
        local = gdn_problem_extremes(&inputs);
    MPI_Allreduce(&local, &all, EXTREMES, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (mine == first)
        gdn_non_finite_error(slice, out, begin, whole->T, first, all);
    return context_parallel_any_failed(mine == first) ? -1 : 0;
}

/* --out DIR: o.npy written by every rank at its rows' offsets (MPI-IO), ht.npy by the last rank. */
static int write_outputs(const char *dir, const gdn_problem *slice, const gdn_result *out, const gdn_layout *whole,
                         size_t begin)
{
    char path[4096];
    const size_t B = whole->B, T = whole->T, HV = whole->HV, K = whole->K, V = whole->V;
    size_t o_shape[4] = {B, T, HV, V}, ht_shape[4] = {B, HV, K, V};
    unsigned char header[NPY_HEADER_MAX];
    size_t header_bytes = npy_header(header, 4, o_shape);
    int status = npy_path(path, sizeof path, dir, "ht"); /* the longer name: where it fits, o's does */
    if (status == 0 && rank == 0 && mkdir_for_outputs(dir))
        status = -1;
    if (context_parallel_any_failed(status))
        return -1;
    snprintf(path, sizeof path, "%s/o.npy", dir);
    MPI_File file;
    int opened = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &file);
    if (context_parallel_any_failed(opened != MPI_SUCCESS && gdn_set_error("%s: MPI_File_open failed", path)))
        return -1;
    MPI_File_set_size(file, 0); /* a longer file from an earlier run must not keep its tail */
    if (rank == 0 && MPI_File_write_at(file, 0, header, (int)header_bytes, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        status = gdn_set_error("%s: writing the header failed", path);
    for (size_t b = 0; b < B && slice->T > 0 && status == 0; b++) {
        MPI_Offset at = (MPI_Offset)(header_bytes + (b * T + begin) * HV * V * sizeof(real_t));
        size_t count = slice->T * HV * V; /* written in pieces MPI's int count can hold */
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
    if (context_parallel_any_failed(status != 0)) {
        if (rank == 0) { /* no partial o.npy is left behind to pass for a result (ht.npy: npy_write) */
            snprintf(path, sizeof path, "%s/o.npy", dir);
            remove(path);
        }
        return -1;
    }
    return 0;
}

int context_parallel_main(int argc, char **argv, const context_parallel_backend *chosen)
{
    backend = chosen;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_free(&node);
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) /* one --help, one result line: rank 0's */
        return 1;
    gdn_settings s;
    gdn_stage command_line = *backend->stage; /* --help and --check-against as they are under mpirun */
    command_line.options |= GDN_OPTION_DISTRIBUTED;
    int parsed = gdn_parse_command_line(argc, argv, &command_line, &s);
    if (parsed > 0)
        return MPI_Finalize(), 0;
    if (context_parallel_any_failed(parsed < 0))
        return MPI_Finalize(), 1;
    if (s.chunk == 0)
        s.chunk = 64;

    gdn_problem slice = {0};
    gdn_result out = {0};
    gdn_layout whole = {0};
    size_t begin = 0;
    real_t *h0 = NULL;
    void *context = NULL;
    int status = load_slice(&s, &slice, &whole, &begin, &h0);
    if (status == 0 && s.scale > 0)
        slice.scale = s.scale;
    if (status == 0 && slice.T > 0 && gdn_result_alloc(&out, &slice))
        status = -1;
    if (status == 0)
        status = backend->open(&slice, &s, h0, &context);
    if (context_parallel_any_failed(status != 0)) {
        backend->close(context);
        gdn_result_free(&out);
        gdn_problem_free(&slice);
        free(h0);
        return MPI_Finalize(), 1;
    }

    /* a warm-up, reps timed runs, a checked run; outputs poisoned before the first and last */
    double *times = calloc(4 * (size_t)s.reps, sizeof *times);
    for (int rep = -1; rep <= s.reps && status == 0; rep++) {
        double phases[3], worst[3];
        MPI_Barrier(MPI_COMM_WORLD);
        status = backend->run(context, (rep < 0 || rep == s.reps) && slice.T > 0, &out, phases);
        if (context_parallel_any_failed(status != 0)) {
            status = -1; /* on every rank: what follows is collective */
            break;
        }
        MPI_Reduce(phases, worst, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD); /* the slowest rank's */
        if (rank == 0 && rep >= 0 && rep < s.reps && times)
            for (int i = 0; i < 3; i++)
                times[(size_t)i * (size_t)s.reps + (size_t)rep] = worst[i];
    }
    double flops = 0, local_flops = status == 0 ? backend->flops(context) : 0, medians[3] = {0};
    MPI_Reduce(&local_flops, &flops, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (status == 0)
        status = outputs_finite(&slice, &out, h0, &whole, begin);
    double relative = 0, max_absolute = 0, non_finite = 0;
    char checks[160] = "";
    int check_failed = 0;
    if (status == 0 && s.check_dir) {
        status = check_against(s.check_dir, &slice, &out, &whole, begin, &relative, &max_absolute, &non_finite);
        if (status == 0 && rank == 0) {
            snprintf(checks, sizeof checks, " err_ref=%.3e maxabs_ref=%.3e", relative, max_absolute);
            /* bf16 inputs: tensor-core products round differently from the reference stage's */
            const double tolerance = backend->stage->bf16_inputs ? GDN_TOLERANCE_BF16 : GDN_TOLERANCE_VS_STAGE;
            if (non_finite > 0) { /* the outputs are finite (outputs_finite): the reference is not */
                fprintf(stderr, "%s: error: %s holds %.0f NaN or Inf values in o.npy and ht.npy where the outputs are "
                        "finite\n", backend->stage->name, s.check_dir, non_finite);
                check_failed = 1;
            } else if (!(relative <= tolerance)) {
                fprintf(stderr, "%s: error: differs from %s: relative %.3e > tolerance %.0e\n", backend->stage->name,
                        s.check_dir, relative, tolerance);
                check_failed = 1;
            }
        }
    }
    if (status == 0 && s.out_dir)
        status = write_outputs(s.out_dir, &slice, &out, &whole, begin);
    if (status == 0 && rank == 0) {
        const size_t heads = whole.B * whole.HV, K = whole.K, V = whole.V;
        double total[64] = {0}, *sum = s.reps <= 64 ? total : calloc((size_t)s.reps, sizeof *sum);
        for (int rep = 0; sum && times && rep < s.reps; rep++)
            sum[rep] = times[rep] + times[s.reps + rep] + times[2 * s.reps + rep];
        for (int i = 0; i < 3 && times; i++)
            medians[i] = gdn_median(times + (size_t)i * (size_t)s.reps, (size_t)s.reps);
        double median = sum ? gdn_median(sum, (size_t)s.reps) : 0;
        char settings[64]; /* the CPU backend's threads and chunk, the GPU backend's segments */
        if (backend->stage->options & GDN_OPTION_SEGMENTS)
            snprintf(settings, sizeof settings, "segments=%zu", s.segments);
        else
            snprintf(settings, sizeof settings, "threads=%d chunk=%zu", s.threads, s.chunk);
        char layout[32] = ""; /* as the other stages print it: HV where the value heads are grouped */
        if (whole.HV != whole.H)
            snprintf(layout, sizeof layout, " HV=%zu", whole.HV);
        printf("result stage=%s precision=%s B=%zu T=%zu H=%zu K=%zu V=%zu%s h0=%d ranks=%d %s reps=%d median_ms=%.4f "
               "phase1_ms=%.4f %s_ms=%.4f phase3_ms=%.4f summary_bytes=%zu gflops=%.3f%s\n",
               backend->stage->name, REAL_NAME, whole.B, whole.T, whole.H, K, V, layout, whole.with_h0, ranks, settings, s.reps,
               1e3 * median, 1e3 * medians[0], backend->exchange, 1e3 * medians[1], 1e3 * medians[2],
               heads * K * (K + V) * sizeof(real_t), flops / median * 1e-9, checks);
        if (sum != total)
            free(sum);
    }
    MPI_Bcast(&check_failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(times);
    backend->close(context);
    gdn_result_free(&out);
    gdn_problem_free(&slice);
    free(h0);
    MPI_Finalize();
    return status != 0 || check_failed ? 1 : 0;
}
