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
    /* One line, whatever the message quotes: a file name or an argument holding a newline or
     * another control character shows it as '?' (found by the command-line fuzzer). */
    for (char *c = last_error; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    return -1;
}

const char *gdn_last_error(void) { return last_error; }
