/* chunk_outputs.cuh -- kernel 3: o for every chunk at once, where the chain's output warps do
 * not make it.
 *
 * Once the chain has left S0^T and Vnew^T of every chunk in the workspace, o (eq. 14) of
 * every (head, chunk) is independent. A block per (head, chunk, 128 or 64 columns of o), 8
 * warps: P first, from q and k alone, while S0^T and Vnew^T land; then Q S0 and P Vnew on
 * mma.sync, and o out in bf16 through a staging tile. Where all its blocks fit on the GPU at
 * once they run beside the chain (outputs_beside_chain) and wait only for S0^T and Vnew^T.
 *
 * Cost: per chunk and 128 columns of o, Q K^T (64 x 64 x K, causal), Q S0 (64 x K x 128) and P
 * Vnew (64 x 64 x 128, causal); it reads q, k, S0^T and Vnew^T (bf16) and writes o (bf16).
 * Every (head, chunk) is independent: its time is its work and bytes spread over the SMs.
 * Budget: docs/06, "06c: kernels 1 and 3 by the TMA unit".
 *
 * Included by warp_specialized.cuh.
 */
#pragma once
/* ---- kernel 3: one block per (head, chunk, COLUMNS columns of o), 8 warps ----
 *     P = lower(Q K^T exp(gamma_i - gamma_j))                       (eq. 14)
 *     o = scale (exp(gamma) Q S0 + P Vnew)                          (eq. 14)
 * B^T operands: k as stored, S0^T and Vnew^T as kernel 2 saved them. Warp w: rows 16 (w % 4)
 * of P and of o, columns 32 (w / 4) of P and COLUMNS / 2 (w / 4) of o. COLUMNS is 128 where
 * V is a multiple of 128 (output_columns): with 64, a block per 64 columns, each block of a
 * chunk loads the same q and k and makes the same P (docs/06, "06c: kernels 1 and 3 by the TMA unit"). */
