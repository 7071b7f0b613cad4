#include "runtime/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "moejit/errors.hpp"

namespace moejit {
namespace {

template <typename... Args>
[[noreturn]] void bad(fmt::format_string<Args...> format, Args&&... args) {
  throw InvalidArgument("grouped_gemm: " + fmt::format(format, std::forward<Args>(args)...));
}

void check_pointer(const void* p, const char* name, std::uintptr_t alignment) {
  if (!p) bad("{} is null", name);
  if (reinterpret_cast<std::uintptr_t>(p) % alignment)
    bad("{}={} is not {}-byte aligned", name, p, alignment);
}

}  // namespace

void validate_args(const GroupedGemmArgs& a) {
  if (a.ab_type != DType::bf16 && a.ab_type != DType::f16 && a.ab_type != DType::e4m3)
    bad("ab_type={} (expected bf16, f16 or e4m3)", to_text(a.ab_type));
  if (a.c_type != DType::bf16 && a.c_type != DType::f16 && a.c_type != DType::f32 && a.c_type != DType::e4m3)
    bad("c_type={} (expected bf16, f16, f32, or e4m3 with ab_type=e4m3)", to_text(a.c_type));
  if (a.c_type == DType::e4m3) {
    // C quantized in the epilogue: E4M3 codes plus one fp32 scale per 128 output columns of a row
    // (the 1x128 activation blocks the next FP8 GEMM reads as a_scales).
    if (a.ab_type != DType::e4m3) bad("c_type=e4m3 with ab_type={} (a quantized C comes from the FP8 kernel: ab_type=e4m3)", to_text(a.ab_type));
    check_pointer(a.c_scales, "c_scales (c_type=e4m3: fp32 [ceil(N_out/128)][rows of C])", 4);
  } else if (a.c_scales) {
    bad("c_scales={} but c_type={} takes no scales (expected null; c_type=e4m3 only)", static_cast<const void*>(a.c_scales),
        to_text(a.c_type));
  }
  if (a.ab_type == DType::e4m3) {
    // FP8 with DeepSeek-V3 block scales (layouts in include/moejit/formats.hpp).
    // 16-byte aligned: the Hopper kernel copies them by TMA (a tensor map of the array's 16-byte rows).
    check_pointer(a.a_scales, "a_scales (ab_type=e4m3: fp32 [ceil(K/128)][rows of A])", 16);
    check_pointer(a.b_scales,
                  a.b_scale_layout == ScaleB::channels ? "b_scales (ab_type=e4m3, b_scale_layout=channels: fp32 [num_groups][N])"
                                                       : "b_scales (ab_type=e4m3: fp32 [num_groups][ceil(N/128)][ceil(K/128)])",
                  4);
    // TMA: row strides of A and B (K bytes) must be multiples of 16.
    if (a.k % 16) bad("k={} (ab_type=e4m3: expected a multiple of 16, the 16-byte row alignment TMA needs)", a.k);
  } else {
    if (a.a_scales) bad("a_scales={} but ab_type={} takes no scales (expected null)", static_cast<const void*>(a.a_scales), to_text(a.ab_type));
    if (a.b_scales)
      bad("b_scales={} but ab_type={}{} takes no separate scales (expected null)", a.b_scales, to_text(a.ab_type),
          a.b_type ? fmt::format(", b_type={} (scales are inside the packed blocks)", to_text(*a.b_type)) : "");
  }
  if (a.b_scale_layout != ScaleB::blocks && a.ab_type != DType::e4m3)
    bad("b_scale_layout={} but ab_type={} (per-channel weight scales are for FP8, ab_type=e4m3)", to_text(a.b_scale_layout),
        to_text(a.ab_type));
  if (a.b_type && *a.b_type != a.ab_type) {
    // Weight-only 4-bit: B pre-arranged by pack_w4_sm90 (include/moejit/formats.hpp).
    const DType b = *a.b_type;
    if (b != DType::mxfp4 && b != DType::nvfp4)
      bad("b_type={} with ab_type={} (expected b_type equal to ab_type, or mxfp4|nvfp4 with ab_type=bf16)", to_text(b),
          to_text(a.ab_type));
    if (a.ab_type != DType::bf16) bad("ab_type={} with b_type={} (4-bit weights take bf16 activations)", to_text(a.ab_type), to_text(b));
    const int block = b == DType::mxfp4 ? 32 : 16;
    if (a.k % block) bad("k={} (b_type={}: expected a multiple of {}, its scale block)", a.k, to_text(b), block);
    if (b == DType::nvfp4) check_pointer(a.b_tensor_scales, "b_tensor_scales (b_type=nvfp4: fp32 [num_groups])", 4);
    else if (a.b_tensor_scales) bad("b_tensor_scales={} but b_type=mxfp4 has none (expected null)", static_cast<const void*>(a.b_tensor_scales));
  } else if (a.b_tensor_scales) {
    bad("b_tensor_scales={} but b_type={} has none (expected null; nvfp4 only)", static_cast<const void*>(a.b_tensor_scales),
        to_text(a.b_format()));
  }
  check_pointer(a.a, "a", 16);
  check_pointer(a.b, "b", 16);
  check_pointer(a.c, "c", 16);
  if (a.num_groups < 1) bad("num_groups={} (expected at least 1)", a.num_groups);
  if (a.num_groups > (1 << 20)) bad("num_groups={} (at most {} supported)", a.num_groups, 1 << 20);
  if (a.n < 1 || a.n % 8) bad("n={} (expected a positive multiple of 8: rows of B and C are read in 16-byte pieces)", a.n);
  if (a.k < 1 || a.k % 8) bad("k={} (expected a positive multiple of 8: rows of A and B are read in 16-byte pieces)", a.k);
  long long rows = 0;
  if (a.layout == GroupLayout::contiguous) {
    check_pointer(a.group_offsets, "group_offsets", 4);
    if (a.total_rows < 0) bad("total_rows={} (expected >= 0)", a.total_rows);
    rows = a.total_rows;
  } else {
    check_pointer(a.group_counts, "group_counts", 4);
    if (a.capacity < 1) bad("capacity={} (expected >= 1 rows per group in the masked layout)", a.capacity);
    rows = static_cast<long long>(a.capacity) * a.num_groups;
    if (rows > INT32_MAX) bad("capacity × num_groups = {} rows (at most {})", rows, INT32_MAX);
  }
  if (!a.expected_group_rows.empty()) {
    if (a.expected_group_rows.size() != static_cast<std::size_t>(a.num_groups))
      bad("expected_group_rows has {} entries (expected num_groups = {} row counts)", a.expected_group_rows.size(), a.num_groups);
    long long sum = 0;
    for (int i = 0; i < a.num_groups; ++i) {
      const int r = a.expected_group_rows[i];
      const long long most = a.layout == GroupLayout::masked ? a.capacity : rows;
      if (r < 0 || r > most) bad("expected_group_rows[{}]={} (expected 0..{})", i, r, most);
      sum += r;
    }
    if (sum > rows) bad("expected_group_rows sum to {} rows, past the {} the layout holds", sum, rows);
  }
  if (a.expected_rows < 0 || a.expected_rows > rows)
    bad("expected_rows={} (expected 0, or 1..{}: the rows the groups can hold, {})", a.expected_rows, rows,
        a.layout == GroupLayout::contiguous ? "total_rows" : "capacity × num_groups");
  // Element offsets are 64-bit in the kernels, row indices 32-bit.
  if (static_cast<long long>(a.num_groups) * a.n > INT32_MAX)
    bad("num_groups × n = {} rows of B (at most {})", static_cast<long long>(a.num_groups) * a.n, INT32_MAX);
  // FP8: the Hopper kernel addresses A's scales by a 32-bit element coordinate (its TMA copies).
  if (a.ab_type == DType::e4m3 && (a.k + 127LL) / 128 * std::max(rows, (long long)a.num_tokens) > INT32_MAX)
    bad("ceil(k/128) × rows = {} A scales (ab_type=e4m3: at most {}, the TMA copies' 32-bit coordinates)",
        (a.k + 127LL) / 128 * std::max(rows, (long long)a.num_tokens), INT32_MAX);
}

void validate_fusion_args(const GroupedGemmArgs& a, const Fusion& f) {
  // Which kernels have fusions with FP8 / 4-bit operands is the spec's business (KernelSpec::validate:
  // the portable family has them all). FP8 split GLU: a tile's up rows (n/2 + ...) must share one
  // 128-row B scale block with each other, which holds for every tile when (n/2) % 128 == 0.
  if (f.glu_activation() && f.glu == GluLayout::split && a.ab_type == DType::e4m3 && (a.n / 2) % 128)
    bad("n={} with ab_type=e4m3, act={}, glu=split: the up half starts at column n/2, which must be a multiple of 128 "
        "(the 128x128 B scale blocks; expected n % 256 == 0, or glu=interleaved)",
        a.n, to_text(f.activation));
  // Each pointer exactly when its flag is set; a pointer (or count) without its flag is an error
  // too, so that a forgotten flag cannot silently drop a fusion the caller meant to have.
  if (f.gather_a) {
    check_pointer(a.gather_rows, "gather_rows (fuse=gather)", 4);
    if (a.num_tokens < 1) bad("num_tokens={} with fuse=gather (expected the rows of A in token order, >= 1)", a.num_tokens);
    // The Hopper kernels number A's gathered rows in 16-byte chunks of 32 bits (hopper/gather.cuh).
    if ((unsigned long long)a.num_tokens * (unsigned long long)a.k >= (1ull << 35) - 16)
      bad("num_tokens={} × k={} with fuse=gather: at most 2^35 - 16 elements of A (rows are addressed by 32-bit "
          "16-byte chunk numbers)", a.num_tokens, a.k);
  } else {
    if (a.gather_rows) bad("gather_rows is set without fuse=gather (in the kernel's spec or args.fusion)");
    if (a.num_tokens != 0) bad("num_tokens={} is set without fuse=gather (in the kernel's spec or args.fusion)", a.num_tokens);
  }
  if (f.scatter_c) {
    check_pointer(a.scatter_rows, "scatter_rows (fuse=scatter)", 4);
    if (a.num_out_rows < 1) bad("num_out_rows={} with fuse=scatter (expected the rows of C, >= 1)", a.num_out_rows);
  } else {
    if (a.scatter_rows) bad("scatter_rows is set without fuse=scatter (in the kernel's spec or args.fusion)");
    if (a.num_out_rows != 0) bad("num_out_rows={} is set without fuse=scatter (in the kernel's spec or args.fusion)", a.num_out_rows);
  }
  if (f.routing_weight) check_pointer(a.routing_weights, "routing_weights (fuse=weight)", 4);
  else if (a.routing_weights) bad("routing_weights is set without fuse=weight (in the kernel's spec or args.fusion)");
  if (f.bias) check_pointer(a.bias, "bias (fuse=bias)", 4);
  else if (a.bias) bad("bias is set without fuse=bias (in the kernel's spec or args.fusion)");
  if (f.atomic && !f.scatter_c) bad("fusion: fuse=atomic needs fuse=scatter");
  if (f.atomic && a.c_type != DType::f32) bad("c_type={} with fuse=atomic (atomic accumulation needs f32)", to_text(a.c_type));
  if (f.glu_activation() && a.n % 16)
    bad("n={} with act={}: a GLU activation writes n/2 columns, which must be a multiple of 8 (expected n % 16 == 0)", a.n,
        to_text(f.activation));
  if (a.c_type == DType::e4m3) {
    const int n_out = f.glu_activation() ? a.n / 2 : a.n;
    if (n_out % 16)
      bad("n={} with c_type=e4m3: C's {} columns must be a multiple of 16 (16-byte rows of E4M3, and the next FP8 GEMM's K)",
          a.n, n_out);
    if (f.scatter_c) bad("c_type=e4m3 with fuse=scatter (a quantized C is written in routed order, with its scales)");
  }
}

void validate_args_match_spec(const GroupedGemmArgs& a, const KernelSpec& spec) {
  if (a.fusion.any() && !(a.fusion == spec.fusion))
    bad("fusion (fuse/act/glu of the args) differs from the kernel's: it was built for {}", spec.to_text());
  validate_fusion_args(a, spec.fusion);
  if (a.layout != spec.layout)
    bad("layout={} but the kernel was built for layout={}", to_text(a.layout), to_text(spec.layout));
  if (a.ab_type != spec.a) bad("ab_type={} but the kernel was built for a={}", to_text(a.ab_type), to_text(spec.a));
  if (a.b_format() != spec.b) bad("b_type={} but the kernel was built for b={}", to_text(a.b_format()), to_text(spec.b));
  if (a.c_type != spec.c) bad("c_type={} but the kernel was built for c={}", to_text(a.c_type), to_text(spec.c));
  if (a.b_scale_layout != spec.b_scales)
    bad("b_scale_layout={} but the kernel was built for b_scales={}", to_text(a.b_scale_layout), to_text(spec.b_scales));
}

void validate_groups(const GroupedGemmArgs& a, std::span<const int> g) {
  if (a.layout == GroupLayout::contiguous) {
    if (g.size() != static_cast<std::size_t>(a.num_groups) + 1)
      bad("host_groups has {} entries (expected num_groups + 1 = {} offsets)", g.size(), a.num_groups + 1);
    if (g[0] < 0) bad("group_offsets[0]={} is negative", g[0]);
    for (int i = 0; i < a.num_groups; ++i)
      if (g[i + 1] < g[i]) bad("group_offsets are not monotonic: group_offsets[{}]={} < group_offsets[{}]={}", i + 1, g[i + 1], i, g[i]);
    if (g.back() > a.total_rows)
      bad("group_offsets[{}]={} is past the end of A (total_rows={})", a.num_groups, g.back(), a.total_rows);
  } else {
    if (g.size() != static_cast<std::size_t>(a.num_groups))
      bad("host_groups has {} entries (expected num_groups = {} counts)", g.size(), a.num_groups);
    for (int i = 0; i < a.num_groups; ++i)
      if (g[i] < 0 || g[i] > a.capacity) bad("group_counts[{}]={} (expected 0..capacity={})", i, g[i], a.capacity);
  }
}

std::vector<int> group_rows_from(const GroupedGemmArgs& a, const std::vector<int>& g) {
  if (a.layout == GroupLayout::masked) return g;
  std::vector<int> rows(a.num_groups);
  for (int i = 0; i < a.num_groups; ++i) rows[i] = g[i + 1] - g[i];
  return rows;
}

}  // namespace moejit
