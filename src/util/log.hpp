// Minimal logging to stderr. MOEJIT_LOG=quiet silences warnings; =debug adds detail.
#pragma once
#include <string>

namespace moejit {

void log_warning(const std::string& message);
// Logs a warning only the first time `once_key` is seen in this process.
void log_warning_once(const std::string& once_key, const std::string& message);
void log_debug(const std::string& message);

}  // namespace moejit
