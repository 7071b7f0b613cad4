#include "codegen/codegen.hpp"

#include <fmt/format.h>

namespace moejit {
namespace {

// Template-parameter spellings of the ABI enums in kernel_templates/moejit/common/*.cuh.
const char* dtype_code(DType t) {
  switch (t) {
    case DType::bf16: return "moejit::kBF16";
    case DType::f16: return "moejit::kF16";
    case DType::f32: return "moejit::kF32";
    case DType::e4m3: return "moejit::kE4M3";
    case DType::mxfp4: return "moejit::kMXFP4";
    case DType::nvfp4: return "moejit::kNVFP4";
  }
  return "?";
}
const char* layout_code(GroupLayout l) {
  return l == GroupLayout::contiguous ? "moejit::kLayoutContiguous" : "moejit::kLayoutMasked";
}
const char* scheduler_code(Scheduler s) {
  return s == Scheduler::static_persistent ? "moejit::kSchedulerStatic" : "moejit::kSchedulerDynamic";
}

// moejit::FusionConfig<gather, scatter, weight, bias, activation, glu, atomic> (common/fusion.cuh);
// gather is false, true (cp.async) or moejit::kGatherTma.
std::string fusion_code(const Fusion& f) {
  static constexpr const char* kActs[] = {"moejit::kActNone", "moejit::kActSilu", "moejit::kActGelu", "moejit::kActSwiglu",
                                          "moejit::kActSwigluOai"};
  const char* gather = !f.gather_a ? "false" : f.gather_by == GatherLoad::tma ? "moejit::kGatherTma" : "true";
  return fmt::format("moejit::FusionConfig<{}, {}, {}, {}, {}, {}, {}>", gather, f.scatter_c, f.routing_weight, f.bias,
                     kActs[static_cast<int>(f.activation)],
                     f.glu == GluLayout::split ? "moejit::kGluSplit" : "moejit::kGluInterleaved", f.atomic);
}

}  // namespace

GeneratedSource generate_source(const KernelSpec& spec, const TemplateStore& templates) {
  spec.validate();
  // Fused kernels take one more parameter (FusionParams): their own instantiation files, so
  // that the unfused kernels' generated sources stay as they were. The portable fused file
  // passes B's type, so it also instantiates the portable FP8 and 4-bit kernels with fusions; the
  // Hopper FP8 and 4-bit kernels have fused twins (what they fuse: KernelSpec::validate).
  // A quantized C (c=e4m3) is written by the fused epilogue, with its scales in FusionParams.
  const bool fused = spec.fusion.any() || spec.c == DType::e4m3;
  const char* instantiation = spec.family == KernelFamily::portable && spec.is_weight_only_4bit() && !fused
                                  ? "portable_w4_grouped_gemm.cu.in"
                              : spec.family == KernelFamily::portable
                                  ? (fused ? "portable_grouped_gemm_fused.cu.in" : "portable_grouped_gemm.cu.in")
                              : spec.a == DType::e4m3      ? (fused ? "hopper_fp8_grouped_gemm_fused.cu.in" : "hopper_fp8_grouped_gemm.cu.in")
                              : spec.is_weight_only_4bit() ? (fused ? "hopper_w4_grouped_gemm_fused.cu.in" : "hopper_w4_grouped_gemm.cu.in")
                              : fused                      ? "hopper_grouped_gemm_fused.cu.in"
                                                           : "hopper_grouped_gemm.cu.in";
  GeneratedSource out;
  out.file_name = fmt::format("moejit_{}.cu", spec.key().hex());
  out.source = fmt::format(
      fmt::runtime(templates.file(instantiation)), fmt::arg("spec", spec.to_text()), fmt::arg("block_m", spec.tile.m),
      fmt::arg("block_n", spec.tile.n), fmt::arg("block_k", spec.tile.k), fmt::arg("stages", spec.stages),
      fmt::arg("warps_m", spec.warps_m), fmt::arg("warps_n", spec.warps_n), fmt::arg("type_ab", dtype_code(spec.a)), fmt::arg("type_b", dtype_code(spec.b)),
      fmt::arg("type_c", dtype_code(spec.c)), fmt::arg("layout", layout_code(spec.layout)),
      fmt::arg("scheduler", scheduler_code(spec.scheduler)), fmt::arg("smem_bytes", spec.dynamic_smem_bytes()),
      fmt::arg("threads", spec.threads_per_cta()), fmt::arg("min_ctas", spec.min_ctas_per_sm()),
      fmt::arg("cluster_n", spec.cluster_n),
      // CTA pairs along M (cluster=2x1) add a trailing template argument; 1x1 and 1x2 kernels are
      // generated exactly as before it.
      fmt::arg("cluster_m_arg", spec.cluster_m == 1 && spec.split == SplitK::none && spec.tail == 0
                                    ? std::string()
                                    : fmt::format(", {}", spec.cluster_m)),
      // split=tail: one more trailing template argument (kSplitTail), after kClusterM.
      fmt::arg("split_arg", spec.split != SplitK::none ? ", true" : spec.tail != 0 ? ", false" : ""),
      // Absorbed tail rows (tail=t, the 16-bit Hopper kernel): kTailRows after kSplitTail and as
      // the shared-memory formula's last argument, and a fourth tensor map (t-row boxes of A).
      // Nothing without, so that the sources of other specs stay as they were.
      fmt::arg("tail_arg", spec.tail == 0 ? std::string() : fmt::format(", {}", spec.tail)),
      fmt::arg("tail_param", spec.tail == 0 ? "" : ",\n    const __grid_constant__ moejit::TmaDescriptor tma_tail"),
      fmt::arg("tail_call", spec.tail == 0 ? "" : ", &tma_tail"),
      // FP8 CTA pairs (cluster=2x1, never split): kSplitTail = false, then kClusterM.
      fmt::arg("fp8_cluster_arg", spec.cluster_m == 2 ? ", false, 2" : ""),
      fmt::arg("fusion", fusion_code(spec.fusion)),
      fmt::arg("b_channels", spec.b_scales == ScaleB::channels ? "true" : "false"),
      fmt::arg("grid_dependency", spec.grid_dependency() ? "true" : "false"),
      // Tile order (band=N, mix=R, pair_order=interleaved): defines ahead of the first include (common/scheduler.cuh reads
      // them); nothing without, so that the sources of specs without them stay as they were.
      fmt::arg("tile_order", (spec.band == 0 ? std::string() : fmt::format("#define MOEJIT_TILE_BAND {}\n", spec.band)) +
                                 (spec.mix == 0 ? std::string() : fmt::format("#define MOEJIT_TILE_MIX_ROWS {}\n", spec.mix)) +
                                 (spec.pair_order == PairOrder::plain ? std::string() : std::string("#define MOEJIT_PAIR_ODD_INTERLEAVED 1\n"))));
  return out;
}

}  // namespace moejit
