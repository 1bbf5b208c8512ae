"""package_backward_costs.py -- where the package's backward spends its time beyond stage 11's kernels.

For two shapes, on random bf16 q, k, v, beta and fp32 g (no h0), with bf16 dO and fp32 dht as
autograd hands them over:
  autograd   torch.autograd.grad through gdn_steps.chunk_gated_delta_rule (the graph kept): the
             package's hand-over (dht made fp32, bf16 dO read as it is, dq and dv written in bf16,
             dk cast back), stage 11's launches
  library    the package's call of stage 11 alone (_cuda_backward), fp32 cotangents already made
each the median of 20 after 3 warm-ups, timed by fla_bench.py's median_ms (CUDA events, its
L2 flush before each), as the peers are; then
the host time of a call (10 calls queued without waiting, over 10) and torch.profiler's table of
5 autograd calls, whose CUDA column splits the time into stage 11's kernels and the casts
(aten::copy_).

    PYTHONPATH=build/python python3 plots/package_backward_costs.py      (a CUDA device, PyTorch)
"""
import math
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import gdn_steps
from gdn_steps import _cuda_backward

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fla_bench import median_ms as timed_median_ms  # noqa: E402 (the peers' timing and flush)

torch.manual_seed(0)
l2 = torch.cuda.get_device_properties(0).L2_cache_size
flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    return timed_median_ms(fn, reps, flush)


def host_ms(fn, calls=10):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed * 1e3 / calls


for B, T, H, K, V in ((1, 16384, 8, 64, 64), (8, 4096, 16, 128, 128)):
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device="cuda"), dim=-1).bfloat16()
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device="cuda"), dim=-1).bfloat16()
    v = torch.randn(B, T, H, V, device="cuda").bfloat16()
    g = -torch.rand(B, T, H, device="cuda") * 0.1
    beta = torch.rand(B, T, H, device="cuda").bfloat16()
    do = torch.randn(B, T, H, V, device="cuda").bfloat16()
    dht = torch.randn(B, H, K, V, device="cuda")
    leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v, g, beta)]
    # stage 11 named: at many heads of K = V = 128 the package's default is 13
    o, ht = gdn_steps.chunk_gated_delta_rule(*leaves, scale=1 / math.sqrt(K), output_final_state=True,
                                             backward_stage="11")

    def autograd_backward():
        return torch.autograd.grad((o, ht), leaves, (do, dht), retain_graph=True)

    beta32, do32 = beta.float(), do.float()

    def library_only():
        return _cuda_backward("11_backward_tensor_cores", q, k, v, g, beta32, None, 1 / math.sqrt(K), do32, dht)

    a, lib = median_ms(autograd_backward), median_ms(library_only)
    print(f"shape {B},{T},{H},{K},{V}: autograd {a:.4f} ms, library call alone {lib:.4f} ms; host time a call: "
          f"autograd {host_ms(autograd_backward):.3f} ms, library {host_ms(library_only):.3f} ms", flush=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            autograd_backward()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=50), flush=True)
