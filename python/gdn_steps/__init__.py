"""gdn_steps: the stages of gdn-steps called from PyTorch, with FLA's signature.

    o, final_state = gdn_steps.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0,
                                                      output_final_state=True)

is flash-linear-attention's chunk_gated_delta_rule: the same arguments, shapes and outputs
(docs/python.md). q, k [B, T, H, K]; v [B, T, HV, V]; g (log decay, <= 0) and beta [B, T, HV];
initial_state [N, HV, K, V]; cu_seqlens (int32 or int64, N + 1 offsets, B = 1) for a packed
batch. Value head h reads key head h / (HV / H).

CPU tensors run a CPU stage of the course through the native library (python/library.c):
stage "05" (the chunked WY form) unless stage= names another of 01-05. float64 tensors run
the double build; other floating dtypes are computed in float32 and o is returned in v's dtype.

CUDA tensors run a GPU stage (python/library_cuda.cu) in PyTorch's current stream, in place:
no host copies, no synchronisation, so the call can be captured in a CUDA graph. The stage is
picked by shape (07 where it cuts sequences into segments, else 06) unless stage= names one of
06a .. 06e, 06, 07. They read q, k, v in bf16 (converted first where given in another dtype) and
g, beta, initial_state in fp32; o comes back in v's dtype, final_state in fp32, as FLA's. A
packed batch runs on 06 and 07 as rows padded to its longest sequence; its offsets are needed
on the host and on the GPU (cu_seqlens on q's device with cu_seqlens_cpu: no copy, no wait).

loss.backward() runs a backward stage: for CPU tensors stage 10 (or 09, backward_stage="09"); for
CUDA tensors stage 11 or 13 by shape (gpu_backward_stage_for), or one named, on the GPU, in PyTorch's current stream, on
the same bf16 q, k, v (V and K at most 128; else, or with backward_stage="10" or "09", stage 10
or 09 on host copies in float32, which synchronises). Every argument is checked before anything
runs: a wrong dtype, shape, device or layout raises, naming it. The values (finite, g <= 0, beta in
[0, 1]) are checked for CPU tensors only: checking CUDA tensors would wait for the GPU.
"""
import ctypes
import math
import os
import threading

import torch

__all__ = ["chunk_gated_delta_rule", "gpu_stage_for", "gpu_backward_stage_for", "FORWARD_STAGES", "GPU_STAGES",
           "BACKWARD_STAGES", "GPU_BACKWARD_STAGES"]

FORWARD_STAGES = ("01_naive_loop", "02_affine", "03_parallel_scan", "04_two_phase_scan", "05_wy_chunked")
GPU_STAGES = ("06a_tensor_cores", "06b_producer_consumer", "06c_bulk_copies", "06d_warp_chain",
              "06e_output_warps", "06_warp_specialized", "07_sequence_parallel")
BACKWARD_STAGES = ("09_backward_loop", "10_backward_chunked")
GPU_BACKWARD_STAGES = ("11_backward_tensor_cores", "12_backward_fused", "13_backward_states")
GPU_BACKWARD_WIDTH = 128  # stages 11, 12 and 13 keep K- and V-wide tiles in shared memory: K and V at most this
GPU_CHUNK = 64  # the GPU stages' tokens per chunk: stage 07 cuts a sequence into at most T / 64 segments

# Tests set this: outputs of CUDA calls are filled with NaN before the kernels run, so that a
# value a kernel forgot to write cannot pass for a result (a memset a call: off for speed).
poison_cuda_outputs = False


class _Call(ctypes.Structure):
    """gdn_library_call of python/library.c, field by field."""
    _fields_ = [(name, ctypes.c_int64) for name in ("B", "T", "H", "HV", "K", "V")] + \
               [("scale", ctypes.c_double)] + \
               [(name, ctypes.c_void_p) for name in ("q", "k", "v", "g", "beta", "h0", "offsets")] + \
               [(name, ctypes.c_int64) for name in ("sequences", "chunk", "segments", "threads", "precise", "batch_invariant",
                                                    "device")] + \
               [(name, ctypes.c_void_p) for name in ("stream", "device_offsets")]


_libraries = {}
# The library keeps its last error in one place for the whole process: one call at a time, and
# the message read before the next call starts.
_native_lock = threading.Lock()


def _library(dtype):
    """The native library for this compute dtype: the double build for float64."""
    precision = "double" if dtype == torch.float64 else "float"
    if precision not in _libraries:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libgdn_steps_%s.so" % precision)
        if not os.path.exists(path):
            raise ImportError("gdn_steps: %s is missing; install the package with `pip install .` at the "
                              "repository root (or run `make lib`)" % path)
        library = ctypes.CDLL(path)
        library.gdn_library_error.restype = ctypes.c_char_p
        library.gdn_library_forward.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Call)] + [ctypes.c_void_p] * 2
        library.gdn_library_backward.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Call)] + [ctypes.c_void_p] * 10
        size = library.gdn_library_real_size()
        if size != (8 if precision == "double" else 4):
            raise ImportError("gdn_steps: %s computes in %d-byte reals" % (path, size))
        _libraries[precision] = library
    return _libraries[precision]


