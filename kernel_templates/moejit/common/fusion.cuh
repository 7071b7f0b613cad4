// Fused epilogue math shared by both kernel families (docs/design.md, "Fusions"):
//   acc (+ bias[g][col]) -> activation -> (* routing_weights[r]) -> convert to C's type -> store
// and the compile-time description of a kernel's fusions. Inline PTX for the transcendental
// parts so that no toolkit header is included (NVRTC compile time).
#pragma once
#include "moejit/params.cuh"
#include "moejit/common/types.cuh"
#include "moejit/common/fusion_index.cuh"

namespace moejit {

// Values mirror moejit::Activation and moejit::GluLayout on the host.
enum ActivationKind : int { kActNone = 0, kActSilu = 1, kActGelu = 2, kActSwiglu = 3, kActSwigluOai = 4 };
enum GluKind : int { kGluInterleaved = 0, kGluSplit = 1 };
// kGather: 0 (false) no gather, 1 (true) gathered rows by cp.async, kGatherTma one TMA copy per row
// (Hopper; moejit::GatherLoad on the host).
enum GatherKind : int { kGatherTma = 2 };

// Enumerators rather than static constexpr members: those are variables that NVRTC emits into
// every kernel's PTX as globals (which changed the unfused kernels' generated code).
template <int kGather, bool kScatter, bool kWeight, bool kBias, int kAct, int kGlu, bool kAtomic>
struct FusionConfig {
  enum : int {
    gather = kGather != 0,
    gather_tma = kGather == kGatherTma,
    scatter = kScatter,
    weight = kWeight,
    bias = kBias,
    act = kAct,
    glu = kAct == kActSwiglu || kAct == kActSwigluOai,
    glu_split = (kAct == kActSwiglu || kAct == kActSwigluOai) && kGlu == kGluSplit,
    atomic = kAtomic,
    // Anything that changes the values or where they go (gather alone changes neither).
    epilogue = kScatter || kWeight || kBias || kAct != kActNone || kAtomic,
    any = kGather != 0 || kScatter || kWeight || kBias || kAct != kActNone || kAtomic,
  };
};
using NoFusion = FusionConfig<false, false, false, false, kActNone, kGluInterleaved, false>;

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// 1 / (1 + e^-x); e^-x overflows to inf for x < -88, giving 0 as it should.
__device__ __forceinline__ float sigmoid(float x) { return fast_rcp(1.f + fast_exp2(-1.4426950408889634f * x)); }

// Unary activations (kActNone passes the value through).
template <int kAct>
__device__ __forceinline__ float activate(float x) {
  if constexpr (kAct == kActSilu) {
    return x * sigmoid(x);
  } else if constexpr (kAct == kActGelu) {
    // tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.f + fast_tanh(inner));
  } else {
    return x;
  }
}

// GLU activations of one gate/up pair.
template <int kAct>
__device__ __forceinline__ float activate_glu(float gate, float up) {
  if constexpr (kAct == kActSwigluOai) {
    // gpt-oss: gate clamped to max 7, up to [-7, 7]; gate * sigmoid(1.702 gate) * (up + 1).
    // Compared so that NaN stays NaN, as with torch.clamp and the CPU reference (a NaN gate or up
    // must not come out as the clamp bound).
    const float g = gate > 7.f ? 7.f : gate;
    const float u = up > 7.f ? 7.f : (up < -7.f ? -7.f : up);
    return g * sigmoid(1.702f * g) * (u + 1.f);
  } else {
    return gate * sigmoid(gate) * up;  // swiglu: silu(gate) * up
  }
}

// Bias of column `col` (GEMM column, before a GLU halves N) of group g; 0 past N.
__device__ __forceinline__ float bias_at(const FusionParams& f, int group, int n, int col) {
  return col < n ? __ldg(f.bias + static_cast<long long>(group) * n + col) : 0.f;
}

// One element of C, converted from fp32.
template <int kType>
__device__ __forceinline__ unsigned short to_half_bits(float v) {
  unsigned out;
  if (kType == kBF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(0.f), "f"(v));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(0.f), "f"(v));
  }
  return (unsigned short)(out & 0xffffu);
}

}  // namespace moejit
