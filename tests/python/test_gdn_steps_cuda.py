"""test_gdn_steps_cuda.py -- the package on CUDA tensors: every GPU stage against the fp64
recurrence on the same bf16-rounded inputs, the stage picked by shape, PyTorch's current
stream, CUDA-graph capture, autograd, and the errors CUDA calls raise before any kernel runs.

The bound is GDN_TOLERANCE_BF16 of common/tolerances.h, 5e-3 relative: the one FLA's tests use
for its bf16 kernels, and the C suites' for these stages; the gradients of stages 11-13 (the GPU
backward) are judged by FLA's bounds for its bf16 backward, GDN_TOLERANCE_BF16_BACKWARD_GRAD and
_GATES (GRADIENT_BOUNDS below). The whole module is skipped, saying
why, where torch finds no CUDA device or the package was built without nvcc.

    make test-python     (pip install . into build/python/, then tests/python)
"""
import ctypes
import os

import pytest
import torch

import gdn_steps
from test_gdn_steps import problem, reference, relative_error

BF16_BOUND = 5e-3
# The gradients of stages 11 and 12, the GPU backwards on bf16 operands: GDN_TOLERANCE_BF16_BACKWARD_GRAD
# (dq, dk, dv, dh0) and _GATES (dg, dbeta) of common/tolerances.h, FLA's bounds for its bf16
# backward; stages 09 and 10 on host copies compute in fp32 and keep BF16_BOUND.
GRADIENT_BOUNDS = {"q": 8e-3, "k": 8e-3, "v": 8e-3, "h0": 8e-3, "g": 2e-2, "beta": 2e-2}


def gradient_bound(backward_stage, name):
    return BF16_BOUND if backward_stage in ("09", "10") else GRADIENT_BOUNDS[name]

if not torch.cuda.is_available():
    pytest.skip("no CUDA device: torch.cuda.is_available() is False", allow_module_level=True)
if not os.path.exists(os.path.join(os.path.dirname(gdn_steps.__file__), "libgdn_steps_cuda.so")):
    pytest.skip("the package was built without nvcc: no libgdn_steps_cuda.so", allow_module_level=True)

gdn_steps.poison_cuda_outputs = True  # NaN in every output before the kernels run


def cuda_problem(B, T, H, K, V, seed, with_h0=False, HV=None):
    """Fresh inputs rounded to bf16 (q, k, v) as the GPU stages read them; on the GPU and, for
    the reference, the same values in float64 on the CPU."""
    q, k, v, g, beta, h0 = problem(B, T, H, K, V, HV=HV, seed=seed, with_h0=with_h0)
    q, k, v = (x.to(torch.bfloat16) for x in (q, k, v))
    on_gpu = [None if x is None else x.cuda() for x in (q, k, v, g, beta, h0)]
    return on_gpu, [None if x is None else x.double() for x in (q, k, v, g, beta, h0)]


SHAPES = [(1, 63, 1, 64, 64), (2, 100, 3, 100, 64), (1, 257, 2, 128, 128), (2, 1, 4, 64, 32), (3, 65, 2, 100, 100),
          (1, 1000, 2, 128, 128)]


@pytest.mark.parametrize("B,T,H,K,V", SHAPES)
@pytest.mark.parametrize("stage", ["06a", "06b", "06c", "06d", "06e", "06", "07", None])
def test_gpu_stage_against_reference(B, T, H, K, V, stage):
    case = SHAPES.index((B, T, H, K, V))
    with_h0, l2norm, scale = case % 2 == 1, case % 3 == 2, (0.1 if case == 1 else None)
    (q, k, v, g, beta, h0), exact = cuda_problem(B, T, H, K, V, seed=100 + case, with_h0=with_h0)
    o, ht = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=h0, output_final_state=True,
                                             use_qk_l2norm_in_kernel=l2norm, stage=stage)
    assert o.dtype == torch.bfloat16 and o.device == q.device and o.shape == v.shape
    assert ht.dtype == torch.float32 and ht.shape == (B, H, K, V)
    if l2norm:  # the kernel reads q and k normalised in fp32, then rounded to bf16: so does the reference
        exact[0], exact[1] = (gdn_steps._l2norm(x.float()).to(torch.bfloat16).double() for x in exact[:2])
    want_o, want_ht = reference(*exact[:5], scale=scale, h0=exact[5])
    assert relative_error(o.cpu(), want_o) < BF16_BOUND
    assert relative_error(ht.cpu(), want_ht) < BF16_BOUND


