// The runtime: a device, a kernel cache and a compiler, tied together.
//
// High level:   rt.grouped_gemm(args, stream)       picks a config, builds or fetches it, launches.
// Low level:    rt.kernel(spec).launch(args, stream)  you choose the spec.
// Offline:      Runtime::offline(arch).compile(spec)   no GPU or driver needed (prewarm, CI).
// Tuning:       rt.tune(args, stream)                 times the candidate configs, keeps the best.
//
// Streams: the dynamic scheduler's tile counter and split=tail's workspace are per stream (made at
// its first launch), so launches on one stream must run in stream order, as they do. A CUDA graph
// captured on a stream keeps that stream's scratch: replay graphs captured on one stream one after
// another (on one stream, or ordered by events), not concurrently with each other or with eager
// launches on their capture stream.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "moejit/spec.hpp"

struct CUstream_st;  // cudaStream_t and CUstream are both CUstream_st*

namespace moejit {

using Stream = CUstream_st*;

// Operands of one grouped GEMM: for every group g and each of its rows r,
//   C[r, :] = A[r, :] · B[g]ᵀ      A: rows × K, B: num_groups × N × K (K contiguous), C: rows × N.
// All pointers are device pointers, 16-byte aligned; K and N multiples of 8.
//
// Quantized operands (layouts: include/moejit/formats.hpp):
//   ab_type = e4m3 (FP8, DeepSeek-V3 block scales; hopper, portable elsewhere): A and B hold E4M3 bytes, K a
//     multiple of 16; a_scales fp32 [ceil(K/128)][rows of A] (K-block-major; rows of A =
//     total_rows, or num_groups × capacity when masked; 16-byte aligned: the Hopper kernel copies
//     them by TMA), b_scales fp32
//     [num_groups][ceil(N/128)][ceil(K/128)]. C[r, n] = Σ_kb a_scales[kb][r] · b_scales[g][n/128][kb]
//     · Σ_{k in block kb} A[r, k] · B[g, n, k]. quantize_fp8 + fp8_kernel_scales_a/b make them.
//     b_scale_layout = ScaleB::channels (hopper only): b_scales fp32 [num_groups][N], one per output
//     channel (per_row weights, the row-wise recipe): C[r, n] = b_scales[g][n] · Σ_kb a_scales[kb][r] · (...).
//     With fuse=gather (both families) A is [num_tokens, K] in token order and a_scales
//     [ceil(K/128)][num_tokens]: a routed row takes its token's row and scales. FP8 with a split
//     GLU needs (n/2) % 128 == 0 (the up half's B scale blocks).
//   c_type = e4m3 (ab_type = e4m3, hopper; GEMM1 of an FP8 layer): C is quantized in the epilogue
//     as quantize_activations_fp8 would quantize it, after the fusions (bias, activation, weight):
//     E4M3 codes [rows][N_out] and c_scales fp32 [ceil(N_out/128)][rows] (rows as C's; scale =
//     amax / 448 over the finite values of each row's 128-column block, 1 for an all-zero block;
//     codes = the value times 1/scale rounded to E4M3, saturating). That is the next FP8 GEMM's A and
//     a_scales. Each consumer's output slice must hold whole 128-column blocks (KernelSpec::validate).
//   ab_type = bf16 with b_type = mxfp4 | nvfp4 (weight-only 4-bit; hopper, or portable on other
//     archs and for f32 C): B is the pre-arranged blocks of pack_w4_sm90 (block scales inside), K a
//     multiple of 32 (MXFP4) or 16 (NVFP4); NVFP4 also takes b_tensor_scales, fp32 [num_groups]
//     (Nvfp4Tensor::tensor_scales).
struct GroupedGemmArgs {
  GroupLayout layout = GroupLayout::contiguous;
  DType ab_type = DType::bf16;  // A and B element type
  DType c_type = DType::bf16;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  int num_groups = 0;
  int n = 0;
  int k = 0;

  // contiguous layout: A and C have total_rows rows; group g owns rows
  // [group_offsets[g], group_offsets[g+1]) — num_groups + 1 non-decreasing device ints.
  const int* group_offsets = nullptr;
  int total_rows = 0;
  // masked layout: A is num_groups × capacity × K, C is num_groups × capacity × N;
  // group g owns its first group_counts[g] rows (device ints in [0, capacity]).
  const int* group_counts = nullptr;
  int capacity = 0;

