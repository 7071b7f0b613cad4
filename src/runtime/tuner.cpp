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

std::vector<double> time_in_turns(const std::vector<std::function<void()>>& launches, Stream stream, double min_ms,
                                  int rounds) {
  const DriverApi& api = driver();
  auto cu_stream = reinterpret_cast<CUstream>(stream);
  const std::size_t n = launches.size();
  std::vector<Event> start(n), stop(n);
  auto elapsed = [&](std::size_t i) {
    float ms = 0;
    MOEJIT_CU(api.cuEventElapsedTime(&ms, start[i].handle, stop[i].handle));
    return double(ms);
  };
  rounds = std::max(rounds, 1);
  std::vector<int> batch(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    launches[i]();  // first launch: module and caches warm
    MOEJIT_CU(api.cuEventRecord(start[i].handle, cu_stream));
    launches[i]();
    MOEJIT_CU(api.cuEventRecord(stop[i].handle, cu_stream));
    MOEJIT_CU(api.cuEventSynchronize(stop[i].handle));
    batch[i] = std::clamp(static_cast<int>(std::ceil(min_ms / rounds / std::max(elapsed(i), 1e-3))), 1, 1000);
  }
  std::vector<std::vector<double>> ms(n);
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = (j + static_cast<std::size_t>(r)) % n;
      MOEJIT_CU(api.cuEventRecord(start[i].handle, cu_stream));
      for (int b = 0; b < batch[i]; ++b) launches[i]();
      MOEJIT_CU(api.cuEventRecord(stop[i].handle, cu_stream));
    }
    MOEJIT_CU(api.cuStreamSynchronize(cu_stream));
    for (std::size_t i = 0; i < n; ++i) ms[i].push_back(elapsed(i) / batch[i]);
  }
  std::vector<double> median(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::sort(ms[i].begin(), ms[i].end());
    median[i] = ms[i][ms[i].size() / 2];
  }
  return median;
}

}  // namespace moejit
