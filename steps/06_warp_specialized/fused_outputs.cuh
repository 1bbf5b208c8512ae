/* fused_outputs.cuh -- at K = V = 128, kernel 3's work inside the chain's block: output warps,
 * and the chain's products, by wgmma.
 *
 * o's formula (eq. 14) needs a chunk's S0 and Vnew, and a chain block of 8 tiles holds a
 * head's whole state at K = V = 128, so both are on the SM already, in the chain's staging
 * tiles. Eight output warps in the same block make o there (chunk_outputs_role): S0^T and
 * Vnew^T never go to global memory and back, and kernel 3 does not run. They make it by wgmma
 * (sm_90a), which reads each operand once for a warpgroup's 64 rows; the chain's warps in
 * that block use wgmma too (chain_states_role) and make Vnew from v (eq. 13 regrouped), so
 * kernel 1 writes only the transform block. Each role waits on mbarriers and named barriers
 * of its own; setmaxnreg gives each warpgroup the registers its role needs.
 *
 * Cost per chunk: the chain's K S0, Tm Z and K^T (diag(d) Vnew) (8 + 4 + 4 wgmma a warpgroup),
 * the output warps' Q K^T, Q S0 and P Vnew (8 + 8 + 4 a warpgroup); the step is serial, and
 * the output warps' path sets its pace. These blocks run where they give 70 % of the SMs a
 * block (widest_blocks_percent). Budget: docs/06, "06e: output warps in the chain's block".
 *
 * Included by warp_specialized.cuh.
 */
#pragma once
/* ---- output warps in the chain's block (OUTPUTS): kernel 3's work where S0^T and Vnew^T are ----
 * Warps 0 .. 7 the chain (two warpgroups: chain_states_role), 8 .. 15 the output warps (two
 * warpgroups of 64 columns of o: chunk_outputs_role), 16 .. 19 the producer's warpgroup (a
 * lane of 16 brings the transform block and the decay, a lane of 17 q, k and v and takes o
 * out, each slot's two parts on barriers of their own; the other two warps leave at once).
 * S0^T and Vnew^T are staged in wgmma's swizzled layout, and q, k and v come swizzled by the
 * TMA unit. Registers by warpgroup (setmaxnreg, from OUTPUT_START_REGISTERS): the chain's, the
 * output warps' (every address made where it is used: made_here) and the producer's sum to
 * the block's; each role returns where it ends (below). Shared memory: output_block_bytes. */
enum { OUTPUT_WARPS = 8, OUTPUT_PRODUCER_WARP = 16, OUTPUT_BLOCK_THREADS = 640, OUTPUT_CHAIN_REGISTERS = 152, OUTPUT_ROLE_REGISTERS = 72,
       OUTPUT_PRODUCER_REGISTERS = 32, OUTPUT_STAGES = 2 /* the ring's slots: two fit */ };
/* the states output warps make o for: a whole head's in one block of MAX_CHAIN_TILES tiles,
   K = V = 128 (chunk_outputs_role's SIZE) */
__host__ __device__ constexpr bool output_warps_shape(size_t K, size_t V) { return K == 16 * MAX_CHAIN_TILES && V == 16 * MAX_CHAIN_TILES; }
/* every thread's registers at launch: 65,536 / 640, in whole units of 8 */
constexpr int OUTPUT_START_REGISTERS = 65536 / OUTPUT_BLOCK_THREADS / 8 * 8;
static_assert((int)OUTPUT_PRODUCER_WARP == (int)MAX_CHAIN_TILES + (int)OUTPUT_WARPS, "warps: the chain's, the output warps, the producer");
/* setmaxnreg.inc waits for registers the block's other warpgroups gave back: a block never has
   more than it was launched with, so the roles' budgets must fit that (docs/06, "Pitfalls") */
static_assert(OUTPUT_CHAIN_REGISTERS * 256 + OUTPUT_ROLE_REGISTERS * 32 * OUTPUT_WARPS + OUTPUT_PRODUCER_REGISTERS * 128
                  <= OUTPUT_START_REGISTERS * OUTPUT_BLOCK_THREADS,
              "the warpgroups' registers fit the block's");

/* setmaxnreg is sm_90a's, not sm_90's: nvcc -arch=sm_90a also compiles a compute_90 PTX, in
   which the OUTPUTS kernel is a trap (an H200 runs the sm_90a code) */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
constexpr bool HAVE_SETMAXNREG = true;
#else
constexpr bool HAVE_SETMAXNREG = false;
#endif
/* the register budget of this thread's warpgroup (PTX "setmaxnreg"): .inc or .dec, picked from
   the two counts, since an .inc to fewer registers than the warps hold is undefined (docs/06,
   "Pitfalls"). Every warp of the warpgroup executes it; an increase waits for free registers */
