// Persistent tile scheduling over all groups of a grouped GEMM.
//
// Tiles are numbered group by group; inside a group, M blocks vary fastest so that
// CTAs running at the same time share one N block of B (its tile stays in L2).
// A CTA only ever asks for increasing tile numbers (static: blockIdx.x + i*gridDim.x;
// dynamic: an atomic counter), so a forward-only cursor over the groups finds each
// tile's group in amortized O(1) and works for any number of groups without shared memory.
// Whole consumer warps can walk 32 groups per step (seek_warp): at decode a CTA passes nearly
// every group.
//
// Tile bands (KernelSpec::band, the generated source's MOEJIT_TILE_BAND; 0 = off): inside a group,
// tiles go in bands of kBand M tiles, M fastest inside a band and N sweeping across it, band after
// band. Where a group's A is larger than L2 (Mixtral at 16384 tokens: 4096 rows x K), the plain
// order re-reads all of A for every few N tiles; a band keeps kBand M tiles of A in L2 while B streams
// past. Opt-in: on the suite's Mixtral cases it bought nothing (docs/perf.md v31).
//
// Mixed tile order (KernelSpec::mix, MOEJIT_TILE_MIX_ROWS = R; 0 = off; MixedTileCursor below): the
// tiles of groups of R rows or more (heavy: compute per weight byte) and those of the others (light:
// weight bytes per FLOP) as two streams, each in the order above, interleaved in proportion to their
// tile counts. Under skewed routing a few hot experts hold most of the rows; in group order their
// tiles run as compute-bound rounds and the rest as DRAM-bound ones, so the launch takes about the
// sum of the two instead of the larger (docs/perf.md v43).
#pragma once
#include "moejit/params.cuh"

#ifndef MOEJIT_TILE_BAND
#define MOEJIT_TILE_BAND 0
#endif
#ifndef MOEJIT_TILE_MIX_ROWS
#define MOEJIT_TILE_MIX_ROWS 0
#endif
// CTA pairs on the dynamic scheduler, spec pair_order=interleaved (the generated source defines it):
// a group's odd last M tile's units each right after the pair units of their two N tiles (found()).
#ifndef MOEJIT_PAIR_ODD_INTERLEAVED
#define MOEJIT_PAIR_ODD_INTERLEAVED 0
#endif

namespace moejit {

enum LayoutKind : int { kLayoutContiguous = 0, kLayoutMasked = 1 };
enum SchedulerKind : int { kSchedulerStatic = 0, kSchedulerDynamic = 1 };

struct TileCoord {
  int group;
  int m_block;      // tile index along the group's rows
  int n_block;      // tile index along N
  int row_begin;    // row of A/C (absolute, in the whole tensor) where this group's rows start
  int group_rows;   // valid rows of this group
};

// kTailRows: a group's last kBlockM-row tile also takes up to this many rows past its kBlockM
// (the 4-bit kernel's absorbed tails, common/w4_layout.cuh; the 16-bit kernel's tail=24), so a group
// of kBlockM < rows <= kBlockM + kTailRows is one tile, not two. With kPairs the units count the
// M tiles so shortened (pair_unit_tile takes the same kTailRows).
// kPairs (the Hopper kernels' CTA pairs along M, cluster=2x1): the cursor numbers the units of a pair, not
// tiles. A group of T M tiles of kBlockM rows and NT N tiles has floor(T / 2) x NT pair units (M
// tiles 2i, 2i + 1 at N tile n: both CTAs read the same B tile, multicast) and, when T is odd,
// ceil(NT / 2) units for its last M tile (N tiles 2j, 2j + 1: the same A rows, no multicast), so
// that no rank idles on an odd M-tile count (rank 1 does only when T and NT are both odd, once per
// such group). found() returns a unit as (m_block = i, n_block = n) or, for the last M tile's units,
// (m_block = floor(T / 2), n_block = j); pair_unit_tile() below gives each rank its tile.
// Why: with one 2i, 2i + 1 pair per unit, rank 1 idled through a group's odd last tile: about 9%
// of the tile slots at Qwen3's 1024 +- 31 rows per expert (Nsight Compute, docs/perf.md v32).
// Group classes for the mixed order (MixedTileCursor): a cursor of class kClassHeavy walks only the
// groups of at least kClassRows rows, one of class kClassLight only the others; the rest count no tiles.
enum TileClass : int { kClassAll = 0, kClassHeavy = 1, kClassLight = 2 };

template <int kLayout, int kBlockM, int kBlockN, int kTailRows = 0, int kBand = MOEJIT_TILE_BAND, bool kPairs = false,
          int kClass = kClassAll, int kClassRows = 0, bool kOddInterleaved = (MOEJIT_PAIR_ODD_INTERLEAVED != 0)>
struct GroupTileCursor {
  static_assert(kBand >= 0, "tile band: M tiles per band, 0 = off");
  static_assert(kClass == kClassAll || kClassRows > 0, "a group class needs its row bound");
  int group = 0;
  int tiles_before = 0;  // tiles of groups [0, group)
  int group_tiles = -1;  // tiles of `group` (-1: not read yet)
  int row_begin = 0;
  int group_rows = 0;
  int m_tiles = 0;

