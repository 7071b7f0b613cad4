#include "util/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

namespace moejit {
namespace {
int level() {
  static const int value = [] {
    const char* v = std::getenv("MOEJIT_LOG");
    if (v && !std::strcmp(v, "quiet")) return 0;
    if (v && !std::strcmp(v, "debug")) return 2;
    return 1;
  }();
  return value;
}
std::mutex g_mutex;
}  // namespace

void log_warning(const std::string& message) {
  if (level() < 1) return;
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "moejit: warning: %s\n", message.c_str());
}

void log_warning_once(const std::string& once_key, const std::string& message) {
  static std::set<std::string> seen;
  {
    std::lock_guard lock(g_mutex);
    if (!seen.insert(once_key).second) return;
  }
  log_warning(message);
}

void log_debug(const std::string& message) {
  if (level() < 2) return;
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "moejit: %s\n", message.c_str());
}

}  // namespace moejit
