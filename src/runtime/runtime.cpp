// The thin object that ties the stages together: spec -> cache (codegen, NVRTC, disk) -> driver.
#include "moejit/runtime.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "cache/kernel_cache.hpp"
#include "driver/driver_api.hpp"
#include "driver/tensor_map.hpp"
#include "heuristics/config.hpp"
#include "moejit/errors.hpp"
#include "moejit/params.cuh"
#include "runtime/validate.hpp"

namespace moejit {

struct LoadedKernel {
  std::shared_ptr<const CompiledKernel> compiled;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  int ctas_per_sm = 1;
};

struct Runtime::Impl {
  RuntimeOptions options;
  Arch arch;
  bool has_device = false;
  CUdevice device = 0;
  CUcontext context = nullptr;
  int sm_count = 0;
  std::string device_name = "offline";
  KernelCache cache;

  std::mutex loaded_mutex;
  std::unordered_map<std::string, LoadedKernel> loaded;  // by spec text; nodes are stable
  std::mutex counters_mutex;
  std::map<Stream, DeviceBuffer> tile_counters;  // dynamic scheduler: one self-resetting int per stream

  Impl(RuntimeOptions o, Arch a)
      : options(o), arch(a), cache(TemplateStore::current(), NvrtcCompiler({o.line_info}), DiskCache(DiskCache::default_dir())) {}