  // First row and row count of group g. Clamped so that garbage offsets or counts can never
  // address memory outside A or C.
  __device__ __forceinline__ static void read_extent(const GroupedGemmParams& p, int g, int& first, int& rows) {
    if (kLayout == kLayoutContiguous) {
      first = min(max(__ldg(p.group_offsets + g), 0), p.total_rows);
      rows = min(max(__ldg(p.group_offsets + g + 1), first), p.total_rows) - first;
    } else {
      first = g * p.capacity;
      rows = min(max(__ldg(p.group_counts + g), 0), p.capacity);
    }
  }

  // M tiles of a group of `rows` rows (>= 0).
  __device__ __forceinline__ static int m_tiles_of(int rows) {
    if constexpr (kTailRows == 0) {
      return (int)(((unsigned)rows + kBlockM - 1) / kBlockM);
    } else {
      return (int)(((unsigned)(rows > kBlockM ? rows - kTailRows : rows) + kBlockM - 1) / kBlockM);
    }
  }

  // Tiles (or, kPairs, pair units) of a group of m M tiles and n_tiles N tiles.
  __device__ __forceinline__ static int units_of(int m, int n_tiles) {
    if constexpr (kPairs) return m / 2 * n_tiles + (m & 1) * ((n_tiles + 1) / 2);
    return m * n_tiles;
  }

  // Whether a group of `rows` rows belongs to this cursor's class.
  __device__ __forceinline__ static bool in_class(int rows) {
    if constexpr (kClass == kClassHeavy) return rows >= kClassRows;
    if constexpr (kClass == kClassLight) return rows < kClassRows;
    return true;
  }

  __device__ __forceinline__ void load_group(const GroupedGemmParams& p) {
    read_extent(p, group, row_begin, group_rows);
    // (Signed here, unsigned in seek_warp, as before the tail rows: the other kernels' SASS unchanged.)
    m_tiles = kTailRows == 0 ? (group_rows + kBlockM - 1) / kBlockM : m_tiles_of(group_rows);
    group_tiles = units_of(m_tiles, (p.n + kBlockN - 1) / kBlockN);
    if constexpr (kClass != kClassAll) group_tiles = in_class(group_rows) ? group_tiles : 0;
  }

  // One whole warp: the launch's tiles (units) of groups of at least `heavy_rows` rows, and of all
  // groups (MixedTileCursor's stream sizes). Lane l reads groups l, l + 32, ...
  __device__ __forceinline__ static void count_tiles(const GroupedGemmParams& p, int heavy_rows, int& heavy, int& total) {
    const int n_tiles = (p.n + kBlockN - 1) / kBlockN;
    int h = 0, t = 0;
    for (int g = (int)(threadIdx.x & 31u); g < p.num_groups; g += 32) {
      int first, rows;
      read_extent(p, g, first, rows);
      const int units = units_of(m_tiles_of(rows), n_tiles);
      t += units;
      h += rows >= heavy_rows ? units : 0;
    }
#pragma unroll
    for (int d = 16; d > 0; d /= 2) {
      h += __shfl_xor_sync(0xffffffffu, h, d);
      t += __shfl_xor_sync(0xffffffffu, t, d);
    }
    heavy = h, total = t;
  }

