// Stage 4 (part): the CUDA driver, loaded at run time from libcuda.so.1.
//
// Nothing links against libcuda, so code generation, NVRTC and the cache work (and are
// tested) on machines with no GPU or driver; only the launch path needs one.
#pragma once
#include <cuda.h>

#include <string>

namespace moejit {

// Every driver function moejit calls. cuda.h maps some names to versioned symbols
// (cuMemAlloc -> cuMemAlloc_v2); the member names follow, the lookup uses the base name.
#define MOEJIT_DRIVER_FUNCTIONS(X)                  \
  X(cuInit)                                         \
  X(cuDriverGetVersion)                             \
  X(cuDeviceGet)                                    \
  X(cuDeviceGetCount)                               \
  X(cuDeviceGetAttribute)                           \
  X(cuDeviceGetName)                                \
  X(cuDevicePrimaryCtxRetain)                       \
  X(cuDevicePrimaryCtxRelease)                      \
  X(cuCtxSetCurrent)                                \
  X(cuCtxSynchronize)                               \
  X(cuModuleLoadData)                               \
  X(cuModuleUnload)                                 \
  X(cuModuleGetFunction)                            \
  X(cuFuncSetAttribute)                             \
  X(cuFuncGetAttribute)                             \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)    \
  X(cuLaunchKernelEx)                               \
  X(cuGetErrorName)                                 \
  X(cuGetErrorString)                               \
  X(cuMemAlloc)                                     \
  X(cuMemFree)                                      \
  X(cuMemcpyHtoD)                                   \
  X(cuMemcpyDtoH)                                   \
  X(cuMemsetD8)                                     \
  X(cuMemsetD32)                                    \
  X(cuMemsetD8Async)                                \
  X(cuMemsetD32Async)                               \
  X(cuStreamCreate)                                 \
  X(cuStreamDestroy)                                \
  X(cuStreamSynchronize)                            \
  X(cuStreamIsCapturing)                            \
  X(cuThreadExchangeStreamCaptureMode)              \
  X(cuEventCreate)                                  \
  X(cuEventDestroy)                                 \
  X(cuEventRecord)                                  \
  X(cuEventSynchronize)                             \
  X(cuEventElapsedTime)                             \
  X(cuTensorMapEncodeTiled)

struct DriverApi {
#define MOEJIT_DECLARE(name) decltype(&::name) name = nullptr;
  MOEJIT_DRIVER_FUNCTIONS(MOEJIT_DECLARE)
#undef MOEJIT_DECLARE
};

// The loaded driver; throws DriverError (code CUDA_ERROR_NO_DEVICE / _NOT_INITIALIZED)
// with a message saying why when libcuda.so.1 is absent or cuInit fails.
const DriverApi& driver();
// True if a driver loads and reports at least one device; never throws.
bool driver_has_device();

// Throws DriverError("<call>: <CUDA_ERROR_NAME> (<description>)") unless result is CUDA_SUCCESS.
void check_cu(CUresult result, const char* call);
#define MOEJIT_CU(call_expr) ::moejit::check_cu((call_expr), #call_expr)

// Device memory owned by RAII (tests, examples, scratch buffers).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* host, std::size_t bytes) const;
  void download(void* host, std::size_t bytes) const;

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

// While alive, this thread may make the calls that stream capture counts as unsafe (cuMemAlloc,
// cuModuleLoadData) without ending a capture in progress on any stream. For the runtime's own
// set-up only (a kernel's module, a stream's scheduler counter): made once, owned by the runtime,
// and not part of any graph. Restores the thread's mode on exit.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

}  // namespace moejit
