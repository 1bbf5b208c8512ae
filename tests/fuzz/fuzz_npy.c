/* fuzz_npy.c -- libFuzzer target: any bytes as a .npy file (make fuzz).
 *
 * The reader must either return an array whose every value can be read, or refuse with a
 * one-line reason; never crash, read out of bounds, overflow or leak (AddressSanitizer and
 * UndefinedBehaviorSanitizer are on). The bytes are read from memory through fmemopen, by
 * the same code path as a file (npy_read_stream). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../common/error.h"
#include "../../common/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) /* fmemopen refuses an empty buffer; an empty file is covered by the corpus test */
        return 0;
    FILE *file = fmemopen((void *)data, size, "rb");
    if (!file)
        return 0;
    npy_array array;
    gdn_set_error("%s", "");
    if (npy_read_stream(file, "fuzz.npy", &array) == 0) {
        double sum = 0;
        for (size_t i = 0; i < array.count; i++) /* every value it claims must be readable */
            sum += array.data[i];
        volatile double keep = sum; /* so the loop is not optimised away */
        (void)keep;
        npy_free(&array);
    } else if (gdn_last_error()[0] == '\0') {
        abort(); /* a refusal must say why */
    }
    fclose(file);
    return 0;
}
