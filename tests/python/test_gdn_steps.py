"""test_gdn_steps.py -- the Python package against an fp64 recurrence, in the shape of FLA's
delta-rule tests: a grid of B, T, H, K, V with odd T and K in {64, 100, 128}, scale, initial
state, q and k normalised in the kernel, grouped value heads and packed batches; gradients by
torch.autograd.gradcheck in double and against autograd through the fp64 recurrence; every
bad argument raising before anything runs.

    make test-python     (pip install . into build/python/, then this suite)
"""
import math

import pytest
import torch

import gdn_steps

# Relative L2 error bounds, as the C suites use them (common/tolerances.h): a float32 stage
# against fp64 1e-4, a double build 1e-10; gradients in float32 1e-4 (GDN_TOLERANCE_BACKWARD_VS_ORACLE).
FLOAT_BOUND, DOUBLE_BOUND = 1e-4, 1e-10


def relative_error(got, want):
    got, want = got.detach().double(), want.detach().double()
    assert bool(torch.isfinite(got).all()), "NaN or Inf in the result"
    return float((got - want).norm() / want.norm())


def problem(B, T, H, K, V, HV=None, dtype=torch.float32, seed=0, with_h0=False, sequences=None):
    """Fresh inputs as the binaries draw them in kind: unit keys, log-sigmoid gates, sigmoid beta."""
    generator = torch.Generator().manual_seed(seed)
    HV = HV or H
    N = B if sequences is None else sequences

    def normal(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    q, v = normal(B, T, H, K), normal(B, T, HV, V)
    k = torch.nn.functional.normalize(normal(B, T, H, K), dim=-1)
    g = torch.nn.functional.logsigmoid(normal(B, T, HV))
    beta = torch.sigmoid(normal(B, T, HV))
    h0 = normal(N, HV, K, V) if with_h0 else None
    cast = [x.to(dtype) for x in (q, k, v, g, beta)]
    return cast + [None if h0 is None else h0.to(dtype)]


def reference(q, k, v, g, beta, scale=None, h0=None, cu_seqlens=None, l2norm=False):
    """The recurrence of docs/contract.md section 1 in float64, token by token, every head at once."""
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    if l2norm:
        q, k = (x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6) for x in (q, k))
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    scale = 1 / math.sqrt(K) if scale is None else scale
    q, k = q.repeat_interleave(HV // H, dim=2), k.repeat_interleave(HV // H, dim=2)
    if cu_seqlens is None:
        spans = [(b, 0, T) for b in range(B)]
    else:
        bounds = cu_seqlens.tolist()
        spans = [(0, bounds[n], bounds[n + 1]) for n in range(len(bounds) - 1)]
    o = torch.zeros(B, T, HV, V, dtype=torch.float64)
    ht = torch.zeros(len(spans), HV, K, V, dtype=torch.float64)
    for n, (b, start, end) in enumerate(spans):
        S = h0[n].double().clone() if h0 is not None else torch.zeros(HV, K, V, dtype=torch.float64)
        for t in range(start, end):
            S = S * torch.exp(g[b, t])[:, None, None]
            u = beta[b, t][:, None] * (v[b, t] - torch.einsum("hkv,hk->hv", S, k[b, t]))
            S = S + torch.einsum("hk,hv->hkv", k[b, t], u)
            o[b, t] = scale * torch.einsum("hkv,hk->hv", S, q[b, t])
        ht[n] = S
    return o, ht


# ---- forward ----

GRID = [(1, 63, 1, 64, 64), (2, 100, 3, 100, 64), (1, 257, 2, 128, 128), (2, 1, 4, 64, 32), (3, 65, 2, 100, 100)]


@pytest.mark.parametrize("B,T,H,K,V", GRID)
@pytest.mark.parametrize("scale", [None, 0.1])
@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("l2norm", [False, True])
def test_forward_against_fp64(B, T, H, K, V, scale, with_h0, l2norm):
    q, k, v, g, beta, h0 = problem(B, T, H, K, V, seed=hash((B, T, H, K, V, scale, with_h0, l2norm)) % 10000,
                                   with_h0=with_h0)
    if l2norm:
        q, k = q * 3, k * 0.5  # not unit length: the kernel's normalisation has work to do
    o, ht = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=h0,
                                             output_final_state=True, use_qk_l2norm_in_kernel=l2norm)
    want_o, want_ht = reference(q, k, v, g, beta, scale, h0, l2norm=l2norm)
    assert o.dtype == torch.float32 and o.shape == (B, T, H, V) and ht.shape == (B, H, K, V)
    assert relative_error(o, want_o) <= FLOAT_BOUND
    assert relative_error(ht, want_ht) <= FLOAT_BOUND