@pytest.mark.parametrize("stage,segments,precise", [("07", 3, False), ("07", 16, True), ("06", None, True)])
def test_segments_and_precise(stage, segments, precise):
    (q, k, v, g, beta, h0), exact = cuda_problem(2, 1000, 2, 128, 128, seed=7, with_h0=True)
    o, ht = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                             stage=stage, segments=segments, precise=precise)
    want_o, want_ht = reference(*exact[:5], h0=exact[5])
    assert relative_error(o.cpu(), want_o) < BF16_BOUND
    assert relative_error(ht.cpu(), want_ht) < BF16_BOUND


@pytest.mark.parametrize("B,T,H,HV,K,V,stage,precise", [(2, 201, 3, 6, 100, 72, None, False),
                                                        (1, 300, 2, 8, 128, 128, "06", False),
                                                        (1, 300, 2, 8, 128, 128, "06", True),
                                                        (1, 130, 24, 96, 128, 128, None, False),
                                                        (1, 4096, 1, 4, 128, 128, "07", False),
                                                        (1, 4096, 2, 4, 64, 64, None, False)])
def test_grouped_value_heads(B, T, H, HV, K, V, stage, precise):
    """Stages 06 and 07 take grouped value heads: against the fp64 recurrence."""
    (q, k, v, g, beta, h0), exact = cuda_problem(B, T, H, K, V, seed=31 + HV, with_h0=True, HV=HV)
    o, ht = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True, stage=stage,
                                             precise=precise)
    assert o.shape == (B, T, HV, V) and ht.shape == (B, HV, K, V)
    want_o, want_ht = reference(*exact[:5], h0=exact[5])
    assert relative_error(o.cpu(), want_o) < BF16_BOUND
    assert relative_error(ht.cpu(), want_ht) < BF16_BOUND


@pytest.mark.parametrize("lengths,H,HV,K,V,stage,where", [([300, 1, 63, 64, 65], 2, 4, 128, 128, None, "cuda"),
                                                          ([300, 1, 63, 64, 65], 2, 4, 128, 128, "07", "cuda+cpu"),
                                                          ([1800, 420], 1, 2, 64, 64, None, "cpu"),
                                                          ([100, 100, 100], 3, 3, 100, 72, "06", "cuda")])
def test_packed_batches(lengths, H, HV, K, V, stage, where):
    """cu_seqlens through 06 and 07 (rows padded to the longest sequence): on the GPU, with its
    CPU copy, or on the CPU; against the fp64 recurrence sequence by sequence."""
    T = sum(lengths)
    (q, k, v, g, beta, h0), exact = cuda_problem(1, T, H, K, V, seed=61 + T, with_h0=True, HV=HV)
    h0 = torch.randn(len(lengths), HV, K, V, generator=torch.Generator().manual_seed(62)).cuda()
    offsets = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32)
    given = dict(cu_seqlens=offsets.cuda()) if where == "cuda" else dict(cu_seqlens=offsets) if where == "cpu" else \
        dict(cu_seqlens=offsets.cuda(), cu_seqlens_cpu=offsets)
    o, ht = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True, stage=stage,
                                             segments=3 if stage == "07" else None, **given)
    assert o.shape == (1, T, HV, V) and ht.shape == (len(lengths), HV, K, V)
    want_o, want_ht = reference(*exact[:5], h0=h0.cpu().double(), cu_seqlens=offsets)
    assert relative_error(o.cpu(), want_o) < BF16_BOUND
    assert relative_error(ht.cpu(), want_ht) < BF16_BOUND


