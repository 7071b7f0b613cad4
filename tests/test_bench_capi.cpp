// The benchmark's C entry point (examples/bench_capi.cpp; tests/gpu/torch_turns.py loads it with
// ctypes on the GPU machine). A MODULE library links with undefined symbols allowed, so a missing
// one would show only there: here it is loaded with every symbol resolved (RTLD_NOW), and bad
// arguments come back as -1 with a message, without a GPU as with one.
#include <catch2/catch.hpp>

#ifdef MOEJIT_BENCH_CAPI_PATH  // built with the examples (not in CI's sanitizer build)
#include <dlfcn.h>

#include <string>

namespace {

using RuntimeFn = void* (*)(char*, int);
using FreeFn = void (*)(void*);
using Bf16Fn = int (*)(void*, const void*, const void*, void*, const int*, const int*, int, int, int, void*, char*, int,
                       char*, int);
using Fp8Fn = int (*)(void*, const void*, const void*, void*, const float*, const float*, const int*, const int*, int, int,
                      int, void*, char*, int, char*, int);
using W4Fn = int (*)(void*, int, const void*, const void*, void*, const float*, const int*, const int*, int, int, int, void*,
                     char*, int, char*, int);

template <class Fn>
Fn symbol(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  INFO(name);
  REQUIRE(f != nullptr);
  return reinterpret_cast<Fn>(f);
}

}  // namespace

TEST_CASE("bench C entry point: loads with every symbol resolved, bad arguments are errors", "[capi]") {
  void* lib = dlopen(MOEJIT_BENCH_CAPI_PATH, RTLD_NOW | RTLD_LOCAL);
  INFO((lib ? "" : dlerror()));
  REQUIRE(lib != nullptr);
  auto make_runtime = symbol<RuntimeFn>(lib, "moejit_bench_runtime");
  auto free_runtime = symbol<FreeFn>(lib, "moejit_bench_runtime_free");
  auto bf16 = symbol<Bf16Fn>(lib, "moejit_bench_grouped_gemm_bf16");
  auto fp8 = symbol<Fp8Fn>(lib, "moejit_bench_grouped_gemm_fp8");
  auto w4 = symbol<W4Fn>(lib, "moejit_bench_grouped_gemm_w4");

  char err[512] = {};
  const int offsets[] = {0, 4};
  CHECK(bf16(nullptr, nullptr, nullptr, nullptr, nullptr, offsets, 1, 128, 64, nullptr, nullptr, 0, err, sizeof err) == -1);
  CHECK(std::string(err).find("non-null") != std::string::npos);
  err[0] = '\0';
  CHECK(fp8(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, -1, 128, 128, nullptr, nullptr, 0, err,
            sizeof err) == -1);
  CHECK(std::string(err).find("groups >= 0") != std::string::npos);
  err[0] = '\0';
  CHECK(w4(nullptr, 1, nullptr, nullptr, nullptr, nullptr, nullptr, offsets, 1, 128, 64, nullptr, nullptr, 0, err, sizeof err) ==
        -1);
  CHECK(std::string(err).find("non-null") != std::string::npos);

  err[0] = '\0';
  void* rt = make_runtime(err, sizeof err);
  if (!rt) {
    CHECK(std::string(err).size() > 0);  // no GPU or no driver here: the reason, not a crash
  } else {
    // A device: the Runtime's validation answers for the null operands.
    err[0] = '\0';
    CHECK(bf16(rt, nullptr, nullptr, nullptr, nullptr, offsets, 1, 128, 64, nullptr, nullptr, 0, err, sizeof err) == -1);
    CHECK(std::string(err).size() > 0);
    err[0] = '\0';
    CHECK(w4(rt, 0, nullptr, nullptr, nullptr, nullptr, nullptr, offsets, 1, 128, 64, nullptr, nullptr, 0, err, sizeof err) ==
          -1);
    CHECK(std::string(err).size() > 0);
    free_runtime(rt);
  }
  dlclose(lib);
}
#endif  // MOEJIT_BENCH_CAPI_PATH
