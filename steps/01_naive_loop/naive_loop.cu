/* 01_naive_loop_cuda -- stage 01 on the GPU: the same token loop, one thread per state column.
 *
 * The idea (docs/01_naive_loop.md, "On the GPU"): the loop over tokens stays serial, but
 * the V columns of the state are independent (eq. 1b-1d only ever mix rows), so each
 * thread owns one column, kept in registers for the whole sequence (naive_loop_step.cuh).
 * A block holds 64 columns of one head; the grid is (N HV heads: sequences times value
 * heads) x (V / 64 column tiles). The state never leaves the chip until ht is written at the end.
 * The layouts of problem.h (device.h: gdn_device_layout) cost nothing here: a value head reads
 * its key head's rows, and a packed sequence is a stretch of positions with its own state.
 *
 * Cost: the same 7 K V flops per token as the CPU stage; memory: the inputs, read once per
 * column tile; parallel depth T tokens, each a K-long dot product, a K-long update and a
 * K-long dot product in one thread (about 3 K dependent FMAs split over four chains).
 * With B H V / 64 blocks of 64 threads the GPU is nearly empty at small B H: the time is
 * T times the latency of one token, which is what stages 04 and 05 attack.
 * Limits: K <= 128 (a column in registers; at K > 64 two threads share it); V and T any.
 *
 * Build and run:  make bin/01_naive_loop_cuda && bin/01_naive_loop_cuda --T 16384 --H 8 --check-against oracle
 */
#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/stage.h"
#include "naive_loop_step.cuh"
extern "C" { /* the CPU twin's header, for its flop count: C linkage */
#include "naive_loop.h"
}

/* One block: head blockIdx.x (sequence n = head / HV, value head h = head % HV), columns
 * blockIdx.y * 64 + 0 .. 63; the sequence's tokens from h0 (or zero) to ht. */
template <int MAX_K>
__global__ void __launch_bounds__(COLUMNS_PER_BLOCK * threads_per_column(MAX_K))
naive_loop_kernel(gdn_device_problem p, gdn_device_layout layout, float *o, float *ht)
{
    constexpr int SPLIT = threads_per_column(MAX_K), ROWS = rows_per_thread(MAX_K);
    __shared__ token_tile<MAX_K> tile;
    const size_t head = blockIdx.x, n = head / layout.HV, h = head % layout.HV, K = p.K, V = p.V;
    const size_t start = gdn_device_sequence_start(&p, &layout, n);
    const token_rows rows = {gdn_device_key_row(&p, &layout, start, h), p.H, gdn_device_value_row(&layout, start, h), layout.HV};
    const size_t first_column = (size_t)blockIdx.y * COLUMNS_PER_BLOCK, column = first_column + threadIdx.x / SPLIT;
    const size_t first_row = threadIdx.x % SPLIT * ROWS;
    float state[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; i++)
        state[i] = p.h0 && first_row + i < K && column < V ? p.h0[(head * K + first_row + i) * V + column] : 0.0f;
    naive_loop_run_tokens<MAX_K>(p, rows, gdn_device_sequence_length(&p, &layout, n), state, first_column, 0, o, tile);
    if (column < V)
#pragma unroll
        for (int i = 0; i < ROWS; i++)
            if (first_row + i < K)
                ht[(head * K + first_row + i) * V + column] = state[i];
}

static int naive_loop_cuda_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    (void)s;
    unsigned heads = 0, column_tiles = 0;
    if (gdn_blocks_for(gdn_device_sequences(p, &r->layout) * r->layout.HV, 1, &heads) ||
        gdn_blocks_for(p->V, COLUMNS_PER_BLOCK, &column_tiles))
        return -1;
    if (column_tiles > 65535)
        return gdn_set_error("V = %zu needs %u column tiles, more than a grid's 65535", p->V, column_tiles);
    dim3 grid(heads, column_tiles);
    switch (naive_loop_max_k(p->K)) {
    case 32: naive_loop_kernel<32><<<grid, COLUMNS_PER_BLOCK * threads_per_column(32)>>>(*p, r->layout, r->o, r->ht); break;
    case 64: naive_loop_kernel<64><<<grid, COLUMNS_PER_BLOCK * threads_per_column(64)>>>(*p, r->layout, r->o, r->ht); break;
    case 128: naive_loop_kernel<128><<<grid, COLUMNS_PER_BLOCK * threads_per_column(128)>>>(*p, r->layout, r->o, r->ht); break;
    default: return gdn_set_error("K = %zu: the GPU loop keeps a state column in registers, K at most 128", p->K);
    }
    CUDA_CHECK_LAUNCH("naive_loop_kernel");
    return 0;
}

extern "C" const gdn_stage naive_loop_cuda_stage = {
    .name = "01_naive_loop_cuda",
    .idea = "the per-token recurrence on the GPU: one thread per state column, the column in registers",
    .options = GDN_OPTION_VALUE_HEADS | GDN_OPTION_PACKED,
    .forward = NULL,
    .counted_flops = naive_loop_flops,
    .resolve_options = NULL,
    .device_forward = naive_loop_cuda_forward,
    .device_workspace_bytes = NULL,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 0,
};
