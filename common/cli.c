/* cli.c -- the common command line (docs/contract.md section 4), strict: every value is checked,
 * and anything unexpected is a one-line error, never a silent default. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "error.h"
#include "stage.h"

enum {
    OPTION_B = 256, OPTION_T, OPTION_H, OPTION_K, OPTION_V, OPTION_SEED, OPTION_SCALE, OPTION_IN, OPTION_OUT,
    OPTION_CHECK, OPTION_REPS, OPTION_THREADS, OPTION_H0, OPTION_CHUNK, OPTION_SEGMENTS, OPTION_NO_INPUT_CHECK,
    OPTION_PRECISE, OPTION_HV, OPTION_LENGTHS, OPTION_BATCH_INVARIANT, OPTION_HELP
};

static const struct option long_options[] = {
    {"B", required_argument, NULL, OPTION_B},           {"T", required_argument, NULL, OPTION_T},
    {"H", required_argument, NULL, OPTION_H},           {"K", required_argument, NULL, OPTION_K},
    {"V", required_argument, NULL, OPTION_V},           {"seed", required_argument, NULL, OPTION_SEED},
    {"scale", required_argument, NULL, OPTION_SCALE},   {"in", required_argument, NULL, OPTION_IN},
    {"out", required_argument, NULL, OPTION_OUT},       {"check-against", required_argument, NULL, OPTION_CHECK},
    {"reps", required_argument, NULL, OPTION_REPS},     {"threads", required_argument, NULL, OPTION_THREADS},
    {"h0", no_argument, NULL, OPTION_H0},               {"chunk", required_argument, NULL, OPTION_CHUNK},
    {"segments", required_argument, NULL, OPTION_SEGMENTS},   {"precise", no_argument, NULL, OPTION_PRECISE},
    {"no-input-check", no_argument, NULL, OPTION_NO_INPUT_CHECK},  {"HV", required_argument, NULL, OPTION_HV},
    {"lengths", required_argument, NULL, OPTION_LENGTHS}, {"help", no_argument, NULL, OPTION_HELP},
    {"batch-invariant", no_argument, NULL, OPTION_BATCH_INVARIANT},
    {NULL, 0, NULL, 0}};

_Static_assert(sizeof long_options / sizeof long_options[0] <= 8 * sizeof(unsigned long), "a bit an option in `given`");

static void print_help(const gdn_stage *stage)
{
    const int distributed = (stage->options & GDN_OPTION_DISTRIBUTED) != 0;
    printf("%s: %s\n\n", stage->name, stage->idea);
    if (distributed)
        printf("usage: mpirun -np N bin/%s [options]\n"
               "       (N above this machine's cores: mpirun --oversubscribe -np N ...; as root, set\n"
               "       OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)\n",
               stage->name);
    else
        printf("usage: bin/%s [options]\n", stage->name);
    printf("  --B N --T N --H N --K N --V N  problem sizes (default B=1 T=1024 H=4 K=64 V=64)\n"
           "  --seed N             generator seed (default 1); same seed, same inputs everywhere\n"
           "  --h0                 draw a random initial state h0 (default: zero state)\n"
           "  --scale X            output scale (default 1/sqrt(K))\n"
           "  --in DIR             read q k v g beta [h0] [cu_seqlens] .npy from DIR instead of generating; every\n"
           "                       value is checked first (finite, g <= 0, 0 <= beta <= 1)\n"
           "  --no-input-check     with --in: skip that check (one pass over the inputs)\n"
           "  --out DIR            write o.npy and ht.npy to DIR (not written when a value is NaN or Inf:\n"
           "                       that is an error naming the first such value)\n");
    if (stage->options & GDN_OPTION_VALUE_HEADS)
        printf("  --HV N               value heads, a multiple of H (default H): v, g, beta, o and the states\n"
               "                       have HV heads, and value head h reads key head h / (HV / H)\n");
    if (stage->options & GDN_OPTION_PACKED)
        printf("  --lengths L1,L2,...  a packed batch: sequences of these lengths in one row (B = 1, T their\n"
               "                       sum), each with its own state; with --in, cu_seqlens.npy says the same\n");
    if (stage->options & GDN_OPTION_BACKWARD) {
        printf("  --in DIR / --B ...   a backward stage reads do.npy and dht.npy too, the loss's gradients\n"
               "                       with respect to o and ht (both from DIR with --in, else drawn from\n"
               "                       --seed, N(0, 1)); --out writes dq dk dv dg dbeta [dh0] .npy beside\n"
               "                       o and ht; --check-against compares all of them (oracle: the fp64\n"
               "                       backward loop) and names the worst\n");
    }
    if (distributed)
        printf("  --check-against DIR  compare with DIR/o.npy and DIR/ht.npy, e.g. what stage 05 wrote with\n"
               "                       --out on the same problem (the fp64 oracle would need the whole\n"
               "                       problem in one process: use a folder); a failed check exits 1\n");
    else
        printf("  --check-against REF  compare with REF: 'oracle' (fp64 loop) or a DIR holding o.npy ht.npy;\n"
               "                       may be given twice (once each); a failed check exits 1\n");
    printf("  --reps N             timed runs after one warm-up; the median is reported (default 5)\n"
           "  --threads N          OpenMP threads (default: OMP_NUM_THREADS or all cores)\n");
    if (stage->options & GDN_OPTION_CHUNK)
        printf("  --chunk C            tokens per chunk, 1 to 128 (default 64)\n");
    if (stage->options & GDN_OPTION_SEGMENTS)
        printf("  --segments P         segments per sequence (default: the stage's choice from the sizes and\n"
               "                       the machine, e.g. the thread count on a CPU; clamped to what T allows)\n");
    if (stage->options & GDN_OPTION_PRECISE)
        printf("  --precise            computed operands (W, the state, Vnew, P) enter bf16 products as\n"
               "                       two bf16 terms each: closer to fp32, about 1.5x the time\n");
    if (stage->options & GDN_OPTION_BATCH_INVARIANT)
        printf("  --batch-invariant    a sequence's o and ht the same to the bit whatever the batch and the\n"
               "                       heads around it: kernel paths chosen from one head's sizes alone\n");
    printf("  --help               this text\n\n");
    if (distributed)
        printf("rank 0 prints one line: result stage=... ranks=... median_ms=... phase1_ms=... [err_ref=...]\n");
    else
        printf("prints one line: result stage=... median_ms=... gflops=... [err_oracle=... err_ref=...]\n");
}

/* A positive integer no larger than limit, digits only: "-5", "1e3", "", "12x" are refused. */
static int parse_count(const char *option, const char *text, size_t limit, size_t *value)
{
    const char *c = text;
    if (*c == '\0')
        return gdn_set_error("--%s needs a positive integer, got an empty value", option);
    for (; *c; c++)
        if (*c < '0' || *c > '9')
            return gdn_set_error("--%s needs a positive integer, got '%s'", option, text);
    errno = 0;
    unsigned long long parsed = strtoull(text, NULL, 10);
    if (errno == ERANGE || parsed > limit)
        return gdn_set_error("--%s: %s is too large (at most %zu)", option, text, limit);
    if (parsed == 0)
        return gdn_set_error("--%s must be positive, got 0", option);
    *value = (size_t)parsed;
    return 0;
}

