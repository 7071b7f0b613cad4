// GPU tests: every kernel variant the heuristic can choose, each layout × scheduler × dtype,
// against an FP64 CPU reference on fresh random data with the output poisoned first.
// Run by moejit_gpu_tests, which skips visibly (exit 77) without a GPU.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <atomic>
#include <numeric>
#include <thread>

#include <cuda_runtime.h>

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

double error_bound(DType c) { return c == DType::f32 ? 1e-5 : c == DType::f16 ? 5e-3 : 1e-2; }

// CTA pairs along M sharing B (cluster=2x1): the heuristic picks them for long launches whose N
// is not a whole number of 256-wide tiles (v37), but they are not among family_candidates; a
// handful of variants (both layouts and schedulers, each C type, two B-half box sizes) run through
// every test case below, whose group sizes give odd M-tile counts (the last M tile split along N
// between the ranks), empty groups and masked slabs.
std::vector<KernelSpec> pair_m_specs() {
  const Arch arch = runtime().arch();
  if (!(arch.sm() == 90 && arch.arch_specific)) return {};
  std::vector<KernelSpec> out;
  for (const char* text : {"tile=128x256x64,stages=4,layout=contiguous,sched=static",
                           "tile=128x256x64,stages=4,layout=contiguous,sched=dynamic",
                           "tile=128x256x64,stages=4,layout=masked,sched=dynamic",
                           "tile=128x256x64,stages=4,layout=masked,sched=static,c=f32",
                           "tile=128x256x64,stages=4,layout=contiguous,sched=dynamic,a=f16,b=f16,c=f16",
                           "tile=128x128x64,stages=6,layout=contiguous,sched=dynamic",
                           // absorbed tail rows on pairs sharing B (v42)
                           "tile=128x256x64,stages=4,layout=contiguous,sched=dynamic,tail=24",
                           "tile=128x256x64,stages=4,layout=masked,sched=static,c=f32,tail=24",
                           // a group's odd last M tile's units among its pair units (v49)
                           "tile=128x256x64,stages=4,layout=contiguous,sched=dynamic,pair_order=interleaved",
                           "tile=128x256x64,stages=4,layout=masked,sched=dynamic,c=f32,tail=24,pair_order=interleaved"}) {
    KernelSpec s = KernelSpec::parse(fmt::format("family=hopper,arch={},cluster=2x1,{}", arch.to_text(), text));
    s.validate();
    out.push_back(s);
  }
  return out;
}

// Every config of every family that runs on this device, each layout × dtype × scheduler.
std::vector<KernelSpec> all_specs() {
  std::vector<KernelSpec> out = family_candidates(runtime().arch(), KernelFamily::hopper);
  for (auto& s : pair_m_specs()) out.push_back(s);
  for (auto& s : family_candidates(runtime().arch(), KernelFamily::portable)) out.push_back(s);
  if (const char* only = std::getenv("MOEJIT_TEST_FAMILY"))
    std::erase_if(out, [&](const KernelSpec& s) { return to_text(s.family) != only; });
  // MOEJIT_TEST_QUICK: bf16 in and out only (every tile × layout × scheduler), for slow tools
  // such as compute-sanitizer.
  if (std::getenv("MOEJIT_TEST_QUICK"))
    std::erase_if(out, [](const KernelSpec& s) { return s.a != DType::bf16 || s.c != DType::bf16; });
  // MOEJIT_TEST_SPEC: only the specs whose text contains it (e.g. "tile=64x256x64"), for a device
  // call that checks the configs a change touches.
  if (const char* part = std::getenv("MOEJIT_TEST_SPEC"))
    std::erase_if(out, [&](const KernelSpec& s) { return s.to_text().find(part) == std::string::npos; });
  return out;
}

void run_and_check(const KernelSpec& spec, GroupedProblem& p, const char* what, int launches = 1) {
  Kernel kernel = runtime().kernel(spec);
  for (int i = 0; i < launches; ++i) {
    p.poison();
    kernel.launch(p.args(), nullptr);
    MOEJIT_CU(driver().cuCtxSynchronize());
    auto r = p.check();
    INFO(fmt::format("{} launch {} spec {}: rel_err {:.2e} nan {} written_outside {}", what, i, spec.to_text(), r.rel_err,
                     r.nan_in_groups, r.written_outside));
    CHECK(r.nan_in_groups == 0);
    CHECK(r.written_outside == 0);
    CHECK(r.rel_err < error_bound(spec.c));
  }
}

