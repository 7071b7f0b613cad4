// A routed MoE grouped GEMM with fusions (gather, scatter, weight, bias, activation, atomic
// combine) on the host and the device, with an FP64 CPU reference of the fused epilogue:
//   out[dest(r)] (+)= act(A[token(r)] · B[g]ᵀ + bias[g]) * weight[r]
// The reference functions need no GPU (tests/test_fusion_reference.cpp checks them on the CPU).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "driver/driver_api.hpp"
#include "moejit/formats.hpp"
#include "moejit/runtime.hpp"
#include "problem_common.hpp"
#include "reference_gemm.hpp"

namespace moejit::test {

// The activations as the contract defines them, in double.
inline double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double ref_activate(Activation a, double x) {
  switch (a) {
    case Activation::silu: return x * ref_sigmoid(x);
    case Activation::gelu: return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    default: return x;
  }
}
inline double ref_glu(Activation a, double gate, double up) {
  if (a == Activation::swiglu_oai) {
    double g = std::min(gate, 7.0), u = std::clamp(up, -7.0, 7.0);
    return g * ref_sigmoid(1.702 * g) * (u + 1.0);
  }
  return gate * ref_sigmoid(gate) * up;  // swiglu
}
// One routed row's fused output (n_out values) from its GEMM row (n values) and bias row (or null).
inline void ref_epilogue(const Fusion& f, const double* gemm, const float* bias, double weight, int n, double* out) {
  std::vector<double> v(gemm, gemm + n);
  if (bias)
    for (int j = 0; j < n; ++j) v[j] += bias[j];
  if (f.glu_activation()) {
    for (int i = 0; i < n / 2; ++i) {
      double gate = f.glu == GluLayout::split ? v[i] : v[2 * i];
      double up = f.glu == GluLayout::split ? v[n / 2 + i] : v[2 * i + 1];
      out[i] = ref_glu(f.activation, gate, up) * weight;
    }
  } else {
    for (int j = 0; j < n; ++j) out[j] = ref_activate(f.activation, v[j]) * weight;
  }
}

// Tokens routed to top_k experts each. Routing modes: random distinct experts (optionally
// leaving some experts empty), or every token to one expert (top_k = 1).
struct FusedProblem {
  KernelSpec spec;  // layout, dtypes and fusions
  int tokens = 0, top_k = 1, groups = 0, n = 0, k = 0;
  int n_out() const { return spec.fusion.glu_activation() ? n / 2 : n; }

  // Routing, host side: routed row r -> (token, slot); -1 for rows outside every group.
  std::vector<int> token_of, slot_of;
  std::vector<int> rows_of, offsets;  // per group; contiguous offsets (leading rows untouched)
  int total_rows = 0, capacity = 0;
  std::vector<int> gather_rows, scatter_rows;
  std::vector<float> weights, bias;
  std::vector<std::uint16_t> a, b;  // a: [tokens, K] with gather, else [total_rows, K] (routed order)
  // Quantized operands (spec.a = e4m3: A and B; spec.b = mxfp4 | nvfp4: B): the bytes the kernel
  // reads, its scales, and the operands dequantized exactly (what the reference multiplies).
  std::vector<std::uint8_t> qa, qb;
  std::vector<float> a_scales, b_scales, b_tensor_scales, a_deq, b_deq;
  DeviceBuffer d_a_scales, d_b_scales, d_b_tensor_scales;
  bool quantized_a() const { return spec.a == DType::e4m3; }
  bool quantized_b() const { return spec.a == DType::e4m3 || spec.b == DType::mxfp4 || spec.b == DType::nvfp4; }
  int out_rows = 0;                 // rows of C
  static constexpr int kExtraOutRows = 3;  // scatter: rows past every destination, must stay untouched
  static constexpr float kSentinel = 12345.f;  // atomic mode: C starts at 0 except these rows

  DeviceBuffer d_a, d_b, d_c, d_groups, d_gather, d_scatter, d_weights, d_bias;
  DeviceBuffer d_c_scales;  // c=e4m3: [ceil(n_out / 128)][total_rows]
  int c_blocks() const { return (n_out() + 127) / 128; }

  // FP8 keeps the 16-bit vectors in bf16 as the source values, quantized by quantize().
  float to_float(std::uint16_t v) const { return spec.a == DType::f16 ? f16_to_float(v) : bf16_to_float(v); }
  std::uint16_t from_float(float v) const { return spec.a == DType::f16 ? float_to_f16(v) : float_to_bf16(v); }
  std::size_t c_bytes() const { return (std::size_t)out_rows * n_out() * element_bytes(spec.c); }
  int row_begin(int g) const { return spec.layout == GroupLayout::contiguous ? offsets[g] : g * capacity; }

