// MoE routing helpers, JIT-built like the grouped GEMMs (rendered from kernel_templates/, NVRTC,
// content-keyed cache, launched through the driver):
//
//   route(rt, args, stream)    router logits [tokens, E] -> top-k experts and weights per token, then
//                              per-expert counts, group_offsets and the row arrays of the fused
//                              grouped GEMMs (docs/design.md, "Routing"):
//                                gather_rows[r]     = token of routed row r
//                                scatter_rows[r]    = token * top_k + slot (-1 for a padding row)
//                                routing_weights[r] = the weight of that (token, slot)
//                              Rows of one expert are sorted by token; nothing depends on the order
//                              in which atomics land, so repeated calls give the same bytes.
//   combine(rt, args, stream)  [tokens, top_k, n] -> [tokens, n], summed over the slots in order.
//   quantize_activations_fp8(rt, args, stream)
//                              [rows, k] bf16/f16/f32 -> E4M3 with one fp32 scale per 128 K of
//                              each row (DeepSeek-V3's 1x128 activations), scales [k/128][rows]:
//                              the FP8 grouped GEMM's A and a_scales (x before a gathered GEMM1,
//                              the GLU output before GEMM2). Bit for bit moejit::quantize_fp8 with
//                              Fp8Scaling::block_1x128 and fp8_kernel_scales_a. With row_of_slot
//                              (or gather_rows) it permutes as it quantizes: x in token order ->
//                              GEMM1's A in routed order, for a GEMM1 without fuse=gather
//                              (docs/design.md).
//
// reference::route / reference::combine are the CPU definitions the kernels are tested against.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "moejit/runtime.hpp"
#include "moejit/spec.hpp"

namespace moejit {

enum class RoutingScore {
  softmax_topk,  // softmax over all experts, top-k of it (Qwen3; renormalize = norm_topk_prob)
  topk_softmax,  // top-k of the logits, softmax over those k (Mixtral, gpt-oss)
  sigmoid_topk,  // sigmoid; top-k of sigmoid + correction bias, group-limited (DeepSeek-V3)
};

struct RoutingMethod {
  RoutingScore score = RoutingScore::softmax_topk;
  // softmax_topk and sigmoid_topk: divide the k weights by their sum (sigmoid: sum + 1e-20, as
  // DeepSeek-V3). topk_softmax weights sum to one already.
  bool renormalize = false;
  // sigmoid_topk: experts form expert_groups equal groups; only the topk_groups groups with the
  // best sum of their two best (biased) scores take part in the top-k.
  int expert_groups = 1;
  int topk_groups = 1;
  float scaling_factor = 1.0f;  // multiplies every weight last (DeepSeek-V3 routed_scaling_factor)

  static RoutingMethod mixtral() { return {RoutingScore::topk_softmax}; }
  static RoutingMethod gpt_oss() { return {RoutingScore::topk_softmax}; }
  static RoutingMethod qwen3_moe() { return {RoutingScore::softmax_topk, true}; }
  static RoutingMethod deepseek_v3() { return {RoutingScore::sigmoid_topk, true, 8, 4, 2.5f}; }
};

// One route() call. All pointers are device pointers (4-byte aligned).
struct RoutingArgs {
  const void* logits = nullptr;  // [num_tokens, num_experts], row-major
  DType logits_type = DType::f32;  // f32, bf16 or f16
  const float* correction_bias = nullptr;  // sigmoid_topk only, optional: [num_experts]
  int num_tokens = 0;
  int num_experts = 0;  // 1..1024
  int top_k = 0;        // 1..32, at most num_experts
  RoutingMethod method{};

  GroupLayout layout = GroupLayout::contiguous;
  int row_alignment = 1;  // contiguous: every group starts at a multiple of it (1..1024)
  int capacity = 0;       // masked: rows per expert slab; pairs past it are dropped (row_of_slot -1)

  // Outputs.
  int* topk_ids = nullptr;         // [num_tokens, top_k], required
  float* topk_weights = nullptr;   // [num_tokens, top_k], required
  int* group_offsets = nullptr;    // contiguous: num_experts + 1, required; masked: unused
  int* group_counts = nullptr;     // num_experts (masked: required, clipped to capacity; contiguous: optional)
  int* gather_rows = nullptr;      // routed_rows(args) entries each, required
  int* scatter_rows = nullptr;
  float* routing_weights = nullptr;
  int* row_of_slot = nullptr;      // optional [num_tokens, top_k]: routed row of each pair, -1 if dropped

