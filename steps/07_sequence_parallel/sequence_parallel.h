#ifndef GDN_SEQUENCE_PARALLEL_H
#define GDN_SEQUENCE_PARALLEL_H

#include <stddef.h>

#include "../../common/stage.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const gdn_stage sequence_parallel_stage;

/* Stage 06's chain blocks come in CHAIN_WIDTHS widths: 1, 2, 4 and 8 16-column tiles. */
enum { CHAIN_WIDTHS = 4 };

/* The automatic segment count of stage 07: the P in 1 .. MAX_AUTOMATIC_SEGMENTS (and at most
 * `chunks`) whose modelled chain time is least, for `heads` = B H sequences of `chunks` chunks
 * and K x V states, on a GPU of `sms` SMs that holds blocks_per_sm[i] chain blocks of 2^i
 * 16-column tiles each (i = 0 .. CHAIN_WIDTHS - 1; 0 where stage 06 makes no blocks that
 * wide, as with --precise at 8 tiles). 1 when the heads alone fill the GPU. See
 * sequence_parallel.cuh for the model. */
size_t sequence_parallel_segments(size_t heads, size_t K, size_t V, size_t chunks, size_t sms,
                                  const size_t blocks_per_sm[CHAIN_WIDTHS]);

/* The same for a packed batch, run as rows padded to its longest sequence: `rows` rows of
 * row_chunks[n] real chunks, heads_per_row (HV) heads each. A segment past a row's last real
 * chunk runs none and returns at once, so it counts in the blocks' width, as stage 06 launches
 * them, but not in the waves: a long sequence beside short ones is cut as it would be alone
 * with as many busy blocks. */
size_t sequence_parallel_packed_segments(const size_t *row_chunks, size_t rows, size_t heads_per_row, size_t K, size_t V, size_t sms,
                                         const size_t blocks_per_sm[CHAIN_WIDTHS]);

#ifdef __cplusplus
}
#endif

#endif
