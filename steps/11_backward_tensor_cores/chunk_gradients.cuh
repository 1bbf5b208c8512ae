/* chunk_gradients.cuh -- pass 4 of the tensor-core backward: o and every gradient, per chunk,
 * once the chains have left S0, Vnew, dVnew and dS_C. Two kernels, each one block of 16 warps a
 * (head, chunk), every chunk at once; the pass is cut in two so that each block's tiles fit in
 * shared memory, and each kernel's tiles share places by when they are live (113 KB and 99 KB
 * at K = V = 128): two blocks an SM, so that one block's copies wait beside the other's
 * products. 16 warps a block (part_of<16>: each warp a quarter of a product's columns, where
 * pass 1's 8 take a half) give an SM's schedulers more warps to choose from while some wait on
 * their tiles or their mma.
 *
 *   read_gradients_kernel, the reads (eq. 14 and 15):
 *       P = scale lower(Q K^T o decay),  dP = dO Vnew^T,  Z = scale lower(dP o decay)
 *       o  = diag(scale e^gamma) Q S0 + P Vnew
 *       dq = diag(scale e^gamma) dO S0^T + Z K
 *       dk = diag(e^(gamma_C - gamma)) Vnew dS_C^T + Z^T Q           (its first part)
 *   wy_gradients_kernel, through the WY form and the solve (eq. 19c, 19d):
 *       dW = -dVnew S0^T,  dX = Tm^T dVnew (dv = diag(beta) dX),  dY = Tm^T dW
 *       dTm = lower(dVnew V^T diag(beta) + dW K^T diag(beta e^gamma))
 *       dM = -(Tm^T dTm) Tm^T, below the diagonal;  F = dM o diag(beta) decay
 *       dk += diag(beta e^gamma) dY + (F + F^T) K
 * Every product above is a warp_product. What stays on CUDA cores is not a product: the
 * elementwise factors in the products' epilogues, and dgamma and dbeta, which are a row's dot
 * products (q_i . (S0 dO_i), k_i . dY_i, ...: each lane's terms, added over its quad by
 * shuffles, store_row_sums) and row sums less column sums of the C x C matrices whose entries
 * carry a decay e^(gamma_a - gamma_b) (E = dP o P for P, H = F o (K K^T) for M), each warp's
 * rows and each lane's columns added in registers, then the warps' shares in shared memory; dg
 * is dgamma summed from the chunk's end back (gamma is g's running sum).
 *
 * Included by backward_tensor_cores.cu and backward_mma_sync.cu after warp_tiles.cuh; stage 12's
 * walk calls its pieces.
 */
#pragma once

constexpr int SQUARE_STRIDE = CHUNK + 1; /* fp32 rows of F: a row and a column both read without conflicts */
/* a block's warps, and the shares of a product's columns (part_of) whose row sums dbeta and dgamma add */
constexpr int GRADIENT_WARPS = 16, GRADIENT_THREADS = 32 * GRADIENT_WARPS, GRADIENT_SHARES = GRADIENT_WARPS / 4;

/* ---- the reads: o, dq, dk's first part, dgamma's first part ---- */

/* The reads' tiles take their places by when they are live, so that two blocks share an SM at
 * K = V = 128 (113 KB each): P waits in registers while dO is still read, then takes dO's
 * place, with the row and column sums behind dgamma after it (`sums`); dS_C takes S0's place
 * once o is made. */
struct read_tiles {
    double *gamma;
    float *read, *to_end;
    bf16 *queries, *keys, *dO16, *Vnew16, *S0, *dS_end, *Z16;
    bf16 *P16;                                       /* in dO16's place */
    float *row_terms;                  /* [4][64] partial sums: E's rows and q_i . (S0 dO_i) e^gamma_i scale */
    float *e_columns, *k_dot, *state_dot; /* after P16: [4][64] partial sums each, a warp's dot */
    double *key_sums;                     /* [2]: keys_before_last's */
    size_t bytes;
};
__host__ __device__ constexpr static read_tiles read_tiles_at(unsigned char *base, size_t K, size_t V)
{
    const int LDK = stride_of(K), LDV = stride_of(V), KP = round_up16(K);
    constexpr size_t SUMS = 2 * GRADIENT_SHARES * CHUNK * sizeof(float) + GRADIENT_WARPS * sizeof(float) + 2 * sizeof(double);
    const size_t P_and_sums = CHUNK * TOKEN_STRIDE * sizeof(bf16) + SUMS, dO_bytes = CHUNK * LDV * sizeof(bf16);
    shared_cut cut = {base, 0};
    read_tiles t = {};
    t.gamma = cut.take<double>(CHUNK);
    t.read = cut.take<float>(CHUNK), t.to_end = cut.take<float>(CHUNK);
    t.row_terms = cut.take<float>(GRADIENT_SHARES * CHUNK);
    t.queries = cut.take<bf16>(CHUNK * LDK), t.keys = cut.take<bf16>(CHUNK * LDK);
    t.Vnew16 = cut.take<bf16>(CHUNK * LDV), t.Z16 = cut.take<bf16>(CHUNK * TOKEN_STRIDE);
    t.S0 = cut.take<bf16>(KP * LDV), t.dS_end = t.S0;
    unsigned char *dO_place = cut.take<unsigned char>(dO_bytes > P_and_sums ? dO_bytes : P_and_sums);
    if (base) {
        shared_cut after = {dO_place, 0};
        t.dO16 = (bf16 *)dO_place;
        t.P16 = after.take<bf16>(CHUNK * TOKEN_STRIDE);
        t.e_columns = after.take<float>(GRADIENT_SHARES * CHUNK);
        t.k_dot = after.take<float>(GRADIENT_SHARES * CHUNK);
        t.state_dot = after.take<float>(GRADIENT_WARPS);
        t.key_sums = after.take<double>(2);
    }
    t.bytes = cut.used;
    return t;
}

