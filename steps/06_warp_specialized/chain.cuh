/* chain.cuh -- kernel 2: chain_block, the loop over a segment's chunks, and the chain kernels.
 *
 * One block per (head, segment, 16 x tiles state columns), serial over the segment's chunks
 * (the plan: chain_ring.cuh). Its producer warp fills the ring; each consumer warp runs the
 * chunk step of its columns (eq. 13-15): S0 to B fragments by movmatrix (and S0^T out for
 * kernel 3), Vnew = U - W S0, Vnew to B fragments (and Vnew^T out), S = exp(gamma_C) S +
 * Kdec^T Vnew. From v (FROM_VALUES) the same products take the k tile in W's place: Y = K S0,
 * Z = diag(beta) V - diag(beta e^gamma) Y, Vnew = Tm Z, S = exp(gamma_C) S + K^T (diag(d)
 * Vnew). Two entries, chunk_states_kernel (W and U) and chunk_states_from_values_kernel; the
 * third, with output warps, is fused_outputs.cuh's.
 *
 * Cost and bound: per chunk and consumer warp, two dependent MMA chains (Vnew's, depth K; the
 * update's, depth 64; from v, Z and Tm's products, four deep, between them) on 8 or 16
 * columns; T / 64 steps one after the other. Where blocks are few a step's latency is the
 * time; where they fill the GPU, the slots' bytes and S0^T's and Vnew^T's. Each block
 * width's threads, registers, ring slots and shared memory: docs/06, "06d: consumer warps
 * that own their columns" and "06: Vnew from v, and the launch rules".
 *
 * Included by warp_specialized.cuh.
 */
#pragma once

/* A ring slot of the chain that makes Vnew from v (FROM_VALUES: chain_from_values): the
 * chunk's k tile in W's place and layout (its rows padded by the next 8 keys, never read), the
 * transform block, the decay, and the v tile: the block's columns of v (values_tile_columns)
 * and the 8 after them, so that the lanes' 4-byte loads of a fragment's pairs fall in 32
 * different banks (and the box is never wider than a row of all heads, which H >= 2 gives: a
 * wider box faults). Each part from a 128-byte boundary, as tensor copies want. */
__host__ __device__ static inline size_t values_slot_transform_offset(size_t K) { return chain_w_bytes(K); }
__host__ __device__ static inline size_t values_slot_decay_offset(size_t K) { return chain_w_bytes(K) + TRANSFORM_BYTES; }
__host__ __device__ static inline size_t values_slot_values_offset(size_t K) { return values_slot_decay_offset(K) + 128; }
__host__ __device__ constexpr int values_tile_columns(int tiles, size_t V) /* (round_up16, written out: constexpr) */
{
    return 16 * tiles < (int)((V + 15) / 16 * 16) ? 16 * tiles : (int)((V + 15) / 16 * 16);
}
__host__ __device__ constexpr int values_tile_stride(int columns) { return columns + 8; }
__host__ __device__ static inline size_t values_slot_bytes(size_t K, int tiles) /* (room for 16 tiles columns) */
{
    return values_slot_values_offset(K) + (size_t)CHUNK * values_tile_stride(16 * tiles) * sizeof(bf16);
}
static_assert(TRANSFORM_BYTES % 128 == 0 && CHUNK * sizeof(bf16) % 128 == 0, "a values slot's parts from 128-byte boundaries");
/* The ring: `stages` slots of slot_bytes from `slots`, and each slot's full and empty mbarriers */
typedef struct {
    unsigned char *slots;
    uint64_t *full, *empty;
    int slot_bytes, stages;
} chain_ring;

/* The producer's lane: each chunk's operands into the ring, as far ahead as the ring allows:
 * W (and W_low), the decayed keys, this block's rows of U_t (its columns from value_column0)
 * and the decay; from v, the k tile, the transform block, the decay and the block's v tile. */
