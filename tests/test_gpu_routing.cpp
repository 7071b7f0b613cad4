// GPU tests of the routing helpers against moejit::reference on fresh random data: indices,
// counts, offsets and row arrays exactly, weights within 1e-6; every output poisoned first (so an
// unwritten element fails and a row written outside its place shows), NaN never passes, and a
// second launch must give the same bytes (no order decided by atomics).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>

#include "driver/driver_api.hpp"
#include "moejit/moejit.hpp"

using namespace moejit;

namespace {

Runtime& runtime() {
  static Runtime rt;
  return rt;
}

constexpr unsigned char kPoisonByte = 0x7f;  // int 0x7f7f7f7f, float 3.4e38: no legitimate value
constexpr int kPoisonInt = 0x7f7f7f7f;

template <typename T>
struct Buffer {
  std::size_t count = 0;
  DeviceBuffer device;
  explicit Buffer(std::size_t n) : count(n), device(std::max<std::size_t>(n, 1) * sizeof(T) + 16) {
    MOEJIT_CU(driver().cuMemsetD8(device.ptr(), kPoisonByte, device.bytes()));
  }
  T* get() const { return static_cast<T*>(device.get()); }
  std::vector<T> download() const {
    std::vector<T> out(count);
    if (count) device.download(out.data(), count * sizeof(T));
    return out;
  }
};

struct Case {
  std::string name;
  int tokens, experts, top_k;
  RoutingMethod method;
  DType logits_type = DType::bf16;
  GroupLayout layout = GroupLayout::contiguous;
  int row_alignment = 1, capacity = 0;
  bool bias = false;
  // logits(t, e, rng) -> value; default: N(0, 1)
  std::function<float(int, int, std::mt19937&)> logit;
};

std::uint16_t to_half_bits(DType t, float v) { return t == DType::bf16 ? float_to_bf16(v) : float_to_f16(v); }
float from_half_bits(DType t, std::uint16_t v) { return t == DType::bf16 ? bf16_to_float(v) : f16_to_float(v); }

void run_case(const Case& c) {
  runtime();  // its context must be current before the first allocation
  INFO("case " << c.name << ": tokens " << c.tokens << ", experts " << c.experts << ", top-" << c.top_k);
  std::mt19937 rng(std::hash<std::string>()(c.name) ^ c.tokens);
  std::normal_distribution<float> normal;
  std::vector<float> logits((std::size_t)c.tokens * c.experts);
  for (int t = 0; t < c.tokens; ++t)
    for (int e = 0; e < c.experts; ++e) logits[(std::size_t)t * c.experts + e] = c.logit ? c.logit(t, e, rng) : normal(rng);
  // The device gets the logits in their type; the reference gets the same values back as float.
  DeviceBuffer d_logits(std::max<std::size_t>(logits.size(), 1) * 4);
  if (c.logits_type == DType::f32) {
    if (!logits.empty()) d_logits.upload(logits.data(), logits.size() * 4);
  } else {
    std::vector<std::uint16_t> bits(logits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) logits[i] = from_half_bits(c.logits_type, bits[i] = to_half_bits(c.logits_type, logits[i]));
    if (!bits.empty()) d_logits.upload(bits.data(), bits.size() * 2);
  }
  std::vector<float> bias;
  DeviceBuffer d_bias(c.experts * 4);
  if (c.bias) {
    std::uniform_real_distribution<float> u(-0.2f, 0.2f);
    for (int e = 0; e < c.experts; ++e) bias.push_back(u(rng));
    d_bias.upload(bias.data(), bias.size() * 4);
  }

  RoutingArgs a;
  a.logits = d_logits.get();
  a.logits_type = c.logits_type;
  a.correction_bias = c.bias ? static_cast<const float*>(d_bias.get()) : nullptr;
  a.num_tokens = c.tokens;
  a.num_experts = c.experts;
  a.top_k = c.top_k;
  a.method = c.method;
  a.layout = c.layout;
  a.row_alignment = c.row_alignment;
  a.capacity = c.capacity;
  const std::size_t pairs = (std::size_t)c.tokens * c.top_k;
  const std::size_t rows = routed_rows(a);
  Buffer<int> ids(pairs), offsets(c.experts + 1), counts(c.experts), gather(rows), scatter(rows), slot_rows(pairs);
  Buffer<float> weights(pairs), row_weights(rows);
  Buffer<char> workspace(routing_workspace_bytes(a));
  a.topk_ids = ids.get();
  a.topk_weights = weights.get();
  a.group_offsets = offsets.get();
  a.group_counts = counts.get();
  a.gather_rows = gather.get();
  a.scatter_rows = scatter.get();
  a.routing_weights = row_weights.get();
  a.row_of_slot = slot_rows.get();
  a.workspace = workspace.get();
  a.workspace_bytes = workspace.count;

  route(runtime(), a, nullptr);
  MOEJIT_CU(driver().cuCtxSynchronize());
  auto ref = reference::route(a, logits, bias);

  auto g_ids = ids.download();
  auto g_weights = weights.download();
  auto g_counts = counts.download();
  auto g_gather = gather.download();
  auto g_scatter = scatter.download();
  auto g_row_weights = row_weights.download();
  auto g_slot_rows = slot_rows.download();
  CHECK(g_ids == ref.topk_ids);
  CHECK(g_counts == ref.group_counts);
  CHECK(g_slot_rows == ref.row_of_slot);
  if (c.layout == GroupLayout::contiguous) CHECK(offsets.download() == ref.group_offsets);
  else CHECK(offsets.download() == std::vector<int>(c.experts + 1, kPoisonInt));  // not written in masked
  double worst = 0;
  long bad_weights = 0;
  for (std::size_t i = 0; i < pairs; ++i) {
    double d = std::fabs((double)g_weights[i] - ref.topk_weights[i]);
    if (!(d <= 1e-6)) ++bad_weights;  // NaN fails
    worst = std::max(worst, d);
  }
  long wrong_rows = 0, written_outside = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    if (ref.gather_rows[r] == -2) {  // the kernels must not write here
      written_outside += g_gather[r] != kPoisonInt || g_scatter[r] != kPoisonInt;
      continue;
    }
    double d = std::fabs((double)g_row_weights[r] - ref.routing_weights[r]);
    wrong_rows += g_gather[r] != ref.gather_rows[r] || g_scatter[r] != ref.scatter_rows[r] || !(d <= 1e-6);
  }
  INFO(fmt::format("worst weight difference {:.2e}, {} weights off, {} rows wrong, {} written outside", worst,
                   bad_weights, wrong_rows, written_outside));
  CHECK(bad_weights == 0);
  CHECK(wrong_rows == 0);
  CHECK(written_outside == 0);

