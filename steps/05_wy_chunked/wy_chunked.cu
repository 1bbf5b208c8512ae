/* 05_wy_chunked_cuda -- stage 05 on the GPU: the chunked WY form as three kernels.
 *
 * The idea (docs/05_wy_chunked.md, "On the GPU"): of eq. 9-15, only two lines need the
 * state S0 at the chunk's start: Vnew = U - W S0 (eq. 13) and the state update (eq. 15).
 * Everything else depends on the chunk's own inputs, so it leaves the serial chain:
 *   1. prepare_chunks (parallel over every chunk of every head): gamma (eq. 9), M and
 *      Tm = (I + M)^-1 by forward substitution (eq. 10-11), W and U (eq. 12), and the keys
 *      decayed to the chunk's end, exp(gamma_C - gamma_j) k_j.
 *   2. chunk_states (serial over chunks, parallel over heads and STATE_COLUMNS-wide column
 *      tiles of S): per chunk, save S0, Vnew = U - W S0, S = exp(gamma_C) S0 + Kdec^T Vnew.
 *      S stays in shared memory for the whole sequence; a chunk step is two small products.
 *   3. chunk_outputs (parallel over every chunk again): o = scale (exp(gamma) Q S0 + P Vnew)
 *      with P = lower(Q K^T exp(gamma_i - gamma_j)) (eq. 14), from the saved S0 and Vnew.
 * This is how FLA splits its Triton forward too. Plain fp32 FMAs on shared-memory tiles:
 * tensor cores are stage 06. Rows of q and k tiles are padded by one float so that threads
 * reading different rows of the same column hit different banks.
 *
 * Cost: the flops of the CPU stage (wy_chunked_flops), plus the workspace: W, U, decayed
 * keys and Vnew (2 K + 2 V floats per token), gamma in double, and one K x V state per
 * chunk. Depth: T / C chunk steps of kernel 2, each O(C K) dependent work per thread.
 * Limits: K <= 128 and --chunk <= 64 (shared-memory tiles), V and T any.
 *
 * Build and run:  make bin/05_wy_chunked_cuda && bin/05_wy_chunked_cuda --T 16384 --H 8 --check-against oracle
 */
#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/stage.h"
extern "C" { /* the CPU twin's header, for its flop count: C linkage */
#include "wy_chunked.h"
}

enum { MAX_K = 128, MAX_CHUNK = 64, THREADS = 256, STATE_COLUMNS = 4, OUTPUT_COLUMNS = 64 };

/* Where kernel 1 leaves a chunk's state-independent results; rows in head-major token order
 * (head T + t), so a chunk's rows are contiguous. */
typedef struct {
    double *gamma;          /* [heads T] cumulative log-gate within the chunk */
    float *W, *decayed_keys; /* [heads T][K] */
    float *U, *new_values;  /* [heads T][V] */
    float *states;          /* [heads chunks][K][V]: S0 of every chunk */
} chunk_workspace;

__host__ __device__ static inline size_t chunks_of(size_t T, size_t C) { return (T + C - 1) / C; }

static chunk_workspace workspace_at(void *base, const gdn_device_problem *p, size_t C)
{
    const size_t rows = p->B * p->H * p->T;
    chunk_workspace w;
    w.gamma = (double *)base;
    w.W = (float *)(w.gamma + rows);
    w.decayed_keys = w.W + rows * p->K;
    w.U = w.decayed_keys + rows * p->K;
    w.new_values = w.U + rows * p->V;
    w.states = w.new_values + rows * p->V;
    (void)C;
    return w;
}

/* Kernel 1: one block per (head, chunk). Shared: gamma[C] (double), keys[C][K + 1],
 * Tm[C][C + 1], scaled_beta[C] = beta exp(gamma), beta[C]. */
