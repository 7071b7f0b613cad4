// The MoE grouped-GEMM benchmark suite (shared docs: moe-shapes.md): 4 models × up/down ×
// tokens {16, 128, 1024, 4096, 16384}, random top-k routing. Times each case with CUDA events
// (warm-up, then the median of repeated launches) and prints one CSV row per case:
//   model,gemm,tokens,E,topk,N,K,sumM,active,ms,tflops,gbps,spec
// BENCH_SPECS="tile=128x192x64,stages=5;..." additionally times each case with each of these
// overrides of the chosen spec (rows marked by their spec), for tuning; MODELS=a,b limits models.
// It also writes the routing of every case to ROUTING_FILE (argv[1], default routing.csv) so that
// tests/gpu/peers.py times torch._grouped_mm on exactly the same group sizes in the same run.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "moe_models.hpp"
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

// The spec with the fields named in `overrides` ("tile=128x192x64,stages=5") replaced.
moejit::KernelSpec override_fields(const moejit::KernelSpec& base, const std::string& overrides) {
  std::map<std::string, std::string> fields;
  std::vector<std::string> order;
  for (const std::string& text : {base.to_text(), overrides}) {
    std::stringstream items(text);
    for (std::string item; std::getline(items, item, ',');) {
      auto eq = item.find('=');
      if (eq == std::string::npos) continue;
      std::string key = item.substr(0, eq);
      if (!fields.count(key)) order.push_back(key);
      fields[key] = item.substr(eq + 1);
    }
  }
  std::string merged;
  for (auto& key : order) merged += key + "=" + fields[key] + ",";
  return moejit::KernelSpec::parse(merged);
}

}  // namespace

int main(int argc, char** argv) {
  const char* routing_path = argc > 1 ? argv[1] : "routing.csv";
  std::vector<int> token_counts = {16, 128, 1024, 4096, 16384};
  if (const char* env = std::getenv("TOKENS")) {
    token_counts.clear();
    std::stringstream s(env);
    for (std::string t; std::getline(s, t, ',');) token_counts.push_back(std::stoi(t));
  }
  moejit::Runtime rt;
  fmt::print(stderr, "device {} ({}, {} SMs)\n", rt.device_name(), rt.arch().to_text(), rt.sm_count());
  FILE* routing = std::fopen(routing_path, "w");
  fmt::print("model,gemm,tokens,E,topk,N,K,sumM,active,ms,tflops,gbps,spec\n");
  std::mt19937 rng(2026);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const char* only_models = std::getenv("MODELS");
  for (const MoeModel& m : moejit::examples::kMoeModels) {
    if (only_models && !std::strstr(only_models, m.name)) continue;
    // Weights are allocated once per model and GEMM, at the largest shape.
    for (const char* gemm : {"up", "down"}) {
      bool up = gemm[0] == 'u';
      int n = up ? m.up_n : m.hidden, k = up ? m.hidden : m.intermediate;
      void* d_b = nullptr;
      std::size_t b_bytes = (std::size_t)m.experts * n * k * 2;
      check(cudaMalloc(&d_b, b_bytes), "cudaMalloc B");
      fill_random(d_b, b_bytes, rng);
      for (int tokens : token_counts) {
        std::vector<int> counts = moejit::examples::route_top_k(tokens, m, rng);
        std::vector<int> offsets(m.experts + 1, 0);
        std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
        int rows = offsets.back();
        int active = (int)std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; });
        std::fprintf(routing, "%s,%s,%d", m.name, gemm, tokens);
        for (int c : counts) std::fprintf(routing, ",%d", c);
        std::fprintf(routing, "\n");
        void *d_a, *d_c;
        int* d_off;
        check(cudaMalloc(&d_a, (std::size_t)rows * k * 2), "cudaMalloc A");
        check(cudaMalloc(&d_c, (std::size_t)rows * n * 2), "cudaMalloc C");
        check(cudaMalloc(&d_off, offsets.size() * 4), "cudaMalloc offsets");
        fill_random(d_a, (std::size_t)rows * k * 2, rng);
        check(cudaMemcpy(d_off, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice), "offsets");
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
        std::vector<moejit::KernelSpec> specs = {rt.choose_spec(args)};
        if (const char* extra = std::getenv("BENCH_SPECS")) {
          std::stringstream list(extra);
          for (std::string item; std::getline(list, item, ';');) {
            specs.push_back(override_fields(specs[0], item));
          }
        }
        for (const moejit::KernelSpec& spec : specs) {
        moejit::Kernel kernel = rt.kernel(spec);
        // Warm up, then size the repetitions to ~200 ms (5..100).
        for (int i = 0; i < 3; ++i) kernel.launch(args, nullptr);
        check(cudaDeviceSynchronize(), "warm-up");
        cudaEventRecord(start);
        kernel.launch(args, nullptr);
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float once = 0;
        cudaEventElapsedTime(&once, start, stop);
        int reps = std::clamp((int)(200.f / std::max(once, 1e-3f)), 5, 100);
        std::vector<float> ms(reps);
        for (auto& t : ms) {
          cudaEventRecord(start);
          kernel.launch(args, nullptr);
          cudaEventRecord(stop);
          cudaEventSynchronize(stop);
          cudaEventElapsedTime(&t, start, stop);
        }
        check(cudaGetLastError(), "launch");
        std::sort(ms.begin(), ms.end());
        double med = ms[ms.size() / 2];
        double flops = 2.0 * rows * n * k;
        double bytes = 2.0 * ((double)active * n * k + (double)rows * k + (double)rows * n);
        fmt::print("{},{},{},{},{},{},{},{},{},{:.4f},{:.1f},{:.1f},{}\n", m.name, gemm, tokens, m.experts, m.topk, n, k, rows,
                   active, med, flops / med / 1e9, bytes / med / 1e6, spec.to_text());
        std::fflush(stdout);
        }
        cudaFree(d_a);
        cudaFree(d_c);
        cudaFree(d_off);
      }
      cudaFree(d_b);
    }
  }
  std::fclose(routing);
  return 0;
}
