/* launch_rules.cuh -- the host side: tensor maps, block shapes, and what a pass launches.
 *
 * The kernels are fixed; how the GPU is best filled with them depends on the shape (heads,
 * chunks, K and V) and the GPU (its SMs, and the occupancy query's answer for each kernel).
 * These functions decide, for every pass:
 *   kernel 1's instance (launch_prepare_chunks);
 *   kernel 2's shape (chain_launch_shape): block width, ring depth, staged stores;
 *   whether the chain makes Vnew from v (chain_from_values) and carries output warps
 *     (chain_makes_outputs);
 *   kernel 3's columns (output_columns), and whether it runs beside the chain
 *     (outputs_beside_chain, outputs_may_start_early).
 * Each rule cites where docs/06 measures it. The chain and kernel 3 are launched by
 * CUDA_LAUNCH_AFTER_PREVIOUS (programmatic dependent launch: common/cuda_check.h): the GPU
 * places their blocks as the last blocks of the kernel before them exit, and a block waits
 * (wait_for_previous_kernel) only before it reads what that kernel wrote.
 *
 * Cost: host work alone, a few occupancy queries and tensor-map encodings a pass.
 *
 * Included by warp_specialized.cuh.
 */
#pragma once
/* ---- the three passes, each launched and checked ---- */

static_assert((int)CHUNK == (int)TOKEN_TILE_ROWS, "a tensor map's box is a chunk of tokens (common/tensor_maps.cuh)");
/* the problem as q and k lie in memory: its key heads (grouped value heads, key_heads), for
   their tensor maps and the conditions on them */
static gdn_device_problem key_problem(const gdn_device_problem *p)
{
    gdn_device_problem keys = *p;
    keys.H = key_heads(*p);
    return keys;
}
/* the problem as q, k and v lie in memory, for their tensor maps: a packed batch's rows are
   read in place (chunk_workspace.cuh: input_tile_at), from one row of all its tokens */
static gdn_device_problem input_maps_problem(const gdn_device_problem *p, const chunk_workspace &w)
{
    gdn_device_problem inputs = *p;
    if (w.row_offsets)
        inputs.B = 1, inputs.T = w.input_tokens;
    return inputs;
}

