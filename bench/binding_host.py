"""Where a forward through the PyTorch binding spends its time, standard problem (bf16, Hq 32, D 128,
BK 64, K 16), T 8192 and 65536, G 1 / 4 / 16, default cap and unlimited: CUDA events around one call
started on an idle GPU (as bench/compare.py times it), the host time of the Python call, the time per
call of ten calls back to back (the GPU never waits for the host), and the profiled device span.

    FSA_LIBRARY=build/libfsa.so python3 bench/binding_host.py [--T 8192 --G 1,4,16 --limits default]

--python DIR: measure the fsa_jit package in DIR (default: this tree's python/), e.g. main's.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--python", default=str(Path(__file__).resolve().parents[1] / "python"))
ap.add_argument("--T", default="8192,65536")
ap.add_argument("--G", default="1,4,16")
ap.add_argument("--limits", default="default,unlimited")
ap.add_argument("--reps", type=int, default=15, help="calls started on an idle GPU (medians)")
opts = ap.parse_args()

import torch  # noqa: E402

sys.path.insert(0, opts.python)
import fsa_jit  # noqa: E402
from fsa_jit.cli import _selection  # noqa: E402
from torch.profiler import profile, ProfilerActivity  # noqa: E402

print(f"# fsa_jit from {fsa_jit.__file__}, libfsa {fsa_jit.library_path()}", flush=True)
D, HQ, BK, K = 128, 32, 64, 16
for T in [int(x) for x in opts.T.split(",")]:
    for G in [int(x) for x in opts.G.split(",")]:
        hkv = HQ // G
        gen = torch.Generator(device="cuda").manual_seed(1)
        q = torch.randn(T, HQ, D, generator=gen, device="cuda").bfloat16()
        k = torch.randn(T, hkv, D, generator=gen, device="cuda").bfloat16()
        v = torch.randn(T, hkv, D, generator=gen, device="cuda").bfloat16()
        topk = _selection(T, hkv, K, BK, gen, torch); cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
        for lim in [None if x == "default" else x for x in opts.limits.split(",")]:
            f = lambda: fsa_jit.selected_attention(q, k, v, topk, cu, BK, max_seqlen=T, workspace_limit=lim)
            for _ in range(5): f()
            torch.cuda.synchronize()
            host, ev = [], []
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(opts.reps):
                torch.cuda.synchronize(); s.record(); t0 = time.perf_counter(); f(); t1 = time.perf_counter(); e.record(); e.synchronize()
                host.append((t1 - t0) * 1e3); ev.append(s.elapsed_time(e))
            # back to back (GPU never idle): per-call device-bound time
            torch.cuda.synchronize(); s.record()
            for _ in range(10): f()
            e.record(); e.synchronize(); b2b = s.elapsed_time(e) / 10
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                f(); torch.cuda.synchronize()
            evs = [x for x in prof.events() if x.device_type == torch.autograd.DeviceType.CUDA]
            span = (max(x.time_range.end for x in evs) - min(x.time_range.start for x in evs)) / 1e3
            busy = sum(x.time_range.end - x.time_range.start for x in evs) / 1e3
            print(f"T {T} G {G} limit {lim}: event {statistics.median(ev):.3f} ms, host call {statistics.median(host):.3f} ms, back-to-back {b2b:.3f} ms, device span {span:.3f} ms, kernel time {busy:.3f} ms, {len(evs)} device ops", flush=True)
