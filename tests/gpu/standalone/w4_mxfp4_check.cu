// Standalone check of the MXFP4 weight-only Hopper prototype (kernel_templates/moejit/hopper_w4/):
// correctness against an FP64 CPU reference on the same quantized weights (output poisoned with
// NaN first), then timing on gpt-oss-120b and Mixtral shapes. Not yet part of the JIT pipeline:
// built with nvcc by build_standalone.sh, run on the GPU machine.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "harness.cuh"
#include "moejit/hopper_w4/grouped_gemm_sm90_w4.cuh"
#include "moejit/hopper_w4/grouped_gemm_sm90_w4_rs.cuh"

#ifndef BN
#define BN 256
#endif
#ifndef STAGES
#define STAGES 8
#endif


// RS=1: the register-sourced (roles swapped) kernel with TOKENS tokens per tile.
#ifndef RS
#define RS 0
#endif
#ifndef TOKENS
#define TOKENS 64
#endif
#ifndef RS_STAGES
#define RS_STAGES 10
#endif
extern "C" __global__ void __launch_bounds__(384, 1)
    w4rs_kernel(const __grid_constant__ moejit::GroupedGemmParams p, const __grid_constant__ moejit::TmaDescriptor ta) {
  moejit::hopper::grouped_gemm_w4_rs<TOKENS, RS_STAGES, moejit::kBF16, moejit::kLayoutContiguous>(p, ta);
}

// Pre-arranges interchange-layout MXFP4 weights into the RS kernel's fragment-order blocks.
static std::vector<unsigned char> arrange_rs(const std::vector<unsigned char>& b, const std::vector<unsigned char>& sc,
                                             int E, int N, int K) {
  const int nb = (N + 127) / 128, kbs = (K + 63) / 64, k32 = K / 32;
  std::vector<unsigned char> out((size_t)E * nb * kbs * moejit::hopper::kW4BlockBytes, 0);
  for (int g = 0; g < E; ++g)
    for (int n0 = 0; n0 < nb; ++n0)
      for (int kb = 0; kb < kbs; ++kb) {
        unsigned char* blk = &out[(((size_t)g * nb + n0) * kbs + kb) * moejit::hopper::kW4BlockBytes];
        for (int w = 0; w < 2; ++w)
          for (int t = 0; t < 128; ++t) {
            const int warp = t / 32, lane = t % 32, c = lane % 4;
            const int r0 = n0 * 128 + w * 64 + warp * 16 + lane / 4, rows[2] = {r0, r0 + 8};
            for (int kk = 0; kk < 4; ++kk)
              for (int i = 0; i < 4; ++i) {
                const int r = rows[i & 1], k = kb * 64 + kk * 16 + 2 * c + (i >= 2 ? 8 : 0);
                blk[(w * 128 + t) * 16 + kk * 4 + i] = (r < N && k < K) ? b[((size_t)g * N + r) * (K / 2) + k / 2] : 0;
              }
            for (int i = 0; i < 4; ++i) {
              const int r = rows[i & 1], blk32 = 2 * kb + (i >= 2 ? 1 : 0);
              blk[4096 + (w * 128 + t) * 4 + i] = (r < N && blk32 < k32) ? sc[((size_t)g * N + r) * k32 + blk32] : 127;
            }
          }
      }
  return out;
}

extern "C" __global__ void __launch_bounds__(384, 1)
    w4_kernel(const __grid_constant__ moejit::GroupedGemmParams p, const __grid_constant__ moejit::W4Scales s,
              const __grid_constant__ moejit::TmaDescriptor ta, const __grid_constant__ moejit::TmaDescriptor tb) {
  moejit::hopper::grouped_gemm_w4<BN, STAGES, moejit::kBF16, moejit::kLayoutContiguous>(p, s, ta, tb);
}