/* two blocks an SM at the widest tiles: 228 KB of shared memory an SM, 1 KB of it kept for each block */
static_assert(2 * (read_tiles_at(nullptr, MAX_WIDTH, MAX_WIDTH).bytes + 1024) <= 228 * 1024, "the reads' tiles fit two blocks an SM");

/* Column sums of a warp's part of a 64 x 64 product, two n-tiles: sum[j][h] holds this lane's
 * terms of column fragment_column(col0, j, h) over its two rows. The eight lanes of a column add
 * theirs (three shuffles); then lane 4 k + q keeps the total of lane q's column k (j = k / 2,
 * h = k % 2), k < 4: the warp's sixteen column totals in one register a lane until
 * store_column_sum puts them in partial[CHUNK (row0 / 16) + column], a row of partial sums for
 * each strip of rows, added in their order by row_sum */
__device__ __forceinline__ static float keep_column_sums(float (&sum)[2][2])
{
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int offset = 4; offset < 32; offset *= 2)
                sum[j][h] += __shfl_xor_sync(0xffffffffu, sum[j][h], offset);
    const int k = (threadIdx.x % 32) / 4 % 4;
    return k == 0 ? sum[0][0] : k == 1 ? sum[0][1] : k == 2 ? sum[1][0] : sum[1][1];
}
__device__ __forceinline__ static void store_column_sum(float kept, const warp_part &w, float *partial)
{
    const int k = (threadIdx.x % 32) / 4;
    if (k < 4)
        partial[CHUNK * (w.row0 / 16) + fragment_column(w.col0, k / 2, k % 2)] = kept;
}

/* store_row_sums' sums times factor[row] added onto partial, where this warp's store_row_sums
 * of a part with the same rows and share put its own: the same lanes, so no barrier between */
__device__ __forceinline__ static void add_row_sums(float (&sum)[2], const warp_part &w, const float *factor, float *partial)
{
    const int lane = threadIdx.x % 32;
    add_over_quads(sum);
    if (lane % 4 == 0) {
        const int row = w.row0 + lane / 4;
        float *out = partial + CHUNK * (threadIdx.x / 32 / 4) + row;
        out[0] += factor[row] * sum[0];
        out[8] += factor[row + 8] * sum[1];
    }
}

/* ---- a chunk's gradients, piece by piece: each a block of GRADIENT_WARPS warps on tiles in
 * shared memory (row strides LDK for K-wide tiles, LDV for V-wide), called by pass 4's two
 * kernels and by stage 12's walk, which holds the same tiles in other places ---- */

/* P = scale lower(Q K^T o decay), this warp's part in registers; dP = dO Vnew^T; Z = scale decay
 * dP to Z16; E = dP P (j < i: the diagonal's term would be added and taken back) summed by rows
 * to row_terms, and by columns in a register a lane, returned for store_column_sum */
__device__ __forceinline__ static float chunk_probabilities(float (&P)[2][4], const warp_part &square, const bf16 *queries,
                                                            const bf16 *keys, int LDK, const bf16 *dO16, const bf16 *Vnew16,
                                                            int LDV, const double *gamma, int n, float scale, int KP, int VP,
                                                            bf16 *Z16, float *row_terms)
{
    float dP[2][4] = {}, e_row[2] = {0.0f, 0.0f}, e_column[2][2] = {};
    warp_product(P, rows_of(queries, LDK), transpose_of(keys, LDK), square.row0, square.col0, KP, square.tiles);
    warp_product(dP, rows_of(dO16, LDV), transpose_of(Vnew16, LDV), square.row0, square.col0, VP, square.tiles);
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = fragment_row(square.row0, r), l = fragment_column(square.col0, j, r);
            const float decay = l <= i && i < n ? expf((float)(gamma[i] - gamma[l])) : 0.0f;
            P[j][r] *= scale * decay;
            Z16[i * TOKEN_STRIDE + l] = __float2bfloat16_rn(scale * decay * dP[j][r]);
            const float E = l < i ? dP[j][r] * P[j][r] : 0.0f;
            e_row[r >= 2] += E;
            e_column[j][r & 1] += E;
        }
    store_row_sums(e_row, square, row_terms);
    return keep_column_sums(e_column);
}

/* dq = scale e^gamma_i (S0 dO_i) + Z K (eq. 14), to dq; q_i . (S0 dO_i) scale e^gamma_i for
 * dgamma, onto E's row sums: a warp's rows and share are those of its part of E, and the lane
 * that stored a row's sum adds to it. read: scale e^gamma. */
