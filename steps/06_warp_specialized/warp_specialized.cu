/* 06_warp_specialized -- stage 05's GPU kernels on tensor cores: bf16 inputs, fp32 sums.
 *
 * The idea (docs/06_warp_specialized.md): keep 05_wy_chunked_cuda's split of eq. 9-15 (kernel
 * 1 does the state-independent work of every chunk in parallel, kernel 2 runs only Vnew = U -
 * W S0 and the state update on the serial chain, kernel 3 makes every chunk's o in parallel),
 * and do every matrix product on tensor cores: with mma.sync.m16n8k16 a warp multiplies a
 * 16 x 16 bf16 tile by a 16 x 8 one into 16 x 8 fp32 sums in one instruction. Inputs q, k, v
 * are bf16 (the driver rounds them, the runner converts them untimed); gates, betas, h0, ht,
 * the triangular solve and every sum stay fp32 (gamma in double, as in 05).
 * The chain is warp-specialized: a producer warp fills a ring of shared-memory slots by bulk
 * copies (the TMA unit) counted on mbarriers, and consumer warps keep S in their MMA
 * accumulators for the whole sequence, with no block barrier in the loop. At K = V = 128 one
 * block holds a head's whole state, and output warps in it make o by wgmma from the S0^T and
 * Vnew^T the chain leaves in shared memory, so neither goes through global memory and kernel 3
 * does not run. Where it pays the chain makes Vnew from v,
 *     Vnew = U - W S0 = Tm Z,   Z = diag(beta) V - diag(beta e^gamma) K S0   (eq. 13 regrouped)
 * so kernel 1 writes only Tm and its factors, and where the fused blocks leave enough SMs
 * idle it runs beside the chain. The chain kernel also runs a sequence as segments, each from
 * its own start state (one here).
 *
 * Precision: each bf16 rounding is a relative 2^-9 on one operand of a product, summed in
 * fp32; the state itself is never rounded, and o is written in bf16 as FLA writes it. --precise
 * splits the computed operands W, S, Vnew, S0 and P into two bf16 terms each, x = bf16(x) +
 * bf16(x - bf16(x)), and adds the cross products. Where each rounding enters, the errors
 * measured and what --precise costs: docs/06, "Precision".
 *
 * Read in this order (warp_specialized.cuh includes them):
 *   ../../common/mma_sync.cuh  ldmatrix, movmatrix and mma.sync (bf16, tf32): the fragments
 *   ../../common/fast_exp.cuh  exp2_approx, exp_approx: e^x by ex2.approx
 *   tile_products.cuh          the constants, a warp's products, copy_tile
 *   chunk_workspace.cuh        the workspace between the kernels, the chain block's layout
 *   prepare_chunks.cuh         kernel 1: gates, K K^T, the solve, W and U or the transform block
 *   chain_ring.cuh             kernel 2's structure: the ring, segments, sizes, fragment helpers
 *   fused_outputs.cuh          the block with output warps at K = V = 128: its roles (wgmma), its kernel
 *   chain.cuh                  chain_block, its producer and update, and the two other chain kernels
 *   chunk_outputs.cuh          kernel 3: o where the output warps do not make it
 *   launch_rules.cuh           host: tensor maps, block shapes, the launch choices
 *   warp_specialized.cu        this file: kernel 1 beside the chain, the passes, the stage
 *
 * Cost: the flops of stage 05 (wy_chunked_flops), on tensor cores (from v one 64 x 64 x V
 * product a chunk fewer: W's goes, U's becomes the chain's Tm Z); the workspace:
 * chunk_workspace.cuh. Bound: the chain's T / 64 steps where heads are few, each two 64-deep
 * MMA chains per warp (from v, Z and Tm's products lengthen it); bytes where they fill the GPU.
 * Grouped value heads (--HV): a chain a value head, its q and k rows those of the key head it
 * shares (tile_products.cuh: key_row, key_heads). A packed batch (--lengths): rows padded to the
 * longest sequence (packed_forward).
 * Limits: K <= 128, chunk 64 (fixed), V and T any.
 * On an NVIDIA H200 at (8, 4096, 16, 128, 128), about 3 times as fast as FLA's kernels replayed
 * from a CUDA graph (docs/06, "Measured"; plots/data/peers.dat).
 *
 * Build and run:  make bin/06_warp_specialized && bin/06_warp_specialized --T 16384 --H 8 --check-against oracle
 */
