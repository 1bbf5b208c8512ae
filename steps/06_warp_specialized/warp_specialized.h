#ifndef GDN_WARP_SPECIALIZED_H
#define GDN_WARP_SPECIALIZED_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel 1 beside the chain (docs/06, "06: Vnew from v, and the launch rules"): where the chain's
 * blocks carry output warps, one a head, and kernel 1 writes only their transform blocks, the
 * first chunk of kernel 1's second launch, the one that runs on the SMs those blocks leave, for
 * `heads` sequences of `chunks` chunks on a GPU of `sms` SMs; 0 where kernel 1 does not run
 * beside the chain (too few chunks, or too few SMs left idle). See warp_specialized.cu for the
 * model. */
size_t warp_specialized_kernel1_split(size_t heads, size_t chunks, size_t sms);

/* Whether a pass over `heads` sequences of `chunks` chunks, whose chains are `depth` steps deep
 * in all (stage 06: `chunks`), has its chains make Vnew from v at K = V = `K` (64 or 128, where they can), so that kernel 1
 * writes the transform block alone (docs/06, "06: Vnew from v, and the launch rules"). See
 * launch_rules.cuh (chain_from_values_pays) for the rule. */
int warp_specialized_values_pay(size_t K, size_t heads, size_t chunks, size_t depth);

/* A packed batch's rows where they lie, by the kernels' own rules (chunk_workspace.cuh:
 * input_token, chunk_tokens; docs/06, "Grouped value heads, packed batches"). offsets: the
 * batch's N + 1 token offsets, or NULL for rows of T tokens, T apart. The index of row b's token
 * t of head h in tensors of `heads` heads a token; and the real tokens of row b's chunk from t0,
 * the only ones kernel 1 sums. */
size_t warp_specialized_input_token(const size_t *offsets, size_t b, size_t T, size_t t, size_t heads, size_t h);
int warp_specialized_chunk_tokens(const size_t *offsets, size_t b, size_t T, size_t t0);

#ifdef __cplusplus
}
#endif

#endif
