// Helpers shared by the CPU tests.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
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

}  // namespace moejit::test
