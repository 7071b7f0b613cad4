// CPU definitions of the routing helpers (moejit::reference): what the kernels are tested against.
// Selection is done in float on the same values the kernels rank, so indices agree exactly; the
// weights are computed in double (the kernels' float results agree within 1e-6).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "moejit/errors.hpp"
#include "moejit/routing.hpp"

namespace moejit::reference {
namespace {

// The kernels' sigmoid_exact (kernel_templates/moejit/routing/routing.cuh), step for step.
float sigmoid_exact(float x) {
  const float t = -x;
  if (!(t >= -80.f)) return t != t ? t : 1.f;
  if (t > 88.f) return 0.f;
  const float n = std::nearbyint(t * 1.44269502f);
  float r = std::fma(-n, 0.693145752f, t);
  r = std::fma(-n, 1.42860677e-06f, r);
  float p = 1.98412701e-04f;
  p = std::fma(p, r, 1.38888892e-03f);
  p = std::fma(p, r, 8.33333377e-03f);
  p = std::fma(p, r, 4.16666679e-02f);
  p = std::fma(p, r, 1.66666672e-01f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  return 1.0f / (1.0f + std::ldexp(p, static_cast<int>(n)));
}

}  // namespace

float sigmoid_for_routing(float x) { return sigmoid_exact(x); }

Routing route(const RoutingArgs& a, const std::vector<float>& logits, const std::vector<float>& correction_bias) {
  const int T = a.num_tokens, E = a.num_experts, K = a.top_k;
  if (T < 0 || E < 1 || K < 1 || K > E) throw InvalidArgument(fmt::format("reference::route: tokens={} experts={} top_k={}", T, E, K));
  if (logits.size() != (std::size_t)T * E)
    throw InvalidArgument(fmt::format("reference::route: logits has {} values (expected tokens × experts = {})", logits.size(), (std::size_t)T * E));
  const RoutingMethod& m = a.method;
  const bool sigmoid = m.score == RoutingScore::sigmoid_topk;
  if (!correction_bias.empty() && (!sigmoid || correction_bias.size() != (std::size_t)E))
    throw InvalidArgument("reference::route: correction_bias must be empty or [experts] with score=sigmoid_topk");
  const float inf = std::numeric_limits<float>::infinity();
  Routing out;
  out.topk_ids.resize((std::size_t)T * K);
  out.topk_weights.resize((std::size_t)T * K);
  std::vector<float> source(E), choice(E);
  std::vector<char> eligible(E);
  std::vector<int> order(E);
  for (int t = 0; t < T; ++t) {
    const float* row = &logits[(std::size_t)t * E];
    for (int e = 0; e < E; ++e) {
      float x = row[e], c = x;
      if (sigmoid) {
        x = sigmoid_exact(x);
        c = x + (correction_bias.empty() ? 0.f : correction_bias[e]);
      }
      source[e] = x;
      choice[e] = std::isnan(c) ? -inf : c;
      eligible[e] = 1;
    }
    if (sigmoid && m.expert_groups > 1) {
      const int G = m.expert_groups, size = E / G;
      std::vector<float> group_score(G);
      for (int g = 0; g < G; ++g) {
        std::vector<float> v(choice.begin() + g * size, choice.begin() + (g + 1) * size);
        std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
        group_score[g] = v[0] + v[1];
      }
      std::vector<int> groups(G);
      std::iota(groups.begin(), groups.end(), 0);
      std::stable_sort(groups.begin(), groups.end(), [&](int x, int y) { return group_score[x] > group_score[y]; });
      std::vector<char> kept(G, 0);
      for (int r = 0; r < m.topk_groups; ++r) kept[groups[r]] = 1;
      for (int e = 0; e < E; ++e) eligible[e] = kept[e / size];
    }
    order.clear();
    for (int e = 0; e < E; ++e)
      if (eligible[e]) order.push_back(e);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int x, int y) { return choice[x] > choice[y] || (choice[x] == choice[y] && x < y); });
    std::vector<double> w(K);
    double total = 0;
    if (m.score == RoutingScore::softmax_topk) {
      double mx = -INFINITY, sum = 0;
      for (int e = 0; e < E; ++e) mx = std::max(mx, (double)source[e]);
      for (int e = 0; e < E; ++e) sum += std::exp((double)source[e] - mx);
      for (int j = 0; j < K; ++j) w[j] = std::exp((double)source[order[j]] - mx) / sum;
    } else if (m.score == RoutingScore::topk_softmax) {
      for (int j = 0; j < K; ++j) w[j] = std::exp((double)source[order[j]] - (double)source[order[0]]);
    } else {
      for (int j = 0; j < K; ++j) w[j] = source[order[j]];
    }
    for (double v : w) total += v;
    double scale = m.scaling_factor;
    if (m.score == RoutingScore::topk_softmax) scale /= total;
    else if (m.renormalize) scale /= sigmoid ? total + 1e-20 : total;
    for (int j = 0; j < K; ++j) {
      out.topk_ids[(std::size_t)t * K + j] = order[j];
      out.topk_weights[(std::size_t)t * K + j] = (float)(w[j] * scale);
    }
  }

