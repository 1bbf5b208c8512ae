/* prepare_phases.cuh -- kernel 1's tiles and phases, for 06c and the sub-stages after it (06d,
 * 06e, 06): the solve's strides and the places its tiles share, the products with
 * B by rows (ldmatrix.trans), the tf32 joins of the solve, the keys decayed to the chunk's end,
 * W and U with their bulk stores. Each kernel 1 (prepare_w_and_u.cuh, prepare_chunks.cuh) is
 * these phases in order around its own copies, gates and K K^T.
 *
 * Cost and bound: those of kernel 1 (prepare_w_and_u.cuh).
 *
 * Included by prepare_w_and_u.cuh and prepare_chunks.cuh.
 */
#pragma once

/* ---- kernel 1's tiles: the solve's strides, the shared places, v by slices ---- */

/* Row strides of the solve's fp32 tiles, in floats. Tm's is 4 mod 32, so that both tf32
 * fragment loads (rows g, columns t: 4g + t; rows t, columns g) fall in 32 different banks.
 * The join's scratch Y is a B operand (rows t, t + 4 of column g) and the target of float2
 * stores (rows g, columns 2t): at 4 mod 32 both would be two-way conflicted (ncu: 128
 * excessive wavefronts a chunk), at 8 mod 32 they fall in 32 banks (8t + g; 8g + 2t). */
constexpr int SOLVE_STRIDE = CHUNK + 4, JOIN_STRIDE = 32 + 8;
/* Kernel 1's shared memory is reused as the work goes on, so that four blocks fit an SM at
 * K = V = 128 (docs/06, "06c: kernels 1 and 3 by the TMA unit"):
 *   Tm's place: Tm (fp32) until the solve is done; then Tm_values and Tm_keys (bf16, Tm's
 *               strictly lower part scaled), U's staging tile in Tm_keys' once W is made;
 *   the keys:   k's tile, then W's staging tile, a 64-column pass at a time;
 *   the values: the solve's scratch, then v's tile, loaded after the solve. */
/* kernel 1's staging tile for U_t: 64 of its rows, laid out as in the chain block */
__host__ __device__ constexpr size_t u_stage_bytes(bool precise) { return (size_t)CHUNK * CHUNK * (precise ? sizeof(float) : sizeof(bf16)); }
/* Tm's place: the larger of Tm and Tm_values with the larger of Tm_keys and U's staging tile */
__host__ __device__ constexpr size_t tm_place_bytes(bool precise)
{
    constexpr size_t tm = CHUNK * SOLVE_STRIDE * sizeof(float), scaled_tile = CHUNK * TOKEN_STRIDE * sizeof(bf16);
    const size_t after_solve = scaled_tile + (scaled_tile > u_stage_bytes(precise) ? scaled_tile : u_stage_bytes(precise));
    return tm > after_solve ? tm : after_solve;
}
__host__ __device__ constexpr size_t values_place_bytes(size_t ldv)
{
    return CHUNK * ldv * sizeof(bf16) > 32 * JOIN_STRIDE * sizeof(float) ? CHUNK * ldv * sizeof(bf16) : 32 * JOIN_STRIDE * sizeof(float);
}
/* kernel 1 takes its k and first slice of v the same way where both boxes fit (V a multiple of 16 as well) */
__host__ __device__ static inline bool tiles_by_tensor_map(size_t K, size_t V, size_t H, size_t T)
{
    return keys_by_tensor_map(K, H, T) && V % 16 == 0;
}
/* kernel 1 keeps at most VALUE_SLICE columns of v in shared memory (row stride value_stride) */
constexpr int VALUE_SLICE = 128;
__host__ __device__ static inline int value_stride(size_t V) { return key_stride(V < VALUE_SLICE ? V : VALUE_SLICE); }

/* warp_product with B row major, B[k][n] (stride ldb), for the n-tiles left of column
 * `columns` (a multiple of 16): ldmatrix.trans hands each lane a B fragment of an 8 x 8
 * matrix stored by rows, so W = Tm K and U = Tm V need no transposed copy of K or V. */
