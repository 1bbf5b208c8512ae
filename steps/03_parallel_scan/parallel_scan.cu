/* 03_parallel_scan_cuda -- stage 03 on the GPU: the prefix scan over token maps, level by level.
 *
 * The idea (docs/03_parallel_scan.md, "On the GPU"): the same work-efficient in-place scan
 * (Brent-Kung) as the CPU stage, one kernel launch per level: at a level every pair
 * (later r, earlier r - stride) is independent, so a launch covers all pairs of all heads.
 *   build_maps:    m_t = (A_t, B_t) = (alpha (I - beta k k^T), beta k v^T)  (eq. 2 of docs/02_affine.md)
 *   compose_level: maps[r] = maps[r] o maps[r - stride]: A_r <- A_r A_{r-s}, B_r <- A_r B_{r-s} + B_r
 *   read_outputs:  S_t = A_t h0 + B_t, o_t = scale S_t^T q_t; write_final_state: ht = S_{T-1}
 * A composition is a K x K times K x (K + V) product. One block computes ROWS_PER_BLOCK
 * rows of it: it copies its rows of A_r to shared memory first, so it may overwrite them in
 * place (no other block reads rows of the later map), and each thread owns one column of
 * the earlier map [A | B], read once from global memory and used for all the block's rows.
 *
 * Cost per head: as the CPU stage, about 2 T compositions of 2 K^2 (K + V) flops (the K^3
 * wall) and T maps of K (K + V) values held in GPU memory at once (refused up front, with
 * the byte count, when larger than the free device memory). Depth: 2 log2 T launches.
 * Limits: K <= 128 (a block's rows of A_r in shared memory).
 *
 * Build and run:  make bin/03_parallel_scan_cuda && bin/03_parallel_scan_cuda --T 4096 --H 8 --check-against oracle
 */
#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/stage.h"
extern "C" { /* the CPU twin's header, for its flop count: C linkage */
#include "parallel_scan.h"
}

enum { MAX_K = 128, ROWS_PER_BLOCK = 16, COLUMN_THREADS = 128, READ_THREADS = 128 };

/* maps[head][t] is K x (K + V): rows of A (K x K) first, then B (K x V), as affine_map_at. */
__device__ static inline float *map_at(float *maps, size_t head, size_t t, size_t T, size_t K, size_t V)
{
    return maps + (head * T + t) * K * (K + V);
}

/* One element of one map per thread, in a grid-stride loop over all of them. */
__global__ void build_maps_kernel(gdn_device_problem p, float *maps)
{
    const size_t K = p.K, V = p.V, W = K + V, total = p.B * p.H * p.T * K * W;
    for (size_t n = (size_t)blockIdx.x * blockDim.x + threadIdx.x; n < total; n += (size_t)gridDim.x * blockDim.x) {
        size_t element = n % (K * W), head_t = n / (K * W), t = head_t % p.T, head = head_t / p.T;
        size_t token = gdn_device_token(&p, head / p.H, t, head % p.H);
        const float *k = p.k + token * K, alpha = expf(p.g[token]), beta = p.beta[token];
        float value;
        if (element < K * K) { /* A[i, l] */
            size_t i = element / K, l = element % K;
            value = alpha * ((i == l ? 1.0f : 0.0f) - beta * k[i] * k[l]);
        } else { /* B[i, j] */
            size_t i = (element - K * K) / V, j = (element - K * K) % V;
            value = beta * k[i] * p.v[token * V + j];
        }
        maps[n] = value;
    }
}

