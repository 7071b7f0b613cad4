// GPU tests of the autotuner and the high-level call's per-bucket choice: every config the tuner
// may pick computes the right result; a tuning result is stored, reused by a new Runtime, and
// used by grouped_gemm; autotune on first call; shapes alternating between buckets; masked layout
// and the dynamic scheduler inside a captured CUDA graph.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <optional>

#include <unistd.h>

#include "gpu_problem.hpp"
#include "heuristics/config.hpp"
#include "heuristics/tuning.hpp"
#include "moejit/moejit.hpp"
#include "runtime/tuner.hpp"

using namespace moejit;
using namespace moejit::test;

// Counts every C++ allocation in this test binary, so that the hot path's "no allocation" claim
// is checked rather than assumed.
namespace {
std::atomic<long> g_allocations{0};
}
void* operator new(std::size_t bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

// Keeps the device's primary context alive across test cases: the problems' device buffers are
// allocated before (and freed after) the Runtimes each test case makes and destroys.
void hold_context() {
  static Runtime holder;
  (void)holder;
}

GroupedProblem tuning_problem(GroupLayout layout, std::vector<int> rows, int n, int k, std::mt19937& rng) {
  GroupedProblem p;
  p.layout = layout;
  p.groups = (int)rows.size();
  p.rows_of = std::move(rows);
  p.n = n;
  p.k = k;
  p.capacity = *std::max_element(p.rows_of.begin(), p.rows_of.end()) + 5;
  p.fill(rng);
  return p;
}

void expect_correct(const GroupedProblem& p, const std::string& what) {
  MOEJIT_CU(driver().cuCtxSynchronize());
  auto r = p.check();
  INFO(fmt::format("{}: rel_err {:.2e} nan {} written_outside {}", what, r.rel_err, r.nan_in_groups, r.written_outside));
  CHECK(r.nan_in_groups == 0);
  CHECK(r.written_outside == 0);
  CHECK(r.rel_err < 1e-2);
}

GemmProblem as_problem(const GroupedProblem& p) {
  GemmProblem g;
  g.layout = p.layout;
  g.num_groups = p.groups;
  g.n = p.n;
  g.k = p.k;
  for (int r : p.rows_of) g.total_rows += r;
  g.group_rows = p.rows_of;
  return g;
}

}  // namespace

TEST_CASE("every config the tuner may pick is correct", "[gpu][tuning]") {
  hold_context();
  Runtime rt;
  std::mt19937 rng(31);
  for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {
    // Decode-sized and prefill-sized groups: the candidate lists start from different choices.
    for (std::vector<int> rows : {std::vector<int>{3, 0, 1, 40, 7, 64, 0, 12}, std::vector<int>{300, 0, 129, 1000, 64, 257}}) {
      auto p = tuning_problem(layout, rows, 392, 328, rng);
      auto specs = tuning_candidates(as_problem(p), rt.arch(), rt.sm_count());
      auto errors = compile_in_parallel(specs.size(), 16, [&](std::size_t i) { rt.compile(specs[i]); });
      for (std::size_t i = 0; i < specs.size(); ++i) {
        INFO(specs[i].to_text());
        REQUIRE(errors[i] == "");
        for (int launch = 0; launch < 2; ++launch) {  // the dynamic counter must reset itself
          p.poison();
          rt.kernel(specs[i]).launch(p.args(), nullptr);
          expect_correct(p, fmt::format("{} launch {}", specs[i].to_text(), launch));
        }
      }
    }
  }
}

TEST_CASE("tune: times every candidate, stores the best, a new runtime and grouped_gemm use it", "[gpu][tuning]") {
  hold_context();
  std::mt19937 rng(32);
  auto p = tuning_problem(GroupLayout::contiguous, {200, 0, 512, 77, 1000, 300, 0, 128}, 1024, 512, rng);
  TuneResult result;
  {
    Runtime rt;
    CHECK_THROWS_AS(rt.tune(p.args(), nullptr, TuneOptions{0, -1.0, true}), InvalidArgument);
    CHECK_THROWS_AS(rt.tune(p.args(), nullptr, TuneOptions{-2, 5.0, true}), InvalidArgument);
    result = rt.tune(p.args(), nullptr, TuneOptions{0, 5.0, true});
    REQUIRE(result.candidates.size() >= 2);
    CHECK(result.candidates[0].spec == result.heuristic);
    CHECK(result.candidates[0].spec == rt.choose_spec(p.args()));
    for (auto& c : result.candidates) {
      INFO(c.spec.to_text() << " " << c.error);
      CHECK(c.error == "");
      CHECK(c.ms > 0);
      CHECK(c.ms >= result.best_ms);
    }
    CHECK(result.best_ms > 0);
    CHECK(result.heuristic_ms >= result.best_ms);
    if (!rt.tuning_file().empty()) CHECK(std::filesystem::exists(rt.tuning_file()));
  }
  Runtime later;
  if (!later.tuning_file().empty()) {
    auto stored = later.tuned_spec(p.args());
    REQUIRE(stored.has_value());
    // Compared as text: a parsed hopper spec keeps the default warp grid, which hopper ignores.
    CHECK(stored->to_text() == result.best.to_text());
  }
  p.poison();
  later.grouped_gemm(p.args(), nullptr);
  expect_correct(p, "grouped_gemm with the stored choice");
}

