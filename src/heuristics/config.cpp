#include "heuristics/config.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "moejit/errors.hpp"

namespace moejit {
namespace {

// The tile configs the heuristic picks from, per family (measurements in docs/perf.md).
struct TileChoice {
  TileShape tile;
  int stages, warps_m, warps_n;
  int cluster_n = 1;
  SplitK split = SplitK::none;
};
// Hopper (docs/results/2026-11-23-tune-tiles.csv): 128x256 with 4 stages is fastest once groups
// fill 128-row tiles; with ≤ 64 rows per group (decode) 64-row tiles stream the weights 3–20%
// faster (more tiles in flight, half the wasted rows): 64x128 with 8 stages, which beat 64x256
// with 5 on 20 of the 22 suite cases this rule covers by 0.2–3.5% (H100, same process, 3 rounds
// in each of two runs, docs/perf.md v9; Mixtral down 16 tokens 1.5–2.7% slower).
constexpr TileChoice kHopperLarge = {{128, 256, 64}, 4, 1, 1};
constexpr TileChoice kHopperSmall = {{64, 128, 64}, 8, 1, 1};
// The small tile up to 32 mean rows per active group (64 until v45; 48 where K >= 6144 since v39).
// At 64 rows 128x256 took 0.948 / 0.944x the time of 64x128 s8 on DeepSeek-V3 / Kimi-K2-shaped up
// GEMMs (K = 7168, in turns, plain and gathered alike; H100, docs/results/2026-11-27-v39-bf16-pairs-
// long-k.txt call 14), and at 43-48 rows the two were level (0.997-1.002x). v45, in turns, two
// processes each (docs/results/2026-11-27-v45-small-tile-*.csv), found the same at shorter K: at 64
// rows 128x256 took 0.905x on Mixtral up (K = 4096), 0.94-0.98x on Llama 4 up, gpt-oss-120b / -20b,
// Qwen3-235B and Kimi-K2 down, 0.989 / 1.000x on the suite's Qwen3 1024; at 51-56 rows 0.994-0.999x;
// at 36-40 rows 0.991-1.004x on six models' 14 GEMMs, but 1.015-1.017x on Qwen3-30B down (K = 768).
// 32 rather than 48: a power of two, as the shape buckets' rows are, so that one bucket keeps one
// tile (the high-level call's first problem in a bucket decides for the rest).
constexpr double kHopperSmallMaxRows = 32;
// The small tile's wide twin, unfused, where one 64-row tile per active group needs a second round
// at 128 columns and one round at 256 (few experts with short N: Mixtral down, 5-8 experts x 16
// tiles of 256 columns on 132 SMs; wide_decode_tile_pays). In one process on the H200 Mixtral down
// 16 / 128 tokens took 0.955 / 0.981x the time of 64x128 s8 (docs/results/2026-11-28-v51-h200-bf16-
// decode-configs.csv); on the H100 (v9) Mixtral down 16 0.973-0.985x.
constexpr TileChoice kHopperSmallWide = {{64, 256, 64}, 5, 1, 1};
// The same wide tile on the static scheduler for few large groups with long K (v54, unfused or a layer's
// GEMM2 (Fusion::linear_scatter); at most
// kBf16SmallByRoundsMaxGroups active, K >= kBf16SmallByRoundsMinK, from kBf16SmallByRoundsMinRows
// rows): where its rounds of tiles (unit_rounds, a 64x256 round counted as half a 128x256 one) cost
// at most kBf16SmallByRoundsMaxRatio of the choice's, or kBf16SmallByRoundsMaxRatioSplit where the
// choice splits its last round (split=tail already recovers part of it); not over tail rows, and only
// from the host's group sizes (as split=tail's plan: prewarm, which sees none, builds the twin through
// routing_variants). In
// turns on the H200 (docs/results/2026-11-28-v54-bf16-small-by-rounds-*.csv; fresh routings of
// Mixtral-8x7B / 8x22B, DBRX and Grok-1 down GEMMs, K = 10752-32768, 384-4096 tokens, 81 launches):
// at a model ratio of 0.75-0.833 over single CTAs or pairs, 64x256 took 0.798-0.935x the time (31
// launches); at 0.875-0.96 0.90-1.09x, at 1.0 1.01-1.15x. Over split choices the model reads low:
// 0.667 measured 0.833-0.863x (3), 0.75 0.948 / 0.996x, 0.833 0.994-1.087x. With K of 4096-6144 (the
// up GEMMs) it lost at every ratio (0.821: 0.991x, 0.857: 1.010x, 0.906: 1.035x). Fitted there, the
// rule took 64x256 on 31 launches (0.798-0.935x); on 36 launches at unseen token counts it took it on
// 30, at 0.779-0.937x (geomean 0.87), and on none of the 6 where 64x256 was slower (1.004-1.246x).
// As a layer's GEMM2 (scatter + weight; Mixtral-8x7B / 8x22B down, 576-2048 tokens) the same test
// picks 8 of 20 launches, at 0.823-0.905x (not a ninth, 0.972x, whose choice takes tail rows), and none of
// the 9 slower ones (1.010-1.027x).
constexpr long long kBf16SmallByRoundsMaxGroups = kFewLargeGroupsMax;
constexpr int kBf16SmallByRoundsMinK = 10240;
constexpr double kBf16SmallByRoundsMinRows = 128;
constexpr double kBf16SmallByRoundsMaxRatio = 0.85;
constexpr double kBf16SmallByRoundsMaxRatioSplit = 0.70;
// Not where half the rows or more sit in groups of over 128 rows (hot_groups_dominate), whatever
// the mean: under skewed routing (bench_suite ROUTING=skewed: hot experts beside many small ones) the mean at 1024 tokens
// is ~37 rows, but the hot groups hold 51-55% of the rows, and 128x256 took 0.94-0.95x the time of
// 64x128 s8 (gpt-oss up, DeepSeek-V3 up / down 1024; the tuner's turns, H100, docs/perf.md v43).
// Random routing keeps every group under 128 rows wherever the mean is under 64.
constexpr int kHotRowsShareInverse = 2;  // hot_groups_dominate: rows in groups over 128 rows >= 1/2 of all
// 128x256 on CTA pairs that share A through TMA multicast (docs/perf.md, v4).
constexpr TileChoice kHopperLargePair = {{128, 256, 64}, 4, 1, 1, 2};
// 128x256 whose last partial round runs in pieces of K (split=tail, plan_split_tail).
constexpr TileChoice kHopperLargeSplit = {{128, 256, 64}, 4, 1, 1, 1, SplitK::tail};
constexpr int kSplitTailMinK = 4096;
// The 4-bit decode tile (16 tokens; v46): its split kernel runs whole tiles within 0-3% of the
// plain one since split_reduce's verdict is a warp vote and its release one atomic, so the
// launches split from K = 2048 and up to 12 rounds, pieces of at least 12 K blocks (768 of K). In
// turns on the H100 (MXFP4, 11 models, 8-64 tokens): 0.84-0.98x the time at 1-6 rounds (K = 2048:
// DeepSeek-V3 EP8 down 0.95-0.96, Qwen3 up 0.97), 0.98-1.00x at 7-12 rounds but GLM-4.5 up at
// 10-11 rounds 1.005; pieces of 8 K blocks (4 of K = 2048) 1.005.
constexpr int kW4SplitMinKBlocksPerPiece = 12;
constexpr int kW4SplitTailMinK = 2048;
constexpr int kW4SplitMaxRounds = 12;
// Absorbed tail rows (tail=24, v40): a group's last whole 128-row tile also multiplies the up to 24
// rows past it, where at least 1 / kTailMinShareInverse of the active groups end that way (random
// routing ends about half of the groups a few rows into a tile) and the groups are short of
// kTailMaxMeanRows. In turns on the H100 (two processes): 128-256 rows per group 0.92-0.98x the time
// (DeepSeek-V3 up / down 4096 0.915-0.957 / 0.943-0.947, Qwen3 up 4096 0.96-0.97, gpt-oss 4096 0.98,
// Mixtral up 1024 0.97); from 512 rows, where the launches are long and compute-bound, 0.99-1.03x
// (the single C staging chunk and the tail's MMAs; docs/results/2026-11-27-v40-tail-rows-turns.txt).
constexpr int kTailRows = kHopperTailRows;
constexpr int kTailMinShareInverse = 8;
// The mixed tile order (mix=R, v43) where the host's counts show hot groups of R+ rows holding
// 30-90% of the tiles beside small ones, K is short (each tile short, the small groups' tiles
// weight-streaming) and N is wide (many weight tiles per group): 16-bit 128x256, unfused or fused
// but for atomics. In turns under skewed routing (H100, docs/results/2026-11-27-v43-mix-turns.csv,
// -v44-mix-rule-turns.csv, -v44-mix-fused-turns.csv): DeepSeek-V3 down 4096 / 16384 (N = 7168,
// K = 2048) 0.958-0.968 / 0.961-0.969x the time, as a layer's GEMM2 (scatter + weight + bias)
// 0.956-0.963 / 0.967-0.983x; gpt-oss up 4096 (5760, 2880) 0.953-0.996x, as the gathered GEMM1
// (bias + SwiGLU) 0.936-0.939x; gpt-oss up 16384 0.993-1.002x. Not where K is long (DeepSeek-V3 up 4096, K = 7168:
// 1.085-1.097x, the launch already DRAM-bound and the hot groups' tiles re-read once light ones
// stream beside them), nor N narrow (Qwen3, N <= 2048: up to 1.075x; gpt-oss down, N = 2880:
// 1.003-1.018x). Random routing leaves every group in one class, where the order is the plain one.
constexpr int kMixMinN = 4096;
constexpr int kMixMaxK = 3072;
constexpr double kMixMinHeavyTileShare = 0.3, kMixMaxHeavyTileShare = 0.9;
// FP8 (v44, the FP8 kernel's cursor walks MixedTileCursor warp-wide): in turns under skew, two
// processes (docs/results/2026-11-27-v44-fp8-mix-turns.csv, -fp8-mix-fused-turns.csv), unfused
// DeepSeek-V3 down 4096 0.895-0.899x the time, gpt-oss up 4096 0.931-0.933x (45-46% of the tiles
// heavy); at 82% DeepSeek-V3 down 16384 0.930-0.935x but gpt-oss up 16384 1.040-1.046x (both static
// 128x256), so unfused FP8 stops at 60%. Fused, a layer's GEMM2 (scatter + weight) DeepSeek-V3 down
// 4096 / 16384 0.877-0.886 / 0.856-0.873x, the gathered GEMM1 (bias + SwiGLU) gpt-oss up 4096 / 16384
// 0.944-0.953 / 0.997-0.998x: the 16-bit bound. Elsewhere as the 16-bit rule found (Qwen3
// 1.00-1.035x, DeepSeek-V3 up 1.00-1.01x unfused; gpt-oss down, N = 2880, 0.97-1.05x).
constexpr double kMixMaxHeavyTileShareFp8 = 0.6;
constexpr double kTailMaxMeanRows = 320;
// A layer's GEMM2 (fuse=scatter, weighted, biased: Fusion::linear_scatter, v41) stores its rows
// directly and keeps no C staging, so the tail rows cost it only their MMAs: in turns against
// tail=0 (H100, fuse=scatter+weight, docs/results/2026-11-27-v41-gemm2-tail-turns.txt) DeepSeek-V3
// at 512 rows 0.956-0.986x the time in 5 of 5 processes, 256 rows 0.94x, 128 rows 0.977x; gpt-oss
// and Qwen3 at 128 / 256 rows 0.985 / 0.99x, Mixtral at 256 rows 0.88-0.89x; at 1024 rows
// 0.998-1.01x (Mixtral 4096, Qwen3 16384), at 4096 rows 1.012x (Mixtral 16384). The bound sits
// between 512 and 1024.
constexpr double kTailMaxMeanRowsScatter = 768;
// A layer's gathered GEMM1 (v42: fuse=gather with a GLU, bias) keeps the C staging, as the unfused
// kernel does, and so its 320-row bound. In turns against tail=0 (H100, docs/results/
// 2026-11-27-v42-gemm1-tail-turns.csv): DeepSeek-V3 up 4096 (128 rows) 0.941-0.946x the time, Qwen3
// up 4096 (256) 0.961-0.962x, gpt-oss up 4096 (128; split GLU, and interleaved swiglu_oai with bias)
// 0.980x, Mixtral up 1024 (256, a round saved) 0.960-0.965x.
// Launches of at most kTailRoundRuleMaxRounds rounds of tiles (few groups: Mixtral) take tail rows
// exactly where they save a round, whatever the rows per group: the tiles they save can leave the
// round count as it was, and then the absorbing tiles' extra MMAs are all that is left, or take a
// round off, which outweighs them. The fused GEMM2 on the H100 (v41): Mixtral at 1024 tokens (8
// groups of ~256 rows, 16 N tiles: 2-3 rounds) ran 1.03-1.04x the time with tail rows under its
// layer router's groups (no round saved) and 0.88-0.97x under the suite's (3 rounds -> 2); at 4096
// tokens (1024 rows, ~9 rounds) 0.95x in one routing and 1.00x in another.
constexpr long long kTailRoundRuleMaxRounds = 12;
// Tail rows before the split (v47): where the split plan (with_split_tail) would cut the plain tiles'
// last round into pieces but absorbed tail rows leave every tile in one round, tail rows win: all
// tiles run at once, where the split launch runs a whole round and then its pieces. In turns on the
// H100, bf16 Mixtral down at 512 tokens (8 groups of 128 +- 11 rows; plain tiles 1.21-1.45 rounds,
// the last cut in 2-4, against one round with tail rows): tail rows 0.91-0.97x the split's time on 6
// routings in 2 processes (docs/results/2026-11-27-v47-bf16-tails-before-split.csv; v46: 0.93-0.94x).
// Where tail rows still need two rounds (Mixtral-8x22B down 512: 1.45 rounds against 2.18-2.36 split)
// the split took 0.95-1.00x theirs, and keeps the launch.
// CTA pairs with tail rows: where the first pair rule shares A (1x2) and the launch takes tail rows,
// pairs sharing B (2x1) instead, when with the tail rows at most 1 / kEvenPairShareInverse of the
// active groups have an odd M-tile count. 2x1 lost where odd counts left a group's last M tile to be
// split along N without sharing (DeepSeek-V3 up 8192, 256 +- 16 rows per expert: 1.07-1.10x the
// time of 1x2, v40); tail rows turn the groups of 257-280 rows from 3 M tiles into 2, and then B
// shared by both tiles of a group pays: in turns (H100, docs/results/2026-11-27-v42-pairs-tail-data.csv)
// DeepSeek-V3 up 8192 on 2x1 with tail rows took 0.84-0.86x the time of 1x2 with them (0.89x of 1x2
// without), its fused GEMM2 (scatter + weight) 0.976x; the unfused down 8192 (K = 2048) 1.009x, one
// process (docs/results/2026-11-27-v42-even-pairs-turns.csv).
constexpr int kEvenPairShareInverse = 8;

// A group of `rows` rows ends 1..kTailRows rows past a whole tile of tile_m rows (its last whole tile
// can absorb them).
bool ends_in_tail(int rows, int tile_m) { return rows > tile_m && rows % tile_m != 0 && rows % tile_m <= kTailRows; }
}  // namespace

long long m_tiles_of(int rows, int tile_m, bool absorb) {
  return (rows + tile_m - 1) / tile_m - (absorb && ends_in_tail(rows, tile_m) ? 1 : 0);
}

namespace {

// 2x1 pair units of a group of m_tiles M tiles and n_tiles N tiles, as common/scheduler.cuh counts
// them: floor(m / 2) x n_tiles pairs of M tiles, and ceil(n_tiles / 2) for an odd last M tile.
long long pair_units(long long m_tiles, long long n_tiles) { return m_tiles / 2 * n_tiles + (m_tiles % 2) * ((n_tiles + 1) / 2); }

// Rounds of tiles of `spec` over the groups, with or without absorbed tail rows (the tail-row rules;
// and, without, the FP8 pairs' tile choice).
// Units of work as the kernel's cursor counts them: tiles, pairs of N tiles (1x2) or pair units (2x1:
// two M tiles at one N tile, a group's odd last M tile in pairs of N tiles; common/scheduler.cuh).
long long unit_rounds(const KernelSpec& spec, std::span<const int> group_rows, int n, int sm_count, bool absorb) {
  const long long n_tiles = (n + spec.tile.n - 1) / spec.tile.n;
  const long long n_units = (n_tiles + spec.cluster_n - 1) / spec.cluster_n;
  long long units = 0;
  for (int r : group_rows) {
    if (r <= 0) continue;
    const long long m_tiles = m_tiles_of(r, spec.tile.m, absorb);
    units += spec.cluster_m == 2 ? pair_units(m_tiles, n_tiles) : m_tiles * n_units;
  }
  const long long clusters = std::max(1, sm_count / (spec.cluster_m * spec.cluster_n));
  return (units + clusters - 1) / clusters;
}
// Absorbed tail rows where the host's group sizes show enough groups ending 1-24 rows past a
// whole tile: such a tile of its own loads the whole B tile for a few rows (docs/perf.md v40).
// Unfused, a layer's GEMM2 (scattered rows, weighted, biased: Fusion::linear_scatter; v41) or its
// gathered GEMM1 (v42): any fusion but atomics. Short launches by the rounds they save, long ones
// by the rows per group (v41). `spec`: the 16-bit choice so far, without split.
bool absorbed_tails_pay(const KernelSpec& spec, const GemmProblem& problem, long long active, double mean_rows, int sm_count) {
  if (spec.family != KernelFamily::hopper || spec.tile != kHopperLarge.tile || spec.stages != kHopperLarge.stages ||
      spec.split != SplitK::none || spec.fusion.atomic || spec.c == DType::e4m3 || problem.group_rows.empty())
    return false;
  long long ending_in_tail = 0;
  for (int r : problem.group_rows)
    if (ends_in_tail(r, spec.tile.m)) ++ending_in_tail;
  const long long rounds = unit_rounds(spec, problem.group_rows, problem.n, sm_count, false);
  const bool pays = rounds <= kTailRoundRuleMaxRounds
                        ? unit_rounds(spec, problem.group_rows, problem.n, sm_count, true) < rounds
                        : mean_rows < (spec.fusion.linear_scatter() ? kTailMaxMeanRowsScatter : kTailMaxMeanRows);
  return ending_in_tail * kTailMinShareInverse >= active && pays;
}

// FP8 block-scaled (hopper_fp8/). 128x192: each consumer 64x192, 1.5x the MMA work per promotion
// and per A byte of 128x128. Re-measured on v13's kernels (H100, same process, two processes, every
// tile x scheduler at 1024/4096/16384 tokens; docs/results/2026-11-25-v13-fp8-tile-sweep.txt):
// 128x192 is the fastest tile from 64 rows per active expert on (Qwen3 1024 tokens +2-3% over
// 64x256; at 128 rows gpt-oss 4096 +15-18%, DeepSeek-V3 4096 +4-9%; Qwen3 down 4096, K = 768, +5%
// over 128x128; 512+ rows +7-30%), 64x256 at 32 rows (DeepSeek-V3 and gpt-oss 1024 tokens, 2-6%).
// The switch sits between, at 48. 128x128 (6 stages) won no suite case and is left to the tuner.
// (v9's rule, on older kernels: 64x256 below 256 rows, 128x128 between 256 and 512 rows with K <
// 1024.) Scheduler: scheduler_for above.
// 64x256 at 4 stages since v24, C staged for TMA stores (0.99x the time of 5 stages with register
// stores over the 16/128-token cases in turns, 16 of 18 cases at or under 1.00x: docs/results/
// 2026-11-26-v24-decode-turns.txt); 5 stages stay a tuner candidate.
constexpr TileChoice kFp8Small = {{64, 256, 128}, 4, 1, 1};
constexpr TileChoice kFp8SmallDeep = {{64, 256, 128}, 5, 1, 1};
constexpr TileChoice kFp8Large = {{128, 128, 128}, 6, 1, 1};
// 128x192 with 4 stages since v24, where its C staging (TMA stores) fits beside them: in turns
// against 5 stages and register stores (H100, two processes, docs/results/2026-11-26-v24-tile-turns.txt):
// 0.96-0.99x on gpt-oss down 4096/16384, 0.90-0.97x on the 16384-token cases of the others.
constexpr TileChoice kFp8Wide = {{128, 192, 128}, 4, 1, 1};
// 128x192 whose last partial round runs in pieces of K (split=tail, with_split_tail).
constexpr TileChoice kFp8WideSplit = {{128, 192, 128}, 4, 1, 1, 1, SplitK::tail};
// The heuristic's 128x192 until v23 (register stores): a tuner candidate (tuning.cpp), compiled here too.
constexpr TileChoice kFp8WideDeep = {{128, 192, 128}, 5, 1, 1};
constexpr int kFp8WideTileMinRows = 48;  // mean rows per active expert
// 128x256 (each consumer multiplies its 64x256 slice in two 128-column halves): 10% fewer bytes
// from L2 per MMA than 128x192, and no padded columns where N is a multiple of 256 but not of 192.
// In turns against 128x192 (H100, docs/perf.md v22, two processes agreeing within 2%): 0.94-0.97x
// the time on DeepSeek-V3 at 4096 and 16384 tokens, Mixtral down 16384 and Qwen3 down, 0.95x on
// Mixtral up 1024, 0.97-0.99x on Mixtral down 4096 and Qwen3 up 4096/16384, 0.99-1.00x on Mixtral
// up 4096/16384, and 0.97 / 0.98x on gpt-oss up 4096 / 16384 (N = 5760: 2.2% more columns on 256
// than on 192); but 1.01-1.02x on Mixtral down 1024 (256 tiles: under two rounds) and on gpt-oss
// down 16384 (N = 2880: 6.7% more). Hence: where N pads at most 3% more to 256 than to 192, with at
// least 4 rounds of tiles.
constexpr TileChoice kFp8Full = {{128, 256, 128}, 4, 1, 1};
constexpr int kFp8FullTileMinRounds = 4;
// Large groups (1024+ rows per expert, K >= 4096: Mixtral at 4096 and 16384 tokens): v24 had
// 128x192 ahead there (0.967-0.99x of 128x256, both dynamic). Since v30's k-loop (scales from
// shared memory), in turns (BENCH_INTERLEAVE, H100, two processes agreeing within 3%;
// docs/results/2026-11-26-v30-fp8-tile-turns.txt), 128x256 on the static scheduler takes
// 0.88-0.91x the time of dynamic 128x192 on Mixtral up / down 16384 and 0.93-0.94x at 4096 (dynamic
// 128x256: 0.95-0.99x). Equal groups give equal tile costs, so the static CTAs stay in step on the
// shared tiles, and 128x256 pulls 10% fewer bytes from L2 per MMA, which those launches saturate
// (Nsight Compute on Mixtral down 16384: L2 throughput 85%, docs/perf.md v30).
constexpr int kFp8LargeGroupRows = 1024;  // mean rows per active expert
constexpr int kFp8LargeGroupMinK = 4096;
// The static scheduler where groups hold 512+ rows and K is at most 3072 (v24, in turns, both tiles
// staged; docs/results/2026-11-26-v24-fp8-scheduler-turns.txt): 0.954-0.988x the dynamic one's time
// on gpt-oss up/down, DeepSeek-V3 down and Qwen3 up/down at 16384 tokens (v22 and v13 saw the same
// direction there). Short tiles pay the dynamic fetch per tile, and with few partial tiles the
// static CTAs stay in step. Not elsewhere: at 128-256 rows (4096 tokens) partial tiles make tile
// costs uneven and static took 1.03-1.39x; with K = 7168 (DeepSeek-V3 up) 1.07-1.20x, the CTAs
// drifting apart off the shared B tiles (as the bf16 kernel's do, v2); Mixtral (K >= 4096) ±2%.
constexpr int kFp8StaticMinRows = 512;  // mean rows per active expert
constexpr int kFp8StaticMaxK = 3072;
// CTA pairs (cluster=2x1, static: the two M tiles 2i, 2i + 1 share B by multicast; a group's odd
// last M tile split along N, v32) where the rules above leave 128x256 on the dynamic scheduler and
// K >= 6144: there the static scheduler lost because its CTAs drift apart off the shared B tiles
// (above: DeepSeek-V3 up, K = 7168), and a pair keeps the two CTAs that share B in step. In turns
// against dynamic 128x256 (H100, three processes; docs/results/2026-11-26-v32-fp8-pairs-turns.txt):
// DeepSeek-V3 up 4096 / 16384 0.958-0.979 / 0.958-0.968x the time. Not below: Mixtral up 1024
// (K = 4096) 1.07x, DeepSeek-V3 down 4096 (K = 2048) 0.98-1.02x; nor where the static scheduler
// is already chosen (Mixtral 4096 / 16384, DeepSeek-V3 down 16384: 1.00-1.06x). Block scales only
// (the GPU tests run the pairs with both layouts of B's scales; the row-wise recipe was not timed).
constexpr int kFp8PairMinK = 6144;
// And 128x256 pairs where the 4-round bound above leaves 128x192 (few large groups: Mixtral down at
// 576-880 tokens), from kFp8ShortPairMinRows mean rows per expert, unfused, where N pads little to
// 256 and the host's group sizes give at least 7 of 8 active groups an even M-tile count (every pair
// of M tiles then shares its B tile; kEvenPairShareInverse). In turns on the H100 (order rotated, two
// processes each; docs/results/2026-11-27-v47-fp8-pairs-short-{first,rule,confirm}.csv): first 2x1
// static 128x256 took 0.875-0.926x the heuristic's time on Mixtral-8x7B and -8x22B down at 600-832
// tokens; with the rule (no share test yet), on 7 fresh routings per model at 576-1008 tokens,
// 0.83-0.94x the old choice's time (128x192, dynamic or split), but 1.14-1.15x at Mixtral-8x7B 1008
// tokens, where 2 of 8 groups had three M tiles: hence the share test. With it, on 7 more routings
// (544-992 tokens): 0.845-0.941x on the 9 launches it changes (geomean 0.877), the other 5 unchanged.
// Below 144 and from 256 rows not measured (the suite's Mixtral down 1024 keeps its split).
// Since v50 the share test only decides where the single CTAs split their last round; elsewhere the
// round model below (rounds_cost): 128x256 pairs where their rounds cost at most kFp8FusedPairMaxRatio
// of the singles', else 128x192 pairs where theirs cost no more. The share test had passed launches
// with one group of three M tiles whose units took a third round (7 x 16 + 24 = 136 units for 66
// pairs): 1.19-1.22x the singles' time. In turns on 54 fresh launches (Mixtral-8x7B and -8x22B down at
// 596-1020 tokens, three processes; docs/results/2026-11-28-v50-fp8-short-pairs-call11.csv) it changed
// 6, to 0.800-0.981x the old choice's time (geomean 0.908), each time to the fastest config timed.
constexpr double kFp8ShortPairMinRows = 144;
// FP8 pairs pick their tile by rounds (v47): where the rules above put an unfused launch on 128x256
// pairs, 128x192 pairs instead if their rounds of pair units, a 128x192 round counted as 0.75 of a
// 128x256 one, cost at most kFp8PairTileMaxRatio of 128x256's (exact from the host's group sizes;
// units as scheduler.cuh counts them: a group's odd last M tile in pairs of N tiles). On Mixtral down
// at 1536-3072 tokens (384-768 rows; docs/results/2026-11-27-v47-fp8-mixtral-down-384-768-rows.csv,
// rotated, two processes) the model's ratio and the measured one agreed in direction on 12 of 12
// launches and within 0.02-0.03 (model 0.900 / measured 0.915, 1.125 / 1.131, 0.938 / 0.958, ...);
// 128x192 pairs won by 3-9% where the model said 0.90-0.96 and lost by up to 13% where it said more.
// With the rule, on 6 fresh routings per model at 1664-3328 tokens (-fp8-pair-tile-rule.csv), it
// took 128x192 on the 2 launches the model put at 0.938 (0.955-0.967x the time of 128x256 pairs) and
// left the other 10, where 128x192 pairs measured 1.008-1.134x. The suite's DeepSeek-V3 up (128x256
// pairs) reads 1.02-1.04 on random routings: unchanged.
constexpr double kFp8PairTileMaxRatio = 0.97;
// Few large groups (v54): unfused or a layer's GEMM2 (linear_scatter), at most kFp8SmallByRoundsMaxGroups
// active groups of at least kFp8SmallByRoundsMinRows rows on average, K >= kFp8SmallByRoundsMinK:
// 64x256 on the static scheduler where its rounds of tiles
// cost at most kFp8SmallByRoundsMaxRatio of the choice above's (rounds as unit_rounds counts them, in
// 128x256 rounds; a 64x256 round costs kFp8SmallTileCost x 0.5 of one): where the groups' last
// 128-row M tiles are short, the 64-row tiles fill the rounds the 128-row ones half waste. Only from the
// host's group sizes, as the bf16 rule (kBf16SmallByRoundsMaxRatio). In turns
// on the H200 (docs/results/2026-11-28-v54-fp8-small-by-rounds-*.csv; fresh routings):
// - fitted on Mixtral-8x7B / 8x22B up and down at 576-2048 tokens (40 launches) with a bound of 0.93:
//   it took 64x256 on 19, at 0.838-0.985x the time of the old choice (geomean 0.920), and left the 21
//   where 64x256 took 0.956-1.112x;
// - then checked on 72 other launches (Mixtral at 384-4096 tokens, DBRX and Grok-1 shapes): from 96
//   rows it took 64x256 on 11, all faster (0.887-0.970x); below (DBRX 256 tokens, 47-79 rows) it
//   had fired at 1.004 / 1.020x;
// - over all 112, the launches the model puts at 0.93-0.95 measured 0.864-1.000x (11), at 0.95-0.97
//   0.951-1.006x: so 0.95. That takes the suite's Mixtral down 4096 too (the tuner's 0.902-0.940x).
//   On 56 more (Mixtral at 2560-6144 tokens, DBRX and Grok-1 at 640-4096) it took 64x256 on 4 more, at
//   0.933-0.986x. Over the 168 launches: 44 changed (from 112 rows), 0.838-1.000x, geomean 0.934. As a layer's GEMM2
//   (scatter + weight; Mixtral down, 576-2048 tokens) it picks 13 of 20, at 0.877-0.977x, and none of
//   the 7 slower ones (1.004-1.117x).
// - Unseen 16-expert shapes (Phi-3.5-MoE: K = 4096 / 6400; Jamba: 4096 / 14336; 768-2560 tokens, call
//   14) against the best of 128x256 2x1 static, 128x256 and 128x192 dynamic: where it takes 64x256,
//   0.799-1.004x, but 1.059 / 1.061x at 96 rows (hence the floor of 112).
// Many groups are left out: there the tuner found the choice above within 5% of the best and 64x256
// not the best (v53 section 6).
constexpr double kFp8SmallTileCost = 1.05;
constexpr double kFp8SmallByRoundsMaxRatio = 0.95;
constexpr long long kFp8SmallByRoundsMaxGroups = kFewLargeGroupsMax;
// From 112 rows: at 96 (Phi-3.5-MoE / Jamba-shaped down GEMMs at 768 tokens, call 14) 64x256 took 1.06x
// the best 128-row config's time (Mixtral-8x7B down 384, also 96 rows: 0.970x).
constexpr double kFp8SmallByRoundsMinRows = 112;
constexpr int kFp8SmallByRoundsMinK = 4096;  // measured from 4096 (Mixtral-8x7B up) to 32768 (Grok-1 down)
// Measured from 384 rows per expert; below 256 (groups of one M tile, whose pairs split N and share
// nothing, or the short-launch pairs above, which measured 128x256) the pairs keep 128x256.
constexpr double kFp8PairTileMinRows = 256;
// 128x192 pairs in place of the single CTAs (v58, H200): once a static pair's producer work is spread
// over three warps (the FP8 template, v58) its k-loop took 848-861 cycles per K block where the single
// 128x192's took 838-856, and the pairs read each B tile once per two M tiles. Unfused, block scales,
// from the host's group sizes (routing_variants gives prewarm the twin), K >= kFp8WidePairMinK, where
// the rules above leave single 128x256 or 128x192 CTAs unsplit, no short odd tiles (as 128x192 pairs
// would split them) and their rounds cost at most kFp8WidePairMaxRatio of the singles' (rounds_cost);
// over singles on the dynamic scheduler only from kFp8StaticMinRows rows per expert or K <=
// kFp8StaticMaxK (where the static scheduler itself would win, v24). In turns on the H200 (docs/results/
// 2026-11-28-v58-fp8-wide-pairs-*.csv), fitted on 46 launches of 10 shapes at 2048-16384 tokens: where
// it fired, 0.949-0.999x the singles' time on 18 of 19, 1.015x on Qwen3-235B up 6144; where it did not
// (K <= 2048: DeepSeek-V3 / Kimi-K2 / Qwen3 down, 1.00-1.08x; short odd tiles: Llama 4 up, 1.03x;
// ratio above: Mixtral-8x7B down, 0.995-1.029x) the pairs were no faster. On 65 fresh launches (14
// shapes, 1536-14336 tokens) without the scheduler gate: 0.930-0.998x on 56, but 1.003-1.055x on all 8
// over dynamic singles with K >= 4096 under 512 rows (GLM-4.5 / Qwen3-235B / Jamba / Phi-3.5 / Mixtral
// up at 1536-8192 tokens, Llama 4 up), which the gate takes out, and 1.003 / 1.005x on Grok-1 up.
constexpr int kFp8WidePairMinK = 2880;
constexpr double kFp8WidePairMaxRatio = 1.01;
// A layer's GEMM2 (linear_scatter: scatter + weight, v48) from kFp8ShortPairMinRows to kFp8StaticMinRows
// rows per expert, K >= 6144, block scales: 2x1 static pairs where their rounds of 128x256 pair units
// cost at most kFp8FusedPairMaxRatio of the single CTAs' rounds (rounds_cost), and from 256 rows the
// pairs' tile by the round model above. The share test of the unfused rule misread these: in turns on
// the H100 (rotated, two processes; docs/results/2026-11-28-v48-fused-gemm2-pairs-*.csv) the pairs took
// 0.84-0.90x the time of the fused heuristic's single 128x192 on Mixtral-8x7B down at 576-896 tokens
// (model 0.89, one routing with 2 odd groups), 0.98x at 1008 (model 1.00), but 1.22x at 960 (model
// 1.33: one group's third M tile cost the pairs a round); on Mixtral-8x22B down 576-1008 0.89-0.99x
// (model 1.00-1.07, against 128x192 or 128x256 singles). With the rule, on 15 fresh routings per model
// (584-1000 tokens): 0.842-0.859x (8x7B) and 0.880-0.942x (8x22B) the old choice's time, 0.98-0.99x at
// 1000 tokens, the 3 launches the model kept unchanged. At 1024-2040 tokens (256-510 rows) the pair
// tile the round model picks beat the fused heuristic's single CTAs on 12 of 12 (0.907-0.988x) and was
// the faster of the two pair tiles on 12 of 12; with the rule, on 8 fresh routings per model at
// 1088-1984 tokens, 0.885-0.974x the old choice's time on 16 of 16 (-fp8-gemm2-pairs-256-510.csv). In
// the Mixtral-8x7B FP8 layer (examples/moe_layer) its GEMM2 took 0.79x the old config's time at 640
// tokens (the layer 0.93x) and 0.98x at 1024. Below 144 rows not measured; from 512 pairable_fused.
constexpr double kFp8FusedPairMaxRatio = 1.1;
// Not where many groups end in a short odd M tile (short_odd_tiles, v48): in turns (rotated, two
// processes; docs/results/2026-11-28-v48-fp8-pairs-many-groups*.csv, -fp8-gemm2-pairs-maverick.csv),
// the unfused pairs took 1.06-1.08x the single CTAs' time (128x256 dynamic) at 256 rows per expert and
// 1.11-1.23x at 320 on DeepSeek-V3 and Kimi-K2 up (256 / 384 experts, K = 7168) and on Llama 4
// Maverick down at 320 (128 experts, K = 8192); a layer's GEMM2 on Maverick 1.04x at 256 and
// 1.07-1.10x at 320. There 16-20% of the pair units are a group's odd last M tile of at most 64 rows,
// split along N (they share no B). Where none are (384-448 rows, 144-224) the pairs took 0.94-0.99x,
// and where 11% are (DeepSeek-V3 up 16384, 512 +- 22 rows) 0.96-0.97x (v32). With the gate at 64 rows,
// on fresh routings at 272-304 rows the single CTAs took 0.78-0.95x the pairs' time (10 launches), but
// at 336 rows (a third tile of ~80) the pairs it kept were 1.03-1.13x the singles': hence 96 rows. At
// 96, on 10 more fresh launches at 328-400 rows, it took singles on 6 (0.83-0.995x the pairs' time) and
// kept pairs on 4: level at 368-400 on DeepSeek-V3 and Maverick, but 1.08x on Kimi-K2 up at 368 rows (a
// known miss). Pairs win from 384 (DeepSeek-V3 up 14336 / 15360: singles 1.02-1.05x). Maverick's
// unfused pairs at 256 rows (18.5%) took 0.98x: the bound gives that up. Few groups are not affected:
// Mixtral's 8 at 272-336 rows (25-33%) took 0.89-0.96x on pairs. The round model reads 1.00 on all the
// many-group launches. Why these units cost the static pairs so much: under Nsight Compute the static
// pairs read 14.3 GB from DRAM on FP8 DeepSeek-V3 up 10240 where single CTAs read 8.25 (7.5 GB of
// weights); in two other orders of the units 12.7 and 15.7 (v49). They lose the dynamic scheduler's
// group locality, which the FP8 pairs on the dynamic scheduler keep (kFp8DynamicPairMaxRows).
constexpr long long kShortOddMinGroups = 17;
// FP8 pairs on the dynamic scheduler in the interleaved order (v49), where short_odd_tiles keeps the
// static pairs off: in turns against single CTAs on DeepSeek-V3 / Kimi-K2 up and Maverick down
// (docs/results/2026-11-28-v49-fp8-dynamic-pairs*.csv), 256-296 rows 0.946-0.958x (one process of
// Kimi-K2 256 1.018x, one of DeepSeek-V3 272 1.001x), 320 rows 0.986-0.994x, but 336-352 rows
// 0.995-1.020x: from there single CTAs stay.
constexpr double kFp8DynamicPairMaxRows = 336;
constexpr double kShortOddMaxUnitShare = 0.15;
// 16-bit CTA pairs in the interleaved pair order (KernelSpec::pair_order) on many groups, unfused, also
// without short odd tiles where one group's weights (N x K x 2 bytes) fill most of the 50 MB L2, so
// that a group's odd last M tile's units, in the plain order after all of its pair units, read its B
// from DRAM again (choose_spec, v49).
constexpr long long kInterleavedPairMinGroupBytes = 30LL << 20;
// And 128x192 where the rules above leave it on the static scheduler (512+ rows per expert, K <=
// 3072, N padding less to 192 than to 256: gpt-oss down at 16384 tokens in the suite). Since v33 the
// A scales come by TMA, which took the 128x192 pair from 1.21 to 1.12 M cycles at the locked clock
// (Qwen3 up 16384); in turns against static 128x192 (H100, two processes; docs/results/
// 2026-11-26-v33-fp8-pairs-turns.txt): gpt-oss down 16384 0.945 / 0.948x the time. Block scales only.
// Gathered A (fuse=gather): 64x256 on the dynamic scheduler below this many mean rows per expert,
// else the tile above on the static one (choose_spec says why).
constexpr int kFp8GatherDynamicMaxRows = 256;
// Gathered A on CTA pairs (2x1, static; the tile above, or 128x256 for 64x256) from 128 rows per
// expert and K >= 2048, block scales only. A single gathering CTA's cp.async copies let the static
// CTAs drift off the B tiles they share; a pair multicasts B and keeps its two CTAs in step. In
// turns against the rules above (H100, BENCH_GATHER=1; docs/results/2026-11-27-v39-fp8-gather-pairs.txt):
// DeepSeek-V3 up 16384 0.51x the time (14.9 → 7.6 ms), Mixtral down 16384 0.81x, gpt-oss up 16384
// 0.85x, and at 128-256 rows (against dynamic 64x256 or static 128-row tiles) 0.88-0.92x (gpt-oss,
// DeepSeek-V3 up / down 4096, Mixtral up 1024, Qwen3 up 4096); elsewhere 0.96-1.00x. Not below:
// 32-64 rows 1.01-1.03x (1024 tokens of DeepSeek-V3, Qwen3, gpt-oss), K = 768 1.04x (Qwen3 down).
constexpr int kFp8GatherPairMinRows = 128;  // mean rows per active expert
constexpr int kFp8GatherPairMinK = 2048;
// The tiles of a launch without the groups' sizes: each active group's rows fill whole tiles plus
// (at most) one partial one.
long long estimated_tiles(long long rows, long long active, int n, TileShape tile) {
  return (rows / tile.m + active) * ((n + tile.n - 1LL) / tile.n);
}
bool fp8_large_groups(int k, long long rows, long long active) {
  return active > 0 && rows >= kFp8LargeGroupRows * active && k >= kFp8LargeGroupMinK;
}
bool fp8_full_tile_pads_little(int n) {
  const long long padded_192 = (n + 191LL) / 192 * 192, padded_256 = (n + 255LL) / 256 * 256;
  return padded_256 * 100 <= padded_192 * 103;
}
bool fp8_full_tile_pays(int n, long long rows, long long active, int sm_count) {
  return fp8_full_tile_pads_little(n) &&
         estimated_tiles(rows, active, n, kFp8Full.tile) >= kFp8FullTileMinRounds * static_cast<long long>(std::max(sm_count, 1));
}
// Whether 2x1 pairs of `tile` would leave many groups' odd last M tile short: from
// kShortOddMinGroups active groups, at least kShortOddMaxUnitShare of the pair units are a group's
// odd last M tile of at most 3/4 of the tile's rows, which the pair splits along N and shares no B of
// (from the host's group sizes; without them, no; `absorb`: as with absorbed tail rows). FP8
// (kFp8Full: static pairs off, dynamic ones below kFp8DynamicPairMaxRows) and bf16 (kHopperLarge:
// 2x1 in the interleaved pair order; v48, v49).
bool short_odd_tiles(std::span<const int> group_rows, int n, long long active, TileShape tile, bool absorb = false) {
  if (active < kShortOddMinGroups || group_rows.empty()) return false;
  const long long n_tiles = (n + tile.n - 1LL) / tile.n, odd_units = (n_tiles + 1) / 2;
  long long units = 0, short_units = 0;
  for (int r : group_rows) {
    if (r <= 0) continue;
    const long long m = m_tiles_of(r, tile.m, absorb);  // absorb: the last tile takes up to kTailRows more
    units += pair_units(m, n_tiles);
    if (m % 2 == 1 && r - (m - 1) * tile.m <= tile.m * 3 / 4) short_units += odd_units;
  }
  return short_units >= kShortOddMaxUnitShare * units;
}
// 4-bit weight-only (hopper_w4/ register-A kernel, docs/results/2026-11-23-w4-prototype.md, H100,
// MXFP4 v2): 64 tokens per tile beat 128 at 16 and 128 tokens (1199-1330 vs 861-1074 GB/s), 128
// beat 64 at 16384 tokens (409-462 vs 295-320 TFLOP/s). Since the 64-token tile runs two CTAs per
// SM (docs/perf.md v8, H100, MXFP4 and NVFP4): at 32 rows per expert 64 beats 128 by 25-35%
// (gpt-oss, DeepSeek-V3, Mixtral), at 64 rows (Qwen3, 1024 tokens) 128 beats 64 by 17-21%; the
// switch sits between, at 48. 16 tokens per tile at ≤ 8 rows per expert (H100, docs/perf.md
// v8, MXFP4 and NVFP4, 16 and 128 tokens): 10–30% faster than 64 on every such case (gpt-oss up 16
// tokens 0.253 vs 0.325 ms, DeepSeek-V3 up 128 1.99 vs 2.45), within 3% of 32 tokens per tile;
// at 32 rows per expert (Mixtral, 128 tokens) 64 stays best (0.300 ms vs 0.377 with 32, 0.627 with
// 16): a group over the tile's rows reads its weights twice.
constexpr TileChoice kW4Tiny = {{16, 128, 64}, 8, 1, 1};
constexpr int kW4TinyTileMaxRows = 8;
constexpr TileChoice kW4Small = {{64, 128, 64}, 8, 1, 1};
// 48 tokens per tile up to 36 rows per expert (v16): at 32 rows (Mixtral 128 tokens, gpt-oss and
// DeepSeek-V3 1024) the 64-token tile's MMAs take about as long as its weights' bytes (the wgmma's
// N is the tile's tokens, half of them padding there); 48 cuts that work by a quarter, and a group
// rarely exceeds 48 rows (which would read its weights twice) while the mean stays under 36.
constexpr TileChoice kW4Mid = {{48, 128, 64}, 8, 1, 1};
constexpr int kW4MidTileMaxRows = 36;
// 6 stages for the 16- and 48-token tiles when the launch is one round that fills the GPU: at
// least 90% of the 2 x SMs CTA slots hold a tile and none holds two. In turns on the H100 (docs/perf.md
// v36, 3 processes, both formats): Mixtral down at 16 / 128 tokens (256 tiles) 0.975-0.984 /
// 0.957-0.969x the time of 8 stages, and outside the suite 8 experts, N 4096, K 8192 (256 tiles)
// 0.976-0.995x and 16 experts, N 2048, K 8192 at 128 tokens (256 tiles) 0.93x. Where they do not
// apply: 224 tiles 0.99-1.01x, 128 tiles (half the slots) 1.04-1.07x, several rounds 0.99-1.02x
// (DeepSeek-V3 1.01-1.02x). Why a full single round streams faster with less in flight is not
// known; the rule is what was measured.
constexpr int kW4OneRoundStages = 6;
constexpr double kW4OneRoundMinFill = 0.9;
// Tile bands (band=2: two token tiles, the weight tiles sweeping across them) for the 4-bit kernel
// reading A in order (unfused, or a layer's GEMM2) where a group's A (bf16 rows x K) outgrows L2.
// In the plain order a group's token tiles run M-fastest for one 128-row weight tile after another,
// so only the few weight tiles in flight share each A tile: under skewed routing Nsight Compute read 23.5 GB from DRAM on Mixtral down 16384 (8.85
// with random routing) and 42.0 GB on DeepSeek-V3 up 16384 (14.6). In turns against no band (H100,
// docs/perf.md v43; MXFP4 / NVFP4): skewed 16384 tokens, largest group's A 63-339 MB, 0.60-0.95x the
// time (Mixtral down 0.60 / 0.62, DeepSeek-V3 up 0.68 / 0.83); skewed 4096, 55-86 MB, 0.97-0.98x;
// random routing, Mixtral down 16384 (117 MB) 0.989x. Under 48 MB they did not pay: 1.00-1.04x
// (Qwen3 down, 24 MB; Mixtral up 16384 with random routing, 34 MB, 1.027x). A layer's GEMM2
// (scatter + weight) the same: Mixtral down 16384 skewed 0.594x, gpt-oss down 0.951x, DeepSeek-V3 down
// 0.988x. Not a gathered GEMM1: its rows come from the tokens by index, and bands bought 0.97-1.01x.
constexpr long long kW4BandMinGroupABytes = 48ll << 20;
constexpr int kW4Band = 2;
constexpr TileChoice kW4Large = {{128, 128, 64}, 8, 1, 1};
constexpr int kW4LargeTileMinRows = 48;
// 256 tokens per tile (4 stages since v23: with the absorbed tail rows' slots 5 do not fit; 5 before,
// 6 fit MXFP4 but not NVFP4) from 256 rows per expert: each widened
// weight serves twice the tokens, so the widening's share of the issue slots halves (prefill).
// H100, same process, 16384 tokens: MXFP4 +0…+31% over 128 (Mixtral down 7.55 → 5.74 ms), NVFP4
// +8…+21%; at 4096 tokens 128 still wins where groups hold 128 rows (gpt-oss, DeepSeek-V3), 256
// where they hold 1024 (Mixtral); at 256 rows (Qwen3) within ±2% but for NVFP4 up (256: +12%).
// With fuse=gather too since v10's leaner gather (4 instructions per copy instead of ~10): the
// gpt-oss MXFP4 GEMM1 at 16384 tokens 4.30 ms on it against 4.59 on 128 tokens (plain 4.16).
constexpr TileChoice kW4Prefill = {{256, 128, 64}, 4, 1, 1};
constexpr int kW4PrefillTileMinRows = 256;  // gathered A (fuse=gather), the v10 rule above
// Unfused and scatter-only kernels, re-measured with the configs timed in turns (bench_suite
// BENCH_INTERLEAVE=1, H100, v17; docs/results/2026-11-25-v17-w4-prefill-tile.txt): 128 tokens beat
// 256 up to 2048 rows per expert for MXFP4 (0.76-0.89x the time at 128-256 rows, 0.91-0.94x at 512
// on DeepSeek-V3 and gpt-oss, 0.95-0.98x at 2048; Qwen3 at 1024 rows within ±2%), 256 wins at 4096
// (Mixtral 16384 tokens: 128 takes 1.29x on down). NVFP4 widens more per weight (a scale per 16):
// 128 wins at 256 rows (0.94-0.97x), 256 from 512 (0.99-1.05x there, 1.03-1.23x above). The
// switches sit on the tuner's shape-bucket bounds (rows per expert rounded up to a power of two).
constexpr int kW4LargeTileMaxRowsMxfp4 = 2048;
// NVFP4 after its scales were re-encoded (v20: 2 widening instructions per pair of rows' scales, 5
// before), in turns (docs/results/2026-11-25-v20-nvfp4-scales.txt): 128 tokens take 0.952-0.978x
// the time of 256 at 512 rows (gpt-oss, DeepSeek-V3 16384 tokens), 0.965 / 0.997 at 1024 rows on
// Mixtral but 1.042 / 1.081 on Qwen3 (K = 2048 / 768), 1.04 / 1.21 at 4096 rows. So up to 512 rows (v20-v23).
// With tail rows on both tiles (v23), in turns again (v24; docs/results/2026-11-26-v24-tile-turns.txt):
// NVFP4 at 512 rows takes 0.944-0.964x the time on 256 tokens (gpt-oss, DeepSeek-V3 16384 tokens;
// the last tile's ≤ 24 extra rows no longer cost 256 a tile of padding), at 256 rows 1.009x on
// Qwen3 up (K = 2048) but 0.922x on Qwen3 down (K = 768). So 128 tokens up to 256 rows, and at
// short K up to 128. (MXFP4 at 512 rows stays on 128: 256 took 1.01-1.07x.)
constexpr int kW4LargeTileMaxRowsNvfp4 = 256;
constexpr int kW4LargeTileMaxRowsNvfp4ShortK = 128;
// After the staged epilogue (v18), in turns again (v19; docs/results/2026-11-25-v19-w4-prefill-tile.txt):
// NVFP4 unchanged (256 tokens take 0.98-0.99x the time of 128 at 512 rows, 0.73-0.98x at 1024-4096;
// 128 wins at 128-256 rows). MXFP4 the same but for short K: Qwen3 down (K = 768) at 1024 rows takes
// 0.953x the time on 256 tokens (0.7526 vs 0.7897 ms), while Mixtral (K >= 4096) at 1024 rows keeps
// 128 (0.934-0.960x): with 12 K blocks a tile's fixed cost (epilogue, pipeline fill) weighs more, and
// 256 tokens halve the tiles. So for K <= 1024 MXFP4 takes 128 tokens only up to 512 rows (v17: 0.994x
// there).
constexpr int kW4ShortKMax = 1024;
constexpr int kW4LargeTileMaxRowsMxfp4ShortK = 512;
// Portable: 8 warps over 128x128 (two CTAs per SM); 64-row tiles when groups are small.
constexpr TileChoice kPortableLarge = {{128, 128, 32}, 4, 2, 4};
constexpr TileChoice kPortableSmall = {{64, 128, 32}, 4, 2, 4};

bool hopper_capable(const Arch& arch) { return arch.sm() == 90 && arch.arch_specific; }

// Several groups make tiles of uneven cost: hand them out dynamically once there are more tiles
// than SMs. Measured on the H100 for the bf16 kernel (docs/results/2026-11-23-tune-tiles.csv, v2
// bench): dynamic wins on Mixtral up 16384 (642 vs 599 TFLOP/s), Mixtral up 1024 (0.99 vs 1.15 ms)
// and Qwen3 16384 (592/603 vs 515/570); static wins by 3% on Mixtral down 16384 and by 2% on
// DeepSeek-V3 up 16384. Since v4 half-empty tiles cost half, static CTAs drift apart and stop
// sharing B in L2: DeepSeek-V3 up 16384 274 vs 578. The FP8 kernel follows the same rule
// (docs/perf.md v10).
// bf16/f16 CTA pairs sharing B (2x1) where groups hold 160-255 rows and K is long (DeepSeek-V3 and
// Kimi-K2 shapes, K = 7168, up GEMM at 5120-8192 tokens; Mixtral down), which the A-sharing rule
// below leaves on single CTAs (it wants 256 rows): the weights are read once per pair and not once
// per M tile. In turns against 128x256 single CTAs, dynamic (H100,
// docs/results/2026-11-27-v39-bf16-pairs-long-k.txt): DeepSeek-V3 at 192 rows 0.844-0.863x the time
// (gathered 0.898-0.924x), Kimi-K2 at 171 rows 0.829-0.884x (gathered 0.873-0.918x), Mixtral down
// (K = 14336) at 160-224 rows 0.90-0.93x. At 128 rows the gain depends on the routing: 0.97x on the
// suite's random top-k (DeepSeek-V3 up 4096, Kimi-K2 at 6144 tokens), but 1.022x in examples/moe_layer's
// DeepSeek-V3 layer (its own router, alternating processes, plain and fused alike), so 128-159 rows
// stay single. Not at shorter K (v39 call 7: Mixtral up 1024, K = 4096, gathered 1.19x; gpt-oss
// K = 2880 1.00-1.02x). Where the single CTAs' last round splits along K (split=tail: Mixtral down
// at 512 tokens, 0.91-0.99x of 2x1), the launch stays single.
// Shorter K with wide N as well (v45, shapes beyond the suite; docs/results/2026-11-27-v45-pairs-sweep.csv):
// at 160-255 rows a launch reads its weights about as long as it multiplies them (~200 FLOPs per
// weight byte against the H100's ~260 per DRAM byte), so what pays is reading each expert's weights
// once per pair. That tracks an expert's weight count N x K, not K: in turns at 176 / 204 / 240
// rows, 2x1 took 0.86-0.93x the time at N x K = 3072 x 5120 (GLM-4.5 up, 0.91x on its own routing,
// gathered 0.96x), 0.94-0.96x at 5760 x 2880, 0.86-0.92x at 28672 x 4096, 0.92-0.96x at 7168 x 2048,
// but 0.97-1.01x at 2880 x 2880, 0.98-1.00x at 3072 x 2048 and 2048 x 2048, 0.99-1.00x at 5120 x 1536.
constexpr int kPairLongKMinK = 6144;
constexpr long long kPairMinWeightsPerGroup = 12LL << 20;  // N x K elements (24 MiB of bf16)
constexpr double kPairLongKMinRows = 160;                  // mean rows per active group
// Unfused launches with very long K (Mixtral down: K = 14336, 16384) take those pairs from 136 rows:
// there nearly every group holds two M tiles (128 + a few rows), so every pair shares its B tile, and
// each B tile is long. In turns on the H100 (order rotated each round, two processes each): first
// (docs/results/2026-11-27-v47-bf16-pairs-long-k.csv) 2x1 took 0.91 / 0.87x the time of single CTAs
// on Mixtral-8x7B down 576 / 608 tokens (144 / 152 rows), 0.96 / 0.98x of tail rows on Mixtral-8x22B
// down 544 / 576, 0.86x of single CTAs at 608. With the rule, on 7 fresh routings per model at
// 520-624 tokens (-bf16-long-k-rule.csv), the new choice against the old one: Mixtral-8x7B down
// 0.89-0.96x where it takes pairs, Mixtral-8x22B down 592-624 0.87-0.95x, but 544-576 1.004-1.012x
// (tail rows, which save a round there, were 1% faster than the pairs); the up GEMMs (K = 4096, 6144)
// unchanged. Tail rows on those pairs cost them (0.93-1.08x against 2x1 alone), so they take none.
// Where tail rows fit the launch in one round (Mixtral-8x7B down 520 / 560: 2x1 1.10x of them) or the
// split applies, those stay first. A layer's GEMM2 (linear_scatter) too since v48, after tail rows
// wherever absorbed_tails_pay (fused, in turns: pairs 0.84-0.95x the single CTAs' time on 10 fresh
// Mixtral down routings at 552-624 tokens; against tail rows 0.96x at one, 1.06-1.085x at another;
// docs/results/2026-11-28-v48-fused-gemm2-pairs-*.csv). Not measured: K of 6144-8191 (DeepSeek-V3 up
// at 136-152 rows, K = 7168: 0.96-1.03x, and Mixtral-8x22B up, K = 6144: 0.97-1.09x, in an unrotated
// call), which keep the 160-row bound.
constexpr int kPairVeryLongKMinK = 8192;
constexpr double kPairVeryLongKMinRows = 136;

Scheduler scheduler_for(long long active, long long rows, int n, TileShape tile, int sm_count) {
  return active > 1 && estimated_tiles(rows, active, n, tile) > std::max(sm_count, 1) ? Scheduler::dynamic
                                                                                      : Scheduler::static_persistent;
}

// Whether an unfused 16- or 48-token 4-bit launch is one round that fills the GPU (kW4OneRoundStages):
// its tiles (exact with the host's group sizes, else from the mean) between kW4OneRoundMinFill of the
// CTA slots and all of them.
bool w4_one_full_round(const KernelSpec& spec, const GemmProblem& problem, long long active, double mean_rows, int sm_count) {
  if (spec.fusion.any() || spec.tile.m > kW4Mid.tile.m || sm_count < 1) return false;
  const long long n_blocks = (problem.n + spec.tile.n - 1LL) / spec.tile.n;
  long long tiles = 0;
  if (!problem.group_rows.empty()) {
    for (int r : problem.group_rows) tiles += (r + spec.tile.m - 1LL) / spec.tile.m * n_blocks;
  } else {
    tiles = active * (long long)std::ceil(mean_rows / spec.tile.m) * n_blocks;
  }
  const long long slots = (long long)sm_count * spec.min_ctas_per_sm();
  return tiles <= slots && (double)tiles >= kW4OneRoundMinFill * (double)slots;
}

KernelSpec with_tile(KernelSpec spec, const TileChoice& t) {
  spec.tile = t.tile;
  spec.stages = t.stages;
  // The warp grid is the portable family's; a Hopper spec keeps the default, which is what parsing its
  // text (no warps= there) gives, so that a chosen spec equals the parse of its text (the hot-path
  // key is packed from the struct).
  spec.warps_m = spec.family == KernelFamily::portable ? t.warps_m : KernelSpec{}.warps_m;
  spec.warps_n = spec.family == KernelFamily::portable ? t.warps_n : KernelSpec{}.warps_n;
  spec.cluster_n = t.cluster_n;
  spec.split = t.split;
  return spec;
}

// The few-large-groups rules' alternative to `spec` (kBf16SmallByRounds*, kFp8SmallByRounds*): tile
// `t` (64x256) on single CTAs and the static scheduler, in plain order, without split, tail rows,
// mixed order or bands.
KernelSpec few_groups_twin(const KernelSpec& spec, const TileChoice& t) {
  KernelSpec small = with_tile(spec, t);
  small.scheduler = Scheduler::static_persistent;
  small.cluster_m = small.cluster_n = 1;
  small.pair_order = PairOrder::plain;
  small.split = SplitK::none;
  small.tail = 0;
  small.mix = 0;
  small.band = 0;
  return small;
}

// The few-large-groups rule (if any) whose conditions a launch's operands and fusion meet (all but
// the group sizes): 16-bit A and B with K >= kBf16SmallByRoundsMinK, or FP8 with block scales, 16/32-bit
// C and K >= kFp8SmallByRoundsMinK; unfused or a layer's GEMM2 (linear_scatter).
enum class FewGroupsRule { none, sixteen_bit, fp8 };
FewGroupsRule few_groups_rule(DType ab, DType b, DType c, int k, const Fusion& fusion, ScaleB b_scales) {
  if (fusion.any() && !fusion.linear_scatter()) return FewGroupsRule::none;
  if ((ab == DType::bf16 || ab == DType::f16) && b == ab && k >= kBf16SmallByRoundsMinK) return FewGroupsRule::sixteen_bit;
  if (ab == DType::e4m3 && c != DType::e4m3 && b_scales == ScaleB::blocks && k >= kFp8SmallByRoundsMinK)
    return FewGroupsRule::fp8;
  return FewGroupsRule::none;
}

// Rounds of `s`'s units over the host's group sizes in 128x256-round equivalents (the few-groups
// rules' cost), a 64-row tile's weighted by small_tile_cost.
double tile_rounds_cost(const KernelSpec& s, const GemmProblem& problem, int sm_count, double small_tile_cost) {
  return double(unit_rounds(s, problem.group_rows, problem.n, sm_count, false)) * s.tile.m * s.tile.n /
         (kHopperLarge.tile.m * kHopperLarge.tile.n) * (s.tile.m == 64 ? small_tile_cost : 1.0);
}

}  // namespace

// The last round's R tiles are cut into S <= ctas / R pieces, so it takes 1/S of a tile's time.
// Each piece keeps at least min_k_blocks_per_piece K blocks: its partial sums (128 KB for 128x256)
// go out to the workspace and the last piece reads the others back, a few K blocks' worth of time.
// At most max_pieces: the last piece reads S - 1 partials on its own. At most max_rounds rounds:
// the 16-bit and FP8 split kernels run 1-8% slower than the plain ones on every tile (FP8 Qwen3 up
// 1.07x where nothing was split; docs/perf.md v14), which a tail saving (1 - 1/S) of one round in
// many does not repay (FP8 Mixtral down 4096, 11 rounds: 1.01-1.02x; bf16 Mixtral down 4096, 9
// rounds). A last round over half the CTAs is not split: with pieces sharing CTAs (3 pieces in 2
// rounds of thirds, 4 in 3 of quarters) the 4-bit decode tile ran 0.97-1.10x the time (v46).
SplitTailPlan plan_split_tail(long long tiles, long long ctas, int k_blocks, const SplitTailLimits& limits) {
  SplitTailPlan plan;
  if (tiles <= 0 || ctas < 2 || k_blocks <= 0 || tiles > limits.max_rounds * ctas) return plan;
  const long long last_round = tiles % ctas;
  if (last_round == 0) return plan;
  const long long count = std::min({ctas / last_round, (long long)limits.max_pieces,
                                    (long long)(k_blocks / limits.min_k_blocks_per_piece)});
  if (count < 2) return plan;
  plan.from = static_cast<int>(tiles - last_round);
  plan.tiles = static_cast<int>(last_round);
  plan.count = static_cast<int>(count);
  return plan;
}

namespace {
// The kernels that have split=tail, on the tiles the heuristic gives long-K launches: the 16-bit
// 128x256 and the FP8 128x192, unfused, single CTAs; and the 4-bit 16-token decode tile (static,
// two CTAs per SM; v45; from K = 2048 since v46).
bool may_split_tail(const KernelSpec& spec, int k) {
  if (spec.family != KernelFamily::hopper || spec.cluster_m != 1 || spec.cluster_n != 1 || spec.fusion.any() ||
      spec.c == DType::e4m3)
    return false;
  if (spec.is_weight_only_4bit())
    return k >= kW4SplitTailMinK && spec.tile == kW4Tiny.tile && spec.scheduler == Scheduler::static_persistent;
  if (k < kSplitTailMinK) return false;
  if (spec.a == DType::bf16 || spec.a == DType::f16) return spec.tile == kHopperLarge.tile && spec.stages == kHopperLarge.stages;
  if (spec.a == DType::e4m3 && spec.b == DType::e4m3) return spec.tile == kFp8Wide.tile && spec.stages == kFp8Wide.stages;
  return false;
}

// Launches whose last round would leave at least half the SMs idle split it (split=tail; the
// launch plans again from its own exact tile count). Measured on the H100 (docs/perf.md v14, same
// process): bf16 Mixtral down 1024 tokens (K = 14336, 2.4 rounds) 0.88x the time; where the plan
// splits nothing the bf16 kernel itself ran 0.98-1.04x (its accumulators are set per tile), up to
// 1.08x on Qwen3 up 4096 (K = 2048): hence K >= 4096, and only where the plan splits. `estimate`:
// the tile count without the groups' sizes.
KernelSpec with_split_tail(KernelSpec spec, const GemmProblem& problem, long long estimate, int sm_count) {
  // The launch plans the split from the host's counts; without them it runs every tile whole.
  if (!may_split_tail(spec, problem.k) || problem.group_rows_estimated) return spec;
  const long long n_tiles = (problem.n + spec.tile.n - 1) / spec.tile.n;
  long long exact = 0;
  for (int r : problem.group_rows) exact += (std::max(r, 0) + spec.tile.m - 1) / spec.tile.m * n_tiles;
  const long long tiles = problem.group_rows.empty() ? estimate : exact;
  const long long ctas = (long long)sm_count * spec.min_ctas_per_sm();  // the 4-bit decode tiles run two per SM
  if (plan_split_tail(spec, tiles, ctas, problem.k).count > 1) spec.split = SplitK::tail;
  return spec;
}
}  // namespace

SplitTailLimits split_tail_limits(const KernelSpec& spec) {
  if (!spec.is_weight_only_4bit()) return {};
  SplitTailLimits limits;
  limits.min_k_blocks_per_piece = kW4SplitMinKBlocksPerPiece;
  limits.max_rounds = kW4SplitMaxRounds;
  return limits;
}

SplitTailPlan plan_split_tail(const KernelSpec& spec, long long tiles, long long ctas, int k) {
  return plan_split_tail(tiles, ctas, (k + spec.tile.k - 1) / spec.tile.k, split_tail_limits(spec));
}

std::vector<KernelSpec> routing_variants(const KernelSpec& chosen, int n, int k, long long max_group_rows,
                                         long long num_groups) {
  std::vector<KernelSpec> out = {chosen};
  auto add = [&](const KernelSpec& s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  // Few large groups: 64x256 on the static scheduler where its rounds cost less (kBf16SmallByRounds*,
  // kFp8SmallByRounds*), which only the host's group sizes tell.
  const bool few_groups = num_groups == 0 || num_groups <= kFewLargeGroupsMax;
  const FewGroupsRule rule = few_groups_rule(chosen.a, chosen.b, chosen.c, k, chosen.fusion, chosen.b_scales);
  if (few_groups && chosen.family == KernelFamily::hopper && chosen.tile.m == 128 && rule != FewGroupsRule::none) {
    const KernelSpec small = few_groups_twin(chosen, rule == FewGroupsRule::sixteen_bit ? kHopperSmallWide : kFp8Small);
    try {
      small.validate();
      add(small);
    } catch (const SpecError&) {
    }
  }
  // Unfused FP8 single CTAs on 128-row tiles: their 128x192 pair twin (kFp8WidePairMinK), which only the
  // host's group sizes decide.
  if (chosen.family == KernelFamily::hopper && chosen.a == DType::e4m3 && chosen.b == DType::e4m3 && !chosen.fusion.any() &&
      chosen.c != DType::e4m3 && chosen.b_scales == ScaleB::blocks && chosen.tile.m == 128 && chosen.cluster_m == 1 &&
      k >= kFp8WidePairMinK) {
    KernelSpec pair = few_groups_twin(chosen, kFp8Wide);
    pair.cluster_m = 2;
    try {
      pair.validate();
      add(pair);
    } catch (const SpecError&) {
    }
  }
  if (may_split_tail(chosen, k)) {
    KernelSpec twin = chosen;
    twin.split = chosen.split == SplitK::tail ? SplitK::none : SplitK::tail;
    twin.tail = 0;  // split launches absorb no tail rows
    add(twin);
  }
  // Absorbed tail rows follow the group sizes as well: the unsplit config with and without them.
  if (chosen.family == KernelFamily::hopper && (chosen.a == DType::bf16 || chosen.a == DType::f16) &&
      chosen.tile == kHopperLarge.tile && chosen.stages == kHopperLarge.stages && !chosen.fusion.atomic) {
    KernelSpec unsplit = chosen;
    unsplit.split = SplitK::none;
    for (int tail : {0, kTailRows}) {
      unsplit.tail = tail;
      add(unsplit);
    }
    // On whole N, pairs sharing A (1x2) become pairs sharing B (2x1) where tail rows leave the
    // groups' M-tile counts even (choose_spec), and back where they do not: both pairs, each with
    // and without tail rows. (Ragged N and gathered rows take 2x1 whatever the routing.)
    if (chosen.cluster_m * chosen.cluster_n == 2 && !chosen.fusion.gather_a && n % chosen.tile.n == 0) {
      KernelSpec other = unsplit;
      other.cluster_m = chosen.cluster_n, other.cluster_n = chosen.cluster_m;
      for (int tail : {0, kTailRows}) other.tail = tail, add(other);
    }
    // 2x1 pairs on the dynamic scheduler take the interleaved pair order where many groups end in
    // a short odd M tile (choose_spec): each such variant in both orders.
    for (std::size_t i = 0, count = out.size(); i < count; ++i)
      if (out[i].cluster_m == 2 && out[i].scheduler == Scheduler::dynamic && out[i].band == 0 && out[i].mix == 0) {
        KernelSpec order = out[i];
        order.pair_order = order.pair_order == PairOrder::plain ? PairOrder::interleaved : PairOrder::plain;
        add(order);
      }
  }
  // Skewed routing (v43): a decode-sized mean whose rows sit mostly in hot groups takes 128x256
  // instead of 64x128 (hot_groups_dominate); a 4-bit prefill tile reading A in order takes tile bands
  // where a hot group's A outgrows L2.
  if (max_group_rows > kHotGroupRows && chosen.family == KernelFamily::hopper &&
      (chosen.a == DType::bf16 || chosen.a == DType::f16) && !chosen.is_weight_only_4bit() &&
      chosen.tile == kHopperSmall.tile && chosen.stages == kHopperSmall.stages) {
    KernelSpec hot = with_tile(chosen, kHopperLarge);
    try {
      hot.validate();
      add(hot);
    } catch (const SpecError&) {
    }
  }
  if (max_group_rows * k * 2 >= kW4BandMinGroupABytes && chosen.family == KernelFamily::hopper &&
      chosen.is_weight_only_4bit() && chosen.tile.m >= 128 && !chosen.fusion.gather_a) {
    KernelSpec banded = chosen;
    banded.band = chosen.band == 0 ? kW4Band : 0;
    add(banded);
  }
  // And the mixed tile order where a group can reach kMixHeavyRows (choose_spec's mix rules): each
  // unsplit 16-bit 128x256 variant above (without atomics), or FP8 128-row one, with and without it.
  if (max_group_rows >= kMixHeavyRows && n >= kMixMinN && k <= kMixMaxK)
    for (std::size_t i = 0, count = out.size(); i < count; ++i) {
      KernelSpec s = out[i];
      const bool sixteen_bit = (s.a == DType::bf16 || s.a == DType::f16) && !s.is_weight_only_4bit() &&
                               s.tile == kHopperLarge.tile && s.stages == kHopperLarge.stages && !s.fusion.atomic &&
                               !(s.cluster_m == 2 && s.tail != 0);
      const bool fp8 = s.a == DType::e4m3 && s.tile.m == 128;
      if (s.family != KernelFamily::hopper || s.split != SplitK::none || !(sixteen_bit || fp8)) continue;
      s.mix = s.mix ? 0 : kMixHeavyRows;
      add(s);
    }
  return out;
}

bool few_groups_small_tile_may_pay(DType ab, DType c, int n, int k, const Fusion& fusion, ScaleB b_scales, long long active,
                                   long long rows, long long m_tiles_128, long long m_tiles_64, int sm_count) {
  if (active <= 0 || active > kFewLargeGroupsMax) return false;
  const FewGroupsRule rule = few_groups_rule(ab, ab, c, k, fusion, b_scales);
  const bool fp8 = rule == FewGroupsRule::fp8;
  const double mean_rows = (double)rows / (double)active;
  if (rule == FewGroupsRule::none || mean_rows < (fp8 ? kFp8SmallByRoundsMinRows : kBf16SmallByRoundsMinRows)) return false;
  const long long n_tiles = (n + 255) / 256, sms = std::max(sm_count, 1);
  const double rounds_128 = (double)((m_tiles_128 * n_tiles + sms - 1) / sms);
  const double rounds_64 = (double)((m_tiles_64 * n_tiles + sms - 1) / sms) * 0.5 * (fp8 ? kFp8SmallTileCost : 1.0);
  return rounds_64 <= (fp8 ? kFp8SmallByRoundsMaxRatio : kBf16SmallByRoundsMaxRatio) * rounds_128;
}

namespace {
// Whether an FP8 tile can write C quantized (c=e4m3): each consumer's output slice whole 128-column
// blocks, or 64x256 s4 with a GLU (two paired 64-column halves; KernelSpec::validate).
bool fp8_c_quantizable(const KernelSpec& s) {
  try {
    s.validate();
    return true;
  } catch (const SpecError&) {
    return false;
  }
}
}  // namespace

long long expected_active_groups(long long groups, long long rows) {
  if (groups <= 0 || rows <= 0) return 0;
  const double empty_share = std::exp((double)rows * std::log1p(-1.0 / (double)groups));  // (1 - 1/groups)^rows
  const long long active = std::llround((double)groups * (1.0 - empty_share));
  return std::clamp(active, 1LL, std::min(groups, rows));
}

std::vector<int> typical_group_rows(int groups, long long rows) {
  std::vector<int> out(std::max(groups, 0), 0);
  if (groups <= 0 || rows <= 0) return out;
  if (groups == 1) return {(int)std::min<long long>(rows, INT32_MAX)};
  // The binomial's CDF over mean ± 10 sd (the mass outside is below 1e-20), from log-pmfs.
  const double p = 1.0 / groups, n = (double)rows;
  const double mean = n * p, sd = std::sqrt(n * p * (1 - p));
  const long long lo = std::max(0LL, (long long)std::floor(mean - 10 * sd - 1)),
                  hi = std::min(rows, (long long)std::ceil(mean + 10 * sd + 1));
  const double log_norm = std::lgamma(n + 1);
  std::vector<double> cdf;
  cdf.reserve(hi - lo + 1);
  double sum = 0;
  for (long long k = lo; k <= hi; ++k) {
    const double x = (double)k;
    sum += std::exp(log_norm - std::lgamma(x + 1) - std::lgamma(n - x + 1) + x * std::log(p) + (n - x) * std::log1p(-p));
    cdf.push_back(sum);
  }
  for (int i = 0; i < groups; ++i) {
    const double q = (i + 0.5) / groups * sum;
    const long long k = lo + (std::lower_bound(cdf.begin(), cdf.end(), q) - cdf.begin());
    out[i] = (int)std::min<long long>(std::min(k, hi), INT32_MAX);
  }
  return out;
}

bool mixed_order_pays(int n, int k, const MixClasses& c, bool unfused_fp8) {
  const long long all = c.heavy_tiles + c.light_tiles;
  if (n < kMixMinN || k > kMixMaxK || c.heavy_groups == 0 || c.light_groups == 0) return false;
  const double share = (double)c.heavy_tiles / (double)all;
  // Heavy groups' mean tiles >= kMixMinTileRatio x the light ones' (cross-multiplied).
  const bool skewed = c.heavy_tiles * c.light_groups >= kMixMinTileRatio * c.light_tiles * c.heavy_groups;
  return skewed && share >= kMixMinHeavyTileShare && share <= (unfused_fp8 ? kMixMaxHeavyTileShareFp8 : kMixMaxHeavyTileShare);
}

bool mixed_order_pays(int n, int k, std::span<const int> group_rows, bool unfused_fp8) {
  MixClasses classes;
  for (int r : group_rows) classes.add(r);
  return mixed_order_pays(n, k, classes, unfused_fp8);
}

bool hot_groups_dominate(long long rows, long long active, long long rows_in_hot_groups) {
  return rows > 0 && rows <= (long long)kHotGroupRows * active && rows_in_hot_groups * kHotRowsShareInverse >= rows;
}

namespace {
// kHopperSmallWide's test, decided for the whole shape bucket, which rounds the active groups up to
// a power of two (one bucket keeps one tile: the high-level call's first problem in a bucket decides
// for the rest): every active count of the bucket, one 64-row tile per group, takes two rounds or
// more of 64x128 and one of 64x256.
bool wide_decode_tile_pays(long long active, int n, int sm_count) {
  if (active <= 0) return false;
  const long long most = (long long)std::bit_ceil((unsigned long long)active);  // the bucket's bound
  const long long least = most / 2 + 1;
  return most * ((n + 255LL) / 256) <= sm_count && least * ((n + 127LL) / 128) > sm_count;
}
}  // namespace

bool hot_groups_dominate(std::span<const int> group_rows) {
  long long rows = 0, active = 0, in_hot = 0;
  for (int r : group_rows) {
    if (r <= 0) continue;
    rows += r, ++active;
    if (r > kHotGroupRows) in_hot += r;
  }
  return hot_groups_dominate(rows, active, in_hot);
}

KernelSpec choose_spec(const GemmProblem& given, const Arch& arch, int sm_count) {
  // Without the groups' sizes, a typical random routing of the rows (typical_group_rows).
  GemmProblem problem = given;
  std::vector<int> typical;
  if (problem.group_rows.empty()) {
    typical = typical_group_rows(problem.num_groups, problem.total_rows);
    problem.group_rows = typical;
    problem.group_rows_estimated = true;
  }
  KernelSpec spec;
  spec.arch = arch;
  spec.layout = problem.layout;
  spec.a = spec.b = problem.ab_type;
  if (problem.b_type) spec.b = *problem.b_type;
  spec.c = problem.c_type;
  spec.fusion = problem.fusion;
  spec.b_scales = problem.b_scales;

  // Mean rows per non-empty group decides whether 128-row tiles are mostly filled.
  long long active = 0, rows = 0;
  for (int r : problem.group_rows)
    if (r > 0) ++active, rows += r;
  double mean_rows = active ? double(rows) / double(active) : 0.0;

  const bool split_glu = spec.fusion.glu_activation() && spec.fusion.glu == GluLayout::split;
  if (spec.is_weight_only_4bit() && hopper_capable(arch) && spec.c != DType::f32 && !split_glu) {
    // Elsewhere (and for f32 C, which the Hopper 4-bit kernel does not write, or a split GLU, which
    // it does not fuse) the portable family widens the 4-bit weights, with the bf16 tile rules below.
    spec.family = KernelFamily::hopper;
    const bool short_k = problem.k <= kW4ShortKMax;
    const int large_tile_max_rows = spec.b == DType::nvfp4 ? (short_k ? kW4LargeTileMaxRowsNvfp4ShortK : kW4LargeTileMaxRowsNvfp4)
                                    : short_k              ? kW4LargeTileMaxRowsMxfp4ShortK
                                                           : kW4LargeTileMaxRowsMxfp4;
    const bool large_tile = spec.fusion.gather_a ? mean_rows < kW4PrefillTileMinRows : mean_rows <= large_tile_max_rows;
    spec = with_tile(spec, mean_rows <= kW4TinyTileMaxRows    ? kW4Tiny
                           : mean_rows <= kW4MidTileMaxRows  ? kW4Mid
                           : mean_rows < kW4LargeTileMinRows ? kW4Small
                           : large_tile                      ? kW4Large
                                                             : kW4Prefill);
    if (w4_one_full_round(spec, problem, active, mean_rows, sm_count)) spec.stages = kW4OneRoundStages;
    int largest_group = 0;
    for (int r : problem.group_rows) largest_group = std::max(largest_group, r);
    if (!spec.fusion.gather_a && (long long)largest_group * problem.k * 2 >= kW4BandMinGroupABytes) spec.band = kW4Band;
    // Static: the dynamic scheduler (a tuner candidate) ran slower on 4-bit weights, same process
    // on the H100 (docs/perf.md v10): geomean 0.93 (MXFP4) and 0.90 (NVFP4) of static's speed over
    // the 40 suite cases, slower on 39 (MXFP4) and 33 (NVFP4) of 40, decode to prefill.
    spec.scheduler = Scheduler::static_persistent;
    // A 16-token launch whose last round would leave half the CTAs idle runs it in pieces of K
    // (split=tail, K >= 2048, up to 12 rounds; with the host's counts): Mixtral-8x22B's down GEMM at
    // 16 tokens (384 tiles on 264 CTAs; docs/perf.md v45), gpt-oss-20b down (v46).
    spec = with_split_tail(spec, problem, estimated_tiles(rows, active, problem.n, spec.tile), sm_count);
    spec.validate();
    return spec;
  }
  if (problem.ab_type == DType::e4m3 && hopper_capable(arch)) {
    // Elsewhere the portable family widens FP8 to BF16 (promotion per 128 K), bf16 tile rules below.
    // Gathered rows come by cp.async (the Hopper FP8 kernel has no TMA gather); a split GLU takes
    // 128x256 where the rule says 128x192, whose 96-row halves straddle B's scale blocks.
    spec.family = KernelFamily::hopper;
    spec.fusion.gather_by = GatherLoad::cp_async;
    spec = with_tile(spec, mean_rows < kFp8WideTileMinRows                         ? kFp8Small
                           : split_glu || fp8_full_tile_pays(problem.n, rows, active, sm_count) ? kFp8Full
                                                                                   : kFp8Wide);
    spec.scheduler = scheduler_for(active, rows, problem.n, spec.tile, sm_count);
    if (mean_rows >= kFp8StaticMinRows && problem.k <= kFp8StaticMaxK) spec.scheduler = Scheduler::static_persistent;
    if (fp8_large_groups(problem.k, rows, active) && spec.tile == kFp8Full.tile) spec.scheduler = Scheduler::static_persistent;
    const bool pairable = !spec.fusion.any() && spec.c != DType::e4m3 && spec.b_scales == ScaleB::blocks;
    // Fused or E4M3-writing launches pair under the first rule from kFp8StaticMinRows rows per expert
    // (v38: the FP8 DeepSeek-V3 layer's GEMM1 at 16384 tokens, c=e4m3 with a split SwiGLU, 0.95x the
    // time on 2x1 static, docs/results/2026-11-27-v38-fp8-pairs-fused.txt; fewer rows not timed).
    // Gathered ones pair under their own rule (below, kFp8GatherPairMinRows).
    const bool pairable_fused = spec.b_scales == ScaleB::blocks && !spec.fusion.gather_a && mean_rows >= kFp8StaticMinRows;
    const bool short_odd = short_odd_tiles(problem.group_rows, problem.n, active, kFp8Full.tile);
    if (spec.tile == kFp8Full.tile && spec.scheduler == Scheduler::dynamic && problem.k >= kFp8PairMinK &&
        (pairable || pairable_fused)) {
      spec.cluster_m = 2;
      // Where many groups end in a short odd M tile the static pairs lost to single CTAs (v48). Unfused
      // and below kFp8DynamicPairMaxRows, pairs on the dynamic scheduler in the interleaved order instead.
      if (!short_odd) spec.scheduler = Scheduler::static_persistent;
      else if (pairable && mean_rows < kFp8DynamicPairMaxRows && !mixed_order_pays(problem.n, problem.k, problem.group_rows, true))
        spec.pair_order = PairOrder::interleaved;  // (not under skew: there single CTAs in the mixed order, as before)
      else spec.cluster_m = 1;
    }
    if (spec.tile == kFp8Wide.tile && spec.scheduler == Scheduler::static_persistent && pairable) spec.cluster_m = 2;
    // Rounds of a launch's units (tiles, or pair units) in 128x256-round equivalents (a 128x192
    // round: 0.75), from the host's group sizes: the FP8 pair rules' cost model.
    auto rounds_cost = [&](const KernelSpec& s) {
      return double(unit_rounds(s, problem.group_rows, problem.n, sm_count, false)) * s.tile.n / kFp8Full.tile.n;
    };
    // Whether the single CTAs of `spec` would run their last round in pieces of K (with_split_tail).
    // `spec` on static 2x1 pairs of tile t.
    auto static_pairs = [&](const TileChoice& t) {
      KernelSpec s = with_tile(spec, t);
      s.scheduler = Scheduler::static_persistent;
      s.cluster_m = 2;
      return s;
    };
    auto singles_split = [&] {
      return with_split_tail(spec, problem, estimated_tiles(rows, active, problem.n, spec.tile), sm_count).split !=
             SplitK::none;
    };
    if (spec.tile == kFp8Wide.tile && spec.cluster_m == 1 && pairable && problem.k >= kFp8PairMinK &&
        mean_rows >= kFp8ShortPairMinRows && mean_rows < 256 && fp8_full_tile_pads_little(problem.n) &&
        !problem.group_rows.empty()) {
      const KernelSpec pair = static_pairs(kFp8Full), wide_pair = static_pairs(kFp8Wide);
      if (singles_split()) {
        long long odd = 0;
        for (int r : problem.group_rows)
          if (r > 0) odd += m_tiles_of(r, kFp8Full.tile.m, false) % 2;
        if (odd * kEvenPairShareInverse <= active) spec = pair;
      } else if (rounds_cost(pair) <= kFp8FusedPairMaxRatio * rounds_cost(spec)) {
        spec = pair;
      } else if (rounds_cost(wide_pair) <= rounds_cost(spec)) {
        spec = wide_pair;
      }
    }
    // Unfused from kFp8PairTileMinRows (v50) by the same model, where the single CTAs' last round would
    // not run in pieces of K (split=tail saves part of a round, which the model does not count). In
    // turns on the H100 (Mixtral-8x7B down, rotated, 2 x 3 processes of fresh routings; docs/results/
    // 2026-11-28-v50-fp8-unfused-pairs-*.csv): 0.885-0.955x the time of the single 128x192 on the 23
    // launches at 266-354 rows where the pairs keep 128x256; where the singles split (256-263 rows) the
    // pairs took 1.00-1.09x.
    const bool mid_pairable = pairable && mean_rows >= kFp8PairTileMinRows && !singles_split();
    const bool pairs_by_rounds = (spec.fusion.linear_scatter() || mid_pairable) && spec.c != DType::e4m3 &&
                                spec.b_scales == ScaleB::blocks && problem.k >= kFp8PairMinK &&
                                mean_rows >= kFp8ShortPairMinRows && mean_rows < kFp8StaticMinRows &&
                                !problem.group_rows.empty() && !short_odd;
    if (spec.cluster_m == 1 && pairs_by_rounds && (spec.tile == kFp8Wide.tile || spec.tile == kFp8Full.tile)) {
      const KernelSpec pair = static_pairs(kFp8Full);
      // Unfused, only where the pairs keep 128x256 (below: 128x192 pairs read 0.96-1.04x the singles'
      // time at 357-398 rows, v50).
      const bool keeps_full = spec.fusion.linear_scatter() ||
                              rounds_cost(with_tile(pair, kFp8Wide)) > kFp8PairTileMaxRatio * rounds_cost(pair);
      if (rounds_cost(pair) <= kFp8FusedPairMaxRatio * rounds_cost(spec) && keeps_full) spec = pair;
    }
    if (spec.tile == kFp8Full.tile && spec.cluster_m == 2 && (pairable || pairs_by_rounds) && mean_rows >= kFp8PairTileMinRows &&
        !problem.group_rows.empty()) {
      const KernelSpec wide = with_tile(spec, kFp8Wide);  // still 2x1, static
      if (rounds_cost(wide) <= kFp8PairTileMaxRatio * rounds_cost(spec)) spec = wide;
    }
    // Few large groups: 64x256 static where its rounds cost less (kFp8SmallByRoundsMaxRatio above).
    if (few_groups_rule(spec.a, spec.b, spec.c, problem.k, spec.fusion, spec.b_scales) == FewGroupsRule::fp8 &&
        !problem.group_rows_estimated && mean_rows >= kFp8SmallByRoundsMinRows && active <= kFp8SmallByRoundsMaxGroups) {
      const KernelSpec small = few_groups_twin(spec, kFp8Small);
      if (tile_rounds_cost(small, problem, sm_count, kFp8SmallTileCost) <=
          kFp8SmallByRoundsMaxRatio * tile_rounds_cost(spec, problem, sm_count, kFp8SmallTileCost))
        spec = small;
    }
    // 128x192 pairs where their rounds cost no more than the single CTAs' (kFp8WidePairMinK above).
    if (pairable && spec.cluster_m == 1 && (spec.tile == kFp8Full.tile || spec.tile == kFp8Wide.tile) &&
        problem.k >= kFp8WidePairMinK && !problem.group_rows_estimated && !singles_split() &&
        !short_odd_tiles(problem.group_rows, problem.n, active, kFp8Wide.tile) &&
        (spec.scheduler == Scheduler::static_persistent || mean_rows >= kFp8StaticMinRows || problem.k <= kFp8StaticMaxK)) {
      const KernelSpec pair = static_pairs(kFp8Wide);
      if (rounds_cost(pair) <= kFp8WidePairMaxRatio * rounds_cost(spec)) spec = pair;
    }
    // Gathered A: the gathering producer warpgroup needs 56 registers beside the dynamic scheduler's
    // ring (v30), and the 128x192 / 128x256 consumers spill at the 216 that leaves (40 and 232 with
    // the static one: no spill; tests/test_compile.cpp). So those tiles gather on the static scheduler;
    // below 256 rows per expert, where partial tiles make the static one drift (above), 64x256 on
    // the dynamic one instead (its consumers fit 232): 0.94 / 0.88x the time of static 128x256 on
    // gpt-oss / DeepSeek-V3 up at 4096 tokens (128 rows), 0.94x on Qwen3 up 1024 (64 rows); at 256
    // rows a tie (Qwen3 up 4096) or 1.1-1.2x (Mixtral up 1024, N = 28672: B read twice as often).
    // H100, docs/perf.md v27. From 128 rows and K >= 2048 the pairs below take over (v39).
    if (spec.fusion.gather_a) {
      if (mean_rows < kFp8GatherDynamicMaxRows) {
        spec = with_tile(spec, kFp8Small);
        spec.scheduler = Scheduler::dynamic;
      } else {
        spec.scheduler = Scheduler::static_persistent;
      }
    }
    // C quantized to E4M3 (1x128 blocks): 128x256 where the rule's tile cannot (128x192; 128x128
    // with a GLU), gathered on the static scheduler (above).
    if (spec.c == DType::e4m3 && !fp8_c_quantizable(spec)) {
      spec = with_tile(spec, kFp8Full);
      if (spec.fusion.gather_a) spec.scheduler = Scheduler::static_persistent;
    }
    if (spec.fusion.gather_a && spec.b_scales == ScaleB::blocks && mean_rows >= kFp8GatherPairMinRows &&
        problem.k >= kFp8GatherPairMinK) {
      if (spec.tile != kFp8Wide.tile) spec = with_tile(spec, kFp8Full);
      spec.scheduler = Scheduler::static_persistent;
      spec.cluster_m = 2;
    }
    spec = with_split_tail(spec, problem, estimated_tiles(rows, active, problem.n, spec.tile), sm_count);
    // The mixed order under skew, 128-row tiles (kMixMaxHeavyTileShareFp8 above).
    if (spec.tile.m == 128 && spec.split == SplitK::none &&
        mixed_order_pays(problem.n, problem.k, problem.group_rows, !spec.fusion.any()))
      spec.mix = kMixHeavyRows;
    spec.validate();
    return spec;
  }
  if (hopper_capable(arch) && !spec.is_weight_only_4bit() && spec.a != DType::e4m3) {
    spec.family = KernelFamily::hopper;
    spec = with_tile(spec, mean_rows <= kHopperSmallMaxRows && !hot_groups_dominate(problem.group_rows) ? kHopperSmall : kHopperLarge);
    if (spec.tile == kHopperSmall.tile && !spec.fusion.any() && wide_decode_tile_pays(active, problem.n, sm_count))
      spec = with_tile(spec, kHopperSmallWide);
  } else {
    spec.family = KernelFamily::portable;
    spec.fusion.gather_by = GatherLoad::cp_async;  // a Hopper-only choice: the portable family gathers by cp.async
    spec = with_tile(spec, mean_rows <= 64 ? kPortableSmall : kPortableLarge);
    if (arch.sm() == 86 || arch.sm() == 89) spec.stages = 3;  // 99 KB of shared memory per block
  }
  spec.scheduler = scheduler_for(active, rows, problem.n, spec.tile, sm_count);
  const long long tiles = estimated_tiles(rows, active, problem.n, spec.tile);
  // CTA pairs sharing A (TMA multicast) pull 40 instead of 48 KB per k-block from L2: measured on
  // the H100 (docs/perf.md, v4) +7-9% on long compute-bound launches (Mixtral 16384 up/down,
  // DeepSeek-V3 16384 up), but 1-20% slower with short K (Qwen3, K = 768/2048) or short launches
  // (4096 tokens), where the pair's per-tile handshake is not amortized, and in memory-bound
  // launches (DeepSeek-V3 4096: 128 rows per expert). Hence: K >= 2048, >= 256 rows per group
  // and at least 2000 k-blocks of 128x256 tiles per SM. (K >= 4096 until v6: DeepSeek-V3 down
  // 16384, K = 2048, measured 602 vs 590 TFLOP/s with pairs in v6 and 582 vs 576 in v4; Qwen3's
  // K = 2048 launches, where pairs lost 6%, stay under the k-block bound. 5000 until v31: in turns,
  // Mixtral up 4096 (3475 per SM) took 0.954-0.960x the time on pairs in 4 of 5 processes and 1.008x
  // in one (v11: -3.8% in 5 runs), while Mixtral down 4096 (1738) took 1.014x: docs/results/
  // 2026-11-26-v31-bf16-pairs-turns.txt. 3000 until v37: once the pairs' tile start got cheaper
  // (v35), gpt-oss down 16384 (2095 per SM) took 0.928-0.942x the time on pairs in turns in 4 of 4
  // processes, and the layer's fused GEMM2 of the same shape 0.981x: docs/results/
  // 2026-11-27-v37-bf16-pairs-2000.txt.)
  // Where N is not a whole number of 256-wide tiles (gpt-oss: 2880, 5760), the pair shares B
  // instead (cluster=2x1: M tiles 2i, 2i + 1). In turns on the H100 (v37), against sharing A: gpt-oss
  // up / down 16384 0.965-0.967 / 0.983-0.990x the time, N = 5760 at K = 4096 0.967-0.985x, and the
  // layer's fused GEMM2 (N = 2880) 0.938x. Where N is whole, B sharing measured 0.98-1.01x (Mixtral up
  // 1.011x, its layer's GEMM2 1.009x), so those keep A shared. (v6's "2x1 never better" was on whole N
  // and the static scheduler.) docs/results/2026-11-27-v37-bf16-pairs-2x1.txt.
  // Gathered A rows are not multicast, so fuse=gather pairs share B wherever a pair is earned
  // (v38, the layers' fused GEMM1 in turns against single CTAs: Mixtral 16384 0.949x, gpt-oss
  // 16384 0.978x; docs/results/2026-11-27-v38-gather-pairs.txt).
  // Many groups (kShortOddMinGroups): 2x1 in the interleaved pair order (v49), ragged N or whole,
  // where many groups end in a short odd M tile (short_odd_tiles, counted as tail rows would leave
  // them) or, unfused or gathered (a layer's GEMM1), where a group's weights fill most of L2
  // (kInterleavedPairMinGroupBytes).
  // In the plain order a group's odd last M tile's units came after all of its pair units and read
  // its B from DRAM again: 2x1 then lost 1.06-1.25x to single CTAs or 1x2 at 272-344 rows per expert
  // (v48, which gave ragged N single CTAs there). In turns, rotated, two or three processes, fresh
  // routings (docs/results/2026-11-28-v49-pair-order-*.csv), 2x1 interleaved against the old choice:
  // - DeepSeek-V3 up (56 MiB of weights per expert): 264-288 rows 0.85-0.89x (1x2 with tail rows),
  //   320-344 0.96-0.996x, 384 0.97x, 408-456 0.99-1.01x, 512 (the suite's 16384) 0.97-0.99x, 640-704
  //   1.00x; Kimi-K2 up 288-640 0.89-1.00x; Llama 4 Maverick down 288-512 0.90-0.98x; GLM-4.5 up (30 MiB)
  //   512-1280 0.96-1.00x; gpt-oss up (32 MiB, ragged; was single CTAs or plain 2x1) 280 rows 1.00-1.01x,
  //   296-384 0.95-0.99x, 512 (the suite's) 0.98-0.995x.
  // - DeepSeek-V3 down (28 MiB, K = 2048) at 296-344 rows 0.97-0.99x, also as a layer's GEMM2
  //   (scatter + weight) 0.975-0.998x; but at 376-392 rows (no short odd tiles) 1.00-1.03x and the GEMM2
  //   at 512 1.03x: those keep 1x2 (the unfused down 16384 read 0.99x on 2x1 interleaved).
  //   Qwen3-235B up (24 MiB) at 608-672 rows 1.00-1.025x: 1x2. gpt-oss down 16384 (16 MiB) 1.007x: plain.
  // - The gathered GEMM1 (2x1 plain before; swiglu, split GLU; two processes): DeepSeek-V3 up 272-344
  //   rows 0.86-0.995x, 384-512 0.94-0.998x, Kimi-K2 up 288 / 320 0.945-0.985 / 0.857x, gpt-oss up
  //   (swiglu_oai + bias) 320 rows 0.92x, 512 1.000-1.008x, GLM-4.5 up 512 0.995-0.998x; Qwen3-235B up
  //   (24 MiB, 640 rows) 0.995x stays plain.
  //   Under Nsight Compute, DeepSeek-V3 up 10240 read 28.3 GB from DRAM in the plain order, 17.4
  //   interleaved, 17.6 on 1x2 (docs/perf.md v49).
  if (spec.family == KernelFamily::hopper && spec.tile.m == 128 && problem.k >= 2048 && mean_rows >= 256) {
    long long k_blocks = (problem.k + spec.tile.k - 1) / spec.tile.k;
    if (tiles * k_blocks >= 2000LL * std::max(sm_count, 1)) {
      const bool interleaved_pairs =
          spec.scheduler == Scheduler::dynamic && active >= kShortOddMinGroups && !problem.group_rows.empty() &&
          !mixed_order_pays(problem.n, problem.k, problem.group_rows) &&  // skew: the mixed order as before (plain)
          (short_odd_tiles(problem.group_rows, problem.n, active, spec.tile,
                           absorbed_tails_pay(spec, problem, active, mean_rows, sm_count)) ||
           ((!problem.fusion.any() || problem.fusion.gather_a) && 2LL * problem.n * problem.k >= kInterleavedPairMinGroupBytes));
      if (interleaved_pairs) spec.cluster_m = 2, spec.pair_order = PairOrder::interleaved;
      else if (problem.fusion.gather_a || problem.n % spec.tile.n != 0) spec.cluster_m = 2;
      else spec.cluster_n = kHopperLargePair.cluster_n;
    }
  }
  spec = with_split_tail(spec, problem, tiles, sm_count);
  // Where absorbed tail rows put every tile of the launch in one round, they come first: before the
  // split of the plain tiles' last round (see kTailRoundRuleMaxRounds) and before CTA pairs (see
  // kPairVeryLongKMinRows); single CTAs, as measured.
  bool tails_in_one_round = false;
  {
    KernelSpec whole = spec;
    whole.split = SplitK::none;
    if (absorbed_tails_pay(whole, problem, active, mean_rows, sm_count) &&
        unit_rounds(whole, problem.group_rows, problem.n, sm_count, true) == 1)
      spec = whole, tails_in_one_round = true;
  }
  // Below 256 rows per group, long K or large experts: pairs sharing B on the dynamic scheduler
  // (v39, v45), unless the single CTAs' last round splits along K (split=tail: Mixtral down at 512
  // tokens 0.91x of 2x1) or tail rows fit the launch in one round; from 136 rows where K is very
  // long (kPairVeryLongKMinRows).
  const bool large_experts = problem.k >= kPairLongKMinK || (long long)problem.n * problem.k >= kPairMinWeightsPerGroup;
  // A layer's GEMM2 (linear_scatter) takes them too, but after tail rows wherever those pay (kPairVeryLongKMinRows).
  const bool very_long_k_pairs =
      problem.k >= kPairVeryLongKMinK && mean_rows >= kPairVeryLongKMinRows && mean_rows < kPairLongKMinRows &&
      (!spec.fusion.any() ||
       (spec.fusion.linear_scatter() && !absorbed_tails_pay(spec, problem, active, mean_rows, sm_count)));
  bool pairs_without_tails = false;
  if (spec.family == KernelFamily::hopper && spec.tile.m == 128 && spec.scheduler == Scheduler::dynamic &&
      spec.split != SplitK::tail && !tails_in_one_round && large_experts &&
      (mean_rows >= kPairLongKMinRows || very_long_k_pairs) && mean_rows < 256) {
    spec.cluster_m = 2;
    pairs_without_tails = very_long_k_pairs;
  }
  if (spec.split == SplitK::none && !pairs_without_tails && absorbed_tails_pay(spec, problem, active, mean_rows, sm_count)) {
    spec.tail = kTailRows;
    if (spec.cluster_n == 2) {
      long long odd = 0;
      for (int r : problem.group_rows)
        if (r > 0) odd += m_tiles_of(r, spec.tile.m, true) % 2;
      if (odd * kEvenPairShareInverse <= active) spec.cluster_n = 1, spec.cluster_m = 2;
    }
  }
  // Few large groups with long K: 64x256 on the static scheduler where its rounds cost less
  // (kBf16SmallByRoundsMaxRatio).
  if (spec.family == KernelFamily::hopper && spec.tile == kHopperLarge.tile && spec.tail == 0 &&
      few_groups_rule(spec.a, spec.b, spec.c, problem.k, spec.fusion, spec.b_scales) == FewGroupsRule::sixteen_bit &&
      !problem.group_rows_estimated && active <= kBf16SmallByRoundsMaxGroups && mean_rows >= kBf16SmallByRoundsMinRows) {
    const KernelSpec small = few_groups_twin(spec, kHopperSmallWide);
    const double bound = spec.split == SplitK::tail ? kBf16SmallByRoundsMaxRatioSplit : kBf16SmallByRoundsMaxRatio;
    if (tile_rounds_cost(small, problem, sm_count, 1.0) <= bound * tile_rounds_cost(spec, problem, sm_count, 1.0))
      spec = small;
  }
  // The mixed order under skew (kMixHeavyRows above): from the host's counts or the caller's expected
  // ones (a typical routing never has two classes).
  if (spec.family == KernelFamily::hopper && spec.tile == kHopperLarge.tile && spec.stages == kHopperLarge.stages &&
      spec.split == SplitK::none && !spec.fusion.atomic && !(spec.cluster_m == 2 && spec.tail != 0)) {
    if (mixed_order_pays(problem.n, problem.k, problem.group_rows)) spec.mix = kMixHeavyRows;
  }
  spec.validate();
  return spec;
}

std::vector<KernelSpec> family_candidates(const Arch& arch, KernelFamily family) {
  std::vector<TileChoice> tiles;
  if (family == KernelFamily::hopper) {
    if (!hopper_capable(arch)) return {};
    tiles = {kHopperSmall, kHopperSmallWide, kHopperLarge, kHopperLargePair, kHopperLargeSplit};
  } else {
    tiles = {kPortableSmall, kPortableLarge};
  }
  std::vector<KernelSpec> out;
  for (const TileChoice& t : tiles)
    for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked})
      for (DType ab : {DType::bf16, DType::f16})
        for (DType c : {DType::bf16, DType::f16, DType::f32})
          for (Scheduler sched : {Scheduler::static_persistent, Scheduler::dynamic}) {
            KernelSpec s;
            s.family = family;
            s.arch = arch;
            s.layout = layout;
            s.a = s.b = ab;
            s.c = c;
            s.scheduler = sched;
            s = with_tile(s, t);
            if (family == KernelFamily::portable && (arch.sm() == 86 || arch.sm() == 89)) s.stages = 3;
            s.validate();
            out.push_back(s);
          }
  // Absorbed tail rows: the 128x256 single-CTA and 1x2 configs, bf16 with each C type and f16 -> f16.
  if (family == KernelFamily::hopper) {
    std::vector<KernelSpec> tails;
    for (KernelSpec s : out)
      if (s.tile == kHopperLarge.tile && s.stages == kHopperLarge.stages && s.split == SplitK::none && s.cluster_m == 1 &&
          (s.a == DType::bf16 || s.c == DType::f16)) {
        s.tail = kTailRows;
        s.validate();
        tails.push_back(s);
      }
    out.insert(out.end(), tails.begin(), tails.end());
  }
  return out;
}

