/* library_cuda.cu -- the GPU stages as a shared library: the entry points the Python package
 * gdn_steps calls for CUDA tensors (python/gdn_steps/__init__.py, docs/python.md).
 *
 * The idea: a binary's runner (common/cuda_runner.cu) copies the problem to the GPU, times the
 * pass and copies the results back. Here the tensors are already on the GPU, PyTorch's: a call
 * hands the stage their addresses as its gdn_device_problem, the workspace PyTorch allocated,
 * and PyTorch's current stream as the pass's stream (common/device.h), and returns as soon as
 * the kernels are queued. Nothing is copied, nothing waits for the GPU, nothing is allocated:
 * the call can be captured in a CUDA graph. The stages are those that read bf16 inputs, as
 * FLA's callers hold them: 06a .. 06e, 06 and 07 forward, and stage 11, 12 or 13 backward
 * (loss.backward() on CUDA tensors: the gradients from the same bf16 inputs, on the GPU).
 *
 * What it does not check: the outputs' values. A check would wait for the GPU; the package's
 * suite checks them (tests/python/test_gdn_steps_cuda.py). Everything that can be checked
 * without the GPU (sizes, layout, options, the stage's limits, the workspace's size) is, before
 * any kernel runs. Every entry returns 0, or -1 with gdn_library_error() saying why in one line.
 *
 * Cost: the stage's, plus a few microseconds of host work a call (the stage's launch rules).
 *
 * Build:  make lib   (python/gdn_steps/libgdn_steps_cuda.so, where nvcc is found)
 */
#include <cuda_runtime.h>
#include <string.h>

#include "../common/backward_stage.h"
#include "../common/cuda_check.h"
#include "../common/device.h"
#include "../common/error.h"
#include "../steps/07_sequence_parallel/sequence_parallel.h"
#include "library.h"

extern "C" const gdn_stage tensor_cores_stage, producer_consumer_stage, bulk_copies_stage, warp_chain_stage,
    output_warps_stage, warp_specialized_stage;

static const gdn_stage *const gpu_stages[] = {&tensor_cores_stage, &producer_consumer_stage, &bulk_copies_stage,
                                              &warp_chain_stage,   &output_warps_stage,      &warp_specialized_stage,
                                              &sequence_parallel_stage};
enum { GPU_STAGES = sizeof gpu_stages / sizeof gpu_stages[0] };
/* the GPU backwards that read bf16: stage 11's four passes, stage 12's walk and stage 13's (the
 * walk on the states of 06's kernels) */
extern "C" const gdn_backward_stage backward_tensor_cores_stage, backward_fused_stage, backward_states_stage;
static const gdn_backward_stage *const gpu_backward_stages[] = {&backward_tensor_cores_stage, &backward_fused_stage,
                                                                 &backward_states_stage};
static_assert(sizeof gpu_backward_stages / sizeof gpu_backward_stages[0] == 3, "prepare_backward names all three");
enum { GPU_BACKWARD_STAGES = sizeof gpu_backward_stages / sizeof gpu_backward_stages[0] };

extern "C" const char *gdn_library_cuda_error(void) { return gdn_last_error(); }

/* Space-separated names, in the order a reader meets them. */
extern "C" const char *gdn_library_cuda_stages(void)
{
    static char list[256];
    list[0] = '\0';
    for (int i = 0; i < GPU_STAGES; i++) {
        strncat(list, gpu_stages[i]->name, sizeof list - strlen(list) - 2);
        strncat(list, " ", sizeof list - strlen(list) - 1);
    }
    return list;
}

/* The call's device made current: a GPU is there, and it is the one this process runs on */
static int use_device(const gdn_library_call *c)
{
    if (!gdn_cuda_device_present())
        return -1;
    /* stage 06 makes its side streams once, on the device current then (warp_specialized.cu) */
    static int64_t first_device = -1;
    if (first_device < 0)
        first_device = c->device;
    if (c->device != first_device)
        return gdn_set_error("tensors on CUDA device %lld: this process ran the GPU stages on device %lld, and they "
                             "run on one device a process", (long long)c->device, (long long)first_device);
    CUDA_CHECK(cudaSetDevice((int)c->device));
    return 0;
}

/* The call's tensors as the stages read them: q, k, v in bf16, g, beta and h0 in fp32 */
static gdn_device_problem device_problem(const gdn_problem *p, const gdn_library_call *c)
{
    gdn_device_problem device = {};
    device.B = p->B, device.T = p->T, device.H = p->H, device.K = p->K, device.V = p->V;
    device.scale = (float)p->scale;
    device.heads_per_key = 1;
    /* the fp32 q, k, v a binary's runner keeps as well: these stages read only the bf16 ones */
    device.g = (const float *)c->g, device.beta = (const float *)c->beta, device.h0 = (const float *)c->h0;
    device.q_bf16 = (const unsigned short *)c->q, device.k_bf16 = (const unsigned short *)c->k;
    device.v_bf16 = (const unsigned short *)c->v;
    return device;
}

