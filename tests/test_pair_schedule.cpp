// Host model of the Hopper kernels' 2x1 CTA-pair schedule (kernel_templates/moejit/hopper/
// grouped_gemm_sm90.cuh, hopper_fp8/grouped_gemm_sm90_fp8.cuh): the same GroupTileCursor
// (common/scheduler.cuh, compiled here for the host through the shims below) numbering pair units
// (kPairs), and pair_unit_tile, which gives rank r M tile 2i + r of a unit, or a group's odd last M
// tile at N tile 2j + r. Checks, for group sizes like DeepSeek-V3's (odd and even M-tile counts),
// empty groups and both layouts, with the static and the dynamic scheduler (the bf16 kernel's):
//  - every 128-row tile that holds rows of a group is computed by exactly one CTA;
//  - the two CTAs of a cluster walk the same units (lockstep) and share B only on a shared B tile;
//  - a rank without a tile is counted: only rank 1, once per group with odd M- and N-tile counts;
//  - the dynamic counter's last fetch is total + clusters - 1 (the reset the kernel relies on).
// And the warp-wide walk (GroupTileCursor::seek_warp) on a host-emulated warp against seek.
#include <catch2/catch.hpp>

#include <algorithm>
#include <barrier>
#include <thread>
#include <map>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#define __device__
#define __forceinline__ inline
namespace {
template <class T>
T __ldg(const T* p) {
  return *p;
}
using std::max;
using std::min;
// Used only by the counter helpers, which this model does not call.
int atomicAdd(int* p, int v) { return std::exchange(*p, *p + v); }
int atomicExch(int* p, int v) { return std::exchange(*p, v); }
struct {
  unsigned x = 1;
} gridDim;
// A warp on the host for GroupTileCursor::seek_warp: 32 threads, one per lane, and every warp
// intrinsic a rendezvous of all 32 (each lane posts its value, all wait, each reads, all wait).
// Valid because seek_warp's lanes call the intrinsics in the same order, as the kernels require.
thread_local struct {
  unsigned x = 0;
} threadIdx;
struct HostWarp {
  std::barrier<> sync{32};
  int slot[32] = {};
  template <class Read>
  int exchange(int value, Read read) {
    slot[threadIdx.x] = value;
    sync.arrive_and_wait();
    const int out = read();
    sync.arrive_and_wait();
    return out;
  }
};
HostWarp* host_warp = nullptr;
int __shfl_sync(unsigned, int v, int src) {
  return host_warp->exchange(v, [&] { return host_warp->slot[src]; });
}
int __shfl_up_sync(unsigned, int v, unsigned d) {
  const unsigned lane = threadIdx.x;
  return host_warp->exchange(v, [&] { return lane >= d ? host_warp->slot[lane - d] : v; });
}
unsigned __ballot_sync(unsigned, bool b) {
  return (unsigned)host_warp->exchange(b ? 1 : 0, [&] {
    unsigned bits = 0;
    for (int i = 0; i < 32; ++i) bits |= (unsigned)(host_warp->slot[i] != 0) << i;
    return (int)bits;
  });
}
int __shfl_xor_sync(unsigned, int v, int mask) {
  const unsigned lane = threadIdx.x;
  return host_warp->exchange(v, [&] { return host_warp->slot[lane ^ (unsigned)mask]; });
}
int __ffs(unsigned v) { return __builtin_ffs(static_cast<int>(v)); }
}  // namespace
#include "moejit/common/scheduler.cuh"

using namespace moejit;

