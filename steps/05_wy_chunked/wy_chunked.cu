/* 05_wy_chunked_cuda -- stage 05 on the GPU: the chunked WY form as three kernels.
 *
 * The idea (docs/05_wy_chunked.md, "On the GPU"): of eq. 9-15, only two lines need the
 * state S0 at the chunk's start: Vnew = U - W S0 (eq. 13) and the state update (eq. 15).
 * Everything else depends on the chunk's own inputs, so it leaves the serial chain:
 *   1. prepare_chunks (parallel over every chunk of every head): gamma (eq. 9), M and
 *      Tm = (I + M)^-1 by 16 x 16 blocks (eq. 10-11), W and U (eq. 12), and the keys
 *      decayed to the chunk's end, exp(gamma_C - gamma_j) k_j.
 *   2. chunk_states (serial over chunks, parallel over heads and 4- or 8-wide column
 *      tiles of S): per chunk, save S0, Vnew = U - W S0, S = exp(gamma_C) S0 + Kdec^T Vnew.
 *      S stays in shared memory for the whole sequence; a chunk step is two small products,
 *      and the inputs of the next two or three chunks are copied in (bulk copies by the
 *      TMA unit, one thread issuing them) while it runs.
 *   3. chunk_outputs (parallel over every chunk again): o = scale (exp(gamma) Q S0 + P Vnew)
 *      with P = lower(Q K^T exp(gamma_i - gamma_j)) (eq. 14), from the saved S0 and Vnew.
 * This is how FLA splits its Triton forward too. From 64 chunks on, the three overlap: the
 * sequence is cut into two slices; kernel 1 of slice 1 and kernel 3 of slice 0 run beside
 * the chain (three streams; see the forward pass at the end). Plain fp32 FMAs on shared-memory
 * tiles, every product's A operand stored transposed (one float4 of each operand per 16 FMAs):
 * tensor cores are stage 06.
 *
 * Cost: the flops of the CPU stage (wy_chunked_flops), plus the workspace: W, U, decayed
 * keys and Vnew (2 K + 2 V floats per token), gamma in double, and one K x V state per
 * chunk. Depth: T / C chunk steps of kernel 2, each O(C K) dependent work per thread.
 * Grouped value heads (--HV): a head is a value head, whose kernels 1 and 3 read the rows of
 * the key head it shares (chunk_key_row); a packed batch it does not take.
 * Limits: K <= 128 and --chunk <= 64 (shared-memory tiles), V and T any.
 *
 * Build and run:  make bin/05_wy_chunked_cuda && bin/05_wy_chunked_cuda --T 16384 --H 8 --check-against oracle
 */
#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/stage.h"
#include "../../common/bulk_copy.cuh" /* the TMA ring's PTX: mbarriers and bulk copies */

#include "wy_chunked_solve.cuh" /* the gate sums and the blocked triangular solve of kernel 1 */
extern "C" { /* the CPU twin's header, for its flop count: C linkage */
#include "wy_chunked.h"
}

enum { MAX_K = 128, MAX_CHUNK = 64, THREADS = 256, MAX_STATE_COLUMNS = 8, OUTPUT_COLUMNS = 64 };
static_assert((int)MAX_CHUNK == (int)SOLVE_CHUNK, "kernel 1's chunk is the solve's");

/* Where kernel 1 leaves a chunk's state-independent results; rows in head-major token order
 * (head T + t), so a chunk's rows are contiguous. */
typedef struct {
    double *gamma;           /* [heads T] cumulative log-gate within the chunk */
    float *chain_inputs;     /* [heads chunks][chain_block_floats]: what kernel 2 reads per chunk (below) */
    float *new_values;       /* [heads T][V] */
    float *states;           /* [heads chunks][K][V]: S0 of every chunk */
} chunk_workspace;

/* Kernel 2's per-chunk input block, laid out exactly as its shared-memory tiles so that it is
 * copied 16 bytes at a time with no index arithmetic:
 *   W           64 rows of KW = round_up4(K) + 4 floats
 *   keys_t      the keys decayed to the chunk's end, transposed: K rows of CHUNK_STRIDE = 68
 *               floats (a chunk's 64 tokens and 4 of padding)
 *   U_t         U transposed, V rows of CHUNK_STRIDE rounded up to MAX_STATE_COLUMNS: a
 *               column tile of S reads consecutive rows
 *   decay       exp(gamma_C), then 3 floats of padding
 * Zeros in W's and keys_t's padding and past the chunk's last token. The padding makes
 * float4 loads of 8 consecutive rows hit 32 different banks. */
constexpr int CHUNK_STRIDE = MAX_CHUNK + 4;
__host__ __device__ constexpr size_t round_up4(size_t x) { return (x + 3) / 4 * 4; }
__host__ __device__ constexpr size_t padded_k(size_t K) { return round_up4(K) + 4; }
__host__ __device__ constexpr size_t chain_keys_offset(size_t K) { return MAX_CHUNK * padded_k(K); }
__host__ __device__ constexpr size_t chain_u_offset(size_t K) { return chain_keys_offset(K) + K * CHUNK_STRIDE; }
__host__ __device__ static inline size_t chain_decay_offset(size_t K, size_t V)
{
    return chain_u_offset(K) + (V + MAX_STATE_COLUMNS - 1) / MAX_STATE_COLUMNS * MAX_STATE_COLUMNS * CHUNK_STRIDE;
}
__host__ __device__ static inline size_t chain_block_floats(size_t K, size_t V) { return chain_decay_offset(K, V) + 4; }

__host__ __device__ static inline size_t chunks_of(size_t T, size_t C) { return (T + C - 1) / C; }

/* Chunks first .. first + count - 1 of every head: the part of the sequence one launch of each
 * kernel covers (see the forward pass at the end: the kernels overlap slice by slice). */
typedef struct {
    size_t first, count;
} chunk_slice;

