#ifndef GDN_SEQUENCE_PARALLEL_H
#define GDN_SEQUENCE_PARALLEL_H

#include <stddef.h>

#include "../../common/stage.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const gdn_stage sequence_parallel_stage;

/* The automatic segment count of stage 07: the P in 1 .. MAX_AUTOMATIC_SEGMENTS (and at most
 * `chunks`) whose modelled chain time is least, for `heads` = B H sequences of `chunks` chunks,
 * K x V states, and `slots` chain blocks the GPU runs at once (SMs x blocks per SM). 1 when
 * the heads alone fill the GPU. See sequence_parallel.cu for the model. */
size_t sequence_parallel_segments(size_t heads, size_t K, size_t V, size_t chunks, size_t slots);

#ifdef __cplusplus
}
#endif

#endif
