#!/usr/bin/env python3
"""Rounds and split=tail plans of bench_suite's 4-bit 16-token decode cases, beside their times in turns.

Usage: split_rounds.py ROUTING.csv TURNS.csv [--min-k-blocks 12] [--max-rounds 12] [--share]
  ROUTING.csv: the routing file bench_suite wrote (argv[1]); TURNS.csv: its stdout rows of a run with
  BENCH_INTERLEAVE=1 BENCH_SPECS="split=none;split=tail" (rows per case: heuristic, split=none,
  split=tail; a leading tag column is allowed if every row has one).
Prints per case the tile count in rounds of 2 x 132 CTAs, the last round's share, the plan
(plan_split_tail's rule with the given limits; --share: pieces may share CTAs where the last
round is over half, as v46's first plan did) and split=tail's time over split=none's.
"""
import argparse, collections, math

CTAS = 2 * 132  # the 4-bit decode tile runs two CTAs per SM


def plan(tiles, k_blocks, min_kb, max_rounds, share, max_pieces=4):
    last = tiles % CTAS
    if last == 0 or tiles > max_rounds * CTAS:
        return 1, 1
    best = (1, 1)  # (pieces, piece rounds of the last round)
    for s in range(2, max_pieces + 1):
        if s * min_kb > k_blocks or (not share and s * last > CTAS):
            break
        rounds = math.ceil(s * last / CTAS)
        if rounds * best[0] < best[1] * s:
            best = (s, rounds)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("routing")
    ap.add_argument("turns")
    ap.add_argument("--min-k-blocks", type=int, default=12)
    ap.add_argument("--max-rounds", type=int, default=12)
    ap.add_argument("--share", action="store_true")
    a = ap.parse_args()
    routing = {}
    for line in open(a.routing):
        f = line.strip().split(",")
        routing[tuple(f[:3])] = [int(x) for x in f[3:]]
    rows = [l.rstrip("\n").split(",") for l in open(a.turns) if l.strip()]
    shift = 0 if rows[0][1] in ("up", "down") else 1
    cases = collections.OrderedDict()
    for r in rows:
        r = r[shift:]
        cases.setdefault(tuple(r[:3]), []).append((float(r[9]), int(r[5]), int(r[6]), ",".join(r[12:])))
    out = []
    for key, v in cases.items():
        if len(v) < 3 or "tile=16x128" not in v[0][3]:
            continue
        n, k = v[0][1], v[0][2]
        tiles = sum(math.ceil(c / 16) for c in routing[key] if c) * math.ceil(n / 128)
        s, last = plan(tiles, math.ceil(k / 64), a.min_k_blocks, a.max_rounds, a.share)
        out.append((tiles / CTAS, key, (tiles % CTAS) / CTAS, s, last, k, v[1][0], v[2][0] / v[1][0]))
    for rounds, key, share, s, last, k, none_ms, ratio in sorted(out):
        print(f"{'/'.join(key):30s} rounds={rounds:5.2f} last={share:.2f} pieces={s} ({last}/{s} of a tile) "
              f"K={k:5d} none={none_ms:.4f} ms split/none={ratio:.3f}")


if __name__ == "__main__":
    main()
