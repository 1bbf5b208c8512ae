/* arguments.h -- a command line from bytes, as the CLI fuzz target and its corpus replay read
 * them: the text is split at NUL bytes into at most `most` arguments after argv[0]. text must
 * hold size bytes plus a terminating NUL; argv must have room for most + 2 pointers. */
#ifndef GDN_FUZZ_ARGUMENTS_H
#define GDN_FUZZ_ARGUMENTS_H

#include <string.h>

static inline int split_arguments(char *text, size_t size, char **argv, int most)
{
    int argc = 1;
    for (size_t at = 0; at <= size && argc <= most; at += strlen(text + at) + 1)
        argv[argc++] = text + at;
    argv[argc] = NULL;
    return argc;
}

#endif