template <int REGISTERS> __device__ __forceinline__ static void set_max_registers(void)
{
    if constexpr (HAVE_SETMAXNREG && REGISTERS > OUTPUT_START_REGISTERS)
        increase_registers<REGISTERS>();
    else if constexpr (HAVE_SETMAXNREG && REGISTERS < OUTPUT_START_REGISTERS)
        decrease_registers<REGISTERS>();
}
/* Beside kernel 1 (kernel1_beside_chain), a chunk from w.ready_from on may not be written yet:
   wait for its flag, an acquire at GPU scope, so that what kernel 1 wrote before its release
   is seen; elsewhere (w.ready NULL) kernel 1 ended before this kernel began */
__device__ __forceinline__ static void wait_until_prepared(const chunk_workspace &w, size_t head, size_t chunks, size_t chunk)
{
    if (!w.ready || chunk < w.ready_from)
        return;
    const unsigned *flag = w.ready + head * chunks + chunk;
    while (!load_acquire_gpu(flag))
        __nanosleep(64);
}
/* the output warps' own barrier (barrier 1; __syncthreads is barrier 0) */
__device__ __forceinline__ static void output_warps_sync(void) { named_barrier_sync<1, 32 * OUTPUT_WARPS>(); }

/* ---- the output warps' wgmma: common/wgmma.cuh (the swizzle, the descriptors, the instructions) ---- */
constexpr int OUTPUT_TILE = CHUNK * 16 * MAX_CHAIN_TILES; /* bf16 of a q or k tile, 64 tokens x 128 keys */
/* The block's shared memory, each part from a 1024-byte boundary for wgmma's swizzled tiles:
 * the ring of OUTPUT_STAGES slots, each a chunk's transform block and decay, and their full
 * and empty barriers; the output warps' P tile (64 x 64 bf16); the staging tiles of S0^T and
 * Vnew^T; for each slot the chunk's q, k and v tiles (OUTPUT_TILE bf16 each), then their
 * barriers (output_barriers) and two chunks' gamma. */
constexpr int OUTPUT_TILES_PER_SLOT = 3; /* q, k, v */
__host__ __device__ static inline size_t output_slot_bytes(void) { return (TRANSFORM_BYTES + 4 * sizeof(float) + 1023) / 1024 * 1024; }
__host__ __device__ static inline size_t output_ring_bytes(void)
{
    return OUTPUT_STAGES * output_slot_bytes() + 2 * (size_t)OUTPUT_STAGES * sizeof(uint64_t);
}
__host__ __device__ static inline size_t output_p_tile_offset(void) { return (output_ring_bytes() + 1023) / 1024 * 1024; }
__host__ __device__ static inline size_t output_staging_offset(void) { return output_p_tile_offset() + (size_t)CHUNK * CHUNK * sizeof(bf16); }
__host__ __device__ static inline size_t output_tiles_offset(void)
{
    return (output_staging_offset() + chain_staging_bytes(16 * MAX_CHAIN_TILES, false, MAX_CHAIN_TILES) + 1023) / 1024 * 1024;
}
__host__ __device__ static inline size_t output_block_bytes(void)
{
    return 1024 + output_tiles_offset() + OUTPUT_TILES_PER_SLOT * (size_t)OUTPUT_STAGES * OUTPUT_TILE * sizeof(bf16) +
           (3 + 2 * (size_t)OUTPUT_STAGES) * sizeof(uint64_t) + 2 * CHUNK * sizeof(double);
}
/* the swizzled S0^T (128 x 128) and Vnew^T (128 x 64) fit the staging tiles from a 1024-byte boundary */
static_assert((16 * MAX_CHAIN_TILES) * (16 * MAX_CHAIN_TILES + CHUNK) * 2 <=
                  MAX_CHAIN_TILES * 16 * (16 * MAX_CHAIN_TILES + KEY_STRIDE_PADDING + TOKEN_STRIDE) * 2,
              "the output warps' operands fit the staging tiles");
/* The barriers after the slots' q, k and v tiles: tiles_full and tiles_empty a slot, staged_full,
 * states_free, values_free; at a constant from the tiles, so that no register holds each */
__device__ __forceinline__ static uint64_t *output_barriers(bf16 *output_tiles)
{
    return (uint64_t *)(output_tiles + OUTPUT_TILES_PER_SLOT * OUTPUT_STAGES * OUTPUT_TILE);
}

/* The output warps' loop over the block's chunks, by wgmma. Output warpgroup h (warps 8 .. 11,
 * 12 .. 15) takes columns 64 h .. + 63 of the chunk's o, all 64 rows (warp r of it rows 16 r
 * .. + 15, as wgmma's accumulators), K = V = 128:
 *     P = lower(Q K^T exp(gamma_i - gamma_j)), o = scale (exp(gamma) Q S0 + P Vnew)    (eq. 14)
 * Warpgroup h makes tokens 32 h .. + 31 of P for all 64 rows, masks and scales them into the
 * swizzled P tile, and after one barrier each warpgroup reads all of P as P Vnew's A: P is
 * made once. wgmma reads each operand once for 64 rows, where mma.sync warps read S0^T and
 * Vnew^T once per 16 (docs/06, "06e: output warps in the chain's block"); a 64-row product
 * has no zero blocks to skip.
 * Per chunk: wait for the slot's q and k, make P, wait for the staging tiles, add Q S0 and
 * let the chain write the next S0^T (states_free), then P Vnew and let it write the next
 * Vnew^T (values_free); o goes into the warp's part of the q tile once every output warp has
 * read q, and the producer's q lane stores it out by tensor stores, so that no output warp
 * spends a load or store on o. */
