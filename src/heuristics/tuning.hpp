// What the autotuner compares and where its results are filed: the candidate configs for a
// problem, and the shape bucket (a coarse, allocation-free summary of the problem) under which
// the high-level call remembers its choice and the tuner stores the winner.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "heuristics/config.hpp"
#include "moejit/spec.hpp"

namespace moejit {

// Problems in one bucket get one kernel. Rows per active group and active groups are rounded up
// to powers of two, so the heuristic's tile rule (≤ 64 rows per group) and its "several groups"
// rule give one answer inside a bucket; its other input, the tile count against the SM count,
// can differ by up to 4× inside a bucket (the bucket's first problem decides; docs/design.md).
struct ShapeBucket {
  GroupLayout layout = GroupLayout::contiguous;
  DType ab_type = DType::bf16, c_type = DType::bf16;
  int num_groups = 0, n = 0, k = 0;
  int rows_log2 = 0;    // ceil(log2(ceil(rows per active group))); 0 also for empty problems
  int active_log2 = 0;  // ceil(log2(active groups))
  // hot_groups_dominate (config.hpp): a skewed routing's hot experts at a small mean, which the
  // heuristic (and the tuner's timing) treat apart from an even routing of the same mean (text: ",hot").
  bool hot = false;
  // mixed_order_pays (config.hpp): hot groups beside small ones at a larger mean, where the
  // heuristic orders the tiles otherwise (text: ",mixed"; 16-bit and FP8 buckets without atomics).
  bool mixed = false;
  // few_groups_small_tile_may_pay (config.hpp): few large groups whose sizes may take the 64x256 tile
  // (v54; text: ",few").
  bool few = false;
  DType b_type = DType::bf16;  // equal to ab_type except for weight-only 4-bit (text: ",b=mxfp4")
  Fusion fusion{};      // fused calls are buckets of their own (text: ",fuse=...,act=..." appended)
  ScaleB b_scales = ScaleB::blocks;  // FP8 per-channel weight scales: their own buckets (text: ",b_scales=channels")

  bool operator==(const ShapeBucket&) const = default;
  std::string to_text() const;  // "layout=contiguous,ab=bf16,c=bf16,groups=128,n=5760,k=2880,rows<=512,active<=128[,hot][,mixed][,few]"
  static std::optional<ShapeBucket> parse(std::string_view text);  // nullopt if not a bucket's text
  // Valid rows and active (non-empty) groups of one problem.
  static ShapeBucket of(GroupLayout layout, DType ab, DType c, int num_groups, int n, int k, long long rows, long long active,
                        std::optional<DType> b = std::nullopt, bool hot = false, bool mixed = false, bool few = false);
};

struct ShapeBucketHash {
  std::size_t operator()(const ShapeBucket& b) const noexcept;
};

// The configs the tuner times for a problem: the heuristic's choice first, then each tile the
// family offers (measured set: docs/results/2026-11-23-tune-tiles.csv, and 128x256 on CTA pairs
// where the spec accepts clusters: 1x2, and 2x1 with >= 128 rows per non-empty group, which the
// bf16 heuristic never picks; FP8: 128x256 on 2x1 pairs, static) × static/dynamic scheduler;
// configs that do not validate on this arch are left out.
std::vector<KernelSpec> tuning_candidates(const GemmProblem& problem, const Arch& arch, int sm_count);

}  // namespace moejit
