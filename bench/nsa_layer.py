#!/usr/bin/env python3
"""The whole NSA attention layer through the Python binding (fsa_jit.nsa.nsa_attention: compressed
attention with its top-k selection, selected attention, sliding window, gating) against dense causal
attention of the same shape (PyTorch SDPA, the cuDNN backend: the one that takes Dk != Dv), forward and
forward + backward, on one sequence of T tokens.

Paper setting by default: bf16, Hq 64, Hkv 4, Dk 192, Dv 128, kernel 32, stride 16, BK 64, K 16, W 512
(1 initial and 2 local blocks forced). The caller's compression (mean pooling) and the expansion of k and v
to Hq heads for SDPA happen outside the timed region.

Protocol: CUDA events around each call, 25 ms warm-up, median over at least 100 ms of repeats (and at least
3 repeats); inputs generated once; plan creation (and compiling) in an untimed first call.

    python bench/nsa_layer.py                   # T 8192 and 65536
    python bench/nsa_layer.py --T 8192 --json out.json
    python bench/nsa_layer.py --paths node,ops   # the layer's eager paths side by side

Paths: node (the default: the layer's own autograd node), ops (the operators, one autograd node per branch).
"""


import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from fsa_jit import _lib, _nsa_node  # noqa: E402
from fsa_jit.nsa import compress_mean, nsa_attention  # noqa: E402

_NODE = (_nsa_node.layer, _nsa_node.cached)


def use_path(path):
    """Sets the layer's eager path (module attributes read per call)."""
    off = lambda *args: None  # noqa: E731
    _nsa_node.layer, _nsa_node.cached = (off, off) if path == "ops" else _NODE


def timed(fn, warmup_ms=25.0, min_ms=100.0, min_reps=3):
    """Median milliseconds of fn() by CUDA events."""
    fn()
    torch.cuda.synchronize()
    spent = 0.0
    while spent < warmup_ms:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        spent += a.elapsed_time(b)
    times = []
    while sum(times) < min_ms or len(times) < min_reps:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def layer_inputs(T, hq, hkv, dk, dv, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    q = torch.randn(T, hq, dk, generator=g, device=dev, dtype=dtype)
    k = torch.randn(T, hkv, dk, generator=g, device=dev, dtype=dtype)
    v = torch.randn(T, hkv, dv, generator=g, device=dev, dtype=dtype)
    gates = [torch.sigmoid(torch.randn(T, hq, generator=g, device=dev, dtype=torch.float32)).to(dtype)
             for _ in range(3)]
    return q, k, v, gates


def bench_ours(T, a):
    q, k, v, gates = layer_inputs(T, a.hq, a.hkv, a.dk, a.dv, a.dtype)
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    k_cmp, cu_c = compress_mean(k, cu, a.kernel, a.stride)
    v_cmp, _ = compress_mean(v, cu, a.kernel, a.stride)
    leaves = [q, k, v, k_cmp, v_cmp] + gates
    for t in leaves:
        t.requires_grad_(True)
    kw = dict(kernel_size=a.kernel, stride=a.stride, block_size=a.bk, top_k=a.topk, window=a.window)
    if a.sel_workspace is not None:  # a binding without the parameter takes the default
        kw["workspace_limit"] = a.sel_workspace

    def fwd():
        with torch.no_grad():
            return nsa_attention(q, k, v, k_cmp, v_cmp, *gates, cu, cu_c, **kw)

    dout = torch.randn(T, a.hq, a.dv, device="cuda", dtype=a.dtype)

    def fwd_bwd():
        o = nsa_attention(q, k, v, k_cmp, v_cmp, *gates, cu, cu_c, **kw)
        torch.autograd.grad(o, leaves, dout)

    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    f = timed(fwd)
    fb = timed(fwd_bwd)
    peak = torch.cuda.max_memory_allocated() - base
    return f, fb, peak


def bench_dense(T, a):
    q, k, v, _ = layer_inputs(T, a.hq, a.hkv, a.dk, a.dv, a.dtype)
    rep = a.hq // a.hkv
    qd = q.transpose(0, 1).unsqueeze(0).contiguous().requires_grad_(True)
    kd = k.repeat_interleave(rep, dim=1).transpose(0, 1).unsqueeze(0).contiguous().requires_grad_(True)
    vd = v.repeat_interleave(rep, dim=1).transpose(0, 1).unsqueeze(0).contiguous().requires_grad_(True)
    dout = torch.randn(1, a.hq, T, a.dv, device="cuda", dtype=a.dtype)

    def fwd():
        with torch.no_grad(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qd, kd, vd, is_causal=True)

    def fwd_bwd():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
        torch.autograd.grad(o, (qd, kd, vd), dout)

    return timed(fwd), timed(fwd_bwd)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--T", default="8192,65536")
    p.add_argument("--hq", type=int, default=64)
    p.add_argument("--hkv", type=int, default=4)
    p.add_argument("--dk", type=int, default=192)
    p.add_argument("--dv", type=int, default=128)
    p.add_argument("--kernel", type=int, default=32)
    p.add_argument("--stride", type=int, default=16)
    p.add_argument("--bk", type=int, default=64)
    p.add_argument("--topk", type=int, default=16)
    p.add_argument("--window", type=int, default=512)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--no-dense", action="store_true")
    p.add_argument("--sel-workspace", help="the selected attention's workspace cap (e.g. 2G, unlimited); "
                   "default: the binding's")
    p.add_argument("--paths", default="node", help="comma-separated layer paths: node, ops")
    p.add_argument("--json")
    a = p.parse_args()
    a.dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    rows = []
    print(f"# NSA layer vs dense SDPA (cuDNN) on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"libfsa {_lib.get().version()}")
    print(f"# Hq {a.hq} Hkv {a.hkv} Dk {a.dk} Dv {a.dv} l {a.kernel} d {a.stride} BK {a.bk} K {a.topk} W {a.window}, "
          f"selected workspace {a.sel_workspace or 'default'}")
    print("| T | path | ours fwd ms | ours fwd+bwd ms | ours bwd ms | ours peak GB | dense fwd ms | dense fwd+bwd ms | "
          "fwd speedup | bwd speedup |")
    for T in [int(x) for x in a.T.split(",")]:
        ours = []
        for path in a.paths.split(","):
            use_path(path)
            ours.append((path,) + bench_ours(T, a))
            torch.cuda.empty_cache()
        use_path("node")
        df, dfb = (float("nan"), float("nan")) if a.no_dense else bench_dense(T, a)
        torch.cuda.empty_cache()
        for path, f, fb, peak in ours:
            row = dict(T=T, path=path, fwd=f, fwd_bwd=fb, bwd=fb - f, peak_gb=peak / 1e9, dense_fwd=df,
                       dense_fwd_bwd=dfb, dense_bwd=dfb - df, fwd_speedup=df / f, bwd_speedup=(dfb - df) / (fb - f))
            rows.append(row)
            print(f"| {T} | {path} | {f:.2f} | {fb:.2f} | {fb - f:.2f} | {peak / 1e9:.2f} | {df:.2f} | {dfb:.2f} | "
                  f"{row['fwd_speedup']:.1f}x | {row['bwd_speedup']:.1f}x |", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), rows=rows, args={
            k: (str(v) if k == "dtype" else v) for k, v in vars(a).items()}), indent=1))


if __name__ == "__main__":
    main()
