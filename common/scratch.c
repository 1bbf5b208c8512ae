#include "scratch.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "error.h"
#include "problem.h" /* gdn_multiply_sizes, gdn_memory_check */

int gdn_scratch_alloc(gdn_scratch *scratch, size_t bytes_per_thread)
{
    scratch->base = NULL;
    scratch->threads = omp_get_max_threads();
    if (bytes_per_thread > SIZE_MAX - 63)
        return gdn_set_error("the threads' scratch overflows a 64-bit byte count");
    scratch->stride = (bytes_per_thread + 63) / 64 * 64;
    /* refused with its byte count where it cannot fit, as the problem is (stage 02's maps grow
       as K (K + V) a thread) */
    size_t bytes, factors[2] = {scratch->stride, (size_t)scratch->threads};
    if (gdn_multiply_sizes(&bytes, 2, factors))
        return gdn_set_error("the threads' scratch overflows a 64-bit byte count (%d threads)", scratch->threads);
    if (gdn_memory_check(bytes, "the threads' scratch"))
        return -1;
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
