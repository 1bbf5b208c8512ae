/* tensor_maps.cuh -- host helpers of the kernels that take token tiles by the TMA unit: the
 * tensor map of a (B, T, H, width) bf16 input, and the occupancy and shared-memory queries
 * their launch rules ask.
 *
 * A tensor map describes a strided layout to the TMA unit once, on the host; a kernel then
 * brings a whole tile (here one head's `width` columns of a chunk of TOKEN_TILE_ROWS tokens)
 * with one instruction (tensor_copy_3d, bulk_copy.cuh). Host code only: a few driver calls a
 * launch.
 *
 * Included by the tensor-core stages' headers after cuda_bf16.h, cudaTypedefs.h and device.h.
 */
#pragma once
constexpr int TOKEN_TILE_ROWS = 64; /* a tile's tokens: the tensor-core stages' chunk */

/* q, k (width K) or v (width V), (B, T, H, width) bf16, as a 3-D tensor for the TMA unit:
 * innermost the token's row of all heads (H width values), then T, then B (strides in bytes);
 * and the box a kernel takes of it: box_width values of a row (from h width: one head's, plus
 * the padding) of TOKEN_TILE_ROWS tokens, the padded tile ldmatrix reads. Every box dimension is within
 * the tensor's (the callers' conditions); the tokens past T land as zeros.
 * cuTensorMapEncodeTiled is a driver function; the runtime hands out its address, so nothing
 * links the driver library. */
static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    if (!encode) {
        cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000, cudaEnableDefault, &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess || !encode) {
            encode = NULL;
            gdn_set_error("the CUDA driver does not offer cuTensorMapEncodeTiled");
        }
    }
    return encode;
}
static int make_token_tile_map(CUtensorMap *map, const void *tensor, const gdn_device_problem *p, size_t width, int box_width,
                               bool swizzled = false)
{
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (!encode)
        return -1;
    const cuuint64_t sizes[3] = {p->H * width, p->T, p->B};
    const cuuint64_t strides[2] = {p->H * width * sizeof(__nv_bfloat16), p->T * p->H * width * sizeof(__nv_bfloat16)};
    const cuuint32_t box[3] = {(cuuint32_t)box_width, TOKEN_TILE_ROWS, 1}, steps[3] = {1, 1, 1};
    const CUresult result = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)tensor, sizes, strides, box, steps,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, swizzled ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return result == CUDA_SUCCESS ? 0 : gdn_set_error("cuTensorMapEncodeTiled refused a map of q, k, v or o (CUresult %d)", (int)result);
}
/* Blocks of `kernel` an SM holds at once with `bytes` of dynamic shared memory (the occupancy
 * query: registers, shared memory, threads); 0 where no device answers (the launch then
 * reports what is missing). */
template <typename Kernel>
static int kernel_blocks_per_sm(Kernel kernel, int threads, size_t bytes)
{
    int per_sm = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes) != cudaSuccess) {
        cudaGetLastError();
        per_sm = 0;
    }
    return per_sm;
}
