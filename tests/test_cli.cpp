// The moejit command line: exit codes, output, prewarm hits, concurrent writers.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdio>

#include "moejit/formats.hpp"
#include "test_support.hpp"

using namespace moejit::test;

namespace {
struct Result {
  int code;
  std::string out;
};

// Runs the CLI with a private cache folder; stdout and stderr together.
Result cli(const std::string& args, const std::string& cache_dir) {
  std::string cmd = fmt::format("MOEJIT_CACHE_DIR='{}' '{}' {} 2>&1", cache_dir, MOEJIT_CLI_PATH, args);
  Result r{0, ""};
  FILE* pipe = popen(cmd.c_str(), "r");
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, pipe)) r.out.append(buf, n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const char* kSmallSpec = "'family=portable,arch=sm_80,tile=64x64x32,stages=2,warps=2x2'";
}  // namespace

TEST_CASE("cli: help and usage errors", "[cli]") {
  TempDir dir;
  CHECK(cli("--help", dir.str()).code == 0);
  for (auto sub : {"inspect", "choose", "compile", "prewarm", "cache"}) {
    auto r = cli(fmt::format("{} --help", sub), dir.str());
    CHECK(r.code == 0);
    CHECK(r.out.find("usage: moejit") != std::string::npos);
  }
  CHECK(cli("", dir.str()).code == 2);
  CHECK(cli("frobnicate", dir.str()).code == 2);
  CHECK(cli("inspect", dir.str()).code == 2);
  auto bad = cli("inspect 'family=portable,tile=99x1x1'", dir.str());
  CHECK(bad.code == 2);
  CHECK(bad.out.find("tile") != std::string::npos);
  CHECK(cli("inspect layout=ragged", dir.str()).code == 2);
  CHECK(cli("prewarm", dir.str()).code == 2);
  CHECK(cli("prewarm --model no-such-model", dir.str()).code == 2);
  CHECK(cli("cache frob", dir.str()).code == 2);
}

TEST_CASE("cli: choose prints the heuristic's spec for a shape, from counts or from expected rows", "[cli]") {
  TempDir dir;
  // Qwen3 up at 16 tokens, masked with room for 1024 rows, MXFP4 weights: the 16-token decode tile.
  auto decode = cli("choose --groups 128 --n 1536 --k 2048 --rows 128 --layout masked --capacity 1024 --weights mxfp4", dir.str());
  REQUIRE(decode.code == 0);
  CHECK(decode.out.find("family=hopper,arch=sm_90a,layout=masked,a=bf16,b=mxfp4") != std::string::npos);
  CHECK(decode.out.find("tile=16x128x64") != std::string::npos);
  CHECK(decode.out.find("typical random routing") != std::string::npos);
  // DeepSeek-V3 down 4096: a typical routing ends half the groups just past a tile (tail rows).
  auto prefill = cli("choose --groups 256 --n 7168 --k 2048 --rows 32768", dir.str());
  REQUIRE(prefill.code == 0);
  CHECK(prefill.out.find("tile=128x256x64") != std::string::npos);
  CHECK(prefill.out.find("tail=24") != std::string::npos);
  auto counted = cli("choose --groups 4 --n 256 --k 512 --counts 1,2,3,400 --dtype e4m3 --arch sm_80", dir.str());
  REQUIRE(counted.code == 0);
  CHECK(counted.out.find("family=portable,arch=sm_80,layout=contiguous,a=e4m3") != std::string::npos);
  // The printed spec is inspect's input.
  CHECK(cli("inspect \"$(MOEJIT_CACHE=off '" MOEJIT_CLI_PATH "' choose --groups 8 --n 4096 --k 14336 --rows 2048 2>/dev/null)\"",
            dir.str()).code == 0);
  for (auto bad : {"choose --n 256 --k 512 --rows 5", "choose --groups 4 --n 256 --k 512",
                   "choose --groups 4 --n 256 --k 512 --rows 5 --counts 1,1,1,2", "choose --groups 4 --n 256 --k 512 --counts 1,2,3",
                   "choose --groups 4 --n 256 --k 512 --rows x", "choose --groups 4 --n 256 --k 512 --rows 5 --dtype f32",
                   "choose --groups 4 --n 256 --k 512 --rows 500 --layout masked --capacity 100", "choose --frob"}) {
    INFO(bad);
    auto r = cli(bad, dir.str());
    CHECK(r.code == 2);
    CHECK(r.out.find("moejit: ") != std::string::npos);
  }
}