std::vector<KernelSpec> heuristic_candidates(const Arch& arch) {
  return family_candidates(arch, hopper_capable(arch) ? KernelFamily::hopper : KernelFamily::portable);
}

std::vector<KernelSpec> w4_candidates(const Arch& arch, KernelFamily family) {
  std::vector<KernelSpec> out;
  if (family == KernelFamily::hopper) {
    if (!hopper_capable(arch)) return {};
    for (const TileChoice& t : {kW4Tiny, kW4Mid, kW4Small, kW4Large, kW4Prefill})
      for (DType b : {DType::mxfp4, DType::nvfp4})
        for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked})
          for (DType c : {DType::bf16, DType::f16})
            for (Scheduler sched : {Scheduler::static_persistent, Scheduler::dynamic}) {
              // The scheduler is independent of C's type (only the final conversion differs):
              // dynamic with bf16 C only, to keep the GPU tests' time.
              if (sched == Scheduler::dynamic && c != DType::bf16) continue;
              KernelSpec s;
              s.family = KernelFamily::hopper;
              s.arch = arch;
              s.layout = layout;
              s.a = DType::bf16;
              s.b = b;
              s.c = c;
              s.scheduler = sched;
              s = with_tile(s, t);
              s.validate();
              out.push_back(s);
              // The 16- and 48-token tiles at the one-full-round stage count too (bf16 C, static).
              if ((t.tile == kW4Tiny.tile || t.tile == kW4Mid.tile) && c == DType::bf16 && sched == Scheduler::static_persistent) {
                s.stages = kW4OneRoundStages;
                s.validate();
                out.push_back(s);
              }
              // The 16-token tile with split=tail (bf16 C, static, both stage counts; v45).
              if (t.tile == kW4Tiny.tile && c == DType::bf16 && sched == Scheduler::static_persistent) {
                for (int stages : {t.stages, kW4OneRoundStages}) {
                  s.stages = stages;
                  s.split = SplitK::tail;
                  s.validate();
                  out.push_back(s);
                }
                s.split = SplitK::none;
              }
            }
    return out;
  }
  // Portable: the 16-bit family's configs with 4-bit B (its tiles, layouts, C types, schedulers).
  for (KernelSpec s : family_candidates(arch, KernelFamily::portable)) {
    if (s.a != DType::bf16) continue;
    for (DType b : {DType::mxfp4, DType::nvfp4}) {
      s.b = b;
      s.validate();
      out.push_back(s);
    }
  }
  return out;
}

