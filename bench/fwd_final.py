"""Forward of the standard problem through the binding (bf16 and fp16, Hq 32, D 128, BK 64, K 16,
one sequence), CUDA events around each call, median of the repeats after a warm-up; with --sdpa also
dense causal GQA SDPA (torch) on the same inputs, in the same process.
    FSA_LIBRARY=... python3 fwd_final.py LABEL T:G,.. bf16,fp16 out.txt python_dir [--sdpa T,T:G,..]
"""
import sys
from pathlib import Path
import torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[5])
import fsa_jit  # noqa
from fsa_jit.cli import _selection  # noqa

label = sys.argv[1]
shapes = [tuple(int(y) for y in x.split(":")) for x in sys.argv[2].split(",")]
dtypes = sys.argv[3].split(",")
out = open(sys.argv[4], "a")
sdpa_at = set(sys.argv[7].split(",")) if len(sys.argv) > 7 and sys.argv[6] == "--sdpa" else set()  # "T" or "T:G"
D, hq, BK, K = 128, 32, 64, 16


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def sdpa(q, k, v):
    qs, ks, vs = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
    return F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)


for T, G in shapes:
    for dt in dtypes:
        dtype = torch.bfloat16 if dt == "bf16" else torch.float16
        gen = torch.Generator(device="cuda").manual_seed(1)
        hkv = hq // G
        q, k, v = (torch.randn(T, h, D, generator=gen, device="cuda").to(dtype) for h in (hq, hkv, hkv))
        topk = _selection(T, hkv, K, BK, gen, torch)
        cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
        reps = 20 if T <= 8192 else 8
        ms = median_ms(lambda: fsa_jit.selected_attention(q, k, v, topk, cu, BK, max_seqlen=T), reps)
        line = f"{label} {dt} T {T} G {G} fwd_ms {ms:.3f}"
        if str(T) in sdpa_at or f"{T}:{G}" in sdpa_at:
            line += f" sdpa_fwd_ms {median_ms(lambda: sdpa(q, k, v), 5 if T > 8192 else reps):.3f}"
        print(line); out.write(line + "\n"); out.flush()
        del q, k, v, topk
        torch.cuda.empty_cache()