  // Deterministic: a second launch over poisoned outputs gives the same bytes.
  MOEJIT_CU(driver().cuMemsetD8(gather.device.ptr(), kPoisonByte, gather.device.bytes()));
  MOEJIT_CU(driver().cuMemsetD8(row_weights.device.ptr(), kPoisonByte, row_weights.device.bytes()));
  route(runtime(), a, nullptr);
  MOEJIT_CU(driver().cuCtxSynchronize());
  CHECK(gather.download() == g_gather);
  auto again = row_weights.download();
  CHECK(std::memcmp(again.data(), g_row_weights.data(), again.size() * 4) == 0);
}

std::vector<Case> model_cases() {
  return {
      {"gpt-oss-120b", 0, 128, 4, RoutingMethod::gpt_oss(), DType::bf16},
      {"gpt-oss-120b f32 logits", 0, 128, 4, RoutingMethod::gpt_oss(), DType::f32},
      {"qwen3-30b-a3b", 0, 128, 8, RoutingMethod::qwen3_moe(), DType::bf16},
      {"qwen3 f16 logits, no renormalization", 0, 128, 8, RoutingMethod{RoutingScore::softmax_topk}, DType::f16},
      {"deepseek-v3", 0, 256, 8, RoutingMethod::deepseek_v3(), DType::bf16, GroupLayout::contiguous, 1, 0, true},
      {"deepseek-v3 without bias", 0, 256, 8, RoutingMethod::deepseek_v3(), DType::f32},
      {"mixtral", 0, 8, 2, RoutingMethod::mixtral(), DType::bf16},
      {"1024 experts top-32", 0, 1024, 32, RoutingMethod::qwen3_moe(), DType::f32},
      {"odd expert count", 0, 100, 3, RoutingMethod::gpt_oss(), DType::f32},
  };
}

