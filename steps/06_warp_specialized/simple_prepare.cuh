/* simple_prepare.cuh -- kernel 1 of 06a (the gates' sums, K K^T, the solve, W and U, the
 * decayed keys; eq. 9-12 and 15's keys), writing the chain block in stage 06's layout
 * (chunk_workspace.cuh): U in bf16, stored in the order the chain's lanes read it as MMA
 * fragments (u_fragment_index). 06c_bulk_outputs and 06d's predecessor chain read it so.
 *
 * Cost: as 06a's kernel 1: a block per (head, chunk), 256 threads, parallel over every chunk.
 *
 * Included by bulk_outputs.cu.
 */
#pragma once
/* where U's value at token i, column u goes in U_t: n-tile u / 8, the lane that holds (i, u % 8)
 * in its accumulator (lane 4 (i % 8) + (u % 8) / 2), that lane's four values of token tile i / 16
 * (u_fragment_index), sum r = 2 ((i % 16) / 8) + u % 2 of the four */
__device__ __forceinline__ static size_t u_place(int i, size_t u)
{
    const int lane = 4 * (i % 8) + (int)(u % 8) / 2, r = 2 * ((i % 16) / 8) + (int)(u % 2);
    return u / 8 * 8 * CHUNK + u_fragment_index<bf16>(lane, i / 16) + r;
}

/* ---- kernel 1: one block per (head, chunk), 8 warps; warp w owns output rows 16 (w % 4) and
 * columns 32 (w / 4) of each 64 x 64 product ---- */