template <chain_operands OPERANDS>
__device__ __forceinline__ static void fill_chain_ring(const gdn_device_problem &p, const chunk_workspace &w, const chain_place &at,
                                                       const chain_ring &ring, int value_column0, const CUtensorMap *k_map,
                                                       const CUtensorMap *v_map)
{
    constexpr bool PRECISE = OPERANDS == SPLIT_W_AND_U, FROM_VALUES = OPERANDS == TRANSFORM_AND_V;
    const int K = (int)p.K, VP = round_up16(p.V), block_column0 = at.block_column0, block_columns = at.block_columns, tiles = at.tiles;
    const size_t V = p.V, chunks = chunks_of(p.T), head = at.head, first = at.first, end = at.end;
    const int u_offset = (int)chain_u_offset(p.K, PRECISE), stages = ring.stages, slot_bytes = ring.slot_bytes;
    const size_t block_bytes = chain_block_bytes(p.K, V, PRECISE);
    const unsigned char *blocks = w.chain + head * chunks * block_bytes;
    unsigned char *const slots = ring.slots;
    uint64_t *const full = ring.full, *const empty = ring.empty;
    /* this block's rows of U_t: its state columns that have values */
    const int u_first = block_column0 > value_column0 ? block_column0 : value_column0;
    const int u_end = block_column0 + block_columns < value_column0 + VP ? block_column0 + block_columns : value_column0 + VP;
    const uint32_t u_row = CHUNK * sizeof(chain_u_type<PRECISE>); /* bytes of a row of U_t */
    const uint32_t u_bytes = u_first < u_end ? (uint32_t)(u_end - u_first) * u_row : 0;
    const uint32_t decay_to = (uint32_t)(u_offset + block_columns * u_row);
    for (size_t chunk = first; chunk < end; chunk++) {
        const size_t j = chunk - first;
        const int s = (int)(j % stages);
        if (j >= (size_t)stages) /* the consumers are done with chunk j - stages */
            barrier_wait(&empty[s], (uint32_t)((j / stages - 1) & 1));
        unsigned char *slot = slots + s * slot_bytes;
        const unsigned char *block = blocks + chunk * block_bytes;
        if constexpr (FROM_VALUES) { /* the k tile, the transform block, the decay, the block's v tile */
            const int h = (int)(head % p.H);
            const token_coordinates in = input_tile_at(w, head / p.H, chunk * CHUNK); /* a packed batch's k and v where they lie */
            const bool has_values = block_column0 + block_columns > value_column0;
            const int values_first = block_column0 > value_column0 ? block_column0 : value_column0; /* the tile's first column */
            const uint32_t values_bytes =
                has_values ? (uint32_t)(CHUNK * values_tile_stride(values_tile_columns(tiles, V)) * sizeof(bf16)) : 0;
            barrier_arrive_expecting(&full[s], (uint32_t)(chain_w_bytes(K) + TRANSFORM_BYTES + 16) + values_bytes);
            tensor_copy_3d(slot, k_map, h / (int)p.heads_per_key * K, in.t, in.b, &full[s]); /* the key head's k */
            bulk_copy(slot + values_slot_transform_offset(K), w.transforms + (head * chunks + chunk) * TRANSFORM_BYTES,
                      (uint32_t)TRANSFORM_BYTES, &full[s]);
            bulk_copy(slot + values_slot_decay_offset(K), block + chain_decay_offset(K, V, PRECISE), 16, &full[s]);
            if (has_values) /* state column c is column c - value_column0 of the head's v */
                tensor_copy_3d(slot + values_slot_values_offset(K), v_map, h * (int)V + values_first - value_column0, in.t, in.b, &full[s]);
            continue;
        }
        barrier_arrive_expecting(&full[s], (uint32_t)u_offset + u_bytes + 16);
        bulk_copy(slot, block, (uint32_t)u_offset, &full[s]); /* W (W_low), keys_t */
        if (u_bytes)
            bulk_copy(slot + u_offset + (u_first - block_column0) * u_row,
                      block + u_offset + (size_t)(u_first - value_column0) * u_row, u_bytes, &full[s]);
        bulk_copy(slot + decay_to, block + chain_decay_offset(K, V, PRECISE), 16, &full[s]);
    }
}