__global__ void __launch_bounds__(THREADS) prepare_chunks_kernel(gdn_device_problem p, size_t C, chunk_workspace w)
{
    extern __shared__ double shared[];
    const size_t K = p.K, V = p.V, KP = K + 1, CP = C + 1, chunks = chunks_of(p.T, C);
    const size_t head = blockIdx.x / chunks, t0 = blockIdx.x % chunks * C, n = p.T - t0 < C ? p.T - t0 : C;
    const size_t b = head / p.H, h = head % p.H, row0 = head * p.T + t0;
    double *gamma = shared;
    float *keys = (float *)(gamma + C), *Tm = keys + C * KP, *scaled_beta = Tm + C * CP, *beta = scaled_beta + C;

#pragma unroll 8 /* several loads in flight per thread, not one */
    for (size_t e = threadIdx.x; e < n * K; e += blockDim.x)
        keys[e / K * KP + e % K] = p.k[gdn_device_token(&p, b, t0 + e / K, h) * K + e % K];
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) { /* gates and betas first, all at once */
        size_t token = gdn_device_token(&p, b, t0 + i, h);
        gamma[i] = p.g[token];
        beta[i] = p.beta[token];
    }
    __syncthreads();
    if (threadIdx.x == 0) { /* eq. 9, summed in double as the CPU stage does (see wy_chunked.c) */
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            sum += gamma[i];
            gamma[i] = sum;
            w.gamma[row0 + i] = sum;
            scaled_beta[i] = beta[i] * expf((float)sum);
        }
    }
    __syncthreads();

    /* I + M, M[i, j] = beta_i (k_i . k_j) exp(gamma_i - gamma_j) for j < i (eq. 10) */
    for (size_t e = threadIdx.x; e < n * n; e += blockDim.x) {
        size_t i = e / n, j = e % n;
        float value = i == j ? 1.0f : 0.0f;
        if (j < i) {
            float dot = 0.0f;
            for (size_t c = 0; c < K; c++)
                dot += keys[i * KP + c] * keys[j * KP + c];
            value = beta[i] * dot * expf((float)(gamma[i] - gamma[j]));
        }
        Tm[i * CP + j] = value;
    }
    __syncthreads();
    /* Tm = (I + M)^-1 in place, row by row (eq. 11): Tm[i, c] = -(M[i, c] + sum_{c<l<i} M[i, l] Tm[l, c]).
     * Row i still holds M while its new values are summed; they are written after a barrier. */
    for (size_t i = 1; i < n; i++) {
        size_t c = threadIdx.x;
        float value = 0.0f;
        if (c < i) {
            value = -Tm[i * CP + c];
            for (size_t l = c + 1; l < i; l++)
                value -= Tm[i * CP + l] * Tm[l * CP + c];
        }
        __syncthreads();
        if (c < i)
            Tm[i * CP + c] = value;
        __syncthreads();
    }

    /* W = Tm (beta exp(gamma) K), U = Tm (beta V) (eq. 12); Tm is lower triangular */
    for (size_t e = threadIdx.x; e < n * K; e += blockDim.x) {
        size_t i = e / K, c = e % K;
        float sum = 0.0f;
        for (size_t l = 0; l <= i; l++)
            sum += Tm[i * CP + l] * scaled_beta[l] * keys[l * KP + c];
        w.W[(row0 + i) * K + c] = sum;
        w.decayed_keys[(row0 + i) * K + c] = keys[i * KP + c] * expf((float)(gamma[n - 1] - gamma[i]));
    }
    for (size_t e = threadIdx.x; e < n * V; e += blockDim.x) {
        size_t i = e / V, c = e % V;
        float sum = 0.0f;
#pragma unroll 8
        for (size_t l = 0; l <= i; l++)
            sum += Tm[i * CP + l] * beta[l] * p.v[gdn_device_token(&p, b, t0 + l, h) * V + c];
        w.U[(row0 + i) * V + c] = sum;
    }
}

/* Kernel 2: one block per (head, STATE_COLUMNS columns of S), serial over the chunks.
 * Shared: S[K][STATE_COLUMNS], W[C][K], decayed keys[C][K], U and then Vnew [C][STATE_COLUMNS].
 * The chain is latency-bound, so two things keep it short: the next chunk's W, keys and U
 * are loaded into registers while this chunk computes (they do not depend on S), and every
 * loop has a trip count known at compile time, unrolled, so a thread's loads and its FMA
 * chains are independent and in flight together. */
enum { PER_THREAD_WK = MAX_CHUNK * MAX_K / THREADS, PER_THREAD_CS = MAX_CHUNK * STATE_COLUMNS / THREADS,
       PER_THREAD_KS = MAX_K * STATE_COLUMNS / THREADS };

