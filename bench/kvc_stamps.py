#!/usr/bin/env python3
"""Where a paged-cache call's time goes, from `fsa-bench --decode --stamps FILE`.

Each line of FILE is one call: "call L B G q_len mode N" and the first N
words of the stamp buffer, records of FSA_KVC_STAMP_WORDS words each (the
layout is read from templates/kvc_params.cuh). Per row (L, B, G, q_len,
selection) it prints the kernel's span (first CTA entry to last exit, %globaltimer), how the CTAs fill
it (starts, lengths, CTAs alive per SM), and the mean length of each phase of
a CTA with a tile (clock64 cycles, turned into ns by each CTA's own ratio of
cycles to %globaltimer ns). Usage: kvc_stamps.py FILE [FILE...]; with several
FILEs, each row of each file is its own (headed by the file's name).
"""
import collections
import gzip
import re
import statistics
import sys
from pathlib import Path


def stamp_layout(header):
    """The record layout from templates/kvc_params.cuh: FSA_KVC_STAMP_* and
    FSA_KVC_ST_* (enum entries count up from the last explicit value)."""
    text = re.sub(r"/\*.*?\*/", "", open(header).read(), flags=re.S)
    lay = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define FSA_KVC_(STAMP_\w+|ST_\w+)\s+(\d+)", text)}
    body = re.search(r"enum\s*\{([^}]*FSA_KVC_ST_[^}]*)\}", text).group(1)
    value = -1
    for entry in filter(None, (e.strip() for e in body.split(","))):
        name, _, given = (x.strip() for x in entry.partition("="))
        value = int(given) if given else value + 1
        lay[name[len("FSA_KVC_"):]] = value
    return lay


LAY = stamp_layout(Path(__file__).resolve().parents[1] / "templates" / "kvc_params.cuh")
WORDS = LAY["STAMP_WORDS"]
(FLAGS, SMID, T_ENTRY, T_END, C_ENTRY, C_TILE, C_SEL, C_UNION, C_PAGES, C_MERGE, C_END, SHARES, WAIT, STAGES,
 C_QREADY, C_QISSUE, C_S0_FACTORS, C_S0_ITEMS, SHARE0) = (LAY["ST_" + n] for n in (
    "FLAGS", "SMID", "T_ENTRY", "T_END", "C_ENTRY", "C_TILE", "C_SEL", "C_UNION", "C_PAGES", "C_MERGE", "C_END",
    "SHARES", "WAIT", "STAGES", "C_QREADY", "C_QISSUE", "C_S0_FACTORS", "C_S0_ITEMS", "SHARE0"))
PER_SHARE, MAX_SHARES = LAY["ST_PER_SHARE"], LAY["ST_MAX_SHARES"]
MODES = {0: "-", 1: "shared", 2: "indep"}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))] if xs else float("nan")


def mean(xs):
    return statistics.fmean(xs) if xs else float("nan")