static __global__ void __launch_bounds__(THREADS, 3) prepare_chunks_kernel(gdn_device_problem p, chunk_workspace w)
{
    extern __shared__ double shared[];
    const int K = (int)p.K, KP = round_up16(p.K), LDK = key_stride(p.K);
    const size_t V = p.V, chunks = chunks_of(p.T), chunk = blockIdx.x % chunks, head = blockIdx.x / chunks;
    const size_t t0 = chunk * CHUNK, b = head / p.H, h = head % p.H, row0 = head * p.T + t0;
    const int n = (int)(p.T - t0 < CHUNK ? p.T - t0 : CHUNK), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tile_row = 16 * (warp % 4), tile_column = 32 * (warp / 4);
    unsigned char *chain = w.chain + (head * chunks + chunk) * chain_block_bytes(p.K, V, false);
    const bf16 *k16 = (const bf16 *)p.k_bf16, *v16 = (const bf16 *)p.v_bf16;
    double *gamma = shared;
    float *beta = (float *)(gamma + CHUNK), *scaled_beta = beta + CHUNK, *Tm = scaled_beta + CHUNK;
    bf16 *keys = (bf16 *)(Tm + CHUNK * (CHUNK + 1)), *Tm16 = keys + CHUNK * LDK, *right_t = Tm16 + CHUNK * TOKEN_STRIDE;

    for (int i = warp; i < CHUNK; i += THREADS / 32) { /* a row per warp: coalesced */
        const bf16 *from = k16 + gdn_device_token(&p, b, t0 + (i < n ? i : 0), h) * K;
        for (int c = lane; c < KP; c += 32)
            keys[i * LDK + c] = i < n && c < K ? from[c] : __float2bfloat16_rn(0.0f);
    }
    for (int i = threadIdx.x; i < CHUNK; i += THREADS) {
        size_t token = gdn_device_token(&p, b, t0 + (i < n ? i : 0), h);
        gamma[i] = i < n ? p.g[token] : 0.0;
        beta[i] = i < n ? p.beta[token] : 0.0f;
    }
    __syncthreads();
    if (threadIdx.x < 32) /* eq. 9 */
        cumulative_gates(gamma, beta, scaled_beta, n, w.gamma + row0, (float *)(chain + chain_decay_offset(K, V, false)));
    __syncthreads();

    /* I + M, M[i, j] = beta_i (k_i . k_j) exp(gamma_i - gamma_j) for j < i (eq. 10): K K^T on
     * tensor cores, keys serving as both A and B^T */
    float acc[4][4];
    clear(acc);
    warp_product(acc, keys, LDK, keys, LDK, tile_row, tile_column, KP);
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = fragment_row(tile_row, r), l = fragment_column(tile_column, j, r);
            Tm[i * (CHUNK + 1) + l] =
                i == l ? 1.0f : l < i && i < n ? beta[i] * acc[j][r] * expf((float)(gamma[i] - gamma[l])) : 0.0f;
        }
    __syncthreads();
    invert_diagonal_blocks<CHUNK + 1>(Tm); /* Tm = (I + M)^-1 (eq. 11), in fp32 */
    __syncthreads();
    join_diagonal_blocks(Tm, CHUNK + 1, (float *)right_t);
    for (int e = threadIdx.x; e < CHUNK * CHUNK; e += THREADS)
        Tm16[e / CHUNK * TOKEN_STRIDE + e % CHUNK] = __float2bfloat16_rn(Tm[e / CHUNK * (CHUNK + 1) + e % CHUNK]);

    /* [W | U] = Tm [beta exp(gamma) K | beta V] (eq. 12), 64 columns at a time; B^T = right_t
     * holds the 64 columns as rows. Consecutive threads read consecutive columns (coalesced
     * global loads of v) and write a column of right_t each. */
    bf16 *W = (bf16 *)chain, *keys_t = (bf16 *)(chain + chain_keys_offset(K, false));
    bf16 *U_t = (bf16 *)(chain + chain_u_offset(K, false)); /* in the chain's fragment order: u_place */
    for (size_t first = 0; first < (size_t)K + V; first += CHUNK) {
        __syncthreads(); /* Tm16 complete; right_t free (the solve's scratch, then the last pass) */
        for (int e = threadIdx.x; e < CHUNK * CHUNK; e += THREADS) {
            const int l = e / CHUNK, c = e % CHUNK;
            const size_t column = first + c;
            float value = 0.0f;
            if (l < n && column < (size_t)K)
                value = scaled_beta[l] * __bfloat162float(keys[l * LDK + column]);
            else if (l < n && column < K + V)
                value = beta[l] * __bfloat162float(v16[gdn_device_token(&p, b, t0 + l, h) * V + (column - K)]);
            right_t[c * TOKEN_STRIDE + l] = __float2bfloat16_rn(value);
        }
        __syncthreads();
        clear(acc);
        warp_product(acc, Tm16, TOKEN_STRIDE, right_t, TOKEN_STRIDE, tile_row, tile_column, CHUNK);
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) { /* rows past the chunk come out zero: right_t is zero there */
                const int i = fragment_row(tile_row, r);
                const size_t out = first + fragment_column(tile_column, j, r);
                if (out < (size_t)K)
                    W[i * LDK + out] = __float2bfloat16_rn(acc[j][r]);
                else if (out < K + V)
                    U_t[u_place(i, out - K)] = __float2bfloat16_rn(acc[j][r]);
            }
    }
    /* U_t's rows V .. round_up16(V), so that the last column tile computes with zeros */
    for (int e = threadIdx.x; e < (round_up16(V) - (int)V) * CHUNK; e += THREADS)
        U_t[u_place(e % CHUNK, V + e / CHUNK)] = __float2bfloat16_rn(0.0f);
    /* W's columns K .. KP, and the keys decayed to the chunk's end, transposed (eq. 15); zero
     * past the chunk and past K */
    for (int e = threadIdx.x; e < CHUNK * (KP - K); e += THREADS)
        W[e / (KP - K) * LDK + K + e % (KP - K)] = __float2bfloat16_rn(0.0f);
    for (int e = threadIdx.x; e < KP * CHUNK; e += THREADS) {
        const int c = e / CHUNK, j = e % CHUNK;
        const float value = j < n && c < K ? __bfloat162float(keys[j * LDK + c]) * expf((float)(gamma[n - 1] - gamma[j])) : 0.0f;
        keys_t[c * TOKEN_STRIDE + j] = __float2bfloat16_rn(value);
    }
}
