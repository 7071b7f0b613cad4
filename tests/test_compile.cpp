// NVRTC compiles every kernel variant the heuristic can choose, for sm_80 and sm_90a, and the
// result is inspected: a real cubin, the tensor-core instructions we meant, no spills.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <regex>
#include <thread>

#include "codegen/codegen.hpp"
#include "compiler/nvrtc_compiler.hpp"
#include "heuristics/config.hpp"
#include "moejit/errors.hpp"
#include "test_support.hpp"

using namespace moejit;
using namespace moejit::test;

namespace {

// cuobjdump comes with the toolkit or as the pip package nvidia-cuda-cuobjdump (.ci/run sets MOEJIT_CUOBJDUMP).
std::string cuobjdump_path() {
  if (const char* env = std::getenv("MOEJIT_CUOBJDUMP"); env && *env) return env;
  for (auto p : {"/usr/local/cuda/bin/cuobjdump", "/usr/local/bin/cuobjdump", "/usr/bin/cuobjdump"})
    if (fs::exists(p)) return p;
  if (const char* home = std::getenv("HOME"); home && fs::exists(std::string(home) + "/.local/bin/cuobjdump"))
    return std::string(home) + "/.local/bin/cuobjdump";
  return "";
}

std::string run_capture(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  pclose(pipe);
  return out;
}

std::string sass_of(const std::string& cubin, const TempDir& dir, const std::string& name) {
  fs::path file = dir.path() / (name + ".cubin");
  write_bytes(file, cubin);
  return run_capture(cuobjdump_path() + " -sass " + file.string() + " 2>&1");
}

// "N bytes spill stores, M bytes spill loads" -> N + M, summed over the report.
long spill_bytes(const std::string& resources) {
  long total = 0;
  std::regex re(R"((\d+) bytes spill (stores|loads))");
  for (std::sregex_iterator it(resources.begin(), resources.end(), re), end; it != end; ++it) total += std::stol((*it)[1]);
  return total;
}

struct Compiled {
  KernelSpec spec;
  CompileResult result;
  std::string error;
};

std::vector<Compiled> compile_in_parallel(const std::vector<KernelSpec>& specs) {
  std::vector<Compiled> out(specs.size());
  std::atomic<std::size_t> next{0};
  const TemplateStore& templates = TemplateStore::from_embedded();
  auto worker = [&] {
    NvrtcCompiler compiler;
    for (std::size_t i; (i = next++) < specs.size();) {
      out[i].spec = specs[i];
      try {
        out[i].result = compiler.compile(specs[i], generate_source(specs[i], templates), templates);
      } catch (const std::exception& e) {
        out[i].error = e.what();
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  return out;
}

void check_variants(const std::vector<KernelSpec>& all, const std::string& what, const char* mma_instruction) {
  REQUIRE(!all.empty());
  std::string cuobjdump = cuobjdump_path();
  if (cuobjdump.empty()) FAIL("cuobjdump not found: run .ci/setup (pip package nvidia-cuda-cuobjdump) or set MOEJIT_CUOBJDUMP");
  TempDir dir;
  auto results = compile_in_parallel(all);
  double max_ms = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto& r = results[i];
    INFO("spec: " << r.spec.to_text());
    REQUIRE(r.error == "");
    CHECK(r.result.cubin.size() > 1000);
    CHECK(r.result.cubin.substr(1, 3) == "ELF");
    INFO("ptxas report:\n" << r.result.resources);
    CHECK(r.result.resources.find("Used") != std::string::npos);
    CHECK(spill_bytes(r.result.resources) == 0);
    CHECK(r.result.resources.find("C7508") == std::string::npos);  // setmaxnreg ignored
    std::string sass = sass_of(r.result.cubin, dir, fmt::format("k{}", i));
    CHECK(sass.find(mma_instruction) != std::string::npos);
    CHECK(sass.find("LDL") == std::string::npos);  // no local-memory traffic
    max_ms = std::max(max_ms, r.result.wall_ms);
  }
  WARN(fmt::format("{} {} variants compiled; slowest NVRTC compile {:.0f} ms", all.size(), what, max_ms));
}

void check_family(const Arch& arch, KernelFamily family, const char* mma_instruction) {
  check_variants(family_candidates(arch, family), fmt::format("{} for {}", to_text(family), arch.to_text()),
                 mma_instruction);
}

}  // namespace

TEST_CASE("every portable variant compiles for sm_80 with HMMA and no spills", "[compile][nvrtc]") {
  check_family(Arch{8, 0, false}, KernelFamily::portable, "HMMA");
}

TEST_CASE("every portable variant compiles for sm_90a with HMMA and no spills", "[compile][nvrtc]") {
  check_family(Arch{9, 0, true}, KernelFamily::portable, "HMMA");
}

TEST_CASE("every hopper variant compiles for sm_90a with HGMMA and no spills", "[compile][nvrtc]") {
  check_family(Arch{9, 0, true}, KernelFamily::hopper, "HGMMA");
}

TEST_CASE("every FP8 hopper variant compiles for sm_90a with QGMMA and no spills", "[compile][nvrtc]") {
  check_variants(fp8_candidates(Arch{9, 0, true}), "hopper FP8 for sm_90a", "QGMMA");
}

TEST_CASE("4-bit weight-only hopper variants compile for sm_90a with HGMMA and no spills", "[compile][nvrtc][w4]") {
  // A representative set (NVRTC time on CI's 2 cores): both tiles; MXFP4 contiguous with bf16 C,
  // NVFP4 masked with f16 C. The GPU tests run all of w4_candidates.
  std::vector<KernelSpec> some;
  for (const KernelSpec& s : w4_candidates(Arch{9, 0, true}))
    if ((s.b == DType::mxfp4 && s.layout == GroupLayout::contiguous && s.c == DType::bf16) ||
        (s.b == DType::nvfp4 && s.layout == GroupLayout::masked && s.c == DType::f16))
      some.push_back(s);
  CHECK(some.size() == 4);
  check_variants(some, "hopper 4-bit weight-only for sm_90a", "HGMMA");
}

TEST_CASE("4-bit weight-only portable variants compile for sm_80 with HMMA and no spills", "[compile][nvrtc][w4]") {
  // A representative set (NVRTC time): both tiles; MXFP4 contiguous bf16 static, NVFP4 masked
  // f32 dynamic. The GPU tests run all of w4_candidates(arch, portable).
  std::vector<KernelSpec> some;
  for (const KernelSpec& s : w4_candidates(Arch{8, 0, false}, KernelFamily::portable))
    if ((s.b == DType::mxfp4 && s.layout == GroupLayout::contiguous && s.c == DType::bf16 &&
         s.scheduler == Scheduler::static_persistent) ||
        (s.b == DType::nvfp4 && s.layout == GroupLayout::masked && s.c == DType::f32 && s.scheduler == Scheduler::dynamic))
      some.push_back(s);
  CHECK(some.size() == 4);
  check_variants(some, "portable 4-bit weight-only for sm_80", "HMMA");
}

TEST_CASE("FP8 portable variants compile for sm_80 with HMMA and no spills", "[compile][nvrtc][fp8]") {
  // Representative (NVRTC time): both tiles, contiguous bf16 static and masked f32 dynamic.
  std::vector<KernelSpec> some;
  for (const KernelSpec& s : fp8_candidates(Arch{8, 0, false}, KernelFamily::portable))
    if ((s.layout == GroupLayout::contiguous && s.c == DType::bf16 && s.scheduler == Scheduler::static_persistent) ||
        (s.layout == GroupLayout::masked && s.c == DType::f32 && s.scheduler == Scheduler::dynamic))
      some.push_back(s);
  CHECK(some.size() == 4);
  check_variants(some, "portable FP8 for sm_80", "HMMA");
}

TEST_CASE("the heuristic only picks compiled-and-checked candidates", "[compile]") {
  for (Arch arch : {Arch{8, 0, false}, Arch{8, 9, false}, Arch{9, 0, true}}) {
    auto candidates = heuristic_candidates(arch);
    for (int groups : {1, 8, 256})
      for (long long rows : {1LL, 16LL, 4096LL, 131072LL}) {
        std::vector<int> sizes(groups, (int)std::max<long long>(1, rows / groups));
        GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, groups, 4096, 7168, rows, sizes};
        KernelSpec s = choose_spec(p, arch, 132);
        INFO(s.to_text());
        CHECK(std::find(candidates.begin(), candidates.end(), s) != candidates.end());
      }
  }
}

TEST_CASE("FP8 heuristic: compiled-and-checked tiles, 64x256 below 256 rows per expert", "[compile]") {
  auto candidates = fp8_candidates(Arch{9, 0, true});
  for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked})
    for (int rows_per_group : {1, 16, 128, 255, 256, 512, 4096}) {
      std::vector<int> sizes(256, rows_per_group);
      GemmProblem p{layout, DType::e4m3, DType::bf16, 256, 4096, 7168, 256LL * rows_per_group, sizes};
      KernelSpec s = choose_spec(p, Arch{9, 0, true}, 132);
      INFO(s.to_text());
      CHECK(std::find(candidates.begin(), candidates.end(), s) != candidates.end());
      CHECK(s.tile.m == (rows_per_group < 256 ? 64 : 128));
    }
  GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, 8, 4096, 7168, 64, {}};
  KernelSpec ampere = choose_spec(p, Arch{8, 0, false}, 108);  // the portable family widens FP8
  CHECK((ampere.family == KernelFamily::portable && ampere.a == DType::e4m3 && ampere.b == DType::e4m3));
  CHECK(ampere.min_ctas_per_sm() == 1);  // the second accumulator needs the registers
}