  void* workspace = nullptr;       // routing_workspace_bytes(args) bytes, 4-byte aligned
  std::size_t workspace_bytes = 0;
};

// Size of the routed row space: tokens * top_k (contiguous), + num_experts * (row_alignment - 1)
// of padding room; num_experts * capacity (masked). The GEMMs' total_rows.
long long routed_rows(const RoutingArgs& args);
std::size_t routing_workspace_bytes(const RoutingArgs& args);

struct CombineArgs {
  const void* input = nullptr;  // [num_tokens, top_k, n]: row token * top_k + slot (scatter_rows' rows)
  DType input_type = DType::bf16;  // bf16, f16 or f32
  void* output = nullptr;       // [num_tokens, n]
  DType output_type = DType::bf16;
  int num_tokens = 0;
  int top_k = 0;
  int n = 0;                    // multiple of 8; input and output 16-byte aligned
  const float* topk_weights = nullptr;  // optional [num_tokens, top_k]: weigh the slots here instead
  const int* row_of_slot = nullptr;     // optional: slots whose row is -1 (dropped) are skipped
};

struct QuantizeFp8Args {
  const void* input = nullptr;     // [rows, k], row-major, 16-byte aligned
  DType input_type = DType::bf16;  // bf16, f16 or f32
  long long rows = 0;
  int k = 0;                       // a positive multiple of 16 (the FP8 GEMM's K)
  void* output = nullptr;          // [rows, k] E4M3 codes, 16-byte aligned
  float* scales = nullptr;         // [ceil(k / 128)][rows], 4-byte aligned
  // Optional: output row r quantizes input row gather_rows[r] (route()'s gather_rows: x in token
  // order -> A of a plain FP8 GEMM1 in routed order). input then holds num_tokens rows; an index
  // outside [0, num_tokens) (a padding row) gives zero codes and scale 1, as an all-zero row.
  const int* gather_rows = nullptr;  // [rows], 4-byte aligned
  int num_tokens = 0;
  // Optional, the same permutation token-major (route()'s row_of_slot): input row t (of `rows`) is
  // quantized once and written to output rows row_of_slot[t * top_k + j], j < top_k (a negative
  // entry, a dropped pair, is skipped); output and scales then have out_rows rows (routed_rows),
  // and rows no slot names are not written (contiguous routing without row padding names them
  // all). x is read once instead of top_k times: the faster form (docs/perf.md v28).
  const int* row_of_slot = nullptr;  // [rows, top_k], 4-byte aligned
  int top_k = 0;
  long long out_rows = 0;
};

// What decides a routing kernel binary; canonical text "routing:op=...", content-keyed like a
// KernelSpec (the "routing:" prefix keeps the two apart in the disk cache).
struct RoutingSpec {
  enum class Op { route, combine, quantize_fp8 };
  Op op = Op::route;
  Arch arch{};
  // route
  DType logits = DType::f32;
  int experts = 0, top_k = 0;
  RoutingScore score = RoutingScore::softmax_topk;
  bool renormalize = false;
  int expert_groups = 1, topk_groups = 1;
  // combine (top_k too); quantize_fp8 (input only)
  DType input = DType::bf16, output = DType::bf16;

  static RoutingSpec for_route(const RoutingArgs& args, const Arch& arch);  // validates args
  static RoutingSpec for_combine(const CombineArgs& args, const Arch& arch);
  static RoutingSpec for_quantize_fp8(const QuantizeFp8Args& args, const Arch& arch);
  std::string to_text() const;
  Key128 key() const;
  void validate() const;  // throws SpecError
  bool operator==(const RoutingSpec&) const = default;
};

struct CompiledRoutingKernel {
  RoutingSpec spec;
  Key128 cache_key;
  std::string cubin, resources, source;
  CacheOutcome outcome = CacheOutcome::compiled;
  double compile_ms = 0;
};

// Builds or fetches (memory, disk) the cubin; works offline (prewarm, CI).
std::shared_ptr<const CompiledRoutingKernel> compile_routing(Runtime& rt, const RoutingSpec& spec,
                                                             CacheOutcome* outcome = nullptr);
// Validate (InvalidArgument naming the argument), compile or fetch, launch on `stream` (asynchronous).
void route(Runtime& rt, const RoutingArgs& args, Stream stream);
void combine(Runtime& rt, const CombineArgs& args, Stream stream);
void quantize_activations_fp8(Runtime& rt, const QuantizeFp8Args& args, Stream stream);

namespace reference {

struct Routing {
  std::vector<int> topk_ids;         // [tokens, top_k]
  std::vector<float> topk_weights;   // [tokens, top_k]
  std::vector<int> group_counts;     // [E] (masked: clipped to capacity)
  std::vector<int> group_offsets;    // [E + 1] (contiguous)
  std::vector<int> gather_rows, scatter_rows;  // [routed_rows]; rows the kernel never writes: -2
  std::vector<float> routing_weights;          // [routed_rows]; unwritten: NaN
  std::vector<int> row_of_slot;      // [tokens, top_k]
};

// The definition route() implements, on host arrays (logits as float, converted from the
// logits_type by the caller; correction_bias empty or [E]). Pointers in args are ignored.
Routing route(const RoutingArgs& args, const std::vector<float>& logits, const std::vector<float>& correction_bias = {});
// out[t, c] = sum_j (w[t, j] *) in[t, j, c] in double, in slot order; slots with row_of_slot < 0 skipped.
// The sigmoid the kernels rank with: correctly rounded steps only, so host and device agree bit for bit.
float sigmoid_for_routing(float x);
std::vector<double> combine(int num_tokens, int top_k, int n, const std::vector<float>& input,
                            const std::vector<float>& topk_weights = {}, const std::vector<int>& row_of_slot = {});

}  // namespace reference
}  // namespace moejit
