// Weight-only 4-bit (MXFP4 or NVFP4) grouped GEMM for Hopper, roles swapped: C^T = W x A^T.
// The widened weights are wgmma's A operand straight from registers, the BF16 activations its
// B operand from shared memory (TMA, 128-byte swizzle), so the weights never make a round trip
// through shared memory as BF16 and no fence or barrier sits between widening and MMA. N (weight
// rows) fills the MMA's 64-row side, which suits decode, where a group has few tokens.
//
// MXFP4 and NVFP4 through the Runtime (spec b=mxfp4|nvfp4): every [w4] GPU test passes on the H100.
//
// Weights are pre-arranged offline (fragment order; moejit::pack_w4_sm90 in formats.hpp makes it)
// so that each consumer thread's bytes of a stage are 16 contiguous bytes of codes and 4 (MXFP4)
// or 8 (NVFP4) of scales, the latter shared by the four threads of a quad (they multiply the same
// rows). Block (group g, weight rows 128 nb.., K 64 kb..) is 4352 (MXFP4) or 4608 (NVFP4)
// contiguous bytes, blocks ordered [g][ceil(N/128)][ceil(K/64)], each 128-row run of K blocks
// after a header (common/w4_layout.cuh: MXFP4 one exponent byte per row, NVFP4 none):
//   [consumer w 0..1][thread t 0..127][16 B codes]   then   [w][quad t / 4: 0..31][4 or 8 B scales]
// With warp = t / 32, lane = t % 32, r0 = 128 nb + 64 w + 16 warp + lane / 4, r1 = r0 + 8,
// c = lane % 4: code pair 4 kk + i (k step kk = 0..3 of 16) holds the two E2M1 codes (A = lower
// K) of row {r0, r1, r0, r1}[i] at K = 64 kb + 16 kk + 2c + {0, 0, 8, 8}[i] (+0, +1); the four
// pairs of word kk are bit-scattered (common/w4_layout.cuh) for a rotate-and-mask widening.
// MXFP4 scale byte j (0..3): row {r0, r1}[j % 2], 32-block 2 kb + j / 2: the E8M0 scale minus the
// row's exponent (0..128; 129 marks a NaN block, whose codes are 0); the row's sums are multiplied
// by 2^exponent before C is rounded.
// NVFP4 scale byte j (0..7): E4M3 of row {r0, r1}[j % 2], 16-block 4 kb + j / 2; the expert's
// fp32 tensor scale (GroupedGemmParams::scale_b_tensor[g]) multiplies the FP32 accumulator once,
// before C is rounded (code x block scale is exact in BF16: 2 x 4 significant bits).
// Rows past N and K past the end are zero codes (MXFP4 scale 127, NVFP4 scale 0).
#pragma once
#include "moejit/params.cuh"
#include "moejit/common/types.cuh"
#include "moejit/common/scheduler.cuh"
#include "moejit/common/fusion.cuh"
#include "moejit/common/w4_layout.cuh"
#include "moejit/common/split_exchange.cuh"
#include "moejit/hopper/smem.cuh"
#include "moejit/hopper/mbarrier.cuh"
#include "moejit/hopper/tma.cuh"
#include "moejit/hopper/gather.cuh"
#include "moejit/hopper/wgmma.cuh"
#include "moejit/hopper/warpgroup.cuh"
#include "moejit/hopper/tile_ring.cuh"
#include "moejit/hopper_w4/e2m1.cuh"
#include "moejit/hopper_w4/wgmma_rs_ops.cuh"

namespace moejit::hopper {

// Bytes of one pre-arranged block: 4096 of codes (128 rows x 64 K) + one scale byte per 32 (MXFP4)
// or per 16 (NVFP4) K of each row.
template <int kFormat>
__host__ __device__ constexpr unsigned w4_block_bytes() {
  return static_cast<unsigned>(w4_sm90_block_bytes(kFormat == kNVFP4));
}

// Plain (non-tensor) bulk copy of `bytes` contiguous bytes into shared memory, completing on an mbarrier.
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// The same with an L2 cache policy (createpolicy) on the copy's lines.
__device__ __forceinline__ void bulk_load_hinted(unsigned dst, const void* src, unsigned bytes, unsigned bar,
                                                 unsigned long long policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
__device__ __forceinline__ unsigned long long l2_evict_first_policy() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Fused epilogue of the roles-swapped accumulator, stored from registers (16- to 64-token tiles;
// w4_fused_store_staged below for 128 and 256; docs/design.md, "Fusions"). The accumulator is
// C transposed: register 4j + 2h + e holds GEMM column (weight row) n_base + 8h and token (routed
// row inside the group) token_base + 8j + e, so a thread's registers share 2 columns and spread
// over tokens -- the opposite of the bf16 kernel's rows-in-lanes layout, hence this mapping
// rather than hopper/fused_epilogue.cuh. Per element: + bias[g][column] -> activation ->
// x routing_weights[row] -> C[row or scatter_rows[row]][column]. Interleaved GLU: gate = even column,
// up = the next one, which is the same register of lane ^ 4 (quad row lane/4 + 1); one shuffle
// per register pair gives the even-row lane its up (its h = 0 pair) and the odd-row lane its gate
// (its h = 1 pair), so each lane writes one output column: (n_base + 7 odd) / 2.
template <int kTypeC, class Fuse, int kAccRegs>
__device__ __forceinline__ void w4_fused_store(const GroupedGemmParams& p, const FusionParams& f, const float (&acc)[kAccRegs],
                                               const TileCoord& tile, int n_base, int token_base, int lane) {
  using T = typename StorageOf<kTypeC>::type;
  T* const c = static_cast<T*>(p.c);
  const int n = p.n;
  const int n_out = Fuse::glu ? n / 2 : n;
  float bias[2] = {0.f, 0.f};
  if constexpr (Fuse::bias) {
#pragma unroll
    for (int h = 0; h < 2; ++h) bias[h] = bias_at(f, tile.group, n, n_base + 8 * h);
  }
  const bool odd = ((lane / 4) & 1) != 0;  // GLU: this lane's columns are the up halves of h = 0 pairs
#pragma unroll
  for (int j = 0; j < kAccRegs / 4; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int token = token_base + 8 * j + e;
      const bool in_group = token < tile.group_rows;
      const long long routed = (long long)tile.row_begin + token;
      float w = 1.f;
      if constexpr (Fuse::weight) w = in_group ? __ldg(f.routing_weights + routed) : 0.f;
      long long out_row = routed;
      bool row_ok = in_group;
      if constexpr (Fuse::scatter) {
        const int to = in_group ? __ldg(f.scatter_rows + routed) : -1;
        row_ok = (unsigned)to < (unsigned)f.num_out_rows;  // out of range (padding rows: -1): not written
        out_row = to;
      }
      const float v0 = acc[4 * j + e] + bias[0], v1 = acc[4 * j + 2 + e] + bias[1];
      if constexpr (Fuse::glu) {
        const float received = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 4);  // every lane, no divergence
        const float gate = odd ? received : v0;
        const float up = odd ? v1 : received;
        const int gate_col = n_base + (odd ? 7 : 0);  // even
        const float out = activate_glu<Fuse::act>(gate, up) * w;
        if (row_ok && gate_col < n) c[out_row * n_out + gate_col / 2] = (T)to_half_bits<kTypeC>(out);
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = n_base + 8 * h;
          const float out = activate<Fuse::act>(h ? v1 : v0) * w;
          if (row_ok && col < n) c[out_row * n_out + col] = (T)to_half_bits<kTypeC>(out);
        }
      }
    }
  }
}

// Stores one 64-row slice of the roles-swapped accumulator (register 4j + 2h + e: weight row
// n_base + 8h, token token_base + 8j + e of the group) to C [rows][N]; rows past N or the group are
// not written. Lanes lane and lane^4 hold adjacent columns at the same tokens: one shuffle per
// register pair gives the even column's lane token t's two columns and its partner token t+1's, so
// each store writes a column pair (4 bytes) instead of one element (half the store instructions;
// the consumers store while the tensor cores wait, most of a tile's time where K is short).
template <int kTypeC, int kAccRegs>
__device__ __forceinline__ void w4_store(const GroupedGemmParams& p, const float (&acc)[kAccRegs], const TileCoord& tile,
                                         int n_base, int token_base, int lane) {
  static_assert(kTypeC == kBF16 || kTypeC == kF16, "the Hopper 4-bit kernel writes 16-bit C");
  unsigned short* const c = static_cast<unsigned short*>(p.c);
  const bool odd = (lane >> 2) & 1;  // this lane holds the odd column of the pair
  const int col = n_base - (odd ? 1 : 0);
  // Pair stores need an even N (both columns of a pair inside N or both past it) and C aligned to 4
  // bytes: every launch validates N % 8 == 0 and a 16-byte C (runtime/validate.cpp). (A
  // single-element fallback for odd N stood here through v19; no launch could reach it.)
#pragma unroll
  for (int j = 0; j < kAccRegs / 4; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float mine0 = acc[4 * j + 2 * h], mine1 = acc[4 * j + 2 * h + 1];
      const float got = __shfl_xor_sync(0xffffffffu, odd ? mine0 : mine1, 4);
      const int token = token_base + 8 * j + (odd ? 1 : 0);
      const unsigned pair = pack_pair<kTypeC>(odd ? got : mine0, odd ? mine1 : got);
      unsigned short* const at = c + static_cast<long long>(tile.row_begin + token) * p.n + col + 8 * h;
      // Inline PTX: the mask stays a predicate instead of a branch per store (compile time).
      asm volatile("{\n.reg .pred t, q;\nsetp.ne.b32 t, %4, 0;\nsetp.lt.and.s32 q, %2, %3, t;\n@q st.global.b32 [%0], %1;\n}\n" ::"l"(
                       __cvta_generic_to_global(at)),
                   "r"(pair), "r"(col + 8 * h), "r"(p.n), "r"((int)(token < tile.group_rows))
                   : "memory");
    }
  }
}