namespace {

constexpr int kBlockM = 128, kBlockN = 256;

struct Work {
  int group, m_block, n_block;
  bool operator<(const Work& o) const { return std::tie(group, m_block, n_block) < std::tie(o.group, o.m_block, o.n_block); }
  bool operator==(const Work& o) const { return std::tie(group, m_block, n_block) == std::tie(o.group, o.m_block, o.n_block); }
};

struct Outcome {
  std::map<Work, int> computed;  // CTA tiles with rows, and how often each was computed
  long long idle_rank_tiles = 0;  // CTA tiles of a rank without rows
  int last_fetch = -1;            // dynamic: the largest tile number fetched
  long long pair_tiles = 0;
};

// One cluster's walk: the tile numbers its rank 0 gets (static: cluster + i * clusters; dynamic:
// from the shared counter, handed to rank 1 through the ring: the same numbers), each rank with
// its own cursor, as in the kernel.
// kTail: absorbed tail rows (the 16-bit kernel's tail=24): a group's last M tile may hold kTail more rows.
// kInterleaved: pair_order=interleaved (a group's odd last M tile's units among its pair units).
template <int kLayout, int kTail, bool kInterleaved = false>
void walk(const GroupedGemmParams& p, const std::vector<int>& tile_numbers, Outcome& out) {
  GroupTileCursor<kLayout, kBlockM, kBlockN, kTail, 0, true, kClassAll, 0, kInterleaved> cursor[2];
  const int n_tiles = (p.n + kBlockN - 1) / kBlockN;
  for (int t : tile_numbers) {
    TileCoord tile[2];
    bool ok[2], shared[2] = {false, false};
    for (int rank = 0; rank < 2; ++rank) {
      ok[rank] = cursor[rank].seek(p, t, tile[rank]);
      if (ok[rank]) shared[rank] = pair_unit_tile<kBlockM, kTail>(tile[rank], rank, n_tiles);  // the kernels' mapping
    }
    REQUIRE(ok[0] == ok[1]);  // both ranks stop at the same unit number
    if (!ok[0]) break;
    ++out.pair_tiles;
    REQUIRE(shared[0] == shared[1]);
    CHECK(tile[0].group == tile[1].group);
    if (shared[0]) CHECK(tile[0].n_block == tile[1].n_block);  // the same B tile, multicast
    for (int rank = 0; rank < 2; ++rank) {
      const TileCoord& c = tile[rank];
      const bool has_rows = c.m_block * kBlockM < c.group_rows;  // the producer's has_a, the consumers' rows_here > 0
      if (has_rows) {
        ++out.computed[{c.group, c.m_block, c.n_block}];
      } else {
        CHECK(rank == 1);  // only past the last N tile of a group's odd last M tile
        CHECK_FALSE(shared[rank]);
        ++out.idle_rank_tiles;
      }
    }
  }
}

template <int kLayout, int kTail, bool kInterleaved = false>
Outcome run(const GroupedGemmParams& p, int clusters, bool dynamic, long long total_pair_tiles, std::mt19937& rng) {
  Outcome out;
  if (!dynamic) {
    for (int c = 0; c < clusters; ++c) {
      std::vector<int> numbers;
      for (long long t = c; t <= total_pair_tiles; t += clusters) numbers.push_back((int)t);  // one past the end
      walk<kLayout, kTail, kInterleaved>(p, numbers, out);
    }
    return out;
  }
  // Dynamic: clusters fetch in a random interleaving; each keeps fetching until a fetch lands
  // past the end (every cluster's last fetch does).
  std::vector<std::vector<int>> numbers(clusters);
  std::vector<bool> done(clusters, false);
  int counter = 0, running = clusters;
  while (running > 0) {
    int c = (int)(rng() % clusters);
    if (done[c]) continue;
    int t = counter++;
    numbers[c].push_back(t);
    out.last_fetch = std::max(out.last_fetch, t);
    if (t >= total_pair_tiles) done[c] = true, --running;
  }
  for (int c = 0; c < clusters; ++c) walk<kLayout, kTail, kInterleaved>(p, numbers[c], out);
  return out;
}

// The device arrays of a launch with these group sizes (contiguous offsets, masked counts with a
// capacity `spare` rows past the largest group), and the params pointing at them.
struct HostGroups {
  std::vector<int> offsets, counts;
  GroupedGemmParams p{};
  HostGroups(const std::vector<int>& rows, int n, int spare) : offsets(rows.size() + 1, 0), counts(rows) {
    for (std::size_t g = 0; g < rows.size(); ++g) offsets[g + 1] = offsets[g] + rows[g];
    p.group_offsets = offsets.data();
    p.group_counts = counts.data();
    p.num_groups = (int)rows.size();
    p.n = n;
    p.capacity = (rows.empty() ? 0 : *std::max_element(rows.begin(), rows.end())) + spare;
  }
  HostGroups(const HostGroups&) = delete;  // p points into this object
  GroupedGemmParams params(bool masked) const {
    GroupedGemmParams q = p;
    q.total_rows = masked ? p.capacity * p.num_groups : offsets.back();
    return q;
  }
};

template <int kTail = 0, bool kInterleaved = false>
void check_schedule(const std::vector<int>& rows, int n, bool masked, int clusters, bool dynamic, std::mt19937& rng) {
  INFO("groups " << rows.size() << " n " << n << (masked ? " masked" : " contiguous") << " clusters " << clusters
                 << (dynamic ? " dynamic" : " static") << " tail " << kTail << (kInterleaved ? " interleaved" : ""));
  const int groups = (int)rows.size();
  const HostGroups host(rows, n, 9);
  const GroupedGemmParams p = host.params(masked);

  const int n_tiles = (n + kBlockN - 1) / kBlockN;
  long long pair_tiles = 0, expected_idle = 0;
  std::map<Work, int> expected;
  for (int g = 0; g < groups; ++g) {
    // With tail rows a group's last 1..kTail rows past a whole tile ride on that tile.
    const int m_tiles = kTail != 0 && rows[g] > kBlockM && rows[g] % kBlockM != 0 && rows[g] % kBlockM <= kTail
                            ? rows[g] / kBlockM
                            : (rows[g] + kBlockM - 1) / kBlockM;
    CHECK(GroupTileCursor<kLayoutContiguous, kBlockM, kBlockN, kTail>::m_tiles_of(rows[g]) == m_tiles);
    pair_tiles += (long long)(m_tiles / 2) * n_tiles + (m_tiles % 2) * ((n_tiles + 1) / 2);
    expected_idle += (m_tiles % 2) * (n_tiles % 2);
    for (int m = 0; m < m_tiles; ++m)
      for (int j = 0; j < n_tiles; ++j) expected[{g, m, j}] = 1;
  }
  Outcome out = masked ? run<kLayoutMasked, kTail, kInterleaved>(p, clusters, dynamic, pair_tiles, rng)
                       : run<kLayoutContiguous, kTail, kInterleaved>(p, clusters, dynamic, pair_tiles, rng);
  CHECK(out.pair_tiles == pair_tiles);
  CHECK(out.computed == expected);  // each tile with rows exactly once, nothing else
  CHECK(out.idle_rank_tiles == expected_idle);
  if (dynamic) CHECK(out.last_fetch == pair_tiles + clusters - 1);  // the fetch that resets the counter
}

}  // namespace

