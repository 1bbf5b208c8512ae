/* 06b_producer_consumer -- 06a's chain fed by a producer warp: a TMA ring on mbarriers.
 *
 * The idea (docs/06_warp_specialized.md, "06b: a producer warp and a TMA ring"): in 06a every
 * thread of the chain's block issues its share of each chunk's cp.async copies and then waits
 * at a block barrier, so the copies' issue and the ring's bookkeeping sit on the serial chain.
 * Here the block gets a fifth warp, the producer: one of its lanes brings each chunk's W, decayed
 * keys, the block's rows of U and the decay into a ring slot with three bulk copies
 * (cp.async.bulk: the TMA unit moves a contiguous piece in one instruction), and runs ahead as
 * far as the ring allows. Each slot has two mbarriers (common/bulk_copy.cuh):
 *   full:  the producer arrives once, saying how many bytes to expect; the phase completes when
 *          the copies' bytes have landed. The consumers wait on it instead of on cp.async.
 *   empty: every consumer thread arrives once it has read the slot; the producer waits on it
 *          before it refills the slot. Each reader arrives itself, so that its reads are ordered
 *          before the refill by its own release, not by a barrier it shares.
 * A barrier's phases alternate, and a waiter names the phase by its parity: chunk c uses slot
 * c % STAGES in its (c / STAGES)-th round, parity (c / STAGES) & 1. The four consumer warps keep
 * 06a's math and its two exchanges through shared memory (S0^T, Vnew^T), synchronised by a
 * named barrier of their 128 threads (bar.sync 1), which the producer never joins. Kernels 1 and
 * 3 (tensor_core_chunks.cuh) are 06a's, unchanged; the outputs are 06a's bit for bit.
 *
 * Cost: 06a's flops and bytes; the chain's step loses the copies' issue and one of its three
 * block barriers. Depth: T / 64 chunk steps of kernel 2, as in 06a.
 * Limits: K <= 128, chunk 64 (fixed), V and T any.
 *
 * Build and run:  make bin/06b_producer_consumer && bin/06b_producer_consumer --T 16384 --H 8 --check-against oracle
 * Measured: 2.66 ms at (8, 4096, 16, 128, 128), FLA's CUDA graph 1.02 ms, in one run on an NVIDIA
 * H100 80GB HBM3 (plots/data/stage06_series.dat).
 */
#include "../../common/bulk_copy.cuh" /* mbarriers and bulk copies (the TMA unit) */
#include "../../common/sync.cuh"      /* named_barrier_sync: the consumers' own barrier */
#include "tensor_core_chunks.cuh"       /* kernels 1 and 3, the products, the workspace: 06a's */

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
    return CHAIN_STAGES * chain_slot_bytes(K) + CHAIN_COLUMNS * (key_stride(K) + TOKEN_STRIDE) * sizeof(bf16);
}

static __global__ void __launch_bounds__(PRODUCER_CHAIN_THREADS, 1) chunk_states_kernel(gdn_device_problem p, chunk_workspace w, float *ht)
{
    extern __shared__ uint4 ring[];
    const int K = (int)p.K, KP = round_up16(p.K), LDK = key_stride(p.K), VP = round_up16(p.V);
    const size_t V = p.V, chunks = chunks_of(p.T), tiles_per_head = VP / CHAIN_COLUMNS;
    const size_t head = blockIdx.x / tiles_per_head, column0 = blockIdx.x % tiles_per_head * CHAIN_COLUMNS;
    const int warp = threadIdx.x / 32, slot_bytes = (int)chain_slot_bytes(p.K);
    const size_t block_bytes = chain_block_bytes(p.K, V);
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
        const uint32_t first = (uint32_t)chain_u_offset(K), rows = CHAIN_COLUMNS * CHUNK * sizeof(float);
        for (size_t chunk = 0; chunk < chunks; chunk++) {
            const int s = (int)(chunk % CHAIN_STAGES);
            if (chunk >= CHAIN_STAGES) /* the slot's last round has been read by every consumer */
                barrier_wait(&empty[s], (uint32_t)((chunk / CHAIN_STAGES - 1) & 1));
            const unsigned char *block = blocks + chunk * block_bytes;
            unsigned char *slot = slots + s * slot_bytes;
            barrier_arrive_expecting(&full[s], (uint32_t)slot_bytes);
            bulk_copy(slot, block, first, &full[s]);
            bulk_copy(slot + first, block + chain_u_offset(K) + column0 * CHUNK * sizeof(float), rows, &full[s]);
            bulk_copy(slot + first + rows, block + chain_decay_offset(K, V), 4 * sizeof(float), &full[s]);
        }
        return;
    }

    bf16 *states_t = w.states_t + head * chunks * VP * KP + column0 * KP;
    bf16 *new_values_t = w.new_values_t + head * chunks * VP * CHUNK + column0 * CHUNK;
    float S[2][2][4]; /* [m-tile of this warp][n-tile][sum]: load_state says which */
    load_state(S, p, head, column0, warp);

    for (size_t chunk = 0; chunk < chunks; chunk++) {
        const int s = (int)(chunk % CHAIN_STAGES);
        const unsigned char *slot = slots + s * slot_bytes;
        const bf16 *W = (const bf16 *)slot, *keys_t = (const bf16 *)(slot + chain_keys_offset(K));
        const float *U_t = (const float *)(slot + chain_u_offset(K));
        /* S0^T in bf16 (S_t was last read by the previous chunk's Vnew, before its second sync) */
        stage_state(S, warp, KP, LDK, S_t, states_t);
        states_t += VP * KP;
        barrier_wait(&full[s], (uint32_t)((chunk / CHAIN_STAGES) & 1)); /* the slot has landed */
        consumers_sync(); /* S_t complete; every warp is done with the last chunk's Vnew_t */

        make_new_values(warp, W, U_t, S_t, LDK, KP, Vnew_t, new_values_t); /* eq. 13 */
        new_values_t += VP * CHUNK;
        consumers_sync(); /* Vnew_t complete */

        const float decay = U_t[CHAIN_COLUMNS * CHUNK];
        update_state(S, warp, decay, keys_t, Vnew_t, KP); /* eq. 15 */
        barrier_arrive(&empty[s]); /* this thread has read the slot: W, U_t, keys_t, the decay */
    }
    store_state(S, p, head, column0, warp, ht);
}

static int producer_consumer_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    (void)s;
    const size_t chain_bytes = ring_barriers_offset(p->K) + 2 * CHAIN_STAGES * sizeof(uint64_t);
    return tensor_core_chunks_pass(p, r, "06b", chunk_states_kernel, PRODUCER_CHAIN_THREADS, chain_bytes);
}

extern "C" const gdn_stage producer_consumer_stage = {
    .name = "06b_producer_consumer",
    .idea = "06a with its chain fed by a producer warp: a TMA ring on full and empty mbarriers",
    .options = 0,
    .forward = NULL,
    .counted_flops = wy_chunked_flops,
    .resolve_options = tensor_core_chunks_resolve_options,
    .device_forward = producer_consumer_forward,
    .device_workspace_bytes = tensor_core_chunks_workspace,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 1,
};

