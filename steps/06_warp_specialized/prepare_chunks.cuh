/* prepare_chunks.cuh -- kernel 1: everything of a chunk that does not depend on the state,
 * for every chunk at once.
 *
 * A block per (head, chunk), 8 warps, each making a 16 x 32 part of every 64 x 64 product. In
 * order (docs/05): the gates' sums gamma (eq. 9, in double) by the one warp with no block of
 * K K^T on or below the diagonal, while the others make K K^T; I + M (eq. 10); Tm = (I +
 * M)^-1 (eq. 11), its diagonal blocks inverted in fp32 by two warps while the others decay
 * the keys (eq. 15), then joined by doubling on tensor cores, in tf32
 * (join_diagonal_blocks_tf32); last, what the chain reads (chunk_parts_for): W = Tm (beta
 * e^gamma K) and U = Tm (beta V) (eq. 12) with the decayed keys, or the transform block alone
 * for the chains that make Vnew from v. k and v come by tensor copies, W and U leave by bulk
 * stores, and the tiles share places (tm_place_bytes), so that four blocks fit an SM.
 *
 * Cost: stage 05's kernel 1 products (wy_chunked_flops) on tensor cores, the causal ones
 * skipping their zero blocks; it reads k and v (bf16), g and beta, and writes 2 K + V values a
 * token (W, the decayed keys, U) or the transform block. Every (head, chunk) is independent,
 * so the kernel is off the serial chain: its time is its work and bytes spread over the SMs,
 * bound by its L1. Each instance's registers, shared memory and blocks an SM: docs/06, "06d:
 * kernel 1 tuned" and "06: Vnew from v, and the launch rules".
 *
 * Included by warp_specialized.cuh.
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
 * K = V = 128 (docs/06, "06d: kernel 1 tuned"):
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

/* What kernel 1 writes (its `parts`, chunk_parts_for): the decayed keys and W and U, or the
 * transform block, which the chains that make Vnew from v read instead (chain_from_values) */
enum { WRITE_KEYS_T = 1, WRITE_W_AND_U = 2, WRITE_TRANSFORM = 4 };
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

/* The transform block, what the chains that make Vnew from v read (chain_from_values): Tm's
 * strictly lower part in bf16 (swizzled rows) and three factors a token: beta, beta e^gamma and
 * the decay to the chunk's end. `block`: the (head, chunk)'s index; `flag`: raise its ready
 * flag once every write is done (kernel 1 beside the chain). */
