// GPU tests of the fusions (docs/design.md, "Fusions"): every fusion flag and activation, both
// GLU layouts and the atomic combine × kernel family × layout × A/B dtype (bf16, f16), against
// the FP64 CPU reference of tests/fusion_problem.hpp on fresh random data, output poisoned first.
// Routings: random top-k with an expert that receives 0 rows, every token to one expert (M not a
// multiple of the tile), decode (a few tokens). They pass on the H100 (docs/perf.md v5-v7).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fusion_checks.hpp"
#include "fusion_problem.hpp"
#include "gpu_problem.hpp"
#include "heuristics/config.hpp"
#include "moejit/moejit.hpp"

using namespace moejit;
using namespace moejit::test;

namespace {

Runtime& runtime() {
  static Runtime rt;
  return rt;
}

// ||out - ref|| / ||ref||. Activations use ex2/rcp/tanh.approx (tanh.approx: ~2^-11 relative).
double error_bound(const KernelSpec& s) {
  if (s.c == DType::bf16) return 1e-2;
  if (s.c == DType::f16) return 5e-3;
  return s.fusion.activation == Activation::gelu ? 1e-3 : 1e-4;
}

// Per element: |out - ref| <= rel |ref| + abs rms(ref). rel: a few half-ulps of C's type (bf16 2^-9,
// f16 2^-12 relative); abs: the approximate activations (tanh.approx ~2^-11 of |x| in GELU) and
// fp32 accumulation, relative to the output's scale.
std::pair<double, double> element_bound(const KernelSpec& s) {
  if (s.c == DType::bf16) return {1.0 / 64, 1e-2};
  if (s.c == DType::f16) return {1.0 / 256, 5e-3};
  return {1e-4, s.fusion.activation == Activation::gelu ? 1e-3 : 1e-4};
}

struct FusionCase {
  const char* fuse;
  const char* act;
  const char* glu;  // "" : default
  bool f32_out;     // fp32 C (atomic combine needs it)
};
// Each flag alone, each activation, both GLU layouts, the two GEMMs of an MoE layer, atomic combine.
const FusionCase kCases[] = {
    {"gather", "none", "", false},
    {"scatter", "none", "", false},
    {"weight", "none", "", false},
    {"bias", "none", "", false},
    {"none", "silu", "", false},
    {"none", "gelu", "", false},
    {"none", "swiglu", "interleaved", false},
    {"none", "swiglu", "split", false},
    {"bias", "swiglu_oai", "interleaved", false},
    {"bias", "swiglu_oai", "split", false},
    {"gather+bias", "swiglu_oai", "interleaved", false},  // GEMM1 of gpt-oss
    {"gather+bias", "swiglu", "split", false},            // GEMM1, split gate/up
    {"scatter+weight+bias", "none", "", false},           // GEMM2, deterministic combine (then reduce)
    {"gather+scatter+weight+bias", "gelu", "", false},
    {"scatter+weight+atomic", "none", "", true},  // GEMM2, atomic combine into [tokens, N]
    {"gather+scatter+weight+atomic", "swiglu", "split", true},
    {"weight+bias", "swiglu_oai", "interleaved", true},  // fp32 C without atomics: staged / direct f32 stores at n/2
};

// The tiles of each family that exercise different epilogue paths (hopper: staged C with one
// or two consumer slices, direct stores, CTA pairs sharing A (1x2; the 128x256 dynamic one is what
// the heuristic gives a long GEMM2, e.g. gpt-oss's at 16384 tokens) and B (2x1, split-GLU B halves
// from the two ranks); portable: 64- and 128-row tiles). MOEJIT_TEST_TILE=TEXT: only the tiles
// whose text contains TEXT (e.g. "cluster=1x2").
std::vector<std::string> tile_texts(KernelFamily family) {
  std::vector<std::string> all;
  if (family == KernelFamily::hopper)
    all = {"tile=128x256x64,stages=4,sched=dynamic", "tile=64x256x64,stages=5,sched=static",
           "tile=64x128x64,stages=6,sched=dynamic", "tile=128x128x64,stages=5,cluster=1x2,sched=static",
           "tile=128x256x64,stages=4,cluster=1x2,sched=dynamic", "tile=128x256x64,stages=4,cluster=2x1,sched=dynamic",
           // absorbed tail rows (every case but the atomic ones: GEMM2 since v41, gathered GEMM1 since v42)
           "tile=128x256x64,stages=4,sched=dynamic,tail=24", "tile=128x256x64,stages=4,cluster=1x2,sched=static,tail=24",
           "tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,tail=24",
           // a group's odd last M tile's units among its pair units (v49)
           "tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,tail=24,pair_order=interleaved",
           // the mixed tile order (v43), and on the pairs a layer's GEMMs take it on under skew (v44)
           "tile=128x256x64,stages=4,sched=dynamic,tail=24,mix=256",
           "tile=128x256x64,stages=4,cluster=1x2,sched=dynamic,tail=24,mix=256",
           "tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,mix=256"};
  else
    all = {"tile=128x128x32,stages=4,warps=2x4,sched=dynamic", "tile=64x128x32,stages=4,warps=2x4,sched=static",
           "tile=64x64x64,stages=3,warps=2x2,sched=dynamic"};
  if (const char* only = std::getenv("MOEJIT_TEST_TILE"))
    std::erase_if(all, [&](const std::string& t) { return t.find(only) == std::string::npos; });
  return all;
}

std::vector<KernelSpec> fused_specs() {
  std::vector<KernelSpec> out;
  const Arch arch = runtime().arch();
  std::vector<KernelFamily> families = {KernelFamily::portable};
  if (arch.sm() == 90 && arch.arch_specific) families.insert(families.begin(), KernelFamily::hopper);
  const char* only = std::getenv("MOEJIT_TEST_FAMILY");
  for (KernelFamily family : families) {
    if (only && to_text(family) != only) continue;
    for (const std::string& tile : tile_texts(family))
      for (const FusionCase& c : kCases)
        for (const char* layout : {"contiguous", "masked"})
          for (const char* ab : {"bf16", "f16"}) {
            std::string text = fmt::format("family={},arch={},layout={},a={},b={},c={},{},fuse={},act={}", to_text(family),
                                           arch.to_text(), layout, ab, ab, c.f32_out ? "f32" : ab, tile, c.fuse, c.act);
            if (*c.glu) text += fmt::format(",glu={}", c.glu);
            KernelSpec s = KernelSpec::parse(text);
            try {
              s.validate();
            } catch (const SpecError&) {
              continue;  // e.g. gather on CTA pairs
            }
            out.push_back(s);
          }
  }
  if (std::getenv("MOEJIT_TEST_QUICK")) std::erase_if(out, [](const KernelSpec& s) { return s.a != DType::bf16; });
  return out;
}

// The Hopper bf16 gather variants with their rows loaded by TMA (gather_by=tma).
std::vector<KernelSpec> tma_gather_specs() {
  return tma_gather_variants(fused_specs(), [](const KernelSpec& s) { return s.a == DType::bf16; });
}

FusedProblem make(const KernelSpec& spec, int tokens, int top_k, int groups, int n, int k,
                  const std::vector<std::vector<int>>& routing, std::mt19937& rng) {
  runtime();  // its context holds the allocations below (a test case run alone has none before this)
  FusedProblem p;
  p.spec = spec;
  p.tokens = tokens;
  p.top_k = top_k;
  p.groups = groups;
  p.n = n;
  p.k = k;
  p.route(routing, rng);
  p.fill(rng);
  return p;
}

void run_and_check(FusedProblem& p, const char* what, bool high_level = false) {
  const KernelSpec& spec = p.spec;
  p.prepare_output();
  if (high_level) {
    runtime().grouped_gemm(p.args(true), nullptr);
  } else {
    runtime().kernel(spec).launch(p.args(), nullptr);
  }
  MOEJIT_CU(driver().cuCtxSynchronize());
  check_fused_output(p, what, error_bound(spec), element_bound(spec));
}

}  // namespace

