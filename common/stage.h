/* stage.h -- what every stage binary shares: its settings, its descriptor, its driver.
 *
 * A stage file (steps/NN_name/name.c) implements one forward pass and describes itself
 * with a gdn_stage; common/main.c turns that into a binary with the common command
 * line of docs/contract.md section 4. The driver does everything that is not the lesson:
 * parse options, build or load the problem, warm up, time --reps runs and take the
 * median, check against the oracle or a folder, write o.npy and ht.npy, and print the
 * one machine-readable result line.
 */
#ifndef GDN_STAGE_H
#define GDN_STAGE_H

#include <stdint.h>

#include "problem.h"

#ifdef __cplusplus /* GPU stages (.cu files, compiled as C++) include this header too */
extern "C" {
#endif

/* Stage-specific options a stage may accept (gdn_stage.options). */
enum {
    GDN_OPTION_CHUNK = 1u << 0,    /* --chunk C: tokens per chunk (stage 05 on) */
    GDN_OPTION_SEGMENTS = 1u << 1, /* --segments P: segments per sequence (stage 04) */
    GDN_OPTION_PRECISE = 1u << 2,  /* --precise: computed operands enter bf16 products as two bf16 terms (stage 06) */
    /* Runs under mpirun, each process holding a slice of the sequence (stage 08; its driver sets
     * it): --help says so, and --check-against takes a folder only, since the oracle would need
     * the whole problem in one process. */
    GDN_OPTION_DISTRIBUTED = 1u << 3,
    /* A backward stage (backward_stage.h, stage 09 on; its driver sets it): --help says that it
     * reads do.npy and dht.npy too and writes the gradients. */
    GDN_OPTION_BACKWARD = 1u << 4,
    /* The layouts of docs/contract.md section 1 beyond HV = H and B equal sequences: */
    GDN_OPTION_VALUE_HEADS = 1u << 5, /* --HV: grouped value heads (HV a multiple of H) */
    GDN_OPTION_PACKED = 1u << 6,      /* --lengths or cu_seqlens.npy: sequences of different lengths in one row */
    /* --batch-invariant: a sequence's o and ht, to the bit, whatever the batch and the heads
     * around it: the kernel paths are chosen from the sizes of one head's sequence alone
     * (stages 06 and 07) */
    GDN_OPTION_BATCH_INVARIANT = 1u << 7,
};

typedef struct {
    size_t B, T, H, K, V;          /* problem sizes when generated */
    size_t HV;                     /* --HV, 0 when not given (HV = H) */
    const char *lengths;           /* --lengths L1,L2,...: a packed batch (B = 1, T their sum); NULL when not given */
    uint64_t seed;
    double scale;                  /* 0: the default 1/sqrt(K) */
    int with_h0;                   /* draw a random initial state */
    const char *in_dir, *out_dir;  /* NULL when not given */
    int check_inputs;              /* 1 unless --no-input-check: validate --in's values */
    int check_oracle;              /* --check-against oracle */
    const char *check_dir;         /* --check-against DIR (o.npy, ht.npy) */
    int reps;                      /* timed runs after one warm-up */
    int threads;                   /* OpenMP threads */
    size_t chunk;                  /* --chunk, 0 when not given */
    size_t segments;               /* --segments, 0 when not given */
    int precise;                   /* --precise */
    int batch_invariant;           /* --batch-invariant */
} gdn_settings;

struct gdn_device_problem; /* common/device.h: the inputs on the GPU */
struct gdn_device_result;
typedef struct gdn_runner gdn_runner;

typedef struct gdn_stage {
    const char *name;              /* "01_naive_loop": folder and binary name */
    const char *idea;              /* one line for --help */
    unsigned options;              /* GDN_OPTION_* flags it accepts */
    /* Compute r->o and r->ht. Returns 0, or -1 after gdn_set_error (e.g. out of memory). */
    int (*forward)(const gdn_problem *p, const gdn_settings *s, gdn_result *r);
    /* Floating-point operations one forward pass performs, counted from its loops. */
    double (*counted_flops)(const gdn_problem *p, const gdn_settings *s);
    /* Optional: fill in defaults of the stage's own options (--chunk, --segments) once the
     * problem's sizes are known, and clamp them (saying so on stderr). */
    void (*resolve_options)(const gdn_problem *p, gdn_settings *s);
    /* GPU stages fill in the three below instead of forward. device_forward launches the pass
     * on inputs already on the GPU (common/device.h); the runner uploads them once, times
     * each pass with CUDA events and copies the results back. device_workspace_bytes (may be
     * NULL: none) says how much scratch memory the pass needs, allocated once up front. */
    int (*device_forward)(const struct gdn_device_problem *p, const gdn_settings *s, struct gdn_device_result *r);
    int (*device_workspace_bytes)(const gdn_problem *p, const gdn_settings *s, size_t *bytes);
    const gdn_runner *runner;      /* NULL: the host runner (CPU stages); GPU stages: &gdn_cuda_runner */
    /* 1: the stage reads q, k and v in bf16. The driver rounds them to bf16 values before
     * anything runs, so the oracle and --check-against see the inputs the stage sees, and
     * checks against GDN_TOLERANCE_BF16; the CUDA runner also keeps bf16 copies on the GPU. */
    int bf16_inputs;
} gdn_stage;

/* How the driver runs a stage's forward pass and times it. The host runner (stage.c) calls
 * forward and reads the clock; the CUDA runner (common/cuda_runner.cu) keeps device copies. */
struct gdn_runner {
    /* Prepare runs of stage on p (device buffers, uploads); *context is passed to run and close. */
    int (*open)(const gdn_stage *stage, const gdn_problem *p, const gdn_settings *s, void **context);
    /* One forward pass; *seconds is its time. With poisoned set, the outputs are set to NaN
     * before the pass and the results are left in r after it (the warm-up and checked runs);
     * without, the pass is a timed repetition and r is not touched. */
    int (*run)(void *context, int poisoned, gdn_result *r, double *seconds);
    void (*close)(void *context);
};

/* One poisoned run of a stage through its runner, results in r (allocated). For the tests. */
int gdn_stage_run_once(const gdn_stage *stage, const gdn_problem *p, const gdn_settings *s, gdn_result *r);

/* Parse argv into settings. Returns 0 to run, 1 when --help was printed, -1 on a bad
 * option (after gdn_set_error with a one-line reason). */
int gdn_parse_command_line(int argc, char **argv, const gdn_stage *stage, gdn_settings *s);

/* --lengths' text, "28672,4096": positive counts separated by commas. Stores up to capacity of
 * them in lengths (may be NULL to count only), their number in *count and their sum in *sum;
 * -1 and a one-line error on anything else. */
int gdn_parse_lengths(const char *text, size_t *lengths, size_t capacity, size_t *count, size_t *sum);

/* 0 when the stage takes p's layout; else -1 and one line naming what it does not take
 * (grouped value heads without GDN_OPTION_VALUE_HEADS, a packed batch without GDN_OPTION_PACKED). */
int gdn_check_layout(const gdn_stage *stage, const gdn_problem *p);
/* The result line's layout fields, " HV=.. sequences=..", each only where the layout has it
 * (empty for B rows of T tokens with HV = H); into text, returned. */
const char *gdn_layout_text(const gdn_problem *p, char *text, size_t size);

/* Options of the small tools under plots/ (not the stages' options): argv holds pairs
 * `--name value`, each name one of names[] (NULL-terminated), each value a positive integer
 * up to limit, stored in values[i] for names[i] (left as is when absent). Anything else is a
 * one-line error on stderr and exit status 1. */
void gdn_tool_options(int argc, char **argv, const char *tool, const char *const *names, size_t *values,
                      size_t limit);

/* What every binary does before its runs: parse argv into s, then read (--in) or draw the
 * problem into p, with --scale, the bf16 rounding (stage->bf16_inputs) and the stage's
 * resolve_options applied. Returns 0 to run, 1 when --help was printed, -1 on an error (said
 * on stderr, one line; p is then empty). */
int gdn_stage_setup(int argc, char **argv, const gdn_stage *stage, gdn_settings *s, gdn_problem *p);

/* The whole binary: returns the process exit status. */
int gdn_stage_main(int argc, char **argv, const gdn_stage *stage);

#ifdef __cplusplus
}
#endif

#endif
