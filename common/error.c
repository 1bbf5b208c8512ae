#include "error.h"

#include <stdarg.h>
#include <stdio.h>

static char last_error[512] = "no error";

int gdn_set_error(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(last_error, sizeof last_error, format, args);
    va_end(args);
    return -1;
}

const char *gdn_last_error(void) { return last_error; }
