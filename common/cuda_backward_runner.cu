/* cuda_backward_runner.cu -- how the driver runs a GPU backward stage (backward_stage.h's
 * gdn_backward_runner), as cuda_runner.cu runs a forward one.
 *
 * open:  copy the problem and the cotangents do and dht to the device once; allocate o, ht,
 *        the six gradients, the stage's workspace and a cache-flush buffer; refuse, with the
 *        byte counts, what the GPU cannot hold. For a stage on bf16 inputs, also convert q, k
 *        and v to bf16 there, untimed (cuda_runner.cu's conversion).
 * run:   a timed repetition first flushes the L2 cache, then the pass runs between two CUDA
 *        events (pass_timer.cuh). A poisoned run fills o, ht, every gradient and the workspace with
 *        all-ones bytes (a NaN) first, and copies o, ht and the gradients back after.
 * close: free it all.
 */
#include <stdlib.h>

#include "backward_stage.h"
#include "cuda_check.h"
#include "device.h"
#include "pass_timer.cuh"

static_assert(sizeof(real_t) == sizeof(float), "GPU stages are built in the float build only");

enum { INPUTS = 8, OUTPUTS = 8 }; /* q k v g beta h0 do dht; o ht dq dk dv dg dbeta dh0 */

typedef struct {
    const gdn_backward_stage *stage;
    const gdn_problem *host;
    const gdn_settings *settings;
    gdn_device_problem p;
    gdn_device_cotangents c;
    gdn_device_result r;
    gdn_device_gradients g;
    float *inputs[INPUTS], *outputs[OUTPUTS];
    unsigned short *bf16_inputs[3]; /* q k v in bf16, for stages with bf16_inputs */
    size_t output_counts[OUTPUTS];
    gdn_pass_timer timer;
} backward_context;

static int backward_open(const gdn_backward_stage *stage, const gdn_problem *host, const gdn_cotangents *cot,
                         const gdn_settings *s, void **context)
{
    if (!gdn_cuda_device_present())
        return -1;
    if (!stage->device_backward)
        return gdn_set_error("%s has no GPU backward pass", stage->name);
    backward_context *c = (backward_context *)calloc(1, sizeof *c);
    if (!c)
        return gdn_set_error("out of memory");
    *context = c;
    c->stage = stage, c->host = host, c->settings = s;
    const size_t tokens = gdn_tokens(host), states = gdn_state_count(host);
    size_t workspace = 0;
    if (stage->device_workspace_bytes && stage->device_workspace_bytes(host, s, &workspace))
        return -1;
    if (gdn_pass_timer_size(&c->timer))
        return -1;
    /* in: q k v g beta [h0] do dht; out: o ht dq dk dv dg dbeta [dh0] */
    const size_t h0_states = host->h0 ? states : 0;
    const size_t values = 2 * (tokens * (2 * host->K + 2 * host->V + 2) + h0_states + states);
    const size_t bf16_bytes = stage->bf16_inputs ? tokens * (2 * host->K + host->V) * sizeof(unsigned short) : 0;
    if (gdn_pass_timer_check_room(&c->timer, stage->name, "inputs, cotangents, outputs and gradients",
                                  sizeof(float) * values + bf16_bytes, workspace))
        return -1;
    c->p.B = host->B, c->p.T = host->T, c->p.H = host->H, c->p.K = host->K, c->p.V = host->V;
    c->r.layout.HV = host->H, c->r.layout.sequences = host->B; /* the plain layout: the GPU backward takes no other */
    c->p.scale = (float)host->scale;
    c->p.heads_per_key = 1;
    const float *sources[INPUTS] = {host->q, host->k, host->v, host->g, host->beta, host->h0, cot->d_o, cot->dht};
    const size_t counts[INPUTS] = {tokens * host->K, tokens * host->K, tokens * host->V, tokens, tokens, h0_states,
                                   tokens * host->V, states};
    for (int i = 0; i < INPUTS; i++)
        if (counts[i] && gdn_cuda_upload(&c->inputs[i], sources[i], counts[i]))
            return -1;
    c->p.q = c->inputs[0], c->p.k = c->inputs[1], c->p.v = c->inputs[2], c->p.g = c->inputs[3];
    c->p.beta = c->inputs[4], c->p.h0 = c->inputs[5], c->c.d_o = c->inputs[6], c->c.dht = c->inputs[7];
    if (stage->bf16_inputs) {
        for (int i = 0; i < 3; i++)
            if (gdn_cuda_upload_bf16(&c->bf16_inputs[i], c->inputs[i], counts[i]))
                return -1;
        CUDA_CHECK(cudaDeviceSynchronize());
        c->p.q_bf16 = c->bf16_inputs[0], c->p.k_bf16 = c->bf16_inputs[1], c->p.v_bf16 = c->bf16_inputs[2];
    }
    const size_t out_counts[OUTPUTS] = {tokens * host->V, states, tokens * host->K, tokens * host->K,
                                        tokens * host->V, tokens, tokens, h0_states};
    for (int i = 0; i < OUTPUTS; i++) {
        c->output_counts[i] = out_counts[i];
        if (out_counts[i])
            CUDA_CHECK(cudaMalloc((void **)&c->outputs[i], out_counts[i] * sizeof(float)));
    }
    c->r.o = c->outputs[0], c->r.ht = c->outputs[1];
    c->g.dq = c->outputs[2], c->g.dk = c->outputs[3], c->g.dv = c->outputs[4], c->g.dg = c->outputs[5];
    c->g.dbeta = c->outputs[6], c->g.dh0 = c->outputs[7];
    c->r.workspace_bytes = workspace;
    if (workspace)
        CUDA_CHECK(cudaMalloc(&c->r.workspace, workspace));
    return gdn_pass_timer_open(&c->timer);
}

