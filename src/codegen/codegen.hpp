// Stage 2: KernelSpec -> CUDA C++ translation unit (rendered with fmt from kernel_templates/).
// Deterministic: the same spec and templates give the same bytes.
#pragma once
#include <string>

#include "codegen/template_store.hpp"
#include "moejit/spec.hpp"

namespace moejit {

inline constexpr const char* kKernelEntryName = "moejit_grouped_gemm";

struct GeneratedSource {
  std::string file_name;  // "moejit_<spec key>.cu", the name NVRTC reports errors against
  std::string source;
};

// The spec must be valid (validate() is called and throws SpecError otherwise).
GeneratedSource generate_source(const KernelSpec& spec, const TemplateStore& templates);

}  // namespace moejit
