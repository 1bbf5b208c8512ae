/* chain_w_and_u.cuh -- kernel 2 warp-specialized: chain_block, the loop over a segment's
 * chunks, and the chain kernel, reading W and U.
 *
 * One block per (head, segment, 16 x tiles state columns), serial over the segment's chunks
 * (the plan: chain_ring.cuh). Its producer warp fills the ring; each consumer warp runs the
 * chunk step of its columns (eq. 13-15): S0 to B fragments by movmatrix (and S0^T out for
 * kernel 3), Vnew = U - W S0, Vnew to B fragments (and Vnew^T out), S = exp(gamma_C) S +
 * Kdec^T Vnew. The state the block carries is its Columns (state_columns: S; chain_ring.cuh).
 * The step is compiled with its key tiles known where that pays (chunk_step), and the ring's
 * slot and pass are counted, not divided.
 *
 * Cost and bound: per chunk and consumer warp, two dependent MMA chains (Vnew's, depth K; the
 * update's, depth 64) on 8 or 16 columns; T / 64 steps one after the other. Where blocks are
 * few a step's latency is the time; where they fill the GPU, the slots' bytes and S0^T's and
 * Vnew^T's.
 * Budget at K = V = 128, default mode (nvcc -Xptxas -v: no spills): 32-column blocks, two
 * consumer warps per 16 columns and a producer (160 threads), 143 registers staged, 172 with
 * plain stores (the chunk step compiled for the 4 or 8 key tiles of K = 64 or 128); 3 ring
 * slots.
 *
 * Included by warp_chain.cu and output_warps.cu.
 */
#pragma once

/* The ring: `stages` slots of slot_bytes from `slots`, and each slot's full and empty mbarriers */
typedef struct {
    unsigned char *slots;
    uint64_t *full, *empty;
    int slot_bytes, stages;
} chain_ring;

/* The producer's lane: each chunk's operands into the ring, as far ahead as the ring allows:
 * W (and W_low), the decayed keys, this block's rows of U_t (its state columns that have
 * values, from value_column0: the columns before carry none) and the decay. */
template <chain_operands OPERANDS>
__device__ __forceinline__ static void fill_chain_ring(const gdn_device_problem &p, const chunk_workspace &w, const chain_place &at,
                                                       const chain_ring &ring, int value_column0)
{
    constexpr bool PRECISE = OPERANDS == SPLIT_W_AND_U;
    const int K = (int)p.K, VP = round_up16(p.V), block_column0 = at.block_column0, block_columns = at.block_columns;
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
        barrier_arrive_expecting(&full[s], (uint32_t)u_offset + u_bytes + 16);
        bulk_copy(slot, block, (uint32_t)u_offset, &full[s]); /* W (W_low), keys_t */
        if (u_bytes)
            bulk_copy(slot + u_offset + (u_first - block_column0) * u_row,
                      block + u_offset + (size_t)(u_first - value_column0) * u_row, u_bytes, &full[s]);
        bulk_copy(slot + decay_to, block + chain_decay_offset(K, V, PRECISE), 16, &full[s]);
    }
}

/* S = exp(gamma_C) S + Kdec^T Vnew (eq. 15) for this warp's NTILES n-tiles: key m-tiles 16 q
 * .., depth 64; each A fragment of the decayed keys (keys_t, rows TOKEN_STRIDE apart) serves
 * every n-tile, and `value` holds Vnew's B fragments (value_low their low terms with
 * SPLIT_W_AND_U). TILES: the key tiles where the compiler knows them (chain_block's
 * chunk_step), else 0 and KP. */
