/* scratch.h -- per-thread work buffers, allocated (and checked) once before a parallel loop.
 *
 * A stage that needs a private state matrix per thread asks for bytes_per_thread;
 * inside `#pragma omp parallel` each thread takes its own slice with gdn_scratch_mine().
 * Slices are 64-byte aligned (one cache line), so threads never share a line and the
 * compiler may use aligned vector loads. Allocating once keeps malloc out of hot loops.
 */
#ifndef GDN_SCRATCH_H
#define GDN_SCRATCH_H

#include <stddef.h>

typedef struct {
    unsigned char *base;
    size_t stride;    /* bytes per thread, rounded up to 64 */
    int threads;
} gdn_scratch;

/* For omp_get_max_threads() threads; 0 on success, -1 (with gdn_last_error) if out of memory. */
int gdn_scratch_alloc(gdn_scratch *scratch, size_t bytes_per_thread);
/* The calling thread's slice (omp_get_thread_num()). */
void *gdn_scratch_mine(const gdn_scratch *scratch);
void gdn_scratch_free(gdn_scratch *scratch);

#endif
