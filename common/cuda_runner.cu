/* cuda_runner.cu -- how the driver runs a GPU stage (the gdn_runner of stage.h).
 *
 * open:  copy the problem to the device once (a packed batch's offsets too), allocate o, ht,
 *        the stage's workspace and a cache-flush buffer; refuse, with the byte counts, a
 *        problem the GPU cannot hold.
 *        For a stage on bf16 inputs, also convert q, k and v to bf16 there, untimed, and
 *        allocate o in bf16 too.
 * run:   a timed repetition first flushes the L2 cache, then the pass runs between two CUDA
 *        events (pass_timer.cuh: the device's time, not the host's launch time). A poisoned
 *        run (warm-up, checked run) fills o and ht (and o in bf16) with NaN bytes first and
 *        copies them back after; where the pass wrote o in bf16, it is widened to fp32 first,
 *        untimed. It fills the workspace with the same bytes, so that nothing an earlier pass
 *        left there (W, U, S0, a segment's map or start) can stand in for what this pass
 *        forgot to write.
 * close: free it all.
 */
#include <cuda_bf16.h>
#include <stdlib.h>

#include "cuda_check.h"
#include "device.h"
#include "pass_timer.cuh"
#include "stage.h"

static_assert(sizeof(real_t) == sizeof(float), "GPU stages are built in the float build only");

typedef struct {
    const gdn_stage *stage;
    const gdn_problem *host;
    const gdn_settings *settings;
    gdn_device_problem p;
    gdn_device_result r;
    float *buffers[8];               /* q k v g beta h0 o ht, to free */
    __nv_bfloat16 *bf16_buffers[4];  /* q k v o in bf16, for stages with bf16_inputs */
    size_t *offsets;                 /* a packed batch's offsets */
    gdn_pass_timer timer;
} cuda_context;

/* The pass's stream (device.h), one a thread as PyTorch's current stream is. */
static thread_local cudaStream_t pass_stream = NULL;
cudaStream_t gdn_pass_stream(void) { return pass_stream; }
void gdn_set_pass_stream(cudaStream_t stream) { pass_stream = stream; }

/* Why no device answers, in the words that fit: the CUDA runtime reports a missing driver
 * library (no libcuda.so.1: no NVIDIA driver installed, the usual case on a machine without a
 * GPU) as cudaErrorInsufficientDriver, "driver version is insufficient", the same error as a
 * driver older than the runtime. cudaDriverGetVersion tells them apart: 0 means no driver. */
int gdn_cuda_device_present(void)
{
    int count = 0, driver = 0, runtime = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status == cudaSuccess && count > 0)
        return 1;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    cudaGetLastError();
    if (driver == 0)
        return gdn_set_error("no NVIDIA driver or GPU found (the CUDA runtime finds no driver)"), 0;
    if (status == cudaErrorInsufficientDriver)
        return gdn_set_error("the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d these binaries are "
                             "built with: update the driver or build with an older toolkit",
                             driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10), 0;
    if (status != cudaSuccess)
        return gdn_set_error("no usable CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(status)), 0;
    return gdn_set_error("no CUDA device (the NVIDIA driver finds none)"), 0;
}

int gdn_sm_count(void)
{
    int sms = 0, device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        sms < 1) {
        cudaGetLastError();
        sms = 132;
    }
    return sms;
}

