#include "cache/kernel_cache.hpp"

#include <fmt/format.h>

#include "moejit/moejit.hpp"
#include "util/hash.hpp"
#include "util/log.hpp"

namespace moejit {

Key128 CacheKeyInputs::key() const {
  return KeyBuilder()
      .add("moejit_version", moejit_version)
      .add("templates", templates_digest.hex())
      .add("source", source)
      .add("nvrtc_version", nvrtc_version)
      .add("options", options)
      .add("arch", arch)
      .finish();
}

KernelCache::KernelCache(const TemplateStore& templates, NvrtcCompiler compiler, DiskCache disk)
    : templates_(templates), compiler_(compiler), disk_(std::move(disk)), nvrtc_version_(NvrtcCompiler::nvrtc_version()) {}

CacheKeyInputs KernelCache::key_inputs(const KernelSpec& spec, const std::string& source) const {
  return key_inputs(spec.arch, source);
}

CacheKeyInputs KernelCache::key_inputs(const Arch& arch, const std::string& source) const {
  CacheKeyInputs in;
  in.moejit_version = kVersion;
  in.templates_digest = templates_.digest();
  in.source = source;
  in.nvrtc_version = nvrtc_version_;
  for (auto& o : compiler_.options_for(arch)) in.options += o + "\n";
  in.arch = arch.to_text();
  return in;
}

std::shared_ptr<const CompiledKernel> KernelCache::get(const KernelSpec& spec, CacheOutcome* outcome) {
  std::optional<SpecKey> packed = pack_spec(spec);
  if (packed) {
    std::shared_lock lock(hot_mutex_);
    if (auto it = hot_.find(*packed); it != hot_.end()) {
      if (outcome) *outcome = CacheOutcome::memory_hit;
      return it->second;
    }
  }
  auto kernel = get_slow(spec, outcome);
  if (packed) {
    std::unique_lock lock(hot_mutex_);
    hot_.try_emplace(*packed, kernel);
  }
  return kernel;
}

std::shared_ptr<const CompiledKernel> KernelCache::get_slow(const KernelSpec& spec, CacheOutcome* outcome) {
  std::string text = spec.to_text();
  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  std::shared_future<std::shared_ptr<const CompiledKernel>> future;
  bool owner = false;
  {
    std::lock_guard lock(mutex_);
    auto [it, inserted] = memory_.try_emplace(text);
    if (inserted) {
      it->second = promise.get_future().share();
      owner = true;
    }
    future = it->second;
  }
  if (!owner) {
    auto kernel = future.get();  // waits for the thread that builds it; rethrows its error
    if (outcome) *outcome = CacheOutcome::memory_hit;
    return kernel;
  }
  try {
    auto kernel = build(spec);
    promise.set_value(kernel);
    if (outcome) *outcome = kernel->outcome;
    return kernel;
  } catch (...) {
    // Forget the failure so that a later request (e.g. after fixing MOEJIT_TEMPLATE_DIR) retries.
    {
      std::lock_guard lock(mutex_);
      memory_.erase(text);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

std::shared_ptr<const CompiledKernel> KernelCache::build(const KernelSpec& spec) {
  GeneratedSource source = generate_source(spec, templates_);
  auto kernel = std::make_shared<CompiledKernel>();
  kernel->spec = spec;
  kernel->source = source.source;
  kernel->cache_key = key_inputs(spec, source.source).key();
  if (auto entry = disk_.load(kernel->cache_key)) {
    if (entry->spec_text == spec.to_text()) {
      kernel->cubin = std::move(entry->cubin);
      kernel->resources = std::move(entry->resources);
      kernel->outcome = CacheOutcome::disk_hit;
      return kernel;
    }
    log_warning_once("spec:" + kernel->cache_key.hex(),
                     fmt::format("cache entry {} holds spec '{}', expected '{}'; rebuilding it",
                                 disk_.path_for(kernel->cache_key), entry->spec_text, spec.to_text()));
  }
  CompileResult compiled = compiler_.compile(spec, source, templates_);
  kernel->cubin = std::move(compiled.cubin);
  kernel->resources = std::move(compiled.resources);
  kernel->compile_ms = compiled.wall_ms;
  kernel->outcome = CacheOutcome::compiled;
  disk_.store({kernel->cache_key, spec.to_text(), kernel->resources, kernel->cubin});
  return kernel;
}

std::shared_ptr<const CompiledSource> KernelCache::get_source(const std::string& spec_text, const Arch& arch,
                                                              const std::function<GeneratedSource()>& render,
                                                              CacheOutcome* outcome) {
  std::promise<std::shared_ptr<const CompiledSource>> promise;
  std::shared_future<std::shared_ptr<const CompiledSource>> future;
  bool owner = false;
  {
    std::lock_guard lock(sources_mutex_);
    auto [it, inserted] = sources_.try_emplace(spec_text);
    if (inserted) {
      it->second = promise.get_future().share();
      owner = true;
    }
    future = it->second;
  }
  if (!owner) {
    auto kernel = future.get();
    if (outcome) *outcome = CacheOutcome::memory_hit;
    return kernel;
  }
  try {
    GeneratedSource source = render();
    auto kernel = std::make_shared<CompiledSource>();
    kernel->spec_text = spec_text;
    kernel->source = source.source;
    kernel->cache_key = key_inputs(arch, source.source).key();
    std::optional<CacheEntry> entry = disk_.load(kernel->cache_key);
    if (entry && entry->spec_text == spec_text) {
      kernel->cubin = std::move(entry->cubin);
      kernel->resources = std::move(entry->resources);
      kernel->outcome = CacheOutcome::disk_hit;
    } else {
      if (entry)
        log_warning_once("spec:" + kernel->cache_key.hex(),
                         fmt::format("cache entry {} holds spec '{}', expected '{}'; rebuilding it",
                                     disk_.path_for(kernel->cache_key), entry->spec_text, spec_text));
      CompileResult compiled = compiler_.compile(spec_text, arch, source, templates_);
      kernel->cubin = std::move(compiled.cubin);
      kernel->resources = std::move(compiled.resources);
      kernel->compile_ms = compiled.wall_ms;
      kernel->outcome = CacheOutcome::compiled;
      disk_.store({kernel->cache_key, spec_text, kernel->resources, kernel->cubin});
    }
    promise.set_value(kernel);
    if (outcome) *outcome = kernel->outcome;
    return kernel;
  } catch (...) {
    {
      std::lock_guard lock(sources_mutex_);
      sources_.erase(spec_text);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

}  // namespace moejit
