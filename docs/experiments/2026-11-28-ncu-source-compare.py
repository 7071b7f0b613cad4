#!/usr/bin/env python3
"""Compare two Nsight Compute source pages (per-SASS-instruction CSV) of one kernel each.

Made on the device machine with
  ncu -i REPORT.ncu-rep --page source --csv --print-source sass > src.csv
Prints, per kernel: the stall samples by opcode and reason; the executed-instruction difference
by opcode; and every mbarrier wait / barrier site with its executions and samples, so that the
retries of a try-wait loop (the same wait at a second address) can be read off.

Usage: ncu-source-compare.py ours.csv theirs.csv
"""
import collections
import csv
import re
import sys

REASONS = ["stall_barrier", "stall_branch_resolving", "stall_dispatch", "stall_long_sb", "stall_math", "stall_misc",
           "stall_no_inst", "stall_not_selected", "stall_selected", "stall_short_sb", "stall_wait", "stall_sleep",
           "stall_mio"]
SYNC_OPS = ("TRYWAIT", "BAR.SYNC", "UCGABAR", "SYNCS.ARRIVE", "NANOSLEEP", "PHASECHK")


def load(path):
    rows = list(csv.reader(open(path)))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    header = rows[head]
    return header, [r for r in rows[head + 1:] if len(r) == len(header)]


def opcode(source):
    return re.sub(r"^@!?U?P\w+\s+", "", source.strip()).split(" ")[0]


def summarize(name, header, data):
    col = {c: header.index(c) for c in REASONS}
    src, execs = header.index("Source"), header.index("Instructions Executed")
    samples = header.index("Warp Stall Sampling (All Samples)")
    by_op = collections.defaultdict(collections.Counter)
    executed = collections.Counter()
    for r in data:
        op = opcode(r[src])
        executed[op] += int(r[execs] or 0)
        for c in REASONS:
            by_op[op][c] += float(r[col[c]] or 0)
    total = sum(sum(c.values()) for c in by_op.values())
    print(f"== {name}: {total:.0f} stall samples, {sum(executed.values())} warp instructions executed")
    for op, cnt in sorted(by_op.items(), key=lambda kv: -sum(kv[1].values()))[:12]:
        top = ", ".join(f"{k[6:]} {v:.0f}" for k, v in cnt.most_common(3) if v)
        print(f"  {op:32} {sum(cnt.values()) / total:6.1%}  {top}")
    print("  synchronization sites (index, executed, samples):")
    for i, r in enumerate(data):
        if any(s in r[src] for s in SYNC_OPS) and int(r[execs] or 0) > 100000:
            print(f"  {i:5} {int(r[execs]):>10} {float(r[samples] or 0):>8.0f}  {r[src].strip()[:90]}")
    return executed


def main():
    ours = summarize("ours", *load(sys.argv[1]))
    theirs = summarize("theirs", *load(sys.argv[2]))
    print("== executed, ours - theirs (|difference| > 1M)")
    for op in sorted(set(ours) | set(theirs), key=lambda o: -(ours[o] - theirs[o])):
        d = ours[op] - theirs[op]
        if abs(d) > 1_000_000:
            print(f"  {op:32} {ours[op]:>12} {theirs[op]:>12} {d:>+12}")


if __name__ == "__main__":
    main()