  // Finds the tile numbered `tile` (never smaller than the last one asked for).
  // Returns false past the last tile; `tiles_before` is then the total tile count.
  __device__ __forceinline__ bool seek(const GroupedGemmParams& p, int tile, TileCoord& out) {
    while (group < p.num_groups) {
      if (group_tiles < 0) load_group(p);
      if (tile < tiles_before + group_tiles) return found(p, tile, out);
      tiles_before += group_tiles;
      ++group;
      group_tiles = -1;
    }
    return false;
  }

  // seek() for a caller whose 32 lanes all ask for the same tile together (the FP8 and 4-bit
  // Hopper kernels' consumer warps and producer warp 0): past the current group the warp reads 32
  // groups' extents at once, one group per lane, and finds the tile's group with a prefix sum and a
  // ballot. At decode a CTA walks past nearly every group (128 for Qwen3): seek()'s one dependent
  // load per group was ~37% of the 4-bit decode kernel's consumer samples (docs/perf.md v12), and
  // in a one-thread producer 64% of its samples, so that the stages ran dry at each tile's start
  // (v13). The bf16 kernel keeps seek() in both roles (no gain measured: consumers 0.999-1.006x,
  // a producer warp 1.00x).
  __device__ __forceinline__ bool seek_warp(const GroupedGemmParams& p, int tile, TileCoord& out) {
    if (group < p.num_groups) {
      if (group_tiles < 0) load_group(p);
      if (tile < tiles_before + group_tiles) return found(p, tile, out);
      tiles_before += group_tiles;
      ++group;
      group_tiles = -1;
    }
    const int lane = (int)(threadIdx.x & 31u);
    const int n_tiles = (p.n + kBlockN - 1) / kBlockN;
    while (group < p.num_groups) {
      const int g = group + lane;
      int lo = 0, rows = 0;
      if (g < p.num_groups) read_extent(p, g, lo, rows);
      const int m = m_tiles_of(rows), tiles = in_class(rows) ? units_of(m, n_tiles) : 0;
      int through = tiles;  // tiles of groups group .. g
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int v = __shfl_up_sync(0xffffffffu, through, d);
        if (lane >= d) through += v;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, tile < tiles_before + through);
      if (hit != 0u) {
        const int first = __ffs(hit) - 1;  // lanes past the last group add no tiles: never first
        group += first;
        tiles_before += __shfl_sync(0xffffffffu, through - tiles, first);
        row_begin = __shfl_sync(0xffffffffu, lo, first);
        group_rows = __shfl_sync(0xffffffffu, rows, first);
        m_tiles = __shfl_sync(0xffffffffu, m, first);
        group_tiles = __shfl_sync(0xffffffffu, tiles, first);
        return found(p, tile, out);
      }
      tiles_before += __shfl_sync(0xffffffffu, through, 31);
      group += 32;
    }
    group = p.num_groups;
    return false;
  }

