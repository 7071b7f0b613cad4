// One MoE layer's two grouped GEMMs (up/gate and down) for a public model shape, with random
// top-k routing: run on the GPU, check against a CPU reference on sampled rows, print time and
// TFLOP/s. Without a GPU it says so and prewarms the kernels it would use.
//
//   moe_grouped_gemm [--model mixtral-8x7b|gpt-oss-120b|deepseek-v3|qwen3-30b-a3b] [--tokens N]
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "moe_models.hpp"
#include "moejit/moejit.hpp"

namespace {

using moejit::examples::MoeModel;

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

struct Gemm {
  const char* name;
  int n, k;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "mixtral-8x7b";
  int tokens = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model")) model_name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--tokens")) tokens = std::atoi(argv[i + 1]);
  }
  const MoeModel* model = moejit::examples::find_model(model_name);
  if (!model || tokens < 1) {
    fmt::print(stderr, "usage: {} [--model mixtral-8x7b|gpt-oss-120b|deepseek-v3|qwen3-30b-a3b] [--tokens N]\n", argv[0]);
    return 2;
  }
  const MoeModel& m = *model;
  std::mt19937 rng(2026);
  std::vector<int> counts = moejit::examples::route_top_k(tokens, m, rng);
  std::vector<int> offsets(m.experts + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
  int rows = offsets.back();
  int active = (int)std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; });
  fmt::print("{}: {} tokens, top-{} of {} experts -> {} rows, {} experts active, largest group {}\n", model_name, tokens,
             m.topk, m.experts, rows, active, *std::max_element(counts.begin(), counts.end()));
  const Gemm gemms[] = {{"up", m.up_n, m.hidden}, {"down", m.hidden, m.intermediate}};

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fmt::print("no GPU here: prewarming the kernels this layer would use (sm_90a) instead\n");
    auto rt = moejit::Runtime::offline(moejit::Arch{9, 0, true});
    for (auto& g : gemms) {
      moejit::GroupedGemmArgs args;
      args.num_groups = m.experts;
      args.n = g.n;
      args.k = g.k;
      args.total_rows = rows;
      args.host_groups = offsets;
      moejit::CacheOutcome outcome;
      auto spec = rt->choose_spec(args);
      auto k = rt->compile(spec, &outcome);
      fmt::print("  {:<4} {}  ({})\n", g.name, spec.to_text(),
                 outcome == moejit::CacheOutcome::compiled ? fmt::format("compiled in {:.0f} ms", k->compile_ms)
                                                           : std::string("cache hit"));
    }
    fmt::print("prewarmed {} kernels for sm_90a\n", std::size(gemms));
    return 0;
  }

  moejit::Runtime rt;
  fmt::print("device: {} ({}, {} SMs)\n", rt.device_name(), rt.arch().to_text(), rt.sm_count());
  int* d_offsets = nullptr;
  check_cuda(cudaMalloc(&d_offsets, offsets.size() * sizeof(int)), "cudaMalloc offsets");
  check_cuda(cudaMemcpy(d_offsets, offsets.data(), offsets.size() * sizeof(int), cudaMemcpyHostToDevice), "copy offsets");
  bool all_ok = true;
  for (auto& g : gemms) {
    std::normal_distribution<float> normal;
    std::vector<std::uint16_t> a((std::size_t)rows * g.k), b((std::size_t)m.experts * g.n * g.k), c((std::size_t)rows * g.n);
    for (auto& v : a) v = moejit::float_to_bf16(normal(rng));
    for (auto& v : b) v = moejit::float_to_bf16(normal(rng) * 0.05f);
    void *d_a, *d_b, *d_c;
    check_cuda(cudaMalloc(&d_a, a.size() * 2 + 16), "cudaMalloc A");
    check_cuda(cudaMalloc(&d_b, b.size() * 2), "cudaMalloc B");
    check_cuda(cudaMalloc(&d_c, c.size() * 2 + 16), "cudaMalloc C");
    check_cuda(cudaMemcpy(d_a, a.data(), a.size() * 2, cudaMemcpyHostToDevice), "copy A");
    check_cuda(cudaMemcpy(d_b, b.data(), b.size() * 2, cudaMemcpyHostToDevice), "copy B");
    check_cuda(cudaMemset(d_c, 0xFF, c.size() * 2), "poison C");

    moejit::GroupedGemmArgs args;
    args.a = d_a;
    args.b = d_b;
    args.c = d_c;
    args.num_groups = m.experts;
    args.n = g.n;
    args.k = g.k;
    args.group_offsets = d_offsets;
    args.total_rows = rows;
    args.host_groups = offsets;
    rt.grouped_gemm(args, nullptr);
    check_cuda(cudaDeviceSynchronize(), "grouped_gemm");
    check_cuda(cudaMemcpy(c.data(), d_c, c.size() * 2, cudaMemcpyDeviceToHost), "copy C");

    // Reference on 64 sampled rows (every column), in double.
    double err2 = 0, ref2 = 0;
    long nans = 0;
    std::uniform_int_distribution<int> pick(0, rows - 1);
    for (int s = 0; s < 64 && rows > 0; ++s) {
      int r = pick(rng);
      int e = int(std::upper_bound(offsets.begin(), offsets.end(), r) - offsets.begin()) - 1;
      for (int j = 0; j < g.n; ++j) {
        double ref = 0;
        for (int q = 0; q < g.k; ++q)
          ref += (double)moejit::bf16_to_float(a[(std::size_t)r * g.k + q]) *
                 moejit::bf16_to_float(b[((std::size_t)e * g.n + j) * g.k + q]);
        double got = moejit::bf16_to_float(c[(std::size_t)r * g.n + j]);
        if (std::isnan(got)) ++nans;
        else err2 += (got - ref) * (got - ref), ref2 += ref * ref;
      }
    }
    double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
    bool ok = nans == 0 && rel < 1e-2;
    all_ok &= ok;

    // Time: warm up, then the median of 20 launches between CUDA events.
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    for (int i = 0; i < 5; ++i) rt.grouped_gemm(args, nullptr);
    std::vector<float> ms(20);
    for (auto& t : ms) {
      cudaEventRecord(start);
      rt.grouped_gemm(args, nullptr);
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      cudaEventElapsedTime(&t, start, stop);
    }
    std::sort(ms.begin(), ms.end());
    double median = ms[ms.size() / 2];
    double flops = 2.0 * rows * g.n * g.k;
    double bytes = 2.0 * ((double)active * g.n * g.k + (double)rows * g.k + (double)rows * g.n);
    fmt::print("  {:<4} N={:<6} K={:<6} {:8.3f} ms  {:7.1f} TFLOP/s  {:7.1f} GB/s  rel_err {:.2e}  nan {}  {}\n    spec {}\n",
               g.name, g.n, g.k, median, flops / median / 1e9, bytes / median / 1e6, rel, nans, ok ? "OK" : "MISMATCH",
               rt.choose_spec(args).to_text());
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFree(d_a);
    cudaFree(d_b);
    cudaFree(d_c);
  }
  cudaFree(d_offsets);
  fmt::print("{}\n", all_ok ? "result matches the CPU reference" : "RESULT DOES NOT MATCH THE REFERENCE");
  return all_ok ? 0 : 1;
}