__global__ void __launch_bounds__(THREADS) chunk_states_kernel(gdn_device_problem p, size_t C, chunk_workspace w, float *ht)
{
    extern __shared__ float tiles[];
    const size_t K = p.K, V = p.V, chunks = chunks_of(p.T, C), tiles_per_head = (V + STATE_COLUMNS - 1) / STATE_COLUMNS;
    const size_t head = blockIdx.x / tiles_per_head, column0 = blockIdx.x % tiles_per_head * STATE_COLUMNS;
    /* tiles sized for the largest chunk, rows past the chunk zero: the unrolled loops below
     * may read them, and must only ever read numbers */
    float *S = tiles, *Wt = S + MAX_K * STATE_COLUMNS, *keys = Wt + MAX_CHUNK * K, *Vnew = keys + MAX_CHUNK * K;
    float next_w[PER_THREAD_WK], next_keys[PER_THREAD_WK], next_u[PER_THREAD_CS];

    /* the state-independent inputs of chunk `chunk`, into this thread's registers */
    auto prefetch = [&](size_t chunk) {
        const size_t t0 = chunk * C, n = p.T - t0 < C ? p.T - t0 : C, row0 = head * p.T + t0;
#pragma unroll
        for (int r = 0; r < PER_THREAD_WK; r++) {
            size_t e = threadIdx.x + r * THREADS;
            next_w[r] = e < n * K ? w.W[row0 * K + e] : 0.0f;
            next_keys[r] = e < n * K ? w.decayed_keys[row0 * K + e] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < PER_THREAD_CS; r++) {
            size_t e = threadIdx.x + r * THREADS, i = e / STATE_COLUMNS, column = column0 + e % STATE_COLUMNS;
            next_u[r] = i < n && column < V ? w.U[(row0 + i) * V + column] : 0.0f;
        }
    };

#pragma unroll
    for (int r = 0; r < PER_THREAD_KS; r++) {
        size_t e = threadIdx.x + r * THREADS, m = e / STATE_COLUMNS, column = column0 + e % STATE_COLUMNS;
        S[e] = p.h0 && m < K && column < V ? p.h0[(head * K + m) * V + column] : 0.0f;
    }
    prefetch(0);
    for (size_t chunk = 0; chunk < chunks; chunk++) {
        const size_t t0 = chunk * C, n = p.T - t0 < C ? p.T - t0 : C, row0 = head * p.T + t0;
        __syncthreads(); /* S is complete; the previous chunk's tiles are no longer read */
#pragma unroll
        for (int r = 0; r < PER_THREAD_WK; r++) {
            size_t e = threadIdx.x + r * THREADS;
            if (e < MAX_CHUNK * K)
                Wt[e] = next_w[r], keys[e] = next_keys[r];
        }
#pragma unroll
        for (int r = 0; r < PER_THREAD_CS; r++)
            Vnew[threadIdx.x + r * THREADS] = next_u[r];
#pragma unroll
        for (int r = 0; r < PER_THREAD_KS; r++) {
            size_t e = threadIdx.x + r * THREADS, m = e / STATE_COLUMNS, column = column0 + e % STATE_COLUMNS;
            if (m < K && column < V)
                w.states[((head * chunks + chunk) * K + m) * V + column] = S[e];
        }
        __syncthreads();
        if (chunk + 1 < chunks)
            prefetch(chunk + 1);
        /* Vnew = U - W S0 (eq. 13): each thread PER_THREAD_CS entries, each its own FMA chain */
        float value[PER_THREAD_CS];
#pragma unroll
        for (int r = 0; r < PER_THREAD_CS; r++)
            value[r] = Vnew[threadIdx.x + r * THREADS];
        for (size_t m = 0; m < K; m++)
#pragma unroll
            for (int r = 0; r < PER_THREAD_CS; r++) {
                size_t e = threadIdx.x + r * THREADS, i = e / STATE_COLUMNS, c = e % STATE_COLUMNS;
                value[r] -= Wt[i * K + m] * S[m * STATE_COLUMNS + c];
            }
        __syncthreads(); /* every thread has read U from Vnew's tile */
#pragma unroll
        for (int r = 0; r < PER_THREAD_CS; r++) {
            size_t e = threadIdx.x + r * THREADS, i = e / STATE_COLUMNS, column = column0 + e % STATE_COLUMNS;
            bool real = i < n && column < V;
            Vnew[e] = real ? value[r] : 0.0f;
            if (real)
                w.new_values[(row0 + i) * V + column] = value[r];
        }
        __syncthreads();
        /* S = exp(gamma_C) S0 + sum_j exp(gamma_C - gamma_j) k_j Vnew_j^T (eq. 15) */
        const float decay = expf((float)w.gamma[row0 + n - 1]);
        float state[PER_THREAD_KS];
#pragma unroll
        for (int r = 0; r < PER_THREAD_KS; r++)
            state[r] = decay * S[threadIdx.x + r * THREADS];
        for (size_t i = 0; i < n; i++)
#pragma unroll
            for (int r = 0; r < PER_THREAD_KS; r++) {
                size_t e = threadIdx.x + r * THREADS, m = e / STATE_COLUMNS, c = e % STATE_COLUMNS;
                if (m < K)
                    state[r] += keys[i * K + m] * Vnew[i * STATE_COLUMNS + c];
            }
#pragma unroll
        for (int r = 0; r < PER_THREAD_KS; r++)
            S[threadIdx.x + r * THREADS] = state[r];
    }
    __syncthreads();
    for (size_t e = threadIdx.x; e < K * STATE_COLUMNS; e += blockDim.x) {
        size_t m = e / STATE_COLUMNS, column = column0 + e % STATE_COLUMNS;
        if (column < V)
            ht[(head * K + m) * V + column] = S[e];
    }
}