def _cuda_library():
    """The GPU stages' library, built where nvcc was found."""
    if "cuda" not in _libraries:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libgdn_steps_cuda.so")
        if not os.path.exists(path):
            raise RuntimeError("gdn_steps: %s is missing: the package was built without nvcc, so it runs CPU "
                               "tensors only (install the CUDA toolkit, then `pip install .` again)" % path)
        library = ctypes.CDLL(path)
        library.gdn_library_cuda_error.restype = ctypes.c_char_p
        library.gdn_library_cuda_pick.argtypes = [ctypes.POINTER(_Call), ctypes.c_char_p, ctypes.c_int64]
        library.gdn_library_cuda_workspace.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Call),
                                                       ctypes.POINTER(ctypes.c_int64)]
        library.gdn_library_cuda_forward.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Call), ctypes.c_void_p,
                                                     ctypes.c_int64] + [ctypes.c_void_p] * 3 + \
                                                    [ctypes.POINTER(ctypes.c_int)]
        library.gdn_library_cuda_backward_workspace.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Call),
                                                                ctypes.POINTER(ctypes.c_int64)]
        library.gdn_library_cuda_backward.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Call), ctypes.c_void_p,
                                                      ctypes.c_int64] + [ctypes.c_void_p] * 13
        _libraries["cuda"] = library
    return _libraries["cuda"]


def _stage_name(stage, names, what):
    for name in names:
        if stage == name or name.startswith("%s_" % stage):
            return name
    raise ValueError("%s=%r: not one of %s (or their numbers)" % (what, stage, ", ".join(names)))


def _pointer(tensor):
    return None if tensor is None else tensor.data_ptr()


def _check(name, tensor, shape, device=None, floating=True):
    """One argument: a tensor on q's device (the CPU or a CUDA device), contiguous, of this
    shape (None: any size there)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, got %s" % (name, type(tensor).__name__))
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError("%s is on %s; gdn_steps runs CPU and CUDA tensors" % (name, tensor.device))
    if device is not None and tensor.device != device:
        raise ValueError("%s is on %s, q on %s: every tensor must be on one device" % (name, tensor.device, device))
    if floating and not tensor.dtype.is_floating_point:
        raise TypeError("%s must be a floating-point tensor, got %s" % (name, tensor.dtype))
    if tensor.dim() != len(shape) or any(want is not None and got != want for got, want in zip(tensor.shape, shape)):
        described = ", ".join("?" if want is None else str(want) for want in shape)
        raise ValueError("%s has shape %s; expected [%s]" % (name, list(tensor.shape), described))
    if not tensor.is_contiguous():
        raise ValueError("%s is not contiguous (row-major); pass %s.contiguous()" % (name, name))


def _check_values(q, k, v, g, beta, h0):
    """What the stages assume of the values: finite, g <= 0, 0 <= beta <= 1 (docs/contract.md)."""
    for name, tensor in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("initial_state", h0)):
        if tensor is not None and not bool(torch.isfinite(tensor).all()):
            raise ValueError("%s holds NaN or Inf" % name)
    if bool((g > 0).any()):
        raise ValueError("g must be <= 0 (a log decay); its largest value is %g" % float(g.max()))
    if bool((beta < 0).any()) or bool((beta > 1).any()):
        raise ValueError("beta must lie in [0, 1]; it spans [%g, %g]" % (float(beta.min()), float(beta.max())))


def _call(q, k, v, g, beta, h0, scale, offsets, chunk, segments):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    call = _Call(B=B, T=T, H=H, HV=HV, K=K, V=V, scale=scale, q=_pointer(q), k=_pointer(k), v=_pointer(v),
                 g=_pointer(g), beta=_pointer(beta), h0=_pointer(h0), offsets=_pointer(offsets),
                 sequences=0 if offsets is None else offsets.numel() - 1, chunk=chunk or 0, segments=segments or 0,
                 threads=torch.get_num_threads())
    return call


def _forward(stage, q, k, v, g, beta, h0, scale, offsets, chunk, segments):
    """o and ht from the native forward stage; every tensor already of the compute dtype."""
    N = q.shape[0] if offsets is None else offsets.numel() - 1
    o = torch.empty(v.shape, dtype=q.dtype)
    ht = torch.empty((N, v.shape[2], q.shape[3], v.shape[3]), dtype=q.dtype)
    call = _call(q, k, v, g, beta, h0, scale, offsets, chunk, segments)
    library = _library(q.dtype)
    with _native_lock:
        if library.gdn_library_forward(stage.encode(), ctypes.byref(call), o.data_ptr(), ht.data_ptr()) != 0:
            raise RuntimeError("gdn_steps: %s" % library.gdn_library_error().decode())
    return o, ht


class _GatedDeltaRule(torch.autograd.Function):
    """o, ht of one plain-layout problem (HV = H, B rows); backward through a backward stage."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, h0, scale, stage, backward_stage, chunk, segments):
        o, ht = _forward(stage, q, k, v, g, beta, h0, scale, None, chunk, segments)
        ctx.save_for_backward(q, k, v, g, beta, h0)
        ctx.settings = (scale, backward_stage, chunk)
        return o, ht

    @staticmethod
    def backward(ctx, d_o, dht):
        q, k, v, g, beta, h0 = ctx.saved_tensors
        scale, backward_stage, chunk = ctx.settings
        d_o = torch.zeros_like(v) if d_o is None else d_o.contiguous()
        dht = torch.zeros((q.shape[0], v.shape[2], q.shape[3], v.shape[3]), dtype=q.dtype) if dht is None \
            else dht.contiguous()
        outputs = [torch.empty_like(x) for x in (v, q, q, v, g, beta)]  # o, dq, dk, dv, dg, dbeta
        o, dq, dk, dv, dg, dbeta = outputs
        ht = torch.empty_like(dht)
        dh0 = None if h0 is None else torch.empty_like(h0)
        call = _call(q, k, v, g, beta, h0, scale, None, chunk, None)
        library = _library(q.dtype)
        with _native_lock:
            status = library.gdn_library_backward(backward_stage.encode(), ctypes.byref(call), d_o.data_ptr(),
                                                  dht.data_ptr(), o.data_ptr(), ht.data_ptr(), dq.data_ptr(),
                                                  dk.data_ptr(), dv.data_ptr(), dg.data_ptr(), dbeta.data_ptr(),
                                                  _pointer(dh0))
            if status != 0:
                raise RuntimeError("gdn_steps: %s" % library.gdn_library_error().decode())
        return dq, dk, dv, dg, dbeta, dh0, None, None, None, None, None


