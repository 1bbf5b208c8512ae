#!/usr/bin/env python3
"""fla_backward_bench.py -- time the peers' GDN backward on our problems, side by side in one process.

    python3 plots/fla_backward_bench.py [--reps N] [--peers fla,flashqla] PROBLEM_DIR[:OURS_DIR] ...

PROBLEM_DIR holds q k v g beta [h0] do dht .npy as bin/make_problem writes them (the inputs and
the cotangents our backward stages draw for the same sizes and seed). For each peer, in bf16 as
the peers run (g, beta and the states in fp32): the forward once with inputs that require
gradients, then
  backward:  torch.autograd.grad of (o, ht) with cotangents (do, dht) to q, k, v, g, beta and
             h0, the graph kept (retain_graph), so that each run is the backward alone;
  forward+backward: the forward and that grad, from fresh leaves each run;
each the median of --reps runs after warm-up, CUDA events, a 2 x L2-sized buffer overwritten
before every run (plots/fla_bench.py's flush). Then the kernels alone, replayed from CUDA
graphs: the forward captured in one graph and its grad in a second, on one side stream and in
one memory pool (as torch.cuda.make_graphed_callables captures a module), so that
  backward_graph: the second graph's replay, and forward_backward_graph: both, in turn;
the gradients the replays write are compared with the eager ones (graph_vs_eager, relative L2:
the same kernels on the same values give 0). A peer that cannot be captured keeps its eager
times and gets one line saying why. With :OURS_DIR (a backward stage's --out folder)
each peer's gradients are compared with ours (relative L2): proof of the same problem, and how
far a bf16 backward is from our fp32 one. Prints one `result peer=... mode=...` line a
measurement, or one line saying why a peer did not run.

Peers: fla (FLA's chunk_gated_delta_rule, its Triton kernels), flashqla (FlashQLA's fused
TileLang kernels, K = V = 128), gdn_steps (ours through the Python package: the forward stage it
picks, then the backward stage it picks on the GPU by autograd, 11 or 13:
gpu_backward_stage_for), gdn_steps_12 (the same with backward_stage="12": stage 12's walk,
which reads dO in bf16 and leaves o to the forward, as the peers' backward does). FLA's backward on Hopper with Triton 3.4 to 3.7.0 (a known miscompile of
chunk_bwd_dqkwg) runs that one kernel through FLA's own TileLang backend, which its backend
dispatch picks where tilelang is importable; with dispatch off (as plots/fla_bench.py runs FLA)
it refuses. So here dispatch is on and FLA's FlashQLA backend off
(FLA_FLASH_QLA=0): "fla" is FLA's Triton kernels with its Hopper fix, never FlashQLA's. A
refusal is printed as it comes.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fla_bench import median_ms, peer_function, relative  # noqa: E402 (the same timing and flush)

# read when fla is first imported (peer_function): FLA's dispatch on for its Hopper backward fix,
# its FlashQLA backend off, whatever fla_bench or the caller's environment set
os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "0"
os.environ["FLA_FLASH_QLA"] = "0"

GRADIENTS = ("dq", "dk", "dv", "dg", "dbeta", "dh0")


def one_line(error):
    """an exception as the one line a result gives for it"""
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def captured(forward, inputs, order, do, dht):
    """(forward graph, backward graph, the gradients the second writes, the (o, ht) the first
    writes): forward(inputs) and the grad of its (o, ht) with cotangents (do, dht) to
    inputs[order], each captured in a CUDA graph, after a warm-up on the same side stream
    (compiles, autotuning and first allocations stay out of the capture). The backward's kernels
    run on the stream its forward ran on, so both are captured on one stream, and in one memory
    pool, so that the second graph reads what the first writes; retain_graph, and the caller
    holding (o, ht) and inputs, keep what the graphs read alive for every replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            o, ht = forward(inputs)
            torch.autograd.grad((o, ht), [inputs[t] for t in order], (do, dht))
    torch.cuda.current_stream().wait_stream(side)
    forward_graph, backward_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(forward_graph, stream=side):
        o, ht = forward(inputs)
    with torch.cuda.graph(backward_graph, stream=side, pool=forward_graph.pool()):
        grads = torch.autograd.grad((o, ht), [inputs[t] for t in order], (do, dht), retain_graph=True)
    return forward_graph, backward_graph, grads, (o, ht)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--peers", default="fla,flashqla")
    parser.add_argument("problems", nargs="+")
    args = parser.parse_args()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")
    name = torch.cuda.get_device_name(0)
    for spec in args.problems:
        folder, _, ours = spec.partition(":")
        arrays = {t: np.load(f"{folder}/{t}.npy") for t in ("q", "k", "v", "g", "beta", "do", "dht")}
        if os.path.exists(f"{folder}/h0.npy"):
            arrays["h0"] = np.load(f"{folder}/h0.npy")
        B, T, H, K = arrays["q"].shape
        HV, V = arrays["v"].shape[2], arrays["v"].shape[3]
        sizes = f"B={B} T={T} H={H} HV={HV} K={K} V={V}"
        for peer in args.peers.split(","):
            try:
                function, extra = peer_function(peer)
                leaves = {t: torch.from_numpy(arrays[t]).cuda() for t in ("q", "k", "v")}
                leaves = {t: x.to(torch.bfloat16) for t, x in leaves.items()}
                leaves["g"] = torch.from_numpy(arrays["g"]).cuda().float()
                leaves["beta"] = torch.from_numpy(arrays["beta"]).cuda().to(torch.bfloat16)
                if "h0" in arrays:
                    leaves["h0"] = torch.from_numpy(arrays["h0"]).cuda().float()
                do = torch.from_numpy(arrays["do"]).cuda().to(torch.bfloat16)
                dht = torch.from_numpy(arrays["dht"]).cuda().float()

                def forward(inputs):
                    return function(inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"],
                                    scale=1.0 / math.sqrt(K), initial_state=inputs.get("h0"), output_final_state=True,
                                    **extra)

                def fresh():
                    return {t: x.detach().clone().requires_grad_(True) for t, x in leaves.items()}

                inputs = fresh()
                o, ht = forward(inputs)
                order = [t for t in ("q", "k", "v", "g", "beta", "h0") if t in inputs]

                def backward():
                    return torch.autograd.grad((o, ht), [inputs[t] for t in order], (do, dht), retain_graph=True)

                def forward_backward():
                    again = fresh()
                    o2, ht2 = forward(again)
                    return torch.autograd.grad((o2, ht2), [again[t] for t in order], (do, dht))

                for _ in range(3):
                    grads = backward()
                    forward_backward()
                torch.cuda.synchronize()
                times = {"backward": median_ms(backward, args.reps, flush),
                         "forward_backward": median_ms(forward_backward, args.reps, flush)}
            except Exception as error:  # report, do not hide: one line, then the next peer
                print(f"result peer={peer} {sizes} error={one_line(error)}", flush=True)
                continue
            try:  # the kernels alone: the forward and its grad captured in two graphs, replayed
                graph_inputs = fresh()
                forward_graph, backward_graph, graph_grads, graph_outputs = captured(forward, graph_inputs, order, do, dht)
                forward_graph.replay()
                backward_graph.replay()
                torch.cuda.synchronize()
                apart = max((relative(a.float().cpu().numpy(), b.float().cpu().numpy()) for a, b in zip(graph_grads, grads)),
                            key=lambda x: math.inf if math.isnan(x) else x)  # a NaN is the worst, never hidden
                times["backward_graph"] = median_ms(backward_graph.replay, args.reps, flush)
                times["forward_backward_graph"] = median_ms(lambda: (forward_graph.replay(), backward_graph.replay()),
                                                            args.reps, flush)
            except Exception as error:  # the eager times stand; say why the graphs did not
                print(f"result peer={peer} mode=graph {sizes} error={one_line(error)}", flush=True)
                apart = None
            check = ""
            if ours:
                for t, gradient in zip(order, grads):
                    mine = f"{ours}/d{t}.npy"
                    if os.path.exists(mine):
                        check += f" err_d{t}_vs_ours={relative(gradient.float().cpu().numpy(), np.load(mine)):.3e}"
            for mode, ms in times.items():
                graph_check = f" graph_vs_eager={apart:.3e}" if mode.endswith("_graph") else ""
                print(f"result peer={peer} mode={mode} dtype=bf16 {sizes} median_ms={ms:.4f}{check}{graph_check} "
                      f"device=\"{name}\"", flush=True)


if __name__ == "__main__":
    sys.exit(main())