def report(key, recs, source=""):
    L, B, G, q_len, mode = key
    t0 = min(r[T_ENTRY] for r in recs)
    t1 = max(r[T_END] for r in recs)
    work = [r for r in recs if r[FLAGS] & 2]
    print(f"\n### {source}L {L} B {B} G {G} q_len {q_len} {MODES[mode]}: {len(recs)} CTAs ({len(work)} with a tile), "
          f"span {(t1 - t0) / 1e3:.2f} us")
    if not work:
        return
    # cycles per ns, per CTA (its own SM's clock), for CTAs long enough to measure
    rate = {}
    for r in work:
        ns = r[T_END] - r[T_ENTRY]
        if ns > 1500:
            rate[id(r)] = (r[C_END] - r[C_ENTRY]) / ns
    default_rate = statistics.median(rate.values()) if rate else 1.755
    ns = lambda r, c: c / rate.get(id(r), default_rate)
    starts = [(r[T_ENTRY] - t0) / 1e3 for r in work]
    ends = [(r[T_END] - t0) / 1e3 for r in work]
    lens = [(r[T_END] - r[T_ENTRY]) / 1e3 for r in work]
    print(f"clock {default_rate:.3f} cycles/ns; CTA start us p0/p50/p90/max {pct(starts, 0):.2f} / {pct(starts, .5):.2f} / "
          f"{pct(starts, .9):.2f} / {max(starts):.2f}; end p10/p50/max {pct(ends, .1):.2f} / {pct(ends, .5):.2f} / "
          f"{max(ends):.2f}; length p10/p50/p90 {pct(lens, .1):.2f} / {pct(lens, .5):.2f} / {pct(lens, .9):.2f}")
    sms = len({r[SMID] for r in recs})
    span = (t1 - t0) / 1e3
    steps = 40
    alive = []
    for i in range(steps):
        t = t0 + (t1 - t0) * (i + 0.5) / steps
        alive.append(sum(1 for r in work if r[T_ENTRY] <= t < r[T_END]))
    print(f"SMs used {sms}; CTAs with a tile alive per SM over the span (40 steps): "
          + " ".join(f"{a / max(sms, 1):.1f}" for a in alive))
    busy = sum(lens) / (span * max(sms, 1))
    print(f"CTA-us per SM-us: {busy:.2f}")
    # Phases (ns, mean over the CTAs with a tile).
    ph = collections.OrderedDict()
    ph["tile lookup"] = [ns(r, r[C_TILE] - r[C_ENTRY]) for r in work]
    ph["top-k + len"] = [ns(r, r[C_SEL] - r[C_TILE]) for r in work]
    if any(r[C_QISSUE] for r in work):
        ph["query copies issued"] = [ns(r, r[C_QISSUE] - r[C_SEL]) for r in work]
        ph["union"] = [ns(r, r[C_UNION] - r[C_QISSUE]) for r in work]
    else:
        ph["union"] = [ns(r, r[C_UNION] - r[C_SEL]) for r in work]
    ph["pages"] = [ns(r, r[C_PAGES] - r[C_UNION]) for r in work]
    names = ["start->stage 0 landed", "stages (math+waits)", "warps' merge", "partial/output"]
    for n in range(MAX_SHARES):
        have = [r for r in work if r[SHARES] > n and r[SHARE0 + n * PER_SHARE + 4]]
        if not have:
            break
        base = SHARE0 + n * PER_SHARE
        prev = [ns(r, r[base] - (r[C_PAGES] if n == 0 else r[base - 1])) for r in have]
        if n == 0 or mean(prev) > 50:
            ph[f"s{n} gap before"] = prev
        for k, nm in enumerate(names):
            if n == 0 and k == 0 and any(r[C_QREADY] for r in have):
                ph["s0 start->query in registers"] = [ns(r, r[C_QREADY] - r[base]) for r in have]
                ph["s0 query->stage 0 landed"] = [ns(r, r[base + 1] - r[C_QREADY]) for r in have]
                continue
            if n == 0 and k == 3 and any(r[C_S0_ITEMS] for r in have):
                ph["s0 partial: row factors"] = [ns(r, r[C_S0_FACTORS] - r[base + 3]) for r in have]
                ph["s0 partial: items (thread 0)"] = [ns(r, r[C_S0_ITEMS] - r[C_S0_FACTORS]) for r in have]
                ph["s0 partial: fence + barrier"] = [ns(r, r[base + 4] - r[C_S0_ITEMS]) for r in have]
            ph[f"s{n} {nm}"] = [ns(r, r[base + k + 1] - r[base + k]) for r in have]
    last = lambda r: r[SHARE0 + (min(r[SHARES], MAX_SHARES) - 1) * PER_SHARE + 4]
    merging = [r for r in work if r[FLAGS] & 4]
    if merging:
        ph["merge: wait for the others (merging CTA)"] = [ns(r, r[C_MERGE] - last(r)) for r in merging]
        ph["merge itself"] = [ns(r, r[C_END] - r[C_MERGE]) for r in merging]
    ph["exit (non-merging)"] = [ns(r, r[C_END] - last(r)) for r in work if not r[FLAGS] & 4 and r[SHARES] > 0]
    ph["TOTAL (CTA)"] = [ns(r, r[C_END] - r[C_ENTRY]) for r in work]
    ph["acquire total (thread 0)"] = [ns(r, r[WAIT]) for r in work]
    stages = [r[STAGES] for r in work]
    print(f"stages per CTA mean {mean(stages):.1f}; shares per CTA mean {mean([r[SHARES] for r in work]):.1f}; "
          f"merging CTAs {len(merging)}")
    print("| phase | mean ns | p50 | p90 |")
    print("|---|---|---|---|")
    for k, v in ph.items():
        if v:
            print(f"| {k} | {mean(v):.0f} | {pct(v, .5):.0f} | {pct(v, .9):.0f} |")
    per_stage = [ns(r, r[WAIT]) / r[STAGES] for r in work if r[STAGES]]
    print(f"acquire per stage mean {mean(per_stage):.0f} ns")


def main():
    rows = collections.OrderedDict()
    for fn in sys.argv[1:]:
        for line in (gzip.open(fn, 'rt') if fn.endswith('.gz') else open(fn)):
            f = line.split()
            if not f or f[0] != "call":
                continue
            key, n = tuple(int(x) for x in f[1:6]), int(f[6])
            words = [int(x) for x in f[7:7 + n]]
            recs = [words[i:i + WORDS] for i in range(0, n, WORDS)]
            # keyed by file too: the same row in another file is another call (its own clock and span)
            rows.setdefault((fn, key), []).extend(r + [0] * (WORDS - len(r)) for r in recs if r[FLAGS])
    for (fn, key), recs in rows.items():
        report(key, recs, f"{fn}: " if len(sys.argv) > 2 else "")


if __name__ == "__main__":
    main()
