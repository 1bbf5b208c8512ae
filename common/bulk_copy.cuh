/* bulk_copy.cuh -- the PTX of a shared-memory ring filled by the TMA unit (sm_90), shared by
 * the GPU stages that use one (05's kernel 2, 06's and so 07's chain).
 *
 * A bulk copy (cp.async.bulk) moves a contiguous piece of global memory into shared memory in
 * one instruction issued by one thread; no thread copies 16 bytes at a time. Its arrival is
 * counted on an mbarrier, a 64-bit counter in shared memory that completes a phase when the
 * arrivals it was made for have happened and the bytes it was told to expect have landed.
 * Waiters name the phase by its parity (0, 1, 0, ...). PTX ISA: "mbarrier", "cp.async.bulk".
 */
#ifndef GDN_BULK_COPY_CUH
#define GDN_BULK_COPY_CUH

#include <cuda.h> /* CUtensorMap, for tensor copies (the map itself is made on the host) */
#include <stdint.h>

/* a shared-memory pointer as the 32-bit address PTX takes (also ldmatrix's, in 06) */
__device__ __forceinline__ static uint32_t shared_address(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
/* a barrier whose phases complete after `arrivals` arrivals (and their expected bytes) */
__device__ __forceinline__ static void barrier_init(uint64_t *barrier, int arrivals)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
}
/* after the initialising thread's barrier_init calls, before the barrier that lets any other
 * thread (or the TMA unit) use them */
__device__ __forceinline__ static void barrier_init_fence(void)
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/* one arrival that also says how many bytes of bulk copies must land before the phase ends */
__device__ __forceinline__ static void barrier_arrive_expecting(uint64_t *barrier, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes) : "memory");
}
__device__ __forceinline__ static void barrier_arrive(uint64_t *barrier)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier)) : "memory");
}
/* wait until the phase of this parity has completed */
__device__ __forceinline__ static void barrier_wait(uint64_t *barrier, uint32_t parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}\n" ::"r"(shared_address(barrier)),
                 "r"(parity)
                 : "memory");
}
/* bytes (a multiple of 16, both ends 16-byte aligned) from global to shared memory by the
 * TMA unit; their arrival counts against the barrier's expected bytes */
__device__ __forceinline__ static void bulk_copy(void *to, const void *from, uint32_t bytes, uint64_t *barrier)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     shared_address(to)),
                 "l"(from), "r"(bytes), "r"(shared_address(barrier))
                 : "memory");
}

/* The first 128-byte boundary at or after p in shared memory, as an unsigned char pointer. A
 * tensor copy's destination must be 128-byte aligned, and dynamic shared memory is promised
 * 16 bytes only, so a kernel that takes tiles by tensor copies starts its layout here (its
 * launch asks for 128 bytes more, for the shift). A macro, not a function: nvcc 13 compiled
 * the kernels around the same expression in an inline function differently (up to 11 %
 * more or fewer instructions in 06's kernels 1 and 3), and its SASS is what was measured. */
#define SHARED_AT_128_BYTES(p) ((unsigned char *)(p) + (128 - shared_address(p) % 128) % 128)
/* and from a 1024-byte boundary, where a 128-byte swizzle (the TMA unit's, wgmma's) begins */
#define SHARED_AT_1024_BYTES(p) ((unsigned char *)(p) + (1024 - shared_address(p) % 1024) % 1024)

/* A tensor copy (cp.async.bulk.tensor): one box of a strided tensor, described once on the
 * host by a tensor map (cuTensorMapEncodeTiled: the tensor's sizes and strides, the box's
 * size), from coordinates c0 (innermost), c1, c2, into shared memory as a dense box (128-byte
 * aligned), by one instruction of one thread. A box may hang past the tensor's end (those
 * elements land as zeros, and the whole box's bytes count against the barrier), but no
 * dimension of the box may be larger than the tensor's: the encoder does not refuse that,
 * and other projects report faults when it happens. `map` is the address of a
 * __grid_constant__ kernel parameter. PTX ISA: "cp.async.bulk.tensor", "Tensor Map". */
__device__ __forceinline__ static void tensor_copy_3d(void *to, const CUtensorMap *map, int c0, int c1, int c2, uint64_t *barrier)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(
                     shared_address(to)),
                 "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(shared_address(barrier))
                 : "memory");
}

/* The other way: threads write a tile into shared memory, then bulk stores (cp.async.bulk
 * from shared to global) hand it to the TMA unit, which writes it out in whole lines. The
 * threads' writes must first be made visible to the TMA unit (the "async proxy": every
 * writing thread fences, then the group syncs), and before the tile is written again the
 * issuing thread waits until its stores have read it. A thread's stores form bulk groups:
 * it commits them, and waits on the groups. PTX ISA: "cp.async.bulk", "membar/fence". */
__device__ __forceinline__ static void fence_shared_for_bulk_store(void) { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/* bytes (a multiple of 16, both ends 16-byte aligned) from shared to global memory */
__device__ __forceinline__ static void bulk_store(void *to, const void *from, uint32_t bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(to), "r"(shared_address(from)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ static void bulk_store_commit(void) { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
/* until this thread's committed stores have read their shared memory */
__device__ __forceinline__ static void bulk_store_wait_read(void) { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
/* until they have also written global memory */
__device__ __forceinline__ static void bulk_store_wait(void) { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
/* A tensor store: tensor_copy_3d the other way, one box from shared memory (laid out as a
 * tensor copy with the same map lands it, its swizzle included) into the strided tensor at
 * coordinates c0, c1, c2, by one instruction of one thread. Elements of the box past the
 * tensor's end are not written. A bulk group like bulk_store's: fence and sync the writers
 * first, commit, and wait before the tile is written again. PTX ISA: "cp.async.bulk.tensor". */
__device__ __forceinline__ static void tensor_store_3d(const CUtensorMap *map, int c0, int c1, int c2, const void *from)
{
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];" ::"l"(map), "r"(c0), "r"(c1),
                 "r"(c2), "r"(shared_address(from))
                 : "memory");
}

#endif