TEST_CASE("2x1 CTA pairs: every 128-row tile once, ranks in lockstep, odd M-tile counts split along N, with and without tail rows, both pair orders", "[scheduler][pairs_m]") {
  std::mt19937 rng(17);
  // DeepSeek-V3 16384 tokens: 256 experts of 512 +- 22 rows (4 or 5 M tiles), N = 4096.
  std::vector<int> deepseek(256);
  std::normal_distribution<double> d(512, 22);
  for (int& r : deepseek) r = std::max(0, (int)d(rng));
  // Qwen3 at decode: 131 experts (not a multiple of the batch) of 0..3 rows, a third of them empty.
  std::vector<int> decode(131);
  for (int& r : decode) r = std::max(0, (int)(rng() % 6) - 2);
  const std::vector<std::vector<int>> cases = {
      deepseek,
      {490, 534, 0, 129, 1, 512, 383, 534, 0, 490, 522, 256},  // the GPU test's groups
      {152, 153, 280, 24, 536, 409, 1031, 257, 281},           // ends 1-24 and 25 rows past whole tiles
      {0, 0, 0},                                               // nothing to do
      {1},                                                     // one tile: split along N (rank 1 idle at odd N-tile counts)
      {64, 65, 127, 128, 129, 192, 193, 0, 256, 1000, 1500, 33, 1200, 1200, 1200, 1200},
      decode,  // many small groups: the cursor's batched reads (8 groups at a time) cross batches
  };
  for (const auto& rows : cases)
    for (bool masked : {false, true})
      for (bool dynamic : {false, true})
        for (int clusters : {1, 3, 66})
          for (int n : {640, 4096}) {
            check_schedule(rows, n, masked, clusters, dynamic, rng);
            check_schedule<24>(rows, n, masked, clusters, dynamic, rng);  // absorbed tail rows (v42)
            if (dynamic) {  // pair_order=interleaved (v49: the dynamic scheduler's only)
              check_schedule<0, true>(rows, n, masked, clusters, dynamic, rng);
              check_schedule<24, true>(rows, n, masked, clusters, dynamic, rng);
            }
          }
}

