#!/usr/bin/env python3
"""Replays the host's config choice on measured launches (no GPU needed).

bench_suite with BENCH_INTERLEAVE=1 BENCH_SPECS="..." times each case's chosen config and the overrides
in turns; its first argument is the routing file (model,gemm,tokens,count per expert). Given both, this
prints per case the timed configs as ratios to the first (the heuristic of the binary that ran), and
which config `moejit choose --counts` picks now on the same group sizes: a host rule changed since the
run is judged on the launches it changes (v54 fitted and checked its few-large-groups rules so).

  python3 tests/gpu/replay_choice.py BENCH_CSV ROUTING_CSV [--moejit build/moejit] [--dtype e4m3]
                                                        [--fuse "fuse=scatter+weight"]

The last line sums up the launches whose current pick is one of the timed overrides (not the first):
how many, and the geometric mean, least and most of their time against the first config's.
"""
import argparse
import csv
import math
import subprocess


def fields(spec):
    return dict(kv.split("=", 1) for kv in spec.split(",") if "=" in kv)


def short(spec):
    d = fields(spec)
    text = f"{d['tile']} s{d['stages']} {d['sched']} {d['cluster']}"
    for key in ("split", "tail", "mix", "band"):
        if d.get(key, "none" if key == "split" else "0") not in ("none", "0"):
            text += f" {key}={d[key]}"
    return text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_csv")
    ap.add_argument("routing_csv")
    ap.add_argument("--moejit", default="build/moejit")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--fuse", default="")
    args = ap.parse_args()

    routing = {}
    for r in csv.reader(open(args.routing_csv)):
        if len(r) > 3:
            routing[(r[0], r[1], r[2])] = r[3:]
    cases = {}
    for r in csv.reader(open(args.bench_csv)):
        if not r or r[0] == "model" or r[0].startswith("#") or len(r) < 13:
            continue
        cases.setdefault((r[0], r[1], r[2]), []).append((float(r[9]), r[5], r[6], ",".join(r[12:])))

    changed = []
    for key, timed in cases.items():
        if key not in routing:
            continue
        counts = routing[key]
        base_ms, n, k, base_spec = timed[0]
        cmd = [args.moejit, "choose", "--groups", str(len(counts)), "--n", n, "--k", k,
               "--counts", ",".join(counts), "--dtype", args.dtype]
        if args.fuse:
            cmd += ["--fuse", args.fuse]
        now = subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
        now_short = short(now) if "tile=" in now else "?"
        ratios = "  ".join(f"{short(spec)} {ms / base_ms:.3f}" for ms, _, _, spec in timed[1:])
        picked = [ms for ms, _, _, spec in timed[1:] if short(spec) == now_short and now_short != short(base_spec)]
        if picked:
            changed.append(picked[0] / base_ms)
        rows = [int(c) for c in counts if int(c) > 0]
        print(f"{key[0]:16s} {key[1]:4s} {key[2]:>6s} rows {min(rows, default=0):5d}-{max(rows, default=0):5d} "
              f"base {short(base_spec)} {base_ms:.4f} ms | {ratios} | now {now_short}")
    if changed:
        geo = math.exp(sum(map(math.log, changed)) / len(changed))
        print(f"# now picks a timed override on {len(changed)} launches: geomean {geo:.3f}, "
              f"{min(changed):.3f}-{max(changed):.3f} of the first config's time")
    else:
        print("# now picks no timed override")


if __name__ == "__main__":
    main()