/* From v (eq. 13 regrouped, as chain_states_role): `values` holds Y = K S0 for this warp's
 * NTILES n-tiles and leaves as Vnew = Tm Z, Z = diag(beta) V - diag(beta e^gamma) Y; Tm and
 * the factors from the slot's transform block, V from this warp's columns of the v tile, rows
 * LDV_STEP bf16 apart (none where the columns have no values: `identity`). */
template <int NTILES>
__device__ __forceinline__ static void new_values_from_transform(float (&values)[NTILES][4][4], const bf16 *Tm, const float *beta,
                                                                 const float *scaled_beta, const bf16 *values_tile, int LDV_STEP,
                                                                 bool identity)
{
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    /* Z in fp32, this lane's pairs of V (token rows g and g + 8 of tile i, columns 2t, 2t + 1) by
     * 4-byte loads; then as B fragments, the depth of Tm's products */
    uint32_t z[NTILES][4][2];
#pragma unroll
    for (int u = 0; u < NTILES; u++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int token = 16 * i + g + 8 * half;
                uint32_t pair = 0; /* columns without values: V is zero there */
                if (!identity)
                    pair = *(const uint32_t *)&values_tile[token * LDV_STEP + 8 * u + 2 * t];
                const __nv_bfloat162 two = *(const __nv_bfloat162 *)&pair;
                const float factor = beta[token], scaled_factor = scaled_beta[token];
                values[u][i][2 * half] = factor * __low2float(two) - scaled_factor * values[u][i][2 * half];
                values[u][i][2 * half + 1] = factor * __high2float(two) - scaled_factor * values[u][i][2 * half + 1];
            }
            to_b_fragment<false>(z[u][i], values[u][i]);
        }
    /* Vnew's token tile i = Z_i + sum over kk <= i of lower(Tm)[i][kk] Z_kk: the sums start
     * at Z (Tm's diagonal of ones, in fp32); each A fragment of Tm serves every n-tile */
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int kk = 0; kk <= i; kk++) {
            uint32_t a[4];
            load_a_fragment_swizzled(a, Tm, 16 * i, 16 * kk);
#pragma unroll
            for (int u = 0; u < NTILES; u++)
                mma_bf16_16x8x16(values[u][i], a, z[u][kk]);
        }
}

/* S = exp(gamma_C) S + Kdec^T Vnew (eq. 15) for this warp's NTILES n-tiles: key m-tiles 16 q
 * .., depth 64; each A fragment of the decayed keys (keys_t, rows TOKEN_STRIDE apart) serves
 * every n-tile, and `value` holds Vnew's B fragments (value_low their low terms with
 * SPLIT_W_AND_U). From v (TRANSFORM_AND_V): K^T (diag(d) Vnew), K^T's fragments by
 * ldmatrix.trans from the k tile (`keys`). TILES: the key tiles where known, else 0 and KP. */
template <chain_operands OPERANDS, int NTILES, int TILES, int VALUE_TILES, int LOW_TILES, int DECAYED_TILES>
__device__ __forceinline__ static void update_state(float (&S)[NTILES][MAX_K / 16][4], float decay, const bf16 *keys_t, const bf16 *keys,
                                                    int LDK_STEP, int KP, const uint32_t (&value)[VALUE_TILES][4][2],
                                                    const uint32_t (&value_low)[LOW_TILES][4][2],
                                                    const uint32_t (&decayed_value)[DECAYED_TILES][4][2])
{
    constexpr bool PRECISE = OPERANDS == SPLIT_W_AND_U, FROM_VALUES = OPERANDS == TRANSFORM_AND_V;
    constexpr int KEY_TILES = MAX_K / 16;
#pragma unroll
    for (int q = 0; q < KEY_TILES; q++) {
        if (TILES ? q >= TILES : 16 * q >= KP)
            break;
#pragma unroll
        for (int u = 0; u < NTILES; u++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                S[u][q][r] *= decay;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t a[4];
            if constexpr (FROM_VALUES)
                load_a_fragment_transposed(a, keys, LDK_STEP, 16 * q, 16 * i);
            else
                load_a_fragment(a, keys_t, TOKEN_STRIDE, 16 * q, 16 * i);
#pragma unroll
            for (int u = 0; u < NTILES; u++) {
                mma_bf16_16x8x16(S[u][q], a, FROM_VALUES ? decayed_value[FROM_VALUES ? u : 0][i] : value[u][i]);
                if (PRECISE)
                    mma_bf16_16x8x16(S[u][q], a, value_low[PRECISE ? u : 0][i]);
            }
        }
    }
}