static chunk_workspace workspace_at(void *base, const gdn_device_problem *p, size_t heads, size_t C)
{
    const size_t rows = heads * p->T, chunks = heads * chunks_of(p->T, C);
    chunk_workspace w;
    w.gamma = (double *)base;
    w.chain_inputs = (float *)(w.gamma + (rows + 1) / 2 * 2); /* 16-byte aligned: kernel 2 reads float4 */
    w.new_values = w.chain_inputs + chunks * chain_block_floats(p->K, p->V);
    w.states = w.new_values + rows * p->V;
    return w;
}

/* The first rows of token t0 of head `head` (b HV + h, a value head): of v, g, beta and o, and
 * of q and k, those of key head h / (HV / H) (device.h: gdn_device_value_row, gdn_device_key_row).
 * A head's tokens are HV value rows and H key rows apart. In 32-bit arithmetic where it can be
 * (heads and head counts fit a grid, so in 32 bits): a 64-bit division is a routine of its own,
 * whose registers made kernel 1 spill. */
__device__ __forceinline__ static size_t chunk_value_row(const gdn_device_layout &layout, size_t head, size_t t0, size_t T)
{
    const unsigned HV = (unsigned)layout.HV, b = (unsigned)head / HV, h = (unsigned)head % HV;
    return ((size_t)b * T + t0) * HV + h;
}
__device__ __forceinline__ static size_t chunk_key_row(const gdn_device_problem &p, const gdn_device_layout &layout, size_t head,
                                                       size_t t0)
{
    const unsigned HV = (unsigned)layout.HV, H = (unsigned)p.H, b = (unsigned)head / HV, h = (unsigned)head % HV;
    return ((size_t)b * p.T + t0) * H + h / (HV / H);
}

/* Four consecutive floats of a row, row[c .. c + 3], zero at and past `width`: one 16-byte
 * load where rows are a multiple of 4 floats wide (each row then starts 16-byte aligned, as
 * cudaMalloc aligns to 256 bytes), four loads otherwise. */
