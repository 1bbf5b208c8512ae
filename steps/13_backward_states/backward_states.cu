/* 13_backward_states -- stage 12's walk on what stage 06's forward leaves: gamma, Tm, S0 and Vnew
 * made by 06's kernel 1 and 06's chain instead of stage 11's pass 1 and forward chain.
 *
 * The idea: the walk (fused_walk.cuh, unchanged) reads four things a chunk that need no
 * cotangent: gamma, Tm = (I + M)^-1, the state S0 at the chunk's start and Vnew. Stage 12 makes
 * them with stage 11's pass 1 and forward chain, simple kernels (a barrier between a chunk's
 * copies and its products); stage 06 makes the same four as the inside of its forward, with
 * tensor copies, a producer warp and consumer warps that keep S in their registers, and from v
 * (Vnew = Tm Z, Z = diag(beta) V - diag(beta e^gamma) K S0) where 06's chain_from_values holds
 * (K = V = 128, or K = V = 64 with at least 24 heads; keys by tensor map), else as U - W S0 with
 * U in bf16. So here:
 *   06's kernel 1 (launch_prepare_chunks) writes gamma straight into the walk's array (the same
 *     layout and bits as 11's pass 1: both sum the gates by warp_gate_sums) and each chunk's
 *     transform block (Tm's strictly lower part, bf16, 128-byte swizzled); where 06's chain
 *     reads W and U instead, it writes those too (its parts: the chain's and the transform block);
 *   06's chain (launch_chunk_states, stage 06's state_columns, no output warps) writes S0^T and
 *     Vnew^T a chunk, as 06's kernel 3 reads them, and ht;
 *   walk_inputs_kernel (here) turns those into the walk's layouts: Tm row-major with its
 *     diagonal of ones, S0 [KP][VP] and Vnew [heads T][VP], each transposed through shared memory;
 *   then 12's walk.
 * 06's headers and 11's name the same things (CHUNK, THREADS, round_up16, chain_shape, ...), so
 * each stage's come in a namespace of its own (bwd: 11's and 12's; fwd06: 06's), after
 * everything they include.
 *
 * Cost: 06's forward less its outputs (kernel 3, or the chain's output warps), one pass over
 * S0^T, Vnew^T and the transform blocks (56 KB read and 56 KB written a chunk at K = V = 128),
 * then 12's walk. At (8, 4096, 16, 128, 128) stage 12's pass 1 and forward chain take 0.78 and
 * 0.63 ms under ncu, stage 06's whole forward 0.31 ms without it (docs/12). Workspace: the four
 * arrays the walk reads (none of 11's others) and 06's.
 * Limits: stage 11's (K, V <= 128); stage 06 takes all of them. A refusal of one of 06's
 * launches at run time (a tensor map the driver will not make) is this stage's, in one line.
 * Measured (NVIDIA H200, plots/data/backward_states.dat): 3.22 ms against 12's 3.62 at (8, 4096,
 * 16, 128, 128), 6.60 against 7.05 at (1, 16384, 8, 64, 64).
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

/* ---- the workspace: the walk's four arrays, then 06's chunk_workspace ---- */

/* The walk reads gamma, Tm, S0 and Vnew of 11's backward_workspace and nothing else; 11's other
 * pieces (-W, U, P^T dO, the scaled dO, dVnew, dS at a chunk's end) feed passes 13 does not
 * run, so they get no bytes here and stay NULL. At base (NULL: only the sizes): the four, each
 * 256-byte aligned, in *walk bytes, then 06's workspace (workspace_parts: gamma, which goes
 * unused, the walk's taking its place; the chain and transform blocks with their flags; S0^T;
 * Vnew^T); *total: both. -1 on overflow. */
