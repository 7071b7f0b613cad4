// The FP64 arithmetic behind the GPU tests' references (gpu_problem.hpp, fusion_problem.hpp,
// test_gpu_formats.cpp). It runs on the GPU machine's CPU while the device is held: in the H100
// run of 2026-11-23 the references were most of the suite's 9.5 minutes ("large total M" alone
// 104 s), hence independent partial sums and work spread over every core by rows, not groups.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

namespace moejit::test {

// sum over q of a[q] * b[q] in FP64. Four partial sums keep four adds in flight (one chain
// waits on each add: 3x slower); in FP64 the order is far below every bound the tests use.
template <class T>
inline double dot_f64(const T* a, const T* b, int k) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int q = 0;
  for (; q + 4 <= k; q += 4) {
    s0 += (double)a[q] * (double)b[q];
    s1 += (double)a[q + 1] * (double)b[q + 1];
    s2 += (double)a[q + 2] * (double)b[q + 2];
    s3 += (double)a[q + 3] * (double)b[q + 3];
  }
  for (; q < k; ++q) s0 += (double)a[q] * (double)b[q];
  return (s0 + s1) + (s2 + s3);
}

// fn(group, row, flat) for every row of every group (row in [0, rows_of[group]); flat numbers the
// rows of all groups in order), on every core in chunks of rows: one group of 4096 rows beside
// groups of 77 keeps all cores busy. fn must only write what belongs to its own row.
template <class F>
inline void for_each_group_row(const std::vector<int>& rows_of, F&& fn) {
  std::vector<long> start(rows_of.size() + 1, 0);
  for (std::size_t g = 0; g < rows_of.size(); ++g) start[g + 1] = start[g] + std::max(rows_of[g], 0);
  const long total = start.back();
  constexpr long kChunk = 4;
  std::atomic<long> next{0};
  auto worker = [&] {
    for (long begin; (begin = next.fetch_add(kChunk)) < total;) {
      int g = (int)(std::upper_bound(start.begin(), start.end(), begin) - start.begin()) - 1;
      for (long flat = begin; flat < std::min(begin + kChunk, total); ++flat) {
        while (flat >= start[g + 1]) ++g;  // skips empty groups
        fn(g, (int)(flat - start[g]), flat);
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < std::max(1u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
}

// out[i] = make(x) with x drawn from N(0, 1), generated on every core: chunks of 2^16 values, each
// from its own mt19937 seeded by one draw of `rng`, so the values depend on rng's state alone, not
// on the core count. std::normal_distribution costs ~25 ns a value: on one core, drawing B was
// most of a decode-sized GPU test (2M values of B, 56 ms, for every one of ~500 variants).
template <class T, class Make>
inline void fill_normal(std::vector<T>& out, std::mt19937& rng, Make make) {
  constexpr std::size_t kChunk = std::size_t{1} << 16;
  const std::size_t chunks = (out.size() + kChunk - 1) / kChunk;
  std::vector<std::uint32_t> seeds(chunks);
  for (auto& s : seeds) s = rng();
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t c; (c = next++) < chunks;) {
      std::mt19937 local(seeds[c]);
      std::normal_distribution<float> normal(0.f, 1.f);
      for (std::size_t i = c * kChunk; i < std::min(out.size(), (c + 1) * kChunk); ++i) out[i] = make(normal(local));
    }
  };
  std::vector<std::thread> threads;
  const unsigned workers = std::min<std::size_t>(std::max(1u, std::thread::hardware_concurrency()), chunks);
  for (unsigned t = 1; t < workers; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
}

}  // namespace moejit::test