TEST_CASE("fusion: variants under test", "[gpu][fusion]") {
  auto specs = fused_specs();
  WARN(fmt::format("device {}: {} fused kernel variants under test", runtime().device_name(), specs.size()));
  compile_on_all_cores(runtime(), specs);
  REQUIRE(!specs.empty());
}

TEST_CASE("fusion: random top-k routing, an expert with 0 rows", "[gpu][fusion]") {
  std::mt19937 rng(2024);
  for (auto& spec : fused_specs()) {
    // 8 experts, expert 3 and 6 get no rows; N = 320 (not a multiple of 256 / 128 tiles; n/2 = 160),
    // K = 136 (a K tail).
    auto routing = random_routing(301, 4, 8, {3, 6}, rng);
    auto p = make(spec, 301, 4, 8, 320, 136, routing, rng);
    run_and_check(p, "random top-4");
  }
}

TEST_CASE("fusion: groups padded like the routing helper's (padding: token 0, weight 0, scatter row -1)", "[gpu][fusion]") {
  std::mt19937 rng(31);
  for (auto& spec : fused_specs()) {
    if (spec.layout != GroupLayout::contiguous) continue;  // masked slabs have no padding inside the counts
    auto routing = random_routing(301, 4, 8, {3, 6}, rng);
    FusedProblem p;
    p.spec = spec;
    p.tokens = 301, p.top_k = 4, p.groups = 8, p.n = 320, p.k = 136;
    p.route(routing, rng, 64);
    p.fill(rng);
    run_and_check(p, "padded groups");
  }
}