/* parts: what kernel 1 writes (WRITE_KEYS_T, ...: chunk_parts_for) */
template <bool PRECISE>
static int launch_prepare_chunks(const gdn_device_problem *p, chunk_workspace w, int parts, size_t first_chunk = 0,
                                 size_t end_chunk = 0, cudaStream_t stream = 0)
{
    const size_t M = CHUNK, LDK = key_stride(p->K);
    /* the gates, Tm's place, the keys, then the values' place (the solve's scratch, then v) */
    const size_t before_values = 128 + M * sizeof(double) + 2 * M * sizeof(float) + tm_place_bytes(PRECISE) + M * LDK * sizeof(bf16);
    const size_t bytes = before_values + values_place_bytes((size_t)value_stride(p->V));
    const size_t transform_only_bytes = before_values; /* no v: the scratch in the keys' place */
    /* every chunk, or (beside the chain: w.ready) chunks first_chunk .. end_chunk - 1 */
    const size_t chunk_count = w.ready ? end_chunk - first_chunk : chunks_of(p->T);
    unsigned blocks;
    if (gdn_blocks_for(p->B * p->H * chunk_count, 1, &blocks))
        return -1;
    CUtensorMap k_map = {}, v_map = {}; /* unused (zero) where the threads copy k and v */
    const gdn_device_problem inputs = input_maps_problem(p, w), keys = key_problem(&inputs);
    if (tiles_by_tensor_map(p->K, p->V, keys.H, p->T) && (make_token_tile_map(&k_map, p->k_bf16, &keys, p->K, key_stride(p->K)) ||
                                                        make_token_tile_map(&v_map, p->v_bf16, &inputs, p->V, value_stride(p->V))))
        return -1;
    /* four blocks an SM where the occupancy query says they fit and V is one slice, as that
     * kernel assumes: fewer rounds of blocks than three (docs/06, "06c: kernels 1 and 3 by the
     * TMA unit") */
    auto prepare_chunks = prepare_chunks_kernel<PRECISE ? PREPARE_PRECISE : PREPARE_SLICES, 0>;
    size_t launch_bytes = bytes;
    const auto transform_only = p->K == 64 ? prepare_chunks_kernel<PREPARE_TRANSFORM, 64> : prepare_chunks_kernel<PREPARE_TRANSFORM, 128>;
    if (!PRECISE && parts == WRITE_TRANSFORM && p->K == p->V && (p->K == 64 || p->K == 128) && /* those instances know K = V */
        kernel_blocks_per_sm(transform_only, THREADS, transform_only_bytes) >= prepare_blocks(PREPARE_TRANSFORM)) {
        /* the transform block alone (the chains that make Vnew from v): six blocks an SM */
        prepare_chunks = transform_only;
        launch_bytes = transform_only_bytes;
    } else if (!PRECISE && p->V <= VALUE_SLICE && kernel_blocks_per_sm(prepare_chunks_kernel<PREPARE_ONE_SLICE, 0>, THREADS, bytes) >= 4) {
        /* K = V = 64 or 128, the common sizes, compiled with them known */
        const bool square = p->K == p->V;
        prepare_chunks = square && p->K == 64    ? prepare_chunks_kernel<PREPARE_ONE_SLICE, 64>
                         : square && p->K == 128 ? prepare_chunks_kernel<PREPARE_ONE_SLICE, 128>
                                                 : prepare_chunks_kernel<PREPARE_ONE_SLICE, 0>;
    }
    if (w.ready && prepare_chunks != prepare_chunks_kernel<PREPARE_TRANSFORM, 128>)
        return gdn_set_error("kernel 1 beside the chain: only its transform-block instance runs by chunk windows");
    CUDA_LAUNCH_WITH_SHARED_ON(stream, prepare_chunks, blocks, THREADS, launch_bytes, *p, w, k_map, v_map, parts, (unsigned)first_chunk);
    return 0;
}

/* The ring: `stages` slots, then a "full" and an "empty" mbarrier (8 bytes each) per slot,
 * then (staged) the consumers' staging tiles; from_values: values slots, from a 128-byte
 * boundary (128 bytes more, for the shift) */
__host__ __device__ static inline size_t chain_shared_bytes(size_t K, bool precise, int tiles, int stages, bool staged,
                                                            bool from_values = false)
{
    return (from_values ? 128 + stages * values_slot_bytes(K, tiles) : stages * chain_slot_bytes(K, precise, tiles)) +
           2 * (size_t)stages * sizeof(uint64_t) + (staged ? chain_staging_bytes(K, precise, tiles) : 0);
}
/* How kernel 2 is launched: tiles per block and ring slots, and the shared memory that takes.
 * Tiles (chain_tiles): the most (up to widest_chain_tiles) that divide a head's tiles and
 * still leave a block for every SM: wider blocks share each copy of W and the keys among more
 * columns, but where blocks are few the chain's latency is the time, and more blocks on more
 * SMs shorten it. 8 tiles, a whole head at K = V = 128, where they leave a block for nearly
 * every SM, or fewer where they carry output warps (widest_blocks_percent). Slots
 * (chain_shape_of): as many as fit, up to 4, unless two save a wave. Staged stores where the
 * blocks fill the GPU, and always in 8-tile blocks, whose stores from registers slow the chain
 * (docs/06, "06: Vnew from v, and the launch rules", for each rule). */
typedef struct {
    int tiles, stages;
    bool staged, from_values; /* from_values: values slots (chain_from_values) */
    size_t bytes;
} chain_shape;

/* The share of the SMs 8-tile blocks must leave a block for: less with output warps, whose
 * blocks also do kernel 3's work (docs/06, "06: Vnew from v, and the launch rules"). */
static int widest_blocks_percent(bool outputs) { return outputs ? 70 : 95; }
static int chain_tiles(size_t one_tile_blocks, size_t tiles_per_run, size_t sms, int widest, bool outputs)
{
    for (int tiles = widest; tiles > 1; tiles /= 2) {
        const size_t blocks = one_tile_blocks / tiles;
        if (tiles_per_run % tiles == 0 &&
            (tiles == MAX_CHAIN_TILES ? blocks * 100 >= sms * (size_t)widest_blocks_percent(outputs) : blocks >= sms))
            return tiles;
    }
    return 1;
}

