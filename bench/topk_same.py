"""Whether two builds of libfsa select the same blocks, bit for bit, at the benchmark's shape (bf16, Hq 32,
D 128, kernel 32, stride 16, BK 64, K 16, init 1, local 2, one sequence; --hq / --dk for other head counts
and dims, e.g. the NSA paper's --hq 64 --dk 192): a change to the selection's
schedule must not move a single entry. The inputs are seeded on the GPU, so two processes (one per
library) see the same ones.

    FSA_LIBRARY=build-a/libfsa.so python3 bench/topk_same.py save a.pt [-T 65536] [-G 1,4,16] [--hq 32 --dk 128]
    FSA_LIBRARY=build-b/libfsa.so python3 bench/topk_same.py save b.pt [-T 65536] [-G 1,4,16] [--hq 32 --dk 128]
    python3 bench/topk_same.py compare a.pt b.pt
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def save(path, T, groups, hq=32, d=128):
    import fsa_jit
    from fsa_jit.nsa import compressed_cu_seqlens

    out = {}
    l, s = 32, 16
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    cu_c = compressed_cu_seqlens(cu, l, s)
    tc = int(cu_c[-1])
    for g in groups:
        gen = torch.Generator(device="cuda").manual_seed(1000 + g)
        q = torch.randn(T, hq, d, generator=gen, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(tc, hq // g, d, generator=gen, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(tc, hq // g, d, generator=gen, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            _, _, topk = fsa_jit.compressed_attention(q, k, v, cu, cu_c, l, s, top_k=16, block_size=64,
                                                      init_blocks=1, local_blocks=2)
        out[g] = topk.cpu()
        print(f"T {T} G {g}: rows {topk.shape[0] * topk.shape[1]}, entries set {int((topk >= 0).sum())}")
    torch.save(out, path)


def compare(a_path, b_path):
    a, b = torch.load(a_path), torch.load(b_path)
    bad = 0
    for g in sorted(a):
        if g not in b:
            print(f"G {g}: missing in {b_path}")
            bad += 1
            continue
        rows = (a[g] != b[g]).any(dim=-1)
        n = int(rows.sum())
        print(f"G {g}: {n} of {rows.numel()} (token, KV head) rows differ")
        bad += n
    print("same" if bad == 0 else "DIFFERENT")
    return 0 if bad == 0 else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["save", "compare"])
    ap.add_argument("files", nargs="+")
    ap.add_argument("-T", type=int, default=65536)
    ap.add_argument("-G", default="1,4,16")
    ap.add_argument("--hq", type=int, default=32, help="query heads (the paper's setting: 64)")
    ap.add_argument("--dk", type=int, default=128, help="head dim of queries and keys (the paper's setting: 192)")
    o = ap.parse_args()
    if o.mode == "save":
        save(o.files[0], o.T, [int(x) for x in o.G.split(",")], o.hq, o.dk)
        return 0
    return compare(o.files[0], o.files[1])


if __name__ == "__main__":
    sys.exit(main())