static int parse_int(const char *option, const char *text, int limit, int *value)
{
    size_t parsed;
    if (parse_count(option, text, (size_t)limit, &parsed))
        return -1;
    *value = (int)parsed;
    return 0;
}

/* OpenMP threads at most: more is refused in one line (libgomp itself fails, or crashes, when
   it cannot create them), from --threads or from OMP_NUM_THREADS */
enum { GDN_MAX_THREADS = 4096 };

static int threads_within_bound(int threads)
{
    if (threads > GDN_MAX_THREADS)
        return gdn_set_error("%d OpenMP threads (OMP_NUM_THREADS) is more than %d; set fewer or give --threads",
                             threads, GDN_MAX_THREADS);
    return 0;
}

void gdn_tool_options(int argc, char **argv, const char *tool, const char *const *names, size_t *values,
                      size_t limit)
{
    unsigned long given = 0; /* the options seen, a bit each (by their place in names) */
    if (threads_within_bound(omp_get_max_threads())) {
        fprintf(stderr, "%s: error: %s\n", tool, gdn_last_error());
        exit(1);
    }
    for (int i = 1; i < argc; i += 2) {
        int found = -1;
        for (int n = 0; names[n] && found < 0; n++)
            if (strncmp(argv[i], "--", 2) == 0 && strcmp(argv[i] + 2, names[n]) == 0)
                found = n;
        if (found < 0) {
            fprintf(stderr, "%s: error: unknown option '%s'\n", tool, argv[i]);
            exit(1);
        }
        if (given & (1ul << found)) {
            fprintf(stderr, "%s: error: %s given twice\n", tool, argv[i]);
            exit(1);
        }
        given |= 1ul << found;
        if (i + 1 >= argc || parse_count(names[found], argv[i + 1], limit, &values[found])) {
            fprintf(stderr, "%s: error: %s\n", tool, i + 1 >= argc ? "the last option needs a value" : gdn_last_error());
            exit(1);
        }
    }
}