@pytest.mark.parametrize("backward_stage", [None, "10", "12", "13"])
@pytest.mark.parametrize("HV,packed", [(2, True), (4, False), (4, True)])
def test_gradients_of_layouts_on_cuda_tensors(HV, packed, backward_stage):
    """loss.backward() on CUDA tensors with grouped value heads (q and k shared by HV / 2 value
    heads) and cu_seqlens: the CPU path's gradients on the same values, from stage 11 on the GPU
    (the default at these sizes), 12 or 13, and from stage 10 on host copies."""
    (q, k, v, g, beta, _), _ = cuda_problem(1, 150, 2, 64, 32, seed=63 + HV, HV=HV)
    offsets = torch.tensor([0, 1, 70, 150]) if packed else None
    h0 = torch.randn(3 if packed else 1, HV, 64, 32, generator=torch.Generator().manual_seed(64)).cuda()
    leaves_gpu = [x.float().requires_grad_() for x in (q, k, v, g, beta, h0)]
    leaves_cpu = [x.detach().cpu().requires_grad_() for x in leaves_gpu]
    weights = torch.randn(1, 150, HV, 32, generator=torch.Generator().manual_seed(65))
    for leaves, where in ((leaves_gpu, "cuda"), (leaves_cpu, "cpu")):
        o, ht = gdn_steps.chunk_gated_delta_rule(*leaves[:5], initial_state=leaves[5], output_final_state=True,
                                                 cu_seqlens=None if offsets is None else offsets.to(where),
                                                 backward_stage=backward_stage if where == "cuda" else None)
        ((o * weights.to(where)).sum() + ht.sum()).backward()
    for name, a, b in zip(("q", "k", "v", "g", "beta", "h0"), leaves_gpu, leaves_cpu):
        assert relative_error(a.grad.cpu(), b.grad) < gradient_bound(backward_stage, name), name


def test_grouped_value_heads_refused_by_other_gpu_stages():
    (q, k, v, g, beta, _), _ = cuda_problem(1, 64, 2, 64, 64, seed=5, HV=4)
    with pytest.raises(ValueError, match="grouped value heads"):
        gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, stage="06e")


@pytest.mark.parametrize("B,T,H,K,heads,stage,l2norm", [(4, 1000, 16, 64, 2, None, False),  # alone W and U, batch from v
                                                          (6, 1000, 16, 128, 2, None, False),  # batch: output warps
                                                          (6, 300, 16, 128, 2, None, True),  # q, k normalised
                                                          (2, 8192, 16, 128, 1, "07", False)])  # alone cut, batch whole
def test_batch_invariant(B, T, H, K, heads, stage, l2norm):
    """batch_invariant=True: the first heads of one sequence give the same bits alone and inside
    a batch whose default paths differ from theirs (the comments say how)."""
    (q, k, v, g, beta, h0), _ = cuda_problem(B, T, H, K, K, seed=43 + K + T, with_h0=True)
    alone = [x[:1, :, :heads].contiguous() for x in (q, k, v, g, beta)]
    o_all, ht_all = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True, stage=stage,
                                                     use_qk_l2norm_in_kernel=l2norm, batch_invariant=True)
    o_one, ht_one = gdn_steps.chunk_gated_delta_rule(*alone, initial_state=h0[:1, :heads].contiguous(), output_final_state=True,
                                                     stage=stage, use_qk_l2norm_in_kernel=l2norm, batch_invariant=True)
    assert torch.equal(o_all[:1, :, :heads], o_one) and torch.equal(ht_all[:1, :heads], ht_one)


def test_stage_picked_by_shape():
    """Many heads fill the GPU by themselves: 06. One long sequence does not: 07 cuts it."""
    assert gdn_steps.gpu_stage_for(64, 1024, 64, 128, 128) == "06_warp_specialized"
    assert gdn_steps.gpu_stage_for(1, 65536, 1, 128, 128) == "07_sequence_parallel"
    (q, k, v, g, beta, _), _ = cuda_problem(1, 8192, 1, 128, 128, seed=9)
    auto = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    named = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, stage=gdn_steps.gpu_stage_for(1, 8192, 1, 128, 128))
    assert torch.equal(auto[0], named[0]) and torch.equal(auto[1], named[1])