__device__ __forceinline__ static void chunk_dq(const gdn_device_problem &p, const chunk_at &x, const gdn_device_gradients &g,
                                                const warp_part &keys_part, const bf16 *queries, const bf16 *keys, int LDK,
                                                const bf16 *dO16, const bf16 *S0, int LDV, const bf16 *Z16, const float *read,
                                                float *row_terms)
{
    constexpr int WIDE = part_tiles<GRADIENT_WARPS>(MAX_WIDTH);
    const int n = x.n, K = (int)p.K, VP = round_up16(p.V);
    float acc[WIDE][4] = {}, q_sum[2] = {0.0f, 0.0f};
    warp_product(acc, rows_of(dO16, LDV), transpose_of(S0, LDV), keys_part.row0, keys_part.col0, VP, keys_part.tiles);
    add_row_terms(acc, keys_part, q_sum, [&](int i, int c, float value) { return value * __bfloat162float(queries[i * LDK + c]); });
    add_row_sums(q_sum, keys_part, read, row_terms);
    for_each_sum(acc, keys_part, [&](int i, int c, float &value) { value *= read[i]; });
    warp_product(acc, rows_of(Z16, TOKEN_STRIDE), rows_of(keys, LDK), keys_part.row0, keys_part.col0, CHUNK, keys_part.tiles);
    for_each_sum(acc, keys_part, [&](int i, int c, float &value) {
        if (i < n && c < K)
            store_gradient(g.dq, g.dq_bf16, token_of(p, x, i) * K + c, value);
    });
}

/* o = scale e^gamma_i (Q S0)_i + P Vnew (eq. 14) */
__device__ __forceinline__ static void chunk_o(const gdn_device_problem &p, const chunk_at &x, float *o, const warp_part &values_part,
                                               const bf16 *queries, int LDK, const bf16 *S0, const bf16 *P16, const bf16 *Vnew16,
                                               int LDV, const float *read)
{
    constexpr int WIDE = part_tiles<GRADIENT_WARPS>(MAX_WIDTH);
    const int n = x.n, V = (int)p.V, KP = round_up16(p.K);
    float acc[WIDE][4] = {};
    warp_product(acc, rows_of(queries, LDK), rows_of(S0, LDV), values_part.row0, values_part.col0, KP, values_part.tiles);
    for_each_sum(acc, values_part, [&](int i, int c, float &value) { value *= read[i]; });
    warp_product(acc, rows_of(P16, TOKEN_STRIDE), rows_of(Vnew16, LDV), values_part.row0, values_part.col0, CHUNK,
                 values_part.tiles);
    for_each_sum(acc, values_part, [&](int i, int c, float &value) {
        if (i < n && c < V)
            o[token_of(p, x, i) * V + c] = value;
    });
}

/* <S0, dS_C>, the last token's gate term: this thread's 16-byte pieces of both tiles (eight
 * products each, for_each_piece's places: a shift and a mask where VP / 8 is a power of two; the
 * padding adds zeros), dS_C's rows dS_ld apart, then the warp's 32 sums by shuffles, a fixed
 * tree: the same bits every run; the warp's sum to state_dot[warp]. An element a thread, its row
 * found by a division by VP, costs a walk step as much as one of its products (docs/12). */
__device__ __forceinline__ static void chunk_state_dot(const bf16 *S0, int LDV, const bf16 *dS_end, int dS_ld, int KP, int VP,
                                                       float *state_dot)
{
    float sum = 0.0f;
    for_each_piece(KP, VP / 8, [&](int i, int u) {
        bf16_pairs16 s, d;
        s.bytes = *(const uint4 *)(S0 + i * LDV + 8 * u);
        d.bytes = *(const uint4 *)(dS_end + i * dS_ld + 8 * u);
#pragma unroll
        for (int h = 0; h < 4; h++) {
            const float2 a = __bfloat1622float2(s.pair[h]), b = __bfloat1622float2(d.pair[h]);
            sum += a.x * b.x + a.y * b.y;
        }
    });
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % 32 == 0)
        state_dot[threadIdx.x / 32] = sum;
}

/* dk's first part = e^(gamma_C - gamma_i) (dS_C Vnew_i) + Z^T Q, to dk (the WY part adds the
 * rest); k_i . (dS_C Vnew_i) for dgamma, to k_dot */
__device__ __forceinline__ static void chunk_dk_first(const gdn_device_problem &p, const chunk_at &x, const gdn_device_gradients &g,
                                                      const warp_part &keys_part, const bf16 *queries, const bf16 *keys, int LDK,
                                                      const bf16 *Vnew16, const bf16 *dS_end, int LDV, const bf16 *Z16,
                                                      const float *to_end, float *k_dot)
{
    constexpr int WIDE = part_tiles<GRADIENT_WARPS>(MAX_WIDTH);
    const int n = x.n, K = (int)p.K, VP = round_up16(p.V);
    float acc[WIDE][4] = {}, sum[2] = {0.0f, 0.0f};
    warp_product(acc, rows_of(Vnew16, LDV), transpose_of(dS_end, LDV), keys_part.row0, keys_part.col0, VP, keys_part.tiles);
    add_row_terms(acc, keys_part, sum, [&](int i, int c, float value) { return value * __bfloat162float(keys[i * LDK + c]); });
    store_row_sums(sum, keys_part, k_dot);
    for_each_sum(acc, keys_part, [&](int i, int c, float &value) { value *= to_end[i]; });
    warp_product(acc, transpose_of(Z16, TOKEN_STRIDE), rows_of(queries, LDK), keys_part.row0, keys_part.col0, CHUNK, keys_part.tiles);
    for_each_sum(acc, keys_part, [&](int i, int c, float &value) {
        if (i < n && c < K)
            g.dk[token_of(p, x, i) * K + c] = value;
    });
}

