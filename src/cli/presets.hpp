// Model presets (cache/presets/*.preset): the MoE layer shapes a model serves, turned into
// the kernels the runtime will request (grouped GEMMs through the runtime's own choose_spec,
// routing kernels through RoutingSpec::for_route / for_combine), for offline prewarm.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "moejit/routing.hpp"
#include "moejit/runtime.hpp"
#include "moejit/spec.hpp"

namespace moejit {

struct ModelPreset {
  std::string name;
  int experts = 0, topk = 0, hidden = 0, intermediate = 0, up_n = 0;
  std::vector<int> tokens;
  std::vector<DType> dtypes{DType::bf16};
  std::vector<GroupLayout> layouts{GroupLayout::contiguous};
  // Weight-only 4-bit formats (key weights=mxfp4,nvfp4) served with bf16 activations; their kernels
  // are prewarmed as well. Empty: 16-bit / FP8 only.
  std::vector<DType> weights;

  // The whole layer (examples/moe_layer: route -> up GEMM -> down GEMM -> combine); all optional.
  std::optional<RoutingMethod> routing;      // routing=: the route kernel of this method
  std::vector<DType> logits{DType::f32};     // logits=: router logits types served
  std::optional<Fusion> up_fusion, down_fusion;  // up_fusion= / down_fusion=: the fused GEMMs
  // plain=: also the unfused grouped GEMMs. Default: yes when neither GEMM has a fusion key.
  bool plain = true;
  bool layer() const { return up_fusion || down_fusion; }
};

// NAME is looked up as NAME.preset in $MOEJIT_PRESET_DIR, then in the source tree's cache/presets;
// a path to a file also works. Throws InvalidArgument naming the problem.
ModelPreset load_preset(const std::string& name_or_path);
std::vector<std::string> preset_names();

// How the preset's serving code calls the runtime for one GEMM of the layer at `tokens` tokens:
// routed rows spread evenly over min(E, tokens * topk) experts (prewarm cannot know the real
// routing), contiguous (offsets) or masked (capacity = fullest expert rounded up to 64), with
// `fusion` and the pointers it needs left null. host_groups points into `groups`.
struct LayerGemmCall {
  GroupedGemmArgs args;
  std::vector<int> groups;
};
enum class LayerGemm { up, down };
LayerGemmCall layer_gemm_call(const ModelPreset& preset, LayerGemm gemm, DType ab_type, std::optional<DType> b_type,
                              GroupLayout layout, int tokens, const Fusion& fusion);

struct PrewarmPlan {
  std::vector<KernelSpec> gemms;       // deduplicated, in preset order
  std::vector<RoutingSpec> routing;    // route (per logits type), then combine
  // Kernels the layer would request that this build cannot make (a fusion the format's kernels
  // do not have yet): one line each, "up: <the SpecError, which names the spec and why>".
  std::vector<std::string> unavailable;
};
// Everything the preset's layers request at its token counts on a device of `arch` with
// `sm_count` SMs: each GEMM's spec is Runtime::choose_spec of layer_gemm_call's arguments.
PrewarmPlan preset_plan(const ModelPreset& preset, const Arch& arch, int sm_count);
// The GEMM part of preset_plan (kept for callers that want specs only).
std::vector<KernelSpec> preset_specs(const ModelPreset& preset, const Arch& arch, int sm_count);

}  // namespace moejit
