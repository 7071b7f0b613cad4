#include "codegen/template_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "moejit/errors.hpp"
#include "util/hash.hpp"

namespace moejit {

namespace fs = std::filesystem;

TemplateStore TemplateStore::from_embedded() {
  TemplateStore store;
  for (auto& t : embedded_templates()) store.files_.push_back({t.path, t.contents});
  store.origin_ = "embedded";
  store.finish();
  return store;
}

TemplateStore TemplateStore::from_directory(const std::string& dir) {
  TemplateStore store;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(fmt::format("MOEJIT_TEMPLATE_DIR='{}' is not a readable directory", dir));
  for (auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    auto rel = fs::relative(entry.path(), dir).generic_string();
    if (!(rel.ends_with(".cuh") || rel.ends_with(".cu.in"))) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    store.files_.push_back({rel, text.str()});
  }
  store.origin_ = dir;
  store.finish();
  return store;
}

const TemplateStore& TemplateStore::current() {
  static const TemplateStore store = [] {
    const char* dir = std::getenv("MOEJIT_TEMPLATE_DIR");
    return dir && *dir ? from_directory(dir) : from_embedded();
  }();
  return store;
}

void TemplateStore::finish() {
  std::sort(files_.begin(), files_.end(), [](auto& x, auto& y) { return x.path < y.path; });
  KeyBuilder key;
  for (auto& f : files_) key.add(f.path, f.contents);
  digest_ = key.finish();
}

const std::string& TemplateStore::file(std::string_view path) const {
  for (auto& f : files_)
    if (f.path == path) return f.contents;
  throw Error(fmt::format("kernel template '{}' not found in {}", path, origin_));
}

}  // namespace moejit
