// MoE routing kernels: top-k experts per token with the model's normalization, a deterministic
// counting sort of the (token, slot) pairs by expert into the grouped GEMMs' row space, the
// combine-reduce of the top-k expert outputs of each token, and the FP8 (1x128) quantization of
// activations for the FP8 grouped GEMMs.
//
// Determinism: the order of rows is decided by positions computed from prefix sums, never by the
// order in which atomics land (shared-memory atomics only add counts, which commute). Rows of one
// expert are in (token, slot) order, i.e. sorted by token. Ties between equal scores go to the
// lower expert index, as in the CPU reference (moejit::reference::route).
//
// Launch shapes (host: src/runtime/routing.cpp), kThreads threads per CTA but the scan's:
//   few tokens:  fused   one CTA does top-k, counts, offsets and the row arrays (one launch)
//   many tokens: topk    one CTA per tokens_per_cta tokens, one warp per token, CTA histogram
//                scan    one CTA of kScanThreads: per-CTA bases (prefix over CTAs), group offsets
//                scatter one CTA per tokens_per_cta tokens: ranks within the CTA, row arrays
#pragma once
#include "moejit/common/types.cuh"
#include "moejit/common/e4m3.cuh"
#include "moejit/routing_params.cuh"

namespace moejit::routing {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kScanThreads = 1024;  // the scan CTA: up to 1024 / E threads share an expert's CTAs
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float infinity() { return __int_as_float(0x7f800000); }

template <int kType>
__device__ __forceinline__ float load_element(const void* base, long long index) {
  if (kType == kF32) return static_cast<const float*>(base)[index];
  unsigned short bits = static_cast<const unsigned short*>(base)[index];
  if (kType == kBF16) return __uint_as_float(static_cast<unsigned>(bits) << 16);
  float out;
  asm("cvt.f32.f16 %0, %1;" : "=f"(out) : "h"(bits));
  return out;
}

// 1 / (1 + exp(-x)) from correctly rounded operations only (explicit fmas, one rint, ldexp, one
// division), so that the CPU reference (routing_reference.cpp, same steps with std::fma) gets
// the same bits: DeepSeek-V3's top-k ranks these values, and a one-ulp difference between expf
// implementations would otherwise swap near-tied experts. Taylor to r^7 on |r| <= ln2/2: < 1e-8.
__device__ __forceinline__ float sigmoid_exact(float x) {
  const float t = -x;
  if (!(t >= -80.f)) return t != t ? t : 1.f;  // exp(t) < 2^-115: 1 + it rounds to 1; NaN stays
  if (t > 88.f) return 0.f;
  const float n = rintf(t * 1.44269502f);
  float r = fmaf(-n, 0.693145752f, t);
  r = fmaf(-n, 1.42860677e-06f, r);
  float p = 1.98412701e-04f;
  p = fmaf(p, r, 1.38888892e-03f);
  p = fmaf(p, r, 8.33333377e-03f);
  p = fmaf(p, r, 4.16666679e-02f);
  p = fmaf(p, r, 1.66666672e-01f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  return 1.0f / (1.0f + ldexpf(p, static_cast<int>(n)));
}

// (score, expert) order of the top-k: the higher score, then the lower expert index.
__device__ __forceinline__ bool ranks_before(float v, int e, float best_v, int best_e) {
  return v > best_v || (v == best_v && e < best_e);
}

__device__ __forceinline__ void warp_best(float& v, int& e) {
#pragma unroll
  for (int offset = 16; offset; offset >>= 1) {
    float other_v = __shfl_xor_sync(kFullMask, v, offset);
    int other_e = __shfl_xor_sync(kFullMask, e, offset);
    if (ranks_before(other_v, other_e, v, e)) v = other_v, e = other_e;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// The top two of a warp's values (a >= b), merged pairwise across lanes.
__device__ __forceinline__ void warp_top2(float& a, float& b) {
#pragma unroll
  for (int offset = 16; offset; offset >>= 1) {
    float oa = __shfl_xor_sync(kFullMask, a, offset);
    float ob = __shfl_xor_sync(kFullMask, b, offset);
    float second = fmaxf(fminf(a, oa), fmaxf(b, ob));
    a = fmaxf(a, oa);
    b = second;
  }
}

// One token, one warp. Lane l holds experts l, l + 32, ... (coalesced loads of the logit row).
// Writes topk_ids/topk_weights of the token and, if hist is given, counts its experts there.
template <int kLogits, int kExperts, int kTopK, int kScore, bool kRenormalize, int kGroups, int kTopkGroups>
__device__ __forceinline__ void route_token(const RoutingParams& p, int token, int lane, int* hist) {
  constexpr int kPerLane = (kExperts + 31) / 32;
  static_assert(kPerLane <= 32 && kTopK <= 32 && kTopK <= kExperts, "routing: experts <= 1024, top_k <= 32");
  const float inf = infinity();
  const long long row = static_cast<long long>(token) * kExperts;

  float source[kPerLane];  // what the weight is computed from: the logit, or the sigmoid score
  float choice[kPerLane];  // what the top-k ranks: the logit, or the biased sigmoid score
  unsigned removed = 0;    // bit i: expert lane + 32 i is out of the race (absent, chosen, masked group)
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    const bool present = e < kExperts;
    float x = present ? load_element<kLogits>(p.logits, row + e) : -inf;
    float c = x;
    if (kScore == kScoreSigmoidTopk) {
      x = present ? sigmoid_exact(x) : -inf;
      c = x;
      if (p.correction_bias && present) c += p.correction_bias[e];
    }
    source[i] = x;
    choice[i] = c == c ? c : -inf;  // NaN ranks last (as -inf) so that k experts are always found
    if (!present) removed |= 1u << i;
  }

  if (kScore == kScoreSigmoidTopk && kGroups > 1) {
    // DeepSeek-V3: a group's score is the sum of its two best choices; only the kTopkGroups best
    // groups stay in the race (the others are removed, as vLLM's grouped_topk masks them to -inf).
    constexpr int kGroupSize = kExperts / kGroups;
    float group_score = -inf;  // lane g holds group g's score
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      float a = -inf, b = -inf;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        if (e < kExperts && e / kGroupSize == g) {
          const float v = choice[i];
          if (v > a) b = a, a = v;
          else if (v > b) b = v;
        }
      }
      warp_top2(a, b);
      if (lane == g) group_score = a + b;
    }
    // A group is kept if fewer than kTopkGroups groups rank before it (higher score, then lower index).
    int groups_before = 0;
#pragma unroll
    for (int h = 0; h < kGroups; ++h) {
      const float other = __shfl_sync(kFullMask, group_score, h);
      groups_before += other > group_score || (other == group_score && h < lane);
    }
    const unsigned kept = __ballot_sync(kFullMask, lane < kGroups && groups_before < kTopkGroups);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < kExperts && !((kept >> (e / kGroupSize)) & 1u)) removed |= 1u << i;
    }
  }

  float softmax_max = 0.f, softmax_sum = 1.f;
  if (kScore == kScoreSoftmaxTopk) {
    float m = -inf;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) m = fmaxf(m, source[i]);
    m = warp_max(m);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + 32 * i < kExperts) s += expf(source[i] - m);
    softmax_max = m;
    softmax_sum = warp_sum(s);
  }

  // k rounds of a warp arg-max; lane j keeps the j-th choice (no per-thread arrays: the rounds
  // need not be unrolled, which keeps NVRTC time flat in k).
  int my_id = 0;
  float my_picked = 0.f;
