#include "driver/driver_api.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "moejit/errors.hpp"

namespace moejit {
namespace {

// Driver ABI version the function pointers are requested at: CUDA 12.0 has every function
// above (cuLaunchKernelEx and cuTensorMapEncodeTiled are 12.0), so any 12.x/13.x driver works.
constexpr int kRequestedDriverAbi = 12000;

struct LoadedDriver {
  DriverApi api;
  std::string error;  // empty when loaded
  CUresult error_code = CUDA_SUCCESS;
};

LoadedDriver load() {
  LoadedDriver out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    out.error = fmt::format("the CUDA driver (libcuda.so.1) could not be loaded: {}", dlerror());
    out.error_code = CUDA_ERROR_NOT_INITIALIZED;
    return out;
  }
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) {
    out.error = "the CUDA driver is too old: cuGetProcAddress_v2 is missing (need a CUDA 12.0+ driver)";
    out.error_code = CUDA_ERROR_NOT_SUPPORTED;
    return out;
  }
#define MOEJIT_LOOKUP(name)                                                                               \
  {                                                                                                       \
    void* fn = nullptr;                                                                                   \
    CUdriverProcAddressQueryResult status{};                                                              \
    if (get_proc(#name, &fn, kRequestedDriverAbi, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || \
        !fn) {                                                                                            \
      out.error = "the CUDA driver lacks " #name;                                                         \
      out.error_code = CUDA_ERROR_NOT_FOUND;                                                              \
      return out;                                                                                         \
    }                                                                                                     \
    out.api.name = reinterpret_cast<decltype(out.api.name)>(fn);                                          \
  }
  MOEJIT_DRIVER_FUNCTIONS(MOEJIT_LOOKUP)
#undef MOEJIT_LOOKUP
  CUresult init = out.api.cuInit(0);
  if (init != CUDA_SUCCESS) {
    const char* name = nullptr;
    out.api.cuGetErrorName(init, &name);
    out.error = fmt::format("cuInit(0) failed: {} (no usable GPU?)", name ? name : "unknown");
    out.error_code = init;
  }
  return out;
}

const LoadedDriver& loaded() {
  static const LoadedDriver driver = load();
  return driver;
}

}  // namespace

const DriverApi& driver() {
  const LoadedDriver& d = loaded();
  if (!d.error.empty()) throw DriverError(d.error, d.error_code);
  return d.api;
}

bool driver_has_device() {
  const LoadedDriver& d = loaded();
  if (!d.error.empty()) return false;
  int count = 0;
  return d.api.cuDeviceGetCount(&count) == CUDA_SUCCESS && count > 0;
}

void check_cu(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  const DriverApi& api = driver();
  api.cuGetErrorName(result, &name);
  api.cuGetErrorString(result, &text);
  throw DriverError(fmt::format("{}: {} ({})", call, name ? name : "unknown error", text ? text : "no description"),
                    static_cast<int>(result));
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes) MOEJIT_CU(driver().cuMemAlloc(&ptr_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) driver().cuMemFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
  other.ptr_ = 0;
  other.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_) driver().cuMemFree(ptr_);
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    other.ptr_ = 0;
    other.bytes_ = 0;
  }
  return *this;
}
void DeviceBuffer::upload(const void* host, std::size_t bytes) const {
  if (bytes) MOEJIT_CU(driver().cuMemcpyHtoD(ptr_, host, bytes));
}
void DeviceBuffer::download(void* host, std::size_t bytes) const {
  if (bytes) MOEJIT_CU(driver().cuMemcpyDtoH(host, ptr_, bytes));
}

RelaxedCaptureMode::RelaxedCaptureMode() {
  MOEJIT_CU(driver().cuThreadExchangeStreamCaptureMode(&previous_));
}
RelaxedCaptureMode::~RelaxedCaptureMode() {
  CUstreamCaptureMode mode = previous_;
  driver().cuThreadExchangeStreamCaptureMode(&mode);
}

}  // namespace moejit