/* maps[r] = maps[r] o maps[r - stride] for r = first + 2 stride n; block (head, pair, row tile). */
__global__ void __launch_bounds__(COLUMN_THREADS)
compose_level_kernel(float *maps, size_t T, size_t K, size_t V, size_t first, size_t stride, size_t pairs)
{
    __shared__ float later_rows[ROWS_PER_BLOCK][MAX_K];
    const size_t row_tiles = (K + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, tile = blockIdx.x % row_tiles;
    const size_t pair = blockIdx.x / row_tiles % pairs, head = blockIdx.x / row_tiles / pairs;
    const size_t r = first + 2 * stride * pair, first_row = tile * ROWS_PER_BLOCK;
    const size_t rows = K - first_row < ROWS_PER_BLOCK ? K - first_row : ROWS_PER_BLOCK;
    float *later = map_at(maps, head, r, T, K, V);
    const float *earlier = map_at(maps, head, r - stride, T, K, V);
    for (size_t n = threadIdx.x; n < ROWS_PER_BLOCK * K; n += blockDim.x)
        later_rows[n / K][n % K] = n / K < rows ? later[(first_row + n / K) * K + n % K] : 0.0f;
    __syncthreads();
    /* column c of the result: A_r[rows, :] times column c of [A_e | B_e], plus B_r for c >= K */
    for (size_t c = threadIdx.x; c < K + V; c += blockDim.x) {
        float sum[ROWS_PER_BLOCK];
#pragma unroll
        for (int i = 0; i < ROWS_PER_BLOCK; i++)
            sum[i] = c >= K && (size_t)i < rows ? later[K * K + (first_row + i) * V + (c - K)] : 0.0f;
        for (size_t m = 0; m < K; m++) {
            float e = c < K ? earlier[m * K + c] : earlier[K * K + m * V + (c - K)];
#pragma unroll
            for (int i = 0; i < ROWS_PER_BLOCK; i++)
                sum[i] += later_rows[i][m] * e;
        }
#pragma unroll
        for (int i = 0; i < ROWS_PER_BLOCK; i++)
            if ((size_t)i < rows) {
                if (c < K)
                    later[(first_row + i) * K + c] = sum[i];
                else
                    later[K * K + (first_row + i) * V + (c - K)] = sum[i];
            }
    }
}

/* Block (head, t): o_t = scale q_t^T (A_t h0 + B_t) = scale ((q_t^T A_t) h0 + q_t^T B_t). */
__global__ void __launch_bounds__(READ_THREADS) read_outputs_kernel(gdn_device_problem p, const float *maps, float *o)
{
    __shared__ float q[MAX_K], qA[MAX_K];
    const size_t K = p.K, V = p.V, head = blockIdx.x / p.T, t = blockIdx.x % p.T;
    const size_t token = gdn_device_token(&p, head / p.H, t, head % p.H);
    const float *A = map_at((float *)maps, head, t, p.T, K, V), *B = A + K * K;
    const float *h0 = p.h0 ? p.h0 + head * K * V : NULL;
    for (size_t i = threadIdx.x; i < K; i += blockDim.x)
        q[i] = p.q[token * K + i];
    __syncthreads();
    if (h0) {
        for (size_t m = threadIdx.x; m < K; m += blockDim.x) {
            float sum = 0.0f;
            for (size_t i = 0; i < K; i++)
                sum += q[i] * A[i * K + m];
            qA[m] = sum;
        }
        __syncthreads();
    }
    for (size_t j = threadIdx.x; j < V; j += blockDim.x) {
        float sum = 0.0f;
        for (size_t i = 0; i < K; i++)
            sum += q[i] * B[i * V + j] + (h0 ? qA[i] * h0[i * V + j] : 0.0f);
        o[token * V + j] = p.scale * sum;
    }
}

/* ht = A_{T-1} h0 + B_{T-1}, the last prefix applied: block (head, row i), thread per column. */
__global__ void __launch_bounds__(READ_THREADS) write_final_state_kernel(gdn_device_problem p, const float *maps, float *ht)
{
    const size_t K = p.K, V = p.V, head = blockIdx.x / K, i = blockIdx.x % K;
    const float *A = map_at((float *)maps, head, p.T - 1, p.T, K, V), *B = A + K * K;
    for (size_t j = threadIdx.x; j < V; j += blockDim.x) {
        float sum = B[i * V + j];
        if (p.h0)
            for (size_t m = 0; m < K; m++)
                sum += A[i * K + m] * p.h0[(head * K + m) * V + j];
        ht[(head * K + i) * V + j] = sum;
    }
}

/* One level of the scan: every pair of every head, or nothing when first >= T. */
static int compose_level(float *maps, const gdn_device_problem *p, size_t first, size_t stride)
{
    if (first >= p->T)
        return 0;
    size_t pairs = (p->T - 1 - first) / (2 * stride) + 1;
    unsigned blocks;
    if (gdn_blocks_for(p->B * p->H * pairs * ((p->K + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK), 1, &blocks))
        return -1;
    compose_level_kernel<<<blocks, COLUMN_THREADS>>>(maps, p->T, p->K, p->V, first, stride, pairs);
    CUDA_CHECK_LAUNCH("compose_level_kernel");
    return 0;
}

static int parallel_scan_cuda_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    (void)s;
    if (p->K > MAX_K)
        return gdn_set_error("K = %zu: the GPU scan keeps rows of a K x K map in shared memory, K at most %d", p->K,
                             MAX_K);
    float *maps = (float *)r->workspace;
    unsigned reads, rows;
    if (gdn_blocks_for(p->B * p->H * p->T, 1, &reads) || gdn_blocks_for(p->B * p->H * p->K, 1, &rows))
        return -1;
    build_maps_kernel<<<1024, 256>>>(*p, maps);
    CUDA_CHECK_LAUNCH("build_maps_kernel");
    /* inclusive scan: up-sweep, then down-sweep (eq. 4 and 5), as in the CPU stage */
    size_t top_stride = 1;
    while (2 * top_stride < p->T)
        top_stride *= 2;
    for (size_t stride = 1; stride < p->T; stride *= 2)
        if (compose_level(maps, p, 2 * stride - 1, stride))
            return -1;
    for (size_t stride = top_stride; stride >= 1; stride /= 2)
        if (compose_level(maps, p, 3 * stride - 1, stride))
            return -1;
    read_outputs_kernel<<<reads, READ_THREADS>>>(*p, maps, r->o);
    CUDA_CHECK_LAUNCH("read_outputs_kernel");
    write_final_state_kernel<<<rows, READ_THREADS>>>(*p, maps, r->ht);
    CUDA_CHECK_LAUNCH("write_final_state_kernel");
    return 0;
}

/* The T maps of every head at once: B H T K (K + V) floats. */
static int parallel_scan_cuda_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    (void)s;
    size_t factors[6] = {p->B * p->H, p->T, p->K, p->K + p->V, sizeof(float)};
    return gdn_multiply_sizes(bytes, 5, factors);
}

extern "C" const gdn_stage parallel_scan_cuda_stage = {
    .name = "03_parallel_scan_cuda",
    .idea = "stage 03 on the GPU: token maps composed by a Brent-Kung scan, one launch per level",
    .options = 0,
    .forward = NULL,
    .counted_flops = parallel_scan_flops,
    .resolve_options = NULL,
    .device_forward = parallel_scan_cuda_forward,
    .device_workspace_bytes = parallel_scan_cuda_workspace,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 0,
};
