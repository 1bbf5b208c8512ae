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

#ifdef __cplusplus
}
#endif

#endif