// The warp-wide walk (seek_warp, the FP8 and 4-bit consumers') against the scalar one (seek) on the
// same tile sequences: every lane of a host-emulated warp must find what seek finds, tile by tile,
// including the end (false, with the total tile count in tiles_before). Decode-like groups (many,
// small, a third empty) cross the 32-group steps; a step can end exactly at the last group.
namespace {

struct Found {
  bool ok;
  TileCoord c;
  bool operator==(const Found& o) const {
    return ok == o.ok && (!ok || std::tie(c.group, c.m_block, c.n_block, c.row_begin, c.group_rows) ==
                                     std::tie(o.c.group, o.c.m_block, o.c.n_block, o.c.row_begin, o.c.group_rows));
  }
};

// Any cursor type: `setup` prepares each cursor before its first seek (MixedTileCursor's totals).
template <class Cursor, class Setup>
void compare_walks_of(const GroupedGemmParams& p, const std::vector<int>& numbers, Setup setup) {
  Cursor scalar;
  setup(scalar);
  std::vector<Found> want;
  for (int t : numbers) {
    Found f{};
    f.ok = scalar.seek(p, t, f.c);
    want.push_back(f);
    if (!f.ok) break;
  }
  HostWarp warp;
  host_warp = &warp;
  std::vector<std::vector<Found>> got(32);
  std::vector<int> totals(32);
  std::vector<std::thread> lanes;
  for (unsigned lane = 0; lane < 32; ++lane)
    lanes.emplace_back([&, lane] {
      threadIdx.x = lane;
      Cursor cursor;
      setup(cursor);
      for (int t : numbers) {
        Found f{};
        f.ok = cursor.seek_warp(p, t, f.c);
        got[lane].push_back(f);
        if (!f.ok) break;
      }
      totals[lane] = cursor.tiles_before;
    });
  for (auto& t : lanes) t.join();
  host_warp = nullptr;
  for (int lane = 0; lane < 32; ++lane) {
    INFO("lane " << lane);
    REQUIRE(got[lane] == want);
    if (!want.back().ok) REQUIRE(totals[lane] == scalar.tiles_before);
  }
}

template <int kLayout, int kM, int kN, int kBand = 0, bool kPairs = false>
void compare_walks(const GroupedGemmParams& p, const std::vector<int>& numbers) {
  compare_walks_of<GroupTileCursor<kLayout, kM, kN, 0, kBand, kPairs>>(p, numbers, [](auto&) {});
}

template <int kM, int kN>
void check_warp_walk(const std::vector<int>& rows, int n, int ctas) {
  INFO("groups " << rows.size() << " n " << n << " ctas " << ctas << " tile " << kM << "x" << kN);
  const HostGroups host(rows, n, 5);
  long long total = 0;
  for (int r : rows) total += (long long)((r + kM - 1) / kM) * ((n + kN - 1) / kN);
  for (int c = 0; c < ctas; ++c) {
    std::vector<int> numbers;  // the static order, through one past the end
    for (long long t = c; t <= total + ctas; t += ctas) numbers.push_back((int)t);
    compare_walks<kLayoutContiguous, kM, kN>(host.params(false), numbers);
    compare_walks<kLayoutMasked, kM, kN>(host.params(true), numbers);
  }
}

}  // namespace

TEST_CASE("seek_warp: every lane finds the tiles seek finds (decode-like and prefill-like groups)", "[scheduler]") {
  std::mt19937 rng(5);
  std::vector<int> decode(131), exact(64), large(40);
  for (int& r : decode) r = std::max(0, (int)(rng() % 6) - 2);
  for (int& r : exact) r = 1 + (int)(rng() % 3);  // 64 groups: the walk's steps end on the last group
  for (int& r : large) r = (int)(rng() % 700);
  // Few CTAs: every CTA walks past every group anyway, and each step of the walk is eleven
  // rendezvous of 32 threads (slow on a loaded 2-core machine).
  check_warp_walk<16, 128>(decode, 2048, 3);
  check_warp_walk<16, 128>(exact, 1536, 2);
  for (int ctas : {1, 5}) check_warp_walk<64, 128>(large, 640, ctas);
  check_warp_walk<16, 128>({0, 0, 0}, 128, 3);
  check_warp_walk<16, 128>({}, 128, 2);
  check_warp_walk<128, 256>({1}, 4096, 2);
}