TEST_CASE("hopper heuristic: CTA pairs only for long compute-bound launches", "[compile]") {
  // (experts, rows per expert, N, K) of suite cases; docs/perf.md v4 has the measurements.
  struct Case {
    int groups, rows, n, k;
    bool pair;
  };
  for (Case c : {Case{8, 4096, 28672, 4096, true},    // Mixtral up 16384 tokens
                 Case{8, 4096, 4096, 14336, true},    // Mixtral down 16384
                 Case{256, 512, 4096, 7168, true},    // DeepSeek-V3 up 16384
                 Case{256, 512, 7168, 2048, false},   // DeepSeek-V3 down 16384 (K = 2048)
                 Case{256, 128, 4096, 7168, false},   // DeepSeek-V3 up 4096 (memory-bound)
                 Case{8, 1024, 28672, 4096, false},   // Mixtral up 4096 (short launch)
                 Case{128, 1024, 2048, 768, false}}) {  // Qwen3 down 16384 (short K)
    std::vector<int> sizes(c.groups, c.rows);
    GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, c.groups, c.n, c.k,
                  (long long)c.groups * c.rows, sizes};
    KernelSpec s = choose_spec(p, Arch{9, 0, true}, 132);
    INFO(s.to_text());
    CHECK((s.cluster_n == 2) == c.pair);
  }
}