def test_runs_in_the_current_stream():
    """Queued in PyTorch's current stream: on a side stream, ordered after the inputs' writes
    there and before the reads that follow, with no synchronisation in between."""
    (q, k, v, g, beta, h0), _ = cuda_problem(2, 512, 4, 128, 128, seed=11, with_h0=True)
    want = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        v2 = v * 1  # written in the side stream: the call must see it
        o, ht = gdn_steps.chunk_gated_delta_rule(q, k, v2, g, beta, initial_state=h0, output_final_state=True)
        total = o.float().sum() + ht.sum()
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(o, want[0]) and torch.equal(ht, want[1])
    assert torch.isfinite(total).item()


@pytest.mark.parametrize("B,T,H,stage", [(1, 2048, 8, "06"), (2, 4096, 16, "06"), (1, 4096, 2, "07"),
                                         (2, 777, 3, "06b")])
def test_captured_in_a_cuda_graph(B, T, H, stage):
    """A call captured in a CUDA graph and replayed on new inputs gives what an eager call on
    them gives: the same kernels on the same values (outputs poisoned before capture)."""
    (q, k, v, g, beta, h0), _ = cuda_problem(B, T, H, 128, 128, seed=13, with_h0=True)
    static = [x.clone() for x in (q, k, v, g, beta, h0)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as PyTorch asks
        gdn_steps.chunk_gated_delta_rule(*static[:5], initial_state=static[5], output_final_state=True, stage=stage)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, ht = gdn_steps.chunk_gated_delta_rule(*static[:5], initial_state=static[5], output_final_state=True,
                                                 stage=stage)
    (q2, k2, v2, g2, beta2, h02), exact = cuda_problem(B, T, H, 128, 128, seed=14, with_h0=True)
    for x, new in zip(static, (q2, k2, v2, g2, beta2, h02)):
        x.copy_(new)
    graph.replay()
    eager = gdn_steps.chunk_gated_delta_rule(q2, k2, v2, g2, beta2, initial_state=h02, output_final_state=True,
                                             stage=stage)
    torch.cuda.synchronize()
    assert torch.equal(o, eager[0]) and torch.equal(ht, eager[1])
    want_o, _ = reference(*exact[:5], h0=exact[5]) if T <= 1024 else (None, None)
    if want_o is not None:
        assert relative_error(o.cpu(), want_o) < BF16_BOUND


@pytest.mark.parametrize("B,T,H,K,V", [(1, 300, 2, 64, 64), (2, 1000, 4, 128, 128)])
def test_backward_captured_in_a_cuda_graph(B, T, H, K, V):
    """The forward and its backward through stage 11, each captured in a CUDA graph (on one side
    stream and in one memory pool, as plots/fla_backward_bench.py times them) and replayed on new
    inputs and cotangents copied into the captured ones, give the gradients an eager call on the
    new values gives, bit for bit: the library queues every kernel in PyTorch's current stream
    and waits for nothing on the host. The gradients are poisoned inside the graph, each replay."""
    (q, k, v, g, beta, h0), _ = cuda_problem(B, T, H, K, V, seed=31, with_h0=True)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, g, beta, h0)]

    def forward(inputs):
        return gdn_steps.chunk_gated_delta_rule(*inputs[:5], initial_state=inputs[5], output_final_state=True)

    def cotangents(seed, o):
        generator = torch.Generator().manual_seed(seed)
        return (torch.randn(o.shape, generator=generator).to(o.dtype).cuda(),
                torch.randn(B, H, K, V, generator=generator).cuda())

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as PyTorch asks
        o, ht = forward(leaves)
        d_o, dht = cotangents(32, o)
        torch.autograd.grad((o, ht), leaves, (d_o, dht))
    torch.cuda.current_stream().wait_stream(side)
    forward_graph, backward_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(forward_graph, stream=side):
        o, ht = forward(leaves)
    with torch.cuda.graph(backward_graph, stream=side, pool=forward_graph.pool()):
        captured = torch.autograd.grad((o, ht), leaves, (d_o, dht), retain_graph=True)
    new, _ = cuda_problem(B, T, H, K, V, seed=33, with_h0=True)
    new_d_o, new_dht = cotangents(34, o)
    with torch.no_grad():
        for x, value in zip(leaves + [d_o, dht], new + [new_d_o, new_dht]):
            x.copy_(value)
    forward_graph.replay()
    backward_graph.replay()
    fresh = [x.clone().requires_grad_() for x in new]
    eager = torch.autograd.grad(forward(fresh), fresh, (new_d_o, new_dht))
    torch.cuda.synchronize()
    for name, a, b in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), captured, eager):
        assert torch.isfinite(a.float()).all() and a.abs().max() > 0, name
        assert torch.equal(a, b), (name, (a.float() - b.float()).abs().max().item())


