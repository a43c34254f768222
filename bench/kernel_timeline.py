"""Kernel timeline of one default-cap forward plus backward of the standard problem through the
binding (torch.profiler, which records every kernel of the process, libfsa's included): per kernel
name its count and total time, then each launch's start, duration and the gap before it (us).

    FSA_LIBRARY=build/libfsa.so python3 bench/kernel_timeline.py T G bf16|fp16 out.txt
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import fsa_jit  # noqa: E402
from fsa_jit.cli import _selection  # noqa: E402

T, G, dt, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dtype = torch.bfloat16 if dt == "bf16" else torch.float16
D, hq, BK, K = 128, 32, 64, 16
gen = torch.Generator(device="cuda").manual_seed(1)
hkv = hq // G
q, k, v = (torch.randn(T, h, D, generator=gen, device="cuda").to(dtype).requires_grad_() for h in (hq, hkv, hkv))
topk = _selection(T, hkv, K, BK, gen, torch)
cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
do = torch.randn(T, hq, D, generator=gen, device="cuda").to(dtype)

def step():
    o = fsa_jit.selected_attention(q, k, v, topk, cu, BK, max_seqlen=T)
    torch.autograd.grad(o, (q, k, v), do)

step(); step(); torch.cuda.synchronize()
from torch.profiler import ProfilerActivity, profile  # noqa: E402
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    step()
    torch.cuda.synchronize()
ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
rows = []
for e in ev:
    st = e.time_range.start
    rows.append((st, e.time_range.end - st, e.name))
rows.sort()
t0 = rows[0][0] if rows else 0
lines = []
prev_end = t0
gaps = 0.0
by = {}
for st, du, name in rows:
    gap = st - prev_end
    gaps += max(gap, 0)
    lines.append(f"{(st - t0):10.1f} {du:9.1f} gap {gap:7.1f} {name[:60]}")
    prev_end = max(prev_end, st + du)
    b = by.setdefault(name[:60], [0, 0.0])
    b[0] += 1; b[1] += du
with open(out, "w") as f:
    f.write(f"# T {T} G {G} {dt}: {len(rows)} device ops, span {(prev_end - t0):.1f} us, gaps {gaps:.1f} us\n")
    for n, (c, tot) in sorted(by.items(), key=lambda x: -x[1][1]):
        f.write(f"# {n:60s} n {c:4d} total {tot:9.1f} us mean {tot / c:8.1f}\n")
    f.write("\n".join(lines) + "\n")
print(open(out).read().splitlines()[0])