  // experts_of[t]: the top_k experts of token t (distinct). row_alignment > 1 (contiguous layout):
  // each group is padded to a multiple of it as the routing helper pads them (docs/design.md,
  // "Routing"): padding rows are inside the group, read token 0, weigh 0 and have scatter row -1,
  // so the fused GEMMs compute them and write nothing with fuse=scatter (their row otherwise).
  void route(const std::vector<std::vector<int>>& experts_of, std::mt19937& rng, int row_alignment = 1) {
    rows_of.assign(groups, 0);
    for (auto& e : experts_of)
      for (int g : e) rows_of[g]++;
    std::vector<int> routed = rows_of;
    if (spec.layout == GroupLayout::contiguous && row_alignment > 1)
      for (int& r : rows_of) r = (r + row_alignment - 1) / row_alignment * row_alignment;
    const int lead = 3, tail = 5;
    if (spec.layout == GroupLayout::contiguous) {
      offsets.assign(1, lead);
      for (int r : rows_of) offsets.push_back(offsets.back() + r);
      total_rows = offsets.back() + tail;
    } else {
      capacity = *std::max_element(rows_of.begin(), rows_of.end()) + 9;  // padding rows stay untouched
      total_rows = groups * capacity;
    }
    token_of.assign(total_rows, -1);
    slot_of.assign(total_rows, -1);
    std::vector<int> fill(groups, 0);
    for (int t = 0; t < tokens; ++t)
      for (int s = 0; s < top_k; ++s) {
        int g = experts_of[t][s];
        int r = row_begin(g) + fill[g]++;
        token_of[r] = t;
        slot_of[r] = s;
      }
    // Rows outside every group get indices the kernels must never use.
    gather_rows.assign(total_rows, -7);
    scatter_rows.assign(total_rows, -7);
    weights.assign(total_rows, std::nanf(""));
    std::uniform_real_distribution<float> w(0.1f, 1.f);
    const bool combine = spec.fusion.atomic;
    for (int r = 0; r < total_rows; ++r) {
      if (token_of[r] < 0) continue;
      gather_rows[r] = token_of[r];
      scatter_rows[r] = combine ? token_of[r] : token_of[r] * top_k + slot_of[r];
      weights[r] = w(rng);
    }
    for (int g = 0; g < groups; ++g)
      for (int i = routed[g]; i < rows_of[g]; ++i) {
        const int r = row_begin(g) + i;
        gather_rows[r] = 0, scatter_rows[r] = -1, weights[r] = 0.f;
      }
  }

  void fill(std::mt19937& rng) {
    fill_host(rng);
    upload();
  }

  // Host data only (the CPU tests of the reference use it without a GPU).
  void fill_host(std::mt19937& rng) {
    std::normal_distribution<float> normal(0.f, 1.f);
    const Fusion& f = spec.fusion;
    const int a_rows = f.gather_a ? tokens : total_rows;
    std::vector<std::uint16_t> token_a((std::size_t)tokens * k);
    fill_normal(token_a, rng, [&](float x) { return from_float(x); });
    if (f.gather_a) {
      a = token_a;
    } else {
      // Routed order, materialized; rows outside groups random too (they must not be read into C).
      a.resize((std::size_t)total_rows * k);
      for (int r = 0; r < total_rows; ++r)
        for (int q = 0; q < k; ++q)
          a[(std::size_t)r * k + q] = token_of[r] >= 0 ? token_a[(std::size_t)token_of[r] * k + q] : from_float(normal(rng));
    }
    b.resize((std::size_t)groups * n * k);
    fill_normal(b, rng, [&](float x) { return from_float(x * 0.1f); });
    bias.resize((std::size_t)groups * n);
    for (auto& v : bias) v = normal(rng) * 0.5f;
    out_rows = f.scatter_c ? (f.atomic ? tokens : tokens * top_k) + kExtraOutRows : total_rows;
    quantize();
  }

