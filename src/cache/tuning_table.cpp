#include "cache/tuning_table.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/log.hpp"

namespace moejit {
namespace fs = std::filesystem;

TuningTable::TuningTable(const std::string& cache_dir, const std::string& device_name, int driver_version,
                         const std::string& moejit_version, const std::string& templates_digest) {
  if (cache_dir.empty()) return;
  std::string device;
  for (char c : device_name) device += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  // Kernels change speed when their templates change, so the templates' digest is in the name too.
  path_ = (fs::path(cache_dir) / "tuning" /
           fmt::format("{}_driver{}_moejit{}_tune{}_{}.tsv", device, driver_version, moejit_version, kTuningProtocol,
                       templates_digest.substr(0, 12)))
              .string();
  header_ = fmt::format("# moejit tuning: device={} driver={} moejit={} timing_protocol={} templates={}\n", device_name,
                        driver_version, moejit_version, kTuningProtocol, templates_digest);
}

std::map<std::string, TunedEntry> TuningTable::load() const {
  std::map<std::string, TunedEntry> out;
  if (!enabled()) return out;
  std::ifstream in(path_);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string bucket, spec, best, heuristic;
    if (!std::getline(fields, bucket, '\t') || !std::getline(fields, spec, '\t') || !std::getline(fields, best, '\t') ||
        !std::getline(fields, heuristic))
      continue;
    try {
      out[bucket] = {spec, std::stod(best), std::stod(heuristic)};
    } catch (const std::exception&) {
      continue;
    }
  }
  return out;
}

void TuningTable::store(const std::string& bucket_text, const TunedEntry& entry) const {
  if (!enabled()) return;
  auto entries = load();
  entries[bucket_text] = entry;
  std::string text = header_;
  for (auto& [bucket, e] : entries) text += fmt::format("{}\t{}\t{:.5f}\t{:.5f}\n", bucket, e.spec_text, e.best_ms, e.heuristic_ms);
  std::error_code ec;
  fs::create_directories(fs::path(path_).parent_path(), ec);
  static std::atomic<unsigned> writes{0};  // several runtimes of one process may store at once
  std::string tmp = fmt::format("{}.tmp.{}.{}", path_, getpid(), writes++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      log_warning_once("tuning-write", fmt::format("cannot write tuning results to {}; they stay in memory", tmp));
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path_, ec);
  if (ec) {
    log_warning_once("tuning-write", fmt::format("cannot rename {} to {}: {}", tmp, path_, ec.message()));
    fs::remove(tmp, ec);
  }
}

}  // namespace moejit
