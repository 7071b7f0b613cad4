// Host cost of a launch through moejit against a bare cuLaunchKernelEx through the same driver
// table, on a tiny problem (one group of 64 rows, N=256, K=64) so that the host side decides.
// Each variant enqueues batches of 200 launches (host wall time around the enqueues, then a
// synchronize outside the timed region); the median over 25 batches is printed per launch.
//
//   launch_overhead        (needs a GPU; exits 77 without one)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "driver/driver_api.hpp"
#include "driver/tensor_map.hpp"
#include "moejit/moejit.hpp"
#include "moejit/params.cuh"

using namespace moejit;

namespace {

using clock_type = std::chrono::steady_clock;

// Median host microseconds per call of `call`, in batches of `batch` calls, synchronizing the
// device between batches (outside the timed region).
double per_call_us(const std::function<void()>& call, int batch = 200, int batches = 25) {
  for (int i = 0; i < batch; ++i) call();  // warm-up
  MOEJIT_CU(driver().cuCtxSynchronize());
  std::vector<double> us;
  for (int b = 0; b < batches; ++b) {
    auto t = clock_type::now();
    for (int i = 0; i < batch; ++i) call();
    us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t).count() / batch);
    MOEJIT_CU(driver().cuCtxSynchronize());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main() {
  if (!driver_has_device()) {
    fmt::print("launch_overhead: no GPU; nothing to measure\n");
    return 77;
  }
  Runtime rt;
  const DriverApi& api = driver();
  const int rows = 64, n = 256, k = 64;
  DeviceBuffer a(rows * k * 2), b(n * k * 2), c(rows * n * 2), offsets(2 * sizeof(int));
  std::vector<std::uint16_t> ones(std::max(rows * k, n * k), float_to_bf16(1.0f));
  a.upload(ones.data(), rows * k * 2);
  b.upload(ones.data(), n * k * 2);
  std::vector<int> host_offsets = {0, rows};
  offsets.upload(host_offsets.data(), host_offsets.size() * sizeof(int));

  GroupedGemmArgs args;
  args.a = a.get();
  args.b = b.get();
  args.c = c.get();
  args.num_groups = 1;
  args.n = n;
  args.k = k;
  args.group_offsets = static_cast<const int*>(offsets.get());
  args.total_rows = rows;
  args.host_groups = host_offsets;

  fmt::print("device: {} ({})\n", rt.device_name(), rt.arch().to_text());
  std::vector<std::pair<std::string, double>> results;

  // Bare: the portable kernel's cubin loaded by hand, parameters built once, one cuLaunchKernelEx
  // per call. The portable ABI is the params struct alone, so this is the floor for any kernel.
  KernelSpec portable = KernelSpec::parse("family=portable,tile=64x128x32,stages=4,warps=2x4");
  portable.arch = rt.arch();
  auto compiled = rt.compile(portable);
  CUmodule module;
  CUfunction function;
  MOEJIT_CU(api.cuModuleLoadData(&module, compiled->cubin.data()));
  MOEJIT_CU(api.cuModuleGetFunction(&function, module, "moejit_grouped_gemm"));
  MOEJIT_CU(api.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, portable.dynamic_smem_bytes()));
  GroupedGemmParams p{};
  p.a = args.a;
  p.b = args.b;
  p.c = args.c;
  p.group_offsets = args.group_offsets;
  p.num_groups = 1;
  p.n = n;
  p.k = k;
  p.total_rows = rows;
  CUlaunchConfig config{};
  config.gridDimX = (n + portable.tile.n - 1) / portable.tile.n;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = portable.threads_per_cta();
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = portable.dynamic_smem_bytes();
  void* params[] = {&p};
  double bare = per_call_us([&] { MOEJIT_CU(api.cuLaunchKernelEx(&config, function, params, nullptr)); });
  results.emplace_back("bare cuLaunchKernelEx (portable cubin, params prebuilt)", bare);

  std::vector<KernelSpec> specs = {portable};
  KernelSpec chosen = rt.choose_spec(args);
  if (chosen.family != KernelFamily::portable) specs.push_back(chosen);
  for (const KernelSpec& spec : specs) {
    std::string family(to_text(spec.family));
    Kernel kernel = rt.kernel(spec);
    results.emplace_back(fmt::format("low level: Kernel::launch, {}", family), per_call_us([&] { kernel.launch(args, nullptr); }));
    results.emplace_back(fmt::format("lookup: Runtime::kernel(spec) hit, {}", family),
                         per_call_us([&] { (void)rt.kernel(spec); }, 1000, 25));
    results.emplace_back(fmt::format("lookup: Runtime::compile(spec) hit, {}", family),
                         per_call_us([&] { (void)rt.compile(spec); }, 1000, 25));
  }
  results.emplace_back(fmt::format("high level: Runtime::grouped_gemm ({})", chosen.family == KernelFamily::hopper ? "hopper" : "portable"),
                       per_call_us([&] { rt.grouped_gemm(args, nullptr); }));
  if (chosen.family == KernelFamily::hopper) {
    results.emplace_back("cuTensorMapEncodeTiled (one descriptor; Hopper launches encode A, B and C or A and B)",
                         per_call_us([&] { (void)make_tma_2d_swizzled(args.a, DType::bf16, rows, k, 64, 64); }, 1000, 25));
  }
  MOEJIT_CU(api.cuCtxSynchronize());
  api.cuModuleUnload(module);

  fmt::print("{:<90} {:>10}\n", "host time per call (median of 25 batches of 200-1000)", "us");
  for (auto& [what, us] : results)
    fmt::print("{:<90} {:>10.3f}{}\n", what, us,
               what.starts_with("low") || what.starts_with("high") ? fmt::format("   (+{:.3f} over bare)", us - bare) : "");
  return 0;
}
