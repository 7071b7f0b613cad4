// GPU tests of the fusions with quantized operands (docs/design.md, "Fusions"): FP8 (E4M3, 1x128
// activation and 128x128 weight block scales) and weight-only MXFP4 / NVFP4, every fusion flag,
// each activation, both GLU layouts and the atomic combine, × kernel family (portable everywhere;
// the Hopper 4-bit and FP8 kernels where they have them) × layout. Reference: tests/fusion_problem.hpp in FP64
// on the same quantized operands (dequantized exactly), on fresh random data, output poisoned
// first; norm-wise and per-element bounds. Routings: random top-k with experts that receive 0 rows,
// every token to one expert (M not a multiple of any tile), groups padded like the routing
// helper's, decode. They pass on the H100 (docs/perf.md v5-v7).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "fusion_checks.hpp"
#include "fusion_problem.hpp"
#include "gpu_problem.hpp"
#include "moejit/moejit.hpp"

using namespace moejit;
using namespace moejit::test;

namespace {

Runtime& runtime() {
  static Runtime rt;
  return rt;
}

// ||out - ref|| / ||ref||: C's rounding, the approximate activations (tanh.approx ~2^-11) and, for
// FP8 and 4-bit, fp32 accumulation of exactly widened products (the reference uses the same
// quantized operands, so quantization error is not part of the difference).
double error_bound(const KernelSpec& s) {
  // c=e4m3: C's own quantization (3 mantissa bits: at most 2^-4 of a value, ~2.5% rms).
  if (s.c == DType::e4m3) return 5e-2;
  if (s.c == DType::bf16) return 1e-2;
  if (s.c == DType::f16) return 5e-3;
  return 1e-3;
}
std::pair<double, double> element_bound(const KernelSpec& s) {
  if (s.c == DType::e4m3) return {1.0 / 16 + 4e-3, 3e-3};  // half an E4M3 step, + the FP8 wgmma's error
  if (s.c == DType::bf16) return {1.0 / 64, 1e-2};
  if (s.c == DType::f16) return {1.0 / 256, 5e-3};
  // Hopper's FP8 wgmma adds its products inside a 128-K block with a narrower accumulator than
  // FP32 (DeepSeek-V3's report: about 14 bits; the reason for promotion per 128 K). Seen on the
  // H100 (2026-11-23), f32 C: up to 2.6e-3 off on elements of size 0.7-4.8, rel_err 1.3e-4.
  if (s.family == KernelFamily::hopper && s.a == DType::e4m3) return {2e-3, 3e-3};
  return {1e-4, 1e-3};
}

struct Case {
  const char* fuse;
  const char* act;
  const char* glu;  // "": default (interleaved)
  bool f32_out;
};
const Case kCases[] = {
    {"gather", "none", "", false},
    {"scatter", "none", "", false},
    {"weight", "none", "", false},
    {"bias", "none", "", false},
    {"none", "silu", "", false},
    {"none", "gelu", "", false},
    {"none", "swiglu", "split", false},
    {"gather+bias", "swiglu_oai", "interleaved", false},  // GEMM1 of gpt-oss (MXFP4 weights)
    {"gather+bias", "swiglu", "split", false},            // GEMM1, split gate/up (DeepSeek/Qwen FP8)
    {"scatter+weight+bias", "none", "", false},           // GEMM2 of gpt-oss, deterministic combine
    {"scatter+weight+atomic", "none", "", true},          // GEMM2, atomic combine
    {"gather+scatter+weight+bias", "gelu", "", true},
};

// family, tile text, formats (a/b) it runs.
struct Family {
  KernelFamily family;
  const char* tile;
};
std::vector<Family> families() {
  std::vector<Family> out = {{KernelFamily::portable, "tile=128x128x32,stages=4,warps=2x4,sched=dynamic"},
                             {KernelFamily::portable, "tile=64x128x64,stages=3,warps=2x4,sched=static"}};
  const Arch arch = runtime().arch();
  if (arch.sm() == 90 && arch.arch_specific)
    // 4-bit (tokens x 128 x 64; 128 and 256 tokens store C through shared memory) and FP8
    // (128x128x128, 64x256x128, 128x192x128, 128x256x128; C staged for TMA stores on all but
    // 64x256 s5 and 128x192 s5, the register-store ones) tiles; each format takes its own. FP8 CTA
    // pairs sharing B (2x1, static; fused since v38, each CTA gathering its own rows).
    for (const char* t : {"tile=64x128x64,stages=8", "tile=128x128x64,stages=8", "tile=256x128x64,stages=4", "tile=32x128x64,stages=8",
                          "tile=16x128x64,stages=8", "tile=48x128x64,stages=8", "tile=128x128x128,stages=6", "tile=64x256x128,stages=4", "tile=64x256x128,stages=5",
                          "tile=128x192x128,stages=4", "tile=128x192x128,stages=5", "tile=128x256x128,stages=4",
                          "tile=128x256x128,stages=4,cluster=2x1,sched=static", "tile=128x192x128,stages=4,cluster=2x1,sched=static",
                          // FP8 pairs on the dynamic scheduler, interleaved (v49; ungathered: the gathered cases skip)
                          "tile=128x256x128,stages=4,cluster=2x1,sched=dynamic,pair_order=interleaved",
                          // 4-bit prefill tiles banded (v43: the heuristic's where a group's A outgrows L2)
                          "tile=128x128x64,stages=8,band=2", "tile=256x128x64,stages=4,band=2",
                          // FP8 in the mixed tile order (v44: a skewed layer's GEMMs; 128 rows splits these tests' groups)
                          "tile=128x256x128,stages=4,sched=dynamic,mix=128", "tile=128x256x128,stages=4,cluster=2x1,sched=static,mix=128"})
      out.push_back({KernelFamily::hopper, t});
  // MOEJIT_TEST_TILE=TEXT: only the tiles whose text contains TEXT (e.g. "band=2"), as in test_gpu_fusion.cpp.
  if (const char* only = std::getenv("MOEJIT_TEST_TILE"))
    std::erase_if(out, [&](const Family& f) { return std::string(f.tile).find(only) == std::string::npos; });
  return out;
}

std::vector<KernelSpec> quant_fused_specs() {
  std::vector<KernelSpec> out;
  const Arch arch = runtime().arch();
  const char* only = std::getenv("MOEJIT_TEST_FAMILY");
  // MOEJIT_TEST_B=e4m3|mxfp4|nvfp4: one weight format only (a run on the device for one kernel).
  const char* only_b = std::getenv("MOEJIT_TEST_B");
  for (const Family& fam : families()) {
    if (only && to_text(fam.family) != only) continue;
    for (const Case& c : kCases)
      for (const char* layout : {"contiguous", "masked"})
        for (const char* ab : {"a=e4m3,b=e4m3", "a=bf16,b=mxfp4", "a=bf16,b=nvfp4"}) {
          if (only_b && !std::strstr(ab, fmt::format("b={}", only_b).c_str())) continue;
          std::string text = fmt::format("family={},arch={},layout={},{},c={},{},fuse={},act={}", to_text(fam.family),
                                         arch.to_text(), layout, ab, c.f32_out ? "f32" : "bf16", fam.tile, c.fuse, c.act);
          if (*c.glu) text += fmt::format(",glu={}", c.glu);
          KernelSpec s;
          try {
            s = KernelSpec::parse(text);
            s.validate();
          } catch (const SpecError&) {
            continue;  // not implemented for that family / format (KernelSpec::validate says why)
          }
          out.push_back(s);
        }
  }
  if (std::getenv("MOEJIT_TEST_QUICK")) std::erase_if(out, [](const KernelSpec& s) { return s.layout != GroupLayout::contiguous; });
  return out;
}

// The Hopper 4-bit kernel's gather variants with their token rows loaded by TMA (gather_by=tma).
std::vector<KernelSpec> tma_gather_specs() {
  return tma_gather_variants(quant_fused_specs(), [](const KernelSpec& s) { return s.is_weight_only_4bit(); });
}

// N: FP8 with a split GLU needs (N/2) % 128 == 0 (validate_fusion_args); otherwise a ragged N.
int n_for(const KernelSpec& s, int ragged) {
  return s.a == DType::e4m3 && s.fusion.glu_activation() && s.fusion.glu == GluLayout::split ? 512 : ragged;
}

FusedProblem make(const KernelSpec& spec, int tokens, int top_k, int groups, int n, int k,
                  const std::vector<std::vector<int>>& routing, std::mt19937& rng, int row_alignment = 1) {
  runtime();  // its context holds the allocations below (a test case run alone has none before this)
  FusedProblem p;
  p.spec = spec;
  p.tokens = tokens, p.top_k = top_k, p.groups = groups, p.n = n, p.k = k;
  p.route(routing, rng, row_alignment);
  p.fill(rng);
  return p;
}

void run_and_check(FusedProblem& p, const char* what) {
  const KernelSpec& spec = p.spec;
  p.prepare_output();
  runtime().kernel(spec).launch(p.args(), nullptr);
  MOEJIT_CU(driver().cuCtxSynchronize());
  check_fused_output(p, what, error_bound(spec), element_bound(spec));
}

}  // namespace

