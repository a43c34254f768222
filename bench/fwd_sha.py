"""SHA-256 of o and lse of one forward per case through the binding (fixed seeds), so that two builds (main
and a branch) can be compared bit for bit on the same inputs; forward-only sibling of idx_bits.py.

    FSA_LIBRARY=build/libfsa.so python3 bench/fwd_sha.py out.txt 8192:1 8192:16 3000+70000:4 ...

Each case: 'LENS:G' with LENS one sequence length or several joined by '+' (a varlen batch); the
standard problem otherwise (Hq 32, D 128, BK 64, K 16, bf16, the fsa-bench selection per sequence),
the library's default workspace cap.
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


with open(sys.argv[1], "w") as f:
    for spec in sys.argv[2:]:
        lens, G = spec.split(":")
        lens, G = [int(n) for n in lens.split("+")], int(G)
        hkv, T = HQ // G, sum(lens)
        gen = torch.Generator(device="cuda").manual_seed(7)
        q, k, v = (torch.randn(T, h, D, generator=gen, device="cuda").to(torch.bfloat16) for h in (HQ, hkv, hkv))
        topk = torch.cat([_selection(n, hkv, K, BK, gen, torch) for n in lens], dim=1)
        cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32, device="cuda")
        o, lse = fsa_jit.selected_attention(q, k, v, topk, cu, BK, max_seqlen=max(lens), return_lse=True,
                                            algorithm="fsa")
        f.write(f"{spec} o {sha(o)} lse {sha(lse)}\n")
        f.flush()
        del q, k, v, topk, o, lse
        torch.cuda.empty_cache()
print(open(sys.argv[1]).read())