@pytest.mark.parametrize("backward_stage", [None, "10", "12", "13"])
def test_autograd_on_cuda_tensors(backward_stage):
    """loss.backward() through a GPU forward: the gradients of the CPU path on the same
    bf16-rounded values, from stage 11 on the GPU (the default at these sizes), 12 or 13 (within FLA's bf16 gradient
    bounds) and from stage 10 on host copies (the bf16 bound); they come back on the GPU."""
    (q, k, v, g, beta, h0), _ = cuda_problem(1, 70, 2, 64, 32, seed=17, with_h0=True)
    leaves_gpu = [x.float().requires_grad_() for x in (q, k, v, g, beta, h0)]
    leaves_cpu = [x.detach().cpu().requires_grad_() for x in leaves_gpu]
    weights = torch.randn(1, 70, 2, 32, generator=torch.Generator().manual_seed(18))
    for leaves, where in ((leaves_gpu, "cuda"), (leaves_cpu, "cpu")):
        o, ht = gdn_steps.chunk_gated_delta_rule(*leaves[:5], initial_state=leaves[5], output_final_state=True,
                                                 backward_stage=backward_stage if where == "cuda" else None)
        ((o * weights.to(where)).sum() + ht.sum()).backward()
    for name, a, b in zip(("q", "k", "v", "g", "beta", "h0"), leaves_gpu, leaves_cpu):
        assert a.grad.device.type == "cuda", name
        assert relative_error(a.grad.cpu(), b.grad) < gradient_bound(backward_stage, name), name


