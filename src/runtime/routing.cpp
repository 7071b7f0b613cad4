// The routing helpers' launch path: validate, build or fetch through the runtime's kernel cache,
// launch through the driver. Launch shapes and costs: docs/design.md, "Routing".
#include "moejit/routing.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

#include "codegen/routing_codegen.hpp"
#include "driver/driver_api.hpp"
#include "moejit/errors.hpp"
#include "moejit/routing_params.cuh"
#include "runtime/runtime_internal.hpp"

namespace moejit {
namespace {

// A call with at most this many tokens runs as one fused CTA (one launch instead of three; its 8
// warps take 8 tokens each at most). Above it, the top-k and scatter kernels take tokens_per_cta
// tokens per CTA: about two CTAs per SM (the top-k's warps mostly wait for their logits: more of
// them in flight, not more tokens each), between 8 (one token per warp) and 128 (the scan's
// chain over CTAs stays short). Estimates until measured: docs/design.md, "Routing".
constexpr int kFusedMaxTokens = 64;
constexpr int kMinTokensPerCta = 8, kMaxTokensPerCta = 128;
constexpr int kThreads = 256;       // routing::kThreads in kernel_templates/moejit/routing/routing.cuh
constexpr int kScanThreads = 1024;  // routing::kScanThreads

template <typename... Args>
[[noreturn]] void bad(const char* call, fmt::format_string<Args...> format, Args&&... args) {
  throw InvalidArgument(fmt::format("{}: {}", call, fmt::format(format, std::forward<Args>(args)...)));
}

void check_pointer(const char* call, const void* p, const char* name, std::uintptr_t alignment) {
  if (!p) bad(call, "{} is null", name);
  if (reinterpret_cast<std::uintptr_t>(p) % alignment) bad(call, "{}={} is not {}-byte aligned", name, p, alignment);
}

bool storable(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

int tokens_per_cta(int num_tokens, int sm_count) {
  int per = (num_tokens + 2 * sm_count - 1) / (2 * sm_count);
  per = (per + kMinTokensPerCta - 1) / kMinTokensPerCta * kMinTokensPerCta;
  return std::clamp(per, kMinTokensPerCta, kMaxTokensPerCta);
}

// The most CTAs any device can give a call (the workspace is sized for it).
int max_route_ctas(int num_tokens) { return std::max(1, (num_tokens + kMinTokensPerCta - 1) / kMinTokensPerCta); }

void validate_route(const RoutingArgs& a) {
  const char* call = "route";
  if (!storable(a.logits_type)) bad(call, "logits_type={} (expected f32, bf16 or f16)", to_text(a.logits_type));
  check_pointer(call, a.logits, "logits", element_bytes(a.logits_type));
  if (a.num_tokens < 0) bad(call, "num_tokens={} (expected >= 0)", a.num_tokens);
  if (a.num_experts < 1 || a.num_experts > 1024) bad(call, "num_experts={} (expected 1..1024)", a.num_experts);
  if (a.top_k < 1 || a.top_k > 32 || a.top_k > a.num_experts)
    bad(call, "top_k={} (expected 1..{}: at most 32 and at most num_experts)", a.top_k, std::min(32, a.num_experts));
  if ((long long)a.num_tokens * a.top_k > INT32_MAX)
    bad(call, "num_tokens × top_k = {} (at most {})", (long long)a.num_tokens * a.top_k, INT32_MAX);
  const RoutingMethod& m = a.method;
  if (!(std::isfinite(m.scaling_factor) && m.scaling_factor > 0))
    bad(call, "method.scaling_factor={} (expected a finite value > 0)", m.scaling_factor);
  if (m.score != RoutingScore::sigmoid_topk) {
    if (m.expert_groups != 1 || m.topk_groups != 1)
      bad(call, "method.expert_groups={}, method.topk_groups={}: group-limited top-k needs method.score=sigmoid_topk "
          "(expected 1 and 1)", m.expert_groups, m.topk_groups);
    if (a.correction_bias) bad(call, "correction_bias is given but only method.score=sigmoid_topk uses one");
  } else {
    if (m.expert_groups < 1 || m.expert_groups > 32 || a.num_experts % m.expert_groups ||
        (m.expert_groups > 1 && a.num_experts / m.expert_groups < 2))
      bad(call, "method.expert_groups={} (expected 1..32 dividing num_experts={} into groups of 2 or more)",
          m.expert_groups, a.num_experts);
    if (m.topk_groups < 1 || m.topk_groups > m.expert_groups)
      bad(call, "method.topk_groups={} (expected 1..method.expert_groups={})", m.topk_groups, m.expert_groups);
    int eligible = m.topk_groups * (a.num_experts / m.expert_groups);
    if (a.top_k > eligible)
      bad(call, "top_k={} exceeds the {} experts in method.topk_groups={} groups", a.top_k, eligible, m.topk_groups);
    if (a.correction_bias) check_pointer(call, a.correction_bias, "correction_bias", 4);
  }
  if (a.layout == GroupLayout::contiguous) {
    if (a.row_alignment < 1 || a.row_alignment > 1024) bad(call, "row_alignment={} (expected 1..1024)", a.row_alignment);
    check_pointer(call, a.group_offsets, "group_offsets", 4);
    if (a.group_counts) check_pointer(call, a.group_counts, "group_counts", 4);
  } else {
    if (a.capacity < 1) bad(call, "capacity={} (expected >= 1 rows per expert in the masked layout)", a.capacity);
    check_pointer(call, a.group_counts, "group_counts", 4);
  }
  if (routed_rows(a) > INT32_MAX) bad(call, "routed rows = {} (at most {})", routed_rows(a), INT32_MAX);
  check_pointer(call, a.topk_ids, "topk_ids", 4);
  check_pointer(call, a.topk_weights, "topk_weights", 4);
  check_pointer(call, a.gather_rows, "gather_rows", 4);
  check_pointer(call, a.scatter_rows, "scatter_rows", 4);
  check_pointer(call, a.routing_weights, "routing_weights", 4);
  if (a.row_of_slot) check_pointer(call, a.row_of_slot, "row_of_slot", 4);
  std::size_t need = routing_workspace_bytes(a);
  if (a.workspace_bytes < need)
    bad(call, "workspace_bytes={} (expected at least routing_workspace_bytes(args) = {})", a.workspace_bytes, need);
  check_pointer(call, a.workspace, "workspace", 4);
}

void validate_combine(const CombineArgs& a) {
  const char* call = "combine";
  if (!storable(a.input_type)) bad(call, "input_type={} (expected bf16, f16 or f32)", to_text(a.input_type));
  if (!storable(a.output_type)) bad(call, "output_type={} (expected bf16, f16 or f32)", to_text(a.output_type));
  check_pointer(call, a.input, "input", 16);
  check_pointer(call, a.output, "output", 16);
  if (a.num_tokens < 0) bad(call, "num_tokens={} (expected >= 0)", a.num_tokens);
  if (a.top_k < 1 || a.top_k > 32) bad(call, "top_k={} (expected 1..32)", a.top_k);
  if (a.n < 8 || a.n % 8) bad(call, "n={} (expected a positive multiple of 8: rows are read in 16-byte pieces)", a.n);
  if (a.topk_weights) check_pointer(call, a.topk_weights, "topk_weights", 4);
  if (a.row_of_slot) check_pointer(call, a.row_of_slot, "row_of_slot", 4);
  if ((long long)a.num_tokens * a.top_k > INT32_MAX)
    bad(call, "num_tokens × top_k = {} (at most {})", (long long)a.num_tokens * a.top_k, INT32_MAX);
}

void validate_quantize_fp8(const QuantizeFp8Args& a) {
  const char* call = "quantize_activations_fp8";
  if (!storable(a.input_type)) bad(call, "input_type={} (expected bf16, f16 or f32)", to_text(a.input_type));
  check_pointer(call, a.input, "input", 16);
  check_pointer(call, a.output, "output", 16);
  check_pointer(call, a.scales, "scales", 4);
  if (a.rows < 0) bad(call, "rows={} (expected >= 0)", a.rows);
  if (a.k < 16 || a.k % 16)
    bad(call, "k={} (expected a positive multiple of 16, as the FP8 grouped GEMM's K)", a.k);
  if (a.rows * ((a.k + 127LL) / 128) > (long long)INT32_MAX * (kThreads / 32))  // grid x is at most 2^31 - 1
    bad(call, "rows={} × k={}: more 128-wide blocks than one launch's grid holds", a.rows, a.k);
  if (a.gather_rows) {
    check_pointer(call, a.gather_rows, "gather_rows", 4);
    if (a.num_tokens < 0) bad(call, "num_tokens={} (expected >= 0: the input's rows when gathering)", a.num_tokens);
  } else if (a.num_tokens != 0) {
    bad(call, "num_tokens={} without gather_rows (the input has `rows` rows; set gather_rows to permute)", a.num_tokens);
  }
  if (a.row_of_slot) {
    if (a.gather_rows) bad(call, "gather_rows and row_of_slot both set (one permutation: output-major or token-major)");
    check_pointer(call, a.row_of_slot, "row_of_slot", 4);
    if (a.top_k < 1 || a.top_k > 32) bad(call, "top_k={} with row_of_slot (expected 1..32)", a.top_k);
    if (a.out_rows < 0) bad(call, "out_rows={} with row_of_slot (expected the routed rows, >= 0)", a.out_rows);
    if (a.rows * a.top_k > INT32_MAX) bad(call, "rows={} × top_k={}: more slots than 2^31 - 1", a.rows, a.top_k);
  } else if (a.top_k != 0 || a.out_rows != 0) {
    bad(call, "top_k={} / out_rows={} without row_of_slot (they describe its token-major permutation)", a.top_k, a.out_rows);
  }
}

void launch(const Runtime& rt, CUfunction function, unsigned grid, void* params, Stream stream, unsigned threads = kThreads) {
  CUlaunchConfig config{};
  CUlaunchAttribute attrs[1]{};
  config.attrs = attrs;
  add_programmatic_launch(config, rt.programmatic_launch());
  config.gridDimX = grid;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = threads;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = reinterpret_cast<CUstream>(stream);
  void* args[] = {params};
  MOEJIT_CU(driver().cuLaunchKernelEx(&config, function, args, nullptr));
}

enum Entry { kFused, kTopk, kScan, kScatter, kCombine, kQuantizeFp8 };
constexpr const char* kEntryNames[] = {"moejit_route_fused", "moejit_route_topk", "moejit_route_scan",
                                       "moejit_route_scatter", "moejit_combine", "moejit_quantize_fp8"};

// Every field of a validated spec, and the entry, in 64 bits (the ranges are the validated ones:
// experts <= 1024, top_k <= 32, groups <= 32).
std::uint64_t packed_key(const RoutingSpec& s, Entry entry) {
  std::uint64_t key = 0;
  int shift = 0;
  auto put = [&](std::uint64_t value, int bits) {
    key |= (value & ((1ull << bits) - 1)) << shift;
    shift += bits;
  };
  put(entry, 3);
  put(static_cast<int>(s.op), 2);
  put(s.arch.major, 8);
  put(s.arch.minor, 8);
  put(s.arch.arch_specific, 1);
  put(static_cast<int>(s.logits), 3);
  put(s.experts, 11);
  put(s.top_k, 6);
  put(static_cast<int>(s.score), 2);
  put(s.renormalize, 1);
  put(s.expert_groups, 6);
  put(s.topk_groups, 6);
  put(static_cast<int>(s.input), 3);
  put(static_cast<int>(s.output), 3);  // 63 bits
  return key;
}

// The loaded function: by packed key (a repeated call formats no text), else loaded (and compiled
// or read from the cache) by the spec's text.
CUfunction function_of(Runtime& rt, const RoutingSpec& spec, Entry entry) {
  const std::uint64_t key = packed_key(spec, entry);
  if (CUfunction f = runtime_cached_function(rt, key)) return f;
  CUfunction f = runtime_function(rt, spec.to_text(), kEntryNames[entry], [&] { return compile_routing(rt, spec)->cubin; });
  runtime_remember_function(rt, key, f);
  return f;
}

}  // namespace

long long routed_rows(const RoutingArgs& a) {
  if (a.layout == GroupLayout::masked) return (long long)a.num_experts * a.capacity;
  return (long long)a.num_tokens * a.top_k + (long long)a.num_experts * (a.row_alignment - 1);
}

std::size_t routing_workspace_bytes(const RoutingArgs& a) {
  // Per-CTA counts, then the total counts and the group starts (routing.cuh, workspace_counts).
  long long experts = std::max(a.num_experts, 0);
  return sizeof(int) * static_cast<std::size_t>(max_route_ctas(a.num_tokens) * experts + 2 * experts + 1);
}

std::shared_ptr<const CompiledRoutingKernel> compile_routing(Runtime& rt, const RoutingSpec& spec, CacheOutcome* outcome) {
  spec.validate();
  KernelCache& cache = runtime_cache(rt);
  auto built = cache.get_source(spec.to_text(), spec.arch,
                                [&] { return generate_routing_source(spec, cache.templates()); }, outcome);
  auto out = std::make_shared<CompiledRoutingKernel>();
  out->spec = spec;
  out->cache_key = built->cache_key;
  out->cubin = built->cubin;
  out->resources = built->resources;
  out->source = built->source;
  out->outcome = built->outcome;
  out->compile_ms = built->compile_ms;
  return out;
}

void route(Runtime& rt, const RoutingArgs& a, Stream stream) {
  validate_route(a);
  RoutingSpec spec = RoutingSpec::for_route(a, rt.arch());
  RoutingParams p{};
  p.logits = a.logits;
  p.correction_bias = a.method.score == RoutingScore::sigmoid_topk ? a.correction_bias : nullptr;
  p.topk_ids = a.topk_ids;
  p.topk_weights = a.topk_weights;
  p.block_counts = static_cast<int*>(a.workspace);
  p.group_offsets = a.layout == GroupLayout::contiguous ? a.group_offsets : nullptr;
  p.group_counts = a.group_counts;
  p.gather_rows = a.gather_rows;
  p.scatter_rows = a.scatter_rows;
  p.routing_weights = a.routing_weights;
  p.row_of_slot = a.row_of_slot;
  p.num_tokens = a.num_tokens;
  p.layout = a.layout == GroupLayout::contiguous ? 0 : 1;
  p.row_alignment = a.layout == GroupLayout::contiguous ? a.row_alignment : 1;
  p.capacity = a.capacity;
  p.scaling_factor = a.method.scaling_factor;
  runtime_make_current(rt);
  if (a.num_tokens <= kFusedMaxTokens) {
    p.tokens_per_cta = std::max(a.num_tokens, 1);
    launch(rt, function_of(rt, spec, kFused), 1, &p, stream);
    return;
  }
  p.tokens_per_cta = tokens_per_cta(a.num_tokens, std::max(rt.sm_count(), 1));
  unsigned ctas = static_cast<unsigned>((a.num_tokens + p.tokens_per_cta - 1) / p.tokens_per_cta);
  launch(rt, function_of(rt, spec, kTopk), ctas, &p, stream);
  launch(rt, function_of(rt, spec, kScan), 1, &p, stream, kScanThreads);
  launch(rt, function_of(rt, spec, kScatter), ctas, &p, stream);
}

void combine(Runtime& rt, const CombineArgs& a, Stream stream) {
  validate_combine(a);
  if (a.num_tokens == 0) return;
  RoutingSpec spec = RoutingSpec::for_combine(a, rt.arch());
  CombineParams p{};
  p.input = a.input;
  p.output = a.output;
  p.topk_weights = a.topk_weights;
  p.row_of_slot = a.row_of_slot;
  p.num_vectors = (long long)a.num_tokens * a.n / 8;
  p.n = a.n;
  runtime_make_current(rt);
  launch(rt, function_of(rt, spec, kCombine),
         static_cast<unsigned>((p.num_vectors + kThreads - 1) / kThreads), &p, stream);
}

void quantize_activations_fp8(Runtime& rt, const QuantizeFp8Args& a, Stream stream) {
  validate_quantize_fp8(a);
  if (a.rows == 0) return;
  RoutingSpec spec = RoutingSpec::for_quantize_fp8(a, rt.arch());
  QuantizeFp8Params p{};
  p.input = a.input;
  p.output = static_cast<unsigned char*>(a.output);
  p.scales = a.scales;
  p.gather_rows = a.gather_rows;
  p.num_tokens = a.num_tokens;
  p.row_of_slot = a.row_of_slot;
  p.top_k = a.top_k;
  p.out_rows = a.row_of_slot ? a.out_rows : a.rows;
  p.rows = a.rows;
  p.k = a.k;
  p.k_blocks = (a.k + 127) / 128;
  p.blocks = a.rows * p.k_blocks;
  runtime_make_current(rt);
  // Eight 128-wide blocks per warp (a half-warp per block, four steps: routing.cuh).
  constexpr long long kBlocksPerCta = (kThreads / 32) * 8;
  launch(rt, function_of(rt, spec, kQuantizeFp8), static_cast<unsigned>((p.blocks + kBlocksPerCta - 1) / kBlocksPerCta), &p,
         stream);
}

}  // namespace moejit