TEST_CASE("fusion: every token to one expert", "[gpu][fusion]") {
  std::mt19937 rng(77);
  for (auto& spec : fused_specs()) {
    // 517 rows in expert 2 (not a multiple of any tile), the other three empty.
    auto p = make(spec, 517, 1, 4, 256, 200, one_expert_routing(517, 2), rng);
    run_and_check(p, "one expert");
  }
}

TEST_CASE("fusion: decode (a few tokens, many experts)", "[gpu][fusion]") {
  std::mt19937 rng(5);
  for (auto& spec : fused_specs()) {
    auto routing = random_routing(5, 2, 16, {}, rng);
    auto p = make(spec, 5, 2, 16, 512, 256, routing, rng);
    run_and_check(p, "decode");
  }
}

TEST_CASE("fusion: absorbed tail rows (tail=24), groups ending 1-24 rows past whole tiles", "[gpu][fusion][tail]") {
  // The unfused tail test's groups: 1, 24 and 7 rows past whole tiles (absorbed), 25 past (a tile of
  // their own), whole tiles, empty and tiny groups; N = 320 leaves a partial N tile, K = 200 a
  // partial k-block. Each token goes to one expert, in shuffled order, so that the scattered rows
  // are a permutation and the gathered ones (GEMM1: GLU, bias) come from everywhere in A.
  const std::vector<int> sizes = {129, 152, 153, 280, 0, 536, 24, 1, 256, 409, 128, 1031};
  std::mt19937 rng(2412);
  int variants = 0;
  std::vector<KernelSpec> specs = fused_specs();
  std::erase_if(specs, [](const KernelSpec& s) { return s.tail == 0; });
  compile_on_all_cores(runtime(), specs);  // run alone ("[tail]"), ~100 kernels compiled one by one took minutes
  for (auto& spec : specs) {
    std::vector<std::vector<int>> routing;
    for (int g = 0; g < (int)sizes.size(); ++g)
      for (int i = 0; i < sizes[g]; ++i) routing.push_back({g});
    std::shuffle(routing.begin(), routing.end(), rng);
    auto p = make(spec, (int)routing.size(), 1, (int)sizes.size(), 320, 200, routing, rng);
    run_and_check(p, "tail rows");
    ++variants;
  }
  WARN(fmt::format("{} fused variants with absorbed tail rows", variants));
}

TEST_CASE("fusion: rows gathered by TMA (gather_by=tma), Hopper bf16", "[gpu][fusion][gather_tma]") {
  auto specs = tma_gather_specs();
  if (specs.empty()) {
    WARN("NOT RUN: no Hopper GPU (or MOEJIT_TEST_FAMILY excludes it), so no gather_by=tma variant");
    return;
  }
  compile_on_all_cores(runtime(), specs);
  std::mt19937 rng(2027);
  for (auto& spec : specs) {
    auto routing = random_routing(301, 4, 8, {3, 6}, rng);
    auto p = make(spec, 301, 4, 8, 320, 136, routing, rng);
    run_and_check(p, "random top-4, rows by TMA");
    auto one = make(spec, 517, 1, 4, 256, 200, one_expert_routing(517, 2), rng);
    run_and_check(one, "one expert, rows by TMA");
    auto decode_routing = random_routing(5, 2, 16, {}, rng);
    auto decode = make(spec, 5, 2, 16, 512, 256, decode_routing, rng);
    run_and_check(decode, "decode, rows by TMA");
  }
}

TEST_CASE("fusion: high-level call builds the fusion in", "[gpu][fusion]") {
  std::mt19937 rng(11);
  for (const char* text : {"fuse=gather+bias,act=swiglu_oai", "fuse=scatter+weight,act=none",
                           "c=f32,fuse=scatter+weight+atomic,act=none", "layout=masked,fuse=gather,act=silu"}) {
    KernelSpec spec = KernelSpec::parse(text);  // layout, dtypes and fusion; the runtime picks the rest
    auto routing = random_routing(1000, 4, 32, {7}, rng);
    auto p = make(spec, 1000, 4, 32, 1024, 512, routing, rng);
    INFO(text);
    run_and_check(p, "high-level", true);
  }
}
