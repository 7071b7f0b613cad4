// Host checks of the fused kernels' index arithmetic (kernel_templates/moejit/common/fusion_index.cuh,
// the same functions the kernels call) against independent models of what the hardware does:
//  - TMA's 128B swizzle (CUTLASS Swizzle<3,4,3> on the shared-memory byte address) and the
//    wgmma K-major SW128 descriptor read (PTX ISA: 8-row core-matrix groups SBO = 1024 bytes
//    apart, 128-byte rows, the swizzle applied to the computed address; k16 steps advance the
//    start address by 32 bytes), so that rows gathered by cp.async land where TMA would put them;
//  - the producer warp's gather order (every valid row and chunk copied exactly once);
//  - the wgmma / mma.sync accumulator layouts and the GLU contract (interleaved: gate 2i, up 2i+1;
//    split: gate i, up n/2 + i), including the bias column each accumulator receives.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "moejit/common/fusion_index.cuh"
#include "moejit/hopper/wgmma_desc.cuh"

using namespace moejit;

namespace {

// TMA SWIZZLE_128B, as a function of the absolute shared-memory byte address: bits [4:6] (the
// 16-byte chunk inside a 128-byte row) XOR bits [7:9] (the row inside a 1024-byte atom).
unsigned tma_swizzle128(unsigned address) { return address ^ (((address >> 7) & 7u) << 4); }

// Where TMA puts byte `byte` (0..127) of box row `row` of a box of 128-byte rows landing at dst.
unsigned tma_box_address(unsigned dst, int row, int byte) { return tma_swizzle128(dst + (unsigned)row * 128u + (unsigned)byte); }

// Where wgmma reads element (m, k) (m < 64, k < 16, 2-byte elements) of a K-major 128B-swizzled
// operand whose descriptor start address is `start` (SBO 1024, rows of 128 bytes).
unsigned wgmma_sw128_address(unsigned start, int m, int k) {
  return tma_swizzle128(start + (unsigned)(m / 8) * 1024u + (unsigned)(m % 8) * 128u + (unsigned)k * 2u);
}

}  // namespace

TEST_CASE("fusion index: sw128_offset is where TMA's 128B swizzle puts a chunk", "[fusion]") {
  // The Hopper kernel's stage bases: aligned up to 1024 from any dynamic smem base, then
  // stage * kABytes (kBlockM * 128) and, for A's second 64-row box, + 64 * 128.
  for (unsigned smem_base : {0u, 16u, 400u, 1024u, 3088u})
    for (int block_m : {64, 128})
      for (int stage = 0; stage < 6; ++stage) {
        const unsigned a_stages = (smem_base + 1023u) & ~1023u;
        const unsigned a_stage = a_stages + (unsigned)stage * block_m * 128u;
        for (int r = 0; r < block_m; ++r)
          for (int chunk = 0; chunk < 8; ++chunk) {
            // TMA loads A in 64-row boxes: tile row r is row r % 64 of box r / 64.
            const unsigned box = a_stage + (unsigned)(r / 64) * 64u * 128u;
            for (int b = 0; b < 16; ++b)
              REQUIRE(a_stage + sw128_offset(r, chunk) + (unsigned)b == tma_box_address(box, r % 64, 16 * chunk + b));
          }
      }
}

TEST_CASE("fusion index: wgmma's SW128 descriptor reads the gathered rows in order", "[fusion]") {
  // A consumer reads rows [a_offset / 128, +64) of the stage, k16 step kk at start + 32 kk.
  const unsigned a_stage = 5 * 16384;  // any 1024-aligned stage
  for (int consumer = 0; consumer < 2; ++consumer) {
    const unsigned a_tile = a_stage + (unsigned)consumer * 64u * 128u;
    for (int kk = 0; kk < 4; ++kk)
      for (int m = 0; m < 64; ++m)
        for (int k = 0; k < 16; ++k) {
          const int row = consumer * 64 + m, kcol = 16 * kk + k;  // tile row, element of the 64-wide k-block
          const unsigned written = a_stage + sw128_offset(row, kcol / 8) + (unsigned)(kcol % 8) * 2u;
          REQUIRE(wgmma_sw128_address(a_tile + 32u * kk, m, k) == written);
        }
  }
}

