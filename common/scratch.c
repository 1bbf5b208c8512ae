#include "scratch.h"

#include <omp.h>
#include <stdlib.h>

#include "error.h"

int gdn_scratch_alloc(gdn_scratch *scratch, size_t bytes_per_thread)
{
    scratch->threads = omp_get_max_threads();
    scratch->stride = (bytes_per_thread + 63) / 64 * 64;
    size_t bytes = scratch->stride * (size_t)scratch->threads;
    scratch->base = aligned_alloc(64, bytes ? bytes : 64);
    if (!scratch->base)
        return gdn_set_error("out of memory for %d threads' scratch (%zu bytes)", scratch->threads, bytes);
    return 0;
}

void *gdn_scratch_mine(const gdn_scratch *scratch)
{
    return scratch->base + scratch->stride * (size_t)omp_get_thread_num();
}

void gdn_scratch_free(gdn_scratch *scratch)
{
    free(scratch->base);
    scratch->base = NULL;
}