TEST_CASE("cli: inspect prints source that starts with the spec", "[cli]") {
  TempDir dir;
  auto r = cli(fmt::format("inspect {}", kSmallSpec), dir.str());
  REQUIRE(r.code == 0);
  CHECK(r.out.rfind("// moejit kernel", 0) == 0);
  CHECK(r.out.find("tile=64x64x32") != std::string::npos);
  auto res = cli(fmt::format("inspect {} --resources", kSmallSpec), dir.str());
  CHECK(res.code == 0);
  CHECK(res.out.find("registers") != std::string::npos);
  auto ptx = cli(fmt::format("inspect {} --ptx", kSmallSpec), dir.str());
  CHECK(ptx.code == 0);
  CHECK(ptx.out.find(".entry moejit_grouped_gemm") != std::string::npos);
}

TEST_CASE("cli: inspect --formats names the operand formats and scale layouts", "[cli][formats]") {
  TempDir dir;
  auto fp8 = cli("inspect family=hopper,a=e4m3,b=e4m3 --formats", dir.str());
  REQUIRE(fp8.code == 0);
  CHECK(fp8.out.find("A  e4m3 [total_rows][K]; a_scales fp32 [ceil(K/128)][rows of A]") != std::string::npos);
  CHECK(fp8.out.find("b_scales fp32 [E][ceil(N/128)][ceil(K/128)]") != std::string::npos);
  auto bf16 = cli(fmt::format("inspect {} --formats", kSmallSpec), dir.str());
  REQUIRE(bf16.code == 0);
  CHECK(bf16.out.find("B  bf16 [E][N][K]") != std::string::npos);
  // 4-bit weights: the packed layout's version, which users keep beside stored packed weights.
  auto w4 = cli("inspect family=hopper,a=bf16,b=nvfp4,tile=16x128x64,stages=8 --formats", dir.str());
  REQUIRE(w4.code == 0);
  CHECK(w4.out.find(fmt::format("pre-arranged by pack_w4_sm90 (layout {})", moejit::kW4Sm90LayoutVersion)) !=
        std::string::npos);
}

TEST_CASE("cli: a preset's 4-bit weights are prewarmed (weights=mxfp4)", "[cli][prewarm][formats]") {
  TempDir dir;
  std::string cache = (dir.path() / "cache").string();
  // No 16-bit dtypes: only the MXFP4 kernel (16 tokens, 4 rows per expert -> the 16-token tile for both GEMMs).
  write_bytes(dir.path() / "tiny.preset",
              "experts=8\ntopk=2\nhidden=256\nintermediate=128\ntokens=16\ndtypes=\nweights=mxfp4\n");
  auto r = cli(fmt::format("prewarm --model '{}' --arch sm_90a", (dir.path() / "tiny.preset").string()), cache);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(r.out.find("1 kernels: 1 built, 0 hit, 0 failed") != std::string::npos);
  CHECK(cli("cache ls", cache).out.find("a=bf16,b=mxfp4,c=bf16,acc=f32,tile=16x128x64") != std::string::npos);
  write_bytes(dir.path() / "bad.preset", "experts=8\ntopk=2\nhidden=256\nintermediate=128\ntokens=16\nweights=e4m3\n");
  auto bad = cli(fmt::format("prewarm --model '{}'", (dir.path() / "bad.preset").string()), cache);
  CHECK(bad.code == 2);
  CHECK(bad.out.find("weights='e4m3' (expected mxfp4 and/or nvfp4)") != std::string::npos);
}

