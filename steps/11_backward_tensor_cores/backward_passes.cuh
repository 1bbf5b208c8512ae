/* backward_passes.cuh -- the host side both tensor-core backwards share: their limits, the
 * workspace between the four passes, and the passes' launches, whose chain blocks carry COLUMNS
 * columns of the state (11a: 16, 11: 64; chains.cuh).
 *
 * Included by backward_mma_sync.cu and backward_tensor_cores.cu after the kernels' headers, and
 * by 12 and 13 for the limits and the workspace (inline: not every includer calls each).
 */
#pragma once

/* what the kernels take: one line naming the value refused */
static inline int check_limits(size_t heads, size_t T, size_t K, size_t V, size_t C)
{
    if (C != CHUNK)
        return gdn_set_error("--chunk %zu: the tensor-core backward runs chunks of %d tokens only (its blocked solve's)", C,
                             (int)CHUNK);
    if (K > MAX_WIDTH)
        return gdn_set_error("K = %zu: the tensor-core backward keeps K-wide tiles in shared memory, K at most %d", K,
                             (int)MAX_WIDTH);
    if (V > MAX_WIDTH)
        return gdn_set_error("V = %zu: the tensor-core backward keeps V-wide tiles in shared memory, V at most %d", V,
                             (int)MAX_WIDTH);
    if (heads > INT32_MAX / ((T + CHUNK - 1) / CHUNK))
        return gdn_set_error("%zu heads of %zu chunks: more blocks than one launch takes", heads, chunks_of(T));
    return 0;
}

/* `count` pieces one after another, each the product of its four factors in bytes and 256-byte
 * aligned: piece i at offsets[i], *bytes in all; -1 where that overflows size_t */
static inline int layout_pieces(int count, const size_t (*factors)[4], size_t *offsets, size_t *bytes)
{
    size_t offset = 0;
    for (int i = 0; i < count; i++) {
        size_t size;
        if (gdn_multiply_sizes(&size, 4, factors[i]) || size > SIZE_MAX - 255 - offset)
            return -1;
        offsets[i] = offset;
        offset += (size + 255) / 256 * 256;
    }
    *bytes = offset;
    return 0;
}

/* the workspace's pieces at base (NULL: only their size, in *bytes), each 256-byte aligned */
static inline int workspace_layout(size_t heads, size_t T, size_t K, size_t V, void *base, backward_workspace *w, size_t *bytes)
{
    const size_t chunks = chunks_of(T), KP = (size_t)round_up16(K), VP = (size_t)round_up16(V);
    const size_t factors[11][4] = {{heads, T, sizeof(double), 1},
                                  {heads, T, sizeof(double), 1},
                                  {heads, chunks, CHUNK * CHUNK, sizeof(bf16)},
                                  {heads, chunks, CHUNK * KP, sizeof(bf16)},
                                  {heads, chunks, CHUNK * VP, sizeof(float)},
                                  {heads, chunks, CHUNK * VP, sizeof(float)},
                                  {heads, chunks, CHUNK * VP, sizeof(bf16)},
                                  {heads, T, VP, sizeof(bf16)},
                                  {heads, T, VP, sizeof(bf16)},
                                  {heads, chunks, KP * VP, sizeof(bf16)},
                                  {heads, chunks, KP * VP, sizeof(bf16)}};
    size_t offsets[11];
    if (layout_pieces(11, factors, offsets, bytes))
        return gdn_set_error("the backward's workspace for %zu heads of %zu tokens overflows size_t", heads, T);
    if (base) {
        unsigned char *at = (unsigned char *)base;
        *w = (backward_workspace){chunks,
                                  (double *)(at + offsets[0]),
                                  (double *)(at + offsets[1]),
                                  (bf16 *)(at + offsets[2]),
                                  (bf16 *)(at + offsets[3]),
                                  (float *)(at + offsets[4]),
                                  (float *)(at + offsets[5]),
                                  (bf16 *)(at + offsets[6]),
                                  (bf16 *)(at + offsets[7]),
                                  (bf16 *)(at + offsets[8]),
                                  (bf16 *)(at + offsets[9]),
                                  (bf16 *)(at + offsets[10])};
    }
    return 0;
}

