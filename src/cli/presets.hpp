// Model presets (cache/presets/*.preset): the MoE layer shapes a model serves, turned into
// the kernel specs the runtime's heuristic would request, for offline prewarm.
#pragma once
#include <string>
#include <vector>

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
};

// NAME is looked up as NAME.preset in $MOEJIT_PRESET_DIR, then in the source tree's cache/presets;
// a path to a file also works. Throws InvalidArgument naming the problem.
ModelPreset load_preset(const std::string& name_or_path);
std::vector<std::string> preset_names();
// Every spec the runtime would choose for the preset's layers and token counts (deduplicated).
std::vector<KernelSpec> preset_specs(const ModelPreset& preset, const Arch& arch, int sm_count);

}  // namespace moejit