#include "warp_specialized.cuh"

/* Kernel 1 beside the chain (docs/06, "06: Vnew from v, and the launch rules"). Where the
 * fused blocks, one a head, leave SMs idle (heads between 70 % of the SMs and the SMs less
 * MIN_IDLE_SMS), kernel 1 runs in two launches: chunks 0 .. split - 1 of every head on every
 * SM first; then the fused kernel and the rest of kernel 1 at once, in two streams, the fused
 * kernel's of higher priority so that its blocks are placed first and kernel 1's second launch
 * takes the SMs they leave. That launch makes the chunks in the chain's order and flags each
 * (w.ready); the chain's producer and the output warps wait for a chunk's flag before they
 * read it (wait_until_prepared). Nothing can wait forever: kernel 1 waits for nothing, and it
 * is launched first, so that where kernels run one at a time (a sanitizer,
 * CUDA_LAUNCH_BLOCKING) it ends before the chain begins; were its blocks placed first after
 * all, the pass would only be as slow as the two launches in turn.
 * The split: the second launch makes a chunk of every head in heads / (idle SMs x
 * KERNEL1_CHUNKS_PER_SM_US) us, the chain one in CHAIN_STEP_US (both rates measured), so the
 * second launch falls behind by their ratio a chunk and must start where it falls no further
 * behind than the chain's end: split = chunks (1 - idle x rate x step / heads), plus
 * RAMP_CHUNKS, fitted to sweeps of the split. A split too early leaves the chain waiting for
 * flags, which costs more than the idle SMs of one too late. At least MIN_CHUNKS chunks: the
 * second launch, the events and the flags' memset cost more than shorter sequences repay. */
constexpr double KERNEL1_CHUNKS_PER_SM_US = 0.662, CHAIN_STEP_US = 3.24, RAMP_CHUNKS = 9.0;
constexpr size_t MIN_IDLE_SMS = 16, MIN_CHUNKS = 64;
/* the first chunk of kernel 1's second launch, or 0 where kernel 1 does not run beside the
   chain (warp_specialized.h; tested on its own, as host code) */
extern "C" size_t warp_specialized_kernel1_split(size_t heads, size_t chunks, size_t sms)
{
    if (chunks < MIN_CHUNKS || heads + MIN_IDLE_SMS > sms)
        return 0;
    const double behind = (double)(sms - heads) * KERNEL1_CHUNKS_PER_SM_US * CHAIN_STEP_US / (double)heads;
    const double split = behind >= 1.0 ? 0.0 : (double)chunks * (1.0 - behind);
    const size_t first = (size_t)(split + RAMP_CHUNKS);
    return first < chunks ? first : chunks - 1;
}
/* the same for a pass: only where the chain carries output warps */
static size_t kernel1_split_chunk(const gdn_device_problem *p)
{
    return chain_makes_outputs<false>(p) ? warp_specialized_kernel1_split(p->B * p->H, chunks_of(p->T), (size_t)gdn_sm_count()) : 0;
}
/* whether the chains of a pass make Vnew from v (warp_specialized.h; tested on its own, as
   host code): chain_from_values_pays */