@pytest.mark.parametrize("stage", gdn_steps.FORWARD_STAGES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("packed", [False, True])
def test_every_stage(stage, dtype, packed):
    cu_seqlens = torch.tensor([0, 1, 64, 65, 154]) if packed else None
    B, T = (1, 154) if packed else (2, 77)
    q, k, v, g, beta, h0 = problem(B, T, 2, 32, 24, HV=4, dtype=dtype, seed=11, with_h0=True,
                                   sequences=4 if packed else None)
    o, ht = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                             cu_seqlens=cu_seqlens, stage=stage, chunk=16, segments=5)
    want_o, want_ht = reference(q, k, v, g, beta, h0=h0, cu_seqlens=cu_seqlens)
    bound = DOUBLE_BOUND if dtype == torch.float64 else FLOAT_BOUND
    assert o.dtype == dtype
    assert relative_error(o, want_o) <= bound and relative_error(ht, want_ht) <= bound


@pytest.mark.parametrize("ratio", [1, 2, 4])
@pytest.mark.parametrize("lengths", [[1, 63, 64, 65], [300, 1, 7, 129, 20]])
@pytest.mark.parametrize("offset_dtype", [torch.int32, torch.int64])
def test_grouped_and_packed(ratio, lengths, offset_dtype):
    T = sum(lengths)
    cu_seqlens = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=offset_dtype)
    q, k, v, g, beta, h0 = problem(1, T, 2, 64, 32, HV=2 * ratio, seed=ratio, with_h0=True, sequences=len(lengths))
    o, ht = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                             cu_seqlens=cu_seqlens)
    want_o, want_ht = reference(q, k, v, g, beta, h0=h0, cu_seqlens=cu_seqlens)
    assert ht.shape == (len(lengths), 2 * ratio, 64, 32)
    assert relative_error(o, want_o) <= FLOAT_BOUND and relative_error(ht, want_ht) <= FLOAT_BOUND


def test_bf16_inputs_give_bf16_output():
    q, k, v, g, beta, _ = problem(1, 100, 2, 64, 64, dtype=torch.bfloat16, seed=5)
    o, final = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta)
    want_o, _ = reference(q, k, v, g, beta)
    assert o.dtype == torch.bfloat16 and final is None
    assert relative_error(o, want_o) <= 5e-3  # o rounded to bf16: 2^-9 relative a value


# ---- backward ----

