// GPU timing and parallel compilation for the autotuner (Runtime::tune). The runtime decides
// what to time; these helpers only compile in parallel and measure launches with device events.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "moejit/runtime.hpp"

namespace moejit {

// Runs compile(i) for i in [0, count) on `threads` threads; returns each call's error text
// ("" for success). Never throws for a failed compile.
std::vector<std::string> compile_in_parallel(std::size_t count, int threads, const std::function<void(std::size_t)>& compile);

// Median device time of one launch (ms): a warm-up launch, one launch to size the batches, then
// `samples` batches of launches between two events, each batch about min_ms / samples long.
double time_launches(const std::function<void()>& launch, Stream stream, double min_ms, int samples = 5);

}  // namespace moejit
