// The MoE grouped-GEMM benchmark suite (shared docs: moe-shapes.md): 4 models × up/down ×
// tokens {16, 128, 1024, 4096, 16384}, random top-k routing. Times each case with CUDA events
// (warm-up, then the median of repeated launches) and prints one CSV row per case:
//   model,gemm,tokens,E,topk,N,K,sumM,active,ms,tflops,gbps,spec
// BENCH_SPECS="tile=128x192x64,stages=5;..." additionally times each case with each of these
// overrides of the chosen spec (rows marked by their spec), for tuning; MODELS=a,b limits models,
// GEMMS=up or down the GEMMs timed. BENCH_EXTRA_MODEL=name,experts,topk,hidden,intermediate,up_n
// times one more shape after the suite's (MODELS selects it by name like the others).
// BENCH_MORE_MODELS=1: the public shapes beyond the suite's four as well (moe_models.hpp,
// kMoreMoeModels: Qwen3-235B, Kimi-K2, GLM-4.5, Llama 4 Maverick, gpt-oss-20b, Mixtral-8x22B, one
// rank of DeepSeek-V3 under 8-way expert parallelism); MODELS selects among all of them.
// An override that does not validate for a case (BENCH_SPECS=cluster=2x1 on 64-row decode tiles)
// is skipped for that case with a note on stderr.
// ROUTING=skewed: every case routed with hot and dead experts instead (moe_models.hpp,
// route_top_k_skewed); the peers read the same group sizes from the routing file.
// It also writes the routing of every case to ROUTING_FILE (argv[1], default routing.csv) so that
// tests/gpu/peers.py times torch._grouped_mm on exactly the same group sizes in the same run.
//
// FORMAT=e4m3|mxfp4|nvfp4: the quantized formats instead of bf16 (tests/gpu/run_formats.sh):
// e4m3 is FP8 with DeepSeek-V3 block scales (A and B e4m3, fp32 scales), mxfp4/nvfp4 weight-only
// (A bf16, B pre-arranged by pack_w4_sm90). Operands are random valid codes and scales (no NaN);
// gbps then counts the format's bytes: weights of active experts with their scales, A (+ its
// scales), C. Routing draws the same random numbers in every format, so one routing file serves all.
// BENCH_GATHER=1: every case with fuse=gather (A in token order, a random token per routed row), as
//   a fused GEMM1 reads it; the routing is the same as without. BENCH_FUSE="act=swiglu,glu=split"
//   adds an activation (spec fields), "fuse=scatter+weight+bias" a layer's GEMM2 epilogue (the bench
//   makes the operands). A BENCH_SPECS override may set other fuse= fields: each config gets the
//   operands its spec fuses. BENCH_UNFUSED=1 with BENCH_FUSE also times the unfused GEMM's own choice.
// BENCH_WARMUP_MS (default 25): each case's warm-up launches before it is timed (0 under ncu).
// BENCH_PAD_MB: allocate this many MB first, moving every operand to other device addresses.
// BENCH_BF16_WEIGHTS=e2m1 (bf16 only): weights drawn from the values MXFP4 widens to (an E2M1 value
//   times 2^-9..2^0, random sign: 1-2 significant bits) instead of normal ones (8 significant bits):
//   a diagnostic of data-dependent power at the 700 W cap (docs/perf.md v32).
// BENCH_SPECS_ONLY=1 with BENCH_SPECS: time the overrides only, not the chosen spec (for ncu).
// BENCH_MASKED=C: the masked layout, C rows per expert (A [E, C, K], C [E, C, N]; counts past C are
//   clipped, and the routing file holds the clipped ones), launched as under graph capture
//   (trust_device_groups, no host groups). Each case times three configs in turns: the heuristic's
//   choice from the exact counts (spec column prefixed "exact:"), from GroupedGemmArgs::expected_rows
//   = tokens x top-k ("hint:"), and from the layout's upper bound, C x E rows ("bound:").
// BENCH_INTERLEAVE=1 with BENCH_SPECS: the chosen config and the overrides take turns launch by
// launch (each after its own L2 clear) instead of being timed one after another: at 16384 tokens a
// config's place in the sequence moved its time by more than the configs differ (docs/perf.md v17).
// The order of the turns rotates every round (v47).
// Timing protocol: the peers' (triton's do_bench): ~100 ms of launches queued without host syncs,
// each after a 256 MB memset that clears L2, median of the per-launch events (since v14);
// BENCH_PROTOCOL=sync times as v1-v13 did (~200 ms, a host sync after each launch, no clear).
// Under ncu, filter with --kernel-name moejit_grouped_gemm: the clears are launches too.
//
// BENCH_TUNE=1: heuristic against autotuner instead. Each case runs Runtime::tune (every
// candidate config compiled in parallel and timed, TUNE_MS ms each, default 20), then times the
// heuristic's choice and the tuner's best again in turns (time_interleaved), and prints
//   model,gemm,tokens,E,topk,N,K,sumM,active,heur_ms,best_ms,ratio,within_5pct,heuristic,best,candidates,pick_over_heur
// (best_ms the faster of the two; pick_over_heur the tuner's pick over the heuristic's time, above 1
// where the tuner misjudged) then a markdown table (also written to TUNE_TABLE, default
// tune_table.md): cases within 5%. TUNE_WARM=1: the tuner without its L2 clears (TuneOptions::clear_l2).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "moe_models.hpp"
#include "spec_overrides.hpp"
#include "moejit/common/w4_layout.cuh"  // the packed 4-bit block size
#include "moejit/moejit.hpp"