template <chain_operands OPERANDS, int NTILES, int TILES, int VALUE_TILES, int LOW_TILES>
__device__ __forceinline__ static void update_state(float (&S)[NTILES][MAX_K / 16][4], float decay, const bf16 *keys_t, int KP,
                                                    const uint32_t (&value)[VALUE_TILES][4][2],
                                                    const uint32_t (&value_low)[LOW_TILES][4][2])
{
    constexpr bool PRECISE = OPERANDS == SPLIT_W_AND_U;
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
            load_a_fragment(a, keys_t, TOKEN_STRIDE, 16 * q, 16 * i);
#pragma unroll
            for (int u = 0; u < NTILES; u++) {
                mma_bf16_16x8x16(S[u][q], a, value[u][i]);
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
 * or W and U with low terms) and how S0^T and Vnew^T leave (STAGED);
 * its width (NTILES n-tiles a consumer warp) and the state it carries (Columns). */
template <chain_operands OPERANDS, bool STAGED, class Columns, int NTILES>
__device__ __forceinline__ static void chain_block(gdn_device_problem p, chunk_workspace w, chain_segments segments,
                                                   int stages)
{
    constexpr bool PRECISE = OPERANDS == SPLIT_W_AND_U;
    static_assert(Columns::HAS_OUTPUTS || !STAGED, "a chain that feeds no outputs stores nothing for them");
    constexpr int KEY_TILES = MAX_K / 16; /* m-tiles of S a warp may hold */
    extern __shared__ uint4 ring[];
    const int K = (int)p.K, KP = round_up16(p.K), LDK = key_stride(p.K), VP = round_up16(p.V);
    /* state columns; where U's (and v's) begin: the columns before carry no values */
    const int columns = Columns::count(KP, VP), value_column0 = Columns::first_value_column(KP);
    /* consumers: the chain's warps, 0 .. consumers - 1; the producer is warp `consumers` */
    const int consumers = blockDim.x / 32 - 1;
    const size_t V = p.V, chunks = chunks_of(p.T), P = segments.count;
    const chain_place at = place_chain_block(segments, chunks, columns, 8 * NTILES * consumers);
    const size_t segment = at.segment, head = at.head, first = at.first, end = at.end;
    const int block_column0 = at.block_column0, block_columns = at.block_columns, tiles = at.tiles;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int slot_bytes = (int)chain_slot_bytes(p.K, PRECISE, tiles);
    const int u_offset = (int)chain_u_offset(p.K, PRECISE);
    unsigned char *slots = (unsigned char *)ring;
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
            fill_chain_ring<OPERANDS>(p, w, at, the_ring, value_column0);
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
        barrier_wait(&full[s], (uint32_t)pass & 1);
        /* One chunk step of this warp's columns. TILES: the key tiles (KP / 16) where the
         * compiler is told them (K = 64, 128); 0: any K, a test per tile, a branch that code
         * does not move across. With TILES known the loops have no branches, so the independent
         * products of different key tiles interleave and their loads issue early. */
        auto chunk_step = [&](auto known_tiles) {
            constexpr int TILES = decltype(known_tiles)::value;
            /* with the key tiles known, so is the stride of W's rows: each fragment's address is
               one base a lane plus a constant (docs/06, "06d: consumer warps that own their columns") */
            const int LDK_STEP = TILES ? 16 * TILES + KEY_STRIDE_PADDING : LDK;
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
             * every n-tile. */
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
            /* the B fragments of Vnew */
            uint32_t value[NTILES][4][2], value_low[PRECISE ? NTILES : 1][4][2];
#pragma unroll
            for (int u = 0; u < NTILES; u++) {
                /* this lane's 16 values of n-tile u of U, [token tile][r], in 16-byte loads
                 * (u_fragment_index: pieces lane, 32 + lane, ...) */
                using u_type = chain_u_type<PRECISE>;
                constexpr int PIECES = 4 / u_tiles_a_piece<u_type>();
                uint4 pieces[PIECES];
#pragma unroll
                for (int piece = 0; piece < PIECES; piece++)
                    pieces[piece] = identity ? make_uint4(0, 0, 0, 0) : ((const uint4 *)(U_t + 8 * u * CHUNK))[32 * piece + lane];
                const u_type *mine = (const u_type *)pieces;
#pragma unroll
                for (int i = 0; i < 4; i++) {
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
            const float decay = *(const float *)((const chain_u_type<PRECISE> *)(slot + u_offset) + block_columns * CHUNK);
            update_state<OPERANDS, NTILES, TILES>(S, decay, keys_t, KP, value, value_low);
        };
        /* the step with its tiles known where a warp carries one n-tile, default precision: with
         * two n-tiles (the widest blocks) the copies' extra registers cost blocks an SM, and
         * --precise spills */
        constexpr bool SPECIALIZED = !PRECISE && NTILES == 1;
        using unknown = std::integral_constant<int, 0>;
        if (has_columns) {
            if (SPECIALIZED && KP == 64)
                chunk_step(std::integral_constant<int, SPECIALIZED ? 4 : 0>{});
            else if (SPECIALIZED && KP == 128)
                chunk_step(std::integral_constant<int, SPECIALIZED ? 8 : 0>{});
            else
                chunk_step(unknown{});
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

/* Kernel 2, bound by its widest block: 2 tiles of two one-n-tile warps each (5 warps with the
 * producer), widest_chain_tiles tiles of one two-n-tile warp each (9 warps, 5 with --precise).
 * ptxas reads the bound even where it caps nothing (docs/06, "06: Vnew from v, and the launch rules"). */
template <bool PRECISE, bool STAGED, class Columns, int NTILES>
static __global__ void __launch_bounds__(chain_block_threads(NTILES == 1 ? 2 : widest_chain_tiles(PRECISE)), 1)
    chunk_states_kernel(gdn_device_problem p, chunk_workspace w, chain_segments segments, int stages)
{
    chain_block<PRECISE ? SPLIT_W_AND_U : W_AND_U, STAGED, Columns, NTILES>(p, w, segments, stages);
}