def _cuda_call(q, k, v, g, beta, h0, scale, segments, precise, batch_invariant=False, packed=None):
    """packed: None, or a packed batch's offsets as (int64 on the host, int64 on q's device)"""
    B, T, H, K = q.shape
    host, device = packed if packed is not None else (None, None)
    return _Call(B=B, T=T, H=H, HV=v.shape[2], K=K, V=v.shape[3], scale=scale, q=q.data_ptr(), k=k.data_ptr(),
                 v=v.data_ptr(), g=g.data_ptr(), beta=beta.data_ptr(), h0=_pointer(h0), offsets=_pointer(host),
                 sequences=0 if host is None else host.numel() - 1, chunk=0, segments=segments or 0, threads=0,
                 precise=int(precise), batch_invariant=int(batch_invariant), device=q.device.index,
                 stream=torch.cuda.current_stream(q.device).cuda_stream, device_offsets=_pointer(device))


# What the library answered for a call's sizes and options (the stage picked, the workspace's
# bytes): the same every time, so a warm call asks once, for the checks of its forward entry.
_cuda_answers = {}


def _cuda_key(what, stage, call, longest=0):
    """longest: a packed batch's longest sequence (with the sequences, what its padded rows depend on)"""
    return (what, stage, longest) + tuple(getattr(call, f) for f in ("B", "T", "H", "HV", "K", "V", "sequences", "segments",
                                                                     "precise", "batch_invariant", "device"))


def _cuda_stage(stage, call, longest=0):
    """The GPU stage's full name: stage= as given, else picked by shape (07 or 06)."""
    if stage is not None:
        return _stage_name(stage, GPU_STAGES, "stage")
    key = _cuda_key("pick", None, call, longest)
    if key not in _cuda_answers:
        _cuda_answers[key] = _cuda_pick(call)
    return _cuda_answers[key]


def _cuda_pick(call):
    library, name = _cuda_library(), ctypes.create_string_buffer(64)
    # the library makes the tensors' device current; PyTorch's current device is put back after
    with _native_lock, torch.cuda.device(call.device):
        if library.gdn_library_cuda_pick(ctypes.byref(call), name, len(name)) != 0:
            raise ValueError("gdn_steps: %s" % library.gdn_library_cuda_error().decode())
    return name.value.decode()