template <int TILES>
__device__ __forceinline__ static void warp_product_rows(float (&acc)[TILES][4], const bf16 *A, int lda, const bf16 *B, int ldb,
                                                         int row0, int col0, int columns, int depth)
{
    static_assert(TILES % 2 == 0, "n-tiles are loaded in pairs");
    const bf16 *a_row = quarter_row(A, lda, row0, 0), *b_row = quarter_row(B, ldb, 0, col0);
    for (int k0 = 0; k0 < depth; k0 += 16) {
        uint32_t a[4];
        load_matrices(a, a_row + k0);
#pragma unroll
        for (int j = 0; j < TILES; j += 2) {
            if (col0 + 8 * j >= columns)
                break;
            uint32_t b[4];
            load_matrices_transposed(b, b_row + k0 * ldb + 8 * j);
            const uint32_t first[2] = {b[0], b[1]}, second[2] = {b[2], b[3]};
            mma_bf16_16x8x16(acc[j], a, first);
            mma_bf16_16x8x16(acc[j + 1], a, second);
        }
    }
}

/* a 16 x 8 tile of sums into rows row0 .. row0 + 16, columns col0 .. col0 + 8 of a row-major
   fp32 tile, each by `sign` (two 8-byte stores a lane) */
__device__ __forceinline__ static void store_tile_fp32(float *D, int ldd, int row0, int col0, const float (&acc)[4], float sign)
{
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    *(float2 *)&D[(row0 + g) * ldd + col0 + 2 * t] = make_float2(sign * acc[0], sign * acc[1]);
    *(float2 *)&D[(row0 + g + 8) * ldd + col0 + 2 * t] = make_float2(sign * acc[2], sign * acc[3]);
}
constexpr int JOIN_COLUMN_WARPS = 4; /* the warps that make the second level's X_ab, a column of 8 each */

/* Tm = (I + M)^-1 from the inverses of its 16 x 16 diagonal blocks (eq. 11), by doubling: a
 * unit lower triangular [[L_bb, 0], [L_ab, L_aa]] has the inverse [[X_bb, 0], [X_ab, X_aa]]
 * with X_ab = -X_aa L_ab X_bb. Level 1 joins the pairs (0, 1) and (2, 3) into the two 32 x 32
 * diagonal inverses, level 2 joins those; each level is two tf32 products, Y = L_ab X_bb and
 * X_ab = -X_aa Y, where stage 05's scalar loops take a third of this kernel's instructions.
 * The zeros above the diagonal are in Tm, so no product needs a mask, and the k-steps that
 * meet a known zero block of X_bb or X_aa are skipped.
 * A warp makes whole columns of X_ab, so Y's same columns are its own: a __syncwarp separates
 * the two products, not a block barrier. Level 1: warp p < 2 joins pair p alone, so the only
 * warp that reads its L_ab overwrites it. Level 2: warp c < 4 makes columns 8c .. 8c + 8; all
 * four read L_ab, so the block meets before any overwrites it, at a block barrier: across a
 * named barrier of the four racecheck reports hazards it cannot tell from real ones (docs/06,
 * "Pitfalls"). */