extern "C" int warp_specialized_values_pay(size_t K, size_t heads, size_t chunks, size_t depth)
{
    return chain_from_values_pays(K, heads, chunks, depth);
}
static int kernel1_beside_chain(const gdn_device_problem *p, chunk_workspace w, chain_segments whole, gdn_device_result *r,
                                size_t split)
{
    static cudaStream_t chain_stream, kernel1_stream;
    static cudaEvent_t first_launch_done, chain_done, kernel1_done;
    static bool made = false;
    if (!made) { /* once a process: streams that never wait for the default stream by themselves */
        int lowest = 0, highest = 0;
        CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&chain_stream, cudaStreamNonBlocking, highest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&kernel1_stream, cudaStreamNonBlocking, lowest));
        CUDA_CHECK(cudaEventCreateWithFlags(&first_launch_done, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&chain_done, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&kernel1_done, cudaEventDisableTiming));
        made = true;
    }
    const size_t chunks = chunks_of(p->T), heads = p->B * p->H;
    w.ready = (unsigned *)(w.transforms + heads * chunks * TRANSFORM_BYTES);
    w.ready_from = split;
    bool outputs_done = false;
    const cudaStream_t pass = gdn_pass_stream(); /* the caller's: forked here, joined at the end */
    CUDA_CHECK(cudaMemsetAsync(w.ready, 0, heads * chunks * sizeof(unsigned), pass));
    if (launch_prepare_chunks<false>(p, w, WRITE_TRANSFORM, 0, split))
        return -1;
    CUDA_CHECK(cudaEventRecord(first_launch_done, pass));
    CUDA_CHECK(cudaStreamWaitEvent(chain_stream, first_launch_done, 0));
    CUDA_CHECK(cudaStreamWaitEvent(kernel1_stream, first_launch_done, 0));
    /* kernel 1's second launch first: where kernels run one at a time after all (a sanitizer,
       CUDA_LAUNCH_BLOCKING) it then ends before the chain waits for it */
    if (launch_prepare_chunks<false>(p, w, WRITE_TRANSFORM, split, chunks, kernel1_stream) ||
        launch_chunk_states<false, state_columns>(p, w, whole, chunks, r, &outputs_done, chain_stream))
        return -1;
    CUDA_CHECK(cudaEventRecord(chain_done, chain_stream));
    CUDA_CHECK(cudaEventRecord(kernel1_done, kernel1_stream));
    CUDA_CHECK(cudaStreamWaitEvent(pass, chain_done, 0)); /* the pass stream's next work after both */
    CUDA_CHECK(cudaStreamWaitEvent(pass, kernel1_done, 0));
    return outputs_done ? 0 : gdn_set_error("kernel 1 beside the chain: the chain made no o (its blocks carry no output warps here)");
}

/* invariant (--batch-invariant): the paths a sequence's bits do not depend on the batch in (the
   chain from W and U, kernel 3; launch_chunk_states) */
template <bool PRECISE>
static int warp_specialized_passes(const gdn_device_problem *p, chunk_workspace w, gdn_device_result *r, bool invariant)
{
    const chain_segments whole = {1, 1, p->h0, r->ht}; /* one segment: the whole sequence from h0 */
    const int parts = chunk_parts_for<PRECISE>(p, chunks_of(p->T), invariant);
    bool outputs_done;
    if constexpr (!PRECISE)
        if (const size_t split = invariant ? 0 : kernel1_split_chunk(p))
            return kernel1_beside_chain(p, w, whole, r, split);
    if (launch_prepare_chunks<PRECISE>(p, w, parts) ||
        launch_chunk_states<PRECISE, state_columns>(p, w, whole, chunks_of(p->T), r, &outputs_done, 0, invariant))
        return -1;
    return outputs_done ? 0 : launch_chunk_outputs<PRECISE>(p, w, r);
}

/* The passes on B rows of T tokens (no offsets). Grouped value heads: the value heads are the
   pass's heads, heads_per_key of them reading one key head's q and k (tile_products.cuh: key_row) */
static int rows_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    gdn_device_problem heads = *p;
    heads.H = r->layout.HV;
    heads.heads_per_key = (unsigned)(r->layout.HV / p->H);
    chunk_workspace w = workspace_at(r->workspace, &heads, s->precise);
    const bool invariant = s->batch_invariant != 0;
    return s->precise ? warp_specialized_passes<true>(&heads, w, r, invariant) : warp_specialized_passes<false>(&heads, w, r, invariant);
}