template <bool BESIDE> /* kernel 1 beside the chain: chunks may have to be waited for (wait_until_prepared) */
__device__ static void chunk_outputs_role(const gdn_device_problem &p, const chunk_workspace &w, size_t head, size_t first, size_t end,
                                          unsigned char *slots)
{
    bf16 *const output_tiles = (bf16 *)(slots + output_tiles_offset());
    uint64_t *const tiles_full = output_barriers(output_tiles), *const tiles_empty = tiles_full + OUTPUT_STAGES, *const staged_full = tiles_empty + OUTPUT_STAGES;
    uint64_t *const states_free = staged_full + 1, *const values_free = staged_full + 2;
    constexpr int SIZE = 16 * MAX_CHAIN_TILES; /* K = V = SIZE: output_warps_shape */
    const int output_warp = (int)(threadIdx.x / 32) - MAX_CHAIN_TILES, half = output_warp / 4; /* half: the warpgroup */
    const int tile_row = 16 * (output_warp % 4);
    const int output_thread = (int)threadIdx.x - 32 * MAX_CHAIN_TILES; /* 0 .. 32 OUTPUT_WARPS - 1 */
    const int column0 = half * (SIZE / 2);                                   /* this warpgroup's columns of o */
    double *gamma_buffers = (double *)(staged_full + 3); /* [2][CHUNK]: chunks j and j + 1 */
    /* lanes 0 .. 63 of the output warps bring one gamma each, a chunk ahead */
    const auto gamma_of = [&](size_t chunk) {
        const size_t t = chunk * CHUNK + (size_t)output_thread;
        if (!(output_thread < CHUNK && chunk < end && t < p.T))
            return 0.0;
        if constexpr (BESIDE)
            wait_until_prepared(w, head, chunks_of(p.T), chunk);
        return w.gamma[head * p.T + t];
    };
    double gamma_next = gamma_of(first);
    for (unsigned chunk = (unsigned)first; chunk < (unsigned)end; chunk++) {
        const unsigned j = chunk - (unsigned)first;
        const size_t t0 = (size_t)chunk * CHUNK;
        const int s = (int)(j % (unsigned)OUTPUT_STAGES), n = (int)(p.T - t0 < CHUNK ? p.T - t0 : CHUNK);
        double *gamma = gamma_buffers + (j & 1) * CHUNK;
        if (output_thread < CHUNK)
            gamma[output_thread] = gamma_next;
        output_warps_sync(); /* gamma is here; chunk j - 2's reads of its buffer are done */
        /* every address from here, so that none is carried across chunks in a register (made_here) */
        unsigned char *const here = (unsigned char *)made_here((const bf16 *)slots);
        bf16 *const q = (bf16 *)(here + output_tiles_offset()) + OUTPUT_TILES_PER_SLOT * s * OUTPUT_TILE;
        const bf16 *const k = q + OUTPUT_TILE;
        bf16 *const p_tile = (bf16 *)(here + output_p_tile_offset());
        const bf16 *const states_tile = (const bf16 *)(here + output_staging_offset()), *const values_tile = states_tile + SIZE * SIZE;
        const int upper = made_here(fragment_row(tile_row, 0)), lower = upper + 8; /* this lane's two rows */
        const int pair = made_here(fragment_column(0, 0, 0));                      /* and its columns' offset */
        barrier_wait(&tiles_full[s], (uint32_t)((j / OUTPUT_STAGES) & 1)); /* q, k (and v) */

        /* P = lower(Q K^T e^(gamma_i - gamma_l)): this warpgroup's 32 tokens of all 64 rows,
           into the P tile (swizzled), which both warpgroups then read as P Vnew's A */
        {
            const int token0 = half * (CHUNK / 2);
            float scores[CHUNK / 2 / 8][4];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < SIZE / 16; kk++)
                wgmma_64x32x16(scores, descriptor_here(q + swizzled_offset(CHUNK, 0, 16 * kk)),
                               descriptor_here(k + swizzled_offset(CHUNK, token0, 16 * kk)), kk > 0);
            /* e^(gamma_i - gamma_l) = 2^(gamma_i log2 e - gamma_l log2 e): the exponents of this lane's
               two rows and eight tokens in float, made while the products run (gamma is summed within
               the chunk, so they are small), then one 2^x an element */
            const float row_exponent[2] = {(float)(gamma[upper] * LOG2_E), (float)(gamma[lower] * LOG2_E)};
            float token_exponent[CHUNK / 2 / 8][2];
#pragma unroll
            for (int jj = 0; jj < CHUNK / 2 / 8; jj++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    token_exponent[jj][e] = (float)(gamma[token0 + 8 * jj + pair + e] * LOG2_E);
            wgmma_commit_and_wait();
            /* this lane's first place in its two rows; token pieces jj further by XOR (swizzled_address) */
            const uint32_t p_upper = made_here(swizzled_address(p_tile, CHUNK, upper, token0 + pair)); /* the lower row: 1024 bytes on */
#pragma unroll
            for (int jj = 0; jj < CHUNK / 2 / 8; jj++)
#pragma unroll
                for (int r = 0; r < 4; r += 2) {
                    const int i = r < 2 ? upper : lower, l = token0 + 8 * jj + pair;
                    float exact[2];
#pragma unroll
                    for (int e = 0; e < 2; e++) /* only l <= i: exponents <= 0 */
                        exact[e] = l + e <= i && i < n ? scores[jj][r + e] * exp2_approx(row_exponent[r / 2] - token_exponent[jj][e]) : 0.0f;
                    store_shared((p_upper ^ (jj << 4)) + (r < 2 ? 0 : 8 * 128), pack_bf16(exact[0], exact[1]));
                }
            fence_shared_for_bulk_store(); /* for the other warpgroup's wgmma: the async proxy reads P */
            output_warps_sync();           /* P is whole */
        }
        /* the next chunk's gamma, from global memory: loaded here, Q S0, P Vnew and o's stores hide
           its latency (docs/06, "06e: output warps in the chain's block") */
        gamma_next = gamma_of(chunk + 1);
        float acc[SIZE / 2 / 8][4];
        barrier_wait(staged_full, (uint32_t)(j & 1)); /* S0^T and Vnew^T of this chunk */
        /* Q S0: B^T is this warpgroup's 64 rows of S0^T */
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < SIZE / 16; kk++)
            wgmma_64x64x16(acc, descriptor_here(q + swizzled_offset(CHUNK, 0, 16 * kk)),
                           descriptor_here(states_tile + swizzled_offset(SIZE, column0, 16 * kk)), kk > 0);
        /* the rows' decays while the products run, without a branch there (gamma is 0 past T) */
        const float row_decay[2] = {expf((float)gamma[upper]), expf((float)gamma[lower])};
        const float decay_upper = upper < n ? row_decay[0] : 0.0f, decay_lower = lower < n ? row_decay[1] : 0.0f;
        wgmma_commit_and_wait();
        barrier_arrive(states_free);
#pragma unroll
        for (int jj = 0; jj < SIZE / 2 / 8; jj++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                acc[jj][r] *= r < 2 ? decay_upper : decay_lower;
        /* + P Vnew: A from the P tile, B^T this warpgroup's 64 rows of Vnew^T */
        wgmma_fence_operands(acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < CHUNK / 16; kk++)
            wgmma_64x64x16(acc, descriptor_here(p_tile + swizzled_offset(CHUNK, 0, 16 * kk)),
                           descriptor_here(values_tile + swizzled_offset(SIZE, column0, 16 * kk)), 1);
        wgmma_commit_and_wait();
        barrier_arrive(values_free);
        /* o in bf16 into this warp's 16 rows and 64 columns of the q tile (swizzled), once every
           output warp is done reading q (one barrier); the q and k lane stores the tile out */
        output_warps_sync();
        const uint32_t o_upper = made_here(swizzled_address(q, CHUNK, upper, column0 + pair));
#pragma unroll
        for (int jj = 0; jj < SIZE / 2 / 8; jj++)
#pragma unroll
            for (int r = 0; r < 4; r += 2)
                store_shared((o_upper ^ (jj << 4)) + (r < 2 ? 0 : 8 * 128), pack_bf16(p.scale * acc[jj][r], p.scale * acc[jj][r + 1]));
        fence_shared_for_bulk_store(); /* o goes out by the TMA unit, and the slot's next q and k come by it */
        barrier_arrive(&tiles_empty[s]);
    }
}