  // FP8: A (the rows the kernel reads: token order with gather) in 1x128 blocks, B in 128x128
  // blocks (fp8_kernel_scales_a/b); 4-bit: B quantized per expert and packed by pack_w4_sm90.
  void quantize() {
    const int a_rows = spec.fusion.gather_a ? tokens : total_rows;
    auto floats = [&](const std::vector<std::uint16_t>& v) {
      std::vector<float> out(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
      return out;
    };
    const QuantShape b_shape{groups, n, k};
    if (quantized_a()) {
      const Fp8Tensor ta = quantize_fp8(floats(a).data(), QuantShape{1, a_rows, k}, Fp8Scaling::block_1x128);
      const Fp8Tensor tb = quantize_fp8(floats(b).data(), b_shape, Fp8Scaling::block_128x128);
      qa = ta.data, qb = tb.data;
      a_scales = fp8_kernel_scales_a(ta), b_scales = fp8_kernel_scales_b(tb);
      a_deq = dequantize(ta), b_deq = dequantize(tb);
    } else if (spec.b == DType::mxfp4) {
      const Mxfp4Tensor tb = quantize_mxfp4(floats(b).data(), b_shape);
      qb = pack_w4_sm90(tb);
      b_deq = dequantize(tb);
    } else if (spec.b == DType::nvfp4) {
      const Nvfp4Tensor tb = quantize_nvfp4(floats(b).data(), b_shape);
      qb = pack_w4_sm90(tb);
      b_tensor_scales = tb.tensor_scales;
      b_deq = dequantize(tb);
    }
  }

  void upload() {
    const Fusion& f = spec.fusion;
    const int a_rows = f.gather_a ? tokens : total_rows;
    auto upload = [](DeviceBuffer& d, const void* p, std::size_t bytes) {
      d = DeviceBuffer(std::max<std::size_t>(bytes, 16));
      if (bytes) d.upload(p, bytes);
    };
    if (quantized_a()) upload(d_a, qa.data(), qa.size());
    else upload(d_a, a.data(), (std::size_t)a_rows * k * 2);
    if (quantized_b()) upload(d_b, qb.data(), qb.size());
    else upload(d_b, b.data(), b.size() * 2);
    upload(d_a_scales, a_scales.data(), a_scales.size() * sizeof(float));
    upload(d_b_scales, b_scales.data(), b_scales.size() * sizeof(float));
    upload(d_b_tensor_scales, b_tensor_scales.data(), b_tensor_scales.size() * sizeof(float));
    d_c = DeviceBuffer(std::max<std::size_t>(c_bytes(), 16));
    if (spec.c == DType::e4m3) d_c_scales = DeviceBuffer((std::size_t)c_blocks() * std::max(total_rows, 1) * sizeof(float));
    const std::vector<int>& g = spec.layout == GroupLayout::contiguous ? offsets : rows_of;
    upload(d_groups, g.data(), g.size() * sizeof(int));
    upload(d_gather, gather_rows.data(), gather_rows.size() * sizeof(int));
    upload(d_scatter, scatter_rows.data(), scatter_rows.size() * sizeof(int));
    upload(d_weights, weights.data(), weights.size() * sizeof(float));
    upload(d_bias, bias.data(), bias.size() * sizeof(float));
  }

  // Args with exactly the spec's fusion pointers; args.fusion set only when `high_level`.
  GroupedGemmArgs args(bool high_level = false) const {
    const Fusion& f = spec.fusion;
    GroupedGemmArgs x;
    x.layout = spec.layout;
    x.ab_type = spec.a;
    x.c_type = spec.c;
    if (spec.b != spec.a) x.b_type = spec.b;
    if (quantized_a()) {
      x.a_scales = static_cast<const float*>(d_a_scales.get());
      x.b_scales = d_b_scales.get();
    }
    if (spec.b == DType::nvfp4) x.b_tensor_scales = static_cast<const float*>(d_b_tensor_scales.get());
    x.a = d_a.get();
    x.b = d_b.get();
    x.c = d_c.get();
    x.num_groups = groups;
    x.n = n;
    x.k = k;
    set_group_args(x, spec.layout, d_groups, total_rows, capacity, offsets, rows_of);
    if (high_level) x.fusion = f;
    if (f.gather_a) x.gather_rows = static_cast<const int*>(d_gather.get()), x.num_tokens = tokens;
    if (f.scatter_c) x.scatter_rows = static_cast<const int*>(d_scatter.get()), x.num_out_rows = out_rows;
    if (f.routing_weight) x.routing_weights = static_cast<const float*>(d_weights.get());
    if (f.bias) x.bias = static_cast<const float*>(d_bias.get());
    if (spec.c == DType::e4m3) x.c_scales = static_cast<float*>(d_c_scales.get());
    return x;
  }

  // Poison (0xFF bytes: NaN in every float type); atomic mode: zeros, sentinel in the extra rows.
  void prepare_output() const {
    if (!spec.fusion.atomic) {
      MOEJIT_CU(driver().cuMemsetD8(d_c.ptr(), 0xFF, c_bytes()));
      if (spec.c == DType::e4m3) MOEJIT_CU(driver().cuMemsetD8(d_c_scales.ptr(), 0xFF, d_c_scales.bytes()));
      return;
    }
    std::vector<float> init((std::size_t)out_rows * n_out(), 0.f);
    std::fill(init.begin() + (std::size_t)tokens * n_out(), init.end(), kSentinel);
    d_c.upload(init.data(), init.size() * sizeof(float));
  }

  // NaN where nothing may be written.
  std::vector<double> reference() const {
    const Fusion& f = spec.fusion;
    const int no = n_out();
    std::vector<double> ref((std::size_t)out_rows * no, std::nan(""));
    if (f.atomic) std::fill(ref.begin(), ref.begin() + (std::size_t)tokens * no, 0.0);
    std::vector<float> af(a.size()), bf(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) af[i] = to_float(a[i]);
    for (std::size_t i = 0; i < b.size(); ++i) bf[i] = to_float(b[i]);
    if (!a_deq.empty()) af = a_deq;  // quantized operands: the values the kernel multiplies
    if (!b_deq.empty()) bf = b_deq;
    // Epilogue outputs per grouped row (flat: group-major), then combined below in that order,
    // so that atomic-mode sums add in a fixed order.
    std::vector<std::pair<int, std::vector<double>>> per_row;
    long grouped_rows = 0;
    for (int g = 0; g < groups; ++g) grouped_rows += std::max(rows_of[g], 0);
    per_row.resize(grouped_rows);
    for_each_group_row(rows_of, [&](int g, int i, long flat) {
      const int r = row_begin(g) + i;
      const int a_row = f.gather_a ? gather_rows[r] : r;
      const float* arow = &af[(std::size_t)a_row * k];
      std::vector<double> gemm(n);
      for (int j = 0; j < n; ++j) gemm[j] = dot_f64(arow, &bf[((std::size_t)g * n + j) * k], k);
      std::vector<double> out(no);
      ref_epilogue(f, gemm.data(), f.bias ? &bias[(std::size_t)g * n] : nullptr, f.routing_weight ? weights[r] : 1.0, n,
                   out.data());
      per_row[flat] = {r, std::move(out)};
    });
    for (auto& [r, out] : per_row) {
      const int dest = f.scatter_c ? scatter_rows[r] : r;
      if (dest < 0) continue;  // padding row with fuse=scatter: written nowhere
      for (int j = 0; j < no; ++j) {
        double& x = ref[(std::size_t)dest * no + j];
        x = f.atomic ? x + out[j] : out[j];
      }
    }
    return ref;
  }

  struct Check {
    double rel_err = 0;
    long nan_where_written = 0;  // NaN (or leftover poison) where a result belongs
    long written_outside = 0;    // elements no row may write that changed
    long checked = 0;
    // Elements farther from the reference than elem_rel |ref| + elem_abs rms(ref): a wrong
    // element, row or column that the norm-wise rel_err would average away.
    long elements_off = 0;
    std::size_t worst = 0;  // index of the element farthest outside its tolerance
    double worst_got = 0, worst_ref = 0;
    // c=e4m3: scales not amax / 448 of the reference's block (within 1%), or written where no row is.
    long scales_off = 0;
  };

  // elem_rel, elem_abs: per-element tolerance (see Check::elements_off); 0 skips that check.
  Check check(double elem_rel = 0, double elem_abs = 0) const {
    std::vector<char> raw(c_bytes());
    d_c.download(raw.data(), raw.size());
    const std::vector<double> ref = reference();
    if (spec.c != DType::e4m3) return compare(ref, raw, elem_rel, elem_abs);
    // c=e4m3: the codes times their row block's scale, as fp32 (a poisoned code stays poison).
    std::vector<float> scales((std::size_t)c_blocks() * total_rows);
    d_c_scales.download(scales.data(), scales.size() * sizeof(float));
    const int no = n_out();
    std::vector<char> values(raw.size() * 4);
    for (std::size_t i = 0; i < raw.size(); ++i) {
      const std::uint8_t code = static_cast<std::uint8_t>(raw[i]);
      const std::size_t row = i / no, block = i % no / 128;
      float v;
      if (code == 0xFF) std::memset(&v, 0xFF, 4);
      else v = e4m3_to_float(code) * scales[block * total_rows + row];
      std::memcpy(&values[i * 4], &v, 4);
    }
    Check out = compare(ref, values, elem_rel, elem_abs, DType::f32);
    for (int row = 0; row < total_rows; ++row)
      for (int b = 0; b < c_blocks(); ++b) {
        const float got = scales[(std::size_t)b * total_rows + row];
        std::uint32_t bits;
        std::memcpy(&bits, &got, 4);
        if (std::isnan(ref[(std::size_t)row * no])) {  // a row no group owns: untouched
          out.scales_off += bits != 0xFFFFFFFFu;
          continue;
        }
        double amax = 0;
        for (int j = 128 * b; j < std::min(no, 128 * b + 128); ++j) amax = std::max(amax, std::abs(ref[(std::size_t)row * no + j]));
        const double want = amax > 0 ? amax / 448 : 1.0;
        out.scales_off += !(std::abs(got - want) <= 1e-2 * want);
      }
    return out;
  }

  // C's bytes (raw, as downloaded; read as type `as`, by default C's) against the reference; no GPU needed.
  Check compare(const std::vector<double>& ref, const std::vector<char>& raw, double elem_rel = 0, double elem_abs = 0,
                std::optional<DType> as = {}) const {
    const DType c_type = as.value_or(spec.c);
    Check out;
    double err2 = 0, ref2 = 0;
    std::vector<double> got_all(ref.size(), std::nan(""));
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const auto [got, poison] = read_output(c_type, raw, i);
      // atomic: C starts as zeros (rows that sum) and the sentinel (rows nothing may touch).
      const bool untouched = spec.fusion.atomic ? got == kSentinel : poison;
      if (std::isnan(ref[i])) {
        out.written_outside += !untouched;
      } else if (std::isnan(got)) {
        out.nan_where_written++;
      } else {
        err2 += (got - ref[i]) * (got - ref[i]);
        ref2 += ref[i] * ref[i];
        out.checked++;
        got_all[i] = got;
      }
    }
    out.rel_err = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
    if (elem_rel > 0 || elem_abs > 0) {
      const double rms = out.checked ? std::sqrt(ref2 / (double)out.checked) : 0;
      double worst_excess = -1;
      for (std::size_t i = 0; i < ref.size(); ++i) {
        if (std::isnan(ref[i]) || std::isnan(got_all[i])) continue;
        const double excess = std::abs(got_all[i] - ref[i]) - (elem_rel * std::abs(ref[i]) + elem_abs * rms);
        if (excess > 0) out.elements_off++;
        if (excess > worst_excess) worst_excess = excess, out.worst = i, out.worst_got = got_all[i], out.worst_ref = ref[i];
      }
    }
    return out;
  }
};

// Routings: random distinct experts with `empty` experts never chosen; or all to `expert`.
inline std::vector<std::vector<int>> random_routing(int tokens, int top_k, int groups, std::vector<int> empty,
                                                    std::mt19937& rng) {
  std::vector<int> allowed;
  for (int g = 0; g < groups; ++g)
    if (std::find(empty.begin(), empty.end(), g) == empty.end()) allowed.push_back(g);
  std::vector<std::vector<int>> out(tokens);
  for (auto& e : out) {
    std::vector<int> pool = allowed;
    std::shuffle(pool.begin(), pool.end(), rng);
    e.assign(pool.begin(), pool.begin() + top_k);
  }
  return out;
}
inline std::vector<std::vector<int>> one_expert_routing(int tokens, int expert) {
  return std::vector<std::vector<int>>(tokens, std::vector<int>{expert});
}

// The Hopper gather specs among `specs` that `keep` accepts, with their rows loaded by TMA
// (gather_by=tma): the fused GPU tests run them in cases of their own, because whether TMA takes a
// 128B-swizzled destination at a 128-byte offset is what they test first (docs/design.md, "Fusions").
template <class Keep>
std::vector<KernelSpec> tma_gather_variants(const std::vector<KernelSpec>& specs, Keep keep) {
  std::vector<KernelSpec> out;
  for (KernelSpec s : specs)
    if (s.family == KernelFamily::hopper && s.fusion.gather_a && keep(s)) {
      s.fusion.gather_by = GatherLoad::tma;
      out.push_back(s);
    }
  return out;
}

}  // namespace moejit::test