__device__ __forceinline__ static float4 load_four(const float *row, int c, int width)
{
    if (width % 4 == 0)
        return c < width ? *(const float4 *)(row + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return make_float4(c < width ? row[c] : 0.0f, c + 1 < width ? row[c + 1] : 0.0f,
                       c + 2 < width ? row[c + 2] : 0.0f, c + 3 < width ? row[c + 3] : 0.0f);
}

/* The same, stored: row[c .. c + 3] = x, nothing at and past `width`. */
__device__ __forceinline__ static void store_four(float *row, int c, int width, float4 x)
{
    if (width % 4 == 0 && c < width) {
        *(float4 *)(row + c) = x;
        return;
    }
    const float values[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int q = 0; q < 4; q++)
        if (c + q < width)
            row[c + q] = values[q];
}

/* A chunk of a [B, T, H, width] input (q or k), transposed into shared memory:
 * tile_t[c][i] = x[row first_row + i stride][c] (token i of the chunk: a head's tokens are
 * `stride` rows apart), TILE floats a row, zeros past the chunk's n tokens and in
 * the rows up to round_up4(width). Thread e reads 16 bytes of token i = e % 64 and writes them
 * down column i: a warp's 32 lanes write 32 consecutive floats of a row, no bank conflict.
 * (Reading in row order instead puts a warp's writes 64 floats apart, all in one bank.) */
enum { TILE = MAX_CHUNK };
static_assert((int)TILE == (int)OUTPUT_COLUMNS, "kernel 3 keeps its 64 columns of S0 and Vnew as tiles");
template <int IN_FLIGHT> /* loads a thread keeps in flight: kernel 1 has registers for 2, kernel 3 for 4 */
__device__ static void load_transposed(float *tile_t, const float *x, size_t first_row, size_t stride, int n, int width)
{
#pragma unroll IN_FLIGHT /* unrolled: the loads of several steps issued before their stores */
    for (int e = threadIdx.x; e < MAX_CHUNK * ((width + 3) / 4); e += THREADS) {
        const int i = e % MAX_CHUNK, c = e / MAX_CHUNK * 4;
        const float4 v = i < n ? load_four(x + (first_row + i * stride) * width, c, width) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        tile_t[c * TILE + i] = v.x, tile_t[(c + 1) * TILE + i] = v.y;
        tile_t[(c + 2) * TILE + i] = v.z, tile_t[(c + 3) * TILE + i] = v.w;
    }
}

/* Columns first .. first + 63 of a chunk of a [B, T, H, width] input (k or v), each token's
 * row scaled by its factor, into tile[64][64] (row-major, TILE floats a row): the right-hand
 * side of eq. 12, 64 columns at a time. Zeros past the chunk's n tokens and past `width`.
 * A warp reads 512 consecutive bytes of two tokens' rows, 16 a thread. */
__device__ __forceinline__ static void load_scaled_columns(float *tile, const float *x, size_t first_row, size_t stride, int n,
                                                           int width, int first, const float *scale)
{
#pragma unroll /* the four loads of a thread in flight together */
    for (int e = threadIdx.x; e < TILE * TILE / 4; e += THREADS) {
        const int l = e / (TILE / 4), c = first + e % (TILE / 4) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (l < n) {
            v = load_four(x + (first_row + l * stride) * width, c, width);
            v.x *= scale[l], v.y *= scale[l], v.z *= scale[l], v.w *= scale[l];
        }
        ((float4 *)tile)[e] = v;
    }
}

/* The register tile (as in a tiled SGEMM): 16 x 16 threads cover a 64 x 64 product, each
 * thread a 4 x 4 block of it, rows 4 ty .. 4 ty + 3 and columns 4 tx .. 4 tx + 3.
 *     acc += A[rows][0 .. depth) B[0 .. depth)[columns]
 * with A given transposed, A_t[l][i] = A[i][l], and both A_t and B TILE floats a row, so that
 * per step of the inner dimension a thread loads one float4 of each and does 16 FMAs. In a
 * warp, the 2 row groups of A_t are one broadcast and the 16 float4 of B fill 2 wavefronts:
 * 3 shared-memory wavefronts for 16 FMAs, where A read down its rows took four loads (and
 * four wavefronts) in place of one, and kept the kernels waiting on shared memory. Each product below is written to
 * find its operands in this form; where the result is wanted transposed, the operands swap
 * (C^T = B^T A^T), so that every store is of 16 consecutive bytes. */
__device__ __forceinline__ static void multiply_tile_4x4(float (&acc)[4][4], const float *A_t, const float *B, int depth)
{
    const int row = threadIdx.x / 16 * 4, column = threadIdx.x % 16 * 4;
#pragma unroll 4
    for (int l = 0; l < depth; l++) {
        const float4 a = *(const float4 *)(A_t + l * TILE + row), b = *(const float4 *)(B + l * TILE + column);
        const float as[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int r = 0; r < 4; r++) {
            acc[r][0] += as[r] * b.x;
            acc[r][1] += as[r] * b.y;
            acc[r][2] += as[r] * b.z;
            acc[r][3] += as[r] * b.w;
        }
    }
}

__device__ __forceinline__ static void clear_tile(float (&acc)[4][4])
{
#pragma unroll
    for (int r = 0; r < 4; r++)
        acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
}

/* Kernel 1: one block per (head, chunk). Shared, for a chunk padded to 64 rows with zeros:
 * gamma[64] (double), keys_t[K][64] (the chunk's k transposed), Tm[64][65] (the solve's
 * layout), Tm_t[64][64] (the same, transposed: the products' A operand) in the place of
 * keys_t once K K^T is formed, right[64][64] (64 columns of beta exp(gamma) K or of beta V
 * at a time), beta[64], scaled_beta[64] = beta exp(gamma). (keys_t's last use, the decayed
 * keys, comes first for that: the 16 KB saved let a third block onto an SM at K = 128.)
 * At most 85 registers a thread (the 3 in the bounds), so that three blocks share an SM
 * and one block's barriers are hidden by the others' work: it took 112 with room for
 * them, and ran with two blocks. */
__global__ void __launch_bounds__(THREADS, 3) prepare_chunks_kernel(gdn_device_problem p, size_t C, chunk_workspace w, chunk_slice slice,
                                                                     gdn_device_layout layout)
{
    extern __shared__ double shared[];
    const int K = (int)p.K, V = (int)p.V, TP = MAX_CHUNK + 1, K4 = (int)round_up4(p.K);
    const size_t chunks = chunks_of(p.T, C), chunk = slice.first + blockIdx.x % slice.count, head = blockIdx.x / slice.count;
    const size_t t0 = chunk * C, row0 = head * p.T + t0;
    const int n = (int)(p.T - t0 < C ? p.T - t0 : C), KW = (int)padded_k(p.K);
    const int row = threadIdx.x / 16 * 4, column = threadIdx.x % 16 * 4;
    float *chain = w.chain_inputs + (head * chunks + chunk) * chain_block_floats(p.K, p.V);
    double *gamma = shared;
    float *keys_t = (float *)(gamma + MAX_CHUNK), *Tm_t = keys_t, *Tm = keys_t + (K4 > TILE ? K4 : TILE) * TILE;
    float *right = Tm + MAX_CHUNK * TP, *beta = right + TILE * TILE, *scaled_beta = beta + MAX_CHUNK;

    /* the chunk's first key and value rows, in shared memory: registers are at their bound here */
    __shared__ size_t first_rows[2];
    if (threadIdx.x == 0)
        first_rows[0] = chunk_key_row(p, layout, head, t0), first_rows[1] = chunk_value_row(layout, head, t0, p.T);
    __syncthreads();
    load_transposed<2>(keys_t, p.k, first_rows[0], p.H, n, K);
    for (int i = threadIdx.x; i < MAX_CHUNK; i += THREADS) { /* gates and betas, all at once */
        size_t token = first_rows[1] + (i < n ? i : 0) * layout.HV;
        gamma[i] = i < n ? p.g[token] : 0.0;
        beta[i] = i < n ? p.beta[token] : 0.0f;
    }
    __syncthreads();
    if (threadIdx.x < 32) /* eq. 9 by one warp, in double as the CPU stage (see wy_chunked.c) */
        cumulative_gates(gamma, beta, scaled_beta, n, w.gamma + row0, chain + chain_decay_offset(K, V));
    __syncthreads();
    /* W's padding columns, then the keys decayed to the chunk's end, transposed:
     * exp(gamma_C - gamma_j) k_j (eq. 15), zero past the chunk and in the padding */
    for (int e = threadIdx.x; e < MAX_CHUNK * (KW - K4); e += THREADS)
        chain[e / (KW - K4) * KW + K4 + e % (KW - K4)] = 0.0f;
    float4 *decayed = (float4 *)(chain + chain_keys_offset(K));
    const double gamma_last = gamma[n - 1];
    for (int e = threadIdx.x; e < K * CHUNK_STRIDE / 4; e += THREADS) {
        const int c = e / (CHUNK_STRIDE / 4), j = e % (CHUNK_STRIDE / 4) * 4;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (j < MAX_CHUNK) {
            x = *(const float4 *)(keys_t + c * TILE + j);
            x.x *= j < n ? expf((float)(gamma_last - gamma[j])) : 0.0f;
            x.y *= j + 1 < n ? expf((float)(gamma_last - gamma[j + 1])) : 0.0f;
            x.z *= j + 2 < n ? expf((float)(gamma_last - gamma[j + 2])) : 0.0f;
            x.w *= j + 3 < n ? expf((float)(gamma_last - gamma[j + 3])) : 0.0f;
        }
        decayed[e] = x;
    }

    /* I + M, M[i, j] = beta_i (k_i . k_j) exp(gamma_i - gamma_j) for j < i (eq. 10) */
    float acc[4][4];
    clear_tile(acc);
    multiply_tile_4x4(acc, keys_t, keys_t, K);
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int i = row + r, j = column + c;
            Tm[i * TP + j] = i == j ? 1.0f : j < i && i < n ? beta[i] * acc[r][c] * expf((float)(gamma[i] - gamma[j])) : 0.0f;
        }
    __syncthreads();
    /* Tm = (I + M)^-1 in place (eq. 11), by 16 x 16 blocks: a row-by-row forward substitution
     * would be 63 dependent steps with two barriers each, most of this kernel's time. */
    invert_diagonal_blocks<TP>(Tm);
    __syncthreads();
    join_diagonal_blocks(Tm, TP, right); /* ends with a barrier: keys_t is read no more */
    for (int e = threadIdx.x; e < TILE * TILE; e += THREADS) { /* consecutive i: no bank conflict either side */
        const int i = e % TILE, j = e / TILE;
        Tm_t[j * TILE + i] = Tm[i * TP + j];
    }

    /* W = Tm (beta exp(gamma) K) (eq. 12), 64 columns at a time; rows of W past the chunk
     * come out zero (Tm is the identity there, and those rows of `right` are zero) */
    for (int first = 0; first < K; first += TILE) {
        __syncthreads(); /* Tm_t complete; `right` (the join's scratch, or the last pass's) free */
        load_scaled_columns(right, p.k, first_rows[0], p.H, n, K, first, scaled_beta);
        __syncthreads();
        clear_tile(acc);
        multiply_tile_4x4(acc, Tm_t, right, n);
        if (first + column < K) /* zeros from `right` past K fill the row up to a multiple of 4 */
#pragma unroll
            for (int r = 0; r < 4; r++)
                *(float4 *)(chain + (row + r) * KW + first + column) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    }
    /* U = Tm (beta V) (eq. 12), formed transposed, U^T = (beta V)^T Tm^T: thread rows are
     * columns of V, thread columns are tokens, so a row of U_t is again 16 consecutive bytes */
    for (int first = 0; first < V; first += TILE) {
        __syncthreads();
        load_scaled_columns(right, p.v, first_rows[1], layout.HV, n, V, first, beta);
        __syncthreads();
        clear_tile(acc);
        multiply_tile_4x4(acc, right, Tm_t, n);
#pragma unroll
        for (int r = 0; r < 4; r++)
            if (first + row + r < V) /* tokens past the chunk come out zero, as W's rows */
                *(float4 *)(chain + chain_u_offset(K) + (first + row + r) * CHUNK_STRIDE + column) =
                    make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    }
}