 private:
  __device__ __forceinline__ bool found(const GroupedGemmParams& p, int tile, TileCoord& out) const {
    const int local = tile - tiles_before;
    out.group = group;
    // The rectangle of M x N units found() walks: the group's M tiles, or (kPairs) its pairs of them,
    // whose units come before its odd last M tile's.
    int rect_m = m_tiles, rect_units = group_tiles;
    if constexpr (kPairs) {
      rect_m = m_tiles / 2;
      const int n_tiles = (p.n + kBlockN - 1) / kBlockN;
      rect_units = rect_m * n_tiles;
      if (kOddInterleaved && kBand == 0 && (m_tiles & 1)) {
        // pair_order=interleaved, an odd M-tile count: each two N tiles' pair units (M fastest),
        // then the odd last M tile's unit of the same two N tiles, which so finds their B tiles
        // still in L2. In the plain order it came after all of the group's pair units and read B
        // from DRAM again (bf16 2x1 on the dynamic scheduler, DeepSeek-V3 up at 320 rows per expert:
        // 28.3 against 17.4 GB of DRAM reads, 0.76x the cycles interleaved; docs/perf.md v49). Per
        // launch (a spec field), because where a group's B fits L2 it cost up to 3.6% (gpt-oss down
        // 16384, v48), and on the dynamic scheduler only: on the static one each CTA pair takes the
        // same place in every group's cycle of 2 x pairs + 1 units (FP8: 1.04-1.08x). An even count
        // keeps the plain order (the two coincide there).
        const int width = 2 * rect_m + 1, c = local / width, r = local - c * width;
        if (r < rect_m * min(2, n_tiles - 2 * c)) {
          out.m_block = r % rect_m;
          out.n_block = 2 * c + r / rect_m;
        } else {
          out.m_block = rect_m;  // the last M tile's unit c (pair_unit_tile)
          out.n_block = c;
        }
        out.row_begin = row_begin;
        out.group_rows = group_rows;
        return true;
      }
      if (local >= rect_units) {
        out.m_block = rect_m;  // the last M tile's unit local - rect_units (pair_unit_tile)
        out.n_block = local - rect_units;
        out.row_begin = row_begin;
        out.group_rows = group_rows;
        return true;
      }
    }
    if constexpr (kBand == 0) {
      out.m_block = local % rect_m;
      out.n_block = local / rect_m;
    } else {
      // Band b holds M tiles [b kBand, b kBand + band_m) x every N tile; the last band may be short.
      const int band_tiles = kBand * (rect_units / rect_m);
      const int band = local / band_tiles, in_band = local - band * band_tiles;
      const int band_m = min(kBand, rect_m - band * kBand);
      out.m_block = band * kBand + in_band % band_m;
      out.n_block = in_band / band_m;
    }
    out.row_begin = row_begin;
    out.group_rows = group_rows;
    return true;
  }
};

// The mixed tile order (MOEJIT_TILE_MIX_ROWS > 0): tile t of the launch is heavy when
// floor((t + 1) H / T) > floor(t H / T) (H heavy of T tiles), and then the heavy stream's tile
// floor(t H / T), else the light stream's tile t - floor(t H / T). A bijection onto both streams for
// any H <= T, and each stream's index grows with t, so the two forward-only cursors stay forward-only
// and every CTA's rounds hold heavy and light tiles in proportion. Same interface as GroupTileCursor
// for the kernels: seek(), and tiles_before (the launch's tile count once seek() returns false).
// set_totals() first, with count_tiles()'s sums (the same on every CTA: from the group offsets).
template <int kLayout, int kBlockM, int kBlockN, int kTailRows, int kBand, bool kPairs, int kMixRows>
struct MixedTileCursor {
  static_assert(kMixRows > 0, "the mixed order needs its heavy-group row bound");
  using All = GroupTileCursor<kLayout, kBlockM, kBlockN, kTailRows, kBand, kPairs>;
  GroupTileCursor<kLayout, kBlockM, kBlockN, kTailRows, kBand, kPairs, kClassHeavy, kMixRows> heavy;
  GroupTileCursor<kLayout, kBlockM, kBlockN, kTailRows, kBand, kPairs, kClassLight, kMixRows> light;
  int heavy_tiles = 0;
  int tiles_before = 0;  // the launch's tiles (units): what GroupTileCursor holds after its last group

  __device__ __forceinline__ void set_totals(int heavy_total, int total) {
    heavy_tiles = heavy_total;
    tiles_before = total;
  }

  __device__ __forceinline__ bool seek(const GroupedGemmParams& p, int tile, TileCoord& out) {
    if (tile >= tiles_before) return false;
    int h;
    bool is_heavy;
    split(tile, h, is_heavy);
    return is_heavy ? heavy.seek(p, h, out) : light.seek(p, tile - h, out);
  }

