/* wgmma_layout.h -- the wgmma layout test's kernel (wgmma_layout.cu), called from C. */
#ifndef GDN_WGMMA_LAYOUT_H
#define GDN_WGMMA_LAYOUT_H

#include <stdint.h>

typedef struct {
    int misplaced;          /* elements of the swizzled tensor map's tile not where swizzled_offset says */
    double error_64;        /* m64n64k16, both operands swizzled K-major tiles */
    double error_32;        /* m64n32k16, B 32 rows into its tile */
    double error_k_major;   /* m64n64k16, A from registers scaled by -1, B K-major */
    double error_n_major;   /* m64n128k16, A from registers, B N-major (swizzled_descriptor_n_major) */
    double error_n_swapped; /* the same with the descriptor's two offsets swapped: reported, not checked */
} wgmma_layout_result;

/* Draws the inputs from seed and runs the kernel: 0, or -1 with gdn_last_error. */
int wgmma_layout_check(uint64_t seed, wgmma_layout_result *result);

#endif
