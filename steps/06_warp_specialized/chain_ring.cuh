/* chain_ring.cuh -- kernel 2's structure: the serial chain over chunks as a producer warp, a
 * ring of shared-memory slots and consumer warps that keep S in their registers.
 *
 * The chain is the one serial part of docs/05's split (eq. 13-15), T / 64 steps one after the
 * other. Where its blocks are few its time is the steps times one step's latency, so nothing
 * on a step's path waits for anything it does not need; where they fill the GPU its bytes are
 * the time. Here: the plan (below), segments, the ring's sizes, block widths and fragment
 * helpers; chain.cuh holds the loop, the kernels and their budget.
 *
 * Cost: per chunk and consumer warp, Vnew's product (64 x K by K x 8 or 16 columns) and the
 * update's (K x 64 by 64 x 8 or 16), two dependent MMA chains; per head T / 64 such steps,
 * serial (a segment's chunks, where a sequence is cut into segments).
 *
 * Included by warp_specialized.cuh.
 */
#pragma once

/* ---- kernel 2: the chain, warp-specialized: a producer warp and chains in registers ----
 * One block per (head, segment, 16 x tiles columns of S), serial over chunks, with 2 x tiles
 * consumer warps (tiles of them in the widest blocks: chain_ntiles) and one producer warp:
 *   the producer (its lane 0) brings each chunk's W, decayed keys, the block's rows of U and
 *     the decay into a ring of `stages` slots by bulk copies (the TMA unit: one instruction a
 *     contiguous piece), as far ahead of the consumers as the ring allows;
 *   consumer warp c owns 8 NTILES state columns, all K rows, in its MMA accumulators for the
 *     whole run, and does every step of them alone: it waits only for data. With two
 *     n-tiles, each A fragment it loads serves two MMAs.
 * Per chunk, per consumer warp (eq. 13-15):
 *   S0 in bf16 as B fragments: the accumulators hold S by rows (rows g, g + 8, columns 2t,
 *     2t + 1), a B fragment wants it by columns (rows 2t, 2t + 1 of column g): one
 *     movmatrix.trans; the same fragments, stored as 4-byte pairs, are S0^T for kernel 3
 *   Vnew = U - W S0                     64 tokens x 8 NTILES columns, depth K (A: W from the slot)
 *   Vnew in bf16 as B fragments, by movmatrix again (and Vnew^T for kernel 3)
 *   S = exp(gamma_C) S + Kdec^T Vnew    K x 8 NTILES, depth 64 (A: the decayed keys from the slot;
 *                                       from v K^T (diag(d) Vnew), A: the slot's k tile)
 * S0^T and Vnew^T leave one of two ways (chain_launch_shape picks): where blocks are fewer
 * than the SMs the step's latency is the time, and the pairs go from the registers straight
 * to global memory; where they fill the GPU, bytes are the time, and a 4-byte pair is half a
 * 32-byte sector, so with STAGED the pairs go into the warp's staging tiles and each tile
 * leaves by one bulk store, whole lines, while the update runs (through the TMA unit, which
 * also fills the ring, those stores slow the few-block chain: docs/06, "06: Vnew from v, and
 * the launch rules").
 * The ring's two mbarriers a slot are the only waits in the loop: "full", the producer's
 * arrival with the slot's byte count, completed by the copies' bytes; "empty", one arrival
 * per consumer thread once it has read the slot, which the producer waits for before
 * refilling it. Every reader arrives itself, not one lane a warp after a __syncwarp, so that
 * its own release orders its reads before the refill, as racecheck follows it.
 *
 * Segments: here one per head, from h0, writing ht; the kernel takes P segments of whole
 * chunks a head (chain_segments), each from its own start state, so that a sequence can be
 * cut into pieces that run at once. The state a block carries is its Columns (which columns
 * it has, where they start, where the segment's end goes): here S (state_columns); another
 * type with the same members gives the same loop another state. */
typedef struct {
    size_t count;          /* P: segments per head; 1 in this stage */
    size_t runs;           /* the segments 0 .. runs-1 this launch runs */
    const float *starts;   /* [head][segment] K x V start states (h0 here); NULL: zero */
    float *ends;           /* where the ends go (Columns::store_end): here ht, from the last segment */
    int outputs_early = 0; /* kernel 3 follows and may start beside this launch (its blocks take
                              SMs these leave idle): set by launch_chunk_states */
} chain_segments;

/* Stage 06's state: S, VP columns from the segment's start, every one with values; each
 * chunk's S0 and Vnew feed o (HAS_OUTPUTS), and the last segment writes ht. WIDE_STEP_KNOWN:
 * whether the two-n-tile step from v is compiled for its tiles at K = V = 64 (chain_block). */
struct state_columns {
    static constexpr bool HAS_OUTPUTS = true, WIDE_STEP_KNOWN = false;
    __host__ __device__ static int count(int KP, int VP) { return (void)KP, VP; }
    __host__ __device__ static int first_value_column(int KP) { return (void)KP, 0; }
    __device__ static float start(const chain_segments &segments, size_t head, size_t segment, int m, int c, int K, size_t V)
    {
        return segments.starts && m < K && c < (int)V ? segments.starts[((head * segments.count + segment) * K + m) * V + c] : 0.0f;
    }
    __host__ __device__ static bool writes_end(size_t segment, size_t P) { return segment + 1 == P; }
    __device__ static void store_end(const chain_segments &segments, size_t head, size_t segment, int m, int c, int K,
                                     size_t V, float value)
    {
        (void)segment;
        if (c < (int)V)
            segments.ends[(head * K + m) * V + c] = value;
    }
};