TEST_CASE("quant fusion: variants under test (compiled in parallel first)", "[gpu][fusion][fp8][w4]") {
  auto specs = quant_fused_specs();
  WARN(fmt::format("device {}: {} fused FP8 / 4-bit kernel variants under test", runtime().device_name(), specs.size()));
  compile_on_all_cores(runtime(), specs);
  if (specs.empty() && (std::getenv("MOEJIT_TEST_TILE") || std::getenv("MOEJIT_TEST_FAMILY"))) {
    WARN("NOT RUN: MOEJIT_TEST_TILE / MOEJIT_TEST_FAMILY leave no FP8 / 4-bit fused variant");
    return;
  }
  REQUIRE(!specs.empty());
}

TEST_CASE("quant fusion: random top-4 routing, experts with 0 rows, ragged N, K tail", "[gpu][fusion][fp8][w4]") {
  std::mt19937 rng(2026);
  for (auto& spec : quant_fused_specs()) {
    // 8 experts, 3 and 6 empty; N = 320 (n/2 = 160), K = 160 (a partial 128-wide FP8 scale block,
    // a partial 64-wide packed 4-bit block).
    auto routing = random_routing(301, 4, 8, {3, 6}, rng);
    auto p = make(spec, 301, 4, 8, n_for(spec, 320), 160, routing, rng);
    run_and_check(p, "random top-4");
  }
}

