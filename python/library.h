/* library.h -- what the Python package passes to the native libraries (python/library.c for
 * the CPU stages, python/library_cuda.cu for the GPU ones), and the checks both share.
 * python/gdn_steps/__init__.py mirrors gdn_library_call field by field (ctypes).
 */
#ifndef GDN_LIBRARY_H
#define GDN_LIBRARY_H

#include <stdint.h>

#include "../common/stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A call in FLA's layout (docs/contract.md section 1), row-major, contiguous. On the CPU every
 * tensor is real_t; on the GPU q, k and v are bf16 (their bit patterns), g, beta and h0 fp32,
 * all in GPU memory, and the pass runs in `stream`. */
typedef struct {
    int64_t B, T, H, HV, K, V;
    double scale;
    const void *q, *k, *v, *g, *beta, *h0; /* h0 may be NULL: a zero initial state */
    const int64_t *offsets;                /* NULL, or sequences + 1 offsets (cu_seqlens, B = 1) */
    int64_t sequences;
    int64_t chunk, segments, threads;      /* 0: the stage's default; the OpenMP default */
    int64_t precise;                       /* GPU stages: --precise */
    int64_t batch_invariant;               /* GPU stages: --batch-invariant */
    int64_t device;                        /* GPU stages: the CUDA device of the tensors */
    void *stream;                          /* GPU stages: the stream to run in (PyTorch's current one) */
    const int64_t *device_offsets;         /* GPU stages, a packed batch: `offsets` in GPU memory too */
} gdn_library_call;

/* A stage matches its full name ("05_wy_chunked") or its number ("05", "06a"). */
int gdn_library_names(const char *wanted, const char *name);

/* The caller's tensors as a problem (no copies but a packed batch's offsets) and the settings
 * a binary would resolve; sizes and options checked. 0, or -1 with the reason. */
int gdn_library_problem(const gdn_library_call *c, gdn_problem *p, gdn_settings *s);

/* The call's options are the stage's (precise and batch_invariant only where the stage has them). */
int gdn_library_check_options(const gdn_stage *stage, const gdn_library_call *c);

/* Frees what gdn_library_problem allocated (the offsets); the tensors are the caller's. */
void gdn_library_release(gdn_problem *p);

#ifdef __cplusplus
}
#endif

#endif