def gpu_stage_for(B, T, H, K, V, device=None, HV=None):
    """The GPU stage chunk_gated_delta_rule picks for CUDA tensors of these sizes (HV value
    heads, H by default): "07_sequence_parallel" where stage 07's model of the GPU cuts the
    sequences into segments, else "06_warp_specialized". The pick reads the sizes and the GPU's
    SM count only. For a packed batch, pass its N sequences and the longest one's tokens: it runs as
    N rows that long."""
    device = torch.device("cuda") if device is None else torch.device(device)
    placeholder = torch.zeros(1, device=device)  # the call's tensors: never read by the pick
    address = placeholder.data_ptr()
    call = _Call(B=B, T=T, H=H, HV=HV or H, K=K, V=V, scale=1.0, q=address, k=address, v=address, g=address,
                 beta=address, device=placeholder.device.index)
    return _cuda_stage(None, call)


def gpu_backward_stage_for(walks, K, V, sm_count):
    """The GPU backward stage loss.backward() runs by default on CUDA tensors: "13" at K = V = 128
    where the walks (sequences x value heads of one backward call) give at least 70 % of the
    sm_count SMs a block, else "11". Stage 13's walk is one block a (sequence, head) and wins
    where those fill the card (1.36x stage 11 at 128 heads, 1.03x at 96, on 132 SMs); stage 11's
    chains cut each head's state by columns over more blocks and win where they do not (2.3x 13
    at 32 heads): docs/13, "Measured". K or V under 128 keeps 11 (13 is not measured there
    against it at many heads)."""
    return "13" if K == V == GPU_BACKWARD_WIDTH and walks * 100 >= 70 * sm_count else "11"


def _longest(packed):
    """a packed batch's longest sequence (0 for none), from its offsets on the host"""
    return 0 if packed is None else int((packed[0][1:] - packed[0][:-1]).max())


def _cuda_forward(stage, q, k, v, g, beta, h0, scale, segments, precise, batch_invariant=False, packed=None):
    """o (in bf16 or fp32, as the stage writes it) and ht from a GPU stage, queued in PyTorch's
    current stream; q, k, v bf16, g, beta, h0 fp32, all contiguous on one CUDA device; packed: a
    packed batch's offsets (_cuda_call)."""
    call = _cuda_call(q, k, v, g, beta, h0, scale, segments, precise, batch_invariant, packed)
    library, name = _cuda_library(), stage.encode()
    key = _cuda_key("workspace", stage, call, _longest(packed))
    if key not in _cuda_answers:
        answer = ctypes.c_int64(0)
        with _native_lock, torch.cuda.device(q.device):  # every check before any kernel: a bad call raises here
            if library.gdn_library_cuda_workspace(name, ctypes.byref(call), ctypes.byref(answer)) != 0:
                raise ValueError("gdn_steps: %s" % library.gdn_library_cuda_error().decode())
        _cuda_answers[key] = answer.value
    workspace_bytes = _cuda_answers[key]
    # from PyTorch's caching allocator: no cudaMalloc on a warm path, and a graph's own pool in capture
    workspace = torch.empty(max(workspace_bytes, 1), dtype=torch.uint8, device=q.device)
    o_bf16 = torch.empty(v.shape, dtype=torch.bfloat16, device=q.device)
    o = torch.empty(v.shape, dtype=torch.float32, device=q.device)
    N = q.shape[0] if packed is None else packed[0].numel() - 1
    ht = torch.empty((N, v.shape[2], q.shape[3], v.shape[3]), dtype=torch.float32, device=q.device)
    if poison_cuda_outputs:
        for x in (o_bf16, o, ht):
            x.fill_(float("nan"))
    o_in_bf16 = ctypes.c_int(0)
    with _native_lock, torch.cuda.device(q.device):
        if library.gdn_library_cuda_forward(name, ctypes.byref(call), workspace.data_ptr(), workspace_bytes,
                                            o.data_ptr(), o_bf16.data_ptr(), ht.data_ptr(),
                                            ctypes.byref(o_in_bf16)) != 0:
            raise RuntimeError("gdn_steps: %s" % library.gdn_library_cuda_error().decode())
    return (o_bf16 if o_in_bf16.value else o), ht


