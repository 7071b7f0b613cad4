// Helpers shared by the CPU tests.
#pragma once
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>

#include "codegen/template_store.hpp"

namespace moejit::test {

namespace fs = std::filesystem;

// A fresh folder under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("moejit_test_" + std::to_string(getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

inline std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_bytes(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A copy of the real templates whose portable kernel is replaced by a trivial one with the
// same signature: NVRTC compiles it in tens of milliseconds, so cache tests stay fast.
inline TemplateStore fast_template_store(const TempDir& dir) {
  fs::copy(fs::path(MOEJIT_SOURCE_DIR) / "kernel_templates", dir.path() / "tpl", fs::copy_options::recursive);
  write_bytes(dir.path() / "tpl/moejit/portable/grouped_gemm_sm80.cuh", R"(#pragma once
#include "moejit/common/scheduler.cuh"
#include "moejit/common/types.cuh"
namespace moejit { namespace portable {
template <int M, int N, int K, int S, int WM, int WN, int TAB, int TC, int L, int SC>
constexpr int smem_bytes() { return S * (M + N) * (K + 8) * 2; }
template <int M, int N, int K, int S, int WM, int WN, int TAB, int TC, int L, int SC>
__device__ void grouped_gemm(const GroupedGemmParams& p) { if (p.c) static_cast<float*>(p.c)[threadIdx.x] = 1.f; }
}}
)");
  return TemplateStore::from_directory((dir.path() / "tpl").string());
}

// Starts `body` in a forked child whose stderr goes to `stderr_path` (if given) and returns
// its pid. The child exits with body's return value (98 if it threw) through _exit, so no
// atexit handler (Catch2's report, LeakSanitizer) runs in it.
inline pid_t spawn_child(const std::function<int()>& body, const std::string& stderr_path = "") {
  pid_t pid = fork();
  if (pid == 0) {
    if (!stderr_path.empty()) {
      int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
      if (fd >= 0) ::dup2(fd, 2);
    }
    int code = 98;
    try {
      code = body();
    } catch (...) {
    }
    _exit(code);
  }
  return pid;
}

// The child's wait status, or -1.
inline int wait_child(pid_t pid) {
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

inline int run_in_child(const std::function<int()>& body, const std::string& stderr_path = "") {
  return wait_child(spawn_child(body, stderr_path));
}

inline bool exited_with(int status, int code) { return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == code; }

struct CommandResult {
  int code;
  std::string out;
};

// Runs a shell command; stdout and stderr together.
inline CommandResult run_command(const std::string& command) {
  CommandResult r{-1, ""};
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, pipe)) r.out.append(buf, n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::size_t count_occurrences(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

}  // namespace moejit::test