/* The last token's share of Kdec's terms, sum over j < last of e^(gamma_C - gamma_j) k_j .
 * (dS_C Vnew_j): warps 0 and 1, a row a lane, each warp's sum by shuffles (a fixed tree: the same
 * bits every run) to key_sums[warp], complete after the caller's barrier: the last row's thread
 * adding 63 rows one after another would keep the whole block at the barrier behind it. */
__device__ __forceinline__ static void keys_before_last(int n, const float *to_end, const float *k_dot, double *key_sums)
{
    static_assert(CHUNK == 64, "two warps, a row a lane");
    if (threadIdx.x >= CHUNK)
        return;
    const int j = threadIdx.x;
    double sum = j < n - 1 ? (double)(to_end[j] * row_sum<GRADIENT_WARPS>(k_dot, j)) : 0.0;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (j % 32 == 0)
        key_sums[j / 32] = sum;
}

/* dgamma_i's terms from the reads, for the thread of row i: q_i's and P's (row sum less column
 * sum of E) and Kdec's, whose gate gamma_C - gamma_i gives to the last token (keys_before_last's
 * sums) and takes from token i, and the last token's e^gamma_C <S0, dS_C> (the warps' sums in
 * their order) */
__device__ __forceinline__ static double read_dgamma(int i, int n, const double *gamma, const float *to_end, const float *row_terms,
                                                     const float *e_columns, const float *k_dot, const float *state_dot,
                                                     const double *key_sums)
{
    const int last = n - 1;
    double dgamma = (double)row_sum<GRADIENT_WARPS>(row_terms, i) - (double)row_sum<GRADIENT_WARPS>(e_columns, i);
    if (i < last)
        dgamma -= to_end[i] * row_sum<GRADIENT_WARPS>(k_dot, i);
    else {
        dgamma += key_sums[0] + key_sums[1];
        float total = 0.0f;
        for (int warp = 0; warp < GRADIENT_WARPS; warp++)
            total += state_dot[warp];
        dgamma += (double)expf((float)gamma[last]) * total;
    }
    return dgamma;
}