/* A packed batch (--lengths, cu_seqlens) runs as N rows of the longest sequence's tokens: each
 * sequence gathered into its row and padded with tokens that change nothing (q, k and v zero,
 * g = 0: no decay, beta = 0: no write), the passes of B rows run, and each row's real tokens'
 * o scattered back; ht is the rows' last states, in the batch's order already. The padding's
 * work is the price: N x longest tokens for the sum of the lengths (docs/06, "Grouped value
 * heads, packed batches"). The padded inputs and o follow the passes' workspace (padded_parts). */
static int padded_parts(size_t N, size_t longest, size_t H, size_t HV, size_t K, size_t V, size_t bytes[4], size_t *total)
{
    size_t q[5] = {N, longest, H, K, sizeof(bf16)}, v[5] = {N, longest, HV, V, sizeof(bf16)}, g[4] = {N, longest, HV, sizeof(float)},
           o[5] = {N, longest, HV, V, sizeof(float)};
    if (gdn_multiply_sizes(&bytes[0], 5, q) || gdn_multiply_sizes(&bytes[1], 5, v) || gdn_multiply_sizes(&bytes[2], 4, g) ||
        gdn_multiply_sizes(&bytes[3], 5, o))
        return -1;
    for (int i = 0; i < 4; i++) /* q (and k after it), v, g (and beta after it), o (fp32, or bf16 in its place) */
        bytes[i] = (bytes[i] + 255) / 256 * 256;
    *total = 2 * bytes[0] + bytes[1] + 2 * bytes[2] + bytes[3];
    if (*total < bytes[3])
        return gdn_set_error("the padded rows of %zu sequences of %zu tokens overflow size_t", N, longest);
    return 0;
}
/* row n's token t (position n longest + t) from the packed batch's position offsets[n] + t, or
   a padding token past the sequence; a block a position */
static __global__ void gather_padded(gdn_device_problem p, const size_t *offsets, size_t longest, size_t HV, bf16 *q, bf16 *k,
                                     bf16 *v, float *g, float *beta)
{
    const size_t n = blockIdx.x / longest, t = blockIdx.x % longest, to = blockIdx.x, from = offsets[n] + t;
    const bool real = t < offsets[n + 1] - offsets[n];
    const size_t keys = p.H * p.K, values = HV * p.V;
    const bf16 *q16 = (const bf16 *)p.q_bf16, *k16 = (const bf16 *)p.k_bf16, *v16 = (const bf16 *)p.v_bf16;
    const bf16 zero = __float2bfloat16_rn(0.0f);
    for (size_t e = threadIdx.x; e < keys; e += blockDim.x) {
        q[to * keys + e] = real ? q16[from * keys + e] : zero;
        k[to * keys + e] = real ? k16[from * keys + e] : zero;
    }
    for (size_t e = threadIdx.x; e < values; e += blockDim.x)
        v[to * values + e] = real ? v16[from * values + e] : zero;
    for (size_t e = threadIdx.x; e < HV; e += blockDim.x) {
        g[to * HV + e] = real ? p.g[from * HV + e] : 0.0f;
        beta[to * HV + e] = real ? p.beta[from * HV + e] : 0.0f;
    }
}
/* the real tokens' o back into the packed batch, in bf16 or fp32 as the passes wrote it */
static __global__ void scatter_outputs(const size_t *offsets, size_t longest, size_t values, const float *padded, float *o,
                                       unsigned short *o16, int in_bf16)
{
    const size_t n = blockIdx.x / longest, t = blockIdx.x % longest, from = blockIdx.x, to = offsets[n] + t;
    if (t >= offsets[n + 1] - offsets[n])
        return;
    const unsigned short *padded16 = (const unsigned short *)padded;
    for (size_t e = threadIdx.x; e < values; e += blockDim.x) {
        if (in_bf16)
            o16[to * values + e] = padded16[from * values + e];
        else
            o[to * values + e] = padded[from * values + e];
    }
}
static int packed_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    const size_t N = r->layout.sequences, longest = r->layout.longest, HV = r->layout.HV;
    gdn_device_problem rows = *p;
    rows.B = N, rows.T = longest;
    if (N * longest == p->T) { /* every length the same: the row is N rows already, nothing to pad */
        gdn_device_result as_rows = *r;
        as_rows.layout.offsets = NULL;
        const int status = rows_forward(&rows, s, &as_rows);
        r->o_in_bf16 = as_rows.o_in_bf16;
        return status;
    }
    if (!s->precise && !r->o_bf16)
        return gdn_set_error("stage 06 writes o in bf16: the runner made no room for it");
    size_t rows_parts[4], bytes[4], total;
    if (workspace_parts(N * HV, longest, p->K, p->V, s->precise, rows_parts) ||
        padded_parts(N, longest, p->H, HV, p->K, p->V, bytes, &total))
        return -1;
    unsigned char *at = (unsigned char *)r->workspace + rows_parts[0] + rows_parts[1] + rows_parts[2] + rows_parts[3];
    bf16 *q = (bf16 *)at, *k = (bf16 *)(at + bytes[0]), *v = (bf16 *)(at + 2 * bytes[0]);
    float *g = (float *)(at + 2 * bytes[0] + bytes[1]), *beta = (float *)((unsigned char *)g + bytes[2]);
    float *o = (float *)((unsigned char *)beta + bytes[2]);
    unsigned blocks;
    if (gdn_blocks_for(N * longest, 1, &blocks))
        return -1;
    CUDA_LAUNCH_WITH_SHARED(gather_padded, blocks, 256, 0, *p, r->layout.offsets, longest, HV, q, k, v, g, beta);
    rows.q_bf16 = (const unsigned short *)q, rows.k_bf16 = (const unsigned short *)k, rows.v_bf16 = (const unsigned short *)v;
    rows.g = g, rows.beta = beta, rows.q = rows.k = rows.v = NULL; /* the passes read the bf16 ones */
    gdn_device_result padded = *r;
    padded.o = o, padded.o_bf16 = (unsigned short *)o; /* one place: a pass writes o in one of the two */
    padded.layout.offsets = NULL, padded.layout.longest = longest;
    padded.o_in_bf16 = 0;
    if (rows_forward(&rows, s, &padded))
        return -1;
    CUDA_LAUNCH_WITH_SHARED(scatter_outputs, blocks, 256, 0, r->layout.offsets, longest, HV * p->V, o, r->o, r->o_bf16, padded.o_in_bf16);
    r->o_in_bf16 = padded.o_in_bf16;
    return 0;
}

