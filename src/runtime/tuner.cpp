#include "runtime/tuner.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "driver/driver_api.hpp"

namespace moejit {

std::vector<std::string> compile_in_parallel(std::size_t count, int threads,
                                             const std::function<void(std::size_t)>& compile) {
  std::vector<std::string> errors(count);
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i; (i = next++) < count;) {
      try {
        compile(i);
      } catch (const std::exception& e) {
        errors[i] = e.what();
        if (errors[i].empty()) errors[i] = "unknown error";
      }
    }
  };
  int n = std::max(1, std::min<int>(threads, static_cast<int>(count)));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return errors;
}

namespace {
struct Event {
  CUevent handle = nullptr;
  Event() { MOEJIT_CU(driver().cuEventCreate(&handle, CU_EVENT_DEFAULT)); }
  ~Event() {
    if (handle) driver().cuEventDestroy(handle);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};
}  // namespace

double time_launches(const std::function<void()>& launch, Stream stream, double min_ms, int samples) {
  const DriverApi& api = driver();
  auto cu_stream = reinterpret_cast<CUstream>(stream);
  Event start, stop;
  auto timed = [&](int launches) {
    MOEJIT_CU(api.cuEventRecord(start.handle, cu_stream));
    for (int i = 0; i < launches; ++i) launch();
    MOEJIT_CU(api.cuEventRecord(stop.handle, cu_stream));
    MOEJIT_CU(api.cuEventSynchronize(stop.handle));
    float ms = 0;
    MOEJIT_CU(api.cuEventElapsedTime(&ms, start.handle, stop.handle));
    return double(ms) / launches;
  };
  launch();  // first launch: module and caches warm
  double once = timed(1);
  samples = std::max(samples, 1);
  int batch = std::clamp(static_cast<int>(std::ceil(min_ms / samples / std::max(once, 1e-3))), 1, 1000);
  std::vector<double> ms(samples);
  for (auto& t : ms) t = timed(batch);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace moejit