// Tile bands (KernelSpec::band): the cursor's numbering of a group's tiles is a permutation of the
// plain one — every (group, M tile, N tile) once — in bands of kBand M tiles, M fastest inside a
// band, N sweeping across it; the last band of a group may be short. Also through seek_warp.
namespace {

template <int kBand>
void check_bands(const std::vector<int>& rows, int n) {
  INFO("band " << kBand << " groups " << rows.size() << " n " << n);
  constexpr int kM = 128, kN = 256;
  const HostGroups host(rows, n, 3);
  const GroupedGemmParams p = host.params(false);
  const int n_tiles = (n + kN - 1) / kN;
  GroupTileCursor<kLayoutContiguous, kM, kN, 0, kBand> cursor;
  std::map<Work, int> seen;
  int t = 0;
  for (int g = 0; g < (int)rows.size(); ++g) {
    const int m_tiles = (rows[g] + kM - 1) / kM;
    for (int band = 0; band * kBand < m_tiles; ++band) {
      const int band_m = std::min(kBand, m_tiles - band * kBand);
      for (int j = 0; j < n_tiles; ++j)
        for (int i = 0; i < band_m; ++i, ++t) {
          TileCoord c{};
          REQUIRE(cursor.seek(p, t, c));
          CHECK(c.group == g);
          CHECK(c.m_block == band * kBand + i);
          CHECK(c.n_block == j);
          ++seen[{c.group, c.m_block, c.n_block}];
        }
    }
  }
  TileCoord c{};
  CHECK_FALSE(cursor.seek(p, t, c));
  for (const auto& [work, count] : seen) CHECK(count == 1);
  // The warp-wide walk numbers the tiles the same way.
  std::vector<int> numbers;
  for (int i = 0; i <= t; i += 3) numbers.push_back(i);
  numbers.push_back(t + 1);
  compare_walks<kLayoutContiguous, kM, kN, kBand>(p, numbers);
}

}  // namespace

TEST_CASE("tile bands: each tile once, in bands of M tiles with N sweeping inside", "[scheduler][band]") {
  const std::vector<int> rows = {4096, 0, 1000, 129, 1, 2050, 512};
  for (int n : {256, 1000, 4096}) {
    check_bands<1>(rows, n);
    check_bands<3>(rows, n);
    check_bands<8>(rows, n);
    check_bands<64>(rows, n);  // longer than every group: the plain order
  }
}

// The FP8 kernel's CTA pairs (cluster=2x1, static scheduler): GroupTileCursor<..., kPairs> numbers
// pair units, and pair_unit_tile gives each rank its tile, as the kernel's producer and consumers
// do. Checks, for odd and even M-tile counts, odd and even N-tile counts, empty groups, both
// layouts and bands:
//  - every tile with rows is computed exactly once;
//  - both ranks walk the same units and agree on whether B is shared (multicast): shared, they hold
//    M tiles 2i, 2i + 1 of one group at one N tile; not shared, one group's last M tile at N tiles
//    2j, 2j + 1, and only where the group's M-tile count is odd;
//  - a rank is idle (no tile) only as rank 1 of such a unit past the last N tile: once per group
//    whose M-tile and N-tile counts are both odd;
//  - seek_warp numbers the units as seek does.
namespace {

template <int kLayout, int kBand>
void check_pair_units(const std::vector<int>& rows, int n, bool masked, int clusters) {
  INFO("pair units: groups " << rows.size() << " n " << n << (masked ? " masked" : " contiguous") << " clusters "
                             << clusters << " band " << kBand);
  const HostGroups host(rows, n, 7);
  const GroupedGemmParams p = host.params(masked);
  const int n_tiles = (n + kBlockN - 1) / kBlockN;
  long long units = 0, expected_idle = 0;
  std::map<Work, int> expected;
  for (int g = 0; g < (int)rows.size(); ++g) {
    const int m_tiles = (rows[g] + kBlockM - 1) / kBlockM;
    units += (long long)(m_tiles / 2) * n_tiles + (m_tiles % 2) * ((n_tiles + 1) / 2);
    expected_idle += (m_tiles % 2) * (n_tiles % 2);
    for (int m = 0; m < m_tiles; ++m)
      for (int j = 0; j < n_tiles; ++j) expected[{g, m, j}] = 1;
  }
  std::map<Work, int> computed;
  long long idle = 0, walked = 0;
  for (int c = 0; c < clusters; ++c) {
    GroupTileCursor<kLayout, kBlockM, kBlockN, 0, kBand, true> cursor[2];
    for (long long t = c;; t += clusters) {
      TileCoord tile[2];
      bool ok[2], shared[2];
      for (int rank = 0; rank < 2; ++rank) {
        ok[rank] = cursor[rank].seek(p, (int)t, tile[rank]);
        if (ok[rank]) shared[rank] = pair_unit_tile<kBlockM>(tile[rank], rank, n_tiles);
      }
      REQUIRE(ok[0] == ok[1]);  // lockstep: both ranks stop at the same unit
      if (!ok[0]) break;
      ++walked;
      REQUIRE(shared[0] == shared[1]);
      CHECK(tile[0].group == tile[1].group);
      if (shared[0]) {  // B multicast: one N tile, M tiles 2i, 2i + 1
        CHECK(tile[0].n_block == tile[1].n_block);
        CHECK(tile[0].m_block % 2 == 0);
        CHECK(tile[1].m_block == tile[0].m_block + 1);
      } else {  // the odd last M tile, split along N
        const int m_tiles = (rows[tile[0].group] + kBlockM - 1) / kBlockM;
        CHECK(m_tiles % 2 == 1);
        CHECK(tile[0].m_block == m_tiles - 1);
        CHECK(tile[1].m_block == m_tiles - 1);
        CHECK(tile[0].n_block % 2 == 0);
      }
      for (int rank = 0; rank < 2; ++rank) {
        const TileCoord& w = tile[rank];
        if (w.m_block * kBlockM < w.group_rows) {
          ++computed[{w.group, w.m_block, w.n_block}];
        } else {
          CHECK(rank == 1);
          CHECK_FALSE(shared[rank]);
          ++idle;
        }
      }
    }
  }
  CHECK(walked == units);
  CHECK(computed == expected);
  CHECK(idle == expected_idle);
  std::vector<int> numbers;
  for (long long i = 0; i <= units; i += 5) numbers.push_back((int)i);
  numbers.push_back((int)units + 1);
  compare_walks<kLayout, kBlockM, kBlockN, kBand, true>(p, numbers);
}

}  // namespace

