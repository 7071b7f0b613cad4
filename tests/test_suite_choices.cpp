// The heuristic's choice for every case of the benchmark suite (../shared/docs/moe-shapes.md: 4
// models x up/down x 16..16384 tokens, random top-k routing), per format, and for a layer's GEMM2
// (scatter + weight), pinned in tests/data/suite_choices.txt. The suite's tables in docs/perf.md were
// measured on these choices: a rule that moves one should say so and be measured there. The routing
// here is this test's own (seeded per case), not bench_suite's, so it stands for "a typical random
// routing" of each case. After a deliberate change:
//   MOEJIT_UPDATE_SUITE_CHOICES=1 build/tests/moejit_tests "[suite_choices]"
// rewrites the file; commit it with the change and say in docs/perf.md which cases moved.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "heuristics/config.hpp"
#include "moejit/moejit.hpp"

using namespace moejit;

namespace {

struct SuiteModel {
  const char* name;
  int experts, topk, up_n, up_k, down_n, down_k;
};
// ../shared/docs/moe-shapes.md
constexpr SuiteModel kSuite[] = {
    {"gpt-oss-120b", 128, 4, 5760, 2880, 2880, 2880},
    {"mixtral-8x7b", 8, 2, 28672, 4096, 4096, 14336},
    {"deepseek-v3", 256, 8, 4096, 7168, 7168, 2048},
    {"qwen3-30b-a3b", 128, 8, 1536, 2048, 2048, 768},
};
constexpr int kTokens[] = {16, 128, 1024, 4096, 16384};

// Top-k of random normal logits per token -> rows per expert (as examples/moe_models.hpp routes).
std::vector<int> route(const SuiteModel& m, int tokens, unsigned seed) {
  std::mt19937 rng(seed);
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

// "model gemm tokens format fusion" -> the chosen spec's text, for every suite case.
std::map<std::string, std::string> current_choices() {
  const Arch hopper{9, 0, true};
  std::map<std::string, std::string> out;
  for (const SuiteModel& m : kSuite)
    for (const char* gemm : {"up", "down"})
      for (int tokens : kTokens) {
        const bool up = std::string(gemm) == "up";
        const int n = up ? m.up_n : m.down_n, k = up ? m.up_k : m.down_k;
        const std::vector<int> rows = route(m, tokens, (unsigned)(m.experts * 131 + tokens * 7 + (up ? 1 : 2)));
        const long long total = std::accumulate(rows.begin(), rows.end(), 0LL);
        for (const char* format : {"bf16", "e4m3", "mxfp4", "nvfp4"})
          for (const char* fuse : {"none", "scatter+weight"}) {
            const std::string f(format);
            if (std::string(fuse) != "none" && (up || f == "mxfp4" || f == "nvfp4")) continue;  // a layer's GEMM2: bf16, FP8
            GemmProblem p{GroupLayout::contiguous, f == "e4m3" ? DType::e4m3 : DType::bf16, DType::bf16, m.experts, n, k, total, rows};
            if (f == "mxfp4") p.b_type = DType::mxfp4;
            if (f == "nvfp4") p.b_type = DType::nvfp4;
            if (std::string(fuse) != "none") p.fusion = KernelSpec::parse(fmt::format("fuse={}", fuse)).fusion;
            out[fmt::format("{} {} {} {} {}", m.name, gemm, tokens, format, fuse)] = choose_spec(p, hopper, 132).to_text();
          }
      }
  return out;
}

const std::string kPath = std::string(MOEJIT_SOURCE_DIR) + "/tests/data/suite_choices.txt";

}  // namespace

TEST_CASE("the suite's heuristic choices are the pinned ones (tests/data/suite_choices.txt)", "[tuning][suite_choices]") {
  const std::map<std::string, std::string> now = current_choices();
  REQUIRE(now.size() == 4 * 2 * 5 * 4 + 4 * 5 * 2);  // every format, and the GEMM2 in bf16 and FP8
  if (const char* update = std::getenv("MOEJIT_UPDATE_SUITE_CHOICES"); update && *update && *update != '0') {
    std::ofstream file(kPath);
    file << "# The heuristic's choice per suite case (tests/test_suite_choices.cpp): model gemm tokens format fusion | spec\n";
    for (const auto& [key, spec] : now) file << key << " | " << spec << "\n";
    REQUIRE(file.good());
    WARN("rewrote " << kPath);
    return;
  }
  std::ifstream file(kPath);
  REQUIRE(file.good());
  std::map<std::string, std::string> pinned;
  for (std::string line; std::getline(file, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto bar = line.find(" | ");
    REQUIRE(bar != std::string::npos);
    pinned[line.substr(0, bar)] = line.substr(bar + 3);
  }
  std::ostringstream moved;
  int changes = 0;
  for (const auto& [key, spec] : now) {
    const auto it = pinned.find(key);
    const std::string was = it == pinned.end() ? "(not pinned)" : it->second;
    if (was != spec) moved << key << ":\n  was " << was << "\n  now " << spec << "\n", ++changes;
  }
  INFO("suite cases whose choice moved (measure them, then MOEJIT_UPDATE_SUITE_CHOICES=1):\n" << moved.str());
  CHECK(changes == 0);
  CHECK(pinned.size() == now.size());
}