@pytest.mark.parametrize("case", ["plain", "h0", "grouped", "packed", "l2norm", "loop"])
def test_gradcheck_double(case):
    lengths = [3, 1, 4]
    B, T, H, HV = (1, 8, 2, 4) if case in ("grouped", "packed") else (2, 7, 2, 2)
    if case == "packed":
        T = sum(lengths)
    q, k, v, g, beta, h0 = problem(B, T, H, 4, 3, HV=HV, dtype=torch.float64, seed=21,
                                   with_h0=case in ("h0", "packed", "grouped"),
                                   sequences=len(lengths) if case == "packed" else None)
    cu_seqlens = torch.tensor([0, 3, 4, 8]) if case == "packed" else None
    inputs = [x.requires_grad_() for x in (q, k, v, g, beta) + ((h0,) if h0 is not None else ())]

    def run(*tensors):
        state = tensors[5] if len(tensors) > 5 else None
        return gdn_steps.chunk_gated_delta_rule(*tensors[:5], initial_state=state, output_final_state=True,
                                                cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=case == "l2norm",
                                                backward_stage="09" if case == "loop" else "10", chunk=2)

    assert torch.autograd.gradcheck(run, inputs, eps=1e-6, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("case", ["plain", "grouped", "packed"])
def test_gradients_against_autograd_of_fp64(case):
    """In float32, the forward with gradients on (the path that repeats keys and splits a packed
    batch) and every gradient, against autograd through the fp64 recurrence."""
    B, T, H, HV = {"plain": (2, 70, 2, 2), "grouped": (2, 70, 2, 6), "packed": (1, 70, 2, 4)}[case]
    cu_seqlens = torch.tensor([0, 1, 33, 70]) if case == "packed" else None
    N = 3 if case == "packed" else B
    q, k, v, g, beta, h0 = problem(B, T, H, 32, 16, HV=HV, seed=31, with_h0=True, sequences=N)
    inputs = [x.requires_grad_() for x in (q, k, v, g, beta, h0)]
    d_o, dht = torch.randn(B, T, HV, 16, dtype=torch.float64), torch.randn(N, HV, 32, 16, dtype=torch.float64)
    o, ht = gdn_steps.chunk_gated_delta_rule(*inputs[:5], initial_state=inputs[5], output_final_state=True,
                                             cu_seqlens=cu_seqlens)
    ((o.double() * d_o).sum() + (ht.double() * dht).sum()).backward()
    ours = [x.grad.clone() for x in inputs]
    wanted_inputs = [x.detach().double().requires_grad_() for x in inputs]
    want_o, want_ht = reference(*wanted_inputs[:5], h0=wanted_inputs[5], cu_seqlens=cu_seqlens)
    assert relative_error(o, want_o) <= FLOAT_BOUND and relative_error(ht, want_ht) <= FLOAT_BOUND
    ((want_o * d_o).sum() + (want_ht * dht).sum()).backward()
    for name, got, want in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), ours, (x.grad for x in wanted_inputs)):
        assert relative_error(got, want) <= FLOAT_BOUND, name


