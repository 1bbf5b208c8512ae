/* wy_chunked_solve.cuh -- the per-chunk pieces of the chunked form that do not multiply
 * matrices: the running sum of the gates (eq. 9) and the triangular solve (eq. 11), on one
 * chunk of SOLVE_CHUNK = 64 tokens in shared memory. Kernel 1 of 05_wy_chunked_cuda uses
 * them; stage 06's uses the gate sums and the diagonal blocks' inversion, and joins the
 * blocks on tensor cores instead (join_diagonal_blocks_tf32).
 * Call them from every thread of a block of at least 64 threads (the gates' sums: from one
 * warp; join_diagonal_blocks: of exactly 256), as the comments say.
 */
#ifndef GDN_WY_CHUNKED_SOLVE_CUH
#define GDN_WY_CHUNKED_SOLVE_CUH

/* The triangular solve of eq. 11 by blocks. I + M is unit lower triangular; cut into 16 x 16
 * blocks L_ab (a, b = 0 .. 3), its inverse X is block lower triangular too, with
 *     X_aa = L_aa^-1                                  (each diagonal block on its own)
 *     X_ab = -X_aa (sum_{b <= c < a} L_ac X_cb)        for b < a, block row by block row.
 * The first line is four independent 16-row substitutions; the second is three steps of two
 * small products. Eight barriers in all, where the row-by-row solve took 126. */
enum { SOLVE_CHUNK = 64, SOLVE_BLOCK = 16, SOLVE_BLOCKS = SOLVE_CHUNK / SOLVE_BLOCK };

/* X_aa = (I + M_aa)^-1 for the four diagonal blocks, M_aa in Tm's strict lower part (row
 * stride LDT floats). Thread (a, c), one of 64, owns column c of X_aa and keeps it in
 * registers: row i of the forward substitution, x_i = -sum_{l < i} M[i, l] x_l (with x_c = 1
 * and x_l = 0 above it), needs only its own column and row i of M, read by every thread of the
 * block at once (a broadcast). So the 15 dependent rows need no barrier and no shuffle. The
 * loops have compile-time bounds, which keeps x[] in registers. Where LDT is even (stage 06's
 * 68; stage 05's 65 is odd, against bank conflicts elsewhere) the rows are 8-byte aligned, and
 * a row's elements are read two at a time: 64 loads a thread where one at a time takes 120, on
 * the path of the two warps the rest of the block waits for; the sums keep their order. (Four
 * at a time, 36 loads, holds more registers: in some of stage 06's builds 4 bytes spill.)
 * Kept out of line: inlined, it pushes kernel 1 past the 85 registers a thread that three
 * blocks per SM allow, into spills. */
template <int LDT>
__device__ __noinline__ static void invert_diagonal_blocks(float *Tm)
{
    const int a = threadIdx.x / SOLVE_BLOCK, c = threadIdx.x % SOLVE_BLOCK;
    float x[SOLVE_BLOCK];
    if (a < SOLVE_BLOCKS) {
        const float *M = Tm + a * SOLVE_BLOCK * LDT + a * SOLVE_BLOCK;
#pragma unroll
        for (int i = 0; i < SOLVE_BLOCK; i++) {
            float sum = 0.0f;
            if constexpr (LDT % 2 == 0) {
#pragma unroll
                for (int l0 = 0; l0 < i; l0 += 2) {
                    const float2 two = *(const float2 *)&M[i * LDT + l0];
                    sum += two.x * x[l0];
                    if (l0 + 1 < i)
                        sum += two.y * x[l0 + 1];
                }
            } else {
#pragma unroll
                for (int l = 0; l < i; l++)
                    sum += M[i * LDT + l] * x[l];
            }
            x[i] = i < c ? 0.0f : i == c ? 1.0f : -sum;
        }
    }
    __syncthreads(); /* every thread has read M_aa before any X_aa overwrites it */
    if (a < SOLVE_BLOCKS)
#pragma unroll
        for (int i = 0; i < SOLVE_BLOCK; i++)
            Tm[(a * SOLVE_BLOCK + i) * LDT + a * SOLVE_BLOCK + c] = x[i];
}

/* X_ab for b < a, one block row a at a time; rows above a are final when row a starts.
 *     Y = M[rows of a, 0 .. 16 a) X[0 .. 16 a, 0 .. 16 a)    (X lower triangular)
 *     X[rows of a, 0 .. 16 a) = -X_aa Y
 * Thread t (of exactly 256) owns row i = t / 16 of the block row and the columns
 * j = t % 16 + 16 k, k < a. The block row is a template argument, so every loop bound is a
 * compile-time constant: the loops unroll, and the sum for column block k starts at row 16 k
 * (X is zero above its diagonal blocks). A first version with run-time bounds (l from j to
 * 16 a, e / width for the indices) spent a third of kernel 1's stall samples here, and ten
 * times the instructions of its multiply-adds. Y goes to `scratch` (16 x 64 floats); M's
 * block row is overwritten only after every Y is made. */
