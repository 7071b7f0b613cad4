// JIT latency on this machine: cold NVRTC compile, disk-cache hit (a fresh Runtime loading
// from disk), and in-memory hit, for one spec. Needs no GPU.
//
//   jit_latency [SPEC]      (default: the portable kernel the runtime picks for large groups)
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "moejit/moejit.hpp"

int main(int argc, char** argv) {
  using clock = std::chrono::steady_clock;
  std::string text = argc > 1 ? argv[1] : "family=portable,arch=sm_90a,tile=128x128x32,stages=4,warps=2x4";
  moejit::KernelSpec spec = moejit::KernelSpec::parse(text);
  auto dir = std::filesystem::temp_directory_path() / fmt::format("moejit_latency_{}", getpid());
  setenv("MOEJIT_CACHE_DIR", dir.c_str(), 1);
  auto ms_since = [](clock::time_point t) { return std::chrono::duration<double, std::milli>(clock::now() - t).count(); };

  // CPU time (user + sys of the process) as well as wall time: on a machine shared with other
  // builds the wall time of a compile varies by tens of percent, its CPU time much less.
  auto cpu_ms = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
  };
  double c0 = cpu_ms();
  auto t0 = clock::now();
  auto cold_rt = moejit::Runtime::offline(spec.arch);
  auto cold = cold_rt->compile(spec);
  double cold_ms = ms_since(t0);
  double cold_cpu_ms = cpu_ms() - c0;

  std::vector<double> disk_ms;
  for (int i = 0; i < 20; ++i) {
    auto t = clock::now();
    auto rt = moejit::Runtime::offline(spec.arch);
    moejit::CacheOutcome outcome;
    rt->compile(spec, &outcome);
    disk_ms.push_back(ms_since(t));
    if (outcome != moejit::CacheOutcome::disk_hit) return fmt::print(stderr, "expected a disk hit\n"), 1;
  }
  // Memory hit: batches of 1000 calls (a clock read costs about as much as a hit), median batch.
  std::vector<double> mem_us;
  for (int b = 0; b < 21; ++b) {
    auto t = clock::now();
    for (int i = 0; i < 1000; ++i) cold_rt->compile(spec);
    mem_us.push_back(ms_since(t));  // ms per 1000 calls = us per call
  }
  std::sort(disk_ms.begin(), disk_ms.end());
  std::sort(mem_us.begin(), mem_us.end());
  fmt::print("spec: {}\ncold compile (NVRTC, incl. codegen): {:.0f} ms (NVRTC alone {:.0f} ms; CPU {:.0f} ms), cubin {} bytes\n",
             spec.to_text(), cold_ms, cold->compile_ms, cold_cpu_ms, cold->cubin.size());
  fmt::print("disk hit (new Runtime, read + verify): median {:.3f} ms\nmemory hit: median {:.2f} us\n", disk_ms[10], mem_us[10]);
  std::filesystem::remove_all(dir);
  return 0;
}