// The kernels build each consumer's descriptors once from its first stage and advance them by
// stage and k step (bf16 since v15, FP8 and 4-bit before): the same bits as rebuilding them from
// the address, for every stage stride the kernels use (operand rows of 128 bytes: bf16 A/B 64-256
// rows, FP8 A/B 64-256, 4-bit activations 16-256 tokens), consumer offsets up to a 256-row half and
// k steps of 32 bytes, from stage bases anywhere below the 227 KB of shared memory, also with the
// CTA's cluster rank in the address's high bits (the shared window address of sm_90).
template <unsigned kStageBytes>
void check_descriptor_advance() {
  using moejit::hopper::wgmma_desc_advance;
  using moejit::hopper::wgmma_desc_sw128;
  for (unsigned rank : {0u, 1u, 3u})
    for (unsigned base = 0x400; base + 8 * kStageBytes <= 227u * 1024u; base += 7 * 1024)
      for (unsigned offset : {0u, 32u * 128u, 64u * 128u, 96u * 128u, 128u * 128u})
        for (unsigned stage = 0; stage < 8; ++stage) {
          if (base + offset + (stage + 1) * kStageBytes > 227u * 1024u) continue;
          const unsigned first = (rank << 24) + base + offset;
          const unsigned long long advanced_stage = wgmma_desc_advance<kStageBytes>(wgmma_desc_sw128(first), stage);
          for (unsigned k = 0; k < 4; ++k)
            REQUIRE(wgmma_desc_advance<32>(advanced_stage, k) == wgmma_desc_sw128(first + stage * kStageBytes + 32 * k));
        }
}

TEST_CASE("wgmma descriptors: advancing by stage and k step equals rebuilding from the address", "[fusion]") {
  check_descriptor_advance<16 * 128>();   // 4-bit, 16 tokens
  check_descriptor_advance<64 * 128>();   // bf16/FP8 64 rows; 4-bit 64 tokens
  check_descriptor_advance<128 * 128>();  // 128 rows
  check_descriptor_advance<192 * 128>();  // FP8 B of 128x192
  check_descriptor_advance<256 * 128>();  // 256 rows / tokens
}

TEST_CASE("fusion index: the producer warpgroup copies every valid gathered row chunk exactly once", "[fusion]") {
  for (int rows : {16, 32, 48, 64, 128, 256})  // bf16 kernel: BM 64/128; 4-bit kernel: 16..256 tokens
    for (int rows_valid = 0; rows_valid <= rows + 3; ++rows_valid) {
      std::map<unsigned, int> writes;  // byte offset in the stage -> tile row
      for (int step = 0; step < gather_steps(rows); ++step)
        for (int thread = 0; thread < 128; ++thread) {
          const int r = gather_tile_row(thread, step, rows);
          REQUIRE(r >= 0);
          REQUIRE(r < rows);
          if (r >= rows_valid) continue;
          const unsigned at = sw128_offset(r, gather_chunk(thread));
          REQUIRE(at % 16 == 0);
          REQUIRE(at < (unsigned)rows * 128u);
          REQUIRE(writes.emplace(at, r).second);  // never twice
          // 8 consecutive lanes copy one row's 128 contiguous global bytes, in chunk order.
          REQUIRE(gather_chunk(thread) == thread % 8);
          REQUIRE(gather_tile_row(thread & ~7, step, rows) == r);
        }
      REQUIRE(writes.size() == (std::size_t)std::min(rows_valid, rows) * 8);
      for (auto& [at, r] : writes) REQUIRE((int)(at / 128) == r);  // swizzle stays inside the row
    }
}

namespace {
// wgmma m64nN f32 accumulators of one warp: register 4j + 2h + e is row lane/4 + 8h, column
// 8j + 2(lane%4) + e (PTX ISA, "wgmma .m64nNk16 register fragment D"). mma.sync m16n8 C fragment:
// c[2h + e] is row lane/4 + 8h, column 2(lane%4) + e of its n8 tile: the same pattern per 8 columns.
int acc_row(int lane, int reg) { return lane / 4 + 8 * ((reg / 2) % 2); }
int acc_col(int lane, int reg) { return 8 * (reg / 4) + 2 * (lane % 4) + reg % 2; }
}  // namespace