std::vector<KernelSpec> fp8_candidates(const Arch& arch, KernelFamily family) {
  std::vector<KernelSpec> out;
  if (family == KernelFamily::portable) {
    for (KernelSpec s : family_candidates(arch, KernelFamily::portable)) {
      if (s.a != DType::bf16) continue;
      s.a = s.b = DType::e4m3;
      s.validate();
      out.push_back(s);
    }
    return out;
  }
  if (!hopper_capable(arch)) return {};
  auto add = [&](const TileChoice& t, GroupLayout layout, DType c, Scheduler sched, int cluster_m) {
    KernelSpec s;
    s.family = KernelFamily::hopper;
    s.arch = arch;
    s.layout = layout;
    s.a = s.b = DType::e4m3;
    s.c = c;
    s.scheduler = sched;
    s = with_tile(s, t);
    s.cluster_m = cluster_m;
    s.validate();
    out.push_back(s);
  };
  for (const TileChoice& t : {kFp8Small, kFp8SmallDeep, kFp8Large, kFp8Wide, kFp8WideSplit, kFp8WideDeep, kFp8Full})
    for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked})
      for (DType c : {DType::bf16, DType::f16, DType::f32})
        for (Scheduler sched : {Scheduler::static_persistent, Scheduler::dynamic})
          if (sched != Scheduler::dynamic || c != DType::f16) add(t, layout, c, sched, 1);  // dynamic f16: as bf16 but for the conversion
  // CTA pairs sharing B (cluster=2x1, v30): the static scheduler, unfused; and (v49) the dynamic one
  // in the interleaved pair order (the plain order too on 128x256, for the tuner).
  for (const TileChoice& t : {kFp8Large, kFp8Wide, kFp8Full})
    for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked})
      for (DType c : {DType::bf16, DType::f32}) add(t, layout, c, Scheduler::static_persistent, 2);
  for (const TileChoice& t : {kFp8Wide, kFp8Full})
    for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {
      add(t, layout, DType::bf16, Scheduler::dynamic, 2);
      out.back().pair_order = PairOrder::interleaved;
      out.back().validate();
      if (t.tile == kFp8Full.tile && layout == GroupLayout::contiguous) add(t, layout, DType::bf16, Scheduler::dynamic, 2);
    }
  return out;
}

