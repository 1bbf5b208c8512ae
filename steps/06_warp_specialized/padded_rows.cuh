/* padded_rows.cuh -- a packed batch (--lengths, cu_seqlens) run as N rows of its longest
 * sequence's tokens.
 *
 * Row n is sequence n: the passes run on the N rows as on any batch, each row's chunks from its
 * sequence's first token, as FLA's are, so its chunks and their sums are those it has alone.
 * The kernels read q, k, v, g and beta where they lie in the packed batch (chunk_workspace.cuh:
 * input_row_start, input_tile_at): a row's last chunk takes the next sequence's first tokens
 * into its tiles, and no sum takes them (kernel 1 reads g and beta only below the chunk's real
 * tokens). o leaves by whole 64-token tiles, so the passes write it into padded rows, and each
 * row's real tokens are copied back (copy_rows): a tile stored in place would write into the
 * next sequence's o. ht is the rows' last states, in the batch's order already.
 *
 * The padding is not run: the passes' chunk_workspace points at the batch's offsets (row_offsets),
 * kernel 1 and kernel 3 return at a chunk of padding alone, and a chain block ends at its row's
 * last real chunk (chunk_workspace.cuh: row_tokens; chain_ring.cuh: end_at_real_tokens).
 *
 * Cost: a copy of the real tokens' o out of the padded rows, bound by memory (o's bytes read
 * and written once; none where every length is the same: the packed row is N rows already),
 * and blocks for N x longest tokens, those of padding returning at once. Workspace: the
 * stage's own for the N rows, then o's padded rows (padded_o_bytes).
 *
 * Included by warp_specialized.cuh, so that whatever includes 06's stage header takes packed batches.
 */
#pragma once

/* o's padded rows (fp32, or bf16 in its place), from a 256-byte boundary */
static inline int padded_o_bytes(size_t N, size_t longest, size_t HV, size_t V, size_t *bytes)
{
    size_t o[5] = {N, longest, HV, V, sizeof(float)};
    if (gdn_multiply_sizes(bytes, 5, o))
        return -1;
    if (*bytes + 255 < *bytes)
        return gdn_set_error("the padded rows of %zu sequences of %zu tokens overflow size_t", N, longest);
    *bytes = (*bytes + 255) / 256 * 256;
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
/* the stage's workspace for the N rows, rounded up to 256 bytes, where o's padded rows start */
static inline int padded_rows_start(const gdn_problem *rows, const gdn_settings *s, rows_workspace_bytes rows_workspace, size_t *start)
{
    if (rows_workspace(rows, s, start))
        return -1;
    if (*start + 255 < *start)
        return gdn_set_error("the workspace of %zu sequences of up to %zu tokens overflows size_t", rows->B, rows->T);
    *start = (*start + 255) / 256 * 256;
    return 0;
}
/* A packed batch's workspace: the rows' and o's padded rows after them (the rows' alone where
   every length is the same) */
static inline int padded_workspace_bytes(const gdn_problem *p, const gdn_settings *s, rows_workspace_bytes rows_workspace, size_t *bytes)
{
    const gdn_problem rows = padded_rows_of(p);
    if (rows.B * rows.T == p->T) /* every length the same: no padding (packed_forward) */
        return rows_workspace(&rows, s, bytes);
    size_t extra;
    if (padded_rows_start(&rows, s, rows_workspace, bytes) || padded_o_bytes(rows.B, rows.T, gdn_value_heads(p), p->V, &extra))
        return -1;
    if (*bytes + extra < *bytes)
        return gdn_set_error("the workspace of %zu sequences of up to %zu tokens overflows size_t", rows.B, rows.T);
    *bytes += extra;
    return 0;
}

/* Row n's real tokens of o (blockIdx.y), from the padded row (n longest tokens on) to the
   packed batch (offsets[n] on): one contiguous run of bytes on both sides, token_bytes a token
   (HV V fp32 or bf16). 16-byte words where both sides and the token allow, else 2-byte ones
   (every element is 2 or 4 bytes); the copy is bound by memory. */
static __global__ void copy_rows(const size_t *offsets, size_t N, size_t longest, unsigned char *packed_o, const unsigned char *rows_o,
                                 size_t token_bytes)
{
    for (size_t n = blockIdx.y; n < N; n += gridDim.y) {
        unsigned char *packed = packed_o + offsets[n] * token_bytes;
        const unsigned char *row = rows_o + n * longest * token_bytes;
        const size_t bytes = (offsets[n + 1] - offsets[n]) * token_bytes;
        const bool wide = token_bytes % 16 == 0 && (uintptr_t)packed % 16 == 0 && (uintptr_t)row % 16 == 0;
        const size_t unit = wide ? 16 : 2, stride = (size_t)gridDim.x * blockDim.x;
        for (size_t at = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * unit; at < bytes; at += stride * unit) {
            if (wide)
                *(uint4 *)(packed + at) = *(const uint4 *)(row + at);
            else
                *(unsigned short *)(packed + at) = *(const unsigned short *)(row + at);
        }
    }
}
/* copy_rows: enough blocks a row to stream the longest */
static int launch_copy_rows(const size_t *offsets, size_t N, size_t longest, unsigned char *packed_o, const unsigned char *rows_o,
                            size_t token_bytes)
{
    const size_t words = (longest * token_bytes + 15) / 16, per_block = 256 * 4; /* about four 16-byte words a thread */
    const dim3 grid((unsigned)((words + per_block - 1) / per_block < 1024 ? (words + per_block - 1) / per_block : 1024),
                    (unsigned)(N < 65535 ? N : 65535));
    CUDA_LAUNCH_WITH_SHARED(copy_rows, grid, 256, 0, offsets, N, longest, packed_o, rows_o, token_bytes);
    return 0;
}

/* a stage's passes on B rows of T tokens (no offsets) */
typedef int (*rows_forward_pass)(const gdn_device_problem *rows, const gdn_settings *s, gdn_device_result *r);
/* The packed batch through rows_forward: the passes on its N rows, read in place, then o copied
   back from its padded rows */
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
    if (p->T > (size_t)INT_MAX) /* the tensor maps' token coordinates (input_tile_at) are 32-bit */
        return gdn_set_error("a packed batch of %zu tokens: at most %d (the tensor maps' coordinates)", p->T, INT_MAX);
    const gdn_problem row_sizes = padded_rows_on_device(p, &r->layout);
    size_t start, o_bytes;
    if (padded_rows_start(&row_sizes, s, rows_workspace, &start) || padded_o_bytes(N, longest, HV, p->V, &o_bytes))
        return -1;
    unsigned char *o = (unsigned char *)r->workspace + start;
    gdn_device_result padded = *r;
    padded.o = (float *)o, padded.o_bf16 = (unsigned short *)o; /* one place: a pass writes o in one of the two */
    padded.layout.offsets = NULL, padded.layout.sequences = N, padded.layout.longest = longest;
    padded.layout.padded_from = r->layout.offsets; /* the inputs read in place, the padding not run (row_offsets) */
    padded.layout.padded_tokens = p->T;
    padded.o_in_bf16 = 0;
    if (rows_forward(&rows, s, &padded)) /* rows: the packed q, k, v, g and beta, N rows of `longest` tokens */
        return -1;
    const size_t token_bytes = HV * p->V * (padded.o_in_bf16 ? sizeof(bf16) : sizeof(float));
    if (launch_copy_rows(r->layout.offsets, N, longest, padded.o_in_bf16 ? (unsigned char *)r->o_bf16 : (unsigned char *)r->o, o,
                         token_bytes))
        return -1;
    r->o_in_bf16 = padded.o_in_bf16;
    return 0;
}
