/* 07_sequence_parallel -- stage 06 with stage 04's three phases: one GPU busy on one long sequence.
 *
 * The idea (docs/07_sequence_parallel.md): stage 06's chain kernel runs the chunks of a head
 * one after the other, each block on 16 to 128 state columns of one head. With few heads (one
 * long sequence, or heads sharded over GPUs) most of the 132 SMs idle, and the time is the
 * number of chunks times the latency of one chunk step. Cut each sequence into P segments of
 * whole chunks and do what stage 04 does with tokens, with stage 06's chunk steps:
 *   1. fold:    segments 0 .. P-2 each carry the map of their chunks, the state [A | B]
 *               (K x (K + V)) from [I | 0] with U's columns [0 | U] (eq. 6 of stage 04,
 *               one chunk at a time: S -> (exp(gamma_C) I - Kdec^T W) S + Kdec^T U). Stage
 *               06's chain kernel with FOLD; tensor cores, fp32 accumulators.
 *   2. scan:    start_0 = h0, start_{s+1} = A_s start_s + B_s (eq. 7 of stage 04), at fp32
 *               accuracy, each step's product on the tensor cores (scan_on_tensor_cores.cuh).
 *   3. replay:  stage 06's chain kernel on every segment from its true start state, saving
 *               S0 and Vnew of every chunk as stage 06 does (or making o with its output
 *               warps); the last segment writes ht.
 * Kernel 1 (prepare) and kernel 3 (outputs) of stage 06 run unchanged before and after: they
 * are parallel over every chunk already. Exact: no warm-up chunks, no reliance on the gates
 * forgetting; the only new rounding is A and B, fp32 sums of bf16 products like S.
 *
 * Read sequence_parallel.cuh (the three phases' launches, the workspace, the flop count and
 * the model that picks P), then scan_on_tensor_cores.cuh (phase 2); stage 06's files
 * (../06_warp_specialized/warp_specialized.cu lists them) hold the kernels of phases 1 and 3.
 *
 * Cost: stage 06's work, plus the fold, (K + V) / V times the chain's work on segments
 * 0 .. P-2, plus the scan, 2 K^2 V (P - 1) flops per head; workspace: stage 06's plus
 * P - 1 maps K x (K + V) and P start states K x V per head (fp32).
 * Depth: chunks / P fold steps + P - 1 scan steps + chunks / P replay steps, against chunks.
 * Grouped value heads (--HV): as in stage 06, a chain a value head, its q and k rows those of
 * its key head (B HV heads in the counts above). A packed batch: as stage 06, rows padded to
 * the longest sequence (padded_rows.cuh), P chosen from each row's real chunks.
 * P: the least modelled time (sequence_parallel_segments, in sequence_parallel.cuh), from B H,
 * T and the SMs; 1 where the heads fill the GPU, so that the stage is stage 06 there.
 * --segments overrides.
 *
 * Build and run:  make bin/07_sequence_parallel && bin/07_sequence_parallel --T 65536 --H 8 --check-against oracle
 * Measured: 0.626 ms at (1, 65536, 8, 128, 128), FLA's CUDA graph 1.80 ms, in one run on an NVIDIA
 * H200 (plots/data/stage07_shapes.dat).
 */
#include "sequence_parallel.cuh" /* the three phases' launches and the choice of P */

/* The workspace: stage 06's, then the maps of segments 0 .. P-2, then the start states. */
static int sequence_parallel_parts(const gdn_problem *p, const gdn_settings *s, size_t bytes[6])
{
    const size_t heads = p->B * gdn_value_heads(p), P = s->segments; /* a chain a value head */
    size_t maps[4] = {heads, P - 1, p->K * (p->K + p->V), sizeof(float)}, starts[4] = {heads, P, p->K * p->V, sizeof(float)};
    if (workspace_parts(heads, p->T, p->K, p->V, s->precise, bytes) || gdn_multiply_sizes(&bytes[4], 4, maps) ||
        gdn_multiply_sizes(&bytes[5], 4, starts))
        return -1;
    return 0;
}

static int rows_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    size_t parts[6];
    if (sequence_parallel_parts(p, s, parts))
        return -1;
    *bytes = 0;
    for (int i = 0; i < 6; i++) {
        if (*bytes + parts[i] < *bytes)
            return gdn_set_error("the workspace of %zu x %zu tokens overflows size_t", p->B * gdn_value_heads(p), p->T);
        *bytes += parts[i];
    }
    return 0;
}

/* --batch-invariant with a packed batch: P would follow the batch's longest sequence, so a
   sequence's segments would change with the batch (stage 06, which does not cut, takes it) */