// The three quantizer cases below share this: x (already rounded to `in`) goes up as `in`, the
// outputs for `out_rows` rows are poisoned first (0xFF: a NaN code and NaN scales), and `q` (its
// permutation fields set by the caller) runs with the buffers filled in; codes and scales
// ([kb][out_rows]) come back.
struct QuantizerOutput {
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
};

// Rounds `values` to `in` (bf16 / f16) in place and returns their bits (empty for f32).
std::vector<std::uint16_t> round_to_input(DType in, std::vector<float>& values) {
  if (in == DType::f32) return {};
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = from_half_bits(in, bits[i] = to_half_bits(in, values[i]));
  return bits;
}

QuantizerOutput run_quantizer(QuantizeFp8Args q, const std::vector<float>& values, const std::vector<std::uint16_t>& bits,
                              DType in, int k, long long out_rows) {
  const std::size_t count = values.size();
  DeviceBuffer d_in(count * element_bytes(in) + 16);
  d_in.upload(in == DType::f32 ? (const void*)values.data() : (const void*)bits.data(), count * element_bytes(in));
  const int k_blocks = (k + 127) / 128;
  QuantizerOutput out{std::vector<std::uint8_t>((std::size_t)out_rows * k), std::vector<float>((std::size_t)k_blocks * out_rows)};
  DeviceBuffer d_codes(out.codes.size() + 16), d_scales(out.scales.size() * 4 + 16);
  MOEJIT_CU(driver().cuMemsetD8(d_codes.ptr(), 0xff, d_codes.bytes()));
  MOEJIT_CU(driver().cuMemsetD8(d_scales.ptr(), 0xff, d_scales.bytes()));
  q.input = d_in.get();
  q.input_type = in;
  q.k = k;
  q.output = d_codes.get();
  q.scales = static_cast<float*>(d_scales.get());
  quantize_activations_fp8(runtime(), q, nullptr);
  MOEJIT_CU(driver().cuCtxSynchronize());
  d_codes.download(out.codes.data(), out.codes.size());
  d_scales.download(out.scales.data(), out.scales.size() * 4);
  return out;
}

// Codes and scales of the gathered or plain cases against the host quantizer's, bit for bit.
void check_quantized(const QuantizerOutput& got, const std::vector<float>& rows_in, int rows, int k) {
  Fp8Tensor ref = quantize_fp8(rows_in.data(), QuantShape{1, rows, k}, Fp8Scaling::block_1x128);
  std::vector<float> ref_scales = fp8_kernel_scales_a(ref);
  const std::size_t count = (std::size_t)rows * k;
  std::size_t code_mismatches = 0, scale_mismatches = 0, first = count;
  for (std::size_t i = 0; i < count; ++i)
    if (got.codes[i] != ref.data[i] && code_mismatches++ == 0) first = i;
  for (std::size_t i = 0; i < got.scales.size(); ++i) scale_mismatches += std::memcmp(&got.scales[i], &ref_scales[i], 4) != 0;
  INFO(fmt::format("first code mismatch at {}: {:#04x} against {:#04x} (value {})", first, first < count ? got.codes[first] : 0,
                   first < count ? ref.data[first] : 0, first < count ? rows_in[first] : 0.f));
  CHECK(code_mismatches == 0);
  CHECK(scale_mismatches == 0);
}

}  // namespace