static int backward_run(void *context, int poisoned, gdn_result *r, gdn_gradients *g, double *seconds)
{
    backward_context *c = (backward_context *)context;
    if (poisoned) {
        for (int i = 0; i < OUTPUTS; i++)
            if (c->outputs[i])
                CUDA_CHECK(cudaMemset(c->outputs[i], 0xFF, c->output_counts[i] * sizeof(float)));
        if (c->r.workspace)
            CUDA_CHECK(cudaMemset(c->r.workspace, 0xFF, c->r.workspace_bytes));
    } else if (gdn_pass_timer_flush(&c->timer))
        return -1;
    if (gdn_pass_timer_start(&c->timer) || c->stage->device_backward(&c->p, &c->c, c->settings, &c->r, &c->g) ||
        gdn_pass_timer_stop(&c->timer, seconds))
        return -1;
    if (poisoned) {
        float *const hosts[OUTPUTS] = {r->o, r->ht, g->dq, g->dk, g->dv, g->dg, g->dbeta, g->dh0};
        for (int i = 0; i < OUTPUTS; i++)
            if (c->outputs[i])
                CUDA_CHECK(cudaMemcpy(hosts[i], c->outputs[i], c->output_counts[i] * sizeof(float),
                                      cudaMemcpyDeviceToHost));
    }
    return 0;
}

static void backward_close(void *context)
{
    backward_context *c = (backward_context *)context;
    if (!c)
        return;
    for (int i = 0; i < INPUTS; i++)
        cudaFree(c->inputs[i]);
    for (int i = 0; i < OUTPUTS; i++)
        cudaFree(c->outputs[i]);
    for (int i = 0; i < 3; i++)
        cudaFree(c->bf16_inputs[i]);
    cudaFree(c->r.workspace);
    gdn_pass_timer_close(&c->timer);
    free(c);
}

extern "C" const gdn_backward_runner gdn_cuda_backward_runner = {backward_open, backward_run, backward_close};
