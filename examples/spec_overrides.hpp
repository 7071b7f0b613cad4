// Field overrides of a kernel spec for the examples' tuning flags (bench_suite's BENCH_SPECS,
// moe_layer's --gemm1-spec): "tile=128x192x64,stages=5" replaces those fields of `base`.
#pragma once
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "moejit/moejit.hpp"

namespace moejit::examples {

inline KernelSpec override_fields(const KernelSpec& base, const std::string& overrides) {
  std::map<std::string, std::string> fields;
  std::vector<std::string> order;
  for (const std::string& text : {base.to_text(), overrides}) {
    std::stringstream items(text);
    for (std::string item; std::getline(items, item, ',');) {
      auto eq = item.find('=');
      if (eq == std::string::npos) continue;
      std::string key = item.substr(0, eq);
      if (!fields.count(key)) order.push_back(key);
      fields[key] = item.substr(eq + 1);
    }
  }
  std::string merged;
  for (auto& key : order) merged += key + "=" + fields[key] + ",";
  return KernelSpec::parse(merged);
}

}  // namespace moejit::examples
