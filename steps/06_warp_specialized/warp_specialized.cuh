/* warp_specialized.cuh -- stage 06's kernels and launchers, in the order they are read.
 *
 * One header holds the whole stage's kernels and launch rules (warp_specialized.cu holds the
 * passes and the stage descriptor), so that a stage built on this one runs the very same
 * kernels. It takes the common pieces (the TMA unit's PTX, ldmatrix and
 * mma.sync, wgmma, the kernels' overlap), stage 05's gate sums, blocked solve and flop count
 * (the same algebra, unchanged), then the stage's files:
 *   tile_products.cuh     the constants, a warp's products, copy_tile
 *   chunk_workspace.cuh   the workspace between the kernels, the chain block's layout
 *   prepare_chunks.cuh    kernel 1 (eq. 9-12, 15): gates, K K^T, the solve, W and U or Tm
 *   chain_ring.cuh        kernel 2's structure: the ring, segments, sizes, fragment helpers
 *   fused_outputs.cuh     the block with output warps at K = V = 128 (eq. 13-15 and 14, wgmma)
 *   chain.cuh             chain_block (eq. 13-15) and the other two chain kernels
 *   chunk_outputs.cuh     kernel 3 (eq. 14)
 *   launch_rules.cuh      host: tensor maps, block shapes, the launch choices
 * The idea, the precision and the measured time: warp_specialized.cu's opening comment.
 */
#pragma once
#include <cuda_bf16.h>
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled: the driver's tensor map maker, found at run time */
#include <cuda_pipeline_primitives.h>
#include <stdint.h>
#include <type_traits>

#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/stage.h"
#include "../../common/bulk_copy.cuh" /* the TMA ring's PTX: mbarriers and bulk copies */
#include "../../common/mma_sync.cuh"    /* ldmatrix and mma.sync, bf16 and tf32 */
#include "../../common/fast_exp.cuh"    /* exp_approx: e^x by ex2.approx, for the gates' factors */
#include "../../common/wgmma.cuh"      /* the output warps' wgmma, from swizzled tiles */
#include "../../common/kernel_overlap.cuh" /* wait_for_previous_kernel, let_next_kernel_start */
#include "../../common/sync.cuh"        /* named barriers, flags between blocks, setmaxnreg */
#include "../../common/tensor_maps.cuh" /* host: tensor maps of q, k, v and o; occupancy queries */
#include "warp_specialized.h" /* warp_specialized_kernel1_split, warp_specialized_values_pay */
#include "../05_wy_chunked/wy_chunked_solve.cuh" /* the gate sums and the blocked solve, unchanged */
extern "C" { /* stage 05's flop count: the same algebra */
#include "../05_wy_chunked/wy_chunked.h"
}

#include "tile_products.cuh"
#include "chunk_workspace.cuh"
#include "prepare_chunks.cuh"
#include "chain_ring.cuh"
#include "fused_outputs.cuh"
#include "chain.cuh"
#include "chunk_outputs.cuh"
#include "launch_rules.cuh"
#include "padded_rows.cuh"
