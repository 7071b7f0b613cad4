// Autotuning results on disk: one small text file per (device name, driver version, moejit
// version, timing protocol, kernel templates) in <cache dir>/tuning/, one line per shape bucket:
//   <bucket text> TAB <spec text> TAB <best ms> TAB <heuristic's ms>
// Writers re-read the file, merge their lines in and rename a temporary file into place, so a
// reader sees a whole file; two processes tuning at once can lose each other's newest line
// (never corrupt the file), and a lost line is only re-measured later.
#pragma once
#include <map>
#include <optional>
#include <string>

namespace moejit {

// How Runtime::tune times its candidates, in the file name so that results timed another way are
// not reused: 2 (v55) clears L2 before each timed launch (TuneOptions::clear_l2); protocol 1 timed
// them back to back, and read decode launches up to 20% faster than a model runs them.
constexpr int kTuningProtocol = 2;

struct TunedEntry {
  std::string spec_text;
  double best_ms = 0, heuristic_ms = 0;
};

class TuningTable {
 public:
  TuningTable() = default;  // disabled: finds nothing, stores nothing
  // cache_dir empty: disabled. The file name is made of the other arguments.
  TuningTable(const std::string& cache_dir, const std::string& device_name, int driver_version,
              const std::string& moejit_version, const std::string& templates_digest);

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::map<std::string, TunedEntry> load() const;  // bucket text -> entry; unreadable lines skipped
  void store(const std::string& bucket_text, const TunedEntry& entry) const;  // failures logged once

 private:
  std::string path_, header_;
};

}  // namespace moejit