/* the shared memory a block may have on this GPU (an H200's 227 KB where no device answers:
   a missing device is reported by the launch) */
static size_t shared_bytes_per_block(void)
{
    int per_block = 227 * 1024;
    if (cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) != cudaSuccess)
        cudaGetLastError();
    return (size_t)per_block;
}

static chain_shape chain_shape_of(int tiles, size_t K, bool precise, bool staged, bool from_values)
{
    const size_t per_block = shared_bytes_per_block();
    chain_shape shape;
    shape.tiles = tiles;
    shape.stages = 2;
    shape.staged = staged;
    shape.from_values = from_values;
    while (shape.stages < 4 && chain_shared_bytes(K, precise, shape.tiles, shape.stages + 1, staged, from_values) <= per_block)
        shape.stages++;
    shape.bytes = chain_shared_bytes(K, precise, shape.tiles, shape.stages, staged, from_values);
    return shape;
}
/* The same blocks with the shallowest ring, two slots: the most blocks an SM */
static chain_shape two_slot_shape(int tiles, size_t K, bool precise, bool staged, bool from_values)
{
    const chain_shape shape = {tiles, 2, staged, from_values, chain_shared_bytes(K, precise, tiles, 2, staged, from_values)};
    return shape;
}

/* Kernel 2 as made for a shape: its n-tiles (chain_ntiles), staged or not (never where the
 * state feeds no outputs: its kernel refuses STAGED by a static_assert) */
typedef void (*chain_kernel)(gdn_device_problem, chunk_workspace, chain_segments, int);
template <bool PRECISE, class Columns>
static chain_kernel chain_kernel_for(chain_shape shape)
{
    if constexpr (Columns::HAS_OUTPUTS)
        if (shape.staged)
            return chain_ntiles(shape.tiles) == 2 ? chunk_states_kernel<PRECISE, true, Columns, 2> : chunk_states_kernel<PRECISE, true, Columns, 1>;
    return chain_ntiles(shape.tiles) == 2 ? chunk_states_kernel<PRECISE, false, Columns, 2> : chunk_states_kernel<PRECISE, false, Columns, 1>;
}
typedef void (*chain_from_values_kernel)(gdn_device_problem, chunk_workspace, chain_segments, int, const CUtensorMap, const CUtensorMap);
template <class Columns>
static chain_from_values_kernel from_values_kernel_for(chain_shape shape)
{
    if constexpr (Columns::HAS_OUTPUTS)
        if (shape.staged)
            return chain_ntiles(shape.tiles) == 2 ? chunk_states_from_values_kernel<true, Columns, 2> : chunk_states_from_values_kernel<true, Columns, 1>;
    return chain_ntiles(shape.tiles) == 2 ? chunk_states_from_values_kernel<false, Columns, 2> : chunk_states_from_values_kernel<false, Columns, 1>;
}

/* Blocks of a shape an SM holds at once (registers, shared memory, threads: the occupancy
 * query); 1 where no device answers. */
template <bool PRECISE, class Columns>
static size_t chain_blocks_per_sm(chain_shape shape)
{
    const int threads = chain_block_threads(shape.tiles);
    const int per_sm = !PRECISE && shape.from_values ? kernel_blocks_per_sm(from_values_kernel_for<Columns>(shape), threads, shape.bytes)
                                                     : kernel_blocks_per_sm(chain_kernel_for<PRECISE, Columns>(shape), threads, shape.bytes);
    return per_sm < 1 ? 1 : (size_t)per_sm;
}

/* The launch's shape: chain_tiles' width and the deepest ring that fits, unless two slots,
 * the most blocks an SM, run the blocks in fewer waves: a block alone on its SM is bound by
 * latency, which the producer's lead hides, and blocks that must share SMs share best with
 * two slots (docs/06, "06: Vnew from v, and the launch rules"). Staged where the blocks are at
 * least the SMs, or 8 tiles wide (where the state feeds outputs). `outputs`: 8-tile blocks
 * would carry output warps (chain_tiles). */
