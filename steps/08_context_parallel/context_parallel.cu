/* 08_context_parallel_cuda -- stage 08 across GPUs: one MPI process per GPU, each running
 * stage 07's kernels on its slice of the sequence; one small map per head crosses between them.
 *
 * The idea (docs/08_context_parallel.md, "Across GPUs"): the CPU backend's three phases, with
 * stage 07 as the engine of each rank. Rank r of N owns chunks [r T/N, (r+1) T/N) of every
 * (batch, head), cut on its GPU into P segments as stage 07 cuts a sequence:
 *   1. fold:     07's kernel 1, then 07's fold, keeping the map of every segment (07 drops
 *                the last one: here the ranks after need it); then compose_segment_maps
 *                turns the P maps into the slice's map M_r, one K x (K + V) [A | B] per head,
 *                whatever T and P are. The last rank folds P - 1 like 07 and composes nothing.
 *   2. exchange: the maps, staged through host memory (copied back, MPI_Allgather, copied in:
 *                the Open MPI here is not assumed to be CUDA-aware); rank r keeps ranks 0 .. r-1's.
 *   3. replay:   one scan (stage 07's, on the tensor cores) from h0 over r + P - 1 maps: the
 *                r ranks before as r segments in front of the rank's own, so its segments'
 *                start states come out (eq. 7 of stage 04); then 07's replay and kernel 3.
 * Every rank does the same work, so the slices are equal (the driver's weight 1); with one
 * rank this is stage 07. Grouped value heads run as 07 runs them: a map a value head. Exact
 * as 07 is: maps in fp32, nothing assumed about the gates.
 *
 * Cost per rank, slices of L = T / N tokens: stage 07 on L, plus the last segment's fold, the
 * compose (2 K^2 (K + V) flops per head and segment) and r more scan steps. Exchange: every
 * rank receives the N maps, N B H K (K + V) floats, whatever T is; its time is in the result
 * line (allgather_ms) beside the phases'. Errors: a rank that fails before the exchange tells
 * the others (the driver's context_parallel_any_failed), so none waits in MPI_Allgather.
 *
 * Build and run:  make bin/08_context_parallel_cuda && mpirun -np 2 bin/08_context_parallel_cuda --T 1048576 --H 8 --K 128 --V 128
 */
#include "../07_sequence_parallel/sequence_parallel.cuh" /* stages 06 and 07: kernels, launchers, the choice of P */

extern "C" {
#include "../../common/error.h"
#include "driver.h"
}

/* ---- the new kernel: a slice's map from its segments' maps ----
 * X = [I | 0], then X <- A_s X + [0 | B_s] for s = 0 .. P-1: the map S -> A_s S + B_s applied
 * to [A | B] as to a state of K + V columns (eq. 3 of docs/02_affine.md, (A2, B2) o (A1, B1) =
 * (A2 A1, A2 B1 + B2)), so the last X is the composed map. Block (head, COMPOSE_COLUMNS
 * columns of X), thread (row i, column j); X in shared memory; A_s is read from global memory
 * (L2), and those loads do not depend on X, so only the K-long sums are on the chain. */
constexpr int COMPOSE_COLUMNS = 8;

__global__ void __launch_bounds__((int)MAX_K * COMPOSE_COLUMNS)
compose_segment_maps_kernel(size_t K, size_t V, size_t P, const float *maps, float *summary)
{
    __shared__ float X[2][MAX_K][COMPOSE_COLUMNS];
    const size_t head = blockIdx.x, W = K + V;
    const unsigned i = threadIdx.x / COMPOSE_COLUMNS, j = threadIdx.x % COMPOSE_COLUMNS;
    const size_t column = (size_t)blockIdx.y * COMPOSE_COLUMNS + j;
    const bool inside = i < K && column < W;
    X[0][i][j] = inside && i == column ? 1.0f : 0.0f; /* [I | 0] */
    int now = 0;
    for (size_t s = 0; s < P; s++) {
        const float *row = maps + ((head * P + s) * K + i) * W; /* [A_s[i, :] | B_s[i, :]] */
        __syncthreads(); /* X[now] complete */
        float next = inside && column >= K ? row[column] : 0.0f;
        if (inside)
            for (size_t m = 0; m < K; m++)
                next += row[m] * X[now][m][j];
        X[1 - now][i][j] = next;
        now = 1 - now;
    }
    if (inside)
        summary[(head * K + i) * W + column] = X[now][i][j];
}