static int warp_specialized_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    if (check_key_width(p->K))
        return -1;
    return r->layout.offsets ? packed_forward(p, s, r) : rows_forward(p, s, r);
}

/* the workspace: the passes' (chunk_workspace_bytes), and for a packed batch its N rows' and
   the padded inputs and o after it */
static int warp_specialized_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    if (!p->offsets)
        return chunk_workspace_bytes(p, s, bytes);
    gdn_problem rows = *p;
    rows.B = gdn_sequences(p), rows.T = gdn_longest_sequence(p), rows.offsets = NULL, rows.sequences = 0;
    if (rows.B * rows.T == p->T) /* every length the same: no padding (packed_forward) */
        return chunk_workspace_bytes(&rows, s, bytes);
    size_t padded[4], extra;
    if (chunk_workspace_bytes(&rows, s, bytes) || padded_parts(rows.B, rows.T, p->H, gdn_value_heads(p), p->K, p->V, padded, &extra))
        return -1;
    if (*bytes + extra < *bytes)
        return gdn_set_error("the workspace of %zu sequences of up to %zu tokens overflows size_t", rows.B, rows.T);
    *bytes += extra;
    return 0;
}

extern "C" const gdn_stage warp_specialized_stage = {
    .name = "06_warp_specialized",
    .idea = "stage 05 on tensor cores: bf16 inputs, mma.sync products, fp32 sums and state",
    .options = GDN_OPTION_PRECISE | GDN_OPTION_VALUE_HEADS | GDN_OPTION_PACKED | GDN_OPTION_BATCH_INVARIANT,
    .forward = NULL,
    .counted_flops = wy_chunked_flops,
    .resolve_options = chunk_resolve_options,
    .device_forward = warp_specialized_forward,
    .device_workspace_bytes = warp_specialized_workspace,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 1,
};


