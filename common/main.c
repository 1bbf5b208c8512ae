/* main.c -- every stage binary's main(). The Makefile compiles this file once per stage
 * with -DSTAGE_DESCRIPTOR=<name>_stage, the gdn_stage that the stage file defines (and, for a
 * backward stage, -DBACKWARD_STAGE: its gdn_backward_stage). */
#include "stage.h"

#ifndef STAGE_DESCRIPTOR
#error "compile with -DSTAGE_DESCRIPTOR=<stage>_stage"
#endif

#ifdef BACKWARD_STAGE /* a backward stage (09 on): its descriptor is a gdn_backward_stage */
#include "backward_stage.h"
extern const gdn_backward_stage STAGE_DESCRIPTOR;
int main(int argc, char **argv) { return gdn_backward_stage_main(argc, argv, &STAGE_DESCRIPTOR); }
#else
extern const gdn_stage STAGE_DESCRIPTOR;
int main(int argc, char **argv) { return gdn_stage_main(argc, argv, &STAGE_DESCRIPTOR); }
#endif
