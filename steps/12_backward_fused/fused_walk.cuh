/* fused_walk.cuh -- the backward chain and every gradient of a chunk in one block: a (sequence,
 * head) walks its chunks from the last, dS in its warps' registers.
 *
 * Per chunk, with S0 and Vnew from the forward chain and Tm from pass 1 (stage 11's kernels):
 *     P, dP = dO Vnew^T, Z = scale lower(dP o decay)                        (eq. 14)
 *     dq    = diag(scale e^gamma) dO S0^T + Z K,   o = diag(scale e^gamma) Q S0 + P Vnew
 *     dVnew = P^T dO + diag(e^(gamma_C - gamma)) K dS_C                     (eq. 19a)
 *     dk    = diag(e^(gamma_C - gamma)) Vnew dS_C^T + Z^T Q + ...            (its first part)
 *     dX    = Tm^T dVnew,  dv = diag(beta) dX                                (eq. 19c)
 *     dS0   = e^gamma_C dS_C + Q^T diag(scale e^gamma) dO + K^T (-diag(e^gamma) dv)   (eq. 19b)
 *     dW    = -dVnew S0^T, dTm, dM = -Tm^T dTm Tm^T, F, dk += ...            (eq. 19c, 19d)
 * The last term of dS0 is eq. 19b's -W^T dVnew: W = Tm diag(beta e^gamma) K, so W^T dVnew =
 * K^T diag(e^gamma) (diag(beta) Tm^T dVnew) = K^T diag(e^gamma) dv. The value gradient is the
 * chain's operand, and the walk never reads -W (one product more on the chain: Tm^T dVnew).
 * dVnew and dS_C stay in shared memory; dk's first part goes to dk and is read back by the same
 * lanes, from L2 as a rule (kept in registers, it makes the kernel spill: 32 accumulators of dS
 * and 16 of it through the WY products).
 *
 * One block of 16 warps a (sequence, head): dS, K x V in fp32, is cut over the warps as 16 rows
 * (from 16 (warp % 8)) by 64 columns (from 64 (warp / 8)), 32 accumulators a thread; every other
 * product is cut by part_of<16>, and the pieces stage 11's pass 4 makes the same way are its own
 * functions (chunk_gradients.cuh: chunk_probabilities, chunk_dq, chunk_o, chunk_dk_first,
 * chunk_solve_gradients, ...), called here on the walk's tiles. The tiles take their places by
 * when they are live (walk_tiles), about 207 KB (212,048 bytes), laid out for K = V = 128
 * whatever K and V: one block an SM, so the blocks are the heads, and where B H is under the SM
 * count the card idles (stage 11 cuts the chains by columns there).
 *
 * Included by backward_fused.cu after stage 11's headers.
 */
#pragma once

constexpr int STATE_TILES = 8; /* 8-column n-tiles of dS a warp: 64 columns */
/* every K- or V-wide tile's row stride: the widest's (the C x C tiles keep TOKEN_STRIDE), so
 * that every place is a constant offset from the start of shared memory (places found from K and
 * V at run time would hold a register pair each through the whole walk) */
constexpr int WALK_LD = stride_of(MAX_WIDTH);

/* The walk's shared memory. Each place holds one tile, then another once the first is read:
 *   queries, then dW;  dO, then scale e^gamma dO (in place), then F (fp32);  Vnew, then -e^gamma dv;
 *   P, then dTm and R;  Z, then F + F^T.
 * keys, values, S0, dS_C (bf16), Tm and dVnew have places of their own (dVnew's, P's and Z's
 * free for an Inputs' scratch until the step's first products: fused_walk_kernel). */
