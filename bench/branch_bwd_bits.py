#!/usr/bin/env python3
"""Digests of the compressed and sliding-window backwards' gradients, to compare two libraries bit for bit
across processes: dq, dk and dv of each case (seeded inputs on the GPU), each backward run twice in the
process (run-to-run determinism), one line per case with the SHA-256 of each gradient's bytes.

    FSA_LIBRARY=build-a/libfsa.so python3 bench/branch_bwd_bits.py > a.txt
    FSA_LIBRARY=build-b/libfsa.so python3 bench/branch_bwd_bits.py > b.txt
    diff a.txt b.txt

Cases: the standard heads (Hq 32, D 128) at G 1, 4, 16 on one sequence of 16384 tokens, G 4 on a varlen
batch, and the paper's head dims (Hq 64, Hkv 4, Dk 192, Dv 128); kernel 32, stride 16, W 512, bf16.
"""
import hashlib
import sys
from pathlib import Path

import torch

from bits import same_bits  # bench/bits.py, beside this script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from fsa_jit.compressed import compressed_attention  # noqa: E402
from fsa_jit.nsa import compress_mean  # noqa: E402
from fsa_jit.window import window_attention  # noqa: E402

L, STRIDE, W = 32, 16, 512


def digest(t):
    return hashlib.sha256(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]


def case(name, hq, g, dk, dv, lens):
    hkv = hq // g
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32, device="cuda")
    T = int(cu[-1])
    gen = torch.Generator(device="cuda").manual_seed(hq * 1000 + g * 10 + dk + T)
    q = torch.randn(T, hq, dk, generator=gen, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    k = torch.randn(T, hkv, dk, generator=gen, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    v = torch.randn(T, hkv, dv, generator=gen, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    dout = torch.randn(T, hq, dv, generator=gen, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        k_cmp, cu_c = compress_mean(k, cu, L, STRIDE)
        v_cmp, _ = compress_mean(v, cu, L, STRIDE)
    k_cmp.requires_grad_(True)
    v_cmp.requires_grad_(True)
    o_cmp, _ = compressed_attention(q, k_cmp, v_cmp, cu, cu_c, L, STRIDE)
    o_win = window_attention(q, k, v, cu, W)
    for branch, o, leaves in (("cmp", o_cmp, (q, k_cmp, v_cmp)), ("win", o_win, (q, k, v))):
        runs = [torch.autograd.grad(o, leaves, dout, retain_graph=True) for _ in range(2)]
        same = all(same_bits(a, b) for a, b in zip(*runs))
        print(f"{branch} {name:14s} " + " ".join(digest(x) for x in runs[0]) + f" run-to-run {'equal' if same else 'DIFFER'}",
              flush=True)


def main():
    for g in (1, 4, 16):
        case(f"g{g}_T16384", 32, g, 128, 128, [16384])
    case("g4_varlen", 32, 4, 128, 128, [1000, 1, 63, 3936, 193, 11191])
    case("paper_T8192", 64, 16, 192, 128, [8192])
    return 0


if __name__ == "__main__":
    sys.exit(main())