__device__ static void join_diagonal_blocks_tf32(float *Tm, float *scratch)
{
    const int warp = threadIdx.x / 32;
    uint32_t a[4], b[2];
    if (warp < 2) { /* level 1, pair `warp`: rows and columns top .. top + 32 */
        const int top = 32 * warp;
        float *X_ab = Tm + (top + 16) * SOLVE_STRIDE + top, *Y = scratch + warp * 16 * JOIN_STRIDE; /* L_ab, then X_ab */
        const float *X_bb = Tm + top * SOLVE_STRIDE + top, *X_aa = X_ab + 16;
        float y[2][4] = {}, x[2][4] = {};
#pragma unroll
        for (int k0 = 0; k0 < 16; k0 += 8) {
            load_a_tf32(a, X_ab, SOLVE_STRIDE, 0, k0);
#pragma unroll
            for (int n = 0; n < 2; n++)
                if (k0 >= 8 * n) { /* X_bb's rows above column 8 n are zero there */
                    load_b_tf32(b, X_bb, SOLVE_STRIDE, k0, 8 * n);
                    mma_tf32_16x8x8(y[n], a, b);
                }
        }
#pragma unroll
        for (int n = 0; n < 2; n++)
            store_tile_fp32(Y, JOIN_STRIDE, 0, 8 * n, y[n], 1.0f);
        __syncwarp(); /* Y's columns are the warp's own: its lanes' stores before their loads */
#pragma unroll
        for (int k0 = 0; k0 < 16; k0 += 8) {
            load_a_tf32(a, X_aa, SOLVE_STRIDE, 0, k0);
#pragma unroll
            for (int n = 0; n < 2; n++) {
                load_b_tf32(b, Y, JOIN_STRIDE, k0, 8 * n);
                mma_tf32_16x8x8(x[n], a, b);
            }
        }
#pragma unroll
        for (int n = 0; n < 2; n++) /* over L_ab, which only this warp read (before the __syncwarp) */
            store_tile_fp32(X_ab, SOLVE_STRIDE, 0, 8 * n, x[n], -1.0f);
    }
    __syncthreads(); /* the two 32 x 32 diagonal inverses are whole */
    const int col0 = 8 * warp;
    float *X_ab = Tm + 32 * SOLVE_STRIDE; /* L_ab, then X_ab */
    float x[2][4] = {};
    if (warp < JOIN_COLUMN_WARPS) { /* level 2: rows 32 .. 64, columns col0 .. col0 + 8 */
        const float *X_bb = Tm, *X_aa = X_ab + 32;
        float y[2][4] = {};
#pragma unroll
        for (int k0 = 0; k0 < 32; k0 += 8)
            if (k0 >= col0) { /* X_bb's rows above column col0 are zero in these columns */
                load_b_tf32(b, X_bb, SOLVE_STRIDE, k0, col0);
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    load_a_tf32(a, X_ab, SOLVE_STRIDE, 16 * m, k0);
                    mma_tf32_16x8x8(y[m], a, b);
                }
            }
#pragma unroll
        for (int m = 0; m < 2; m++)
            store_tile_fp32(scratch, JOIN_STRIDE, 16 * m, col0, y[m], 1.0f);
        __syncwarp();
#pragma unroll
        for (int k0 = 0; k0 < 32; k0 += 8) {
            load_b_tf32(b, scratch, JOIN_STRIDE, k0, col0);
#pragma unroll
            for (int m = 0; m < 2; m++)
                if (k0 < 16 * m + 16) { /* X_aa's columns right of row 16 m + 16 are zero in these rows */
                    load_a_tf32(a, X_aa, SOLVE_STRIDE, 16 * m, k0);
                    mma_tf32_16x8x8(x[m], a, b);
                }
        }
    }
    __syncthreads(); /* every read of L_ab done */
    if (warp < JOIN_COLUMN_WARPS)
#pragma unroll
        for (int m = 0; m < 2; m++)
            store_tile_fp32(X_ab, SOLVE_STRIDE, 16 * m, col0, x[m], -1.0f);
    __syncthreads();
}


/* ---- kernel 1: one block per (head, chunk), 8 warps; warp w owns output rows 16 (w % 4) and
 * columns 32 (w / 4) of each 64 x 64 product ---- */

/* d_j = e^(gamma_C - gamma_j), token j's decay to the chunk's end (eq. 15); 0 past the chunk */
__device__ __forceinline__ static float decay_to_chunk_end(const double *gamma, int n, int token)
{
    return token < n ? expf((float)(gamma[n - 1] - gamma[token])) : 0.0f;
}

/* The keys decayed to the chunk's end, transposed (eq. 15), into keys_t, by the threads past
 * the first 64 (warps 2-7) while warps 0 and 1 invert the diagonal blocks. Zero past the chunk
 * (decay 0) and past K (the keys' tile is zero there). Worker: token worker % 64 (one
 * exponential), key columns c0 .. c0 + 8 for c0 = 8 (worker / 64), + 24, ...: a 16-byte read
 * each; consecutive threads write consecutive tokens of a keys_t row (coalesced). */
