#!/usr/bin/env python3
"""fsa_jit (through the Python binding) against dense PyTorch SDPA and a plain
gather-based PyTorch selected attention, on the standard problem of
docs/benchmarks.md: bf16, Hq = 32, D = 128, BK = 64, K = 16, one sequence
of T tokens, Hkv = Hq / G.

Protocol: CUDA events around each call, 25 ms warm-up, median over at least
100 ms of repeats; inputs generated once. Plan creation (and compiling) happens
in the first, untimed call.

    python bench/compare.py                      # T 8192 and 65536, G 1..16
    python bench/compare.py --quick              # a short smoke run
    python bench/compare.py --T 8192 --G 4 --json out.json --png out.png
    python bench/compare.py --dtype fp16,bf16 --G 1,4,16 --peak    # fp16 and bf16 rows, with peak memory
    python bench/compare.py --G 8,16 --public DIR  # the public Triton top-k sparse attention in the same run

--public DIR: the folder holding the public package's
`native_sparse_attention/ops/triton/{topk_sparse_attention,utils}.py` (empty __init__.py files above them
suffice); it is not part of this repository. Its forward reads max_seqlen with .item(), a host sync inside its
timed call.
"""

import argparse
import ctypes
import datetime
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import fsa_jit  # noqa: E402
from fsa_jit import _lib, attention  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import memory_peak  # noqa: E402

HQ, D, BK, K = 32, 128, 64, 16
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# ----------------------------------------------------------------- inputs


