#!/usr/bin/env python3
"""The backward of each NSA branch alone through the Python binding: compressed attention, sliding-window
attention, and selected attention over the compressed branch's top-k, on one sequence of T tokens.

Paper setting by default: bf16, Hq 64, Hkv 4, Dk 192, Dv 128, kernel 32, stride 16, BK 64, K 16, W 512 (1
initial and 2 local blocks forced); selected attention with the default workspace cap. The caller's
compression (mean pooling) and each branch's forward run once, untimed; each backward is
torch.autograd.grad over the retained graph, which launches only that branch's backward operator.

Protocol: CUDA events around each call, one untimed call first (plan lookup, workspace), median of --reps
calls. Inputs are generated on the GPU (quick to start, for short benchmark slots).

    FSA_LIBRARY=build/libfsa.so python bench/branch_bwd.py --T 65536 --reps 3
"""

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from fsa_jit.attention import selected_attention  # noqa: E402
from fsa_jit.compressed import compressed_attention  # noqa: E402
from fsa_jit.nsa import compress_mean  # noqa: E402
from fsa_jit.window import window_attention  # noqa: E402
from nsa_layer import timed  # noqa: E402  (this directory)


def time_shape(a, hkv, dtype):
    """{branch: backward ms} at Hq a.hq, Hkv hkv."""
    g = torch.Generator(device="cuda").manual_seed(0)
    T = a.T
    q = torch.randn(T, a.hq, a.dk, generator=g, device="cuda", dtype=dtype).requires_grad_(True)
    k = torch.randn(T, hkv, a.dk, generator=g, device="cuda", dtype=dtype).requires_grad_(True)
    v = torch.randn(T, hkv, a.dv, generator=g, device="cuda", dtype=dtype).requires_grad_(True)
    dout = torch.randn(T, a.hq, a.dv, generator=g, device="cuda", dtype=dtype)
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    with torch.no_grad():
        k_cmp, cu_c = compress_mean(k, cu, a.kernel, a.stride)
        v_cmp, _ = compress_mean(v, cu, a.kernel, a.stride)
    k_cmp.requires_grad_(True)
    v_cmp.requires_grad_(True)

    o_cmp, _, topk = compressed_attention(q, k_cmp, v_cmp, cu, cu_c, a.kernel, a.stride, top_k=a.topk,
                                          block_size=a.bk)
    outputs = {
        "compressed": lambda: (o_cmp, (q, k_cmp, v_cmp)),
        "window": lambda: (window_attention(q, k, v, cu, a.window), (q, k, v)),
        "selected": lambda: (selected_attention(q, k, v, topk, cu, a.bk, max_seqlen=T, topk_layout="thk"),
                             (q, k, v)),
    }
    rows = {}
    for name in a.branches.split(","):
        o, leaves = outputs[name]()
        rows[name] = timed(lambda: torch.autograd.grad(o, leaves, dout, retain_graph=True), warmup_ms=0, min_ms=0,
                           min_reps=a.reps)
        print(f"Hq {a.hq:3d} Hkv {hkv:3d} {name:10s} backward {rows[name]:9.3f} ms", flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--T", type=int, default=65536)
    p.add_argument("--hq", type=int, default=64)
    p.add_argument("--hkv", default="4", help="KV heads, comma-separated (one shape each)")
    p.add_argument("--dk", type=int, default=192)
    p.add_argument("--dv", type=int, default=128)
    p.add_argument("--kernel", type=int, default=32)
    p.add_argument("--stride", type=int, default=16)
    p.add_argument("--bk", type=int, default=64)
    p.add_argument("--topk", type=int, default=16)
    p.add_argument("--window", type=int, default=512)
    p.add_argument("--dtype", choices=("bf16", "f16"), default="bf16")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--branches", default="compressed,window,selected")
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()

    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    rows = {int(h): time_shape(a, int(h), dtype) for h in a.hkv.split(",")}
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "bwd_ms": rows}, indent=1))


if __name__ == "__main__":
    main()
