// The public MoE layer shapes of the suite (shared docs: moe-shapes.md) and random top-k routing.
#pragma once
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

namespace moejit::examples {

struct MoeModel {
  const char* name;
  int experts, topk, hidden, intermediate, up_n;  // up GEMM: N = up_n, K = hidden; down: N = hidden, K = intermediate
};

inline constexpr MoeModel kMoeModels[] = {
    {"gpt-oss-120b", 128, 4, 2880, 2880, 5760},
    {"mixtral-8x7b", 8, 2, 4096, 14336, 28672},
    {"deepseek-v3", 256, 8, 7168, 2048, 4096},
    {"qwen3-30b-a3b", 128, 8, 2048, 768, 1536},
};

inline const MoeModel* find_model(const std::string& name) {
  for (const MoeModel& m : kMoeModels)
    if (name == m.name) return &m;
  return nullptr;
}

// Top-k of random normal logits per token -> rows per expert.
inline std::vector<int> route_top_k(int tokens, const MoeModel& m, std::mt19937& rng) {
  std::normal_distribution<float> logit;
  std::vector<int> counts(m.experts, 0), order(m.experts);
  std::vector<float> l(m.experts);
  for (int t = 0; t < tokens; ++t) {
    for (auto& x : l) x = logit(rng);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + m.topk, order.end(), [&](int a, int b) { return l[a] > l[b]; });
    for (int j = 0; j < m.topk; ++j) counts[order[j]]++;
  }
  return counts;
}

}  // namespace moejit::examples
