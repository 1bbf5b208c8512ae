/* prepare_chunks.cuh -- kernel 1: everything of a chunk that does not depend on the state,
 * for every chunk at once.
 *
 * A block per (head, chunk), 8 warps, each making a 16 x 32 part of every 64 x 64 product. In
 * order (docs/05): the gates' sums gamma (eq. 9, in double) by the one warp with no block of
 * K K^T on or below the diagonal, while the others make K K^T; I + M (eq. 10); Tm = (I +
 * M)^-1 (eq. 11), its diagonal blocks inverted in fp32 by two warps while the others decay
 * the keys (eq. 15), then joined by doubling on tensor cores, in tf32
 * (join_diagonal_blocks_tf32); last, what the chain reads (chunk_parts_for): W = Tm (beta
 * e^gamma K) and U = Tm (beta V) (eq. 12) with the decayed keys, or the transform block alone
 * for the chains that make Vnew from v. k and v come by tensor copies, W and U leave by bulk
 * stores, and the tiles share places (tm_place_bytes), so that four blocks fit an SM.
 *
 * Cost: stage 05's kernel 1 products (wy_chunked_flops) on tensor cores, the causal ones
 * skipping their zero blocks; it reads k and v (bf16), g and beta, and writes 2 K + V values a
 * token (W, the decayed keys, U) or the transform block. Every (head, chunk) is independent,
 * so the kernel is off the serial chain: its time is its work and bytes spread over the SMs,
 * bound by its L1. Each instance's registers, shared memory and blocks an SM: docs/06, "06c:
 * kernels 1 and 3 by the TMA unit" and "06: Vnew from v, and the launch rules".
 *
 * Included by warp_specialized.cuh.
 */
#pragma once

#include "prepare_phases.cuh" /* the tiles, the products by rows, the joins, the decayed keys, W and U */

/* What kernel 1 writes (its `parts`, chunk_parts_for): the decayed keys and W and U, or the
 * transform block, which the chains that make Vnew from v read instead (chain_from_values) */
enum { WRITE_KEYS_T = 1, WRITE_W_AND_U = 2, WRITE_TRANSFORM = 4 };

/* The transform block, what the chains that make Vnew from v read (chain_from_values): Tm's
 * strictly lower part in bf16 (swizzled rows) and three factors a token: beta, beta e^gamma and
 * the decay to the chunk's end. `block`: the (head, chunk)'s index; `flag`: raise its ready
 * flag once every write is done (kernel 1 beside the chain). */
__device__ __forceinline__ static void write_transform_block(const chunk_workspace &w, size_t block, bool flag, const float *Tm,
                                                             const float *beta, const float *scaled_beta, const double *gamma, int n)
{
    bf16 *const transform = (bf16 *)(w.transforms + block * TRANSFORM_BYTES);
    /* Tm's strictly lower part in bf16, eight columns a thread, one 16-byte store each (a
       row's eight fill its swizzled 128-byte line). Of each eight lanes (one wavefront of
       16-byte reads) four read half of one row and four the other half of the next (the
       row's low bit flipped by the piece's bit 2): rows SOLVE_STRIDE floats apart start 4
       banks apart, so the eight reads meet no conflict, where one row's meet two by two */
    for (int piece = threadIdx.x; piece < CHUNK * CHUNK / 8; piece += THREADS) {
        static_assert(SOLVE_STRIDE % 32 == 4 && THREADS % 32 == 0, "a row's reads 4 banks from the row before");
        const int i = (piece / 8) ^ (piece / 4 % 2), c0 = piece % 8 * 8;
        const float4 left = *(const float4 *)&Tm[i * SOLVE_STRIDE + c0], right = *(const float4 *)&Tm[i * SOLVE_STRIDE + c0 + 4];
        const float row[8] = {left.x, left.y, left.z, left.w, right.x, right.y, right.z, right.w};
        uint32_t pairs[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            pairs[e] = pack_bf16(c0 + 2 * e < i ? row[2 * e] : 0.0f, c0 + 2 * e + 1 < i ? row[2 * e + 1] : 0.0f);
        *(uint4 *)&transform[swizzled_offset(CHUNK, i, c0)] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
    }
    if (threadIdx.x < CHUNK) { /* the factors */
        float *const factors = (float *)(transform + CHUNK * CHUNK);
        const int token = threadIdx.x;
        factors[token] = beta[token];
        factors[CHUNK + token] = scaled_beta[token];
        factors[2 * CHUNK + token] = decay_to_chunk_end(gamma, n, token);
    }
    if (flag) { /* the chain may take the chunk: its flag, after every write */
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence(); /* the block's writes (seen through the barrier) before the flag, at GPU scope */
            store_release_gpu(w.ready + block, 1u);
        }
    }
}