  // Optional host copy of group_offsets (contiguous) or group_counts (masked). When given it is
  // validated and used to choose the config; when absent the runtime copies the device array
  // back (a synchronizing copy) unless trust_device_groups is set. On a stream capturing a CUDA
  // graph that copy is not allowed: give host_groups or set trust_device_groups there, or the call
  // throws InvalidArgument.
  std::span<const int> host_groups{};
  bool trust_device_groups = false;
  // Where only the device holds the groups (trust_device_groups, no host_groups: a launch under
  // graph capture), the valid rows you expect over all groups, e.g. tokens × top-k. The config and
  // the shape bucket are then chosen for that many rows spread over the groups as top-k routing
  // spreads them, instead of for the layout's upper bound (capacity × num_groups when masked, where
  // a decode batch would get a prefill tile). 0: the upper bound. A hint only: the launch is correct
  // for any valid groups. At most the upper bound (capacity × num_groups, or total_rows); ignored
  // where the host sees the groups.
  long long expected_rows = 0;
  // The same, per group: the rows you expect each group to hold (num_groups host ints in either
  // layout, e.g. recent batches' expert loads). Where given, the choice follows them instead of a
  // typical routing of expected_rows, so that skew (a few hot experts) still picks the configs it
  // takes with host counts (the mixed tile order, tile bands). A hint only, as expected_rows;
  // validated (each 0..capacity when masked, their sum at most total_rows when contiguous).
  std::span<const int> expected_group_rows{};

  // Scales of quantized operands (see above); null for 16-bit operands. 4-byte aligned.
  const float* a_scales = nullptr;  // ab_type = e4m3
  const void* b_scales = nullptr;   // ab_type = e4m3: fp32
  ScaleB b_scale_layout = ScaleB::blocks;  // ab_type = e4m3: 128x128 blocks or one per output channel
  const float* b_tensor_scales = nullptr;  // b_type = nvfp4
  float* c_scales = nullptr;  // c_type = e4m3: written, fp32 [ceil(N_out/128)][rows of C]
  // B's element type where it differs from A's: mxfp4 | nvfp4 (weight-only); empty: ab_type.
  std::optional<DType> b_type;
  DType b_format() const { return b_type.value_or(ab_type); }
  // Fusions (docs/design.md, "Fusions"). `fusion` says which ones the high-level calls
  // (grouped_gemm, choose_spec, tune) build in; Kernel::launch uses its spec's fusions and
  // accepts `fusion` left at none or equal to them. Each pointer is required exactly when its
  // flag is set (a pointer without its flag is an error too). "Routed row r" is a row of the
  // layout's row space: contiguous [0, total_rows), masked g × capacity + i.
  Fusion fusion{};
  // fuse=gather: A is [num_tokens, K] in token order; routed row r reads A row gather_rows[r].
  // The kernels cannot check 0 <= gather_rows[r] < num_tokens (the host never reads the array):
  // hopper's TMA zero-fills rows outside [0, num_tokens); the portable family would read out of bounds.
  const int* gather_rows = nullptr;
  int num_tokens = 0;
  // fuse=scatter: routed row r is written to row scatter_rows[r] of C, which is then
  // [num_out_rows, N_out] (N_out = N, or N/2 with a GLU activation). Values must be in
  // [0, num_out_rows) and, without fuse=atomic, distinct (each output row has one writer).
  const int* scatter_rows = nullptr;
  int num_out_rows = 0;
  // fuse=weight: one fp32 per routed row; multiplies the output row after the activation.
  const float* routing_weights = nullptr;
  // fuse=bias: fp32 [num_groups, N] (the GEMM's N, before a GLU halves it), added before the activation.
  const float* bias = nullptr;
};

enum class CacheOutcome { memory_hit, disk_hit, compiled };

struct CompiledKernel {
  KernelSpec spec;
  Key128 cache_key;
  std::string cubin;       // bytes of the ELF
  std::string resources;   // ptxas report: registers, spills, shared memory
  std::string source;      // generated translation unit
  CacheOutcome outcome = CacheOutcome::compiled;  // how it was first obtained in this process
  double compile_ms = 0;   // NVRTC wall time (0 on a hit)
};

class Runtime;

// A kernel loaded on the runtime's device. Cheap to copy; valid while its Runtime lives.
class Kernel {
 public:
  const KernelSpec& spec() const { return *spec_; }
  // Validates args against the spec and launches on `stream` (asynchronous).
  void launch(const GroupedGemmArgs& args, Stream stream) const;

