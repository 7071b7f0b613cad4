// What the standalone prototype checks share: error checks, BF16 bits, 2-D tensor maps, the
// rows a check compares, the median launch time and random top-k routing.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "moejit/params.cuh"

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e = (x);                                                       \
    if (e != cudaSuccess) {                                                    \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static float bf16_to_float(unsigned short b) {
  unsigned u = unsigned(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static unsigned short float_to_bf16(float f) {  // round to nearest even (finite inputs)
  unsigned u;
  memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return (unsigned short)(u >> 16);
}

// A row-major [outer][inner] tensor with boxes of box_outer x box_inner elements.
static moejit::TmaDescriptor make_map(void* base, CUtensorMapDataType type, unsigned elem_bytes,
                                      unsigned long long inner, unsigned long long outer, unsigned box_inner,
                                      unsigned box_outer, CUtensorMapSwizzle swizzle) {
  CUtensorMap map;
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {inner * elem_bytes};
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t estr[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(&map, type, 2, base, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                      swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    printf("cuTensorMapEncodeTiled failed %d\n", r);
    exit(1);
  }
  moejit::TmaDescriptor d;
  memcpy(&d, &map, sizeof d);
  return d;
}

// Every row when sample_rows <= 0 or covers M, else sample_rows random rows plus the last one.
static std::vector<int> rows_to_check(int M, int sample_rows, std::mt19937& rng) {
  std::vector<int> rows;
  if (sample_rows <= 0 || sample_rows >= M) {
    for (int r = 0; r < M; ++r) rows.push_back(r);
  } else {
    std::uniform_int_distribution<int> rd(0, M - 1);
    for (int i = 0; i < sample_rows; ++i) rows.push_back(rd(rng));
    rows.push_back(M - 1);
  }
  return rows;
}

// Median of 20 launches (CUDA events) after 5 warm-up launches.
template <typename Launch>
static double median_launch_ms(Launch&& launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 5; ++i) launch();
  std::vector<float> ts;
  for (int i = 0; i < 20; ++i) {
    CK(cudaEventRecord(e0));
    launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// Rows per expert of `tokens` tokens each routed to `topk` distinct random experts.
static std::vector<int> route(int tokens, int E, int topk, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int> rows(E, 0), perm(E);
  for (int t = 0; t < tokens; ++t) {
    for (int e = 0; e < E; ++e) perm[e] = e;
    for (int j = 0; j < topk; ++j) {
      std::uniform_int_distribution<int> d(j, E - 1);
      std::swap(perm[j], perm[d(rng)]);
      ++rows[perm[j]];
    }
  }
  return rows;
}