/* Kernel 1's variants, each built for the blocks an SM it should hold, which caps its registers
 * (__launch_bounds__, prepare_blocks): PREPARE_SLICES, V in slices of VALUE_SLICE columns, 3;
 * PREPARE_ONE_SLICE, V one slice, where four blocks' shared memory fits too (tm_place_bytes), 4
 * (with the loop over later slices ptxas would spill 20 bytes); PREPARE_PRECISE, --precise, 2;
 * PREPARE_TRANSFORM, the transform block alone: without W, U, the decayed keys and the values'
 * tile (the join's scratch in the keys' place), 6 (docs/06, "06: Vnew from v, and the launch
 * rules"). */
enum prepare_variant { PREPARE_SLICES, PREPARE_ONE_SLICE, PREPARE_PRECISE, PREPARE_TRANSFORM };
__host__ __device__ constexpr int prepare_blocks(prepare_variant variant)
{
    return variant == PREPARE_PRECISE ? 2 : variant == PREPARE_ONE_SLICE ? 4 : variant == PREPARE_TRANSFORM ? 6 : 3;
}
/* (PREPARE_TRANSFORM returns after the transform block: nvcc would call the loops after it unreachable) */
#pragma nv_diag_suppress 128
/* SIZE: K = V = SIZE known to the compiler (64 or 128), so strides and bounds are constants; 0: as given */
template <prepare_variant VARIANT, int SIZE>
static __global__ void __launch_bounds__(THREADS, prepare_blocks(VARIANT)) prepare_chunks_kernel(gdn_device_problem p, chunk_workspace w,
                                                                                          const __grid_constant__ CUtensorMap k_map,
                                                                                          const __grid_constant__ CUtensorMap v_map, int parts,
                                                                                          unsigned first_chunk)
{
    extern __shared__ double shared[];
    constexpr bool PRECISE = VARIANT == PREPARE_PRECISE, TRANSFORM_ONLY = VARIANT == PREPARE_TRANSFORM;
    const size_t key_count = SIZE ? (size_t)SIZE : p.K, V = SIZE ? (size_t)SIZE : p.V;
    const int K = (int)key_count, KP = round_up16(key_count), LDK = key_stride(key_count);
    /* the block's (head, chunk), 32-bit as blockIdx.x is: registers are few at four blocks an SM.
       Beside the chain (w.ready), from first_chunk in the chain's order: every head's c, then c + 1 */
    const unsigned chunks = (unsigned)chunks_of(p.T), heads = (unsigned)(p.B * p.H);
    const bool beside_chain = TRANSFORM_ONLY && w.ready;
    const unsigned chunk = beside_chain ? first_chunk + blockIdx.x / heads : blockIdx.x % chunks;
    const unsigned head = beside_chain ? blockIdx.x % heads : blockIdx.x / chunks;
    const unsigned b = head / (unsigned)p.H, h = head % (unsigned)p.H;
    const size_t t0 = (size_t)chunk * CHUNK;
    if (t0 >= row_tokens(w, b, p.T)) /* a padded row's padding: nothing to prepare */
        return;
    const size_t row0 = (size_t)head * p.T + t0;
    /* n: the chunk's tokens in its row, a packed batch's padding included. Its real ones
       (chunk_tokens) bound every read of the inputs, which past them are the next sequence's
       tokens (input_tile_at): g and beta read as 0 there, as padding would, so beta zeroes those
       rows of M, W and U, and gamma keeps the last real token's sum. Loaded where used: a
       register for it all along would spill at six blocks an SM. */
    const int n = (int)(p.T - t0 < CHUNK ? p.T - t0 : CHUNK), warp = threadIdx.x / 32;
    const int tile_row = 16 * (warp % 4), tile_column = 32 * (warp / 4);
    unsigned char *chain = w.chain + (head * chunks + chunk) * chain_block_bytes(key_count, V, PRECISE);
    const bf16 *k16 = (const bf16 *)p.k_bf16, *v16 = (const bf16 *)p.v_bf16;
    const int VP = round_up16(V), LDV = value_stride(V);
    /* from a 128-byte boundary, as tensor copies want; the launch adds 128 bytes for the shift */
    double *gamma = (double *)SHARED_AT_128_BYTES(shared); /* common/bulk_copy.cuh */
    float *beta = (float *)(gamma + CHUNK), *scaled_beta = beta + CHUNK, *Tm = scaled_beta + CHUNK;
    bf16 *keys = (bf16 *)((unsigned char *)Tm + tm_place_bytes(PRECISE)), *values = keys + CHUNK * LDK;
    bf16 *Tm_values = (bf16 *)Tm, *Tm_keys = Tm_values + CHUNK * TOKEN_STRIDE; /* in Tm's place, once Tm is read */

    /* k and v in, asynchronously: the keys now, waited for before K K^T; the values once the
     * solve is done with their place, waited for only before U, so their copy runs under the
     * rounding of Tm, the decayed keys and W. Where the boxes fit, one tensor copy each on an
     * mbarrier (the values' box is the first slice's tile); else the threads copy them. */
    /* token t0 + i of g, beta and v: input_token(w, b, p.T, t0, p.H, h) + i H, made where it is
       used, as chunk_tokens is */
    const size_t token_stride = p.H;
    const bool by_map = tiles_by_tensor_map(key_count, V, key_heads(p), p.T);
    static_assert((CHUNK * sizeof(double) + 2 * CHUNK * sizeof(float) + tm_place_bytes(PRECISE)) % 128 == 0,
                  "the keys' tile starts 128-byte aligned (the values' then does too: 64 rows of LDK bf16 are 128 LDK bytes)");
    __shared__ uint64_t keys_landed, values_landed;
    if (by_map && threadIdx.x == 0) {
        barrier_init(&keys_landed, 1);
        barrier_init(&values_landed, 1);
        barrier_init_fence();
        barrier_arrive_expecting(&keys_landed, (uint32_t)(CHUNK * LDK * sizeof(bf16)));
        const token_coordinates at = input_tile_at(w, b, t0);
        tensor_copy_3d(keys, &k_map, (int)(h / p.heads_per_key * K), at.t, at.b, &keys_landed);
    }
    if (!by_map) {
        copy_tile(keys, LDK, CHUNK, chunk_tokens(w, b, p.T, t0), K, KP, k16 + input_token(w, b, p.T, t0, key_heads(p), h / p.heads_per_key) * K,
                  key_heads(p) * K);
        __pipeline_commit();
    }
    /* The gates' sums (eq. 9) by warp 4 alone (tokens 2 lane and 2 lane + 1), which has no
     * block of K K^T on or below the diagonal, while the other warps make K K^T: no warp waits
     * for the gates before its products. The barrier below only publishes the mbarriers'
     * initialization; warp 4's loads are in flight across it. */
    constexpr int GATES_WARP = 4;
    static_assert(GATES_WARP / 4 * 32 >= 16 * (GATES_WARP % 4) + 16, "the gates' warp has no K K^T block on or below the diagonal");
    double gate_first = 0.0, gate_second = 0.0;
    float beta_first = 0.0f, beta_second = 0.0f;
    const int pair = 2 * (threadIdx.x % 32);
    if (warp == GATES_WARP) {
        const size_t first_token = input_token(w, b, p.T, t0, p.H, h);
        const int real = chunk_tokens(w, b, p.T, t0);
        if (pair < real)
            gate_first = p.g[first_token + pair * token_stride], beta_first = p.beta[first_token + pair * token_stride];
        if (pair + 1 < real)
            gate_second = p.g[first_token + (pair + 1) * token_stride], beta_second = p.beta[first_token + (pair + 1) * token_stride];
    }
    __syncthreads(); /* the barriers' initialization is seen before any thread waits on them */
    if (warp == GATES_WARP) {
        const double total = warp_gate_sums(&gate_first, &gate_second);
        write_gate_sums(gate_first, gate_second, total, beta_first, beta_second, n, gamma, beta, scaled_beta, w.gamma + row0,
                        (float *)(chain + chain_decay_offset(K, V, PRECISE)));
    }
    if (by_map)
        barrier_wait(&keys_landed, 0);
    else {
        __pipeline_wait_prior(0); /* the keys, */
        __syncthreads();          /* every thread's */
    }

    /* I + M, M[i, j] = beta_i (k_i . k_j) exp(gamma_i - gamma_j) for j < i (eq. 10): K K^T on
     * tensor cores, keys serving as both A and B^T */
    float acc[4][4];
    clear(acc);
    warp_product(acc, keys, LDK, keys, LDK, tile_row, tile_column, KP, causal_tiles(tile_row, tile_column)); /* its l < i blocks */
    __syncthreads(); /* the gates' sums are here */
    /* the gates of the thread's two rows, read once, and of its two columns in each 16 x 8
     * tile, read before the tile's stores, which would otherwise make the compiler read them
     * again for every element (the rows' betas serve U's diagonal term too). All eight
     * columns' gates at once would take registers that six blocks an SM do not have. */
    double row_gamma[2];
    float row_beta[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int i = fragment_row(tile_row, 2 * half);
        row_gamma[half] = gamma[i], row_beta[half] = beta[i];
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const double column_gamma[2] = {gamma[fragment_column(tile_column, j, 0)], gamma[fragment_column(tile_column, j, 1)]};
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = fragment_row(tile_row, r), l = fragment_column(tile_column, j, r);
            Tm[i * SOLVE_STRIDE + l] = i == l                 ? 1.0f
                                       : l < i && i < n ? row_beta[r / 2] * acc[j][r] * exp_approx((float)(row_gamma[r / 2] - column_gamma[r % 2]))
                                                        : 0.0f;
        }
    }
    __syncthreads();
    /* the decayed keys by warps 2-7 while warps 0 and 1 invert the diagonal blocks, which would otherwise keep them waiting */
    static_assert(SOLVE_BLOCKS * SOLVE_BLOCK == CHUNK && (THREADS - CHUNK) % CHUNK == 0, "the inversion takes the first 64 threads");
    if (!TRANSFORM_ONLY && threadIdx.x >= CHUNK && (parts & WRITE_KEYS_T))
        write_decayed_keys((bf16 *)(chain + chain_keys_offset(K, PRECISE)), keys, LDK, KP, gamma, n);
    invert_diagonal_blocks<SOLVE_STRIDE>(Tm); /* Tm = (I + M)^-1 (eq. 11): the diagonal blocks in fp32, */
    __syncthreads();
    /* the rest on tensor cores, its scratch in the values' place (transform block alone: the keys', read by now) */
    static_assert(!TRANSFORM_ONLY || CHUNK * (SIZE + KEY_STRIDE_PADDING) * sizeof(bf16) >= 32 * JOIN_STRIDE * sizeof(float),
                  "the join's scratch fits in the keys' place (that instance is compiled for K = 64 or 128)");
    join_diagonal_blocks_tf32(Tm, TRANSFORM_ONLY ? (float *)keys : (float *)values);
    fence_shared_for_bulk_store(); /* the scratch's accesses before the values' tensor copy (common/bulk_copy.cuh) */
    /* W = Tm (beta e^gamma K) and U = Tm (beta V) (eq. 12) as (Tm diag(beta e^gamma)) K and (Tm
     * diag(beta)) V: the scales go into Tm's columns, so K and V enter as they lie and
     * ldmatrix.trans makes their B fragments, where stage 05 writes scaled, transposed copies
     * (docs/06, "06c: kernels 1 and 3 by the TMA unit"). Past the chunk both scales are zero, and so are W's and
     * U's rows. The products take Tm's strictly lower part, and the diagonal's term, beta_i
     * e^gamma_i k_i, is added in fp32 below: in bf16 it would round beta_i once for the whole
     * row, an error no sum averages away. */
    /* into Tm's own place: each thread reads its 16 elements (column l of rows first_row, + 4,
     * ...: its column's scales read once, fixed offsets from one address), then writes them
     * after a barrier, the bf16 pair (keys' scale, values' scale) of each in one register */
    static_assert(THREADS % CHUNK == 0, "each thread keeps one column of Tm (and one token of keys_t below)");
    constexpr int PER_THREAD = CHUNK * CHUNK / THREADS, ROW_STEP = THREADS / CHUNK;
    const int l = threadIdx.x % CHUNK, first_row = threadIdx.x / CHUNK;
    const float keys_scale = scaled_beta[l], values_scale = beta[l];
    if (TRANSFORM_ONLY || (parts & WRITE_TRANSFORM)) { /* the transform block (the chains from v) */
        write_transform_block(w, (size_t)head * chunks + chunk, beside_chain && chunk >= w.ready_from, Tm, beta, scaled_beta, gamma, n);
        if (TRANSFORM_ONLY || !(parts & WRITE_W_AND_U)) /* that chain makes Vnew from v itself */
            return;
    }
    uint32_t scaled[PER_THREAD];