/* Kernel 3: one block per (head, chunk, OUTPUT_COLUMNS columns of o). Shared: gamma[C]
 * (double), q[C][K + 1], k[C][K + 1], P[C][C + 1], S0[K][OUTPUT_COLUMNS], Vnew[C][OUTPUT_COLUMNS]. */
__global__ void __launch_bounds__(THREADS) chunk_outputs_kernel(gdn_device_problem p, size_t C, chunk_workspace w, float *o)
{
    extern __shared__ double shared[];
    const size_t K = p.K, V = p.V, KP = K + 1, CP = C + 1, chunks = chunks_of(p.T, C);
    const size_t tiles_per_chunk = (V + OUTPUT_COLUMNS - 1) / OUTPUT_COLUMNS;
    const size_t column0 = blockIdx.x % tiles_per_chunk * OUTPUT_COLUMNS, head_chunk = blockIdx.x / tiles_per_chunk;
    const size_t head = head_chunk / chunks, chunk = head_chunk % chunks, t0 = chunk * C;
    const size_t n = p.T - t0 < C ? p.T - t0 : C, b = head / p.H, h = head % p.H, row0 = head * p.T + t0;
    double *gamma = shared;
    float *q = (float *)(gamma + C), *k = q + C * KP, *P = k + C * KP, *S = P + C * CP, *Vnew = S + K * OUTPUT_COLUMNS;

#pragma unroll 8 /* several loads in flight per thread, not one */
    for (size_t e = threadIdx.x; e < n * K; e += blockDim.x) {
        size_t token = gdn_device_token(&p, b, t0 + e / K, h);
        q[e / K * KP + e % K] = p.q[token * K + e % K];
        k[e / K * KP + e % K] = p.k[token * K + e % K];
    }
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        gamma[i] = w.gamma[row0 + i];
#pragma unroll 8 /* several loads in flight per thread, not one */
    for (size_t e = threadIdx.x; e < K * OUTPUT_COLUMNS; e += blockDim.x) {
        size_t m = e / OUTPUT_COLUMNS, column = column0 + e % OUTPUT_COLUMNS;
        S[e] = column < V ? w.states[((head * chunks + chunk) * K + m) * V + column] : 0.0f;
    }
#pragma unroll 8 /* several loads in flight per thread, not one */
    for (size_t e = threadIdx.x; e < n * OUTPUT_COLUMNS; e += blockDim.x) {
        size_t i = e / OUTPUT_COLUMNS, column = column0 + e % OUTPUT_COLUMNS;
        Vnew[e] = column < V ? w.new_values[(row0 + i) * V + column] : 0.0f;
    }
    __syncthreads();
    /* P = lower(Q K^T exp(gamma_i - gamma_j)) (eq. 14), only j <= i: exponents <= 0 */
    for (size_t e = threadIdx.x; e < n * n; e += blockDim.x) {
        size_t i = e / n, j = e % n;
        float value = 0.0f;
        if (j <= i) {
            for (size_t c = 0; c < K; c++)
                value += q[i * KP + c] * k[j * KP + c];
            value *= expf((float)(gamma[i] - gamma[j]));
        }
        P[i * CP + j] = value;
    }
    __syncthreads();
    /* o_i = scale (exp(gamma_i) q_i^T S0 + sum_{j <= i} P[i, j] Vnew_j) (eq. 14) */
    for (size_t e = threadIdx.x; e < n * OUTPUT_COLUMNS; e += blockDim.x) {
        size_t i = e / OUTPUT_COLUMNS, c = e % OUTPUT_COLUMNS, column = column0 + c;
        if (column >= V)
            continue;
        float from_state = 0.0f, within = 0.0f;
        for (size_t m = 0; m < K; m++)
            from_state += q[i * KP + m] * S[m * OUTPUT_COLUMNS + c];
        for (size_t j = 0; j <= i; j++)
            within += P[i * CP + j] * Vnew[j * OUTPUT_COLUMNS + c];
        o[gdn_device_token(&p, b, t0 + i, h) * V + column] =
            p.scale * (expf((float)gamma[i]) * from_state + within);
    }
}

