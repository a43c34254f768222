"""The workspace cap's cost: fsa-bench JSON of capped and uncapped runs side by side.

    python3 bench/cap_cost.py capped_65536.json,capped_8192.json uncapped_65536.json,uncapped_8192.json

Prints a Markdown table: forward and backward milliseconds (AUTO), the capped over the uncapped time
minus one, and each run's forward and backward workspace.
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
            data = json.loads(text.rstrip().rstrip(",") + "\n]}")
        for r in data["rows"]:
            out[(r["T"], r["G"], r["D"])] = r
    return out


def fmt(ms):
    return "-" if ms is None else f"{ms:.3f}"


def cost(a, b):
    return "-" if a is None or b is None else f"{(a / b - 1) * 100:+.1f}%"


def main():
    capped, free = rows(sys.argv[1]), rows(sys.argv[2])
    print("| T | G | fwd capped | fwd uncapped | cost | bwd capped | bwd uncapped | cost | "
          "fwd ws capped | fwd ws uncapped | bwd ws capped | bwd ws uncapped |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(capped, key=lambda k: (-k[0], k[1], k[2])):
        c, u = capped[key], free.get(key)
        if u is None:
            continue
        T, G, _ = key
        print(f"| {T} | {G} | {fmt(c.get('ms_auto'))} | {fmt(u.get('ms_auto'))} | "
              f"{cost(c.get('ms_auto'), u.get('ms_auto'))} | {fmt(c.get('ms_bwd'))} | {fmt(u.get('ms_bwd'))} | "
              f"{cost(c.get('ms_bwd'), u.get('ms_bwd'))} | {c['workspace_bytes_auto']} | {u['workspace_bytes_auto']} | "
              f"{c['workspace_bytes_bwd']} | {u['workspace_bytes_bwd']} |")


if __name__ == "__main__":
    main()
