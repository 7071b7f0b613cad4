"""Sums the per-CTA timelines that `tests/gpu/deepgemm_power.py ... timeline` prints (TL lines; the
kernels instrumented by 2026-11-28-fp8-per-tile-timeline.patch and by hand in DeepGEMM's): per case and
kernel, the means over CTAs of the k-loop ("main" = total - first - epi), the tiles' starts ("first":
seek + the wait for the first full stage) and epilogues, the k-loop's cycles per K block (at the FP8
tensor peak 768 for a 128x192 tile, 1024 for 128x256), and the producer's share inside its empty-barrier
waits. docs/perf.md v57. Usage: python3 2026-11-28-fp8-timeline-summary.py out.txt...
Stats per CTA: [0] consumer start clock, [3] first, [6] epi, [7] consumer end clock, [9] tiles, [10] K
blocks, [11] producer seek, [12] producer empty waits, with 2026-11-28-fp8-producer-sections-timeline.patch
[13] the B-slot copies and [14] thread 0's TMA issues (uint32 clock cycles)."""
import collections
import statistics as st
import sys

for path in sys.argv[1:]:
    print("==", path.split("/")[-1])
    rows = collections.defaultdict(list)
    for line in open(path):
        if line.startswith("TL,"):
            p = line.strip().split(",")
            rows[(p[1], p[2])].append([int(x) for x in p[4:]])
    for (name, who), vs in sorted(rows.items()):
        total = [(v[7] - v[0]) & 0xFFFFFFFF for v in vs]
        first = [v[3] for v in vs]
        epi = [v[6] for v in vs]
        main = [t - a - e for t, a, e in zip(total, first, epi)]
        tiles, kbs, mean_total = st.mean(v[9] for v in vs), st.mean(v[10] for v in vs), st.mean(total)
        print(f"{name:24s} {who:4s} total {mean_total / 1e6:6.3f}M tiles {tiles:5.1f} kb/tile {kbs / tiles:4.0f} | "
              f"first {st.mean(first) / mean_total:5.3f} main {st.mean(main) / mean_total:5.3f} "
              f"epi {st.mean(epi) / mean_total:5.3f} | main cycles per K block {st.mean(main) / kbs:6.0f} | "
              f"prod empty-wait {st.mean(v[12] for v in vs) / mean_total:5.3f}"
              + (f" | per K block: copies {st.mean(v[13] for v in vs) / kbs:5.0f}, TMA issue {st.mean(v[14] for v in vs) / kbs:5.0f}"
                 if who == "ours" and any(v[14] for v in vs) else ""))