__device__ __forceinline__ static void write_decayed_keys(bf16 *keys_t, const bf16 *keys, int LDK, int KP, const double *gamma, int n)
{
    constexpr int KEY_WORKERS = THREADS - CHUNK, COLUMN_STEP = KEY_WORKERS / CHUNK * 8;
    const int worker = threadIdx.x - CHUNK, token = worker % CHUNK;
    const float decay = decay_to_chunk_end(gamma, n, token);
    for (int c0 = worker / CHUNK * 8; c0 < KP; c0 += COLUMN_STEP) {
        const uint4 raw = *(const uint4 *)(keys + token * LDK + c0);
        const bf16 *pieces = (const bf16 *)&raw;
        bf16 *token_column = keys_t + c0 * TOKEN_STRIDE + token; /* keys_t[c0][token] */
#pragma unroll
        for (int q = 0; q < 8; q++)
            token_column[q * TOKEN_STRIDE] = __float2bfloat16_rn(__bfloat162float(pieces[q]) * decay);
    }
}

/* W = (L diag(beta e^gamma)) K + diag(beta e^gamma) K, L Tm's strictly lower part (eq. 12: the
 * diagonal's term in fp32), rounded to bf16 (and its low terms with --precise), 64 columns a pass into the keys' own
 * place, then out by one bulk store. Each warp makes rows tile_row .. + 16 and 32 of every 64
 * columns. */
template <bool PRECISE>
__device__ __forceinline__ static void make_w(unsigned char *chain, int K, int KP, int LDK, bf16 *keys, const bf16 *Tm_keys,
                                              const float *scaled_beta, int tile_row, int tile_column)
{
    float acc[4][4];
    bf16 *W = (bf16 *)chain, *W_low = (bf16 *)(chain + chain_w_bytes(K));
    bf16 *W_stage = keys; /* [64][LDK]: W as it is in the chain block */
    for (int pass = 0; pass < KP; pass += 64) { /* W, every warp in every pass (the barrier) */
        const int column0 = pass + tile_column;
        uint32_t sums[4][2]; /* the warp's W, rounded, as bf16 pairs */
        if (column0 < KP) {
            clear(acc);
            warp_product_rows(acc, Tm_keys, TOKEN_STRIDE, keys, LDK, tile_row, column0, KP, causal_depth(tile_row));
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int r = 0; r < 4; r += 2) { /* sums r and r + 1 are neighbours in a row: one 4-byte store */
                    const int i = fragment_row(tile_row, r), out = fragment_column(column0, j, r);
                    if (out >= KP)
                        continue;
                    const __nv_bfloat162 key = *(const __nv_bfloat162 *)&keys[i * LDK + out]; /* the diagonal's term */
                    const float first = acc[j][r] + scaled_beta[i] * __low2float(key), second = acc[j][r + 1] + scaled_beta[i] * __high2float(key);
                    sums[j][r / 2] = pack_bf16(first, second);
                    if (PRECISE) { /* the low terms go straight out: --precise is the slow mode anyway */
                        const __nv_bfloat162 high = *(const __nv_bfloat162 *)&sums[j][r / 2];
                        *(__nv_bfloat162 *)&W_low[i * LDK + out] = __floats2bfloat162_rn(first - __low2float(high), second - __high2float(high));
                    }
                }
        }
        __syncthreads(); /* every read of this pass's keys done */
        if (column0 < KP)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int r = 0; r < 4; r += 2) {
                    const int i = fragment_row(tile_row, r), out = fragment_column(column0, j, r);
                    if (out < KP)
                        *(uint32_t *)&W_stage[i * LDK + out] = sums[j][r / 2];
                }
    }
    /* W out by one bulk store, its rows contiguous in the chain block as in the staging tile:
       every writer fences for the async proxy, then the barrier (common/bulk_copy.cuh). The
       keys' place is not written again, so nothing waits for the store until the end. */
    fence_shared_for_bulk_store();
    __syncthreads();
    if (threadIdx.x == 0) {
        bulk_store(W, W_stage, (uint32_t)(CHUNK * LDK * sizeof(bf16)));
        bulk_store_commit();
    }
}