/* Kernel 2: one block per (head, COLUMNS = 4 or 8 columns of S), serial over the chunks.
 * Per chunk it needs its part of the chunk's input block: W, keys_t, its COLUMNS rows of U_t
 * and the decay (chain_stage_floats). These do not depend on S, so they are copied ahead into
 * a ring of CHAIN_STAGES shared-memory slots: while chunk n computes, the copies of chunks
 * n + 1, n + 2 (and n + 3) are in flight. One chunk ahead is not enough: the block (35 KB at
 * K = 64) comes from DRAM, and the latency of a load from there is longer than a chunk step.
 * The copies are bulk copies (cp.async.bulk, common/bulk_copy.cuh): the TMA unit moves each
 * contiguous piece (W and keys_t, the tile's rows of U_t, the decay) on one instruction of
 * thread 0, and counts the bytes on the slot's mbarrier, which every thread waits on. Copies
 * by every thread (cp.async, 16 bytes at a time: nine a thread a chunk at K = 64) take a
 * fifth of a step to issue (a slice of 128 chunks: 215 us with them, 175 with bulk copies;
 * H200, B=1 T=16384 H=8 K=V=64, ncu). Then, per chunk:
 *   Vnew = U - W S0 (eq. 13)                   row i of W against the COLUMNS columns of S0
 *   S = exp(gamma_C) S0 + Kdec^T Vnew (eq. 15)  row m of keys_t against the columns of Vnew
 * Thread (row, part) owns row `row` (0 .. 63; for S also row + 64) and a quarter of the dot
 * products' length (float4 number part, part + 4, ...), for every column of the tile: each
 * float4 of W or keys_t it loads serves COLUMNS columns (register reuse: one thread per
 * output would load two float4 for every four FMAs, bound by shared-memory bandwidth).
 * The four parts are summed with two shuffles. The eight lanes of a quarter warp share one
 * part and hold eight consecutive rows: row strides of 17 or 33 float4 put their loads in
 * eight different bank groups, and the S or Vnew value they need is one broadcast.
 * Two barriers a chunk: one before Vnew (after the wait for the chunk's copies: S is complete,
 * and the slot refilled next is read no more), one between Vnew and the update.
 * S_t[COLUMNS][KW] (S transposed), Vnew_t[COLUMNS][68] and the slots' mbarriers follow the
 * ring in shared memory.
 * COLUMNS = 8 halves the blocks when 4-column tiles would be more than one per SM (so a
 * second wave of serial chains would wait for the first). K_LIMIT (SMALL_K = 64 or MAX_K =
 * 128: the kernel is made for K <= K_LIMIT) bounds the loops over K at compile time, so that
 * they unroll with no trip count to keep; and the ring's slot is an int that wraps, not
 * index % 3 on a size_t (a 64-bit division every chunk). Without these two, ncu counts 514
 * instructions a warp a chunk step, 250 of them integer arithmetic and branches; with them 421,
 * and a slice takes 216 us, not 238 (H200, B=1 T=16384 H=8 K=V=64). A launch walks one slice
 * of the chunks (see the forward pass), from `start` (h0, or the state the slice before it
 * left in ht), and leaves its state in ht. */
constexpr int PARTS = 4;
enum { SMALL_K = 64 };
/* The ring's slots: 4 for 4-column tiles at K <= 64 (one wave of chains: a step waits on the
 * latency of its copies, and a fourth slot hides more of it), else 3: at K = 128 four do not
 * fit, and with 8-column tiles (several waves) a fourth slot costs time, 1.96 -> 2.11 ms at
 * (8, 4096, 16, 64, 64). At (1, 16384, 8, 64, 64) 3, 4, 5 slots: 0.633, 0.599, 0.640 ms. */
__host__ __device__ constexpr int chain_stages(int columns, int k_limit) { return columns == 4 && k_limit <= SMALL_K ? 4 : 3; }
__host__ __device__ static inline size_t chain_stage_floats(size_t K, int columns)
{
    return chain_u_offset(K) + columns * CHUNK_STRIDE + 4;
}

