#!/usr/bin/env python3
"""fla_bench.py -- time FLA's Triton chunk_gated_delta_rule on our problems, the peer users would pick.

    python3 plots/fla_bench.py [--reps N] [--dtypes bf16,fp32] [--peers fla,flashqla,flashqla_exact,...]
                               PROBLEM_DIR[:OURS_DIR] ...
    python3 plots/fla_bench.py [...] --serve     (the problems one a line on stdin; `done PROBLEM_DIR` after each)

PROBLEM_DIR holds q k v g beta [h0] [cu_seqlens] .npy as bin/make_problem writes them (the
inputs our stages draw for the same sizes and seed), in any layout of docs/contract.md: more
value heads than key heads (v [B, T, HV, V]), and a packed batch (cu_seqlens, B = 1), which
every peer is handed as its cu_seqlens. For each problem and dtype, FLA's forward is timed
eagerly (Python launch overhead included, as users call it) and replayed from a CUDA graph
(the kernels alone), each the median of --reps runs after warm-up, with CUDA events, and a
2 x L2-sized buffer overwritten before every run, as our CUDA runner does. With :OURS_DIR
(a stage's --out folder) FLA's o and ht are compared with ours: proof of the same inputs.
Prints one `result peer=...` line per measurement. Needs PyTorch, Triton, einops and FLA
(fla-core + flash-linear-attention) importable. --serve reads the problems from stdin as a
script makes them, so that the peers are imported and tuned once for many problems while each
problem's files can go once it is done (plots/bench_layouts.sh: a problem of 32768 tokens and
64 value heads is gigabytes).

--peers adds FlashQLA (the flash-qla package, TileLang kernels for Hopper: the fused kernels that
claim 2-3 times FLA's forward), bf16 only, with the same call: `flashqla` as users get it (its
automatic intra-card context parallelism on: where it cuts a sequence it starts each piece after
warm-up chunks, until the gates have decayed by e^-10, so its o may differ from the exact one by
about that much), `flashqla_exact` with that off (auto_cp=False: one exact chain a head). Their
err_o_vs_ours says how far each is from our stage's o.

--peers gdn_steps times our own stages in the same process, through the Python package
(python/gdn_steps, importable: `pip install .`), with the same call, graph and flush code as the
peers: CUDA tensors, the stage picked by shape (its result lines name it, stage=...).

--peers flashinfer times FlashInfer's GDN prefill (flashinfer.gdn_prefill.chunk_gated_delta_rule,
CuTe-DSL kernels, exact; `flashinfer` with its context parallelism as users get it, use_cp
"auto", `flashinfer_nocp` with it off). It takes tokens packed, [B T, heads, D], the decay
itself (e^g) and beta in fp32, cu_seqlens in int32, and its states transposed, [N, HV, V, K]:
those are made once, before the timing, as a caller keeping them in that layout would; its
outputs are turned back into ours only for err_*_vs_ours.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch


# FLA 0.6 hands its chunk_gated_delta_rule to FlashQLA wherever the flash_qla package can be
# imported (K = V = 128, bf16): "fla" would then time FlashQLA. Its own Triton kernels are the
# peer called fla here, so its backend dispatch is off (read once, when fla is imported).
os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"


def peer_function(peer):
    """the peer's chunk_gated_delta_rule, and the keyword arguments it adds to the common call"""
    if peer == "fla":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        return chunk_gated_delta_rule, {}
    if peer in ("gdn_steps", "gdn_steps_12"):  # the second: loss.backward() through stage 12's walk
        import gdn_steps
        return gdn_steps.chunk_gated_delta_rule, {"backward_stage": "12"} if peer == "gdn_steps_12" else {}
    from flash_qla import chunk_gated_delta_rule
    return chunk_gated_delta_rule, {"auto_cp": peer == "flashqla"}


def make_run(peer, q, k, v, g, beta, h0, cu_seqlens, scale):
    """run() -> (o, ht) for the peer on these tensors (FLA's layouts), and ours(o, ht): them in
    our layouts, o [B, T, HV, V] and ht [N, HV, K, V]"""
    if peer.startswith("flashinfer"):
        from flashinfer.gdn_prefill import chunk_gated_delta_rule
        B, T, H, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        N = B if cu_seqlens is None else cu_seqlens.numel() - 1
        tokens = lambda x: x.reshape(B * T, *x.shape[2:])  # a view: [B, T, ...] is contiguous
        starts = (torch.arange(0, B + 1, device=q.device) * T if cu_seqlens is None else cu_seqlens).to(torch.int32)
        lengths = (starts[1:] - starts[:-1]).max().item()
        alpha, beta32 = tokens(g).float().exp().contiguous(), tokens(beta).float().contiguous()
        state0 = None if h0 is None else h0.transpose(-1, -2).contiguous()
        state = torch.empty(N, HV, V, K, dtype=torch.float32, device=q.device)
        use_cp = "auto" if peer == "flashinfer" else False

        def run():
            return chunk_gated_delta_rule(tokens(q), tokens(k), tokens(v), g=alpha, beta=beta32, scale=scale,
                                          initial_state=state0, output_final_state=True, cu_seqlens=starts,
                                          output_state=state, use_cp=use_cp, max_seqlen=lengths)

        return run, lambda o, ht: (o.reshape(B, T, HV, V), ht.transpose(-1, -2))
    function, extra = peer_function(peer)
    if cu_seqlens is not None:
        extra = dict(extra, cu_seqlens=cu_seqlens)
        if peer in ("gdn_steps", "fla"):  # the offsets' host copy, made once here: a call then never
            extra["cu_seqlens_cpu"] = cu_seqlens.cpu()  # waits for the GPU, and a CUDA graph can capture it

    def run():
        return function(q, k, v, g, beta, scale=scale, initial_state=h0, output_final_state=True, **extra)

    return run, lambda o, ht: (o, ht)


