/* chains.cuh -- passes 2 and 3 of the tensor-core backward: the two chains over a head's chunks.
 *
 *   pass 2, chunks in order:   Vnew = U + (-W) S0                              (eq. 13)
 *                              S_C  = e^gamma_C S0 + K^T diag(e^(gamma_C - gamma)) Vnew   (eq. 15)
 *   pass 3, chunks from the last back:
 *                              dVnew = P^T dO + diag(e^(gamma_C - gamma)) K dS_C          (eq. 19a)
 *                              dS0   = e^gamma_C dS_C + Q^T diag(scale e^gamma) dO + (-W)^T dVnew   (eq. 19b)
 *
 * A column of S depends only on the same column of Vnew, and a column of dS only on the same
 * column of dVnew, so each chain is one block of 4 warps a (head, 16 columns), as in stage
 * 06a's chain: the block's K x 16 of the state live in the warps' MMA accumulators for the whole
 * sequence, in fp32 (warp w owns rows 16 w .. and 16 (w + 4) .., both 8-column n-tiles), and go
 * to shared memory in bf16 each chunk as the B operand of the next product. Every product is a
 * warp_product; the diagonal factors (the decays, scale e^gamma) multiply the fp32 side where
 * they can (the sums of K dS, the rows of Vnew before they are rounded, dO before it is
 * rounded, by pass 1), so that the keys and queries enter as the bf16 inputs they are, never
 * rounded again.
 * Each chunk's tiles are read from global memory at its start, by every thread, then a barrier:
 * the simplest feed, which leaves the chain waiting on memory at each chunk (stage 06 overlaps
 * it with a ring of copies). Depth: T / 64 chunk steps a chain, each three products 64 deep or
 * K deep; 2 T / 64 a head where the chains run one after the other, T / 64 where their blocks
 * run at once (both_chains_kernel, when they all fit on the GPU).
 *
 * Included by backward_tensor_cores.cu after warp_tiles.cuh.
 */
#pragma once

/* A chain block's shape, by the columns of the state it carries (its one compile-time switch):
 * 16 columns on 4 warps, each warp two 16-row tiles of the state (rows 16 w .. and 16 (w + 4) ..);
 * 64 columns on 8 warps, each warp one 16-row tile. Either way a warp holds all the block's
 * columns of its rows, and the 64 x COLUMNS products of a chunk (Vnew, dVnew) are cut among the
 * warps as 16 rows (warp % 4) by PART_TILES 8-column tiles (from column 8 PART_TILES (warp / 4)). */
template <int COLUMNS>
struct chain_shape {
    static_assert(COLUMNS == 16 || COLUMNS == 64, "a chain block carries 16 or 64 columns of the state");
    static constexpr int WARPS = COLUMNS == 16 ? 4 : 8, THREADS = 32 * WARPS;
    static constexpr int ROW_TILES = MAX_WIDTH / 16 / WARPS; /* 16-row tiles of the state a warp */
    static constexpr int TILES = COLUMNS / 8;                 /* 8-column tiles of the state a warp */
    static constexpr int PART_TILES = TILES / (WARPS / 4);    /* a warp's 8-column tiles of Vnew or dVnew */
    static constexpr int STRIDE = COLUMNS + 8;                /* bf16 row stride of the B tiles: ldmatrix without conflicts */
    static_assert(THREADS >= CHUNK, "a thread a token of the chunk stages gamma (stage_chain_chunk)");
    /* blocks an SM must hold, which caps the registers a thread: 16 columns, three (the shared
     * memory of the backward chain's); 64 columns, two (128 registers): one chain's 256 blocks
     * of 128 heads at V = 128 then run in one wave on 132 SMs, not two */
    static constexpr int MIN_BLOCKS = COLUMNS == 16 ? 3 : 2;
};