TEST_CASE("compile errors carry the spec, the log and the source lines", "[compile][nvrtc]") {
  TempDir dir;
  TemplateStore templates = fast_template_store(dir);
  write_bytes(dir.path() / "tpl/moejit/portable/grouped_gemm_sm80.cuh",
              "#pragma once\nnamespace moejit { namespace portable {\nthis is not cuda;\n}}\n");
  TemplateStore broken = TemplateStore::from_directory((dir.path() / "tpl").string());
  KernelSpec spec = KernelSpec::parse("arch=sm_80");
  try {
    NvrtcCompiler().compile(spec, generate_source(spec, broken), broken);
    FAIL("compiled broken source");
  } catch (const CompileError& e) {
    std::string msg = e.what();
    CHECK(msg.find(spec.to_text()) != std::string::npos);
    CHECK(msg.find("error") != std::string::npos);
    CHECK(msg.find("this is not cuda") != std::string::npos);  // the offending line, quoted
  }
}

TEST_CASE("ptx for inspection", "[compile][nvrtc]") {
  const TemplateStore& templates = TemplateStore::from_embedded();
  KernelSpec spec = KernelSpec::parse("arch=sm_80,tile=64x64x32,warps=2x2,stages=2");
  std::string ptx = NvrtcCompiler().ptx(spec, generate_source(spec, templates), templates);
  CHECK(ptx.find(".entry moejit_grouped_gemm") != std::string::npos);
  CHECK(ptx.find("mma.sync") != std::string::npos);
}
