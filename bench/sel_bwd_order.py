#!/usr/bin/env python3
"""The selected attention's backward (or, with --forward, its forward) alone at the NSA layer's setting (bench/nsa_layer.py's shape, the
selection from the compressed branch's top-k as in the layer), for several loop orders and workspace caps:
CUDA-event time (median of --reps) and the device time per kernel of one backward (torch.profiler).

    FSA_LIBRARY=build/libfsa.so python3 bench/sel_bwd_order.py --T 65536 --cases auto:default,nsa:default,auto:unlimited
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fsa_jit.attention import selected_attention  # noqa: E402
from fsa_jit.compressed import compressed_attention  # noqa: E402
from fsa_jit.nsa import compress_mean  # noqa: E402
from layer_profile import events_ms, profiled, report  # noqa: E402  (this directory)
from nsa_layer import layer_inputs  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--T", type=int, default=65536)
    p.add_argument("--cases", default="auto:default,nsa:default,auto:unlimited",
                   help="algorithm:workspace pairs (algorithm auto, fsa or nsa; workspace default, unlimited "
                        "or bytes such as 4G)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--forward", action="store_true", help="time the forward (no grad) instead of the backward")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    T, hq, hkv, dk, dv = a.T, 64, 4, 192, 128
    q, k, v, _ = layer_inputs(T, hq, hkv, dk, dv, torch.bfloat16)
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    with torch.no_grad():
        k_cmp, cu_c = compress_mean(k, cu, 32, 16)
        v_cmp, _ = compress_mean(v, cu, 32, 16)
        _, _, topk = compressed_attention(q, k_cmp, v_cmp, cu, cu_c, 32, 16, top_k=16, block_size=64)
    for t in (q, k, v):
        t.requires_grad_(True)
    dout = torch.randn(T, hq, dv, device="cuda", dtype=torch.bfloat16)
    with open(a.out, "w") as f:
        f.write(f"# selected backward alone, T {T}, Hq {hq} Hkv {hkv} Dk {dk} Dv {dv} BK 64 K 16, bf16, "
                f"{torch.cuda.get_device_name()}\n\n")
        for case in a.cases.split(","):
            algo, ws = case.split(":")
            limit = None if ws == "default" else ws
            try:
                def fwd():
                    return selected_attention(q, k, v, topk, cu, 64, max_seqlen=T, topk_layout="thk", algorithm=algo,
                                              workspace_limit=limit)

                if a.forward:
                    def step():
                        with torch.no_grad():
                            fwd()
                    o = None
                else:
                    o = fwd()
                    step = (lambda o=o: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True))
                ms = events_ms(step, a.reps)
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                rows = profiled(step)
                peak = (torch.cuda.max_memory_allocated() - base) / 1e9
                what = "forward" if a.forward else "backward"
                report(f, f"T {T} {what} {algo} workspace {ws} (peak {peak:.2f} GB)", rows, ms)
                del o
            except Exception as e:  # a case that does not fit or is refused: say so, go on
                f.write(f"## T {T} {algo} workspace {ws}: {type(e).__name__}: {e}\n\n")
                f.flush()
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
