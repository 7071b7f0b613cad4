// One exception hierarchy for everything moejit throws. Messages name the argument,
// the value and what was expected; driver and NVRTC errors carry the call that failed.
#pragma once
#include <stdexcept>
#include <string>

namespace moejit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A public entry point got an argument it cannot use (null, misaligned, inconsistent).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Kernel spec text that does not parse, or a spec whose fields cannot go together.
class SpecError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// NVRTC rejected generated source; what() holds the spec, the log and source excerpts.
class CompileError : public Error {
 public:
  using Error::Error;
};

// A CUDA driver call failed (or no driver/GPU is present); what() names the call.
class DriverError : public Error {
 public:
  DriverError(const std::string& message, int code) : Error(message), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// The disk cache could not be used in a way that cannot be recovered by rebuilding.
class CacheError : public Error {
 public:
  using Error::Error;
};

}  // namespace moejit