TEST_CASE("route matches the reference for each model's scoring, few to many tokens", "[gpu][routing]") {
  for (Case c : model_cases())
    for (int tokens : {0, 1, 16, 64, 65, 129, 1000, 4096}) {  // 64: the last fused call
      c.tokens = tokens;
      run_case(c);
    }
}

TEST_CASE("route at 16384 tokens (three-kernel path, many CTAs)", "[gpu][routing]") {
  Case c{"deepseek-v3 16k", 16384, 256, 8, RoutingMethod::deepseek_v3(), DType::bf16, GroupLayout::contiguous, 1, 0, true};
  run_case(c);
  run_case({"gpt-oss 16k", 16384, 128, 4, RoutingMethod::gpt_oss(), DType::bf16});
}

TEST_CASE("route: ties in the logits go to the lower expert", "[gpu][routing]") {
  auto few_values = [](int, int, std::mt19937& rng) { return (float)std::uniform_int_distribution<int>(0, 2)(rng); };
  for (int tokens : {16, 1000}) {
    run_case({"ties softmax", tokens, 128, 8, RoutingMethod::qwen3_moe(), DType::bf16, GroupLayout::contiguous, 1, 0, false, few_values});
    run_case({"ties topk_softmax", tokens, 128, 4, RoutingMethod::gpt_oss(), DType::f32, GroupLayout::contiguous, 1, 0, false, few_values});
    run_case({"ties sigmoid groups", tokens, 256, 8, RoutingMethod::deepseek_v3(), DType::bf16, GroupLayout::contiguous, 1, 0, false, few_values});
    run_case({"all equal", tokens, 64, 6, RoutingMethod::gpt_oss(), DType::f32, GroupLayout::contiguous, 1, 0, false,
              [](int, int, std::mt19937&) { return 0.5f; }});
  }
}

TEST_CASE("route: experts with no rows, every token to one expert", "[gpu][routing]") {
  auto never_expert_5 = [](int, int e, std::mt19937& rng) { return e == 5 ? -100.f : std::normal_distribution<float>()(rng); };
  auto all_to_3 = [](int, int e, std::mt19937& rng) { return e == 3 ? 50.f : std::normal_distribution<float>()(rng); };
  for (int tokens : {16, 1000, 16384}) {
    run_case({"expert 5 empty", tokens, 128, 4, RoutingMethod::gpt_oss(), DType::bf16, GroupLayout::contiguous, 1, 0, false, never_expert_5});
    run_case({"all to expert 3, top-1", tokens, 128, 1, RoutingMethod::gpt_oss(), DType::bf16, GroupLayout::contiguous, 1, 0, false, all_to_3});
    run_case({"all to expert 3, top-8", tokens, 128, 8, RoutingMethod::qwen3_moe(), DType::bf16, GroupLayout::contiguous, 1, 0, false, all_to_3});
  }
}

TEST_CASE("route: padded offsets and the masked layout (with drops)", "[gpu][routing]") {
  auto all_to_3 = [](int, int e, std::mt19937& rng) { return e == 3 ? 50.f : std::normal_distribution<float>()(rng); };
  for (int tokens : {16, 1000, 16384}) {
    for (int align : {8, 128})
      run_case({fmt::format("aligned to {}", align), tokens, 128, 8, RoutingMethod::qwen3_moe(), DType::bf16,
                GroupLayout::contiguous, align});
    run_case({"masked, ample capacity", tokens, 128, 4, RoutingMethod::gpt_oss(), DType::bf16, GroupLayout::masked, 1, tokens});
    run_case({"masked, drops", tokens, 128, 4, RoutingMethod::gpt_oss(), DType::bf16, GroupLayout::masked, 1,
              std::max(1, tokens / 64), false, all_to_3});
  }
}