/* The stage, the problem and the settings of a call, all checked; the stage resolves its
 * options (07 its segments) as its binary would; the workspace it needs, in bytes. */
static int prepare(const char *stage_name, const gdn_library_call *c, const gdn_stage **stage, gdn_problem *p,
                   gdn_settings *s, size_t *workspace)
{
    *workspace = 0;
    *stage = NULL;
    memset(p, 0, sizeof *p); /* released by the caller whatever fails below */
    for (int i = 0; i < GPU_STAGES; i++)
        if (gdn_library_names(stage_name, gpu_stages[i]->name))
            *stage = gpu_stages[i];
    if (!*stage)
        return gdn_set_error("no GPU stage '%s' (there are %s)", stage_name, gdn_library_cuda_stages());
    if (gdn_library_check_options(*stage, c) || gdn_library_problem(c, p, s) || gdn_check_layout(*stage, p))
        return -1;
    /* a packed batch: its offsets on the host (sizes, the stage's choices) and on the GPU (the kernels) */
    if (p->offsets && !c->device_offsets)
        return gdn_set_error("cu_seqlens: its offsets are needed in GPU memory as well");
    if (use_device(c))
        return -1;
    if ((*stage)->resolve_options)
        (*stage)->resolve_options(p, s);
    return (*stage)->device_workspace_bytes ? (*stage)->device_workspace_bytes(p, s, workspace) : 0;
}

/* The stage run by shape, as the binaries offer it: 07 where its model of the GPU cuts the
 * sequences into more than one segment (few heads, long sequences), else 06. Writes the name. */
extern "C" int gdn_library_cuda_pick(const gdn_library_call *c, char *name, int64_t capacity)
{
    const gdn_stage *stage;
    gdn_problem p;
    gdn_settings s;
    gdn_library_call automatic = *c;
    automatic.segments = 0;
    size_t workspace;
    int status = prepare("07", &automatic, &stage, &p, &s, &workspace);
    if (status == 0) {
        const char *picked = s.segments > 1 ? sequence_parallel_stage.name : warp_specialized_stage.name;
        if ((int64_t)strlen(picked) >= capacity)
            status = gdn_set_error("no room for the stage's name");
        else
            strcpy(name, picked);
    }
    gdn_library_release(&p);
    return status;
}

/* The workspace the call needs, in bytes (the caller allocates it on the tensors' device). */
extern "C" int gdn_library_cuda_workspace(const char *stage_name, const gdn_library_call *c, int64_t *bytes)
{
    const gdn_stage *stage;
    gdn_problem p;
    gdn_settings s;
    size_t needed;
    int status = prepare(stage_name, c, &stage, &p, &s, &needed);
    gdn_library_release(&p);
    *bytes = (int64_t)needed;
    return status;
}

/* Queues the pass into c->stream: o in bf16 (o_bf16) or fp32 (o), as the stage writes it
 * (*o_in_bf16 says which), and ht fp32 [N, HV, K, V]. */
extern "C" int gdn_library_cuda_forward(const char *stage_name, const gdn_library_call *c, void *workspace,
                                        int64_t workspace_bytes, float *o, unsigned short *o_bf16, float *ht,
                                        int *o_in_bf16)
{
    const gdn_stage *stage;
    gdn_problem p;
    gdn_settings s;
    size_t needed;
    int status = prepare(stage_name, c, &stage, &p, &s, &needed);
    if (status == 0 && (int64_t)needed > workspace_bytes)
        status = gdn_set_error("%s needs %zu bytes of workspace; %lld given", stage->name, needed, (long long)workspace_bytes);
    if (status == 0 && (!o || !o_bf16 || !ht || (needed && !workspace)))
        status = gdn_set_error("o (bf16 and fp32), ht and the workspace are all needed");
    if (status == 0) {
        gdn_device_problem device = device_problem(&p, c);
        gdn_device_result result = {};
        result.o = o, result.ht = ht, result.o_bf16 = o_bf16;
        result.workspace = workspace, result.workspace_bytes = (size_t)workspace_bytes;
        /* grouped value heads and a packed batch as given (gdn_check_layout refused a stage without
           them); the GPU's offsets are int64, size_t's width */
        static_assert(sizeof(size_t) == sizeof(int64_t), "the offsets are read as size_t");
        result.layout.HV = gdn_value_heads(&p), result.layout.sequences = gdn_sequences(&p);
        result.layout.longest = gdn_longest_sequence(&p);
        result.layout.offsets = p.offsets ? (const size_t *)c->device_offsets : NULL;
        gdn_set_pass_stream((cudaStream_t)c->stream);
        status = stage->device_forward(&device, &s, &result);
        gdn_set_pass_stream(NULL);
        *o_in_bf16 = result.o_in_bf16;
    }
    gdn_library_release(&p);
    return status;
}

/* ---- the backward: stage 11, 12 or 13 ---- */

/* The GPU backward stage a name picks (its number or its full name), its problem and settings
 * checked: one key head a value head and B rows (the package repeats grouped keys and runs a
 * packed batch a sequence at a time), no forward options; the workspace it needs, in bytes. */