def test_cuda_errors_before_any_kernel():
    (q, k, v, g, beta, h0), _ = cuda_problem(1, 100, 2, 64, 64, seed=19, with_h0=True)
    base = dict(q=q, k=k, v=v, g=g, beta=beta)
    cases = [
        ("k is on cpu, q on cuda", dict(base, k=k.cpu())),
        ("of the GPU stages only 06_warp_specialized and 07_sequence_parallel run grouped value heads",
         dict(base, v=torch.cat([v, v], dim=2), g=torch.cat([g, g], dim=2), beta=torch.cat([beta, beta], dim=2), stage="06a")),
        ("cu_seqlens: of the GPU stages only 06_warp_specialized and 07_sequence_parallel run packed batches",
         dict(base, cu_seqlens=torch.tensor([0, 50, 100]), stage="06e")),
        ("cu_seqlens must be a one-dimensional tensor of N + 1 offsets on the CPU or on q's device",
         dict(base, cu_seqlens=torch.tensor([[0, 50, 100]], device="cuda"))),
        ("batch_invariant with cu_seqlens: stage 07's segments", dict(base, cu_seqlens=torch.tensor([0, 50, 100]), stage="07",
                                                                      batch_invariant=True)),
        ("chunk: the GPU stages' chunk is fixed", dict(base, chunk=16)),
        ("stage 07 cuts 100 tokens into at most 2 segments", dict(base, stage="07", segments=3)),
        ("stage='05': not one of", dict(base, stage="05")),
        ("06a_tensor_cores has no precise mode", dict(base, stage="06a", precise=True)),
        ("segments: 06_warp_specialized runs each sequence whole", dict(base, stage="06", segments=1)),
        ("06a_tensor_cores has no batch-invariant mode", dict(base, stage="06a", batch_invariant=True)),
        ("initial_state has shape [1, 2, 64, 32]", dict(base, initial_state=h0[..., :32].contiguous())),
        ("stage 11 takes K and V up to 128, got K=64 V=192", dict(base, v=torch.cat([v, v, v], dim=3), backward_stage="11")),
        ("stage 12 takes K and V up to 128, got K=64 V=192", dict(base, v=torch.cat([v, v, v], dim=3), backward_stage="12")),
        ("stage 13 takes K and V up to 128, got K=64 V=192", dict(base, v=torch.cat([v, v, v], dim=3), backward_stage="13")),
    ]
    for message, arguments in cases:
        with pytest.raises((ValueError, TypeError)) as raised:
            gdn_steps.chunk_gated_delta_rule(**arguments)
        assert message in str(raised.value), (message, str(raised.value))
    wide = torch.zeros(1, 10, 1, 256, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(RuntimeError, match="K at most 128"):
        gdn_steps.chunk_gated_delta_rule(wide, wide, torch.zeros(1, 10, 1, 64, device="cuda"),
                                         torch.zeros(1, 10, 1, device="cuda"), torch.zeros(1, 10, 1, device="cuda"),
                                         stage="06")


def test_library_refuses_a_short_workspace():
    (q, k, v, g, beta, _), _ = cuda_problem(1, 100, 2, 64, 64, seed=21)
    library = gdn_steps._cuda_library()
    call = gdn_steps._cuda_call(q, k, v, g, beta, None, 0.125, None, False)
    o, o_bf16, ht = torch.empty(v.shape, device="cuda"), torch.empty(v.shape, device="cuda"), torch.empty(1, 2, 64, 64,
                                                                                                             device="cuda")
    flag = ctypes.c_int(0)
    assert library.gdn_library_cuda_forward(b"06", ctypes.byref(call), o.data_ptr(), 16, o.data_ptr(),
                                            o_bf16.data_ptr(), ht.data_ptr(), ctypes.byref(flag)) == -1
    assert "bytes of workspace; 16 given" in library.gdn_library_cuda_error().decode()
    tensors = [torch.empty(1, device="cuda") for _ in range(9)]  # d_o, dht, o, ht, dq .. dbeta: never reached
    assert library.gdn_library_cuda_backward(b"11", ctypes.byref(call), o.data_ptr(), 16, *[x.data_ptr() for x in tensors],
                                             None, None, None, None) == -1
    assert "bytes of workspace; 16 given" in library.gdn_library_cuda_error().decode()


@pytest.mark.parametrize("B,T,H,K,V,with_h0", [(2, 200, 3, 64, 64, True), (1, 130, 2, 100, 100, False),
                                               (1, 300, 3, 128, 128, True), (1, 130, 70, 32, 64, True)])
@pytest.mark.parametrize("stage", ["11", "12", "13"])
def test_backward_in_bf16_is_the_fp32_backward_rounded(stage, B, T, H, K, V, with_h0):
    """Stage 11, 12 or 13 reading dO in bf16 and writing dq and dv in bf16 (autograd's dtypes) gives the
    fp32 call's gradients rounded once to bf16, bit for bit, and every other output the same bits:
    dO given in fp32 holds the same bf16 values, and each gradient is the same fp32 sum rounded.
    The shapes take both copy paths of dO in bf16 (by cp.async where V is a multiple of 8, else
    element by element: V = 100) and both widths of the chains (70 heads: 64-column blocks)."""
    (q, k, v, g, beta, h0), _ = cuda_problem(B, T, H, K, V, seed=400 + T, with_h0=with_h0)
    generator = torch.Generator().manual_seed(500 + T)
    d_o = torch.randn(B, T, H, V, generator=generator).to(torch.bfloat16).cuda()
    dht = torch.randn(B, H, K, V, generator=generator).cuda()
    scale = 1.0 / K ** 0.5
    fp32 = gdn_steps._cuda_backward(stage, q, k, v, g, beta, h0, scale, d_o.float(), dht)
    bf16 = gdn_steps._cuda_backward(stage, q, k, v, g, beta, h0, scale, d_o, dht, bf16_gradients=True)
    torch.cuda.synchronize()
    for name, a, b in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), fp32, bf16):
        if name == "dh0" and not with_h0:
            assert a is None and b is None
            continue
        want = a.to(torch.bfloat16) if name in ("dq", "dv") else a
        assert b.dtype == want.dtype and b.shape == want.shape, name
        assert torch.isfinite(b.float()).all() and a.abs().max() > 0, name
        assert torch.equal(b, want), (name, (b.float() - want.float()).abs().max().item())