def make_selection(T, hkv, block_size, top_k, device, seed):
    """int32 [Hkv, T, K]: per KV head and token with own block c, blocks c, 0
    and c-1 always (that priority when K < 3), the other slots distinct blocks
    drawn uniformly from 0..c, sorted ascending, -1 tail. Chunks of tokens,
    no per-token Python loop: a random score per (row, block), the forced
    blocks scored above 1, future blocks below 0, top-K of it."""
    nb = (T + block_size - 1) // block_size
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    out = torch.full((hkv, T, top_k), -1, dtype=torch.int32, device=device)
    blocks = torch.arange(nb, device=device)[None, None, :]
    kk = min(top_k, nb)
    chunk = max(1, (1 << 25) // (hkv * nb))
    for t0 in range(0, T, chunk):
        t1 = min(T, t0 + chunk)
        c = (torch.arange(t0, t1, device=device) // block_size)[None, :, None]
        score = torch.rand(hkv, t1 - t0, nb, generator=gen, device=device)
        score = torch.where(blocks > c, -1.0, score)
        score = torch.where(blocks == c - 1, 2.0, score)
        score = torch.where(blocks == 0, 3.0, score)
        score = torch.where(blocks == c, 4.0, score)
        top, idx = score.topk(kk, dim=-1)
        idx = torch.where(top >= 0, idx, nb)  # unused slots sort last ...
        idx = idx.sort(dim=-1).values
        out[:, t0:t1, :kk] = torch.where(idx == nb, -1, idx).to(torch.int32)  # ... and become -1
    return out


def make_inputs(T, G, device, seed=0, dtype=torch.bfloat16):
    hkv = HQ // G
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    q = torch.randn(T, HQ, D, generator=gen, device=device, dtype=dtype)
    k = torch.randn(T, hkv, D, generator=gen, device=device, dtype=dtype)
    v = torch.randn(T, hkv, D, generator=gen, device=device, dtype=dtype)
    do = torch.randn(T, HQ, D, generator=gen, device=device, dtype=dtype)
    topk = make_selection(T, hkv, BK, K, device, seed + 1)
    cu = torch.tensor([0, T], dtype=torch.int32, device=device)
    return q, k, v, do, topk, cu


# ------------------------------------------------------------ implementations


def gather_attention(q, k, v, topk, block_size, scale, chunk=128, dtype=None):
    """Selected attention in plain PyTorch for one sequence: gather each
    token's selected keys, mask, softmax. Forward only; memory ~ chunk * K * BK.
    dtype: of the matmuls (default q's; float32 for an accurate check)."""
    dtype = dtype or q.dtype
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    T, hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    kh, vh = k.transpose(0, 1), v.transpose(0, 1)  # [Hkv, T, D]
    heads = torch.arange(hkv, device=q.device)[:, None]
    offs = torch.arange(block_size, device=q.device)
    out = torch.empty_like(q)
    for t0 in range(0, T, chunk):
        t1 = min(T, t0 + chunk)
        n = t1 - t0
        tok = torch.arange(t0, t1, device=q.device)[None, :, None, None]
        idx = topk[:, t0:t1].long()[..., None]  # [Hkv, n, K, 1]
        pos = idx * block_size + offs  # [Hkv, n, K, BK]
        valid = (idx >= 0) & (idx <= tok // block_size) & (pos <= tok)
        pos = pos.clamp(0, T - 1).reshape(hkv, -1)
        kg = kh[heads, pos].view(hkv, n, -1, d)  # [Hkv, n, K*BK, D]
        vg = vh[heads, pos].view(hkv, n, -1, d)
        qc = q[t0:t1].view(n, hkv, g, d).transpose(0, 1)  # [Hkv, n, G, D]
        s = torch.matmul(qc, kg.transpose(-1, -2)).float() * scale  # [Hkv, n, G, K*BK]
        s = s.masked_fill(~valid.view(hkv, n, 1, -1), -math.inf)
        p = torch.softmax(s, dim=-1).nan_to_num(0.0).to(dtype)
        out[t0:t1] = torch.matmul(p, vg).transpose(0, 1).reshape(n, hq, d)
    return out


def sdpa(q, k, v):
    """Dense causal attention, GQA, in [1, H, T, D] views of the packed tensors."""
    qs, ks, vs = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
    try:
        return F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)
    except (TypeError, RuntimeError):
        g = q.shape[1] // k.shape[1]
        ks, vs = ks.repeat_interleave(g, dim=1), vs.repeat_interleave(g, dim=1)
        return F.scaled_dot_product_attention(qs, ks, vs, is_causal=True)


def chosen_algorithm(q, k, topk, algorithm, workspace_limit):
    """The path libfsa takes for this problem, asked of the plan the call cached."""
    lib = _lib.get()
    code, limit = _lib.ALGORITHMS[algorithm.lower()], _lib.parse_workspace_limit(workspace_limit)
    for key, plan in attention._plans.items():
        # key: device, dtype, head_dim, Hq, Hkv, block_size, top_k, scale, algorithm, workspace_limit, ...
        # (attention._get_plan); plans of another dtype, algorithm or cap may be cached too.
        if (key[0] == q.device.index and key[1] == q.dtype and key[3:7] == (q.shape[1], k.shape[1], BK, topk.shape[2])
                and key[8] == code and key[9] == limit):
            algo, reason = ctypes.c_int(), ctypes.c_char_p()
            st = lib.fsa_plan_algorithm(ctypes.byref(algo), ctypes.byref(reason), plan.handle, q.shape[0])
            lib.check(st, "fsa_plan_algorithm")
            return {1: "fsa", 2: "nsa"}.get(algo.value, str(algo.value))
    return None


# ----------------------------------------------------------------- timing


def measure(fn, warmup_ms, min_ms, min_reps=3):
    """Median ms of fn() by CUDA events: warm-up, then repeats until min_ms of them."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()  # plan creation, compiling, allocator warm-up: untimed
    torch.cuda.synchronize()
    spent = 0.0
    while spent < warmup_ms:
        start.record()
        fn()
        end.record()
        end.synchronize()
        spent += start.elapsed_time(end)
    times = []
    while sum(times) < min_ms or len(times) < min_reps:
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    n = len(times)
    return times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])


def try_measure(label, fn, args, errors):
    try:
        return measure(fn, args.warmup_ms, args.min_ms)
    except Exception as e:  # one failing implementation must not end the run
        errors.append(f"{label}: {type(e).__name__}: {e}")
        torch.cuda.synchronize()
        return None


# ------------------------------------------------------------------- run


def run_one(T, G, args):
    device = torch.device("cuda")
    q, k, v, do, topk, cu = make_inputs(T, G, device, dtype=DTYPES[args.dtype])
    scale = 1.0 / math.sqrt(D)
    entries = int((topk >= 0).sum().item())
    flops = 4.0 * entries * G * BK * D
    row = {"T": T, "G": G, "D": D, "dtype": args.dtype, "Hq": HQ, "Hkv": HQ // G, "BK": BK, "K": K, "selected_entries": entries,
           "fwd_gflop": flops / 1e9}
    errors = []
    call = dict(topk_idx=topk, cu_seqlens=cu, block_size=BK, max_seqlen=T, algorithm=args.algorithm,
                workspace_limit=args.workspace_limit)

    row["fsa_fwd_ms"] = try_measure("fsa_jit fwd", lambda: fsa_jit.selected_attention(q, k, v, **call), args, errors)
    row["fsa_path"] = (chosen_algorithm(q, k, topk, args.algorithm, args.workspace_limit)
                       if row["fsa_fwd_ms"] is not None else None)

    qg, kg, vg = (x.detach().clone().requires_grad_() for x in (q, k, v))

    def fsa_fwd_bwd():
        o = fsa_jit.selected_attention(qg, kg, vg, **call)
        torch.autograd.grad(o, (qg, kg, vg), do)

    row["fsa_fwd_bwd_ms"] = try_measure("fsa_jit fwd+bwd", fsa_fwd_bwd, args, errors)
    row["sdpa_fwd_ms"] = row["sdpa_fwd_bwd_ms"] = None
    if not args.no_sdpa:
        row["sdpa_fwd_ms"] = try_measure("sdpa fwd", lambda: sdpa(q, k, v), args, errors)

        def sdpa_fwd_bwd():
            o = sdpa(qg, kg, vg)
            torch.autograd.grad(o, (qg, kg, vg), do.transpose(0, 1).unsqueeze(0))

        row["sdpa_fwd_bwd_ms"] = try_measure("sdpa fwd+bwd", sdpa_fwd_bwd, args, errors)

    row["public_fwd_ms"] = row["public_fwd_bwd_ms"] = None
    if args.public_attention is not None:
        pub = args.public_attention
        row["public_fwd_ms"] = try_measure("public fwd", lambda: pub(q, k, v, topk, BK, cu, scale), args, errors)

        def public_fwd_bwd():
            o = pub(qg, kg, vg, topk, BK, cu, scale)
            torch.autograd.grad(o, (qg, kg, vg), do)

        row["public_fwd_bwd_ms"] = try_measure("public fwd+bwd", public_fwd_bwd, args, errors)

    row["gather_fwd_ms"] = None
    row["fsa_vs_gather_rel_err"] = None
    if T <= args.gather_max_T:
        row["gather_fwd_ms"] = try_measure("gather fwd", lambda: gather_attention(q, k, v, topk, BK, scale), args,
                                           errors)
        if row["gather_fwd_ms"] is not None and row["fsa_fwd_ms"] is not None:
            ref = gather_attention(q, k, v, topk, BK, scale, dtype=torch.float32).double()
            o = fsa_jit.selected_attention(q, k, v, **call).double()
            row["fsa_vs_gather_rel_err"] = ((o - ref).norm() / ref.norm()).item()

    if row["fsa_fwd_ms"]:
        row["fsa_fwd_tflops"] = flops / (row["fsa_fwd_ms"] * 1e-3) / 1e12
    if row["fsa_fwd_ms"] and row["fsa_fwd_bwd_ms"]:
        row["fsa_bwd_ms"] = row["fsa_fwd_bwd_ms"] - row["fsa_fwd_ms"]  # derived, autograd overhead included
        row["fsa_bwd_tflops"] = 2.5 * flops / (row["fsa_bwd_ms"] * 1e-3) / 1e12
    row["errors"] = errors
    return row


def fmt(x, digits=3):
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e-2 else f"{x:.2f}" if x < 100 else f"{x:.1f}"
    return str(x)


def markdown(rows):
    head = ["T", "G", "dtype", "path", "fsa fwd", "fsa fwd+bwd", "fsa bwd*", "fwd TFLOP/s", "SDPA fwd",
            "SDPA fwd+bwd", "public fwd", "public fwd+bwd", "gather fwd", "err vs gather", "fsa peak GB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        peak = r.get("fsa_peak_bytes")
        cells = [r["T"], r["G"], r.get("dtype", "bf16"), r.get("fsa_path") or "n/a", r["fsa_fwd_ms"],
                 r["fsa_fwd_bwd_ms"], r.get("fsa_bwd_ms"), r.get("fsa_fwd_tflops"), r["sdpa_fwd_ms"],
                 r["sdpa_fwd_bwd_ms"], r.get("public_fwd_ms"), r.get("public_fwd_bwd_ms"), r["gather_fwd_ms"],
                 r["fsa_vs_gather_rel_err"],
                 None if peak is None else f"{peak / 1e9:.3f}"]
        lines.append("| " + " | ".join(fmt(c) for c in cells) + " |")
    lines.append("")
    lines.append("Milliseconds (median). fsa bwd* = fwd+bwd minus fwd. public: the public Triton top-k sparse "
                 "attention (--public), same inputs. err: relative norm of fsa_jit's o "
                 "against the gather reference. fsa peak GB (--peak): device memory of one forward plus backward "
                 "beyond the inputs (bench/memory_peak.py), 1e9 bytes.")
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [("fsa_fwd_ms", "fsa_jit fwd", "C0", "-"), ("fsa_fwd_bwd_ms", "fsa_jit fwd+bwd", "C0", "--"),
              ("sdpa_fwd_ms", "SDPA dense fwd", "C1", "-"), ("sdpa_fwd_bwd_ms", "SDPA dense fwd+bwd", "C1", "--"),
              ("gather_fwd_ms", "PyTorch gather fwd", "C2", "-")]
    markers = ["o", "s", "^", "D", "v"]
    fig, ax = plt.subplots(figsize=(10, 5))
    for ti, T in enumerate(sorted({r["T"] for r in rows})):
        mine = sorted((r for r in rows if r["T"] == T), key=lambda r: r["G"])
        for key, label, color, style in series:
            pts = [(r["G"], r[key]) for r in mine if r.get(key)]
            if pts:
                ax.plot(*zip(*pts), color=color, linestyle=style, marker=markers[ti % len(markers)],
                        label=f"{label}, T={T}")
    ax.set_xscale("log", base=2)
    gs = sorted({r["G"] for r in rows})
    ax.set_xticks(gs, [str(g) for g in gs])
    ax.set_yscale("log")
    ax.set_xlabel("G = Hq / Hkv")
    ax.set_ylabel("ms (median)")
    ax.set_title(f"Selected attention, {rows[0].get('dtype', 'bf16')}, Hq={HQ}, D={D}, BK={BK}, K={K}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--T", type=int_list, default=None, help="token counts, comma-separated (default 8192,65536)")
    p.add_argument("--G", type=int_list, default=None, help="group sizes, comma-separated (default 1,2,4,8,16)")
    p.add_argument("--quick", action="store_true", help="T 8192, G 1,4,16, short warm-up and repeats")
    p.add_argument("--algorithm", default="auto", choices=["auto", "fsa", "nsa"])
    p.add_argument("--gather-max-T", type=int, default=8192, help="largest T for the gather reference")
    p.add_argument("--dtype", default="bf16", help="of q, k, v and do: bf16, fp16 or both, comma-separated (default bf16)")
    p.add_argument("--peak", action="store_true", help="also the peak memory of one forward plus backward")
    p.add_argument("--workspace-limit", default=None,
                   help="fsa_jit's workspace_limit (default: the library's default cap; 'unlimited': none)")
    p.add_argument("--no-sdpa", action="store_true", help="skip dense SDPA")
    p.add_argument("--public", help="folder of the public Triton package: also time its top-k sparse attention")
    p.add_argument("--commit", help="the commit to record (default: git rev-parse of this checkout)")
    p.add_argument("--min-ms", type=float, help="repeats cover at least this much (default 100; --quick 20)")
    p.add_argument("--warmup-ms", type=float, help="warm-up before timing (default 25; --quick 5)")
    p.add_argument("--json", help="write the rows and the setup here")
    p.add_argument("--png", help="write a plot here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("compare.py: needs a CUDA device")
    args.public_attention = None
    if args.public:
        sys.path.insert(0, args.public)
        from native_sparse_attention.ops.triton.topk_sparse_attention import topk_sparse_attention

        args.public_attention = topk_sparse_attention
    warmup_ms, min_ms = (5.0, 20.0) if args.quick else (25.0, 100.0)
    args.warmup_ms = warmup_ms if args.warmup_ms is None else args.warmup_ms
    args.min_ms = min_ms if args.min_ms is None else args.min_ms
    Ts = args.T or ([8192] if args.quick else [8192, 65536])
    Gs = args.G or ([1, 4, 16] if args.quick else [1, 2, 4, 8, 16])
    for g in Gs:
        if g < 1 or HQ % g:
            sys.exit(f"compare.py: G={g} does not divide Hq={HQ}")
    dtypes = args.dtype.split(",")
    for name in dtypes:
        if name not in DTYPES:
            sys.exit(f"compare.py: --dtype {name}: expected one of {', '.join(sorted(DTYPES))}")

    setup = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": args.commit or git_commit(),
             "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
             "libfsa": fsa_jit.library_version(), "libfsa_path": fsa_jit.library_path(),
             "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
             "warmup_ms": args.warmup_ms, "min_repeat_ms": args.min_ms, "algorithm": args.algorithm,
             "dtype": args.dtype, "workspace_limit": args.workspace_limit}
    print(f"# {setup['gpu']}, torch {setup['torch']}, libfsa {setup['libfsa']} ({setup['libfsa_path']}), "
          f"commit {setup['commit']}", flush=True)
    rows = []
    for args.dtype, T, G in ((name, T, G) for name in dtypes for T in Ts for G in Gs):
        row = run_one(T, G, args)
        torch.cuda.empty_cache()  # the inputs of this row are gone
        row["fsa_peak_bytes"] = None
        if args.peak:  # the same cap, on fresh inputs of the same shape
            try:
                row["fsa_peak_bytes"] = memory_peak.peak_bytes(T, G, DTYPES[args.dtype], args.workspace_limit,
                                                               D=D, hq=HQ, BK=BK, K=K)[0]
            except Exception as e:
                row["errors"].append(f"fsa_jit peak: {type(e).__name__}: {e}")
            torch.cuda.empty_cache()
        rows.append(row)
        print(f"{args.dtype} T={T} G={G}: fsa fwd {fmt(row['fsa_fwd_ms'])} ms, fwd+bwd {fmt(row['fsa_fwd_bwd_ms'])} ms, "
              f"sdpa fwd {fmt(row['sdpa_fwd_ms'])} ms", flush=True)
        if args.json:  # rows so far, should a later one not finish
            Path(args.json).write_text(json.dumps({"setup": setup, "rows": rows}, indent=2) + "\n")
        for e in row["errors"]:
            print(f"  {e.splitlines()[0][:300]}", flush=True)
    print()
    print(markdown(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"setup": setup, "rows": rows}, indent=2) + "\n")
    if args.png:
        plot(rows, args.png)


if __name__ == "__main__":
    main()
