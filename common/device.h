/* device.h -- a problem and its results in GPU memory, as the GPU stages receive them.
 *
 * The CUDA runner (cuda_runner.cu) copies the host problem (problem.h) to the device once,
 * before any timing, in the same layout: q, k [B, T, H, K], v, o [B, T, H, V], g, beta
 * [B, T, H], h0, ht [B, H, K, V], fp32 row-major. A GPU stage's device_forward reads these
 * pointers and launches its kernels into the pass's stream (gdn_pass_stream, below); it must
 * not allocate (the runner hands it the workspace it asked for), must not synchronise, and
 * must check every launch (cuda_check.h).
 */
#ifndef GDN_DEVICE_H
#define GDN_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gdn_device_problem {
    size_t B, T, H, K, V;
    float scale;
    /* Heads that share one head's q and k rows: 1, or HV / H where a stage runs grouped value
     * heads as its H heads (stage 06: q and k rows of head h are those of key head
     * h / heads_per_key among H / heads_per_key). In the 4 bytes after scale, so that the
     * struct's size and every other field's offset stay as they are. */
    unsigned heads_per_key;
    const float *q, *k, *v, *g, *beta;
    const float *h0;                 /* NULL: a zero initial state */
    /* For stages with bf16_inputs (stage.h): q, k and v again as bf16 bit patterns, same
     * layout, converted on the GPU before any timing; NULL for the others. */
    const unsigned short *q_bf16, *k_bf16, *v_bf16;
} gdn_device_problem;

/* The layouts of problem.h on the device. HV value heads: v, o [B, T, HV, V], g, beta
 * [B, T, HV], h0, ht [N, HV, K, V], while q and k keep H heads; value head h reads key head
 * h / (HV / H). offsets: NULL, or sequences + 1 token offsets in GPU memory (a packed batch,
 * B = 1): sequence n is tokens offsets[n] .. offsets[n + 1] - 1, with its own state. Stages
 * that take them say so in their options (GDN_OPTION_VALUE_HEADS, GDN_OPTION_PACKED) and find
 * them in gdn_device_result; the others are never handed anything but HV = H and no offsets.
 * (Not in gdn_device_problem: kernels take that by value, and a larger one moves their
 * parameters, which changes the machine code of every stage, even of those that ignore it;
 * heads_per_key fits in its padding, where nothing moves.) */
typedef struct gdn_device_layout {
    size_t HV;
    const size_t *offsets;
    size_t sequences;
    size_t longest; /* the longest sequence's tokens (T without offsets), known on the host */
    /* B rows padded from a packed batch (stages 06 and 07: padded_rows.cuh): that batch's
       offsets, row b holding offsets[b + 1] - offsets[b] real tokens; NULL for any other rows */
    const size_t *padded_from;
    size_t padded_tokens; /* that batch's tokens in all (its last offset; 0 for any other rows) */
} gdn_device_layout;

typedef struct gdn_device_result {
    float *o, *ht;
    /* For stages with bf16_inputs: room for o in bf16 (bit patterns, o's layout). A pass that
     * writes o there, as FLA does, sets o_in_bf16; the runner then widens it into o after the
     * timed pass, for the checks and --out. NULL for the other stages. */
    unsigned short *o_bf16;
    int o_in_bf16;
    void *workspace;                 /* device_workspace_bytes() bytes, 256-byte aligned */
    size_t workspace_bytes;
    gdn_device_layout layout;        /* the problem's layout (above) */
} gdn_device_result;

/* A backward pass's cotangents and gradients on the GPU (gradients.h's, fp32, same layouts). */
typedef struct gdn_device_cotangents {
    const float *d_o, *dht;
    /* For stage 11 called from PyTorch, where autograd hands dO over in bf16: dO as bf16 bit
     * patterns, read in place of d_o (then NULL); NULL for every other caller. */
    const unsigned short *d_o_bf16;
} gdn_device_cotangents;

