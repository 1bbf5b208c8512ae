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
 * Cost: a copy of the real tokens' inputs into the rows and of their o out of them, bound by
 * memory (copy_rows: the bytes of q, k, v, g and beta read and written once, o's once more;
 * none where every length is the same: the packed row is N rows already), and blocks for N x
 * longest tokens, those of padding returning at once. Workspace: the stage's own for the N
 * rows, then the padded inputs and o (padded_parts).
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

/* One tensor of the packed batch beside the same tensor in padded rows: a token is token_bytes
   in both (q: H K bf16; g: HV fp32; o: HV V fp32 or bf16). */
struct packed_tensor {
    unsigned char *packed, *rows;
    size_t token_bytes;
};
struct packed_tensors {
    packed_tensor tensor[5];
    int gather; /* 1: packed -> rows, the last chunk's tail as padding; 0: rows -> packed, real tokens only */
};

/* Row n of each tensor (blockIdx.z) is one contiguous run of bytes on both sides: the packed
   batch's from offsets[n], the padded row's from n longest. A gather copies the row's real
   tokens and writes padding (zero bytes: 0 in bf16 and in fp32) only up to its last chunk's
   end, the last chunk kernel 1 and the chain read; the chunks past it are never read (the
   passes run no chunk of padding alone), so they are never written. A scatter copies the real
   tokens back. 16-byte words where both sides and the token allow, else 2-byte ones (every
   element is 2 or 4 bytes); the copies are bound by memory. */
static __global__ void copy_rows(const size_t *offsets, size_t N, size_t longest, packed_tensors x)
{
    /* x.tensor[blockIdx.z], by constant indices: a parameter indexed at run time is copied to local memory */
    const packed_tensor t = blockIdx.z == 0 ? x.tensor[0] : blockIdx.z == 1 ? x.tensor[1] : blockIdx.z == 2 ? x.tensor[2]
                          : blockIdx.z == 3 ? x.tensor[3] : x.tensor[4];
    for (size_t n = blockIdx.y; n < N; n += gridDim.y) {
        const size_t tokens = offsets[n + 1] - offsets[n];
        /* in tokens: to the last chunk's end, but never into the next row (the longest row's last
           chunk ends past its row, where the tensor maps fill zeros) */
        const size_t last_chunk_end = chunks_of(tokens) * CHUNK, span = !x.gather ? tokens : last_chunk_end < longest ? last_chunk_end : longest;
        unsigned char *packed = t.packed + offsets[n] * t.token_bytes, *row = t.rows + n * longest * t.token_bytes;
        const size_t real_bytes = tokens * t.token_bytes, bytes = span * t.token_bytes;
        const bool wide = t.token_bytes % 16 == 0 && (uintptr_t)packed % 16 == 0 && (uintptr_t)row % 16 == 0;
        const size_t unit = wide ? 16 : 2, stride = (size_t)gridDim.x * blockDim.x;
        for (size_t at = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * unit; at < bytes; at += stride * unit) {
            const bool real = at < real_bytes; /* a unit never straddles the end: token_bytes is a multiple of it */
            if (wide && x.gather)
                *(uint4 *)(row + at) = real ? *(const uint4 *)(packed + at) : make_uint4(0, 0, 0, 0);
            else if (wide)
                *(uint4 *)(packed + at) = *(const uint4 *)(row + at);
            else if (x.gather)
                *(unsigned short *)(row + at) = real ? *(const unsigned short *)(packed + at) : (unsigned short)0;
            else
                *(unsigned short *)(packed + at) = *(const unsigned short *)(row + at);
        }
    }
}
/* copy_rows over `count` tensors: enough blocks a row to stream its widest tensor */
static int launch_copy_rows(const size_t *offsets, size_t N, size_t longest, const packed_tensors &x, int count)
{
    size_t widest = 0;
    for (int i = 0; i < count; i++)
        widest = x.tensor[i].token_bytes > widest ? x.tensor[i].token_bytes : widest;
    const size_t words = (longest * widest + 15) / 16, per_block = 256 * 4; /* about four 16-byte words a thread */
    const dim3 grid((unsigned)((words + per_block - 1) / per_block < 1024 ? (words + per_block - 1) / per_block : 1024),
                    (unsigned)(N < 65535 ? N : 65535), (unsigned)count);
    CUDA_LAUNCH_WITH_SHARED(copy_rows, grid, 256, 0, offsets, N, longest, x);
    return 0;
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
    const size_t key_bytes = p->H * p->K * sizeof(bf16);
    const packed_tensors inputs = {{{(unsigned char *)p->q_bf16, (unsigned char *)q, key_bytes},
                                    {(unsigned char *)p->k_bf16, (unsigned char *)k, key_bytes},
                                    {(unsigned char *)p->v_bf16, (unsigned char *)v, HV * p->V * sizeof(bf16)},
                                    {(unsigned char *)p->g, (unsigned char *)g, HV * sizeof(float)},
                                    {(unsigned char *)p->beta, (unsigned char *)beta, HV * sizeof(float)}},
                                   1};
    if (launch_copy_rows(r->layout.offsets, N, longest, inputs, 5))
        return -1;
    rows.q_bf16 = (const unsigned short *)q, rows.k_bf16 = (const unsigned short *)k, rows.v_bf16 = (const unsigned short *)v;
    rows.g = g, rows.beta = beta, rows.q = rows.k = rows.v = NULL; /* the passes read the bf16 ones */
    gdn_device_result padded = *r;
    padded.o = o, padded.o_bf16 = (unsigned short *)o; /* one place: a pass writes o in one of the two */
    padded.layout.offsets = NULL, padded.layout.sequences = N, padded.layout.longest = longest;
    padded.layout.padded_from = r->layout.offsets; /* the passes run no chunk of padding alone (row_tokens) */
    padded.o_in_bf16 = 0;
    if (rows_forward(&rows, s, &padded))
        return -1;
    const size_t o_bytes = HV * p->V * (padded.o_in_bf16 ? sizeof(bf16) : sizeof(float));
    const packed_tensors outputs = {{{padded.o_in_bf16 ? (unsigned char *)r->o_bf16 : (unsigned char *)r->o, (unsigned char *)o, o_bytes}}, 0};
    if (launch_copy_rows(r->layout.offsets, N, longest, outputs, 1))
        return -1;
    r->o_in_bf16 = padded.o_in_bf16;
    return 0;
}
