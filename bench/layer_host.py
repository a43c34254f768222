#!/usr/bin/env python3
"""Host time of the NSA layer's calls (bench/nsa_layer.py's problem): how long Python holds the host per
forward and per backward, by eager path, with the GPU idle at the start of each call (the case where the
GPU waits for all of it), and a cProfile of the default path's calls.

    python bench/layer_host.py --T 8192 [--paths node,ops] [--reps 20] [--profile]
"""

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nsa_layer import layer_inputs, use_path  # noqa: E402  (this directory)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from fsa_jit.nsa import compress_mean, nsa_attention  # noqa: E402


def host_ms(fn, reps):
    """Median host milliseconds of fn(), each call started on an idle GPU."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    times.sort()
    return times[len(times) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--T", type=int, default=8192)
    p.add_argument("--paths", default="node,ops")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--profile", action="store_true", help="also cProfile the first path's calls")
    a = p.parse_args()
    T, hq, hkv, dk, dv = a.T, 64, 4, 192, 128
    q, k, v, gates = layer_inputs(T, hq, hkv, dk, dv, torch.bfloat16)
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    k_cmp, cu_c = compress_mean(k, cu, 32, 16)
    v_cmp, _ = compress_mean(v, cu, 32, 16)
    leaves = [q, k, v, k_cmp, v_cmp] + gates
    for t in leaves:
        t.requires_grad_(True)
    dout = torch.randn(T, hq, dv, device="cuda", dtype=torch.bfloat16)
    kw = dict(kernel_size=32, stride=16, block_size=64, top_k=16, window=512)

    def fwd():
        with torch.no_grad():
            return nsa_attention(q, k, v, k_cmp, v_cmp, *gates, cu, cu_c, **kw)

    held = []

    def fwd_grad():
        held.append(nsa_attention(q, k, v, k_cmp, v_cmp, *gates, cu, cu_c, **kw))

    def bwd():
        torch.autograd.grad(held.pop(), leaves, dout)

    print(f"# host ms per call, T {T}, GPU idle at each call's start, median of {a.reps}")
    print("| path | forward (no grad) | forward (grad) | backward |")
    for path in a.paths.split(","):
        use_path(path)
        for fn in (fwd, fwd_grad, bwd, fwd_grad, bwd):  # plans and kernels made, untimed
            fn()
        f = host_ms(fwd, a.reps)
        fg, b = [], []
        for _ in range(a.reps):
            fg.append(host_ms(fwd_grad, 1))
            b.append(host_ms(bwd, 1))
        fg.sort()
        b.sort()
        print(f"| {path} | {f:.3f} | {fg[len(fg) // 2]:.3f} | {b[len(b) // 2]:.3f} |", flush=True)
    if a.profile:
        use_path(a.paths.split(",")[0])
        for name, fn in (("forward (no grad)", fwd), ("forward (grad) + backward", lambda: (fwd_grad(), bwd()))):
            prof = cProfile.Profile()
            torch.cuda.synchronize()
            prof.enable()
            for _ in range(10):
                fn()
            prof.disable()
            torch.cuda.synchronize()
            print(f"\n## cProfile, 10 calls: {name}")
            pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