TEST_CASE("combine matches the reference: types, weights, dropped slots", "[gpu][routing]") {
  runtime();
  struct Combo {
    DType in, out;
    bool weighted, dropped;
  };
  for (Combo k : {Combo{DType::bf16, DType::bf16, false, false}, Combo{DType::f32, DType::bf16, true, false},
                  Combo{DType::f16, DType::f32, false, true}, Combo{DType::f32, DType::f32, true, true}})
    for (auto [tokens, top_k, n] : {std::tuple{1, 4, 2880}, std::tuple{16, 8, 2048}, std::tuple{1000, 8, 7168}, std::tuple{333, 1, 8}}) {
      INFO(fmt::format("combine {} -> {}, weighted {}, dropped {}: tokens {} top-{} n {}", to_text(k.in), to_text(k.out),
                       k.weighted, k.dropped, tokens, top_k, n));
      std::mt19937 rng(tokens * 31 + n);
      std::normal_distribution<float> normal;
      std::size_t count = (std::size_t)tokens * top_k * n;
      std::vector<float> input(count);
      std::vector<std::uint16_t> bits(count);
      for (std::size_t i = 0; i < count; ++i) {
        input[i] = normal(rng);
        if (k.in != DType::f32) input[i] = from_half_bits(k.in, bits[i] = to_half_bits(k.in, input[i]));
      }
      DeviceBuffer d_in(count * element_bytes(k.in) + 16);
      d_in.upload(k.in == DType::f32 ? (const void*)input.data() : (const void*)bits.data(), count * element_bytes(k.in));
      std::vector<float> w((std::size_t)tokens * top_k);
      for (auto& x : w) x = std::uniform_real_distribution<float>(0, 1)(rng);
      std::vector<int> slot_rows((std::size_t)tokens * top_k);
      for (std::size_t i = 0; i < slot_rows.size(); ++i) slot_rows[i] = (k.dropped && i % 3 == 1) ? -1 : (int)i;
      DeviceBuffer d_w(w.size() * 4), d_rows(slot_rows.size() * 4);
      d_w.upload(w.data(), w.size() * 4);
      d_rows.upload(slot_rows.data(), slot_rows.size() * 4);
      std::size_t out_count = (std::size_t)tokens * n;
      DeviceBuffer d_out(out_count * element_bytes(k.out) + 16);
      MOEJIT_CU(driver().cuMemsetD8(d_out.ptr(), 0xff, d_out.bytes()));  // NaN in every type

      CombineArgs c;
      c.input = d_in.get();
      c.input_type = k.in;
      c.output = d_out.get();
      c.output_type = k.out;
      c.num_tokens = tokens;
      c.top_k = top_k;
      c.n = n;
      c.topk_weights = k.weighted ? static_cast<const float*>(d_w.get()) : nullptr;
      c.row_of_slot = k.dropped ? static_cast<const int*>(d_rows.get()) : nullptr;
      combine(runtime(), c, nullptr);
      MOEJIT_CU(driver().cuCtxSynchronize());
      auto ref = reference::combine(tokens, top_k, n, input, k.weighted ? w : std::vector<float>{},
                                    k.dropped ? slot_rows : std::vector<int>{});
      std::vector<float> got(out_count);
      if (k.out == DType::f32) {
        d_out.download(got.data(), out_count * 4);
      } else {
        std::vector<std::uint16_t> ob(out_count);
        d_out.download(ob.data(), out_count * 2);
        for (std::size_t i = 0; i < out_count; ++i) got[i] = from_half_bits(k.out, ob[i]);
      }
      double err2 = 0, ref2 = 0;
      long nans = 0;
      for (std::size_t i = 0; i < out_count; ++i) {
        if (std::isnan(got[i])) ++nans;
        err2 += (got[i] - ref[i]) * (got[i] - ref[i]);
        ref2 += ref[i] * ref[i];
      }
      double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
      INFO(fmt::format("rel_err {:.2e}, nan {}", rel, nans));
      CHECK(nans == 0);
      // f32 out: fp32 sums of <= 32 terms; 16-bit out: one rounding (bf16 2^-9 relative, f16 2^-12).
      CHECK(rel <= (k.out == DType::f32 ? 1e-6 : k.out == DType::bf16 ? 4e-3 : 5e-4));
    }
}