/* Start copying block's part for one column tile into one slot of the ring, by bulk copies
 * (the TMA unit), issued by one thread: W and keys_t whole (shared4 float4), then COLUMNS rows
 * of U_t (the tile's, from float4 u4_offset of the block on), then the decay, as consecutive
 * float4. The slot's barrier `landed` expects their bytes. */
template <int COLUMNS>
__device__ static void fetch_chain_inputs(float4 *slot, const float4 *block, int shared4, int u4_offset, int decay4_offset, uint64_t *landed)
{
    constexpr int U4 = COLUMNS * CHUNK_STRIDE / 4;
    barrier_arrive_expecting(landed, (uint32_t)(shared4 + U4 + 1) * sizeof(float4));
    bulk_copy(slot, block, (uint32_t)shared4 * sizeof(float4), landed);
    bulk_copy(slot + shared4, block + u4_offset, U4 * sizeof(float4), landed);
    bulk_copy(slot + shared4 + U4, block + decay4_offset, sizeof(float4), landed);
}

/* acc[c] summed over the four parts: lanes 8 and 16 apart (see the mapping above) */
template <int COLUMNS>
__device__ __forceinline__ static void sum_parts(float (&acc)[COLUMNS])
{
#pragma unroll
    for (int c = 0; c < COLUMNS; c++) {
        acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], 8);
        acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], 16);
    }
}

/* acc[4 q + part], picked with selects: indexing acc[] with the run-time part would move it
 * to local memory, and a loop over the columns with a test per column compiled to branches. */
template <int COLUMNS>
__device__ __forceinline__ static float own_column(const float (&acc)[COLUMNS], int q, int part)
{
    float value = acc[q * PARTS];
#pragma unroll
    for (int r = 1; r < PARTS; r++)
        value = part == r ? acc[q * PARTS + r] : value;
    return value;
}

template <int COLUMNS, int K_LIMIT>
__global__ void __launch_bounds__(THREADS, 1) chunk_states_kernel(gdn_device_problem p, size_t C, chunk_workspace w, chunk_slice slice,
                                                                   const float *start, float *ht)
{
    constexpr int CHAIN_STAGES = chain_stages(COLUMNS, K_LIMIT);
    extern __shared__ float4 tiles4[];
    const int K = (int)p.K, KW = (int)padded_k(p.K), stage4 = (int)chain_stage_floats(p.K, COLUMNS) / 4;
    const size_t V = p.V, chunks = chunks_of(p.T, C), tiles_per_head = (V + COLUMNS - 1) / COLUMNS;
    const size_t head = blockIdx.x / tiles_per_head, column0 = blockIdx.x % tiles_per_head * COLUMNS;
    const int lane = threadIdx.x % 32, row = threadIdx.x / 32 * 8 + lane % 8, part = lane / 8;
    const size_t block4 = chain_block_floats(p.K, V) / 4;
    const int shared4 = (int)(chain_u_offset(p.K) / 4), u4_offset = (int)((chain_u_offset(p.K) + column0 * CHUNK_STRIDE) / 4);
    const int decay4_offset = (int)(chain_decay_offset(p.K, V) / 4);
    const float4 *next_block = (const float4 *)w.chain_inputs + (head * chunks + slice.first) * block4; /* the slice's first */
    float *S_t = (float *)(tiles4 + CHAIN_STAGES * stage4), *Vnew_t = S_t + COLUMNS * KW;
    uint64_t *landed = (uint64_t *)(Vnew_t + COLUMNS * CHUNK_STRIDE); /* a barrier per slot */
    /* where this tile's S0 and Vnew go, advanced a chunk at a time (not recomputed in size_t) */
    float *states = w.states + (head * chunks + slice.first) * K * V + column0;
    float *new_values = w.new_values + (head * p.T + slice.first * C) * V + column0;
    /* this thread's places in them, the same every chunk: worked out once, not per chunk */
    const int save_m = threadIdx.x / COLUMNS, save_c = threadIdx.x % COLUMNS;
    const bool save_real = column0 + save_c < V;
    const size_t save_offset = (size_t)save_m * V + save_c, save_stride = THREADS / COLUMNS * V;
    const size_t row_offset = (size_t)row * V + part; /* Vnew's column 4 q + part */

    if (threadIdx.x == 0) {
        for (int s = 0; s < CHAIN_STAGES; s++)
            barrier_init(&landed[s], 1); /* thread 0's arrival, with the bytes it expects */
        barrier_init_fence();
    }
    for (int e = threadIdx.x; e < COLUMNS * KW + COLUMNS * CHUNK_STRIDE; e += THREADS)
        S_t[e] = 0.0f; /* padding must read as zero */
    __syncthreads();
    for (int e = threadIdx.x; e < K * COLUMNS; e += THREADS) {
        const int m = e / COLUMNS, c = e % COLUMNS; /* consecutive threads, consecutive columns */
        S_t[c * KW + m] = start && column0 + c < V ? start[(head * K + m) * V + column0 + c] : 0.0f;
    }
    for (int ahead = 0; ahead < CHAIN_STAGES - 1 && (size_t)ahead < slice.count; ahead++, next_block += block4)
        if (threadIdx.x == 0)
            fetch_chain_inputs<COLUMNS>(tiles4 + ahead * stage4, next_block, shared4, u4_offset, decay4_offset, &landed[ahead]);

    int slot = 0; /* the ring's slot of this chunk; the one copied next is the slot before it */
    uint32_t phase = 0; /* the parity of the slot's barrier phase this pass round the ring waits for */
    for (size_t index = 0; index < slice.count; index++) { /* the slice's chunk number, from 0 */
        const size_t chunk = slice.first + index, n = p.T - chunk * C < C ? p.T - chunk * C : C;
        const float *slot_floats = (const float *)(tiles4 + slot * stage4);
        const float *Wt = slot_floats, *keys_t = slot_floats + chain_keys_offset(K), *u_t = slot_floats + chain_u_offset(K);
        barrier_wait(&landed[slot], phase); /* this chunk's copies have landed */
        __syncthreads(); /* S is complete; the slot refilled next (chunk - 1's) is read no more */
        if (index + CHAIN_STAGES - 1 < slice.count) {
            const int refill = slot == 0 ? CHAIN_STAGES - 1 : slot - 1; /* chunk - 1's, read no more */
            if (threadIdx.x == 0)
                fetch_chain_inputs<COLUMNS>(tiles4 + refill * stage4, next_block, shared4, u4_offset, decay4_offset, &landed[refill]);
            next_block += block4;
        }
        phase ^= slot == CHAIN_STAGES - 1; /* the next pass round the ring waits for the next phase */
        slot = slot == CHAIN_STAGES - 1 ? 0 : slot + 1; /* not index % 3: a 64-bit division */
        if (save_real) { /* S0: THREADS / COLUMNS rows a pass */
            float *to = states + save_offset;
            for (int m = save_m; m < K; m += THREADS / COLUMNS, to += save_stride)
                *to = S_t[save_c * KW + m];
        }
        states += K * V;

        /* Vnew[row, c] = U[row, c] - sum_m W[row, m] S0[m, c] (eq. 13) */
        float acc[COLUMNS];
#pragma unroll
        for (int c = 0; c < COLUMNS; c++)
            acc[c] = 0.0f;
#pragma unroll
        for (int step = 0; step < (K_LIMIT / 4 + PARTS - 1) / PARTS; step++) { /* float4 number m4 = 4 step + part */
            const int m4 = step * PARTS + part;
            if (m4 >= (K + 3) / 4) /* W's padding columns are zero: skipped */
                break;
            const float4 a = ((const float4 *)(Wt + row * KW))[m4];
#pragma unroll
            for (int c = 0; c < COLUMNS; c++) {
                const float4 s = ((const float4 *)(S_t + c * KW))[m4];
                acc[c] += a.x * s.x, acc[c] += a.y * s.y, acc[c] += a.z * s.z, acc[c] += a.w * s.w;
            }
        }
        sum_parts<COLUMNS>(acc);
#pragma unroll
        for (int q = 0; q < COLUMNS / PARTS; q++) { /* each lane keeps column c = 4 q + part */
            const int c = q * PARTS + part;
            const bool real = (size_t)row < n && column0 + c < V;
            const float value = real ? u_t[c * CHUNK_STRIDE + row] - own_column(acc, q, part) : 0.0f;
            Vnew_t[c * CHUNK_STRIDE + row] = value;
            if (real)
                new_values[row_offset + q * PARTS] = value;
        }
        __syncthreads();

        /* S[m, c] = exp(gamma_C) S0[m, c] + sum_j Kdec[j, m] Vnew[j, c] (eq. 15) */
        const float decay = u_t[COLUMNS * CHUNK_STRIDE];
#pragma unroll
        for (int first = 0; first < K_LIMIT; first += MAX_CHUNK) { /* every lane, so that the shuffles meet */
            const int m = first + row;
            const float *k_row = keys_t + (m < K ? m : 0) * CHUNK_STRIDE; /* a real row; discarded past K */
#pragma unroll
            for (int c = 0; c < COLUMNS; c++)
                acc[c] = 0.0f;
#pragma unroll
            for (int step = 0; step < MAX_CHUNK / 4 / PARTS; step++) { /* float4 number j4 = 4 step + part */
                const int j4 = step * PARTS + part;
                const float4 a = ((const float4 *)k_row)[j4];
#pragma unroll
                for (int c = 0; c < COLUMNS; c++) {
                    const float4 v = ((const float4 *)(Vnew_t + c * CHUNK_STRIDE))[j4];
                    acc[c] += a.x * v.x, acc[c] += a.y * v.y, acc[c] += a.z * v.z, acc[c] += a.w * v.w;
                }
            }
            sum_parts<COLUMNS>(acc);
#pragma unroll
            for (int q = 0; q < COLUMNS / PARTS; q++) {
                const int c = q * PARTS + part;
                if (m < K)
                    S_t[c * KW + m] = decay * S_t[c * KW + m] + own_column(acc, q, part);
            }
        }
        new_values += C * V;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < K * COLUMNS; e += THREADS) {
        const int m = e / COLUMNS, c = e % COLUMNS;
        if (column0 + c < V)
            ht[(head * K + m) * V + column0 + c] = S_t[c * KW + m];
    }
}