#pragma unroll 1
  for (int j = 0; j < kTopK; ++j) {
    float best_v = -inf;
    int best_e = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if (!((removed >> i) & 1u) && ranks_before(choice[i], e, best_v, best_e)) best_v = choice[i], best_e = e;
    }
    warp_best(best_v, best_e);
    float mine = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + 32 * i == best_e) mine = source[i], removed |= 1u << i;
    const float picked = __shfl_sync(kFullMask, mine, best_e & 31);
    if (lane == j) my_id = best_e, my_picked = picked;
  }
  const float first_picked = __shfl_sync(kFullMask, my_picked, 0);  // the largest

  float weight = 0.f;
  if (lane < kTopK) {
    if (kScore == kScoreSoftmaxTopk) weight = expf(my_picked - softmax_max) / softmax_sum;
    else if (kScore == kScoreTopkSoftmax) weight = expf(my_picked - first_picked);
    else weight = my_picked;
  }
  const float total = warp_sum(weight);
  float scale = p.scaling_factor;
  if (kScore == kScoreTopkSoftmax) scale /= total;
  else if (kRenormalize) scale /= kScore == kScoreSigmoidTopk ? total + 1e-20f : total;

  if (lane < kTopK) {
    const long long out = static_cast<long long>(token) * kTopK + lane;
    p.topk_ids[out] = my_id;
    p.topk_weights[out] = weight * scale;
    if (hist) atomicAdd(&hist[my_id], 1);  // a count: its order does not matter
  }
}