template <bool PRECISE, int COLUMNS, int SIZE>
static __global__ void __launch_bounds__(THREADS) chunk_outputs_kernel(gdn_device_problem p, chunk_workspace w, float *o, bf16 *o16,
                                                                       const __grid_constant__ CUtensorMap q_map,
                                                                       const __grid_constant__ CUtensorMap k_map, bool beside)
{
    /* beside the chain (outputs_beside_chain): not --precise, whose kernel ptxas would then
       compile with 8 bytes of spills, for a mode that is not the one timed against FLA */
    const bool beside_chain = !PRECISE && beside;
    extern __shared__ double shared[];
    /* SIZE: K = V = SIZE known to the compiler (64 or 128), as in kernel 1; 0: as given */
    const size_t key_count = SIZE ? (size_t)SIZE : p.K, V = SIZE ? (size_t)SIZE : p.V;
    const int K = (int)key_count, KP = round_up16(key_count), LDK = key_stride(key_count), VP = round_up16(V);
    const size_t chunks = chunks_of(p.T), tiles_per_chunk = (V + COLUMNS - 1) / COLUMNS;
    const size_t column0 = blockIdx.x % tiles_per_chunk * COLUMNS, head_chunk = blockIdx.x / tiles_per_chunk;
    const size_t head = head_chunk / chunks, chunk = head_chunk % chunks, t0 = chunk * CHUNK;
    const size_t b = head / p.H, h = head % p.H, row0 = head * p.T + t0;
    if (t0 >= row_tokens(w, b, p.T)) /* a padded row's padding: no o to make */
        return;
    const int n = chunk_tokens(w, b, p.T, t0), warp = threadIdx.x / 32;
    const int tile_row = 16 * (warp % 4), tile_column = 32 * (warp / 4), output_column = COLUMNS / 2 * (warp / 4);
    const bf16 *q16 = (const bf16 *)p.q_bf16, *k16 = (const bf16 *)p.k_bf16;
    const bf16 *S0_t = w.states_t + head_chunk * VP * LDK, *new_values_t = w.new_values_t + head_chunk * VP * TOKEN_STRIDE;
    /* the tiles from a 128-byte boundary, as tensor copies want; the launch adds 128 bytes for the shift */
    double *gamma = (double *)SHARED_AT_128_BYTES(shared); /* common/bulk_copy.cuh */
    bf16 *q = (bf16 *)(gamma + CHUNK), *k = q + CHUNK * LDK, *S = k + CHUNK * LDK, *Vnew = S + COLUMNS * LDK;
    bf16 *P = Vnew + COLUMNS * TOKEN_STRIDE;
    /* --precise: the low bf16 terms of S0, Vnew and P */
    bf16 *S_low = P + CHUNK * TOKEN_STRIDE, *Vnew_low = S_low + COLUMNS * LDK, *P_low = Vnew_low + COLUMNS * TOKEN_STRIDE;

    /* S0^T and Vnew^T rows of this block's columns, stored padded as these tiles are: each tile
     * is one piece and comes by one bulk copy (the TMA unit), issued by one thread */
    __shared__ uint64_t tiles_landed, keys_landed;
    const int columns = VP - (int)column0 < COLUMNS ? VP - (int)column0 : COLUMNS;
    const size_t low_states = PRECISE ? w.states_low_t - w.states_t : 0, low_values = PRECISE ? w.new_values_low_t - w.new_values_t : 0;
    /* q and k: a head's 64 rows of a chunk lie H K values apart, so a tensor map
     * (make_token_tile_map) describes that layout and one tensor copy each brings the tile
     * padded: the LDK-wide box brings 8 more values a row into the padding, and rows past T
     * land as zeros. Where the box does not fit (keys_by_tensor_map) the threads copy. */
    const bool keys_by_map = keys_by_tensor_map(key_count, key_heads(p), p.T);
    /* S0^T and Vnew^T come by one bulk copy each, issued by thread 0 once the chain has ended */
    const auto copy_chain_tiles = [&] {
        wait_for_previous_kernel(); /* the chain's S0^T and Vnew^T */
        const uint32_t state_bytes = (uint32_t)(columns * LDK * sizeof(bf16)), value_bytes = (uint32_t)(columns * TOKEN_STRIDE * sizeof(bf16));
        barrier_arrive_expecting(&tiles_landed, (state_bytes + value_bytes) * (PRECISE ? 2 : 1));
        bulk_copy(S, S0_t + column0 * LDK, state_bytes, &tiles_landed);
        bulk_copy(Vnew, new_values_t + column0 * TOKEN_STRIDE, value_bytes, &tiles_landed);
        if (PRECISE) {
            bulk_copy(S_low, S0_t + low_states + column0 * LDK, state_bytes, &tiles_landed);
            bulk_copy(Vnew_low, new_values_t + low_values + column0 * TOKEN_STRIDE, value_bytes, &tiles_landed);
        }
    };
    if (threadIdx.x == 0) {
        barrier_init(&tiles_landed, 1);
        barrier_init(&keys_landed, 1);
        barrier_init_fence();
        if (keys_by_map) { /* q and k are inputs: no kernel of the pass writes them */
            const token_coordinates at = input_tile_at(w, b, t0);
            barrier_arrive_expecting(&keys_landed, (uint32_t)(2 * CHUNK * LDK * sizeof(bf16)));
            tensor_copy_3d(q, &q_map, (int)((unsigned)h / p.heads_per_key) * K, at.t, at.b, &keys_landed);
            tensor_copy_3d(k, &k_map, (int)((unsigned)h / p.heads_per_key) * K, at.t, at.b, &keys_landed);
        }
        if (!beside_chain)
            copy_chain_tiles();
    }
    const uint4 zero = make_uint4(0, 0, 0, 0); /* the rows past V, 16 bytes a store (not unrolled:
                                                   unrolled, ptxas spills here at 40 registers) */
#pragma unroll 1
    for (int e = columns * LDK / 8 + threadIdx.x; e < COLUMNS * LDK / 8; e += THREADS) {
        ((uint4 *)S)[e] = zero;
        if (PRECISE)
            ((uint4 *)S_low)[e] = zero;
    }
#pragma unroll 1
    for (int e = columns * TOKEN_STRIDE / 8 + threadIdx.x; e < COLUMNS * TOKEN_STRIDE / 8; e += THREADS) {
        ((uint4 *)Vnew)[e] = zero;
        if (PRECISE)
            ((uint4 *)Vnew_low)[e] = zero;
    }
    /* token t0 + i of g and o: input_token(w, b, p.T, t0, p.H, h) + i H (a packed batch's where it
       lies), made where it is used: with a packed batch it is a load, which ptxas would hold */
    const size_t token_stride = p.H;
    if (!keys_by_map) {
        const size_t first_key = input_token(w, b, p.T, t0, key_heads(p), h / p.heads_per_key), keys_apart = key_heads(p); /* q and k: the key head's rows */
        copy_tile(q, LDK, CHUNK, n, K, KP, q16 + first_key * K, keys_apart * K);
        copy_tile(k, LDK, CHUNK, n, K, KP, k16 + first_key * K, keys_apart * K);
        __pipeline_commit();
    }
    /* gamma: kernel 1's, or beside the chain the gates' sums made here from g (an input) by
       kernel 1's own function (the same values to the bit), so that nothing before P waits */
    if (!beside_chain)
        wait_for_previous_kernel(); /* kernel 1's gamma: kernel 1 ended before the chain did */
    for (int i = threadIdx.x; i < CHUNK; i += THREADS)
        gamma[i] = i >= n ? 0.0 : beside_chain ? (double)p.g[input_token(w, b, p.T, t0 + i, p.H, h)] : w.gamma[row0 + i];
    if (!keys_by_map)
        __pipeline_wait_prior(0);
    __syncthreads(); /* gamma (or g) is here; the barriers' initialization is seen before any thread waits on them */
    if (beside_chain) {
        if (warp == 0)
            running_gate_sums(gamma, n); /* eq. 9 */
        __syncthreads();
        if (threadIdx.x == 0) /* the only thread that waits: its warp makes its part of P after the chain */
            copy_chain_tiles();
    }
    if (keys_by_map)
        barrier_wait(&keys_landed, 0); /* q and k */

    /* P first, from q and k alone, while S0^T and Vnew^T are still landing */
    float scores[4][4];
    clear(scores);
    warp_product(scores, q, LDK, k, LDK, tile_row, tile_column, KP, causal_tiles(tile_row, tile_column)); /* Q K^T, its l <= i blocks */
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r += 2) { /* sums r and r + 1 are neighbours in a row: one 4-byte store */
            const int i = fragment_row(tile_row, r), l = fragment_column(tile_column, j, r);
            float exact[2];
#pragma unroll
            for (int s = 0; s < 2; s++) /* only l <= i: exponents <= 0 */
                exact[s] = l + s <= i && i < n ? scores[j][r + s] * exp_approx((float)(gamma[i] - gamma[l + s])) : 0.0f;
            const __nv_bfloat162 high = __floats2bfloat162_rn(exact[0], exact[1]);
            *(__nv_bfloat162 *)&P[i * TOKEN_STRIDE + l] = high;
            if (PRECISE)
                *(__nv_bfloat162 *)&P_low[i * TOKEN_STRIDE + l] =
                    __floats2bfloat162_rn(exact[0] - __low2float(high), exact[1] - __high2float(high));
        }
    constexpr int TILES = COLUMNS / 16; /* n-tiles of o per warp */
    float acc[TILES][4];
    clear(acc);
    barrier_wait(&tiles_landed, 0); /* S0^T and Vnew^T */
    warp_product(acc, q, LDK, S, LDK, tile_row, output_column, KP); /* Q S0 */
    if (PRECISE)
        warp_product(acc, q, LDK, S_low, LDK, tile_row, output_column, KP);
    const int upper = fragment_row(tile_row, 0), lower = upper + 8; /* this lane's two rows of o */
    const float decay_upper = upper < n ? expf((float)gamma[upper]) : 0.0f, decay_lower = lower < n ? expf((float)gamma[lower]) : 0.0f;
