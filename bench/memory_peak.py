"""Peak device memory of one forward plus backward through the PyTorch binding: what torch's allocator
hands out beyond what existed before the call (outputs and gradients included), standard problem
(bf16, Hq 32, D 128, BK 64, K 16, one sequence), default cap against no cap.

    FSA_LIBRARY=build/libfsa.so python3 bench/memory_peak.py -T 65536 -G 1,4,16 [--dtype bf16]
"""

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import fsa_jit  # noqa: E402
from fsa_jit.cli import _selection  # noqa: E402


def peak_bytes(T, G, dtype, limit, D=128, hq=32, BK=64, K=16):
    gen = torch.Generator(device="cuda").manual_seed(T + G)
    hkv = hq // G
    q, k, v = (torch.randn(T, h, D, generator=gen, device="cuda").to(dtype).requires_grad_() for h in (hq, hkv, hkv))
    topk = _selection(T, hkv, K, BK, gen, torch)
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    do = torch.randn(T, hq, D, generator=gen, device="cuda").to(dtype)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    o = fsa_jit.selected_attention(q, k, v, topk, cu, BK, max_seqlen=T, workspace_limit=limit)
    o.backward(do)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    own = 2 * q.nbytes + k.nbytes + v.nbytes + 4 * T * hq  # o, lse, dq, dk, dv
    return peak, own


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-T", default="65536")
    p.add_argument("-G", default="1,4,16")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--limits", default="default,unlimited", help="'default' (None), 'unlimited' or bytes")
    p.add_argument("--json")
    a = p.parse_args()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    rows = []
    print(f"# {torch.cuda.get_device_name()}, {a.dtype}; GB = 1e9 bytes beyond the inputs")
    print("|      T |  G | limit     | peak GB | outputs+grads GB | workspace GB |")
    for T in map(int, a.T.split(",")):
        for G in map(int, a.G.split(",")):
            for name in a.limits.split(","):
                limit = None if name == "default" else name
                peak, own = peak_bytes(T, G, dtype, limit)
                rows.append(dict(T=T, G=G, limit=name, peak_bytes=peak, outputs_grads_bytes=own))
                print(f"| {T:6d} | {G:2d} | {name:9s} | {peak / 1e9:7.3f} | {own / 1e9:16.3f} | "
                      f"{(peak - own) / 1e9:12.3f} |", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
