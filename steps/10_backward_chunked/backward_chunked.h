#ifndef GDN_BACKWARD_CHUNKED_H
#define GDN_BACKWARD_CHUNKED_H

#include "../../common/backward_stage.h"

#ifdef __cplusplus /* its GPU twin (backward_chunked.cu) includes it */
extern "C" {
#endif

extern const gdn_backward_stage backward_chunked_stage;

/* Flops of the chunked backward for --chunk, counted from its loops (docs/10_backward_chunked.md). */
double backward_chunked_flops(const gdn_problem *p, const gdn_settings *s);

#ifdef __cplusplus
}
#endif

#endif