static int prepare_backward(const char *stage_name, const gdn_library_call *c, gdn_problem *p, gdn_settings *s,
                            const gdn_backward_stage **picked, size_t *workspace)
{
    const gdn_backward_stage *stage = NULL;
    *workspace = 0;
    memset(p, 0, sizeof *p); /* released by the caller whatever fails below */
    for (int i = 0; i < GPU_BACKWARD_STAGES && !stage; i++)
        if (gdn_library_names(stage_name, gpu_backward_stages[i]->name))
            stage = gpu_backward_stages[i];
    if (!stage)
        return gdn_set_error("no GPU backward stage '%s' (there are %s, %s and %s)", stage_name, gpu_backward_stages[0]->name,
                             gpu_backward_stages[1]->name, gpu_backward_stages[2]->name);
    *picked = stage;
    if (c->HV != c->H || c->offsets)
        return gdn_set_error("%s takes one key head a value head and B rows (HV = %lld, H = %lld%s)", stage->name,
                             (long long)c->HV, (long long)c->H, c->offsets ? ", cu_seqlens given" : "");
    if (c->precise || c->batch_invariant || c->segments)
        return gdn_set_error("%s has no precise, batch_invariant or segments", stage->name);
    if (gdn_library_problem(c, p, s) || use_device(c))
        return -1;
    if (stage->resolve_options)
        stage->resolve_options(p, s);
    return stage->device_workspace_bytes(p, s, workspace);
}

/* The workspace a backward call needs, in bytes. */
extern "C" int gdn_library_cuda_backward_workspace(const char *stage_name, const gdn_library_call *c, int64_t *bytes)
{
    gdn_problem p;
    gdn_settings s;
    const gdn_backward_stage *stage = NULL;
    size_t needed;
    int status = prepare_backward(stage_name, c, &p, &s, &stage, &needed);
    gdn_library_release(&p);
    *bytes = (int64_t)needed;
    return status;
}

/* Queues the backward into c->stream: from the cotangents d_o [B, T, H, V] and dht [B, H, K, V]
 * (fp32), o and ht (fp32, recomputed) and the gradients dq, dk [B, T, H, K], dv [B, T, H, V],
 * dg, dbeta [B, T, H] and, with h0, dh0 [B, H, K, V], all fp32. d_o_bf16: dO in bf16 (bit
 * patterns), read instead of d_o (then NULL); dq_bf16 and dv_bf16: both or neither, dq and dv
 * written there in bf16 instead (dq and dv then NULL). dk is fp32 either way. o may be NULL:
 * the caller has it from the forward, and the stage then neither makes nor writes it. */
extern "C" int gdn_library_cuda_backward(const char *stage_name, const gdn_library_call *c, void *workspace,
                                         int64_t workspace_bytes, const float *d_o, const float *dht, float *o, float *ht,
                                         float *dq, float *dk, float *dv, float *dg, float *dbeta, float *dh0,
                                         const unsigned short *d_o_bf16, unsigned short *dq_bf16, unsigned short *dv_bf16)
{
    gdn_problem p;
    gdn_settings s;
    const gdn_backward_stage *stage = NULL;
    size_t needed;
    int status = prepare_backward(stage_name, c, &p, &s, &stage, &needed);
    if (status == 0 && (int64_t)needed > workspace_bytes)
        status = gdn_set_error("%s needs %zu bytes of workspace; %lld given", stage->name, needed,
                               (long long)workspace_bytes);
    const int bf16_gradients = dq_bf16 != NULL;
    if (status == 0 && !dq_bf16 != !dv_bf16)
        status = gdn_set_error("dq and dv in bf16: both or neither");
    if (status == 0 && (!d_o == !d_o_bf16))
        status = gdn_set_error("dO once: in fp32 or in bf16");
    if (status == 0 && (!dht || !ht || (!bf16_gradients && (!dq || !dv)) || !dk || !dg || !dbeta ||
                        (c->h0 && !dh0) || (needed && !workspace)))
        status = gdn_set_error("the cotangents, ht, every gradient (dh0 with h0) and the workspace are all needed");
    if (status == 0) {
        const gdn_device_problem device = device_problem(&p, c);
        const gdn_device_cotangents cotangents = {d_o, dht, d_o_bf16};
        gdn_device_result result = {};
        result.o = o, result.ht = ht;
        result.workspace = workspace, result.workspace_bytes = (size_t)workspace_bytes;
        result.layout.HV = p.H, result.layout.sequences = p.B, result.layout.longest = p.T; /* the plain layout */
        gdn_device_gradients gradients = {dq, dk, dv, dg, dbeta, c->h0 ? dh0 : NULL, dq_bf16, dv_bf16};
        gdn_set_pass_stream((cudaStream_t)c->stream);
        status = stage->device_backward(&device, &cotangents, &s, &result, &gradients);
        gdn_set_pass_stream(NULL);
    }
    gdn_library_release(&p);
    return status;
}