// Copies 128 staged C rows (a pass's tokens) out to global memory in 16-byte pieces: row r holds
// kCols 16-bit columns from C column col0 at `staging` + r x 144. A warp's store covers 32 x 16
// bytes of whole rows (4 rows of 64 columns, 8 of 32). out_row(r, r / 32, to) sets the C row of
// the pass's row r and says whether it is written (not past the group, not a scatter padding
// row); r / 32 is a constant once unrolled. The Runtime requires C aligned to 16 and
// n_out % 8 == 0, so a piece is wholly inside n_out or past it.
// kSwizzled64 (32 columns for a TMA store, w4_fused_store_staged): rows 64 bytes apart, 16-byte unit
// u of row r at u ^ (r / 2 % 4) (the 64-byte swizzle).
template <int kCols, class OutRow, bool kSwizzled64 = false>
__device__ __forceinline__ void w4_copy_out_staged(const GroupedGemmParams& p, int n_out, int col0, unsigned staging,
                                                   int t, OutRow out_row) {
  static_assert(!kSwizzled64 || kCols == 32, "the 64-byte swizzled staging holds 32 columns");
  constexpr int kRowBytes = kSwizzled64 ? 64 : w4_sm90_c_staging_row_bytes();
  constexpr int kPieces = kCols / 8;        // 16-byte pieces per staged row
  constexpr int kRowsPerStep = 128 / kPieces;
  const int piece = t % kPieces;
  const bool piece_in_n = col0 + 8 * piece < n_out;
  uint4* const c_piece = reinterpret_cast<uint4*>(static_cast<unsigned short*>(p.c) + col0 + 8 * piece);
  const long long row_pieces = n_out / 8;  // C's row stride in 16-byte pieces
#pragma unroll
  for (int i = 0; i < kPieces; ++i) {
    const int row = t / kPieces + kRowsPerStep * i;  // t / kPieces < kRowsPerStep: row / 32 is kRowsPerStep * i / 32
    int to;
    const bool row_ok = out_row(row, kRowsPerStep * i / 32, to);
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(staging + row * kRowBytes + (kSwizzled64 ? (piece ^ ((row >> 1) & 3)) : piece) * 16));
    if (piece_in_n && row_ok) c_piece[to * row_pieces] = v;
  }
}

// Stores one consumer's 64-column slice of a 128- or 256-token tile without epilogue fusions through
// shared memory. The accumulator is C transposed (register 4j + 2h + e: C column n_base + 8h, token
// 8j + 2(lane%4) + e), which is exactly stmatrix's m8n8 fragment with weight rows as the matrix
// rows; .trans writes each matrix with tokens as its rows, so the staging holds C rows (tokens) of
// 64 columns: dense 128-byte rows with the 128-byte swizzle (16-byte unit u of row r at u ^ (r % 8):
// the 8 rows of a matrix land on 8 bank quads). A pass (128 tokens) whose rows all lie inside the
// group goes to C by one TMA store (C's map: 128-row x 64-column boxes; the map clips columns past
// N), so that the warpgroup goes on to the next tile while the copy engine writes; a pass over the
// group's end is copied by the threads, per row. Thread 0 of the warpgroup issues the stores and,
// before the staging is written again, waits until they have read it; `staging` is 1024-byte
// aligned (the swizzle atom). Barrier `barrier_id` (128 threads) orders each pass's reads before
// the next pass's writes and these writes before the reads. kDoubleStaged (256-token tiles,
// w4_sm90_c_double_staged): pass h writes buffer h of two 16 KB ones, so the second pass waits only
// for stores before the first pass's (the previous tile's, issued a k-loop ago). (A buffer index
// carried from tile to tile instead changed the MXFP4 k-loop's schedule: 1.027x its cycles.)
// Why: stored from registers, the transposed layout wrote 8 half sectors per store instruction and
// the epilogue took 8-28% of the prefill kernels' time (docs/perf.md v18: staged, copied out by the
// threads, 0.95-0.96x); by TMA, MXFP4 at 4096/16384 tokens 0.98x, Qwen3 down 16384 (K = 768) 0.91x (v24).
template <int kTypeC, int kAccRegs, bool kDoubleStaged = false>
__device__ __forceinline__ void w4_store_staged(const GroupedGemmParams& p, const TmaDescriptor& tma_c,
                                                const float (&acc)[kAccRegs], const TileCoord& tile, int col0, int token0,
                                                unsigned staging_base, int t, int barrier_id) {
  constexpr int kHalves = kAccRegs / 64;  // 128 tokens per pass through the staging
  static_assert(kAccRegs % 64 == 0, "staged epilogue: 128 or 256 tokens");
  static_assert(!kDoubleStaged || kHalves == 2, "double staging: two passes per tile");
  const int warp = t / 32, lane = t % 32;
  const int matrix = lane / 8;  // stmatrix x4: lanes 8i..8i+7 give matrix i's row addresses
  // Matrix i of an x4: token group j + (i >> 1) (rows), 16-byte unit 2 warp + (i & 1) of the row.
  const unsigned my_row_offset = ((matrix >> 1) * 8 + lane % 8) * 128 + (((2 * warp + (matrix & 1)) ^ (lane % 8)) * 16);
  bool first_pass_stored = false;  // by TMA (uniform over the warpgroup)
#pragma unroll
  for (int half = 0; half < kHalves; ++half) {
    const int buffer = kDoubleStaged ? half : 0;
    const unsigned staging = staging_base + buffer * (128 * 128);
    const unsigned my_row = staging + my_row_offset;
    if (t == 0) {
      // Double-staged second pass after a first pass stored by TMA: that store reads the other buffer.
      if (kDoubleStaged && half == 1 && first_pass_stored)
        tma_store_wait_read<1>();
      else
        tma_store_wait_read<0>();
    }
    named_barrier_sync<128>(barrier_id);  // the previous pass's stores (TMA or threads) have read the staging
#pragma unroll
    for (int j = 16 * half; j < 16 * half + 16; j += 2) {
      asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(
                       my_row + (j - 16 * half) * 8 * 128),
                   "r"(pack_pair<kTypeC>(acc[4 * j], acc[4 * j + 1])), "r"(pack_pair<kTypeC>(acc[4 * j + 2], acc[4 * j + 3])),
                   "r"(pack_pair<kTypeC>(acc[4 * j + 4], acc[4 * j + 5])), "r"(pack_pair<kTypeC>(acc[4 * j + 6], acc[4 * j + 7]))
                   : "memory");
    }
    const int first = token0 + 128 * half;  // the pass's first group-local token
    if (first + 128 <= tile.group_rows) {   // uniform over the warpgroup
      fence_proxy_async_shared();
      named_barrier_sync<128>(barrier_id);
      if (t == 0) {
        tma_store_2d(tma_c, staging, col0, tile.row_begin + first);
        tma_store_commit();
      }
      first_pass_stored = half == 0;
    } else {
      named_barrier_sync<128>(barrier_id);
      // 8 consecutive threads copy one row's 8 units; rows past the group (or all of them, for a
      // 256-token tile's second pass past it) are not written. Unrolled with masked stores: a
      // not-unrolled loop bounded by the group made ptxas serialize the MXFP4 128-token dynamic
      // kernel's wgmmas (C7511).
      const int unit = t % 8;
      const bool unit_in_n = col0 + unit * 8 < p.n;
      uint4* const c_unit = reinterpret_cast<uint4*>(static_cast<unsigned short*>(p.c) + col0 + unit * 8);
      const long long row_units = p.n / 8;  // C's row stride in 16-byte units
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int r = t / 8 + 16 * i;  // r % 8 == (t / 8) % 8
        uint4 v;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(staging + r * 128 + ((unit ^ (r % 8)) * 16)));
        if (unit_in_n && first + r < tile.group_rows) c_unit[(tile.row_begin + first + r) * row_units] = v;
      }
    }
  }
}

