/* tile_products.cuh -- the sizes every kernel of stage 06 shares, and one warp's tensor-core
 * products from shared memory.
 *
 * A chunk is CHUNK = 64 tokens, fixed (stage 05's solve is built for it). Every product of
 * eq. 10-15 is a sum of mma.sync.m16n8k16 (common/mma_sync.cuh), its fragments loaded by
 * ldmatrix, 8 rows of 16 bytes a phase: tile rows of K + 8 (key_stride) and 64 + 8
 * (TOKEN_STRIDE) bf16, an odd number of 16-byte units, put those 8 rows in 8 different groups
 * of 4 banks, no conflict. The causal products skip the tiles that meet only zeros
 * (causal_tiles); copy_tile brings a strided tile in where no tensor map fits. A gate factor
 * e^(gamma_i - gamma_l) is one ex2.approx (exp2_approx, common/fast_exp.cuh) where expf takes
 * about 18 instructions.
 *
 * Included by warp_specialized.cuh.
 */
#pragma once
typedef __nv_bfloat16 bf16;
/* kernel 2: up to MAX_CHAIN_TILES tiles of 16 state columns a block, a producer warp and two
 * consumer warps a tile (one in the widest blocks: chain_ntiles) */
enum { CHUNK = 64, MAX_K = 128, THREADS = 256, MAX_CHAIN_TILES = 8, CONSUMER_WARPS_PER_TILE = 2 };
static_assert((int)CHUNK == (int)SOLVE_CHUNK, "kernel 1's chunk is the solve's");
constexpr int TOKEN_STRIDE = CHUNK + 8; /* bf16 row stride of 64-token tiles */

__host__ __device__ static inline int round_up16(size_t x) { return (int)((x + 15) / 16 * 16); }
constexpr int KEY_STRIDE_PADDING = 8; /* bf16 past a K-wide tile's row: 16 bytes */
__host__ __device__ static inline int key_stride(size_t K) { return round_up16(K) + KEY_STRIDE_PADDING; } /* bf16 row stride of K-wide tiles */
/* q and k by tensor copies (make_token_tile_map) where the box fits: K a multiple of 16 (the
 * box's columns past K are padding, never read; the strides whole 16 bytes), two heads or
 * more (a row of all heads is at least K + 8 wide), a chunk of tokens or more; else the
 * threads copy. */
__host__ __device__ static inline bool keys_by_tensor_map(size_t K, size_t H, size_t T) { return K % 16 == 0 && H >= 2 && T >= 64; }
__host__ __device__ static inline size_t chunks_of(size_t T) { return (T + CHUNK - 1) / CHUNK; }
/* Grouped value heads: the stage's p.H heads are value heads, heads_per_key of them reading
 * one key head's q and k (common/device.h): head h's rows are key head h / heads_per_key's,
 * tokens key_heads rows apart (chunk_workspace.cuh: input_token). 32-bit: a 64-bit division
 * is a routine. */
__host__ __device__ static inline unsigned key_heads(const gdn_device_problem &p) { return (unsigned)p.H / p.heads_per_key; }

/* ---- one warp's tensor-core products ---- */

/* acc[j] += A[row0 .. + 16)[0 .. depth) B[0 .. depth)[col0 + 8 j .. + 8) for j < tiles (the
 * others left as they are): A row major (stride lda), B given transposed, Bt[n][k] (stride
 * ldb), so K K^T and Q K^T take the keys as they lie. depth a multiple of 16, TILES and tiles
 * even, rows 16-byte aligned. One ldmatrix loads A's four 8 x 8 quarters, another two n-tiles
 * of Bt; each A fragment serves all n-tiles. */
template <int TILES>
__device__ __forceinline__ static void warp_product(float (&acc)[TILES][4], const bf16 *A, int lda, const bf16 *Bt, int ldb,
                                                    int row0, int col0, int depth, int tiles = TILES)
{
    static_assert(TILES % 2 == 0, "n-tiles are loaded in pairs");
    if (tiles <= 0)
        return;
    const int lane = threadIdx.x % 32, quarter = lane / 8;
    const bf16 *a_row = quarter_row(A, lda, row0, 0);
    /* B^T's rows are n: matrices 0-3 are (n +0, k +0), (n +0, k +8), (n +8, k +0), (n +8, k +8) */
    const bf16 *b_row = Bt + (col0 + lane % 8 + 8 * (quarter / 2)) * ldb + 8 * (quarter % 2);
    for (int k0 = 0; k0 < depth; k0 += 16) {
        uint32_t a[4];
        load_matrices(a, a_row + k0);
#pragma unroll
        for (int j = 0; j < TILES; j += 2) {
            if (j >= tiles)
                break;
            uint32_t b[4];
            load_matrices(b, b_row + 8 * j * ldb + k0);
            const uint32_t first[2] = {b[0], b[1]}, second[2] = {b[2], b[3]};
            mma_bf16_16x8x16(acc[j], a, first);
            mma_bf16_16x8x16(acc[j + 1], a, second);
        }
    }
}

/* The causal products (M and P are zero where l > i, Tm's strictly lower part where l >= i:
 * eq. 10, 12 and 14): a warp's rows row0 .. row0 + 15 hold entries only in columns l < row0 +
 * 16, so only its n-tiles left of that column need a product (20 of the 32 of a 64 x 64
 * product), and a product with such a factor on the left needs depth row0 + 16, not 64 */
__device__ __forceinline__ static int causal_tiles(int row0, int col0)
{
    const int tiles = (row0 + 16 - col0) / 8;
    return tiles < 0 ? 0 : tiles > 4 ? 4 : tiles;
}
__device__ __forceinline__ static int causal_depth(int row0) { return row0 + 16; }


/* A tile of tile_rows rows of bf16 into shared memory (row stride ld): row i is the `width`
 * values at first_row + i row_stride, zero for rows i >= rows and columns width .. padded (ld,
 * padded: multiples of 8). Where width is a multiple of 8, by cp.async: 16-byte pieces skip
 * the registers and the thread goes on at once; else 2-byte copies. The caller commits, waits
 * (__pipeline_wait_prior) and syncs the block. A thread's pieces (i, c) advance by a fixed
 * step: one division at the start, not two a piece. */
__device__ static void copy_tile(bf16 *tile, int ld, int tile_rows, int rows, int width, int padded, const bf16 *first_row,
                                 size_t row_stride)
{
    if (width % 8 == 0) {
        const int per_row = padded / 8, rows_step = THREADS / per_row, pieces_step = THREADS % per_row;
        for (int i = threadIdx.x / per_row, c = threadIdx.x % per_row; i < tile_rows;) {
            bf16 *to = tile + i * ld + 8 * c;
            if (i < rows && 8 * c < width)
                __pipeline_memcpy_async(to, first_row + i * row_stride + 8 * c, 16);
            else
                *(uint4 *)to = make_uint4(0, 0, 0, 0);
            i += rows_step, c += pieces_step;
            if (c >= per_row)
                c -= per_row, i++;
        }
    } else {
        for (int e = threadIdx.x; e < tile_rows * padded; e += THREADS) {
            const int i = e / padded, c = e % padded;
            tile[i * ld + c] = i < rows && c < width ? first_row[i * row_stride + c] : __float2bfloat16_rn(0.0f);
        }
    }
}

