// The kernel template files: embedded into the library at build time, or read from
// MOEJIT_TEMPLATE_DIR when that is set (for editing kernels without rebuilding).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "moejit/spec.hpp"

namespace moejit {

struct EmbeddedTemplate {
  const char* path;      // relative to kernel_templates/, e.g. "moejit/params.cuh"
  const char* contents;
};
const std::vector<EmbeddedTemplate>& embedded_templates();

struct TemplateFile {
  std::string path;
  std::string contents;
};

class TemplateStore {
 public:
  // The process-wide store: MOEJIT_TEMPLATE_DIR if set, else the embedded copy.
  static const TemplateStore& current();
  static TemplateStore from_embedded();
  static TemplateStore from_directory(const std::string& dir);  // throws Error if unreadable

  const std::vector<TemplateFile>& files() const { return files_; }
  const std::string& file(std::string_view path) const;  // throws Error if missing
  Key128 digest() const { return digest_; }               // over every path and byte
  const std::string& origin() const { return origin_; }   // "embedded" or the directory

 private:
  void finish();
  std::vector<TemplateFile> files_;
  Key128 digest_;
  std::string origin_;
};

}  // namespace moejit
