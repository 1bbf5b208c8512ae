/* 06a_tensor_cores -- stage 05's GPU kernels on tensor cores: bf16 inputs, fp32 sums.
 *
 * The idea (docs/06_warp_specialized.md, "06a: the products on tensor cores"): keep
 * 05_wy_chunked_cuda's split of eq. 9-15 (the state-independent work of every chunk in
 * parallel, only Vnew = U - W S0 and the state update on the serial chain), and do every
 * matrix product with mma.sync.m16n8k16 (common/mma_sync.cuh): a warp multiplies a 16 x 16
 * bf16 tile by a 16 x 8 one into 16 x 8 fp32 sums in one instruction, where stage 05 spent
 * 256 FMAs of its 32 lanes' time. Inputs q, k, v are bf16 (the driver rounds them, the
 * runner converts them untimed); gates, betas, h0, ht, the triangular solve and every sum
 * stay fp32 (gamma in double, as in 05). The chain's state lives in the registers of its MMA
 * accumulators for the whole sequence, and the chain's inputs arrive through a 3-slot
 * cp.async ring that every thread of the block fills and waits on. bin/06_warp_specialized
 * computes the same products and changes how they are fed and scheduled: a producer warp
 * filling a TMA ring, output warps and wgmma in the chain's block, Vnew made from v, and
 * launch rules measured on an H200.
 *
 * Where bf16 rounding enters (each a relative 2^-9 on one operand of a product, with fp32 sums):
 * the inputs; Tm and the scaled keys and values before W = Tm (beta e^gamma K) and U = Tm
 * (beta V) (FLA rounds the same two); the state S where it enters Vnew = U - W S, and Vnew where
 * it enters the state update and the output (the fp32 state itself is never rounded; FLA
 * stores it in bf16 between chunks); P = Q K^T e^(gamma_i - gamma_j) before P Vnew.
 *
 * Fragments (common/mma_sync.cuh): here each lane gathers its fragments itself, with 4-byte
 * loads of pairs (load_pair); B is kept transposed (N x K, K contiguous) in shared memory.
 * Row strides of K + 8 and 64 + 8 bf16 (K a multiple of 16) put the 32 lanes' pair loads in
 * 32 different banks: rows g differ by 4 banks, lanes t by 1.
 *
 * Cost: the flops of stage 05 (wy_chunked_flops), now on tensor cores; workspace per token:
 * gamma (double) and, per chunk, W and the decayed keys (bf16), U (fp32), S0 and Vnew (bf16).
 * Depth: T / 64 chunk steps of kernel 2, each two 64-deep MMA chains per warp.
 * Limits: K <= 128, chunk 64 (fixed), V and T any.
 *
 * Build and run:  make bin/06a_tensor_cores && bin/06a_tensor_cores --T 16384 --H 8 --check-against oracle
 * Measured: 2.89 ms at (8, 4096, 16, 128, 128), FLA's CUDA graph 1.02 ms, in one run on an NVIDIA
 * H100 80GB HBM3 (plots/data/stage06_series.dat).
 */
#include "tensor_core_chunks.cuh" /* kernels 1 and 3, the products, the workspace */

/* ---- kernel 2: one block per (head, 16 columns of S), 4 warps, serial over the chunks ----
 * The state tile S (K x 16) lives in the warps' MMA accumulators for the whole sequence:
 * warp w owns its rows 16 w .. and 16 (w + 4) .. (two m-tiles at K = 128), both 8-column
 * n-tiles. Per chunk:
 *   S0^T to shared memory in bf16 (B^T of the next product) and to the workspace (kernel 3)
 *   Vnew = U - W S0 (eq. 13)            warp w: token rows 16 w .., both n-tiles, depth K
 *   S = exp(gamma_C) S + Kdec^T Vnew    (eq. 15) into the accumulators, depth 64
 * The chunk's W, keys_t, U tile and decay come through a ring of CHAIN_STAGES slots, copied
 * with cp.async two chunks ahead, as in stage 05. */