/* U = (L diag(beta)) V + diag(beta) V (eq. 12), VALUE_SLICE columns of v at a time (one,
 * already here, for V <= VALUE_SLICE: ONE_SLICE), 64 columns a pass: each warp's 32 into the
 * staging tile in the chain's fragment order (u_fragment_index), then 64 rows of U_t out by
 * one bulk store. */
template <bool PRECISE, bool ONE_SLICE>
__device__ __forceinline__ static void make_u(unsigned char *chain, int K, size_t V, int VP, int LDV, bf16 *values, const bf16 *Tm_values,
                                              chain_u_type<PRECISE> *U_stage, const float (&row_beta)[2], int n, const bf16 *v16,
                                              size_t first_token, size_t token_stride, int tile_row, int tile_column)
{
    float acc[4][4];
    for (int slice = 0; slice < (ONE_SLICE ? 1 : VP); slice += VALUE_SLICE) {
        const int width = VP - slice < VALUE_SLICE ? VP - slice : VALUE_SLICE;
        if (!ONE_SLICE && slice > 0) {
            __syncthreads(); /* every read of the last slice is done */
            copy_tile(values, LDV, CHUNK, n, (int)(V - slice < VALUE_SLICE ? V - slice : VALUE_SLICE), width,
                      v16 + first_token * V + slice, token_stride * V);
            __pipeline_commit();
            __pipeline_wait_prior(0);
        }
        for (int pass = 0; pass < width; pass += 64) {
            const int column0 = pass + tile_column;
            if (threadIdx.x == 0)
                bulk_store_wait_read(); /* the staging tile's last rows are out (W's too: one wait for all) */
            __syncthreads(); /* (and the slice is here) */
            if (column0 < width) {
                clear(acc);
                warp_product_rows(acc, Tm_values, TOKEN_STRIDE, values, LDV, tile_row, column0, width, causal_depth(tile_row));
#pragma unroll
                for (int j = 0; j < 4; j++) { /* + the diagonal's term, beta_i v_i */
                    const int out = fragment_column(column0, j, 0), row = fragment_row(tile_row, 0);
                    if (out >= width) /* width is a multiple of 16: the whole n-tile is past it */
                        continue;
                    /* this lane's fragment of n-tile j, tokens row, row + 8 of columns out, out + 1:
                     * the chain lane's four values of token tile tile_row / 16 (u_fragment_index) */
                    const __nv_bfloat162 top = *(const __nv_bfloat162 *)&values[row * LDV + out];
                    const __nv_bfloat162 bottom = *(const __nv_bfloat162 *)&values[(row + 8) * LDV + out];
                    const float four[4] = {acc[j][0] + row_beta[0] * __low2float(top), acc[j][1] + row_beta[0] * __high2float(top),
                                           acc[j][2] + row_beta[1] * __low2float(bottom), acc[j][3] + row_beta[1] * __high2float(bottom)};
                    const int n_tile = (out - pass) / 8;
                    store_four(U_stage + n_tile * 8 * CHUNK + u_fragment_index<chain_u_type<PRECISE>>(threadIdx.x % 32, tile_row / 16), four);
                }
            }
            fence_shared_for_bulk_store();
            __syncthreads();
            const int rows = width - pass < 64 ? width - pass : 64; /* rows of U_t: columns of U */
            if (threadIdx.x == 0) { /* one bulk store, as W (the address made here: kept from
                                       above, it takes a register and ptxas spills 8 bytes) */
                chain_u_type<PRECISE> *U_t = (chain_u_type<PRECISE> *)(chain + chain_u_offset(K, PRECISE));
                bulk_store(U_t + (size_t)(slice + pass) * CHUNK, U_stage, (uint32_t)(rows * CHUNK * sizeof(chain_u_type<PRECISE>)));
                bulk_store_commit();
            }
        }
    }
}
