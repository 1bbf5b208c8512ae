/* main.c -- every stage binary's main(). The Makefile compiles this file once per stage
 * with -DSTAGE_DESCRIPTOR=<name>_stage, the gdn_stage that the stage file defines. */
#include "stage.h"

#ifndef STAGE_DESCRIPTOR
#error "compile with -DSTAGE_DESCRIPTOR=<stage>_stage"
#endif

extern const gdn_stage STAGE_DESCRIPTOR;

int main(int argc, char **argv) { return gdn_stage_main(argc, argv, &STAGE_DESCRIPTOR); }