TEST_CASE("quant fusion: every token to one expert (517 rows)", "[gpu][fusion][fp8][w4]") {
  std::mt19937 rng(78);
  for (auto& spec : quant_fused_specs()) {
    auto p = make(spec, 517, 1, 4, n_for(spec, 256), 256, one_expert_routing(517, 2), rng);
    run_and_check(p, "one expert");
  }
}

TEST_CASE("quant fusion: groups padded like the routing helper's", "[gpu][fusion][fp8][w4]") {
  std::mt19937 rng(32);
  for (auto& spec : quant_fused_specs()) {
    if (spec.layout != GroupLayout::contiguous) continue;
    auto routing = random_routing(301, 4, 8, {3, 6}, rng);
    auto p = make(spec, 301, 4, 8, n_for(spec, 320), 160, routing, rng, 64);
    run_and_check(p, "padded groups");
  }
}

// The 4-bit 128- and 256-token tiles stage the fused C through shared memory and copy rows out
// in 16-byte pieces: N = 328 leaves the last slice one piece (8 columns), and a GLU's N = 336
// leaves its last 32-column output slice one piece (n/2 = 168); more rows than one tile per
// expert, one expert empty.
TEST_CASE("quant fusion: 4-bit prefill tiles' staged C at N's end", "[gpu][fusion][w4]") {
  std::mt19937 rng(2029);
  int run = 0;
  for (auto& spec : quant_fused_specs()) {
    if (!(spec.family == KernelFamily::hopper && spec.is_weight_only_4bit() && spec.tile.m >= 128)) continue;
    auto routing = random_routing(700, 4, 8, {5}, rng);
    auto p = make(spec, 700, 4, 8, spec.fusion.glu_activation() ? 336 : 328, 192, routing, rng);
    run_and_check(p, "staged C, ragged N");
    ++run;
  }
  if (run == 0) WARN("NOT RUN: no Hopper GPU (or MOEJIT_TEST_FAMILY excludes it), so no 4-bit prefill tile");
}

