/* producer_chain.cuh -- kernel 2 of 06c: 06b's chain, fed by a producer warp (a TMA ring on full
 * and empty mbarriers), its state in the four consumer warps' MMA accumulators, reading the
 * chain block in stage 06's layout (U in bf16, in fragment order) and leaving S0^T and Vnew^T
 * with their rows padded as kernel 3's tiles are (key_stride, TOKEN_STRIDE), so that kernel 3
 * takes each tile by one bulk copy.
 *
 * Cost: as 06b's chain: per chunk and block (16 columns), Vnew's product (64 x K x 16) and the
 * update's (K x 64 x 16), with three exchanges through shared memory and two named barriers
 * of the consumers; T / 64 such steps, serial.
 *
 * Included by bulk_copies.cu.
 */
#pragma once
enum { CHAIN_THREADS = 128, CHAIN_COLUMNS = 16, CHAIN_STAGES = 3 };

/* ---- the chain's state in MMA accumulators: what the chain computes ----
 * A chain block holds 16 columns of one head's S (K x 16): warp w of its 4 owns rows 16 w ..
 * and 16 (w + 4) .. (two m-tiles at K = 128), both 8-column n-tiles, as S[q][j][r], for the
 * whole sequence (warp: threadIdx.x / 32, made once by the caller). Per chunk (eq. 13 and 15): S0^T out in bf16 (stage_state), Vnew = U - W S0
 * (make_new_values), S = exp(gamma_C) S + Kdec^T Vnew (update_state); each step reads what the
 * one before wrote to shared memory, so the caller puts a barrier between them. */
/* f(q, j, r, m, column) for each of this lane's elements of S[q][j][r], at row m and state column `column` */
template <typename Element>
__device__ __forceinline__ static void for_each_state_element(size_t column0, int warp, Element f)
{
#pragma unroll
    for (int q = 0; q < 2; q++)
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                f(q, j, r, fragment_row(16 * (warp + 4 * q), r), column0 + fragment_column(0, j, r));
}
__device__ __forceinline__ static void load_state(float (&S)[2][2][4], const gdn_device_problem &p, size_t head, size_t column0, int warp)
{
    const int K = (int)p.K;
    for_each_state_element(column0, warp, [&](int q, int j, int r, int m, size_t column) {
        S[q][j][r] = p.h0 && m < K && column < p.V ? p.h0[(head * K + m) * p.V + column] : 0.0f;
    });
}

/* S0^T in bf16: into S_t (row stride LDK) for Vnew, and into the workspace for kernel 3 (the
   same stride, so that kernel 3 takes a tile by one bulk copy) */
__device__ __forceinline__ static void stage_state(const float (&S)[2][2][4], int warp, int KP, int LDK, bf16 *S_t, bf16 *states_t)
{
#pragma unroll
    for (int q = 0; q < 2; q++) {
        if (16 * (warp + 4 * q) >= KP)
            continue;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int m = fragment_row(16 * (warp + 4 * q), r), c = fragment_column(0, j, r);
                const bf16 value = __float2bfloat16_rn(S[q][j][r]);
                S_t[c * LDK + m] = value;
                states_t[c * LDK + m] = value; /* rows padded as kernel 3's tile */
            }
    }
}

/* Vnew = U - W S0 (eq. 13), rows 16 warp .. of the chunk, in bf16: into Vnew_t for the update
 * and into the workspace for kernel 3. U_t: the block's 16 rows, in fragment order
 * (u_fragment_index): this lane's four values of n-tile j lie together. */
__device__ __forceinline__ static void make_new_values(int warp, const bf16 *W, const bf16 *U_t, const bf16 *S_t, int LDK, int KP,
                                                       bf16 *Vnew_t, bf16 *new_values_t)
{
    float acc[2][4];
    clear(acc);
    warp_product(acc, W, LDK, S_t, LDK, 16 * warp, 0, KP);
#pragma unroll
    for (int j = 0; j < 2; j++) {
        /* the lane's four values of n-tile j in one 8-byte load (their index is a multiple of 4) */
        const uint2 four = *(const uint2 *)(U_t + 8 * j * CHUNK + u_fragment_index<bf16>(threadIdx.x % 32, warp));
        const bf16 *mine = (const bf16 *)&four;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = fragment_row(16 * warp, r), c = fragment_column(0, j, r);
            const bf16 value = __float2bfloat16_rn(to_float(mine[r]) - acc[j][r]);
            Vnew_t[c * TOKEN_STRIDE + i] = value;
            new_values_t[c * TOKEN_STRIDE + i] = value;
        }
    }
}

/* S = exp(gamma_C) S + Kdec^T Vnew (eq. 15), in the accumulators */
__device__ __forceinline__ static void update_state(float (&S)[2][2][4], int warp, float decay, const bf16 *keys_t, const bf16 *Vnew_t, int KP)
{
#pragma unroll
    for (int q = 0; q < 2; q++) {
        if (16 * (warp + 4 * q) >= KP)
            continue;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                S[q][j][r] *= decay;
        warp_product(S[q], keys_t, TOKEN_STRIDE, Vnew_t, TOKEN_STRIDE, 16 * (warp + 4 * q), 0, CHUNK);
    }
}

/* the last state into ht */
__device__ __forceinline__ static void store_state(const float (&S)[2][2][4], const gdn_device_problem &p, size_t head, size_t column0,
                                                   int warp, float *ht)
{
    const int K = (int)p.K;
    for_each_state_element(column0, warp, [&](int q, int j, int r, int m, size_t column) {
        if (m < K && column < p.V)
            ht[(head * K + m) * p.V + column] = S[q][j][r];
    });
}

