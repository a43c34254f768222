"""Whether two settings of the selected forward give the same bits: o and lse of the standard problem
(bf16, Hq 32, D 128, BK 64, K 16, one sequence of T tokens) under each case's environment, compared bit
for bit (not torch.equal's values: +0 == -0, NaN != NaN), plus the largest difference when they are not equal.

    FSA_LIBRARY=build/libfsa.so python3 bench/fwd_bits.py 8192:4 8192:1:FSA_FWD_WG=10 ...

Each case: 'T:G' then ':NAME=VALUE' settings; the first setting of a (T, G) is the baseline its later
cases are compared against (a case without settings runs the library's defaults). The plans are dropped
around every case (the variables are read when a plan is made).
"""
import os
import sys
from pathlib import Path

import torch

from bits import same_bits  # bench/bits.py, beside this script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import fsa_jit  # noqa: E402
from fsa_jit.cli import _selection  # noqa: E402

D, HQ, BK, K = 128, 32, 64, 16


inputs, base = {}, {}
for spec in sys.argv[1:]:
    T, G, *env = spec.split(":")
    T, G = int(T), int(G)
    if (T, G) not in inputs:
        gen = torch.Generator(device="cuda").manual_seed(1)
        hkv = HQ // G
        q, k, v = (torch.randn(T, h, D, generator=gen, device="cuda").to(torch.bfloat16) for h in (HQ, hkv, hkv))
        inputs[(T, G)] = (q, k, v, _selection(T, hkv, K, BK, gen, torch), torch.tensor([0, T], dtype=torch.int32, device="cuda"))
    q, k, v, topk, cu = inputs[(T, G)]
    for e in env:
        os.environ[e.split("=")[0]] = e.split("=", 1)[1]
    fsa_jit.clear_plans()
    o, lse = fsa_jit.selected_attention(q, k, v, topk, cu, BK, max_seqlen=T, return_lse=True)
    o2, lse2 = fsa_jit.selected_attention(q, k, v, topk, cu, BK, max_seqlen=T, return_lse=True)
    torch.cuda.synchronize()
    for e in env:
        del os.environ[e.split("=")[0]]
    fsa_jit.clear_plans()
    same_run = same_bits(o, o2) and same_bits(lse, lse2)
    if (T, G) not in base:
        base[(T, G)] = (o, lse, spec)
        print(f"{spec}: baseline; run to run {'same bits' if same_run else 'DIFFERENT bits'}", flush=True)
        continue
    bo, blse, bspec = base[(T, G)]
    eq = same_bits(o, bo) and same_bits(lse, blse)
    dmax = (o.float() - bo.float()).abs().max().item()
    print(f"{spec}: {'same bits as' if eq else 'DIFFERENT from'} {bspec} (max |do| {dmax:.3g}); run to run "
          f"{'same bits' if same_run else 'DIFFERENT bits'}", flush=True)
