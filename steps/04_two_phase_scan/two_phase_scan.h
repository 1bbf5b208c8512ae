#ifndef GDN_TWO_PHASE_SCAN_H
#define GDN_TWO_PHASE_SCAN_H

#include "../../common/stage.h"

extern const gdn_stage two_phase_scan_stage;

/* First token of segment p of P over T tokens (p = P gives T); see two_phase_scan.c. */
size_t segment_start(size_t p, size_t P, size_t T, double first_weight);

#endif