// FP8 activations: the kernel's codes and scales are moejit::quantize_fp8's (block_1x128, scales by
// fp8_kernel_scales_a) bit for bit, on values spread over 2^-16..2^16 per row, with all-zero
// blocks, infinities (left out of the amax, saturated to +-448), NaNs (left out of the amax, coded
// sign | 0x7F), E4M3 subnormals and a partial last block; outputs poisoned first (0xFF: a NaN code,
// and NaN scales).
TEST_CASE("quantize_activations_fp8 matches the host quantizer bit for bit", "[gpu][routing][fp8]") {
  runtime();
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (auto [rows, k] : {std::pair{1, 128}, std::pair{37, 176}, std::pair{300, 7168}, std::pair{129, 2048}, std::pair{5, 16}}) {
      INFO(fmt::format("{}: rows {} k {}", to_text(in), rows, k));
      std::mt19937 rng(rows * 131 + k + (int)in);
      std::normal_distribution<float> normal;
      std::uniform_real_distribution<float> log_scale(-16.f, 16.f);
      const std::size_t count = (std::size_t)rows * k;
      std::vector<float> values(count);
      for (int r = 0; r < rows; ++r) {
        // f16 holds up to 65504: keep its rows below 2^12 so that no value is infinite by rounding.
        const float row_scale = std::ldexp(1.f, (int)log_scale(rng) / (in == DType::f16 ? 4 : 1));
        for (int c = 0; c < k; ++c) {
          float v = normal(rng) * row_scale;
          if (r % 7 == 3 && c < 128) v = 0.f;                       // an all-zero block
          if (r % 11 == 5 && c % 128 == 9) v = r % 2 ? -INFINITY : INFINITY;  // not in the amax
          if (r % 5 == 2 && c % 128 > 64) v *= 1e-4f;               // E4M3 subnormals beside the amax
          if (r % 13 == 6 && c % 128 == 17) v = std::copysign(std::nanf(""), r % 2 ? -1.f : 1.f);  // NaN: sign | 0x7F
          values[(std::size_t)r * k + c] = v;
        }
      }
      const std::vector<std::uint16_t> bits = round_to_input(in, values);
      QuantizeFp8Args q;
      q.rows = rows;
      check_quantized(run_quantizer(q, values, bits, in, k, rows), values, rows, k);
    }
}

// The same with gather_rows (x in token order -> GEMM1's A in routed order): output row r is the
// host quantizer's row gather_rows[r] of the input, and an index outside [0, num_tokens) (-1, a
// padding row, or num_tokens) is an all-zero row: codes 0, scale 1. Rows repeat (top-k) and
// come in any order.
TEST_CASE("quantize_activations_fp8 with gather_rows permutes as it quantizes", "[gpu][routing][fp8]") {
  runtime();
  for (DType in : {DType::bf16, DType::f32})
    for (auto [tokens, rows, k] : {std::tuple{1, 3, 128}, std::tuple{37, 300, 2048}, std::tuple{300, 97, 7168}}) {
      INFO(fmt::format("{}: tokens {} rows {} k {}", to_text(in), tokens, rows, k));
      std::mt19937 rng(tokens * 7 + rows + k);
      std::normal_distribution<float> normal;
      const std::size_t count = (std::size_t)tokens * k;
      std::vector<float> values(count);
      for (auto& v : values) v = normal(rng) * 3.f;
      const std::vector<std::uint16_t> bits = round_to_input(in, values);
      std::vector<int> gather(rows);
      std::uniform_int_distribution<int> token(0, tokens - 1);
      for (int r = 0; r < rows; ++r) gather[r] = r % 13 == 4 ? -1 : r % 17 == 9 ? tokens : token(rng);
      std::vector<float> gathered((std::size_t)rows * k, 0.f);
      for (int r = 0; r < rows; ++r)
        if (gather[r] >= 0 && gather[r] < tokens)
          std::copy_n(values.begin() + (std::size_t)gather[r] * k, k, gathered.begin() + (std::size_t)r * k);
      DeviceBuffer d_gather((std::size_t)rows * 4);
      d_gather.upload(gather.data(), (std::size_t)rows * 4);
      QuantizeFp8Args q;
      q.rows = rows;
      q.gather_rows = static_cast<const int*>(d_gather.get());
      q.num_tokens = tokens;
      check_quantized(run_quantizer(q, values, bits, in, k, rows), gathered, rows, k);
    }
}