template <bool PRECISE, class Columns>
static chain_shape chain_launch_shape(size_t one_tile_blocks, size_t tiles_per_run, size_t K, bool outputs, bool from_values)
{
    const int sms = gdn_sm_count();
    const int tiles = chain_tiles(one_tile_blocks, tiles_per_run, (size_t)sms, widest_chain_tiles(PRECISE), outputs);
    const size_t blocks = one_tile_blocks / tiles;
    const bool staged = Columns::HAS_OUTPUTS && (blocks >= (size_t)sms || tiles == MAX_CHAIN_TILES);
    const chain_shape deepest = chain_shape_of(tiles, K, PRECISE, staged, from_values);
    const chain_shape two_slots = two_slot_shape(tiles, K, PRECISE, staged, from_values);
    const auto waves = [&](chain_shape shape) {
        const size_t at_once = (size_t)sms * chain_blocks_per_sm<PRECISE, Columns>(shape);
        return (blocks + at_once - 1) / at_once;
    };
    return waves(two_slots) < waves(deepest) ? two_slots : deepest;
}

/* Kernel 3's columns of o a block: 128 where V is a multiple of 128 (no block half empty) and
 * not --precise (whose low terms would double the block's shared memory); else 64. Its
 * blocks: one per head, chunk and that many columns. */
template <bool PRECISE>
static size_t output_columns(const gdn_device_problem *p)
{
    return !PRECISE && p->V % 128 == 0 ? 128 : 64;
}
static size_t output_blocks(const gdn_device_problem *p, size_t columns)
{
    return p->B * p->H * chunks_of(p->T) * ((p->V + columns - 1) / columns);
}

/* Kernel 3 beside the chain (docs/06, "06: Vnew from v, and the launch rules"): where all of
 * kernel 3's blocks fit on the GPU at once (two an SM at any K <= 128), they are placed while
 * the chain runs, sum their gates and make P there, and wait only for S0^T and Vnew^T.
 * Elsewhere they come in waves after the chain and copy S0^T and Vnew^T first (the order
 * beside the chain takes 1 to 3 % longer there). */
template <bool PRECISE>
static bool outputs_beside_chain(const gdn_device_problem *p)
{
    return !PRECISE && output_blocks(p, output_columns<PRECISE>(p)) <= 2 * (size_t)gdn_sm_count();
}
/* The chain lets kernel 3 start (griddepcontrol.launch_dependents) where kernel 3 runs beside
 * it and the chain's blocks are all on the GPU at once, so that kernel 3's take only room they
 * leave: early blocks that take room from a kernel still running in waves slow the pass
 * (docs/06, "Measured and not kept"). */
template <bool PRECISE, class Columns>
static bool outputs_may_start_early(const gdn_device_problem *p, chain_shape shape, unsigned blocks)
{
    return Columns::HAS_OUTPUTS && outputs_beside_chain<PRECISE>(p) && (size_t)blocks <= (size_t)gdn_sm_count() * chain_blocks_per_sm<PRECISE, Columns>(shape);
}

/* Output warps possible for kernel 2 (its state S itself): K = V = 128, q and k by tensor maps, the
 * block's shared memory there; they run where its blocks are then 8 tiles wide */
template <bool PRECISE, class Columns>
static bool outputs_possible(const gdn_device_problem *p)
{
    return !PRECISE && std::is_same_v<Columns, state_columns> && output_warps_shape(p->K, p->V) && keys_by_tensor_map(p->K, key_heads(*p), p->T) &&
           output_block_bytes() <= shared_bytes_per_block();
}
/* the K and v-tile strides the one-n-tile from-values step is compiled for (chain_block) */
__host__ __device__ constexpr bool one_n_tile_from_values_compiled(size_t K, int values_stride)
{
    return (K == 64 || K == MAX_K) && (values_stride == values_tile_stride(16) || values_stride == values_tile_stride(32));
}
static_assert(chain_ntiles(1) == 1 && chain_ntiles(2) == 1 && chain_ntiles(4) == 2 &&
                  one_n_tile_from_values_compiled(MAX_K, values_tile_stride(values_tile_columns(1, MAX_K))) &&
                  one_n_tile_from_values_compiled(MAX_K, values_tile_stride(values_tile_columns(2, MAX_K))) &&
                  one_n_tile_from_values_compiled(64, values_tile_stride(values_tile_columns(1, 64))) &&
                  one_n_tile_from_values_compiled(64, values_tile_stride(values_tile_columns(2, 64))),
              "the one-n-tile blocks that make Vnew from v (1 or 2 tiles, K = V = 64 or 128) run a step compiled for them");