struct walk_tiles {
    double *gamma, *dgamma, *key_sums; /* key_sums [2]: keys_before_last's */
    float *beta, *grown, *read, *to_end;
    float *row_terms, *e_columns, *k_dot, *v_dot, *y_dot, *b_sum, *h_rows, *h_columns; /* [shares][64] row or column sums */
    float *state_dot;                                                                   /* [16]: a warp's <S0, dS_C> */
    bf16 *keys, *values, *S0, *dS16, *Tm16, *dVnew16;
    bf16 *queries, *dW16;
    bf16 *dO16;
    float *F;
    bf16 *Vnew16, *minus_Ddv16;
    bf16 *P16, *dTm16;
    bf16 *Z16, *F16;
    size_t bytes;
};
__host__ __device__ constexpr static walk_tiles walk_tiles_at(unsigned char *base)
{
    constexpr int LDK = WALK_LD, LDV = WALK_LD, KP = MAX_WIDTH;
    constexpr size_t dO_bytes = CHUNK * LDV * sizeof(bf16), F_bytes = CHUNK * SQUARE_STRIDE * sizeof(float);
    shared_cut cut = {base, 0};
    walk_tiles t = {};
    t.gamma = cut.take<double>(CHUNK), t.dgamma = cut.take<double>(CHUNK), t.key_sums = cut.take<double>(2);
    t.beta = cut.take<float>(CHUNK), t.grown = cut.take<float>(CHUNK);
    t.read = cut.take<float>(CHUNK), t.to_end = cut.take<float>(CHUNK);
    t.row_terms = cut.take<float>(GRADIENT_SHARES * CHUNK), t.e_columns = cut.take<float>(GRADIENT_SHARES * CHUNK);
    t.k_dot = cut.take<float>(GRADIENT_SHARES * CHUNK), t.v_dot = cut.take<float>(GRADIENT_SHARES * CHUNK);
    t.y_dot = cut.take<float>(GRADIENT_SHARES * CHUNK), t.b_sum = cut.take<float>(GRADIENT_SHARES * CHUNK);
    t.h_rows = cut.take<float>(GRADIENT_SHARES * CHUNK), t.h_columns = cut.take<float>(GRADIENT_SHARES * CHUNK);
    t.state_dot = cut.take<float>(GRADIENT_WARPS);
    t.keys = cut.take<bf16>(CHUNK * LDK), t.values = cut.take<bf16>(CHUNK * LDV);
    t.S0 = cut.take<bf16>(KP * LDV), t.dS16 = cut.take<bf16>(KP * LDV);
    t.Tm16 = cut.take<bf16>(CHUNK * TOKEN_STRIDE), t.dVnew16 = cut.take<bf16>(CHUNK * LDV);
    t.queries = cut.take<bf16>(CHUNK * LDK), t.dW16 = t.queries;
    unsigned char *dO_place = cut.take<unsigned char>(dO_bytes > F_bytes ? dO_bytes : F_bytes);
    if (base)
        t.dO16 = (bf16 *)dO_place, t.F = (float *)dO_place;
    t.Vnew16 = cut.take<bf16>(CHUNK * LDV), t.minus_Ddv16 = t.Vnew16;
    t.P16 = cut.take<bf16>(CHUNK * TOKEN_STRIDE), t.dTm16 = t.P16;
    t.Z16 = cut.take<bf16>(CHUNK * TOKEN_STRIDE), t.F16 = t.Z16;
    t.bytes = cut.used;
    return t;
}
/* one block an SM: 227 KB of shared memory a block at most */
static_assert(walk_tiles_at(nullptr).bytes <= 227 * 1024, "the walk's tiles fit one block an SM");

/* this warp's 16 x 64 part of dS: rows from 16 (warp % 8), columns from 64 (warp / 8), its
 * n-tiles below VP (for_each_sum's and warp_product's part), and whether its rows are below KP */
struct state_part {
    warp_part part;
    bool rows;
};
__device__ __forceinline__ static state_part state_part_of(int KP, int VP)
{
    const int warp = threadIdx.x / 32, row0 = 16 * (warp % 8), col0 = 64 * (warp / 8);
    const int tiles = VP - col0 >= 64 ? STATE_TILES : VP > col0 ? (VP - col0) / 8 : 0;
    return {{row0, col0, tiles}, row0 < KP && tiles > 0};
}