// Group sizes (padded to the alignment, or the masked capacity), their exclusive prefix over the
// experts -> starts[0..kExperts]; writes group_offsets (contiguous) and group_counts.
template <int kExperts, int kBlockThreads = kThreads>
__device__ __forceinline__ void write_offsets(const RoutingParams& p, const int* counts, int* starts) {
  constexpr int kPerThread = (kExperts + kBlockThreads - 1) / kBlockThreads;
  __shared__ int warp_totals[kBlockThreads / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int local[kPerThread];
  int sum = 0;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = tid * kPerThread + i;
    int size = 0;
    if (e < kExperts) {
      const int align = p.row_alignment;
      size = p.layout == 1 ? p.capacity : (counts[e] + align - 1) / align * align;
    }
    local[i] = sum;
    sum += size;
  }
  int inclusive = sum;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int other = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  int before = inclusive - sum;
  for (int w = 0; w < warp; ++w) before += warp_totals[w];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = tid * kPerThread + i;
    if (e < kExperts) {
      starts[e] = before + local[i];
      if (p.group_offsets) p.group_offsets[e] = before + local[i];
      if (p.group_counts) p.group_counts[e] = p.layout == 1 ? min(counts[e], p.capacity) : counts[e];
    }
  }
  if (tid == kBlockThreads - 1) {
    starts[kExperts] = before + sum;
    if (p.group_offsets) p.group_offsets[kExperts] = before + sum;
  }
  __syncthreads();
}

// Rows of this CTA's (token, slot) pairs, in their order: seen[e] holds the rows of expert e that
// come before this CTA; advanced as the pairs are placed.
template <int kExperts, int kTopK>
__device__ __forceinline__ void place_rows(const RoutingParams& p, long long first, long long last, const int* starts,
                                           int* seen) {
  __shared__ int warp_counts[kWarps][kExperts];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < kWarps * kExperts; i += kThreads) (&warp_counts[0][0])[i] = 0;
  __syncthreads();
  for (long long base = first; base < last; base += kThreads) {
    const long long f = base + tid;
    const int e = f < last ? p.topk_ids[f] : -1;
    const unsigned peers = __match_any_sync(kFullMask, e);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (e >= 0 && rank == 0) warp_counts[warp][e] = __popc(peers);
    __syncthreads();
    if (e >= 0) {
      int r = seen[e] + rank;
      for (int w = 0; w < warp; ++w) r += warp_counts[w][e];
      int row = -1;
      if (p.layout == 0 || r < p.capacity) {
        row = starts[e] + r;
        p.gather_rows[row] = static_cast<int>(f / kTopK);
        p.scatter_rows[row] = static_cast<int>(f);
        p.routing_weights[row] = p.topk_weights[f];
      }
      if (p.row_of_slot) p.row_of_slot[f] = row;
    }
    __syncthreads();
    if (e >= 0 && rank == 0) {
      atomicAdd(&seen[e], __popc(peers));
      warp_counts[warp][e] = 0;
    }
    __syncthreads();
  }
}

// Contiguous layout with row_alignment > 1: the padding rows after each group read token 0, weigh
// 0 and are written nowhere (scatter row -1). Experts are shared out over the CTAs.
template <int kExperts>
__device__ __forceinline__ void fill_padding(const RoutingParams& p, const int* starts, const int* counts) {
  if (p.layout != 0 || p.row_alignment == 1) return;
  for (int e = blockIdx.x; e < kExperts; e += gridDim.x) {
    for (int row = starts[e] + counts[e] + threadIdx.x; row < starts[e + 1]; row += kThreads) {
      p.gather_rows[row] = 0;
      p.scatter_rows[row] = -1;
      p.routing_weights[row] = 0.f;
    }
  }
}

