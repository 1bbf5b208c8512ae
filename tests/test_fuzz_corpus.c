/* test_fuzz_corpus.c -- the fuzz targets' seed corpus and every crash the fuzzer found
 * (tests/fuzz/corpus/), replayed in `make test` without clang: each .npy is read or refused
 * with one line, each command line is parsed or refused with one line. A file named crash_*
 * is a fuzzer find kept as a regression test (see its note in docs/README.md). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/npy.h"
#include "fuzz/arguments.h"
#include "test_support.h"

static const gdn_stage corpus_stage = {
    .name = "corpus", .idea = "command-line corpus",
    .options = GDN_OPTION_CHUNK | GDN_OPTION_SEGMENTS | GDN_OPTION_VALUE_HEADS | GDN_OPTION_PACKED};

/* The names in a corpus folder, sorted; returns how many (at least one is asserted). */
static int corpus_files(const char *dir, char names[][256], int most)
{
    DIR *folder = opendir(dir);
    ck_assert_msg(folder != NULL, "%s: cannot open", dir);
    int count = 0;
    for (struct dirent *entry; (entry = readdir(folder)) != NULL && count < most;)
        if (entry->d_name[0] != '.')
            snprintf(names[count++], 256, "%.255s", entry->d_name);
    closedir(folder);
    qsort(names, (size_t)count, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    ck_assert_int_gt(count, 0);
    return count;
}

static void assert_one_line_reason(const char *file)
{
    const char *reason = gdn_last_error();
    ck_assert_msg(reason[0] != '\0' && strchr(reason, '\n') == NULL, "%s: refused without a one-line reason: '%s'",
                  file, reason);
}

START_TEST(npy_corpus_is_read_or_refused)
{
    char names[64][256], path[512];
    int count = corpus_files("tests/fuzz/corpus/npy", names, 64), valid = 0;
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "tests/fuzz/corpus/npy/%.255s", names[i]);
        npy_array array;
        if (npy_read(path, &array) == 0) {
            ck_assert_msg(strncmp(names[i], "valid", 5) == 0, "%s: accepted", names[i]);
            for (size_t n = 0; n < array.count; n++)
                ck_assert(array.data[n] == (double)(n + 1)); /* the corpus's valid files hold 1, 2, ... */
            npy_free(&array);
            valid++;
        } else {
            ck_assert_msg(strncmp(names[i], "valid", 5) != 0, "%s: refused: %s", names[i], gdn_last_error());
            assert_one_line_reason(names[i]);
        }
    }
    ck_assert_int_ge(valid, 5);
}
END_TEST

START_TEST(cli_corpus_is_parsed_or_refused)
{
    char names[64][256], path[512];
    int count = corpus_files("tests/fuzz/corpus/cli", names, 64);
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "tests/fuzz/corpus/cli/%.255s", names[i]);
        FILE *file = fopen(path, "rb");
        ck_assert_ptr_nonnull(file);
        char text[4096] = "", *argv[34] = {"corpus"};
        size_t size = fread(text, 1, sizeof text - 1, file);
        fclose(file);
        text[size] = '\0';
        int argc = split_arguments(text, size, argv, 32);
        gdn_settings settings;
        /* stdout goes to a file while parsing: a line holding --help prints the help text,
         * which is asserted on here rather than shown in `make test` */
        FILE *printed = tmpfile();
        ck_assert_ptr_nonnull(printed);
        fflush(stdout);
        int saved = dup(STDOUT_FILENO);
        ck_assert_int_ge(saved, 0);
        ck_assert_int_ge(dup2(fileno(printed), STDOUT_FILENO), 0);
        int parsed = gdn_parse_command_line(argc, argv, &corpus_stage, &settings);
        fflush(stdout);
        ck_assert_int_ge(dup2(saved, STDOUT_FILENO), 0);
        close(saved);
        char help[4096];
        rewind(printed);
        size_t help_size = fread(help, 1, sizeof help - 1, printed);
        help[help_size] = '\0';
        fclose(printed);
        ck_assert_msg(parsed >= -1 && parsed <= 1, "%s: returned %d", names[i], parsed);
        if (parsed < 0)
            assert_one_line_reason(names[i]);
        if (parsed == 1)
            ck_assert_msg(strstr(help, "usage: bin/corpus [options]") != NULL, "%s: --help printed '%s'", names[i], help);
        else
            ck_assert_msg(help_size == 0, "%s: printed '%s' without --help", names[i], help);
    }
}
END_TEST

Suite *fuzz_corpus_suite(void)
{
    Suite *suite = suite_create("fuzz_corpus");
    TCase *replay = tcase_create("replay");
    tcase_add_test(replay, npy_corpus_is_read_or_refused);
    tcase_add_test(replay, cli_corpus_is_parsed_or_refused);
    suite_add_tcase(suite, replay);
    return suite;
}
