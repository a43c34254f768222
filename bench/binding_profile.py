"""Where the host time of one selected_attention call through the PyTorch binding goes: the whole call and
its pieces (argument checks, the custom operator, allocations, the stream and device lookups, the ctypes
structure, libfsa's own C call), each timed alone with the GPU idle at the start (synchronized before
each repeat, median of 60; what the call returns is freed after the timer stops), then with --cprofile
a cProfile of 60 calls. Standard problem (bf16, Hq 32, D 128, BK 64,
K 16), default cap.

    FSA_LIBRARY=build/libfsa.so python3 bench/binding_profile.py --python python --T 8192 --G 4

--python: the folder holding the fsa_jit package to measure (another tree's, to compare with main).
"""
import argparse
import cProfile
import ctypes
import io
import pstats
import statistics
import sys
import time

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--python", required=True)
p.add_argument("--T", type=int, default=8192)
p.add_argument("--G", type=int, default=4)
p.add_argument("--reps", type=int, default=60)
p.add_argument("--cprofile", action="store_true", help="also a cProfile of the forward calls")
args = p.parse_args()
sys.path.insert(0, args.python)

import torch  # noqa: E402

import fsa_jit  # noqa: E402
from fsa_jit import _lib, attention  # noqa: E402
from fsa_jit.cli import _selection  # noqa: E402

D, HQ, BK, K = 128, 32, 64, 16
T, G = args.T, args.G
hkv = HQ // G
gen = torch.Generator(device="cuda").manual_seed(1)
q = torch.randn(T, HQ, D, generator=gen, device="cuda").bfloat16()
k = torch.randn(T, hkv, D, generator=gen, device="cuda").bfloat16()
v = torch.randn(T, hkv, D, generator=gen, device="cuda").bfloat16()
do = torch.randn(T, HQ, D, generator=gen, device="cuda").bfloat16()
topk = _selection(T, hkv, K, BK, gen, torch)
cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
dev = q.device
print(f"# fsa_jit from {fsa_jit.__file__}, libfsa {fsa_jit.library_path()}; T {T} G {G}", flush=True)


def host_us(fn, reps=args.reps):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        r = fn()
        ts.append((time.perf_counter_ns() - t0) / 1e3)
        del r  # freeing the outputs (and an autograd graph) is not timed
    torch.cuda.synchronize()
    return statistics.median(ts), min(ts)


rows = []


def row(name, fn):
    try:
        med, best = host_us(fn)
        rows.append((name, med, best))
        print(f"{name:58s} median {med:8.1f} us  min {best:8.1f} us", flush=True)
    except Exception as e:  # a piece missing on one tree must not end the run
        print(f"{name:58s} failed: {type(e).__name__}: {e}", flush=True)


call = lambda: fsa_jit.selected_attention(q, k, v, topk, cu, BK, max_seqlen=T)  # noqa: E731
row("selected_attention, forward (whole call)", call)


def fwd_bwd():
    o = fsa_jit.selected_attention(qg, kg, vg, topk, cu, BK, max_seqlen=T)
    return torch.autograd.grad(o, (qg, kg, vg), do)


row("selected_attention + autograd.grad (whole fwd + bwd)", fwd_bwd)
row("  forward with grads (the autograd node's forward)", lambda: fsa_jit.selected_attention(qg, kg, vg, topk, cu, BK,
                                                                                           max_seqlen=T))
layout = "hkt"
row("check_arguments", lambda: attention.check_arguments(q, k, v, topk, cu, BK, None, T, "auto", None))
row("torch.ops.fsa_jit.selected_attention_fwd (dispatch + body)",
    lambda: torch.ops.fsa_jit.selected_attention_fwd(q, k, v, topk, cu, BK, 0.0, T, 0, layout, 0, False, False))
lib = _lib.get()
plan = attention._get_plan(lib, dev.index, q.dtype, D, HQ, hkv, BK, K, 0.0, 0, 0, False, False, D)
row("_get_plan (cached)", lambda: attention._get_plan(lib, dev.index, q.dtype, D, HQ, hkv, BK, K, 0.0, 0, 0, False,
                                                      False, D))
