// The thin object that ties the stages together: spec -> cache (codegen, NVRTC, disk) -> driver.
#include "moejit/runtime.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "cache/kernel_cache.hpp"
#include "cache/spec_key.hpp"
#include "cache/tuning_table.hpp"
#include "driver/driver_api.hpp"
#include "driver/tensor_map.hpp"
#include "heuristics/config.hpp"
#include "heuristics/tuning.hpp"
#include "moejit/common/w4_layout.cuh"  // w4_sm90_tail_rows: the 4-bit kernel's tail rows map
#include "moejit/errors.hpp"
#include "moejit/moejit.hpp"
#include "moejit/params.cuh"
#include "runtime/runtime_internal.hpp"
#include "runtime/tuner.hpp"
#include "runtime/validate.hpp"
#include "util/log.hpp"

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
  bool programmatic_launch = false;  // options.programmatic_launch on an sm_90+ device
  std::string device_name = "offline";
  KernelCache cache;

  std::mutex loaded_mutex;
  std::unordered_map<std::string, LoadedKernel> loaded;  // by spec text; nodes are stable
  // Hot path: loaded kernels by packed spec, and the high-level call's choice per shape bucket.
  // Filled once per key; a repeated request takes a reader lock and hashes two or three words.
  std::shared_mutex hot_mutex;
  std::unordered_map<SpecKey, const LoadedKernel*, SpecKeyHash> by_spec;
  std::unordered_map<ShapeBucket, const LoadedKernel*, ShapeBucketHash> by_bucket;
  // Tuning results: the file, and its lines read once (bucket text -> entry).
  TuningTable tuning;
  std::once_flag tuned_read;
  std::mutex tuned_mutex;
  std::map<std::string, TunedEntry> tuned;
  std::mutex counters_mutex;
  std::map<Stream, DeviceBuffer> tile_counters;  // dynamic scheduler: one self-resetting int per stream
  // split=tail: per stream, one fp32 128x256 tile per SM for the pieces' partial sums, then two
  // self-resetting counters per SM (kernel_templates/moejit/common/split_exchange.cuh).
  std::map<Stream, DeviceBuffer> split_workspaces;
  // Routing kernels (src/runtime/routing.cpp): modules by spec text, functions by spec text + entry.
  std::mutex extra_mutex;
  std::unordered_map<std::string, CUmodule> extra_modules;
  std::unordered_map<std::string, CUfunction> extra_functions;
  std::shared_mutex extra_hot_mutex;
  std::unordered_map<std::uint64_t, CUfunction> extra_by_key;

  Impl(RuntimeOptions o, Arch a)
      : options(o), arch(a), cache(TemplateStore::current(), NvrtcCompiler({o.line_info}), DiskCache(DiskCache::default_dir())) {}

  void make_current() const {
    if (has_device) MOEJIT_CU(driver().cuCtxSetCurrent(context));
  }
  // A stream's first launch may come under graph capture (a capture stream is often new): the
  // buffer is allocated in relaxed capture mode, and zeroed on the stream itself, which a capture
  // records as a memset node ahead of the kernel (harmless: the kernels leave it at zero).
  int* tile_counter(Stream stream) {
    std::lock_guard lock(counters_mutex);
    auto it = tile_counters.find(stream);
    if (it == tile_counters.end()) {
      RelaxedCaptureMode relaxed;
      it = tile_counters.emplace(stream, DeviceBuffer(sizeof(int))).first;
      MOEJIT_CU(driver().cuMemsetD32Async(it->second.ptr(), 0, 1, reinterpret_cast<CUstream>(stream)));
    }
    return static_cast<int*>(it->second.get());
  }
  static constexpr std::size_t kSplitTileFloats = 128 * 256;  // the largest Hopper 16-bit tile
  std::size_t split_partial_floats() const { return (std::size_t)std::max(sm_count, 1) * kSplitTileFloats; }
  // Two flags (one per consumer warpgroup) per split tile: at most half a round of two CTAs per SM.
  std::size_t split_flag_count() const { return (std::size_t)std::max(sm_count, 1) * 2; }
  const DeviceBuffer& split_workspace(Stream stream) {
    std::lock_guard lock(counters_mutex);
    auto it = split_workspaces.find(stream);
    if (it == split_workspaces.end()) {
      const std::size_t partial_bytes = split_partial_floats() * sizeof(float);
      RelaxedCaptureMode relaxed;  // as tile_counter
      it = split_workspaces.emplace(stream, DeviceBuffer(partial_bytes + split_flag_count() * sizeof(int))).first;
      MOEJIT_CU(driver().cuMemsetD32Async(it->second.ptr() + partial_bytes, 0, split_flag_count(),
                                          reinterpret_cast<CUstream>(stream)));
    }
    return it->second;
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

// Rows of group g from the host copy of offsets (contiguous) or counts (masked).
int rows_of_group(const GroupedGemmArgs& args, std::span<const int> groups, int g) {
  return args.layout == GroupLayout::contiguous ? groups[g + 1] - groups[g] : groups[g];
}

// Rows of each group, counted in tiles of the spec; exact when groups are known.
long long count_tiles(const KernelSpec& spec, const GroupedGemmArgs& args, const std::span<const int>* groups) {
  long long n_tiles = (args.n + spec.tile.n - 1) / spec.tile.n;
  if (groups) {
    long long m_tiles = 0;
    for (int g = 0; g < args.num_groups; ++g) m_tiles += (rows_of_group(args, *groups, g) + spec.tile.m - 1) / spec.tile.m;
    return m_tiles * n_tiles;
  }
  long long rows = args.layout == GroupLayout::contiguous ? args.total_rows : (long long)args.capacity * args.num_groups;
  return (rows / spec.tile.m + args.num_groups) * n_tiles;  // upper bound
}

// The valid rows the choice assumes where only the device holds the groups: the caller's
// expected_rows, else the layout's upper bound.
long long rows_without_groups(const GroupedGemmArgs& args) {
  if (args.expected_rows > 0) return args.expected_rows;
  return args.layout == GroupLayout::contiguous ? args.total_rows : (long long)args.capacity * args.num_groups;
}

// Host copy of the group description: the caller's (no copy), downloaded, or none (trusted
// device data).
struct HostGroups {
  std::vector<int> downloaded;
  std::span<const int> view;
  bool known = false;
  const std::span<const int>* get() const { return known ? &view : nullptr; }
};

// Whether work put on `stream` now is being captured into a CUDA graph. A stream that cannot be
// asked (the legacy stream while another stream captures in global mode) counts as capturing:
// a synchronizing call there would end that capture.
bool stream_is_capturing(Stream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = driver().cuStreamIsCapturing(reinterpret_cast<CUstream>(stream), &status);
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) return true;
  check_cu(r, "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// `caller` names the entry point for the error; `stream` is the launch's stream (nullopt: no
// launch follows, so capture does not matter).
HostGroups host_groups(const GroupedGemmArgs& args, const char* caller, std::optional<Stream> stream) {
  HostGroups out;
  if (!args.host_groups.empty()) {
    out.view = args.host_groups;
    out.known = true;
    return out;
  }
  if (args.trust_device_groups) return out;
  // The copy back synchronizes, which graph capture forbids (and would end the capture); and the
  // counts it read would be those of capture time, not of the replays.
  if (stream && stream_is_capturing(*stream))
    throw InvalidArgument(fmt::format(
        "{}: the stream is capturing a CUDA graph, and the groups are on the device only: pass host_groups, "
        "or set trust_device_groups (with expected_rows or expected_group_rows to guide the choice)",
        caller));
  std::size_t count = args.layout == GroupLayout::contiguous ? args.num_groups + 1 : args.num_groups;
  out.downloaded.resize(count);
  const int* src = args.layout == GroupLayout::contiguous ? args.group_offsets : args.group_counts;
  check_cu(driver().cuMemcpyDtoH(out.downloaded.data(), reinterpret_cast<CUdeviceptr>(src), count * sizeof(int)),
           args.layout == GroupLayout::contiguous ? "cuMemcpyDtoH(group_offsets)" : "cuMemcpyDtoH(group_counts)");
  out.view = out.downloaded;
  out.known = true;
  return out;
}

// The shape bucket of a call: valid rows and non-empty groups counted from the host copy, or,
// when only the device holds them, rows_without_groups over the groups they are expected to fill.
ShapeBucket bucket_of(const GroupedGemmArgs& args, const HostGroups& groups, int sm_count) {
  long long rows = 0, active = 0;
  long long rows_in_hot_groups = 0;
  long long m_tiles_128 = 0, m_tiles_64 = 0;  // few_groups_small_tile_may_pay
  MixClasses classes;  // mixed_order_pays
  auto count = [&](int r) {
    rows += r;
    active += r > 0;
    if (r > kHotGroupRows) rows_in_hot_groups += r;
    m_tiles_128 += (r + 127) / 128;
    m_tiles_64 += (r + 63) / 64;
    classes.add(r);
  };
  if (groups.known) {
    for (int g = 0; g < args.num_groups; ++g) count(rows_of_group(args, groups.view, g));
  } else if (!args.expected_group_rows.empty()) {
    for (int r : args.expected_group_rows) count(r);
  } else {
    rows = rows_without_groups(args);
    active = expected_active_groups(args.num_groups, rows);
  }
  const bool fp8 = args.ab_type == DType::e4m3;
  const bool mixable = args.b_format() == args.ab_type && !args.fusion.atomic;
  // The few-groups rules read exact sizes only (not expected ones): the flag likewise.
  const bool few = groups.known && args.b_format() == args.ab_type &&
                   few_groups_small_tile_may_pay(args.ab_type, args.c_type, args.n, args.k, args.fusion,
                                                 args.b_scale_layout, active, rows, m_tiles_128, m_tiles_64, sm_count);
  ShapeBucket bucket =
      ShapeBucket::of(args.layout, args.ab_type, args.c_type, args.num_groups, args.n, args.k, rows, active, args.b_type,
                      hot_groups_dominate(rows, active, rows_in_hot_groups),
                      mixable && mixed_order_pays(args.n, args.k, classes, fp8 && !args.fusion.any()), few);
  bucket.fusion = args.fusion;
  bucket.b_scales = args.b_scale_layout;
  return bucket;
}

// Rows per box of A's tensor map: gather_by=tma copies one row per TMA copy.
unsigned gather_box_rows(const Fusion& fusion, unsigned tile_rows) {
  return fusion.gather_a && fusion.gather_by == GatherLoad::tma ? 1u : tile_rows;
}

void launch_loaded(Runtime::Impl& rt, const LoadedKernel& k, const GroupedGemmArgs& args,
                   const std::span<const int>* groups, Stream stream) {
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
  p.scale_a = args.a_scales;
  p.scale_b = args.b_scales;
  p.scale_b_tensor = args.b_tensor_scales;
  p.weight_l2_evict_first = weights_evict_first(spec, args.num_groups, args.n, args.k, p.total_rows) ? 1 : 0;
  const long long ctas = (long long)rt.sm_count * k.ctas_per_sm;
  long long units = tiles;
  if (spec.split == SplitK::tail && groups) {
    // The exact tile count decides the split (count_tiles is exact with the host's groups; without
    // them every tile runs whole). At most one piece per CTA: R x S <= ctas tiles of partial sums,
    // which the workspace (one 128x256 tile per SM) holds for the one-CTA-per-SM kernels that split
    // and the 4-bit decode tiles' (16 x 128 or 32 x 128, two CTAs per SM); a plan it could not hold
    // runs whole tiles.
    const SplitTailPlan plan = plan_split_tail(spec, tiles, ctas, args.k);
    const std::size_t floats = (std::size_t)plan.tiles * plan.count * spec.tile.m * spec.tile.n;
    if (plan.count > 1 && floats <= rt.split_partial_floats() && (std::size_t)plan.tiles * 2 <= rt.split_flag_count()) {
      const DeviceBuffer& ws = rt.split_workspace(stream);
      p.split_partials = static_cast<float*>(ws.get());
      p.split_flags = reinterpret_cast<int*>(static_cast<float*>(ws.get()) + rt.split_partial_floats());
      p.split_from = plan.from;
      p.split_tiles = plan.tiles;
      p.split_count = plan.count;
      units = plan.units(tiles);
    }
  }

  CUlaunchConfig config{};
  CUlaunchAttribute attrs[2]{};
  config.attrs = attrs;
  add_programmatic_launch(config, rt.programmatic_launch && spec.grid_dependency());
  config.gridDimX = static_cast<unsigned>(std::min<long long>(units, ctas));
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = spec.threads_per_cta();
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = spec.dynamic_smem_bytes();
  config.hStream = reinterpret_cast<CUstream>(stream);

  // Fused kernels take FusionParams as one more parameter (kernel_templates/moejit/params.cuh).
  const Fusion& fusion = spec.fusion;
  const bool fused = fusion.any() || spec.c == DType::e4m3;  // c=e4m3: the fused kernel, scales in FusionParams
  FusionParams fp{};
  const int n_out = fusion.glu_activation() ? args.n / 2 : args.n;
  if (fused) {
    fp.gather_rows = args.gather_rows;
    fp.scatter_rows = args.scatter_rows;
    fp.routing_weights = args.routing_weights;
    fp.bias = args.bias;
    fp.num_tokens = args.num_tokens;
    fp.num_out_rows = args.num_out_rows;
    fp.n_out = n_out;
    fp.c_scales = args.c_scales;
  }

  if (spec.family == KernelFamily::hopper && spec.a == DType::e4m3) {
    // FP8 (hopper_fp8/): one stage is a 128-wide K block of e4m3 bytes (a 128-byte swizzle row);
    // A in tile-high boxes, B in tile-wide boxes; C, where the kernel stages it for TMA stores
    // (spec.stages_c()), in 64-row boxes of 128 bytes as for the bf16 kernel (fusions: [rows or
    // num_out_rows, n_out]); kernels that store from registers take a copy of tma_a instead.
    // fuse=gather copies A's token rows by cp.async: the map over [num_tokens, K] is then only a
    // valid placeholder.
    std::uint64_t rows = std::max(static_cast<unsigned>(p.total_rows), 1u);
    TmaDescriptor tma_a = make_tma_2d_swizzled(args.a, spec.a, fusion.gather_a ? (std::uint64_t)args.num_tokens : rows,
                                               args.k, spec.tile.m, 128);
    // Split GLU: each consumer slice's B in a gate box and an up box of half a slice (load_b_tile).
    const unsigned fp8_slice_n = spec.tile.m == 64 ? spec.tile.n / 2 : spec.tile.n;
    const bool split_glu = fusion.glu_activation() && fusion.glu == GluLayout::split;
    // 2x1 pairs: each rank loads half the B tile.
    TmaDescriptor tma_b = make_tma_2d_swizzled(args.b, spec.b, (std::uint64_t)args.num_groups * args.n, args.k,
                                               split_glu ? fp8_slice_n / 2 : spec.tile.n / spec.cluster_m, 128);
    std::uint64_t c_rows = fusion.scatter_c ? (std::uint64_t)args.num_out_rows : rows;
    TmaDescriptor tma_c = spec.stages_c() ? make_tma_2d_swizzled(args.c, spec.c, c_rows, n_out, 64, 128 / element_bytes(spec.c))
                                          : tma_a;
    // A's scales, [ceil(K / 128)][total_rows]: per K block one box of the 16-byte rows that hold a
    // tile's scales (fp8_scale_stage_bytes in hopper_fp8/). Gathered rows' scales come by cp.async
    // (token-indexed), and that kernel never reads the map: a copy of tma_a, no second encode.
    TmaDescriptor tma_s = fusion.gather_a ? tma_a
                                          : make_tma_f32_quads(args.a_scales, (std::uint64_t)p.total_rows * ((args.k + 127) / 128),
                                                               spec.tile.m / 4 + 1);
    void* params[] = {&p, &tma_a, &tma_b, &tma_c, &tma_s, &fp};  // the unfused kernel takes the first five
    if (spec.cluster_m == 2) add_cta_pair(config);
    MOEJIT_CU(driver().cuLaunchKernelEx(&config, k.function, params, nullptr));
  } else if (spec.family == KernelFamily::hopper && spec.is_weight_only_4bit()) {
    // 4-bit weight-only (hopper_w4/): activations in boxes of tile-M tokens x 64 K (128-byte
    // swizzle, wgmma's B operand); the pre-arranged weights are read by plain bulk copies from p.b.
    // Fusions: one more parameter (FusionParams); fuse=gather copies the token rows with cp.async
    // (the map over [num_tokens, K] is then only a valid placeholder) or, gather_by=tma, with one
    // TMA copy per row (1-row boxes).
    std::uint64_t rows = std::max(static_cast<unsigned>(fusion.gather_a ? args.num_tokens : p.total_rows), 1u);
    TmaDescriptor tma_a = make_tma_2d_swizzled(args.a, spec.a, rows, args.k, gather_box_rows(fusion, spec.tile.m), 64);
    // A group's tail rows absorbed into its last 128- or 256-token tile come in boxes of their own
    // (common/w4_layout.cuh, w4_sm90_tail_rows; gathered tails come as the tile's rows do); kernels
    // without them take a copy of tma_a (decode tiles: no second encode on their launches).
    const int tail_rows = fusion.gather_a ? 0 : w4_sm90_tail_rows(spec.tile.m, false, spec.scheduler == Scheduler::dynamic);
    TmaDescriptor tma_tail = tail_rows != 0 ? make_tma_2d_swizzled(args.a, spec.a, rows, args.k, tail_rows, 64) : tma_a;
    // C for the TMA stores of 128- and 256-token tiles (spec.stages_c()): 128-row boxes of a
    // consumer slice's 64 columns (128 bytes, 128-byte swizzle), or of its 32 GLU output columns
    // (64 bytes, 64-byte swizzle) for the fused GEMM1; other kernels take a copy of tma_a.
    TmaDescriptor tma_c = spec.stages_c() ? make_tma_2d_swizzled(args.c, spec.c, std::max(static_cast<unsigned>(p.total_rows), 1u),
                                                                 n_out, 128, fusion.glu_activation() ? 32 : 64)
                                          : tma_a;
    void* params[] = {&p, &tma_a, &tma_tail, &tma_c, &fp};  // the unfused kernel takes the first four
    MOEJIT_CU(driver().cuLaunchKernelEx(&config, k.function, params, nullptr));
  } else if (spec.family == KernelFamily::hopper) {
    // A in 64-row boxes (a 128-row tile whose group ends in its first half loads one), B in
    // tile-wide boxes, C (the TMA-store epilogue) in 64-row boxes of 128 bytes: all 128B-swizzled.
    // Fusions: split-GLU B comes in boxes of half a consumer slice; C is [rows or num_out_rows, n_out].
    std::uint64_t rows = std::max(static_cast<unsigned>(p.total_rows), 1u);
    const int slice_n = spec.tile.m == 64 ? spec.tile.n / 2 : spec.tile.n;
    // (fuse=gather: the map is over [num_tokens, K]; by cp.async it is only a valid placeholder,
    // gather_by=tma copies 1-row boxes.)
    TmaDescriptor tma_a = make_tma_2d_swizzled(args.a, spec.a, fusion.gather_a ? (std::uint64_t)args.num_tokens : rows,
                                               args.k, gather_box_rows(fusion, 64), 64);
    TmaDescriptor tma_b = make_tma_2d_swizzled(args.b, spec.b, (std::uint64_t)args.num_groups * args.n, args.k,
                                               // split GLU: half a slice; 2x1 pairs: each rank loads half the tile
                                               (fusion.glu_activation() && fusion.glu == GluLayout::split) || spec.cluster_m == 2
                                                   ? slice_n / 2
                                                   : spec.tile.n,
                                               64);
    std::uint64_t c_rows = fusion.scatter_c ? (std::uint64_t)args.num_out_rows : rows;
    TmaDescriptor tma_c = make_tma_2d_swizzled(args.c, spec.c, c_rows, n_out, 64, 128 / element_bytes(spec.c));
    // Absorbed tail rows (spec.tail): one more map, spec.tail-row boxes of A (gathered tail rows come
    // as the tile's rows do, and the kernel never reads the map).
    TmaDescriptor tma_tail = spec.tail != 0 && !fusion.gather_a
                                 ? make_tma_2d_swizzled(args.a, spec.a, rows, args.k, spec.tail, 64)
                                 : tma_a;
    // The unfused kernel takes the first four, and the tail rows' map fifth; fused kernels take
    // FusionParams fifth, and the tail rows' map sixth.
    const bool unfused_tail = spec.tail != 0 && !fusion.any();
    void* params[] = {&p, &tma_a, &tma_b, &tma_c, unfused_tail ? static_cast<void*>(&tma_tail) : static_cast<void*>(&fp),
                      &tma_tail};
    // CTA pairs on neighbouring N tiles (1x2, A multicast) or M tiles (2x1, B multicast).
    if (spec.cluster_m * spec.cluster_n == 2) add_cta_pair(config);
    MOEJIT_CU(driver().cuLaunchKernelEx(&config, k.function, params, nullptr));
  } else {
    void* params[] = {&p, &fp};  // the unfused kernel takes the first one
    MOEJIT_CU(driver().cuLaunchKernelEx(&config, k.function, params, nullptr));
  }
}

}  // namespace

Runtime::Runtime(RuntimeOptions options) : Runtime(options, std::nullopt) {}

Runtime::Runtime(RuntimeOptions options, std::optional<Arch> offline_arch) {
  // MOEJIT_LINEINFO=1: line tables in every kernel, for compute-sanitizer and profilers.
  if (const char* env = std::getenv("MOEJIT_LINEINFO"); env && *env && *env != '0') options.line_info = true;
  if (const char* env = std::getenv("MOEJIT_AUTOTUNE"); env && *env && *env != '0') options.autotune = true;
  if (const char* env = std::getenv("MOEJIT_PDL"); env && *env == '0') options.programmatic_launch = false;
  if (offline_arch) {
    impl_ = std::make_unique<Impl>(options, *offline_arch);
    impl_->sm_count = std::max(options.offline_sm_count, 0);
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
  impl_->programmatic_launch = options.programmatic_launch && impl_->arch.sm() >= 90;
  char name[256] = {};
  MOEJIT_CU(api.cuDeviceGetName(name, sizeof name, device));
  impl_->device_name = name;
  int driver_version = 0;
  MOEJIT_CU(api.cuDriverGetVersion(&driver_version));
  const KernelCache& cache = impl_->cache;
  impl_->tuning = TuningTable(cache.disk().enabled() ? cache.disk().dir() : "", impl_->device_name, driver_version, kVersion,
                              cache.templates().digest().hex());
}

std::unique_ptr<Runtime> Runtime::offline(const Arch& arch, RuntimeOptions options) {
  return std::unique_ptr<Runtime>(new Runtime(options, arch));
}

Runtime::~Runtime() {
  if (!impl_ || !impl_->has_device) return;
  try {
    impl_->make_current();
    impl_->tile_counters.clear();
    impl_->split_workspaces.clear();
    for (auto& [text, k] : impl_->loaded)
      if (k.module) driver().cuModuleUnload(k.module);
    for (auto& [text, module] : impl_->extra_modules) driver().cuModuleUnload(module);
    driver().cuDevicePrimaryCtxRelease(impl_->device);
  } catch (...) {
    // Destructors must not throw; the driver reclaims everything at exit.
  }
}

const Arch& Runtime::arch() const { return impl_->arch; }
bool Runtime::has_device() const { return impl_->has_device; }
int Runtime::sm_count() const { return impl_->sm_count; }
std::string Runtime::device_name() const { return impl_->device_name; }
bool Runtime::programmatic_launch() const { return impl_->programmatic_launch; }

std::shared_ptr<const CompiledKernel> Runtime::compile(const KernelSpec& spec, CacheOutcome* outcome) {
  return impl_->cache.get(spec, outcome);
}

namespace {

// The loaded kernel for a spec: from the packed-spec table, else loaded now (compiled or read
// from the cache first). The returned record lives as long as the runtime.
const LoadedKernel& load_kernel(Runtime::Impl& rt, const KernelSpec& spec) {
  std::optional<SpecKey> packed = pack_spec(spec);
  if (packed) {
    std::shared_lock lock(rt.hot_mutex);
    if (auto it = rt.by_spec.find(*packed); it != rt.by_spec.end()) return *it->second;
  }
  std::string text = spec.to_text();
  const LoadedKernel* out = nullptr;
  {
    std::lock_guard lock(rt.loaded_mutex);
    auto it = rt.loaded.find(text);
    if (it == rt.loaded.end()) {
      LoadedKernel k;
      k.compiled = rt.cache.get(spec);
      rt.make_current();
      RelaxedCaptureMode relaxed;  // a bucket's first call may come under graph capture
      const DriverApi& api = driver();
      MOEJIT_CU(api.cuModuleLoadData(&k.module, k.compiled->cubin.data()));
      MOEJIT_CU(api.cuModuleGetFunction(&k.function, k.module, "moejit_grouped_gemm"));
      int smem = spec.dynamic_smem_bytes();
      MOEJIT_CU(api.cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem));
      MOEJIT_CU(api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&k.ctas_per_sm, k.function, spec.threads_per_cta(), smem));
      if (k.ctas_per_sm < 1) {
        driver().cuModuleUnload(k.module);
        throw DriverError(fmt::format("kernel {} cannot be resident on this device (registers or shared memory)", text),
                          CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
      }
      it = rt.loaded.emplace(text, std::move(k)).first;
    }
    out = &it->second;
  }
  if (packed) {
    std::unique_lock lock(rt.hot_mutex);
    rt.by_spec.try_emplace(*packed, out);
  }
  return *out;
}

// The problem as the heuristic sees it; `rows` holds the per-group rows it points to.
GemmProblem problem_of(const GroupedGemmArgs& args, const HostGroups& groups, std::vector<int>& rows) {
  GemmProblem problem;
  problem.layout = args.layout;
  problem.ab_type = args.ab_type;
  problem.c_type = args.c_type;
  problem.b_type = args.b_type;
  problem.num_groups = args.num_groups;
  problem.n = args.n;
  problem.k = args.k;
  problem.fusion = args.fusion;
  problem.b_scales = args.b_scale_layout;
  problem.total_rows = rows_without_groups(args);  // the groups' own sizes below, where known
  if (groups.known) {
    rows.resize(args.num_groups);
    for (int g = 0; g < args.num_groups; ++g) rows[g] = rows_of_group(args, groups.view, g);
    problem.group_rows = rows;
  } else if (!args.expected_group_rows.empty()) {
    problem.group_rows = args.expected_group_rows;
    problem.group_rows_estimated = true;
  }
  return problem;
}

// The stored tuning result for a bucket, if it is a spec this device can run.
std::optional<KernelSpec> stored_spec(Runtime::Impl& rt, const ShapeBucket& bucket) {
  std::call_once(rt.tuned_read, [&] { rt.tuned = rt.tuning.load(); });
  std::string text;
  {
    std::lock_guard lock(rt.tuned_mutex);
    auto it = rt.tuned.find(bucket.to_text());
    if (it == rt.tuned.end()) return std::nullopt;
    text = it->second.spec_text;
  }
  try {
    KernelSpec spec = KernelSpec::parse(text);
    spec.validate();
    if (spec.arch == rt.arch && spec.layout == bucket.layout && spec.a == bucket.ab_type && spec.b == bucket.b_type &&
        spec.c == bucket.c_type && spec.fusion == bucket.fusion && spec.b_scales == bucket.b_scales)
      return spec;
  } catch (const Error&) {
  }
  log_warning_once("tuned:" + text, fmt::format("ignoring tuning result '{}' in {}: not a spec for this device", text,
                                                rt.tuning.path()));
  return std::nullopt;
}

}  // namespace

Kernel Runtime::kernel(const KernelSpec& spec) {
  if (!impl_->has_device)
    throw DriverError(fmt::format("Runtime::kernel: this runtime is offline ({}); it can compile but not load kernels",
                                  impl_->arch.to_text()),
                      CUDA_ERROR_NO_DEVICE);
  if (!(spec.arch == impl_->arch))
    throw InvalidArgument(fmt::format("Runtime::kernel: spec arch={} but the device is {}", spec.arch.to_text(),
                                      impl_->arch.to_text()));
  const LoadedKernel& loaded = load_kernel(*impl_, spec);
  Kernel out;
  out.runtime_ = this;
  out.spec_ = &loaded.compiled->spec;
  out.loaded_ = &loaded;
  return out;
}

void Kernel::launch(const GroupedGemmArgs& args, Stream stream) const {
  if (!runtime_) throw InvalidArgument("Kernel::launch: this Kernel is empty (get one from Runtime::kernel)");
  validate_args(args);
  validate_args_match_spec(args, *spec_);
  runtime_->impl_->make_current();
  HostGroups groups = host_groups(args, "Kernel::launch", stream);
  if (groups.known) validate_groups(args, groups.view);
  launch_loaded(*runtime_->impl_, *static_cast<const LoadedKernel*>(loaded_), args, groups.get(), stream);
}

KernelSpec Runtime::choose_spec(const GroupedGemmArgs& args) const {
  HostGroups groups;
  if (!args.host_groups.empty()) groups.view = args.host_groups, groups.known = true;
  std::vector<int> rows;
  return moejit::choose_spec(problem_of(args, groups, rows), impl_->arch, std::max(impl_->sm_count, 1));
}

std::optional<KernelSpec> Runtime::tuned_spec(const GroupedGemmArgs& args) {
  validate_args(args);
  validate_fusion_args(args, args.fusion);
  if (impl_->has_device) impl_->make_current();
  HostGroups groups;
  if (!args.host_groups.empty() || impl_->has_device) groups = host_groups(args, "Runtime::tuned_spec", std::nullopt);
  if (groups.known) validate_groups(args, groups.view);
  return stored_spec(*impl_, bucket_of(args, groups, std::max(impl_->sm_count, 1)));
}

std::string Runtime::tuning_file() const { return impl_->tuning.path(); }

void Runtime::grouped_gemm(const GroupedGemmArgs& args, Stream stream) {
  validate_args(args);
  validate_fusion_args(args, args.fusion);
  if (!impl_->has_device) throw DriverError("Runtime::grouped_gemm: this runtime is offline", CUDA_ERROR_NO_DEVICE);
  impl_->make_current();
  HostGroups groups = host_groups(args, "Runtime::grouped_gemm", stream);
  if (groups.known) validate_groups(args, groups.view);
  ShapeBucket bucket = bucket_of(args, groups, std::max(impl_->sm_count, 1));
  const LoadedKernel* k = nullptr;
  {
    std::shared_lock lock(impl_->hot_mutex);
    if (auto it = impl_->by_bucket.find(bucket); it != impl_->by_bucket.end()) k = it->second;
  }
  if (!k) {
    // First call in this bucket: a stored tuning result, a tuning run now, or the heuristic.
    std::optional<KernelSpec> spec = stored_spec(*impl_, bucket);
    const char* source = "stored tuning result";
    // Tuning times launches and synchronizes, which graph capture forbids: a bucket first met under
    // capture gets the heuristic's kernel, and is tuned at its first call outside a capture.
    bool tuning_deferred = false;
    if (!spec && impl_->options.autotune) {
      if (stream_is_capturing(stream)) {
        tuning_deferred = true;
        log_warning_once("autotune-capture " + bucket.to_text(),
                         fmt::format("grouped_gemm: bucket {} met first under graph capture: heuristic kernel; "
                                     "it is tuned at its first call outside a capture",
                                     bucket.to_text()));
      } else {
        GroupedGemmArgs with_groups = args;
        if (groups.known) with_groups.host_groups = groups.view;
        spec = tune(with_groups, stream).best;
        source = "tuned now";
      }
    }
    if (!spec) {
      std::vector<int> rows;
      spec = moejit::choose_spec(problem_of(args, groups, rows), impl_->arch, std::max(impl_->sm_count, 1));
      source = "heuristic";
    }
    // Once per bucket (MOEJIT_LOG=debug): what was chosen and from what, for `moejit inspect`.
    log_debug(fmt::format("grouped_gemm: bucket {} ({}) -> {} ({})", bucket.to_text(),
                          groups.known                         ? "host group sizes"
                          : !args.expected_group_rows.empty() ? "expected_group_rows"
                          : args.expected_rows > 0            ? "expected_rows, typical routing"
                                                              : "upper bound of the rows, typical routing",
                          spec->to_text(), source));
    const LoadedKernel& loaded = load_kernel(*impl_, *spec);
    if (tuning_deferred) {
      k = &loaded;  // not remembered for the bucket, so that the next call outside a capture tunes it
    } else {
      std::unique_lock lock(impl_->hot_mutex);
      k = impl_->by_bucket.try_emplace(bucket, &loaded).first->second;
    }
  }
  launch_loaded(*impl_, *k, args, groups.get(), stream);
}

TuneResult Runtime::tune(const GroupedGemmArgs& args, Stream stream, const TuneOptions& options) {
  validate_args(args);
  validate_fusion_args(args, args.fusion);
  if (!impl_->has_device) throw DriverError("Runtime::tune: this runtime is offline: tuning times kernels on a GPU", CUDA_ERROR_NO_DEVICE);
  if (!(options.ms_per_candidate > 0 && options.ms_per_candidate <= 60000))
    throw InvalidArgument(fmt::format("Runtime::tune: ms_per_candidate={} (expected > 0 and at most 60000)", options.ms_per_candidate));
  if (options.compile_threads < 0)
    throw InvalidArgument(fmt::format("Runtime::tune: compile_threads={} (expected >= 0; 0 means one per core)", options.compile_threads));
  impl_->make_current();
  if (stream_is_capturing(stream))
    throw InvalidArgument("Runtime::tune: the stream is capturing a CUDA graph; tuning times launches and "
                          "synchronizes, so tune before the capture (or on another stream, outside it)");
  HostGroups groups = host_groups(args, "Runtime::tune", std::nullopt);  // capture was ruled out above
  if (groups.known) validate_groups(args, groups.view);
  ShapeBucket bucket = bucket_of(args, groups, std::max(impl_->sm_count, 1));
  std::vector<int> rows;
  std::vector<KernelSpec> specs = tuning_candidates(problem_of(args, groups, rows), impl_->arch, std::max(impl_->sm_count, 1));

  int threads = options.compile_threads ? options.compile_threads : (int)std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::string> errors = compile_in_parallel(specs.size(), threads, [&](std::size_t i) { impl_->cache.get(specs[i]); });

  TuneResult result;
  result.bucket = bucket.to_text();
  // Each built candidate is loaded and launched once; then the ones that ran are timed in turns
  // (time_in_turns: at the power cap, one after another favoured whichever came first).
  std::vector<const LoadedKernel*> loaded(specs.size(), nullptr);
  std::vector<std::function<void()>> launches;
  std::vector<std::size_t> timed;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    TuneCandidate c{specs[i], 0, errors[i]};
    if (c.error.empty()) {
      try {
        loaded[i] = &load_kernel(*impl_, specs[i]);
        launch_loaded(*impl_, *loaded[i], args, groups.get(), stream);
        launches.push_back([&, kernel = loaded[i]] { launch_loaded(*impl_, *kernel, args, groups.get(), stream); });
        timed.push_back(i);
      } catch (const DriverError& e) {
        // A kernel that cannot be resident is skipped; any other driver error (a faulting launch
        // leaves the context unusable) ends the tuning run.
        if (e.code() != CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) throw;
        c.error = e.what();
      }
    }
    result.candidates.push_back(std::move(c));
  }
  const LoadedKernel* best = nullptr;
  if (!launches.empty()) {
    // TuneOptions::clear_l2: a memset of twice L2 (at least 64 MB) before each timed launch.
    DeviceBuffer l2_clear;
    std::function<void()> clear_l2;
    if (options.clear_l2) {
      int l2_bytes = 0;
      MOEJIT_CU(driver().cuDeviceGetAttribute(&l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, impl_->device));
      const std::size_t bytes = std::max<std::size_t>(2 * (std::size_t)std::max(l2_bytes, 0), std::size_t{64} << 20);
      try {
        l2_clear = DeviceBuffer(bytes);
      } catch (const DriverError& e) {
        // A device too full for the clear's buffer still gets tuned, back to back, and says so.
        if (e.code() != CUDA_ERROR_OUT_OF_MEMORY) throw;
        log_warning(fmt::format("Runtime::tune: no {} MB for the L2 clears ({}); timing back to back", bytes >> 20, e.what()));
      }
      if (l2_clear.ptr())
        clear_l2 = [&] {
          MOEJIT_CU(driver().cuMemsetD8Async(l2_clear.ptr(), 0, l2_clear.bytes(), reinterpret_cast<CUstream>(stream)));
        };
    }
    const std::vector<double> ms = time_in_turns(launches, stream, options.ms_per_candidate, 5, clear_l2);
    for (std::size_t t = 0; t < timed.size(); ++t) {
      const std::size_t i = timed[t];
      result.candidates[i].ms = ms[t];
      if (!best || ms[t] < result.best_ms) best = loaded[i], result.best = specs[i], result.best_ms = ms[t];
    }
  }
  if (!best)
    throw CompileError(fmt::format("Runtime::tune: no candidate for {} could be built; the heuristic's choice failed with:\n{}",
                                   result.bucket, result.candidates[0].error));
  result.heuristic = result.candidates[0].spec;
  result.heuristic_ms = result.candidates[0].ms;

  TunedEntry entry{result.best.to_text(), result.best_ms, result.heuristic_ms};
  {
    std::call_once(impl_->tuned_read, [&] { impl_->tuned = impl_->tuning.load(); });
    std::lock_guard lock(impl_->tuned_mutex);
    impl_->tuned[result.bucket] = entry;
    if (options.store) impl_->tuning.store(result.bucket, entry);
  }
  std::unique_lock lock(impl_->hot_mutex);
  impl_->by_bucket.insert_or_assign(bucket, best);
  return result;
}

