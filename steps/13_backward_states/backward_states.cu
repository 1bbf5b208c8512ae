/* 13_backward_states -- stage 12's walk on what stage 06's forward leaves: gamma, Tm, S0 and Vnew
 * made by 06's kernel 1 and 06's chain instead of stage 11's pass 1 and forward chain.
 *
 * The idea: the walk (fused_walk.cuh) reads four things a chunk that need no cotangent: gamma,
 * Tm = (I + M)^-1, the state S0 at the chunk's start and Vnew. Stage 12 makes them with stage
 * 11's pass 1 and forward chain, simple kernels (a barrier between a chunk's copies and its
 * products) that write them in the walk's own layouts; stage 06 makes the same four as the
 * inside of its forward, with tensor copies, a producer warp and consumer warps that keep S in
 * their registers, and from v (Vnew = Tm Z, Z = diag(beta) V - diag(beta e^gamma) K S0) where
 * 06's chain_from_values holds (K = V = 128, or K = V = 64 with at least 24 heads; keys by tensor
 * map), else as U - W S0 with U in bf16. So here:
 *   06's kernel 1 (launch_prepare_chunks) writes gamma, which the walk reads as it lies (the
 *     same layout and bits as 11's pass 1: both sum the gates by warp_gate_sums), and each
 *     chunk's transform block (Tm's strictly lower part, bf16, 128-byte swizzled); where 06's
 *     chain reads W and U instead, it writes those too;
 *   06's chain (launch_chunk_states, stage 06's state_columns, no output warps) writes S0^T and
 *     Vnew^T a chunk, as 06's kernel 3 reads them, and ht;
 *   then 12's walk, whose inputs (forward06_arrays) take each chunk's Tm, S0 and Vnew from 06's
 *     layouts as they come into its tiles: the swizzle undone and the diagonal set, S0^T and
 *     Vnew^T transposed a 16-byte piece at a time.
 * 06's headers and 11's name the same things (CHUNK, THREADS, round_up16, chain_shape, ...), so
 * each stage's come in a namespace of its own (bwd: 11's and 12's; fwd06: 06's), after
 * everything they include.
 *
 * Cost: 06's forward less its outputs (kernel 3, or the chain's output warps), then 12's walk,
 * which copies 06's S0^T, Vnew^T and transform block (56 KB a chunk at K = V = 128) by cp.async
 * as they lie and transposes them in shared memory (one barrier more a step). At (8, 4096, 16,
 * 128, 128) stage 12's pass 1 and forward chain take 0.78 and 0.63 ms under ncu, stage 06's
 * whole forward 0.31 ms without it (docs/12). Workspace: 06's alone (the walk reads gamma in it; none of 11's arrays).
 * Limits: stage 11's (K, V <= 128); stage 06 takes all of them. A refusal of one of 06's
 * launches at run time (a tensor map the driver will not make) is this stage's, in one line.
 * Measured (NVIDIA H200, plots/data/backward_states.dat): 2.96 ms against 12's 3.63 at (8, 4096,
 * 16, 128, 128), 6.93 against 7.14 at (1, 16384, 8, 64, 64).
 *
 * Build and run:  make bin/13_backward_states && bin/13_backward_states --B 2 --T 1000 --H 3 --K 128 --V 128 --h0 --check-against oracle
 */
#include <cuda_bf16.h>
#include <cudaTypedefs.h>
#include <cuda_pipeline_primitives.h>
#include <stdint.h>
#include <type_traits>

/* everything stages 11, 12 and 06 include, here at global scope so that their guards keep it
 * there; then 11's and 12's headers in namespace bwd, 06's in namespace fwd06. Both, not one:
 * each defines functions of bf16 by the same names (to_float), which argument-dependent lookup
 * would otherwise find side by side with the namespace's own. */
#include "../../common/backward_stage.h"
#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/stage.h"
#include "../../common/bulk_copy.cuh"
#include "../../common/mma_sync.cuh"
#include "../../common/fast_exp.cuh"
#include "../../common/wgmma.cuh"
#include "../../common/kernel_overlap.cuh"
#include "../../common/sync.cuh"
#include "../../common/tensor_maps.cuh"
#include "../05_wy_chunked/wy_chunked_solve.cuh" /* the gates' sums and the blocked solve, unchanged */
extern "C" {
#include "../05_wy_chunked/wy_chunked.h"
#include "../10_backward_chunked/backward_chunked.h" /* stage 10's flop count: the same products */
}
#include "../06_warp_specialized/warp_specialized.h"

