/* kernel_overlap.cuh -- the device side of a kernel overlapping the end of the one before it
 * in its stream (programmatic dependent launch, sm_90 on); the launch is
 * CUDA_LAUNCH_AFTER_PREVIOUS (cuda_check.h).
 *
 * A kernel launched that way has its blocks placed as the last blocks of the kernel before
 * exit, before that kernel's writes are flushed. Before wait_for_previous_kernel a block may
 * set up its shared memory and barriers and read inputs no kernel writes; after it, the
 * kernel before has ended and its writes are visible (and so are those of every kernel
 * before that one, which ended before it did). Launched the ordinary way the wait returns at
 * once. Every thread that reads what the kernel before wrote must wait itself.
 */
#ifndef GDN_KERNEL_OVERLAP_CUH
#define GDN_KERNEL_OVERLAP_CUH

__device__ __forceinline__ static void wait_for_previous_kernel(void)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

/* Lets the next kernel's blocks be placed before this one ends, once every block of this one
 * has called it (or exited); they still wait (above) before they read what this one writes. */
__device__ __forceinline__ static void let_next_kernel_start(void)
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

#endif