__global__ static void __launch_bounds__(GRADIENT_THREADS, 2) read_gradients_kernel(gdn_device_problem p, gdn_device_cotangents cot,
                                                                                     backward_workspace w, float *o, gdn_device_gradients g)
{
    constexpr int SQUARE = part_tiles<GRADIENT_WARPS>(CHUNK); /* a warp's n-tiles */
    extern __shared__ uint4 shared[];
    const chunk_at x = chunk_of(p, w, blockIdx.x);
    const int n = x.n, last = n - 1, K = (int)p.K, V = (int)p.V, KP = round_up16(p.K), VP = round_up16(p.V);
    const int LDK = stride_of(p.K), LDV = stride_of(p.V);
    const read_tiles s = read_tiles_at((unsigned char *)shared, p.K, p.V);
    const size_t key_stride = p.H * p.K, value_stride = p.H * p.V, first = token_of(p, x, 0);
    const bf16 *dS_end = w.dS_end + x.index * KP * VP;

    /* the bf16 tiles' copies on their way (Vnew and S0 as the chains left them, padded) while
     * dO is loaded and rounded; S0, asked for last, a copy group of its own, may still land
     * while P and dP are made (dO given in bf16 is one more copy group, asked for before S0) */
    stage_tile(s.queries, LDK, CHUNK, KP, (const bf16 *)p.q_bf16 + first * K, key_stride, n, K, (const float *)nullptr, false);
    stage_tile(s.keys, LDK, CHUNK, KP, (const bf16 *)p.k_bf16 + first * K, key_stride, n, K, (const float *)nullptr, false);
    stage_tile(s.Vnew16, LDV, CHUNK, VP, w.Vnew + x.row * VP, (size_t)VP, n, VP, (const float *)nullptr, false);
    if (cot.d_o_bf16)
        stage_tile(s.dO16, LDV, CHUNK, VP, (const bf16 *)cot.d_o_bf16 + first * V, value_stride, n, V, (const float *)nullptr,
                   false);
    copy_rows16(s.S0, LDV * 2, w.S0 + x.index * KP * VP, VP * 2, KP, VP * 2, false);
    if (!cot.d_o_bf16)
        stage_tile(s.dO16, LDV, CHUNK, VP, cot.d_o + first * V, value_stride, n, V, (const float *)nullptr);
    for (int i = threadIdx.x; i < CHUNK; i += GRADIENT_THREADS) {
        s.gamma[i] = i < n ? w.gamma[x.row + i] : 0.0;
        s.read[i] = i < n ? p.scale * expf((float)w.gamma[x.row + i]) : 0.0f;
        s.to_end[i] = i < n ? expf((float)(w.gamma[x.row + last] - w.gamma[x.row + i])) : 0.0f;
    }
    wait_all_but(1); /* every group but S0's: the queries, the keys, Vnew (and dO in bf16) */
    __syncthreads();

    /* P, dP, Z and E's sums (chunk_probabilities); P kept in registers until dO is read */
    const warp_part square = part_of<GRADIENT_WARPS>(CHUNK);
    static_assert(SQUARE == 2, "keep_column_sums takes two n-tiles");
    float P[SQUARE][4] = {};
    const float e_column_kept = chunk_probabilities(P, square, s.queries, s.keys, LDK, s.dO16, s.Vnew16, LDV, s.gamma, n, p.scale,
                                                    KP, VP, s.Z16, s.row_terms);
    __pipeline_wait_prior(0); /* S0 */
    __syncthreads();

    const warp_part keys_part = part_of<GRADIENT_WARPS>(KP), values_part = part_of<GRADIENT_WARPS>(VP);
    chunk_dq(p, x, g, keys_part, s.queries, s.keys, LDK, s.dO16, s.S0, LDV, s.Z16, s.read, s.row_terms);
    __syncthreads(); /* dO read: P and the sums take its place */
    store_bf16_pairs(P, square, s.P16, TOKEN_STRIDE, CHUNK, CHUNK);
    store_column_sum(e_column_kept, square, s.e_columns);
    __syncthreads();

    if (o) /* a caller that has o already passes NULL */
        chunk_o(p, x, o, values_part, s.queries, LDK, s.S0, s.P16, s.Vnew16, LDV, s.read);
    chunk_state_dot(s.S0, LDV, dS_end, VP, KP, VP, s.state_dot); /* dS_C as the chain left it */
    __syncthreads(); /* S0 read: dS_C takes its place */
    copy_rows16(s.dS_end, LDV * 2, dS_end, VP * 2, KP, VP * 2);
    __syncthreads();
    chunk_dk_first(p, x, g, keys_part, s.queries, s.keys, LDK, s.Vnew16, s.dS_end, LDV, s.Z16, s.to_end, s.k_dot);
    __syncthreads(); /* the row sums complete */
    keys_before_last(n, s.to_end, s.k_dot, s.key_sums);
    __syncthreads();
    if (threadIdx.x < n) /* dgamma's terms from the reads, a thread a row */
        w.dgamma[x.row + threadIdx.x] =
            read_dgamma(threadIdx.x, n, s.gamma, s.to_end, s.row_terms, s.e_columns, s.k_dot, s.state_dot, s.key_sums);
}

/* ---- through the WY form and the solve: dv, dk's rest, dbeta, dgamma's rest, dg ---- */

/* The WY kernel's tiles share places by when they are live, as the reads' do (99 KB at
 * K = V = 128, two blocks an SM): dW, then dTm (R in its place) and H's row and column sums take
 * S0's place once dW is made; F and F + F^T take v's and dVnew's once dTm is made. */
struct wy_tiles {
    double *gamma, *dgamma;
    float *beta, *grown, *v_dot, *y_dot, *b_sum; /* v_dot, y_dot, b_sum: [shares][64] row sums */
    bf16 *keys, *Tm16;
    bf16 *S0, *dW16, *dTm16, *TmT_dTm16;         /* S0's place */
    float *h_rows, *h_columns;                   /* after dTm: [4][64] partial sums of H's rows and columns */
    bf16 *values, *dVnew16;                      /* their place */
    float *F;
    bf16 *F16;
    size_t bytes;
};
__host__ __device__ constexpr static wy_tiles wy_tiles_at(unsigned char *base, size_t K, size_t V)
{
    const int LDK = stride_of(K), LDV = stride_of(V), KP = round_up16(K);
    const size_t S0_bytes = KP * LDV * sizeof(bf16), values_bytes = 2 * CHUNK * LDV * sizeof(bf16);
    const size_t after_S0 = CHUNK * LDK * sizeof(bf16) + CHUNK * TOKEN_STRIDE * sizeof(bf16) + 2 * GRADIENT_SHARES * CHUNK * sizeof(float);
    const size_t after_values = CHUNK * SQUARE_STRIDE * sizeof(float) + CHUNK * TOKEN_STRIDE * sizeof(bf16);
    shared_cut cut = {base, 0};
    wy_tiles t = {};
    t.gamma = cut.take<double>(CHUNK), t.dgamma = cut.take<double>(CHUNK);
    t.beta = cut.take<float>(CHUNK), t.grown = cut.take<float>(CHUNK);
    t.v_dot = cut.take<float>(GRADIENT_SHARES * CHUNK), t.y_dot = cut.take<float>(GRADIENT_SHARES * CHUNK);
    t.b_sum = cut.take<float>(GRADIENT_SHARES * CHUNK);
    t.keys = cut.take<bf16>(CHUNK * LDK), t.Tm16 = cut.take<bf16>(CHUNK * TOKEN_STRIDE);
    shared_cut S0_place = {cut.take<unsigned char>(S0_bytes > after_S0 ? S0_bytes : after_S0), 0};
    shared_cut values_place = {cut.take<unsigned char>(values_bytes > after_values ? values_bytes : after_values), 0};
    if (base) {
        t.S0 = (bf16 *)S0_place.base;
        t.dW16 = S0_place.take<bf16>(CHUNK * LDK), t.dTm16 = S0_place.take<bf16>(CHUNK * TOKEN_STRIDE), t.TmT_dTm16 = t.dTm16;
        t.h_rows = S0_place.take<float>(GRADIENT_SHARES * CHUNK), t.h_columns = S0_place.take<float>(GRADIENT_SHARES * CHUNK);
        t.values = values_place.take<bf16>(CHUNK * LDV), t.dVnew16 = values_place.take<bf16>(CHUNK * LDV);
        values_place.used = 0;
        t.F = values_place.take<float>(CHUNK * SQUARE_STRIDE), t.F16 = values_place.take<bf16>(CHUNK * TOKEN_STRIDE);
    }
    t.bytes = cut.used;
    return t;
}
static_assert(2 * (wy_tiles_at(nullptr, MAX_WIDTH, MAX_WIDTH).bytes + 1024) <= 228 * 1024, "the WY kernel's tiles fit two blocks an SM");