typedef struct gdn_device_gradients {
    float *dq, *dk, *dv, *dg, *dbeta;
    float *dh0;                      /* NULL without h0 */
    /* For stage 11 called from PyTorch with bf16 q, k and v: dq and dv written here as bf16 bit
     * patterns instead (rounded once from the same fp32 sums). dk stays fp32: its kernel is at
     * its 64 registers, and a bf16 store there spills. NULL for every other caller. */
    unsigned short *dq_bf16, *dv_bf16;
} gdn_device_gradients;

/* The runner GPU backward stages name (cuda_backward_runner.cu). */
struct gdn_backward_runner;
extern const struct gdn_backward_runner gdn_cuda_backward_runner;

/* Token (b, t, h)'s index, as gdn_token() on the host: its q row is at q + index * K. */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline size_t gdn_device_token(const gdn_device_problem *p, size_t b, size_t t, size_t h)
{
    return (b * p->T + t) * p->H + h;
}

/* A packed batch's sequences, or the B rows; where sequence n starts (its first token's
 * position, counted over all B T positions) and its length. */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline size_t gdn_device_sequences(const gdn_device_problem *p, const gdn_device_layout *l)
{
    return l->offsets ? l->sequences : p->B;
}
#ifdef __CUDACC__
__host__ __device__
#endif
static inline size_t gdn_device_sequence_start(const gdn_device_problem *p, const gdn_device_layout *l, size_t n)
{
    return l->offsets ? l->offsets[n] : n * p->T;
}
#ifdef __CUDACC__
__host__ __device__
#endif
static inline size_t gdn_device_sequence_length(const gdn_device_problem *p, const gdn_device_layout *l, size_t n)
{
    return l->offsets ? l->offsets[n + 1] - l->offsets[n] : p->T;
}

/* The rows of position `position` (b T + t) for value head h: its v, g, beta and o row, and
 * the q and k row of the key head it reads (problem.h: gdn_value_token, gdn_key_token). */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline size_t gdn_device_value_row(const gdn_device_layout *l, size_t position, size_t h)
{
    return position * l->HV + h;
}
#ifdef __CUDACC__
__host__ __device__
#endif
static inline size_t gdn_device_key_row(const gdn_device_problem *p, const gdn_device_layout *l, size_t position,
                                        size_t h)
{
    return position * p->H + h / (l->HV / p->H);
}

/* The stream a pass runs in, for the calling thread: the default stream (NULL) unless the
 * caller set another. The Python package sets PyTorch's current stream around a call
 * (python/library_cuda.cu), so that the pass is ordered with the caller's work and can be
 * captured in a CUDA graph. cuda_check.h's launch macros launch into it; stage 06, which has
 * streams of its own, forks them from it and joins them back into it with events. (Stage
 * 05_cuda's streams are blocking ones that follow the default stream: it runs under its binary
 * only. struct CUstream_st is what cudaStream_t points to; this header stays plain C.) */
struct CUstream_st *gdn_pass_stream(void);
void gdn_set_pass_stream(struct CUstream_st *stream);

/* The runner GPU stages name in their gdn_stage (defined in cuda_runner.cu). */
struct gdn_runner;
extern const struct gdn_runner gdn_cuda_runner;

/* 1 when a CUDA device can be used; else 0, with the reason in gdn_last_error(). */
int gdn_cuda_device_present(void);

/* count floats from the host into a new device buffer *device (cudaMalloc'd; the caller frees
 * it, also on failure). 0, or -1 with the error set. */
int gdn_cuda_upload(float **device, const float *host, size_t count);
/* A bf16 copy (bit patterns) of count floats already on the device, in a new device buffer
 * *device (the caller frees it, also on failure); the values are rounded to nearest even, so
 * exact where the driver has rounded them to bf16 values (the stages with bf16 inputs). */
int gdn_cuda_upload_bf16(unsigned short **device, const float *device_floats, size_t count);

/* The current device's SM count, for the choices a stage makes from it (segments, block shapes);
 * 132, an H200's, where no device answers (the error cleared: the runner reports a missing
 * device itself, and host-only callers still get an H200's choice). */
int gdn_sm_count(void);

#ifdef __cplusplus
}
#endif

#endif