/* Whether the chain can make Vnew from v (Vnew = Tm Z, eq. 13 regrouped), so that kernel 1
 * writes the transform block alone: where k and v come by tensor maps, not with --precise
 * (whose W, S and Vnew carry low terms), and at K = V = 64 or 128, the sizes its step and
 * kernel 1's transform-only instance are compiled for (docs/06, "Pitfalls"). */
__host__ __device__ static inline bool chain_from_values_sizes(size_t K, size_t V, size_t H, size_t T, bool precise)
{
    return !precise && K == V && (K == 64 || K == MAX_K) && tiles_by_tensor_map(K, V, H, T);
}
/* Whether it pays: kernel 1's W, U and keys against a longer chain step (Z, and Tm's
 * products). At K = V = 128 it wins at every shape measured; at 64 only where kernel 1's work,
 * spread over the GPU, outweighs the steps the chain adds on its serial path. The first grows
 * as heads x chunks, the second as the pass's `depth` (a head's chunks where one chain runs
 * each head whole), so from v where heads x chunks >= VALUES_AT_64_HEADS x depth, a threshold
 * set between the losses and the wins measured (docs/06, "06: Vnew from v, and the launch
 * rules"). */
enum { VALUES_AT_64_HEADS = 24 };
__host__ __device__ static inline bool chain_from_values_pays(size_t K, size_t heads, size_t chunks, size_t depth)
{
    return K == MAX_K || heads * chunks >= (size_t)VALUES_AT_64_HEADS * depth;
}
/* The choice, for every launch of a pass whose chains are `depth` steps deep (here a head's
 * chunks): kernel 1's parts and every chain after it must agree. Never with `invariant`
 * (--batch-invariant): whether it is taken depends on the heads around a sequence, and the two
 * chains round Vnew differently. */
template <bool PRECISE>
static bool chain_from_values(const gdn_device_problem *p, size_t depth, bool invariant = false)
{
    return !invariant && chain_from_values_sizes(p->K, p->V, key_heads(*p), p->T, PRECISE) &&
           chain_from_values_pays(p->K, p->B * p->H, chunks_of(p->T), depth);
}
/* kernel 2's shape for `runs` segments of every head, in a pass `depth` steps deep */
template <bool PRECISE, class Columns>
static chain_shape chain_shape_for(const gdn_device_problem *p, size_t depth, size_t runs, bool outputs, bool invariant = false)
{
    const size_t columns = (size_t)Columns::count(round_up16(p->K), round_up16(p->V));
    return chain_launch_shape<PRECISE, Columns>(p->B * p->H * runs * (columns / 16), columns / 16, p->K, outputs,
                                                chain_from_values<PRECISE>(p, depth, invariant));
}
/* whether kernel 2 over one segment of every head makes o itself (and so reads no keys_t) */
template <bool PRECISE>
static bool chain_makes_outputs(const gdn_device_problem *p)
{
    return outputs_possible<PRECISE, state_columns>(p) && chain_shape_for<PRECISE, state_columns>(p, chunks_of(p->T), 1, true).tiles == MAX_CHAIN_TILES;
}

/* What kernel 1 writes for the chains that follow it in a pass `depth` steps deep: the
 * transform block where they make Vnew from v (chain_from_values), else W, U and the keys */
template <bool PRECISE>
static int chunk_parts_for(const gdn_device_problem *p, size_t depth, bool invariant = false)
{
    return chain_from_values<PRECISE>(p, depth, invariant) ? WRITE_TRANSFORM : WRITE_KEYS_T | WRITE_W_AND_U;
}