 private:
  friend class Runtime;
  Runtime* runtime_ = nullptr;
  const KernelSpec* spec_ = nullptr;
  const void* loaded_ = nullptr;  // the runtime's record of the loaded module and function
};

struct RuntimeOptions {
  int device = 0;
  bool line_info = false;  // compile with -lineinfo (for profilers and sanitizers)
  // grouped_gemm tunes a shape bucket that has no stored result on its first call (also
  // MOEJIT_AUTOTUNE=1). Off: stored results are used where present, the heuristic elsewhere.
  // Tuning times launches and synchronizes, which graph capture forbids: a bucket first met on a
  // capturing stream gets the stored result or the heuristic's kernel (with a warning), and is
  // tuned at its first call outside a capture.
  bool autotune = false;
  // Offline runtimes only: the SM count choose_spec assumes (prewarm for a device it cannot see;
  // 0: 1). A runtime with a device uses the device's.
  int offline_sm_count = 0;
  // sm_90+: launches let the kernel behind them in the stream start early (programmatic dependent
  // launch): each moejit kernel waits for the one ahead of it before it touches memory, so stream
  // order holds, and the gap between two launches shrinks. Off (also MOEJIT_PDL=0): plain launches.
  bool programmatic_launch = true;
};

struct TuneOptions {
  int compile_threads = 0;       // 0: one per core
  double ms_per_candidate = 20;  // device time spent timing each candidate: 5 rounds in turns with the others, median
  bool store = true;             // file the winner in the cache folder for later processes
  // Clear L2 (a memset of twice its size, at least 64 MB, untimed; where the device has no room for
  // that buffer, a warning and back-to-back timing) before each timed launch, so that every
  // candidate reads its operands from DRAM, as a layer's GEMM does in a model whose other layers
  // pass through L2 between its calls. Back to back, a decode launch found part of its weights
  // still in L2 from the launch before: the tuner read FP8 Qwen3-30B-A3B down at 16 tokens (134 MB
  // of weights) at 0.037-0.038 ms that way, 0.047 with the clears, and bench_suite's protocol
  // (a 256 MB clear before each launch) 0.048 (H200, docs/perf.md v55).
  bool clear_l2 = true;
};

struct TuneCandidate {
  KernelSpec spec;
  double ms = 0;      // median time of one launch; 0 if it failed
  std::string error;  // why it could not be compiled, loaded or launched; empty if timed
};

struct TuneResult {
  std::string bucket;          // the shape bucket it is stored under (text form)
  KernelSpec best, heuristic;  // the fastest candidate; the heuristic's choice
  double best_ms = 0, heuristic_ms = 0;
  std::vector<TuneCandidate> candidates;  // the heuristic's choice first
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});  // needs a GPU; throws DriverError otherwise
  static std::unique_ptr<Runtime> offline(const Arch& arch, RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const Arch& arch() const;
  bool has_device() const;
  int sm_count() const;           // offline: options.offline_sm_count
  std::string device_name() const;
  // Launches carry the programmatic stream serialization attribute (RuntimeOptions::programmatic_launch
  // on an sm_90+ device).
  bool programmatic_launch() const;

  // Builds (or fetches from memory/disk cache) the cubin for a spec. Thread-safe:
  // concurrent calls for one spec compile it once.
  std::shared_ptr<const CompiledKernel> compile(const KernelSpec& spec, CacheOutcome* outcome = nullptr);
  Kernel kernel(const KernelSpec& spec);

  // The heuristic's config for these arguments (see src/heuristics); ignores tuning results.
  KernelSpec choose_spec(const GroupedGemmArgs& args) const;
  // The stored tuning result for the arguments' shape bucket, if any.
  std::optional<KernelSpec> tuned_spec(const GroupedGemmArgs& args);
  // Picks a config (once per shape bucket: the stored tuning result, else tuned now with
  // autotune, else the heuristic), compiles or loads it, launches.
  void grouped_gemm(const GroupedGemmArgs& args, Stream stream);

  // Compiles every candidate config for these arguments in parallel, times each on `stream`
  // with these arguments (C is overwritten), keeps the fastest for the arguments' shape bucket
  // and, with options.store, files it under the cache folder (tuning/, keyed by device name,
  // driver version, moejit version and templates). Synchronizes `stream`; throws InvalidArgument
  // where `stream` is capturing a CUDA graph.
  TuneResult tune(const GroupedGemmArgs& args, Stream stream, const TuneOptions& options = {});
  std::string tuning_file() const;  // "" when the disk cache is off

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  Runtime(RuntimeOptions options, std::optional<Arch> offline_arch);
  std::unique_ptr<Impl> impl_;
  friend class Kernel;
};

}  // namespace moejit