/* Kernel 3: one block per (head, chunk, 64 columns of o). Shared, padded to 64 rows with
 * zeros: gamma[64] (double), q_t[K][64] and k_t[K][64] (the chunk's q and k transposed),
 * P_t[64][64] in k_t's place once Q K^T is formed (16 KB less: three blocks an SM at K = 64,
 * where P_t in a place of its own leaves room for two), S0[K][64], Vnew[64][64].
 *     P = lower(Q K^T exp(gamma_i - gamma_j))                       (eq. 14)
 *     o = scale (exp(gamma) Q S0 + P Vnew)                          (eq. 14)
 * all three products as 4 x 4 register tiles; P is formed transposed (K Q^T), the form in
 * which the last product reads it. */
__global__ void __launch_bounds__(THREADS) chunk_outputs_kernel(gdn_device_problem p, size_t C, chunk_workspace w, chunk_slice slice, float *o,
                                                        gdn_device_layout layout)
{
    extern __shared__ double shared[];
    const int K = (int)p.K, V = (int)p.V, K4 = (int)round_up4(p.K);
    const size_t chunks = chunks_of(p.T, C), tiles_per_chunk = (p.V + OUTPUT_COLUMNS - 1) / OUTPUT_COLUMNS;
    const size_t column0 = blockIdx.x % tiles_per_chunk * OUTPUT_COLUMNS, head_chunk = blockIdx.x / tiles_per_chunk;
    const size_t head = head_chunk / slice.count, chunk = slice.first + head_chunk % slice.count, t0 = chunk * C;
    const size_t row0 = head * p.T + t0;
    const size_t key_row = chunk_key_row(p, layout, head, t0), value_row = chunk_value_row(layout, head, t0, p.T);
    const int n = (int)(p.T - t0 < C ? p.T - t0 : C), width = V - (int)column0; /* columns from column0 on */
    const int row = threadIdx.x / 16 * 4, column = threadIdx.x % 16 * 4;
    double *gamma = shared;
    float *q_t = (float *)(gamma + MAX_CHUNK), *k_t = q_t + K4 * TILE, *P_t = k_t;
    float *S = k_t + (K4 > TILE ? K4 : TILE) * TILE, *Vnew = S + K * TILE;

    load_transposed<4>(q_t, p.q, key_row, p.H, n, K);
    load_transposed<4>(k_t, p.k, key_row, p.H, n, K);
    for (int i = threadIdx.x; i < MAX_CHUNK; i += THREADS)
        gamma[i] = i < n ? w.gamma[row0 + i] : 0.0;
    const float *states = w.states + (head * chunks + chunk) * K * p.V + column0;
#pragma unroll 4 /* four loads in flight a thread, not one after another */
    for (int e = threadIdx.x; e < K * TILE / 4; e += THREADS) {
        const int m = e / (TILE / 4), c = e % (TILE / 4) * 4;
        ((float4 *)S)[e] = load_four(states + m * p.V, c, width);
    }
#pragma unroll /* the four loads of a thread in flight together */
    for (int e = threadIdx.x; e < MAX_CHUNK * TILE / 4; e += THREADS) {
        const int i = e / (TILE / 4), c = e % (TILE / 4) * 4;
        ((float4 *)Vnew)[e] = i < n ? load_four(w.new_values + (row0 + i) * p.V + column0, c, width) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    __syncthreads();

    float acc[4][4];
    clear_tile(acc);
    multiply_tile_4x4(acc, k_t, q_t, K); /* K Q^T: thread rows are keys j, columns queries i */
    __syncthreads();                     /* every thread is done with k_t: P_t takes its place */
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int j = row + r;
        float values[4];
#pragma unroll
        for (int c = 0; c < 4; c++) { /* only j <= i: exponents <= 0 */
            const int i = column + c;
            values[c] = j <= i && i < n ? acc[r][c] * expf((float)(gamma[i] - gamma[j])) : 0.0f;
        }
        *(float4 *)(P_t + j * TILE + column) = make_float4(values[0], values[1], values[2], values[3]);
    }
    clear_tile(acc);
    multiply_tile_4x4(acc, q_t, S, K); /* Q S0 */
#pragma unroll
    for (int r = 0; r < 4; r++) {
        float decay = row + r < n ? expf((float)gamma[row + r]) : 0.0f;
        acc[r][0] *= decay, acc[r][1] *= decay, acc[r][2] *= decay, acc[r][3] *= decay;
    }
    __syncthreads(); /* P complete */
    multiply_tile_4x4(acc, P_t, Vnew, n); /* + P Vnew */
#pragma unroll
    for (int r = 0; r < 4; r++)
        if (row + r < n)
            store_four(o + (value_row + (row + r) * layout.HV) * p.V + column0, column, width,
                       make_float4(p.scale * acc[r][0], p.scale * acc[r][1], p.scale * acc[r][2], p.scale * acc[r][3]));
}