def _cuda_backward(stage, q, k, v, g, beta, h0, scale, d_o, dht, bf16_gradients=False):
    """The gradients dq, dk, dv, dg, dbeta, dh0 (fp32, dh0 None without h0; dq and dv in bf16
    with bf16_gradients) from the GPU backward stage, queued in PyTorch's current stream: q, k, v
    bf16 with one key head a value head, g, beta, h0 and dht fp32, d_o fp32 or bf16 (read as it
    is), B rows, all contiguous on one CUDA device."""
    call = _cuda_call(q, k, v, g, beta, h0, scale, None, False)
    library, name = _cuda_library(), stage.encode()
    key = _cuda_key("backward workspace", stage, call)
    if key not in _cuda_answers:
        answer = ctypes.c_int64(0)
        with _native_lock, torch.cuda.device(q.device):
            if library.gdn_library_cuda_backward_workspace(name, ctypes.byref(call), ctypes.byref(answer)) != 0:
                raise ValueError("gdn_steps: %s" % library.gdn_library_cuda_error().decode())
        _cuda_answers[key] = answer.value
    workspace_bytes = _cuda_answers[key]
    workspace = torch.empty(max(workspace_bytes, 1), dtype=torch.uint8, device=q.device)
    like = (dht, k, g, beta)  # ht (recomputed, not returned; o is not made), then the fp32 gradients
    ht, dk, dg, dbeta = (torch.empty(x.shape, dtype=torch.float32, device=q.device) for x in like)
    gradient_dtype = torch.bfloat16 if bf16_gradients else torch.float32
    dq, dv = (torch.empty(x.shape, dtype=gradient_dtype, device=q.device) for x in (q, v))
    dh0 = None if h0 is None else torch.empty_like(h0)
    if poison_cuda_outputs:
        for x in (ht, dq, dk, dv, dg, dbeta, dh0):
            if x is not None:
                x.fill_(float("nan"))
    in_bf16 = d_o.dtype == torch.bfloat16
    fp32_or_none = (lambda x: None) if bf16_gradients else _pointer
    bf16_or_none = _pointer if bf16_gradients else (lambda x: None)
    with _native_lock, torch.cuda.device(q.device):
        if library.gdn_library_cuda_backward(name, ctypes.byref(call), workspace.data_ptr(), workspace_bytes,
                                             None if in_bf16 else d_o.data_ptr(), dht.data_ptr(), None,
                                             ht.data_ptr(), fp32_or_none(dq), dk.data_ptr(), fp32_or_none(dv),
                                             dg.data_ptr(), dbeta.data_ptr(), _pointer(dh0),
                                             d_o.data_ptr() if in_bf16 else None, bf16_or_none(dq), bf16_or_none(dv)) != 0:
            raise RuntimeError("gdn_steps: %s" % library.gdn_library_cuda_error().decode())
    return dq, dk, dv, dg, dbeta, dh0


