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
 *   prepare_phases.cuh         kernel 1's tiles and phases: the solve's joins, the decayed keys, W, U
 *   prepare_chunks.cuh         kernel 1: gates, K K^T, the solve, W and U or the transform block
 *   chain_ring.cuh             kernel 2's structure: the ring, segments, sizes, fragment helpers
 *   fused_outputs.cuh          the block with output warps at K = V = 128: its roles (wgmma), its kernel
 *   chain.cuh                  chain_block, its producer and update, and the two other chain kernels
 *   chunk_outputs.cuh          kernel 3: o where the output warps do not make it
 *   launch_rules.cuh           host: tensor maps, block shapes, the launch choices
 *   padded_rows.cuh            a packed batch as rows padded to its longest sequence
 *   warp_specialized.cu        this file: kernel 1 beside the chain, the passes, the stage
 *
 * Cost: the flops of stage 05 (wy_chunked_flops), on tensor cores (from v one 64 x 64 x V
 * product a chunk fewer: W's goes, U's becomes the chain's Tm Z); the workspace:
 * chunk_workspace.cuh. Bound: the chain's T / 64 steps where heads are few, each two 64-deep
 * MMA chains per warp (from v, Z and Tm's products lengthen it); bytes where they fill the GPU.
 * Grouped value heads (--HV): a chain a value head, its q and k rows those of the key head it
 * shares (chunk_workspace.cuh: input_token; tile_products.cuh: key_heads). A packed batch
 * (--lengths): N rows of the longest sequence's tokens, read and written where the batch
 * holds them (padded_rows.cuh: packed_forward).
 * Limits: K <= 128, chunk 64 (fixed), V and T any.
 * On an NVIDIA H200 at (8, 4096, 16, 128, 128), about 3 times as fast as FLA's kernels replayed
 * from a CUDA graph (docs/06, "Measured"; plots/data/peers.dat).
 *
 * Build and run:  make bin/06_warp_specialized && bin/06_warp_specialized --T 16384 --H 8 --check-against oracle
 * Measured: 0.306 ms at (8, 4096, 16, 128, 128), FLA's CUDA graph 1.02 ms, in one run on an NVIDIA
 * H100 80GB HBM3 (plots/data/stage06_series.dat).
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
/* a packed batch's rows by the kernels' rules (warp_specialized.h; tested on their own, as host code) */
extern "C" size_t warp_specialized_input_token(const size_t *offsets, size_t b, size_t T, size_t t, size_t heads, size_t h)
{
    chunk_workspace w = {};
    w.row_offsets = offsets;
    return input_token(w, b, T, t, heads, h);
}
extern "C" int warp_specialized_chunk_tokens(const size_t *offsets, size_t b, size_t T, size_t t0)
{
    chunk_workspace w = {};
    w.row_offsets = offsets;
    return chunk_tokens(w, b, T, t0);
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
   pass's heads, heads_per_key of them reading one key head's q and k (chunk_workspace.cuh: input_token) */
static int rows_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    gdn_device_problem heads = *p;
    heads.H = r->layout.HV;
    heads.heads_per_key = (unsigned)(r->layout.HV / p->H);
    chunk_workspace w = workspace_at(r->workspace, &heads, s->precise);
    rows_in_place(&w, &r->layout); /* a packed batch's rows: read in place, their padding not run */
    const bool invariant = s->batch_invariant != 0;
    return s->precise ? warp_specialized_passes<true>(&heads, w, r, invariant) : warp_specialized_passes<false>(&heads, w, r, invariant);
}

static int warp_specialized_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    if (check_key_width(p->K))
        return -1;
    return r->layout.offsets ? packed_forward(p, s, r, rows_forward) : rows_forward(p, s, r);
}

/* the workspace: the passes' (chunk_workspace_bytes), for a packed batch its N rows'
   (padded_rows.cuh) */
static int warp_specialized_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    return p->offsets ? padded_workspace_bytes(p, s, chunk_workspace_bytes, bytes) : chunk_workspace_bytes(p, s, bytes);
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