static int launch_compose_segment_maps(const gdn_device_problem *p, size_t P, const float *maps, float *summary)
{
    unsigned heads, tiles;
    if (gdn_blocks_for(p->B * p->H, 1, &heads) || gdn_blocks_for(p->K + p->V, COMPOSE_COLUMNS, &tiles))
        return -1;
    compose_segment_maps_kernel<<<dim3(heads, tiles), (int)MAX_K * COMPOSE_COLUMNS>>>(p->K, p->V, P, maps, summary);
    CUDA_CHECK_LAUNCH("compose_segment_maps_kernel");
    return 0;
}

/* ---- this rank ----
 * The runner calls device_forward with no pointer of ours (and MPI's calls take none either),
 * so what the rank knows lives here, set by gpu_open. */
static struct {
    int rank, ranks, has_h0;
    size_t P;
    float *host_summary, *host_gathered; /* pinned: this rank's maps, then all ranks' */
    cudaEvent_t started, folded, exchanged, finished;
    double exchange_seconds;
} this_rank;

/* The workspace: stage 06's four parts, then the P segment maps and the P start states (07's,
 * one map more), the slice's map, the scan's r + P - 1 maps and r + P start states. */
enum { PARTS = 9 };
static int rank_parts(const gdn_problem *p, const gdn_settings *s, size_t bytes[PARTS])
{
    const size_t heads = p->B * gdn_value_heads(p), P = s->segments, before = (size_t)this_rank.rank, map = p->K * (p->K + p->V);
    size_t maps[4] = {heads, P, map, sizeof(float)}, starts[4] = {heads, P, p->K * p->V, sizeof(float)};
    size_t summary[3] = {heads, map, sizeof(float)}, scan_maps[4] = {heads, before + P - 1, map, sizeof(float)};
    size_t scan_starts[4] = {heads, before + P, p->K * p->V, sizeof(float)};
    if (workspace_parts(heads, p->T, p->K, p->V, s->precise, bytes) || gdn_multiply_sizes(&bytes[4], 4, maps) ||
        gdn_multiply_sizes(&bytes[5], 4, starts) || gdn_multiply_sizes(&bytes[6], 3, summary) ||
        gdn_multiply_sizes(&bytes[7], 4, scan_maps) || gdn_multiply_sizes(&bytes[8], 4, scan_starts))
        return -1;
    return 0;
}

static int rank_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    size_t parts[PARTS];
    if (rank_parts(p, s, parts))
        return -1;
    *bytes = 0;
    for (int i = 0; i < PARTS; i++) {
        if (*bytes + parts[i] < *bytes)
            return gdn_set_error("the workspace of %zu x %zu tokens overflows size_t", p->B * gdn_value_heads(p), p->T);
        *bytes += parts[i];
    }
    return 0;
}

typedef struct {
    float *maps, *starts, *summary, *scan_maps, *scan_starts;
} rank_buffers;

/* Phase 2: this rank's map out, every rank's in; the maps of ranks 0 .. r-1 and this rank's
 * own segments 0 .. P-2 side by side per head, as the scan reads them ([head][segment]). */
static int exchange_maps(const gdn_device_problem *p, size_t runs, const rank_buffers *b)
{
    const size_t heads = p->B * p->H, map = p->K * (p->K + p->V), P = this_rank.P, r = (size_t)this_rank.rank;
    const size_t scan_pitch = (r + P - 1) * map * sizeof(float);
    if (this_rank.rank + 1 < this_rank.ranks) /* the last rank's map is never read */
        CUDA_CHECK(cudaMemcpy(this_rank.host_summary, b->summary, heads * map * sizeof(float), cudaMemcpyDeviceToHost));
    if (context_parallel_allgather(this_rank.host_summary, this_rank.host_gathered, heads * map))
        return -1;
    for (size_t q = 0; q < r; q++) /* rank q's maps, [q][head], to segment q of every head */
        CUDA_CHECK(cudaMemcpy2D(b->scan_maps + q * map, scan_pitch, this_rank.host_gathered + q * heads * map,
                                map * sizeof(float), map * sizeof(float), heads, cudaMemcpyHostToDevice));
    if (P > 1)
        CUDA_CHECK(cudaMemcpy2D(b->scan_maps + r * map, scan_pitch, b->maps, runs * map * sizeof(float),
                                (P - 1) * map * sizeof(float), heads, cudaMemcpyDeviceToDevice));
    return 0;
}

