// One whole MoE layer on the GPU, fused the moejit way:
//
//   route     router logits [T, E] -> top-k experts and weights; per-expert offsets and the row
//             arrays (moejit::route: one launch at few tokens, three at many)
//   GEMM1     gather x rows by token -> [rows, H] x W1[e]^T (+ b1[e]) -> SwiGLU -> h [rows, I]
//   GEMM2     h x W2[e]^T (+ b2[e]) -> * routing weight -> scattered to y [T, top_k, H]
//   combine   y summed over the k slots -> out [T, H]             (deterministic: no atomics)
//
// Models (shapes as tests/gpu/moe_layer_peers.py, which times the same layer in torch):
//   gpt-oss-120b   128 experts, top-4, H = I = 2880; top-k then softmax; biases; swiglu_oai
//                  (gate clamped at 7, linear part at +-7, gate * sigmoid(1.702 gate) * (up + 1))
//                  on interleaved gate/up columns as gpt-oss stores gate_up_proj. BF16 weights,
//                  or MXFP4 with --weights mxfp4 (as gpt-oss ships them: E2M1 + E8M0 per 32 K).
//   qwen3-30b-a3b  128 experts, top-8, H = 2048, I = 768; softmax, top-k, renormalized; SwiGLU.
//                  gate_proj/up_proj rows are stored interleaved (a load-time choice) so the same
//                  GEMM1 epilogue serves both models.
//   deepseek-v3    256 experts, top-8, H = 7168, I = 2048; sigmoid + correction bias, top-4 of 8
//                  groups, top-8, renormalized, x2.5; SwiGLU (interleaved). (The torch peer leaves
//                  the group limit and bias out: the GEMMs see the same work.)
//   mixtral-8x7b   8 experts, top-2, H = 4096, I = 14336; top-k then softmax; SwiGLU (interleaved).
//                  Few large experts: at decode GEMM2 is one round of tiles (the 4-bit kernel's
//                  one-full-round stage rule). Not in the torch peer.
//
// --weights mxfp4: W1 and W2 quantized by moejit::quantize_mxfp4 and packed by pack_w4_sm90 (the
// GEMMs then take b_type = mxfp4: the Hopper 4-bit kernel with its fusions on sm_90a); the CPU
// reference uses the dequantized weights (exact in bf16: 2 significant bits times a power of two).
// --weights nvfp4: the same with moejit::quantize_nvfp4 (E2M1 + E4M3 per 16 K + an fp32 tensor scale
// per expert, GroupedGemmArgs::b_tensor_scales); the reference keeps each weight as E2M1 x its block
// scale (exact in bf16: at most 6 significant bits) and multiplies the expert's tensor scale in, as
// the kernel does on its accumulator.
// --weights e4m3: FP8 end to end, DeepSeek-V3's recipe: W1 and W2 quantized by moejit::quantize_fp8
// in 128x128 blocks, and the activations on the GPU by moejit::quantize_activations_fp8 in 1x128
// blocks (x before GEMM1, h before GEMM2: each GEMM's time below includes its quantization). Where
// I % 128 == 0 (Qwen3, DeepSeek-V3) gate and up rows are the halves [gate; up] (glu=split, the
// checkpoint's layout: its block scales cannot be interleaved), else interleaved (gpt-oss). The CPU
// reference takes the same quantized weights, and quantizes x and its own h the same way.
// GEMM1's rows (--fp8-gather): `quantize` permutes x as it quantizes it (token-major, route()'s
// row_of_slot: each x row quantized once and written to its top-k routed rows; then a GEMM1
// without gather, on the dynamic scheduler); `gemm` quantizes x in token order
// and GEMM1 gathers (fuse=gather: 128-row tiles on 2x1 CTA pairs from 128 rows per expert, v39). `auto` (the default) takes
// `quantize` from 16 rows per expert, else `gemm` (H100, docs/perf.md v28: 0.85-0.98x the layer's
// time from 1024 tokens on Qwen3, gpt-oss and DeepSeek-V3; at 128 tokens and fewer the extra
// launch made it 1.01-1.03x); but `gemm` wherever GEMM1's N is at most 2048, where gathering costs
// little (each row is gathered once per N tile): since the gathered pairs (v39) Qwen3 (N = 1536)
// took 0.95-0.975x the layer's time with `gemm` at 1024-16384 tokens, while gpt-oss (5760) read
// 0.95-1.01x, DeepSeek-V3 (4096) 1.03-1.04x and Mixtral (28672) 0.99-1.04x.
// h (--fp8-h): `gemm1` (the default) has GEMM1 write it quantized (c=e4m3: E4M3 codes and 1x128
// scales from its epilogue, GEMM2's A as it is); `quantize` writes bf16 h and quantizes it in a
// pass of its own.
// Checked against a CPU reference of the whole layer on sampled tokens: the same bf16 inputs,
// double accumulation, the intermediate h and the expert outputs rounded to bf16 where the GPU
// stores them. Routing is checked exactly (ids of every token). Bound: ||out - ref|| / ||ref||
// <= 1e-2 (bf16 output rounding is 2^-9; fp32 accumulation over K <= 7168 adds ~1e-5).
// Timed with CUDA events: 5 warm-up layers, then the median of 20 per stage and of the totals,
// beside the plain grouped GEMMs of the same shapes (no fusion) for the fusion overhead.
//
// Without a GPU it says so, compiles (prewarms) the kernels it would use for sm_90a, and exits 0.
//
//   moe_layer [--model gpt-oss-120b|qwen3-30b-a3b|deepseek-v3|mixtral-8x7b|all] [--tokens 16,1024,16384]
//             [--check-tokens 32] [--reps 20] [--weights bf16|mxfp4|nvfp4|e4m3] [--fp8-gather auto|quantize|gemm]
//             [--fp8-h gemm1|quantize] [--route-only]
//             [--gemm1-spec tile=256x128x64,stages=4] [--gemm2-spec stages=6]
//   --gemm1-spec / --gemm2-spec: these spec fields replace the heuristic's in the fused GEMM1 /
//   GEMM2 (for tuning and profiling; the plain GEMMs beside them keep the heuristic's)
//   --route-only: time and check route() alone (no weights), e.g. DeepSeek-V3 at 16384 tokens
//   ROUTING=skewed (environment, as bench_suite's): router logits biased toward a few hot experts
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "moejit/moejit.hpp"
#include "moe_models.hpp"
#include "spec_overrides.hpp"