static int refuse_invariant_packed(void)
{
    return gdn_set_error("--batch-invariant with a packed batch: the segments would follow the longest sequence (stage 06 takes it)");
}

/* a packed batch: its rows' workspace (padded_rows.cuh); refused here with --batch-invariant,
   before anything is allocated */
static int sequence_parallel_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    if (p->offsets && s->batch_invariant)
        return refuse_invariant_packed();
    return p->offsets ? padded_workspace_bytes(p, s, rows_workspace, bytes) : rows_workspace(p, s, bytes);
}

/* invariant (--batch-invariant): stage 06's paths for it (launch_chunk_states), P from one
   head's sequence (sequence_parallel_resolve_options) */
template <bool PRECISE>
static int sequence_parallel_passes(const gdn_device_problem *p, size_t P, chunk_workspace w, float *maps, float *starts,
                                    gdn_device_result *r, bool invariant)
{
    bool outputs_done;
    const size_t depth = sequence_parallel_depth(chunks_of(p->T), P);
    if (launch_prepare_chunks<PRECISE>(p, w, chunk_parts_for<PRECISE>(p, depth, invariant)))
        return -1;
    if (P == 1) { /* stage 06 */
        const chain_segments whole = {1, 1, p->h0, r->ht};
        if (launch_chunk_states<PRECISE, state_columns>(p, w, whole, depth, r, &outputs_done, 0, invariant))
            return -1;
    } else {
        const chain_segments fold = {P, P - 1, NULL, maps}, replay = {P, P, starts, r->ht};
        if (launch_chunk_states<PRECISE, folded_columns>(p, w, fold, depth, NULL, NULL, 0, invariant) ||
            launch_scan_on_tensor_cores(p, P, maps, starts, w.row_offsets) ||
            launch_chunk_states<PRECISE, state_columns>(p, w, replay, depth, r, &outputs_done, 0, invariant))
            return -1;
    }
    return outputs_done ? 0 : launch_chunk_outputs<PRECISE>(p, w, r);
}

/* the passes on B rows of T tokens (no offsets) */
static int rows_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    gdn_problem sizes = {};
    sizes.B = p->B, sizes.T = p->T, sizes.H = p->H, sizes.HV = r->layout.HV, sizes.K = p->K, sizes.V = p->V;
    size_t parts[6];
    sequence_parallel_parts(&sizes, s, parts); /* sizes the runner has already checked */
    /* grouped value heads, as stage 06 runs them: the value heads are the passes' heads */
    gdn_device_problem heads = *p;
    heads.H = r->layout.HV;
    heads.heads_per_key = (unsigned)(r->layout.HV / p->H);
    chunk_workspace w = workspace_at(r->workspace, &heads, s->precise);
    rows_in_place(&w, &r->layout); /* a packed batch's rows: read in place, their padding not run */
    float *maps = (float *)((unsigned char *)r->workspace + parts[0] + parts[1] + parts[2] + parts[3]);
    float *starts = maps + parts[4] / sizeof(float);
    const bool invariant = s->batch_invariant != 0;
    return s->precise ? sequence_parallel_passes<true>(&heads, s->segments, w, maps, starts, r, invariant)
                      : sequence_parallel_passes<false>(&heads, s->segments, w, maps, starts, r, invariant);
}

/* A packed batch runs as stage 06 runs it, as rows padded to its longest sequence, P chosen
 * from its rows' real chunks (sequence_parallel_resolve_options); not with --batch-invariant
 * (refuse_invariant_packed, which the workspace's query says first). */
static int sequence_parallel_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    if (check_key_width(p->K))
        return -1;
    if (!r->layout.offsets)
        return rows_forward(p, s, r);
    if (s->batch_invariant)
        return refuse_invariant_packed();
    return packed_forward(p, s, r, rows_forward);
}

extern "C" const gdn_stage sequence_parallel_stage = {
    .name = "07_sequence_parallel",
    .idea = "stage 06 in three phases (fold segments, scan their maps, replay): parallel along one sequence",
    .options = GDN_OPTION_PRECISE | GDN_OPTION_SEGMENTS | GDN_OPTION_VALUE_HEADS | GDN_OPTION_PACKED | GDN_OPTION_BATCH_INVARIANT,
    .forward = NULL,
    .counted_flops = sequence_parallel_flops,
    .resolve_options = sequence_parallel_resolve_options,
    .device_forward = sequence_parallel_forward,
    .device_workspace_bytes = sequence_parallel_workspace,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 1,
};