template <bool PRECISE>
static int rank_passes(const gdn_device_problem *p, chunk_workspace w, const rank_buffers *b, gdn_device_result *r)
{
    const size_t heads = p->B * p->H, P = this_rank.P, before = (size_t)this_rank.rank, state = p->K * p->V;
    const bool last = this_rank.rank + 1 == this_rank.ranks;
    const size_t runs = last ? P - 1 : P;
    /* 1. fold: every segment's map (07's fold, one more), composed into the slice's */
    CUDA_CHECK(cudaEventRecord(this_rank.started));
    const size_t depth = sequence_parallel_depth(chunks_of(p->T), P);
    int status = launch_prepare_chunks<PRECISE>(p, w, chunk_parts_for<PRECISE>(p, depth));
    const chain_segments fold = {P, runs, NULL, b->maps};
    if (status == 0 && runs > 0)
        status = launch_chunk_states<PRECISE, folded_columns>(p, w, fold, depth);
    if (status == 0 && !last)
        status = launch_compose_segment_maps(p, P, b->maps, b->summary);
    if (status == 0 && cudaEventRecord(this_rank.folded) != cudaSuccess)
        status = gdn_set_error("cudaEventRecord failed");
    if (status == 0 && cudaDeviceSynchronize() != cudaSuccess) /* a fault in phase 1 surfaces here */
        status = gdn_set_error("phase 1 failed on the GPU: %s", cudaGetErrorString(cudaGetLastError()));
    if (context_parallel_any_failed(status != 0)) /* no rank may wait in the exchange for a failed one */
        return -1;
    /* 2. exchange, timed on the host: every rank has finished phase 1 */
    context_parallel_barrier();
    const double start = context_parallel_wtime();
    if (exchange_maps(p, runs, b))
        return -1;
    this_rank.exchange_seconds = context_parallel_wtime() - start;
    CUDA_CHECK(cudaEventRecord(this_rank.exchanged));
    /* 3. replay: the scan from h0 over the ranks before and this rank's segments, then 07 */
    gdn_device_problem from_h0 = *p;
    from_h0.h0 = this_rank.has_h0 ? p->h0 : NULL;
    if (launch_scan_on_tensor_cores(&from_h0, before + P, b->scan_maps, b->scan_starts))
        return -1;
    CUDA_CHECK(cudaMemcpy2D(b->starts, P * state * sizeof(float), b->scan_starts + before * state,
                            (before + P) * state * sizeof(float), P * state * sizeof(float), heads, cudaMemcpyDeviceToDevice));
    const chain_segments replay = {P, P, b->starts, r->ht};
    if (launch_chunk_states<PRECISE, state_columns>(p, w, replay, depth) || launch_chunk_outputs<PRECISE>(p, w, r))
        return -1;
    CUDA_CHECK(cudaEventRecord(this_rank.finished));
    return 0;
}

static int rank_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    if (check_key_width(p->K))
        return -1;
    gdn_problem sizes = {};
    sizes.B = p->B, sizes.T = p->T, sizes.H = p->H, sizes.HV = r->layout.HV, sizes.K = p->K, sizes.V = p->V;
    size_t parts[PARTS];
    rank_parts(&sizes, s, parts); /* sizes the runner has already checked */
    /* grouped value heads, as stages 06 and 07 run them: the value heads are the passes' heads,
       heads_per_key of them reading one key head's q and k; a map is a value head's */
    gdn_device_problem heads = *p;
    heads.H = r->layout.HV;
    heads.heads_per_key = (unsigned)(r->layout.HV / p->H);
    unsigned char *at = (unsigned char *)r->workspace + parts[0] + parts[1] + parts[2] + parts[3];
    rank_buffers b;
    float **buffer[5] = {&b.maps, &b.starts, &b.summary, &b.scan_maps, &b.scan_starts};
    for (int i = 0; i < 5; i++) {
        *buffer[i] = (float *)at;
        at += parts[4 + i];
    }
    chunk_workspace w = workspace_at(r->workspace, &heads, s->precise);
    return s->precise ? rank_passes<true>(&heads, w, &b, r) : rank_passes<false>(&heads, w, &b, r);
}

static const gdn_stage context_parallel_cuda_stage = {
    .name = "08_context_parallel_cuda",
    .idea = "stage 07 on each rank's GPU, one map per head and rank exchanged (MPI_Allgather): run with mpirun",
    .options = GDN_OPTION_PRECISE | GDN_OPTION_SEGMENTS | GDN_OPTION_VALUE_HEADS,
    .forward = NULL,
    .counted_flops = NULL,
    .resolve_options = NULL,
    .device_forward = rank_forward,
    .device_workspace_bytes = rank_workspace,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 1,
};

/* ---- the driver's backend (driver.h) ---- */
typedef struct {
    gdn_problem *slice;
    gdn_settings settings;
    void *runner; /* the CUDA runner's context: the slice on the GPU */
} gpu_rank;