  void make_current() const {
    if (has_device) MOEJIT_CU(driver().cuCtxSetCurrent(context));
  }
  int* tile_counter(Stream stream) {
    std::lock_guard lock(counters_mutex);
    auto it = tile_counters.find(stream);
    if (it == tile_counters.end()) {
      it = tile_counters.emplace(stream, DeviceBuffer(sizeof(int))).first;
      MOEJIT_CU(driver().cuMemsetD32(it->second.ptr(), 0, 1));
    }
    return static_cast<int*>(it->second.get());
  }
};

namespace {

Arch arch_of_device(CUdevice device) {
  int major = 0, minor = 0;
  MOEJIT_CU(driver().cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  MOEJIT_CU(driver().cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
  if (major * 10 + minor < 80)
    throw DriverError(fmt::format("device has compute capability {}.{}; moejit needs 8.0 or newer", major, minor),
                      CUDA_ERROR_NOT_SUPPORTED);
  // Hopper's wgmma/setmaxnreg need the arch-specific target.
  return Arch{major, minor, major == 9 && minor == 0};
}

// Rows of each group, counted in tiles of the spec; exact when groups are known.
long long count_tiles(const KernelSpec& spec, const GroupedGemmArgs& args, const std::vector<int>* groups) {
  long long n_tiles = (args.n + spec.tile.n - 1) / spec.tile.n;
  if (groups) {
    long long m_tiles = 0;
    for (int rows : group_rows_from(args, *groups)) m_tiles += (rows + spec.tile.m - 1) / spec.tile.m;
    return m_tiles * n_tiles;
  }
  long long rows = args.layout == GroupLayout::contiguous ? args.total_rows : (long long)args.capacity * args.num_groups;
  return (rows / spec.tile.m + args.num_groups) * n_tiles;  // upper bound
}

// Host copy of the group description: given, downloaded, or none (trusted device data).
std::optional<std::vector<int>> host_groups(const GroupedGemmArgs& args) {
  if (!args.host_groups.empty()) return std::vector<int>(args.host_groups.begin(), args.host_groups.end());
  if (args.trust_device_groups) return std::nullopt;
  std::size_t count = args.layout == GroupLayout::contiguous ? args.num_groups + 1 : args.num_groups;
  std::vector<int> out(count);
  const int* src = args.layout == GroupLayout::contiguous ? args.group_offsets : args.group_counts;
  check_cu(driver().cuMemcpyDtoH(out.data(), reinterpret_cast<CUdeviceptr>(src), count * sizeof(int)),
           args.layout == GroupLayout::contiguous ? "cuMemcpyDtoH(group_offsets)" : "cuMemcpyDtoH(group_counts)");
  return out;
}

void launch_loaded(Runtime::Impl& rt, const LoadedKernel& k, const GroupedGemmArgs& args,
                   const std::vector<int>* groups, Stream stream) {
  const KernelSpec& spec = k.compiled->spec;
  long long tiles = count_tiles(spec, args, groups);
  if (tiles == 0) return;  // every group is empty: nothing to write
  GroupedGemmParams p{};
  p.a = args.a;
  p.b = args.b;
  p.c = args.c;
  p.group_offsets = args.group_offsets;
  p.group_counts = args.group_counts;
  p.num_groups = args.num_groups;
  p.n = args.n;
  p.k = args.k;
  p.capacity = args.capacity;
  p.total_rows = args.layout == GroupLayout::contiguous ? args.total_rows : args.capacity * args.num_groups;
  if (spec.scheduler == Scheduler::dynamic) p.tile_counter = rt.tile_counter(stream);

  CUlaunchConfig config{};
  config.gridDimX = static_cast<unsigned>(std::min<long long>(tiles, (long long)rt.sm_count * k.ctas_per_sm));
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = spec.threads_per_cta();
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = spec.dynamic_smem_bytes();
  config.hStream = reinterpret_cast<CUstream>(stream);

  if (spec.family == KernelFamily::hopper) {
    unsigned a_rows = static_cast<unsigned>(p.total_rows);
    TmaDescriptor tma_a = make_tma_2d_swizzled(args.a, spec.a, std::max(a_rows, 1u), args.k, spec.tile.m, 64);
    TmaDescriptor tma_b =
        make_tma_2d_swizzled(args.b, spec.b, (std::uint64_t)args.num_groups * args.n, args.k, spec.tile.n, 64);
    void* params[] = {&p, &tma_a, &tma_b};
    MOEJIT_CU(driver().cuLaunchKernelEx(&config, k.function, params, nullptr));
  } else {
    void* params[] = {&p};
    MOEJIT_CU(driver().cuLaunchKernelEx(&config, k.function, params, nullptr));
  }
}

}  // namespace

Runtime::Runtime(RuntimeOptions options) : Runtime(options, std::nullopt) {}

Runtime::Runtime(RuntimeOptions options, std::optional<Arch> offline_arch) {
  // MOEJIT_LINEINFO=1: line tables in every kernel, for compute-sanitizer and profilers.
  if (const char* env = std::getenv("MOEJIT_LINEINFO"); env && *env && *env != '0') options.line_info = true;
  if (offline_arch) {
    impl_ = std::make_unique<Impl>(options, *offline_arch);
    return;
  }
  const DriverApi& api = driver();
  int count = 0;
  MOEJIT_CU(api.cuDeviceGetCount(&count));
  if (options.device < 0 || options.device >= count)
    throw InvalidArgument(fmt::format("Runtime: device={} but {} CUDA device(s) are present", options.device, count));
  CUdevice device;
  MOEJIT_CU(api.cuDeviceGet(&device, options.device));
  impl_ = std::make_unique<Impl>(options, arch_of_device(device));
  impl_->has_device = true;
  impl_->device = device;
  MOEJIT_CU(api.cuDevicePrimaryCtxRetain(&impl_->context, device));
  impl_->make_current();
  MOEJIT_CU(api.cuDeviceGetAttribute(&impl_->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
  char name[256] = {};
  MOEJIT_CU(api.cuDeviceGetName(name, sizeof name, device));
  impl_->device_name = name;
}

std::unique_ptr<Runtime> Runtime::offline(const Arch& arch, RuntimeOptions options) {
  return std::unique_ptr<Runtime>(new Runtime(options, arch));
}

Runtime::~Runtime() {
  if (!impl_ || !impl_->has_device) return;
  try {
    impl_->make_current();
    impl_->tile_counters.clear();
    for (auto& [text, k] : impl_->loaded)
      if (k.module) driver().cuModuleUnload(k.module);
    driver().cuDevicePrimaryCtxRelease(impl_->device);
  } catch (...) {
    // Destructors must not throw; the driver reclaims everything at exit.
  }
}

const Arch& Runtime::arch() const { return impl_->arch; }
bool Runtime::has_device() const { return impl_->has_device; }
int Runtime::sm_count() const { return impl_->sm_count; }
std::string Runtime::device_name() const { return impl_->device_name; }

std::shared_ptr<const CompiledKernel> Runtime::compile(const KernelSpec& spec, CacheOutcome* outcome) {
  return impl_->cache.get(spec, outcome);
}

Kernel Runtime::kernel(const KernelSpec& spec) {
  if (!impl_->has_device)
    throw DriverError(fmt::format("Runtime::kernel: this runtime is offline ({}); it can compile but not load kernels",
                                  impl_->arch.to_text()),
                      CUDA_ERROR_NO_DEVICE);
  if (!(spec.arch == impl_->arch))
    throw InvalidArgument(fmt::format("Runtime::kernel: spec arch={} but the device is {}", spec.arch.to_text(),
                                      impl_->arch.to_text()));
  std::string text = spec.to_text();
  std::lock_guard lock(impl_->loaded_mutex);
  auto it = impl_->loaded.find(text);
  if (it == impl_->loaded.end()) {
    LoadedKernel k;
    k.compiled = impl_->cache.get(spec);
    impl_->make_current();
    const DriverApi& api = driver();
    MOEJIT_CU(api.cuModuleLoadData(&k.module, k.compiled->cubin.data()));
    MOEJIT_CU(api.cuModuleGetFunction(&k.function, k.module, "moejit_grouped_gemm"));
    int smem = spec.dynamic_smem_bytes();
    MOEJIT_CU(api.cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem));
    MOEJIT_CU(api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&k.ctas_per_sm, k.function, spec.threads_per_cta(), smem));
    if (k.ctas_per_sm < 1)
      throw DriverError(fmt::format("kernel {} cannot be resident on this device (registers or shared memory)", text),
                        CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    it = impl_->loaded.emplace(text, std::move(k)).first;
  }
  Kernel out;
  out.runtime_ = this;
  out.spec_ = &it->second.compiled->spec;
  out.loaded_ = &it->second;
  return out;
}

void Kernel::launch(const GroupedGemmArgs& args, Stream stream) const {
  if (!runtime_) throw InvalidArgument("Kernel::launch: this Kernel is empty (get one from Runtime::kernel)");
  validate_args(args);
  validate_args_match_spec(args, *spec_);
  auto groups = host_groups(args);
  if (groups) validate_groups(args, *groups);
  runtime_->impl_->make_current();
  launch_loaded(*runtime_->impl_, *static_cast<const LoadedKernel*>(loaded_), args, groups ? &*groups : nullptr, stream);
}

KernelSpec Runtime::choose_spec(const GroupedGemmArgs& args) const {
  GemmProblem problem;
  problem.layout = args.layout;
  problem.ab_type = args.ab_type;
  problem.c_type = args.c_type;
  problem.num_groups = args.num_groups;
  problem.n = args.n;
  problem.k = args.k;
  problem.total_rows = args.layout == GroupLayout::contiguous ? args.total_rows : (long long)args.capacity * args.num_groups;
  std::vector<int> rows;
  if (!args.host_groups.empty()) {
    rows = group_rows_from(args, std::vector<int>(args.host_groups.begin(), args.host_groups.end()));
    problem.group_rows = rows;
  }
  return moejit::choose_spec(problem, impl_->arch, std::max(impl_->sm_count, 1));
}

void Runtime::grouped_gemm(const GroupedGemmArgs& args, Stream stream) {
  validate_args(args);
  if (!impl_->has_device) throw DriverError("Runtime::grouped_gemm: this runtime is offline", CUDA_ERROR_NO_DEVICE);
  impl_->make_current();
  auto groups = host_groups(args);
  if (groups) validate_groups(args, *groups);
  GroupedGemmArgs with_groups = args;
  if (groups && args.host_groups.empty()) with_groups.host_groups = *groups;
  KernelSpec spec = choose_spec(with_groups);
  Kernel k = kernel(spec);
  launch_loaded(*impl_, *static_cast<const LoadedKernel*>(k.loaded_), args, groups ? &*groups : nullptr, stream);
}

}  // namespace moejit
