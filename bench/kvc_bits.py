#!/usr/bin/env python3
"""Paged-cache attention outputs of one libfsa build, saved for a bit-for-bit
comparison with another build (e.g. a branch against main in the same GPU run).

    FSA_LIBRARY=A/libfsa.so PYTHONPATH=python python3 bench/kvc_bits.py --save a.pt
    FSA_LIBRARY=B/libfsa.so PYTHONPATH=python python3 bench/kvc_bits.py --save b.pt
    python3 bench/kvc_bits.py --compare a.pt b.pt

Problems (bf16, Hq 32, D 128, BK 64, K 16, page 64, shuffled pages): G 1 / 4 / 16, 64 sequences of
3000 cached keys with q_len 1, 4 with one selection shared by the tokens, and 4 with their own
selections (split sequences: the share epilogue, the union, the merge), plus one sequence alone.
"""
import argparse
import sys

import torch


def problem(g, B, q_len, shared, seed):
    gen = torch.Generator().manual_seed(seed)
    hq, d, page, bk, k, L = 32, 128, 64, 64, 16, 3000
    hkv = hq // g
    pages_per = (L + page - 1) // page
    num_pages = B * pages_per + 1
    perm = torch.randperm(num_pages, generator=gen).to(torch.int32)
    table = perm[: B * pages_per].view(B, pages_per).contiguous()
    dgen = torch.Generator(device="cuda").manual_seed(seed)  # the large tensors made on the device
    k_cache = torch.randn((num_pages, page, hkv, d), generator=dgen, device="cuda").to(torch.bfloat16)
    v_cache = torch.randn((num_pages, page, hkv, d), generator=dgen, device="cuda").to(torch.bfloat16)
    tq = B * q_len
    q = torch.randn((tq, hq, d), generator=dgen, device="cuda").to(torch.bfloat16)
    topk = torch.full((tq, hkv, k), -1, dtype=torch.int32)
    for b in range(B):
        for i in range(q_len):
            own = (L - q_len + i) // bk
            for h in range(hkv):
                if shared and i > 0:
                    topk[b * q_len + i, h] = topk[b * q_len, h]
                    continue
                cand = torch.randperm(own + 1, generator=gen)[:k].to(torch.int32)
                topk[b * q_len + i, h, : len(cand)] = cand
                topk[b * q_len + i, h, 0] = own
    dev = "cuda"
    return dict(q=q, k_cache=k_cache, v_cache=v_cache,
                cu_seqlens_q=torch.arange(0, tq + 1, q_len, dtype=torch.int32, device=dev),
                seqused_k=torch.full((B,), L, dtype=torch.int32, device=dev), block_table=table.to(dev),
                topk_idx=topk.to(dev), block_size=bk)


def save(path):
    from fsa_jit.kvcache import kvcache_attention
    out = {}
    for g in (1, 4, 16):
        for B, q_len, shared in ((64, 1, False), (1, 1, False), (64, 4, True), (64, 4, False), (1, 4, False)):
            p = problem(g, B, q_len, shared, seed=g * 100 + B + q_len)
            o, lse = kvcache_attention(**p, return_lse=True)
            out[f"g{g}_b{B}_q{q_len}_{'shared' if shared else 'own'}"] = (o.cpu(), lse.cpu())
    torch.cuda.synchronize()
    torch.save(out, path)
    print(f"saved {len(out)} outputs to {path}")


def compare(a_path, b_path):
    a, b = torch.load(a_path), torch.load(b_path)
    same = 0
    for key in a:
        oa, la = a[key]
        ob, lb = b[key]
        eq = torch.equal(oa.view(torch.int16), ob.view(torch.int16)) and torch.equal(la.view(torch.int32), lb.view(torch.int32))
        diff = (oa.float() - ob.float()).abs().max().item()
        print(f"{key:24s} {'same bits' if eq else 'DIFFERENT'} (max |o diff| {diff:.3g})")
        same += eq
    print(f"{same} of {len(a)} outputs bit-identical")
    return 0 if same == len(a) else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--save")
    ap.add_argument("--compare", nargs=2)
    args = ap.parse_args()
    if args.save:
        save(args.save)
    if args.compare:
        sys.exit(compare(*args.compare))
