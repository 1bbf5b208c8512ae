/* fuzz_cli.c -- libFuzzer target: any bytes as a command line (make fuzz).
 *
 * The input is split at NUL bytes into at most 32 arguments after the program name and
 * parsed as a stage's command line (one that takes --chunk and --segments too). The parser
 * must return 0, 1 (--help) or -1 with a one-line reason, and never crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/error.h"
#include "../../common/stage.h"
#include "arguments.h"

static const gdn_stage fuzz_stage = {
    .name = "fuzz", .idea = "command-line fuzzing",
    .options = GDN_OPTION_CHUNK | GDN_OPTION_SEGMENTS | GDN_OPTION_VALUE_HEADS | GDN_OPTION_PACKED};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *argv[34] = {"fuzz"};
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    int argc = split_arguments(text, size, argv, 32);
    gdn_settings settings;
    gdn_set_error("%s", "");
    int parsed = gdn_parse_command_line(argc, argv, &fuzz_stage, &settings);
    if (parsed < 0 && (gdn_last_error()[0] == '\0' || strchr(gdn_last_error(), '\n')))
        abort(); /* a refusal must be one line that says why */
    if (parsed == 0 && (settings.B == 0 || settings.T == 0 || settings.reps <= 0 || settings.threads <= 0))
        abort(); /* an accepted line must hold usable settings */
    free(text);
    return 0;
}
