// Persistent tile scheduling over all groups of a grouped GEMM.
//
// Tiles are numbered group by group; inside a group, M blocks vary fastest so that
// CTAs running at the same time share one N block of B (its tile stays in L2).
// A CTA only ever asks for increasing tile numbers (static: blockIdx.x + i*gridDim.x;
// dynamic: an atomic counter), so a forward-only cursor over the groups finds each
// tile's group in amortized O(1) and works for any number of groups without shared memory.
#pragma once
#include "moejit/params.cuh"

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

template <int kLayout, int kBlockM, int kBlockN>
struct GroupTileCursor {
  int group = 0;
  int tiles_before = 0;  // tiles of groups [0, group)
  int group_tiles = -1;  // tiles of `group` (-1: not read yet)
  int row_begin = 0;
  int group_rows = 0;
  int m_tiles = 0;

  __device__ __forceinline__ void load_group(const GroupedGemmParams& p) {
    if (kLayout == kLayoutContiguous) {
      // Clamp so that garbage offsets can never address memory outside A or C.
      int lo = min(max(__ldg(p.group_offsets + group), 0), p.total_rows);
      int hi = min(max(__ldg(p.group_offsets + group + 1), lo), p.total_rows);
      row_begin = lo;
      group_rows = hi - lo;
    } else {
      int count = __ldg(p.group_counts + group);
      row_begin = group * p.capacity;
      group_rows = min(max(count, 0), p.capacity);
    }
    m_tiles = (group_rows + kBlockM - 1) / kBlockM;
    group_tiles = m_tiles * ((p.n + kBlockN - 1) / kBlockN);
  }

  // Finds the tile numbered `tile` (never smaller than the last one asked for).
  // Returns false past the last tile; `tiles_before` is then the total tile count.
  __device__ __forceinline__ bool seek(const GroupedGemmParams& p, int tile, TileCoord& out) {
    while (group < p.num_groups) {
      if (group_tiles < 0) load_group(p);
      if (tile < tiles_before + group_tiles) {
        int local = tile - tiles_before;
        out.group = group;
        out.m_block = local % m_tiles;
        out.n_block = local / m_tiles;
        out.row_begin = row_begin;
        out.group_rows = group_rows;
        return true;
      }
      tiles_before += group_tiles;
      ++group;
      group_tiles = -1;
    }
    return false;
  }
};

// Dynamic scheduler: every CTA's final fetch lands past the last tile, so exactly
// gridDim.x fetches return values >= total; the one that returns total + gridDim.x - 1
// is the last fetch of the launch and resets the counter for the next launch
// (no memset between launches, CUDA-graph friendly).
__device__ __forceinline__ int fetch_next_tile(int* counter) { return atomicAdd(counter, 1); }

__device__ __forceinline__ void release_tile_counter(int* counter, int fetched, int total_tiles) {
  if (fetched == total_tiles + (int)gridDim.x - 1) atomicExch(counter, 0);
}

}  // namespace moejit
