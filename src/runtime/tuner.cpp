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
                                  int rounds, const std::function<void()>& clear_l2) {
  const DriverApi& api = driver();
  auto cu_stream = reinterpret_cast<CUstream>(stream);
  const std::size_t n = launches.size();
  auto elapsed = [&](const Event& from, const Event& to) {
    float ms = 0;
    MOEJIT_CU(api.cuEventElapsedTime(&ms, from.handle, to.handle));
    return double(ms);
  };
  rounds = std::max(rounds, 1);
  const int max_batch = clear_l2 ? kClearedLaunchesPerBatch : 1000;
  std::vector<int> batch(n, 1);
  {
    Event start, stop;
    for (std::size_t i = 0; i < n; ++i) {
      launches[i]();  // first launch: module and caches warm
      if (clear_l2) clear_l2();
      MOEJIT_CU(api.cuEventRecord(start.handle, cu_stream));
      launches[i]();
      MOEJIT_CU(api.cuEventRecord(stop.handle, cu_stream));
      MOEJIT_CU(api.cuEventSynchronize(stop.handle));
      batch[i] = std::clamp(static_cast<int>(std::ceil(min_ms / rounds / std::max(elapsed(start, stop), 1e-3))), 1, max_batch);
    }
  }
  // Back to back, a batch is timed by one pair of events; with clears between the launches, each
  // launch by its own pair (events[i][2b], [2b + 1]), which a round reuses once the stream is idle.
  std::vector<std::vector<Event>> events(n);
  for (std::size_t i = 0; i < n; ++i) events[i] = std::vector<Event>(clear_l2 ? 2 * batch[i] : 2);
  std::vector<std::vector<double>> ms(n);
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = (j + static_cast<std::size_t>(r)) % n;
      if (clear_l2) {
        for (int b = 0; b < batch[i]; ++b) {
          clear_l2();
          MOEJIT_CU(api.cuEventRecord(events[i][2 * b].handle, cu_stream));
          launches[i]();
          MOEJIT_CU(api.cuEventRecord(events[i][2 * b + 1].handle, cu_stream));
        }
      } else {
        MOEJIT_CU(api.cuEventRecord(events[i][0].handle, cu_stream));
        for (int b = 0; b < batch[i]; ++b) launches[i]();
        MOEJIT_CU(api.cuEventRecord(events[i][1].handle, cu_stream));
      }
    }
    MOEJIT_CU(api.cuStreamSynchronize(cu_stream));
    for (std::size_t i = 0; i < n; ++i) {
      double total = 0;
      for (std::size_t e = 0; e < events[i].size(); e += 2) total += elapsed(events[i][e], events[i][e + 1]);
      ms[i].push_back(total / batch[i]);
    }
  }
  std::vector<double> median(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::sort(ms[i].begin(), ms[i].end());
    median[i] = ms[i][ms[i].size() / 2];
  }
  return median;
}

}  // namespace moejit