TEST_CASE("tuner timing: L2 cleared before every timed launch, or back to back (TuneOptions::clear_l2)", "[gpu][tuning]") {
  hold_context();
  std::mt19937 rng(33);
  auto p = tuning_problem(GroupLayout::contiguous, {3, 0, 5, 1, 2, 0, 4, 1}, 1024, 512, rng);
  Runtime rt;
  Kernel k = rt.kernel(rt.choose_spec(p.args()));
  int launches = 0, clears = 0;
  std::vector<std::function<void()>> fns = {[&] { k.launch(p.args(), nullptr), ++launches; },
                                            [&] { k.launch(p.args(), nullptr), ++launches; }};
  // Each launch is sized once (one warm-up and one timed launch, a clear between them), then 5 rounds
  // of at most kClearedLaunchesPerBatch launches each, a clear before every one.
  const std::vector<double> ms = time_in_turns(fns, nullptr, 2.0, 5, [&] { ++clears; });
  REQUIRE(ms.size() == 2);
  for (double t : ms) CHECK(t > 0);
  CHECK(launches == 2 * 2 + clears - 2);
  CHECK(clears >= 2 + 2 * 5);
  CHECK(clears <= 2 + 2 * 5 * kClearedLaunchesPerBatch);
  launches = clears = 0;
  const std::vector<double> warm = time_in_turns(fns, nullptr, 2.0, 5);
  REQUIRE(warm.size() == 2);
  for (double t : warm) CHECK(t > 0);
  CHECK(clears == 0);
  // Both modes through Runtime::tune: every candidate timed, the best no slower than any.
  for (bool clear : {true, false}) {
    TuneOptions options;
    options.ms_per_candidate = 2.0;
    options.store = false;
    options.clear_l2 = clear;
    TuneResult result = rt.tune(p.args(), nullptr, options);
    INFO("clear_l2 " << clear);
    for (auto& c : result.candidates) {
      INFO(c.spec.to_text() << " " << c.error);
      CHECK(c.ms > 0);
      CHECK(c.ms >= result.best_ms);
    }
  }
  p.poison();
  k.launch(p.args(), nullptr);
  expect_correct(p, "the tuner's timed kernel");
}

TEST_CASE("grouped_gemm: alternating shape buckets, autotune on first call", "[gpu][tuning]") {
  hold_context();
  std::mt19937 rng(33);
  auto decode = tuning_problem(GroupLayout::contiguous, std::vector<int>(16, 2), 512, 256, rng);
  auto prefill = tuning_problem(GroupLayout::contiguous, {600, 700, 0, 512, 900}, 512, 256, rng);
  auto masked = tuning_problem(GroupLayout::masked, {5, 0, 300, 17}, 256, 128, rng);
  Runtime rt;
  for (int round = 0; round < 2; ++round)
    for (auto* p : {&decode, &prefill, &masked}) {
      p->poison();
      rt.grouped_gemm(p->args(), nullptr);
      expect_correct(*p, fmt::format("round {} {} groups layout {}", round, p->groups, to_text(p->layout)));
    }
  RuntimeOptions options;
  options.autotune = true;
  Runtime tuned(options);
  auto odd = tuning_problem(GroupLayout::contiguous, {33, 0, 1, 250, 3, 8}, 264, 200, rng);
  odd.poison();
  tuned.grouped_gemm(odd.args(), nullptr);
  expect_correct(odd, "autotuned first call");
  if (!tuned.tuning_file().empty()) CHECK(tuned.tuned_spec(odd.args()).has_value());
  odd.poison();
  tuned.grouped_gemm(odd.args(), nullptr);
  expect_correct(odd, "autotuned second call");
}