/* a chain warpgroup's own barrier (barriers 2 and 3; 1 is the output warps') */
__device__ __forceinline__ static void chain_warpgroup_sync(int warpgroup)
{
    if (warpgroup == 0) /* the barrier's number as a constant (sync.cuh) */
        named_barrier_sync<2, 128>();
    else
        named_barrier_sync<3, 128>();
}

/* The chain's two warpgroups with output warps (K = V = 128), by wgmma. The state is kept
 * transposed, S^T, as the accumulators of one m64n128 product a warpgroup: warpgroup h holds
 * state columns 64 h .. + 63, its warp w columns 16 w .. + 15, lane 4g + t rows (columns of
 * S) 16 w + g and + 8 and keys 8 j + 2t, + 1. Vnew is made from v (eq. 13 regrouped):
 *     Vnew = U - W S0 = Tm Z,   Z = diag(beta) V - diag(beta e^gamma) K S0
 * so the chain reads v's tile beside the q and k tiles it shares with the output warps. Per
 * chunk:
 *     Y^T = S0^T K^T               8 m64n64k16, A = S0^T in bf16 from the staging tile the
 *                                  chain writes for the output warps anyway; B = the k tile
 *     Z^T = V^T diag(beta) - Y^T diag(beta e^gamma)   in fp32; V^T's pairs by ldmatrix.trans
 *     Vnew^T = Z^T + Z^T lower(Tm)^T   4 m64n64k16: D starts as Z^T (Tm's diagonal of ones,
 *                                  in fp32), A = Z^T in bf16 from the registers, B = Tm
 *     S^T = decay S^T + (Vnew^T diag(d)) K      4 m64n128k16, A from Vnew^T's accumulators
 *                                  scaled by d, B = the k tile read N-major
 * S0^T and Vnew^T go to the staging tiles, where chunk_outputs_role reads them. */
