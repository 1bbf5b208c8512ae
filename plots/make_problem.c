/* make_problem.c -- write a generated problem as .npy files, for peers that read NumPy (FLA).
 *
 *     bin/make_problem --B 1 --T 16384 --H 8 --K 64 --V 64 --seed 1 --h0 DIR
 *
 * The inputs are exactly those every stage binary draws for the same sizes and seed
 * (gdn_problem_generate; gdn_cotangents_generate for the backward stages' do and dht), so a
 * peer timed on DIR runs on our stages' inputs, and its
 * outputs can be compared with a stage's --out. --h0 is a flag, as a stage's --h0 is: it adds
 * a random initial state; without it the state starts at zero.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/error.h"
#include "../common/gradients.h"
#include "../common/problem.h"
#include "../common/stage.h"

static const char usage[] =
    "make_problem: write the problem a stage generates (q k v g beta [h0] .npy) into DIR\n"
    "\n"
    "usage: bin/make_problem [options] DIR\n"
    "  --B N --T N --H N --K N --V N  problem sizes (default B=1 T=1024 H=4 K=64 V=64)\n"
    "  --HV N               value heads, a multiple of H (default H): grouped value heads\n"
    "  --lengths L1,L2,...  a packed batch (B = 1, T their sum): writes cu_seqlens.npy too\n"
    "  --seed N             generator seed (default 1); the same seed draws a stage's inputs\n"
    "  --h0                 draw a random initial state h0 as well (default: zero state)\n"
    "  --help               this text\n"
    "\n"
    "DIR is created if missing; it then holds q.npy k.npy v.npy g.npy beta.npy [h0.npy]\n"
    "[cu_seqlens.npy], and the cotangents the backward stages draw, do.npy and dht.npy.\n";

int main(int argc, char **argv)
{
    static const char *const names[] = {"B", "T", "H", "K", "V", "HV", NULL};
    size_t values[6] = {1, 1024, 4, 64, 64, 0};
    unsigned long long seed = 1; /* any seed a stage takes: 0 to 2^64 - 1 */
    /* --help, the flag --h0, --lengths and --seed are taken here; the sizes go on to gdn_tool_options */
    char *valued[64] = {argv[0]};
    int valued_count = 1, with_h0 = 0, seed_given = 0;
    const char *dir = NULL, *lengths_text = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if ((strcmp(argv[i], "--h0") == 0 && with_h0) || (strcmp(argv[i], "--lengths") == 0 && lengths_text) ||
            (strcmp(argv[i], "--seed") == 0 && seed_given)) {
            fprintf(stderr, "make_problem: error: %s given twice\n", argv[i]);
            return 1;
        }
        if (strcmp(argv[i], "--h0") == 0) {
            with_h0 = 1;
        } else if (strcmp(argv[i], "--lengths") == 0 || strcmp(argv[i], "--seed") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "make_problem: error: %s needs a value\n", argv[i]);
                return 1;
            }
            const char *text = argv[++i], *c = text;
            if (argv[i - 1][2] == 'l') {
                lengths_text = text;
                continue;
            }
            seed_given = 1;
            for (; *c >= '0' && *c <= '9'; c++)
                ;
            errno = 0;
            seed = strtoull(text, NULL, 10);
            if (*text == '\0' || *c != '\0' || errno == ERANGE) {
                fprintf(stderr, "make_problem: error: --seed needs a non-negative integer below 2^64, got '%s'\n", text);
                return 1;
            }
        } else if (strncmp(argv[i], "--", 2) == 0) {
            if (valued_count + 2 > (int)(sizeof valued / sizeof valued[0])) {
                fprintf(stderr, "make_problem: error: too many options\n");
                return 1;
            }
            valued[valued_count++] = argv[i];
            if (i + 1 < argc) /* its value; a missing one is gdn_tool_options' error */
                valued[valued_count++] = argv[++i];
        } else if (!dir) {
            dir = argv[i];
        } else {
            fprintf(stderr, "make_problem: error: two DIRs given, '%s' and '%s' (--h0 takes no value; see --help)\n",
                    dir, argv[i]);
            return 1;
        }
    }
    gdn_tool_options(valued_count, valued, "make_problem", names, values, (size_t)1 << 40); /* its faults first */
    if (!dir) {
        fprintf(stderr, "make_problem: error: no DIR given (see --help)\n");
        return 1;
    }
    gdn_layout layout = {.B = values[0], .T = values[1], .H = values[2], .K = values[3], .V = values[4],
                         .HV = values[5], .with_h0 = with_h0};
    size_t lengths[4096], sum;
    if (lengths_text && (gdn_parse_lengths(lengths_text, lengths, 4096, &layout.sequences, &sum) ||
                         (layout.sequences > 4096 && gdn_set_error("--lengths: at most 4096 sequences here")))) {
        fprintf(stderr, "make_problem: error: %s\n", gdn_last_error());
        return 1;
    }
    for (int i = 1; lengths_text && i < valued_count; i += 2)
        if (strcmp(valued[i], "--B") == 0 || strcmp(valued[i], "--T") == 0) {
            fprintf(stderr, "make_problem: error: --lengths sets B = 1 and T to their sum; drop --B and --T\n");
            return 1;
        }
    if (lengths_text)
        layout.lengths = lengths, layout.T = sum;
    gdn_problem p;
    if (gdn_problem_alloc_layout(&p, &layout) != 0) {
        fprintf(stderr, "make_problem: error: %s\n", gdn_last_error());
        return 1;
    }
    gdn_problem_generate(&p, seed);
    gdn_cotangents c;
    if (gdn_cotangents_alloc(&c, &p) != 0) {
        fprintf(stderr, "make_problem: error: %s\n", gdn_last_error());
        return 1;
    }
    gdn_cotangents_generate(&c, &p, seed);
    if (gdn_problem_save(&p, dir) != 0 || gdn_cotangents_save(&c, &p, dir) != 0) {
        /* no part of a problem left to pass for a whole one (a full disk, say) */
        static const char *const written[] = {"q", "k", "v", "g", "beta", "h0", "cu_seqlens", "do", "dht", NULL};
        gdn_remove_outputs(dir, written);
        fprintf(stderr, "make_problem: error: %s\n", gdn_last_error());
        return 1;
    }
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
    return 0;
}
