/* sync.cuh -- the PTX of synchronisation finer or wider than __syncthreads (sm_90), shared by
 * the GPU stages that specialise warps (06 and so 07).
 *
 * - A named barrier (bar.sync ID, THREADS) waits for THREADS threads of the block, a whole
 *   number of warps, at barrier ID (0 is __syncthreads'): warps with different roles each
 *   keep their own. ID and THREADS are compile-time constants; an ID in a register makes ptxas
 *   reserve all 16 barriers.
 * - A flag between blocks: st.release.gpu after a block's writes, ld.acquire.gpu before another
 *   block reads them; the acquire sees everything the release ordered before it.
 * - fence.proxy.async.global orders ordinary global stores before the TMA unit's reads of them
 *   (the async proxy is another path to memory).
 * - setmaxnreg moves registers between a block's warpgroups: .inc waits until the block has
 *   them free, .dec gives them back; every warp of the warpgroup executes it (sm_90a only).
 * PTX ISA: "bar.sync", "ld", "st", "membar/fence", "setmaxnreg".
 */
#ifndef GDN_SYNC_CUH
#define GDN_SYNC_CUH

#include <stdint.h>

template <int ID, int THREADS> __device__ __forceinline__ static void named_barrier_sync(void)
{
    static_assert(ID > 0 && ID < 16 && THREADS % 32 == 0, "barriers 1-15, whole warps");
    asm volatile("bar.sync %0, %1;" ::"n"(ID), "n"(THREADS) : "memory");
}

__device__ __forceinline__ static unsigned load_acquire_gpu(const unsigned *flag)
{
    unsigned value;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(flag) : "memory");
    return value;
}

__device__ __forceinline__ static void store_release_gpu(unsigned *flag, unsigned value)
{
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
}

__device__ __forceinline__ static void fence_global_for_async_proxy(void)
{
    asm volatile("fence.proxy.async.global;" ::: "memory");
}

template <int REGISTERS> __device__ __forceinline__ static void increase_registers(void)
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGISTERS));
}

template <int REGISTERS> __device__ __forceinline__ static void decrease_registers(void)
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGISTERS));
}

#endif
