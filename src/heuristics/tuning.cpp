#include "heuristics/tuning.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <charconv>

namespace moejit {
namespace {

int ceil_log2(long long v) { return v <= 1 ? 0 : 64 - std::countl_zero(static_cast<std::uint64_t>(v - 1)); }

struct TileConfig {
  TileShape tile;
  int stages, warps_m, warps_n;
  int cluster_n = 1;  // CTAs along N sharing A (TMA multicast); skipped where the spec rejects it
  int cluster_m = 1;  // CTAs along M sharing B (TMA multicast); only from kPairMMinRowsPerGroup rows per group
};
// Hopper: the tiles of the v2 sweep, each with the most stages that fit (228 KB per SM).
constexpr TileConfig kHopperTiles[] = {
    {{64, 256, 64}, 5, 1, 1}, {{128, 256, 64}, 4, 1, 1}, {{128, 192, 64}, 5, 1, 1},
    {{128, 128, 64}, 6, 1, 1}, {{64, 128, 64}, 6, 1, 1}, {{128, 256, 64}, 4, 1, 1, 2},
    // CTA pairs along M sharing B (cluster=2x1): the heuristic does not pick it, so the tuner is
    // where it gets timed. Since v32 (a group's odd last M tile split along N, no idle rank) it beat
    // the heuristic in turns on gpt-oss up 16384 (static, 0.95x) and DeepSeek-V3 up 4096 (dynamic,
    // 0.96-0.97x); elsewhere 0.98-1.15x (docs/results/2026-11-26-v32-bf16-pairs-turns.txt).
    {{128, 256, 64}, 4, 1, 1, 1, 2},
};
// 2x1 pairs share B between M tiles 2i, 2i+1 of one group: below one full 128-row tile per group
// no unit would share it (every group's single tile is split along N instead).
constexpr double kPairMMinRowsPerGroup = 128;
// FP8 block-scaled: the four tiles its kernel implements (K = one 128-wide scale block).
// Plus CTA pairs on 128x256 and 128x192 (cluster=2x1, the static scheduler: the spec rejects them
// dynamic), which the heuristic picks from K = 6144, for static 128x192 (config.cpp; 128x192 since
// v33, when its A scales came by TMA and the pair took 0.92x the cycles) and for gathered A from
// 128 rows per expert (v39).
constexpr TileConfig kFp8Tiles[] = {{{64, 256, 128}, 4, 1, 1}, {{64, 256, 128}, 5, 1, 1}, {{128, 128, 128}, 6, 1, 1}, {{128, 192, 128}, 4, 1, 1},
                                    {{128, 192, 128}, 5, 1, 1}, {{128, 256, 128}, 4, 1, 1}, {{128, 256, 128}, 4, 1, 1, 1, 2},
                                    {{128, 192, 128}, 4, 1, 1, 1, 2}};
// 4-bit weight-only: tokens per tile.
// The 16- and 48-token tiles also at 6 stages (the heuristic's choice for one full round, config.cpp).
constexpr TileConfig kW4Tiles[] = {{{16, 128, 64}, 8, 1, 1}, {{16, 128, 64}, 6, 1, 1}, {{32, 128, 64}, 8, 1, 1},
                                   {{48, 128, 64}, 8, 1, 1}, {{48, 128, 64}, 6, 1, 1},
                                   {{64, 128, 64}, 8, 1, 1},
                                   {{128, 128, 64}, 8, 1, 1}, {{256, 128, 64}, 4, 1, 1},
                                   {{64, 256, 64}, 8, 1, 1}};
constexpr TileConfig kPortableTiles[] = {
    {{64, 128, 32}, 4, 2, 4}, {{128, 128, 32}, 4, 2, 4}, {{128, 64, 32}, 4, 4, 2}, {{64, 64, 32}, 4, 2, 2},
};

}  // namespace

std::string ShapeBucket::to_text() const {
  std::string out = fmt::format("layout={},ab={},c={},groups={},n={},k={},rows<={},active<={}{}{}{}{}{}", moejit::to_text(layout),
                                moejit::to_text(ab_type), moejit::to_text(c_type), num_groups, n, k, 1ll << rows_log2,
                                1ll << active_log2, hot ? ",hot" : "", mixed ? ",mixed" : "", few ? ",few" : "",
                                b_type == ab_type ? "" : ",b=", b_type == ab_type ? "" : moejit::to_text(b_type));
  if (b_scales != ScaleB::blocks) out += fmt::format(",b_scales={}", moejit::to_text(b_scales));
  if (fusion.any()) {
    out += ',';
    out += moejit::to_text(fusion);
  }
  return out;
}

std::optional<ShapeBucket> ShapeBucket::parse(std::string_view text) {
  // The exact form to_text() writes; anything else (an older format, a hand edit) is not a bucket.
  ShapeBucket b;
  auto take = [&](std::string_view prefix) -> std::optional<std::string_view> {
    if (!text.starts_with(prefix)) return std::nullopt;
    text.remove_prefix(prefix.size());
    auto comma = text.find(',');
    std::string_view value = text.substr(0, comma);
    text.remove_prefix(comma == std::string_view::npos ? text.size() : comma + 1);
    return value;
  };
  auto number = [](std::optional<std::string_view> v, long long& out) {
    if (!v || v->empty()) return false;
    auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
    return ec == std::errc() && end == v->data() + v->size();
  };
  auto dtype = [](std::optional<std::string_view> v, DType& out) {
    for (DType d : {DType::bf16, DType::f16, DType::f32, DType::e4m3})
      if (v && *v == moejit::to_text(d)) return out = d, true;
    return false;
  };
  auto layout = take("layout=");
  if (layout == moejit::to_text(GroupLayout::contiguous)) b.layout = GroupLayout::contiguous;
  else if (layout == moejit::to_text(GroupLayout::masked)) b.layout = GroupLayout::masked;
  else return std::nullopt;
  long long groups, n, k, rows, active;
  if (!dtype(take("ab="), b.ab_type) || !dtype(take("c="), b.c_type)) return std::nullopt;
  if (!number(take("groups="), groups) || !number(take("n="), n) || !number(take("k="), k) ||
      !number(take("rows<="), rows) || !number(take("active<="), active))
    return std::nullopt;
  if (text == "hot" || text.starts_with("hot,")) {
    take("hot");
    b.hot = true;
  }
  if (text == "mixed" || text.starts_with("mixed,")) {
    take("mixed");
    b.mixed = true;
  }
  if (text == "few" || text.starts_with("few,")) {
    take("few");
    b.few = true;
  }
  b.b_type = b.ab_type;
  if (text.starts_with("b=")) {
    auto b_text = take("b=");
    if (b_text == moejit::to_text(DType::mxfp4)) b.b_type = DType::mxfp4;
    else if (b_text == moejit::to_text(DType::nvfp4)) b.b_type = DType::nvfp4;
    else return std::nullopt;
    if (b.ab_type != DType::bf16) return std::nullopt;
  }
  if (text.starts_with("b_scales=")) {
    if (take("b_scales=") != moejit::to_text(ScaleB::channels) || b.ab_type != DType::e4m3) return std::nullopt;
    b.b_scales = ScaleB::channels;
  }
  if (!text.empty()) {
    // Fused buckets: the fusion fields of a spec's text, exactly as to_text() writes them.
    if (!text.starts_with("fuse=")) return std::nullopt;
    try {
      b.fusion = KernelSpec::parse(text).fusion;
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (!b.fusion.any() || moejit::to_text(b.fusion) != text) return std::nullopt;
  }
  if (groups < 1 || groups > INT32_MAX || n < 1 || n > INT32_MAX || k < 1 || k > INT32_MAX) return std::nullopt;
  if (rows < 1 || !std::has_single_bit(static_cast<std::uint64_t>(rows)) || active < 1 ||
      !std::has_single_bit(static_cast<std::uint64_t>(active)))
    return std::nullopt;
  b.num_groups = (int)groups, b.n = (int)n, b.k = (int)k;
  b.rows_log2 = ceil_log2(rows), b.active_log2 = ceil_log2(active);
  return b;
}

ShapeBucket ShapeBucket::of(GroupLayout layout, DType ab, DType c, int num_groups, int n, int k, long long rows,
                            long long active, std::optional<DType> b_type, bool hot, bool mixed, bool few) {
  ShapeBucket b;
  b.hot = hot;
  b.mixed = mixed;
  b.few = few;
  b.layout = layout;
  b.ab_type = ab;
  b.b_type = b_type.value_or(ab);
  b.c_type = c;
  b.num_groups = num_groups;
  b.n = n;
  b.k = k;
  long long per_group = active > 0 ? (rows + active - 1) / active : 0;
  b.rows_log2 = ceil_log2(per_group);
  b.active_log2 = ceil_log2(active);
  return b;
}

std::size_t ShapeBucketHash::operator()(const ShapeBucket& b) const noexcept {
  std::uint64_t x = (std::uint64_t)(unsigned)b.n | (std::uint64_t)(unsigned)b.k << 32;
  std::uint64_t y = (std::uint64_t)(unsigned)b.num_groups | (std::uint64_t)b.layout << 32 | (std::uint64_t)b.ab_type << 34 |
                    (std::uint64_t)b.c_type << 36 | (std::uint64_t)b.rows_log2 << 40 | (std::uint64_t)b.active_log2 << 48 |
                    (std::uint64_t)b.b_type << 53;
  const Fusion& f = b.fusion;
  y ^= (std::uint64_t)(f.gather_a | f.scatter_c << 1 | f.routing_weight << 2 | f.bias << 3 | f.atomic << 4 |
                       (int)f.glu << 5 | (int)f.activation << 6) << 56;  // gather_by: equality tells buckets apart
  y ^= (std::uint64_t)b.b_scales << 39 | (std::uint64_t)b.hot << 38 | (std::uint64_t)b.mixed << 37 | (std::uint64_t)b.few << 63;
  x ^= y * 0x9e3779b97f4a7c15ull;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  return static_cast<std::size_t>(x ^ (x >> 29));
}

std::vector<KernelSpec> tuning_candidates(const GemmProblem& problem, const Arch& arch, int sm_count) {
  KernelSpec chosen = choose_spec(problem, arch, sm_count);
  std::vector<KernelSpec> out = {chosen};
  long long active = 0, rows = 0;
  const std::vector<int> typical =
      problem.group_rows.empty() ? typical_group_rows(problem.num_groups, problem.total_rows) : std::vector<int>();
  for (int r : problem.group_rows.empty() ? std::span<const int>(typical) : problem.group_rows)
    if (r > 0) ++active, rows += r;
  const double mean_rows = active ? double(rows) / double(active) : 0.0;
  // The interleaved pair order differs from the plain one only on groups of an odd count of at
  // least 3 M tiles (128 rows, with or without absorbed tail rows): timed only where there are some.
  bool odd_pair_groups = false;
  for (int r : problem.group_rows.empty() ? std::span<const int>(typical) : problem.group_rows)
    for (bool absorb : {false, true}) {
      const long long m_tiles = m_tiles_of(r, 128, absorb);
      odd_pair_groups |= m_tiles >= 3 && m_tiles % 2 == 1;
    }
  // split=tail (the 16-bit Hopper kernel, unfused, single CTAs) where pieces keep 16+ K blocks.
  // A launch without host counts runs whole tiles.
  const bool try_split = problem.k >= 2048 && !problem.group_rows.empty() && !problem.group_rows_estimated;
  // Fused 4-bit Hopper kernels: the static scheduler only. Their dynamic variants compile with
  // serialized wgmmas (ptxas C7511 on the 128-token scatter tile, C7512 on the 48/64-token ones,
  // C7518 on 64x256) or a spill (48 tokens with scatter), and unfused the dynamic scheduler already
  // ran slower on 4-bit weights (docs/perf.md v10, v21).
  // Gathered FP8 Hopper kernels: the gathering producer warpgroup needs 56 registers with the
  // dynamic scheduler's ring (its rows and, since v30, the stages' scales), which leaves the
  // consumers 216: enough for 64 x 128 slices (64x256 s4, 128x128), not for the 128x192 and
  // 128x256 ones (static only). Two variants left out when they spilled 4 bytes before v30 compile
  // clean since (64x256 s5 dynamic with a split GLU, 128x192 s5 static); they stay out until
  // measured (tests/test_compile.cpp compiles the rest).
  const bool fp8_gathered = chosen.a == DType::e4m3 && chosen.family == KernelFamily::hopper && chosen.fusion.gather_a;
  const bool static_only = chosen.is_weight_only_4bit() && chosen.family == KernelFamily::hopper && chosen.fusion.any();
  auto add = [&](const TileConfig& t) {
    if (t.cluster_m != 1 && mean_rows < kPairMMinRowsPerGroup) return;
    if (fp8_gathered && t.tile.n == 192 && t.stages == 5) return;
    // The 4-bit decode tiles at 6 stages: unfused only, as the heuristic takes them (not measured fused).
    if (static_only && t.stages == 6) return;
    for (Scheduler sched : {Scheduler::static_persistent, Scheduler::dynamic})
      for (SplitK split : {SplitK::none, SplitK::tail}) {
        if (split == SplitK::tail && !try_split) continue;
        if (sched == Scheduler::dynamic && static_only) continue;
        if (sched == Scheduler::dynamic && fp8_gathered && !(t.tile.n == 128 || (t.tile.m == 64 && t.stages == 4))) continue;
        KernelSpec s = chosen;
        s.split = split;
        s.tile = t.tile;
        s.stages = t.stages;
        s.warps_m = s.family == KernelFamily::portable ? t.warps_m : KernelSpec{}.warps_m;  // as with_tile
        s.warps_n = s.family == KernelFamily::portable ? t.warps_n : KernelSpec{}.warps_n;
        s.cluster_m = t.cluster_m;
        s.cluster_n = t.cluster_n;
        s.scheduler = sched;
        if (s.family == KernelFamily::portable && (arch.sm() == 86 || arch.sm() == 89)) s.stages = 3;
        // Each config without absorbed tail rows and, where it has them, with (tail=24: 16-bit 128x256);
        // where the heuristic mixes the tile order (skewed routing), each also with and without it;
        // 16-bit 2x1 pairs on the dynamic scheduler in both pair orders where groups have odd M-tile counts.
        for (int mix : {0, chosen.mix})
          for (int tail : {0, kHopperTailRows})
            for (PairOrder order : {PairOrder::plain, PairOrder::interleaved}) {
              if (order == PairOrder::interleaved && !odd_pair_groups) continue;
              s.tail = tail;
              s.mix = mix;
              s.pair_order = order;
              try {
                s.validate();
              } catch (const std::exception&) {
                continue;  // does not fit this arch's shared memory, or split=tail / tail rows / mix / the pair order where they do not apply
              }
              if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
            }
      }
  };
  if (chosen.a == DType::e4m3 && chosen.family == KernelFamily::hopper)
    for (auto& t : kFp8Tiles) add(t);
  else if (chosen.is_weight_only_4bit() && chosen.family == KernelFamily::hopper)
    for (auto& t : kW4Tiles) add(t);
  else if (chosen.family == KernelFamily::hopper)
    for (auto& t : kHopperTiles) add(t);
  else
    for (auto& t : kPortableTiles) add(t);
  // Not gather_by=tma: correct, but 1.4-2.5x slower than cp.async on the H100 (docs/perf.md v7).
  return out;
}

}  // namespace moejit
