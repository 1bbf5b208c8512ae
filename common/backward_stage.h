/* backward_stage.h -- what every backward stage binary shares (stage 09 on).
 *
 * A backward stage file (steps/NN_backward_name/backward_name.c) implements one backward pass
 * and describes itself with a gdn_backward_stage; common/main.c, compiled with
 * -DBACKWARD_STAGE, turns it into a binary with the forward stages' command line
 * (docs/contract.md sections 4 and 5). The driver (backward_driver.c) reads or draws the
 * cotangents do and dht besides the problem, times the runs, checks o, ht and the six gradients
 * against the fp64 backward oracle or a folder, and writes them.
 */
#ifndef GDN_BACKWARD_STAGE_H
#define GDN_BACKWARD_STAGE_H

#include "gradients.h"
#include "stage.h"

#ifdef __cplusplus /* the GPU backward stages (.cu, compiled as C++) include this header too */
extern "C" {
#endif

struct gdn_device_problem; /* device.h: the problem, the cotangents and the gradients on the GPU */
struct gdn_device_cotangents;
struct gdn_device_result;
struct gdn_device_gradients;
typedef struct gdn_backward_runner gdn_backward_runner;

typedef struct gdn_backward_stage {
    const char *name;  /* "09_backward_loop": folder and binary name */
    const char *idea;  /* one line for --help */
    unsigned options;  /* GDN_OPTION_* flags it accepts (--chunk) */
    /* o and ht, and the gradients g of the loss whose gradients with respect to o and ht are
     * c's. Returns 0, or -1 after gdn_set_error. */
    int (*backward)(const gdn_problem *p, const gdn_cotangents *c, const gdn_settings *s, gdn_result *r,
                    gdn_gradients *g);
    /* Floating-point operations one backward pass performs, counted from its loops. */
    double (*counted_flops)(const gdn_problem *p, const gdn_settings *s);
    /* Optional: defaults of its own options once the sizes are known (gdn_stage's). */
    void (*resolve_options)(const gdn_problem *p, gdn_settings *s);
    /* GPU stages fill in the three below instead of backward, as gdn_stage's device_forward:
     * the pass on inputs and cotangents already on the GPU, launched on the default stream,
     * in the workspace device_workspace_bytes asked for (may be NULL: none). */
    int (*device_backward)(const struct gdn_device_problem *p, const struct gdn_device_cotangents *c,
                           const gdn_settings *s, struct gdn_device_result *r, struct gdn_device_gradients *g);
    int (*device_workspace_bytes)(const gdn_problem *p, const gdn_settings *s, size_t *bytes);
    const gdn_backward_runner *runner; /* NULL: the host runner; GPU stages: &gdn_cuda_backward_runner */
    /* 1: the stage reads q, k and v in bf16 (gdn_stage's bf16_inputs): the driver rounds them to
     * bf16 values before anything runs, the CUDA runner keeps bf16 copies on the GPU, and each
     * tensor is judged by its own bound (gdn_backward_tolerance). */
    int bf16_inputs;
} gdn_backward_stage;

/* The bound a backward stage's tensor (o, ht, dq, dk, dv, dg, dbeta, dh0: the names of
 * gdn_gradient_shape) is held to, against the fp64 oracle (against_stage 0) or another stage's
 * result (1): common/tolerances.h's float or double bounds, the same for every tensor; for a
 * stage on bf16 inputs, the bound FLA's tests give that tensor, against either. */
double gdn_backward_tolerance(const gdn_backward_stage *stage, const char *tensor, int against_stage);

/* How the driver runs and times a backward pass (gdn_runner's, with the cotangents and the
 * gradients): the host runner in backward_driver.c, the CUDA one in cuda_backward_runner.cu. */
struct gdn_backward_runner {
    int (*open)(const gdn_backward_stage *stage, const gdn_problem *p, const gdn_cotangents *c, const gdn_settings *s,
                void **context);
    /* One pass; *seconds its time. poisoned: the outputs are NaN first and come back in r, g. */
    int (*run)(void *context, int poisoned, gdn_result *r, gdn_gradients *g, double *seconds);
    void (*close)(void *context);
};

/* One run of a backward stage with its outputs poisoned (NaN) first; r and g are allocated
 * here. For the tests. Returns the stage's status. */
int gdn_backward_run_once(const gdn_backward_stage *stage, const gdn_problem *p, const gdn_cotangents *c,
                          const gdn_settings *s, gdn_result *r, gdn_gradients *g);

/* The whole binary: returns the process exit status. */
int gdn_backward_stage_main(int argc, char **argv, const gdn_backward_stage *stage);

#ifdef __cplusplus
}
#endif

#endif