template <int kExperts>
__device__ __forceinline__ int num_ctas(const RoutingParams& p) {
  return (p.num_tokens + p.tokens_per_cta - 1) / p.tokens_per_cta;
}

// Workspace after the per-CTA counts: total counts [kExperts], then starts [kExperts + 1].
template <int kExperts>
__device__ __forceinline__ int* workspace_counts(const RoutingParams& p) {
  return p.block_counts + static_cast<long long>(num_ctas<kExperts>(p)) * kExperts;
}

template <int kLogits, int kExperts, int kTopK, int kScore, bool kRenormalize, int kGroups, int kTopkGroups>
__device__ __forceinline__ void topk_count(const RoutingParams& p) {
  __shared__ int hist[kExperts];
  for (int e = threadIdx.x; e < kExperts; e += kThreads) hist[e] = 0;
  __syncthreads();
  const int first = blockIdx.x * p.tokens_per_cta;
  const int last = min(first + p.tokens_per_cta, p.num_tokens);
  for (int t = first + (threadIdx.x >> 5); t < last; t += kWarps)
    route_token<kLogits, kExperts, kTopK, kScore, kRenormalize, kGroups, kTopkGroups>(p, t, threadIdx.x & 31, hist);
  __syncthreads();
  for (int e = threadIdx.x; e < kExperts; e += kThreads)
    p.block_counts[static_cast<long long>(blockIdx.x) * kExperts + e] = hist[e];
}

// One CTA of kScanThreads: each CTA's counts become its base within the expert (exclusive prefix
// over CTAs). kSegments threads share an expert, each over a contiguous run of CTAs, so that the
// chain of loads per thread is ctas / kSegments long.
template <int kExperts>
__device__ __forceinline__ void scan(const RoutingParams& p) {
  constexpr int kSegments = kScanThreads / kExperts > 0 ? kScanThreads / kExperts : 1;
  __shared__ int partial[kSegments][kExperts];
  __shared__ int counts[kExperts];
  __shared__ int starts[kExperts + 1];
  const int ctas = num_ctas<kExperts>(p);
  const int per_segment = (ctas + kSegments - 1) / kSegments;
  for (int i = threadIdx.x; i < kSegments * kExperts; i += kScanThreads) {
    const int e = i % kExperts, segment = i / kExperts;
    const int first = segment * per_segment, last = min(first + per_segment, ctas);
    int sum = 0;
#pragma unroll 8
    for (int b = first; b < last; ++b) sum += p.block_counts[static_cast<long long>(b) * kExperts + e];
    partial[segment][e] = sum;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kSegments * kExperts; i += kScanThreads) {
    const int e = i % kExperts, segment = i / kExperts;
    const int first = segment * per_segment, last = min(first + per_segment, ctas);
    int running = 0;
    for (int s = 0; s < segment; ++s) running += partial[s][e];
    if (segment == kSegments - 1) counts[e] = running + partial[segment][e];
    int* column = p.block_counts + e;
#pragma unroll 8
    for (int b = first; b < last; ++b) {
      const int c = column[static_cast<long long>(b) * kExperts];
      column[static_cast<long long>(b) * kExperts] = running;
      running += c;
    }
  }
  __syncthreads();
  write_offsets<kExperts, kScanThreads>(p, counts, starts);
  int* ws_counts = workspace_counts<kExperts>(p);
  for (int e = threadIdx.x; e <= kExperts; e += kScanThreads) {
    if (e < kExperts) ws_counts[e] = counts[e];
    ws_counts[kExperts + e] = starts[e];
  }
}

