// The heuristic's choice for every case of the benchmark suite (../shared/docs/moe-shapes.md: 4
// models x up/down x 16..16384 tokens, random top-k routing), per format, and for a layer's GEMM2
// (scatter + weight) and gathered GEMM1 (gather + GLU, since v49), pinned in tests/data/suite_choices.txt. The suite's tables in docs/perf.md were
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

#include "../examples/moe_models.hpp"  // the suite's models (kMoeModels) and route_top_k
#include "heuristics/config.hpp"
#include "moejit/moejit.hpp"

using namespace moejit;

namespace {

constexpr int kTokens[] = {16, 128, 1024, 4096, 16384};

// "model gemm tokens format fusion" -> the chosen spec's text, for every suite case.
std::map<std::string, std::string> current_choices() {
  const Arch hopper{9, 0, true};
  std::map<std::string, std::string> out;
  for (const examples::MoeModel& m : examples::kMoeModels)
    for (const char* gemm : {"up", "down"})
      for (int tokens : kTokens) {
        const bool up = std::string(gemm) == "up";
        const int n = up ? m.up_n : m.hidden, k = up ? m.hidden : m.intermediate;
        std::mt19937 rng((unsigned)(m.experts * 131 + tokens * 7 + (up ? 1 : 2)));
        const std::vector<int> rows = examples::route_top_k(tokens, m, rng);
        const long long total = std::accumulate(rows.begin(), rows.end(), 0LL);
        for (const char* format : {"bf16", "e4m3", "mxfp4", "nvfp4"})
          for (const char* fuse : {"none", "scatter+weight", "gather+glu"}) {
            const std::string f(format), fu(fuse);
            if (fu == "scatter+weight" && (up || f == "mxfp4" || f == "nvfp4")) continue;  // a layer's GEMM2: bf16, FP8
            if (fu == "gather+glu" && (!up || f == "mxfp4" || f == "nvfp4")) continue;     // its gathered GEMM1: bf16, FP8
            GemmProblem p{GroupLayout::contiguous, f == "e4m3" ? DType::e4m3 : DType::bf16, DType::bf16, m.experts, n, k, total, rows};
            if (f == "mxfp4") p.b_type = DType::mxfp4;
            if (f == "nvfp4") p.b_type = DType::nvfp4;
            if (fu == "scatter+weight") p.fusion = KernelSpec::parse("fuse=scatter+weight").fusion;
            // gpt-oss's GEMM1 as examples/moe_layer runs it (bias, its clamped SwiGLU, gate / up interleaved),
            // the others' with a split SwiGLU.
            if (fu == "gather+glu")
              p.fusion = KernelSpec::parse(std::string(m.name).starts_with("gpt-oss") ? "fuse=gather+bias,act=swiglu_oai"
                                                                                      : "fuse=gather,act=swiglu,glu=split")
                             .fusion;
            out[fmt::format("{} {} {} {} {}", m.name, gemm, tokens, format, fuse)] = choose_spec(p, hopper, 132).to_text();
          }
      }
  return out;
}

const std::string kPath = std::string(MOEJIT_SOURCE_DIR) + "/tests/data/suite_choices.txt";

}  // namespace

TEST_CASE("the suite's heuristic choices are the pinned ones (tests/data/suite_choices.txt)", "[tuning][suite_choices]") {
  const std::map<std::string, std::string> now = current_choices();
  REQUIRE(now.size() == 4 * 2 * 5 * 4 + 2 * (4 * 5 * 2));  // every format, and the GEMM2 and gathered GEMM1 in bf16 and FP8
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

// Every choice the heuristic makes must validate: choose_spec validates its result and throws where
// two rules combine into a spec no kernel has (v49's first interleaved-pair rule met the mixed tile
// order under skew and threw, so moe_layer's DeepSeek-V3 layer at 10240 tokens had no fused GEMMs).
// All models of examples/moe_models.hpp, token counts between and past the suite's, random and
// skewed routing, each format and a layer's fusions.
TEST_CASE("the heuristic's choice validates for every model, token count, routing, format and fusion", "[tuning]") {
  const Arch hopper{9, 0, true};
  std::vector<examples::MoeModel> models(std::begin(examples::kMoeModels), std::end(examples::kMoeModels));
  models.insert(models.end(), std::begin(examples::kMoreMoeModels), std::end(examples::kMoreMoeModels));
  int checked = 0;
  for (const examples::MoeModel& m : models)
    for (int tokens : {16, 200, 1024, 2048, 5000, 8704, 10240, 12288, 16384, 24576})
      for (bool skewed : {false, true})
        for (const char* gemm : {"up", "down"}) {
          const bool up = std::string(gemm) == "up";
          const int n = up ? m.up_n : m.hidden, k = up ? m.hidden : m.intermediate;
          std::mt19937 rng((unsigned)(tokens * 31 + m.experts + (skewed ? 7 : 0) + (up ? 1 : 2)));
          const std::vector<int> rows = skewed ? examples::route_top_k_skewed(tokens, m, rng) : examples::route_top_k(tokens, m, rng);
          const long long total = std::accumulate(rows.begin(), rows.end(), 0LL);
          for (const char* format : {"bf16", "e4m3", "mxfp4", "nvfp4"})
            for (const char* fuse : {"", "fuse=scatter+weight", "fuse=gather,act=swiglu,glu=split"}) {
              const std::string f(format);
              if (*fuse && std::string(fuse).find("gather") != std::string::npos && (!up || f == "nvfp4")) continue;
              if (*fuse && std::string(fuse).find("scatter") != std::string::npos && up) continue;
              GemmProblem p{GroupLayout::contiguous, f == "e4m3" ? DType::e4m3 : DType::bf16, DType::bf16, m.experts, n, k, total, rows};
              if (f == "mxfp4") p.b_type = DType::mxfp4;
              if (f == "nvfp4") p.b_type = DType::nvfp4;
              if (*fuse) p.fusion = KernelSpec::parse(fuse).fusion;
              INFO(fmt::format("{} {} {} tokens, {} routing, {} {}", m.name, gemm, tokens, skewed ? "skewed" : "random", format, fuse));
              KernelSpec s;
              REQUIRE_NOTHROW(s = choose_spec(p, hopper, 132));
              CHECK_NOTHROW(s.validate());
              CHECK(KernelSpec::parse(s.to_text()) == s);  // and equals its text's parse (one hot-path key)
              ++checked;
            }
        }
  CHECK(checked > 2000);
}