row("plan.workspace_bytes (ctypes, libfsa)", lambda: plan.workspace_bytes(lib, T, 1))
nbytes = plan.workspace_bytes(lib, T, 1)
row("torch.empty o + lse", lambda: (torch.empty((T, HQ, D), dtype=q.dtype, device=dev),
                                    torch.empty((HQ, T), dtype=torch.float32, device=dev)))
row(f"torch.empty workspace ({nbytes / 2**20:.0f} MiB)", lambda: torch.empty(nbytes, dtype=torch.uint8, device=dev))


def device_ctx():
    with torch.cuda.device(dev):
        pass


row("with torch.cuda.device(device)", device_ctx)
row("torch.cuda.current_stream(device).cuda_stream", lambda: torch.cuda.current_stream(dev).cuda_stream)
if hasattr(torch._C, "_cuda_getCurrentRawStream"):
    row("torch._C._cuda_getCurrentRawStream(index)", lambda: torch._C._cuda_getCurrentRawStream(dev.index))
o = torch.empty((T, HQ, D), dtype=q.dtype, device=dev)
lse = torch.empty((HQ, T), dtype=torch.float32, device=dev)
ws = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=dev)


def view(t):
    return _lib.fsa_tensor(t.data_ptr(), t.stride(0), t.stride(1))


def build_args():  # as main's operator built it per call
    return _lib.fsa_fwd_args(total_tokens=T, batch=1, max_seqlen=T, q=view(q), k=view(k), v=view(v), o=view(o),
                             topk=_lib.fsa_tensor(topk.data_ptr(), topk.stride(1), topk.stride(0)),
                             cu_seqlens=cu.data_ptr(), lse=lse.data_ptr(), workspace=ws.data_ptr(),
                             workspace_bytes=nbytes)


row("fsa_fwd_args(...) (ctypes structure, field by field)", build_args)
a = build_args()
stream = torch.cuda.current_stream(dev).cuda_stream
row("libfsa fsa_selected_attention_fwd alone (C call, enqueue)",
    lambda: lib.fsa_selected_attention_fwd(plan.handle, ctypes.byref(a), stream))

grad_plan = attention._get_plan(lib, dev.index, q.dtype, D, HQ, hkv, BK, K, 0.0, 0, 0, True, False, D)
row("libfsa fsa_selected_attention_fwd alone, backward plan",
    lambda: lib.fsa_selected_attention_fwd(grad_plan.handle, ctypes.byref(a), stream))
if lib.has_backward:
    nb = grad_plan.workspace_bytes(lib, T, 1, backward=True)
    wsb = torch.empty(max(nb, 1), dtype=torch.uint8, device=dev)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    b = _lib.fsa_bwd_args(total_tokens=T, batch=1, max_seqlen=T, q=view(q), k=view(k), v=view(v), o=view(o),
                          dout=view(do), dq=view(dq), dk=view(dk), dv=view(dv),
                          topk=_lib.fsa_tensor(topk.data_ptr(), topk.stride(1), topk.stride(0)),
                          cu_seqlens=cu.data_ptr(), lse=lse.data_ptr(), workspace=wsb.data_ptr(), workspace_bytes=nb)
    row("libfsa fsa_selected_attention_bwd alone (C call, enqueue)",
        lambda: lib.fsa_selected_attention_bwd(grad_plan.handle, ctypes.byref(b), stream))


class Empty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, topk, cu, e, batch, max_seqlen):
        ctx.save_for_backward(q, k, v, topk, cu)
        return q.new_empty(1), q.new_empty(1)

    @staticmethod
    def backward(ctx, g, _g2):
        return (None,) * 8


row("an empty autograd.Function.apply (same arguments)", lambda: Empty.apply(qg, kg, vg, topk, cu, None, 1, T))
row("  with autograd.grad through it (engine round trip)",
    lambda: torch.autograd.grad(Empty.apply(qg, kg, vg, topk, cu, None, 1, T)[0], (qg,), torch.ones(1, device=dev),
                                allow_unused=True))
if not args.cprofile:
    sys.exit(0)
prof = cProfile.Profile()
torch.cuda.synchronize()
for _ in range(args.reps):
    torch.cuda.synchronize()
    prof.enable()
    call()
    prof.disable()
torch.cuda.synchronize()
s = io.StringIO()
pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(22)
print(f"\n## cProfile of {args.reps} forward calls, by own time\n" + s.getvalue(), flush=True)