// The C rows and routing weights of a staged pass's 128 tokens (w4_fused_store_staged), lane l
// holding token token0 + 32 s + l's in [s]: its C row (routed, or scattered; -1: not written) and
// routing weight (0 past the group). Shuffles hand them to the lanes that use them. Why: 32
// weights per thread and pass held in registers beside 256 tokens' accumulators spilled, and the
// first pass's loads, issued after the k-loop, cost Qwen3's GEMM2 (K = 768) 5-7% over the
// register stores (docs/perf.md v19); the kernel loads the first pass before its k-loop.
template <class Fuse>
struct W4PassRows {
  int rows[4];
  float weights[4];
  __device__ __forceinline__ void load(const FusionParams& f, const TileCoord& tile, int token0, int lane) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const int token = token0 + 32 * s + lane;
      const bool in_group = token < tile.group_rows;
      const int routed = tile.row_begin + token;
      if constexpr (Fuse::scatter) {
        const int to = in_group ? __ldg(f.scatter_rows + routed) : -1;
        rows[s] = (unsigned)to < (unsigned)f.num_out_rows ? to : -1;  // padding rows (-1) are not written
      } else {
        rows[s] = in_group ? routed : -1;
      }
      if constexpr (Fuse::weight) weights[s] = in_group ? __ldg(f.routing_weights + routed) : 0.f;
    }
  }
  // Token group j's (0..15) token e of this lane (w4_fused_store's register 4j + 2h + e).
  __device__ __forceinline__ float weight(int j, int e, int lane) const {
    return __shfl_sync(0xffffffffu, weights[j / 4], 8 * (j % 4) + 2 * (lane % 4) + e);
  }
  // Staged row `row` (s = row / 32): w4_copy_out_staged's out_row.
  __device__ __forceinline__ bool row(int row, int s, int& to) const {
    to = __shfl_sync(0xffffffffu, rows[s], row % 32);
    return to >= 0;
  }
};

// Fused 128- and 256-token kernels whose staged C goes out by TMA stores: a GLU (32 output columns
// per consumer slice, 64-byte rows) without scatter, whose C rows are the routed rows in place (the
// layers' GEMM1, gathered or not). Scattered rows (GEMM2) are copied by the threads.
template <class Fuse>
__host__ __device__ constexpr bool w4_fused_tma_store() {
  return Fuse::glu && !Fuse::scatter;
}

// The fused epilogue (w4_fused_store's math) of a 128- or 256-token tile, stored through the
// staging (rows 144 bytes apart here, w4_sm90_c_staging_row_bytes; the threads copy them out):
// bias, activation and routing weight are applied in registers, then
// - no GLU: the 64 columns go through stmatrix.trans as in w4_store_staged;
// - interleaved GLU: each lane holds one output column (gate/up pair, w4_fused_store) of its
//   tokens; one shuffle puts output column r of the warp's 8 on lanes 4r..4r+3, which makes the
//   pairs of tokens (e = 0, 1) stmatrix's m8n8 fragment again (.trans: tokens as rows), so the
//   staging holds 32 output columns per token row.
// The copy-out writes each row to its scattered row with fuse=scatter (padding rows, -1, and rows
// past the group are not written). Why: the register stores of the transposed accumulator wrote
// half sectors, as in the unfused kernel (docs/perf.md v18, v19).
// kTmaGlu (a GLU without scatter: the layers' GEMM1; w4_fused_tma_store): the staging holds dense
// 64-byte rows with the 64-byte swizzle instead, and a pass whose 128 rows lie inside the group goes
// to C by one TMA store of 128 rows x 32 columns (C's map: tma_c), as in w4_store_staged; a pass over
// the group's end is copied by the threads. Thread 0 waits until the previous pass's store has read
// the staging before it is written again.
template <int kTypeC, class Fuse, int kAccRegs, bool kTmaGlu = false>
__device__ __forceinline__ void w4_fused_store_staged(const GroupedGemmParams& p, const FusionParams& f,
                                                      const TmaDescriptor& tma_c, const float (&acc)[kAccRegs],
                                                      const TileCoord& tile, int col0, int token0,
                                                      const W4PassRows<Fuse>& first_pass, unsigned staging, int t,
                                                      int barrier_id) {
  static_assert(!kTmaGlu || (Fuse::glu && !Fuse::scatter), "TMA stores: a GLU's rows in place (no scatter)");
  constexpr int kRowBytes = w4_sm90_c_staging_row_bytes();
  constexpr int kHalves = kAccRegs / 64;  // 128 tokens per pass through the staging
  static_assert(kAccRegs % 64 == 0, "staged epilogue: 128 or 256 tokens");
  const int warp = t / 32, lane = t % 32;
  const int n = p.n;
  const int n_base = col0 + warp * 16 + lane / 4;  // this lane's columns: n_base (h = 0) and n_base + 8
  float bias[2] = {0.f, 0.f};
  if constexpr (Fuse::bias) {
#pragma unroll
    for (int h = 0; h < 2; ++h) bias[h] = bias_at(f, tile.group, n, n_base + 8 * h);
  }
  // Pass 1's rows (256 tokens), loaded now: their latency hides behind pass 0.
  W4PassRows<Fuse> second_pass;
  if constexpr (kHalves == 2) second_pass.load(f, tile, token0 + 128, lane);
  const int matrix = lane / 8;  // stmatrix x4: lanes 8i..8i+7 give matrix i's row addresses
  if constexpr (!Fuse::glu) {
    // Matrix i of an x4: token group j + (i >> 1), columns 16 warp + 8 (i & 1) of the slice.
    const unsigned my_row = staging + (matrix >> 1) * 8 * kRowBytes + (lane % 8) * kRowBytes + warp * 32 + (matrix & 1) * 16;
#pragma unroll
    for (int half = 0; half < kHalves; ++half) {
      const W4PassRows<Fuse>& pass = half == 0 ? first_pass : second_pass;
      named_barrier_sync<128>(barrier_id);  // the previous pass has read the staging
#pragma unroll
      for (int j = 16 * half; j < 16 * half + 16; j += 2) {
        unsigned pairs[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {  // q: token group j + q / 2, column half h = q % 2
          const int jj = j + q / 2, h = q % 2;
          float v[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            v[e] = activate<Fuse::act>(acc[4 * jj + 2 * h + e] + bias[h]);
            if constexpr (Fuse::weight) v[e] *= pass.weight(jj - 16 * half, e, lane);
          }
          pairs[q] = pack_pair<kTypeC>(v[0], v[1]);
        }
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(
                         my_row + (j - 16 * half) * 8 * kRowBytes),
                     "r"(pairs[0]), "r"(pairs[1]), "r"(pairs[2]), "r"(pairs[3])
                     : "memory");
      }
      named_barrier_sync<128>(barrier_id);
      w4_copy_out_staged<64>(p, n, col0, staging, t, [&](int row, int s, int& to) { return pass.row(row, s, to); });
    }
  } else {
    const bool odd = ((lane / 4) & 1) != 0;  // this lane's columns are the up halves of h = 0 pairs
    // The lane whose output column (w4_fused_store: r / 2 for even r = lane / 4, 4 + (r - 1) / 2
    // for odd r) is this lane's r.
    const int r = lane / 4;
    const int source = (r < 4 ? 2 * r : 2 * (r - 4) + 1) * 4 + lane % 4;
    // Matrix i of an x4: token group j + i, the warp's 8 output columns (16-byte unit `warp` of the
    // row; kTmaGlu: swizzled by the row's r / 2 % 4, and r % 8 is lane % 8 for every j).
    constexpr unsigned kGluRowBytes = kTmaGlu ? 64 : kRowBytes;
    const unsigned my_row = staging + (matrix * 8 + lane % 8) * kGluRowBytes +
                            (kTmaGlu ? (warp ^ ((lane % 8) >> 1)) : warp) * 16;
#pragma unroll
    for (int half = 0; half < kHalves; ++half) {
      const W4PassRows<Fuse>& pass = half == 0 ? first_pass : second_pass;
      if (kTmaGlu && t == 0) tma_store_wait_read<0>();
      named_barrier_sync<128>(barrier_id);
#pragma unroll
      for (int j = 16 * half; j < 16 * half + 16; j += 4) {
        unsigned pairs[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          float out[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float v0 = acc[4 * (j + q) + e] + bias[0], v1 = acc[4 * (j + q) + 2 + e] + bias[1];
            const float received = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 4);  // every lane, no divergence
            out[e] = activate_glu<Fuse::act>(odd ? received : v0, odd ? v1 : received);
            if constexpr (Fuse::weight) out[e] *= pass.weight(j + q - 16 * half, e, lane);
          }
          pairs[q] = __shfl_sync(0xffffffffu, pack_pair<kTypeC>(out[0], out[1]), source);
        }
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(
                         my_row + (j - 16 * half) * 8 * kGluRowBytes),
                     "r"(pairs[0]), "r"(pairs[1]), "r"(pairs[2]), "r"(pairs[3])
                     : "memory");
      }
      auto out_row = [&](int row, int s, int& to) { return pass.row(row, s, to); };
      if constexpr (kTmaGlu) {
        const int first = token0 + 128 * half;  // the pass's first group-local token
        if (first + 128 <= tile.group_rows) {   // uniform over the warpgroup
          fence_proxy_async_shared();
          named_barrier_sync<128>(barrier_id);
          if (t == 0) {
            tma_store_2d(tma_c, staging, col0 / 2, tile.row_begin + first);
            tma_store_commit();
          }
        } else {
          named_barrier_sync<128>(barrier_id);
          w4_copy_out_staged<32, decltype(out_row), true>(p, n / 2, col0 / 2, staging, t, out_row);
        }
      } else {
        named_barrier_sync<128>(barrier_id);
        w4_copy_out_staged<32>(p, n / 2, col0 / 2, staging, t, out_row);
      }
    }
  }
}