/* ---- kernel 2: one block per (head, 16 columns of S), 4 consumer warps and a producer ----
 * The consumers' work per chunk is 06a's (eq. 13 and 15, S in the MMA accumulators); what
 * changes is who fills the ring and how a consumer knows a slot is there. */
enum { PRODUCER_WARP = CHAIN_THREADS / 32, PRODUCER_CHAIN_THREADS = CHAIN_THREADS + 32 };

/* the 128 consumer threads' own barrier (barrier 0 is __syncthreads', which the producer,
   gone after its loop, would never reach) */
static_assert(CHAIN_THREADS == 128, "consumers_sync counts the four consumer warps");
__device__ __forceinline__ static void consumers_sync(void) { named_barrier_sync<1, CHAIN_THREADS>(); }

/* the ring's barriers, after the slots and the two exchange tiles: full[STAGES], empty[STAGES] */
__host__ __device__ static inline size_t ring_barriers_offset(size_t K)
{
    return CHAIN_STAGES * chain_slot_bytes(K, false, 1) + CHAIN_COLUMNS * (key_stride(K) + TOKEN_STRIDE) * sizeof(bf16);
}

static __global__ void __launch_bounds__(PRODUCER_CHAIN_THREADS, 1) chunk_states_kernel(gdn_device_problem p, chunk_workspace w, float *ht)
{
    extern __shared__ uint4 ring[];
    const int K = (int)p.K, KP = round_up16(p.K), LDK = key_stride(p.K), VP = round_up16(p.V);
    const size_t V = p.V, chunks = chunks_of(p.T), tiles_per_head = VP / CHAIN_COLUMNS;
    const size_t head = blockIdx.x / tiles_per_head, column0 = blockIdx.x % tiles_per_head * CHAIN_COLUMNS;
    const int warp = threadIdx.x / 32, slot_bytes = (int)chain_slot_bytes(p.K, false, 1);
    const size_t block_bytes = chain_block_bytes(p.K, V, false);
    const unsigned char *blocks = w.chain + head * chunks * block_bytes;
    unsigned char *slots = (unsigned char *)ring;
    bf16 *S_t = (bf16 *)(slots + CHAIN_STAGES * slot_bytes), *Vnew_t = S_t + CHAIN_COLUMNS * LDK;
    uint64_t *full = (uint64_t *)(slots + ring_barriers_offset(p.K)), *empty = full + CHAIN_STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < CHAIN_STAGES; s++) {
            barrier_init(&full[s], 1);              /* the producer's arrival, plus the bytes */
            barrier_init(&empty[s], CHAIN_THREADS); /* every consumer thread */
        }
        barrier_init_fence();
    }
    __syncthreads(); /* the barriers are set up before anyone uses them; the last block barrier */

    if (warp == PRODUCER_WARP) {
        if (threadIdx.x % 32 != 0)
            return;
        /* a slot: W and keys_t (one piece), the block's 16 rows of U_t, the decay (16 bytes) */
        const uint32_t first = (uint32_t)chain_u_offset(K, false), rows = CHAIN_COLUMNS * CHUNK * sizeof(bf16);
        for (size_t chunk = 0; chunk < chunks; chunk++) {
            const int s = (int)(chunk % CHAIN_STAGES);
            if (chunk >= CHAIN_STAGES) /* the slot's last round has been read by every consumer */
                barrier_wait(&empty[s], (uint32_t)((chunk / CHAIN_STAGES - 1) & 1));
            const unsigned char *block = blocks + chunk * block_bytes;
            unsigned char *slot = slots + s * slot_bytes;
            barrier_arrive_expecting(&full[s], (uint32_t)slot_bytes);
            bulk_copy(slot, block, first, &full[s]);
            bulk_copy(slot + first, block + first + column0 * CHUNK * sizeof(bf16), rows, &full[s]);
            bulk_copy(slot + first + rows, block + chain_decay_offset(K, V, false), 4 * sizeof(float), &full[s]);
        }
        return;
    }

    bf16 *states_t = w.states_t + head * chunks * VP * LDK + column0 * LDK;
    bf16 *new_values_t = w.new_values_t + head * chunks * VP * TOKEN_STRIDE + column0 * TOKEN_STRIDE;
    float S[2][2][4]; /* [m-tile of this warp][n-tile][sum]: load_state says which */
    load_state(S, p, head, column0, warp);

    for (size_t chunk = 0; chunk < chunks; chunk++) {
        const int s = (int)(chunk % CHAIN_STAGES);
        const unsigned char *slot = slots + s * slot_bytes;
        const bf16 *W = (const bf16 *)slot, *keys_t = (const bf16 *)(slot + chain_keys_offset(K, false));
        const bf16 *U_t = (const bf16 *)(slot + chain_u_offset(K, false));
        /* S0^T in bf16 (S_t was last read by the previous chunk's Vnew, before its second sync) */
        stage_state(S, warp, KP, LDK, S_t, states_t);
        states_t += VP * LDK;
        barrier_wait(&full[s], (uint32_t)((chunk / CHAIN_STAGES) & 1)); /* the slot has landed */
        consumers_sync(); /* S_t complete; every warp is done with the last chunk's Vnew_t */

        make_new_values(warp, W, U_t, S_t, LDK, KP, Vnew_t, new_values_t); /* eq. 13 */
        new_values_t += VP * TOKEN_STRIDE;
        consumers_sync(); /* Vnew_t complete */

        const float decay = *(const float *)(U_t + CHAIN_COLUMNS * CHUNK);
        update_state(S, warp, decay, keys_t, Vnew_t, KP); /* eq. 15 */
        barrier_arrive(&empty[s]); /* this thread has read the slot: W, U_t, keys_t, the decay */
    }
    store_state(S, p, head, column0, warp, ht);
}