namespace bwd {
#include "../11_backward_tensor_cores/warp_tiles.cuh"
#include "../11_backward_tensor_cores/prepare_chunks.cuh"
#include "../11_backward_tensor_cores/chains.cuh"
#include "../11_backward_tensor_cores/chunk_gradients.cuh" /* pass 4's pieces, which the walk calls */
#include "../11_backward_tensor_cores/backward_passes.cuh"
#include "../12_backward_fused/fused_walk.cuh"
}
namespace fwd06 {
#include "../06_warp_specialized/warp_specialized.cuh"
}
using namespace bwd; /* the walk's names, unqualified below; 06's as fwd06:: */

static_assert((int)CHUNK == (int)SOLVE_CHUNK && (int)fwd06::CHUNK == (int)CHUNK, "06's chunk is the walk's");
static_assert((int)fwd06::MAX_K >= (int)MAX_WIDTH, "06's kernels take every K and V the walk takes");
static_assert(fwd06::TRANSFORM_TM_BYTES == CHUNK * CHUNK * sizeof(bf16), "the transform block opens with Tm, 64 x 64 bf16");

/* ---- the workspace: 06's chunk_workspace, nothing more ---- */

/* The walk reads gamma, Tm, S0 and Vnew and nothing else of 11's backward_workspace; here gamma
 * is 06's array and the other three come from 06's layouts (forward06_arrays), so 06's workspace
 * is the whole of it: gamma, the chain and transform blocks with their flags, S0^T, Vnew^T
 * (workspace_parts). -1 on overflow. */
static int workspace_bytes_of(size_t heads, size_t T, size_t K, size_t V, size_t *bytes)
{
    size_t parts[4];
    if (fwd06::workspace_parts(heads, T, K, V, false, parts))
        return gdn_set_error("06's workspace for %zu heads of %zu tokens overflows size_t", heads, T);
    *bytes = 0;
    for (int i = 0; i < 4; i++) {
        if (parts[i] > SIZE_MAX - *bytes)
            return gdn_set_error("the workspace of %zu heads of %zu tokens overflows size_t", heads, T);
        *bytes += parts[i];
    }
    return 0;
}
static int backward_states_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    const size_t heads = p->B * p->H; /* 11's limits, then 06's parts */
    return check_limits(heads, p->T, p->K, p->V, s->chunk) || workspace_bytes_of(heads, p->T, p->K, p->V, bytes) ? -1 : 0;
}

/* ---- 06's layouts into the walk's tiles ---- */

/* A chunk's S0^T and Vnew^T come into shared memory as 06 keeps them, [VP][stride] (state column
 * v by rows), by cp.async, and are transposed there once they have landed. Their places: S0^T's
 * rows in three tiles the walk fills only after its first products (dVnew16: rows 0-63, P16:
 * 64-95, Z16: 96-127), Vnew^T's past the walk's tiles. */
constexpr int RAW_LDK = MAX_WIDTH + fwd06::KEY_STRIDE_PADDING; /* key_stride(K) at its widest */
constexpr size_t RAW_VALUES_BYTES = (size_t)MAX_WIDTH * fwd06::TOKEN_STRIDE * sizeof(bf16);
constexpr size_t STATES_WALK_BYTES = walk_tiles_at(nullptr).bytes + RAW_VALUES_BYTES;
static_assert(CHUNK * RAW_LDK <= CHUNK * WALK_LD && 32 * RAW_LDK <= CHUNK * TOKEN_STRIDE && MAX_WIDTH == 128,
              "S0^T's rows fit dVnew16 (64 rows), P16 and Z16 (32 rows each)");