/* dX = Tm^T dVnew, dv = beta dX (eq. 19c), to dv; dX_i . v_i for dbeta, to v_dot; and where
 * minus_Ddv16 is given, -e^gamma dv in bf16 there (zero past the chunk), stage 12's operand of
 * dS0's last term */
__device__ __forceinline__ static void chunk_dv(const gdn_device_problem &p, const chunk_at &x, const gdn_device_gradients &g,
                                                const warp_part &values_part, const bf16 *Tm16, const bf16 *dVnew16,
                                                const bf16 *values, int LDV, const float *beta, const float *grown, float *v_dot,
                                                bf16 *minus_Ddv16)
{
    constexpr int WIDE = part_tiles<GRADIENT_WARPS>(MAX_WIDTH);
    const int n = x.n, V = (int)p.V;
    float acc[WIDE][4] = {}, sum[2] = {0.0f, 0.0f};
    warp_product(acc, transpose_of(Tm16, TOKEN_STRIDE), rows_of(dVnew16, LDV), values_part.row0, values_part.col0, CHUNK,
                 values_part.tiles);
    add_row_terms(acc, values_part, sum, [&](int i, int c, float value) { return value * __bfloat162float(values[i * LDV + c]); });
    store_row_sums(sum, values_part, v_dot);
    for_each_sum(acc, values_part, [&](int i, int c, float &value) {
        const float dv = beta[i] * value;
        if (i < n && c < V)
            store_gradient(g.dv, g.dv_bf16, token_of(p, x, i) * V + c, dv);
        if (minus_Ddv16)
            minus_Ddv16[i * LDV + c] = __float2bfloat16_rn(-grown[i] * dv);
    });
}

/* Through the WY form and the solve (eq. 19c, 19d), once dVnew and dW = -dVnew S0^T are in
 * their tiles (after the caller's barrier): dTm into dTm16, R = Tm^T dTm in its place, F into F
 * (fp32), F + F^T into F16, then dk = its first part (read back from dk, the same lanes' as
 * chunk_dk_first's) + beta e^gamma dY + (F + F^T) K; the row sums y_dot, b_sum, h_rows,
 * h_columns for dgamma and dbeta (complete after the caller's barrier) */