__device__ static void chain_states_role(const gdn_device_problem &p, const chain_segments &segments, size_t head, size_t segment,
                                         size_t first, size_t end, unsigned char *slots, int stages)
{
    constexpr int SIZE = 16 * MAX_CHAIN_TILES; /* K = V = SIZE: output_warps_shape */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int column0 = 16 * warp, warpgroup = warp / 4; /* this warp's state columns */
    const int slot_bytes = (int)output_slot_bytes();
    uint64_t *const full = (uint64_t *)(slots + stages * slot_bytes), *const empty = full + stages;
    bf16 *const output_tiles = (bf16 *)(slots + output_tiles_offset());
    uint64_t *const tiles_full = output_barriers(output_tiles), *const tiles_empty = tiles_full + stages;
    uint64_t *const staged_full = tiles_empty + stages, *const states_free = staged_full + 1, *const values_free = staged_full + 2;
    bf16 *const states_staged = (bf16 *)(slots + output_staging_offset()), *const values_staged = states_staged + SIZE * SIZE;
    const size_t P = segments.count, K = p.K, V = p.V;

    float S[SIZE / 8][4]; /* S^T: rows column0 + g (+ 8), keys 8 j + 2t (+ 1) */
#pragma unroll
    for (int j = 0; j < SIZE / 8; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int c = column0 + g + 8 * (r / 2), m = 8 * j + 2 * t + r % 2;
            S[j][r] = segments.starts ? segments.starts[((head * P + segment) * K + m) * V + c] : 0.0f;
        }
    /* step j reads slot s = j % stages on pass j / stages: counted (chain_block's consumers) */
    const int steps = (int)(end - first);
    for (int j = 0, s = 0, pass = 0; j < steps; j++) {
        const unsigned char *slot = slots + s * slot_bytes;
        const bf16 *const Tm = (const bf16 *)slot; /* the transform block */
        const float *const beta = (const float *)(slot + TRANSFORM_TM_BYTES), *const scaled_beta = beta + CHUNK, *const d = beta + 2 * CHUNK;
        const bf16 *const key_tile = output_tiles + (OUTPUT_TILES_PER_SLOT * s + 1) * OUTPUT_TILE, *const value_tile = key_tile + OUTPUT_TILE;
        barrier_wait(&full[s], (uint32_t)pass & 1);
        if (j > 0) /* the output warps have read the last chunk's S0^T */
            barrier_wait(states_free, (uint32_t)((j - 1) & 1));
        /* S0^T in bf16 into the staging tile: the output warps' S0^T and the A of Y's products
           (held in registers beside S and Vnew, its fragments would make ptxas serialize them) */
        const uint32_t states_row = swizzled_address(states_staged, SIZE, column0 + g, 2 * t); /* piece jj % 8: XOR (swizzled_address) */
#pragma unroll
        for (int jj = 0; jj < SIZE / 8; jj++) {
            const uint32_t at = (states_row ^ (jj % 8 << 4)) + jj / 8 * SIZE * 128; /* the second panel: SIZE rows of 128 bytes on */
            store_shared(at, pack_bf16(S[jj][0], S[jj][1]));
            store_shared(at + 8 * 128, pack_bf16(S[jj][2], S[jj][3])); /* row + 8 */
        }
        /* Y^T = S0^T K^T, once the warpgroup's four warps have written their S0^T rows (and the
           async proxy, which wgmma reads by, sees them) and the k and v tiles are here */
        barrier_wait(&tiles_full[s], (uint32_t)pass & 1);
        fence_shared_for_bulk_store();
        chain_warpgroup_sync(warpgroup);
        float values[CHUNK / 8][4];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < SIZE / 16; kk++)
            wgmma_64x64x16(values, descriptor_here(states_staged + swizzled_offset(SIZE, 64 * warpgroup, 16 * kk)),
                           descriptor_here(key_tile + swizzled_offset(CHUNK, 0, 16 * kk)), kk > 0);
        /* V^T's pairs while the products run: ldmatrix.trans of an 8 x 8 block of v (8 tokens x 8
           columns) hands lane 4g + t column g, tokens 2t, 2t + 1, as the accumulators hold Y^T;
           matrix m of a load: tokens 8 (2 i + m / 2), columns column0 + 8 (m % 2) */
        uint32_t value_pairs[CHUNK / 16][4]; /* [i][m] */
#pragma unroll
        for (int i = 0; i < CHUNK / 16; i++) {
            const int m = lane / 8, token = 16 * i + 8 * (m / 2) + lane % 8;
            load_matrices_transposed(value_pairs[i], value_tile + swizzled_offset(CHUNK, token, column0 + 8 * (m % 2)));
        }
        wgmma_commit_and_wait();
        wgmma_fence_operands(values); /* read only after the wait */
        /* Z^T, in fp32 (the start of Vnew^T's sums) and in bf16 pairs (their A: jj and jj + 1 of
           a 16-token step, as the update's A below) */
        uint32_t z[CHUNK / 16][4];
#pragma unroll
        for (int jj = 0; jj < CHUNK / 8; jj++) {
            const int token = 8 * jj + 2 * t;
            const float beta0 = beta[token], beta1 = beta[token + 1], scaled0 = scaled_beta[token], scaled1 = scaled_beta[token + 1];
#pragma unroll
            for (int half = 0; half < 2; half++) { /* rows g, g + 8: columns column0 + g, + 8 */
                const uint32_t pair = value_pairs[jj / 2][2 * (jj % 2) + half];
                const __nv_bfloat162 two = *(const __nv_bfloat162 *)&pair;
                values[jj][2 * half] = beta0 * __low2float(two) - scaled0 * values[jj][2 * half];
                values[jj][2 * half + 1] = beta1 * __high2float(two) - scaled1 * values[jj][2 * half + 1];
                z[jj / 2][2 * (jj % 2) + half] = pack_bf16(values[jj][2 * half], values[jj][2 * half + 1]);
            }
        }
        /* Vnew^T = Z^T + Z^T lower(Tm)^T */
        wgmma_fence_operands(values);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < CHUNK / 16; kk++)
            wgmma_64x64x16_a_in_registers<1, false>(values, z[kk], descriptor_here(Tm + swizzled_offset(CHUNK, 0, 16 * kk)), 1);
        wgmma_commit_and_wait();
        wgmma_fence_operands(values);
        if (j > 0) /* and its Vnew^T */
            barrier_wait(values_free, (uint32_t)((j - 1) & 1));
        /* Vnew^T in bf16 for the output warps, and scaled by d (a token a column) as the update's A */
        uint32_t scaled[CHUNK / 16][4];
        const uint32_t values_row = swizzled_address(values_staged, SIZE, column0 + g, 2 * t);