/* Where the walk finds a chunk's Vnew, S0 and Tm: 11's arrays (pass 1's Tm, the forward
 * chain's S0 and Vnew), in the tiles' own layouts, so each comes by cp.async as it lies: on its
 * way when stage returns, complete at the thread's next __pipeline_wait_prior(0), and nothing
 * left to arrange once the block's barrier after it has passed. Vnew's rows past the chunk's n
 * are zero. */
struct walk_arrays {
    __device__ __forceinline__ void stage(const walk_tiles &s, const backward_workspace &w, const chunk_at &x, int KP, int VP) const
    {
        stage_tile(s.Vnew16, WALK_LD, CHUNK, VP, w.Vnew + x.row * VP, (size_t)VP, x.n, VP, (const float *)nullptr, false);
        copy_rows16(s.S0, WALK_LD * 2, w.S0 + x.index * KP * VP, VP * 2, KP, VP * 2, false);
        copy_rows16(s.Tm16, TOKEN_STRIDE * 2, w.Tm + x.index * CHUNK * CHUNK, CHUNK * 2, CHUNK, CHUNK * 2, false);
    }
    __device__ __forceinline__ void arrange(const walk_tiles &, const chunk_at &, int, int) const {}
};

/* The walk of one (sequence, head) a block. o: NULL where the caller has it. Inputs: where Vnew,
 * S0 and Tm come from (walk_arrays, or any type with its stage, and its arrange, run by every
 * thread after the barrier that completes the staged tiles, before they are read). Until
 * arrange returns, an Inputs may use dVnew16, P16 and Z16 and the shared memory past the
 * tiles as scratch: the step writes those places only after its first products. */