__device__ static void fetch_chain_slot(unsigned char *slot, const unsigned char *block, size_t K, size_t V, size_t column0)
{
    const int shared16 = (int)(chain_u_offset(K) / 16), u16 = CHAIN_COLUMNS * CHUNK * (int)sizeof(float) / 16;
    const uint4 *from = (const uint4 *)block, *u = (const uint4 *)(block + chain_u_offset(K) + column0 * CHUNK * sizeof(float));
    uint4 *to = (uint4 *)slot;
#pragma unroll 4
    for (int e = threadIdx.x; e < shared16; e += CHAIN_THREADS)
        __pipeline_memcpy_async(to + e, from + e, 16);
    for (int e = threadIdx.x; e <= u16; e += CHAIN_THREADS)
        __pipeline_memcpy_async(to + shared16 + e, e < u16 ? u + e : from + chain_decay_offset(K, V) / 16, 16);
}

static __global__ void __launch_bounds__(CHAIN_THREADS, 1) chunk_states_kernel(gdn_device_problem p, chunk_workspace w, float *ht)
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
    bf16 *states_t = w.states_t + head * chunks * VP * KP + column0 * KP;
    bf16 *new_values_t = w.new_values_t + head * chunks * VP * CHUNK + column0 * CHUNK;

    float S[2][2][4]; /* [m-tile of this warp][n-tile][sum]: load_state says which */
    load_state(S, p, head, column0, warp);
    for (int ahead = 0; ahead < CHAIN_STAGES - 1; ahead++) {
        if ((size_t)ahead < chunks)
            fetch_chain_slot(slots + ahead * slot_bytes, blocks + ahead * block_bytes, K, V, column0);
        __pipeline_commit();
    }

    for (size_t chunk = 0; chunk < chunks; chunk++) {
        const unsigned char *slot = slots + chunk % CHAIN_STAGES * slot_bytes;
        const bf16 *W = (const bf16 *)slot, *keys_t = (const bf16 *)(slot + chain_keys_offset(K));
        const float *U_t = (const float *)(slot + chain_u_offset(K));
        __syncthreads(); /* the slot refilled next is no longer read; S_t and Vnew_t are free */
        const size_t next = chunk + CHAIN_STAGES - 1;
        if (next < chunks)
            fetch_chain_slot(slots + next % CHAIN_STAGES * slot_bytes, blocks + next * block_bytes, K, V, column0);
        __pipeline_commit();

        /* S0^T in bf16: here for Vnew, in the workspace for kernel 3 */
        stage_state(S, warp, KP, LDK, S_t, states_t);
        states_t += VP * KP;
        __pipeline_wait_prior(CHAIN_STAGES - 1);
        __syncthreads();

        make_new_values(warp, W, U_t, S_t, LDK, KP, Vnew_t, new_values_t); /* eq. 13 */
        new_values_t += VP * CHUNK;
        __syncthreads();

        const float decay = U_t[CHAIN_COLUMNS * CHUNK]; /* after the wait: it came with the slot */
        update_state(S, warp, decay, keys_t, Vnew_t, KP); /* eq. 15 */
    }
    store_state(S, p, head, column0, warp, ht);
}

static int tensor_cores_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    (void)s;
    const size_t chain_bytes = CHAIN_STAGES * chain_slot_bytes(p->K) + CHAIN_COLUMNS * (key_stride(p->K) + TOKEN_STRIDE) * sizeof(bf16);
    return tensor_core_chunks_pass(p, r, "06a", chunk_states_kernel, CHAIN_THREADS, chain_bytes);
}

extern "C" const gdn_stage tensor_cores_stage = {
    .name = "06a_tensor_cores",
    .idea = "stage 05 on tensor cores: bf16 inputs, mma.sync products, fp32 sums and state",
    .options = 0,
    .forward = NULL,
    .counted_flops = wy_chunked_flops,
    .resolve_options = tensor_core_chunks_resolve_options,
    .device_forward = tensor_cores_forward,
    .device_workspace_bytes = tensor_core_chunks_workspace,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 1,
};

