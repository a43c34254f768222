"""The default workspace cap's cost through the PyTorch binding: one forward and one forward plus
backward (bench/compare.py's timing; the backward is their difference) of the standard problem under
each workspace limit, in one process.

    FSA_LIBRARY=build/libfsa.so python3 bench/cap_time.py out.json -T 65536 -G 1,4,16 --limits default,unlimited
    python3 bench/cap_time.py --table ours.json [main.json]     # Markdown: capped against uncapped

JSON: {limit: [rows of compare.py]}; rows are written as they finish. Timing: the median over at least
20 ms of repeats after 5 ms of warm-up by default (--min-ms, --warmup-ms), compare.py --quick's, not its
100 / 25.
"""

import argparse
import json
import sys
from pathlib import Path


def measure(a):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import compare
    import torch

    ms = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731  (a failed call: n/a, its error follows)
    res = {}
    for lim in a.limits.split(","):
        res[lim] = []
        for G in map(int, a.G.split(",")):
            # every attribute run_one reads (compare.py's parser sets public_attention after parsing)
            args = argparse.Namespace(algorithm="auto", workspace_limit=None if lim == "default" else lim,
                                      no_sdpa=True, public_attention=None, gather_max_T=0, dtype=a.dtype,
                                      warmup_ms=a.warmup_ms, min_ms=a.min_ms)
            r = compare.run_one(a.T, G, args)
            torch.cuda.empty_cache()
            res[lim].append(r)
            print(f"{lim} T={a.T} G={G}: fwd {ms(r['fsa_fwd_ms'])} fwd+bwd {ms(r['fsa_fwd_bwd_ms'])} ms "
                  f"{'; '.join(r['errors'])}", flush=True)
            Path(a.out).write_text(json.dumps(res, indent=1))


def table(paths):
    runs = [json.loads(Path(p).read_text()) for p in paths]
    by = [{lim: {r["G"]: r for r in rows} for lim, rows in run.items()} for run in runs]
    head = ["G"]
    for i in range(len(runs)):
        tag = "" if i == 0 else f"{Path(paths[i]).stem}: "
        for k in ("fwd", "bwd"):
            head += [f"{tag}{k} capped", f"{k} uncapped", f"{k} cost"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for G in sorted(by[0].get("default", {})):
        cells = [str(G)]
        for run in by:
            c, u = run.get("default", {}).get(G), run.get("unlimited", {}).get(G)
            for k in ("fsa_fwd_ms", "fsa_bwd_ms"):
                a, b = (c or {}).get(k), (u or {}).get(k)
                cells += ["-" if a is None else f"{a:.3f}", "-" if b is None else f"{b:.3f}",
                          "-" if a is None or b is None else f"{(a / b - 1) * 100:+.1f}%"]
        print("| " + " | ".join(cells) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?")
    p.add_argument("--table", nargs="+", help="print the Markdown table of these JSON files instead")
    p.add_argument("-T", type=int, default=65536)
    p.add_argument("-G", default="1,4,16")
    p.add_argument("--limits", default="default,unlimited")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--min-ms", type=float, default=20.0, help="repeats cover at least this much (default 20)")
    p.add_argument("--warmup-ms", type=float, default=5.0, help="warm-up before timing (default 5)")
    a = p.parse_args()
    if a.table:
        table(a.table)
    elif a.out:
        measure(a)
    else:
        p.error("an output file or --table")


if __name__ == "__main__":
    main()
