/* chunk_workspace.cuh -- what kernel 1 leaves for the chain and the chain for kernel 3: the
 * workspace, and the layout of a chunk's chain block.
 *
 * Stage 05's split (docs/05, eq. 9-15) does everything that does not depend on the state in
 * kernel 1, for every chunk at once, and hands it to the serial chain through global memory.
 * A chunk's chain block is laid out as the chain's ring slot, so that a few bulk copies bring
 * it in; a chain that makes Vnew from v reads the chunk's smaller transform block instead. The
 * chain writes S0^T and Vnew^T for kernel 3 with rows padded as kernel 3's tiles are, so each
 * comes back by one bulk copy.
 *
 * Cost: the stage's memory traffic between kernels: per chunk kernel 1 writes W, the decayed
 * keys and U (2 K + V values a token) or the transform block, the chain reads them and writes
 * S0^T and Vnew^T (K V + 64 V values a chunk), kernel 3 reads those (sizes: workspace_parts).
 *
 * Included by warp_specialized.cuh.
 */
#pragma once
/* ---- the workspace ---- */

/* Kernel 2's input block per chunk, laid out as its shared-memory slot (16-byte multiples):
 *   W        bf16 [64][key_stride]       A of Vnew = U - W S0
 *   W_low    bf16 [64][key_stride]       --precise only: W less its bf16 rounding
 *   keys_t   bf16 [round_up16(K)][72]    the keys decayed to the chunk's end, transposed: A of
 *                                         the state update S += Kdec^T Vnew
 *   U_t      bf16 [round_up16(V)][64]    U transposed: a 16-column tile is 16 whole rows,
 *                                         each 8 rows in the chain's fragment order
 *                                         (u_fragment_index; fp32 with --precise: chain_u_type)
 *   decay    fp32 [4]                    exp(gamma_C) and padding
 * Kernel 1 writes the parts its launch asks for (chunk_parts_for). Zeros past the chunk's
 * tokens, past K and past V. */
/* U in bf16, as FLA stores it: Vnew = U - W S0 is rounded to bf16 anyway, and bf16 halves
 * U's bytes. --precise keeps it fp32. */
template <bool PRECISE> using chain_u_type = std::conditional_t<PRECISE, float, bf16>;
__host__ __device__ static inline size_t chain_u_size(bool precise) /* the same, chosen at run time */
{
    return precise ? sizeof(chain_u_type<true>) : sizeof(chain_u_type<false>);
}
/* U_t in the order the chain reads it. A consumer warp reads an n-tile of U_t (8 columns of
 * U, 64 tokens each) as MMA fragments: lane 4g + t takes, for each token tile i, tokens 16 i +
 * g and + 8 of columns 2t, 2t + 1. Row by row those are 2-byte reads with 4-way bank
 * conflicts; in fragment order a lane's 16 values lie together, [i][r], in 16-byte pieces,
 * piece p of lane l at piece 32 p + l: consecutive lanes read consecutive bytes. The index in
 * its n-tile of the first of lane's four values of tile i: */
template <typename T> __host__ __device__ constexpr int u_tiles_a_piece(void) { return 16 / (4 * (int)sizeof(T)); }
template <typename T> __host__ __device__ constexpr int u_fragment_index(int lane, int i)
{
    return (i / u_tiles_a_piece<T>() * 32 + lane) * 4 * u_tiles_a_piece<T>() + i % u_tiles_a_piece<T>() * 4;
}
__device__ __forceinline__ static float to_float(float x) { return x; }
__device__ __forceinline__ static float to_float(bf16 x) { return __bfloat162float(x); }
/* two floats as the bf16 pair of one 32-bit register, the first in the low half */
__device__ __forceinline__ static uint32_t pack_bf16(float low_column, float high_column)
{
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low_column, high_column);
    return *(const uint32_t *)&pair;
}
/* four values of U into their place in U_t: one 8- or 16-byte store (bf16: one 64-bit integer,
   since nvcc splits a uint2's assignment into two 4-byte stores, each bank-conflicted) */
