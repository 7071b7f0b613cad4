// split=tail: the K range of the last, partial wave's tiles is cut into pieces, one per CTA.
//
// A persistent launch of T tiles on G CTAs runs ceil(T / G) rounds of whole tiles; when the last
// round holds R tiles with R <= G / 2, G - R CTAs idle through it (Mixtral down 1024: ~320 tiles of
// 128x256 and K = 14336 on 132 SMs, 2.4 rounds of 224 k-blocks each take the time of 3). The host
// (src/runtime, plan_split_tail) sees the exact tile count and cuts each of those R tiles into S
// pieces of K, R * S <= G, so the last round takes 1/S of a tile's time.
//
// Work units: [0, split_from) are whole tiles; the next split_tiles * split_count units are the
// pieces (tile split_from + v / S, K blocks of piece v % S); later units are whole tiles again (only
// when the device's groups hold more tiles than the host counted: never out of the workspace).
// Unit numbers only grow with tile numbers, so GroupTileCursor's forward-only walk still applies.
//
// The pieces' partial sums meet in common/split_exchange.cuh. This file is plain C++ apart from
// the __device__ qualifiers: tests/test_split_schedule.cpp checks it on the host.
#pragma once
#include "moejit/params.cuh"

namespace moejit {

struct SplitUnit {
  int tile;
  int kb_begin;  // K blocks [kb_begin, kb_end) of the tile
  int kb_end;
  int piece;     // -1: the whole tile; else the piece's workspace slot, [0, split_tiles * split_count)
};

// Splitting is on when the host asked for at least two pieces per tile and every piece gets at
// least one K block (K == 0 or garbage counts fall back to whole tiles).
__device__ __forceinline__ bool split_enabled(const GroupedGemmParams& p, int num_k_blocks) {
  return p.split_count >= 2 && p.split_count <= num_k_blocks && p.split_tiles > 0;
}

__device__ __forceinline__ SplitUnit split_unit(const GroupedGemmParams& p, int unit, int num_k_blocks) {
  SplitUnit u{unit, 0, num_k_blocks, -1};
  const int v = unit - p.split_from;
  if (!split_enabled(p, num_k_blocks) || v < 0) return u;
  const int pieces = p.split_tiles * p.split_count;
  if (v >= pieces) {
    u.tile = unit - p.split_tiles * (p.split_count - 1);
    return u;
  }
  const int piece_of_tile = v % p.split_count;
  u.tile = p.split_from + v / p.split_count;
  u.kb_begin = piece_of_tile * num_k_blocks / p.split_count;
  u.kb_end = (piece_of_tile + 1) * num_k_blocks / p.split_count;
  u.piece = v;
  return u;
}

// Units of a launch whose groups hold `tiles` tiles (the dynamic scheduler's end of work).
__device__ __forceinline__ int split_unit_count(const GroupedGemmParams& p, int tiles, int num_k_blocks) {
  if (!split_enabled(p, num_k_blocks)) return tiles;
  return tiles + min(max(tiles - p.split_from, 0), p.split_tiles) * (p.split_count - 1);
}

}  // namespace moejit