static int workspace_parts_of(size_t heads, size_t T, size_t K, size_t V, void *base, backward_workspace *w, size_t *walk,
                              size_t *total)
{
    const size_t chunks = chunks_of(T), KP = (size_t)round_up16(K), VP = (size_t)round_up16(V);
    const size_t factors[4][4] = {{heads, T, sizeof(double), 1},             /* gamma */
                                  {heads, chunks, CHUNK * CHUNK, sizeof(bf16)}, /* Tm */
                                  {heads, chunks, KP * VP, sizeof(bf16)},       /* S0 */
                                  {heads, T, VP, sizeof(bf16)}};                /* Vnew */
    size_t offsets[4], parts[4];
    if (layout_pieces(4, factors, offsets, walk))
        return gdn_set_error("the walk's workspace for %zu heads of %zu tokens overflows size_t", heads, T);
    *total = *walk;
    if (fwd06::workspace_parts(heads, T, K, V, false, parts))
        return gdn_set_error("06's workspace for %zu heads of %zu tokens overflows size_t", heads, T);
    for (int i = 0; i < 4; i++) {
        if (parts[i] > SIZE_MAX - *total)
            return gdn_set_error("the workspace of %zu heads of %zu tokens overflows size_t", heads, T);
        *total += parts[i];
    }
    if (base) {
        unsigned char *at = (unsigned char *)base;
        *w = backward_workspace{};
        w->chunks = chunks;
        w->gamma = (double *)(at + offsets[0]);
        w->Tm = (bf16 *)(at + offsets[1]);
        w->S0 = (bf16 *)(at + offsets[2]);
        w->Vnew = (bf16 *)(at + offsets[3]);
    }
    return 0;
}
static int backward_states_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    size_t walk; /* 11's limits, then both parts */
    const size_t heads = p->B * p->H;
    return check_limits(heads, p->T, p->K, p->V, s->chunk) || workspace_parts_of(heads, p->T, p->K, p->V, NULL, NULL, &walk, bytes) ? -1
                                                                                                                               : 0;
}

/* ---- 06's layouts into the walk's ---- */

/* walk_inputs_kernel's shared memory: S0 and the chunk's Vnew by rows, VP + 8 bf16 a row (16-byte
 * rows for the copies out) */
__host__ __device__ static inline int inputs_stride(size_t V) { return round_up16(V) + 8; }
__host__ __device__ static inline size_t inputs_bytes(size_t K, size_t V)
{
    return (size_t)(round_up16(K) + CHUNK) * inputs_stride(V) * sizeof(bf16);
}
constexpr int INPUTS_THREADS = 256;
/* a thread's most 16-byte pieces of each input: Tm's 64 x 64, S0^T's and Vnew^T's at K = V = 128 */
constexpr int TM_PIECES = CHUNK * CHUNK / 8 / INPUTS_THREADS, STATE_PIECES = MAX_WIDTH / 8 * MAX_WIDTH / INPUTS_THREADS,
              VALUE_PIECES = CHUNK / 8 * MAX_WIDTH / INPUTS_THREADS;
static_assert(CHUNK * CHUNK / 8 % INPUTS_THREADS == 0 && MAX_WIDTH / 8 * MAX_WIDTH % INPUTS_THREADS == 0 &&
                  CHUNK / 8 * MAX_WIDTH % INPUTS_THREADS == 0,
              "every thread takes the same count of pieces");

/* A thread's 16-byte pieces of a tile 06 keeps transposed, [VP][stride] (S0^T, Vnew^T), into a
 * shared tile by rows: piece r, loaded from state column v = e % VP and its columns c0 = e / VP * 8
 * .. c0 + 7 (e = threadIdx.x + r INPUTS_THREADS, below `count`), lands in tile[c0 .. c0 + 7][v]
 * (row stride ld); with ZERO_PAST_ROWS, zero from row `rows` on */
template <bool ZERO_PAST_ROWS, int PIECES>
__device__ __forceinline__ static void store_by_rows(const bf16_pairs16 (&piece)[PIECES], bf16 *tile, int ld, int count, int VP, int rows)
{
    const bf16 zero = __float2bfloat16_rn(0.0f);
#pragma unroll
    for (int r = 0; r < PIECES; r++) {
        const int e = threadIdx.x + r * INPUTS_THREADS, v = e % VP, c0 = e / VP * 8;
        if (e < count)
#pragma unroll
            for (int j = 0; j < 8; j++)
                tile[(c0 + j) * ld + v] = !ZERO_PAST_ROWS || c0 + j < rows ? piece[r].value[j] : zero;
    }
}