// The pre-arranged weight blocks ([g][ceil(N/128)][ceil(K/64)], kBlockBytes each, each 128-row run
// after its header) of one tile's kBlocks x 128 weight rows, for the producer: block s of the stage
// is the tile's 128-row block s, or, past the last block (a ragged 256-row tile), the last block
// again (its rows are not stored).
template <int kBlocks>
struct WeightBlocks {
  const unsigned char* first[kBlocks];  // block s at K block 0
  __device__ __forceinline__ WeightBlocks(const void* b, const TileCoord& tile, int n_blocks, long long run_bytes,
                                          unsigned header_bytes) {
#pragma unroll
    for (int s = 0; s < kBlocks; ++s) {
      const int nb = min(tile.n_block * kBlocks + s, n_blocks - 1);
      first[s] = static_cast<const unsigned char*>(b) + (static_cast<long long>(tile.group) * n_blocks + nb) * run_bytes +
                 header_bytes;
    }
  }
  // K block kb of every block, into consecutive kBlockBytes slots from `dst`, completing on `bar`;
  // evict_first (GroupedGemmParams::weight_l2_evict_first, read from the parameter bank: no
  // register held across the loop by the 24-register producer): the copies' lines go first from L2.
  __device__ __forceinline__ void load(unsigned dst, int kb, unsigned block_bytes, unsigned bar, int evict_first) const {
#pragma unroll
    for (int s = 0; s < kBlocks; ++s) {
      const unsigned char* const src = first[s] + static_cast<long long>(kb) * block_bytes;
      if (evict_first)
        bulk_load_hinted(dst + s * block_bytes, src, block_bytes, bar, l2_evict_first_policy());
      else
        bulk_load(dst + s * block_bytes, src, block_bytes, bar);
    }
  }
};

// kRowsW: weight rows per tile, 128 (one pre-arranged block per stage) or 256 (two). Per stage: the
// tile's token rows, the absorbed tail rows' slot (w4_sm90_tail_rows) and the weight blocks.
template <int kTokens, int kStages, int kFormat = kMXFP4, int kRowsW = 128, bool kGathered = false,
          int kScheduler = kSchedulerStatic, bool kEpilogueFused = false>
__host__ __device__ constexpr int w4rs_smem_bytes() {
  constexpr int kTail = w4_sm90_tail_rows(kTokens, kGathered, kScheduler == kSchedulerDynamic);
  return kStages * ((kTokens + kTail) * 128 + (kRowsW / 128) * static_cast<int>(w4_block_bytes<kFormat>())) + 2048 +
         w4_sm90_c_staging_bytes(kTokens, kEpilogueFused);
}

// CTAs per SM: the 16-, 32-, 48- and 64-token tiles (decode, small groups) run two, for twice the warps
// to hide the widening's latency chain (Nsight Compute, gpt-oss up 16 tokens, one CTA: 2.25 warps
// and 0.82 eligible per scheduler, issue 55%, DRAM 50%; two CTAs, H100: 0.69 -> 0.88 of copy
// bandwidth). Their consumers hold few accumulators (8, 16, 24, 32) and fit the smaller register
// share below (0 spills); 8 stages take 53, 70, 86 or 102 KB of shared memory per CTA (MXFP4).
// KernelSpec::min_ctas_per_sm() says the same on the host (checked in the instantiating .cu).
template <int kTokens, int kRowsW = 128>
__host__ __device__ constexpr int w4rs_ctas_per_sm() {
  return kTokens <= 64 && kRowsW == 128 ? 2 : 1;
}

// kTokens: tokens per tile (the MMA's N). kRowsW: weight rows per tile: 128 (each consumer one
// 64-row slice of the stage's block) or 256 (two blocks per stage, each consumer a whole block:
// two 64-row slices, two accumulator sets). 256 rows read each token row once per 256 weight rows
// instead of per 128: half the traffic of A (L2 -> shared memory). Measured (H100, v9): not faster
// than 256 tokens x 128 rows at prefill, 64 x 256 (one CTA) beats 64 x 128 (two) on DeepSeek-V3
// at 32 rows per expert only; tuner candidates, not heuristic choices.
// A ragged last 256-row tile (odd block count) loads its last block twice and stores nothing of
// the copy (its rows are past N).
// Fuse / f (null without fusions; docs/design.md, "Fusions"): fuse=gather copies the tile's token
// rows with cp.async by the producer warpgroup (as the bf16 Hopper kernel does for A); the epilogue
// fusions are applied on the transposed accumulator (w4_fused_store, w4_fused_store_staged). Not
// implemented here: glu=split (a tile would need two half blocks of packed weights) and atomic (C is
// 16-bit).
// kScheduler: static, or dynamic (thread 0 of the producer takes each tile from the launch's
// counter and hands it through a TileRing to the consumers and, with fuse=gather, to producer
// warps 1-3; warp 0's lanes get it by a shuffle).
// kSplitTail (split=tail; the unfused 16- and 32-token decode tiles, static scheduler; with 48 or
// 64 tokens ptxas serialized the wgmmas, C7512): the
// last, partial round's tiles run in pieces of K (common/split_tail.cuh, planned by the launch
// from the exact tile count); each piece's consumers scale their sums (MXFP4 row exponents, NVFP4
// tensor scale: linear, so per piece) and meet in split_reduce, whose last piece stores. Why:
// a decode launch of few, long tiles (Mixtral-8x22B down, K = 16384: 384 tiles on 264 CTAs, 1.45
// rounds) otherwise spends its second round on 120 CTAs (docs/perf.md v45).
template <int kTokens, int kStages, int kTypeC, int kLayout, int kFormat = kMXFP4, class Fuse = NoFusion,
          int kRowsW = 128, int kScheduler = kSchedulerStatic, bool kSplitTail = false>
