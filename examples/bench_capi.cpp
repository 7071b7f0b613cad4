// A C entry point into moejit for tests/gpu/torch_turns.py, which times moejit and
// torch._grouped_mm launch by launch in one process (ctypes; libmoejit_bench_capi.so). Timed in
// separate processes, the same kernel's time at 16384 tokens moved by up to 12% with what ran in
// the seconds before it (the 700 W cap; docs/perf.md v31), torch's as much: in turns both share
// the clocks. A benchmarking aid, not part of the public API.
//
// BENCH_CAPI_SPECS (optional): field overrides applied to the heuristic's spec of every launch, as
// bench_suite's BENCH_SPECS ("tile=128x192x128,cluster=2x1"), to time or probe one config.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>

#include "moejit/moejit.hpp"
#include "spec_overrides.hpp"

namespace {

void copy_text(const std::string& text, char* out, int out_len) {
  if (!out || out_len <= 0) return;
  const std::size_t n = std::min<std::size_t>(text.size(), (std::size_t)out_len - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

int launch(void* runtime, moejit::DType ab, const void* a, const void* b, void* c, const float* a_scales,
           const float* b_scales, const int* d_offsets, const int* h_offsets, int groups, int n, int k, void* stream,
           char* spec_out, int spec_len, char* err, int err_len, std::optional<moejit::DType> b_type = std::nullopt,
           const float* b_tensor_scales = nullptr) {
  if (!runtime || !h_offsets || groups < 0) {
    copy_text("moejit_bench: runtime and host offsets must be non-null and groups >= 0", err, err_len);
    return -1;
  }
  try {
    auto& rt = *static_cast<moejit::Runtime*>(runtime);
    const moejit::GroupedGemmArgs args{.ab_type = ab, .a = a, .b = b, .c = c, .num_groups = groups, .n = n, .k = k,
                                       .group_offsets = d_offsets, .total_rows = h_offsets[groups],
                                       .host_groups = std::span<const int>(h_offsets, (std::size_t)groups + 1),
                                       .a_scales = a_scales, .b_scales = b_scales, .b_tensor_scales = b_tensor_scales,
                                       .b_type = b_type};
    const char* overrides = std::getenv("BENCH_CAPI_SPECS");
    if (overrides && *overrides) {
      const moejit::KernelSpec spec = moejit::examples::override_fields(rt.choose_spec(args), overrides);
      if (spec_out) copy_text(spec.to_text(), spec_out, spec_len);
      rt.kernel(spec).launch(args, static_cast<moejit::Stream>(stream));
      return 0;
    }
    if (spec_out) copy_text(rt.choose_spec(args).to_text(), spec_out, spec_len);
    rt.grouped_gemm(args, static_cast<moejit::Stream>(stream));
    return 0;
  } catch (const std::exception& e) {
    copy_text(e.what(), err, err_len);
    return -1;
  }
}

}  // namespace

extern "C" {

// A Runtime on the current device's primary context (torch's), or null with the reason in err.
void* moejit_bench_runtime(char* err, int err_len) {
  try {
    return new moejit::Runtime();
  } catch (const std::exception& e) {
    copy_text(e.what(), err, err_len);
    return nullptr;
  }
}

void moejit_bench_runtime_free(void* runtime) { delete static_cast<moejit::Runtime*>(runtime); }

// C = A x B^T per group, bf16 C, contiguous layout: A [rows][k], B [groups][n][k], C [rows][n];
// d_offsets / h_offsets: groups + 1 ints (device / host). Launches the runtime's choice (its
// heuristic) on `stream` (a CUstream; null = the default stream) and writes its spec text to
// spec_out. Returns 0, or -1 with the reason in err.
//   _bf16: A and B bf16.
//   _fp8:  A and B e4m3 with the DeepSeek-V3 block scales (include/moejit/formats.hpp): a_scales
//          fp32 [ceil(k/128)][rows], b_scales fp32 [groups][ceil(n/128)][ceil(k/128)].
int moejit_bench_grouped_gemm_bf16(void* runtime, const void* a, const void* b, void* c, const int* d_offsets,
                                   const int* h_offsets, int groups, int n, int k, void* stream, char* spec_out,
                                   int spec_len, char* err, int err_len) {
  return launch(runtime, moejit::DType::bf16, a, b, c, nullptr, nullptr, d_offsets, h_offsets, groups, n, k, stream,
                spec_out, spec_len, err, err_len);
}

int moejit_bench_grouped_gemm_fp8(void* runtime, const void* a, const void* b, void* c, const float* a_scales,
                                  const float* b_scales, const int* d_offsets, const int* h_offsets, int groups, int n,
                                  int k, void* stream, char* spec_out, int spec_len, char* err, int err_len) {
  return launch(runtime, moejit::DType::e4m3, a, b, c, a_scales, b_scales, d_offsets, h_offsets, groups, n, k, stream,
                spec_out, spec_len, err, err_len);
}

// Weight-only 4-bit: A bf16, B pre-arranged by pack_w4_sm90 (include/moejit/formats.hpp, "W4 SM90";
// nvfp4 = 0: MXFP4, 1: NVFP4), b_tensor_scales fp32 [groups] for NVFP4 (null for MXFP4).
int moejit_bench_grouped_gemm_w4(void* runtime, int nvfp4, const void* a, const void* b, void* c,
                                 const float* b_tensor_scales, const int* d_offsets, const int* h_offsets, int groups,
                                 int n, int k, void* stream, char* spec_out, int spec_len, char* err, int err_len) {
  return launch(runtime, moejit::DType::bf16, a, b, c, nullptr, nullptr, d_offsets, h_offsets, groups, n, k, stream,
                spec_out, spec_len, err, err_len, nvfp4 ? moejit::DType::nvfp4 : moejit::DType::mxfp4,
                nvfp4 ? b_tensor_scales : nullptr);
}

}  // extern "C"