/* One block a (head, chunk): 06's transform block, S0^T and Vnew^T into the walk's Tm, S0 and
 * Vnew, each written whole where the walk reads it whole (Tm, S0), and Vnew's rows only for the
 * chunk's n tokens (a chunk of n < 64 is a head's last: the rows after it are the next head's,
 * or past the array).
 *   Tm: row i of the transform block holds Tm[i][0 .. i) in bf16, its 16-byte pieces swizzled
 *       (swizzled_offset: piece c / 8 at piece (c / 8) ^ (i % 8) of the row), zero from the
 *       diagonal on; the walk's Tm is 11's: row-major, ones on the diagonal, zero above it (rows
 *       past n included: (I + M)^-1 is the identity there).
 *   S0^T [VP][key_stride(K)] (state column v by rows, its K keys along) -> S0 [KP][VP]; Vnew^T
 *       [VP][TOKEN_STRIDE] -> Vnew rows: both read a 16-byte piece a thread, consecutive threads
 *       consecutive state columns, so that each piece's eight values land in eight rows of the
 *       shared tile, consecutive threads two bytes apart (no bank conflict); then out by rows, 16
 *       bytes a thread. Zero past K and past V, written here whatever 06 left there: the walk
 *       multiplies by the padding, and what 06 writes past K is 06's business, not a contract. */
__global__ static void __launch_bounds__(INPUTS_THREADS) walk_inputs_kernel(gdn_device_problem p, fwd06::chunk_workspace f,
                                                                         backward_workspace w)
{
    extern __shared__ uint4 shared[];
    const chunk_at x = chunk_of(p, w, blockIdx.x);
    const int n = x.n, K = (int)p.K, V = (int)p.V, KP = round_up16(p.K), VP = round_up16(p.V);
    const int LDK = fwd06::key_stride(p.K), LDT = inputs_stride(p.V), pieces = VP / 8;
    bf16 *const S0 = (bf16 *)shared, *const Vnew = S0 + KP * LDT;
    const bf16 zero = __float2bfloat16_rn(0.0f), one = __float2bfloat16_rn(1.0f);

    /* every load first: a thread's pieces of all three (TM_PIECES, STATE_PIECES, VALUE_PIECES at
     * most) on their way at once, so that a block waits out the memory's latency once, not once
     * a piece */
    const bf16 *transform = (const bf16 *)(f.transforms + x.index * fwd06::TRANSFORM_BYTES);
    const bf16 *states_t = f.states_t + x.index * VP * LDK, *values_t = f.new_values_t + x.index * VP * fwd06::TOKEN_STRIDE;
    const int state_pieces = KP / 8 * VP, value_pieces = CHUNK / 8 * VP;
    bf16_pairs16 tm[TM_PIECES], state[STATE_PIECES], value[VALUE_PIECES];
#pragma unroll
    for (int r = 0; r < TM_PIECES; r++) {
        const int e = threadIdx.x + r * INPUTS_THREADS, i = e / 8, c0 = e % 8 * 8;
        tm[r].bytes = *(const uint4 *)(transform + swizzled_offset(CHUNK, i, c0));
    }
#pragma unroll
    for (int r = 0; r < STATE_PIECES; r++) {
        const int e = threadIdx.x + r * INPUTS_THREADS, v = e % VP, k0 = e / VP * 8;
        state[r].bytes = e < state_pieces && v < V ? *(const uint4 *)(states_t + v * LDK + k0) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int r = 0; r < VALUE_PIECES; r++) {
        const int e = threadIdx.x + r * INPUTS_THREADS, v = e % VP, i0 = e / VP * 8;
        value[r].bytes = e < value_pieces && v < V ? *(const uint4 *)(values_t + v * fwd06::TOKEN_STRIDE + i0) : make_uint4(0, 0, 0, 0);
    }

    /* Tm: no transpose, only the swizzle undone and the diagonal set */
    bf16 *Tm = w.Tm + x.index * CHUNK * CHUNK;
#pragma unroll
    for (int r = 0; r < TM_PIECES; r++) {
        const int e = threadIdx.x + r * INPUTS_THREADS, i = e / 8, c0 = e % 8 * 8;
#pragma unroll
        for (int j = 0; j < 8; j++)
            tm[r].value[j] = c0 + j == i ? one : c0 + j < i ? tm[r].value[j] : zero;
        *(uint4 *)(Tm + i * CHUNK + c0) = tm[r].bytes;
    }
    /* S0^T and Vnew^T into the tiles, transposed; S0 zero past K, Vnew's rows all the chunk's */
    store_by_rows<true>(state, S0, LDT, state_pieces, VP, K);
    store_by_rows<false>(value, Vnew, LDT, value_pieces, VP, CHUNK);
    __syncthreads();

    /* out by rows: S0 whole, Vnew's n rows */
    bf16 *S0_out = w.S0 + x.index * KP * VP, *Vnew_out = w.Vnew + x.row * VP;
    for (int e = threadIdx.x; e < KP * pieces; e += INPUTS_THREADS) {
        const int k = e / pieces, c0 = e % pieces * 8;
        *(uint4 *)(S0_out + k * VP + c0) = *(const uint4 *)(S0 + k * LDT + c0);
    }
    for (int e = threadIdx.x; e < n * pieces; e += INPUTS_THREADS) {
        const int i = e / pieces, c0 = e % pieces * 8;
        *(uint4 *)(Vnew_out + i * VP + c0) = *(const uint4 *)(Vnew + i * LDT + c0);
    }
}

