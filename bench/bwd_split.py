"""Where the selected-attention backward's time goes: per kernel name, the count and total device
time of one backward (torch.profiler over autograd.grad of a forward done outside the profile) of
the standard problem, for several (T, G, workspace limit) cases in one process; the forward's split
(one forward in a profile of its own) comes first.

    FSA_LIBRARY=build/libfsa.so python3 bench/bwd_split.py out.txt 65536:4:default 65536:4:unlimited ...

Each case: 'T:G:limit' (limit 'default' = the library's cap, 'unlimited', or bytes), optionally
':NAME=VALUE' after it: an environment variable the library reads set for that case only.
BWD_SPLIT_TIMELINE=1: the backward's launches one by one as well (start, duration and the gap
before each, us), to see each chunk's kernels and tails.
"""
import os
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import fsa_jit  # noqa: E402
from fsa_jit.cli import _selection  # noqa: E402

D, HQ, BK, K = 128, 32, 64, 16


def split(label, fn, f, timeline=False):
    """Profiles fn() (device work only) and writes its per-kernel split under label."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        r = fn()
        torch.cuda.synchronize()
    rows = sorted((e.time_range.start, e.time_range.end - e.time_range.start, e.name)
                  for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    t0 = rows[0][0] if rows else 0
    end = max((s + d for s, d, _ in rows), default=t0)
    by = {}
    for _, du, name in rows:
        b = by.setdefault(name[:48], [0, 0.0])
        b[0] += 1
        b[1] += du
    f.write(f"## {label}: {len(rows)} device ops, span {(end - t0) / 1000:.3f} ms\n")
    for n, (c, tot) in sorted(by.items(), key=lambda x: -x[1][1]):
        f.write(f"  {n:48s} n {c:4d} total {tot:9.1f} us mean {tot / c:8.1f}\n")
    if timeline:
        prev = t0
        for s, du, name in rows:
            f.write(f"    at {(s - t0):9.1f} dur {du:8.1f} gap {(s - prev):7.1f} {name[:40]}\n")
            prev = s + du
    f.flush()
    return r


def case(T, G, limit, f, env=()):
    hkv = HQ // G
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(T, h, D, generator=gen, device="cuda").to(torch.bfloat16).requires_grad_()
               for h in (HQ, hkv, hkv))
    topk = _selection(T, hkv, K, BK, gen, torch)
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    do = torch.randn(T, HQ, D, generator=gen, device="cuda").to(torch.bfloat16)
    lim = None if limit == "default" else limit
    label = f"{limit}{''.join(' ' + e for e in env)}"

    def fwd():
        return fsa_jit.selected_attention(q, k, v, topk, cu, BK, max_seqlen=T, workspace_limit=lim)

    for _ in range(2):
        torch.autograd.grad(fwd(), (q, k, v), do)
    o = split(f"forward T {T} G {G} limit {label}", fwd, f)
    split(f"T {T} G {G} limit {label}", lambda: torch.autograd.grad(o, (q, k, v), do), f,
          os.environ.get("BWD_SPLIT_TIMELINE") == "1")
    del q, k, v, topk, do, o
    torch.cuda.empty_cache()


with open(sys.argv[1], "w") as f:
    for spec in sys.argv[2:]:
        T, G, limit, *env = spec.split(":")
        for e in env:
            os.environ[e.split("=")[0]] = e.split("=", 1)[1]
        if env:
            fsa_jit.clear_plans()  # variables read when a plan is made (FSA_WGMMA_SEL_BWD, say)
        case(int(T), int(G), limit, f, env)
        for e in env:
            del os.environ[e.split("=")[0]]
        if env:
            fsa_jit.clear_plans()
print(open(sys.argv[1]).read())