namespace {

using namespace moejit;

struct LayerModel {
  const char* name;
  int experts, top_k, hidden, intermediate;
  RoutingMethod routing;
  bool correction_bias;  // DeepSeek-V3's e_score_correction_bias
  bool expert_bias;      // gpt-oss: b1 (gate_up) and b2 (down)
  Activation activation;
};

const LayerModel kModels[] = {
    {"gpt-oss-120b", 128, 4, 2880, 2880, RoutingMethod::gpt_oss(), false, true, Activation::swiglu_oai},
    {"qwen3-30b-a3b", 128, 8, 2048, 768, RoutingMethod::qwen3_moe(), false, false, Activation::swiglu},
    {"deepseek-v3", 256, 8, 7168, 2048, RoutingMethod::deepseek_v3(), true, false, Activation::swiglu},
    {"mixtral-8x7b", 8, 2, 4096, 14336, RoutingMethod::mixtral(), false, false, Activation::swiglu},
};

// --gemm1-spec / --gemm2-spec: spec fields that replace the heuristic's in the fused GEMMs.
struct SpecOverrides {
  std::string gemm1, gemm2;
};

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

// Counter-based random numbers (splitmix64), so that big weight arrays fill in parallel.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Uniform on [-scale*sqrt(3), scale*sqrt(3)): standard deviation `scale`.
float uniform_sd(std::uint64_t seed, std::uint64_t i, float scale) {
  double u = (mix(seed * 0x100000001b3ull ^ i) >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<float>((2 * u - 1) * 1.7320508075688772 * scale);
}

template <typename F>
void parallel_for(std::size_t n, F&& body) {
  unsigned threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 64));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::size_t i = t; i < n; i += threads) body(i);
    });
  for (auto& th : pool) th.join();
}

std::vector<std::uint16_t> random_bf16(std::size_t count, std::uint64_t seed, float scale) {
  std::vector<std::uint16_t> out(count);
  const std::size_t chunk = 1 << 20;
  parallel_for((count + chunk - 1) / chunk, [&](std::size_t c) {
    for (std::size_t i = c * chunk; i < std::min(count, (c + 1) * chunk); ++i) out[i] = float_to_bf16(uniform_sd(seed, i, scale));
  });
  return out;
}

std::vector<float> random_f32(std::size_t count, std::uint64_t seed, float scale) {
  std::vector<float> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = uniform_sd(seed, i, scale);
  return out;
}

double activation_of(Activation act, double gate, double up) {
  if (act == Activation::swiglu_oai) {
    gate = std::min(gate, 7.0);
    up = std::clamp(up, -7.0, 7.0);
    return gate / (1 + std::exp(-1.702 * gate)) * (up + 1);
  }
  return gate / (1 + std::exp(-gate)) * up;  // silu(gate) * up
}

double round_bf16(double v) { return bf16_to_float(float_to_bf16(static_cast<float>(v))); }

struct Weights {
  std::vector<std::uint16_t> w1, w2;   // [E, 2I, H] (gate/up rows interleaved, or halves: split_glu), [E, H, I]
  std::vector<std::uint8_t> q1, q2;    // --weights mxfp4 | nvfp4: w1, w2 packed by pack_w4_sm90 (w1, w2
                                       // dequantized; NVFP4 without the tensor scale)
  std::vector<float> t1, t2;           // --weights nvfp4: the experts' fp32 tensor scales [E]
                                       // --weights e4m3: E4M3 codes of w1, w2 (128x128 blocks)
  std::vector<float> s1, s2;           // --weights e4m3: block scales [E][N/128][K/128]
  bool split_glu = false;              // --weights e4m3 with I % 128 == 0
  std::vector<float> b1, b2, bias;     // [E, 2I], [E, H] (gpt-oss), correction bias [E] (DeepSeek-V3)
};

