#ifndef GDN_PARALLEL_SCAN_H
#define GDN_PARALLEL_SCAN_H

#include "../../common/stage.h"

extern const gdn_stage parallel_scan_stage;

/* Flops of the scan as the CPU stage performs it (the GPU twin performs the same). */
double parallel_scan_flops(const gdn_problem *p, const gdn_settings *s);

#endif