PEER_NAMES = {"fla": "fla_chunk", "flashqla": "flashqla", "flashqla_exact": "flashqla_exact", "gdn_steps": "gdn_steps",
              "flashinfer": "flashinfer", "flashinfer_nocp": "flashinfer_nocp"}


def median_ms(run, reps, flush):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        flush.add_(1)
        start.record()
        run()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return float(np.median(times))


def relative(x, ref):
    x, ref = x.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    if not (np.isfinite(x).all() and np.isfinite(ref).all()):
        return float("nan")
    return float(np.linalg.norm(x - ref) / max(np.linalg.norm(ref), 1e-300))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument("--peers", default="fla")
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("problems", nargs="*")
    args = parser.parse_args()
    if not args.problems and not args.serve:
        parser.error("give PROBLEM_DIR[:OURS_DIR] arguments, or --serve")
    peers = args.peers.split(",")
    for peer in peers:
        if peer not in PEER_NAMES:
            sys.exit(f"fla_bench.py: unknown peer '{peer}' ({', '.join(PEER_NAMES)})")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")
    name = torch.cuda.get_device_name(0)
    for spec in args.problems:
        bench_problem(spec, peers, args, flush, name)
    if args.serve:
        for line in sys.stdin:
            if line.strip():
                try:  # a problem that cannot be read is one line; the script waits for `done` either way
                    bench_problem(line.strip(), peers, args, flush, name)
                except Exception as error:
                    print(f"result problem={line.strip()} error={type(error).__name__}: {error}", flush=True)
                print(f"done {line.strip()}", flush=True)


def bench_problem(spec, peers, args, flush, name):
    """every peer's `result` lines for one PROBLEM_DIR[:OURS_DIR]"""
    folder, _, ours = spec.partition(":")
    arrays = {}
    for tensor in ("q", "k", "v", "g", "beta", "h0", "cu_seqlens"):
        try:
            arrays[tensor] = np.load(f"{folder}/{tensor}.npy")
        except FileNotFoundError:
            if tensor not in ("h0", "cu_seqlens"):
                raise
    B, T, H, K = arrays["q"].shape
    HV, V = arrays["v"].shape[2], arrays["v"].shape[3]
    layout = f"HV={HV}" + (f" sequences={len(arrays['cu_seqlens']) - 1}" if "cu_seqlens" in arrays else "")
    for peer, dtype_name in ((peer, dtype_name) for peer in peers for dtype_name in args.dtypes.split(",")):
        if peer != "fla" and dtype_name != "bf16":
            continue  # FlashQLA and FlashInfer take bf16 or fp16 inputs only; our GPU stages read bf16
        name_of_peer = PEER_NAMES[peer]
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
        q, k, v = (torch.from_numpy(arrays[t]).cuda().to(dtype) for t in ("q", "k", "v"))
        g = torch.from_numpy(arrays["g"]).cuda().float()
        beta = torch.from_numpy(arrays["beta"]).cuda().to(dtype)
        h0 = torch.from_numpy(arrays["h0"]).cuda().float() if "h0" in arrays else None
        cu_seqlens = torch.from_numpy(arrays["cu_seqlens"]).cuda().long() if "cu_seqlens" in arrays else None

        try:
            run, ours_layout = make_run(peer, q, k, v, g, beta, h0, cu_seqlens, 1.0 / math.sqrt(K))
            for _ in range(3):
                o, ht = run()
            torch.cuda.synchronize()
            times = {"eager": median_ms(run, args.reps, flush)}
        except Exception as error:  # report, do not hide: one line, then the next case
            print(f"result peer={name_of_peer} dtype={dtype_name} B={B} T={T} H={H} K={K} V={V} {layout} "
                  f"error={type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
            continue
        try:  # the kernels alone: the same call captured in a CUDA graph and replayed
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    run()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                o, ht = run()
            graph.replay()
            torch.cuda.synchronize()
            times["graph"] = median_ms(graph.replay, args.reps, flush)
        except Exception as error:  # eager stands; say why the graph did not
            print(f"result peer={name_of_peer} mode=graph dtype={dtype_name} B={B} T={T} H={H} K={K} V={V} {layout} "
                  f"error={type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
            o, ht = run()
            torch.cuda.synchronize()
        check = ""
        if peer == "gdn_steps":
            import gdn_steps
            rows = (B, T) if cu_seqlens is None else (cu_seqlens.numel() - 1, int((cu_seqlens[1:] - cu_seqlens[:-1]).max()))
            check += f" stage={gdn_steps.gpu_stage_for(*rows, H, K, V, HV=HV)}"  # a packed batch: the stage of its padded rows
        if ours:
            o, ht = ours_layout(o, ht)
            o_ours, ht_ours = np.load(f"{ours}/o.npy"), np.load(f"{ours}/ht.npy")
            check += (f" err_o_vs_ours={relative(o.float().cpu().numpy(), o_ours):.3e}"
                     f" err_ht_vs_ours={relative(ht.float().cpu().numpy(), ht_ours):.3e}")
        for mode, ms in times.items():
            print(f"result peer={name_of_peer} mode={mode} dtype={dtype_name} B={B} T={T} H={H} K={K} V={V} {layout} "
                  f"median_ms={ms:.4f}{check} device=\"{name}\"", flush=True)


if __name__ == "__main__":
    sys.exit(main())