/* a chain block's shared memory; queries and dO16 only in pass 3 */
struct chain_tiles {
    double *gamma;
    float *to_end;                  /* exp(gamma_C - gamma_j), 0 past the chunk */
    bf16 *keys, *queries, *minus_W; /* [64][K + 8] */
    bf16 *state;                    /* [KP][COLUMNS + 8]: S0 or dS_C by rows, the B operand */
    bf16 *values, *dO16;            /* [64][COLUMNS + 8]: the chunk's columns of Vnew (decayed) or dVnew; scale e^gamma dO
                                       (pass 1) */
    float *addend;                  /* [64][COLUMNS + 8]: the chunk's columns of U or of P^T dO (pass 1), copied ahead */
    size_t bytes;
};
template <int COLUMNS>
__host__ __device__ static chain_tiles chain_tiles_at(unsigned char *base, size_t K, bool backward)
{
    constexpr int STRIDE = chain_shape<COLUMNS>::STRIDE;
    shared_cut cut = {base, 0};
    chain_tiles t;
    t.gamma = cut.take<double>(CHUNK);
    t.to_end = cut.take<float>(CHUNK);
    t.keys = cut.take<bf16>(CHUNK * stride_of(K));
    t.queries = backward ? cut.take<bf16>(CHUNK * stride_of(K)) : nullptr;
    t.minus_W = cut.take<bf16>(CHUNK * stride_of(K));
    t.state = cut.take<bf16>(round_up16(K) * STRIDE);
    t.values = cut.take<bf16>(CHUNK * STRIDE);
    t.dO16 = backward ? cut.take<bf16>(CHUNK * STRIDE) : nullptr;
    t.addend = cut.take<float>(CHUNK * STRIDE);
    t.bytes = cut.used;
    return t;
}

/* this warp's part of the state, in MMA accumulators: [row tile][8-column tile][register] */
template <int COLUMNS>
using chain_state = float[chain_shape<COLUMNS>::ROW_TILES][chain_shape<COLUMNS>::TILES][4];

/* f(q, j, r, m, c) for each of this lane's elements of the state tile: accumulator [q][j][r] is row
 * m of the state, column c of the block's COLUMNS */
