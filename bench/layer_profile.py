#!/usr/bin/env python3
"""Where the whole NSA layer's time goes (bench/nsa_layer.py's setting and inputs), kernel by kernel:
torch.profiler device times of one forward (no grad, as nsa_layer.py times it), one forward with grad
and one backward (autograd.grad over a retained forward), grouped by what each kernel does (each
branch's kernels, the selection, the selected attention's index, PyTorch's gating glue and copies),
with the span of the section, the device's busy time (union of the kernels' intervals) and its idle
time (launch gaps, host work). Then each branch's backward alone (as bench/branch_bwd.py runs it) in
the same process, so that the layer's backward kernels can be set against the branches' own.

Event timings (median of --reps) of the same sections are printed beside the profiles; --timeline also
lists the layer forward's and backward's device ops in order with the idle gaps before each.

    FSA_LIBRARY=build/libfsa.so python3 bench/layer_profile.py --T 65536,8192 --out prof.txt
"""

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fsa_jit.attention import selected_attention  # noqa: E402
from fsa_jit.compressed import compressed_attention  # noqa: E402
from fsa_jit.nsa import compress_mean, nsa_attention  # noqa: E402
from fsa_jit.window import window_attention  # noqa: E402
from nsa_layer import layer_inputs  # noqa: E402  (this directory)

# (category, name prefixes): first match wins; everything else is PyTorch's.
CATEGORIES = (
    ("compressed fwd", ("fsa_cmp_fwd",)),
    ("selection (top-k)", ("fsa_cmp_select",)),
    ("compressed bwd", ("fsa_cmp_bwd",)),
    ("selected index", ("fsa_sel_count", "fsa_sel_scatter", "fsa_sel_sort")),
    ("selected fwd", ("fsa_sel_fwd",)),
    ("selected bwd", ("fsa_sel_bwd",)),
    ("window fwd", ("fsa_swa_fwd",)),
    ("window bwd", ("fsa_swa_bwd",)),
    ("libfsa fill / checks", ("fsa_",)),
)


def category(name):
    for cat, prefixes in CATEGORIES:
        if name.startswith(prefixes):
            return cat
    low = name.lower()
    if "memcpy" in low or "copy" in low:
        return "torch copies"
    if "memset" in low or "fill" in low:
        return "torch fills"
    if "reduce" in low or "sum" in low:
        return "torch reductions (gate grads)"
    return "torch elementwise (gates, casts)"


def events_ms(fn, reps):
    """Median ms of fn() by CUDA events, after one untimed call."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def profiled(fn):
    """[(start us, duration us, name)] of the device work of one fn() call."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted((e.time_range.start, e.time_range.end - e.time_range.start, e.name)
                  for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def timeline(f, rows):
    """Each device op in order: its start after the first op's, its length and the idle gap before it."""
    t0, cover = rows[0][0], rows[0][0]
    f.write("| start us | gap us | us | op |\n|---:|---:|---:|---|\n")
    for st, du, name in rows:
        f.write(f"| {st - t0:.1f} | {max(0.0, st - cover):.1f} | {du:.1f} | {name[:60]} |\n")
        cover = max(cover, st + du)
    f.write("\n")


def report(f, title, rows, event_ms=None, gaps=False):
    if not rows:
        f.write(f"## {title}: no device work recorded\n\n")
        return {}
    t0 = rows[0][0]
    end, busy, cover = t0, 0.0, t0
    for st, du, _ in rows:
        if st + du > cover:
            busy += st + du - max(st, cover)
            cover = st + du
        end = max(end, st + du)
    span = end - t0
    ev = f", events {event_ms:.3f} ms" if event_ms is not None else ""
    f.write(f"## {title}: {len(rows)} device ops, span {span / 1e3:.3f} ms, busy {busy / 1e3:.3f} ms, "
            f"idle {(span - busy) / 1e3:.3f} ms{ev}\n")
    cats, names = {}, {}
    for _, du, name in rows:
        c = cats.setdefault(category(name), [0, 0.0])
        c[0] += 1
        c[1] += du
        n = names.setdefault(name[:72], [0, 0.0])
        n[0] += 1
        n[1] += du
    f.write("| what | launches | device ms | share of busy |\n|---|---:|---:|---:|\n")
    for cat, (c, tot) in sorted(cats.items(), key=lambda x: -x[1][1]):
        f.write(f"| {cat} | {c} | {tot / 1e3:.3f} | {100 * tot / busy:.1f}% |\n")
    f.write("\nper kernel:\n")
    for n, (c, tot) in sorted(names.items(), key=lambda x: -x[1][1]):
        f.write(f"    {n:72s} n {c:4d} total {tot / 1e3:9.3f} ms mean {tot / c / 1e3:8.3f}\n")
    f.write("\n")
    if gaps:
        timeline(f, rows)
    f.flush()
    return {cat: tot / 1e3 for cat, (_, tot) in cats.items()}