// MXFP4 or NVFP4 of bf16 weights [E][rows][K]: the packed blocks the kernels read, and the weights
// replaced by their dequantized values (exact in bf16) for the reference; NVFP4's tensor scales go
// to `tensor_scales` [E], left out of the dequantized values. One expert per task (the packed blocks
// are ordered expert-major, so the experts' packings concatenate): gpt-oss's 2.1 G weights took
// minutes through one whole-tensor call.
std::vector<std::uint8_t> to_w4(std::vector<std::uint16_t>& bf16, int experts, int rows, int k, DType format,
                                std::vector<float>& tensor_scales) {
  const std::size_t per_expert = static_cast<std::size_t>(rows) * k;
  std::vector<std::vector<std::uint8_t>> packed(experts);
  if (format == DType::nvfp4) tensor_scales.assign(experts, 1.0f);
  parallel_for(experts, [&](std::size_t e) {
    std::uint16_t* const w = bf16.data() + e * per_expert;
    std::vector<float> f(per_expert);
    for (std::size_t i = 0; i < per_expert; ++i) f[i] = bf16_to_float(w[i]);
    std::vector<float> deq;
    if (format == DType::nvfp4) {
      Nvfp4Tensor q = quantize_nvfp4(f.data(), QuantShape{1, rows, k});
      packed[e] = pack_w4_sm90(q);
      tensor_scales[e] = q.tensor_scales[0];
      q.tensor_scales[0] = 1.0f;  // E2M1 x E4M3 alone: exact in bf16
      deq = dequantize(q);
    } else {
      const Mxfp4Tensor q = quantize_mxfp4(f.data(), QuantShape{1, rows, k});
      packed[e] = pack_w4_sm90(q);
      deq = dequantize(q);
    }
    for (std::size_t i = 0; i < per_expert; ++i) w[i] = float_to_bf16(deq[i]);
  });
  std::vector<std::uint8_t> out;
  out.reserve(packed.empty() ? 0 : packed[0].size() * experts);
  for (const auto& p : packed) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// FP8 of bf16 weights [E][rows][K] in 128x128 blocks: the codes and the kernel's scales, one expert
// per task (both are expert-major, so the experts' parts concatenate).
void to_fp8(const std::vector<std::uint16_t>& bf16, int experts, int rows, int k, std::vector<std::uint8_t>& codes,
            std::vector<float>& scales) {
  const std::size_t per_expert = static_cast<std::size_t>(rows) * k;
  const std::size_t scales_per_expert = static_cast<std::size_t>((rows + 127) / 128) * ((k + 127) / 128);
  codes.resize(per_expert * experts);
  scales.resize(scales_per_expert * experts);
  parallel_for(experts, [&](std::size_t e) {
    std::vector<float> f(per_expert);
    for (std::size_t i = 0; i < per_expert; ++i) f[i] = bf16_to_float(bf16[e * per_expert + i]);
    const Fp8Tensor q = quantize_fp8(f.data(), QuantShape{1, rows, k}, Fp8Scaling::block_128x128);
    std::copy(q.data.begin(), q.data.end(), codes.begin() + e * per_expert);
    const std::vector<float> kernel_scales = fp8_kernel_scales_b(q);
    std::copy(kernel_scales.begin(), kernel_scales.end(), scales.begin() + e * scales_per_expert);
  });
}

// The reference's view of the weights: bf16 values (NVFP4: times the expert's tensor scale), or E4M3
// codes times their 128x128 block's scale.
struct WeightView {
  const std::vector<std::uint16_t>& bf16;
  const std::vector<std::uint8_t>* codes;  // null: bf16
  const std::vector<float>* scales;
  int rows, k;                              // per expert
  const std::vector<float>* tensor_scales = nullptr;  // NVFP4: [E]
  double at(std::size_t e, std::size_t row, std::size_t col) const {
    const std::size_t i = (e * rows + row) * k + col;
    if (tensor_scales) return (double)bf16_to_float(bf16[i]) * (*tensor_scales)[e];
    if (!codes) return bf16_to_float(bf16[i]);
    const std::size_t kb = (k + 127) / 128, nb = (rows + 127) / 128;
    return (double)e4m3_to_float((*codes)[i]) * (*scales)[(e * nb + row / 128) * kb + col / 128];
  }
};

// x quantized and dequantized as the GPU quantizes activations (1x128 blocks).
std::vector<double> fp8_round_trip(const std::vector<double>& row) {
  std::vector<float> f(row.begin(), row.end());
  const Fp8Tensor q = quantize_fp8(f.data(), QuantShape{1, 1, (std::int64_t)f.size()}, Fp8Scaling::block_1x128);
  const std::vector<float> deq = dequantize(q);
  return std::vector<double>(deq.begin(), deq.end());
}

Weights make_weights(const LayerModel& m, DType weights) {
  Weights w;
  const std::size_t E = m.experts, H = m.hidden, I = m.intermediate;
  w.w1 = random_bf16(E * 2 * I * H, 11, 1.0f / std::sqrt((float)H));
  w.w2 = random_bf16(E * H * I, 12, 1.0f / std::sqrt((float)I));
  if (weights == DType::mxfp4 || weights == DType::nvfp4) {
    w.q1 = to_w4(w.w1, m.experts, 2 * m.intermediate, m.hidden, weights, w.t1);
    w.q2 = to_w4(w.w2, m.experts, m.hidden, m.intermediate, weights, w.t2);
  }
  if (weights == DType::e4m3) {
    w.split_glu = m.intermediate % 128 == 0;
    to_fp8(w.w1, m.experts, 2 * m.intermediate, m.hidden, w.q1, w.s1);
    to_fp8(w.w2, m.experts, m.hidden, m.intermediate, w.q2, w.s2);
  }
  if (m.expert_bias) {
    w.b1 = random_f32(E * 2 * I, 13, 0.1f);
    w.b2 = random_f32(E * H, 14, 0.1f);
  }
  if (m.correction_bias) w.bias = random_f32(E, 15, 0.05f);
  return w;
}

// Reference output rows of the sampled tokens (double, bf16 where the GPU stores bf16). h_bf16:
// whether GEMM1 stores h in bf16 (FP8: before it is quantized; not where GEMM1 quantizes its fp32
// result itself, c=e4m3).
std::vector<double> reference_layer(const LayerModel& m, const Weights& w, const std::vector<std::uint16_t>& x,
                                    const reference::Routing& routing, const std::vector<int>& tokens, bool h_bf16) {
  const int H = m.hidden, I = m.intermediate, K = m.top_k;
  const bool fp8 = !w.s1.empty();
  const bool nvfp4 = !w.t1.empty();
  const WeightView w1{w.w1, fp8 ? &w.q1 : nullptr, &w.s1, 2 * I, H, nvfp4 ? &w.t1 : nullptr},
      w2{w.w2, fp8 ? &w.q2 : nullptr, &w.s2, H, I, nvfp4 ? &w.t2 : nullptr};
  std::vector<double> out(tokens.size() * H, 0.0);
  parallel_for(tokens.size(), [&](std::size_t s) {
    const int t = tokens[s];
    std::vector<double> xt(H), h(I);
    for (int q = 0; q < H; ++q) xt[q] = bf16_to_float(x[(std::size_t)t * H + q]);
    if (fp8) xt = fp8_round_trip(xt);
    for (int j = 0; j < K; ++j) {
      const int e = routing.topk_ids[(std::size_t)t * K + j];
      const double weight = routing.topk_weights[(std::size_t)t * K + j];
      for (int i = 0; i < I; ++i) {
        double gate = 0, up = 0;
        // Gate and up rows: interleaved (2i, 2i + 1), or halves (i, I + i) with split_glu.
        const int gate_row = w.split_glu ? i : 2 * i, up_row = w.split_glu ? I + i : 2 * i + 1;
        for (int q = 0; q < H; ++q) gate += xt[q] * w1.at(e, gate_row, q), up += xt[q] * w1.at(e, up_row, q);
        if (!w.b1.empty()) gate += w.b1[(std::size_t)e * 2 * I + gate_row], up += w.b1[(std::size_t)e * 2 * I + up_row];
        h[i] = activation_of(m.activation, gate, up);
        if (h_bf16) h[i] = round_bf16(h[i]);
      }
      if (fp8) h = fp8_round_trip(h);
      for (int c = 0; c < H; ++c) {
        double y = 0;
        for (int i = 0; i < I; ++i) y += h[i] * w2.at(e, c, i);
        if (!w.b2.empty()) y += w.b2[(std::size_t)e * H + c];
        out[s * H + c] += round_bf16(y * weight);
      }
    }
  });
  return out;
}

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* d = nullptr;
  check_cuda(cudaMalloc(&d, std::max<std::size_t>(host.size(), 1) * sizeof(T) + 16), "cudaMalloc");
  if (!host.empty()) check_cuda(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}
void* device_alloc(std::size_t bytes) {
  void* d = nullptr;
  check_cuda(cudaMalloc(&d, bytes + 16), "cudaMalloc");
  return d;
}

// The two GEMMs' arguments, fused as the contract says (include/moejit/runtime.hpp).
struct LayerGemms {
  GroupedGemmArgs up, down;
  Fusion up_fusion, down_fusion;
};

// How an FP8 layer gathers x's rows for GEMM1 (--fp8-gather) and quantizes h (--fp8-h).
enum class Fp8Gather { automatic, quantize, gemm };
enum class Fp8H { gemm1, quantize };
struct Fp8Options {
  Fp8Gather gather = Fp8Gather::automatic;
  Fp8H h = Fp8H::gemm1;
};

// --fp8-gather auto for a model and token count (see the top of this file).
Fp8Options resolved(Fp8Options o, const LayerModel& m, int tokens) {
  if (o.gather == Fp8Gather::automatic) {
    const double rows_per_expert = (double)tokens * m.top_k / m.experts;
    const bool narrow_gemm1 = 2 * m.intermediate <= 2048;
    o.gather = rows_per_expert >= 16 && !narrow_gemm1 ? Fp8Gather::quantize : Fp8Gather::gemm;
  }
  return o;
}

LayerGemms layer_gemms(const LayerModel& m, int tokens, DType weights, GatherLoad gather_by, Fp8Options fp8_options) {
  fp8_options = resolved(fp8_options, m, tokens);
  LayerGemms g;
  if (weights == DType::e4m3) g.up.ab_type = g.down.ab_type = DType::e4m3;  // FP8 A and B, bf16 C
  else if (weights != DType::bf16) g.up.b_type = g.down.b_type = weights;
  const int rows = tokens * m.top_k;
  g.up.num_groups = g.down.num_groups = m.experts;
  g.up.n = 2 * m.intermediate;
  g.up.k = m.hidden;
  g.down.n = m.hidden;
  g.down.k = m.intermediate;
  g.up.total_rows = g.down.total_rows = rows;
  g.up.num_tokens = tokens;
  g.down.num_out_rows = rows;
  // FP8: A comes permuted from the quantizer, unless GEMM1 gathers (--fp8-gather gemm).
  g.up_fusion.gather_a = weights != DType::e4m3 || fp8_options.gather == Fp8Gather::gemm;
  if (weights == DType::e4m3 && fp8_options.h == Fp8H::gemm1) g.up.c_type = DType::e4m3;  // h as GEMM2's A
  if (!g.up_fusion.gather_a) g.up.num_tokens = 0;
  g.up_fusion.gather_by = gather_by;  // --gather-by (Hopper; the heuristic keeps it, the portable family ignores it)
  g.up_fusion.bias = m.expert_bias;
  g.up_fusion.activation = m.activation;  // GLU on interleaved gate/up columns (the default)
  if (weights == DType::e4m3 && m.intermediate % 128 == 0) g.up_fusion.glu = GluLayout::split;  // make_weights
  g.down_fusion.scatter_c = true;
  g.down_fusion.routing_weight = true;
  g.down_fusion.bias = m.expert_bias;
  // args.fusion tells the high-level call which fusions to build in (and the heuristic: gather
  // keeps single CTAs).
  g.up.fusion = g.up_fusion;
  g.down.fusion = g.down_fusion;
  return g;
}

// The fused spec for a GEMM: the heuristic's tile for the shape and fusions, with the fusions.
KernelSpec fused_spec(Runtime& rt, const GroupedGemmArgs& args, const Fusion& fusion) {
  KernelSpec spec = rt.choose_spec(args);
  spec.fusion = fusion;
  spec.validate();
  return spec;
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::atoi(item.c_str()));
  return out;
}

