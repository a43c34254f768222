#!/usr/bin/env python3
"""Digests of the NSA layer's output and gradients (fsa_jit.nsa.nsa_attention, the eager node), to compare two
libraries bit for bit across processes: seeded inputs on the GPU, forward plus backward run twice in the
process (run-to-run determinism), one line per case with the SHA-256 prefix of o and of each gradient.

    FSA_LIBRARY=build-a/libfsa.so python3 bench/layer_bits.py > a.txt
    FSA_LIBRARY=build-b/libfsa.so python3 bench/layer_bits.py > b.txt
    diff a.txt b.txt

Cases: the paper's shape (bf16, Hq 64, Hkv 4, Dk 192, Dv 128, kernel 32, stride 16, BK 64, K 16, W 512) on one
sequence of 8192 tokens with sigmoid gates (NSA's: positive), the same with gates of both signs, and a varlen
batch of 5 sequences.
"""
import hashlib
import sys
from pathlib import Path

import torch

from bits import same_bits  # bench/bits.py, beside this script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from fsa_jit.nsa import compress_mean, nsa_attention  # noqa: E402

HQ, HKV, DK, DV, L, STRIDE = 64, 4, 192, 128, 32, 16
NAMES = ("o", "dq", "dk", "dv", "dk_cmp", "dv_cmp", "dg_cmp", "dg_sel", "dg_win")


def digest(t):
    return hashlib.sha256(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]


def case(name, lens, signed_gates):
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32, device="cuda")
    T = int(cu[-1])
    gen = torch.Generator(device="cuda").manual_seed(T + (7 if signed_gates else 0))
    rnd = lambda *shape: torch.randn(*shape, generator=gen, device="cuda", dtype=torch.bfloat16)  # noqa: E731
    q, k, v = rnd(T, HQ, DK), rnd(T, HKV, DK), rnd(T, HKV, DV)
    gates = [rnd(T, HQ) if signed_gates else torch.sigmoid(rnd(T, HQ).float()).to(torch.bfloat16) for _ in range(3)]
    dout = rnd(T, HQ, DV)
    k_cmp, cu_c = compress_mean(k, cu, L, STRIDE)
    v_cmp, _ = compress_mean(v, cu, L, STRIDE)
    leaves = [q, k, v, k_cmp, v_cmp] + gates
    for t in leaves:
        t.requires_grad_(True)
    runs = []
    for _ in range(2):
        o = nsa_attention(q, k, v, k_cmp, v_cmp, *gates, cu, cu_c, kernel_size=L, stride=STRIDE, block_size=64,
                          top_k=16, window=512)
        runs.append([o] + list(torch.autograd.grad(o, leaves, dout)))
    same = all(same_bits(a, b) for a, b in zip(*runs))
    print(f"{name:14s} " + " ".join(f"{n}={digest(x)}" for n, x in zip(NAMES, runs[0])) +
          f" run-to-run {'equal' if same else 'DIFFER'}", flush=True)


def main():
    case("paper_T8192", [8192], False)
    case("paper_signed", [8192], True)
    case("paper_varlen", [1000, 1, 63, 3000, 2129], False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
