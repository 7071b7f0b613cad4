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
#pragma once
#include "moejit/params.cuh"

#ifndef MOEJIT_TILE_BAND
#define MOEJIT_TILE_BAND 0
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
template <int kLayout, int kBlockM, int kBlockN, int kTailRows = 0, int kBand = MOEJIT_TILE_BAND, bool kPairs = false>
struct GroupTileCursor {
  static_assert(kBand >= 0, "tile band: M tiles per band, 0 = off");
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

  __device__ __forceinline__ void load_group(const GroupedGemmParams& p) {
    read_extent(p, group, row_begin, group_rows);
    // (Signed here, unsigned in seek_warp, as before the tail rows: the other kernels' SASS unchanged.)
    m_tiles = kTailRows == 0 ? (group_rows + kBlockM - 1) / kBlockM : m_tiles_of(group_rows);
    group_tiles = units_of(m_tiles, (p.n + kBlockN - 1) / kBlockN);
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
      const int m = m_tiles_of(rows), tiles = units_of(m, n_tiles);
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
      rect_units = rect_m * ((p.n + kBlockN - 1) / kBlockN);
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