RoutingArgs routing_shape(const LayerModel& m, int tokens) {
  RoutingArgs r;
  r.logits_type = DType::f32;
  r.num_tokens = tokens;
  r.num_experts = m.experts;
  r.top_k = m.top_k;
  r.method = m.routing;
  return r;
}

CombineArgs combine_shape(const LayerModel& m, int tokens) {
  CombineArgs c;
  c.num_tokens = tokens;
  c.top_k = m.top_k;
  c.n = m.hidden;
  return c;
}

// Router logits: normal noise per token and expert. ROUTING=skewed (as bench_suite's) adds a bias
// per expert, log of bench_suite's skewed popularity ((rank + 1)^-1.2 over a fixed order, the last
// E/8 experts far below every other), so that the model's own router sends most tokens to a few hot
// experts and none to the dead ones.
std::vector<float> random_logits(const LayerModel& m, int tokens) {
  std::vector<float> logits((std::size_t)tokens * m.experts);
  std::mt19937 rng(7 + tokens);
  std::normal_distribution<float> normal;
  for (auto& v : logits) v = normal(rng);
  if (moejit::examples::skewed_routing_requested()) {
    const std::vector<double> popularity = moejit::examples::skewed_log_popularity(m.experts, m.top_k, m.hidden);
    for (std::size_t i = 0; i < logits.size(); ++i) {
      const double bias = popularity[i % m.experts];
      logits[i] += std::isinf(bias) ? -30.f : (float)bias;  // dead experts far below every other
    }
  }
  return logits;
}

// No GPU: compile what the layer would use, for sm_90a.
int prewarm(const std::vector<const LayerModel*>& models, const std::vector<int>& token_counts, DType weights,
            GatherLoad gather_by, Fp8Options fp8_options) {
  fmt::print("no GPU here: prewarming the kernels the layer would use (sm_90a) instead\n");
  auto rt = Runtime::offline(Arch{9, 0, true});
  int compiled = 0, unavailable = 0;
  auto report = [&](const std::string& what, const std::string& spec, CacheOutcome outcome, double ms) {
    fmt::print("  {:<8} {}  ({})\n", what, spec,
               outcome == CacheOutcome::compiled ? fmt::format("compiled in {:.0f} ms", ms) : std::string("cache hit"));
    ++compiled;
  };
  for (const LayerModel* m : models) {
    fmt::print("{}:\n", m->name);
    CacheOutcome outcome;
    RoutingSpec route_spec = RoutingSpec::for_route(routing_shape(*m, 1), rt->arch());
    auto r = compile_routing(*rt, route_spec, &outcome);
    report("route", route_spec.to_text(), outcome, r->compile_ms);
    RoutingSpec combine_spec = RoutingSpec::for_combine(combine_shape(*m, 1), rt->arch());
    auto c = compile_routing(*rt, combine_spec, &outcome);
    report("combine", combine_spec.to_text(), outcome, c->compile_ms);
    if (weights == DType::e4m3) {
      RoutingSpec quantize_spec = RoutingSpec::for_quantize_fp8(QuantizeFp8Args{}, rt->arch());
      auto q = compile_routing(*rt, quantize_spec, &outcome);
      report("quantize", quantize_spec.to_text(), outcome, q->compile_ms);
    }
    for (int tokens : token_counts) {
      // Group sizes from the CPU routing of the same logits pick the tiles.
      RoutingArgs shape = routing_shape(*m, tokens);
      auto routing = reference::route(shape, random_logits(*m, tokens),
                                      m->correction_bias ? std::vector<float>(m->experts, 0.f) : std::vector<float>{});
      LayerGemms g = layer_gemms(*m, tokens, weights, gather_by, fp8_options);
      g.up.host_groups = routing.group_offsets;
      g.down.host_groups = routing.group_offsets;
      for (auto [what, args, fusion] : {std::tuple{"gemm1", &g.up, &g.up_fusion}, std::tuple{"gemm2", &g.down, &g.down_fusion}}) {
        try {
          KernelSpec spec = fused_spec(*rt, *args, *fusion);
          auto k = rt->compile(spec, &outcome);
          report(fmt::format("{}@{}", what, tokens), spec.to_text(), outcome, k->compile_ms);
        } catch (const SpecError& e) {
          fmt::print("  {:<8} fused GEMM not available in this build: {}\n", fmt::format("{}@{}", what, tokens), e.what());
          ++unavailable;
        }
      }
    }
  }
  fmt::print("prewarmed {} kernels for sm_90a{}\n", compiled,
             unavailable ? fmt::format(" ({} fused GEMMs not available in this build)", unavailable) : std::string());
  return 0;
}

struct StageTimes {
  std::vector<float> route, gemm1, gemm2, combine, total;
};

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.f : v[v.size() / 2];
}