template <int kExperts, int kTopK>
__device__ __forceinline__ void scatter(const RoutingParams& p) {
  __shared__ int counts[kExperts];
  __shared__ int starts[kExperts + 1];
  __shared__ int seen[kExperts];
  const int* ws_counts = workspace_counts<kExperts>(p);
  for (int e = threadIdx.x; e <= kExperts; e += kThreads) {
    if (e < kExperts) {
      counts[e] = ws_counts[e];
      seen[e] = p.block_counts[static_cast<long long>(blockIdx.x) * kExperts + e];
    }
    starts[e] = ws_counts[kExperts + e];
  }
  __syncthreads();
  const long long first = static_cast<long long>(blockIdx.x) * p.tokens_per_cta * kTopK;
  const long long last = min(first + static_cast<long long>(p.tokens_per_cta) * kTopK,
                             static_cast<long long>(p.num_tokens) * kTopK);
  place_rows<kExperts, kTopK>(p, first, last, starts, seen);
  fill_padding<kExperts>(p, starts, counts);
}

// Everything in one CTA (few tokens): one launch instead of three.
template <int kLogits, int kExperts, int kTopK, int kScore, bool kRenormalize, int kGroups, int kTopkGroups>
__device__ __forceinline__ void fused(const RoutingParams& p) {
  __shared__ int counts[kExperts];
  __shared__ int starts[kExperts + 1];
  __shared__ int seen[kExperts];
  for (int e = threadIdx.x; e < kExperts; e += kThreads) counts[e] = 0, seen[e] = 0;
  __syncthreads();
  for (int t = threadIdx.x >> 5; t < p.num_tokens; t += kWarps)
    route_token<kLogits, kExperts, kTopK, kScore, kRenormalize, kGroups, kTopkGroups>(p, t, threadIdx.x & 31, counts);
  __syncthreads();  // also makes this CTA's topk_ids/topk_weights stores visible to all its threads
  write_offsets<kExperts>(p, counts, starts);
  place_rows<kExperts, kTopK>(p, 0, static_cast<long long>(p.num_tokens) * kTopK, starts, seen);
  fill_padding<kExperts>(p, starts, counts);
}

// ---- combine-reduce: 8 elements (16 bytes of bf16/f16) per thread --------------------------------

// The two 16-bit values of a word (the low half first) as floats.
template <int kType>
__device__ __forceinline__ void widen_pair(unsigned word, float& lo, float& hi) {
  if (kType == kBF16) {
    lo = __uint_as_float(word << 16);
    hi = __uint_as_float(word & 0xffff0000u);
  } else {
    asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"(static_cast<unsigned short>(word & 0xffffu)));
    asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"(static_cast<unsigned short>(word >> 16)));
    // The conversion returns a NaN without its sign; the host's widening keeps it (and the FP8
    // quantizer codes a NaN as its sign | 0x7F).
    if (lo != lo) lo = __uint_as_float(__float_as_uint(lo) | (word & 0x8000u) << 16);
    if (hi != hi) hi = __uint_as_float(__float_as_uint(hi) | (word & 0x80000000u));
  }
}

template <int kType>
__device__ __forceinline__ void load8(const void* base, long long index, float (&v)[8]) {
  if (kType == kF32) {
    const float4* src = reinterpret_cast<const float4*>(static_cast<const float*>(base) + index);
    const float4 a = src[0], b = src[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const unsigned short*>(base) + index);
    const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) widen_pair<kType>(words[i], v[2 * i], v[2 * i + 1]);
  }
}

template <int kType>
__device__ __forceinline__ void store8(void* base, long long index, const float (&v)[8]) {
  if (kType == kF32) {
    float4* dst = reinterpret_cast<float4*>(static_cast<float*>(base) + index);
    dst[0] = make_float4(v[0], v[1], v[2], v[3]);
    dst[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint4 raw;
    raw.x = pack_pair<kType>(v[0], v[1]);
    raw.y = pack_pair<kType>(v[2], v[3]);
    raw.z = pack_pair<kType>(v[4], v[5]);
    raw.w = pack_pair<kType>(v[6], v[7]);
    *reinterpret_cast<uint4*>(static_cast<unsigned short*>(base) + index) = raw;
  }
}

template <int kIn, int kOut, int kTopK>
__device__ __forceinline__ void combine(const CombineParams& p) {
  const long long v = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  if (v >= p.num_vectors) return;
  const int vectors_per_row = p.n / 8;
  const long long token = v / vectors_per_row;
  const int col = static_cast<int>(v - token * vectors_per_row) * 8;
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int j = 0; j < kTopK; ++j) {
    const long long slot = token * kTopK + j;
    if (p.row_of_slot && p.row_of_slot[slot] < 0) continue;  // dropped (masked layout over capacity)
    float x[8];
    load8<kIn>(p.input, slot * p.n + col, x);
    if (p.topk_weights) {
      const float w = p.topk_weights[slot];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = fmaf(w, x[i], acc[i]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] += x[i];
    }
  }
  store8<kOut>(p.output, token * p.n + col, acc);
}

