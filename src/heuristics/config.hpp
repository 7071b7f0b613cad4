// Config choice, kept apart from kernels and runtime: (problem, device) -> KernelSpec.
#pragma once
#include <optional>
#include <span>
#include <vector>

#include "moejit/spec.hpp"

namespace moejit {

struct GemmProblem {
  GroupLayout layout = GroupLayout::contiguous;
  DType ab_type = DType::bf16;
  DType c_type = DType::bf16;
  int num_groups = 0;
  int n = 0;
  int k = 0;
  long long total_rows = 0;       // contiguous: ΣM; masked: an estimate of valid rows if known, else capacity × groups
                                  // (without group_rows: the rows expected, GroupedGemmArgs::expected_rows)
  // Per-group valid rows when known (may be empty: choose_spec then assumes typical_group_rows of
  // total_rows). A view: the rows must outlive the problem (a temporary vector in a brace
  // initializer dangles by the next statement).
  std::span<const int> group_rows;
  std::optional<DType> b_type;      // B's type where it differs from ab_type (mxfp4 | nvfp4)
  Fusion fusion{};                  // built into the chosen spec (configs that cannot take it are avoided)
  ScaleB b_scales = ScaleB::blocks;  // FP8: B's scale layout (channels: the Hopper FP8 kernel only)
  // group_rows are an estimate (typical_group_rows, or the caller's expected_group_rows), not the
  // launch's: rules that the launch can only apply with the host's counts (split=tail's plan) stay off.
  bool group_rows_estimated = false;
};

// Chooses family, tile, stages and scheduler for the arch. Documented in docs/design.md.
KernelSpec choose_spec(const GemmProblem& problem, const Arch& arch, int sm_count);

// The groups that `rows` rows leave non-empty when each row picks one of `groups` groups at random:
// groups · (1 − (1 − 1/groups)^rows), rounded, within [min(1, rows), min(groups, rows)]. Where the
// host does not see the group sizes, choose_spec and the shape bucket take the mean rows per
// active group from it (at 16 tokens × top-8 over 128 experts: 81 active groups, not 128).
long long expected_active_groups(long long groups, long long rows);
// The group sizes choose_spec assumes where the host does not see them (v44): `rows` spread over
// `groups` as random routing spreads them, i.e. the groups' quantiles (i + 1/2) / groups of
// Binomial(rows, 1/groups), ascending. The rules that read the sizes (tail rows, pairs' parity,
// one-round stages, bands) then see a typical routing instead of none; skew is not guessed.
std::vector<int> typical_group_rows(int groups, long long rows);

// Skewed routing at a small mean: whether at least half of the rows sit in groups of more than 128
// rows while the mean rows per active group is at most 128 (hot experts beside many small ones). The
// bf16 decode tile rule looks at it, and shape buckets keep such launches apart (tuning.hpp).
inline constexpr int kHotGroupRows = 128;
bool hot_groups_dominate(std::span<const int> group_rows);
// The same from the sums: valid rows, active groups, rows in groups of more than kHotGroupRows rows.
bool hot_groups_dominate(long long rows, long long active, long long rows_in_hot_groups);

// The mixed tile order (mix=R) under skew (v44): whether a launch of this N and K whose groups of
// kMixHeavyRows+ rows hold 30-90% of its 128-row M tiles (30-60% for an unfused FP8 launch,
// `unfused_fp8`) takes it; N >= 4096, K <= 3072. choose_spec
// applies it, with the host's counts, to 16-bit 128x256 launches without atomics and to FP8 128-row
// ones; shape buckets keep such launches apart (tuning.hpp).
// Skew, not the spread of an even routing around 256 rows: a heavy group's mean M tiles at least
// kMixMinTileRatio times a light one's.
inline constexpr int kMixHeavyRows = 256;
inline constexpr int kMixMinTileRatio = 3;
struct MixClasses {  // 128-row M tiles and non-empty groups of each class
  long long heavy_tiles = 0, light_tiles = 0, heavy_groups = 0, light_groups = 0;
  void add(int rows) {
    if (rows <= 0) return;
    const long long tiles = (rows + 127LL) / 128;
    if (rows >= kMixHeavyRows) heavy_tiles += tiles, ++heavy_groups;
    else light_tiles += tiles, ++light_groups;
  }
};
bool mixed_order_pays(int n, int k, const MixClasses& classes, bool unfused_fp8 = false);
bool mixed_order_pays(int n, int k, std::span<const int> group_rows, bool unfused_fp8 = false);

// Rows a group's last whole 128-row tile absorbs where the heuristic or the tuner takes tail rows
// (KernelSpec::tail; kernel_templates/moejit/hopper/tail_rows.cuh).
inline constexpr int kHopperTailRows = 24;
// A group's M tiles of tile_m rows, with `absorb` as with absorbed tail rows (its last 1..kHopperTailRows
// rows past a whole tile ride on that tile): GroupTileCursor::m_tiles_of.
long long m_tiles_of(int rows, int tile_m, bool absorb);

// How a split=tail launch cuts its last round (kernel_templates/moejit/common/split_tail.cuh):
// tiles [from, from + tiles) run as `count` pieces of K each; count == 1: no tile is split.
struct SplitTailPlan {
  int from = 0;
  int tiles = 0;
  int count = 1;
  long long units(long long all_tiles) const { return all_tiles + (long long)tiles * (count - 1); }
};
// What a kernel's pieces may be (split_tail_limits): each keeps at least min_k_blocks_per_piece K
// blocks, a tile is cut in at most max_pieces, and launches of more than max_rounds rounds split nothing.
struct SplitTailLimits {
  int min_k_blocks_per_piece = 16;
  int max_pieces = 4;
  int max_rounds = 4;
};
// From the exact tile count, the persistent CTAs (SMs x CTAs per SM) and K blocks per tile.
SplitTailPlan plan_split_tail(long long tiles, long long ctas, int k_blocks, const SplitTailLimits& limits = {});
// The limits of `spec`'s kernel: the defaults, and the 4-bit decode tiles' (config.cpp, kW4Split*).
SplitTailLimits split_tail_limits(const KernelSpec& spec);
// The plan a launch of `spec` with K = k runs (its tile's K blocks, its kernel's limits): the one
// function the heuristic and the launch both ask, so that they agree.
SplitTailPlan plan_split_tail(const KernelSpec& spec, long long tiles, long long ctas, int k);
// Whether a launch of `spec` copies its weights with an L2 evict_first hint
// (GroupedGemmParams::weight_l2_evict_first): the 4-bit Hopper kernel's decode tiles (<= 64
// tokens) where the packed weights (n x k codes) of the experts it can read, at most
// min(num_groups, rows) of them, take at most 256 MiB.
bool weights_evict_first(const KernelSpec& spec, long long num_groups, long long n, long long k, long long rows);
// `chosen` and the specs choose_spec returns instead for the same shapes under other routings:
// split=tail follows the exact tile count, so 128x256 single-CTA unfused launches with long K
// come with their twin, and absorbed tail rows (tail=24) the groups' ends, so 16-bit 128x256
// launches on single CTAs or pairs (unfused, or fused without atomics: a layer's GEMM1 and GEMM2) come with
// and without them, and on whole N a CTA pair with the other pair (what prewarm builds). Where one
// group can hold more than 128 rows (max_group_rows: a layer's token count; 0 = not known), also the
// twins a skewed routing takes (v43): 128x256 for a 16-bit 64x128 launch (hot_groups_dominate), and
// a 4-bit prefill tile reading A in order with and without tile bands (where a group's A may reach
// the bands' 48 MB). With at most 16 groups (num_groups; 0 = not known), a 128-row bf16 launch with
// K >= 10240, or FP8 one, unfused or a layer's GEMM2 (linear_scatter), also comes with its 64x256 static
// twin (the few-large-groups rules, v54).
std::vector<KernelSpec> routing_variants(const KernelSpec& chosen, int n, int k, long long max_group_rows = 0,
                                         long long num_groups = 0);
// The most groups the few-large-groups rules (64x256 static, v54) look at; they read the host's exact
// group sizes, so prewarm also builds the choice on a typical routing where num_groups is at most this.
inline constexpr int kFewLargeGroupsMax = 16;
// Whether a launch's exact group sizes put it where those rules can take 64x256: their conditions, and
// its rounds against plain 128x256 tiles' at their bound (bf16/f16 or FP8 A/B; m_tiles_128 / _64 are
// the groups' M tiles at 128 / 64 rows). The shape bucket's flag (",few", tuning.hpp): a bucket keeps
// the kernel its first problem chose, so routings the rules decide differently get buckets of their own.
// One pass's sums, no allocation (the high-level call computes it on every call).
bool few_groups_small_tile_may_pay(DType ab, DType c, int n, int k, const Fusion& fusion, ScaleB b_scales, long long active,
                                   long long rows, long long m_tiles_128, long long m_tiles_64, int sm_count);

}  // namespace moejit

namespace moejit {
// Every spec choose_spec can return on `arch` (CI compiles each of them with NVRTC).
std::vector<KernelSpec> heuristic_candidates(const Arch& arch);
// Every FP8 (a = b = e4m3) spec of `family` on `arch` (hopper: what choose_spec returns on sm_90a,
// each tile × layout × C type; portable: what it returns elsewhere, also runnable on sm_90a).
std::vector<KernelSpec> fp8_candidates(const Arch& arch, KernelFamily family = KernelFamily::hopper);
// Every weight-only 4-bit (a = bf16, b = mxfp4 | nvfp4) spec of `family` on `arch` (hopper: what
// choose_spec returns on sm_90a; portable: what it returns elsewhere, also runnable on sm_90a).
std::vector<KernelSpec> w4_candidates(const Arch& arch, KernelFamily family = KernelFamily::hopper);
// The configs of one family crossed with every layout, dtype and scheduler; empty if the
// family cannot run on `arch`. Tests run the portable family on Hopper too.
std::vector<KernelSpec> family_candidates(const Arch& arch, KernelFamily family);
}  // namespace moejit