  // seek() for a whole warp asking for the same tile (the FP8 kernel's roles: GroupTileCursor::seek_warp).
  __device__ __forceinline__ bool seek_warp(const GroupedGemmParams& p, int tile, TileCoord& out) {
    if (tile >= tiles_before) return false;
    int h;
    bool is_heavy;
    split(tile, h, is_heavy);
    return is_heavy ? heavy.seek_warp(p, h, out) : light.seek_warp(p, tile - h, out);
  }

 private:
  // h = floor(tile H / T); the tile is heavy when the remainder r gives floor((tile + 1) H / T) > h,
  // i.e. r + H >= T. One 32-bit division up to 65535 tiles (tile H < 2^32), 64-bit beyond.
  __device__ __forceinline__ void split(int tile, int& h, bool& is_heavy) const {
    if (tiles_before <= 65535) {
      const unsigned x = (unsigned)tile * (unsigned)heavy_tiles, q = x / (unsigned)tiles_before;
      h = (int)q;
      is_heavy = x - q * (unsigned)tiles_before + (unsigned)heavy_tiles >= (unsigned)tiles_before;
    } else {
      const long long x = (long long)tile * heavy_tiles, q = x / tiles_before;
      h = (int)q;
      is_heavy = x - q * tiles_before + heavy_tiles >= tiles_before;
    }
  }
};


// The kernels' cursor type: GroupTileCursor, or MixedTileCursor where the spec mixes the tile order.
template <int kLayout, int kBlockM, int kBlockN, int kTailRows, int kBand, bool kPairs, int kMixRows = MOEJIT_TILE_MIX_ROWS,
          bool kMixed = (kMixRows > 0)>
struct TileCursorFor {
  using type = GroupTileCursor<kLayout, kBlockM, kBlockN, kTailRows, kBand, kPairs>;
};
template <int kLayout, int kBlockM, int kBlockN, int kTailRows, int kBand, bool kPairs, int kMixRows>
struct TileCursorFor<kLayout, kBlockM, kBlockN, kTailRows, kBand, kPairs, kMixRows, true> {
  using type = MixedTileCursor<kLayout, kBlockM, kBlockN, kTailRows, kBand, kPairs, kMixRows>;
};

// Rank `rank`'s tile of a CTA-pair unit (GroupTileCursor<..., kPairs = true>, kBlockM-row M tiles,
// n_tiles N tiles): M tile 2i + rank of the unit's pair at its N tile, sharing B with the peer
// (returns true: multicast), or, for a unit of the group's odd last M tile, that tile at N tile
// 2j + rank (returns false: each CTA loads its own B). A rank whose N tile lies past the last gets
// the last one's coordinates and a group_rows of 0: it loads valid memory, multiplies nothing
// and stores nothing. Both ranks decide alike (the same unit, the same group). kTailRows: the
// cursor's (a group's last M tile may hold up to kTailRows more rows).
template <int kBlockM, int kTailRows = 0>
__device__ __forceinline__ bool pair_unit_tile(TileCoord& tile, int rank, int n_tiles) {
  const int m_tiles = kTailRows == 0 ? (tile.group_rows + kBlockM - 1) / kBlockM
                                     : GroupTileCursor<kLayoutContiguous, kBlockM, 1, kTailRows>::m_tiles_of(tile.group_rows);
  if (2 * tile.m_block + 1 < m_tiles) {
    tile.m_block = 2 * tile.m_block + rank;
    return true;
  }
  tile.m_block = m_tiles - 1;
  const int n = 2 * tile.n_block + rank;
  if (n >= n_tiles) tile.group_rows = 0;
  tile.n_block = min(n, n_tiles - 1);
  return false;
}

// Dynamic scheduler: every CTA's final fetch lands past the last tile, so exactly
// gridDim.x fetches return values >= total; the one that returns total + gridDim.x - 1
// is the last fetch of the launch and resets the counter for the next launch
// (no memset between launches, CUDA-graph friendly).
__device__ __forceinline__ int fetch_next_tile(int* counter) { return atomicAdd(counter, 1); }

__device__ __forceinline__ void release_tile_counter(int* counter, int fetched, int total_tiles) {
  if (fetched == total_tiles + (int)gridDim.x - 1) atomicExch(counter, 0);
}

}  // namespace moejit
