// Stage 3a: generated source -> cubin with NVRTC. Needs no GPU.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "codegen/codegen.hpp"
#include "codegen/template_store.hpp"
#include "moejit/spec.hpp"

namespace moejit {

struct CompileOptions {
  bool line_info = false;
};

struct CompileResult {
  std::string cubin;
  std::string resources;  // ptxas lines of the NVRTC log (registers, spills, shared memory)
  std::string log;        // whole NVRTC log
  double wall_ms = 0;
};

class NvrtcCompiler {
 public:
  explicit NvrtcCompiler(CompileOptions options = {});

  // The NVRTC options for an arch; part of the cache key.
  std::vector<std::string> options_for(const Arch& arch) const;
  static std::string nvrtc_version();  // "13.0"
  // The toolkit include folder found at run time: $CUDA_HOME, $CUDA_PATH, then the build-time path.
  static std::string cuda_include_dir();

  // Throws CompileError holding the spec, the log and the source lines around each error.
  CompileResult compile(const KernelSpec& spec, const GeneratedSource& source, const TemplateStore& templates) const;
  // The same for kernels that are not grouped GEMMs (routing): `what` is their spec text.
  CompileResult compile(std::string_view what, const Arch& arch, const GeneratedSource& source,
                        const TemplateStore& templates) const;
  // PTX for inspection (compiled for the virtual arch compute_XX).
  std::string ptx(const KernelSpec& spec, const GeneratedSource& source, const TemplateStore& templates) const;

 private:
  CompileOptions options_;
};

}  // namespace moejit