TEST_CASE("fusion index: interleaved GLU shuffles give each lane the standard-layout output column", "[fusion]") {
  for (int wg_n : {32, 64, 96, 128, 192, 256}) {
    // What each lane computes before the shuffles: for group pair jp and row half h, lo = pair of
    // group 2 jp, hi = pair of group 2 jp + 1 (registers 4 g + 2 h and + 1: gate, up).
    struct Pair {
      int row, gate_col, up_col;
    };
    auto pair_of = [&](int lane, int group, int h) {
      const int reg = 4 * group + 2 * h;
      REQUIRE(acc_row(lane, reg) == acc_row(lane, reg + 1));
      return Pair{acc_row(lane, reg), acc_col(lane, reg), acc_col(lane, reg + 1)};
    };
    for (int lane = 0; lane < 32; ++lane)
      for (int jp = 0; jp < wg_n / 16; ++jp)
        for (int h = 0; h < 2; ++h)
          for (int e = 0; e < 2; ++e) {
            const int src = glu_pair_source_lane(lane, e);
            REQUIRE(src / 4 == lane / 4);  // same quad: same rows
            const Pair got = pair_of(src, 2 * jp + (glu_pair_from_hi(lane) ? 1 : 0), h);
            // Output register 4 jp + 2 h + e in the standard layout of wg_n / 2 columns.
            const int out_reg = 4 * jp + 2 * h + e;
            const int out_row = acc_row(lane, out_reg), out_col = acc_col(lane, out_reg);
            CHECK(got.row == out_row);
            CHECK(got.gate_col == 2 * out_col);  // contract: gate = even GEMM column
            CHECK(got.up_col == 2 * out_col + 1);
          }
  }
}

TEST_CASE("fusion index: split GLU on Hopper pairs gate column o with up column n/2 + o", "[fusion]") {
  struct Tile {
    int m, n;
  };
  for (Tile t : {Tile{128, 256}, Tile{128, 128}, Tile{128, 192}, Tile{128, 64}, Tile{64, 256}, Tile{64, 128}, Tile{64, 64},
                 Tile{64, 192}}) {
    const int wg_n = t.m == 64 ? t.n / 2 : t.n;  // columns of one consumer slice
    const int half = wg_n / 2;
    for (int n : {16, 64, 320, 512, 1024, 2880}) {
      const int n_tiles = (n + t.n - 1) / t.n;
      for (int n_block = 0; n_block < n_tiles; ++n_block) {
        // load_b_tile: per slice s, the gate box then the up box, `half` rows each.
        std::vector<int> b_row_of_tile_row(t.n, -1);
        for (int s = 0; s < t.n / wg_n; ++s)
          for (int up = 0; up < 2; ++up) {
            const unsigned dst_offset = (unsigned)(s * wg_n + up * half) * 128u;
            REQUIRE(dst_offset % 1024 == 0);  // each box's swizzle is the stacked tile's
            for (int i = 0; i < half; ++i) b_row_of_tile_row[s * wg_n + up * half + i] = split_glu_box_row(n, n_block, t.n, wg_n, s, up) + i;
          }
        for (int b_row : b_row_of_tile_row) REQUIRE(b_row >= 0);  // the boxes fill the tile (its tx bytes)
        for (int s = 0; s < t.n / wg_n; ++s) {
          const int col0 = n_block * t.n, tile_col0 = s * wg_n;  // as the kernel passes them
          const int out0 = col0 / 2 + tile_col0 / 2;             // first output column of the slice (n0)
          REQUIRE(out0 == split_glu_out0(n_block, t.n, wg_n, s));
          // The slice's accumulator column cl is computed from tile row s * wg_n + cl of B.
          for (int cl = 0; cl < wg_n; ++cl) {
            const int b_row = b_row_of_tile_row[s * wg_n + cl];
            CHECK(split_glu_slice_column(n, out0, wg_n, cl) == b_row);  // the bias that column gets
          }
          // Epilogue: gl[4j + i] = glu(acc[4j + i], acc[4(j + wg_n/16) + i]) is output column 8j + 2q + e.
          for (int lane = 0; lane < 32; ++lane)
            for (int j = 0; j < wg_n / 16; ++j)
              for (int i = 0; i < 4; ++i) {
                const int gate_cl = acc_col(lane, 4 * j + i), up_cl = acc_col(lane, 4 * (j + wg_n / 16) + i);
                REQUIRE(acc_row(lane, 4 * j + i) == acc_row(lane, 4 * (j + wg_n / 16) + i));
                const int o = out0 + acc_col(lane, 4 * j + i);  // the output column gl[4j + i] is stored to
                if (o >= n / 2) continue;                        // masked at the store
                CHECK(b_row_of_tile_row[s * wg_n + gate_cl] == o);
                CHECK(b_row_of_tile_row[s * wg_n + up_cl] == n / 2 + o);
              }
        }
      }
    }
  }
}

