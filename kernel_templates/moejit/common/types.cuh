// Element type codes (part of the ABI; mirrored by moejit::DType on the host) and
// the few conversions kernels need, in inline PTX so that no toolkit header is included
// (every header costs NVRTC compile time).
#pragma once

namespace moejit {

// kMXFP4 / kNVFP4: 4-bit weights (E2M1 codes + E8M0 scale per 32, or + E4M3 scale per 16 and an
// fp32 scale per expert), only as B of the weight-only kernels (hopper_w4/).
enum DTypeCode : int { kBF16 = 0, kF16 = 1, kF32 = 2, kE4M3 = 3, kMXFP4 = 4, kNVFP4 = 5 };

template <int kType> struct StorageOf;
template <> struct StorageOf<kBF16> { using type = unsigned short; };
template <> struct StorageOf<kF16> { using type = unsigned short; };
template <> struct StorageOf<kF32> { using type = float; };

// Two fp32 values -> packed 16-bit pair (lo in the low half), round to nearest even.
template <int kType>
__device__ __forceinline__ unsigned pack_pair(float lo, float hi) {
  unsigned out;
  if (kType == kBF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
  }
  return out;
}

// Stores two adjacent output elements (column pair) of type kType.
template <int kType>
__device__ __forceinline__ void store_pair(void* c, long long index, float v0, float v1) {
  if (kType == kF32) {
    *reinterpret_cast<float2*>(static_cast<float*>(c) + index) = make_float2(v0, v1);
  } else {
    *reinterpret_cast<unsigned*>(static_cast<unsigned short*>(c) + index) = pack_pair<kType>(v0, v1);
  }
}

// Stores one output element (used where a pair would cross N).
template <int kType>
__device__ __forceinline__ void store_one(void* c, long long index, float v) {
  if (kType == kF32) {
    static_cast<float*>(c)[index] = v;
  } else {
    static_cast<unsigned short*>(c)[index] = (unsigned short)(pack_pair<kType>(v, 0.f) & 0xffffu);
  }
}

}  // namespace moejit