static void gpu_close(void *context)
{
    gpu_rank *c = (gpu_rank *)context;
    if (!c)
        return;
    if (c->runner)
        gdn_cuda_runner.close(c->runner);
    cudaFreeHost(this_rank.host_summary);
    cudaFreeHost(this_rank.host_gathered);
    cudaEvent_t *events[4] = {&this_rank.started, &this_rank.folded, &this_rank.exchanged, &this_rank.finished};
    for (int i = 0; i < 4; i++)
        if (*events[i])
            cudaEventDestroy(*events[i]);
    this_rank.host_summary = this_rank.host_gathered = NULL;
    free(c);
}

static int gpu_open(gdn_problem *slice, gdn_settings *s, const real_t *h0, void **context)
{
    gpu_rank *c = (gpu_rank *)calloc(1, sizeof *c);
    if (!(*context = c))
        return gdn_set_error("out of memory");
    c->slice = slice, c->settings = *s;
    this_rank.rank = context_parallel_rank(), this_rank.ranks = context_parallel_ranks(), this_rank.has_h0 = h0 != NULL;
    if (slice->T == 0)
        return gdn_set_error("this rank's slice is empty: the GPU backend needs a chunk of %d tokens per rank at "
                             "least (T >= %d x ranks)",
                             (int)CHUNK, (int)CHUNK);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) /* ranks of a node take its GPUs in turn */
        CUDA_CHECK(cudaSetDevice(context_parallel_local_rank() % devices));
    cudaGetLastError(); /* a missing device is reported by the runner's open */
    gdn_problem_round_to_bf16(slice); /* what the GPU reads; the reference must read the same */
    sequence_parallel_resolve_options(slice, s); /* P for this rank's slice, as stage 07 would choose */
    c->settings = *s;
    this_rank.P = s->segments;
    if (gdn_cuda_runner.open(&context_parallel_cuda_stage, slice, &c->settings, &c->runner))
        return -1;
    const size_t maps = slice->B * gdn_value_heads(slice) * slice->K * (slice->K + slice->V);
    CUDA_CHECK(cudaMallocHost((void **)&this_rank.host_summary, maps * sizeof(float)));
    CUDA_CHECK(cudaMallocHost((void **)&this_rank.host_gathered, (size_t)this_rank.ranks * maps * sizeof(float)));
    memset(this_rank.host_summary, 0, maps * sizeof(float)); /* what the last rank sends */
    cudaEvent_t *events[4] = {&this_rank.started, &this_rank.folded, &this_rank.exchanged, &this_rank.finished};
    for (int i = 0; i < 4; i++)
        CUDA_CHECK(cudaEventCreate(events[i]));
    return 0;
}

static int gpu_run(void *context, int poisoned, gdn_result *out, double seconds[3])
{
    gpu_rank *c = (gpu_rank *)context;
    double total;
    float phase1 = 0, phase3 = 0;
    if (gdn_cuda_runner.run(c->runner, poisoned, out, &total))
        return -1;
    CUDA_CHECK(cudaEventElapsedTime(&phase1, this_rank.started, this_rank.folded));
    CUDA_CHECK(cudaEventElapsedTime(&phase3, this_rank.exchanged, this_rank.finished));
    seconds[0] = 1e-3 * phase1, seconds[1] = this_rank.exchange_seconds, seconds[2] = 1e-3 * phase3;
    return 0;
}

/* Stage 07's flops on the slice, plus the last segment's fold and the compose where they run,
 * plus the scan's r more steps. */
static double gpu_flops(void *context)
{
    gpu_rank *c = (gpu_rank *)context;
    const gdn_problem *p = c->slice;
    const size_t P = this_rank.P, chunks = chunks_of(p->T);
    const double K = (double)p->K, V = (double)p->V, heads = (double)(p->B * gdn_value_heads(p));
    double flops = sequence_parallel_flops(p, &c->settings) + heads * (double)this_rank.rank * 2 * K * K * V;
    if (this_rank.rank + 1 < this_rank.ranks) {
        const double last_tokens = (double)((chunks - segment_chunk(P - 1, P, chunks)) * CHUNK);
        flops += heads * (last_tokens * 4 * K * (K + V) + (double)P * 2 * K * K * (K + V));
    }
    return flops;
}

int main(int argc, char **argv)
{
    static const context_parallel_backend gpu = {&context_parallel_cuda_stage, "allgather", 1.0,
                                                 gpu_open, gpu_run, gpu_flops, gpu_close};
    return context_parallel_main(argc, argv, &gpu);
}