static_assert(STATES_WALK_BYTES <= 227 * 1024, "the walk's tiles and Vnew^T as it comes fit one block an SM");
__device__ __forceinline__ static bf16 *raw_state_row(const walk_tiles &s, int v, int LDK)
{
    return v < 64 ? s.dVnew16 + v * LDK : v < 96 ? s.P16 + (v - 64) * LDK : s.Z16 + (v - 96) * LDK;
}
__device__ __forceinline__ static bf16 *raw_values(void)
{
    extern __shared__ uint4 shared[];
    return (bf16 *)((unsigned char *)shared + walk_tiles_at(nullptr).bytes);
}

/* The walk's inputs (fused_walk_kernel's Inputs) from 06's layouts.
 *   stage: Tm, a 16-byte piece at a time from its swizzled place in the transform block
 *       (swizzled_offset: piece c / 8 of row i at piece (c / 8) ^ (i % 8)) to its place in the
 *       walk's row-major Tm16; S0^T's and Vnew^T's rows below V as they lie (above); all by
 *       cp.async, on their way beside the walk's own copies.
 *   arrange, once they have landed: Tm's diagonal set to one and its upper part to zero (the
 *       transform block holds Tm's strictly lower part), S0^T -> S0 [KP][VP] and Vnew^T -> Vnew
 *       [64][VP], a 16-byte piece a thread: consecutive threads consecutive state columns, so
 *       that the piece's eight values land in eight rows two bytes from the next thread's (no
 *       bank conflict), then a barrier before the walk reads them or writes over their places.
 *   Zero past K, past V and past the chunk's n tokens, written here whatever 06 left there: the
 *   walk multiplies by the padding, and what 06 keeps there is 06's business, not a contract. */
struct forward06_arrays {
    const unsigned char *transforms;     /* fwd06::TRANSFORM_BYTES a chunk */
    const bf16 *states_t, *new_values_t; /* [VP][key_stride(K)] and [VP][TOKEN_STRIDE] a chunk */
    int K, V;
    __device__ __forceinline__ void stage(const walk_tiles &s, const backward_workspace &, const chunk_at &x, int KP, int VP) const
    {
        const int LDK = fwd06::key_stride(K);
        const bf16 *transform = (const bf16 *)(transforms + x.index * fwd06::TRANSFORM_BYTES);
        const bf16 *state_t = states_t + x.index * VP * LDK, *values_t = new_values_t + x.index * VP * fwd06::TOKEN_STRIDE;
        bf16 *values_raw = raw_values();
        for_each_piece(CHUNK, CHUNK / 8, [&](int i, int u) {
            __pipeline_memcpy_async(s.Tm16 + i * TOKEN_STRIDE + 8 * u, transform + swizzled_offset(CHUNK, i, 8 * u), 16);
        });
        for_each_piece(V, KP / 8, [&](int v, int u) { __pipeline_memcpy_async(raw_state_row(s, v, LDK) + 8 * u, state_t + v * LDK + 8 * u, 16); });
        for_each_piece(V, CHUNK / 8, [&](int v, int u) {
            __pipeline_memcpy_async(values_raw + v * fwd06::TOKEN_STRIDE + 8 * u, values_t + v * fwd06::TOKEN_STRIDE + 8 * u, 16);
        });
        __pipeline_commit();
    }
    __device__ __forceinline__ void arrange(const walk_tiles &s, const chunk_at &x, int KP, int VP) const
    {
        const int LDK = fwd06::key_stride(K), n = x.n;
        const bf16 zero = __float2bfloat16_rn(0.0f), one = __float2bfloat16_rn(1.0f);
        const bf16 *values_raw = raw_values();
        for_each_piece(CHUNK, CHUNK / 8, [&](int i, int u) {
            bf16_pairs16 piece;
            uint4 *at = (uint4 *)(s.Tm16 + i * TOKEN_STRIDE + 8 * u);
            piece.bytes = *at;
#pragma unroll
            for (int j = 0; j < 8; j++)
                piece.value[j] = 8 * u + j == i ? one : 8 * u + j < i ? piece.value[j] : zero;
            *at = piece.bytes;
        });
        for (int e = threadIdx.x; e < KP / 8 * VP; e += GRADIENT_THREADS) {
            const int v = e % VP, k0 = e / VP * 8;
            bf16_pairs16 piece;
            piece.bytes = v < V ? *(const uint4 *)(raw_state_row(s, v, LDK) + k0) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < 8; j++)
                s.S0[(k0 + j) * WALK_LD + v] = k0 + j < K ? piece.value[j] : zero;
        }
        for (int e = threadIdx.x; e < CHUNK / 8 * VP; e += GRADIENT_THREADS) {
            const int v = e % VP, i0 = e / VP * 8;
            bf16_pairs16 piece;
            piece.bytes = v < V ? *(const uint4 *)(values_raw + v * fwd06::TOKEN_STRIDE + i0) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < 8; j++)
                s.Vnew16[(i0 + j) * WALK_LD + v] = i0 + j < n ? piece.value[j] : zero;
        }
        __syncthreads();
    }
};