#pragma unroll
    for (int j = 0; j < TILES; j++)
#pragma unroll
        for (int r = 0; r < 4; r++)
            acc[j][r] *= r < 2 ? decay_upper : decay_lower;
    __syncthreads(); /* P complete */
    warp_product(acc, P, TOKEN_STRIDE, Vnew, TOKEN_STRIDE, tile_row, output_column, causal_depth(tile_row)); /* + P Vnew */
    if (PRECISE) {
        warp_product(acc, P, TOKEN_STRIDE, Vnew_low, TOKEN_STRIDE, tile_row, output_column, causal_depth(tile_row));
        warp_product(acc, P_low, TOKEN_STRIDE, Vnew, TOKEN_STRIDE, tile_row, output_column, causal_depth(tile_row));
    }
    /* o leaves in bf16, as FLA writes it, or with --precise in fp32 (a bf16 o would undo what
     * the two terms gained). In bf16 with V a multiple of 8 it goes through a staging tile, as
     * kernel 1's W and U do, and the block stores whole rows, 16 bytes a thread. The tile takes
     * the place of q onwards (spent by then), row stride COLUMNS + 8 so that a fragment's 8
     * rows fall on different banks. */
    if (!PRECISE && p.V % 8 == 0) { /* (p.V: with V a constant the path below would be unreachable code, a warning) */
        constexpr int OUTPUT_STRIDE = COLUMNS + 8, ROW_PIECES = COLUMNS / 8;
        static_assert(CHUNK * OUTPUT_STRIDE <= (COLUMNS + CHUNK) * TOKEN_STRIDE, "the staging tile is no larger than Vnew and P, so it fits in the tiles from q on");
        bf16 *o_stage = q;
        __syncthreads(); /* every warp has read q, k, S0, Vnew and P */
#pragma unroll
        for (int j = 0; j < TILES; j++)
#pragma unroll
            for (int r = 0; r < 4; r += 2) {
                const int i = fragment_row(tile_row, r), c = fragment_column(output_column, j, r);
                *(__nv_bfloat162 *)&o_stage[i * OUTPUT_STRIDE + c] = __floats2bfloat162_rn(p.scale * acc[j][r], p.scale * acc[j][r + 1]);
            }
        __syncthreads();
        const int pieces = (int)(V - column0 < COLUMNS ? V - column0 : COLUMNS) / 8; /* of a row, inside V */
        bf16 *o_rows = o16 + input_token(w, b, p.T, t0, p.H, h) * V + column0; /* token t0 + i's row: i H V further */
        for (int e = threadIdx.x; e < n * ROW_PIECES; e += THREADS) {
            const int i = e / ROW_PIECES, piece = e % ROW_PIECES;
            if (piece < pieces)
                ((uint4 *)(o_rows + i * token_stride * V))[piece] = ((const uint4 *)(o_stage + i * OUTPUT_STRIDE))[piece];
        }
        return;
    }
    /* Otherwise a lane's two neighbours in a row go out as one store where V is even (aligned). */
#pragma unroll
    for (int j = 0; j < TILES; j++)
#pragma unroll
        for (int r = 0; r < 4; r += 2) {
            const int i = fragment_row(tile_row, r);
            const size_t out = column0 + fragment_column(output_column, j, r), row = input_token(w, b, p.T, t0 + i, p.H, h) * V;
            const float first = p.scale * acc[j][r], second = p.scale * acc[j][r + 1];
            if (i >= n)
                continue;
            if (V % 2 == 0 && out + 1 < V) {
                if (PRECISE)
                    *(float2 *)&o[row + out] = make_float2(first, second);
                else
                    *(__nv_bfloat162 *)&o16[row + out] = __floats2bfloat162_rn(first, second);
            } else
                for (int s = 0; s < 2 && out + s < V; s++) {
                    if (PRECISE)
                        o[row + out + s] = s ? second : first;
                    else
                        o16[row + out + s] = __float2bfloat16_rn(s ? second : first);
                }
        }
}