TEST_CASE("FP8 CTA pairs: pair units, the odd last M tile split along N, no idle rank", "[scheduler][pairs_m]") {
  std::mt19937 rng(23);
  std::vector<int> qwen(128);  // Qwen3 up 16384: 1024 +- 31 rows (8 or 9 M tiles)
  std::normal_distribution<double> d(1024, 31);
  for (int& r : qwen) r = std::max(0, (int)d(rng));
  const std::vector<std::vector<int>> cases = {
      qwen,
      {490, 534, 0, 129, 1, 512, 383, 534, 0, 490, 522, 256},
      {0, 0, 0},
      {1},
      {64, 65, 127, 128, 129, 192, 193, 0, 256, 1000, 1500, 33, 1200, 1200, 1200, 1200},
  };
  for (const auto& rows : cases)
    for (int n : {640, 512, 4096})  // 3, 2 and 16 N tiles of 256
      for (bool masked : {false, true}) {
        if (masked) check_pair_units<kLayoutMasked, 0>(rows, n, masked, 3);
        else check_pair_units<kLayoutContiguous, 0>(rows, n, masked, 66);
      }
  check_pair_units<kLayoutContiguous, 2>(cases[1], 640, false, 5);  // bands over the pair units
  check_pair_units<kLayoutContiguous, 3>(qwen, 4096, false, 66);
}

TEST_CASE("CTA pairs on the dynamic scheduler: an odd last M tile's unit comes right after the pair units of its two N tiles", "[scheduler][pairs_m]") {
  // pair_order=interleaved (v49). In the plain order, after all of its group's pair units, the odd
  // tile's units read the group's B from DRAM again (v48).
  const HostGroups host({320, 256, 384}, 5 * kBlockN, 1);  // 3 (odd), 2 and 3 M tiles; 5 N tiles
  const GroupedGemmParams p = host.params(false);
  GroupTileCursor<kLayoutContiguous, kBlockM, kBlockN, 0, 0, true, kClassAll, 0, true> cursor;  // pair_order=interleaved
  // Group 0: (m pair 0, n 0), (0, 1), odd unit 0 (n 0-1), (0, 2), (0, 3), odd 1 (n 2-3), (0, 4), odd 2 (n 4).
  const std::vector<std::pair<int, int>> group0 = {{0, 0}, {0, 1}, {1, 0}, {0, 2}, {0, 3}, {1, 1}, {0, 4}, {1, 2}};
  int t = 0;
  for (const auto& [m, n] : group0) {
    TileCoord c{};
    REQUIRE(cursor.seek(p, t++, c));
    CHECK(c.group == 0);
    CHECK(c.m_block == m);  // the unit's pair index, or floor(T / 2) for the odd tile's units
    CHECK(c.n_block == n);
  }
  for (int n = 0; n < 5; ++n) {  // group 1: an even count keeps the plain order
    TileCoord c{};
    REQUIRE(cursor.seek(p, t++, c));
    CHECK((c.group == 1 && c.m_block == 0 && c.n_block == n));
  }
}