#pragma unroll
        for (int jj = 0; jj < CHUNK / 8; jj++) {
            const int token = 8 * jj + 2 * t;
            const float d0 = d[token], d1 = d[token + 1];
            store_shared(values_row ^ (jj << 4), pack_bf16(values[jj][0], values[jj][1]));
            store_shared((values_row ^ (jj << 4)) + 8 * 128, pack_bf16(values[jj][2], values[jj][3]));
            scaled[jj / 2][2 * (jj % 2)] = pack_bf16(values[jj][0] * d0, values[jj][1] * d1);
            scaled[jj / 2][2 * (jj % 2) + 1] = pack_bf16(values[jj][2] * d0, values[jj][3] * d1);
        }
        fence_shared_for_bulk_store(); /* the output warps' wgmma reads S0^T and Vnew^T by the async proxy */
        barrier_arrive(staged_full);
        const float decay = *(const float *)(slot + TRANSFORM_BYTES);
        barrier_arrive(&empty[s]); /* the transform block and the decay are read */
#pragma unroll
        for (int jj = 0; jj < SIZE / 8; jj++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                S[jj][r] *= decay;
        wgmma_fence_operands(S);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < CHUNK / 16; kk++)
            wgmma_64x128x16_a_in_registers<1, true>(S, scaled[kk], descriptor_n_major_here(key_tile + 16 * kk * 64, CHUNK), 1);
        wgmma_commit_and_wait();
        wgmma_fence_operands(S);
        barrier_arrive(&tiles_empty[s]); /* this thread has read the k and v tiles */
        if (++s == stages) {
            s = 0;
            pass++;
        }
    }
    if (segment + 1 != P)
        return;
#pragma unroll
    for (int j = 0; j < SIZE / 8; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int c = column0 + g + 8 * (r / 2), m = 8 * j + 2 * t + r % 2;
            segments.ends[(head * K + m) * V + c] = S[j][r];
        }
}

