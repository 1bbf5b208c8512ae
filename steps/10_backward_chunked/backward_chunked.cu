/* 10_backward_chunked_cuda -- stage 10's four passes as four GPU kernels, in fp32.
 *
 * The idea (docs/10_backward_chunked.md, "On the GPU"): the CPU stage's passes map onto the GPU
 * one to one, as stage 05's do. Pass 1 and pass 4 are one block per (head, chunk), every chunk at
 * once; the two chains are one block per (head, 16 columns of the state), walking the chunks in
 * order and back, the block's columns of S or dS in shared memory (a column of the state
 * depends only on the same column of Vnew, eq. 13-15 and 19a-19b). Every product is written as
 * block-strided loops over its output elements, each a plain sum in fp32: this is the reference
 * the tensor-core backward is checked against, not a fast kernel.
 *
 * Cost: stage 10's flops (backward_chunked_flops). Workspace per head: gamma and dgamma
 * (double, T each), the decay matrix, Tm, M and P^T (C x C a chunk), -W, U (then Vnew) and dVnew
 * (T (K + 2 V)), S0 and dS_C (K V a chunk), and pass 4's matrices (8 C^2 + C (4 K + V) a chunk).
 * Depth: 2 T / C chunk steps of the chains. Limits: --chunk at most 128, K at most 1024.
 *
 * Build and run:  make bin/10_backward_chunked_cuda && bin/10_backward_chunked_cuda --T 4096 --H 8 --check-against oracle
 */
#include <stdint.h>

#include "../../common/backward_stage.h"
#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "backward_chunked.h"

/* MAX_K: the chains keep K x 16 floats of the state in shared memory (64 KB at 1024), and every
 * index a * V or i * V stays below 2^31 for V up to the grid's 65535 column tiles */
enum { THREADS = 256, COLUMNS = 16, MAX_CHUNK = 128, MAX_K = 1024, MAX_COLUMN_TILES = 65535 };

/* the workspace between the passes (backward_chunked.c's, with pass 4's scratch) */
typedef struct {
    size_t C, chunks;
    double *gamma, *dgamma;           /* [heads T] */
    float *decay, *Tm, *M, *P_t;      /* [heads chunks C C] */
    float *minus_W, *U, *dVnew;       /* [heads T K], [heads T V], [heads T V] */
    float *S0, *dS_end;               /* [heads chunks K V] */
    float *scratch;                   /* [heads chunks SCRATCH]: pass 4's matrices */
} backward_workspace;

__host__ __device__ static size_t scratch_floats(size_t C, size_t K, size_t V) { return 8 * C * C + C * (4 * K + V); }

/* one chunk: n tokens from t0 of head (b, h); its rows in the workspace start at row */
typedef struct {
    size_t b, h, head, t0, row, index;
    int n;
} chunk_at;

__device__ static chunk_at chunk_of(const gdn_device_problem &p, const backward_workspace &w, size_t index)
{
    chunk_at x;
    x.index = index;
    x.head = index / w.chunks;
    x.b = x.head / p.H, x.h = x.head % p.H;
    x.t0 = index % w.chunks * w.C;
    x.row = x.head * p.T + x.t0;
    x.n = (int)(p.T - x.t0 < w.C ? p.T - x.t0 : w.C);
    return x;
}

__device__ static size_t token_of(const gdn_device_problem &p, const chunk_at &x, int i)
{
    return gdn_device_token(&p, x.b, x.t0 + (size_t)i, x.h);
}

