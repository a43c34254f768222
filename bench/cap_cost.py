"""The workspace cap's cost: capped and uncapped runs side by side, from fsa-bench JSON or
bench/compare.py JSON (--workspace-limit unlimited for the uncapped run).

    python3 bench/cap_cost.py capped_65536.json,capped_8192.json uncapped_65536.json,uncapped_8192.json
    python3 bench/cap_cost.py --labels head,base head.json base.json    # any two runs (bench/against.sh)

Prints a Markdown table: forward and backward milliseconds (AUTO; compare.py: the backward is forward
plus backward minus forward), the capped over the uncapped time minus one, and each run's forward and
backward workspace (fsa-bench only) or peak memory (compare.py --peak, GB).
"""

import json
import sys


def rows(paths):
    out = {}
    for path in paths.split(","):
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            print(f"# {path}: {e}", file=sys.stderr)
            continue
        try:
            data = json.loads(text)
        except ValueError:  # a run cut short: the rows written so far
            try:
                data = json.loads(text.rstrip().rstrip(",") + "\n]}")
            except ValueError:
                print(f"# {path}: no complete row", file=sys.stderr)
                continue
        for r in data["rows"]:
            # dtype: compare.py's per row, fsa-bench's beside the rows; files from before either had one: bf16
            out[(r["T"], r["G"], r["D"], r.get("dtype", data.get("dtype", "bf16")))] = r
    return out


def times(r):
    """(forward ms, backward ms, memory cells) of a row of either tool."""
    if "fsa_fwd_ms" in r:  # compare.py
        peak = r.get("fsa_peak_bytes")
        return r.get("fsa_fwd_ms"), r.get("fsa_bwd_ms"), ["-", "-" if peak is None else f"{peak / 1e9:.3f} GB"]
    return r.get("ms_auto"), r.get("ms_bwd"), [str(r["workspace_bytes_auto"]), str(r["workspace_bytes_bwd"])]


def fmt(ms):
    return "-" if ms is None else f"{ms:.3f}"


def cost(a, b):
    return "-" if a is None or b is None else f"{(a / b - 1) * 100:+.1f}%"


def main():
    args = sys.argv[1:]
    a, b = "capped", "uncapped"
    if len(args) == 4 and args[0] == "--labels" and args[1].count(",") == 1:
        a, b = args[1].split(",")
        args = args[2:]
    if len(args) != 2:
        sys.exit("usage: cap_cost.py [--labels A,B] A.json[,A2.json...] B.json[,B2.json...]")
    capped, free = rows(args[0]), rows(args[1])
    dtypes = len({k[3] for k in capped}) > 1  # a dtype column only where the rows have several
    print(f"| T | G | {'dtype | ' if dtypes else ''}fwd {a} | fwd {b} | cost | bwd {a} | bwd {b} | cost | "
          f"fwd ws / - {a} | bwd ws / peak {a} | fwd ws / - {b} | bwd ws / peak {b} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if dtypes else ""))
    for key in sorted(capped, key=lambda k: (-k[0], k[1], k[2], str(k[3]))):
        u = free.get(key)
        if u is None:
            continue
        T, G, _, dtype = key
        cf, cb, cm = times(capped[key])
        uf, ub, um = times(u)
        dt = f"{dtype} | " if dtypes else ""
        print(f"| {T} | {G} | {dt}{fmt(cf)} | {fmt(uf)} | {cost(cf, uf)} | {fmt(cb)} | {fmt(ub)} | {cost(cb, ub)} | "
              f"{cm[0]} | {cm[1]} | {um[0]} | {um[1]} |")


if __name__ == "__main__":
    main()