TEST_CASE("fusion index: split GLU in the portable kernel interleaves gate/up rows of B", "[fusion]") {
  for (int block_n : {64, 128, 256})
    for (int rows_per_pass : {8, 16, 32, 64})
      for (int n : {16, 64, 320, 1024}) {
        for (int tile_col = 0; tile_col < n; tile_col += block_n) {
          const int out0 = tile_col / 2, rows_valid = n - tile_col;  // the loader's cols_valid
          for (int row = 0; row < block_n; ++row) {
            // Valid tile rows are exactly the pairs of output columns < n/2.
            CHECK((row < rows_valid) == (out0 + row / 2 < n / 2));
            if (row >= rows_valid) continue;
            const int b_row = split_glu_tile_row(row, out0, n / 2);
            CHECK(b_row == (row % 2 ? n / 2 : 0) + out0 + row / 2);
            CHECK(b_row < n);
            // OperandLoader::init_split: first row's pointer, then rows_per_pass / 2 B rows per pass.
            const int first = row % rows_per_pass, pass = row / rows_per_pass;
            CHECK(split_glu_tile_row(first, out0, n / 2) + pass * (rows_per_pass / 2) == b_row);
          }
          // Epilogue: tile columns (2i, 2i + 1) are (gate, up) of output column out0 + i.
          for (int i = 0; 2 * i < block_n && out0 + i < n / 2; ++i) {
            CHECK(split_glu_tile_row(2 * i, out0, n / 2) == out0 + i);
            CHECK(split_glu_tile_row(2 * i + 1, out0, n / 2) == n / 2 + out0 + i);
          }
        }
      }
}

// The staged epilogue's chunk buffers (c_staging_*) against a model of the TMA store groups: before
// a chunk writes its buffer, the waits it does must leave no group that reads that buffer. Random
// sequences of stored (whole) and copied (group-end) slices of 1, 2, 4 or 8 chunks.
TEST_CASE("staged epilogue: no chunk rewrites a buffer a TMA store still reads", "[fusion][index]") {
  std::mt19937 rng(2411);
  auto run = [&](bool use_state, const std::vector<int>& slices_whole, int chunks_per_slice) {
    std::vector<unsigned> pending;  // buffers of the committed groups that may still be reading, oldest first
    unsigned state = 0, naive_buffer = 0;
    for (int whole : slices_whole)
      for (int c = 0; c < chunks_per_slice; ++c) {
        const unsigned b = use_state ? c_staging_buffer(state) : naive_buffer;
        const bool wait_all = use_state && c_staging_wait_all(state);
        // wait_group.read N: at most the N newest groups may still be reading.
        const size_t keep = wait_all ? 0 : 1;
        if (pending.size() > keep) pending.erase(pending.begin(), pending.end() - (long)keep);
        for (unsigned p : pending)
          if (p == b) return false;  // this chunk would overwrite a buffer a store still reads
        if (whole) pending.push_back(b);
        state = c_staging_next(state, whole != 0);
        naive_buffer ^= 1u;
      }
    return true;
  };
  for (int chunks : {1, 2, 4, 8})
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<int> slices(1 + rng() % 12);
      for (int& w : slices) w = (int)(rng() % 3 != 0);
      INFO("chunks per slice " << chunks << ", trial " << trial);
      CHECK(run(true, slices, chunks));
    }
  // The rule before v9 (always all but the newest) fails after a stored slice of two chunks
  // followed by a copied one: the copied slice's second chunk rewrites buffer 1 under the store.
  CHECK_FALSE(run(false, {1, 0}, 2));
  CHECK(run(true, {1, 0}, 2));
}