static inline int backward_passes_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    const size_t heads = p->B * p->H;
    return check_limits(heads, p->T, p->K, p->V, s->chunk) || workspace_layout(heads, p->T, p->K, p->V, NULL, NULL, bytes) ? -1
                                                                                                                          : 0;
}

/* the problem and the settings checked: the limits, q, k and v in bf16 */
static inline int check_device_problem(const gdn_device_problem *p, const gdn_settings *s)
{
    if (check_limits(p->B * p->H, p->T, p->K, p->V, s->chunk))
        return -1;
    if (!p->q_bf16 || !p->k_bf16 || !p->v_bf16)
        return gdn_set_error("the tensor-core backward reads q, k and v in bf16, and none were given");
    return 0;
}

/* the problem and the settings checked, and the workspace laid out in r's, which must be large
 * enough: what every backward on these passes does first */
static inline int backward_passes_workspace_of(const gdn_device_problem *p, const gdn_settings *s, const gdn_device_result *r,
                                               backward_workspace *w)
{
    const size_t heads = p->B * p->H;
    if (check_device_problem(p, s))
        return -1;
    size_t bytes = 0;
    if (workspace_layout(heads, p->T, p->K, p->V, r->workspace, w, &bytes))
        return -1;
    if (bytes > r->workspace_bytes)
        return gdn_set_error("the backward's workspace needs %zu bytes, %zu were given", bytes, r->workspace_bytes);
    return 0;
}

/* the four passes, in the current stream; the chains' blocks carry COLUMNS columns of the state
 * (chain_shape), and TOGETHER runs passes 2 and 3 in one launch (both_chains_kernel) */
template <int COLUMNS, bool TOGETHER>
static int run_backward_passes(const gdn_device_problem *p, const gdn_device_cotangents *c, const gdn_settings *s,
                               gdn_device_result *r, gdn_device_gradients *g)
{
    const size_t heads = p->B * p->H, K = p->K, V = p->V;
    backward_workspace w;
    if (backward_passes_workspace_of(p, s, r, &w))
        return -1;
    unsigned chunk_blocks, chain_blocks;
    if (gdn_blocks_for(heads * w.chunks, 1, &chunk_blocks) ||
        gdn_blocks_for(heads * ((round_up16(V) + COLUMNS - 1) / COLUMNS), 1, &chain_blocks))
        return -1;
    CUDA_LAUNCH_WITH_SHARED(prepare_chunks_kernel<true>, chunk_blocks, THREADS, prepare_tiles_at(nullptr, K, V).bytes, *p, *c, w);
    constexpr int CHAIN_THREADS = chain_shape<COLUMNS>::THREADS;
    if constexpr (TOGETHER) {
        unsigned both_blocks;
        if (gdn_blocks_for(2 * (size_t)chain_blocks, 1, &both_blocks))
            return -1;
        CUDA_LAUNCH_WITH_SHARED(both_chains_kernel<COLUMNS>, both_blocks, CHAIN_THREADS,
                                chain_tiles_at<COLUMNS>(nullptr, K, true).bytes, *p, *c, w, r->ht, g->dh0, chain_blocks);
    } else {
        CUDA_LAUNCH_WITH_SHARED(forward_chain_kernel<COLUMNS>, chain_blocks, CHAIN_THREADS,
                                chain_tiles_at<COLUMNS>(nullptr, K, false).bytes, *p, w, r->ht);
        CUDA_LAUNCH_WITH_SHARED(backward_chain_kernel<COLUMNS>, chain_blocks, CHAIN_THREADS,
                                chain_tiles_at<COLUMNS>(nullptr, K, true).bytes, *p, *c, w, g->dh0);
    }
    CUDA_LAUNCH_WITH_SHARED(read_gradients_kernel, chunk_blocks, GRADIENT_THREADS, read_tiles_at(nullptr, K, V).bytes, *p, *c, w,
                            r->o, *g);
    CUDA_LAUNCH_WITH_SHARED(wy_gradients_kernel, chunk_blocks, GRADIENT_THREADS, wy_tiles_at(nullptr, K, V).bytes, *p, w, *g);
    return 0;
}

static inline void backward_passes_resolve_options(const gdn_problem *p, gdn_settings *s)
{
    (void)p;
    if (s->chunk == 0)
        s->chunk = CHUNK;
}