def test_docs_example_runs():
    """docs/python.md's example, as a reader pastes it."""
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "python.md")
    text = open(path).read()
    block = text.split("<!-- python-example -->\n```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, "docs/python.md", "exec"), {})


# ---- bad arguments: each raises, naming what is wrong ----

def bad_cases():
    q, k, v, g, beta, h0 = problem(1, 10, 2, 8, 4, seed=41, with_h0=True)
    base = dict(q=q, k=k, v=v, g=g, beta=beta)
    return [
        ("q must be a floating-point tensor", dict(base, q=q.to(torch.int32))),
        ("k has shape [1, 10, 2, 7]", dict(base, k=k[..., :7].contiguous())),
        ("v has 3 heads, not a multiple of q's 2", dict(base, v=torch.randn(1, 10, 3, 4))),
        ("g has shape [1, 10, 4]", dict(base, g=torch.zeros(1, 10, 4) - 1)),
        ("beta is not contiguous", dict(base, beta=beta.transpose(1, 2).contiguous().transpose(1, 2))),
        ("q is on meta", dict(base, q=torch.empty(1, 10, 2, 8, device="meta"))),
        ("initial_state has shape [2, 2, 8, 4]", dict(base, initial_state=torch.zeros(2, 2, 8, 4))),
        ("cu_seqlens must be int32 or int64", dict(base, cu_seqlens=torch.tensor([0.0, 10.0]))),
        ("cu_seqlens must rise from 0 to T=10", dict(base, cu_seqlens=torch.tensor([0, 5, 5, 10]))),
        ("cu_seqlens must rise from 0 to T=10", dict(base, cu_seqlens=torch.tensor([0, 9]))),
        ("q's B must be 1, got 2", dict(q=torch.cat([q, q]), k=torch.cat([k, k]), v=torch.cat([v, v]),
                                        g=torch.cat([g, g]), beta=torch.cat([beta, beta]),
                                        cu_seqlens=torch.tensor([0, 4, 10]))),
        ("g must be <= 0", dict(base, g=g.abs() + 0.5)),
        ("beta must lie in [0, 1]", dict(base, beta=beta + 1)),
        ("v holds NaN or Inf", dict(base, v=torch.where(v > 1, torch.tensor(float("nan")), v))),
        ("stage='06'", dict(base, stage="06")),
        ("backward_stage='05'", dict(base, backward_stage="05")),
        ("backward_stage='11' runs on the GPU: it needs CUDA tensors", dict(base, backward_stage="11")),
        ("backward_stage='12' runs on the GPU: it needs CUDA tensors", dict(base, backward_stage="12")),
        ("backward_stage='13' runs on the GPU: it needs CUDA tensors", dict(base, backward_stage="13")),
        ("precise is an option of the GPU stages", dict(base, precise=True)),
        ("chunk must be an integer from 1 to 128", dict(base, chunk=0)),
        ("chunk must be an integer from 1 to 128", dict(base, chunk=True)),
        ("segments must be an integer from 1 to T=10", dict(base, segments=2 ** 63)),
        ("cu_seqlens must be a one-dimensional tensor of N + 1 offsets on the CPU", dict(base, cu_seqlens=torch.tensor([[0, 10]]))),
        ("cu_seqlens_cpu is a CPU copy of cu_seqlens: give cu_seqlens too", dict(base, cu_seqlens_cpu=torch.tensor([0, 10]))),
        ("cu_seqlens_cpu differs from cu_seqlens", dict(base, cu_seqlens=torch.tensor([0, 4, 10]),
                                                        cu_seqlens_cpu=torch.tensor([0, 5, 10]))),
        ("cu_seqlens_cpu must be an int32 or int64 CPU tensor shaped as cu_seqlens",
         dict(base, cu_seqlens=torch.tensor([0, 4, 10]), cu_seqlens_cpu=torch.tensor([0, 10]))),
        ("scale must be positive and finite", dict(base, scale=-1.0)),
        ("k must be a torch.Tensor", dict(base, k=[1, 2, 3])),
    ]


@pytest.mark.parametrize("walks,K,V,sm_count,want", [(128, 128, 128, 132, "13"), (96, 128, 128, 132, "13"),
                                                     (92, 128, 128, 132, "11"), (32, 128, 128, 132, "11"),
                                                     (256, 64, 64, 132, "11"), (256, 128, 64, 132, "11"),
                                                     (100, 128, 128, 144, "11"), (101, 128, 128, 144, "13")])
def test_gpu_backward_stage_by_shape(walks, K, V, sm_count, want):
    """The default GPU backward: 13 at K = V = 128 where the walks give 70 % of the SMs a block,
    else 11 (a rule of sizes alone: no GPU needed to check it)."""
    assert gdn_steps.gpu_backward_stage_for(walks, K, V, sm_count) == want


def test_library_refuses_bad_calls():
    """The C entry points check what the package already checks, for other callers."""
    import ctypes
    q, k, v, g, beta, _ = problem(1, 10, 2, 8, 4, seed=43)
    library = gdn_steps._library(torch.float32)
    o, ht = torch.empty_like(v), torch.empty(1, 2, 8, 4)
    offsets = torch.tensor([0, 4, 10])
    cases = [("cu_seqlens: -2 sequences", dict(offsets=offsets.data_ptr(), sequences=-2)),
             ("sizes must be positive", dict(B=0)),
             ("sizes overflow", dict(HV=2 ** 40, V=2 ** 40)),
             ("no forward stage '07'", dict()),
             ("05_wy_chunked has no precise mode", dict(precise=1))]
    for message, change in cases:
        fields = dict(B=1, T=10, H=2, HV=2, K=8, V=4, scale=0.3, q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
                      g=g.data_ptr(), beta=beta.data_ptr(), h0=None, offsets=None, sequences=0, chunk=0,
                      segments=0, threads=1)
        fields.update(change)
        stage = b"07" if "07" in message else b"05"
        assert library.gdn_library_forward(stage, ctypes.byref(gdn_steps._Call(**fields)), o.data_ptr(),
                                           ht.data_ptr()) == -1
        assert message in library.gdn_library_error().decode()


@pytest.mark.parametrize("message,arguments", bad_cases(), ids=[case[0] for case in bad_cases()])
def test_bad_arguments_raise(message, arguments):
    with pytest.raises((TypeError, ValueError)) as raised:
        gdn_steps.chunk_gated_delta_rule(**arguments)
    assert message in str(raised.value)