/* Kernel 2 with output warps: one block a (head, segment), the whole state of K = V = 128 and
 * the chunk's o. Tensor maps of o (bf16), q, k and v. BESIDE: kernel 1 runs beside it
 * (kernel1_beside_chain), so it waits for each chunk's flag from w.ready_from. An entry of its
 * own, so that it leaves the other chain kernels' machine code alone (docs/06, "Pitfalls"). */
template <bool BESIDE>
static __global__ void __launch_bounds__(OUTPUT_BLOCK_THREADS, 1)
    chunk_states_outputs_kernel(gdn_device_problem p, chunk_workspace w, chain_segments segments, int stages,
                                const __grid_constant__ CUtensorMap o_map, const __grid_constant__ CUtensorMap q_map,
                                const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map, bf16 *o16)
{
    if constexpr (!HAVE_SETMAXNREG) { /* the compute_90 PTX: never run on an H200 */
        __trap();
        return;
    }
    extern __shared__ uint4 ring[];
    const int K = (int)p.K, VP = round_up16(p.V);
    const int consumers = MAX_CHAIN_TILES, block_columns = 16 * MAX_CHAIN_TILES; /* the chain's warps, 0 .. consumers - 1 */
    const size_t V = p.V, chunks = chunks_of(p.T);
    chain_place at = place_chain_block(segments, chunks, VP, block_columns);
    end_at_real_tokens(at, w, p.H, p.T);
    const size_t segment = at.segment, head = at.head, first = at.first, end = at.end;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int slot_bytes = (int)output_slot_bytes();
    const size_t block_bytes = chain_block_bytes(p.K, V, false);
    const unsigned char *blocks = w.chain + head * chunks * block_bytes;
    /* from a 1024-byte boundary, for the swizzled tiles (output_tiles) */
    unsigned char *slots = SHARED_AT_1024_BYTES(ring);
    uint64_t *full = (uint64_t *)(slots + stages * slot_bytes), *empty = full + stages;
    /* a slot's transform block (full, empty) is free once the chain has made Vnew, its q, k and
       v tiles (tiles_full, tiles_empty) once the output warps have made o and the chain its
       update; the hand-over between them: staging tiles written (staged_full), S0^T and Vnew^T
       read (states_free, values_free) */
    bf16 *const output_tiles = (bf16 *)(slots + output_tiles_offset());
    uint64_t *const tiles_full = output_barriers(output_tiles), *const tiles_empty = tiles_full + stages;
    uint64_t *const staged_full = tiles_empty + stages, *const states_free = staged_full + 1, *const values_free = staged_full + 2;

    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++) {
            barrier_init(&full[s], 1);
            barrier_init(&empty[s], 32 * consumers); /* the threads that read a slot's transform block */
            barrier_init(&tiles_full[s], 1);
            barrier_init(&tiles_empty[s], 32 * (consumers + OUTPUT_WARPS)); /* the threads that read its q or k */
        }
        barrier_init(staged_full, 32 * consumers);
        barrier_init(states_free, 32 * OUTPUT_WARPS);
        barrier_init(values_free, 32 * OUTPUT_WARPS);
        barrier_init_fence(); /* visible to the TMA unit */
    }
    __syncthreads(); /* the block's only barrier */
    wait_for_previous_kernel(); /* kernel 1's transform blocks */
    if (segments.outputs_early && threadIdx.x == 0)
        let_next_kernel_start();

    /* Each role returns where it ends: ptxas gives a role the budget set where it begins only
       if no role's code is reached from another's */
    if (warp >= OUTPUT_PRODUCER_WARP) { /* the producer's warpgroup */
        set_max_registers<OUTPUT_PRODUCER_REGISTERS>(); /* it gives registers back */
        if (warp == OUTPUT_PRODUCER_WARP + 1) { /* a lane of the next warp brings q, k and v (kernel 3's tensor copies) */
            const int b = (int)(head / p.H), h = (int)(head % p.H), key_head = h / (int)p.heads_per_key; /* q and k: its key head's */
            /* a chunk whose tile would pass its sequence's end (a packed batch's, where the next
               sequence lies): its o leaves by the warp's stores, its real rows alone, after the
               others. Asked where needed: a value held across the loop would spill at 32 registers */
            const auto partial_tile = [&](size_t c) { return w.row_offsets && (c + 1) * CHUNK > row_tokens(w, (size_t)b, p.T); };
            if (lane == 0) {
                const uint32_t key_tile_bytes = (uint32_t)(OUTPUT_TILE * sizeof(bf16));
                /* and takes o out: chunk c's o lies in its slot's q tile (swizzled) once tiles_empty
                   says the output warps and the chain are done; two tensor stores write it where
                   its inputs lie (input_tile_at; rows past T dropped), and once they have read the
                   tile the slot takes the next q */
                const auto store_o = [&](size_t c) {
                    if (partial_tile(c))
                        return;
                    const int s = (int)((c - first) % stages);
                    const token_coordinates out = input_tile_at(w, (size_t)b, c * CHUNK);
                    barrier_wait(&tiles_empty[s], (uint32_t)(((c - first) / stages) & 1));
                    for (int panel = 0; panel < 2; panel++)
                        tensor_store_3d(&o_map, h * (int)V + 64 * panel, out.t, out.b, output_tiles + OUTPUT_TILES_PER_SLOT * s * OUTPUT_TILE + panel * CHUNK * 64);
                    bulk_store_commit();
                    bulk_store_wait_read();
                };
                for (size_t chunk = first; chunk < end; chunk++) {
                    const size_t j = chunk - first;
                    const int s = (int)(j % stages);
                    if (j >= (size_t)stages) /* chunk j - stages's o out of the slot */
                        store_o(chunk - stages);
                    const token_coordinates in = input_tile_at(w, (size_t)b, chunk * CHUNK);
                    barrier_arrive_expecting(&tiles_full[s], OUTPUT_TILES_PER_SLOT * key_tile_bytes);
                    bf16 *const q_tile = output_tiles + OUTPUT_TILES_PER_SLOT * s * OUTPUT_TILE;
                    for (int panel = 0; panel < 2; panel++) { /* 64 keys (or values) each, swizzled by the maps */
                        tensor_copy_3d(q_tile + panel * CHUNK * 64, &q_map, key_head * K + 64 * panel, in.t, in.b, &tiles_full[s]);
                        tensor_copy_3d(q_tile + OUTPUT_TILE + panel * CHUNK * 64, &k_map, key_head * K + 64 * panel, in.t, in.b, &tiles_full[s]);
                        tensor_copy_3d(q_tile + 2 * OUTPUT_TILE + panel * CHUNK * 64, &v_map, h * (int)V + 64 * panel, in.t, in.b, &tiles_full[s]);
                    }
                }
                for (size_t chunk = end - first > (size_t)stages ? end - stages : first; chunk < end; chunk++) /* the last chunks' o */
                    store_o(chunk);
                bulk_store_wait(); /* o written before the block ends */
            }
            __syncwarp(); /* lane 0 has waited out the slot's earlier phase: the parity below is this one's */
            if (end > first && partial_tile(end - 1)) { /* only a row's last chunk: its real rows, 16 bytes (8 columns) a lane at a time */
                const size_t j = end - 1 - first;
                const int s = (int)(j % stages), n = (int)(row_tokens(w, (size_t)b, p.T) - (end - 1) * CHUNK);
                constexpr int PIECES = 16 * MAX_CHAIN_TILES / 8; /* a row's 16-byte pieces (V = 128) */
                barrier_wait(&tiles_empty[s], (uint32_t)((j / stages) & 1));
                const bf16 *const tile = output_tiles + OUTPUT_TILES_PER_SLOT * s * OUTPUT_TILE;
                bf16 *const o_rows = o16 + input_token(w, (size_t)b, p.T, (end - 1) * CHUNK, p.H, (size_t)h) * V; /* row i: i H V further */
                for (int e = lane; e < n * PIECES; e += 32) {
                    const int row = e / PIECES, column = 8 * (e % PIECES);
                    *(uint4 *)(o_rows + (size_t)row * p.H * V + column) = load_shared_16(swizzled_address(tile, CHUNK, row, column));
                }
            }
        }
        if (warp == OUTPUT_PRODUCER_WARP && lane == 0) { /* one lane brings each chunk's transform block (already swizzled) and the decay after it */
            for (size_t chunk = first; chunk < end; chunk++) {
                const size_t j = chunk - first;
                const int s = (int)(j % stages);
                if (j >= (size_t)stages) /* the chain's warps are done with chunk j - stages */
                    barrier_wait(&empty[s], (uint32_t)((j / stages - 1) & 1));
                unsigned char *slot = slots + s * slot_bytes;
                const unsigned char *block = blocks + chunk * block_bytes;
                if constexpr (BESIDE) {
                    wait_until_prepared(w, head, chunks, chunk);
                    fence_global_for_async_proxy(); /* kernel 1's stores, ordered by the flag, before the TMA unit's reads */
                }
                barrier_arrive_expecting(&full[s], (uint32_t)(TRANSFORM_BYTES + 16));
                bulk_copy(slot, w.transforms + (head * chunks + chunk) * TRANSFORM_BYTES, (uint32_t)TRANSFORM_BYTES, &full[s]);
                bulk_copy(slot + TRANSFORM_BYTES, block + chain_decay_offset(K, V, false), 16, &full[s]);
            }
        }
        return;
    }
    if (warp >= consumers) { /* the output warps */
        set_max_registers<OUTPUT_ROLE_REGISTERS>();
        chunk_outputs_role<BESIDE>(p, w, head, first, end, slots);
        return;
    }
    set_max_registers<OUTPUT_CHAIN_REGISTERS>(); /* the chain's two warpgroups, by wgmma */
    chain_states_role(p, segments, head, segment, first, end, slots, stages);
}