def layer(T, a, f):
    q, k, v, gates = layer_inputs(T, a.hq, a.hkv, a.dk, a.dv, a.dtype)
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    k_cmp, cu_c = compress_mean(k, cu, a.kernel, a.stride)
    v_cmp, _ = compress_mean(v, cu, a.kernel, a.stride)
    leaves = [q, k, v, k_cmp, v_cmp] + gates
    for t in leaves:
        t.requires_grad_(True)
    kw = dict(kernel_size=a.kernel, stride=a.stride, block_size=a.bk, top_k=a.topk, window=a.window)
    dout = torch.randn(T, a.hq, a.dv, device="cuda", dtype=a.dtype)

    def fwd():
        with torch.no_grad():
            return nsa_attention(q, k, v, k_cmp, v_cmp, *gates, cu, cu_c, **kw)

    def fwd_grad():
        return nsa_attention(q, k, v, k_cmp, v_cmp, *gates, cu, cu_c, **kw)

    def fwd_bwd():
        torch.autograd.grad(fwd_grad(), leaves, dout)

    fwd_bwd()
    fwd()
    ms = {"fwd": events_ms(fwd, a.reps), "fwd_bwd": events_ms(fwd_bwd, a.reps)}
    f.write(f"# T {T}: events, median of {a.reps}: forward {ms['fwd']:.3f} ms, forward + backward "
            f"{ms['fwd_bwd']:.3f} ms, difference {ms['fwd_bwd'] - ms['fwd']:.3f} ms\n\n")
    report(f, f"T {T} layer forward (no grad)", profiled(fwd), ms["fwd"], a.timeline)
    report(f, f"T {T} layer forward (grad enabled)", profiled(fwd_grad))
    o = fwd_grad()
    bwd_ms = events_ms(lambda: torch.autograd.grad(o, leaves, dout, retain_graph=True), a.reps)
    report(f, f"T {T} layer backward (autograd.grad of a retained forward)",
           profiled(lambda: torch.autograd.grad(o, leaves, dout, retain_graph=True)), bwd_ms, a.timeline)
    report(f, f"T {T} layer forward + backward", profiled(fwd_bwd), ms["fwd_bwd"])
    del o
    if not a.branches:
        return
    # Each branch's backward alone, as bench/branch_bwd.py runs it (same inputs as the layer's).
    o_cmp, _, topk = compressed_attention(q, k_cmp, v_cmp, cu, cu_c, a.kernel, a.stride, top_k=a.topk,
                                          block_size=a.bk)
    alone = {
        "compressed": (o_cmp, (q, k_cmp, v_cmp)),
        "window": (window_attention(q, k, v, cu, a.window), (q, k, v)),
        "selected": (selected_attention(q, k, v, topk, cu, a.bk, max_seqlen=T, topk_layout="thk"), (q, k, v)),
    }
    for name, (out, inputs) in alone.items():
        do = dout if out.shape == dout.shape else torch.randn_like(out)
        step = (lambda out=out, inputs=inputs, do=do: torch.autograd.grad(out, inputs, do, retain_graph=True))
        report(f, f"T {T} {name} backward alone", profiled(step), events_ms(step, a.reps))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--T", default="65536,8192")
    p.add_argument("--hq", type=int, default=64)
    p.add_argument("--hkv", type=int, default=4)
    p.add_argument("--dk", type=int, default=192)
    p.add_argument("--dv", type=int, default=128)
    p.add_argument("--kernel", type=int, default=32)
    p.add_argument("--stride", type=int, default=16)
    p.add_argument("--bk", type=int, default=64)
    p.add_argument("--topk", type=int, default=16)
    p.add_argument("--window", type=int, default=512)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--no-branches", dest="branches", action="store_false")
    p.add_argument("--timeline", action="store_true",
                   help="also list the layer forward's and backward's device ops in order, with the gaps between")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    a.dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    with open(a.out, "w") as f:
        f.write(f"# NSA layer profile on {torch.cuda.get_device_name()}, torch {torch.__version__}; Hq {a.hq} "
                f"Hkv {a.hkv} Dk {a.dk} Dv {a.dv} l {a.kernel} d {a.stride} BK {a.bk} K {a.topk} W {a.window}\n\n")
        for T in [int(x) for x in a.T.split(",")]:
            layer(T, a, f)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
