// Standalone check of the FP8 block-scaled Hopper prototype (kernel_templates/moejit/hopper_fp8/):
// correctness against a CPU reference on the same quantized operands (output poisoned with NaN
// first), then timing on DeepSeek-V3 shapes. Not yet part of the JIT pipeline: built with nvcc by
// build_standalone.sh, run on the GPU machine.
#include <cuda.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "harness.cuh"
#include "moejit/hopper_fp8/grouped_gemm_sm90_fp8.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef STAGES
#define STAGES 6
#endif

extern "C" __global__ void __launch_bounds__(384, 1)
    fp8_kernel(const __grid_constant__ moejit::GroupedGemmParams p, const __grid_constant__ moejit::TmaDescriptor ta,
               const __grid_constant__ moejit::TmaDescriptor tb) {
  moejit::hopper::grouped_gemm_fp8<BM, BN, STAGES, moejit::kBF16, moejit::kLayoutContiguous>(p, ta, tb);
}

struct Problem {
  int E, N, K;
  std::vector<int> rows;  // per group
};

// Returns relative error (if check) and prints time.
static double run(const Problem& pr, bool check, int sample_rows, const char* name) {
  const int E = pr.E, N = pr.N, K = pr.K;
  std::vector<int> offs(E + 1, 0);
  for (int g = 0; g < E; ++g) offs[g + 1] = offs[g] + pr.rows[g];
  const int M = offs[E];
  const int kb = (K + 127) / 128, nb = (N + 127) / 128;
  std::mt19937 rng(1234 + M + N);
  std::uniform_int_distribution<int> ed(-3, 3);
  std::vector<unsigned char> a((size_t)M * K), b((size_t)E * N * K);
  // Random e4m3 codes, never NaN: random sign and mantissa, exponent field 4..11 (2^-3 .. 2^4).
  unsigned long long state = 0x9E3779B97F4A7C15ull ^ (unsigned long long)(M + 7 * N + 13 * K);
  auto fill = [&](std::vector<unsigned char>& v) {
    for (size_t i = 0; i < v.size(); ++i) {
      if ((i & 7) == 0) state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      unsigned byte = (state >> (8 * (i & 7))) & 0xFF;
      v[i] = (unsigned char)((byte & 0x87) | ((4 + ((byte >> 3) & 7)) << 3));
    }
  };
  fill(a);
  fill(b);
  const int a_stride = std::max(M, 1);
  std::vector<float> sa((size_t)kb * a_stride), sb((size_t)E * nb * kb);
  for (auto& x : sa) x = std::ldexp(1.f, ed(rng)) * 0.01f;
  for (auto& x : sb) x = std::ldexp(1.f, ed(rng)) * 0.01f;

  unsigned char *da, *db;
  float *dsa, *dsb;
  unsigned short* dc;
  int* doffs;
  CK(cudaMalloc(&da, std::max<size_t>(a.size(), 16)));
  CK(cudaMalloc(&db, b.size()));
  CK(cudaMalloc(&dsa, std::max<size_t>(sa.size(), 1) * 4));
  CK(cudaMalloc(&dsb, sb.size() * 4));
  CK(cudaMalloc(&dc, std::max<size_t>((size_t)M * N, 1) * 2));
  CK(cudaMalloc(&doffs, (E + 1) * 4));
  CK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dsa, sa.data(), sa.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dsb, sb.data(), sb.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(doffs, offs.data(), (E + 1) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(dc, 0xFF, (size_t)M * N * 2));  // poison: NaN in bf16

  moejit::GroupedGemmParams p{};
  p.a = da, p.b = db, p.c = dc, p.group_offsets = doffs, p.num_groups = E, p.n = N, p.k = K, p.total_rows = M;
  p.scale_a = dsa, p.scale_b = dsb;  // A scales [kb][total_rows]: a_stride == M
  auto ta = make_map(da, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, K, std::max(M, 1), 128, BM, CU_TENSOR_MAP_SWIZZLE_128B);
  auto tb = make_map(db, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, K, (unsigned long long)E * N, 128, BN, CU_TENSOR_MAP_SWIZZLE_128B);
  const int smem = moejit::hopper::fp8_smem_bytes<BM, BN, STAGES>();
  CK(cudaFuncSetAttribute(fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  auto launch = [&] { fp8_kernel<<<sms, 384, smem>>>(p, ta, tb); };
  launch();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  double rel = 0;
  if (check) {
    std::vector<unsigned short> c((size_t)M * N);
    CK(cudaMemcpy(c.data(), dc, c.size() * 2, cudaMemcpyDeviceToHost));
    float lut[256];
    for (int i = 0; i < 256; ++i) {
      __nv_fp8_e4m3 v;
      v.__x = (unsigned char)i;
      lut[i] = float(v);
    }
    double num = 0, den = 0;
    long nans = 0;
    const std::vector<int> rows = rows_to_check(M, sample_rows, rng);
    for (int r : rows) {
      int g = int(std::upper_bound(offs.begin(), offs.end(), r) - offs.begin()) - 1;
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int k0 = 0; k0 < K; k0 += 128) {
          double part = 0;
          for (int k = k0; k < std::min(K, k0 + 128); ++k)
            part += double(lut[a[(size_t)r * K + k]]) * lut[b[((size_t)g * N + n) * K + k]];
          acc += part * sa[(size_t)(k0 / 128) * a_stride + r] * sb[((size_t)g * nb + n / 128) * kb + k0 / 128];
        }
        float out = bf16_to_float(c[(size_t)r * N + n]);
        if (std::isnan(out)) ++nans;
        num += (out - acc) * (out - acc);
        den += acc * acc;
      }
    }
    rel = std::sqrt(num / std::max(den, 1e-300));
    printf("%s: M=%d N=%d K=%d E=%d rows checked %zu: rel_err %.3e nan %ld %s\n", name, M, N, K, E,
           rows.size(), rel, nans, (nans == 0 && rel < 1e-2) ? "OK" : "FAIL");
    if (nans) rel = 1e9;
  }
  const double ms = median_launch_ms(launch);
  int active = 0;
  for (int g = 0; g < E; ++g) active += pr.rows[g] > 0;
  const double flops = 2.0 * M * N * K;
  const double bytes = (double)active * N * K + (double)M * K + (double)M * N * 2;
  printf("%s: %.4f ms  %.1f TFLOP/s  %.1f GB/s\n", name, ms, flops / ms / 1e9, bytes / ms / 1e6);
  cudaFree(da), cudaFree(db), cudaFree(dsa), cudaFree(dsb), cudaFree(dc), cudaFree(doffs);
  return rel;
}

int main() {
  cuInit(0);
  int fails = 0;
  // Correctness: mixed sizes, empty groups, M=1, ragged N and K (K a multiple of 16 for TMA).
  {
    Problem pr{6, 384, 1024, {0, 1, 200, 129, 0, 300}};
    fails += run(pr, true, 0, "mixed") > 1e-2;
    Problem pr2{3, 200, 400, {77, 0, 130}};
    fails += run(pr2, true, 0, "ragged N/K") > 1e-2;
  }
  // DeepSeek-V3 shapes (sampled rows checked).
  for (int tokens : {128, 4096, 16384}) {
    auto rows = route(tokens, 256, 8, tokens);
    Problem up{256, 4096, 7168, rows};
    char name[64];
    snprintf(name, sizeof name, "dsv3 up %d", tokens);
    fails += run(up, true, 16, name) > 1e-2;
    Problem down{256, 7168, 2048, rows};
    snprintf(name, sizeof name, "dsv3 down %d", tokens);
    fails += run(down, true, 16, name) > 1e-2;
  }
  printf("%s\n", fails ? "FAILED" : "ALL OK");
  return fails != 0;
}
