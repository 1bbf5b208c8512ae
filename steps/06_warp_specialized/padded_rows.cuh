/* padded_rows.cuh -- a packed batch (--lengths, cu_seqlens) run as N rows of its longest
 * sequence's tokens, read and written where they lie.
 *
 * Row n is sequence n: the passes run on the N rows as on any batch, each row's chunks from its
 * sequence's first token, as FLA's are, so its chunks and their sums are those it has alone.
 * The kernels read q, k, v, g and beta and write o where the packed batch holds them
 * (chunk_workspace.cuh: input_token, input_tile_at): a row's last chunk takes the next
 * sequence's first tokens into its tiles, and no sum takes them (kernel 1 reads g and beta only
 * below the chunk's real tokens); o leaves by whole tiles except in a sequence's last, partial
 * chunk, whose real rows the threads store (kernel 3 always; the output warps' block there:
 * fused_outputs.cuh). ht is the rows' last states, in the batch's order already.
 *
 * The padding is not run: the passes' chunk_workspace points at the batch's offsets (row_offsets),
 * kernel 1 and kernel 3 return at a chunk of padding alone, and a chain block ends at its row's
 * last real chunk (chunk_workspace.cuh: row_tokens; chain_ring.cuh: end_at_real_tokens).
 *
 * Cost: no copy; blocks for N x longest tokens, those of padding returning at once, and the
 * stage's workspace for the N rows.
 *
 * Included by warp_specialized.cuh, so that whatever includes 06's stage header takes packed batches.
 */
#pragma once

/* The packed batch's N rows of its longest sequence's tokens, as a problem without offsets */
static inline gdn_problem padded_rows_of(const gdn_problem *p)
{
    gdn_problem rows = *p;
    rows.B = gdn_sequences(p), rows.T = gdn_longest_sequence(p), rows.offsets = NULL, rows.sequences = 0;
    return rows;
}

/* a stage's workspace for a problem without offsets (its device_workspace_bytes) */
typedef int (*rows_workspace_bytes)(const gdn_problem *rows, const gdn_settings *s, size_t *bytes);
/* A packed batch's workspace: its rows' */
static inline int padded_workspace_bytes(const gdn_problem *p, const gdn_settings *s, rows_workspace_bytes rows_workspace, size_t *bytes)
{
    const gdn_problem rows = padded_rows_of(p);
    return rows_workspace(&rows, s, bytes);
}

/* The passes' workspace over rows of a packed batch (layout.padded_from; NULL for any other
   rows): where their tokens lie, so that the padding is not run and the inputs' tensor maps span
   the batch's one row (chunk_workspace.cuh: row_offsets, input_tokens) */
static inline void rows_in_place(chunk_workspace *w, const gdn_device_layout *l)
{
    w->row_offsets = l->padded_from;
    if (l->padded_from)
        w->input_tokens = l->padded_tokens;
}

/* a stage's passes on B rows of T tokens (no offsets) */
typedef int (*rows_forward_pass)(const gdn_device_problem *rows, const gdn_settings *s, gdn_device_result *r);
/* The packed batch through rows_forward: the passes on its N rows, which read and write it in place */
static inline int packed_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r, rows_forward_pass rows_forward)
{
    const size_t N = r->layout.sequences, longest = r->layout.longest;
    gdn_device_problem rows = *p;
    rows.B = N, rows.T = longest;
    gdn_device_result as_rows = *r;
    as_rows.layout.offsets = NULL, as_rows.layout.sequences = N, as_rows.layout.longest = longest;
    if (N * longest != p->T) { /* lengths that differ: the rows are the batch's, read in place, their padding not run */
        if (p->T > (size_t)INT_MAX) /* the tensor maps' token coordinates (input_tile_at) are 32-bit */
            return gdn_set_error("a packed batch of %zu tokens: at most %d (the tensor maps' coordinates)", p->T, INT_MAX);
        as_rows.layout.padded_from = r->layout.offsets, as_rows.layout.padded_tokens = p->T;
    } /* else every length the same: the packed row is N rows already */
    const int status = rows_forward(&rows, s, &as_rows);
    r->o_in_bf16 = as_rows.o_in_bf16;
    return status;
}