/* ---- the passes ---- */

/* 06's kernel 1 and chain over the whole sequence from h0 (writing ht), then the conversion.
 * Kernel 1 writes the transform block besides whatever 06's chain reads (W, U and the decayed
 * keys where the chain does not make Vnew from v: chunk_parts_for), and gamma into the walk's
 * array. The chain is launched as 06 launches it (after kernel 1, overlapping its end: it waits
 * for kernel 1 before it reads); the conversion and the walk after it are ordinary launches,
 * each after the whole of the one before. No o: the walk makes it. */
static int forward_states(const gdn_device_problem *p, const backward_workspace &w, size_t walk_bytes, const gdn_device_result *r)
{
    if (fwd06::check_key_width(p->K))
        return -1;
    gdn_device_problem forward = *p;
    if (forward.heads_per_key == 0) /* 06 divides by it (key_heads): one key head a head here */
        forward.heads_per_key = 1;
    fwd06::chunk_workspace f = fwd06::workspace_at((unsigned char *)r->workspace + walk_bytes, &forward, false);
    f.gamma = w.gamma;
    const size_t chunks = chunks_of(p->T);
    const int parts = fwd06::chunk_parts_for<false>(&forward, chunks) | fwd06::WRITE_TRANSFORM;
    const fwd06::chain_segments whole = {1, 1, p->h0, r->ht};
    if (fwd06::launch_prepare_chunks<false>(&forward, f, parts) ||
        fwd06::launch_chunk_states<false, fwd06::state_columns>(&forward, f, whole, chunks))
        return -1;
    unsigned blocks;
    if (gdn_blocks_for(p->B * p->H * chunks, 1, &blocks))
        return -1;
    CUDA_LAUNCH_WITH_SHARED(walk_inputs_kernel, blocks, INPUTS_THREADS, inputs_bytes(p->K, p->V), forward, f, w);
    return 0;
}

static int backward_states_backward(const gdn_device_problem *p, const gdn_device_cotangents *c, const gdn_settings *s,
                                    gdn_device_result *r, gdn_device_gradients *g)
{
    const size_t heads = p->B * p->H;
    if (check_device_problem(p, s))
        return -1;
    backward_workspace w;
    size_t walk_bytes, bytes;
    if (workspace_parts_of(heads, p->T, p->K, p->V, r->workspace, &w, &walk_bytes, &bytes))
        return -1;
    if (bytes > r->workspace_bytes)
        return gdn_set_error("the backward's workspace needs %zu bytes, %zu were given", bytes, r->workspace_bytes);
    if (forward_states(p, w, walk_bytes, r)) /* a refusal of 06's launches or the conversion's, named by gdn_last_error */
        return -1;
    unsigned walk_blocks;
    if (gdn_blocks_for(heads, 1, &walk_blocks))
        return -1;
    CUDA_LAUNCH_WITH_SHARED(fused_walk_kernel, walk_blocks, GRADIENT_THREADS, walk_tiles_at(nullptr).bytes, *p, *c, w, r->o, *g);
    return 0;
}

extern "C" const gdn_backward_stage backward_states_stage = {
    .name = "13_backward_states",
    .idea = "12's walk on the gamma, Tm, S0 and Vnew of stage 06's kernel 1 and chain, turned into the walk's layouts",
    .options = GDN_OPTION_CHUNK,
    .backward = NULL,
    .counted_flops = backward_chunked_flops,
    .resolve_options = backward_passes_resolve_options,
    .device_backward = backward_states_backward,
    .device_workspace_bytes = backward_states_workspace,
    .runner = &gdn_cuda_backward_runner,
    .bf16_inputs = 1,
};