template <class Inputs>
__global__ static void __launch_bounds__(GRADIENT_THREADS, 1) fused_walk_kernel(gdn_device_problem p, gdn_device_cotangents cot,
                                                                            backward_workspace w, float *o, gdn_device_gradients g,
                                                                            Inputs inputs)
{
    constexpr int WIDE = part_tiles<GRADIENT_WARPS>(MAX_WIDTH), SQUARE = part_tiles<GRADIENT_WARPS>(CHUNK); /* a warp's n-tiles */
    static_assert(SQUARE == 2, "keep_column_sums takes two n-tiles");
    extern __shared__ uint4 shared[];
    const size_t head = blockIdx.x;
    const int K = (int)p.K, V = (int)p.V, KP = round_up16(p.K), VP = round_up16(p.V);
    constexpr int LDK = WALK_LD, LDV = WALK_LD;
    const walk_tiles s = walk_tiles_at((unsigned char *)shared);
    const size_t key_stride = p.H * p.K, value_stride = p.H * p.V;
    const warp_part keys_part = part_of<GRADIENT_WARPS>(KP), values_part = part_of<GRADIENT_WARPS>(VP);
    const warp_part square = part_of<GRADIENT_WARPS>(CHUNK);
    const state_part d = state_part_of(KP, VP);

    /* dS = dL/dht (or 0), and its bf16 copy dS_C: the B operand of K dS_C and (transposed) of
     * Vnew dS_C^T, and <S0, dS_C>'s */
    float dS[STATE_TILES][4] = {};
    if (d.rows)
        for_each_sum(dS, d.part, [&](int m, int c, float &value) {
            value = cot.dht && m < K && c < V ? cot.dht[head * K * V + (size_t)m * V + c] : 0.0f;
            s.dS16[m * LDV + c] = __float2bfloat16_rn(value);
        });

    for (size_t chunk = w.chunks; chunk-- > 0;) {
        const chunk_at x = chunk_of_head(p, w, head, chunk);
        const int n = x.n, last = n - 1;
        const size_t first = token_of(p, x, 0);
        __syncthreads(); /* the previous step's tiles read, dS_C in dS16 */

        /* every tile on its way at once; the gates while they come */
        stage_tile(s.queries, LDK, CHUNK, KP, (const bf16 *)p.q_bf16 + first * K, key_stride, n, K, (const float *)nullptr, false);
        stage_tile(s.keys, LDK, CHUNK, KP, (const bf16 *)p.k_bf16 + first * K, key_stride, n, K, (const float *)nullptr, false);
        stage_tile(s.values, LDV, CHUNK, VP, (const bf16 *)p.v_bf16 + first * V, value_stride, n, V, (const float *)nullptr, false);
        inputs.stage(s, w, x, KP, VP);
        if (cot.d_o_bf16)
            stage_tile(s.dO16, LDV, CHUNK, VP, (const bf16 *)cot.d_o_bf16 + first * V, value_stride, n, V, (const float *)nullptr,
                       false);
        else
            stage_tile(s.dO16, LDV, CHUNK, VP, cot.d_o + first * V, value_stride, n, V, (const float *)nullptr);
        for (int i = threadIdx.x; i < CHUNK; i += GRADIENT_THREADS) {
            const double gamma = i < n ? w.gamma[x.row + i] : 0.0;
            s.gamma[i] = gamma;
            s.beta[i] = i < n ? p.beta[token_of(p, x, i)] : 0.0f;
            s.grown[i] = i < n ? expf((float)gamma) : 0.0f;
            s.read[i] = i < n ? p.scale * expf((float)gamma) : 0.0f;
            s.to_end[i] = i < n ? expf((float)(w.gamma[x.row + last] - gamma)) : 0.0f;
        }
        if (chunk + 1 < w.chunks) /* the later chunk's dg by thread 0, one row after another, while the tiles come */
            chunk_dg(p, chunk_of_head(p, w, head, chunk + 1), g, s.dgamma);
        __pipeline_wait_prior(0);
        __syncthreads();
        inputs.arrange(s, x, KP, VP);

        {   /* P, dP, Z and E (chunk_probabilities); P to its own place at once */
            float P[SQUARE][4] = {};
            const float e_column_kept = chunk_probabilities(P, square, s.queries, s.keys, LDK, s.dO16, s.Vnew16, LDV, s.gamma, n,
                                                            p.scale, KP, VP, s.Z16, s.row_terms);
            store_column_sum(e_column_kept, square, s.e_columns);
            store_bf16_pairs(P, square, s.P16, TOKEN_STRIDE, CHUNK, CHUNK);
        }
        __syncthreads();

        chunk_dq(p, x, g, keys_part, s.queries, s.keys, LDK, s.dO16, s.S0, LDV, s.Z16, s.read, s.row_terms);
        if (o)
            chunk_o(p, x, o, values_part, s.queries, LDK, s.S0, s.P16, s.Vnew16, LDV, s.read);
        chunk_state_dot(s.S0, LDV, s.dS16, LDV, KP, VP, s.state_dot);
        {   /* dVnew = e^(gamma_C - gamma_i) (K dS_C)_i + P^T dO (eq. 19a), zero past the chunk and
             * past V: the operand of dX and dW */
            float acc[WIDE][4] = {};
            warp_product(acc, rows_of(s.keys, LDK), rows_of(s.dS16, LDV), values_part.row0, values_part.col0, KP, values_part.tiles);
            for_each_sum(acc, values_part, [&](int i, int c, float &value) { value *= s.to_end[i]; });
            warp_product(acc, transpose_of(s.P16, TOKEN_STRIDE), rows_of(s.dO16, LDV), values_part.row0, values_part.col0, CHUNK,
                         values_part.tiles);
            for_each_sum(acc, values_part, [&](int i, int c, float &value) {
                s.dVnew16[i * LDV + c] = __float2bfloat16_rn(i < n && c < V ? value : 0.0f);
            });
        }
        /* dk's first part to dk, read back by the same lanes in chunk_solve_gradients (kept in
         * registers beside dS's 32 accumulators, it spills) */
        chunk_dk_first(p, x, g, keys_part, s.queries, s.keys, LDK, s.Vnew16, s.dS16, LDV, s.Z16, s.to_end, s.k_dot);
        __syncthreads(); /* dVnew complete; Vnew, P and dO read */

        {   /* dX = Tm^T dVnew, dv = beta dX (eq. 19c); dX_i . v_i for dbeta; -e^gamma dv, the chain's
             * operand, into Vnew's place; dO scaled by scale e^gamma in place for Q^T */
            chunk_dv(p, x, g, values_part, s.Tm16, s.dVnew16, s.values, LDV, s.beta, s.grown, s.v_dot, s.minus_Ddv16);
            keys_before_last(n, s.to_end, s.k_dot, s.key_sums); /* k_dot complete at the barrier above */
            for_each_piece(CHUNK, VP / 8, [&](int i, int u) { /* 16 bytes a place, no division where VP / 8 is a power of two */
                bf16_pairs16 piece;
                uint4 *at = (uint4 *)(s.dO16 + i * LDV + 8 * u);
                piece.bytes = *at;
#pragma unroll
                for (int h = 0; h < 4; h++) {
                    const float2 value = __bfloat1622float2(piece.pair[h]);
                    piece.pair[h] = __floats2bfloat162_rn(s.read[i] * value.x, s.read[i] * value.y);
                }
                *at = piece.bytes;
            });
        }
        __syncthreads();

        /* dS0 = e^gamma_C dS_C + Q^T (scale e^gamma dO) + K^T (-e^gamma dv) (eq. 19b), in the
         * registers; dW = -dVnew S0^T, waiting in registers for the queries' place */
        if (d.rows) {
            const float decay = expf((float)s.gamma[last]);
            for_each_sum(dS, d.part, [&](int m, int c, float &value) { value *= decay; });
            warp_product(dS, transpose_of(s.queries, LDK), rows_of(s.dO16, LDV), d.part.row0, d.part.col0, CHUNK, d.part.tiles);
            warp_product(dS, transpose_of(s.keys, LDK), rows_of(s.minus_Ddv16, LDV), d.part.row0, d.part.col0, CHUNK,
                         d.part.tiles);
        }
        {
            float acc[WIDE][4] = {};
            warp_product(acc, rows_of(s.dVnew16, LDV), transpose_of(s.S0, LDV), keys_part.row0, keys_part.col0, VP,
                         keys_part.tiles);
            __syncthreads(); /* the queries, scale e^gamma dO and -e^gamma dv read; dS_C read long since */
            for_each_sum(acc, keys_part, [&](int i, int c, float &value) { s.dW16[i * LDK + c] = __float2bfloat16_rn(-value); });
            if (d.rows)
                for_each_sum(dS, d.part, [&](int m, int c, float &value) { s.dS16[m * LDV + c] = __float2bfloat16_rn(value); });
        }
        __syncthreads();

        chunk_solve_gradients(p, x, g, s.Tm16, s.dVnew16, s.values, LDV, s.dW16, s.keys, LDK, s.dTm16, s.F, s.F16, s.gamma,
                              s.beta, s.grown, s.y_dot, s.b_sum, s.h_rows, s.h_columns);
        __syncthreads(); /* the row sums complete */
        if (threadIdx.x < n) { /* dgamma_i and dbeta_i, a thread a row: the reads' terms, then the WY form's */
            const int i = threadIdx.x;
            const double reads = read_dgamma(i, n, s.gamma, s.to_end, s.row_terms, s.e_columns, s.k_dot, s.state_dot, s.key_sums);
            s.dgamma[i] = wy_dgamma_dbeta(p, x, g, i, reads, s.beta, s.grown, s.v_dot, s.y_dot, s.b_sum, s.h_rows, s.h_columns);
        }
    }
    __syncthreads();
    if (w.chunks > 0) /* the first chunk's dg: no chunk is left to hide it behind */
        chunk_dg(p, chunk_of_head(p, w, head, 0), g, s.dgamma);
    if (g.dh0 && d.rows)
        for_each_sum(dS, d.part, [&](int m, int c, float &value) {
            if (m < K && c < V)
                g.dh0[head * K * V + (size_t)m * V + c] = value;
        });
}