int gdn_cuda_upload(float **device, const float *host, size_t count)
{
    CUDA_CHECK(cudaMalloc((void **)device, count * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(*device, host, count * sizeof(float), cudaMemcpyHostToDevice));
    return 0;
}

/* bf16 copies of the inputs: exact, since the driver has already rounded them to bf16 values */
__global__ static void convert_to_bf16(const float *from, __nv_bfloat16 *to, size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        to[i] = __float2bfloat16_rn(from[i]);
}

/* o widened from bf16, after the pass and outside its timing */
__global__ static void convert_from_bf16(const __nv_bfloat16 *from, float *to, size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        to[i] = __bfloat162float(from[i]);
}

int gdn_cuda_upload_bf16(unsigned short **device, const float *device_floats, size_t count)
{
    CUDA_CHECK(cudaMalloc((void **)device, count * sizeof(__nv_bfloat16)));
    convert_to_bf16<<<1024, 256>>>(device_floats, (__nv_bfloat16 *)*device, count);
    CUDA_CHECK_LAUNCH("convert_to_bf16");
    return 0;
}
static int upload_bf16(__nv_bfloat16 **device, const float *device_floats, size_t count)
{
    return gdn_cuda_upload_bf16((unsigned short **)device, device_floats, count);
}

static int cuda_open(const gdn_stage *stage, const gdn_problem *host, const gdn_settings *s, void **context)
{
    if (!gdn_cuda_device_present())
        return -1;
    if (!stage->device_forward)
        return gdn_set_error("%s has no GPU forward pass", stage->name);
    cuda_context *c = (cuda_context *)calloc(1, sizeof *c);
    if (!c)
        return gdn_set_error("out of memory");
    *context = c;
    c->stage = stage;
    c->host = host;
    c->settings = s;

    /* value tokens (v, o, g, beta: B T HV) and key tokens (q, k: B T H), equal but for grouped value heads */
    size_t tokens = gdn_tokens(host), key_tokens = gdn_key_tokens(host), states = gdn_state_count(host), workspace = 0;
    if (stage->device_workspace_bytes && stage->device_workspace_bytes(host, s, &workspace))
        return -1;
    if (gdn_pass_timer_size(&c->timer))
        return -1;

    /* the bytes this problem needs on the device, all of them, before allocating any */
    const size_t offset_bytes = host->offsets ? (host->sequences + 1) * sizeof(size_t) : 0;
    size_t io = sizeof(float) * (key_tokens * 2 * host->K + tokens * (2 * host->V + 2) + (host->h0 ? 2 : 1) * states) +
                offset_bytes;
    if (stage->bf16_inputs)
        io += sizeof(__nv_bfloat16) * (key_tokens * 2 * host->K + tokens * 2 * host->V);
    if (gdn_pass_timer_check_room(&c->timer, stage->name, "inputs and outputs", io, workspace))
        return -1;

    c->p.B = host->B, c->p.T = host->T, c->p.H = host->H, c->p.K = host->K, c->p.V = host->V;
    c->r.layout.HV = gdn_value_heads(host), c->r.layout.sequences = gdn_sequences(host);
    c->r.layout.longest = gdn_longest_sequence(host);
    c->p.scale = (float)host->scale;
    c->p.heads_per_key = 1;
    if (host->offsets) {
        CUDA_CHECK(cudaMalloc((void **)&c->offsets, offset_bytes));
        CUDA_CHECK(cudaMemcpy(c->offsets, host->offsets, offset_bytes, cudaMemcpyHostToDevice));
        c->r.layout.offsets = c->offsets;
    }
    float **q = &c->buffers[0], **k = &c->buffers[1], **v = &c->buffers[2], **g = &c->buffers[3],
          **beta = &c->buffers[4], **h0 = &c->buffers[5];
    if (gdn_cuda_upload(q, host->q, key_tokens * host->K) || gdn_cuda_upload(k, host->k, key_tokens * host->K) ||
        gdn_cuda_upload(v, host->v, tokens * host->V) || gdn_cuda_upload(g, host->g, tokens) ||
        gdn_cuda_upload(beta, host->beta, tokens) || (host->h0 && gdn_cuda_upload(h0, host->h0, states)))
        return -1;
    c->p.q = *q, c->p.k = *k, c->p.v = *v, c->p.g = *g, c->p.beta = *beta, c->p.h0 = *h0;
    if (stage->bf16_inputs) {
        if (upload_bf16(&c->bf16_buffers[0], *q, key_tokens * host->K) ||
            upload_bf16(&c->bf16_buffers[1], *k, key_tokens * host->K) || upload_bf16(&c->bf16_buffers[2], *v, tokens * host->V))
            return -1;
        CUDA_CHECK(cudaMalloc((void **)&c->bf16_buffers[3], tokens * host->V * sizeof(__nv_bfloat16)));
        c->r.o_bf16 = (unsigned short *)c->bf16_buffers[3];
        CUDA_CHECK(cudaDeviceSynchronize());
        c->p.q_bf16 = (const unsigned short *)c->bf16_buffers[0];
        c->p.k_bf16 = (const unsigned short *)c->bf16_buffers[1];
        c->p.v_bf16 = (const unsigned short *)c->bf16_buffers[2];
    }
    CUDA_CHECK(cudaMalloc((void **)&c->buffers[6], tokens * host->V * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&c->buffers[7], states * sizeof(float)));
    c->r.o = c->buffers[6];
    c->r.ht = c->buffers[7];
    c->r.workspace_bytes = workspace;
    if (workspace)
        CUDA_CHECK(cudaMalloc(&c->r.workspace, workspace)); /* cudaMalloc aligns to 256 bytes */
    return gdn_pass_timer_open(&c->timer);
}

static int cuda_run(void *context, int poisoned, gdn_result *r, double *seconds)
{
    cuda_context *c = (cuda_context *)context;
    size_t o_bytes = gdn_tokens(c->host) * c->host->V * sizeof(float),
           ht_bytes = gdn_state_count(c->host) * sizeof(float);
    c->r.o_in_bf16 = 0; /* the pass says whether it wrote o there */
    if (poisoned) { /* all-ones bytes are a NaN in float and in bf16 */
        CUDA_CHECK(cudaMemset(c->r.o, 0xFF, o_bytes));
        CUDA_CHECK(cudaMemset(c->r.ht, 0xFF, ht_bytes));
        if (c->r.o_bf16)
            CUDA_CHECK(cudaMemset(c->r.o_bf16, 0xFF, o_bytes / 2));
        if (c->r.workspace)
            CUDA_CHECK(cudaMemset(c->r.workspace, 0xFF, c->r.workspace_bytes));
    } else if (gdn_pass_timer_flush(&c->timer))
        return -1;
    if (gdn_pass_timer_start(&c->timer) || c->stage->device_forward(&c->p, c->settings, &c->r) ||
        gdn_pass_timer_stop(&c->timer, seconds))
        return -1;
    if (poisoned) {
        if (c->r.o_in_bf16) {
            if (!c->r.o_bf16)
                return gdn_set_error("%s wrote o in bf16, but has no bf16 inputs (no room was made)", c->stage->name);
            convert_from_bf16<<<1024, 256>>>((const __nv_bfloat16 *)c->r.o_bf16, c->r.o, o_bytes / sizeof(float));
            CUDA_CHECK_LAUNCH("convert_from_bf16");
        }
        CUDA_CHECK(cudaMemcpy(r->o, c->r.o, o_bytes, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(r->ht, c->r.ht, ht_bytes, cudaMemcpyDeviceToHost));
    }
    return 0;
}

static void cuda_close(void *context)
{
    cuda_context *c = (cuda_context *)context;
    if (!c)
        return;
    for (int i = 0; i < 8; i++)
        cudaFree(c->buffers[i]);
    for (int i = 0; i < 4; i++)
        cudaFree(c->bf16_buffers[i]);
    cudaFree(c->r.workspace);
    cudaFree(c->offsets);
    gdn_pass_timer_close(&c->timer);
    free(c);
}

extern "C" const gdn_runner gdn_cuda_runner = {cuda_open, cuda_run, cuda_close};