// Token-major (row_of_slot): input row t is quantized once and written to its routed rows
// row_of_slot[t * top_k + j]; dropped slots (-1) are skipped and rows no slot names stay poisoned.
// Each written row is the host quantizer's row t, bit for bit.
TEST_CASE("quantize_activations_fp8 with row_of_slot writes each token's routed rows", "[gpu][routing][fp8]") {
  runtime();
  for (DType in : {DType::bf16, DType::f16})
    for (auto [tokens, top_k, k] : {std::tuple{1, 1, 128}, std::tuple{37, 8, 2048}, std::tuple{300, 4, 7168}}) {
      INFO(fmt::format("{}: tokens {} top_k {} k {}", to_text(in), tokens, top_k, k));
      std::mt19937 rng(tokens * 11 + top_k + k);
      std::normal_distribution<float> normal;
      const std::size_t count = (std::size_t)tokens * k;
      std::vector<float> values(count);
      for (auto& v : values) v = normal(rng) * 2.f;
      const std::vector<std::uint16_t> bits = round_to_input(in, values);
      // Routed rows: a permutation of the slots, some dropped (-1), 3 rows more than slots (never named).
      const long long out_rows = (long long)tokens * top_k + 3;
      std::vector<int> order(tokens * top_k);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<int> row_of_slot(tokens * top_k);
      for (int sl = 0; sl < tokens * top_k; ++sl) row_of_slot[sl] = sl % 9 == 4 ? -1 : order[sl];
      DeviceBuffer d_slots(row_of_slot.size() * 4);
      d_slots.upload(row_of_slot.data(), row_of_slot.size() * 4);
      QuantizeFp8Args q;
      q.rows = tokens;
      q.row_of_slot = static_cast<const int*>(d_slots.get());
      q.top_k = top_k;
      q.out_rows = out_rows;
      const QuantizerOutput out = run_quantizer(q, values, bits, in, k, out_rows);
      const std::vector<std::uint8_t>& codes = out.codes;
      const std::vector<float>& scales = out.scales;
      const int k_blocks = (k + 127) / 128;
      Fp8Tensor ref = quantize_fp8(values.data(), QuantShape{1, tokens, k}, Fp8Scaling::block_1x128);
      std::vector<float> ref_scales = fp8_kernel_scales_a(ref);  // [kb][tokens]
      std::vector<int> token_of(out_rows, -1);
      for (int sl = 0; sl < tokens * top_k; ++sl)
        if (row_of_slot[sl] >= 0) token_of[row_of_slot[sl]] = sl / top_k;
      std::size_t code_mismatches = 0, scale_mismatches = 0, untouched_changed = 0;
      for (long long r = 0; r < out_rows; ++r) {
        const int t = token_of[r];
        for (int c = 0; c < k; ++c) {
          const std::uint8_t got = codes[(std::size_t)r * k + c];
          if (t < 0) untouched_changed += got != 0xff;
          else code_mismatches += got != ref.data[(std::size_t)t * k + c];
        }
        for (int b = 0; b < k_blocks; ++b) {
          std::uint32_t got;
          std::memcpy(&got, &scales[(std::size_t)b * out_rows + r], 4);
          if (t < 0) {
            untouched_changed += got != 0xffffffffu;
          } else {
            std::uint32_t want;
            std::memcpy(&want, &ref_scales[(std::size_t)b * tokens + t], 4);
            scale_mismatches += got != want;
          }
        }
      }
      CHECK(code_mismatches == 0);
      CHECK(scale_mismatches == 0);
      CHECK(untouched_changed == 0);
    }
}
