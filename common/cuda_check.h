/* cuda_check.h -- every CUDA call and kernel launch checked, the failing call named.
 *
 *     CUDA_CHECK(cudaMalloc(&x, bytes));       returns -1 from the enclosing function, after
 *                                              gdn_set_error("file:line: cudaMalloc(...): <reason>")
 *     kernel<<<grid, block>>>(...);
 *     CUDA_CHECK_LAUNCH("fold_segments");      a bad launch configuration, named
 *     CUDA_LAUNCH_WITH_SHARED(kernel, blocks, threads, bytes, args...);   both, for a kernel
 *                                              with more than 48 KB of dynamic shared memory
 *     CUDA_LAUNCH_WITH_SHARED_ON(stream, kernel, blocks, threads, bytes, args...);   the same,
 *                                              into a stream of the stage's own (0: the pass's)
 *     CUDA_LAUNCH_AFTER_PREVIOUS(kernel, blocks, threads, bytes, args...);   the same, the
 *                                              kernel overlapping the end of the one before
 *
 * Kernel faults that happen later (an illegal address) surface at the next synchronising
 * call, which is checked the same way; the runner synchronises after every timed pass.
 * Launches go into the pass's stream (device.h, gdn_pass_stream: the default stream unless a
 * caller such as the Python package names another), so a pass can run in PyTorch's stream.
 */
#ifndef GDN_CUDA_CHECK_H
#define GDN_CUDA_CHECK_H

#include <cuda_runtime.h>

#include "device.h"
#include "error.h"

#define CUDA_CHECK(call)                                                                                  \
    do {                                                                                                  \
        cudaError_t status_ = (call);                                                                     \
        if (status_ != cudaSuccess) {                                                                     \
            cudaGetLastError(); /* cleared: a library's next call must not see it as its own */          \
            return gdn_set_error("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(status_)); \
        }                                                                                                 \
    } while (0)

#define CUDA_CHECK_LAUNCH(kernel_name)                                                                    \
    do {                                                                                                  \
        cudaError_t status_ = cudaGetLastError();                                                         \
        if (status_ != cudaSuccess)                                                                       \
            return gdn_set_error("%s:%d: launch of %s: %s", __FILE__, __LINE__, kernel_name,              \
                                 cudaGetErrorString(status_));                                            \
    } while (0)

/* Launch kernel<<<blocks, threads, bytes, stream>>>(...) with `bytes` of dynamic shared memory,
 * allowing more than the default 48 KB (the attribute is set first), and check the launch.
 * A null stream means the pass's stream. */
#define CUDA_LAUNCH_WITH_SHARED_ON(stream, kernel, blocks, threads, bytes, ...)                           \
    do {                                                                                                  \
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes))); \
        const cudaStream_t stream_ = (stream);                                                            \
        kernel<<<(blocks), (threads), (bytes), stream_ ? stream_ : gdn_pass_stream()>>>(__VA_ARGS__);     \
        CUDA_CHECK_LAUNCH(#kernel);                                                                       \
    } while (0)
#define CUDA_LAUNCH_WITH_SHARED(kernel, blocks, threads, bytes, ...) \
    CUDA_LAUNCH_WITH_SHARED_ON(0, kernel, blocks, threads, bytes, __VA_ARGS__)

/* The same into the pass's stream, but the kernel may start while the kernel before it
 * finishes (programmatic dependent launch, sm_90 on): its blocks are placed as soon as every
 * block of the one before has run griddepcontrol.launch_dependents (or exited), and must run
 * griddepcontrol.wait before they read anything that kernel, or one before it, wrote. What a
 * kernel does before its wait (set up shared memory and barriers, load inputs no kernel
 * writes) overlaps the end of the one before. Where the kernel before it is not one (a copy,
 * an event), the launch waits for it as any launch would. */
#define CUDA_LAUNCH_AFTER_PREVIOUS(kernel, blocks, threads, bytes, ...)                                    \
    do {                                                                                                  \
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes))); \
        cudaLaunchAttribute overlap_;                                                                     \
        overlap_.id = cudaLaunchAttributeProgrammaticStreamSerialization;                                 \
        overlap_.val.programmaticStreamSerializationAllowed = 1;                                          \
        cudaLaunchConfig_t config_ = {};                                                                  \
        config_.gridDim = dim3(blocks);                                                                   \
        config_.blockDim = dim3(threads);                                                                 \
        config_.dynamicSmemBytes = (bytes);                                                               \
        config_.attrs = &overlap_;                                                                        \
        config_.numAttrs = 1;                                                                             \
        config_.stream = gdn_pass_stream();                                                               \
        CUDA_CHECK(cudaLaunchKernelEx(&config_, kernel, __VA_ARGS__));                                    \
        CUDA_CHECK_LAUNCH(#kernel);                                                                       \
    } while (0)

/* Blocks of `per_block` covering `count` items, refusing grids CUDA cannot launch. */
static inline int gdn_blocks_for(size_t count, size_t per_block, unsigned *blocks)
{
    size_t needed = (count + per_block - 1) / per_block;
    *blocks = 0;
    if (needed == 0 || needed > 2147483647u)
        return gdn_set_error("%zu items need %zu blocks of %zu: outside what one launch can cover", count, needed,
                             per_block);
    *blocks = (unsigned)needed;
    return 0;
}

#endif
