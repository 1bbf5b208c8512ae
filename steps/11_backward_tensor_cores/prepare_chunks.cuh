/* prepare_chunks.cuh -- pass 1 of the tensor-core backward: per chunk, what needs no state.
 *
 *     gamma = the running sum of g                                  (eq. 9)
 *     M     = lower(diag(beta) (K K^T) o decay),  Tm = (I + M)^-1   (eq. 10-11)
 *     U     = Tm (diag(beta) V),   -W = Tm (-diag(beta e^gamma) K)  (eq. 12)
 *     P     = scale lower(Q K^T o decay),   and P^T dO              (eq. 14, 19a's first term)
 *     scale e^gamma dO, in bf16                                     (19b's operand of Q^T)
 *
 * One block of 8 warps a (head, chunk), every chunk at once. K K^T, Q K^T, U, -W and P^T dO run
 * on tensor cores (warp_product); the solve stays in fp32 on CUDA cores: Tm enters every product
 * of the chunk, and an error in it is one in W, U, dTm and dM at once, while the solve itself is
 * C^3 / 6 multiply-adds against the chunk's C^2 (3 K + 2 V) here on tensor cores. It is stage
 * 05's blocked substitution (wy_chunked_solve.cuh, unchanged), not 10's row by row: the four
 * 16 x 16 diagonal blocks inverted at once, then three block rows joined: eight barriers, where
 * 10's rows take one a row, 64. Tm is rounded to bf16 once, after the solve, as the operand every
 * product reads.
 *
 * Included by backward_tensor_cores.cu after warp_tiles.cuh.
 */
#pragma once

/* the solve's fp32 rows: an even stride, so invert_diagonal_blocks reads two at a time */
constexpr int SOLVE_STRIDE = CHUNK + 4;

/* pass 1's shared memory, cut from base (null: only the bytes). Two pairs share their bytes,
 * each pair used one after the other: the queries, read by Q K^T only, then the fp32 Tm of the
 * solve; the solve's scratch, then the right operand of U, -W and P^T dO and the staging of
 * scale e^gamma dO. About 70 KB at
 * K = V = 128, so three blocks share an SM and one block's copies wait while another computes. */
struct prepare_tiles {
    double *gamma;
    float *beta, *grown, *Tm, *solve_scratch;
    bf16 *keys, *queries, *Tm16, *P16, *right;
    size_t bytes;
};
__host__ __device__ static prepare_tiles prepare_tiles_at(unsigned char *base, size_t K, size_t V)
{
    const size_t LDK = stride_of(K), LDR = LDK > (size_t)stride_of(V) ? LDK : stride_of(V);
    const size_t queries_bytes = CHUNK * LDK * sizeof(bf16), Tm_bytes = CHUNK * SOLVE_STRIDE * sizeof(float);
    const size_t right_bytes = CHUNK * LDR * sizeof(bf16), scratch_bytes = SOLVE_BLOCK * SOLVE_CHUNK * sizeof(float);
    shared_cut cut = {base, 0};
    prepare_tiles t;
    t.gamma = cut.take<double>(CHUNK);
    t.beta = cut.take<float>(CHUNK), t.grown = cut.take<float>(CHUNK);
    unsigned char *queries_then_Tm = cut.take<unsigned char>(queries_bytes > Tm_bytes ? queries_bytes : Tm_bytes);
    t.queries = (bf16 *)queries_then_Tm, t.Tm = (float *)queries_then_Tm;
    t.keys = cut.take<bf16>(CHUNK * LDK);
    t.Tm16 = cut.take<bf16>(CHUNK * TOKEN_STRIDE), t.P16 = cut.take<bf16>(CHUNK * TOKEN_STRIDE);
    unsigned char *scratch_then_right = cut.take<unsigned char>(right_bytes > scratch_bytes ? right_bytes : scratch_bytes);
    t.solve_scratch = (float *)scratch_then_right, t.right = (bf16 *)scratch_then_right;
    t.bytes = cut.used;
    return t;
}

/* the chunk's dO (bf16 or fp32, as the caller gave it) into the right operand's place, each row
 * scaled by scale[i] (null: 1) and rounded once to bf16 (stage_tile) */
