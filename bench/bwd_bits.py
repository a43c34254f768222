"""Digests of the selected backward's gradients, to compare two libraries (or settings) bit for bit
across processes: dq, dk and dv of the standard problem (bf16, Hq 32, D 128, BK 64, K 16, one sequence
of T tokens, seeded inputs) under each case's workspace limit and environment, each call run twice
(run-to-run determinism), one line per case with the SHA-256 of each gradient's bytes.

    FSA_LIBRARY=build/libfsa.so python3 bench/bwd_bits.py 65536:16:default 65536:16:default:FSA_INDEX_ONCE=0 ...

Each case: 'T:G:limit' (limit 'default', 'unlimited' or bytes), then ':NAME=VALUE' settings (read when
a plan is made: the plans are dropped around every case). Run it with each library and diff the lines.
"""
import hashlib
import os
import sys
from pathlib import Path

import torch

from bits import same_bits  # bench/bits.py, beside this script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import fsa_jit  # noqa: E402
from fsa_jit.cli import _selection  # noqa: E402

D, HQ, BK, K = 128, 32, 64, 16


def digest(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]


inputs = {}
for spec in sys.argv[1:]:
    T, G, limit, *env = spec.split(":")
    T, G = int(T), int(G)
    if (T, G) not in inputs:
        inputs.clear()
        torch.cuda.empty_cache()
        gen = torch.Generator(device="cuda").manual_seed(1)
        hkv = HQ // G
        q, k, v = (torch.randn(T, h, D, generator=gen, device="cuda").to(torch.bfloat16).requires_grad_()
                   for h in (HQ, hkv, hkv))
        topk = _selection(T, hkv, K, BK, gen, torch)
        do = torch.randn(T, HQ, D, generator=gen, device="cuda").to(torch.bfloat16)
        inputs[(T, G)] = (q, k, v, topk, torch.tensor([0, T], dtype=torch.int32, device="cuda"), do)
    q, k, v, topk, cu, do = inputs[(T, G)]
    for e in env:
        os.environ[e.split("=")[0]] = e.split("=", 1)[1]
    fsa_jit.clear_plans()
    lim = None if limit == "default" else limit
    runs = []
    for _ in range(2):
        o = fsa_jit.selected_attention(q, k, v, topk, cu, BK, max_seqlen=T, workspace_limit=lim)
        runs.append(torch.autograd.grad(o, (q, k, v), do))
        del o
    for e in env:
        del os.environ[e.split("=")[0]]
    fsa_jit.clear_plans()
    same = all(same_bits(a, b) for a, b in zip(*runs))
    d = [digest(g) for g in runs[0]]
    del runs
    print(f"{spec}: dq {d[0]} dk {d[1]} dv {d[2]}; run to run {'same bits' if same else 'DIFFERENT bits'}",
          flush=True)