__device__ __forceinline__ void grouped_gemm_w4_rs(const GroupedGemmParams& p, const TmaDescriptor& tma_a,
                                                   const TmaDescriptor& tma_tail, const TmaDescriptor& tma_c,
                                                   const FusionParams* f = nullptr) {
  static_assert(!Fuse::glu_split && !Fuse::atomic, "4-bit Hopper kernel: no split GLU, no atomic combine");
  static_assert(kTokens == 16 || kTokens == 32 || kTokens == 48 || kTokens == 64 || kTokens == 128 || kTokens == 256,
                "tokens per tile: 16, 32, 48, 64, 128 or 256");
  static_assert(kFormat == kMXFP4 || kFormat == kNVFP4, "4-bit weights: MXFP4 or NVFP4");
  static_assert(!kSplitTail || (kTokens <= 32 && kRowsW == 128 && kScheduler == kSchedulerStatic && !Fuse::any),
                "split=tail: the unfused static decode tiles of 16 and 32 tokens x 128 weight rows");
  static_assert(kRowsW == 128 || (kRowsW == 256 && kTokens == 64), "weight rows per tile: 128, or 256 with 64 tokens");
  static_assert(w4rs_smem_bytes<kTokens, kStages, kFormat, kRowsW, Fuse::gather, kScheduler, Fuse::epilogue>() <= 232448,
                "stages do not fit in 227 KB");
  constexpr unsigned kBlockBytes = w4_block_bytes<kFormat>();
  constexpr unsigned kScaleBytes = w4_sm90_quad_scale_bytes(kFormat == kNVFP4);  // per consumer thread per stage (its quad's copy)
  static_assert(kTypeC == kBF16 || kTypeC == kF16, "prototype: 16-bit C");
  constexpr int kBlocks = kRowsW / 128;   // pre-arranged weight blocks per stage
  constexpr int kSlices = kBlocks;        // 64-row slices (accumulator sets) per consumer
  using Mma = WgmmaRsOp<kTokens>;
  constexpr int kAccRegs = Mma::kRegs;
  // A group's last tile holding at most 32 of its rows multiplies those 32 tokens alone (the narrow
  // k-loops below, m64n32k16):
  // - 128-token tiles, up to K = 4096, one stage at a time (docs/perf.md v20): MXFP4 / NVFP4 0.96-0.99x
  //   the time at 4096 / 16384 tokens. At K = 7168 (DeepSeek-V3 up) it took 1.02-1.04x. Double-buffered
  //   (v21: clean in ptxas now) it measured 1.00-1.01x overall and 1.09x on Mixtral down 4096 (K = 14336):
  //   a narrow tile still widens all its weights, so it saves little where the widening paces it.
  //   Not on the 256-token tile: its fused and dynamic variants serialize their wgmmas (C7511/C7512).
  // - The 48-token tile (decode, ~32 rows per expert, two CTAs per SM), double-buffered like the wide
  //   loop: a group of <= 32 rows skips a third of the MMA work, 0.93-0.98x on the cases that use
  //   the tile, the gathered GEMM1 of gpt-oss at 1024 tokens 0.94x (v21). Static scheduler, rows
  //   not gathered by TMA: those variants serialize their wgmmas with it (C7511/C7512), and so did
  //   the cp.async-gathered one until its producer gave its consumers 104 registers (below).
  constexpr bool kShortTailsSerial = kTokens == 128;
  constexpr bool kShortTailsOverlapped = kTokens == 48 && kScheduler == kSchedulerStatic && !Fuse::gather_tma;
  constexpr bool kShortTails = kShortTailsSerial || kShortTailsOverlapped;
  constexpr int kShortTailTokens = 32;
  constexpr int kShortTailMaxK = 4096;
  using ShortTailMma = WgmmaRsOp<kShortTailTokens>;
  // A group's last tile of more than kTokens rows (at most kTailRows more; common/w4_layout.cuh):
  // its tail rows come by a second TMA copy (tma_tail: kTailRows-row boxes; gathered: as the tile's
  // rows are gathered) into the stage's tail slot (tail_stages: a ring of its own, so that the tile's stages keep their power-of-two stride
  // and the wide k-loop its descriptor arithmetic), and a narrow wgmma per k step multiplies them
  // with the same widened weights into acc_tail, stored from registers after the staged epilogue.
  constexpr int kTailRows = w4_sm90_tail_rows(kTokens, Fuse::gather, kScheduler == kSchedulerDynamic);
  using TailMma = WgmmaRsOp<kTailRows != 0 ? kTailRows : 16>;
  constexpr unsigned kXBytes = kTokens * 128;  // 64 K of BF16 per token row
  constexpr unsigned kTailBytes = kTailRows * 128;
  static_assert(kTailBytes % 1024 == 0, "tail slots start on 1024-byte swizzle atoms");
  constexpr int kConsumerThreads = 256;  // each arrives on a stage's empty barrier (retire below)
  constexpr bool kDynamic = kScheduler == kSchedulerDynamic;
  // Registers: one CTA per SM starts every thread at 168 (65536 / 384, rounded down to 8), two at
  // 80 (65536 / 768); the producer gives back all but kProducerRegs and the consumers take what
  // that frees: (384 x 168 - 128 x 24) / 256 = 240 (less beside the gathering or dynamic producer,
  // below); two CTAs (384 x 80 - 128 x 32) / 256 = 104. Asking more
  // than the CTA holds would hang. The producer (warp 0 walks the groups, lane 0 issues TMA and
  // bulk copies) spills nothing at 24 (ptxas); with two CTAs it takes 32, which costs the consumers
  // nothing (104 either way after rounding) and which the 16-token tile needs (at 24 ptxas
  // serialized its wgmmas, C7512). (The MXFP4 64-token tile's wgmmas stay serialized, C7512, at
  // 104 as at 96: the cause is the widening's slow-path branch, docs/perf.md v9.)
  constexpr bool kTwoCtas = w4rs_ctas_per_sm<kTokens, kRowsW>() == 2;
  // A gathering producer with one CTA per SM takes 56 (its consumers 224): distinct address
  // registers for its copies (at 40 every copy reused one pair, and waited for the previous
  // copy to have read it). With two CTAs it takes 32 (0 spills), so that the consumers get 104:
  // at 96 (a producer of 40, before v53) ptxas serialized the wgmmas of the 48-token narrow loop
  // and of the unrolled trips below (C7512). The dynamic scheduler's
  // producer takes 32 (its consumers 232): at 24 ptxas spilled one of its registers once the
  // consumers had the staged epilogue.
  constexpr int kProducerRegs = Fuse::gather && !Fuse::gather_tma ? (kTwoCtas ? 32 : 56)
                                                                  : (kTwoCtas || kDynamic ? 32 : 24);
  constexpr int kConsumerRegs = ((kTwoCtas ? 80 : 168) * 384 - 128 * kProducerRegs) / 256 / 8 * 8;

  extern __shared__ unsigned char moejit_smem[];
  const unsigned smem_base = smem_addr(moejit_smem);
  const unsigned x_stages = (smem_base + 1023u) & ~1023u;
  const unsigned tail_stages = x_stages + kStages * kXBytes;
  const unsigned w_stages = tail_stages + kStages * kTailBytes;
  const unsigned full_bars = w_stages + kStages * kBlocks * kBlockBytes;
  const unsigned empty_bars = full_bars + 8 * kStages;
  TileRing<> ring(empty_bars + 8 * kStages);
  static_assert(16 * kStages + TileRing<>::kBytes <= 1024, "barriers and tile ring past their 1024 bytes");
  // 128- and 256-token tiles: each consumer's C staging (w4_store_staged, w4_fused_store_staged),
  // after the barriers' 1024 bytes (the 2048 spare bytes hold those and the stages' alignment;
  // placed before the barriers it moved their offsets and the 24-register producer spilled, ptxas).
  // Aligned to 1024 bytes for the unfused kernels' swizzled staging and TMA stores (w4_store_staged).
  constexpr bool kStagedC = w4_sm90_c_staging_bytes(kTokens, Fuse::epilogue) > 0;
  constexpr bool kDoubleStagedC = w4_sm90_c_double_staged(kTokens, Fuse::epilogue);
  // TMA stores of C: unfused, or a GLU without scatter (w4_fused_tma_store; host: KernelSpec::stages_c()).
  constexpr bool kTmaStoreC = kStagedC && (!Fuse::epilogue || w4_fused_tma_store<Fuse>());
  const unsigned c_staging = (full_bars + 1024 + 1023) & ~1023u;

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(tma_a);
    if constexpr (kTailRows != 0) tma_prefetch_descriptor(tma_tail);
    if constexpr (kTmaStoreC) tma_prefetch_descriptor(tma_c);
    for (int st = 0; st < kStages; ++st) {
      // fuse=gather: + one cp.async arrival per producer thread (the token rows come by cp.async).
      mbarrier_init(full_bars + 8 * st, Fuse::gather && !Fuse::gather_tma ? 1 + 128 : 1);
      mbarrier_init(empty_bars + 8 * st, kConsumerThreads);
    }
    // Every consumer lane takes each number (take_every_lane), plus producer warps 1-3's lane 0 when they gather.
    if constexpr (kDynamic) ring.init(kConsumerThreads + (Fuse::gather ? 3 : 0));
    mbarrier_init_fence();
  }
  __syncthreads();

  const int num_k_blocks = (p.k + 63) / 64;
  const int n_blocks = (p.n + 127) / 128;  // pre-arranged 128-row blocks (two per 256-row tile)
  constexpr unsigned kHeaderBytes = w4_sm90_header_bytes(kFormat == kNVFP4);
  const long long run_bytes = w4_sm90_run_bytes(num_k_blocks, kFormat == kNVFP4);
  const int warpgroup = threadIdx.x / 128;
  // Tiles: group-major, tokens as the cursor's "M" side, weight rows as its "N" side.
  GroupTileCursor<kLayout, kTokens, kRowsW, kTailRows> cursor;
  TileCoord tile;
  // Producer and consumer warps walk the groups 32 per step (seek_warp), which pays at decode; on
  // the static 64-token tile it made ptxas serialize the wgmmas (C7512 at 80 registers; in the
  // consumers it ran 1.18x slower, docs/perf.md v12), and there one thread walks (seek), as on the
  // static 48-token tile (warp walks serialized its gathered GLU variant's wgmmas, C7512). The
  // gathering producer's warps walk with seek_warp on every tile (ptxas reports the same there).
  constexpr bool kWarpSeek = !((kTokens == 48 || kTokens == 64) && !kDynamic);
  // The static scheduler's tile of round `tile_iter`: with tail rows, the CTAs trade places inside
  // aligned runs of 8 from round to round (place = CTA ^ (round % 8), unless that lies past the grid).
  // Why: where every group has the same M-tile count (4 at 512 rows per expert), tile i's M block is
  // i mod 4 in every round (132 = 4 x 33), so the same CTAs would get every group's last, tail-carrying
  // (slower) tile. Measured (H100, docs/perf.md v23, geomeans over DeepSeek-V3, gpt-oss and Qwen3):
  // without the exchange MXFP4 takes 1.02 / 1.00x the time at 4096 / 16384 tokens, NVFP4 1.09 / 1.05x. The tiles of a round, and so what
  // shares B in L2, are the same. (A rotation by one per round needs a division, and with it ptxas
  // serialized the NVFP4 tile's wgmmas, C7511.)
  auto static_tile = [&](int tile_iter) {
    if constexpr (kTailRows != 0) {
      const unsigned swapped = blockIdx.x ^ ((unsigned)tile_iter & 7u);
      return (int)(tile_iter * gridDim.x + (swapped < gridDim.x ? swapped : blockIdx.x));
    } else {
      return (int)(blockIdx.x + tile_iter * gridDim.x);
    }
  };
  // Whether `c` is a group's last tile with tail rows: more than kTokens rows from its start and at
  // most kTokens + kTailRows. (A tile before a group's last always has more: the cursor absorbs tails
  // of at most kTailRows, so a last tile after others holds more than kTailRows. Testing "more than
  // kTokens" alone took every tile before a group's last for one: the n24 wgmmas and the tail copies
  // on 3 of 4 tiles at 512 rows per expert, 1.07-1.12x the time, docs/perf.md v23.)
  auto carries_tail = [&](const TileCoord& c) {
    return kTailRows != 0 && (unsigned)(c.group_rows - c.m_block * kTokens - kTokens - 1) < (unsigned)kTailRows;
  };
  auto seek_tile = [&](int tile_index) {
    return kWarpSeek ? cursor.seek_warp(p, tile_index, tile) : cursor.seek(p, tile_index, tile);
  };

  if (warpgroup == 0) {
    warpgroup_release_registers<kProducerRegs>();
    if constexpr (Fuse::gather) {
      // The producer warpgroup: thread 0 bulk-copies the weights (expect_tx of their bytes), every
      // thread copies its share of the tile's token rows (64 K of BF16 = 128 bytes each) with
      // cp.async (hopper/gather.cuh), then arrives on the full barrier when they land (noinc); or,
      // gather_by=tma, with one TMA copy per row whose bytes thread 0 expects as well (no arrival).
      // Rows past the group are not copied (their accumulator columns are never stored); an index
      // outside [0, num_tokens) reads a zero row.
      const unsigned short* const x_base = static_cast<const unsigned short*>(p.a);
      GatherRowsSm90<kTokens> rows((int)threadIdx.x);
      GatherRowsTmaSm90<kTokens> tma_rows;
      // A tail-carrying tile's extra rows, gathered the same way into its stage's tail slot.
      constexpr int kGatherTail = kTailRows != 0 ? kTailRows : 16;
      GatherRowsSm90<kGatherTail> tail_gather((int)threadIdx.x);
      GatherRowsTmaSm90<kGatherTail> tail_gather_tma;
      int stage = 0;
      unsigned phase = 0;
      for (int tile_iter = 0;; ++tile_iter) {
        const int tile_index = kDynamic ? ring.publish_or_take(p.tile_counter) : static_tile(tile_iter);
        if (!cursor.seek_warp(p, tile_index, tile)) {
          if (kDynamic && threadIdx.x == 0) ring.finish(p.tile_counter, tile_index, cursor.tiles_before);
          break;
        }
        const int x_row = tile.row_begin + tile.m_block * kTokens;
        const int rows_valid = tile.group_rows - tile.m_block * kTokens;
        if constexpr (Fuse::gather_tma)
          tma_rows.load_tokens(f->gather_rows, x_row, rows_valid, f->num_tokens, (int)threadIdx.x);
        else
          rows.load_tokens(f->gather_rows, x_row, rows_valid, f->num_tokens, p.k);
        const bool tail = carries_tail(tile);
        if constexpr (kTailRows != 0) {
          if (tail) {
            if constexpr (Fuse::gather_tma)
              tail_gather_tma.load_tokens(f->gather_rows, x_row + kTokens, rows_valid - kTokens, f->num_tokens, (int)threadIdx.x);
            else
              tail_gather.load_tokens(f->gather_rows, x_row + kTokens, rows_valid - kTokens, f->num_tokens, p.k);
          }
        }
        const WeightBlocks<kBlocks> w_blocks(p.b, tile, n_blocks, run_bytes, kHeaderBytes);
        for (int kb = 0; kb < num_k_blocks; ++kb) {
          mbarrier_wait(empty_bars + 8 * stage, phase ^ 1);
          const unsigned full = full_bars + 8 * stage;
          if (threadIdx.x == 0) {
            unsigned row_bytes = 0;
            if constexpr (Fuse::gather_tma)
              row_bytes = tma_rows.tx_bytes(rows_valid) + (tail ? tail_gather_tma.tx_bytes(rows_valid - kTokens) : 0u);
            mbarrier_arrive_expect_tx(full, kBlocks * kBlockBytes + row_bytes);
            w_blocks.load(w_stages + stage * kBlocks * kBlockBytes, kb, kBlockBytes, full, p.weight_l2_evict_first);
          }
          if constexpr (Fuse::gather_tma) {
            tma_rows.copy_k_block(x_stages + stage * kXBytes, tma_a, full, kb * 64, (int)threadIdx.x);
            if (kTailRows != 0 && tail)
              tail_gather_tma.copy_k_block(tail_stages + stage * kTailBytes, tma_a, full, kb * 64, (int)threadIdx.x);
          } else {
            rows.copy_k_block(x_stages + stage * kXBytes, x_base, p.k, kb * 64);
            if (kTailRows != 0 && tail) tail_gather.copy_k_block(tail_stages + stage * kTailBytes, x_base, p.k, kb * 64);
            cp_async_mbarrier_arrive_noinc(full);
          }
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
      // No thread exits with copies (and their arrivals) in flight.
      if constexpr (!Fuse::gather_tma) cp_async_wait_all_sm90();
    } else if (threadIdx.x < (kWarpSeek ? 32 : 1)) {
      constexpr unsigned kWalkers = kWarpSeek ? 0xffffffffu : 1u;
      // Warp 0 finds each tile's group (seek_warp) and its lane 0 issues the copies. With one
      // thread's walk (one dependent load per group) the producer spent 64% of its samples walking
      // at decode and could not keep the stages full (docs/perf.md v13).
      static_assert(kWarpSeek || !kDynamic, "the dynamic scheduler's publish_warp needs the whole warp");
      int stage = 0;
      unsigned phase = 0;
      for (int tile_iter = 0;; ++tile_iter) {
        const int tile_index = kDynamic ? ring.publish_warp(p.tile_counter) : static_tile(tile_iter);
        SplitUnit unit{tile_index, 0, num_k_blocks, -1};  // split=tail: a piece's tile and K blocks
        if constexpr (kSplitTail) unit = split_unit(p, tile_index, num_k_blocks);
        if (!seek_tile(unit.tile)) {
          if (kDynamic && threadIdx.x == 0) ring.finish(p.tile_counter, tile_index, cursor.tiles_before);
          break;
        }
        const int x_row = tile.row_begin + tile.m_block * kTokens;
        const bool tail = carries_tail(tile);
        const WeightBlocks<kBlocks> w_blocks(p.b, tile, n_blocks, run_bytes, kHeaderBytes);
        for (int kb = unit.kb_begin; kb < unit.kb_end; ++kb) {
          // The whole warp waits; lane 0 issues. (With lane 0 alone in this loop and the other
          // lanes parked at the next walk's shuffle, DeepSeek-V3 and Mixtral decode ran 5-10% slower.)
          mbarrier_wait(empty_bars + 8 * stage, phase ^ 1);
          if (threadIdx.x == 0) {
            const unsigned full = full_bars + 8 * stage;
            mbarrier_arrive_expect_tx(full, kXBytes + (tail ? kTailBytes : 0u) + kBlocks * kBlockBytes);
            tma_load_2d(x_stages + stage * kXBytes, tma_a, full, kb * 64, x_row);
            if (tail) tma_load_2d(tail_stages + stage * kTailBytes, tma_tail, full, kb * 64, x_row + kTokens);
            w_blocks.load(w_stages + stage * kBlocks * kBlockBytes, kb, kBlockBytes, full, p.weight_l2_evict_first);
          }
          __syncwarp(kWalkers);
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
    }
  } else {
    warpgroup_claim_registers<kConsumerRegs>();
    const int consumer = warpgroup - 1;
    const int t = threadIdx.x % 128;
    const int lane = threadIdx.x % 32;
    const int warp_in_group = t / 32;
    // Slice i of this consumer: block b(i) of the stage, its 64-row part w(i) (the pre-arranged
    // [w][thread] order). 128 rows: block 0, part = consumer; 256 rows: block = consumer, part = i.
    const int slice_block = kBlocks == 2 ? consumer : 0;  // the same for both slices
    auto slice_part = [&](int i) { return kBlocks == 2 ? i : consumer; };

    float acc[kSlices][kAccRegs];
    float acc_tail[kSlices][TailMma::kRegs];  // a group's tail rows past the tile's kTokens (kTailRows != 0)
    int stage = 0;
    unsigned phase = 0;
    // Widens this thread's weights of the current stage into `frag` (all four k16 steps: their
    // registers must stay put until the wgmmas reading them finish).
    auto widen_slice = [&](unsigned (&frag)[4][4], int slice, unsigned slot) {
      const unsigned w_stage = w_stages + (slot * kBlocks + slice_block) * kBlockBytes;
      const unsigned my_codes = (slice_part(slice) * 128 + t) * 16;
      const unsigned my_scales = w4_sm90_scale_offset(slice_part(slice) * 128 + t, kFormat == kNVFP4);  // the quad's copy
      unsigned codes[4], scales[2];
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(codes[0]), "=r"(codes[1]), "=r"(codes[2]), "=r"(codes[3])
                   : "r"(w_stage + my_codes));
      // Scales of rows r0 (low half) and r1 (high half) of each scale block of this K block, one
      // BF16 pair per block: the multiply of a code pair takes its row's half of it (bf16x2_mul_by_half,
      // an operand select of HMUL2), one exact multiply per code pair. MXFP4 by 2^(s - 1) = 2^126 *
      // 2^(s - 127), a normal BF16 for every stored s (0..128: the packer stores scales relative to
      // the row's exponent, which the epilogue multiplies back; 129, a NaN block's, gives infinity,
      // and 0 x inf = NaN). (A second, two-multiply path for scales above 2^1 made ptxas serialize
      // the 64-token tile's wgmmas, C7512, docs/perf.md v9-v10.) NVFP4 by its E4M3 scale x 2^117
      // (at most 448 x 2^117 < 2^126): the weights reach wgmma as value x 2^-9 (exact: 2 x 4
      // significant bits, >= 2^-19) and the accumulator gets the 2^9 back with the expert's fp32
      // scale. (One register per row and block before v15: 10 instructions per MXFP4 K block, 4 now.)
      // NVFP4's scales are stored re-encoded (formats.hpp, layout 4) so that the same byte permute
      // and one multiply-add give scale x 2^117 (w4_sm90_nvfp4_factor_bits): 8 instructions per
      // K block, 20 through the F16 / F32 conversions before v20.
      constexpr int kScaleBlocks = kScaleBytes / 2;
      unsigned row_factors[kScaleBlocks];
      if constexpr (kFormat == kNVFP4) {
        asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(scales[0]), "=r"(scales[1]) : "r"(w_stage + my_scales));
#pragma unroll
        for (int b = 0; b < kScaleBlocks; ++b)
          row_factors[b] = __byte_perm(scales[b / 2], 0u, b % 2 ? 0x4342 : 0x4140) * 16u + 0x75007500u;
      } else {
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(scales[0]) : "r"(w_stage + my_scales));
        // Bytes 2b, 2b + 1 (rows r0, r1 of block b) into the low bytes of the two halves, then
        // BF16 bits (s + 126) << 7 in each.
        row_factors[0] = __byte_perm(scales[0], 0u, 0x4140) * 0x80u + 0x3F003F00u;
        row_factors[1] = __byte_perm(scales[0], 0u, 0x4342) * 0x80u + 0x3F003F00u;
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const unsigned word = codes[kk];
        const unsigned bits[4] = {e2m1_pair_bits_as_bf16x2<0>(word), e2m1_pair_bits_as_bf16x2<1>(word),
                                  e2m1_pair_bits_as_bf16x2<2>(word), e2m1_pair_bits_as_bf16x2<3>(word)};
        // MXFP4: 32-blocks, k steps 0-1 in the first, 2-3 in the second; NVFP4: one 16-block per step.
        const unsigned factors = row_factors[kFormat == kNVFP4 ? kk : kk / 2];
        // Pairs 0, 2 are row r0's, 1, 3 row r1's.
#pragma unroll
        for (int i = 0; i < 4; ++i) frag[kk][i] = bf16x2_mul_by_half(bits[i], factors, i & 1);
      }
    };
    // slot: the ring slot, the run-time stage or a constant (the unrolled trips below).
    auto widen_at = [&](unsigned (&frag)[kSlices][4][4], unsigned slot) {
      mbarrier_wait(full_bars + 8 * slot, phase);
      // fuse=gather: the token rows came through the generic proxy (cp.async); order them before wgmma.
      if constexpr (Fuse::gather && !Fuse::gather_tma) fence_proxy_async_shared();
#pragma unroll
      for (int i = 0; i < kSlices; ++i) widen_slice(frag[i], i, slot);
    };
    auto widen = [&](unsigned (&frag)[kSlices][4][4]) { widen_at(frag, (unsigned)stage); };
    // Issues the current stage's four wgmmas and moves to the next stage.
    // Descriptors advanced from the first stage's, as in the FP8 kernel.
    const unsigned long long x_desc0 = wgmma_desc_sw128(x_stages);
    const unsigned long long tail_desc0 = wgmma_desc_sw128(tail_stages);
    auto fence_acc = [&] {
#pragma unroll
      for (int i = 0; i < kSlices; ++i) {
        wgmma_fence_operands(acc[i]);
        if constexpr (kTailRows != 0) wgmma_fence_operands(acc_tail[i]);
      }
    };
    // The k-loop's kind of wgmma (a constant at each call, so that each k-loop below has one kind; a
    // generic lambda here crashed NVRTC 13.0; a run-time choice serialized them, C7519/C7520):
    // kLoopShortTail multiplies only the tile's first kShortTailTokens token rows, into the first
    // registers of acc, where the wide wgmma puts those tokens' sums; kLoopWithTail multiplies the
    // tile's kTokens and, with the same widened weights, the stage's tail rows into acc_tail.
    constexpr int kLoopWide = 0, kLoopShortTail = 1, kLoopWithTail = 2;
    auto issue_at = [&](const unsigned (&frag)[kSlices][4][4], unsigned slot, bool first, int loop) {
      const unsigned long long x_desc = wgmma_desc_advance<kXBytes>(x_desc0, slot);
      fence_acc();
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int i = 0; i < kSlices; ++i) {
          if constexpr (kShortTails) {
            if (loop == kLoopShortTail) {
              ShortTailMma::mma(acc[i], frag[i][kk], wgmma_desc_advance<32>(x_desc, kk), !first || kk != 0);
              continue;
            }
          }
          Mma::mma(acc[i], frag[i][kk], wgmma_desc_advance<32>(x_desc, kk), !first || kk != 0);
          if constexpr (kTailRows != 0) {
            if (loop == kLoopWithTail)
              TailMma::mma(acc_tail[i], frag[i][kk], wgmma_desc_advance<32>(wgmma_desc_advance<kTailBytes>(tail_desc0, slot), kk),
                           !first || kk != 0);
          }
        }
      wgmma_commit();
      fence_acc();
    };
    auto issue = [&](const unsigned (&frag)[kSlices][4][4], bool first, int loop) {
      issue_at(frag, (unsigned)stage, first, loop);
      if (++stage == kStages) stage = 0, phase ^= 1;
    };
    // Waits for the wgmmas in flight and gives their stage back.
    auto retire = [&](int done_stage) {
      wgmma_wait<0>();
      fence_acc();
      // Every consumer thread arrives: each read its codes and scales of the stage with ld.shared
      // (widen), and its own arrival is what orders those reads before the producer's refill. With
      // one arrival per warp (after __syncwarp or a warpgroup bar.sync), compute-sanitizer's
      // racecheck reported the refill racing the other lanes' reads (WAR, 2026-11-23).
      mbarrier_arrive(empty_bars + 8 * done_stage);
    };
    unsigned frag0[kSlices][4][4], frag1[kSlices][4][4];
    // Stage kb + 1 is widened while stage kb's wgmmas run; unrolled by two so that both fragment
    // sets stay in fixed registers. loop: a constant at each call (see issue).
    //
    // Decode tiles (kTokens <= 64): each whole trip through the ring from slot 0 runs unrolled with
    // the slot a compile-time constant, so that the stage, barrier and descriptor addresses fold into
    // immediates and the stage bookkeeping goes (as the FP8 k-loop's, docs/perf.md v51-v52). The trip
    // starts on frag1 while frag0's wgmmas may be in flight. Where frag1's are (every other tile), it
    // first waits for them (at most once per tile): with a second copy of the trip starting on frag0
    // ptxas serialized every wgmma (C7512).
    // Not where ptxas then serialized the wgmmas (C7512, the compile tests): the 32-token tile, the
    // dynamic 48-token one, NVFP4's gathered 64-token one. (Gathered rows take the trips since v53,
    // their producer at 32 registers: the gpt-oss-120b MXFP4 layer's GEMM1 0.94-0.95x the time.)
    constexpr bool kUnrolledTrips =
        kTokens <= 64 && kTokens != 32 && !(kTokens == 48 && kDynamic) && kStages % 2 == 0 &&
        !(Fuse::gather && kTokens == 64 && kFormat == kNVFP4);
    // in_flight: the slot of the wgmmas in flight (reading frag0, or done).
    auto trip = [&](int loop, int& in_flight) {
#pragma unroll
      for (int st = 0; st < kStages; ++st) {
        widen_at(st % 2 == 0 ? frag1 : frag0, (unsigned)st);
        retire(st == 0 ? in_flight : st - 1);
        issue_at(st % 2 == 0 ? frag1 : frag0, (unsigned)st, false, loop);
      }
      in_flight = kStages - 1;
      phase ^= 1;  // stage is 0 again
    };
    auto pipelined_k_loop = [&](int loop, int k_blocks) {
      widen(frag0);
      int in_flight = stage;
      issue(frag0, true, loop);
      // Every tile (or split piece) takes a whole trip wherever one remains, short ones included: v52
      // kept tiles of fewer than two trips on the plain loop, and Qwen3 down (K = 768, 12 K blocks a
      // tile) took 1.02-1.05x there; without the bound 0.971-0.979x in turns (v53), GPU-tested on
      // every 4-bit tile in v54.
      auto trip_fits = [&](int kb) { return kUnrolledTrips && stage == 0 && k_blocks - kb >= kStages; };
      for (int kb = 1;;) {
        // The wgmmas in flight read frag0 (or are done).
        if (kb >= k_blocks) break;
        if (trip_fits(kb)) {
          trip(loop, in_flight);
          kb += kStages;
          continue;
        }
        widen(frag1);
        retire(in_flight);
        in_flight = stage;
        issue(frag1, false, loop);
        ++kb;
        // The wgmmas in flight read frag1.
        if (kb >= k_blocks) break;
        if (trip_fits(kb)) {
          // The trip starts on frag1: wait for its wgmmas here (the trip's first retire gives their
          // stage back), then take the trip above.
          wgmma_wait<0>();
          fence_acc();
          continue;
        }
        widen(frag0);
        retire(in_flight);
        in_flight = stage;
        issue(frag0, false, loop);
        ++kb;
      }
      retire(in_flight);
    };
    // One stage at a time (widen, issue, wait): one fragment set, for the loops that would not fit
    // the pipelined one's registers beside their accumulators. loop: as in issue.
    auto serial_k_loop = [&](int loop, int k_blocks) {
      for (int kb = 0; kb < k_blocks; ++kb) {
        widen(frag0);
        const int in_flight = stage;
        issue(frag0, kb == 0, loop);
        retire(in_flight);
      }
    };
    for (int tile_iter = 0;; ++tile_iter) {
      const int tile_index = kDynamic ? ring.take_every_lane() : static_tile(tile_iter);
      SplitUnit unit{tile_index, 0, num_k_blocks, -1};
      if constexpr (kSplitTail) unit = split_unit(p, tile_index, num_k_blocks);
      if (!seek_tile(unit.tile)) break;
      // This unit's K blocks: the tile's, or a split piece's.
      const int k_blocks = kSplitTail ? unit.kb_end - unit.kb_begin : num_k_blocks;
      // acc register 4j + 2h + e of slice i: weight row slice_row(i) + 8h, token 8j + 2(lane%4) + e.
      auto slice_row = [&](int i) {
        return tile.n_block * kRowsW + slice_block * 128 + slice_part(i) * 64 + warp_in_group * 16 + lane / 4;
      };
      // MXFP4: this thread's rows' exponents (formats.hpp), byte 2i + h for row slice_row(i) + 8h,
      // read at the tile's start so that the loads' latency hides behind the k-loop; one register
      // across it. A
      // ragged 256-row tile's second block may lie past N: it reads the last block's header (its
      // rows are not stored).
      unsigned row_exponents = 0;
      if constexpr (kFormat == kMXFP4) {
#pragma unroll
        for (int i = 0; i < kSlices; ++i) {
          const int row = slice_row(i);
          const unsigned char* header = static_cast<const unsigned char*>(p.b) +
                                        (static_cast<long long>(tile.group) * n_blocks + min(row / 128, n_blocks - 1)) * run_bytes;
#pragma unroll
          for (int h = 0; h < 2; ++h) row_exponents |= (unsigned)__ldg(header + row % 128 + 8 * h) << (8 * (2 * i + h));
        }
      }
      // Fused staged epilogue: the first pass's C rows and routing weights, loaded now so that
      // their latency hides behind the k-loop (as the row exponents' above).
      W4PassRows<Fuse> first_pass;
      if constexpr (kStagedC && Fuse::epilogue) first_pass.load(*f, tile, tile.m_block * kTokens, lane);
      if (k_blocks > 0) {
        // A group's last tile that holds at most kShortTailTokens of its rows (at decode about half
        // the 32 +- 6-row groups fit in 32; at prefill the 128-token tile absorbs most such tails
        // into the tile before them, kTailRows): the narrow wgmma. The tokens past the group in
        // acc's other registers are never stored.
        const bool short_tail = tile.group_rows - tile.m_block * kTokens <= kShortTailTokens;
        if (kShortTailsOverlapped && short_tail) {
          pipelined_k_loop(kLoopShortTail, k_blocks);
        } else if (kShortTailsSerial && short_tail && p.k <= kShortTailMaxK) {
          serial_k_loop(kLoopShortTail, k_blocks);
        } else if (carries_tail(tile)) {
          // 256 tokens: one stage at a time (with the pipelined loop's two fragment sets beside 128 +
          // 12 accumulators ptxas serialized every wgmma, C7512).
          if constexpr (kTokens == 256)
            serial_k_loop(kLoopWithTail, k_blocks);
          else
            pipelined_k_loop(kLoopWithTail, k_blocks);
        } else {
          pipelined_k_loop(kLoopWide, k_blocks);
        }
      }
      if (k_blocks == 0) {
#pragma unroll
        for (int i = 0; i < kSlices; ++i)
#pragma unroll
          for (int r = 0; r < kAccRegs; ++r) acc[i][r] = 0.f;
      }
      if constexpr (kFormat == kNVFP4) {
        const float tensor_scale = __ldg(p.scale_b_tensor + tile.group) * 512.f;  // and the 2^9 of the widening
#pragma unroll
        for (int i = 0; i < kSlices; ++i) {
#pragma unroll
          for (int r = 0; r < kAccRegs; ++r) acc[i][r] *= tensor_scale;
          if constexpr (kTailRows != 0) {
#pragma unroll
            for (int r = 0; r < TailMma::kRegs; ++r) acc_tail[i][r] *= tensor_scale;
          }
        }
      } else {
        // MXFP4: x 2^exponent per weight row (exact; an FP32 power of two for every exponent 0..126).
#pragma unroll
        for (int i = 0; i < kSlices; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float factor = __uint_as_float((((row_exponents >> (8 * (2 * i + h))) & 0xFFu) + 127u) << 23);
#pragma unroll
            for (int j = 0; j < kAccRegs / 4; ++j) acc[i][4 * j + 2 * h] *= factor, acc[i][4 * j + 2 * h + 1] *= factor;
            if constexpr (kTailRows != 0) {
#pragma unroll
              for (int j = 0; j < TailMma::kRegs / 4; ++j)
                acc_tail[i][4 * j + 2 * h] *= factor, acc_tail[i][4 * j + 2 * h + 1] *= factor;
            }
          }
      }
      // A piece of a split tile: only the last piece to finish (its consumer warpgroup) stores, with
      // the others' scaled sums added (barriers 3 and 4; the staged epilogue has 1 and 2).
      if constexpr (kSplitTail) {
        if (unit.piece >= 0 && !split_reduce(p, unit, consumer, acc[0], t, 3 + consumer)) continue;
      }
      const int token_base = tile.m_block * kTokens + 2 * (lane % 4);
#pragma unroll
      for (int i = 0; i < kSlices; ++i) {
        const int n_base = slice_row(i);
        // n_base less this thread's row offset: the slice's first column. (Written as slice_row's
        // terms without the offset, ptxas allocated the k-loop's registers otherwise; kept as measured.)
        const int col0 = n_base - warp_in_group * 16 - lane / 4;
        // 18 KB (or 2 x 16 KB double-staged) per consumer: 1024-aligned.
        const unsigned my_staging = c_staging + consumer * w4_sm90_c_staging_consumer_bytes(kTokens, Fuse::epilogue);
        if constexpr (kStagedC && Fuse::epilogue) {
          w4_fused_store_staged<kTypeC, Fuse, kAccRegs, w4_fused_tma_store<Fuse>()>(
              p, *f, tma_c, acc[i], tile, col0, tile.m_block * kTokens, first_pass, my_staging, t, 1 + consumer);
        } else if constexpr (kTmaStoreC) {
          w4_store_staged<kTypeC, kAccRegs, kDoubleStagedC>(p, tma_c, acc[i], tile, col0, tile.m_block * kTokens, my_staging,
                                                            t, 1 + consumer);
        } else if constexpr (Fuse::epilogue) {
          w4_fused_store<kTypeC, Fuse, kAccRegs>(p, *f, acc[i], tile, n_base, token_base, lane);
        } else {
          w4_store<kTypeC, kAccRegs>(p, acc[i], tile, n_base, token_base, lane);
        }
        // The tail rows (tokens kTokens.. of the tile), from registers: masked, not branched on. A tile
        // without tail rows stores none (its acc_tail is stale; its rows there are the next tile's).
        // With epilogue fusions, w4_fused_store's math and scatter (its row loads only for these rows).
        if constexpr (kTailRows != 0) {
          TileCoord tail_rows = tile;
          tail_rows.group_rows = carries_tail(tile) ? tile.group_rows : 0;
          if constexpr (Fuse::epilogue)
            w4_fused_store<kTypeC, Fuse, TailMma::kRegs>(p, *f, acc_tail[i], tail_rows, n_base, token_base + kTokens, lane);
          else
            w4_store<kTypeC, TailMma::kRegs>(p, acc_tail[i], tail_rows, n_base, token_base + kTokens, lane);
        }
      }
    }
    // Shared memory must outlive the TMA stores' reads of it.
    if (kTmaStoreC && t == 0) tma_store_wait_all();
  }
}

}  // namespace moejit::hopper
