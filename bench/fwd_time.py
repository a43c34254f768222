"""Forward-only timing of the standard problem through the binding (CUDA events, median), and the
kernel split of one profiled call per shape. VARIANTS: label=ENV=VAL/ENV=VAL;label2=... (plans are
recreated per variant; "-" for none).
    FSA_LIBRARY=... python3 fwd_time.py VARIANTS T:G,T:G.. bf16|fp16 out.txt [python_dir]
"""
import os
import sys
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[5] if len(sys.argv) > 5 else str(Path.cwd() / "python"))
import fsa_jit  # noqa
from fsa_jit import attention as _att  # noqa
from fsa_jit.cli import _selection  # noqa
from torch.profiler import ProfilerActivity, profile  # noqa

variants = []
for v in sys.argv[1].split(";"):
    name, _, envs = v.partition("=")
    env = dict(e.split("=", 1) for e in envs.split("/") if "=" in e)
    variants.append((name, env))
# Cleared before each variant: a variable one variant sets must not reach the next variant or shape.
named = {"FSA_WGMMA"} | {key for _, env in variants for key in env}
start_env = {key: os.environ[key] for key in named if key in os.environ}
shapes = [tuple(int(y) for y in x.split(":")) for x in sys.argv[2].split(",")]
dtype = torch.bfloat16 if sys.argv[3] == "bf16" else torch.float16
out = open(sys.argv[4], "a")
D, hq, BK, K = 128, 32, 64, 16
for T, G in shapes:
    if True:
        gen = torch.Generator(device="cuda").manual_seed(1)
        hkv = hq // G
        q, k, v = (torch.randn(T, h, D, generator=gen, device="cuda").to(dtype) for h in (hq, hkv, hkv))
        topk = _selection(T, hkv, K, BK, gen, torch)
        cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
        step = lambda: fsa_jit.selected_attention(q, k, v, topk, cu, BK, max_seqlen=T)
        for label, env in variants:
            for key in named:
                os.environ.pop(key, None)
            os.environ.update(env)
            _att.clear_plans()
            step(); torch.cuda.synchronize()
            for i in range(3):
                step()
            torch.cuda.synchronize()
            ts = []
            reps = 20 if T <= 8192 else 8
            for i in range(reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(); step(); b.record(); b.synchronize()
                ts.append(a.elapsed_time(b))
            ts.sort()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                step(); torch.cuda.synchronize()
            by = {}
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    n = e.name.replace("fsa_sel_", "")[:14]
                    by[n] = by.get(n, 0.0) + (e.time_range.end - e.time_range.start)
            split = " ".join(f"{n}={us / 1000:.3f}" for n, us in sorted(by.items(), key=lambda x: -x[1]) if us > 5)
            line = f"{label} {sys.argv[3]} T {T} G {G} fwd_ms {ts[len(ts) // 2]:.3f} min {ts[0]:.3f} | {split}"
            print(line); out.write(line + "\n"); out.flush()
        del q, k, v, topk
        torch.cuda.empty_cache()
for key in named:  # the environment the script started with
    os.environ.pop(key, None)
os.environ.update(start_env)
