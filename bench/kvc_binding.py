"""Decode through the PyTorch binding (fsa_jit.kvcache_attention) with a plan sized as a server sizes
it (max_batch 256): bf16, Hq 32, D 128, BK 64, K 16, page 64, L = 32K cached tokens, q_len 1, G 4 and
16. Per B: the time of one call in a CUDA graph (replayed back to back, CUDA events, median of rounds)
and of an eager call (wall time per call over back-to-back calls), for the fsa_jit package given: run
it once per tree, alternating, to compare bindings over one library.

    FSA_LIBRARY=build/libfsa.so python3 bench/kvc_binding.py --python python
"""
import argparse
import statistics
import sys
import time

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--python", default="python", help="the folder holding the fsa_jit package")
ap.add_argument("--B", default="1,16,64")
ap.add_argument("--G", default="4,16")
ap.add_argument("--rounds", type=int, default=5)
opts = ap.parse_args()

import torch  # noqa: E402

sys.path.insert(0, opts.python)
import fsa_jit as fsa  # noqa: E402
from fsa_jit.kvcache import kvcache_attention  # noqa: E402

L, HQ, D, BK, K, PAGE, MAX_BATCH = 32768, 32, 128, 64, 16, 64, 256


def problem(B, G):
    hkv = HQ // G
    gen = torch.Generator(device="cuda").manual_seed(B * 100 + G)
    pages = B * (L // PAGE)
    k = torch.randn(pages, PAGE, hkv, D, generator=gen, device="cuda").bfloat16()
    v = torch.randn(pages, PAGE, hkv, D, generator=gen, device="cuda").bfloat16()
    table = torch.randperm(pages, generator=gen, device="cuda").int().view(B, L // PAGE)
    own = (L - 1) // BK
    topk = torch.stack([torch.randperm(own, generator=gen, device="cuda")[: K - 1] for _ in range(B * hkv)])
    topk = torch.cat([topk, torch.full((B * hkv, 1), own, device="cuda")], 1).int().view(B, hkv, K)
    return dict(q=torch.randn(B, HQ, D, generator=gen, device="cuda").bfloat16(), k_cache=k, v_cache=v,
                cu_seqlens_q=torch.arange(B + 1, dtype=torch.int32, device="cuda"),
                seqused_k=torch.full((B,), L, dtype=torch.int32, device="cuda"), block_table=table,
                topk_idx=topk, block_size=BK, max_batch=MAX_BATCH, max_query_tokens=MAX_BATCH)


def graph_us(p, reps=50):
    kvcache_attention(**p)  # the plan, outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kvcache_attention(**p)
    for _ in range(5):
        g.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        g.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / reps


def eager_us(p, reps=200):
    for _ in range(10):
        kvcache_attention(**p)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        kvcache_attention(**p)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e6 / reps


print(f"# {torch.cuda.get_device_name()}; fsa_jit from {fsa.__file__}; L {L}, Hq {HQ}, D {D}, BK {BK}, K {K}, "
      f"page {PAGE}, q_len 1, max_batch {MAX_BATCH}; us per call, median of {opts.rounds} rounds (graph: 50 "
      "replays, eager: 200 calls)")
print("| package | G | B | graph us | eager us |")
print("|---|---|---|---|---|")
for G in [int(x) for x in opts.G.split(",")]:
    for B in [int(x) for x in opts.B.split(",")]:
        p = problem(B, G)
        g = statistics.median(graph_us(p) for _ in range(opts.rounds))
        e = statistics.median(eager_us(p) for _ in range(opts.rounds))
        print(f"| {opts.python} | {G} | {B} | {g:.1f} | {e:.1f} |", flush=True)
        del p
        torch.cuda.empty_cache()