__device__ static float dot(const float *a, const float *b, int n)
{
    float sum = 0;
    for (int i = 0; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

/* ---- pass 1: per chunk: gamma, the decay matrix, M, Tm (eq. 10-11), -W and U (eq. 12), P^T dO ---- */
__global__ static void __launch_bounds__(THREADS) prepare_chunks_kernel(gdn_device_problem p, gdn_device_cotangents cot,
                                                                          backward_workspace w)
{
    const chunk_at x = chunk_of(p, w, blockIdx.x);
    const int n = x.n, K = (int)p.K, V = (int)p.V, C = (int)w.C;
    double *gamma = w.gamma + x.row;
    float *decay = w.decay + x.index * C * C, *Tm = w.Tm + x.index * C * C, *M = w.M + x.index * C * C,
          *P_t = w.P_t + x.index * C * C;
    __shared__ float beta[MAX_CHUNK], grown[MAX_CHUNK];
    if (threadIdx.x == 0) {
        double sum = 0;
        for (int i = 0; i < n; i++)
            gamma[i] = sum += (double)p.g[token_of(p, x, i)];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        beta[i] = p.beta[token_of(p, x, i)];
        grown[i] = (float)exp(gamma[i]);
    }
    for (int e = threadIdx.x; e < n * n; e += blockDim.x) {
        const int i = e / n, j = e % n;
        const float d = j <= i ? (float)exp(gamma[i] - gamma[j]) : 0.f; /* never exp of a positive gap */
        const float *k_i = p.k + token_of(p, x, i) * K, *k_j = p.k + token_of(p, x, j) * K;
        decay[e] = d;
        M[e] = j < i ? p.beta[token_of(p, x, i)] * d * dot(k_i, k_j, K) : 0.f;
        P_t[j * n + i] = j <= i ? p.scale * d * dot(p.q + token_of(p, x, i) * K, k_j, K) : 0.f;
    }
    __syncthreads();
    for (int i = 0; i < n; i++) { /* (I + M) Tm = I, row by row (eq. 11) */
        for (int c = threadIdx.x; c < n; c += blockDim.x) {
            float value = c == i ? 1.f : 0.f;
            for (int l = c; l < i; l++)
                value -= M[i * n + l] * Tm[l * n + c];
            Tm[i * n + c] = value;
        }
        __syncthreads();
    }
    for (int e = threadIdx.x; e < n * K; e += blockDim.x) { /* -W = Tm (-beta e^gamma K) */
        const int i = e / K, a = e % K;
        float sum = 0;
        for (int j = 0; j <= i; j++)
            sum -= Tm[i * n + j] * beta[j] * grown[j] * p.k[token_of(p, x, j) * K + a];
        w.minus_W[(x.row + i) * K + a] = sum;
    }
    for (int e = threadIdx.x; e < n * V; e += blockDim.x) { /* U = Tm (beta V); P^T dO */
        const int i = e / V, c = e % V;
        float u = 0, dp = 0;
        for (int j = 0; j <= i; j++)
            u += Tm[i * n + j] * beta[j] * p.v[token_of(p, x, j) * V + c];
        for (int l = i; l < n; l++)
            dp += P_t[i * n + l] * cot.d_o[token_of(p, x, l) * V + c];
        w.U[(x.row + i) * V + c] = u;
        w.dVnew[(x.row + i) * V + c] = dp;
    }
}

/* ---- pass 2: the forward chain, one block per (head, 16 columns): S0, Vnew (eq. 13), eq. 15 ---- */
__global__ static void __launch_bounds__(THREADS) forward_chain_kernel(gdn_device_problem p, backward_workspace w, float *ht)
{
    extern __shared__ float S[]; /* [K][COLUMNS]: the block's columns of the state */
    __shared__ float to_end[MAX_CHUNK];
    const int K = (int)p.K, V = (int)p.V, column0 = blockIdx.y * COLUMNS;
    const int columns = V - column0 < COLUMNS ? V - column0 : COLUMNS;
    const size_t head = blockIdx.x;
    for (int e = threadIdx.x; e < K * columns; e += blockDim.x) {
        const int a = e / columns, cc = e % columns;
        S[a * COLUMNS + cc] = p.h0 ? p.h0[head * K * V + a * V + column0 + cc] : 0.f;
    }
    for (size_t c = 0; c < w.chunks; c++) {
        const chunk_at x = chunk_of(p, w, head * w.chunks + c);
        const int n = x.n;
        const double *gamma = w.gamma + x.row;
        float *S0 = w.S0 + x.index * K * V;
        __syncthreads(); /* S complete; to_end free */
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            to_end[j] = (float)exp(gamma[n - 1] - gamma[j]);
        for (int e = threadIdx.x; e < K * columns; e += blockDim.x) {
            const int a = e / columns, cc = e % columns;
            S0[a * V + column0 + cc] = S[a * COLUMNS + cc];
        }
        for (int e = threadIdx.x; e < n * columns; e += blockDim.x) { /* Vnew = U + (-W) S0 */
            const int i = e / columns, cc = e % columns;
            float *Vnew = w.U + (x.row + i) * V + column0 + cc;
            const float *minus_W = w.minus_W + (x.row + i) * K;
            float sum = *Vnew;
            for (int a = 0; a < K; a++)
                sum += minus_W[a] * S[a * COLUMNS + cc];
            *Vnew = sum;
        }
        __syncthreads(); /* Vnew and to_end complete; S read */
        const float decay_C = (float)exp(gamma[n - 1]);
        for (int e = threadIdx.x; e < K * columns; e += blockDim.x) { /* S = e^gamma_C S0 + Kdec^T Vnew */
            const int a = e / columns, cc = e % columns;
            float sum = decay_C * S[a * COLUMNS + cc];
            for (int j = 0; j < n; j++)
                sum += to_end[j] * p.k[token_of(p, x, j) * K + a] * w.U[(x.row + j) * V + column0 + cc];
            S[a * COLUMNS + cc] = sum;
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < K * columns; e += blockDim.x) {
        const int a = e / columns, cc = e % columns;
        ht[head * K * V + a * V + column0 + cc] = S[a * COLUMNS + cc];
    }
}

/* ---- pass 3: the backward chain: dS_C of each chunk, dVnew (eq. 19a), dS0 (eq. 19b) ---- */
__global__ static void __launch_bounds__(THREADS) backward_chain_kernel(gdn_device_problem p, gdn_device_cotangents cot,
                                                                          backward_workspace w, float *dh0)
{
    extern __shared__ float dS[]; /* [K][COLUMNS] */
    __shared__ float to_end[MAX_CHUNK], read[MAX_CHUNK];
    const int K = (int)p.K, V = (int)p.V, column0 = blockIdx.y * COLUMNS;
    const int columns = V - column0 < COLUMNS ? V - column0 : COLUMNS;
    const size_t head = blockIdx.x;
    for (int e = threadIdx.x; e < K * columns; e += blockDim.x) {
        const int a = e / columns, cc = e % columns;
        dS[a * COLUMNS + cc] = cot.dht[head * K * V + a * V + column0 + cc];
    }
    for (size_t c = w.chunks; c-- > 0;) {
        const chunk_at x = chunk_of(p, w, head * w.chunks + c);
        const int n = x.n;
        const double *gamma = w.gamma + x.row;
        float *dS_end = w.dS_end + x.index * K * V;
        __syncthreads();
        for (int j = threadIdx.x; j < n; j += blockDim.x) {
            to_end[j] = (float)exp(gamma[n - 1] - gamma[j]);
            read[j] = p.scale * (float)exp(gamma[j]);
        }
        for (int e = threadIdx.x; e < K * columns; e += blockDim.x) {
            const int a = e / columns, cc = e % columns;
            dS_end[a * V + column0 + cc] = dS[a * COLUMNS + cc];
        }
        __syncthreads();
        for (int e = threadIdx.x; e < n * columns; e += blockDim.x) { /* dVnew = P^T dO + Kdec dS_C */
            const int i = e / columns, cc = e % columns;
            const float *k = p.k + token_of(p, x, i) * K;
            float sum = 0;
            for (int a = 0; a < K; a++)
                sum += k[a] * dS[a * COLUMNS + cc];
            w.dVnew[(x.row + i) * V + column0 + cc] += to_end[i] * sum;
        }
        __syncthreads();
        const float decay_C = (float)exp(gamma[n - 1]);
        for (int e = threadIdx.x; e < K * columns; e += blockDim.x) { /* dS0 = e^gamma_C dS_C + Qg^T dO - W^T dVnew */
            const int a = e / columns, cc = e % columns;
            float sum = decay_C * dS[a * COLUMNS + cc];
            for (int i = 0; i < n; i++)
                sum += read[i] * p.q[token_of(p, x, i) * K + a] * cot.d_o[token_of(p, x, i) * V + column0 + cc] +
                       w.minus_W[(x.row + i) * K + a] * w.dVnew[(x.row + i) * V + column0 + cc];
            dS[a * COLUMNS + cc] = sum;
        }
    }
    __syncthreads();
    if (dh0)
        for (int e = threadIdx.x; e < K * columns; e += blockDim.x) {
            const int a = e / columns, cc = e % columns;
            dh0[head * K * V + a * V + column0 + cc] = dS[a * COLUMNS + cc];
        }
}

/* ---- pass 4: per chunk: o (eq. 14) and every gradient (eq. 19c-19d and the reads of 14-15) ----
 * Each dgamma_i is a row sum less a column sum of the matrices whose entries carry
 * exp(gamma_a - gamma_b) (E for P, H for M), plus the terms of the row's own factors: one thread
 * a row adds them, no atomics. */
typedef struct {
    float *P, *Z, *E, *dTm, *R, *F, *H, *B; /* [C C] each */
    float *dq_read, *dW, *dY, *dS_Vnew;     /* [C K] each: S0 dO_i, -S0 dVnew_i, Tm^T dW, dS_C Vnew_i */
    float *dX;                              /* [C V]: Tm^T dU */
} gradient_scratch;

__device__ static gradient_scratch scratch_of(float *base, int C, int K)
{
    gradient_scratch s;
    float **const squares[8] = {&s.P, &s.Z, &s.E, &s.dTm, &s.R, &s.F, &s.H, &s.B};
    for (int i = 0; i < 8; i++)
        *squares[i] = base + i * C * C;
    s.dq_read = base + 8 * C * C;
    s.dW = s.dq_read + C * K;
    s.dY = s.dW + C * K;
    s.dS_Vnew = s.dY + C * K;
    s.dX = s.dS_Vnew + C * K;
    return s;
}

__global__ static void __launch_bounds__(THREADS) chunk_gradients_kernel(gdn_device_problem p, gdn_device_cotangents cot,
                                                                           backward_workspace w, float *o,
                                                                           gdn_device_gradients g)
{
    const chunk_at x = chunk_of(p, w, blockIdx.x);
    const int n = x.n, K = (int)p.K, V = (int)p.V, C = (int)w.C, last = n - 1;
    const double *gamma = w.gamma + x.row;
    const float *decay = w.decay + x.index * C * C, *Tm = w.Tm + x.index * C * C;
    const float *S0 = w.S0 + x.index * K * V, *dS_C = w.dS_end + x.index * K * V;
    const float *Vnew = w.U + x.row * V, *dVnew = w.dVnew + x.row * V;
    const gradient_scratch s = scratch_of(w.scratch + x.index * scratch_floats(w.C, p.K, p.V), C, K);
    __shared__ float beta[MAX_CHUNK], grown[MAX_CHUNK], to_end[MAX_CHUNK], read[MAX_CHUNK];
    __shared__ size_t token[MAX_CHUNK];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        token[i] = token_of(p, x, i);
        beta[i] = p.beta[token[i]];
        grown[i] = (float)exp(gamma[i]);
        to_end[i] = (float)exp(gamma[last] - gamma[i]);
        read[i] = p.scale * grown[i];
    }
    __syncthreads();
    /* P, its gradient dP = dO Vnew^T (Z = scale decay dP), E = dP P off the diagonal (eq. 14) */
    for (int e = threadIdx.x; e < n * n; e += blockDim.x) {
        const int i = e / n, j = e % n;
        float P = 0, Z = 0, E = 0;
        if (j <= i) {
            const float dP = dot(cot.d_o + token[i] * V, Vnew + j * V, V), scaled = p.scale * decay[e];
            P = scaled * dot(p.q + token[i] * K, p.k + token[j] * K, K);
            Z = scaled * dP;
            E = j < i ? dP * P : 0.f; /* j = i: no gradient, and none added and taken back */
        }
        s.P[e] = P, s.Z[e] = Z, s.E[e] = E;
    }
    for (int e = threadIdx.x; e < n * K; e += blockDim.x) { /* S0 dO_i, -S0 dVnew_i, dS_C Vnew_i */
        const int i = e / K, a = e % K;
        s.dq_read[e] = dot(S0 + a * V, cot.d_o + token[i] * V, V);
        s.dW[e] = -dot(S0 + a * V, dVnew + i * V, V);
        s.dS_Vnew[e] = dot(dS_C + a * V, Vnew + i * V, V);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n * V; e += blockDim.x) { /* o; dX = Tm^T dU, dv = beta dX (eq. 19c) */
        const int i = e / V, c = e % V;
        float out = 0, dX = 0;
        for (int a = 0; a < K; a++)
            out += p.q[token[i] * K + a] * S0[a * V + c];
        out *= read[i];
        for (int j = 0; j <= i; j++)
            out += s.P[i * n + j] * Vnew[j * V + c];
        for (int l = i; l < n; l++)
            dX += Tm[l * n + i] * dVnew[l * V + c];
        o[token[i] * V + c] = out;
        s.dX[e] = dX;
        g.dv[token[i] * V + c] = beta[i] * dX;
    }
    for (int e = threadIdx.x; e < n * K; e += blockDim.x) { /* dY = Tm^T dW */
        const int j = e / K, a = e % K;
        float sum = 0;
        for (int i = j; i < n; i++)
            sum += Tm[i * n + j] * s.dW[i * K + a];
        s.dY[e] = sum;
    }
    for (int e = threadIdx.x; e < n * n; e += blockDim.x) { /* dTm below the diagonal */
        const int i = e / n, j = e % n;
        s.dTm[e] = j < i ? beta[j] * (dot(dVnew + i * V, p.v + token[j] * V, V) +
                                      grown[j] * dot(s.dW + i * K, p.k + token[j] * K, K))
                         : 0.f;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n * n; e += blockDim.x) { /* R = Tm^T dTm */
        const int a = e / n, b = e % n;
        float sum = 0;
        for (int i = (a > b + 1 ? a : b + 1); i < n; i++)
            sum += Tm[i * n + a] * s.dTm[i * n + b];
        s.R[e] = sum;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n * n; e += blockDim.x) { /* dM = -R Tm^T below the diagonal (eq. 19d) */
        const int a = e / n, b = e % n;
        float F = 0, H = 0, B = 0;
        if (b < a) {
            float dM = 0;
            for (int c = 0; c <= b; c++)
                dM -= s.R[a * n + c] * Tm[b * n + c];
            const float G = dot(p.k + token[a] * K, p.k + token[b] * K, K);
            F = dM * beta[a] * decay[e];
            H = F * G;
            B = dM * decay[e] * G;
        }
        s.F[e] = F, s.H[e] = H, s.B[e] = B;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) { /* dgamma_i and dbeta_i, a thread a row */
        const float *q = p.q + token[i] * K, *k = p.k + token[i] * K;
        const float dY_k = dot(s.dY + i * K, k, K);
        double dgamma = read[i] * dot(q, s.dq_read + i * K, K) + beta[i] * grown[i] * dY_k;
        float dbeta = dot(s.dX + i * V, p.v + token[i] * V, V) + grown[i] * dY_k;
        for (int j = 0; j < n; j++) {
            dgamma += s.E[i * n + j] - s.E[j * n + i] + s.H[i * n + j] - s.H[j * n + i];
            dbeta += s.B[i * n + j];
        }
        if (i < last)
            dgamma -= to_end[i] * dot(k, s.dS_Vnew + i * K, K);
        else {
            for (int j = 0; j < last; j++)
                dgamma += to_end[j] * dot(p.k + token[j] * K, s.dS_Vnew + j * K, K);
            dgamma += (double)grown[last] * dot(S0, dS_C, K * V);
        }
        w.dgamma[x.row + i] = dgamma;
        g.dbeta[token[i]] = dbeta;
    }
    for (int e = threadIdx.x; e < n * K; e += blockDim.x) { /* dq, dk */
        const int i = e / K, a = e % K;
        float dq = read[i] * s.dq_read[e], dk = to_end[i] * s.dS_Vnew[e] + beta[i] * grown[i] * s.dY[e];
        for (int j = 0; j <= i; j++)
            dq += s.Z[i * n + j] * p.k[token[j] * K + a];
        for (int l = i; l < n; l++)
            dk += s.Z[l * n + i] * p.q[token[l] * K + a];
        for (int b = 0; b < n; b++)
            dk += (s.F[i * n + b] + s.F[b * n + i]) * p.k[token[b] * K + a];
        g.dq[token[i] * K + a] = dq;
        g.dk[token[i] * K + a] = dk;
    }
    __syncthreads();
    if (threadIdx.x == 0) { /* gamma_i = g_0 + ... + g_i: dg_t sums dgamma from the chunk's end */
        double from_later = 0;
        for (int i = last; i >= 0; i--)
            g.dg[token[i]] = (float)(from_later += w.dgamma[x.row + i]);
    }
}

/* ---- host ---- */

static size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

/* the workspace's pieces at base (NULL: only their size, in *bytes) */
static int workspace_layout(size_t heads, size_t T, size_t K, size_t V, size_t C, void *base, backward_workspace *w,
                            size_t *bytes)
{
    const size_t chunks = (T + C - 1) / C, rows = heads * T, squares = heads * chunks * C * C;
    const size_t states = heads * chunks * K * V, scratch = heads * chunks * scratch_floats(C, K, V);
    if (T > SIZE_MAX / heads || rows > SIZE_MAX / (K + 2 * V + 2) || heads * chunks > SIZE_MAX / (C * C * 4) ||
        heads * chunks > SIZE_MAX / (K * V * 2 + scratch_floats(C, K, V)))
        return gdn_set_error("the backward's workspace for %zu heads of %zu tokens overflows size_t", heads, T);
    const size_t sizes[11] = {rows * sizeof(double), rows * sizeof(double), squares * 4, squares * 4, squares * 4,
                              squares * 4, rows * K * 4, rows * V * 4, rows * V * 4, states * 4 * 2, scratch * 4};
    unsigned char *at = (unsigned char *)base;
    size_t offset = 0, offsets[11];
    for (int i = 0; i < 11; i++) {
        offsets[i] = offset;
        offset += round_up(sizes[i]);
    }
    *bytes = offset;
    if (base) {
        *w = (backward_workspace){C, chunks, (double *)(at + offsets[0]), (double *)(at + offsets[1]),
                                  (float *)(at + offsets[2]), (float *)(at + offsets[3]), (float *)(at + offsets[4]),
                                  (float *)(at + offsets[5]), (float *)(at + offsets[6]), (float *)(at + offsets[7]),
                                  (float *)(at + offsets[8]), (float *)(at + offsets[9]),
                                  (float *)(at + offsets[9]) + states, (float *)(at + offsets[10])};
    }
    return 0;
}

/* what the kernels take: one line naming the limit */
static int check_limits(size_t heads, size_t T, size_t K, size_t V, size_t C)
{
    if (C > MAX_CHUNK)
        return gdn_set_error("--chunk %zu: the GPU backward takes chunks of at most %d tokens", C, (int)MAX_CHUNK);
    if (K > MAX_K)
        return gdn_set_error("K = %zu: the GPU backward keeps K x %d of the state in shared memory, K at most %d", K,
                             (int)COLUMNS, (int)MAX_K);
    if ((V + COLUMNS - 1) / COLUMNS > MAX_COLUMN_TILES)
        return gdn_set_error("V = %zu: the GPU backward's chains take at most %d columns", V,
                             (int)(MAX_COLUMN_TILES * COLUMNS));
    if (heads * ((T + C - 1) / C) > INT32_MAX)
        return gdn_set_error("%zu heads of %zu chunks: more blocks than one launch takes", heads, (T + C - 1) / C);
    return 0;
}

static int backward_chunked_cuda_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    const size_t C = s->chunk ? s->chunk : 64;
    return check_limits(p->B * p->H, p->T, p->K, p->V, C) ||
                   workspace_layout(p->B * p->H, p->T, p->K, p->V, C, NULL, NULL, bytes)
               ? -1
               : 0;
}

static int backward_chunked_cuda_backward(const gdn_device_problem *p, const gdn_device_cotangents *c,
                                          const gdn_settings *s, gdn_device_result *r, gdn_device_gradients *g)
{
    const size_t heads = p->B * p->H, C = s->chunk ? s->chunk : 64;
    if (check_limits(heads, p->T, p->K, p->V, C))
        return -1;
    backward_workspace w;
    size_t bytes = 0;
    if (workspace_layout(heads, p->T, p->K, p->V, C, r->workspace, &w, &bytes))
        return -1;
    if (bytes > r->workspace_bytes)
        return gdn_set_error("the backward's workspace needs %zu bytes, %zu were given", bytes, r->workspace_bytes);
    const dim3 every_chunk((unsigned)(heads * w.chunks)), chains((unsigned)heads, (unsigned)((p->V + COLUMNS - 1) / COLUMNS));
    const size_t state_bytes = p->K * COLUMNS * sizeof(float);
    prepare_chunks_kernel<<<every_chunk, THREADS, 0, gdn_pass_stream()>>>(*p, *c, w);
    CUDA_CHECK_LAUNCH("prepare_chunks_kernel");
    CUDA_LAUNCH_WITH_SHARED(forward_chain_kernel, chains, THREADS, state_bytes, *p, w, r->ht);
    CUDA_LAUNCH_WITH_SHARED(backward_chain_kernel, chains, THREADS, state_bytes, *p, *c, w, g->dh0);
    chunk_gradients_kernel<<<every_chunk, THREADS, 0, gdn_pass_stream()>>>(*p, *c, w, r->o, *g);
    CUDA_CHECK_LAUNCH("chunk_gradients_kernel");
    return 0;
}

static void backward_chunked_cuda_resolve_options(const gdn_problem *p, gdn_settings *s)
{
    (void)p;
    if (s->chunk == 0)
        s->chunk = 64;
}

extern "C" const gdn_backward_stage backward_chunked_cuda_stage = {
    .name = "10_backward_chunked_cuda",
    .idea = "stage 10's four passes as four GPU kernels in fp32: the reference for the tensor-core backward",
    .options = GDN_OPTION_CHUNK,
    .backward = NULL,
    .counted_flops = backward_chunked_flops,
    .resolve_options = backward_chunked_cuda_resolve_options,
    .device_backward = backward_chunked_cuda_backward,
    .device_workspace_bytes = backward_chunked_cuda_workspace,
    .runner = &gdn_cuda_backward_runner,
    .bf16_inputs = 0,
};