template <int BLOCK_ROW>
__device__ __forceinline__ static void join_block_row(float *Tm, int ldt, float *scratch)
{
    const int i = threadIdx.x / SOLVE_BLOCK, j0 = threadIdx.x % SOLVE_BLOCK, first_row = BLOCK_ROW * SOLVE_BLOCK;
    const float *row = Tm + (first_row + i) * ldt;
    float y[BLOCK_ROW], x[BLOCK_ROW];
#pragma unroll
    for (int k = 0; k < BLOCK_ROW; k++)
        y[k] = 0.0f, x[k] = 0.0f;
#pragma unroll
    for (int l = 0; l < first_row; l++) {
        const float m = row[l]; /* one load for the BLOCK_ROW columns */
#pragma unroll
        for (int k = 0; k < BLOCK_ROW; k++)
            if (l >= k * SOLVE_BLOCK)
                y[k] += m * Tm[l * ldt + k * SOLVE_BLOCK + j0];
    }
#pragma unroll
    for (int k = 0; k < BLOCK_ROW; k++)
        scratch[i * SOLVE_CHUNK + k * SOLVE_BLOCK + j0] = y[k];
    __syncthreads();
#pragma unroll
    for (int l = 0; l < SOLVE_BLOCK; l++) { /* X_aa is lower triangular: its zeros above add nothing */
        const float diagonal = row[first_row + l];
#pragma unroll
        for (int k = 0; k < BLOCK_ROW; k++)
            x[k] += diagonal * scratch[l * SOLVE_CHUNK + k * SOLVE_BLOCK + j0];
    }
#pragma unroll
    for (int k = 0; k < BLOCK_ROW; k++)
        Tm[(first_row + i) * ldt + k * SOLVE_BLOCK + j0] = -x[k];
    __syncthreads();
}

/* The three block rows below the first, in order; call from a block of exactly 256 threads. */
__device__ static void join_diagonal_blocks(float *Tm, int ldt, float *scratch)
{
    static_assert(SOLVE_BLOCKS == 4, "the block rows joined below are 1, 2 and 3");
    join_block_row<1>(Tm, ldt, scratch);
    join_block_row<2>(Tm, ldt, scratch);
    join_block_row<3>(Tm, ldt, scratch);
}

/* The running sum of the chunk's log-gates (eq. 9) by the 32 lanes of one warp, in their
 * registers: lane l holds tokens 2l and 2l + 1 (first, second), adds its two gates, and a scan
 * of those pairs across the lanes (5 shuffle steps) gives what comes before them. Summing the
 * 64 one after another, in one thread, keeps the other seven warps of the block waiting at the
 * next barrier (ncu puts a tenth of kernel 1's stall samples there). Zeros past the chunk's n
 * tokens make their sums the chunk's total, which it returns to every lane. */
__device__ __forceinline__ static double warp_gate_sums(double *first, double *second)
{
    const int lane = threadIdx.x % 32;
    double running = *first + *second; /* becomes the sum of pairs 0 .. lane */
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
        const double other = __shfl_up_sync(0xffffffffu, running, offset);
        if (lane >= offset)
            running += other;
    }
    double before = __shfl_up_sync(0xffffffffu, running, 1);
    if (lane == 0)
        before = 0.0;
    *first = before + *first;
    *second = *first + *second;
    return __shfl_sync(0xffffffffu, running, 31);
}

/* gamma = the running sum of the gates, in place in shared memory, by one warp
 * (warp_gate_sums). Stage 06's kernel 3 sums its chunk's gates by this function where it runs
 * beside the chain, so that its gamma is kernel 1's to the bit. */
__device__ __forceinline__ static double running_gate_sums(double *gamma, int n)
{
    const int i = 2 * (threadIdx.x % 32);
    double first = i < n ? gamma[i] : 0.0, second = i + 1 < n ? gamma[i + 1] : 0.0;
    const double total = warp_gate_sums(&first, &second);
    gamma[i] = first;
    gamma[i + 1] = second;
    return total;
}

/* What the rest of the block reads of a chunk's gates, written by one warp from its lanes'
 * sums (first, second: tokens 2 lane and 2 lane + 1, as warp_gate_sums leaves them): gamma
 * and beta into shared memory, scaled_beta = beta exp(gamma), gamma to the workspace (for
 * the outputs' kernels), and kernel 2's decay exp(gamma_C) with its 3 floats of padding. */
__device__ __forceinline__ static void write_gate_sums(double first, double second, double total, float beta_first,
                                                       float beta_second, int n, double *gamma, float *beta, float *scaled_beta,
                                                       double *gamma_out, float *decay)
{
    const int lane = threadIdx.x % 32, i = 2 * lane;
    const double sums[2] = {first, second};
    const float betas[2] = {beta_first, beta_second};
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int j = i + e;
        gamma[j] = sums[e];
        beta[j] = betas[e];
        scaled_beta[j] = j < n ? betas[e] * expf((float)sums[e]) : 0.0f;
        if (j < n)
            gamma_out[j] = sums[e];
    }
    if (lane < 4)
        decay[lane] = lane == 0 ? expf((float)total) : 0.0f;
}

/* The gates' sums from the gates and betas in shared memory, by the block's first warp. Out of
 * line, as invert_diagonal_blocks above and for the same reason. */
__device__ __noinline__ static void cumulative_gates(double *gamma, float *beta, float *scaled_beta, int n, double *gamma_out, float *decay)
{
    const int i = 2 * (threadIdx.x % 32);
    double first = i < n ? gamma[i] : 0.0, second = i + 1 < n ? gamma[i + 1] : 0.0;
    const double total = warp_gate_sums(&first, &second);
    write_gate_sums(first, second, total, beta[i], beta[i + 1], n, gamma, beta, scaled_beta, gamma_out, decay);
}

#endif