// The mixed tile order (KernelSpec::mix, MixedTileCursor): tile t is the heavy stream's (groups of
// at least R rows) where floor((t + 1) H / T) > floor(t H / T), else the light stream's. Checks,
// with skewed, even, all-heavy, all-light and empty group sizes, both layouts, tail rows and 2x1
// pair units, static and dynamic fetch orders:
//  - count_tiles (one host-emulated warp) gives the plain cursor's total and the heavy groups' share;
//  - every unit of the plain numbering is found exactly once, each from its group's class;
//  - seek returns false from tile T on, with T in tiles_before (the kernels' unit count);
//  - every static round of `ctas` tiles holds heavy tiles in proportion (within one).
namespace {

template <int kLayout, int kTail, bool kPairs, int kR>
void check_mixed(const std::vector<int>& rows, int n, bool masked, int ctas, bool dynamic, std::mt19937& rng) {
  INFO("mixed order R " << kR << ": groups " << rows.size() << " n " << n << (masked ? " masked" : " contiguous")
                        << " ctas " << ctas << (dynamic ? " dynamic" : " static") << " tail " << kTail
                        << (kPairs ? " pairs" : ""));
  const HostGroups host(rows, n, 11);
  const GroupedGemmParams p = host.params(masked);
  using Mixed = MixedTileCursor<kLayout, kBlockM, kBlockN, kTail, 0, kPairs, kR>;

  // The plain numbering's units, and which of them are heavy.
  GroupTileCursor<kLayout, kBlockM, kBlockN, kTail, 0, kPairs> plain;
  std::map<Work, int> expected;
  int total = 0, heavy_expected = 0;
  for (TileCoord c{}; plain.seek(p, total, c); ++total) {
    expected[{c.group, c.m_block, c.n_block}] = 1;
    heavy_expected += rows[c.group] >= kR ? 1 : 0;
  }
  REQUIRE(plain.tiles_before == total);

  // The kernel's warp 1 sizes the streams: every lane gets the sums.
  HostWarp warp;
  host_warp = &warp;
  std::vector<int> heavy(32), all(32);
  std::vector<std::thread> lanes;
  for (unsigned lane = 0; lane < 32; ++lane)
    lanes.emplace_back([&, lane] {
      threadIdx.x = lane;
      Mixed::All::count_tiles(p, kR, heavy[lane], all[lane]);
    });
  for (auto& t : lanes) t.join();
  host_warp = nullptr;
  for (int lane = 0; lane < 32; ++lane) {
    REQUIRE(all[lane] == total);
    REQUIRE(heavy[lane] == heavy_expected);
  }

  // The tile numbers each CTA asks for, through one past the end (static: c + i ctas; dynamic: a
  // random interleaving of fetches from one counter).
  std::vector<std::vector<int>> numbers(ctas);
  if (!dynamic) {
    for (int c = 0; c < ctas; ++c)
      for (int t = c; t <= total; t += ctas) numbers[c].push_back(t);
  } else {
    std::vector<bool> done(ctas, false);
    int counter = 0, running = ctas;
    while (running > 0) {
      const int c = (int)(rng() % ctas);
      if (done[c]) continue;
      numbers[c].push_back(counter);
      if (counter++ >= total) done[c] = true, --running;
    }
  }
  std::map<Work, int> found;
  std::vector<int> heavy_in_round((total + ctas - 1) / ctas + 1, 0);
  for (int c = 0; c < ctas; ++c) {
    Mixed cursor;
    cursor.set_totals(heavy_expected, total);
    for (int t : numbers[c]) {
      TileCoord tile{};
      const bool ok = cursor.seek(p, t, tile);
      REQUIRE(ok == (t < total));
      if (!ok) {
        CHECK(cursor.tiles_before == total);
        break;
      }
      const long long h = (long long)t * heavy_expected / total, h_next = (long long)(t + 1) * heavy_expected / total;
      CHECK((rows[tile.group] >= kR) == (h_next > h));  // the slot's stream is the group's class
      ++found[{tile.group, tile.m_block, tile.n_block}];
      if (rows[tile.group] >= kR) ++heavy_in_round[t / ctas];
    }
  }
  CHECK(found == expected);
  if (total > 0) {
    for (int r = 0; r + 1 < (int)heavy_in_round.size() && (long long)(r + 1) * ctas <= total; ++r) {
      const long long want = (long long)ctas * heavy_expected / total;  // a whole round's share, +-1
      CHECK(std::abs(heavy_in_round[r] - want) <= 1);
    }
  }
}

template <int kR>
void check_mixed_all(const std::vector<int>& rows, std::mt19937& rng) {
  for (bool masked : {false, true})
    for (bool dynamic : {false, true})
      for (int ctas : {1, 7, 132})
        for (int n : {640, 4096}) {
          if (masked)
            check_mixed<kLayoutMasked, 0, false, kR>(rows, n, true, ctas, dynamic, rng);
          else
            check_mixed<kLayoutContiguous, 0, false, kR>(rows, n, false, ctas, dynamic, rng);
          check_mixed<kLayoutContiguous, 24, false, kR>(rows, n, false, ctas, dynamic, rng);
          check_mixed<kLayoutContiguous, 24, true, kR>(rows, n, false, ctas, dynamic, rng);  // 2x1 pair units
        }
}

}  // namespace