/* Kernel 2 over segments 0 .. runs-1 of every head, carrying the state Columns. With `r`
 * (state_columns), where the blocks are MAX_CHAIN_TILES wide, the block also makes o
 * (chunk_states_outputs_kernel), and *outputs_done says so; never with `invariant`: whether it
 * runs depends on the heads, and its wgmma sums o in another order than kernel 3. Block
 * widths, ring depth and staged stores change where a state column is computed, not how. */
template <bool PRECISE, class Columns>
static int launch_chunk_states(const gdn_device_problem *p, chunk_workspace w, chain_segments segments, size_t depth, gdn_device_result *r = NULL,
                               bool *outputs_done = NULL, cudaStream_t stream = 0, bool invariant = false)
{
    const size_t columns = (size_t)Columns::count(round_up16(p->K), round_up16(p->V)), runs = segments.runs;
    const size_t output_bytes = output_block_bytes();
    const bool outputs = !invariant && r && outputs_done && outputs_possible<PRECISE, Columns>(p); /* if the blocks are 8 tiles wide */
    const chain_shape shape = chain_shape_for<PRECISE, Columns>(p, depth, runs, outputs, invariant);
    const size_t block_columns = 16 * (size_t)shape.tiles;
    unsigned blocks;
    if (gdn_blocks_for(p->B * p->H * runs * ((columns + block_columns - 1) / block_columns), 1, &blocks))
        return -1;
    if (outputs_done)
        *outputs_done = false;
    if constexpr (!PRECISE && std::is_same_v<Columns, state_columns>) {
        if (outputs && shape.tiles == MAX_CHAIN_TILES) {
            if (!r->o_bf16)
                return gdn_set_error("the chain's output warps write o in bf16: the runner made no room for it");
            CUtensorMap o_map, q_map, k_map, v_map;
            /* boxes of 64 keys (128 bytes) with the 128-byte swizzle: the output warps' and the chain's wgmma operands,
               and o, which leaves from the q tile in the same layout */
            const gdn_device_problem inputs = input_maps_problem(p, w), keys = key_problem(&inputs); /* o lies as v does */
            if (make_token_tile_map(&q_map, p->q_bf16, &keys, p->K, 64, true) || make_token_tile_map(&k_map, p->k_bf16, &keys, p->K, 64, true) ||
                make_token_tile_map(&o_map, r->o_bf16, &inputs, p->V, 64, true) || make_token_tile_map(&v_map, p->v_bf16, &inputs, p->V, 64, true))
                return -1;
            /* two ring slots, passed at run time: a depth known to the compiler slows it (docs/06, "Pitfalls") */
            if (stream) /* beside kernel 1 (kernel1_beside_chain): in a stream of its own, after kernel 1's first launch */
                CUDA_LAUNCH_WITH_SHARED_ON(stream, chunk_states_outputs_kernel<true>, blocks, OUTPUT_BLOCK_THREADS, output_bytes, *p, w, segments,
                                           OUTPUT_STAGES, o_map, q_map, k_map, v_map, (bf16 *)r->o_bf16);
            else
                CUDA_LAUNCH_AFTER_PREVIOUS(chunk_states_outputs_kernel<false>, blocks, OUTPUT_BLOCK_THREADS, output_bytes, *p, w, segments,
                                           OUTPUT_STAGES, o_map, q_map, k_map, v_map, (bf16 *)r->o_bf16);
            r->o_in_bf16 = 1;
            *outputs_done = true;
            return 0;
        }
    }
    if constexpr (!PRECISE)
        if (shape.from_values) {
            const int values_stride = values_tile_stride(values_tile_columns(shape.tiles, p->V));
            /* the one-n-tile blocks' step is compiled for K = 64 and 128 and two v-tile strides only
               (one_n_tile_from_values_compiled): never run it on another */
            if (chain_ntiles(shape.tiles) == 1 && !one_n_tile_from_values_compiled(p->K, values_stride))
                return gdn_set_error("the chain from v: K = %zu and a v tile of stride %d, where its step is compiled for K = 64 or %d and strides %d or %d",
                                     p->K, values_stride, (int)MAX_K, values_tile_stride(16), values_tile_stride(32));
            CUtensorMap k_map, v_map;
            const gdn_device_problem inputs = input_maps_problem(p, w), keys = key_problem(&inputs);
            if (make_token_tile_map(&k_map, p->k_bf16, &keys, p->K, key_stride(p->K)) ||
                make_token_tile_map(&v_map, p->v_bf16, &inputs, p->V, values_stride))
                return -1;
            const chain_from_values_kernel chunk_states = from_values_kernel_for<Columns>(shape);
            segments.outputs_early = outputs_may_start_early<PRECISE, Columns>(p, shape, blocks);
            CUDA_LAUNCH_AFTER_PREVIOUS(chunk_states, blocks, chain_block_threads(shape.tiles), shape.bytes, *p, w, segments, shape.stages,
                                       k_map, v_map);
            return 0;
        }
    const chain_kernel chunk_states = chain_kernel_for<PRECISE, Columns>(shape);
    segments.outputs_early = outputs_may_start_early<PRECISE, Columns>(p, shape, blocks);
    CUDA_LAUNCH_AFTER_PREVIOUS(chunk_states, blocks, chain_block_threads(shape.tiles), shape.bytes, *p, w, segments, shape.stages);
    return 0;
}