static const float kE2M1[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
static double e2m1(unsigned v) { return (v & 8 ? -1.0 : 1.0) * kE2M1[v & 7]; }

struct Problem {
  int E, N, K;
  std::vector<int> rows;
};

static int run(const Problem& pr, int sample_rows, const char* name) {
  const int E = pr.E, N = pr.N, K = pr.K;
  std::vector<int> offs(E + 1, 0);
  for (int g = 0; g < E; ++g) offs[g + 1] = offs[g] + pr.rows[g];
  const int M = offs[E];
  const int kb32 = K / 32;
  std::mt19937 rng(99 + M + N);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<unsigned short> a((size_t)M * K);
  for (auto& x : a) x = float_to_bf16(nd(rng));
  std::vector<unsigned char> b((size_t)E * N * K / 2), sc((size_t)E * N * kb32);
  unsigned long long st = 0x243F6A8885A308D3ull ^ (unsigned long long)(M * 31 + N);
  for (size_t i = 0; i < b.size(); ++i) {
    if ((i & 7) == 0) st ^= st << 13, st ^= st >> 7, st ^= st << 17;
    b[i] = (unsigned char)(st >> (8 * (i & 7)));
  }
  for (size_t i = 0; i < sc.size(); ++i) {
    if ((i & 7) == 0) st ^= st << 13, st ^= st >> 7, st ^= st << 17;
    sc[i] = (unsigned char)(120 + ((st >> (8 * (i & 7))) % 8));  // 2^-7 .. 2^0
  }
  unsigned short *da, *dc;
  unsigned char *db, *dsc;
  int* doffs;
  CK(cudaMalloc(&da, std::max<size_t>(a.size(), 8) * 2));
  CK(cudaMalloc(&db, b.size()));
  CK(cudaMalloc(&dsc, sc.size()));
  CK(cudaMalloc(&dc, std::max<size_t>((size_t)M * N, 1) * 2));
  CK(cudaMalloc(&doffs, (E + 1) * 4));
  CK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dsc, sc.data(), sc.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(doffs, offs.data(), (E + 1) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(dc, 0xFF, (size_t)M * N * 2));

  moejit::GroupedGemmParams p{};
  p.a = da, p.b = db, p.c = dc, p.group_offsets = doffs, p.num_groups = E, p.n = N, p.k = K, p.total_rows = M;
  moejit::W4Scales s{dsc, kb32, 0};
  auto ta = make_map(da, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, K, std::max(M, 1), 64, 64, CU_TENSOR_MAP_SWIZZLE_128B);
  auto tb = make_map(db, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, K / 2, (unsigned long long)E * N, 32, BN,
                     CU_TENSOR_MAP_SWIZZLE_NONE);
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
#if RS
  {
    auto arranged = arrange_rs(b, sc, E, N, K);
    CK(cudaFree(db));
    CK(cudaMalloc(&db, arranged.size()));
    CK(cudaMemcpy(db, arranged.data(), arranged.size(), cudaMemcpyHostToDevice));
    p.b = db;
  }
  auto tx = make_map(da, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, K, std::max(M, 1), 64, TOKENS, CU_TENSOR_MAP_SWIZZLE_128B);
  const int smem = moejit::hopper::w4rs_smem_bytes<TOKENS, RS_STAGES>();
  CK(cudaFuncSetAttribute(w4rs_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  auto launch = [&] { w4rs_kernel<<<sms, 384, smem>>>(p, tx); };
#else
  const int smem = moejit::hopper::w4_smem_bytes<BN, STAGES>();
  CK(cudaFuncSetAttribute(w4_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  auto launch = [&] { w4_kernel<<<sms, 384, smem>>>(p, s, ta, tb); };
#endif
  launch();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  std::vector<unsigned short> c((size_t)M * N);
  CK(cudaMemcpy(c.data(), dc, c.size() * 2, cudaMemcpyDeviceToHost));
  const std::vector<int> rows = rows_to_check(M, sample_rows, rng);
  double num = 0, den = 0;
  long nans = 0;
  for (int r : rows) {
    const int g = int(std::upper_bound(offs.begin(), offs.end(), r) - offs.begin()) - 1;
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      const unsigned char* brow = &b[((size_t)g * N + n) * K / 2];
      const unsigned char* srow = &sc[((size_t)g * N + n) * kb32];
      for (int k0 = 0; k0 < K; k0 += 32) {
        double part = 0;
        for (int k = k0; k < k0 + 32; ++k) {
          const unsigned v = (brow[k / 2] >> (4 * (k & 1))) & 0xF;
          part += double(bf16_to_float(a[(size_t)r * K + k])) * e2m1(v);
        }
        acc += part * std::ldexp(1.0, int(srow[k0 / 32]) - 127);
      }
      const float out = bf16_to_float(c[(size_t)r * N + n]);
      if (std::isnan(out)) ++nans;
      num += (out - acc) * (out - acc);
      den += acc * acc;
    }
  }
  const double rel = std::sqrt(num / std::max(den, 1e-300));
  const bool ok = nans == 0 && rel < 1e-2;
  printf("%s: M=%d N=%d K=%d E=%d rows checked %zu: rel_err %.3e nan %ld %s\n", name, M, N, K, E,
         rows.size(), rel, nans, ok ? "OK" : "FAIL");

  const double ms = median_launch_ms(launch);
  int active = 0;
  for (int g = 0; g < E; ++g) active += pr.rows[g] > 0;
  const double flops = 2.0 * M * N * K;
  // Floor bytes: active experts' 4-bit weights + their E8M0 scales, A and C in BF16.
  const double bytes = (double)active * N * K / 2 + (double)active * N * kb32 + (double)M * K * 2 + (double)M * N * 2;
  printf("%s: %.4f ms  %.1f TFLOP/s  %.1f GB/s\n", name, ms, flops / ms / 1e9, bytes / ms / 1e6);
  cudaFree(da), cudaFree(db), cudaFree(dsc), cudaFree(dc), cudaFree(doffs);
  return ok ? 0 : 1;
}

int main() {
  cuInit(0);
  int fails = 0;
  fails += run(Problem{6, 512, 1024, {0, 1, 100, 65, 0, 200}}, 0, "mixed");
  fails += run(Problem{3, 300, 2880, {70, 0, 130}}, 0, "ragged N, K=2880");
  struct Model {
    const char* name;
    int E, topk, up_n, hidden, down_k;
  } models[] = {{"gpt-oss-120b", 128, 4, 5760, 2880, 2880}, {"mixtral-8x7b", 8, 2, 28672, 4096, 14336}};
  for (auto& m : models) {
    // W4_TOKENS="16,128" limits the token counts (default 16, 128, 16384).
    std::vector<int> token_counts = {16, 128, 16384};
    if (const char* list = getenv("W4_TOKENS")) {
      token_counts.clear();
      for (const char* q = list; *q; q += (*q == ',')) token_counts.push_back((int)strtol(q, (char**)&q, 10));
    }
    for (int tokens : token_counts) {
      auto rows = route(tokens, m.E, m.topk, tokens);
      char name[96];
      snprintf(name, sizeof name, "%s up %d", m.name, tokens);
      fails += run(Problem{m.E, m.up_n, m.hidden, rows}, 8, name);
      snprintf(name, sizeof name, "%s down %d", m.name, tokens);
      fails += run(Problem{m.E, m.hidden, m.down_k, rows}, 8, name);
    }
  }
  printf("%s\n", fails ? "FAILED" : "ALL OK");
  return fails != 0;
}