TEST_CASE("quant fusion: token rows gathered by TMA (gather_by=tma), Hopper 4-bit", "[gpu][fusion][w4][gather_tma]") {
  auto specs = tma_gather_specs();
  if (specs.empty()) {
    WARN("NOT RUN: no Hopper GPU (or MOEJIT_TEST_FAMILY excludes it), so no gather_by=tma variant");
    return;
  }
  compile_on_all_cores(runtime(), specs);
  std::mt19937 rng(2028);
  for (auto& spec : specs) {
    auto routing = random_routing(301, 4, 8, {3, 6}, rng);
    auto p = make(spec, 301, 4, 8, n_for(spec, 320), 160, routing, rng);
    run_and_check(p, "random top-4, rows by TMA");
    auto decode_routing = random_routing(5, 2, 16, {}, rng);
    auto decode = make(spec, 5, 2, 16, 512, 256, decode_routing, rng);
    run_and_check(decode, "decode, rows by TMA");
  }
}

// The Hopper FP8 kernel's gathering producer with the dynamic scheduler (warps 1-3 read the tile
// ring; 40 registers): the tiles whose consumers fit the 232 left (the heuristic takes 64x256 below
// 256 rows per expert; families() covers every tile on the static scheduler).
TEST_CASE("quant fusion: FP8 rows gathered with the dynamic scheduler, Hopper", "[gpu][fusion][fp8]") {
  const Arch arch = runtime().arch();
  if (!(arch.sm() == 90 && arch.arch_specific)) {
    WARN("NOT RUN: no Hopper GPU, so no Hopper FP8 kernel");
    return;
  }
  std::vector<KernelSpec> specs;
  for (const char* tile : {"tile=64x256x128,stages=4", "tile=128x128x128,stages=6"})
    for (const char* layout : {"contiguous", "masked"})
      for (const char* fusion : {"fuse=gather+bias,act=swiglu", "fuse=gather+bias,act=swiglu,glu=split", "fuse=gather+scatter+weight,c=f32"}) {
        KernelSpec s = KernelSpec::parse(fmt::format("family=hopper,arch={},layout={},a=e4m3,b=e4m3,{},sched=dynamic,{}",
                                                     arch.to_text(), layout, tile, fusion));
        s.validate();
        specs.push_back(s);
      }
  compile_on_all_cores(runtime(), specs);
  std::mt19937 rng(2030);
  for (auto& spec : specs) {
    auto routing = random_routing(301, 4, 8, {3, 6}, rng);
    auto p = make(spec, 301, 4, 8, n_for(spec, 320), 160, routing, rng);
    run_and_check(p, "random top-4, dynamic");
    auto one = make(spec, 517, 1, 4, n_for(spec, 256), 256, one_expert_routing(517, 2), rng);
    run_and_check(one, "one expert, dynamic");
  }
}

