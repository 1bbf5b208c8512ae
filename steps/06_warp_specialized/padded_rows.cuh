/* padded_rows.cuh -- a packed batch (--lengths, cu_seqlens) run as N rows of its longest
 * sequence's tokens.
 *
 * Each sequence is gathered into its row and padded with tokens that change nothing (q, k and
 * v zero, g = 0: no decay, beta = 0: no write, so the state leaves the padding as it entered
 * it); a stage's passes run on the N rows as on any batch, and each row's real tokens' o is
 * scattered back. ht is the rows' last states, in the batch's order already. Each sequence's
 * chunks start at its first token, as FLA's do, so its chunks and their sums are those it has
 * alone.
 *
 * The padding is not run: the passes' chunk_workspace points at the batch's offsets (row_offsets),
 * kernel 1 and kernel 3 return at a chunk of padding alone, and a chain block ends at its row's
 * last real chunk (chunk_workspace.cuh: row_tokens; chain_ring.cuh: end_at_real_tokens).
 *
 * Cost: a copy of the inputs into the rows and of o out of them, bound by memory (none where every length is the same:
 * the packed row is N rows already), and blocks for N x longest tokens, those of padding
 * returning at once. Workspace: the stage's own for the N rows, then the padded inputs and o
 * (padded_parts).
 *
 * Included by warp_specialized.cuh, so that whatever includes 06's stage header takes packed batches.
 */
#pragma once

/* the padded q (k after it), v, g (beta after it) and o, each from a 256-byte boundary */
static inline int padded_parts(size_t N, size_t longest, size_t H, size_t HV, size_t K, size_t V, size_t bytes[4], size_t *total)
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

/* The packed batch's N rows of its longest sequence's tokens, as a problem without offsets */
static inline gdn_problem padded_rows_of(const gdn_problem *p)
{
    gdn_problem rows = *p;
    rows.B = gdn_sequences(p), rows.T = gdn_longest_sequence(p), rows.offsets = NULL, rows.sequences = 0;
    return rows;
}
static inline gdn_problem padded_rows_on_device(const gdn_device_problem *p, const gdn_device_layout *l)
{
    gdn_problem rows = {};
    rows.B = l->sequences, rows.T = l->longest, rows.H = p->H, rows.HV = l->HV, rows.K = p->K, rows.V = p->V;
    return rows;
}

/* a stage's workspace for a problem without offsets (its device_workspace_bytes) */
typedef int (*rows_workspace_bytes)(const gdn_problem *rows, const gdn_settings *s, size_t *bytes);
/* the stage's workspace for the N rows, rounded up to 256 bytes, where the padded parts start */
static inline int padded_rows_start(const gdn_problem *rows, const gdn_settings *s, rows_workspace_bytes rows_workspace, size_t *start)
{
    if (rows_workspace(rows, s, start))
        return -1;
    if (*start + 255 < *start)
        return gdn_set_error("the workspace of %zu sequences of up to %zu tokens overflows size_t", rows->B, rows->T);
    *start = (*start + 255) / 256 * 256;
    return 0;
}
/* A packed batch's workspace: the rows' and the padded parts after them (the rows' alone where
   every length is the same) */
static inline int padded_workspace_bytes(const gdn_problem *p, const gdn_settings *s, rows_workspace_bytes rows_workspace, size_t *bytes)
{
    const gdn_problem rows = padded_rows_of(p);
    if (rows.B * rows.T == p->T) /* every length the same: no padding (packed_forward) */
        return rows_workspace(&rows, s, bytes);
    size_t padded[4], extra;
    if (padded_rows_start(&rows, s, rows_workspace, bytes) || padded_parts(rows.B, rows.T, p->H, gdn_value_heads(p), p->K, p->V, padded, &extra))
        return -1;
    if (*bytes + extra < *bytes)
        return gdn_set_error("the workspace of %zu sequences of up to %zu tokens overflows size_t", rows.B, rows.T);
    *bytes += extra;
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

/* a stage's passes on B rows of T tokens (no offsets) */
typedef int (*rows_forward_pass)(const gdn_device_problem *rows, const gdn_settings *s, gdn_device_result *r);
/* The packed batch through rows_forward: gathered into padded rows, the passes, o scattered back */
static inline int packed_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r, rows_workspace_bytes rows_workspace,
                          rows_forward_pass rows_forward)
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
        return gdn_set_error("the passes write o in bf16: the runner made no room for it");
    const gdn_problem row_sizes = padded_rows_on_device(p, &r->layout);
    size_t start, bytes[4], total;
    if (padded_rows_start(&row_sizes, s, rows_workspace, &start) || padded_parts(N, longest, p->H, HV, p->K, p->V, bytes, &total))
        return -1;
    unsigned char *at = (unsigned char *)r->workspace + start;
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
    padded.layout.offsets = NULL, padded.layout.sequences = N, padded.layout.longest = longest;
    padded.layout.padded_from = r->layout.offsets; /* the passes run no chunk of padding alone (row_tokens) */
    padded.o_in_bf16 = 0;
    if (rows_forward(&rows, s, &padded))
        return -1;
    CUDA_LAUNCH_WITH_SHARED(scatter_outputs, blocks, 256, 0, r->layout.offsets, longest, HV * p->V, o, r->o, r->o_bf16, padded.o_in_bf16);
    r->o_in_bf16 = padded.o_in_bf16;
    return 0;
}