__device__ __forceinline__ static void chunk_solve_gradients(const gdn_device_problem &p, const chunk_at &x,
                                                             const gdn_device_gradients &g, const bf16 *Tm16,
                                                             const bf16 *dVnew16, const bf16 *values, int LDV, const bf16 *dW16,
                                                             const bf16 *keys, int LDK, bf16 *dTm16, float *F, bf16 *F16,
                                                             const double *gamma, const float *beta, const float *grown,
                                                             float *y_dot, float *b_sum, float *h_rows, float *h_columns)
{
    constexpr int WIDE = part_tiles<GRADIENT_WARPS>(MAX_WIDTH), SQUARE = part_tiles<GRADIENT_WARPS>(CHUNK); /* a warp's n-tiles */
    const int n = x.n, K = (int)p.K, KP = round_up16(p.K), VP = round_up16(p.V);
    const warp_part keys_part = part_of<GRADIENT_WARPS>(KP), square = part_of<GRADIENT_WARPS>(CHUNK);
    const tile Tm_t = transpose_of(Tm16, TOKEN_STRIDE); /* Tm^T as an A operand, or Tm^T as a B operand */
    bf16 *TmT_dTm16 = dTm16;
    {   /* dTm = dU X^T + dW Y^T, X = diag(beta) V, Y = diag(beta e^gamma) K (eq. 19c): only its
         * strictly lower part enters dM, Tm's diagonal and upper part being constants */
        float xv[SQUARE][4] = {}, yk[SQUARE][4] = {};
        warp_product(xv, rows_of(dVnew16, LDV), transpose_of(values, LDV), square.row0, square.col0, VP, square.tiles);
        warp_product(yk, rows_of(dW16, LDK), transpose_of(keys, LDK), square.row0, square.col0, KP, square.tiles);
#pragma unroll
        for (int j = 0; j < SQUARE; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int i = fragment_row(square.row0, r), l = fragment_column(square.col0, j, r);
                const float value = l < i ? beta[l] * (xv[j][r] + grown[l] * yk[j][r]) : 0.0f;
                dTm16[i * TOKEN_STRIDE + l] = __float2bfloat16_rn(value);
            }
    }
    __syncthreads();
    {   /* R = Tm^T dTm, the first half of dM = -Tm^T dTm Tm^T (eq. 19d), into dTm's place once every
         * warp has read dTm */
        float acc[SQUARE][4] = {};
        warp_product(acc, Tm_t, rows_of(dTm16, TOKEN_STRIDE), square.row0, square.col0, CHUNK, square.tiles);
        __syncthreads();
        for_each_sum(acc, square,
                     [&](int a, int b, float &value) { TmT_dTm16[a * TOKEN_STRIDE + b] = __float2bfloat16_rn(value); });
    }
    __syncthreads();
    {   /* dM = -R Tm^T below the diagonal (eq. 19d), and M_ab = beta_a decay_ab (k_a . k_b) passes it
         * on: F = dM beta decay to the keys (in v's and dVnew's place: dTm has read them), H = F o
         * K K^T to dgamma by its row and column sums, dM decay K K^T to dbeta */
        static_assert(SQUARE == 2, "keep_column_sums takes two n-tiles");
        float RT[SQUARE][4] = {}, kk[SQUARE][4] = {}, sum[2] = {0.0f, 0.0f}, h_row[2] = {0.0f, 0.0f}, h_column[SQUARE][2] = {};
        warp_product(RT, rows_of(TmT_dTm16, TOKEN_STRIDE), Tm_t, square.row0, square.col0, CHUNK, square.tiles);
        warp_product(kk, rows_of(keys, LDK), transpose_of(keys, LDK), square.row0, square.col0, KP, square.tiles);
#pragma unroll
        for (int j = 0; j < SQUARE; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int a = fragment_row(square.row0, r), b = fragment_column(square.col0, j, r);
                const float decay = b < a && a < n ? expf((float)(gamma[a] - gamma[b])) : 0.0f;
                const float dM = -RT[j][r], f = dM * beta[a] * decay;
                F[a * SQUARE_STRIDE + b] = f;
                h_row[r >= 2] += f * kk[j][r];
                h_column[j][r & 1] += f * kk[j][r];
                sum[r >= 2] += dM * decay * kk[j][r];
            }
        store_row_sums(sum, square, b_sum);
        store_row_sums(h_row, square, h_rows);
        store_column_sum(keep_column_sums(h_column), square, h_columns);
    }
    __syncthreads();
    /* F + F^T: dk_i's weights on every key; eight steps a thread, not unrolled (a peeled loop's
     * addresses, computed early, stay live in stage 12's walk) */
#pragma unroll 1
    for (int step = 0; step < CHUNK * CHUNK / GRADIENT_THREADS; step++) {
        const int e = threadIdx.x + GRADIENT_THREADS * step, a = e / CHUNK, b = e % CHUNK;
        F16[a * TOKEN_STRIDE + b] = __float2bfloat16_rn(F[a * SQUARE_STRIDE + b] + F[b * SQUARE_STRIDE + a]);
    }
    __syncthreads();
    {   /* dY = Tm^T dW; dk += beta e^gamma dY + (F + F^T) K, onto read_gradients_kernel's part,
         * which is asked for first, all of this lane's at once, and arrives during the products */
        float acc[WIDE][4] = {}, sum[2] = {0.0f, 0.0f}, dk_read[WIDE][4] = {};
        for_each_sum(dk_read, keys_part, [&](int i, int c, float &value) {
            if (i < n && c < K)
                value = g.dk[token_of(p, x, i) * K + c];
        });
        warp_product(acc, Tm_t, rows_of(dW16, LDK), keys_part.row0, keys_part.col0, CHUNK, keys_part.tiles);
        add_row_terms(acc, keys_part, sum,
                      [&](int i, int c, float value) { return value * __bfloat162float(keys[i * LDK + c]); });
        store_row_sums(sum, keys_part, y_dot);
        for_each_sum(acc, keys_part, [&](int i, int c, float &value) { value *= beta[i] * grown[i]; });
        warp_product(acc, rows_of(F16, TOKEN_STRIDE), rows_of(keys, LDK), keys_part.row0, keys_part.col0, CHUNK, keys_part.tiles);
        add_sums(acc, dk_read);
        for_each_sum(acc, keys_part, [&](int i, int c, float &value) {
            if (i < n && c < K)
                g.dk[token_of(p, x, i) * K + c] = value;
        });
    }
}

/* dgamma_i and dbeta_i for the thread of row i: reads, the reads' terms (read_dgamma), then the
 * WY form's and the solve's; dbeta to dbeta, dgamma returned */