/* ---- the passes ---- */

/* 06's kernel 1 and chain over the whole sequence from h0 (writing ht), in 06's workspace at
 * r->workspace (*f). Kernel 1 writes gamma and the transform block besides whatever 06's chain
 * reads (W, U and the decayed keys where the chain does not make Vnew from v: chunk_parts_for).
 * The chain is launched as 06 launches it (after kernel 1, overlapping its end: it waits for
 * kernel 1 before it reads); the walk after it is an ordinary launch, after the whole of the
 * chain, and so of kernel 1. No o: the walk makes it. */
static int forward_states(const gdn_device_problem *p, fwd06::chunk_workspace *f, const gdn_device_result *r)
{
    if (fwd06::check_key_width(p->K))
        return -1;
    gdn_device_problem forward = *p;
    if (forward.heads_per_key == 0) /* 06 divides by it (key_heads): one key head a head here */
        forward.heads_per_key = 1;
    *f = fwd06::workspace_at(r->workspace, &forward, false);
    const size_t chunks = chunks_of(p->T);
    const int parts = fwd06::chunk_parts_for<false>(&forward, chunks) | fwd06::WRITE_TRANSFORM;
    const fwd06::chain_segments whole = {1, 1, p->h0, r->ht};
    if (fwd06::launch_prepare_chunks<false>(&forward, *f, parts) ||
        fwd06::launch_chunk_states<false, fwd06::state_columns>(&forward, *f, whole, chunks))
        return -1;
    return 0;
}

static int backward_states_backward(const gdn_device_problem *p, const gdn_device_cotangents *c, const gdn_settings *s,
                                    gdn_device_result *r, gdn_device_gradients *g)
{
    const size_t heads = p->B * p->H;
    if (check_device_problem(p, s))
        return -1;
    size_t bytes = 0;
    if (workspace_bytes_of(heads, p->T, p->K, p->V, &bytes))
        return -1;
    if (bytes > r->workspace_bytes)
        return gdn_set_error("the backward's workspace needs %zu bytes, %zu were given", bytes, r->workspace_bytes);
    fwd06::chunk_workspace f;
    if (forward_states(p, &f, r)) /* a refusal of 06's launches, named by gdn_last_error */
        return -1;
    backward_workspace w = {}; /* the walk's: gamma (06's array) and the chunk count; 11's other arrays unused */
    w.chunks = chunks_of(p->T);
    w.gamma = f.gamma;
    const forward06_arrays inputs = {f.transforms, f.states_t, f.new_values_t, (int)p->K, (int)p->V};
    unsigned walk_blocks;
    if (gdn_blocks_for(heads, 1, &walk_blocks))
        return -1;
    CUDA_LAUNCH_WITH_SHARED(fused_walk_kernel<forward06_arrays>, walk_blocks, GRADIENT_THREADS, STATES_WALK_BYTES, *p, *c, w,
                            r->o, *g, inputs);
    return 0;
}

extern "C" const gdn_backward_stage backward_states_stage = {
    .name = "13_backward_states",
    .idea = "12's walk on the gamma, Tm, S0 and Vnew of stage 06's kernel 1 and chain, read from 06's layouts",
    .options = GDN_OPTION_CHUNK,
    .backward = NULL,
    .counted_flops = backward_chunked_flops,
    .resolve_options = backward_passes_resolve_options,
    .device_backward = backward_states_backward,
    .device_workspace_bytes = backward_states_workspace,
    .runner = &gdn_cuda_backward_runner,
    .bf16_inputs = 1,
};