GroupedProblem make_problem(const KernelSpec& spec, std::vector<int> rows, int n, int k, std::mt19937& rng) {
  runtime();  // its context holds the allocations below (a test case run alone has none before this)
  GroupedProblem p;
  p.layout = spec.layout;
  p.ab = spec.a;
  p.c = spec.c;
  p.groups = (int)rows.size();
  p.rows_of = std::move(rows);
  p.n = n;
  p.k = k;
  p.capacity = 0;
  for (int r : p.rows_of) p.capacity = std::max(p.capacity, r);
  p.capacity += 9;  // slab padding rows that must stay untouched
  p.fill(rng);
  return p;
}

}  // namespace

TEST_CASE("device and candidates", "[gpu]") {
  auto specs = all_specs();
  WARN(fmt::format("device {} ({}, {} SMs): {} kernel variants under test", runtime().device_name(),
                   runtime().arch().to_text(), runtime().sm_count(), specs.size()));
  compile_on_all_cores(runtime(), specs);
  REQUIRE(!specs.empty());
}

TEST_CASE("every variant: mixed group sizes incl. empty, M=1, M not a multiple of the tile", "[gpu]") {
  std::mt19937 rng(1234);
  for (auto& spec : all_specs()) {
    // N and K not multiples of any tile; groups of 0, 1, tile±1 and odd sizes.
    auto p = make_problem(spec, {0, 1, spec.tile.m + 1, 64, 0, 517, spec.tile.m - 1, 3}, 264, 392, rng);
    run_and_check(spec, p, "mixed", spec.scheduler == Scheduler::dynamic ? 2 : 1);
  }
}

TEST_CASE("every variant: epilogue edges, several tiles per CTA", "[gpu]") {
  // Hopper: 64-row slices store through shared memory + TMA only when all their rows are the
  // group's, a 128-row tile whose group ends in its first half runs one consumer; N = 320 leaves
  // one 64-column chunk in the last N tile. > 132 tiles, so CTAs reuse the staging buffers (the
  // reference runs one thread per group: no group is large).
  std::mt19937 rng(314);
  for (auto& spec : all_specs()) {
    auto p = make_problem(spec, {64, 65, 127, 128, 129, 192, 193, 0, 256, 1000, 1500, 33, 1200, 1200, 1200, 1200},
                          320, 136, rng);
    run_and_check(spec, p, "edges", spec.scheduler == Scheduler::dynamic ? 2 : 1);
  }
}

TEST_CASE("absorbed tail rows: 1-24 rows past a whole 128-row tile in its last tile, 25 in a tile of their own", "[gpu][tail]") {
  // Groups ending 1, 24 and 7 rows past whole tiles (absorbed), 25 past (a tile of their own), whole
  // tiles, empty and tiny groups; N = 320 leaves a partial N tile (tail columns past N unstored),
  // K = 200 a partial k-block. Every tail=24 variant of all_specs (1x1 and 1x2, both layouts and
  // schedulers, each C type).
  std::mt19937 rng(2411);
  int variants = 0;
  for (auto& spec : all_specs()) {
    if (spec.tail == 0) continue;
    auto p = make_problem(spec, {129, 152, 153, 280, 0, 536, 24, 1, 256, 409, 128, 1031}, 320, 200, rng);
    run_and_check(spec, p, "tail rows", spec.scheduler == Scheduler::dynamic ? 2 : 1);
    ++variants;
  }
  WARN(fmt::format("{} variants with absorbed tail rows", variants));
}

TEST_CASE("every variant: one row in every group (decode)", "[gpu]") {
  std::mt19937 rng(99);
  for (auto& spec : all_specs()) {
    auto p = make_problem(spec, std::vector<int>(16, 1), 512, 256, rng);
    run_and_check(spec, p, "m=1");
  }
}