__device__ __forceinline__ static double wy_dgamma_dbeta(const gdn_device_problem &p, const chunk_at &x, const gdn_device_gradients &g,
                                                         int i, double reads, const float *beta, const float *grown,
                                                         const float *v_dot, const float *y_dot, const float *b_sum,
                                                         const float *h_rows, const float *h_columns)
{
    const float y = row_sum<GRADIENT_WARPS>(y_dot, i);
    double dgamma = reads + beta[i] * grown[i] * y;
    dgamma += (double)row_sum<GRADIENT_WARPS>(h_rows, i) - (double)row_sum<GRADIENT_WARPS>(h_columns, i);
    g.dbeta[token_of(p, x, i)] = row_sum<GRADIENT_WARPS>(v_dot, i) + grown[i] * y + row_sum<GRADIENT_WARPS>(b_sum, i);
    return dgamma;
}

/* gamma_i = g_0 + ... + g_i: dg_t sums dgamma from the chunk's end back (thread 0) */
__device__ __forceinline__ static void chunk_dg(const gdn_device_problem &p, const chunk_at &x, const gdn_device_gradients &g,
                                                const double *dgamma)
{
    if (threadIdx.x == 0) {
        double from_later = 0.0;
        for (int i = x.n - 1; i >= 0; i--)
            g.dg[token_of(p, x, i)] = (float)(from_later += dgamma[i]);
    }
}

__global__ static void __launch_bounds__(GRADIENT_THREADS, 2) wy_gradients_kernel(gdn_device_problem p, backward_workspace w,
                                                                                   gdn_device_gradients g)
{
    constexpr int WIDE = part_tiles<GRADIENT_WARPS>(MAX_WIDTH); /* a warp's n-tiles */
    extern __shared__ uint4 shared[];
    const chunk_at x = chunk_of(p, w, blockIdx.x);
    const int n = x.n, K = (int)p.K, V = (int)p.V, KP = round_up16(p.K), VP = round_up16(p.V);
    const int LDK = stride_of(p.K), LDV = stride_of(p.V);
    const wy_tiles s = wy_tiles_at((unsigned char *)shared, p.K, p.V);
    const size_t key_stride = p.H * p.K, value_stride = p.H * p.V, first = token_of(p, x, 0);

    /* every tile is bf16 as it lies: all copies on their way at once, in the order the products
     * take them, so that Tm, the values and the keys may still land while dW is made (dVnew and
     * the workspace's tiles go by cp.async always; the inputs where their rows allow it) */
    stage_tile(s.dVnew16, LDV, CHUNK, VP, w.dVnew + x.row * VP, (size_t)VP, n, VP, (const float *)nullptr, false);
    copy_rows16(s.S0, LDV * 2, w.S0 + x.index * KP * VP, VP * 2, KP, VP * 2, false);
    copy_rows16(s.Tm16, TOKEN_STRIDE * 2, w.Tm + x.index * CHUNK * CHUNK, CHUNK * 2, CHUNK, CHUNK * 2, false);
    const int values_copied =
        stage_tile(s.values, LDV, CHUNK, VP, (const bf16 *)p.v_bf16 + first * V, value_stride, n, V, (const float *)nullptr, false);
    const int keys_copied =
        stage_tile(s.keys, LDK, CHUNK, KP, (const bf16 *)p.k_bf16 + first * K, key_stride, n, K, (const float *)nullptr, false);
    for (int i = threadIdx.x; i < CHUNK; i += GRADIENT_THREADS) {
        s.gamma[i] = i < n ? w.gamma[x.row + i] : 0.0;
        s.beta[i] = i < n ? p.beta[token_of(p, x, i)] : 0.0f;
        s.grown[i] = i < n ? expf((float)w.gamma[x.row + i]) : 0.0f;
    }
    wait_all_but(1 + values_copied + keys_copied); /* dVnew and S0 */
    __syncthreads();

    const warp_part keys_part = part_of<GRADIENT_WARPS>(KP), values_part = part_of<GRADIENT_WARPS>(VP);
    {   /* dW = -dVnew S0^T (eq. 19c's dW), the operand of dTm and dY, into S0's place once every
         * warp has read S0 */
        float acc[WIDE][4] = {};
        warp_product(acc, rows_of(s.dVnew16, LDV), transpose_of(s.S0, LDV), keys_part.row0, keys_part.col0, VP, keys_part.tiles);
        __pipeline_wait_prior(0); /* Tm, the values and the keys */
        __syncthreads();
        for_each_sum(acc, keys_part, [&](int i, int c, float &value) { s.dW16[i * LDK + c] = __float2bfloat16_rn(-value); });
    }
    chunk_dv(p, x, g, values_part, s.Tm16, s.dVnew16, s.values, LDV, s.beta, s.grown, s.v_dot, nullptr);
    __syncthreads(); /* dW complete */
    chunk_solve_gradients(p, x, g, s.Tm16, s.dVnew16, s.values, LDV, s.dW16, s.keys, LDK, s.dTm16, s.F, s.F16, s.gamma, s.beta,
                          s.grown, s.y_dot, s.b_sum, s.h_rows, s.h_columns);
    __syncthreads(); /* the row sums complete */
    if (threadIdx.x < n) /* dgamma_i and dbeta_i, a thread a row */
        s.dgamma[threadIdx.x] = wy_dgamma_dbeta(p, x, g, threadIdx.x, w.dgamma[x.row + threadIdx.x], s.beta, s.grown, s.v_dot,
                                                s.y_dot, s.b_sum, s.h_rows, s.h_columns);
    __syncthreads();
    chunk_dg(p, x, g, s.dgamma);
}
