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

// Median device time of one launch (ms) of each of `launches`, timed in turns: each is launched
// once (warm-up) and once more to size its batches, then `rounds` rounds each run one batch of
// every launch (about min_ms / rounds long), the order rotated by one from round to round. Why
// turns: at the 700 W cap a launch's clock depends on the work of the seconds before, and timed
// one after another the first candidate (the heuristic's) ran on the coolest chip. On GLM-4.5's up
// GEMM at 4096 tokens it read 2.12 ms first and 2.24-2.38 ms in later slots, and the tuner kept it
// against a config that takes 0.91x its time in turns (docs/perf.md v45).
// clear_l2, where given, runs before each timed launch (and before the sizing one), outside its
// events (TuneOptions::clear_l2): each launch then has its own pair of events, and a batch is at
// most kClearedLaunchesPerBatch launches; the median is over the rounds' mean launch times.
std::vector<double> time_in_turns(const std::vector<std::function<void()>>& launches, Stream stream, double min_ms,
                                  int rounds = 5, const std::function<void()>& clear_l2 = {});
// A clear takes longer than a decode launch; more launches per batch would spend the time on clears.
constexpr int kClearedLaunchesPerBatch = 16;

}  // namespace moejit
