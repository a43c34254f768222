"""SHA-256 of o, lse, dq, dk and dv of one forward and backward per case, through the binding, so that
two builds (main and a branch) can be compared bit for bit on the same inputs (fixed seeds).

    FSA_LIBRARY=build/libfsa.so python3 bench/idx_bits.py out.txt 65536:1 8192:16 3000+70000:4 ...

Each case: 'LENS:G' with LENS one sequence length or several joined by '+' (a varlen batch); the
standard problem otherwise (Hq 32, D 128, BK 64, K 16, bf16, the fsa-bench selection per sequence).
"""
import hashlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import fsa_jit  # noqa: E402
from fsa_jit.cli import _selection  # noqa: E402

D, HQ, BK, K = 128, 32, 64, 16


def sha(t):
    return hashlib.sha256(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]


def case(lens, G, f):
    hkv = HQ // G
    T = sum(lens)
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(T, h, D, generator=gen, device="cuda").to(torch.bfloat16).requires_grad_()
               for h in (HQ, hkv, hkv))
    topk = torch.cat([_selection(n, hkv, K, BK, gen, torch) for n in lens], dim=1)
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32, device="cuda")
    do = torch.randn(T, HQ, D, generator=gen, device="cuda").to(torch.bfloat16)
    o, lse = fsa_jit.selected_attention(q, k, v, topk, cu, BK, max_seqlen=max(lens), return_lse=True,
                                        algorithm="fsa")
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    label = "+".join(map(str, lens))
    for name, t in (("o", o), ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dv)):
        f.write(f"{label}:{G} {name} {sha(t)}\n")
    f.flush()
    del q, k, v, topk, do, o, lse, dq, dk, dv
    torch.cuda.empty_cache()


with open(sys.argv[1], "w") as f:
    for spec in sys.argv[2:]:
        lens, G = spec.split(":")
        case([int(n) for n in lens.split("+")], int(G), f)
print(open(sys.argv[1]).read())