/* Launch with `bytes` of dynamic shared memory, allowing more than the default 48 KB. */
#define LAUNCH_WITH_SHARED(kernel, blocks, bytes, ...)                                                   \
    do {                                                                                                 \
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes))); \
        kernel<<<(blocks), THREADS, (bytes)>>>(__VA_ARGS__);                                             \
        CUDA_CHECK_LAUNCH(#kernel);                                                                      \
    } while (0)

static int wy_chunked_cuda_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    const size_t K = p->K, V = p->V, C = s->chunk, heads = p->B * p->H, chunks = chunks_of(p->T, C);
    if (K > MAX_K)
        return gdn_set_error("K = %zu: the GPU chunked form keeps K-wide tiles in shared memory, K at most %d", K, MAX_K);
    if (C > MAX_CHUNK)
        return gdn_set_error("--chunk %zu: the GPU chunked form takes chunks of at most %d tokens", C, MAX_CHUNK);
    chunk_workspace w = workspace_at(r->workspace, p, C);
    unsigned prepare_blocks, state_blocks, output_blocks;
    if (gdn_blocks_for(heads * chunks, 1, &prepare_blocks) ||
        gdn_blocks_for(heads * ((V + STATE_COLUMNS - 1) / STATE_COLUMNS), 1, &state_blocks) ||
        gdn_blocks_for(heads * chunks * ((V + OUTPUT_COLUMNS - 1) / OUTPUT_COLUMNS), 1, &output_blocks))
        return -1;
    size_t prepare_bytes = C * sizeof(double) + (C * (K + 1) + C * (C + 1) + 2 * C) * sizeof(float);
    size_t state_bytes = (MAX_K * STATE_COLUMNS + 2 * MAX_CHUNK * K + MAX_CHUNK * STATE_COLUMNS) * sizeof(float);
    size_t output_bytes = C * sizeof(double) +
                          (2 * C * (K + 1) + C * (C + 1) + K * OUTPUT_COLUMNS + C * OUTPUT_COLUMNS) * sizeof(float);
    LAUNCH_WITH_SHARED(prepare_chunks_kernel, prepare_blocks, prepare_bytes, *p, C, w);
    LAUNCH_WITH_SHARED(chunk_states_kernel, state_blocks, state_bytes, *p, C, w, r->ht);
    LAUNCH_WITH_SHARED(chunk_outputs_kernel, output_blocks, output_bytes, *p, C, w, r->o);
    return 0;
}

/* gamma (double) and W, decayed keys, U, Vnew per token; one K x V state per chunk. */
static int wy_chunked_cuda_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    size_t rows, states, heads = p->B * p->H;
    size_t row_factors[3] = {heads, p->T, sizeof(double) + (2 * p->K + 2 * p->V) * sizeof(float)};
    size_t state_factors[4] = {heads, chunks_of(p->T, s->chunk), p->K * p->V, sizeof(float)};
    if (gdn_multiply_sizes(&rows, 3, row_factors) || gdn_multiply_sizes(&states, 4, state_factors))
        return -1;
    *bytes = rows + states;
    return 0;
}

static void wy_chunked_cuda_resolve_options(const gdn_problem *p, gdn_settings *s)
{
    (void)p;
    if (s->chunk == 0)
        s->chunk = 64;
}

extern "C" const gdn_stage wy_chunked_cuda_stage = {
    .name = "05_wy_chunked_cuda",
    .idea = "stage 05 on the GPU: per-chunk products in parallel, only the state chain serial",
    .options = GDN_OPTION_CHUNK,
    .forward = NULL,
    .counted_flops = wy_chunked_flops,
    .resolve_options = wy_chunked_cuda_resolve_options,
    .device_forward = wy_chunked_cuda_forward,
    .device_workspace_bytes = wy_chunked_cuda_workspace,
    .runner = &gdn_cuda_runner,
};