  // Counting sort by expert, (token, slot) order within an expert.
  std::vector<int> counts(E, 0);
  for (int id : out.topk_ids) counts[id]++;
  const bool masked = a.layout == GroupLayout::masked;
  std::vector<long long> starts(E + 1, 0);
  for (int e = 0; e < E; ++e) {
    long long size = masked ? a.capacity : (counts[e] + a.row_alignment - 1) / a.row_alignment * (long long)a.row_alignment;
    starts[e + 1] = starts[e] + size;
  }
  out.group_counts.resize(E);
  for (int e = 0; e < E; ++e) out.group_counts[e] = masked ? std::min(counts[e], a.capacity) : counts[e];
  if (!masked) out.group_offsets.assign(starts.begin(), starts.end());
  long long rows = routed_rows(a);
  out.gather_rows.assign(rows, -2);
  out.scatter_rows.assign(rows, -2);
  out.routing_weights.assign(rows, std::numeric_limits<float>::quiet_NaN());
  out.row_of_slot.assign((std::size_t)T * K, -1);
  std::vector<int> seen(E, 0);
  for (long long f = 0; f < (long long)T * K; ++f) {
    int e = out.topk_ids[f];
    int r = seen[e]++;
    if (masked && r >= a.capacity) continue;
    long long row = starts[e] + r;
    out.gather_rows[row] = (int)(f / K);
    out.scatter_rows[row] = (int)f;
    out.routing_weights[row] = out.topk_weights[f];
    out.row_of_slot[f] = (int)row;
  }
  if (!masked)
    for (int e = 0; e < E; ++e)
      for (long long row = starts[e] + counts[e]; row < starts[e + 1]; ++row)
        out.gather_rows[row] = 0, out.scatter_rows[row] = -1, out.routing_weights[row] = 0.f;
  return out;
}

std::vector<double> combine(int num_tokens, int top_k, int n, const std::vector<float>& input,
                            const std::vector<float>& topk_weights, const std::vector<int>& row_of_slot) {
  if (input.size() != (std::size_t)num_tokens * top_k * n)
    throw InvalidArgument(fmt::format("reference::combine: input has {} values (expected tokens × top_k × n = {})",
                                      input.size(), (std::size_t)num_tokens * top_k * n));
  std::vector<double> out((std::size_t)num_tokens * n, 0.0);
  for (int t = 0; t < num_tokens; ++t)
    for (int j = 0; j < top_k; ++j) {
      std::size_t slot = (std::size_t)t * top_k + j;
      if (!row_of_slot.empty() && row_of_slot[slot] < 0) continue;
      double w = topk_weights.empty() ? 1.0 : topk_weights[slot];
      for (int c = 0; c < n; ++c) out[(std::size_t)t * n + c] += w * input[slot * n + c];
    }
  return out;
}

}  // namespace moejit::reference