// The FP8 kernel's warp-wide walk in the mixed order (v44): every lane of a host-emulated warp finds,
// tile by tile, what the scalar seek finds, through the end.
template <int kLayout, bool kPairs>
void compare_mixed_walks(const std::vector<int>& rows, int n, int ctas) {
  INFO("mixed seek_warp: groups " << rows.size() << " n " << n << " ctas " << ctas << (kPairs ? " pairs" : ""));
  const HostGroups host(rows, n, 7);
  const GroupedGemmParams p = host.params(kLayout == kLayoutMasked);
  using Mixed = MixedTileCursor<kLayout, kBlockM, kBlockN, 0, 0, kPairs, 256>;
  GroupTileCursor<kLayout, kBlockM, kBlockN, 0, 0, kPairs> plain;
  int total = 0, heavy = 0;
  for (TileCoord c{}; plain.seek(p, total, c); ++total) heavy += rows[c.group] >= 256 ? 1 : 0;
  for (int c = 0; c < ctas; ++c) {
    std::vector<int> numbers;
    for (int t = c; t <= total + ctas; t += ctas) numbers.push_back(t);
    INFO("cta " << c);
    compare_walks_of<Mixed>(p, numbers, [&](Mixed& cursor) { cursor.set_totals(heavy, total); });
  }
}

TEST_CASE("mixed tile order: the warp-wide walk finds what seek finds (the FP8 kernel's roles)", "[scheduler][mix]") {
  std::mt19937 rng(29);
  std::vector<int> skewed = {3859, 2959, 900, 600, 300, 257, 256, 255, 129, 100};
  for (int i = 0; i < 90; ++i) skewed.push_back(i % 7 == 0 ? 0 : 1 + (int)(rng() % 90));
  std::shuffle(skewed.begin(), skewed.end(), rng);
  // (Each CTA's walk runs 32 host threads in lockstep: a few CTA counts keep this quick.)
  for (int ctas : {1, 3}) {
    compare_mixed_walks<kLayoutContiguous, false>(skewed, 640, ctas);
    compare_mixed_walks<kLayoutMasked, false>(skewed, 640, ctas);
    compare_mixed_walks<kLayoutContiguous, true>(skewed, 768, ctas);  // 2x1 pair units
  }
  compare_mixed_walks<kLayoutContiguous, false>({3, 0, 17, 100, 255, 1}, 256, 7);  // all light
}

TEST_CASE("mixed tile order: heavy and light groups' tiles interleaved in proportion, each tile once", "[scheduler][mix]") {
  std::mt19937 rng(23);
  // Skewed like bench_suite's ROUTING=skewed at 4096 tokens of DeepSeek-V3: a few hot experts, many
  // small ones, a few empty.
  std::vector<int> skewed = {3859, 2959, 2214, 1700, 1300, 900, 600, 400, 300, 257, 256, 255, 200, 129, 128, 100};
  for (int i = 0; i < 200; ++i) skewed.push_back(i % 9 == 0 ? 0 : 1 + (int)(rng() % 90));
  std::shuffle(skewed.begin(), skewed.end(), rng);
  check_mixed_all<256>(skewed, rng);
  check_mixed_all<256>({512, 530, 490, 512, 511, 534, 0, 600}, rng);  // all heavy but the empty one
  check_mixed_all<256>({3, 0, 17, 100, 255, 1}, rng);                  // all light
  check_mixed_all<256>({0, 0}, rng);                                   // no tiles
  check_mixed_all<64>({64, 63, 1, 4000, 65}, rng);                     // the smallest bound
  // Over 65535 tiles: the cursor's 64-bit division.
  check_mixed<kLayoutContiguous, 0, false, 256>({600000, 5, 100, 0, 70000, 3}, 4096, false, 132, false, rng);
  check_mixed<kLayoutContiguous, 0, false, 256>({600000, 5, 100, 0, 70000, 3}, 4096, false, 61, true, rng);
}