/* Kernel 3 with COLUMNS columns of o a block. */
template <bool PRECISE, int COLUMNS>
static int launch_chunk_outputs_by(const gdn_device_problem *p, chunk_workspace w, gdn_device_result *r)
{
    const size_t M = CHUNK, LDK = key_stride(p->K), LDT = TOKEN_STRIDE, terms = PRECISE ? 2 : 1;
    const size_t bytes = 128 + M * sizeof(double) + (2 * M * LDK + terms * (COLUMNS * LDK + COLUMNS * LDT + M * LDT)) * sizeof(bf16);
    unsigned blocks;
    if (gdn_blocks_for(output_blocks(p, COLUMNS), 1, &blocks))
        return -1;
    if (!PRECISE && !r->o_bf16)
        return gdn_set_error("kernel 3 writes o in bf16: the runner made no room for it");
    CUtensorMap q_map = {}, k_map = {}; /* unused (zero) where the threads copy q and k */
    const gdn_device_problem inputs = input_maps_problem(p, w), keys = key_problem(&inputs);
    if (keys_by_tensor_map(p->K, keys.H, p->T) && (make_token_tile_map(&q_map, p->q_bf16, &keys, p->K, key_stride(p->K)) ||
                                                   make_token_tile_map(&k_map, p->k_bf16, &keys, p->K, key_stride(p->K))))
        return -1;
    /* K = V = 64 or 128 (one COLUMNS each: 64 columns where V is not a multiple of 128) compiled with them known */
    constexpr int SIZE = PRECISE ? 0 : COLUMNS;
    auto chunk_outputs = SIZE && p->K == SIZE && p->V == SIZE ? chunk_outputs_kernel<PRECISE, COLUMNS, SIZE> : chunk_outputs_kernel<PRECISE, COLUMNS, 0>;
    CUDA_LAUNCH_AFTER_PREVIOUS(chunk_outputs, blocks, THREADS, bytes, *p, w, r->o, (bf16 *)r->o_bf16, q_map, k_map,
                               outputs_beside_chain<PRECISE>(p));
    r->o_in_bf16 = !PRECISE;
    return 0;
}

/* Kernel 3 with output_columns a block. */
template <bool PRECISE>
static int launch_chunk_outputs(const gdn_device_problem *p, chunk_workspace w, gdn_device_result *r)
{
    if constexpr (!PRECISE) /* (no 128-column kernel is compiled for --precise) */
        if (output_columns<PRECISE>(p) == 128)
            return launch_chunk_outputs_by<PRECISE, 128>(p, w, r);
    return launch_chunk_outputs_by<PRECISE, 64>(p, w, r);
}

static int check_key_width(size_t K)
{
    return K > MAX_K ? gdn_set_error("K = %zu: the chain keeps K-wide tiles in shared memory, K at most %d", K, MAX_K) : 0;
}

