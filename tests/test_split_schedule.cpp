// Host model of split=tail's work units (kernel_templates/moejit/common/split_tail.cuh, compiled
// here for the host through the shims below) against plans from plan_split_tail and against plans
// that disagree with the device's tile count (a caller's host groups that lie, a graph replayed
// with new counts). Checks, with the static and the dynamic scheduler:
//  - every K block of every tile the device has is computed exactly once;
//  - the pieces of a tile have distinct workspace slots inside the plan's (the workspace is sized
//    from the plan), and every piece of a split tile runs (so its flag's count completes);
//  - unit numbers never map to a smaller tile than an earlier one (GroupTileCursor walks forward);
//  - split_unit_count is the number of units that map to existing tiles, so the dynamic counter's
//    last fetch is units + CTAs - 1, the reset the kernels rely on.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#define __device__
#define __forceinline__ inline
namespace {
using std::max;
using std::min;
}  // namespace
#include "moejit/common/split_tail.cuh"
#undef __device__
#undef __forceinline__

#include "heuristics/config.hpp"

using namespace moejit;

namespace {

struct Coverage {
  std::map<int, std::vector<int>> blocks_of_tile;  // tile -> how often each K block was computed
  std::map<int, std::set<int>> pieces_of_tile;     // tile -> workspace slots used
  long long units_run = 0;
};

// Runs one CTA's units as the kernels do: stop at the first unit whose tile does not exist.
void run_unit(const GroupedGemmParams& p, int unit_index, int tiles, int k_blocks, Coverage& c, int& last_tile, bool& done) {
  const SplitUnit u = split_unit(p, unit_index, k_blocks);
  CHECK(u.tile >= last_tile);
  last_tile = u.tile;
  if (u.tile >= tiles) {
    done = true;
    return;
  }
  auto& blocks = c.blocks_of_tile[u.tile];
  blocks.resize(k_blocks);
  for (int kb = u.kb_begin; kb < u.kb_end; ++kb) ++blocks[kb];
  if (u.piece >= 0) {
    CHECK(u.piece < p.split_tiles * p.split_count);
    CHECK(c.pieces_of_tile[u.tile].insert(u.piece).second);
  }
  ++c.units_run;
}

void check_coverage(const GroupedGemmParams& p, const Coverage& c, int tiles, int k_blocks) {
  CHECK((int)c.blocks_of_tile.size() == tiles);
  for (const auto& [tile, blocks] : c.blocks_of_tile)
    for (int kb = 0; kb < k_blocks; ++kb) {
      INFO("tile " << tile << " K block " << kb);
      CHECK(blocks[kb] == 1);
    }
  for (const auto& [tile, pieces] : c.pieces_of_tile) CHECK((int)pieces.size() == p.split_count);
  CHECK(c.units_run == split_unit_count(p, tiles, k_blocks));
}

void check_schedules(const GroupedGemmParams& p, int tiles, int k_blocks, int ctas) {
  INFO("tiles " << tiles << " k_blocks " << k_blocks << " ctas " << ctas << " plan " << p.split_from << "+"
                << p.split_tiles << " x " << p.split_count);
  // Static: CTA c takes units c, c + ctas, ...
  Coverage fixed;
  for (int cta = 0; cta < ctas; ++cta) {
    int last = -1;
    bool done = false;
    for (int unit = cta; !done; unit += ctas) run_unit(p, unit, tiles, k_blocks, fixed, last, done);
  }
  check_coverage(p, fixed, tiles, k_blocks);
  // Dynamic: CTAs fetch from one counter in a random interleaving; each stops after its first
  // fetch past the end. The last of all fetches is units + ctas - 1.
  Coverage fetched;
  std::mt19937 rng(tiles * 131 + k_blocks);
  std::vector<int> active(ctas), last(ctas, -1);
  for (int i = 0; i < ctas; ++i) active[i] = i;
  int counter = 0, final_fetch = -1;
  while (!active.empty()) {
    const std::size_t pick = rng() % active.size();
    const int cta = active[pick];
    const int unit = counter++;
    bool done = false;
    run_unit(p, unit, tiles, k_blocks, fetched, last[cta], done);
    if (done) {
      final_fetch = std::max(final_fetch, unit);
      active.erase(active.begin() + pick);
    }
  }
  check_coverage(p, fetched, tiles, k_blocks);
  CHECK(final_fetch == split_unit_count(p, tiles, k_blocks) + ctas - 1);
}

GroupedGemmParams with_plan(const SplitTailPlan& plan) {
  GroupedGemmParams p{};
  p.split_from = plan.from;
  p.split_tiles = plan.tiles;
  p.split_count = plan.count;
  return p;
}

}  // namespace

TEST_CASE("split=tail units: every K block of every tile once, static and dynamic, as planned", "[split][heuristic]") {
  for (int ctas : {4, 13, 132})
    for (int tiles : {1, 3, ctas / 3 + 1, ctas - 1, ctas + 1, ctas + ctas / 4, 2 * ctas + 7, 3 * ctas + ctas / 2 + 1})
      for (int k_blocks : {16, 33, 64, 224}) {
        const SplitTailPlan plan = plan_split_tail(tiles, ctas, k_blocks);
        check_schedules(with_plan(plan), tiles, k_blocks, ctas);
      }
}

TEST_CASE("split=tail units: the 4-bit decode tile's plans (12 rounds, 12 K blocks a piece)", "[split][heuristic]") {
  const SplitTailLimits w4 = split_tail_limits(KernelSpec::parse("family=hopper,b=nvfp4,tile=16x128x64,stages=8"));
  for (int ctas : {6, 264})
    for (int tiles : {ctas / 3 + 1, ctas / 5 + 2, 5 * ctas + ctas / 4, 11 * ctas + ctas / 2 - 1})
      for (int k_blocks : {24, 32, 45}) {
        const SplitTailPlan plan = plan_split_tail(tiles, ctas, k_blocks, w4);
        check_schedules(with_plan(plan), tiles, k_blocks, ctas);
      }
}

TEST_CASE("split=tail units: a plan that disagrees with the device's tiles stays exact and in bounds", "[split][heuristic]") {
  // The host planned for `planned` tiles; the device's groups hold `tiles`: fewer (split tiles
  // missing, or past the split range), more (whole tiles after the pieces). Also plans the kernel
  // must ignore: more pieces than K blocks, a single piece.
  const int ctas = 132;
  for (int planned : {150, 300, 40})
    for (int delta : {-60, -20, -1, 0, 1, 20, 200}) {
      const int tiles = std::max(0, planned + delta);
      const SplitTailPlan plan = plan_split_tail(planned, ctas, 224);
      REQUIRE(plan.count > 1);
      check_schedules(with_plan(plan), tiles, 224, ctas);
    }
  GroupedGemmParams too_many{};
  too_many.split_from = 0;
  too_many.split_tiles = 10;
  too_many.split_count = 8;  // 8 pieces of 5 K blocks: not enough blocks, every tile runs whole
  check_schedules(too_many, 10, 5, ctas);
  CHECK_FALSE(split_enabled(too_many, 5));
  GroupedGemmParams one{};
  one.split_tiles = 10;
  one.split_count = 1;
  CHECK_FALSE(split_enabled(one, 64));
  check_schedules(one, 10, 64, ctas);
}