KernelCache& runtime_cache(Runtime& rt) { return rt.impl().cache; }

void runtime_make_current(Runtime& rt) { rt.impl().make_current(); }

CUfunction runtime_function(Runtime& rt, const std::string& spec_text, const char* entry,
                            const std::function<std::string()>& cubin) {
  Runtime::Impl& impl = rt.impl();
  if (!impl.has_device)
    throw DriverError(fmt::format("{}: this runtime is offline ({}); it can compile but not load kernels", spec_text,
                                  impl.arch.to_text()),
                      CUDA_ERROR_NO_DEVICE);
  std::string name = spec_text + "|" + entry;
  std::lock_guard lock(impl.extra_mutex);
  if (auto it = impl.extra_functions.find(name); it != impl.extra_functions.end()) return it->second;
  auto module = impl.extra_modules.find(spec_text);
  if (module == impl.extra_modules.end()) {
    std::string bytes = cubin();
    impl.make_current();
    CUmodule loaded = nullptr;
    MOEJIT_CU(driver().cuModuleLoadData(&loaded, bytes.data()));
    module = impl.extra_modules.emplace(spec_text, loaded).first;
  }
  CUfunction function = nullptr;
  MOEJIT_CU(driver().cuModuleGetFunction(&function, module->second, entry));
  impl.extra_functions.emplace(std::move(name), function);
  return function;
}

CUfunction runtime_cached_function(Runtime& rt, std::uint64_t key) {
  std::shared_lock lock(rt.impl().extra_hot_mutex);
  auto it = rt.impl().extra_by_key.find(key);
  return it == rt.impl().extra_by_key.end() ? nullptr : it->second;
}

void runtime_remember_function(Runtime& rt, std::uint64_t key, CUfunction function) {
  std::unique_lock lock(rt.impl().extra_hot_mutex);
  rt.impl().extra_by_key.try_emplace(key, function);
}

}  // namespace moejit