__device__ static void stage_dO(const gdn_device_problem &p, const gdn_device_cotangents &cot, const chunk_at &x,
                                const prepare_tiles &s, const float *scale)
{
    const int V = (int)p.V, VP = round_up16(p.V), LDV = stride_of(p.V);
    const size_t at = token_of(p, x, 0) * V, value_stride = p.H * p.V;
    if (cot.d_o_bf16)
        stage_tile(s.right, LDV, CHUNK, VP, (const bf16 *)cot.d_o_bf16 + at, value_stride, x.n, V, scale);
    else
        stage_tile(s.right, LDV, CHUNK, VP, cot.d_o + at, value_stride, x.n, V, scale);
}

/* FOR_BACKWARD_CHAIN: also P^T dO and scale e^gamma dO, the backward chain's addend and operand
 * (stage 12's walk makes both itself, and needs only gamma, Tm, -W and U) */
template <bool FOR_BACKWARD_CHAIN>
__global__ static void __launch_bounds__(THREADS, 3) prepare_chunks_kernel(gdn_device_problem p, gdn_device_cotangents cot,
                                                                          backward_workspace w)
{
    extern __shared__ uint4 shared[];
    const chunk_at x = chunk_of(p, w, blockIdx.x);
    const int n = x.n, K = (int)p.K, V = (int)p.V, KP = round_up16(p.K), VP = round_up16(p.V);
    const int LDK = stride_of(p.K), LDV = stride_of(p.V);
    const prepare_tiles s = prepare_tiles_at((unsigned char *)shared, p.K, p.V);
    const bf16 *k16 = (const bf16 *)p.k_bf16 + token_of(p, x, 0) * K, *q16 = (const bf16 *)p.q_bf16 + token_of(p, x, 0) * K;
    const size_t key_stride = p.H * p.K, value_stride = p.H * p.V; /* one token to the next */

    /* both copies on their way while the gates load; one wait (either tile may have taken the
     * synchronous path: q and k need not share their alignment) */
    stage_tile(s.keys, LDK, CHUNK, KP, k16, key_stride, n, K, (const float *)nullptr, false);
    if constexpr (FOR_BACKWARD_CHAIN)
        stage_tile(s.queries, LDK, CHUNK, KP, q16, key_stride, n, K, (const float *)nullptr, false);
    for (int i = threadIdx.x; i < CHUNK; i += THREADS) {
        s.gamma[i] = i < n ? p.g[token_of(p, x, i)] : 0.0;
        s.beta[i] = i < n ? p.beta[token_of(p, x, i)] : 0.0f;
    }
    __pipeline_wait_prior(0);
    __syncthreads();
    if (threadIdx.x < 32) /* eq. 9, by one warp's shuffles; past n, the chunk's total */
        running_gate_sums(s.gamma, n);
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += THREADS) {
        w.gamma[x.row + i] = s.gamma[i];
        s.grown[i] = expf((float)s.gamma[i]);
    }
    for (int i = n + threadIdx.x; i < CHUNK; i += THREADS)
        s.grown[i] = 0.0f;

    /* K K^T and Q K^T, a 64 x 64 part each; the decay exp(gamma_i - gamma_l) only for l <= i
     * and i < n, so no exponent is positive (eq. 10 and 14) */
    {
        const warp_part part = part_of(CHUNK);
        float kk[4][4] = {};
        warp_product(kk, rows_of(s.keys, LDK), transpose_of(s.keys, LDK), part.row0, part.col0, KP, part.tiles);
        if constexpr (FOR_BACKWARD_CHAIN) {
            float qk[4][4] = {};
            warp_product(qk, rows_of(s.queries, LDK), transpose_of(s.keys, LDK), part.row0, part.col0, KP, part.tiles);
            for_each_sum(qk, part, [&](int i, int l, float &sum) {
                const float decay = l <= i && i < n ? expf((float)(s.gamma[i] - s.gamma[l])) : 0.0f;
                s.P16[i * TOKEN_STRIDE + l] = __float2bfloat16_rn(p.scale * decay * sum);
            });
        }
        __syncthreads(); /* every warp's reads of the queries done: Tm takes their bytes */
        for_each_sum(kk, part, [&](int i, int l, float &sum) {
            const float decay = l <= i && i < n ? expf((float)(s.gamma[i] - s.gamma[l])) : 0.0f;
            s.Tm[i * SOLVE_STRIDE + l] = i == l ? 1.0f : l < i ? s.beta[i] * decay * sum : 0.0f; /* I + M */
        });
    }
    __syncthreads();
    invert_diagonal_blocks<SOLVE_STRIDE>(s.Tm); /* eq. 11, in fp32; rows past n stay those of I */
    __syncthreads();
    join_diagonal_blocks(s.Tm, SOLVE_STRIDE, s.solve_scratch);
    bf16 *Tm_out = w.Tm + x.index * CHUNK * CHUNK;
    for (int e = threadIdx.x; e < CHUNK * CHUNK; e += THREADS) {
        const bf16 value = __float2bfloat16_rn(s.Tm[e / CHUNK * SOLVE_STRIDE + e % CHUNK]);
        s.Tm16[e / CHUNK * TOKEN_STRIDE + e % CHUNK] = value;
        Tm_out[e] = value;
    }

    /* U = Tm (diag(beta) V) (eq. 12): the right operand beta_l v_l, rounded once */
    stage_tile(s.right, LDV, CHUNK, VP, (const bf16 *)p.v_bf16 + token_of(p, x, 0) * V, value_stride, n, V, s.beta);
    __syncthreads(); /* Tm16 and the right operand complete */
    {
        const warp_part part = part_of(VP);
        float acc[8][4] = {};
        warp_product(acc, rows_of(s.Tm16, TOKEN_STRIDE), rows_of(s.right, LDV), part.row0, part.col0, CHUNK, part.tiles);
        float *U = w.U + x.index * CHUNK * VP;
        for_each_sum(acc, part, [&](int i, int c, float &sum) { U[i * VP + c] = i < n && c < V ? sum : 0.0f; });
    }
    __syncthreads(); /* the right operand read */

    /* -W = Tm (-diag(beta e^gamma) K) (eq. 12), bf16 as both chains read it: every element of the
     * 64 x KP block, the zeros past n (Tm is I there, the operand zero) and past K included */
    for (int e = threadIdx.x; e < CHUNK * KP; e += THREADS) {
        const int l = e / KP, c = e % KP;
        s.right[l * LDK + c] = __float2bfloat16_rn(-s.beta[l] * s.grown[l] * __bfloat162float(s.keys[l * LDK + c]));
    }
    __syncthreads();
    {
        const warp_part part = part_of(KP);
        float acc[8][4] = {};
        warp_product(acc, rows_of(s.Tm16, TOKEN_STRIDE), rows_of(s.right, LDK), part.row0, part.col0, CHUNK, part.tiles);
        bf16 *minus_W = w.minus_W + x.index * CHUNK * KP;
        for_each_sum(acc, part, [&](int i, int c, float &sum) { minus_W[i * KP + c] = __float2bfloat16_rn(sum); });
    }

    if constexpr (FOR_BACKWARD_CHAIN) {
        __syncthreads(); /* -W's operand read: dO takes its place */
        /* P^T dO, the first term of dVnew (eq. 19a): A = P read transposed, B = dO in bf16 */
        stage_dO(p, cot, x, s, nullptr);
        __syncthreads();
        {
            const warp_part part = part_of(VP);
            float acc[8][4] = {};
            warp_product(acc, transpose_of(s.P16, TOKEN_STRIDE), rows_of(s.right, LDV), part.row0, part.col0, CHUNK, part.tiles);
            float *PtdO = w.PtdO + x.index * CHUNK * VP;
            for_each_sum(acc, part, [&](int i, int c, float &sum) { PtdO[i * VP + c] = i < n && c < V ? sum : 0.0f; });
        }

        /* scale e^gamma_i dO_i, rounded once to bf16: the B operand of Q^T in the backward chain's
         * dS0 (eq. 19b). It needs no state, so it is made here, every chunk at once, and the chain's
         * path has no expf, scaling or rounding of dO. Staged in the right operand's place once
         * P^T dO has read it (dO read again, from L2 as a rule), its factors in e^gamma's, which
         * nothing after -W reads; then written whole: zero past the chunk and past V. */
        for (int i = threadIdx.x; i < CHUNK; i += THREADS)
            s.grown[i] *= p.scale;
        __syncthreads();
        stage_dO(p, cot, x, s, s.grown);
        __syncthreads();
        bf16 *scaled_dO = w.scaled_dO + x.index * CHUNK * VP;
        for_each_piece(CHUNK, VP / 8, [&](int i, int u) {
            *(uint4 *)(scaled_dO + i * VP + 8 * u) = *(const uint4 *)(s.right + i * LDV + 8 * u);
        });
    }
}