bool run_layer(Runtime& rt, const LayerModel& m, const Weights& w, DType weights, GatherLoad gather_by, Fp8Options fp8_options,
               const void* d_w1, const void* d_w2, const float* d_b1, const float* d_b2, const float* d_bias, int tokens,
               int check_tokens, int reps, const SpecOverrides& overrides) {
  const int E = m.experts, K = m.top_k, H = m.hidden, I = m.intermediate;
  const long long rows = (long long)tokens * K;
  std::vector<float> logits = random_logits(m, tokens);
  std::vector<std::uint16_t> x = random_bf16((std::size_t)tokens * H, 100 + tokens, 1.0f);

  float* d_logits = device_copy(logits);
  std::uint16_t* d_x = device_copy(x);
  RoutingArgs ra = routing_shape(m, tokens);
  ra.logits = d_logits;
  ra.correction_bias = d_bias;
  ra.topk_ids = static_cast<int*>(device_alloc(rows * 4));
  ra.topk_weights = static_cast<float*>(device_alloc(rows * 4));
  ra.group_offsets = static_cast<int*>(device_alloc((E + 1) * 4));
  ra.gather_rows = static_cast<int*>(device_alloc(routed_rows(ra) * 4));
  ra.scatter_rows = static_cast<int*>(device_alloc(routed_rows(ra) * 4));
  ra.routing_weights = static_cast<float*>(device_alloc(routed_rows(ra) * 4));
  ra.workspace_bytes = routing_workspace_bytes(ra);
  ra.workspace = device_alloc(ra.workspace_bytes);
  // --weights e4m3: x and h quantized on the GPU (1x128 blocks) before their GEMMs; x permuted to
  // routed order as it is quantized (x_permuted), for which route() also gives each (token, slot)
  // its routed row.
  const bool fp8 = weights == DType::e4m3;
  fp8_options = resolved(fp8_options, m, tokens);
  const bool x_permuted = fp8 && fp8_options.gather == Fp8Gather::quantize;
  if (x_permuted) ra.row_of_slot = static_cast<int*>(device_alloc(rows * 4));
  void* d_h = device_alloc(rows * I * 2);    // GEMM1 output [rows, I]
  const long long x_rows = x_permuted ? rows : tokens;  // quantized x: routed or token order
  void* d_xq = fp8 ? device_alloc((std::size_t)x_rows * H) : nullptr;
  float* d_xs = fp8 ? static_cast<float*>(device_alloc((std::size_t)x_rows * ((H + 127) / 128) * 4)) : nullptr;
  void* d_hq = fp8 ? device_alloc(rows * I) : nullptr;
  float* d_hs = fp8 ? static_cast<float*>(device_alloc(rows * ((I + 127) / 128) * 4)) : nullptr;
  float* d_w1s = fp8 ? device_copy(w.s1) : nullptr;
  float* d_w2s = fp8 ? device_copy(w.s2) : nullptr;
  float* d_w1t = w.t1.empty() ? nullptr : device_copy(w.t1);  // NVFP4's tensor scales
  float* d_w2t = w.t2.empty() ? nullptr : device_copy(w.t2);
  void* d_y = device_alloc(rows * H * 2);    // GEMM2 output [tokens, top_k, H]
  void* d_out = device_alloc((std::size_t)tokens * H * 2);

  // Route once to learn the group sizes (a setup step: the timed layers never read them back).
  route(rt, ra, nullptr);
  check_cuda(cudaDeviceSynchronize(), "route");
  std::vector<int> offsets(E + 1);
  check_cuda(cudaMemcpy(offsets.data(), ra.group_offsets, offsets.size() * 4, cudaMemcpyDeviceToHost), "offsets");

  LayerGemms g = layer_gemms(m, tokens, weights, gather_by, fp8_options);
  const bool h_from_gemm1 = g.up.c_type == DType::e4m3;
  g.up.a = fp8 ? d_xq : d_x;
  g.up.a_scales = d_xs;
  g.up.b_scales = d_w1s;
  g.down.a_scales = d_hs;
  g.down.b_scales = d_w2s;
  g.up.b_tensor_scales = d_w1t;
  g.down.b_tensor_scales = d_w2t;
  g.up.b = d_w1;
  g.up.c = h_from_gemm1 ? d_hq : d_h;
  if (h_from_gemm1) g.up.c_scales = d_hs;
  g.up.group_offsets = ra.group_offsets;
  g.up.gather_rows = g.up_fusion.gather_a ? ra.gather_rows : nullptr;
  g.up.bias = d_b1;
  g.down.a = fp8 ? d_hq : d_h;
  g.down.b = d_w2;
  g.down.c = d_y;
  g.down.group_offsets = ra.group_offsets;
  g.down.scatter_rows = ra.scatter_rows;
  g.down.routing_weights = ra.routing_weights;
  g.down.bias = d_b2;
  g.up.host_groups = g.down.host_groups = offsets;
  auto overridden = [](KernelSpec spec, const std::string& fields, const char* what) {
    if (fields.empty()) return spec;
    spec = moejit::examples::override_fields(spec, fields);
    spec.validate();
    fmt::print(stderr, "{} spec (--{}-spec): {}\n", what, what, spec.to_text());
    return spec;
  };
  Kernel k1 = rt.kernel(overridden(fused_spec(rt, g.up, g.up_fusion), overrides.gemm1, "gemm1"));
  Kernel k2 = rt.kernel(overridden(fused_spec(rt, g.down, g.down_fusion), overrides.gemm2, "gemm2"));
  // In the layer the offsets stay on the device: no host copy, no synchronization.
  g.up.host_groups = g.down.host_groups = {};
  g.up.trust_device_groups = g.down.trust_device_groups = true;
  CombineArgs ca = combine_shape(m, tokens);
  ca.input = d_y;
  ca.output = d_out;
  QuantizeFp8Args qx, qh;
  qx.input = d_x, qx.rows = tokens, qx.k = H, qx.output = d_xq, qx.scales = d_xs;
  if (x_permuted) {
    // Permuted as quantized, token-major: each x row quantized once, written to its top-k routed rows.
    qx.row_of_slot = ra.row_of_slot, qx.top_k = m.top_k, qx.out_rows = rows;
  }
  qh.input = d_h, qh.rows = rows, qh.k = I, qh.output = d_hq, qh.scales = d_hs;
  // Each GEMM with its activations' quantization (--weights e4m3).
  auto gemm1 = [&](Stream s) {
    if (fp8) quantize_activations_fp8(rt, qx, s);
    k1.launch(g.up, s);
  };
  auto gemm2 = [&](Stream s) {
    if (fp8 && !h_from_gemm1) quantize_activations_fp8(rt, qh, s);
    k2.launch(g.down, s);
  };

  auto layer = [&] {
    route(rt, ra, nullptr);
    gemm1(nullptr);
    gemm2(nullptr);
    combine(rt, ca, nullptr);
  };

  // Correctness: poisoned intermediates and output (0xFF bytes: bf16 NaN), one layer, reference.
  check_cuda(cudaMemset(d_h, 0xFF, rows * I * 2), "poison h");
  if (fp8) check_cuda(cudaMemset(d_hq, 0xFF, rows * I), "poison quantized h");  // 0xFF: an E4M3 NaN
  if (fp8) check_cuda(cudaMemset(d_hs, 0xFF, rows * ((I + 127) / 128) * 4), "poison h's scales");
  check_cuda(cudaMemset(d_y, 0xFF, rows * H * 2), "poison y");
  check_cuda(cudaMemset(d_out, 0xFF, (std::size_t)tokens * H * 2), "poison out");
  layer();
  check_cuda(cudaDeviceSynchronize(), "layer");
  auto routing = reference::route(ra, logits, w.bias);
  std::vector<int> ids(rows);
  check_cuda(cudaMemcpy(ids.data(), ra.topk_ids, rows * 4, cudaMemcpyDeviceToHost), "ids");
  long routing_mismatches = 0;
  for (long long i = 0; i < rows; ++i) routing_mismatches += ids[i] != routing.topk_ids[i];
  std::vector<int> sample;
  if (tokens <= check_tokens) {
    sample.resize(tokens);
    std::iota(sample.begin(), sample.end(), 0);
  } else {
    std::mt19937 rng(tokens);
    for (int s = 0; s < check_tokens; ++s) sample.push_back(std::uniform_int_distribution<int>(0, tokens - 1)(rng));
  }
  std::vector<double> ref = reference_layer(m, w, x, routing, sample, !h_from_gemm1);
  std::vector<std::uint16_t> out((std::size_t)tokens * H);
  check_cuda(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost), "out");
  double err2 = 0, ref2 = 0;
  long nans = 0;
  for (std::size_t s = 0; s < sample.size(); ++s)
    for (int c = 0; c < H; ++c) {
      double got = bf16_to_float(out[(std::size_t)sample[s] * H + c]), want = ref[s * H + c];
      if (std::isnan(got)) ++nans;
      else err2 += (got - want) * (got - want);
      ref2 += want * want;
    }
  double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
  bool ok = nans == 0 && routing_mismatches == 0 && rel <= 1e-2;

  // Plain grouped GEMMs of the same shapes (no gather, activation, scatter or weights): the
  // fusion overhead is the fused time over these.
  void* d_a_plain = device_alloc(rows * H * 2);
  void* d_c_plain = device_alloc(rows * 2 * I * 2);
  for (int j = 0; j < K; ++j)
    check_cuda(cudaMemcpy(static_cast<char*>(d_a_plain) + (std::size_t)j * tokens * H * 2, d_x, (std::size_t)tokens * H * 2,
                          cudaMemcpyDeviceToDevice), "A for the plain GEMM");
  GroupedGemmArgs plain1 = g.up, plain2 = g.down;
  plain1.fusion = Fusion{};
  plain2.fusion = Fusion{};
  plain1.a = d_a_plain, plain1.c = d_c_plain, plain1.gather_rows = nullptr, plain1.num_tokens = 0, plain1.bias = nullptr;
  plain1.c_type = DType::bf16, plain1.c_scales = nullptr;  // the plain GEMM1 writes bf16
  void* d_a_plain_q = nullptr;
  float* d_a_plain_s = nullptr;
  if (fp8) {  // the plain GEMM1's A in routed order, quantized as the fused one's (scales [H/128][rows])
    d_a_plain_q = device_alloc(rows * H);
    d_a_plain_s = static_cast<float*>(device_alloc(rows * ((H + 127) / 128) * 4));
    QuantizeFp8Args qa = qx;
    qa.input = d_a_plain, qa.rows = rows, qa.output = d_a_plain_q, qa.scales = d_a_plain_s;
    qa.gather_rows = nullptr, qa.num_tokens = 0, qa.row_of_slot = nullptr, qa.top_k = 0, qa.out_rows = 0;  // A already permuted
    quantize_activations_fp8(rt, qa, nullptr);
    plain1.a = d_a_plain_q, plain1.a_scales = d_a_plain_s;
  }
  plain2.c = d_y, plain2.scatter_rows = nullptr, plain2.num_out_rows = 0, plain2.routing_weights = nullptr, plain2.bias = nullptr;
  plain1.host_groups = plain2.host_groups = offsets;
  Kernel p1 = rt.kernel(rt.choose_spec(plain1));
  Kernel p2 = rt.kernel(rt.choose_spec(plain2));
  plain1.host_groups = plain2.host_groups = {};
  plain1.trust_device_groups = plain2.trust_device_groups = true;

  cudaEvent_t ev[5];
  for (auto& e : ev) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
  for (int i = 0; i < 5; ++i) layer();
  StageTimes t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(ev[0]);
    route(rt, ra, nullptr);
    cudaEventRecord(ev[1]);
    gemm1(nullptr);
    cudaEventRecord(ev[2]);
    gemm2(nullptr);
    cudaEventRecord(ev[3]);
    combine(rt, ca, nullptr);
    cudaEventRecord(ev[4]);
    check_cuda(cudaEventSynchronize(ev[4]), "layer");
    float ms[4];
    for (int s = 0; s < 4; ++s) cudaEventElapsedTime(&ms[s], ev[s], ev[s + 1]);
    t.route.push_back(ms[0]), t.gemm1.push_back(ms[1]), t.gemm2.push_back(ms[2]), t.combine.push_back(ms[3]);
    float total;
    cudaEventElapsedTime(&total, ev[0], ev[4]);
    t.total.push_back(total);
  }
  // Layers back to back, with no event between stages or layers (how an engine runs them, and what
  // programmatic launches shorten: each kernel waits for the one ahead inside the GPU, not at a
  // stream boundary; MOEJIT_PDL=0 turns them off), and the same 10 layers captured once into a CUDA
  // graph and replayed (how engines run decode steps: programmatic launches become programmatic
  // edges of the graph). The two are timed in turns, the order flipping every round: at large token
  // counts the clock under the 700 W cap drifts by 10-15% over a second of load, which timing one
  // after the other read as a difference between them (docs/perf.md v40). One warm-up layer on the
  // capture stream first, so that its per-stream buffers exist before the capture.
  std::vector<float> chained, graphed;
  {
    constexpr int kLayers = 10;
    cudaStream_t cap;
    check_cuda(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking), "capture stream");
    const Stream s = reinterpret_cast<Stream>(cap);
    auto layer_on_cap = [&] {
      route(rt, ra, s);
      gemm1(s);
      gemm2(s);
      combine(rt, ca, s);
    };
    layer_on_cap();
    check_cuda(cudaStreamSynchronize(cap), "warm-up layer on the capture stream");
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    check_cuda(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal), "begin capture");
    for (int l = 0; l < kLayers; ++l) layer_on_cap();
    check_cuda(cudaStreamEndCapture(cap, &graph), "end capture");
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate graph");
    for (int i = 0; i < 2; ++i) check_cuda(cudaGraphLaunch(exec, cap), "graph warm-up");
    // The capture stream does not wait for the default one, nor it for the capture stream: without
    // this, the chained layers' first round ran beside the warm-up replays on the same buffers
    // (group offsets, row arrays, h, the tile counters' work), which faulted or hung in most
    // gpt-oss processes at 4096 tokens (session 47).
    check_cuda(cudaStreamSynchronize(cap), "graph warm-up");
    auto time_chained = [&] {
      cudaEventRecord(ev[0]);
      for (int l = 0; l < kLayers; ++l) layer();
      cudaEventRecord(ev[1]);
      check_cuda(cudaEventSynchronize(ev[1]), "chained layers");
      float ms;
      cudaEventElapsedTime(&ms, ev[0], ev[1]);
      chained.push_back(ms / kLayers);
    };
    auto time_graph = [&] {
      cudaEventRecord(ev[0], cap);
      check_cuda(cudaGraphLaunch(exec, cap), "graph launch");
      cudaEventRecord(ev[1], cap);
      check_cuda(cudaEventSynchronize(ev[1]), "graphed layers");
      float ms;
      cudaEventElapsedTime(&ms, ev[0], ev[1]);
      graphed.push_back(ms / kLayers);
    };
    for (int i = 0; i < std::max(reps / 5, 4); ++i) {
      if (i % 2 == 0) time_chained(), time_graph();
      else time_graph(), time_chained();
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(cap);
  }
  std::vector<float> plain_ms[2];
  for (int which = 0; which < 2; ++which) {
    for (int i = 0; i < 3; ++i) which ? p2.launch(plain2, nullptr) : p1.launch(plain1, nullptr);
    for (int i = 0; i < reps; ++i) {
      cudaEventRecord(ev[0]);
      which ? p2.launch(plain2, nullptr) : p1.launch(plain1, nullptr);
      cudaEventRecord(ev[1]);
      check_cuda(cudaEventSynchronize(ev[1]), "plain GEMM");
      float ms;
      cudaEventElapsedTime(&ms, ev[0], ev[1]);
      plain_ms[which].push_back(ms);
    }
  }
  // FP8: x's quantization alone, as GEMM1's stage runs it (permuting or not).
  std::vector<float> quantize_ms;
  for (int i = 0; fp8 && i < reps + 3; ++i) {
    cudaEventRecord(ev[0]);
    quantize_activations_fp8(rt, qx, nullptr);
    cudaEventRecord(ev[1]);
    check_cuda(cudaEventSynchronize(ev[1]), "quantize x");
    float ms;
    cudaEventElapsedTime(&ms, ev[0], ev[1]);
    if (i >= 3) quantize_ms.push_back(ms);
  }
  double flops = 2.0 * rows * (2.0 * I * H + (double)H * I);
  float total = median(t.total);
  fmt::print("{},{},route,{:.4f}\n{},{},gemm1,{:.4f}\n{},{},gemm2,{:.4f}\n{},{},combine,{:.4f}\n{},{},layer,{:.4f}\n", m.name,
             tokens, median(t.route), m.name, tokens, median(t.gemm1), m.name, tokens, median(t.gemm2), m.name, tokens,
             median(t.combine), m.name, tokens, total);
  fmt::print("{},{},gemm1_plain,{:.4f}\n{},{},gemm2_plain,{:.4f}\n", m.name, tokens, median(plain_ms[0]), m.name, tokens,
             median(plain_ms[1]));
  fmt::print("{},{},layer_chained,{:.4f}\n{},{},layer_graph,{:.4f}\n", m.name, tokens, median(chained), m.name, tokens,
             median(graphed));
  if (fp8) fmt::print("{},{},quantize_x,{:.4f}\n", m.name, tokens, median(quantize_ms));
  fmt::print(stderr,
             "{} tokens {}: layer {:.3f} ms ({:.1f} TFLOP/s; back to back {:.3f}, in a graph {:.3f}), route {:.3f}, gemm1 {:.3f} (plain {:.3f}: {:+.1f}%), gemm2 {:.3f} "
             "(plain {:.3f}: {:+.1f}%), combine {:.3f}; checked {} tokens: rel_err {:.2e}, nan {}, routing mismatches {} -> {}\n"
             "  gemm1 {}\n  gemm2 {}\n",
             m.name, tokens, total, flops / total / 1e9, median(chained), median(graphed), median(t.route), median(t.gemm1), median(plain_ms[0]),
             100.0 * (median(t.gemm1) / median(plain_ms[0]) - 1), median(t.gemm2), median(plain_ms[1]),
             100.0 * (median(t.gemm2) / median(plain_ms[1]) - 1), median(t.combine), sample.size(), rel, nans,
             routing_mismatches, ok ? "OK" : "MISMATCH", k1.spec().to_text(), k2.spec().to_text());
  for (auto& e : ev) cudaEventDestroy(e);
  for (void* p : {(void*)d_logits, (void*)d_x, (void*)ra.topk_ids, (void*)ra.topk_weights, (void*)ra.group_offsets,
                  (void*)ra.gather_rows, (void*)ra.scatter_rows, (void*)ra.routing_weights, (void*)ra.row_of_slot, ra.workspace,
                  d_h, d_y, d_out,
                  d_a_plain, d_c_plain, d_xq, (void*)d_xs, d_hq, (void*)d_hs, (void*)d_w1s, (void*)d_w2s, d_a_plain_q,
                  (void*)d_a_plain_s, (void*)d_w1t, (void*)d_w2t})
    cudaFree(p);
  return ok;
}