template <int COLUMNS, typename Element>
__device__ __forceinline__ static void for_each_state_element(Element f)
{
    using shape = chain_shape<COLUMNS>;
    const int warp = threadIdx.x / 32;
#pragma unroll
    for (int q = 0; q < shape::ROW_TILES; q++)
#pragma unroll
        for (int j = 0; j < shape::TILES; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                f(q, j, r, fragment_row(16 * (warp + shape::WARPS * q), r), fragment_column(0, j, r));
}

/* this lane's elements of the state from a head's K x V tensor in global memory (NULL: zeros),
 * or to one */
template <int COLUMNS>
__device__ __forceinline__ static void load_state(chain_state<COLUMNS> &S, const float *from, int K, int V, int column0)
{
    for_each_state_element<COLUMNS>([&](int q, int j, int r, int m, int c) {
        S[q][j][r] = from && m < K && column0 + c < V ? from[m * V + column0 + c] : 0.0f;
    });
}
template <int COLUMNS>
__device__ __forceinline__ static void store_state(const chain_state<COLUMNS> &S, float *to, int K, int V, int column0)
{
    for_each_state_element<COLUMNS>([&](int q, int j, int r, int m, int c) {
        if (m < K && column0 + c < V)
            to[m * V + column0 + c] = S[q][j][r];
    });
}

/* The chain's state at a chunk's start (S0, or dS_C going backwards) published twice, rounded to
 * bf16 once: to the workspace (global, [KP][VP], for pass 4, whose products read it in bf16 and
 * nothing else) and to the B-operand tile (state) for this chunk's products. Rows past K and
 * columns past V are the accumulators' zeros, so pass 4 copies whole padded tiles. Rounded only
 * on its way out: the accumulators keep fp32. A lane's registers r and r + 1 are two columns side
 * by side: one 4-byte store each. */
template <int COLUMNS>
__device__ __forceinline__ static void publish_state(const chain_state<COLUMNS> &S, bf16 *global, bf16 *state, int KP, int VP,
                                                     int column0)
{
    for_each_state_element<COLUMNS>([&](int q, int j, int r, int m, int c) {
        if (r % 2 == 1 || m >= KP)
            return;
        const __nv_bfloat162 pair = __floats2bfloat162_rn(S[q][j][r], S[q][j][r + 1]);
        if (column0 + c < VP)
            *(__nv_bfloat162 *)(global + m * VP + column0 + c) = pair;
        *(__nv_bfloat162 *)(state + m * chain_shape<COLUMNS>::STRIDE + c) = pair;
    });
}

/* add(tile, row0) into each of this warp's 16-row tiles of the state (those below KP) */
template <int COLUMNS, typename Add>
__device__ __forceinline__ static void add_to_state(chain_state<COLUMNS> &S, int KP, Add add)
{
    using shape = chain_shape<COLUMNS>;
    const int warp = threadIdx.x / 32;
#pragma unroll
    for (int q = 0; q < shape::ROW_TILES; q++)
        if (16 * (warp + shape::WARPS * q) < KP)
            add(S[q], 16 * (warp + shape::WARPS * q));
}
/* The chain's step on its state (eq. 15, 19b): S = e^gamma_C S + what add(tile, row0) adds */
template <int COLUMNS, typename Add>
__device__ __forceinline__ static void decay_then_add(chain_state<COLUMNS> &S, float decay, int KP, Add add)
{
    add_to_state<COLUMNS>(S, KP, [&](float (&tile)[chain_shape<COLUMNS>::TILES][4], int row0) {
#pragma unroll
        for (int j = 0; j < chain_shape<COLUMNS>::TILES; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                tile[j][r] *= decay;
        add(tile, row0);
    });
}

/* A chunk's tiles both chains read: the keys (and the queries), -W, gamma and the decays to the
 * chunk's end. After the caller's barrier. */
__device__ static void stage_chain_chunk(const gdn_device_problem &p, const backward_workspace &w, const chunk_at &x,
                                         const chain_tiles &s)
{
    const int K = (int)p.K, KP = round_up16(p.K), LDK = stride_of(p.K), n = x.n;
    const size_t key_stride = p.H * p.K;
    /* gamma asked for first, then the three tiles' copies, then one wait (copy_rows16's, which
     * waits for every copy this thread has asked for): the loads arrive during the copies */
    const double *gamma = w.gamma + x.row;
    const int i = threadIdx.x; /* the block has at least CHUNK threads */
    const double gamma_i = i < n ? gamma[i] : 0.0, gamma_end = gamma[n - 1];
    stage_tile(s.keys, LDK, CHUNK, KP, (const bf16 *)p.k_bf16 + token_of(p, x, 0) * K, key_stride, n, K, (const float *)nullptr,
               false);
    if (s.queries)
        stage_tile(s.queries, LDK, CHUNK, KP, (const bf16 *)p.q_bf16 + token_of(p, x, 0) * K, key_stride, n, K,
                   (const float *)nullptr, false);
    copy_rows16(s.minus_W, LDK * 2, w.minus_W + x.index * CHUNK * KP, KP * 2, CHUNK, KP * 2);
    if (i < CHUNK) {
        s.gamma[i] = gamma_i;
        s.to_end[i] = i < n ? expf((float)(gamma_end - gamma_i)) : 0.0f;
    }
}

/* The block's columns of one chunk of pass 1's [heads chunks][64][VP] arrays (zero past the chunk
 * and past V) into a [64][COLUMNS + 8] tile by cp.async, not waited for (stage_chain_chunk's
 * wait is): whole 16-byte pieces with no test each, since pass 1 wrote the zeros. A 64-column
 * block reaching past VP (V < 64 past column0) copies VP - column0 columns; the rest of its
 * tile, zeroed once by zero_columns_past, is never copied over. */
template <int COLUMNS, typename T>
__device__ __forceinline__ static void copy_chunk_columns(T *tile, const T *chunk, int VP, int column0)
{
    const int width = min(COLUMNS, VP - column0);
    copy_rows16(tile, chain_shape<COLUMNS>::STRIDE * (int)sizeof(T), chunk + column0, VP * (int)sizeof(T), CHUNK,
                width * (int)sizeof(T), false);
}
template <int COLUMNS, typename T>
__device__ __forceinline__ static void zero_columns_past(T *tile, int VP, int column0)
{
    const int width = min(COLUMNS, VP - column0), words = (COLUMNS - width) * (int)sizeof(T) / 4;
    const int row_words = chain_shape<COLUMNS>::STRIDE * (int)sizeof(T) / 4, first = width * (int)sizeof(T) / 4;
    for (int e = threadIdx.x; e < CHUNK * words; e += blockDim.x)
        ((unsigned *)tile)[e / words * row_words + first + e % words] = 0u;
}

/* which head this block works on, its chain's blocks starting at first_block: a head's column
 * blocks in turn; column0, the block's first column of the state */
template <int COLUMNS>
__device__ __forceinline__ static size_t chain_head(const gdn_device_problem &p, unsigned first_block, int &column0)
{
    const size_t blocks_per_head = (round_up16(p.V) + COLUMNS - 1) / COLUMNS;
    column0 = (int)((blockIdx.x - first_block) % blocks_per_head) * COLUMNS;
    return (blockIdx.x - first_block) / blocks_per_head;
}

/* this warp's part of a chunk's 64 x COLUMNS product (Vnew, dVnew) */
template <int COLUMNS>
__device__ __forceinline__ static warp_part chain_part(void)
{
    using shape = chain_shape<COLUMNS>;
    const int warp = threadIdx.x / 32;
    if constexpr (shape::WARPS == 4) /* the compiler does not know warp < 4 */
        return {16 * warp, 0, shape::PART_TILES};
    else
        return {16 * (warp % 4), 8 * shape::PART_TILES * (warp / 4), shape::PART_TILES};
}

/* ---- pass 2: the forward chain, S0 of every chunk and Vnew (eq. 13, 15); its blocks start at
 * first_block of the launch ---- */
template <int COLUMNS>
__device__ __forceinline__ static void forward_chain(const gdn_device_problem &p, const backward_workspace &w, float *ht, unsigned first_block)
{
    using shape = chain_shape<COLUMNS>;
    constexpr int STRIDE = shape::STRIDE, TILES = shape::TILES, PART_TILES = shape::PART_TILES;
    extern __shared__ uint4 shared[];
    const chain_tiles s = chain_tiles_at<COLUMNS>((unsigned char *)shared, p.K, false);
    const int K = (int)p.K, V = (int)p.V, KP = round_up16(p.K), VP = round_up16(p.V), LDK = stride_of(p.K);
    int column0;
    const size_t head = chain_head<COLUMNS>(p, first_block, column0);
    const warp_part part = chain_part<COLUMNS>();
    chain_state<COLUMNS> S;
    load_state<COLUMNS>(S, p.h0 ? p.h0 + head * K * V : nullptr, K, V, column0);
    zero_columns_past<COLUMNS>(s.addend, VP, column0);
    for (size_t chunk = 0; chunk < w.chunks; chunk++) {
        const chunk_at x = chunk_of_head(p, w, head, chunk);
        const int n = x.n;
        /* the block's columns of U, asked for now: they arrive while the tiles are copied */
        copy_chunk_columns<COLUMNS>(s.addend, w.U + x.index * CHUNK * VP, VP, column0);
        __syncthreads(); /* the last chunk's tiles read */
        stage_chain_chunk(p, w, x, s);
        publish_state<COLUMNS>(S, w.S0 + x.index * KP * VP, s.state, KP, VP, column0); /* S0: for pass 4 and for Vnew */
        __syncthreads();

        /* Vnew = U + (-W) S0: this warp's part of the chunk's rows and columns, depth K. Vnew goes
         * to pass 4 in bf16 (zero past V); its rows decayed to the chunk's end, in bf16, are the B
         * operand of the update. */
        float acc[PART_TILES][4] = {};
        warp_product(acc, rows_of(s.minus_W, LDK), rows_of(s.state, STRIDE), part.row0, part.col0, KP, PART_TILES);
        for_each_sum(acc, part, [&](int i, int c, float &value) {
            value = i < n && column0 + c < V ? value + s.addend[i * STRIDE + c] : 0.0f;
            s.values[i * STRIDE + c] = __float2bfloat16_rn(s.to_end[i] * value);
        });
        store_bf16_pairs(acc, part, w.Vnew + x.row * VP + column0, VP, n, VP - column0);
        __syncthreads();

        /* S = e^gamma_C S0 + K^T (decayed Vnew), in the accumulators: A = the keys read transposed */
        decay_then_add<COLUMNS>(S, expf((float)s.gamma[n - 1]), KP, [&](float (&tile)[TILES][4], int row0) {
            warp_product(tile, transpose_of(s.keys, LDK), rows_of(s.values, STRIDE), row0, 0, CHUNK, TILES);
        });
    }
    store_state<COLUMNS>(S, ht + head * K * V, K, V, column0);
}

/* ---- pass 3: the backward chain, dS_C of every chunk, dVnew and dh0 (eq. 19a, 19b); its blocks
 * start at first_block of the launch ---- */
template <int COLUMNS>
__device__ __forceinline__ static void backward_chain(const gdn_device_problem &p, const gdn_device_cotangents &cot,
                                                      const backward_workspace &w, float *dh0, unsigned first_block)
{
    using shape = chain_shape<COLUMNS>;
    constexpr int STRIDE = shape::STRIDE, TILES = shape::TILES, PART_TILES = shape::PART_TILES;
    extern __shared__ uint4 shared[];
    const chain_tiles s = chain_tiles_at<COLUMNS>((unsigned char *)shared, p.K, true);
    const int K = (int)p.K, V = (int)p.V, KP = round_up16(p.K), VP = round_up16(p.V), LDK = stride_of(p.K);
    int column0;
    const size_t head = chain_head<COLUMNS>(p, first_block, column0);
    const warp_part part = chain_part<COLUMNS>();
    chain_state<COLUMNS> dS;
    load_state<COLUMNS>(dS, cot.dht + head * K * V, K, V, column0);
    zero_columns_past<COLUMNS>(s.addend, VP, column0);
    zero_columns_past<COLUMNS>(s.dO16, VP, column0);
    for (size_t chunk = w.chunks; chunk-- > 0;) {
        const chunk_at x = chunk_of_head(p, w, head, chunk);
        const int n = x.n;
        /* asked for now, so that they arrive while the tiles are copied: the block's columns of
         * P^T dO and of scale e^gamma dO (pass 1), into their tiles, whose readers of the last
         * chunk are all past the last barrier */
        copy_chunk_columns<COLUMNS>(s.addend, w.PtdO + x.index * CHUNK * VP, VP, column0);
        copy_chunk_columns<COLUMNS>(s.dO16, w.scaled_dO + x.index * CHUNK * VP, VP, column0);
        __syncthreads();
        stage_chain_chunk(p, w, x, s);
        publish_state<COLUMNS>(dS, w.dS_end + x.index * KP * VP, s.state, KP, VP, column0); /* dS_C: for pass 4 and for dVnew */
        __syncthreads();

        /* dS0's first two terms, e^gamma_C dS_C + Q^T (scale e^gamma dO) (A = the queries read
         * transposed, depth 64), in the accumulators now: they need no dVnew, and their products
         * overlap dVnew's. dS_C is in shared memory for dVnew's product. */
        decay_then_add<COLUMNS>(dS, expf((float)s.gamma[n - 1]), KP, [&](float (&tile)[TILES][4], int row0) {
            warp_product(tile, transpose_of(s.queries, LDK), rows_of(s.dO16, STRIDE), row0, 0, CHUNK, TILES);
        });

        /* dVnew = P^T dO + e^(gamma_C - gamma_i) (K dS_C)_i: this warp's part, depth K; dVnew in
         * bf16 (zero past V) is the B operand of dS0 and goes to pass 4 */
        float acc[PART_TILES][4] = {};
        warp_product(acc, rows_of(s.keys, LDK), rows_of(s.state, STRIDE), part.row0, part.col0, KP, PART_TILES);
        for_each_sum(acc, part, [&](int i, int c, float &value) {
            value = i < n && column0 + c < V ? __fmaf_rn(value, s.to_end[i], s.addend[i * STRIDE + c]) : 0.0f;
            s.values[i * STRIDE + c] = __float2bfloat16_rn(value);
        });
        store_bf16_pairs(acc, part, w.dVnew + x.row * VP + column0, VP, n, VP - column0);
        __syncthreads();

        /* dS0 = e^gamma_C dS_C + Q^T (scale e^gamma dO) + (-W)^T dVnew: the last term, A = -W read
         * transposed, depth 64, added in the order the sums had */
        add_to_state<COLUMNS>(dS, KP, [&](float (&tile)[TILES][4], int row0) {
            warp_product(tile, transpose_of(s.minus_W, LDK), rows_of(s.values, STRIDE), row0, 0, CHUNK, TILES);
        });
    }
    if (dh0)
        store_state<COLUMNS>(dS, dh0 + head * K * V, K, V, column0);
}

/* ---- the chains' launches ---- */
template <int COLUMNS>
__global__ static void __launch_bounds__(chain_shape<COLUMNS>::THREADS, chain_shape<COLUMNS>::MIN_BLOCKS)
    forward_chain_kernel(gdn_device_problem p, backward_workspace w, float *ht)
{
    forward_chain<COLUMNS>(p, w, ht, 0);
}
template <int COLUMNS>
__global__ static void __launch_bounds__(chain_shape<COLUMNS>::THREADS, chain_shape<COLUMNS>::MIN_BLOCKS)
    backward_chain_kernel(gdn_device_problem p, gdn_device_cotangents cot, backward_workspace w, float *dh0)
{
    backward_chain<COLUMNS>(p, cot, w, dh0, 0);
}
/* Both chains in one launch. They read only what pass 1 and the inputs left (the keys, -W, the
 * gates; U and h0 forward; the queries, scale e^gamma dO, P^T dO and dht backward) and write
 * apart (S0, Vnew and ht; dS_C, dVnew and dh0), so neither waits for the other: launched one
 * after the other, each leaves the SMs its blocks do not fill idle for its whole depth of chunk
 * steps, where together they share them. The first `backward_blocks` blocks take the backward chain, the
 * longer of the two (more products a step), so that it tends to start first (the GPU places
 * blocks in about their order, without a promise); shared memory is the backward chain's, the
 * larger, for both roles: the forward's 16-column blocks fit three an SM, not four, at K = 128. */
template <int COLUMNS>
__global__ static void __launch_bounds__(chain_shape<COLUMNS>::THREADS, chain_shape<COLUMNS>::MIN_BLOCKS)
    both_chains_kernel(gdn_device_problem p, gdn_device_cotangents cot, backward_workspace w, float *ht, float *dh0,
                       unsigned backward_blocks)
{
    if (blockIdx.x < backward_blocks)
        backward_chain<COLUMNS>(p, cot, w, dh0, 0);
    else
        forward_chain<COLUMNS>(p, w, ht, backward_blocks);
}