__device__ __forceinline__ static void write_transform_block(const chunk_workspace &w, size_t block, bool flag, const float *Tm,
                                                             const float *beta, const float *scaled_beta, const double *gamma, int n)
{
    bf16 *const transform = (bf16 *)(w.transforms + block * TRANSFORM_BYTES);
    /* Tm's strictly lower part in bf16, eight columns a thread, one 16-byte store each (a
       row's eight fill its swizzled 128-byte line). Of each eight lanes (one wavefront of
       16-byte reads) four read half of one row and four the other half of the next (the
       row's low bit flipped by the piece's bit 2): rows SOLVE_STRIDE floats apart start 4
       banks apart, so the eight reads meet no conflict, where one row's meet two by two */
    for (int piece = threadIdx.x; piece < CHUNK * CHUNK / 8; piece += THREADS) {
        static_assert(SOLVE_STRIDE % 32 == 4 && THREADS % 32 == 0, "a row's reads 4 banks from the row before");
        const int i = (piece / 8) ^ (piece / 4 % 2), c0 = piece % 8 * 8;
        const float4 left = *(const float4 *)&Tm[i * SOLVE_STRIDE + c0], right = *(const float4 *)&Tm[i * SOLVE_STRIDE + c0 + 4];
        const float row[8] = {left.x, left.y, left.z, left.w, right.x, right.y, right.z, right.w};
        uint32_t pairs[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            pairs[e] = pack_bf16(c0 + 2 * e < i ? row[2 * e] : 0.0f, c0 + 2 * e + 1 < i ? row[2 * e + 1] : 0.0f);
        *(uint4 *)&transform[swizzled_offset(CHUNK, i, c0)] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
    }
    if (threadIdx.x < CHUNK) { /* the factors */
        float *const factors = (float *)(transform + CHUNK * CHUNK);
        const int token = threadIdx.x;
        factors[token] = beta[token];
        factors[CHUNK + token] = scaled_beta[token];
        factors[2 * CHUNK + token] = decay_to_chunk_end(gamma, n, token);
    }
    if (flag) { /* the chain may take the chunk: its flag, after every write */
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence(); /* the block's writes (seen through the barrier) before the flag, at GPU scope */
            store_release_gpu(w.ready + block, 1u);
        }
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

/* Kernel 1's variants, each built for the blocks an SM it should hold, which caps its registers
 * (__launch_bounds__, prepare_blocks): PREPARE_SLICES, V in slices of VALUE_SLICE columns, 3;
 * PREPARE_ONE_SLICE, V one slice, where four blocks' shared memory fits too (tm_place_bytes), 4
 * (with the loop over later slices ptxas would spill 20 bytes); PREPARE_PRECISE, --precise, 2;
 * PREPARE_TRANSFORM, the transform block alone: without W, U, the decayed keys and the values'
 * tile (the join's scratch in the keys' place), 6 (docs/06, "06: Vnew from v, and the launch
 * rules"). */
enum prepare_variant { PREPARE_SLICES, PREPARE_ONE_SLICE, PREPARE_PRECISE, PREPARE_TRANSFORM };
__host__ __device__ constexpr int prepare_blocks(prepare_variant variant)
{
    return variant == PREPARE_PRECISE ? 2 : variant == PREPARE_ONE_SLICE ? 4 : variant == PREPARE_TRANSFORM ? 6 : 3;
}
/* (PREPARE_TRANSFORM returns after the transform block: nvcc would call the loops after it unreachable) */
#pragma nv_diag_suppress 128
/* SIZE: K = V = SIZE known to the compiler (64 or 128), so strides and bounds are constants; 0: as given */
template <prepare_variant VARIANT, int SIZE>
static __global__ void __launch_bounds__(THREADS, prepare_blocks(VARIANT)) prepare_chunks_kernel(gdn_device_problem p, chunk_workspace w,
                                                                                          const __grid_constant__ CUtensorMap k_map,
                                                                                          const __grid_constant__ CUtensorMap v_map, int parts,
                                                                                          unsigned first_chunk)
{
    extern __shared__ double shared[];
    constexpr bool PRECISE = VARIANT == PREPARE_PRECISE, TRANSFORM_ONLY = VARIANT == PREPARE_TRANSFORM;
    const size_t key_count = SIZE ? (size_t)SIZE : p.K, V = SIZE ? (size_t)SIZE : p.V;
    const int K = (int)key_count, KP = round_up16(key_count), LDK = key_stride(key_count);
    /* the block's (head, chunk), 32-bit as blockIdx.x is: registers are few at four blocks an SM.
       Beside the chain (w.ready), from first_chunk in the chain's order: every head's c, then c + 1 */
    const unsigned chunks = (unsigned)chunks_of(p.T), heads = (unsigned)(p.B * p.H);
    const bool beside_chain = TRANSFORM_ONLY && w.ready;
    const unsigned chunk = beside_chain ? first_chunk + blockIdx.x / heads : blockIdx.x % chunks;
    const unsigned head = beside_chain ? blockIdx.x % heads : blockIdx.x / chunks;
    const unsigned b = head / (unsigned)p.H, h = head % (unsigned)p.H;
    const size_t t0 = (size_t)chunk * CHUNK;
    if (t0 >= row_tokens(w, b, p.T)) /* a padded row's padding: nothing to prepare */
        return;
    const size_t row0 = (size_t)head * p.T + t0;
    const int n = (int)(p.T - t0 < CHUNK ? p.T - t0 : CHUNK), warp = threadIdx.x / 32;
    const int tile_row = 16 * (warp % 4), tile_column = 32 * (warp / 4);
    unsigned char *chain = w.chain + (head * chunks + chunk) * chain_block_bytes(key_count, V, PRECISE);
    const bf16 *k16 = (const bf16 *)p.k_bf16, *v16 = (const bf16 *)p.v_bf16;
    const int VP = round_up16(V), LDV = value_stride(V);
    /* from a 128-byte boundary, as tensor copies want; the launch adds 128 bytes for the shift */
    double *gamma = (double *)SHARED_AT_128_BYTES(shared); /* common/bulk_copy.cuh */
    float *beta = (float *)(gamma + CHUNK), *scaled_beta = beta + CHUNK, *Tm = scaled_beta + CHUNK;
    bf16 *keys = (bf16 *)((unsigned char *)Tm + tm_place_bytes(PRECISE)), *values = keys + CHUNK * LDK;
    bf16 *Tm_values = (bf16 *)Tm, *Tm_keys = Tm_values + CHUNK * TOKEN_STRIDE; /* in Tm's place, once Tm is read */

    /* k and v in, asynchronously: the keys now, waited for before K K^T; the values once the
     * solve is done with their place, waited for only before U, so their copy runs under the
     * rounding of Tm, the decayed keys and W. Where the boxes fit, one tensor copy each on an
     * mbarrier (the values' box is the first slice's tile); else the threads copy them. */
    const size_t first_token = gdn_device_token(&p, b, t0, h), token_stride = p.H; /* token t0 + i: first + i H */
    const bool by_map = tiles_by_tensor_map(key_count, V, key_heads(p), p.T);
    static_assert((CHUNK * sizeof(double) + 2 * CHUNK * sizeof(float) + tm_place_bytes(PRECISE)) % 128 == 0,
                  "the keys' tile starts 128-byte aligned (the values' then does too: 64 rows of LDK bf16 are 128 LDK bytes)");
    __shared__ uint64_t keys_landed, values_landed;
    if (by_map && threadIdx.x == 0) {
        barrier_init(&keys_landed, 1);
        barrier_init(&values_landed, 1);
        barrier_init_fence();
        barrier_arrive_expecting(&keys_landed, (uint32_t)(CHUNK * LDK * sizeof(bf16)));
        tensor_copy_3d(keys, &k_map, (int)(h / p.heads_per_key * K), (int)t0, (int)b, &keys_landed);
    }
    if (!by_map) {
        copy_tile(keys, LDK, CHUNK, n, K, KP, k16 + key_row(p, b, t0, h) * K, key_heads(p) * K);
        __pipeline_commit();
    }
    /* The gates' sums (eq. 9) by warp 4 alone (tokens 2 lane and 2 lane + 1), which has no
     * block of K K^T on or below the diagonal, while the other warps make K K^T: no warp waits
     * for the gates before its products. The barrier below only publishes the mbarriers'
     * initialization; warp 4's loads are in flight across it. */
    constexpr int GATES_WARP = 4;
    static_assert(GATES_WARP / 4 * 32 >= 16 * (GATES_WARP % 4) + 16, "the gates' warp has no K K^T block on or below the diagonal");
    double gate_first = 0.0, gate_second = 0.0;
    float beta_first = 0.0f, beta_second = 0.0f;
    const int pair = 2 * (threadIdx.x % 32);
    if (warp == GATES_WARP) {
        if (pair < n)
            gate_first = p.g[first_token + pair * token_stride], beta_first = p.beta[first_token + pair * token_stride];
        if (pair + 1 < n)
            gate_second = p.g[first_token + (pair + 1) * token_stride], beta_second = p.beta[first_token + (pair + 1) * token_stride];
    }
    __syncthreads(); /* the barriers' initialization is seen before any thread waits on them */
    if (warp == GATES_WARP) {
        const double total = warp_gate_sums(&gate_first, &gate_second);
        write_gate_sums(gate_first, gate_second, total, beta_first, beta_second, n, gamma, beta, scaled_beta, w.gamma + row0,
                        (float *)(chain + chain_decay_offset(K, V, PRECISE)));
    }
    if (by_map)
        barrier_wait(&keys_landed, 0);
    else {
        __pipeline_wait_prior(0); /* the keys, */
        __syncthreads();          /* every thread's */
    }

    /* I + M, M[i, j] = beta_i (k_i . k_j) exp(gamma_i - gamma_j) for j < i (eq. 10): K K^T on
     * tensor cores, keys serving as both A and B^T */
    float acc[4][4];
    clear(acc);
    warp_product(acc, keys, LDK, keys, LDK, tile_row, tile_column, KP, causal_tiles(tile_row, tile_column)); /* its l < i blocks */
    __syncthreads(); /* the gates' sums are here */
    /* the gates of the thread's two rows, read once, and of its two columns in each 16 x 8
     * tile, read before the tile's stores, which would otherwise make the compiler read them
     * again for every element (the rows' betas serve U's diagonal term too). All eight
     * columns' gates at once would take registers that six blocks an SM do not have. */
    double row_gamma[2];
    float row_beta[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int i = fragment_row(tile_row, 2 * half);
        row_gamma[half] = gamma[i], row_beta[half] = beta[i];
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const double column_gamma[2] = {gamma[fragment_column(tile_column, j, 0)], gamma[fragment_column(tile_column, j, 1)]};
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = fragment_row(tile_row, r), l = fragment_column(tile_column, j, r);
            Tm[i * SOLVE_STRIDE + l] = i == l                 ? 1.0f
                                       : l < i && i < n ? row_beta[r / 2] * acc[j][r] * exp_approx((float)(row_gamma[r / 2] - column_gamma[r % 2]))
                                                        : 0.0f;
        }
    }
    __syncthreads();
    /* the decayed keys by warps 2-7 while warps 0 and 1 invert the diagonal blocks, which would otherwise keep them waiting */
    static_assert(SOLVE_BLOCKS * SOLVE_BLOCK == CHUNK && (THREADS - CHUNK) % CHUNK == 0, "the inversion takes the first 64 threads");
    if (!TRANSFORM_ONLY && threadIdx.x >= CHUNK && (parts & WRITE_KEYS_T))
        write_decayed_keys((bf16 *)(chain + chain_keys_offset(K, PRECISE)), keys, LDK, KP, gamma, n);
    invert_diagonal_blocks<SOLVE_STRIDE>(Tm); /* Tm = (I + M)^-1 (eq. 11): the diagonal blocks in fp32, */
    __syncthreads();
    /* the rest on tensor cores, its scratch in the values' place (transform block alone: the keys', read by now) */
    static_assert(!TRANSFORM_ONLY || CHUNK * (SIZE + KEY_STRIDE_PADDING) * sizeof(bf16) >= 32 * JOIN_STRIDE * sizeof(float),
                  "the join's scratch fits in the keys' place (that instance is compiled for K = 64 or 128)");
    join_diagonal_blocks_tf32(Tm, TRANSFORM_ONLY ? (float *)keys : (float *)values);
    fence_shared_for_bulk_store(); /* the scratch's accesses before the values' tensor copy (common/bulk_copy.cuh) */
    /* W = Tm (beta e^gamma K) and U = Tm (beta V) (eq. 12) as (Tm diag(beta e^gamma)) K and (Tm
     * diag(beta)) V: the scales go into Tm's columns, so K and V enter as they lie and
     * ldmatrix.trans makes their B fragments, where stage 05 writes scaled, transposed copies
     * (docs/06, "06d: kernel 1 tuned"). Past the chunk both scales are zero, and so are W's and
     * U's rows. The products take Tm's strictly lower part, and the diagonal's term, beta_i
     * e^gamma_i k_i, is added in fp32 below: in bf16 it would round beta_i once for the whole
     * row, an error no sum averages away. */
    /* into Tm's own place: each thread reads its 16 elements (column l of rows first_row, + 4,
     * ...: its column's scales read once, fixed offsets from one address), then writes them
     * after a barrier, the bf16 pair (keys' scale, values' scale) of each in one register */
    static_assert(THREADS % CHUNK == 0, "each thread keeps one column of Tm (and one token of keys_t below)");
    constexpr int PER_THREAD = CHUNK * CHUNK / THREADS, ROW_STEP = THREADS / CHUNK;
    const int l = threadIdx.x % CHUNK, first_row = threadIdx.x / CHUNK;
    const float keys_scale = scaled_beta[l], values_scale = beta[l];
    if (TRANSFORM_ONLY || (parts & WRITE_TRANSFORM)) { /* the transform block (the chains from v) */
        write_transform_block(w, (size_t)head * chunks + chunk, beside_chain && chunk >= w.ready_from, Tm, beta, scaled_beta, gamma, n);
        if (TRANSFORM_ONLY || !(parts & WRITE_W_AND_U)) /* that chain makes Vnew from v itself */
            return;
    }
    uint32_t scaled[PER_THREAD];
#pragma unroll
    for (int a = 0; a < PER_THREAD; a++) {
        const int i = first_row + a * ROW_STEP;
        const float lower = l < i ? Tm[i * SOLVE_STRIDE + l] : 0.0f;
        scaled[a] = pack_bf16(lower * keys_scale, lower * values_scale);
    }
    __syncthreads(); /* every read of Tm done (and of the solve's scratch: the values may come) */
    if (by_map && threadIdx.x == 0) {
        barrier_arrive_expecting(&values_landed, (uint32_t)(CHUNK * LDV * sizeof(bf16)));
        tensor_copy_3d(values, &v_map, (int)(h * V), (int)t0, (int)b, &values_landed);
    }
    if (!by_map) {
        copy_tile(values, LDV, CHUNK, n, (int)(V < VALUE_SLICE ? V : VALUE_SLICE), VP < VALUE_SLICE ? VP : VALUE_SLICE,
                  v16 + first_token * V, token_stride * V);
        __pipeline_commit();
    }
#pragma unroll
    for (int a = 0; a < PER_THREAD; a++) {
        const int i = first_row + a * ROW_STEP;
        const __nv_bfloat162 pair = *(const __nv_bfloat162 *)&scaled[a];
        Tm_keys[i * TOKEN_STRIDE + l] = __low2bfloat16(pair);
        Tm_values[i * TOKEN_STRIDE + l] = __high2bfloat16(pair);
    }
    __syncthreads();

    /* each warp 16 rows and 32 of every 64 columns of [W | U]; K and V are zero past K and V,
     * so W's columns K .. KP and U's V .. VP come out zero, as kernel 2 needs them. Both leave
     * through a staging tile (a lane's fragment would fill half of each 32-byte sector of a
     * direct store) by one bulk store, whole lines; U's is laid out as U_t (u_fragment_index).
     * W's is the keys' own place: a 64-column pass reads only its own columns of the keys, so
     * after a barrier its W columns take their place (the diagonal's term read before it). */
    chain_u_type<PRECISE> *U_stage = (chain_u_type<PRECISE> *)Tm_keys; /* 64 rows of U_t at a time, in fragment order */
    make_w<PRECISE>(chain, K, KP, LDK, keys, Tm_keys, scaled_beta, tile_row, tile_column);
    if (by_map)
        barrier_wait(&values_landed, 0);
    else
        __pipeline_wait_prior(0); /* the values */
    /* U, VALUE_SLICE columns of v at a time (one, already here, for V <= VALUE_SLICE), 64
     * columns a pass: each warp's 32 into the staging tile, then 64 rows of U_t out */
    make_u<PRECISE, VARIANT == PREPARE_ONE_SLICE>(chain, K, V, VP, LDV, values, Tm_values, U_stage, row_beta, n, v16, first_token, token_stride, tile_row, tile_column);
    if (threadIdx.x == 0)
        bulk_store_wait(); /* the block's shared memory stays until its stores have read it */
}
#pragma nv_diag_default 128