TEST_CASE("2x1 CTA pairs: DeepSeek-V3-like groups (odd and even M-tile counts), counter reuse", "[gpu]") {
  // 512 +- 22 rows per expert: 490 rows make 4 tiles (two full pairs), 534 make 5 (the fifth split
  // along N: N = 640 is 3 N tiles of 256, so rank 1 is without a tile on its last unit); 129 and 1
  // end in such a split tile too, 383 makes a half-filled rank 1 tile.
  std::mt19937 rng(2024);
  auto specs = pair_m_specs();
  if (specs.empty()) {
    WARN("no sm_90a device: 2x1 CTA pairs not tested");
    return;
  }
  for (auto& spec : specs) {
    if (const char* only = std::getenv("MOEJIT_TEST_FAMILY"); only && to_text(spec.family) != only) continue;
    auto p = make_problem(spec, {490, 534, 0, 129, 1, 512, 383, 534, 0, 490, 522, 256}, 640, 320, rng);
    run_and_check(spec, p, "pairs-m", spec.scheduler == Scheduler::dynamic ? 3 : 1);
  }
}

TEST_CASE("tile bands (band=N): Mixtral-like and DeepSeek-like groups, each cluster and scheduler", "[gpu][band]") {
  // Bands shorter than, equal to and longer than the groups' M-tile counts; a short last band
  // (1000 rows: 8 tiles in bands of 3); N = 1000: four N tiles of 256, the last partial.
  const Arch arch = runtime().arch();
  if (!(arch.sm() == 90 && arch.arch_specific)) {
    WARN("no sm_90a device: tile bands not tested");
    return;
  }
  std::mt19937 rng(4711);
  for (const char* text : {"tile=128x256x64,stages=4,cluster=1x2,sched=dynamic,band=3",
                           "tile=128x256x64,stages=4,cluster=1x2,sched=static,layout=masked,band=2",
                           "tile=128x256x64,stages=4,cluster=2x1,sched=static,band=2",
                           "tile=128x256x64,stages=4,sched=dynamic,c=f32,band=1",
                           "tile=64x128x64,stages=8,sched=dynamic,band=5"}) {
    KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,arch={},{}", arch.to_text(), text));
    spec.validate();
    auto p = make_problem(spec, {1000, 0, 490, 534, 1, 129, 2100, 383}, 1000, 320, rng);
    run_and_check(spec, p, "bands", spec.scheduler == Scheduler::dynamic ? 2 : 1);
  }
}

TEST_CASE("mixed tile order (mix=R): skewed groups, hot ones beside small and empty ones, each cluster and scheduler", "[gpu][mix]") {
  // Heavy groups (>= R rows) of 2-24 M tiles, light ones of 1-255 rows, empty ones; groups at R - 1,
  // R and R + 1 rows; N = 1000 (a partial last N tile), K = 320. Dynamic launches run twice (the
  // counter's reset).
  const Arch arch = runtime().arch();
  if (!(arch.sm() == 90 && arch.arch_specific)) {
    WARN("no sm_90a device: the mixed tile order not tested");
    return;
  }
  std::mt19937 rng(9001);
  const std::vector<int> skewed = {3000, 0, 5, 700, 1, 129, 256, 255, 257, 40, 0, 1000, 17, 300, 0, 2};
  for (const char* text : {"tile=128x256x64,stages=4,sched=dynamic,mix=256",
                           "tile=128x256x64,stages=4,sched=static,mix=256",
                           "tile=128x256x64,stages=4,cluster=1x2,sched=dynamic,mix=256",
                           "tile=128x256x64,stages=4,cluster=1x2,sched=static,layout=masked,mix=256",
                           "tile=128x256x64,stages=4,cluster=2x1,sched=static,mix=256",
                           "tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,mix=256",
                           "tile=128x256x64,stages=4,cluster=1x2,sched=dynamic,tail=24,mix=256",
                           "tile=128x256x64,stages=4,sched=dynamic,tail=24,c=f32,mix=128",
                           "tile=128x256x64,stages=4,sched=dynamic,a=f16,b=f16,c=f16,layout=masked,mix=64",
                           "tile=64x128x64,stages=8,sched=dynamic,mix=256",
                           "tile=128x128x64,stages=6,sched=dynamic,band=2,mix=192"}) {
    KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,arch={},{}", arch.to_text(), text));
    spec.validate();
    auto p = make_problem(spec, skewed, 1000, 320, rng);
    run_and_check(spec, p, "mixed order", spec.scheduler == Scheduler::dynamic ? 2 : 1);
    auto all_light = make_problem(spec, {3, 0, 100, 1}, 1000, 320, rng);
    run_and_check(spec, all_light, "mixed order, no heavy group", spec.scheduler == Scheduler::dynamic ? 2 : 1);
  }
}

