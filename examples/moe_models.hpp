// The public MoE layer shapes of the suite (shared docs: moe-shapes.md) and their routings: random
// top-k (the suite's) and skewed (hot experts and dead ones).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
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

// Shapes beyond the suite (bench_suite BENCH_MORE_MODELS=1; tests/gpu/peers.py SHAPES holds the same):
// other public MoE configs, to check that the heuristic's rules, fitted on the four above, carry
// over. deepseek-v3-ep8 is one rank of DeepSeek-V3 under 8-way expert parallelism: its 32 local
// experts see about `tokens` rows in all (tokens x 8 routed rows over 256 experts, one eighth of
// them here), drawn as top-1 over the 32.
inline constexpr MoeModel kMoreMoeModels[] = {
    {"qwen3-235b-a22b", 128, 8, 4096, 1536, 3072},
    {"kimi-k2", 384, 8, 7168, 2048, 4096},
    {"glm-4.5", 160, 8, 5120, 1536, 3072},
    {"llama4-maverick", 128, 1, 5120, 8192, 16384},
    {"gpt-oss-20b", 32, 4, 2880, 2880, 5760},
    {"mixtral-8x22b", 8, 2, 6144, 16384, 32768},
    {"deepseek-v3-ep8", 32, 1, 7168, 2048, 4096},
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

// Skewed routing (moe-shapes.md: "a few experts receive most of the rows, and experts with no rows
// at all"). Each model's experts get a fixed popularity order (a permutation seeded by the model's
// shape, so up and down share their hot experts); the expert of rank r draws with weight
// (r + 1)^-1.2 and the last E/8 ranks never draw. Each token takes k distinct experts with
// probabilities in proportion to the weights (Gumbel top-k: the k largest log w + Gumbel noise).
// At 4096 tokens the hottest expert of DeepSeek-V3 gets ~94% of the tokens, the median active one
// ~1%, and the top tenth of the experts ~2/3 of the rows (every model ~0.6-0.7 but Mixtral's 8).
inline constexpr double kSkewZipfExponent = 1.2;
inline constexpr int kSkewDeadExpertsInverse = 8;  // E / 8 experts receive no rows

// Each expert's log popularity under skewed routing (-infinity for the dead ones): the fixed order
// is a permutation seeded by the model's shape. Also examples/moe_layer's router bias.
inline std::vector<double> skewed_log_popularity(int experts, int topk, int hidden) {
  std::vector<int> by_rank(experts);
  std::iota(by_rank.begin(), by_rank.end(), 0);
  std::mt19937 order_rng(static_cast<unsigned>(experts * 7919 + topk * 104729 + hidden));
  std::shuffle(by_rank.begin(), by_rank.end(), order_rng);
  const int live = experts - experts / kSkewDeadExpertsInverse;
  std::vector<double> log_weight(experts, -std::numeric_limits<double>::infinity());
  for (int r = 0; r < live; ++r) log_weight[by_rank[r]] = -kSkewZipfExponent * std::log(r + 1.0);
  return log_weight;
}

inline std::vector<int> route_top_k_skewed(int tokens, const MoeModel& m, std::mt19937& rng) {
  const std::vector<double> log_weight = skewed_log_popularity(m.experts, m.topk, m.hidden);

  std::vector<int> counts(m.experts, 0), order(m.experts);
  std::vector<double> key(m.experts);
  for (int t = 0; t < tokens; ++t) {
    for (int e = 0; e < m.experts; ++e) {
      const double u = (rng() + 0.5) / 4294967296.0;  // in (0, 1): the Gumbel draw stays finite
      key[e] = log_weight[e] - std::log(-std::log(u));
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + m.topk, order.end(), [&](int a, int b) { return key[a] > key[b]; });
    for (int j = 0; j < m.topk; ++j) counts[order[j]]++;
  }
  return counts;
}

// ROUTING=skewed selects route_top_k_skewed; unset or "random", route_top_k.
inline bool skewed_routing_requested() {
  const char* mode = std::getenv("ROUTING");
  if (!mode || std::string(mode).empty() || std::string(mode) == "random") return false;
  if (std::string(mode) == "skewed") return true;
  throw std::invalid_argument("ROUTING='" + std::string(mode) + "': expected random or skewed");
}

}  // namespace moejit::examples