/* f(u, q, r, m, c) for each of this lane's elements of a warp's state: n-tile u, m-tile q,
 * accumulator r, at row m and state column c (the warp's columns from column0) */
template <int NTILES, typename Element>
__device__ __forceinline__ static void for_each_state_element(int column0, Element f)
{
#pragma unroll
    for (int u = 0; u < NTILES; u++)
#pragma unroll
        for (int q = 0; q < MAX_K / 16; q++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                f(u, q, r, fragment_row(16 * q, r), column0 + 8 * u + fragment_column(0, 0, r));
}

/* The chain block (eq. 13-15). Its compile-time parameters: what it reads (OPERANDS: W and U,
 * W and U with low terms, or the transform block and v) and how S0^T and Vnew^T leave (STAGED);
 * its width (NTILES n-tiles a consumer warp) and the state it carries (Columns). */
template <chain_operands OPERANDS, bool STAGED, class Columns, int NTILES>
__device__ __forceinline__ static void chain_block(gdn_device_problem p, chunk_workspace w, chain_segments segments,
                                                   int stages, const CUtensorMap *k_map, const CUtensorMap *v_map)
{
    constexpr bool PRECISE = OPERANDS == SPLIT_W_AND_U, FROM_VALUES = OPERANDS == TRANSFORM_AND_V;
    static_assert(Columns::HAS_OUTPUTS || !STAGED, "a chain that feeds no outputs stores nothing for them");
    constexpr int KEY_TILES = MAX_K / 16; /* m-tiles of S a warp may hold */
    extern __shared__ uint4 ring[];
    const int K = (int)p.K, KP = round_up16(p.K), LDK = key_stride(p.K), VP = round_up16(p.V);
    /* state columns; where U's (and v's) begin: the columns before carry no values */
    const int columns = Columns::count(KP, VP), value_column0 = Columns::first_value_column(KP);
    /* consumers: the chain's warps, 0 .. consumers - 1; the producer is warp `consumers` */
    const int consumers = blockDim.x / 32 - 1;
    const size_t V = p.V, chunks = chunks_of(p.T), P = segments.count;
    chain_place at = place_chain_block(segments, chunks, columns, 8 * NTILES * consumers);
    end_at_real_tokens(at, w, p.H, p.T);
    const size_t segment = at.segment, head = at.head, first = at.first, end = at.end;
    const int block_column0 = at.block_column0, block_columns = at.block_columns, tiles = at.tiles;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int slot_bytes = FROM_VALUES ? (int)values_slot_bytes(p.K, tiles) : (int)chain_slot_bytes(p.K, PRECISE, tiles);
    const int u_offset = (int)chain_u_offset(p.K, PRECISE);
    /* FROM_VALUES: from a 128-byte boundary, for the tensor copies */
    unsigned char *slots = FROM_VALUES ? SHARED_AT_128_BYTES(ring) : (unsigned char *)ring;
    uint64_t *full = (uint64_t *)(slots + stages * slot_bytes), *empty = full + stages;
    const chain_ring the_ring = {slots, full, empty, slot_bytes, stages};

    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++) {
            barrier_init(&full[s], 1);
            barrier_init(&empty[s], 32 * consumers); /* the threads that read a slot */
        }
        barrier_init_fence(); /* visible to the TMA unit */
    }
    __syncthreads(); /* the block's only barrier */
    wait_for_previous_kernel(); /* kernel 1's W, keys and U (and the segments' start states, where a kernel made them) */
    if (segments.outputs_early && threadIdx.x == 0) /* kernel 3's blocks may be placed now */
        let_next_kernel_start();

    if (warp == consumers) { /* the producer */
        if (lane == 0)
            fill_chain_ring<OPERANDS>(p, w, at, the_ring, value_column0, k_map, v_map);
        return;
    }

    /* a consumer: state columns column0 .. column0 + 8 NTILES - 1, n-tile u: column0 + 8 u .. */
    const int column0 = block_column0 + 8 * NTILES * warp;
    /* a column before value_column0 has no values: U and v are zero there */
    const bool has_columns = column0 < columns, identity = Columns::first_value_column(KP) != 0 && column0 < value_column0;
    bf16 *states_t = w.states_t + (head * chunks + first) * VP * LDK + column0 * LDK;
    bf16 *new_values_t = w.new_values_t + (head * chunks + first) * VP * TOKEN_STRIDE + column0 * TOKEN_STRIDE;
    const size_t low_offset = PRECISE ? w.states_low_t - w.states_t : 0, new_low_offset = PRECISE ? w.new_values_low_t - w.new_values_t : 0;
    /* STAGED: this warp's staging tiles: S0^T rows, Vnew^T rows, then (--precise) their low terms */
    constexpr int ROWS = 8 * NTILES;
    bf16 *stage_states = (bf16 *)(empty + stages) + (size_t)warp * ROWS * (LDK + TOKEN_STRIDE) * (PRECISE ? 2 : 1);
    bf16 *stage_values = stage_states + ROWS * LDK;
    bf16 *stage_states_low = stage_values + ROWS * TOKEN_STRIDE, *stage_values_low = stage_states_low + ROWS * LDK;

    float S[NTILES][KEY_TILES][4]; /* n-tile u, m-tile q: rows 16 q + g (+ 8), columns column0 + 8 u + 2t (+ 1) */
    for_each_state_element<NTILES>(column0, [&](int u, int q, int r, int m, int c) { S[u][q][r] = Columns::start(segments, head, segment, m, c, K, V); });

    /* step j (chunk first + j) reads slot s = j % stages on its pass j / stages over the ring,
       both counted: a 64-bit division would sit before each wait (docs/06, "06d: consumer warps
       that own their columns"); 32 bits hold a segment's steps */
    const int steps = (int)(end - first);
    for (int j = 0, s = 0, pass = 0; j < steps; j++) {
        const unsigned char *slot = slots + s * slot_bytes;
        const bf16 *W = (const bf16 *)slot, *W_low = (const bf16 *)(slot + chain_w_bytes(K));
        const bf16 *keys_t = (const bf16 *)(slot + chain_keys_offset(K, PRECISE));
        const chain_u_type<PRECISE> *U_t = (const chain_u_type<PRECISE> *)(slot + u_offset) + (column0 - block_column0) * CHUNK; /* this warp's rows */
        /* FROM_VALUES: the k tile in W's place, Tm (swizzled) and its factors, this warp's columns of v */
        const bf16 *const keys = W, *const Tm = (const bf16 *)(slot + values_slot_transform_offset(K));
        const float *const beta = (const float *)(slot + values_slot_transform_offset(K) + TRANSFORM_TM_BYTES);
        const float *const scaled_beta = beta + CHUNK, *const d = beta + 2 * CHUNK;
        const int LDV = values_tile_stride(values_tile_columns(tiles, V)), values_first = block_column0 > value_column0 ? block_column0 : value_column0;
        const bf16 *const values_tile = (const bf16 *)(slot + values_slot_values_offset(K)) + (column0 - values_first); /* (not read where identity) */
        barrier_wait(&full[s], (uint32_t)pass & 1);
        /* One chunk step of this warp's columns. TILES: the key tiles (KP / 16) where the
         * compiler is told them (K = 64, 128); 0: any K, a test per tile, a branch that code
         * does not move across. With TILES known the loops have no branches, so the independent
         * products of different key tiles interleave and their loads issue early. */
        auto chunk_step = [&](auto known_tiles, auto known_values_stride) {
            constexpr int TILES = decltype(known_tiles)::value, VALUES_STRIDE = decltype(known_values_stride)::value;
            /* with the key tiles known, so is the stride of W's (or the k tile's) rows, and
               (FROM_VALUES) with the v tile's stride known, each fragment's or pair's address is
               one base a lane plus a constant (docs/06, "06d: consumer warps that own their columns") */
            const int LDK_STEP = TILES ? 16 * TILES + KEY_STRIDE_PADDING : LDK;
            [[maybe_unused]] const int LDV_STEP = VALUES_STRIDE ? VALUES_STRIDE : LDV;
            /* where S0^T and Vnew^T go: the staging tiles, or the workspace (the same rows) */
            bf16 *const states_out = STAGED ? stage_states : states_t, *const values_out = STAGED ? stage_values : new_values_t;
            bf16 *const states_low_out = STAGED ? stage_states_low : states_t + low_offset;
            bf16 *const values_low_out = STAGED ? stage_values_low : new_values_t + new_low_offset;
            if (STAGED && j > 0) { /* the last chunk's stores have read the staging tiles */
                bulk_store_wait_read();
                __syncwarp();
            }
            /* Vnew = U - W S0 (eq. 13): token m-tiles 16 i .., depth K. Per key tile q, S0 as B
             * fragments (and S0^T for kernel 3: after the transpose, this lane holds column
             * column0 + 8 u + g, rows 16 q + 2t, 2t + 1 (+ 8)); each A fragment of W serves
             * every n-tile. FROM_VALUES: the same products from the k tile in W's place make
             * Y = K S0, and Vnew is made from it below. */
            float values[NTILES][4][4];
#pragma unroll
            for (int u = 0; u < NTILES; u++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    values[u][i][0] = values[u][i][1] = values[u][i][2] = values[u][i][3] = 0.0f;
#pragma unroll
            for (int q = 0; q < KEY_TILES; q++) {
                if (TILES ? q >= TILES : 16 * q >= KP)
                    break;
                uint32_t state[NTILES][2], state_low[PRECISE ? NTILES : 1][2];
#pragma unroll
                for (int u = 0; u < NTILES; u++) {
                    to_b_fragment<false>(state[u], S[u][q]);
                    if (PRECISE)
                        to_b_fragment<true>(state_low[PRECISE ? u : 0], S[u][q]);
                    if (Columns::HAS_OUTPUTS)
#pragma unroll
                        for (int half = 0; half < 2; half++) {
                            const int at = (8 * u + g) * LDK_STEP + 16 * q + 8 * half + 2 * t;
                            *(uint32_t *)&states_out[at] = state[u][half];
                            if (PRECISE)
                                *(uint32_t *)&states_low_out[at] = state_low[PRECISE ? u : 0][half];
                        }
                }
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    uint32_t a[4];
                    load_a_fragment(a, W, LDK_STEP, 16 * i, 16 * q);
#pragma unroll
                    for (int u = 0; u < NTILES; u++) {
                        mma_bf16_16x8x16(values[u][i], a, state[u]);
                        if (PRECISE) /* (W + W_low)(S + S_low) less the product of the two small parts */
                            mma_bf16_16x8x16(values[u][i], a, state_low[PRECISE ? u : 0]);
                    }
                    if (PRECISE) {
                        load_a_fragment(a, W_low, LDK_STEP, 16 * i, 16 * q);
#pragma unroll
                        for (int u = 0; u < NTILES; u++)
                            mma_bf16_16x8x16(values[u][i], a, state[u]);
                    }
                }
            }
            if constexpr (FROM_VALUES) /* values holds Y = K S0; Vnew = Tm Z from it */
                new_values_from_transform<NTILES>(values, Tm, beta, scaled_beta, values_tile, LDV_STEP, identity);
            /* the B fragments of Vnew (FROM_VALUES: of diag(d) Vnew, the update's keys as given) */
            uint32_t value[NTILES][4][2], value_low[PRECISE ? NTILES : 1][4][2], decayed_value[FROM_VALUES ? NTILES : 1][4][2];
#pragma unroll
            for (int u = 0; u < NTILES; u++) {
                /* this lane's 16 values of n-tile u of U, [token tile][r], in 16-byte loads
                 * (u_fragment_index: pieces lane, 32 + lane, ...) */
                using u_type = chain_u_type<PRECISE>;
                constexpr int PIECES = 4 / u_tiles_a_piece<u_type>();
                uint4 pieces[PIECES];
#pragma unroll
                for (int piece = 0; piece < PIECES; piece++)
                    pieces[piece] = identity || FROM_VALUES ? make_uint4(0, 0, 0, 0) : ((const uint4 *)(U_t + 8 * u * CHUNK))[32 * piece + lane];
                [[maybe_unused]] const u_type *mine = (const u_type *)pieces; /* (FROM_VALUES reads no U) */
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    if constexpr (FROM_VALUES) {
                        const float d0 = d[16 * i + g], d1 = d[16 * i + g + 8];
                        const float decayed[4] = {d0 * values[u][i][0], d0 * values[u][i][1], d1 * values[u][i][2], d1 * values[u][i][3]};
                        to_b_fragment<false>(decayed_value[FROM_VALUES ? u : 0][i], decayed);
                    } else
#pragma unroll
                        for (int r = 0; r < 4; r++)
                            values[u][i][r] = to_float(mine[4 * i + r]) - values[u][i][r];
                    to_b_fragment<false>(value[u][i], values[u][i]);
                    if (PRECISE)
                        to_b_fragment<true>(value_low[PRECISE ? u : 0][i], values[u][i]);
                    if (Columns::HAS_OUTPUTS) /* Vnew^T for kernel 3: column column0 + 8 u + g, tokens 16 i + 2t, 2t + 1 (+ 8) */
#pragma unroll
                        for (int half = 0; half < 2; half++) {
                            const int at = (8 * u + g) * TOKEN_STRIDE + 16 * i + 8 * half + 2 * t;
                            *(uint32_t *)&values_out[at] = value[u][i][half];
                            if (PRECISE)
                                *(uint32_t *)&values_low_out[at] = value_low[PRECISE ? u : 0][i][half];
                        }
                }
            }
            if (STAGED) { /* S0^T and Vnew^T out, whole lines, while the update runs */
                fence_shared_for_bulk_store();
                __syncwarp();
                if (lane < 2 * (PRECISE ? 2 : 1)) { /* the warp's rows are contiguous in the workspace too */
                    const bool is_value = lane & 1, is_low = lane >> 1;
                    if (is_value)
                        bulk_store(new_values_t + (is_low ? new_low_offset : 0), is_low ? stage_values_low : stage_values,
                                   ROWS * TOKEN_STRIDE * sizeof(bf16));
                    else
                        bulk_store(states_t + (is_low ? low_offset : 0), is_low ? stage_states_low : stage_states, ROWS * LDK * sizeof(bf16));
                }
                bulk_store_commit();
            }
            /* S = exp(gamma_C) S + Kdec^T Vnew (eq. 15) */
            const float decay = FROM_VALUES ? *(const float *)(slot + values_slot_decay_offset(K))
                                            : *(const float *)((const chain_u_type<PRECISE> *)(slot + u_offset) + block_columns * CHUNK);
            update_state<OPERANDS, NTILES, TILES>(S, decay, keys_t, keys, LDK_STEP, KP, value, value_low, decayed_value);
        };
        /* the step with its tiles known where a warp carries one n-tile, default precision: with
         * two n-tiles (the widest blocks) the copies' extra registers cost blocks an SM, and
         * --precise spills */
        constexpr bool SPECIALIZED = !PRECISE && NTILES == 1;
        /* and in two-n-tile blocks making Vnew from v at K = V = 64 where the state's columns
           ask for it (Columns::WIDE_STEP_KNOWN; ptxas spills 20 bytes in the plain state's) */
        constexpr bool WIDE_SPECIALIZED = FROM_VALUES && Columns::WIDE_STEP_KNOWN && NTILES == 2;
        using unknown = std::integral_constant<int, 0>;
        if (has_columns) {
            if constexpr (FROM_VALUES && SPECIALIZED) {
                /* made at K = V = 64 and 128 only (chain_from_values_sizes): 4 or 8 key tiles,
                   and the v tile's stride of one of the kernel's two block widths (chain_ntiles) */
                constexpr int NARROW = values_tile_stride(16), WIDE = values_tile_stride(32);
                if (KP == 64 && LDV == NARROW)
                    chunk_step(std::integral_constant<int, 4>{}, std::integral_constant<int, NARROW>{});
                else if (KP == 64)
                    chunk_step(std::integral_constant<int, 4>{}, std::integral_constant<int, WIDE>{});
                else if (LDV == NARROW)
                    chunk_step(std::integral_constant<int, 8>{}, std::integral_constant<int, NARROW>{});
                else
                    chunk_step(std::integral_constant<int, 8>{}, std::integral_constant<int, WIDE>{});
            } else if (WIDE_SPECIALIZED && KP == 64 && LDV == values_tile_stride(64)) {
                /* 4 or 8 tiles at K = V = 64: 4 key tiles, the v tile 64 + 8 wide */
                constexpr int SIXTY_FOUR = values_tile_stride(64);
                chunk_step(std::integral_constant<int, WIDE_SPECIALIZED ? 4 : 0>{},
                           std::integral_constant<int, WIDE_SPECIALIZED ? SIXTY_FOUR : 0>{});
            } else if (SPECIALIZED && KP == 64)
                chunk_step(std::integral_constant<int, SPECIALIZED ? 4 : 0>{}, unknown{});
            else if (SPECIALIZED && KP == 128)
                chunk_step(std::integral_constant<int, SPECIALIZED ? 8 : 0>{}, unknown{});
            else
                chunk_step(unknown{}, unknown{});
        }
        barrier_arrive(&empty[s]); /* this thread has read the slot */
        states_t += VP * LDK;
        new_values_t += VP * TOKEN_STRIDE;
        if (++s == stages) {
            s = 0;
            pass++;
        }
    }
    if (STAGED && has_columns)
        bulk_store_wait(); /* the staging tiles stay until the stores are done */
    if (!has_columns || !Columns::writes_end(segment, P))
        return;
    for_each_state_element<NTILES>(column0, [&](int u, int q, int r, int m, int c) {
        if (m < K)
            Columns::store_end(segments, head, segment, m, c, K, V, S[u][q][r]);
    });
}