TEST_CASE("all groups empty: nothing is written", "[gpu]") {
  std::mt19937 rng(7);
  for (auto& spec : all_specs()) {
    auto p = make_problem(spec, {0, 0, 0}, 128, 64, rng);
    run_and_check(spec, p, "empty");
  }
}

TEST_CASE("large total M", "[gpu]") {
  std::mt19937 rng(42);
  for (auto& spec : all_specs()) {
    if (spec.c != DType::bf16 || spec.a != DType::bf16) continue;
    auto p = make_problem(spec, {4096, 1500, 0, 3000, 2048, 77, 4000, 1700}, 512, 1024, rng);
    run_and_check(spec, p, "large");
  }
}

TEST_CASE("high-level call: picks a config, validates device offsets, is correct", "[gpu]") {
  std::mt19937 rng(5);
  KernelSpec shape;  // only layout and dtypes matter for make_problem
  for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {
    shape.layout = layout;
    auto p = make_problem(shape, {0, 300, 1, 1000, 17, 0, 256, 129}, 1536, 2048, rng);
    p.poison();
    GroupedGemmArgs args = p.args();
    args.host_groups = {};  // make the runtime read and check the device copy
    runtime().grouped_gemm(args, nullptr);
    MOEJIT_CU(driver().cuCtxSynchronize());
    auto r = p.check();
    INFO(fmt::format("{}: chose {}", to_text(layout), runtime().choose_spec(p.args()).to_text()));
    CHECK(r.nan_in_groups == 0);
    CHECK(r.written_outside == 0);
    CHECK(r.rel_err < 1e-2);
  }
  // Offsets that go backwards on the device are caught before any launch.
  shape.layout = GroupLayout::contiguous;
  auto p = make_problem(shape, {10, 20, 30}, 128, 64, rng);
  std::vector<int> bad = {0, 20, 10, 60};
  p.d_groups.upload(bad.data(), bad.size() * sizeof(int));
  GroupedGemmArgs args = p.args();
  args.host_groups = {};
  CHECK_THROWS_WITH(runtime().grouped_gemm(args, nullptr), Catch::Contains("not monotonic"));
}

// v54's few-large-groups rule from the host's counts: 16 groups of 155-169 rows, K = 10240, N = 2048
// (two rounds of 128x256 tiles, three of 64x256 at half the cost) take 64x256 on the static scheduler
// through the high-level call, in both layouts; the same sizes without host counts (a typical
// routing) do not. Random data, output poisoned, against the FP64 reference.
TEST_CASE("high-level call: few large groups take 64x256 static from host counts (v54) and are correct", "[gpu]") {
  if (!(runtime().arch().sm() == 90 && runtime().arch().arch_specific)) {
    WARN("no sm_90a device: the Hopper few-groups rule not tested");
    return;
  }
  std::mt19937 rng(54);
  std::vector<int> rows;
  for (int g = 0; g < 16; ++g) rows.push_back(155 + (g * 7) % 21);
  KernelSpec shape;
  for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {
    shape.layout = layout;
    auto p = make_problem(shape, rows, 2048, 10240, rng);
    p.poison();
    const KernelSpec chosen = runtime().choose_spec(p.args());
    INFO(fmt::format("{}: chose {}", to_text(layout), chosen.to_text()));
    CHECK((chosen.tile.m == 64 && chosen.tile.n == 256 && chosen.scheduler == Scheduler::static_persistent));
    runtime().grouped_gemm(p.args(), nullptr);
    MOEJIT_CU(driver().cuCtxSynchronize());
    auto r = p.check();
    CHECK(r.nan_in_groups == 0);
    CHECK(r.written_outside == 0);
    CHECK(r.rel_err < 1e-2);
    GroupedGemmArgs typical = p.args();
    typical.host_groups = {};
    typical.trust_device_groups = true;
    typical.expected_rows = std::accumulate(rows.begin(), rows.end(), 0LL);
    CHECK(runtime().choose_spec(typical).tile.m == 128);
  }
}

