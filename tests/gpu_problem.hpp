// A grouped GEMM problem on the host and the device, with an FP64 CPU reference.
#pragma once
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "driver/driver_api.hpp"
#include "moejit/formats.hpp"
#include "moejit/runtime.hpp"
#include "problem_common.hpp"
#include "reference_gemm.hpp"

namespace moejit::test {

// Compiles (or loads from the cache) every spec on all cores: a first GPU test run is bound by
// cold NVRTC compiles, not by the GPU.
inline void compile_on_all_cores(Runtime& rt, const std::vector<KernelSpec>& specs) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t)
    threads.emplace_back([&] {
      for (std::size_t i; (i = next++) < specs.size();) rt.compile(specs[i]);
    });
  for (auto& t : threads) t.join();
}

// split=tail tests: a filler group in front of `tail_groups` so that the launch has about
// `target_tiles` tiles of tile_m rows x n_tiles; the filler's last tile holds 51 rows. Tiles are
// numbered group by group, so the last round (the split one) holds `tail_groups`' tiles.
inline std::vector<int> rows_for_tile_count(const std::vector<int>& tail_groups, int target_tiles, int tile_m, int n_tiles) {
  int tail_m_tiles = 0;
  for (int r : tail_groups) tail_m_tiles += (r + tile_m - 1) / tile_m;
  const int filler_tiles = std::max(0, target_tiles / n_tiles - tail_m_tiles);
  std::vector<int> rows = {std::max(0, filler_tiles * tile_m - 77)};
  rows.insert(rows.end(), tail_groups.begin(), tail_groups.end());
  return rows;
}

inline long long tile_count(const std::vector<int>& rows, int tile_m, int n_tiles) {
  long long tiles = 0;
  for (int r : rows) tiles += (long long)((r + tile_m - 1) / tile_m) * n_tiles;
  return tiles;
}

struct GroupedProblem {
  GroupLayout layout = GroupLayout::contiguous;
  DType ab = DType::bf16, c = DType::bf16;
  int groups = 0, n = 0, k = 0;
  std::vector<int> rows_of;   // valid rows per group
  std::vector<int> offsets;   // contiguous: groups + 1 (offsets[0] may be > 0: leading rows untouched)
  int total_rows = 0;         // rows of A and C (contiguous) or groups × capacity (masked)
  int capacity = 0;
  std::vector<std::uint16_t> a, b;
  DeviceBuffer d_a, d_b, d_c, d_groups;

  std::size_t c_bytes() const { return (std::size_t)total_rows * n * element_bytes(c); }
  float to_float(std::uint16_t v) const { return ab == DType::bf16 ? bf16_to_float(v) : f16_to_float(v); }
  std::uint16_t from_float(float v) const { return ab == DType::bf16 ? float_to_bf16(v) : float_to_f16(v); }

  // Fresh random data (never zeros); contiguous rows before the first group and after the
  // last are left out of every group so that writing them is caught.
  void fill(std::mt19937& rng, int lead_rows = 3, int tail_rows = 5) {
    if (layout == GroupLayout::contiguous) {
      offsets.assign(1, lead_rows);
      for (int r : rows_of) offsets.push_back(offsets.back() + r);
      total_rows = offsets.back() + tail_rows;
    } else {
      total_rows = groups * capacity;
    }
    a.resize((std::size_t)total_rows * k);
    b.resize((std::size_t)groups * n * k);
    fill_normal(a, rng, [&](float x) { return from_float(x); });
    fill_normal(b, rng, [&](float x) { return from_float(x * 0.1f); });
    d_a = DeviceBuffer(std::max<std::size_t>(a.size() * 2, 16));
    d_b = DeviceBuffer(b.size() * 2);
    d_c = DeviceBuffer(std::max<std::size_t>(c_bytes(), 16));
    d_a.upload(a.data(), a.size() * 2);
    d_b.upload(b.data(), b.size() * 2);
    const std::vector<int>& g = layout == GroupLayout::contiguous ? offsets : rows_of;
    d_groups = DeviceBuffer(g.size() * sizeof(int));
    d_groups.upload(g.data(), g.size() * sizeof(int));
  }

  GroupedGemmArgs args() const {
    GroupedGemmArgs x;
    x.layout = layout;
    x.ab_type = ab;
    x.c_type = c;
    x.a = d_a.get();
    x.b = d_b.get();
    x.c = d_c.get();
    x.num_groups = groups;
    x.n = n;
    x.k = k;
    set_group_args(x, layout, d_groups, total_rows, capacity, offsets, rows_of);
    return x;
  }

  // Output poisoned with 0xFF bytes: NaN in every float type, so an unwritten element fails.
  void poison() const { MOEJIT_CU(driver().cuMemsetD8(d_c.ptr(), 0xFF, c_bytes())); }

  // Row of A/C where group g starts.
  int row_begin(int g) const { return layout == GroupLayout::contiguous ? offsets[g] : g * capacity; }

  std::vector<double> reference() const {
    std::vector<double> ref((std::size_t)total_rows * n, std::nan(""));
    std::vector<float> af(a.size()), bf(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) af[i] = to_float(a[i]);
    for (std::size_t i = 0; i < b.size(); ++i) bf[i] = to_float(b[i]);
    for_each_group_row(rows_of, [&](int g, int r, long) {
      const float* arow = &af[(std::size_t)(row_begin(g) + r) * k];
      for (int j = 0; j < n; ++j)
        ref[(std::size_t)(row_begin(g) + r) * n + j] = dot_f64(arow, &bf[((std::size_t)g * n + j) * k], k);
    });
    return ref;
  }

  struct Check {
    double rel_err = 0;
    long nan_in_groups = 0;      // NaN (or unwritten poison) where a result belongs
    long written_outside = 0;    // elements outside every group that lost their poison
  };

  Check check() const {
    std::vector<double> ref = reference();
    std::vector<char> raw(c_bytes());
    d_c.download(raw.data(), raw.size());
    Check out;
    double err2 = 0, ref2 = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const auto [got, poison_intact] = read_output(c, raw, i);
      if (std::isnan(ref[i])) {
        out.written_outside += !poison_intact;
      } else if (std::isnan(got)) {
        out.nan_in_groups++;
      } else {
        err2 += (got - ref[i]) * (got - ref[i]);
        ref2 += ref[i] * ref[i];
      }
    }
    out.rel_err = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
    return out;
  }
};

}  // namespace moejit::test