// Routing alone (no weights needed): time route() and check it against reference::route; for
// the routing cost at shapes whose layer is too big to hold here (DeepSeek-V3 at 16384 tokens).
bool run_route_only(Runtime& rt, const LayerModel& m, int tokens, int reps) {
  std::vector<float> logits = random_logits(m, tokens);
  std::vector<float> bias = m.correction_bias ? random_f32(m.experts, 15, 0.05f) : std::vector<float>{};
  RoutingArgs ra = routing_shape(m, tokens);
  const long long rows = (long long)tokens * m.top_k;
  float* d_logits = device_copy(logits);
  float* d_bias = m.correction_bias ? device_copy(bias) : nullptr;
  ra.logits = d_logits;
  ra.correction_bias = d_bias;
  ra.topk_ids = static_cast<int*>(device_alloc(rows * 4));
  ra.topk_weights = static_cast<float*>(device_alloc(rows * 4));
  ra.group_offsets = static_cast<int*>(device_alloc((m.experts + 1) * 4));
  ra.gather_rows = static_cast<int*>(device_alloc(routed_rows(ra) * 4));
  ra.scatter_rows = static_cast<int*>(device_alloc(routed_rows(ra) * 4));
  ra.routing_weights = static_cast<float*>(device_alloc(routed_rows(ra) * 4));
  ra.workspace_bytes = routing_workspace_bytes(ra);
  ra.workspace = device_alloc(ra.workspace_bytes);
  route(rt, ra, nullptr);
  check_cuda(cudaDeviceSynchronize(), "route");
  auto ref = reference::route(ra, logits, bias);
  std::vector<int> ids(rows), gather(rows);
  check_cuda(cudaMemcpy(ids.data(), ra.topk_ids, rows * 4, cudaMemcpyDeviceToHost), "ids");
  check_cuda(cudaMemcpy(gather.data(), ra.gather_rows, rows * 4, cudaMemcpyDeviceToHost), "gather_rows");
  bool ok = ids == ref.topk_ids && gather == std::vector<int>(ref.gather_rows.begin(), ref.gather_rows.begin() + rows);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 5; ++i) route(rt, ra, nullptr);
  std::vector<float> ms(reps);
  for (auto& t : ms) {
    cudaEventRecord(start);
    route(rt, ra, nullptr);
    cudaEventRecord(stop);
    check_cuda(cudaEventSynchronize(stop), "route");
    cudaEventElapsedTime(&t, start, stop);
  }
  fmt::print("{},{},route_only,{:.4f}\n", m.name, tokens, median(ms));
  fmt::print(stderr, "{} tokens {}: route alone {:.4f} ms; ids and rows {}\n", m.name, tokens, median(ms),
             ok ? "match the reference" : "DO NOT MATCH THE REFERENCE");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  for (void* p : {(void*)d_logits, (void*)d_bias, (void*)ra.topk_ids, (void*)ra.topk_weights, (void*)ra.group_offsets,
                  (void*)ra.gather_rows, (void*)ra.scatter_rows, (void*)ra.routing_weights, ra.workspace})
    cudaFree(p);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_arg = "gpt-oss-120b,qwen3-30b-a3b";
  std::vector<int> token_counts = {16, 1024, 16384};
  int check_tokens = 32, reps = 20;
  bool route_only = false, models_bad = false;
  DType weights = DType::bf16;
  GatherLoad gather_by = GatherLoad::cp_async;
  Fp8Options fp8_options;
  SpecOverrides overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--route-only") {
      route_only = true;
      continue;
    }
    const char* value = i + 1 < argc ? argv[++i] : "";
    if (flag == "--model") model_arg = value;
    else if (flag == "--tokens") token_counts = parse_list(value);
    else if (flag == "--check-tokens") check_tokens = std::atoi(value);
    else if (flag == "--reps") reps = std::atoi(value);
    else if (flag == "--weights" && std::string(value) == "bf16") weights = DType::bf16;
    else if (flag == "--weights" && std::string(value) == "mxfp4") weights = DType::mxfp4;
    else if (flag == "--weights" && std::string(value) == "nvfp4") weights = DType::nvfp4;
    else if (flag == "--weights" && std::string(value) == "e4m3") weights = DType::e4m3;
    else if (flag == "--gather-by" && std::string(value) == "cp_async") gather_by = GatherLoad::cp_async;
    else if (flag == "--gather-by" && std::string(value) == "tma") gather_by = GatherLoad::tma;
    else if (flag == "--fp8-gather" && std::string(value) == "auto") fp8_options.gather = Fp8Gather::automatic;
    else if (flag == "--fp8-gather" && std::string(value) == "quantize") fp8_options.gather = Fp8Gather::quantize;
    else if (flag == "--fp8-gather" && std::string(value) == "gemm") fp8_options.gather = Fp8Gather::gemm;
    else if (flag == "--fp8-h" && std::string(value) == "gemm1") fp8_options.h = Fp8H::gemm1;
    else if (flag == "--fp8-h" && std::string(value) == "quantize") fp8_options.h = Fp8H::quantize;
    else if (flag == "--gemm1-spec") overrides.gemm1 = value;
    else if (flag == "--gemm2-spec") overrides.gemm2 = value;
    else models_bad = true;
  }
  std::vector<const LayerModel*> models;
  std::stringstream names(model_arg == "all" ? "gpt-oss-120b,qwen3-30b-a3b,deepseek-v3,mixtral-8x7b" : model_arg);
  for (std::string name; std::getline(names, name, ',');) {
    const LayerModel* found = nullptr;
    for (const LayerModel& m : kModels)
      if (name == m.name) found = &m;
    if (!found) models.clear(), token_counts.clear();
    else models.push_back(found);
  }
  bool bad_tokens = std::any_of(token_counts.begin(), token_counts.end(), [](int t) { return t < 1; });
  try {
    moejit::examples::skewed_routing_requested();  // ROUTING: random or skewed, checked before any work
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
  if (models_bad || models.empty() || token_counts.empty() || bad_tokens || check_tokens < 1 || reps < 1) {
    fmt::print(stderr,
               "usage: {} [--model gpt-oss-120b|qwen3-30b-a3b|deepseek-v3|mixtral-8x7b|all (comma-separated)] [--tokens 16,1024,16384] "
               "[--check-tokens 32] [--reps 20] [--weights bf16|mxfp4|nvfp4|e4m3] [--gather-by cp_async|tma] "
               "[--fp8-gather auto|quantize|gemm] [--fp8-h gemm1|quantize] [--route-only] [--gemm1-spec FIELDS] [--gemm2-spec FIELDS]\n",
               argv[0]);
    return 2;
  }

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return prewarm(models, token_counts, weights, gather_by, fp8_options);

  Runtime rt;
  fmt::print(stderr, "device: {} ({}, {} SMs); weights {}\n", rt.device_name(), rt.arch().to_text(), rt.sm_count(),
             to_text(weights));
  fmt::print("model,tokens,what,ms\n");
  bool all_ok = true;
  if (route_only) {
    for (const LayerModel* m : models)
      for (int tokens : token_counts) all_ok &= run_route_only(rt, *m, tokens, reps);
    fmt::print(stderr, "{}\n", all_ok ? "routing matches the CPU reference" : "ROUTING DOES NOT MATCH THE REFERENCE");
    return all_ok ? 0 : 1;
  }
  for (const LayerModel* m : models) {
    Weights w = make_weights(*m, weights);
    void* d_w1 = weights != DType::bf16 ? (void*)device_copy(w.q1) : (void*)device_copy(w.w1);
    void* d_w2 = weights != DType::bf16 ? (void*)device_copy(w.q2) : (void*)device_copy(w.w2);
    float* d_b1 = m->expert_bias ? device_copy(w.b1) : nullptr;
    float* d_b2 = m->expert_bias ? device_copy(w.b2) : nullptr;
    float* d_bias = m->correction_bias ? device_copy(w.bias) : nullptr;
    for (int tokens : token_counts) {
      try {
        all_ok &= run_layer(rt, *m, w, weights, gather_by, fp8_options, d_w1, d_w2, d_b1, d_b2, d_bias, tokens, check_tokens, reps,
                            overrides);
      } catch (const SpecError& e) {
        fmt::print(stderr, "{} tokens {}: the fused GEMMs are not available in this build: {}\n", m->name, tokens, e.what());
        all_ok = false;
      }
    }
    for (void* p : {(void*)d_w1, (void*)d_w2, (void*)d_b1, (void*)d_b2, (void*)d_bias}) cudaFree(p);
  }
  fmt::print(stderr, "{}\n", all_ok ? "layer matches the CPU reference" : "LAYER DOES NOT MATCH THE REFERENCE");
  return all_ok ? 0 : 1;
}