TEST_CASE("cli: a layer preset prewarms route, fused GEMMs and combine; second run all hits", "[cli][prewarm][presets]") {
  TempDir dir;
  std::string cache = (dir.path() / "cache").string();
  write_bytes(dir.path() / "layer.preset",
              "experts=8\ntopk=2\nhidden=256\nintermediate=128\ntokens=16\nrouting=mixtral\n"
              "up_fusion=fuse=gather,act=swiglu\ndown_fusion=fuse=scatter+weight\n");
  std::string cmd = fmt::format("prewarm --model '{}' --arch sm_90a", (dir.path() / "layer.preset").string());
  auto first = cli(cmd, cache);
  INFO(first.out);
  CHECK(first.code == 0);
  // route + combine + the fused up and down GEMM (16 tokens: one tile each); no plain GEMMs.
  CHECK(first.out.find("4 kernels: 4 built, 0 hit, 0 failed") != std::string::npos);
  auto ls = cli("cache ls", cache).out;
  CHECK(ls.find("routing:op=route,arch=sm_90a,logits=f32,experts=8,topk=2,score=topk_softmax") != std::string::npos);
  CHECK(ls.find("routing:op=combine,arch=sm_90a,in=bf16,out=bf16,topk=2") != std::string::npos);
  CHECK(ls.find("fuse=gather,act=swiglu") != std::string::npos);
  CHECK(ls.find("fuse=scatter+weight,act=none") != std::string::npos);
  CHECK(ls.find("fuse=none") == std::string::npos);
  auto second = cli(cmd, cache);
  CHECK(second.out.find("4 kernels: 0 built, 4 hit, 0 failed") != std::string::npos);
}

TEST_CASE("cli: compile, cache ls/verify/clear, corruption found", "[cli]") {
  TempDir dir;
  std::string cache = (dir.path() / "cache").string();
  auto first = cli(fmt::format("compile {}", kSmallSpec), cache);
  REQUIRE(first.code == 0);
  CHECK(first.out.find("compiled") != std::string::npos);
  auto second = cli(fmt::format("compile {}", kSmallSpec), cache);
  CHECK(second.out.find("disk-hit") != std::string::npos);
  CHECK(cli("cache path", cache).out.find(cache) != std::string::npos);
  CHECK(cli("cache ls", cache).out.find("1 entries, 0 bad") != std::string::npos);
  CHECK(cli("cache verify", cache).code == 0);
  for (auto& f : fs::directory_iterator(cache)) {
    std::string bytes = read_bytes(f.path());
    bytes[bytes.size() / 2] ^= 1;
    write_bytes(f.path(), bytes);
  }
  auto verify = cli("cache verify", cache);
  CHECK(verify.code == 1);
  CHECK(verify.out.find("checksum") != std::string::npos);
  auto rebuilt = cli(fmt::format("compile {}", kSmallSpec), cache);
  CHECK(rebuilt.out.find("compiled") != std::string::npos);
  CHECK(cli("cache verify", cache).code == 0);
  CHECK(cli("cache clear", cache).out.find("removed 1") != std::string::npos);
  CHECK(cli("compile 'stages=1'", cache).code == 2);
}

TEST_CASE("cli: concurrent processes writing the same key leave one valid entry", "[cli][cache]") {
  TempDir dir;
  std::string cache = (dir.path() / "cache").string();
  std::string cmd = fmt::format("for i in 1 2 3 4 5 6; do MOEJIT_CACHE_DIR='{}' '{}' compile {} >/dev/null 2>&1 & done; wait",
                                cache, MOEJIT_CLI_PATH, kSmallSpec);
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto ls = cli("cache verify", cache);
  CHECK(ls.code == 0);
  CHECK(ls.out.find("1 entries, 0 bad") != std::string::npos);
  std::size_t files = 0;
  for ([[maybe_unused]] auto& f : fs::directory_iterator(cache)) ++files;
  CHECK(files == 1);  // no temporary files left behind
}

TEST_CASE("cli: prewarm from a file of specs, second run all hits", "[cli][prewarm]") {
  TempDir dir;
  std::string cache = (dir.path() / "cache").string();
  write_bytes(dir.path() / "specs.txt",
              "# two kernels\nfamily=portable,arch=sm_80,tile=64x64x32,stages=2,warps=2x2\n\n"
              "family=portable,arch=sm_80,tile=64x64x32,stages=3,warps=2x2  # another\n");
  auto first = cli(fmt::format("prewarm --file '{}'", (dir.path() / "specs.txt").string()), cache);
  CHECK(first.code == 0);
  CHECK(first.out.find("2 kernels: 2 built, 0 hit, 0 failed") != std::string::npos);
  auto second = cli(fmt::format("prewarm --file '{}'", (dir.path() / "specs.txt").string()), cache);
  CHECK(second.out.find("2 kernels: 0 built, 2 hit, 0 failed") != std::string::npos);
}
