"""Times the public Triton `compressed_attention` with top-k on the shapes and
protocol of cmp_bench.c (bf16, Hq 32, D 128, kernel 32, stride 16, BK 64,
K 16, init 1, local 2, one sequence; CUDA events, 25 ms warm-up, median over
at least 100 ms).

The public package is not part of this repository: pass the folder that holds
`native_sparse_attention/ops/triton/{compressed_attention,utils}.py` with
--public (empty __init__.py files above them suffice).

    python3 bench/cmp_public.py --public DIR [-T 8192,65536] [-G 1,4,16]
"""
import argparse
import sys


def time_call(torch, fn, warmup_ms, min_ms):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spent, i = 0.0, 0
    while i < 1 or spent < warmup_ms:
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        spent += e0.elapsed_time(e1)
        i += 1
    times, spent = [], 0.0
    while spent < min_ms or len(times) < 3:
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
        spent += times[-1]
    times.sort()
    n = len(times)
    return times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--public", required=True)
    ap.add_argument("-T", default="8192,65536")
    ap.add_argument("-G", default="1,4,16")
    ap.add_argument("--warmup-ms", type=float, default=25.0)
    ap.add_argument("--min-ms", type=float, default=100.0)
    ap.add_argument("--only-compile", action="store_true", help="one call per shape (fills the Triton cache)")
    a = ap.parse_args()
    sys.path.insert(0, a.public)
    import torch
    from native_sparse_attention.ops.triton.compressed_attention import compressed_attention

    hq, d, l, s, bk, k = 32, 128, 32, 16, 64, 16
    print(f"# public compressed_attention: torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'T':6} {'G':3} {'fwd_topk':>10} {'fwd+bwd':>10}")
    for t in [int(x) for x in a.T.split(",")]:
        for g in [int(x) for x in a.G.split(",")]:
            hkv, tc = hq // g, (t - l) // s + 1
            gen = torch.Generator(device="cuda").manual_seed(t * 100 + g)
            q = torch.randn(t, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            kc = torch.randn(tc, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            vc = torch.randn(tc, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            do = torch.randn(t, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            cu = torch.tensor([0, t], device="cuda", dtype=torch.int32)
            cu_c = torch.tensor([0, tc], device="cuda", dtype=torch.int32)

            def fwd():
                with torch.no_grad():
                    return compressed_attention(q, kc, vc, l, s, bk, k, cu, cu_c, t, tc, None, 1, 2)

            qg, kg, vg = (x.detach().requires_grad_(True) for x in (q, kc, vc))

            def fwd_bwd():
                o, idx = compressed_attention(qg, kg, vg, l, s, bk, k, cu, cu_c, t, tc, None, 1, 2)
                torch.autograd.grad(o, (qg, kg, vg), do)  # no accumulation into .grad between repeats
                return idx

            if a.only_compile:
                fwd()
                fwd_bwd()
                torch.cuda.synchronize()
                print(f"{t:<6} {g:<3} compiled", flush=True)
                continue
            tf = time_call(torch, fwd, a.warmup_ms, a.min_ms)
            tb = time_call(torch, fwd_bwd, a.warmup_ms, a.min_ms)
            print(f"{t:<6} {g:<3} {tf:10.3f} {tb:10.3f}", flush=True)
            del q, kc, vc, do, qg, kg, vg
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