int gdn_parse_lengths(const char *text, size_t *lengths, size_t capacity, size_t *count, size_t *sum)
{
    *count = 0, *sum = 0;
    for (const char *at = text;;) {
        char item[32];
        size_t width = strcspn(at, ","), value = 0;
        if (width >= sizeof item)
            return gdn_set_error("--lengths: '%.*s' is not a length", (int)(width < 40 ? width : 40), at);
        memcpy(item, at, width);
        item[width] = '\0';
        if (parse_count("lengths", item, (size_t)1 << 40, &value))
            return -1;
        if (lengths && *count < capacity)
            lengths[*count] = value;
        *count += 1, *sum += value;
        if (at[width] == '\0')
            return 0;
        at += width + 1;
    }
}

int gdn_parse_command_line(int argc, char **argv, const gdn_stage *stage, gdn_settings *s)
{
    *s = (gdn_settings){.B = 1, .T = 1024, .H = 4, .K = 64, .V = 64, .seed = 1, .reps = 5,
                        .threads = omp_get_max_threads(), .check_inputs = 1};
    const size_t size_limit = (size_t)1 << 40; /* larger is refused by the memory check anyway */
    int sizes_given = 0, seed_given = 0, rows_given = 0;
    unsigned long given = 0; /* the options seen, a bit each (by their place in long_options) */
    size_t value;
    opterr = 0; /* we print our own one-line errors */
    optind = 0; /* 0, not 1: glibc then resets all of getopt's state, so parsing twice works */
    for (;;) {
        int previous = optind ? optind : 1, index = -1; /* optind is 0 before the first call */
        int option = getopt_long(argc, argv, "+:", long_options, &index);
        if (option == -1)
            break;
        const char *name = index >= 0 ? long_options[index].name : "";
        if (index >= 0) {
            /* getopt_long also takes an unambiguous prefix (--chu for --chunk), which the next
             * option added could make ambiguous: options are spelled out in full */
            const char *typed = argv[previous] + 2;
            const size_t typed_length = strcspn(typed, "=");
            if (typed_length != strlen(name) || strncmp(typed, name, typed_length) != 0)
                return gdn_set_error("unknown option '%.*s' (did you mean --%s? options are spelled out in full)",
                                     (int)(typed_length + 2), argv[previous], name);
            /* a repeat would silently override; --check-against takes one folder and 'oracle' */
            if ((given >> index & 1) && option != OPTION_CHECK)
                return gdn_set_error("--%s given twice", name);
            given |= 1ul << index;
        }
        switch (option) {
        case OPTION_B: case OPTION_T: case OPTION_H: case OPTION_K: case OPTION_V: {
            if (parse_count(name, optarg, size_limit, &value))
                return -1;
            size_t *size[] = {&s->B, &s->T, &s->H, &s->K, &s->V};
            *size[option - OPTION_B] = value;
            sizes_given = 1;
            rows_given |= option == OPTION_B || option == OPTION_T;
            break;
        }
        case OPTION_SEED: {
            const char *c = optarg;
            for (; *c >= '0' && *c <= '9'; c++)
                ;
            errno = 0;
            unsigned long long seed = strtoull(optarg, NULL, 10);
            if (*optarg == '\0' || *c != '\0' || errno == ERANGE)
                return gdn_set_error("--seed needs a non-negative integer below 2^64, got '%s'", optarg);
            s->seed = seed;
            seed_given = 1;
            break;
        }
        case OPTION_SCALE: {
            char *end;
            errno = 0;
            s->scale = strtod(optarg, &end);
            if (*optarg == '\0' || isspace((unsigned char)*optarg) || *end != '\0' || errno == ERANGE || !isfinite(s->scale) || s->scale <= 0.0)
                return gdn_set_error("--scale needs a positive finite number, got '%s'", optarg);
            /* the stages multiply in real_t: a scale that is 0 or subnormal there would silently
               zero o or lose its bits */
            if (fpclassify((real_t)s->scale) != FP_NORMAL)
                return gdn_set_error("--scale %s is %s in this build's %s; give a normal number", optarg,
                                     (real_t)s->scale == 0 ? "0" : "subnormal", REAL_NAME);
            break;
        }
        case OPTION_IN: s->in_dir = optarg; break;
        case OPTION_OUT: s->out_dir = optarg; break;
        case OPTION_CHECK:
            if (strcmp(optarg, "oracle") == 0) {
                if (stage->options & GDN_OPTION_DISTRIBUTED)
                    return gdn_set_error("--check-against oracle is not offered under MPI (the oracle needs the "
                                         "whole problem in one process); compare with a folder another stage "
                                         "wrote with --out");
                if (s->check_oracle)
                    return gdn_set_error("--check-against oracle given twice");
                s->check_oracle = 1;
            } else {
                if (s->check_dir)
                    return gdn_set_error("--check-against DIR given twice (at most one folder and 'oracle')");
                s->check_dir = optarg;
            }
            break;
        case OPTION_REPS:
            if (parse_int(name, optarg, 1000000, &s->reps))
                return -1;
            break;
        case OPTION_THREADS:
            if (parse_int(name, optarg, GDN_MAX_THREADS, &s->threads))
                return -1;
            break;
        case OPTION_H0: s->with_h0 = 1; break;
        case OPTION_CHUNK: case OPTION_SEGMENTS: {
            unsigned needed = option == OPTION_CHUNK ? GDN_OPTION_CHUNK : GDN_OPTION_SEGMENTS;
            if (!(stage->options & needed))
                return gdn_set_error("--%s is not an option of %s (see --help)", name, stage->name);
            if (parse_count(name, optarg, size_limit, &value))
                return -1;
            if (option == OPTION_CHUNK && value > 128)
                return gdn_set_error("--chunk must be between 1 and 128, got %zu", value);
            *(option == OPTION_CHUNK ? &s->chunk : &s->segments) = value;
            break;
        }
        case OPTION_NO_INPUT_CHECK: s->check_inputs = 0; break;
        case OPTION_PRECISE:
            if (!(stage->options & GDN_OPTION_PRECISE))
                return gdn_set_error("--precise is not an option of %s (see --help)", stage->name);
            s->precise = 1;
            break;
        case OPTION_BATCH_INVARIANT:
            if (!(stage->options & GDN_OPTION_BATCH_INVARIANT))
                return gdn_set_error("--batch-invariant is not an option of %s (see --help)", stage->name);
            s->batch_invariant = 1;
            break;
        case OPTION_HV:
            if (!(stage->options & GDN_OPTION_VALUE_HEADS))
                return gdn_set_error("--HV is not an option of %s: it runs HV = H only (see --help)", stage->name);
            if (parse_count(name, optarg, size_limit, &s->HV))
                return -1;
            sizes_given = 1;
            break;
        case OPTION_LENGTHS: {
            size_t count;
            if (!(stage->options & GDN_OPTION_PACKED))
                return gdn_set_error("--lengths is not an option of %s: it runs B sequences of T tokens only "
                                     "(see --help)", stage->name);
            if (gdn_parse_lengths(optarg, NULL, 0, &count, &value))
                return -1;
            s->lengths = optarg;
            sizes_given = 1;
            break;
        }
        case OPTION_HELP: print_help(stage); return 1;
        case ':': return gdn_set_error("%s needs a value", argv[optind - 1]);
        default: return gdn_set_error("unknown option '%s' (see --help)", argv[previous]);
        }
    }
    if (optind < argc)
        return gdn_set_error("unexpected argument '%s' (options start with --; see --help)", argv[optind]);
    if (threads_within_bound(s->threads)) /* the default, from OMP_NUM_THREADS, meets --threads' bound too */
        return -1;
    if (!s->check_inputs && !s->in_dir)
        return gdn_set_error("--no-input-check applies to --in only (generated inputs are valid by construction)");
    if (s->in_dir && (sizes_given || seed_given || s->with_h0))
        return gdn_set_error("--in takes sizes, seed and h0 from the folder's files; drop "
                             "--B/--T/--H/--HV/--K/--V/--lengths/--seed/--h0");
    if (s->lengths && rows_given)
        return gdn_set_error("--lengths sets B = 1 and T to their sum; drop --B and --T");
    if (s->HV && s->HV % s->H != 0)
        return gdn_set_error("--HV %zu is not a multiple of --H %zu", s->HV, s->H);
    return 0;
}
