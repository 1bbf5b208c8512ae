#ifndef GDN_PARALLEL_SCAN_H
#define GDN_PARALLEL_SCAN_H

#include "../../common/stage.h"

extern const gdn_stage parallel_scan_stage;

#endif
