#include "cli/presets.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "heuristics/config.hpp"
#include "moejit/errors.hpp"

#ifndef MOEJIT_PRESET_DIR
#define MOEJIT_PRESET_DIR "cache/presets"
#endif

namespace moejit {
namespace fs = std::filesystem;

namespace {
std::vector<std::string> preset_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("MOEJIT_PRESET_DIR"); env && *env) dirs.push_back(env);
  dirs.push_back(MOEJIT_PRESET_DIR);
  return dirs;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}
}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (auto& dir : preset_dirs()) {
    std::error_code ec;
    for (auto& f : fs::directory_iterator(dir, ec))
      if (f.path().extension() == ".preset") names.push_back(f.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

ModelPreset load_preset(const std::string& name_or_path) {
  std::string path;
  if (fs::is_regular_file(name_or_path)) path = name_or_path;
  for (auto& dir : preset_dirs())
    if (path.empty() && fs::is_regular_file(fs::path(dir) / (name_or_path + ".preset")))
      path = (fs::path(dir) / (name_or_path + ".preset")).string();
  if (path.empty())
    throw InvalidArgument(fmt::format("preset '{}' not found (known: {})", name_or_path, fmt::join(preset_names(), ", ")));
  ModelPreset p;
  p.name = fs::path(path).stem().string();
  std::ifstream in(path);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line.erase(0, line.find_first_not_of(" \t"));
    line.erase(line.find_last_not_of(" \t\r") + 1);
    if (line.empty()) continue;
    auto eq = line.find('=');
    if (eq == std::string::npos) throw InvalidArgument(fmt::format("{}:{}: expected key=value", path, line_no));
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    auto as_int = [&] {
      try {
        return std::stoi(value);
      } catch (...) {
        throw InvalidArgument(fmt::format("{}:{}: {}='{}' is not an integer", path, line_no, key, value));
      }
    };
    if (key == "experts") p.experts = as_int();
    else if (key == "topk") p.topk = as_int();
    else if (key == "hidden") p.hidden = as_int();
    else if (key == "intermediate") p.intermediate = as_int();
    else if (key == "up_n") p.up_n = as_int();
    else if (key == "tokens") {
      p.tokens.clear();
      for (auto& t : split(value, ',')) p.tokens.push_back(std::stoi(t));
    } else if (key == "dtypes") {
      p.dtypes.clear();
      for (auto& t : split(value, ','))
        p.dtypes.push_back(KernelSpec::parse("a=" + t).a);
    } else if (key == "weights") {
      p.weights.clear();
      for (auto& t : split(value, ',')) {
        DType w = KernelSpec::parse("b=" + t).b;
        if (w != DType::mxfp4 && w != DType::nvfp4)
          throw InvalidArgument(fmt::format("{}:{}: weights='{}' (expected mxfp4 and/or nvfp4)", path, line_no, t));
        p.weights.push_back(w);
      }
    } else if (key == "layouts") {
      p.layouts.clear();
      for (auto& t : split(value, ',')) p.layouts.push_back(KernelSpec::parse("layout=" + t).layout);
    } else
      throw InvalidArgument(fmt::format("{}:{}: unknown key '{}' (known: experts, topk, hidden, intermediate, up_n, tokens, dtypes, weights, layouts)",
                                        path, line_no, key));
  }
  if (p.experts < 1 || p.topk < 1 || p.hidden < 1 || p.intermediate < 1 || p.tokens.empty())
    throw InvalidArgument(fmt::format("{}: experts, topk, hidden, intermediate and tokens are required", path));
  if (p.up_n == 0) p.up_n = 2 * p.intermediate;
  return p;
}

std::vector<KernelSpec> preset_specs(const ModelPreset& p, const Arch& arch, int sm_count) {
  std::vector<KernelSpec> specs;
  // (A/B type, B's type when it differs): each dtype, then bf16 activations with each 4-bit format.
  std::vector<std::pair<DType, std::optional<DType>>> formats;
  for (DType dtype : p.dtypes) formats.push_back({dtype, std::nullopt});
  for (DType w : p.weights) formats.push_back({DType::bf16, w});
  for (auto [dtype, b_type] : formats)
    for (GroupLayout layout : p.layouts)
      for (int tokens : p.tokens)
        for (auto [n, k] : {std::pair{p.up_n, p.hidden}, std::pair{p.hidden, p.intermediate}}) {
          // Balanced routing: each of min(E, tokens·topk) experts gets an equal share of rows.
          long long rows = (long long)tokens * p.topk;
          int active = (int)std::min<long long>(p.experts, rows);
          std::vector<int> group_rows(p.experts, 0);
          for (int e = 0; e < active; ++e) group_rows[e] = (int)(rows / active + (e < rows % active ? 1 : 0));
          // FP8 output is bf16 (the C type the FP8 kernels are measured with).
          GemmProblem problem{layout, dtype, dtype == DType::e4m3 ? DType::bf16 : dtype, p.experts, n, k, rows, group_rows, b_type};
          KernelSpec spec = choose_spec(problem, arch, sm_count);
          if (std::find(specs.begin(), specs.end(), spec) == specs.end()) specs.push_back(spec);
        }
  return specs;
}

}  // namespace moejit