class _GatedDeltaRuleCuda(torch.autograd.Function):
    """o, ht of CUDA tensors from a GPU stage; backward through a GPU backward stage (11, 12 or
    13) on the same tensors, or a CPU backward stage (09, 10) on host copies in float32."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, h0, scale, stage, backward_stage, segments, precise, batch_invariant):
        o, ht = _cuda_forward(stage, q, k, v, g, beta, h0, scale, segments, precise, batch_invariant)
        ctx.save_for_backward(q, k, v, g, beta, h0)
        ctx.settings = (scale, backward_stage)
        return o, ht

    @staticmethod
    def backward(ctx, d_o, dht):
        saved = ctx.saved_tensors
        scale, backward_stage = ctx.settings
        on_gpu = backward_stage in GPU_BACKWARD_STAGES
        q, k, v, g, beta, h0 = (None if x is None else x.detach() if on_gpu else x.detach().cpu().float() for x in saved)
        B, T, H, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        where = q.device
        # stages 11, 12 and 13 read dO in bf16 as autograd hands it over for a bf16 o, and write dq and
        # dv in bf16, the dtype they go back in, where no key head is shared (a shared head's
        # gradients are summed below, in fp32): no casts of them on the way in or out (dk comes in fp32)
        d_o_in_bf16 = on_gpu and d_o is not None and d_o.dtype == torch.bfloat16
        bf16_gradients = on_gpu and HV == H and all(x.dtype == torch.bfloat16 for x in saved[:3])
        d_o = torch.zeros((B, T, HV, V), dtype=torch.float32, device=where) if d_o is None \
            else d_o.detach().contiguous() if d_o_in_bf16 else d_o.detach().to(where, torch.float32).contiguous()
        dht = torch.zeros((B, HV, K, V), dtype=torch.float32, device=where) if dht is None \
            else dht.detach().to(where, torch.float32).contiguous()
        # the backward stages take one key head per value head: q and k repeated for each, their
        # gradients summed back over the value heads that share them (as the CPU path's autograd does)
        group = HV // H
        if group > 1:
            q, k = (x.repeat_interleave(group, dim=2).contiguous() for x in (q, k))
        if on_gpu:
            gradients = list(_cuda_backward(backward_stage, q, k, v, g, beta, h0, scale, d_o, dht, bf16_gradients))
        else:
            gradients = list(_GatedDeltaRule.backward(_SavedOnHost(q, k, v, g, beta, h0, scale, backward_stage), d_o, dht))
        if group > 1:
            gradients[0], gradients[1] = (x.view(B, T, H, group, K).sum(dim=3) for x in gradients[:2])
        moved = [None if x is None else x.to(device=like.device, dtype=like.dtype)
                 for x, like in zip(gradients[:6], saved)]
        return tuple(moved) + (None,) * 6


class _SavedOnHost:
    """What _GatedDeltaRule.backward reads from its ctx, for host copies of CUDA tensors."""

    def __init__(self, q, k, v, g, beta, h0, scale, backward_stage):
        self.saved_tensors = (q, k, v, g, beta, h0)
        self.settings = (scale, backward_stage, None)


def _l2norm(x, fixed_order=False):
    """FLA's l2norm: x / sqrt(sum x^2 + 1e-6) over the last dimension. fixed_order: the squares
    summed pairwise by halving, elementwise steps whose order does not depend on how many rows
    there are (a PyTorch reduction may split a row differently for another row count, and so
    round a sequence's q and k differently in another batch: batch_invariant)."""
    if not fixed_order:
        return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)
    squares = x * x
    while squares.shape[-1] > 1:
        if squares.shape[-1] % 2:
            squares = torch.nn.functional.pad(squares, (0, 1))
        squares = squares[..., 0::2] + squares[..., 1::2]
    return x / torch.sqrt(squares + 1e-6)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, *, cu_seqlens_cpu=None, stage=None,
                           backward_stage=None, chunk=None, segments=None, precise=False, batch_invariant=False):
    """(o, final_state) as FLA's chunk_gated_delta_rule returns them (final_state None unless
    output_final_state). stage picks the forward stage (CPU tensors: 01-05, "05" by default;
    CUDA tensors: 06a .. 06e, 06, 07, by shape by default), backward_stage the one loss.backward()
    runs (CPU tensors: 09 or 10, "10" by default; CUDA tensors: 11 or 13 on the GPU by default
    where K and V are at most 128 (gpu_backward_stage_for), else 10; 11, 12 or 13 on the GPU; 09
    and 10 on host copies), chunk the tokens
    per chunk (05, 1-128), segments stage 04's or 07's, precise the GPU stages' split bf16 operands (docs/precision.md), batch_invariant the GPU stages' paths
    that give a sequence the same bits whatever the batch and heads around it (06 unless stage
    or segments say 07). cu_seqlens may be on the CPU or on q's device; with CUDA tensors the
    offsets are needed on both: a call to capture in a CUDA graph passes cu_seqlens on q's device
    and cu_seqlens_cpu, its CPU copy (any other way copies them, which waits for the GPU)."""
    _check("q", q, (None, None, None, None))
    on_gpu, device = q.device.type == "cuda", q.device
    if on_gpu:
        forward_name = None if stage is None else _stage_name(stage, GPU_STAGES, "stage")
    else:
        forward_name = _stage_name("05" if stage is None else stage, FORWARD_STAGES, "stage")
    B, T, H, K = q.shape
    _check("k", k, (B, T, H, K), device)
    _check("v", v, (B, T, None, None), device)
    HV, V = v.shape[2], v.shape[3]
    if backward_stage is None and on_gpu and max(K, V) <= GPU_BACKWARD_WIDTH:
        # a packed batch's backward runs a sequence a call: its walks are one sequence's heads
        walks = (1 if cu_seqlens is not None else B) * HV
        backward_stage = gpu_backward_stage_for(walks, K, V, torch.cuda.get_device_properties(device).multi_processor_count)
    elif backward_stage is None:
        backward_stage = "10"
    if not on_gpu and backward_stage not in BACKWARD_STAGES and \
            any(backward_stage == name or name.startswith("%s_" % backward_stage) for name in GPU_BACKWARD_STAGES):
        raise ValueError("backward_stage=%r runs on the GPU: it needs CUDA tensors (CPU tensors: 09 or 10)" % (backward_stage,))
    backward_name = _stage_name(backward_stage, BACKWARD_STAGES + (GPU_BACKWARD_STAGES if on_gpu else ()), "backward_stage")
    if backward_name in GPU_BACKWARD_STAGES and max(K, V) > GPU_BACKWARD_WIDTH:
        raise ValueError("backward_stage=%r: stage %s takes K and V up to %d, got K=%d V=%d (stage 10 takes them on "
                         "host copies)" % (backward_stage, backward_name[:2], GPU_BACKWARD_WIDTH, K, V))
    if min(B, T, H, K, HV, V) == 0:
        raise ValueError("every size must be positive: q %s, v %s" % (list(q.shape), list(v.shape)))
    if HV % H != 0:
        raise ValueError("v has %d heads, not a multiple of q's %d (value head h reads key head h / (HV / H))"
                         % (HV, H))
    _check("g", g, (B, T, HV), device)
    _check("beta", beta, (B, T, HV), device)
    grouped_stages = GPU_STAGES[-2:]  # the GPU stages that run grouped value heads: 06 and 07
    if on_gpu and HV != H and stage is not None and _stage_name(stage, GPU_STAGES, "stage") not in grouped_stages:
        raise ValueError("v has %d heads, q %d: of the GPU stages only %s run grouped value heads (CPU tensors take them "
                         "in every stage)" % (HV, H, " and ".join(grouped_stages)))
    if on_gpu and cu_seqlens is not None and stage is not None and _stage_name(stage, GPU_STAGES, "stage") not in grouped_stages:
        raise ValueError("cu_seqlens: of the GPU stages only %s run packed batches (CPU tensors take them in every stage)"
                         % " and ".join(grouped_stages))
    if on_gpu and precise not in (False, True):
        raise ValueError("precise must be True or False, got %r" % (precise,))
    if precise and not on_gpu:
        raise ValueError("precise is an option of the GPU stages (06, 07): it needs CUDA tensors")
    if batch_invariant not in (False, True):
        raise ValueError("batch_invariant must be True or False, got %r" % (batch_invariant,))
    if batch_invariant and not on_gpu:
        raise ValueError("batch_invariant is an option of the GPU stages (06, 07): CPU stages give a sequence the "
                         "same bits whatever the batch already")
    if cu_seqlens_cpu is not None and cu_seqlens is None:
        raise ValueError("cu_seqlens_cpu is a CPU copy of cu_seqlens: give cu_seqlens too")
    if on_gpu and cu_seqlens is not None and torch.cuda.is_current_stream_capturing() and \
            (not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.device.type == "cpu" or cu_seqlens_cpu is None):
        raise ValueError("cu_seqlens in a CUDA-graph capture: pass it on q's device and its CPU copy as cu_seqlens_cpu "
                         "(a copy either way would wait for the GPU)")
    offsets = device_offsets = None
    if cu_seqlens is not None:
        if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or \
                (cu_seqlens.device.type != "cpu" and cu_seqlens.device != device):
            raise ValueError("cu_seqlens must be a one-dimensional tensor of N + 1 offsets on the CPU%s"
                             % (" or on q's device (%s)" % device if on_gpu else ""))
        if cu_seqlens.dtype not in (torch.int32, torch.int64):
            raise TypeError("cu_seqlens must be int32 or int64, got %s" % cu_seqlens.dtype)
        if cu_seqlens_cpu is not None:
            if not isinstance(cu_seqlens_cpu, torch.Tensor) or cu_seqlens_cpu.device.type != "cpu" or \
                    cu_seqlens_cpu.dtype not in (torch.int32, torch.int64) or cu_seqlens_cpu.shape != cu_seqlens.shape:
                raise ValueError("cu_seqlens_cpu must be an int32 or int64 CPU tensor shaped as cu_seqlens (%s)"
                                 % list(cu_seqlens.shape))
            if cu_seqlens.device.type == "cpu" and not torch.equal(cu_seqlens.to(torch.int64), cu_seqlens_cpu.to(torch.int64)):
                raise ValueError("cu_seqlens_cpu differs from cu_seqlens")
        if B != 1:
            raise ValueError("with cu_seqlens the sequences are packed into one row: q's B must be 1, got %d" % B)
        # the offsets on the host: cu_seqlens itself, its CPU copy, or a copy made here (a wait for the GPU)
        host = cu_seqlens if cu_seqlens.device.type == "cpu" else cu_seqlens_cpu if cu_seqlens_cpu is not None else \
            cu_seqlens.cpu()
        offsets = host.to(torch.int64).contiguous()
        if on_gpu:  # and on the GPU, as the kernels read them (int64, size_t's width)
            device_offsets = cu_seqlens.to(device=device, dtype=torch.int64).contiguous()
        if offsets.numel() < 2 or int(offsets[0]) != 0 or int(offsets[-1]) != T or \
                bool((offsets[1:] <= offsets[:-1]).any()):
            raise ValueError("cu_seqlens must rise from 0 to T=%d, every sequence at least one token: got %s"
                             % (T, offsets.tolist()))
    N = B if offsets is None else offsets.numel() - 1
    if initial_state is not None:
        _check("initial_state", initial_state, (N, HV, K, V), device)
    def integer(x):
        return isinstance(x, int) and not isinstance(x, bool)
    if chunk is not None and not (integer(chunk) and 1 <= chunk <= 128):
        raise ValueError("chunk must be an integer from 1 to 128, got %r" % (chunk,))
    if chunk is not None and on_gpu:
        raise ValueError("chunk: the GPU stages' chunk is fixed (%d tokens)" % GPU_CHUNK)
    if segments is not None and not (integer(segments) and 1 <= segments <= T):
        raise ValueError("segments must be an integer from 1 to T=%d, got %r" % (T, segments))
    longest = T if offsets is None else int((offsets[1:] - offsets[:-1]).max())  # a packed batch runs as rows this long
    if segments is not None and on_gpu and segments > -(-longest // GPU_CHUNK):
        raise ValueError("segments=%d: stage 07 cuts %d tokens into at most %d segments (one a chunk of %d)"
                         % (segments, longest, -(-longest // GPU_CHUNK), GPU_CHUNK))
    scale = 1.0 / math.sqrt(K) if scale is None else float(scale)
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError("scale must be positive and finite, got %r" % scale)
    needs_grad = torch.is_grad_enabled() and any(
        x is not None and x.requires_grad for x in (q, k, v, g, beta, initial_state))

    if on_gpu:
        # the GPU stages' dtypes: q, k, v in bf16, the gates, beta and the state in fp32
        out_dtype = v.dtype
        if use_qk_l2norm_in_kernel:  # in fp32, before the rounding to bf16 (a PyTorch op, not in the kernel)
            q, k = _l2norm(q.float(), batch_invariant), _l2norm(k.float(), batch_invariant)
        q, k, v = (x.to(torch.bfloat16).contiguous() for x in (q, k, v))
        g, beta = (x.to(torch.float32).contiguous() for x in (g, beta))
        h0 = None if initial_state is None else initial_state.to(torch.float32).contiguous()
        packed = None if offsets is None else (offsets, device_offsets)
        call = _cuda_call(q, k, v, g, beta, h0, scale, segments, precise, batch_invariant, packed)
        if segments is not None and forward_name is None:
            forward_name = GPU_STAGES[-1]  # segments are stage 07's: given, they pick it
        if batch_invariant and forward_name is None:
            forward_name = GPU_STAGES[-2]  # the pick by shape reads the batch: 06 runs every sequence whole
        if batch_invariant and packed is not None and forward_name == GPU_STAGES[-1]:
            raise ValueError("batch_invariant with cu_seqlens: stage 07's segments would follow the longest sequence "
                             "(stage 06 takes it)")
        forward_name = _cuda_stage(forward_name, call, _longest(packed))
        if segments is not None and forward_name != GPU_STAGES[-1]:
            raise ValueError("segments: %s runs each sequence whole; stage 07 cuts them (stage=\"07\")" % forward_name)
        if needs_grad and packed is None:
            o, ht = _GatedDeltaRuleCuda.apply(q, k, v, g, beta, h0, scale, forward_name, backward_name, segments,
                                              precise, batch_invariant)
        elif needs_grad:  # the backward takes B rows: a packed batch runs one sequence at a time, as on the CPU
            pieces = []
            for n, (start, end) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist())):
                sliced = [x[:, start:end].contiguous() for x in (q, k, v, g, beta)]
                state = None if h0 is None else h0[n:n + 1].contiguous()
                cut = None if segments is None else min(segments, -(-(end - start) // GPU_CHUNK))
                pieces.append(_GatedDeltaRuleCuda.apply(*sliced, state, scale, forward_name, backward_name, cut, precise,
                                                        batch_invariant))
            o, ht = torch.cat([piece[0] for piece in pieces], dim=1), torch.cat([piece[1] for piece in pieces], dim=0)
        else:
            o, ht = _cuda_forward(forward_name, q, k, v, g, beta, h0, scale, segments, precise, batch_invariant, packed)
        return o.to(out_dtype), (ht if output_final_state else None)

    # the compute dtype: float64 runs the double build, anything else float32
    dtype, out_dtype = (torch.float64 if q.dtype == torch.float64 else torch.float32), v.dtype
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    h0 = None if initial_state is None else initial_state.to(dtype)
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    with torch.no_grad():
        _check_values(q, k, v, g, beta, h0)

    if not needs_grad:
        o, ht = _forward(forward_name, q.contiguous(), k.contiguous(), v, g, beta, h0, scale, offsets, chunk, segments)
    else:
        # The backward stages take HV = H and B rows: grouped keys are repeated for each value
        # head (autograd sums their gradients back), and a packed batch runs one sequence at a time.
        if HV != H:
            q, k = (x.repeat_interleave(HV // H, dim=2) for x in (q, k))
        q, k = q.contiguous(), k.contiguous()
        spans = [(0, T)] if offsets is None else list(zip(offsets[:-1].tolist(), offsets[1:].tolist()))
        pieces = []
        for n, (start, end) in enumerate(spans):
            sliced = [x[:, start:end].contiguous() for x in (q, k, v, g, beta)]
            state = None if h0 is None else (h0 if offsets is None else h0[n:n + 1].contiguous())
            pieces.append(_GatedDeltaRule.apply(*sliced, state, scale, forward_name, backward_name, chunk, segments))
        o = torch.cat([piece[0] for piece in pieces], dim=1)
        ht = torch.cat([piece[1] for piece in pieces], dim=0)
    return o.to(out_dtype), (ht if output_final_state else None)