// ---- FP8 activations: a half-warp per 128-wide K block of a row, 8 elements per lane -------------

template <int kIn>
__device__ __forceinline__ void quantize_fp8(const QuantizeFp8Params& p) {
  const long long warp = static_cast<long long>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  const int part = lane & 15;  // the lane's 8 elements in its half-warp's block
  float v[kQuantizeSteps][8];
  bool valid[kQuantizeSteps];
#pragma unroll
  for (int step = 0; step < kQuantizeSteps; ++step) {
    const long long block = warp * kQuantizeBlocksPerWarp + 2 * step + (lane >> 4);
    const long long row = block / p.k_blocks;
    const int col = static_cast<int>(block - row * p.k_blocks) * 128 + 8 * part;
    valid[step] = block < p.blocks;
    long long source = row;  // the input row
    if (p.gather_rows && valid[step]) {
      const int token = __ldg(p.gather_rows + row);
      source = (unsigned)token < (unsigned long long)p.num_tokens ? token : -1;
    }
    // k % 16 == 0: a lane's 8 elements are all in K or all out.
    if (valid[step] && col < p.k && source >= 0) {
      load8<kIn>(p.input, source * p.k + col, v[step]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[step][i] = 0.f;
    }
  }
#pragma unroll
  for (int step = 0; step < kQuantizeSteps; ++step) {
    const long long block = warp * kQuantizeBlocksPerWarp + 2 * step + (lane >> 4);
    const long long row = block / p.k_blocks;
    const int kb = static_cast<int>(block - row * p.k_blocks);
    const int col = kb * 128 + 8 * part;
    // amax over the finite values (one infinity must not wipe out the block's scale): non-negative
    // floats order as their bits, so the half-warp's maximum is an unsigned one (xor 8..1 stays
    // inside the half).
    unsigned amax_bits = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float a = fabsf(v[step][i]);
      if (a <= 3.402823466e38f) amax_bits = max(amax_bits, __float_as_uint(a));  // false for NaN and infinity
    }
#pragma unroll
    for (int x = 8; x >= 1; x >>= 1) amax_bits = max(amax_bits, __shfl_xor_sync(0xffffffffu, amax_bits, x));
    const float amax = __uint_as_float(amax_bits);
    const float scale = amax > 0.f ? __fdiv_rn(amax, 448.f) : 1.f;
    if (valid[step] && col < p.k) {
      float q[8];
      divide_by_scale<8>(v[step], scale, q);
      unsigned codes[2];
#pragma unroll
      for (int w = 0; w < 2; ++w) codes[w] = e4m3x2(q[4 * w], q[4 * w + 1]) | e4m3x2(q[4 * w + 2], q[4 * w + 3]) << 16;
      if (p.row_of_slot) {  // token-major: this row to each of its routed rows
        for (int j = 0; j < p.top_k; ++j) {
          const int dest = __ldg(p.row_of_slot + row * p.top_k + j);
          if (dest < 0) continue;
          *reinterpret_cast<uint2*>(p.output + static_cast<long long>(dest) * p.k + col) = make_uint2(codes[0], codes[1]);
          if (part == 0) p.scales[static_cast<long long>(kb) * p.out_rows + dest] = scale;
        }
      } else {
        *reinterpret_cast<uint2*>(p.output + row * p.k + col) = make_uint2(codes[0], codes[1]);
      }
    }
    if (valid[step] && part == 0 && !p.row_of_slot) p.scales[static_cast<long long>(kb) * p.out_rows + row] = scale;
  }
}

}  // namespace moejit::routing