TEST_CASE("split=tail: the last round's tiles in pieces of K, half-empty tiles, empty groups, flags reset", "[gpu][split]") {
  // Tiles are numbered group by group (M fastest, then N), so the last round holds the last
  // groups' tiles: a group ending 4 rows into its last tile (one consumer idle), N = 320 (a
  // 64-column last N tile), K not a multiple of 64 and an empty group close the list. The filler
  // group in front sets the tile count from the SM count, so that the plan really splits: beyond
  // one round with 4 pieces per tile, and a single short round with 3. Two launches each, so a
  // flag left non-zero would show.
  std::vector<KernelSpec> specs = all_specs();
  std::erase_if(specs, [](const KernelSpec& s) { return s.split != SplitK::tail; });
  if (specs.empty()) {
    WARN("no sm_90a device: split=tail not tested");
    return;
  }
  const int sms = runtime().sm_count();
  constexpr int kN = 320;
  std::mt19937 rng(77);
  for (auto& spec : specs) {
    const int n_tiles = (kN + spec.tile.n - 1) / spec.tile.n;
    struct Shape {
      std::vector<int> tail_groups;
      int target_tiles, k, pieces;
    };
    for (Shape shape : {Shape{{1000, 0, 130, 1, 2100, 900, 0}, sms + sms / 4, 4064, 4},
                        Shape{{130, 0, 257, 1, 600, 0}, sms / 3, 3080, 3}}) {
      const std::vector<int> rows = rows_for_tile_count(shape.tail_groups, shape.target_tiles, spec.tile.m, n_tiles);
      const long long tiles = tile_count(rows, spec.tile.m, n_tiles);
      const SplitTailPlan plan = plan_split_tail(tiles, sms, (shape.k + spec.tile.k - 1) / spec.tile.k);
      INFO(fmt::format("{} tiles on {} SMs: {} tiles from {} in {} pieces", tiles, sms, plan.tiles, plan.from, plan.count));
      CHECK(plan.count == shape.pieces);
      auto p = make_problem(spec, rows, kN, shape.k, rng);
      run_and_check(spec, p, "split-tail", 2);
    }
  }
}

// Programmatic dependent launch (RuntimeOptions::programmatic_launch, on by default on sm_90): a
// GEMM that reads the C of the GEMM launched right before it on the same stream, with no sync
// between. Its entry's griddepcontrol.wait must hold it until the first has finished: the first is
// long (K = 4096) and the second short, so without the wait the second would read rows still
// poisoned (NaN) or half written. Also the routing kernels' chain (topk, scan, scatter) runs so.
TEST_CASE("programmatic launch: a GEMM reading the previous GEMM's C, back to back on one stream", "[gpu][pdl]") {
  std::mt19937 rng(41);
  INFO(fmt::format("programmatic launch {}", runtime().programmatic_launch() ? "on" : "off (before sm_90 or MOEJIT_PDL=0)"));
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  KernelSpec shape;  // only layout and dtypes matter for make_problem: contiguous bf16
  for (int round = 0; round < 3; ++round) {
    const std::vector<int> rows = {300, 0, 129, 1000, 64, 7};
    auto first = make_problem(shape, rows, 256, 4096, rng);  // C: [total_rows, 256]
    auto second = make_problem(shape, rows, 192, 256, rng);  // A: the first's C (same rows)
    first.poison();
    second.poison();
    MOEJIT_CU(driver().cuCtxSynchronize());
    GroupedGemmArgs chained = second.args();
    chained.a = first.d_c.get();
    runtime().grouped_gemm(first.args(), reinterpret_cast<Stream>(stream));
    runtime().grouped_gemm(chained, reinterpret_cast<Stream>(stream));
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    // The second's reference is taken from the first's actual output.
    first.d_c.download(second.a.data(), second.a.size() * sizeof(std::uint16_t));
    for (auto [p, what] : {std::pair{&first, "first"}, std::pair{&second, "second (A = the first's C)"}}) {
      auto r = p->check();
      INFO(fmt::format("round {} {}: rel_err {:.2e} nan {} written_outside {}", round, what, r.rel_err, r.nan_in_groups,
                       r.written_outside));
      CHECK(r.nan_in_groups == 0);
      CHECK(r.written_outside == 0);
      CHECK(r.rel_err < 1e-2);
    }
  }
  cudaStreamDestroy(stream);
}
