/* driver.h -- stage 08's MPI driver, shared by its two backends.
 *
 * The driver (driver.c) does what does not depend on where a rank computes: the slices of
 * the sequence, the one-line collective errors, the timing loop, --check-against and --out.
 * A backend runs one rank's three phases (fold, exchange, replay) on its slice: stage 05 on
 * the CPU (context_parallel.c, bin/08_context_parallel), stage 07's kernels on this rank's
 * GPU (context_parallel.cu, bin/08_context_parallel_cuda).
 */
#ifndef GDN_CONTEXT_PARALLEL_DRIVER_H
#define GDN_CONTEXT_PARALLEL_DRIVER_H

#include <stddef.h>

#include "../../common/problem.h"
#include "../../common/stage.h"

typedef struct {
    const gdn_stage *stage; /* name, idea and options of the command line */
    const char *exchange;   /* the result line's name for phase 2's time: "exscan", "allgather" */
    double first_weight;    /* rank 0's share of the chunks, against 1 for every other rank */
    /* open: for this rank's slice (its h0 buffer is the replay's start state to fill; h0 is
     * the problem's initial state, NULL where it has none); it may fill in the settings it
     * chooses (the GPU backend's segments). run: one pass, the outputs set to
     * NaN first where poisoned, the three phases' seconds in seconds[]. flops: one pass's
     * count on this rank. close: free what open made (also after a failed open). */
    int (*open)(gdn_problem *slice, gdn_settings *s, const real_t *h0, void **context);
    int (*run)(void *context, int poisoned, gdn_result *out, double seconds[3]);
    double (*flops)(void *context);
    void (*close)(void *context);
} context_parallel_backend;

/* The program: mpirun runs it once per rank. */
int context_parallel_main(int argc, char **argv, const context_parallel_backend *backend);

/* For the backends: this rank, the number of ranks, the rank's index among those of its node
 * (which GPU it takes), and the MPI the GPU backend needs, in C: nvcc never sees mpi.h. */
int context_parallel_rank(void);
int context_parallel_ranks(void);
int context_parallel_local_rank(void);
int context_parallel_allgather(const float *mine, float *all, size_t count);
/* Collective: whether any rank failed; the lowest failing rank prints its error, once. */
int context_parallel_any_failed(int failed);
void context_parallel_barrier(void);
double context_parallel_wtime(void);

#endif