/* The three kernels overlapped, slice by slice. Kernel 2 is one block an SM walking chunk after
 * chunk, and it leaves most of each SM's issue slots idle (ncu: a third busy); kernels 1 and 3
 * are parallel work that only has to be done before (1) or after (3) the chain passes its
 * chunks. So the chunks of every head are cut into SLICES slices (where each gets at least
 * MIN_SLICE_CHUNKS), and the kernels go into three streams, joined by events:
 *     prepare:  k1(0) k1(1) k1(2) ...
 *     chain:          k2(0)  k2(1)  k2(2) ...        k2(s) waits for k1(s) (and k2(s - 1))
 *     outputs:               k3(0)  k3(1)  ...       k3(s) waits for k2(s)
 * While the chain walks slice s, kernel 1's blocks for slice s + 1 and kernel 3's for slice
 * s - 1 run on the same SMs beside it (all three ask for the largest shared-memory carveout,
 * so that their blocks fit on one SM together). The chain's stream has the highest priority:
 * when a slice is ready, its blocks are placed before waiting blocks of the other two. Each
 * slice of the chain starts from the state the last one left in ht (h0 for the first).
 * The streams are blocking ones: they wait for, and are waited for by, the default stream
 * the runner records its timing events on. Made once, kept for the process.
 * Why two slices (H200, B=1 T=16384 H=8 K=V=64): 1, 2, 4, 8 slices take 0.802, 0.741, 0.769,
 * 0.785 ms. Each slice restarts the chain (its ring refills, an event is waited on), about
 * 7 us, and a chain sharing its SMs runs slower, which eats most of what more overlap gives. */
enum { SLICES = 2, MIN_SLICE_CHUNKS = 32 };

/* Kernel 2 for a tile width and K: made for K up to SMALL_K or up to MAX_K (its loops over K
 * unroll to the limit); chain_k_limit says which, for the kernel and for its ring's depth */
static int chain_k_limit(size_t K) { return K <= SMALL_K ? (int)SMALL_K : (int)MAX_K; }
typedef void (*chain_kernel)(gdn_device_problem, size_t, chunk_workspace, chunk_slice, const float *, float *);
static chain_kernel chain_kernel_for(int columns, size_t K)
{
    const bool small = chain_k_limit(K) == SMALL_K;
    if (columns == 8)
        return small ? chunk_states_kernel<8, SMALL_K> : chunk_states_kernel<8, MAX_K>;
    return small ? chunk_states_kernel<4, SMALL_K> : chunk_states_kernel<4, MAX_K>;
}

typedef struct {
    cudaStream_t prepare, chain, outputs;
    cudaEvent_t prepared[SLICES], walked[SLICES]; /* slice s: kernel 1 done, kernel 2 done */
} overlap_streams;