namespace {

using moejit::examples::MoeModel;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    fmt::print(stderr, "{}: {}\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Fills a device buffer with random bf16 from a 16 MiB host pattern, tiled by device copies
// (random, never zero; bytes are what matter for timing, correctness is the tests' job).
void fill_random(void* dst, std::size_t bytes, std::mt19937& rng) {
  static std::vector<std::uint16_t> pattern;
  if (pattern.empty()) {
    pattern.resize(8 << 20);
    std::normal_distribution<float> normal;
    for (auto& v : pattern) v = moejit::float_to_bf16(normal(rng));
  }
  std::size_t chunk = std::min(bytes, pattern.size() * 2);
  check(cudaMemcpy(dst, pattern.data(), chunk, cudaMemcpyHostToDevice), "fill");
  for (std::size_t done = chunk; done < bytes;) {
    std::size_t n = std::min(done, bytes - done);
    check(cudaMemcpy(static_cast<char*>(dst) + done, dst, n, cudaMemcpyDeviceToDevice), "fill tile");
    done += n;
  }
}

// The bf16 values MXFP4 weights widen to in the 4-bit kernel: a random E2M1 magnitude (0 .. 6) times
// 2^-9 .. 2^0, random sign (BENCH_BF16_WEIGHTS=e2m1), as 16 MiB of bytes for fill_pattern.
std::vector<std::uint8_t> e2m1_bf16_pattern(std::mt19937& rng) {
  static const float kMagnitudes[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  std::vector<std::uint16_t> values(8 << 20);
  for (auto& v : values) {
    const unsigned r = rng();
    const float x = std::ldexp(kMagnitudes[r & 7], -static_cast<int>((r >> 3) % 10));
    v = moejit::float_to_bf16(r & 0x8000 ? -x : x);
  }
  std::vector<std::uint8_t> out(values.size() * 2);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Tiles `pattern` over [dst, dst + bytes) with device copies; offsets stay multiples of the
// pattern's size, so a pattern of whole pre-arranged 4-bit blocks keeps every block's layout.
void fill_pattern(void* dst, std::size_t bytes, const std::vector<std::uint8_t>& pattern) {
  std::size_t chunk = std::min(bytes, pattern.size());
  check(cudaMemcpy(dst, pattern.data(), chunk, cudaMemcpyHostToDevice), "fill");
  for (std::size_t done = chunk; done < bytes;) {
    std::size_t n = std::min(done, bytes - done);
    check(cudaMemcpy(static_cast<char*>(dst) + done, dst, n, cudaMemcpyDeviceToDevice), "fill tile");
    done += n;
  }
}

// Random E4M3 codes, never NaN: random sign and mantissa, exponent field 4..11 (2^-3 .. 2^4).
std::vector<std::uint8_t> e4m3_pattern(std::mt19937& rng) {
  std::vector<std::uint8_t> out(16 << 20);
  for (auto& v : out) {
    unsigned byte = rng() & 0xFF;
    v = static_cast<std::uint8_t>((byte & 0x87) | ((4 + ((byte >> 3) & 7)) << 3));
  }
  return out;
}

// Random positive fp32 scales 0.01 * 2^(-3..3), as bytes.
std::vector<std::uint8_t> scale_pattern(std::mt19937& rng) {
  std::vector<float> f(1 << 20);
  std::uniform_int_distribution<int> e(-3, 3);
  for (auto& x : f) x = std::ldexp(0.01f, e(rng));
  std::vector<std::uint8_t> out(f.size() * 4);
  std::memcpy(out.data(), f.data(), out.size());
  return out;
}

// Whole pre-arranged 4-bit blocks (formats.hpp, "W4 SM90"): random codes, then valid scales
// (stored MXFP4 scales 118..127 with row exponent 0, E4M3 0x30..0x47: 0.25 .. 3.75). Code bytes
// stay below 0x80 (the upper code's sign +), so that a kernel reading the layout before its row
// exponents (v9) sees only scales <= 2^1 wherever it looks: the templates A/B of docs/perf.md v10.
std::vector<std::uint8_t> w4_pattern(std::mt19937& rng, moejit::DType format) {
  const std::size_t block = moejit::w4_sm90_block_bytes(format == moejit::DType::nvfp4);
  std::vector<std::uint8_t> out((16 << 20) / block * block);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const unsigned r = rng();
    if (i % block < 4096) out[i] = static_cast<std::uint8_t>(r & 0x7F);  // < 0x80: also a scale <= 2^1 (A/B, v10)
    else out[i] = static_cast<std::uint8_t>(format == moejit::DType::nvfp4 ? 0x30 + r % 24 : 118 + r % 10);
  }
  return out;
}

// "128x256x64 s4 dynamic" (+ " 2x1", " tail", " split", " mix"): the fields the tuner varies.
std::string short_spec(const moejit::KernelSpec& s) {
  std::string out = fmt::format("{}x{}x{} s{} {}", s.tile.m, s.tile.n, s.tile.k, s.stages,
                                s.scheduler == moejit::Scheduler::dynamic ? "dynamic" : "static");
  if (s.cluster_m != 1 || s.cluster_n != 1) out += fmt::format(" {}x{}", s.cluster_m, s.cluster_n);
  if (s.tail != 0) out += " tail";
  if (s.split == moejit::SplitK::tail) out += " split";
  if (s.mix != 0) out += " mix";
  return out;
}

// Median time of one launch over about `budget_ms` of launches (min_reps..max_reps), after
// `warmups` launches and then launches for at least `warmup_ms` (as triton's do_bench, which times
// the torch peers with warmup=25): a case's clocks settle to its own load first. With 3 launches
// alone, a decode case timed right after a prefill case ran 10-37% slower than in a run without
// one (4-bit kernels, H100, docs/perf.md v13): the SM clock was still down from the heavy case.
// With `l2_flush` (a device buffer of kL2FlushBytes), each timed launch follows a memset of it and
// the launches are queued without host syncs, as do_bench times the peers (rep=100 ms, a 256 MB
// cache clear before every call): under the H100's 700 W cap the window's length and the clears'
// low-power gaps move compute-bound times by several percent (docs/perf.md v14), so both sides
// are timed the same way.
constexpr std::size_t kL2FlushBytes = 256u << 20;

double time_kernel(const moejit::Kernel& kernel, const moejit::GroupedGemmArgs& args, cudaEvent_t start, cudaEvent_t stop,
                   float budget_ms, int warmups = 1, int min_reps = 3, int max_reps = 50, float warmup_ms = 0.f,
                   void* l2_flush = nullptr) {
  for (int i = 0; i < warmups; ++i) kernel.launch(args, nullptr);
  check(cudaDeviceSynchronize(), "warm-up");
  float once = 0;
  cudaEventRecord(start);
  kernel.launch(args, nullptr);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  cudaEventElapsedTime(&once, start, stop);
  if (warmup_ms > 0.f) {
    const int more = std::min((int)(warmup_ms / std::max(once, 1e-3f)), 10000);
    for (int i = 0; i < more; ++i) kernel.launch(args, nullptr);
    check(cudaDeviceSynchronize(), "warm-up");
  }
  int reps = std::clamp((int)(budget_ms / std::max(once, 1e-3f)), min_reps, max_reps);
  std::vector<float> ms(reps);
  if (l2_flush) {
    std::vector<cudaEvent_t> begin(reps), end(reps);
    for (int i = 0; i < reps; ++i) {
      check(cudaEventCreate(&begin[i]), "event");
      check(cudaEventCreate(&end[i]), "event");
      check(cudaMemsetAsync(l2_flush, 0, kL2FlushBytes), "L2 flush");
      cudaEventRecord(begin[i]);
      kernel.launch(args, nullptr);
      cudaEventRecord(end[i]);
    }
    check(cudaDeviceSynchronize(), "timed launches");
    for (int i = 0; i < reps; ++i) {
      cudaEventElapsedTime(&ms[i], begin[i], end[i]);
      cudaEventDestroy(begin[i]);
      cudaEventDestroy(end[i]);
    }
  } else {
    for (auto& t : ms) {
      cudaEventRecord(start);
      kernel.launch(args, nullptr);
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      cudaEventElapsedTime(&t, start, stop);
    }
  }
  check(cudaGetLastError(), "launch");
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The case's arguments as `spec` takes them: its fusion, and only the fusion operands it uses
// (Kernel::launch rejects a pointer the spec does not fuse), so that a BENCH_SPECS override with
// other fuse= fields (or BENCH_UNFUSED's plain kernel) runs on the same A, B and routing.
moejit::GroupedGemmArgs args_for(const moejit::KernelSpec& spec, moejit::GroupedGemmArgs args) {
  args.fusion = spec.fusion;
  if (!spec.fusion.gather_a) args.gather_rows = nullptr, args.num_tokens = 0;
  if (!spec.fusion.scatter_c) args.scatter_rows = nullptr, args.num_out_rows = 0;
  if (!spec.fusion.routing_weight) args.routing_weights = nullptr;
  if (!spec.fusion.bias) args.bias = nullptr;
  return args;
}

// BENCH_INTERLEAVE=1 (with BENCH_SPECS, the peers' protocol): the case's configs take turns launch
// by launch, each launch after its own L2 clear, so that every config is timed under the same
// clocks and heat. Timed one after another, a config's time at 16384 tokens moved ±5-25% with its
// place in the sequence (H100 at its 700 W cap, docs/perf.md v17). Returns each config's median.
// `args` holds one set of arguments per kernel (args_for: the fusion operands its spec takes).
// The order rotates from round to round, so that no config always follows the same one: in a fixed
// order, one bf16 kernel timed in two places of the same turn read 3.5-4% apart at 0.4-0.6 ms a launch
// (H100, docs/perf.md v47).
std::vector<double> time_interleaved(const std::vector<moejit::Kernel>& kernels, const std::vector<moejit::GroupedGemmArgs>& args,
                                     cudaEvent_t start, cudaEvent_t stop, float warmup_ms, void* l2_flush) {
  float round_ms = 0;
  for (std::size_t j = 0; j < kernels.size(); ++j) {
    for (int i = 0; i < 3; ++i) kernels[j].launch(args[j], nullptr);
    check(cudaDeviceSynchronize(), "warm-up");
    cudaEventRecord(start);
    kernels[j].launch(args[j], nullptr);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float once = 0;
    cudaEventElapsedTime(&once, start, stop);
    round_ms += std::max(once, 1e-3f);
  }
  // Warm-up: warmup_ms per config, in turns as well.
  const int warm_rounds = std::min((int)(warmup_ms * kernels.size() / round_ms), 10000);
  for (int r = 0; r < warm_rounds; ++r)
    for (std::size_t j = 0; j < kernels.size(); ++j) kernels[j].launch(args[j], nullptr);
  check(cudaDeviceSynchronize(), "warm-up");
  // ~100 ms per config, as time_kernel's peers' protocol gives each.
  const int rounds = std::clamp((int)(100.f * kernels.size() / round_ms), 5, 100);
  std::vector<cudaEvent_t> begin(rounds * kernels.size()), end(begin.size());
  for (std::size_t i = 0; i < begin.size(); ++i) {
    check(cudaEventCreate(&begin[i]), "event");
    check(cudaEventCreate(&end[i]), "event");
  }
  for (int r = 0; r < rounds; ++r)
    for (std::size_t turn = 0; turn < kernels.size(); ++turn) {
      const std::size_t j = (turn + static_cast<std::size_t>(r)) % kernels.size();
      check(cudaMemsetAsync(l2_flush, 0, kL2FlushBytes), "L2 flush");
      cudaEventRecord(begin[r * kernels.size() + j]);
      kernels[j].launch(args[j], nullptr);
      cudaEventRecord(end[r * kernels.size() + j]);
    }
  check(cudaDeviceSynchronize(), "timed launches");
  check(cudaGetLastError(), "launch");
  std::vector<double> medians;
  for (std::size_t j = 0; j < kernels.size(); ++j) {
    std::vector<float> ms(rounds);
    for (int r = 0; r < rounds; ++r) cudaEventElapsedTime(&ms[r], begin[r * kernels.size() + j], end[r * kernels.size() + j]);
    std::sort(ms.begin(), ms.end());
    medians.push_back(ms[ms.size() / 2]);
  }
  for (std::size_t i = 0; i < begin.size(); ++i) cudaEventDestroy(begin[i]), cudaEventDestroy(end[i]);
  return medians;
}

struct TuneRow {
  std::string name;
  double heuristic_ms, best_ms;
  std::string heuristic, best;
};

}  // namespace

// Whether `name` is one of the comma-separated names in `list` (MODELS): whole names, so that
// deepseek-v3 does not also select deepseek-v3-ep8.
static bool listed(const char* list, const char* name) {
  std::stringstream names(list);
  std::string item;
  while (std::getline(names, item, ','))
    if (item == name) return true;
  return false;
}

int main(int argc, char** argv) {
  const char* routing_path = argc > 1 ? argv[1] : "routing.csv";
  std::vector<int> token_counts = {16, 128, 1024, 4096, 16384};
  if (const char* env = std::getenv("TOKENS")) {
    token_counts.clear();
    std::stringstream s(env);
    for (std::string t; std::getline(s, t, ',');) token_counts.push_back(std::stoi(t));
  }
  bool skewed = false;
  try {
    skewed = moejit::examples::skewed_routing_requested();
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
  moejit::Runtime rt;
  fmt::print(stderr, "device {} ({}, {} SMs), {} routing\n", rt.device_name(), rt.arch().to_text(), rt.sm_count(),
             skewed ? "skewed" : "random");
  FILE* routing = std::fopen(routing_path, "w");
  const bool tune_mode = std::getenv("BENCH_TUNE") && std::string(std::getenv("BENCH_TUNE")) != "0";
  moejit::TuneOptions tune_options;
  tune_options.store = false;
  if (const char* ms = std::getenv("TUNE_MS")) tune_options.ms_per_candidate = std::stod(ms);
  // TUNE_WARM=1: the tuner times its candidates back to back, without clearing L2 (before v55).
  if (const char* warm = std::getenv("TUNE_WARM"); warm && std::string(warm) != "0") tune_options.clear_l2 = false;
  std::vector<TuneRow> tune_rows;
  const std::string format = std::getenv("FORMAT") ? std::getenv("FORMAT") : "bf16";
  const bool gather = std::getenv("BENCH_GATHER") && std::string(std::getenv("BENCH_GATHER")) != "0";
  // BENCH_FUSE="act=swiglu,glu=split" or "fuse=scatter+weight+bias": an epilogue fusion in spec
  // fields (an activation with its GLU layout; scattered rows, routing weights and a bias, whose
  // operands the bench makes: a layer's GEMM2); the GEMM's FLOPs and the table's bytes stay the plain GEMM's.
  moejit::Fusion bench_fusion;
  if (const char* fuse = std::getenv("BENCH_FUSE")) bench_fusion = moejit::KernelSpec::parse(fuse).fusion;
  const float warmup_ms = std::getenv("BENCH_WARMUP_MS") ? std::stof(std::getenv("BENCH_WARMUP_MS")) : 25.f;
  // The peers' protocol (do_bench): ~100 ms of launches, each after a 256 MB L2 clear.
  // BENCH_PROTOCOL=sync: v1-v13's (~200 ms of launches, a host sync after each, no clear).
  const bool peer_protocol = !std::getenv("BENCH_PROTOCOL") || std::string(std::getenv("BENCH_PROTOCOL")) != "sync";
  // BENCH_PAD_MB: a buffer of this many MB allocated (and kept) before any other, so that the
  // operands land at other device addresses: a diagnostic for placement effects (docs/perf.md v31).
  void* pad = nullptr;
  if (const char* mb = std::getenv("BENCH_PAD_MB"); mb && std::atoll(mb) > 0)
    check(cudaMalloc(&pad, (std::size_t)std::atoll(mb) << 20), "BENCH_PAD_MB buffer");
  void* l2_flush = nullptr;
  if (peer_protocol) check(cudaMalloc(&l2_flush, kL2FlushBytes), "L2 flush buffer");
  // BENCH_INTERLEAVE=1: a case's BENCH_SPECS configs timed in turns (time_interleaved).
  const bool unfused_too = std::getenv("BENCH_UNFUSED") && std::string(std::getenv("BENCH_UNFUSED")) != "0";
  const bool interleave = peer_protocol && std::getenv("BENCH_INTERLEAVE") && std::string(std::getenv("BENCH_INTERLEAVE")) != "0";
  const int masked_capacity = std::getenv("BENCH_MASKED") ? std::atoi(std::getenv("BENCH_MASKED")) : 0;
  if (masked_capacity < 0 || (masked_capacity > 0 && (gather || tune_mode || std::getenv("BENCH_SPECS") || !peer_protocol))) {
    fmt::print(stderr, "BENCH_MASKED={} (expected rows per expert >= 1, without BENCH_GATHER, BENCH_TUNE, BENCH_SPECS or "
                       "BENCH_PROTOCOL=sync)\n", std::getenv("BENCH_MASKED"));
    return 2;
  }
  if (format != "bf16" && format != "e4m3" && format != "mxfp4" && format != "nvfp4") {
    fmt::print(stderr, "FORMAT={} (expected bf16, e4m3, mxfp4 or nvfp4)\n", format);
    return 2;
  }
  const bool fp8 = format == "e4m3", w4 = format == "mxfp4" || format == "nvfp4", nvfp4 = format == "nvfp4";
  const moejit::DType w4_type = format == "nvfp4" ? moejit::DType::nvfp4 : moejit::DType::mxfp4;
  std::mt19937 fill_rng(7);  // quantized operands: kept apart from the routing's numbers
  std::vector<std::uint8_t> codes_pattern, scales_pattern;
  if (fp8) codes_pattern = e4m3_pattern(fill_rng);
  if (w4) codes_pattern = w4_pattern(fill_rng, w4_type);
  if (fp8 || w4) scales_pattern = scale_pattern(fill_rng);
  std::vector<std::uint8_t> low_bit_weights;
  if (const char* w = std::getenv("BENCH_BF16_WEIGHTS"); w && std::string(w) == "e2m1" && format == "bf16") {
    std::mt19937 weights_rng(11);  // its own stream: the routing draws the same numbers either way
    low_bit_weights = e2m1_bf16_pattern(weights_rng);
  }
  if (tune_mode)
    fmt::print("model,gemm,tokens,E,topk,N,K,sumM,active,heur_ms,best_ms,ratio,within_5pct,heuristic,best,candidates,pick_over_heur\n");
  else
    fmt::print("model,gemm,tokens,E,topk,N,K,sumM,active,ms,tflops,gbps,spec\n");
  std::mt19937 rng(2026);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const char* only_models = std::getenv("MODELS");
  const char* only_gemms = std::getenv("GEMMS");
  // BENCH_EXTRA_MODEL=name,experts,topk,hidden,intermediate,up_n: one more shape after the suite's
  // (an experiment's, e.g. gpt-oss with 128-byte-aligned FP8 rows: hidden = intermediate = 2944).
  std::vector<MoeModel> models(std::begin(moejit::examples::kMoeModels), std::end(moejit::examples::kMoeModels));
  if (const char* more = std::getenv("BENCH_MORE_MODELS"); more && std::string(more) == "1")
    models.insert(models.end(), std::begin(moejit::examples::kMoreMoeModels), std::end(moejit::examples::kMoreMoeModels));
  std::string extra_name;  // outlives the loop below, which holds its c_str()
  if (const char* extra = std::getenv("BENCH_EXTRA_MODEL")) {
    std::stringstream fields(extra);
    std::string name;
    MoeModel m{};
    char comma = 0;
    if (std::getline(fields, name, ',') && (fields >> m.experts >> comma >> m.topk >> comma >> m.hidden >> comma >>
                                            m.intermediate >> comma >> m.up_n)) {
      extra_name = name;
      m.name = extra_name.c_str();
      models.push_back(m);
    } else {
      fmt::print(stderr, "BENCH_EXTRA_MODEL='{}': expected name,experts,topk,hidden,intermediate,up_n\n", extra);
      return 2;
    }
  }
  for (const MoeModel& m : models) {
    if (only_models && !listed(only_models, m.name)) continue;
    // Weights are allocated once per model and GEMM, at the largest shape.
    for (const char* gemm : {"up", "down"}) {
      bool up = gemm[0] == 'u';
      int n = up ? m.up_n : m.hidden, k = up ? m.hidden : m.intermediate;
      void* d_b = nullptr;
      void* d_b_scales = nullptr;  // e4m3: [E][N/128][K/128]; nvfp4: the per-expert tensor scales
      std::size_t b_bytes = (std::size_t)m.experts * n * k * 2, b_scale_bytes = 0;
      const std::size_t k_blocks = (k + 127) / 128;
      if (fp8) b_bytes = (std::size_t)m.experts * n * k, b_scale_bytes = (std::size_t)m.experts * ((n + 127) / 128) * k_blocks * 4;
      if (w4) b_bytes = moejit::w4_sm90_packed_bytes({m.experts, n, k}, format == "nvfp4" ? moejit::QuantFormat::nvfp4
                                                                                          : moejit::QuantFormat::mxfp4);
      if (format == "nvfp4") b_scale_bytes = (std::size_t)m.experts * 4;
      check(cudaMalloc(&d_b, b_bytes), "cudaMalloc B");
      if (w4) {
        // One 128-row run of the packed layout (formats.hpp): its header (MXFP4's row exponents,
        // 0 here) and K blocks taken from the pattern, repeated over every run of every expert.
        const std::size_t blocks = (k + 63) / 64, runs = (std::size_t)m.experts * ((n + 127) / 128);
        const std::size_t block_bytes = moejit::w4_sm90_block_bytes(nvfp4), run_bytes = b_bytes / runs;
        std::vector<std::uint8_t> run(run_bytes, 0);
        const std::size_t header = run_bytes - blocks * block_bytes;
        for (std::size_t i = 0; i < blocks * block_bytes; ++i) run[header + i] = codes_pattern[i % codes_pattern.size()];
        fill_pattern(d_b, b_bytes, run);
      } else if (fp8) {
        fill_pattern(d_b, b_bytes, codes_pattern);
      } else {
        fill_random(d_b, b_bytes, rng);  // also with e2m1 weights: the routing draws after it
        if (!low_bit_weights.empty()) fill_pattern(d_b, b_bytes, low_bit_weights);
      }
      if (b_scale_bytes) {
        check(cudaMalloc(&d_b_scales, b_scale_bytes), "cudaMalloc B scales");
        fill_pattern(d_b_scales, b_scale_bytes, scales_pattern);
      }
      for (int tokens : token_counts) {
        std::vector<int> counts = skewed ? moejit::examples::route_top_k_skewed(tokens, m, rng)
                                         : moejit::examples::route_top_k(tokens, m, rng);
        if (masked_capacity)
          for (int& c : counts) c = std::min(c, masked_capacity);
        std::vector<int> offsets(m.experts + 1, 0);
        std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
        int rows = offsets.back();
        int active = (int)std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; });
        std::fprintf(routing, "%s,%s,%d", m.name, gemm, tokens);
        for (int c : counts) std::fprintf(routing, ",%d", c);
        std::fprintf(routing, "\n");
        void *d_a, *d_c, *d_a_scales = nullptr;
        int* d_off;
        int* d_gather = nullptr;
        // BENCH_GATHER=1: fuse=gather, as a fused GEMM1 reads its tokens: A is [tokens, K] in token
        // order (FP8: scales [K/128][tokens]) and routed row r reads token gather_rows[r] (random).
        // BENCH_MASKED: A and C are E slabs of C rows; the bytes counted below stay the valid rows'.
        const long long slab_rows = masked_capacity ? (long long)m.experts * masked_capacity : rows;
        const int a_rows = gather ? tokens : rows;
        const std::size_t a_bytes = (std::size_t)a_rows * k * (fp8 ? 1 : 2), a_scale_bytes = fp8 ? k_blocks * a_rows * 4 : 0;
        const std::size_t a_alloc = (std::size_t)(gather ? tokens : slab_rows) * k * (fp8 ? 1 : 2),
                          a_scale_alloc = fp8 ? k_blocks * (gather ? tokens : slab_rows) * 4 : 0;
        check(cudaMalloc(&d_a, std::max<std::size_t>(a_alloc, 16)), "cudaMalloc A");
        check(cudaMalloc(&d_c, std::max<std::size_t>((std::size_t)slab_rows * n * 2, 16)), "cudaMalloc C");
        check(cudaMalloc(&d_off, offsets.size() * 4), "cudaMalloc offsets");
        if (fp8) {
          fill_pattern(d_a, a_alloc, codes_pattern);
          check(cudaMalloc(&d_a_scales, std::max<std::size_t>(a_scale_alloc, 16)), "cudaMalloc A scales");
          fill_pattern(d_a_scales, a_scale_alloc, scales_pattern);
        } else if (w4) {
          fill_random(d_a, a_alloc, fill_rng);
        } else {
          fill_random(d_a, a_alloc, rng);
        }
        check(cudaMemcpy(d_off, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice), "offsets");
        int* d_counts = nullptr;
        if (masked_capacity) {
          check(cudaMalloc(&d_counts, counts.size() * 4), "cudaMalloc counts");
          check(cudaMemcpy(d_counts, counts.data(), counts.size() * 4, cudaMemcpyHostToDevice), "counts");
        }
        moejit::GroupedGemmArgs args;
        args.a = d_a;
        args.b = d_b;
        args.c = d_c;
        args.num_groups = m.experts;
        args.n = n;
        args.k = k;
        args.group_offsets = d_off;
        args.total_rows = rows;
        args.host_groups = offsets;
        if (masked_capacity) {
          args.layout = moejit::GroupLayout::masked;
          args.group_offsets = nullptr;
          args.total_rows = 0;
          args.group_counts = d_counts;
          args.capacity = masked_capacity;
          args.host_groups = counts;
        }
        args.fusion = bench_fusion;
        if (gather) {
          std::vector<int> tokens_of_rows(std::max(rows, 1));
          std::mt19937 token_rng(tokens);  // its own generator: the cases' routing stays that of a run without
          std::uniform_int_distribution<int> token(0, tokens - 1);
          for (int& t : tokens_of_rows) t = token(token_rng);
          check(cudaMalloc(&d_gather, tokens_of_rows.size() * 4), "cudaMalloc gather rows");
          check(cudaMemcpy(d_gather, tokens_of_rows.data(), tokens_of_rows.size() * 4, cudaMemcpyHostToDevice), "gather rows");
          args.fusion.gather_a = true;
          args.gather_rows = d_gather;
          args.num_tokens = tokens;
        }
        // BENCH_FUSE with scatter / weight / bias (a layer's GEMM2): routed row r goes to C row
        // perm[r] (a random permutation: C is [rows, N]), weights in [0.5, 1), a bias per expert.
        std::vector<void*> d_fusion;
        if (args.fusion.scatter_c || args.fusion.routing_weight || args.fusion.bias) {
          std::mt19937 fusion_rng(tokens + 1);  // its own generator: the cases' routing stays that of a run without
          auto upload = [&](const void* host, std::size_t bytes) {
            void* d = nullptr;
            check(cudaMalloc(&d, std::max<std::size_t>(bytes, 16)), "cudaMalloc fusion operand");
            check(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), "fusion operand");
            d_fusion.push_back(d);
            return d;
          };
          std::uniform_real_distribution<float> unit(0.5f, 1.f);
          if (args.fusion.scatter_c) {
            std::vector<int> perm(std::max(rows, 1));
            for (int r = 0; r < (int)perm.size(); ++r) perm[r] = r;
            std::shuffle(perm.begin(), perm.end(), fusion_rng);
            args.scatter_rows = static_cast<const int*>(upload(perm.data(), perm.size() * 4));
            args.num_out_rows = rows;
          }
          if (args.fusion.routing_weight) {
            std::vector<float> w(std::max(rows, 1));
            for (float& v : w) v = unit(fusion_rng);
            args.routing_weights = static_cast<const float*>(upload(w.data(), w.size() * 4));
          }
          if (args.fusion.bias) {
            std::vector<float> b((std::size_t)m.experts * n);
            for (float& v : b) v = unit(fusion_rng) - 0.75f;
            args.bias = static_cast<const float*>(upload(b.data(), b.size() * 4));
          }
        }
        if (fp8) {
          args.ab_type = moejit::DType::e4m3;
          args.a_scales = static_cast<const float*>(d_a_scales);
          args.b_scales = d_b_scales;
        }
        if (w4) {
          args.b_type = w4_type;
          if (w4_type == moejit::DType::nvfp4) args.b_tensor_scales = static_cast<const float*>(d_b_scales);
        }
        // GEMMS=down (or up): time only those; the case's routing and operands are still drawn, so
        // that the other cases keep the routing of a full run (Nsight Compute: --launch-skip 0).
        if (only_gemms && !std::strstr(only_gemms, gemm)) {
          cudaFree(d_a);
          cudaFree(d_c);
          cudaFree(d_off);
          cudaFree(d_counts);
          cudaFree(d_a_scales);
          cudaFree(d_gather);
          for (void* q : d_fusion) cudaFree(q);
          continue;
        }
        if (tune_mode) {
          moejit::TuneResult r = rt.tune(args, nullptr, tune_options);
          moejit::Kernel heuristic = rt.kernel(r.heuristic), best = rt.kernel(r.best);
          // Timed again, so that the verdict does not rest on the minimum of the tuner's noisy
          // samples: in turns launch by launch (the peers' protocol), since 30 ms of one config after
          // 30 ms of the other read DeepSeek-V3 up 4096 at 1.054 where the tuner's own samples were
          // 0.6% apart (the 700 W cap; docs/perf.md v31). BENCH_PROTOCOL=sync: three rounds of each.
          double h = 0, b = 0;
          if (l2_flush) {
            const std::vector<double> m = r.best == r.heuristic
                                              ? time_interleaved({heuristic}, {args}, start, stop, warmup_ms, l2_flush)
                                              : time_interleaved({heuristic, best}, {args, args}, start, stop, warmup_ms, l2_flush);
            h = m[0];
            b = m.back();
          } else {
            std::vector<double> h_ms, b_ms;
            for (int round = 0; round < 3; ++round) {
              h_ms.push_back(time_kernel(heuristic, args, start, stop, 30));
              b_ms.push_back(r.best == r.heuristic ? h_ms.back() : time_kernel(best, args, start, stop, 30));
            }
            std::sort(h_ms.begin(), h_ms.end());
            std::sort(b_ms.begin(), b_ms.end());
            h = h_ms[1];
            b = b_ms[1];
          }
          const double best_in_turns = b;  // the tuner's pick timed again: slower than the heuristic where it misjudged
          b = std::min(b, h);  // the table's verdict: what keeping the faster of the two would give
          std::string candidates;
          for (auto& c : r.candidates)
            candidates += fmt::format("{}{}={}", candidates.empty() ? "" : "; ", short_spec(c.spec),
                                      c.error.empty() ? fmt::format("{:.4f}", c.ms) : "failed");
          fmt::print("{},{},{},{},{},{},{},{},{},{:.4f},{:.4f},{:.3f},{},{},{},\"{}\",{:.3f}\n", m.name, gemm, tokens, m.experts, m.topk, n,
                     k, rows, active, h, b, h / b, h / b <= 1.05 ? "yes" : "no", short_spec(r.heuristic), short_spec(r.best),
                     candidates, best_in_turns / h);
          std::fflush(stdout);
          tune_rows.push_back({fmt::format("{} {} {}", m.name, gemm, tokens), h, b, short_spec(r.heuristic), short_spec(r.best)});
          cudaFree(d_a);
          cudaFree(d_c);
          cudaFree(d_off);
          cudaFree(d_counts);
          cudaFree(d_a_scales);
          cudaFree(d_gather);
          for (void* q : d_fusion) cudaFree(q);
          continue;
        }
        std::vector<moejit::KernelSpec> specs = {rt.choose_spec(args)};
        std::vector<std::string> labels = {""};
        if (masked_capacity) {
          // The choices from the exact counts, from the hint and from the upper bound; each launched
          // as under graph capture (the device's counts only: trust_device_groups, no host groups).
          moejit::GroupedGemmArgs device_only = args;
          device_only.host_groups = {};
          device_only.trust_device_groups = true;
          device_only.expected_rows = (long long)tokens * m.topk;
          specs.push_back(rt.choose_spec(device_only));
          device_only.expected_rows = 0;
          specs.push_back(rt.choose_spec(device_only));
          labels = {"exact:", "hint:", "bound:"};
          args = device_only;
        }
        if (const char* extra = std::getenv("BENCH_SPECS")) {
          std::stringstream list(extra);
          for (std::string item; std::getline(list, item, ';');) {
            // An override the chosen spec cannot take (e.g. cluster=2x1 on a decode case's
            // 64-row tile) is skipped with a note on stderr instead of ending the run.
            moejit::KernelSpec s = moejit::examples::override_fields(specs[0], item);
            try {
              s.validate();
            } catch (const std::exception& e) {
              fmt::print(stderr, "# {} {} {}: BENCH_SPECS '{}' skipped: {}\n", m.name, gemm, tokens, item, e.what());
              continue;
            }
            specs.push_back(s);
          }
          // BENCH_SPECS_ONLY=1: the overrides alone (Nsight Compute's --launch-skip then counts
          // one config's launches).
          if (const char* only = std::getenv("BENCH_SPECS_ONLY"); only && std::string(only) != "0" && specs.size() > 1)
            specs.erase(specs.begin());
        }
        // BENCH_UNFUSED=1 with BENCH_FUSE: the plain GEMM's own choice as one more config (a
        // layer's GEMM2 against the unfused kernel of its shape, in turns with BENCH_INTERLEAVE).
        if (unfused_too && args.fusion.any()) {
          moejit::GroupedGemmArgs plain = args_for(moejit::KernelSpec{}, args);
          specs.push_back(rt.choose_spec(plain));
        }
        std::vector<double> interleaved;
        if ((interleave || masked_capacity) && specs.size() > 1) {
          std::vector<moejit::Kernel> kernels;
          std::vector<moejit::GroupedGemmArgs> spec_args;
          for (const moejit::KernelSpec& spec : specs) kernels.push_back(rt.kernel(spec)), spec_args.push_back(args_for(spec, args));
          interleaved = time_interleaved(kernels, spec_args, start, stop, warmup_ms, l2_flush);
        }
        for (std::size_t which = 0; which < specs.size(); ++which) {
        const moejit::KernelSpec& spec = specs[which];
        // 3 warm-up launches and 25 ms of them (BENCH_WARMUP_MS; 0 for Nsight Compute, whose
        // --launch-skip then counts 3 + 1 + repetitions per case), then repetitions sized to ~200 ms (5..100).
        double med = !interleaved.empty() ? interleaved[which]
                                          : time_kernel(rt.kernel(spec), args_for(spec, args), start, stop, peer_protocol ? 100.f : 200.f, 3,
                                                        5, 100, warmup_ms, l2_flush);
        double flops = 2.0 * rows * n * k;
        double bytes = 2.0 * ((double)active * n * k + (double)rows * k + (double)rows * n);
        // The format's bytes: active experts' weights with their scales, A (+ scales), C. 4-bit:
        // the format's own (N K / 2 of codes + one scale byte per 32 or 16 K of each row, NVFP4's
        // fp32 tensor scale), not the packed layout's, which pads N to 128 rows and adds MXFP4's
        // row exponents (and, until v13, repeated every scale four times): the floor is the format.
        if (fp8 || w4) {
          const int scale_block = nvfp4 ? moejit::kNvfp4Block : moejit::kMxfp4Block;
          const double weight_bytes = w4 ? (double)n * k / 2 + (double)n * ((k + scale_block - 1) / scale_block)
                                         : (double)b_bytes / m.experts;
          bytes = weight_bytes * active + (double)b_scale_bytes / m.experts * active + (double)a_bytes + (double)a_scale_bytes +
                  2.0 * rows * n;
        }
        fmt::print("{},{},{},{},{},{},{},{},{},{:.4f},{:.1f},{:.1f},{}{}\n", m.name, gemm, tokens, m.experts, m.topk, n, k, rows,
                   active, med, flops / med / 1e9, bytes / med / 1e6, which < labels.size() ? labels[which] : "", spec.to_text());
        std::fflush(stdout);
        }
        cudaFree(d_a);
        cudaFree(d_c);
        cudaFree(d_off);
        cudaFree(d_counts);
        cudaFree(d_a_scales);
        cudaFree(d_gather);
        for (void* q : d_fusion) cudaFree(q);
      }
      cudaFree(d_b);
      cudaFree(d_b_scales);
    }
  }
  std::fclose(routing);
  if (tune_mode) {
    int within = 0;
    std::string table = "| case | heuristic | ms | tuned best | ms | heuristic / best |\n|---|---|---|---|---|---|\n";
    for (auto& r : tune_rows) {
      within += r.heuristic_ms <= 1.05 * r.best_ms;
      table += fmt::format("| {} | {} | {:.4f} | {} | {:.4f} | {:.3f}{} |\n", r.name, r.heuristic, r.heuristic_ms,
                           r.best == r.heuristic ? "(same)" : r.best, r.best_ms, r.heuristic_ms / r.best_ms,
                           r.heuristic_ms <= 1.05 * r.best_ms ? "" : " **>5%**");
    }
    table += fmt::format("\n{} of {} cases within 5% of the tuned best ({}: {:.0f}%)\n", within, tune_rows.size(),
                         rt.device_name(), 100.0 * within / std::max<std::size_t>(tune_rows.size(), 1));
    const char* path = std::getenv("TUNE_TABLE") ? std::getenv("TUNE_TABLE") : "tune_table.md";
    if (FILE* f = std::fopen(path, "w")) std::fputs(table.c_str(), f), std::fclose(f);
    fmt::print(stderr, "{}", table);
  }
  if (l2_flush) cudaFree(l2_flush);
  if (pad) cudaFree(pad);
  return 0;
}
