// Stage 3: spec -> cubin, through an in-memory table, then the disk cache, then NVRTC.
// Thread-safe; concurrent requests for one spec share a single compile. A repeated request is
// answered from a table keyed by the packed spec (spec_key.hpp) without touching the rest.
#pragma once
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "cache/disk_cache.hpp"
#include "cache/spec_key.hpp"
#include "codegen/template_store.hpp"
#include "compiler/nvrtc_compiler.hpp"
#include "moejit/runtime.hpp"

namespace moejit {

// Everything that can change the cubin: moejit version, template bytes, rendered source,
// NVRTC version, NVRTC options, arch.
struct CacheKeyInputs {
  std::string moejit_version;
  Key128 templates_digest;
  std::string source;
  std::string nvrtc_version;
  std::string options;  // joined with '\n'
  std::string arch;
  Key128 key() const;
};

// A kernel other than the grouped GEMM (the routing kernels), built through the same key, disk
// cache and compiler; spec_text is its canonical text, stored in the cache entry.
struct CompiledSource {
  std::string spec_text;
  Key128 cache_key;
  std::string cubin, resources, source;
  CacheOutcome outcome = CacheOutcome::compiled;
  double compile_ms = 0;
};

class KernelCache {
 public:
  KernelCache(const TemplateStore& templates, NvrtcCompiler compiler, DiskCache disk);

  // outcome (optional): how this call was served.
  std::shared_ptr<const CompiledKernel> get(const KernelSpec& spec, CacheOutcome* outcome = nullptr);
  CacheKeyInputs key_inputs(const KernelSpec& spec, const std::string& source) const;
  CacheKeyInputs key_inputs(const Arch& arch, const std::string& source) const;
  // By spec text: memory, then disk (key over the rendered source as for a KernelSpec), then
  // NVRTC; render() is called on a memory miss only.
  std::shared_ptr<const CompiledSource> get_source(const std::string& spec_text, const Arch& arch,
                                                   const std::function<GeneratedSource()>& render,
                                                   CacheOutcome* outcome = nullptr);

  const DiskCache& disk() const { return disk_; }
  const NvrtcCompiler& compiler() const { return compiler_; }
  const TemplateStore& templates() const { return templates_; }

 private:
  std::shared_ptr<const CompiledKernel> build(const KernelSpec& spec);
  std::shared_ptr<const CompiledKernel> get_slow(const KernelSpec& spec, CacheOutcome* outcome);

  const TemplateStore& templates_;
  NvrtcCompiler compiler_;
  DiskCache disk_;
  std::string nvrtc_version_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const CompiledKernel>>> memory_;
  // Hot path in front of memory_: finished kernels by packed spec (no text, no allocation).
  std::shared_mutex hot_mutex_;
  std::unordered_map<SpecKey, std::shared_ptr<const CompiledKernel>, SpecKeyHash> hot_;
  std::mutex sources_mutex_;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const CompiledSource>>> sources_;
};

}  // namespace moejit