/* Kernel 2's two entries (the third: fused_outputs.cuh), each bound by its widest block: 2
 * tiles of two one-n-tile warps, or widest_chain_tiles of one two-n-tile warp each. ptxas
 * reads the bound even where it caps nothing (docs/06, "06: Vnew from v, and the launch rules"). */
template <bool PRECISE, bool STAGED, class Columns, int NTILES>
static __global__ void __launch_bounds__(chain_block_threads(NTILES == 1 ? 2 : widest_chain_tiles(PRECISE)), 1)
    chunk_states_kernel(gdn_device_problem p, chunk_workspace w, chain_segments segments, int stages)
{
    chain_block<PRECISE ? SPLIT_W_AND_U : W_AND_U, STAGED, Columns, NTILES>(p, w, segments, stages, NULL, NULL);
}
/* the same blocks making Vnew from v (chain_from_values): tensor maps of k (boxes of a padded
   row, W's layout) and v (the block's columns and 8 more: values_tile_stride) */
template <bool STAGED, class Columns, int NTILES>
static __global__ void __launch_bounds__(chain_block_threads(NTILES == 1 ? 2 : MAX_CHAIN_TILES), 1)
    chunk_states_from_values_kernel(gdn_device_problem p, chunk_workspace w, chain_segments segments, int stages,
                                    const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map)
{
    chain_block<TRANSFORM_AND_V, STAGED, Columns, NTILES>(p, w, segments, stages, &k_map, &v_map);
}