// Masked layout under CUDA graphs: shapes fixed at capture, counts changed on the device between
// replays. The dynamic scheduler's counter must reset itself inside the graph (no memset node).
TEST_CASE("CUDA graph: masked layout and dynamic scheduler replay with new counts", "[gpu][graph]") {
  hold_context();
  Runtime rt;
  std::mt19937 rng(34);
  std::vector<KernelSpec> specs;
  for (KernelFamily family : {KernelFamily::hopper, KernelFamily::portable})
    for (auto& s : family_candidates(rt.arch(), family))
      if (s.layout == GroupLayout::masked && s.scheduler == Scheduler::dynamic && s.a == DType::bf16 && s.c == DType::bf16)
        specs.push_back(s);
  REQUIRE(!specs.empty());
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  for (const KernelSpec& spec : specs) {
    auto p = tuning_problem(GroupLayout::masked, {100, 0, 37, 250, 1, 64}, 392, 256, rng);
    Kernel kernel = rt.kernel(spec);
    GroupedGemmArgs args = p.args();
    args.host_groups = {};
    args.trust_device_groups = true;  // no device-to-host copy: the counts change after capture
    kernel.launch(args, reinterpret_cast<Stream>(stream));  // eager launch: the stream's counter exists
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
    kernel.launch(args, reinterpret_cast<Stream>(stream));
    kernel.launch(args, reinterpret_cast<Stream>(stream));  // twice: the second sees the reset counter
    REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    for (int replay = 0; replay < 3; ++replay) {
      std::uniform_int_distribution<int> count(0, p.capacity);
      for (auto& r : p.rows_of) r = count(rng);
      p.d_groups.upload(p.rows_of.data(), p.rows_of.size() * sizeof(int));
      p.poison();
      REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
      expect_correct(p, fmt::format("{} replay {}", spec.to_text(), replay));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
}

// The high-level call under graph capture with the groups on the device only: expected_rows
// chooses the decode tile where the upper bound (capacity × groups) would choose a prefill one, and
// the captured launch stays correct for counts far from the hint, up to the capacity.
TEST_CASE("CUDA graph: grouped_gemm with expected_rows, any counts", "[gpu][graph]") {
  hold_context();
  Runtime rt;
  std::mt19937 rng(36);
  auto p = tuning_problem(GroupLayout::masked, std::vector<int>(32, 1), 512, 256, rng);
  p.capacity = 512;
  p.fill(rng);
  GroupedGemmArgs args = p.args();
  args.host_groups = {};
  args.trust_device_groups = true;
  CHECK(rt.choose_spec(args).tile.m == 128);  // the bound: 512 rows per group
  args.expected_rows = 32;
  CHECK(rt.choose_spec(args).tile.m == 64);   // the hint: one row per group
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  p.poison();
  rt.grouped_gemm(args, reinterpret_cast<Stream>(stream));  // eager: compiles and loads the bucket's kernel
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  expect_correct(p, "eager, one row per group");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
  rt.grouped_gemm(args, reinterpret_cast<Stream>(stream));
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int high : {3, 100, 512}) {
    std::uniform_int_distribution<int> count(0, high);
    for (auto& r : p.rows_of) r = count(rng);
    p.rows_of[5] = high;
    p.d_groups.upload(p.rows_of.data(), p.rows_of.size() * sizeof(int));
    p.poison();
    REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    expect_correct(p, fmt::format("replay with counts up to {}", high));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// A bucket first met under graph capture, on a stream the runtime has not seen: the kernel's module
// is loaded and the stream's scheduler counter allocated during the capture (relaxed capture mode),
// and with autotune on, tuning (which synchronizes) waits for the first call outside a capture. The
// capture survives, the graph replays correctly, and the next eager call tunes the bucket.
// Runtime::tune, and a call that would copy the groups back, throw on the capturing stream and
// leave the capture intact.
TEST_CASE("CUDA graph: a bucket's first call under capture, autotune deferred", "[gpu][graph][tuning]") {
  hold_context();
  // A cache folder of its own: no stored tuning result, no module of this runtime loaded yet.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("moejit-capture-test-{}", ::getpid());
  std::filesystem::remove_all(dir);
  const char* previous = std::getenv("MOEJIT_CACHE_DIR");
  const std::string saved_dir = previous ? previous : "";
  ::setenv("MOEJIT_CACHE_DIR", dir.c_str(), 1);
  std::mt19937 rng(38);
  auto p = tuning_problem(GroupLayout::contiguous, {40, 0, 7, 130, 1, 66, 3, 90}, 384, 256, rng);
  {
    RuntimeOptions options;
    options.autotune = true;
    Runtime rt(options);
    const GroupedGemmArgs args = p.args();  // host_groups given: nothing to copy back
    GroupedGemmArgs device_only = args;
    device_only.host_groups = {};
    const KernelSpec heuristic = rt.choose_spec(args);
    INFO("heuristic: " << heuristic.to_text());
    REQUIRE(!rt.tuned_spec(args).has_value());
    cudaStream_t stream;
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    const Stream s = reinterpret_cast<Stream>(stream);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK_THROWS_AS(rt.tune(args, s), InvalidArgument);
    CHECK_THROWS_AS(rt.grouped_gemm(device_only, s), InvalidArgument);
    rt.grouped_gemm(args, s);
    CHECK_THROWS_AS(rt.kernel(heuristic).launch(device_only, s), InvalidArgument);
    REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
    CHECK(!rt.tuned_spec(args).has_value());  // deferred
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    for (int replay = 0; replay < 2; ++replay) {
      p.poison();
      REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
      expect_correct(p, fmt::format("replay {}", replay));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    p.poison();
    rt.grouped_gemm(args, s);  // outside the capture: tuned now
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    expect_correct(p, "first call outside the capture");
    CHECK(rt.tuned_spec(args).has_value());

    // A dynamic-scheduler kernel whose first launch on a new stream is captured: the stream's
    // counter is made during the capture.
    std::optional<KernelSpec> dynamic;
    for (auto& c : family_candidates(rt.arch(), KernelFamily::hopper))
      if (!dynamic && c.layout == GroupLayout::contiguous && c.scheduler == Scheduler::dynamic && c.a == DType::bf16 &&
          c.c == DType::bf16 && c.split == SplitK::none)
        dynamic = c;
    REQUIRE(dynamic.has_value());
    Kernel kernel = rt.kernel(*dynamic);
    cudaStream_t fresh;
    REQUIRE(cudaStreamCreateWithFlags(&fresh, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaStreamBeginCapture(fresh, cudaStreamCaptureModeGlobal) == cudaSuccess);
    kernel.launch(args, reinterpret_cast<Stream>(fresh));
    kernel.launch(args, reinterpret_cast<Stream>(fresh));
    REQUIRE(cudaStreamEndCapture(fresh, &graph) == cudaSuccess);
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    for (int replay = 0; replay < 2; ++replay) {
      p.poison();
      REQUIRE(cudaGraphLaunch(exec, fresh) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(fresh) == cudaSuccess);
      expect_correct(p, fmt::format("{} captured on a new stream, replay {}", dynamic->to_text(), replay));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(fresh);
    cudaStreamDestroy(stream);
  }
  if (saved_dir.empty())
    ::unsetenv("MOEJIT_CACHE_DIR");
  else
    ::setenv("MOEJIT_CACHE_DIR", saved_dir.c_str(), 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("hot path: repeated lookups and launches allocate nothing", "[gpu][tuning][hot]") {
  hold_context();
  Runtime rt;
  std::mt19937 rng(35);
  for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {
    auto p = tuning_problem(layout, {70, 0, 3, 200, 64, 1}, 512, 256, rng);
    GroupedGemmArgs args = p.args();  // host_groups given: no device-to-host copy
    KernelSpec spec = rt.choose_spec(args);
    Kernel kernel = rt.kernel(spec);
    rt.grouped_gemm(args, nullptr);  // first calls: choose, compile or load, create the stream's counter
    kernel.launch(args, nullptr);
    MOEJIT_CU(driver().cuCtxSynchronize());
    long before = g_allocations.load();
    for (int i = 0; i < 100; ++i) {
      (void)rt.compile(spec);
      (void)rt.kernel(spec);
    }
    long lookups = g_allocations.load() - before;
    before = g_allocations.load();
    for (int i = 0; i < 100; ++i) {
      kernel.launch(args, nullptr);
      rt.grouped_gemm(args, nullptr);
    }
    long launches = g_allocations.load() - before;
    MOEJIT_CU(driver().cuCtxSynchronize());
    INFO(fmt::format("{}: {} allocations in 200 lookups, {} in 200 launches", to_text(layout), lookups, launches));
    CHECK(lookups == 0);
    CHECK(launches == 0);
    p.poison();
    rt.grouped_gemm(args, nullptr);
    expect_correct(p, "after the hot loop");
  }
}