// The 4-bit decode tiles (<= 64 tokens: a group's rows mostly in one tile, so each weight byte is
// read once) stream their weights with an L2 evict_first hint where the weights the launch can
// read are small: the weights then evict each other rather than the lines already in L2, whose
// dirty ones (the previous kernel's outputs; the peers' L2 clear leaves ~22 MB) would be written
// back during the launch. The launch reads at most min(num_groups, rows) experts' packed weights
// (an empty group reads none). Measured on the H100 in turns of processes (docs/perf.md v34): Qwen3
// (<= 96 / 192 MiB) 0.87-0.98x the time, Mixtral down (224 MiB) 0.98-1.00x, gpt-oss down at 16
// tokens (64 of 128 experts at most: 253 MiB) 0.97-0.98x (v17); with more to read, DeepSeek-V3
// decode (>= 896 MiB) took 1.01-1.04x and gpt-oss / Mixtral up (>= 448 MiB) 0.98-1.02x.
bool weights_evict_first(const KernelSpec& spec, long long num_groups, long long n, long long k, long long rows) {
  constexpr double kMaxWeightBytes = 256.0 * 1024 * 1024;
  // In double: three int-sized factors can overflow 64 bits.
  const double experts = (double)std::min(num_groups, std::max(rows, 0LL));
  return spec.family == KernelFamily::hopper && spec.is_weight_only_4bit() && spec.tile.m <= 64 &&
         experts * (double)n * (double)k / 2 <= kMaxWeightBytes;
}

}  // namespace moejit