/* What a chain block reads each chunk: W and U, W and U with low terms (--precise), or the
 * transform block and the chunk's k and v tiles (Vnew made from v: chain_from_values) */
enum chain_operands { W_AND_U, SPLIT_W_AND_U, TRANSFORM_AND_V };

/* First chunk of segment s of P (s = P gives the end): whole chunks, as equal as they come. */
__host__ __device__ static inline size_t segment_chunk(size_t s, size_t P, size_t chunks) { return s * chunks / P; }

/* Where a chain block is: its head and segment, its chunks first .. end - 1, its state
 * columns block_column0 .. + block_columns - 1 (blocks ordered by column group, then segment,
 * then head) */
typedef struct {
    size_t head, segment, first, end;
    int block_column0, block_columns, tiles;
} chain_place;
__device__ __forceinline__ static chain_place place_chain_block(const chain_segments &segments, size_t chunks, int columns,
                                                                 int block_columns)
{
    const size_t groups = (columns + block_columns - 1) / block_columns, group = blockIdx.x % groups;
    chain_place at;
    at.segment = blockIdx.x / groups % segments.runs, at.head = blockIdx.x / groups / segments.runs;
    at.first = segment_chunk(at.segment, segments.count, chunks), at.end = segment_chunk(at.segment + 1, segments.count, chunks);
    at.block_column0 = (int)group * block_columns, at.block_columns = block_columns, at.tiles = block_columns / 16;
    return at;
}

/* A padded row's block ends at the row's last real chunk (row_tokens); where its chunks are all
   padding it runs none, and its end is its start: the padding would leave the state as it is */
__device__ __forceinline__ static void end_at_real_tokens(chain_place &at, const chunk_workspace &w, size_t H, size_t T)
{
    const size_t real = chunks_of(row_tokens(w, at.head / H, T));
    at.end = at.end < real ? at.end : real;
    at.first = at.first < at.end ? at.first : at.end;
}

/* With STAGED, a consumer warp's staging tiles for its rows of S0^T and Vnew^T (and low
 * terms): the workspace's rows, key_stride(K) and TOKEN_STRIDE bf16, in which the lanes'
 * 4-byte writes fall in 32 different banks; 16 rows a 16-column tile. */
__host__ __device__ static inline size_t chain_staging_bytes(size_t K, bool precise, int tiles)
{
    return (size_t)16 * tiles * (key_stride(K) + TOKEN_STRIDE) * sizeof(bf16) * (precise ? 2 : 1);
}
/* n-tiles (8 state columns each, the n of m16n8k16) a consumer warp carries. One, so two
 * warps a 16-column tile, where blocks are few and latency is the time: shorter steps. Two in
 * blocks of 4 and 8 tiles, made only where the blocks fill the GPU (chain_tiles): there
 * throughput is the time, and one warp loads each A fragment of W and of the keys once for
 * two MMAs (5-12 % less time a pass: docs/06, "06: Vnew from v, and the launch rules"). */
__host__ __device__ constexpr int chain_ntiles(int tiles) { return tiles >= 4 ? 2 : 1; }
/* threads of a chain block of `tiles` 16-column tiles: its consumer warps and one producer */
__host__ __device__ constexpr int chain_block_threads(int tiles) { return 32 * (CONSUMER_WARPS_PER_TILE * tiles / chain_ntiles(tiles) + 1); }
/* The widest chain block: MAX_CHAIN_TILES tiles, or half with --precise, whose slots and
 * staging tiles hold two terms: the widest would not fit an SM at K = 128. */
__host__ __device__ constexpr int widest_chain_tiles(bool precise) { return precise ? MAX_CHAIN_TILES / 2 : MAX_CHAIN_TILES; }

/* x - bf16(x), rounded: the low term of the two-term split (--precise) */
__device__ __forceinline__ static uint32_t pack_bf16_low(float low_column, float high_column)
{
    const __nv_bfloat162 high = __floats2bfloat162_rn(low_column, high_column);
    return pack_bf16(low_column - __low2float(high), high_column - __high2float(high));
}

/* One 16 x 8 accumulator tile (rows of S or of Vnew) as the two registers of a B fragment
 * (k = its 16 rows, n = its 8 columns): rows 0-7 and 8-15, each transposed. */
template <bool LOW>
__device__ __forceinline__ static void to_b_fragment(uint32_t (&b)[2], const float (&d)[4])
{
    b[0] = transpose8x8(LOW ? pack_bf16_low(d[0], d[1]) : pack_bf16(d[0], d[1]));
    b[1] = transpose8x8(LOW ? pack_bf16_low(d[2], d[3]) : pack_bf16(d[2], d[3]));
}

/* The A fragment at (row0, k0) of a 64-column bf16 tile in wgmma's 128-byte-swizzled layout
 * (swizzled_offset): a quarter's 8 rows have their 16 bytes in 8 different places of their
 * 128-byte lines, so the load has no bank conflict */
__device__ __forceinline__ static void load_a_fragment_swizzled(uint32_t (&a)[4], const bf16 *tile, int row0, int k0)
{
    const int lane = threadIdx.x % 32, quarter = lane / 8;
    load_matrices(a, tile + swizzled_offset(CHUNK, row0 + lane % 8 + 8 * (quarter % 2), k0 + 8 * (quarter / 2)));
}