__device__ __forceinline__ static void store_four(bf16 *to, const float (&four)[4])
{
    *(uint64_t *)to = (uint64_t)pack_bf16(four[2], four[3]) << 32 | pack_bf16(four[0], four[1]);
}
__device__ __forceinline__ static void store_four(float *to, const float (&four)[4])
{
    *(float4 *)to = make_float4(four[0], four[1], four[2], four[3]);
}
__host__ __device__ static inline size_t chain_w_bytes(size_t K) { return (size_t)CHUNK * key_stride(K) * sizeof(bf16); }
__host__ __device__ static inline size_t chain_keys_offset(size_t K, bool precise) { return chain_w_bytes(K) * (precise ? 2 : 1); }
__host__ __device__ static inline size_t chain_u_offset(size_t K, bool precise)
{
    return chain_keys_offset(K, precise) + (size_t)round_up16(K) * TOKEN_STRIDE * sizeof(bf16);
}
__host__ __device__ static inline size_t chain_decay_offset(size_t K, size_t V, bool precise)
{
    return chain_u_offset(K, precise) + (size_t)round_up16(V) * CHUNK * chain_u_size(precise);
}
/* A chunk's transform block, which a chain that makes Vnew from v (Vnew = Tm Z, eq. 13
 * regrouped) reads instead of W and U, about a quarter of their bytes at K = V = 128:
 *   Tm     bf16 [64][64]   Tm's strictly lower part, in wgmma's 128-byte-swizzled layout
 *                          (one panel: swizzled_offset), its rows the tokens i of Vnew
 *   beta, scaled_beta, d   fp32 [64] each: beta_i, beta_i e^gamma_i, e^(gamma_C - gamma_i)
 * The transform blocks follow the chain blocks in the workspace (chunk_workspace). */
constexpr size_t TRANSFORM_TM_BYTES = (size_t)CHUNK * CHUNK * sizeof(bf16), TRANSFORM_BYTES = TRANSFORM_TM_BYTES + 3 * CHUNK * sizeof(float);
__host__ __device__ static inline size_t chain_block_bytes(size_t K, size_t V, bool precise) { return chain_decay_offset(K, V, precise) + 4 * sizeof(float); }
/* what one chain block of `tiles` 16-column tiles copies of it per chunk: W (and W_low),
 * keys_t, its 16 tiles rows of U_t, the decay */
__host__ __device__ static inline size_t chain_slot_bytes(size_t K, bool precise, int tiles)
{
    return chain_u_offset(K, precise) + (size_t)tiles * 16 * CHUNK * chain_u_size(precise) + 4 * sizeof(float);
}
typedef struct {
    double *gamma;         /* [heads T] */
    unsigned char *chain;  /* [heads chunks] chain blocks */
    unsigned char *transforms; /* [heads chunks] transform blocks (TRANSFORM_BYTES), after the chain blocks */
    /* [heads chunks] a flag a chunk, after the transform blocks: beside the chain
       (kernel1_beside_chain), 1 once a chunk from ready_from on is written; NULL elsewhere */
    unsigned *ready;
    size_t ready_from;
    bf16 *states_t;        /* [heads chunks][round_up16(V)][key_stride(K)]: S0 transposed, for kernel 3 */
    bf16 *new_values_t;    /* [heads chunks][round_up16(V)][TOKEN_STRIDE]: Vnew transposed */
    /* (rows padded as kernel 3's tiles are, so that a tile comes in by one bulk copy; the
       padding holds whatever a staged chain left there, and is never read) */
    bf16 *states_low_t, *new_values_low_t; /* --precise only, same shapes: what bf16 rounded away */
    /* rows of a packed batch (gdn_device_layout.padded_from): row b is the batch's tokens
       row_offsets[b] .. row_offsets[b + 1] - 1, read and written where they lie in q, k, v, g,
       beta and o (input_row_start), its workspace rows T tokens long; NULL: every row is T
       tokens, rows T apart in the inputs and o too */
    const size_t *row_offsets;
    size_t input_tokens; /* host: the inputs' tokens (T_total of a packed batch, else B T), for their tensor maps */
} chunk_workspace;

/* Row b's real tokens: past them a row is padding (padded_rows.cuh), and no kernel runs the
 * chunks that hold only padding: kernel 1 and kernel 3 return, and a chain block ends at its
 * row's last real chunk (end_at_real_tokens), its state carried unchanged. */
__host__ __device__ static inline size_t row_tokens(const size_t *row_offsets, size_t b, size_t T)
{
    return row_offsets ? row_offsets[b + 1] - row_offsets[b] : T;
}
__host__ __device__ static inline size_t row_tokens(const chunk_workspace &w, size_t b, size_t T) { return row_tokens(w.row_offsets, b, T); }
/* the real tokens of row b's chunk from t0 (t0 below its end): 64, or fewer in its last chunk */
__host__ __device__ static inline int chunk_tokens(const chunk_workspace &w, size_t b, size_t T, size_t t0)
{
    const size_t tokens = row_tokens(w, b, T);
    return (int)(tokens - t0 < (size_t)CHUNK ? tokens - t0 : (size_t)CHUNK);
}

/* Where row b's token t lies in the inputs: a packed batch's rows are read in place, so a
 * chunk's tile of q, k or v is the 64 tokens from row_offsets[b] + t0 of the one packed row,
 * its last chunk's tail the next sequence's first tokens. No chunk takes anything from them:
 * kernel 1 reads g and beta only below the chunk's real tokens (chunk_tokens), so past them
 * beta is 0, which zeroes W's and U's rows, Z's and so Vnew's, and gamma stays at the last
 * real token's; the causal mask and the real-token bounds drop those rows' q and k from o.
 * Those tokens must be finite: a NaN or Inf among the next sequence's first 63 would reach
 * this one's o and ht through 0 x NaN (the binaries check every input unless --no-input-check). */