#pragma unroll
    for (int a = 0; a < PER_THREAD; a++) {
        const int i = first_row + a * ROW_STEP;
        const float lower = l < i ? Tm[i * SOLVE_STRIDE + l] : 0.0f;
        scaled[a] = pack_bf16(lower * keys_scale, lower * values_scale);
    }
    __syncthreads(); /* every read of Tm done (and of the solve's scratch: the values may come) */
    if (by_map && threadIdx.x == 0) {
        barrier_arrive_expecting(&values_landed, (uint32_t)(CHUNK * LDV * sizeof(bf16)));
        const token_coordinates at = input_tile_at(w, b, t0);
        tensor_copy_3d(values, &v_map, (int)(h * V), at.t, at.b, &values_landed);
    }
    if (!by_map) {
        copy_tile(values, LDV, CHUNK, chunk_tokens(w, b, p.T, t0), (int)(V < VALUE_SLICE ? V : VALUE_SLICE), VP < VALUE_SLICE ? VP : VALUE_SLICE,
                  v16 + input_token(w, b, p.T, t0, p.H, h) * V, token_stride * V);
        __pipeline_commit();
    }
#pragma unroll
    for (int a = 0; a < PER_THREAD; a++) {
        const int i = first_row + a * ROW_STEP;
        const __nv_bfloat162 pair = *(const __nv_bfloat162 *)&scaled[a];
        Tm_keys[i * TOKEN_STRIDE + l] = __low2bfloat16(pair);
        Tm_values[i * TOKEN_STRIDE + l] = __high2bfloat16(pair);
    }
    __syncthreads();

    /* each warp 16 rows and 32 of every 64 columns of [W | U]; K and V are zero past K and V,
     * so W's columns K .. KP and U's V .. VP come out zero, as kernel 2 needs them. Both leave
     * through a staging tile (a lane's fragment would fill half of each 32-byte sector of a
     * direct store) by one bulk store, whole lines; U's is laid out as U_t (u_fragment_index).
     * W's is the keys' own place: a 64-column pass reads only its own columns of the keys, so
     * after a barrier its W columns take their place (the diagonal's term read before it). */
    chain_u_type<PRECISE> *U_stage = (chain_u_type<PRECISE> *)Tm_keys; /* 64 rows of U_t at a time, in fragment order */
    make_w<PRECISE>(chain, K, KP, LDK, keys, Tm_keys, scaled_beta, tile_row, tile_column);
    if (by_map)
        barrier_wait(&values_landed, 0);
    else
        __pipeline_wait_prior(0); /* the values */
    /* U, VALUE_SLICE columns of v at a time (one, already here, for V <= VALUE_SLICE), 64
     * columns a pass: each warp's 32 into the staging tile, then 64 rows of U_t out */
    make_u<PRECISE, VARIANT == PREPARE_ONE_SLICE>(chain, K, V, VP, LDV, values, Tm_values, U_stage, row_beta, chunk_tokens(w, b, p.T, t0), v16,
                                                     input_token(w, b, p.T, t0, p.H, h), token_stride, tile_row, tile_column);
    if (threadIdx.x == 0)
        bulk_store_wait(); /* the block's shared memory stays until its stores have read it */
}
#pragma nv_diag_default 128
