#!/usr/bin/env python3
"""Summarizes a tuning grid run of fsa-bench (--tune, several invocations
appending their tables to one log): for every shape, the forward time of each
loop order forced, of AUTO after measuring its bucket (the tuned choice) and of
the heuristic's choice, and how often each lands within 5% of the fastest.

usage: tuning_grid.py GRID_LOG [GRID_JSON ...]

The heuristic's choice comes from the JSON files ("heuristic") where a row has
one, else from the rule in src/attention/choose.c, restated in heuristic()."""
import json
import re
import sys


def heuristic(T, G):
    up_to = 512 if G >= 16 else 256 if G >= 8 else 64
    return "nsa" if T <= 64 or T <= up_to else "fsa"


def main(argv):
    log, jsons = argv[1], argv[2:]
    known = {}
    for path in jsons:
        doc = json.load(open(path))
        for r in doc["rows"]:
            known[(doc["dtype"], r["D"], r["T"], r["G"])] = r.get("heuristic")
    rows, head = [], None
    for line in open(log):
        m = re.match(r"# fsa-bench \S+: -T/-G, D (\d+), Hq (\d+), BK (\d+), K (\d+), dtype (\w+)", line)
        if m:
            head = dict(D=int(m[1]), Hq=int(m[2]), BK=int(m[3]), K=int(m[4]), dtype=m[5])
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if head is None or len(cells) < 8 or not cells[0].isdigit():
            continue
        T, G, D, auto, ms_auto, _, ms_fsa, ms_nsa = cells[:8]
        T, G = int(T), int(G)
        h = known.get((head["dtype"], int(D), T, G)) or heuristic(T, G)
        t = {"fsa": float(ms_fsa), "nsa": float(ms_nsa)}
        rows.append(dict(head, T=T, G=G, tuned=auto, heur=h, t=t, best=min(t.values())))
    print("| dtype | D | BK | Hq | T | G | fsa ms | nsa ms | tuned | tuned loss | heuristic | heuristic loss |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    tuned_ok = heur_ok = 0
    worst_tuned = worst_heur = 0.0
    for r in rows:
        lt = r["t"][r["tuned"]] / r["best"] - 1
        lh = r["t"][r["heur"]] / r["best"] - 1
        tuned_ok += lt <= 0.05
        heur_ok += lh <= 0.05
        worst_tuned, worst_heur = max(worst_tuned, lt), max(worst_heur, lh)
        print(f"| {r['dtype']} | {r['D']} | {r['BK']} | {r['Hq']} | {r['T']} | {r['G']} | {r['t']['fsa']:.3f} | "
              f"{r['t']['nsa']:.3f} | {r['tuned']} | {100 * lt:.1f}% | {r['heur']} | {100 * lh:.1f}% |")
    n = len(rows)
    print(f"\n{n} shapes. Tuned choice within 5% of the fastest: {tuned_ok}/{n} ({100 * tuned_ok / n:.0f}%), "
          f"worst loss {100 * worst_tuned:.1f}%. Heuristic within 5%: {heur_ok}/{n} ({100 * heur_ok / n:.0f}%), "
          f"worst loss {100 * worst_heur:.1f}%.")


if __name__ == "__main__":
    main(sys.argv)