static int get_overlap_streams(overlap_streams *out)
{
    static overlap_streams made;
    static int ready = 0; /* set only once everything below is made */
    if (!ready) {
        int least, greatest; /* numerically: the greatest priority is the smallest number */
        CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&made.prepare, cudaStreamDefault, least));
        CUDA_CHECK(cudaStreamCreateWithPriority(&made.chain, cudaStreamDefault, greatest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&made.outputs, cudaStreamDefault, least));
        for (int i = 0; i < SLICES; i++) {
            CUDA_CHECK(cudaEventCreateWithFlags(&made.prepared[i], cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&made.walked[i], cudaEventDisableTiming));
        }
        const int carveout = cudaSharedmemCarveoutMaxShared;
        CUDA_CHECK(cudaFuncSetAttribute(prepare_chunks_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout));
        const size_t k_limits[2] = {SMALL_K, MAX_K};
        for (int columns = 4; columns <= 8; columns += 4)
            for (int i = 0; i < 2; i++)
                CUDA_CHECK(cudaFuncSetAttribute(chain_kernel_for(columns, k_limits[i]), cudaFuncAttributePreferredSharedMemoryCarveout, carveout));
        CUDA_CHECK(cudaFuncSetAttribute(chunk_outputs_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout));
        ready = 1;
    }
    *out = made;
    return 0;
}

static int wy_chunked_cuda_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    const size_t K = p->K, V = p->V, C = s->chunk, heads = p->B * r->layout.HV, chunks = chunks_of(p->T, C);
    if (K > MAX_K)
        return gdn_set_error("K = %zu: the GPU chunked form keeps K-wide tiles in shared memory, K at most %d", K, MAX_K);
    if (C > MAX_CHUNK)
        return gdn_set_error("--chunk %zu: the GPU chunked form takes chunks of at most %d tokens", C, MAX_CHUNK);
    chunk_workspace w = workspace_at(r->workspace, p, heads, C);
    static int sms = 0; /* asked once: the runner calls this for every repetition */
    if (sms == 0)
        sms = gdn_sm_count();
    const int state_columns = heads * ((V + 3) / 4) > (size_t)sms ? 8 : 4; /* see kernel 2 */
    const chain_kernel chunk_states = chain_kernel_for(state_columns, K); /* named as kernel 2 is in the docs and in a failed launch's message */
    const size_t output_tiles = (V + OUTPUT_COLUMNS - 1) / OUTPUT_COLUMNS;
    unsigned prepare_blocks, state_blocks, output_blocks;
    if (gdn_blocks_for(heads * chunks, 1, &prepare_blocks) ||
        gdn_blocks_for(heads * ((V + state_columns - 1) / state_columns), 1, &state_blocks) ||
        gdn_blocks_for(heads * chunks * output_tiles, 1, &output_blocks))
        return -1; /* the whole sequence's grids: a slice's are no larger */
    const size_t M = MAX_CHUNK, KW = padded_k(K);
    const size_t keys_rows = round_up4(K) > M ? round_up4(K) : M; /* keys_t and what replaces it (Tm_t, P_t) */
    size_t prepare_bytes = M * sizeof(double) + (keys_rows * M + M * (M + 1) + M * M + 2 * M) * sizeof(float);
    const int stages = chain_stages(state_columns, chain_k_limit(K));
    size_t state_bytes = (stages * chain_stage_floats(K, state_columns) + state_columns * (KW + CHUNK_STRIDE)) * sizeof(float) +
                         stages * sizeof(uint64_t); /* the ring, S_t, Vnew_t, the slots' barriers */
    size_t output_bytes = M * sizeof(double) + ((round_up4(K) + keys_rows) * M + K * OUTPUT_COLUMNS + M * OUTPUT_COLUMNS) * sizeof(float);

    overlap_streams o = {};
    if (get_overlap_streams(&o))
        return -1;
    const size_t slices = chunks < SLICES * MIN_SLICE_CHUNKS ? 1 : SLICES;
    const size_t per_slice = (chunks + slices - 1) / slices;
    for (size_t i = 0; i * per_slice < chunks; i++) {
        const chunk_slice slice = {i * per_slice, chunks - i * per_slice < per_slice ? chunks - i * per_slice : per_slice};
        const unsigned prepare_slice = (unsigned)(heads * slice.count), output_slice = (unsigned)(heads * slice.count * output_tiles);
        CUDA_LAUNCH_WITH_SHARED_ON(o.prepare, prepare_chunks_kernel, prepare_slice, THREADS, prepare_bytes, *p, C, w, slice, r->layout);
        CUDA_CHECK(cudaEventRecord(o.prepared[i], o.prepare));
        CUDA_CHECK(cudaStreamWaitEvent(o.chain, o.prepared[i], 0));
        const float *start = i == 0 ? p->h0 : r->ht;
        CUDA_LAUNCH_WITH_SHARED_ON(o.chain, chunk_states, state_blocks, THREADS, state_bytes, *p, C, w, slice, start, r->ht);
        CUDA_CHECK(cudaEventRecord(o.walked[i], o.chain));
        CUDA_CHECK(cudaStreamWaitEvent(o.outputs, o.walked[i], 0));
        CUDA_LAUNCH_WITH_SHARED_ON(o.outputs, chunk_outputs_kernel, output_slice, THREADS, output_bytes, *p, C, w, slice, r->o, r->layout);
    }
    return 0;
}

/* gamma (double) and Vnew per token; kernel 2's input block (with U) and one K x V state per chunk. */
static int wy_chunked_cuda_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    size_t rows, states, keys, heads = p->B * gdn_value_heads(p), chunks = chunks_of(p->T, s->chunk);
    size_t row_factors[3] = {heads, p->T, sizeof(double) + p->V * sizeof(float)};
    size_t key_factors[4] = {heads, chunks, chain_block_floats(p->K, p->V), sizeof(float)};
    size_t state_factors[4] = {heads, chunks, p->K * p->V, sizeof(float)};
    if (gdn_multiply_sizes(&rows, 3, row_factors) || gdn_multiply_sizes(&keys, 4, key_factors) ||
        gdn_multiply_sizes(&states, 4, state_factors))
        return -1;
    *bytes = rows + sizeof(double) + keys + states; /* + the alignment gap after gamma */
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
    .options = GDN_OPTION_CHUNK | GDN_OPTION_VALUE_HEADS,
    .forward = NULL,
    .counted_flops = wy_chunked_flops,
    .resolve_options = wy_chunked_cuda_resolve_options,
    .device_forward = wy_chunked_cuda_forward,
    .device_workspace_bytes = wy_chunked_cuda_workspace,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 0,
};