TEST_CASE("quant fusion: decode (5 tokens, 16 experts)", "[gpu][fusion][fp8][w4]") {
  std::mt19937 rng(6);
  for (auto& spec : quant_fused_specs()) {
    auto routing = random_routing(5, 2, 16, {}, rng);
    auto p = make(spec, 5, 2, 16, 512, 256, routing, rng);
    run_and_check(p, "decode");
  }
}

// C quantized to E4M3 in the Hopper FP8 kernel's epilogue (c=e4m3: codes + 1x128 scales, the next
// FP8 GEMM's A): the tiles whose consumer slices are whole 128-column blocks, with and without a
// GLU, gathered (static scheduler) or not; ragged N (a last block of 32 or 64 columns), groups of
// 0 rows, one expert, decode. The codes times their scales against the FP64 reference within half
// an E4M3 step, and every scale amax / 448 of its reference block (fusion_problem.hpp).
TEST_CASE("quant fusion: FP8 C quantized to E4M3 (c=e4m3), Hopper", "[gpu][fusion][fp8][c_e4m3]") {
  const Arch arch = runtime().arch();
  if (!(arch.sm() == 90 && arch.arch_specific)) {
    WARN("NOT RUN: no Hopper GPU, so no Hopper FP8 kernel");
    return;
  }
  std::vector<KernelSpec> specs;
  for (const char* layout : {"contiguous", "masked"})
    for (const char* variant :
         {"tile=128x256x128,stages=4,sched=dynamic,fuse=none,act=swiglu,glu=split",
          "tile=128x256x128,stages=4,sched=static,fuse=gather+bias,act=swiglu,glu=split",
          "tile=128x256x128,stages=4,sched=static,fuse=gather+bias,act=swiglu_oai,glu=interleaved",
          "tile=128x256x128,stages=4,sched=dynamic,fuse=weight,act=swiglu,glu=interleaved",
          "tile=128x256x128,stages=4,sched=dynamic,fuse=none,act=none", "tile=128x128x128,stages=6,sched=dynamic,fuse=bias,act=silu",
          "tile=64x256x128,stages=4,sched=dynamic,fuse=none,act=gelu",
          // paired 64-column halves of one block (the decode GEMM1's tile)
          "tile=64x256x128,stages=4,sched=dynamic,fuse=gather+bias,act=swiglu,glu=split",
          "tile=64x256x128,stages=4,sched=static,fuse=weight,act=swiglu_oai,glu=interleaved",
          // CTA pairs sharing B (v38: a long FP8 layer's GEMM1, DeepSeek-V3 at 16384 tokens)
          "tile=128x256x128,stages=4,cluster=2x1,sched=static,fuse=gather+bias,act=swiglu,glu=split",
          "tile=128x256x128,stages=4,cluster=2x1,sched=static,fuse=none,act=swiglu,glu=split",
          // the mixed tile order (v44: a skewed FP8 layer's GEMM1)
          "tile=128x256x128,stages=4,sched=dynamic,fuse=none,act=swiglu,glu=split,mix=128"}) {
      KernelSpec s = KernelSpec::parse(fmt::format("family=hopper,arch={},layout={},a=e4m3,b=e4m3,c=e4m3,{}", arch.to_text(), layout, variant));
      s.validate();
      specs.push_back(s);
    }
  compile_on_all_cores(runtime(), specs);
  std::mt19937 rng(2031);
  for (auto& spec : specs) {
    auto routing = random_routing(301, 4, 8, {3, 6}, rng);
    auto p = make(spec, 301, 4, 8, n_for(spec, 320), 160, routing, rng);
    run_and_check(p, "random top-4, c=e4m3");
    auto one = make(spec, 517, 1, 4, n_for(spec, 256), 256, one_expert_routing(517, 2), rng);
    run_and_check(one, "one expert, c=e4m3");
    auto decode_routing = random_routing(5, 2, 16, {}, rng);
    auto decode = make(spec, 5, 2, 16, 512, 256, decode_routing, rng);
    run_and_check(decode, "decode, c=e4m3");
  }
}