__host__ __device__ static inline size_t input_row_start(const chunk_workspace &w, size_t b, size_t T)
{
    return w.row_offsets ? w.row_offsets[b] : b * T;
}
/* token (b, t) of head h in tensors of `heads` heads a token: its index (q and k: key heads) */
__host__ __device__ static inline size_t input_token(const chunk_workspace &w, size_t b, size_t T, size_t t, size_t heads, size_t h)
{
    return (input_row_start(w, b, T) + t) * heads + h;
}
/* a tensor map's (token, row) coordinates of row b's token t: the maps of a packed batch's
 * inputs are of its one row (input_maps_problem), those of padded rows and o of B rows */
struct token_coordinates {
    int t, b;
};
__device__ __forceinline__ static token_coordinates input_tile_at(const chunk_workspace &w, size_t b, size_t t)
{
    return w.row_offsets ? token_coordinates{(int)(w.row_offsets[b] + t), 0} : token_coordinates{(int)t, (int)b};
}

/* The bytes of the workspace's four parts: gamma (rounded up to 16 bytes, so that the chain
 * blocks are aligned for 16-byte copies), the chain blocks with the transform blocks and the
 * ready flags, S0^T, Vnew^T (twice each with --precise). One function for the runner's
 * allocation and the pointers into it, so the two cannot disagree. -1 on overflow. */
static int workspace_parts(size_t heads, size_t T, size_t K, size_t V, bool precise, size_t bytes[4])
{
    const size_t terms = precise ? 2 : 1, chunks = chunks_of(T);
    size_t gamma[3] = {heads, T, sizeof(double)}, chain[3] = {heads, chunks, chain_block_bytes(K, V, precise) + TRANSFORM_BYTES + sizeof(unsigned)};
    size_t states[5] = {heads, chunks, (size_t)round_up16(V), (size_t)key_stride(K), terms * sizeof(bf16)};
    size_t values[5] = {heads, chunks, (size_t)round_up16(V), TOKEN_STRIDE, terms * sizeof(bf16)};
    if (gdn_multiply_sizes(&bytes[0], 3, gamma) || gdn_multiply_sizes(&bytes[1], 3, chain) ||
        gdn_multiply_sizes(&bytes[2], 5, states) || gdn_multiply_sizes(&bytes[3], 5, values))
        return -1;
    bytes[0] = (bytes[0] + 15) / 16 * 16;
    bytes[1] = (bytes[1] + 15) / 16 * 16; /* (the ready flags' 4 bytes a chunk): S0^T after them from 16 bytes on, for bulk copies */
    return 0;
}

/* The workspace's bytes for a problem (a stage descriptor's device_workspace_bytes), a chain a
 * value head; -1 on overflow */
static inline int chunk_workspace_bytes(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    size_t parts[4];
    const size_t heads = p->B * gdn_value_heads(p);
    if (workspace_parts(heads, p->T, p->K, p->V, s->precise, parts))
        return -1;
    *bytes = parts[0] + parts[1] + parts[2] + parts[3];
    if (*bytes < parts[1] || *bytes < parts[2] || *bytes < parts[3])
        return gdn_set_error("the workspace of %zu x %zu tokens overflows size_t", heads, p->T);
    return 0;
}
/* the chunk, fixed at CHUNK (stage 05's flop count reads it) */
static inline void chunk_resolve_options(const gdn_problem *p, gdn_settings *s)
{
    (void)p;
    s->chunk = CHUNK;
}

static chunk_workspace workspace_at(void *base, const gdn_device_problem *p, bool precise)
{
    size_t bytes[4];
    workspace_parts(p->B * p->H, p->T, p->K, p->V, precise, bytes); /* sizes the runner has already checked */
    chunk_workspace w;
    w.gamma = (double *)base;
    w.chain = (unsigned char *)base + bytes[0];
    w.transforms = w.chain + p->B * p->H * chunks_of(p->T) * chain_block_bytes(p->K, p->V, precise);
    w.ready = NULL; /* the flags' place: w.transforms + heads chunks TRANSFORM_BYTES (kernel1_beside_chain) */
    w.ready_from = 0;
    w.states_t = (bf16 *)(w.chain + bytes[1]);
    w.new_values_t = w.states_t + bytes[2] / sizeof(bf16);
    w.states_low_t = precise ? w.states_t + bytes[2] / 2 / sizeof(bf16) : NULL;
    w.new_values_low_t = precise ? w.new_values_t + bytes[3] / 2 / sizeof(bf16) : NULL;
    w.row_offsets = NULL;
    w.input_tokens = p->B * p->T;
    return w;
}
