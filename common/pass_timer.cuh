/* pass_timer.cuh -- how the runners (cuda_runner.cu, cuda_backward_runner.cu) make room for a
 * pass on the GPU and time it.
 *
 * Room: every byte a problem needs (inputs, outputs, workspace, the flush buffer) is counted
 * before any is allocated, and a problem the GPU cannot hold is refused with the counts.
 * Timing: before a timed pass the timer overwrites a buffer twice the size of the L2 cache, so
 * the pass does not find its inputs cached by the one before (a real layer would not); the
 * pass runs between two CUDA events and its time is theirs, measured on the device. Stopping
 * waits for the pass, so a fault inside a kernel surfaces there.
 */
#ifndef GDN_PASS_TIMER_CUH
#define GDN_PASS_TIMER_CUH

#include "cuda_check.h"

typedef struct {
    unsigned char *flush; /* 2 x the L2 cache */
    size_t flush_bytes;
    int flush_value;      /* a new byte value every flush, so no write can be skipped */
    cudaEvent_t start, stop;
} gdn_pass_timer;

/* The flush buffer's size on this GPU (before anything is allocated: it counts in the room). */
static int gdn_pass_timer_size(gdn_pass_timer *t)
{
    int l2_bytes = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0));
    t->flush_bytes = 2 * (size_t)l2_bytes;
    return 0;
}

/* Refuse, with the counts, a problem whose `io` bytes (`what`: which), workspace and flush
 * buffer do not fit in the GPU memory free now. */
static int gdn_pass_timer_check_room(const gdn_pass_timer *t, const char *name, const char *what, size_t io,
                                     size_t workspace)
{
    size_t total = io + workspace + t->flush_bytes, free_bytes = 0, device_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &device_bytes));
    if (total > free_bytes || total < io)
        return gdn_set_error("%s needs %zu bytes of GPU memory (%.1f GiB: %s %zu, workspace %zu, cache flush %zu), "
                             "more than the %zu bytes (%.1f GiB) free",
                             name, total, total / 1073741824.0, what, io, workspace, t->flush_bytes, free_bytes,
                             free_bytes / 1073741824.0);
    return 0;
}

static int gdn_pass_timer_open(gdn_pass_timer *t)
{
    CUDA_CHECK(cudaMalloc((void **)&t->flush, t->flush_bytes));
    CUDA_CHECK(cudaEventCreate(&t->start));
    CUDA_CHECK(cudaEventCreate(&t->stop));
    return 0;
}

/* Overwrite the L2 cache (before a timed pass; a poisoned pass is not timed for the record). */
static int gdn_pass_timer_flush(gdn_pass_timer *t)
{
    t->flush_value = (t->flush_value + 1) & 0xFF;
    CUDA_CHECK(cudaMemset(t->flush, t->flush_value, t->flush_bytes));
    return 0;
}

static int gdn_pass_timer_start(gdn_pass_timer *t)
{
    CUDA_CHECK(cudaEventRecord(t->start));
    return 0;
}

/* The pass's time in seconds, after waiting for it (a fault inside a kernel surfaces here). */
static int gdn_pass_timer_stop(gdn_pass_timer *t, double *seconds)
{
    CUDA_CHECK(cudaEventRecord(t->stop));
    CUDA_CHECK(cudaEventSynchronize(t->stop));
    CUDA_CHECK(cudaGetLastError());
    float milliseconds = 0;
    CUDA_CHECK(cudaEventElapsedTime(&milliseconds, t->start, t->stop));
    *seconds = 1e-3 * milliseconds;
    return 0;
}

static void gdn_pass_timer_close(gdn_pass_timer *t)
{
    cudaFree(t->flush);
    if (t->start)
        cudaEventDestroy(t->start);
    if (t->stop)
        cudaEventDestroy(t->stop);
}

#endif
