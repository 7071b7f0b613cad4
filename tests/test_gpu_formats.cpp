// GPU tests of the quantized formats through the Runtime: FP8 block-scaled ([gpu][fp8]) and
// 4-bit weight-only ([gpu][w4]). Operands are fresh random floats quantized on the host with the
// public quantizers (include/moejit/formats.hpp); the reference is an FP64 GEMM on the SAME
// quantized operands (dequantized exactly in double), so the bound measures the kernel, not the
// format. Output poisoned with NaN first; rows outside every group must keep the poison.
// Bounds (||out - ref|| / ||ref||): C rounding dominates for 16-bit C (bf16 1e-2, f16 5e-3); f32 C
// 1e-3 (FP8: Hopper's FP8 wgmma accumulates a 128-wide K block with ~14 significant bits before
// the FP32 promotion; the Hopper 4-bit kernel writes 16-bit C only, the portable one f32 too).
// Run by moejit_gpu_tests, which skips visibly (exit 77) without a GPU.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include <cuda_runtime.h>

#include "driver/driver_api.hpp"
#include "gpu_problem.hpp"
#include "heuristics/config.hpp"
#include "moejit/formats.hpp"
#include "moejit/moejit.hpp"

using namespace moejit;
using moejit::test::dot_f64;
using moejit::test::for_each_group_row;
using moejit::test::read_output;
using moejit::test::set_group_args;
using moejit::test::rows_for_tile_count;
using moejit::test::tile_count;

namespace {

Runtime& runtime() {
  static Runtime rt;
  return rt;
}

bool has_sm90a() { return runtime().arch().sm() == 90 && runtime().arch().arch_specific; }

double error_bound(DType c) {
  if (c == DType::bf16) return 1e-2;
  if (c == DType::f16) return 5e-3;
  return 1e-3;  // f32 C: FP8 (in-block accumulation) and the portable 4-bit kernel
}

// Random values of a few binades (never all zero) with rows of different magnitude, so that
// per-row and block scales differ from each other.
std::vector<float> random_values(std::size_t count, std::int64_t k, std::mt19937& rng, float scale) {
  std::uniform_int_distribution<int> row_exp(-3, 3);
  std::vector<float> out(count);
  moejit::test::fill_normal(out, rng, [](float x) { return x; });
  float row_scale = 1.f;
  for (std::size_t i = 0; i < count; ++i) {
    if (i % k == 0) row_scale = std::ldexp(scale, row_exp(rng));
    out[i] *= row_scale;
  }
  return out;
}

enum class ScalesA { block_1x128, per_row, per_tensor };
enum class ScalesB { block_128x128, per_tensor, per_channel };  // per_channel: b_scale_layout = channels

struct QuantProblem {
  GroupLayout layout = GroupLayout::contiguous;
  DType ab = DType::e4m3;  // e4m3: A and B FP8; bf16: A bf16, B in `weights`
  DType c = DType::bf16;
  int groups = 0, n = 0, k = 0;
  std::vector<int> rows_of, offsets;
  int total_rows = 0, capacity = 0;
  std::vector<double> a_ref, b_ref;  // the quantized operands, dequantized exactly
  DType b_format = DType::e4m3;      // B's format: e4m3, mxfp4 or nvfp4
  ScaleB b_scale_layout = ScaleB::blocks;  // e4m3 B: 128x128 blocks or one scale per output channel
  std::vector<float> tensor_scales;  // nvfp4: per expert
  DeviceBuffer d_a, d_b, d_c, d_groups, d_a_scales, d_b_scales, d_b_tensor_scales;

  std::size_t c_bytes() const { return (std::size_t)total_rows * n * element_bytes(c); }
  int row_begin(int g) const { return layout == GroupLayout::contiguous ? offsets[g] : g * capacity; }

  void shape_rows(int lead_rows = 3, int tail_rows = 5) {
    if (layout == GroupLayout::contiguous) {
      offsets.assign(1, lead_rows);
      for (int r : rows_of) offsets.push_back(offsets.back() + r);
      total_rows = offsets.back() + tail_rows;
    } else {
      capacity = 9;
      for (int r : rows_of) capacity = std::max(capacity, r + 9);  // slab rows that must stay untouched
      total_rows = groups * capacity;
    }
    const std::vector<int>& g = layout == GroupLayout::contiguous ? offsets : rows_of;
    d_groups = DeviceBuffer(g.size() * sizeof(int));
    d_groups.upload(g.data(), g.size() * sizeof(int));
    d_c = DeviceBuffer(std::max<std::size_t>(c_bytes(), 16));
  }

  // FP8: A quantized with `sa` scaling over all rows of A (masked: batches = groups, rows =
  // capacity), B with `sb` per expert; the kernel gets fp8_kernel_scales_a/b of them.
  void fill_fp8(std::mt19937& rng, ScalesA sa, ScalesB sb) {
    shape_rows();
    const QuantShape a_shape = layout == GroupLayout::contiguous ? QuantShape{1, total_rows, k}
                                                                 : QuantShape{groups, capacity, k};
    const QuantShape b_shape{groups, n, k};
    std::vector<float> a = random_values((std::size_t)total_rows * k, k, rng, 1.f);
    std::vector<float> b = random_values((std::size_t)groups * n * k, k, rng, 0.05f);
    const Fp8Scaling a_scaling = sa == ScalesA::block_1x128 ? Fp8Scaling::block_1x128
                                 : sa == ScalesA::per_row   ? Fp8Scaling::per_row
                                                            : Fp8Scaling::per_tensor;
    const Fp8Tensor qa = quantize_fp8(a.data(), a_shape, a_scaling);
    const Fp8Tensor qb = quantize_fp8(b.data(), b_shape,
                                      sb == ScalesB::block_128x128 ? Fp8Scaling::block_128x128
                                      : sb == ScalesB::per_channel ? Fp8Scaling::per_row
                                                                   : Fp8Scaling::per_tensor);
    const std::vector<float> ka = fp8_kernel_scales_a(qa), kb = fp8_kernel_scales_b(qb);
    b_scale_layout = fp8_kernel_scale_layout_b(qb);
    const int k_blocks = (k + 127) / 128, n_blocks = (n + 127) / 128;
    a_ref.resize(a.size());
    b_ref.resize(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      const std::size_t row = i / k, kb_i = (i % k) / 128;
      a_ref[i] = (double)e4m3_to_float(qa.data[i]) * ka[kb_i * total_rows + row];
    }
    for (std::size_t i = 0; i < b.size(); ++i) {
      const std::size_t g = i / ((std::size_t)n * k), nn = (i / k) % n, kb_i = (i % k) / 128;
      b_ref[i] = (double)e4m3_to_float(qb.data[i]) *
                 (b_scale_layout == ScaleB::channels ? kb[g * n + nn] : kb[(g * n_blocks + nn / 128) * k_blocks + kb_i]);
    }
    d_a = DeviceBuffer(std::max<std::size_t>(qa.data.size(), 16));
    d_a.upload(qa.data.data(), qa.data.size());
    d_b = DeviceBuffer(qb.data.size());
    d_b.upload(qb.data.data(), qb.data.size());
    d_a_scales = DeviceBuffer(std::max<std::size_t>(ka.size() * 4, 16));
    d_a_scales.upload(ka.data(), ka.size() * 4);
    d_b_scales = DeviceBuffer(kb.size() * 4);
    d_b_scales.upload(kb.data(), kb.size() * 4);
  }

  // Weight-only 4-bit: A bf16, B quantized to `format` per expert and packed by pack_w4_sm90.
  // odd_expert_gain multiplies the odd experts' weights (large block scales next to small ones).
  void fill_w4(std::mt19937& rng, DType format, float odd_expert_gain = 1.f) {
    shape_rows();
    b_format = format;
    std::vector<float> a = random_values((std::size_t)total_rows * k, k, rng, 1.f);
    std::vector<std::uint16_t> a_bits(a.size());
    a_ref.resize(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) a_bits[i] = float_to_bf16(a[i]), a_ref[i] = bf16_to_float(a_bits[i]);
    const QuantShape b_shape{groups, n, k};
    std::vector<float> b = random_values((std::size_t)groups * n * k, k, rng, 0.05f);
    if (odd_expert_gain != 1.f)
      for (std::size_t i = 0; i < b.size(); ++i)
        if ((i / ((std::size_t)n * k)) % 2 == 1) b[i] *= odd_expert_gain;
    std::vector<std::uint8_t> packed;
    b_ref.resize(b.size());
    if (format == DType::mxfp4) {
      const Mxfp4Tensor q = quantize_mxfp4(b.data(), b_shape);
      packed = pack_w4_sm90(q);
      const std::vector<float> d = dequantize(q);  // exact: E2M1 x 2^e
      for (std::size_t i = 0; i < d.size(); ++i) b_ref[i] = d[i];
    } else {
      Nvfp4Tensor q = quantize_nvfp4(b.data(), b_shape);
      packed = pack_w4_sm90(q);
      tensor_scales = q.tensor_scales;
      q.tensor_scales.assign(groups, 1.0f);  // E2M1 x E4M3 exactly; the fp32 scale applied in double
      const std::vector<float> d = dequantize(q);
      const std::size_t per_expert = (std::size_t)n * k;
      for (std::size_t i = 0; i < d.size(); ++i) b_ref[i] = (double)d[i] * tensor_scales[i / per_expert];
      d_b_tensor_scales = DeviceBuffer(tensor_scales.size() * 4);
      d_b_tensor_scales.upload(tensor_scales.data(), tensor_scales.size() * 4);
    }
    d_a = DeviceBuffer(std::max<std::size_t>(a_bits.size() * 2, 16));
    d_a.upload(a_bits.data(), a_bits.size() * 2);
    d_b = DeviceBuffer(packed.size());
    d_b.upload(packed.data(), packed.size());
  }

  GroupedGemmArgs args() const {
    GroupedGemmArgs x;
    x.layout = layout;
    x.ab_type = ab;
    x.c_type = c;
    x.a = d_a.get();
    x.b = d_b.get();
    x.c = d_c.get();
    x.num_groups = groups;
    x.n = n;
    x.k = k;
    if (ab == DType::e4m3) {
      x.a_scales = static_cast<const float*>(d_a_scales.get());
      x.b_scales = d_b_scales.get();
      x.b_scale_layout = b_scale_layout;
    } else {
      x.b_type = b_format;
      if (b_format == DType::nvfp4) x.b_tensor_scales = static_cast<const float*>(d_b_tensor_scales.get());
    }
    set_group_args(x, layout, d_groups, total_rows, capacity, offsets, rows_of);
    return x;
  }

  void poison() const { MOEJIT_CU(driver().cuMemsetD8(d_c.ptr(), 0xFF, c_bytes())); }

  struct Check {
    double rel_err = 0;
    long nan_in_groups = 0, written_outside = 0;
  };

  Check check() const {
    std::vector<double> ref((std::size_t)total_rows * n, std::nan(""));
    for_each_group_row(rows_of, [&](int g, int r, long) {
      const double* arow = &a_ref[(std::size_t)(row_begin(g) + r) * k];
      for (int j = 0; j < n; ++j)
        ref[(std::size_t)(row_begin(g) + r) * n + j] = dot_f64(arow, &b_ref[((std::size_t)g * n + j) * k], k);
    });
    std::vector<char> raw(c_bytes());
    d_c.download(raw.data(), raw.size());
    Check out;
    double err2 = 0, ref2 = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const auto [got, poison_intact] = read_output(c, raw, i);
      if (std::isnan(ref[i])) out.written_outside += !poison_intact;
      else if (std::isnan(got)) out.nan_in_groups++;
      else err2 += (got - ref[i]) * (got - ref[i]), ref2 += ref[i] * ref[i];
    }
    out.rel_err = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
    return out;
  }
};

// Catch2 v2 has no SKIP: say so visibly and pass nothing.
void skip_without_sm90a(const char* what) {
  WARN(fmt::format("SKIPPED: {} kernels need sm_90a; this device is {}", what, runtime().arch().to_text()));
}

void check_result(const QuantProblem& p, const std::string& what) {
  auto r = p.check();
  INFO(fmt::format("{}: rel_err {:.2e} (bound {:.0e}) nan {} written_outside {}", what, r.rel_err,
                   error_bound(p.c), r.nan_in_groups, r.written_outside));
  CHECK(r.nan_in_groups == 0);
  CHECK(r.written_outside == 0);
  CHECK(r.rel_err < error_bound(p.c));  // NaN fails this too
}

QuantProblem fp8_problem(GroupLayout layout, DType c, std::vector<int> rows, int n, int k, std::mt19937& rng,
                         ScalesA sa = ScalesA::block_1x128, ScalesB sb = ScalesB::block_128x128) {
  QuantProblem p;
  p.layout = layout;
  p.ab = DType::e4m3;
  p.c = c;
  p.groups = (int)rows.size();
  p.rows_of = std::move(rows);
  p.n = n;
  p.k = k;
  p.fill_fp8(rng, sa, sb);
  return p;
}

QuantProblem w4_problem(GroupLayout layout, DType format, DType c, std::vector<int> rows, int n, int k, std::mt19937& rng,
                        float odd_expert_gain = 1.f) {
  QuantProblem p;
  p.layout = layout;
  p.ab = DType::bf16;
  p.c = c;
  p.groups = (int)rows.size();
  p.rows_of = std::move(rows);
  p.n = n;
  p.k = k;
  p.fill_w4(rng, format, odd_expert_gain);
  return p;
}

// `launches` > 1: the dynamic scheduler's counter must reset itself between launches.
void run_spec(const KernelSpec& spec, QuantProblem& p, const std::string& what, int launches = 1) {
  Kernel kernel = runtime().kernel(spec);
  for (int i = 0; i < launches; ++i) {
    p.poison();
    kernel.launch(p.args(), nullptr);
    MOEJIT_CU(driver().cuCtxSynchronize());
    check_result(p, fmt::format("{} spec {} launch {}", what, spec.to_text(), i));
  }
}

// The variants an "every variant" test runs: MOEJIT_TEST_SPEC keeps those whose text contains it (as
// in test_gpu_grouped_gemm.cpp). They are compiled on all cores first, so that the test run alone (a
// device call for the configs a change touches) is not a row of cold compiles: "w4: every variant*"
// alone ran past 130 s compiling (docs/perf.md v53).
std::vector<KernelSpec> variants_under_test(std::vector<KernelSpec> specs) {
  if (const char* part = std::getenv("MOEJIT_TEST_SPEC"))
    std::erase_if(specs, [&](const KernelSpec& s) { return s.to_text().find(part) == std::string::npos; });
  test::compile_on_all_cores(runtime(), specs);
  return specs;
}

}  // namespace

TEST_CASE("formats: compile every FP8 and 4-bit variant in parallel first", "[gpu][fp8][w4]") {
  std::vector<KernelSpec> specs = w4_candidates(runtime().arch(), KernelFamily::portable);
  for (auto& s : fp8_candidates(runtime().arch(), KernelFamily::portable)) specs.push_back(s);
  for (auto& s : fp8_candidates(runtime().arch())) specs.push_back(s);
  for (auto& s : w4_candidates(runtime().arch(), KernelFamily::hopper)) specs.push_back(s);
  test::compile_on_all_cores(runtime(), specs);
  WARN(fmt::format("{} ({}): {} FP8 / 4-bit variants compiled", runtime().device_name(), runtime().arch().to_text(),
                   specs.size()));
}

TEST_CASE("fp8: every variant, mixed groups (empty, 1, tile +-1), ragged N and partial K block", "[gpu][fp8]") {
  if (!has_sm90a()) return skip_without_sm90a("FP8");
  std::mt19937 rng(8101);
  for (const KernelSpec& spec : variants_under_test(fp8_candidates(runtime().arch()))) {
    // N = 200: the second 128-wide scale block of B is partial; K = 400: 3 full K blocks + 16.
    auto p = fp8_problem(spec.layout, spec.c, {0, 1, spec.tile.m + 1, spec.tile.m - 1, 0, 300, 129}, 200, 400, rng);
    run_spec(spec, p, "mixed");
    // Several tiles per CTA, K = 1024 (8 promotions).
    auto q = fp8_problem(spec.layout, spec.c, {700, 0, 1, 256, 513, 64, 900, 130}, 384, 1024, rng);
    run_spec(spec, q, "multi-tile");
  }
}

TEST_CASE("fp8: 128x192 tiles, a slice over two B scale blocks", "[gpu][fp8]") {
  if (!has_sm90a()) return skip_without_sm90a("FP8");
  std::mt19937 rng(8105);
  // 4 stages: C staged for TMA stores (3 chunks of 64 bf16 columns, 6 of 32 f32); 5: register stores.
  for (const char* variant : {"stages=4,c=bf16", "stages=4,c=f32,layout=masked", "stages=5,c=bf16", "stages=5,c=f32,layout=masked"}) {
    KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,a=e4m3,b=e4m3,tile=128x192x128,{}", variant));
    spec.arch = runtime().arch();
    // N = 200: the second N tile starts at 192, its first scale block is 64 columns wide, the
    // next one lies past N. N = 384: both tiles straddle two scale blocks (split at 128, 64).
    auto p = fp8_problem(spec.layout, spec.c, {0, 1, 129, 127, 0, 300, 129}, 200, 400, rng);
    run_spec(spec, p, "128x192, N = 200");
    auto q = fp8_problem(spec.layout, spec.c, {700, 0, 1, 256, 513, 64, 900, 130}, 384, 1024, rng);
    run_spec(spec, q, "128x192, N = 384");
  }
}

TEST_CASE("fp8: 128x256 tiles, each consumer's slice in two 128-column halves", "[gpu][fp8]") {
  if (!has_sm90a()) return skip_without_sm90a("FP8");
  std::mt19937 rng(8108);
  for (const char* variant : {"c=bf16", "c=bf16,sched=dynamic", "c=f32,layout=masked", "c=f16,b_scales=channels"}) {
    KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,a=e4m3,b=e4m3,tile=128x256x128,stages=4,{}", variant));
    spec.arch = runtime().arch();
    const ScalesB scales_b = spec.b_scales == ScaleB::channels ? ScalesB::per_channel : ScalesB::block_128x128;
    const ScalesA scales_a = spec.b_scales == ScaleB::channels ? ScalesA::per_row : ScalesA::block_1x128;
    // N = 200: the second half of the only N tile is partial (72 columns). N = 384: the second
    // tile's second half lies wholly past N. N = 640: three tiles, the last half-filled.
    auto p = fp8_problem(spec.layout, spec.c, {0, 1, 129, 127, 0, 300, 129}, 200, 400, rng, scales_a, scales_b);
    run_spec(spec, p, "128x256, N = 200");
    auto q = fp8_problem(spec.layout, spec.c, {700, 0, 1, 256, 513, 64, 900, 130}, 384, 1024, rng, scales_a, scales_b);
    run_spec(spec, q, "128x256, N = 384");
    auto r = fp8_problem(spec.layout, spec.c, {1000, 257, 0, 63}, 640, 768, rng, scales_a, scales_b);
    run_spec(spec, r, "128x256, N = 640");
  }
}

TEST_CASE("fp8: split=tail, the last round's tiles in pieces of K (block and per-channel B scales)", "[gpu][fp8][split]") {
  // As the bf16 [split] case: the last round holds a group ending 4 rows into its last tile, a
  // ragged N tile (N = 320: 192 + 128), K not a multiple of 128 (the last piece's last scale block
  // is partial) and an empty group; beyond one round in 4 pieces, a single short round in 3 (twice:
  // the flags must be back at zero).
  if (!has_sm90a()) return skip_without_sm90a("FP8");
  std::vector<KernelSpec> specs;
  for (const KernelSpec& s : fp8_candidates(runtime().arch()))
    if (s.split == SplitK::tail && (!std::getenv("MOEJIT_TEST_QUICK") || s.c == DType::bf16)) specs.push_back(s);
  KernelSpec channels = specs.front();
  channels.b_scales = ScaleB::channels;
  specs.push_back(channels);
  KernelSpec full = specs.front();  // 128x256: a tuner candidate with split=tail too
  full.tile = TileShape{128, 256, 128};
  full.stages = 4;
  full.validate();
  specs.push_back(full);
  const int sms = runtime().sm_count();
  constexpr int kN = 320;
  std::mt19937 rng(8107);
  for (const KernelSpec& spec : specs) {
    const int n_tiles = (kN + spec.tile.n - 1) / spec.tile.n;
    const ScalesB scales_b = spec.b_scales == ScaleB::channels ? ScalesB::per_channel : ScalesB::block_128x128;
    struct Shape {
      std::vector<int> tail_groups;
      int target_tiles, k, pieces, launches;
    };
    for (Shape shape : {Shape{{1000, 0, 130, 1, 2100, 900, 0}, sms + sms / 4, 8128, 4, 1},
                        Shape{{130, 0, 257, 1, 600, 0}, sms / 3, 6128, 3, 2}}) {
      const std::vector<int> rows = rows_for_tile_count(shape.tail_groups, shape.target_tiles, spec.tile.m, n_tiles);
      const long long tiles = tile_count(rows, spec.tile.m, n_tiles);
      const SplitTailPlan plan = plan_split_tail(tiles, sms, (shape.k + spec.tile.k - 1) / spec.tile.k);
      INFO(fmt::format("{} tiles on {} SMs: {} tiles from {} in {} pieces", tiles, sms, plan.tiles, plan.from, plan.count));
      CHECK(plan.count == shape.pieces);
      auto p = fp8_problem(spec.layout, spec.c, rows, kN, shape.k, rng, ScalesA::block_1x128, scales_b);
      for (int i = 0; i < shape.launches; ++i) run_spec(spec, p, fmt::format("split-tail launch {}", i));
    }
  }
}

// The row-wise recipe (torch._scaled_grouped_mm's): per-row A scales and one B scale per output
// channel (b_scales=channels), applied to the promoted sum after the K loop.
TEST_CASE("fp8: tile bands (band=N), each tile and scheduler, CTA pairs", "[gpu][fp8][band]") {
  if (!has_sm90a()) return skip_without_sm90a("FP8");
  std::mt19937 rng(8117);
  for (const char* variant : {"tile=128x256x128,stages=4,band=2", "tile=128x192x128,stages=4,sched=dynamic,band=3",
                              "tile=128x256x128,stages=4,cluster=2x1,band=2", "tile=64x256x128,stages=4,sched=dynamic,band=3,layout=masked"}) {
    KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,a=e4m3,b=e4m3,{}", variant));
    spec.arch = runtime().arch();
    auto p = fp8_problem(spec.layout, spec.c, {1000, 0, 490, 534, 1, 129, 2100, 383}, 1000, 640, rng);
    run_spec(spec, p, "bands");
  }
}

// The mixed tile order (mix=R, v44): hot groups' tiles interleaved with small ones', both schedulers,
// CTA pairs, masked, per-channel scales, and a gathered GLU (MixedTileCursor's seek_warp).
TEST_CASE("fp8: mixed tile order (mix=R): hot groups beside small and empty ones", "[gpu][fp8][mix]") {
  if (!has_sm90a()) return skip_without_sm90a("FP8");
  std::mt19937 rng(8119);
  const std::vector<int> rows = {1000, 3, 0, 517, 1, 40, 2100, 0, 130, 7, 383, 64, 1, 900};
  for (const char* variant : {"tile=128x256x128,stages=4,sched=dynamic,mix=256", "tile=128x192x128,stages=4,sched=static,mix=256",
                              "tile=128x256x128,stages=4,cluster=2x1,sched=static,mix=256",
                              "tile=64x256x128,stages=4,sched=dynamic,layout=masked,mix=128",
                              "tile=128x256x128,stages=4,sched=dynamic,c=f32,mix=1024"}) {
    KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,a=e4m3,b=e4m3,{}", variant));
    spec.arch = runtime().arch();
    for (int launch = 0; launch < 2; ++launch) {  // twice: the dynamic counter resets itself
      auto p = fp8_problem(spec.layout, spec.c, rows, 640, 1024, rng);
      run_spec(spec, p, fmt::format("mix, launch {}", launch));
    }
  }
  KernelSpec channels = KernelSpec::parse("family=hopper,a=e4m3,b=e4m3,tile=128x256x128,stages=4,sched=dynamic,b_scales=channels,mix=256");
  channels.arch = runtime().arch();
  auto p = fp8_problem(channels.layout, channels.c, rows, 768, 512, rng, ScalesA::per_row, ScalesB::per_channel);
  run_spec(channels, p, "mix, per-channel scales");
}

TEST_CASE("fp8: CTA pairs (cluster=2x1): odd M-tile counts split along N, odd N-tile counts, both scale layouts", "[gpu][fp8][pairs]") {
  if (!has_sm90a()) return skip_without_sm90a("FP8");
  std::mt19937 rng(8107);
  // Groups of 1-5 M tiles of 128 (odd ones give their last tile to both ranks, split along N) and
  // N = 640 / 768: 3 N tiles of 256 (rank 1 idle on an odd group's last unit) / 4 of 192; K = 1024.
  const std::vector<int> rows = {490, 534, 0, 129, 1, 128, 257, 640, 383};
  // Static, and (v49) dynamic: rank 0 takes the unit numbers for both CTAs, in both pair orders; two
  // launches each (the counter's reset).
  for (const char* variant : {"tile=128x256x128,stages=4,sched=static", "tile=128x192x128,stages=4,c=f32,sched=static",
                              "tile=128x128x128,stages=5,layout=masked,sched=static", "tile=128x256x128,stages=4,band=2,sched=static",
                              "tile=128x256x128,stages=4,sched=dynamic", "tile=128x256x128,stages=4,sched=dynamic,pair_order=interleaved",
                              "tile=128x192x128,stages=4,layout=masked,c=f32,sched=dynamic,pair_order=interleaved"}) {
    for (bool channels : {false, true}) {
      KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,a=e4m3,b=e4m3,cluster=2x1,{}{}", variant,
                                                      channels ? ",b_scales=channels" : ""));
      spec.arch = runtime().arch();
      for (int n : {640, 768}) {
        auto p = fp8_problem(spec.layout, spec.c, rows, n, 1024, rng, channels ? ScalesA::per_row : ScalesA::block_1x128,
                             channels ? ScalesB::per_channel : ScalesB::block_128x128);
        run_spec(spec, p, fmt::format("pairs, N = {}", n), spec.scheduler == Scheduler::dynamic ? 2 : 1);
      }
    }
  }
}

TEST_CASE("fp8: per-channel weight scales (b_scales=channels), every Hopper FP8 tile", "[gpu][fp8]") {
  if (!has_sm90a()) return skip_without_sm90a("FP8");
  std::mt19937 rng(8106);
  for (const char* variant : {"tile=128x128x128,stages=6", "tile=64x256x128,stages=5,c=f32,layout=masked",
                              "tile=128x192x128,stages=5,c=f16"}) {
    KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,a=e4m3,b=e4m3,b_scales=channels,{}", variant));
    spec.arch = runtime().arch();
    auto p = fp8_problem(spec.layout, spec.c, {0, 1, spec.tile.m + 1, 127, 0, 300, 129}, 200, 400, rng, ScalesA::per_row,
                         ScalesB::per_channel);
    run_spec(spec, p, "per-channel B, N = 200");
    auto q = fp8_problem(spec.layout, spec.c, {700, 0, 1, 256, 513}, 384, 1024, rng, ScalesA::block_1x128, ScalesB::per_channel);
    run_spec(spec, q, "per-channel B, N = 384");
  }
  // Through the Runtime: the heuristic builds b_scales=channels in from the args; a blocks kernel refuses them.
  auto p = fp8_problem(GroupLayout::contiguous, DType::bf16, std::vector<int>(8, 300), 512, 1024, rng, ScalesA::per_row,
                       ScalesB::per_channel);
  p.poison();
  GroupedGemmArgs args = p.args();
  CHECK(runtime().choose_spec(args).b_scales == ScaleB::channels);
  runtime().grouped_gemm(args, nullptr);
  MOEJIT_CU(driver().cuCtxSynchronize());
  check_result(p, "grouped_gemm, per-channel B");
  Kernel blocks = runtime().kernel(KernelSpec::parse(fmt::format("family=hopper,arch={},a=e4m3,b=e4m3", runtime().arch().to_text())));
  CHECK_THROWS_WITH(blocks.launch(args, nullptr), Catch::Contains("b_scale_layout=channels"));
}

TEST_CASE("fp8: every portable variant (E4M3 widened to BF16, promotion per 128 K)", "[gpu][fp8]") {
  std::mt19937 rng(8104);
  for (const KernelSpec& spec : fp8_candidates(runtime().arch(), KernelFamily::portable)) {
    // K = 400: the last 128-wide scale block is partial (and not a whole number of k-blocks).
    auto p = fp8_problem(spec.layout, spec.c, {0, 1, spec.tile.m + 1, spec.tile.m - 1, 0, 300, 129}, 200, 400, rng);
    run_spec(spec, p, "portable mixed");
  }
}

TEST_CASE("fp8: per-row and per-tensor activation scales, per-tensor weight scales", "[gpu][fp8]") {
  if (!has_sm90a()) return skip_without_sm90a("FP8");
  std::mt19937 rng(8102);
  for (const KernelSpec& spec : fp8_candidates(runtime().arch())) {
    if (spec.c != DType::bf16) continue;
    auto row = fp8_problem(spec.layout, spec.c, {33, 0, 200, 7}, 256, 512, rng, ScalesA::per_row, ScalesB::per_tensor);
    run_spec(spec, row, "A per-row, B per-tensor");
    auto tensor = fp8_problem(spec.layout, spec.c, {33, 0, 200, 7}, 256, 512, rng, ScalesA::per_tensor,
                              ScalesB::block_128x128);
    run_spec(spec, tensor, "A per-tensor, B 128x128");
  }
}

TEST_CASE("fp8: high-level call picks an FP8 config and is correct (decode and prefill sizes)", "[gpu][fp8]") {
  if (!has_sm90a()) return skip_without_sm90a("FP8");
  std::mt19937 rng(8103);
  for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked})
    for (int rows : {3, 600}) {
      auto p = fp8_problem(layout, DType::bf16, std::vector<int>(8, rows), 512, 1024, rng);
      p.poison();
      GroupedGemmArgs args = p.args();
      KernelSpec chosen = runtime().choose_spec(args);
      CHECK(chosen.a == DType::e4m3);
      args.host_groups = {};  // the runtime reads and checks the device copy
      runtime().grouped_gemm(args, nullptr);
      MOEJIT_CU(driver().cuCtxSynchronize());
      check_result(p, fmt::format("grouped_gemm {} rows {} chose {}", to_text(layout), rows, chosen.to_text()));
    }
  // Missing scales are refused before any launch.
  auto p = fp8_problem(GroupLayout::contiguous, DType::bf16, {4, 4}, 128, 128, rng);
  GroupedGemmArgs args = p.args();
  args.b_scales = nullptr;
  CHECK_THROWS_WITH(runtime().grouped_gemm(args, nullptr), Catch::Contains("b_scales (ab_type=e4m3"));
}

TEST_CASE("w4: every variant, mixed groups (empty, 1, tile +-1), ragged N and partial K block", "[gpu][w4]") {
  if (!has_sm90a()) return skip_without_sm90a("4-bit weight-only");
  std::mt19937 rng(4101);
  for (const KernelSpec& spec : variants_under_test(w4_candidates(runtime().arch()))) {
    // N = 200: the second 128-row weight block is partial; K = 416: 6 full 64-K stages + 32.
    auto p = w4_problem(spec.layout, spec.b, spec.c, {0, 1, spec.tile.m + 1, spec.tile.m - 1, 0, 300, 129}, 200, 416, rng);
    run_spec(spec, p, "mixed");
    // Several tiles per CTA, gpt-oss's K = 2880 (45 stages), N = 640.
    auto q = w4_problem(spec.layout, spec.b, spec.c, {700, 0, 1, 256, 513, 64, 9, 130}, 640, 2880, rng);
    run_spec(spec, q, "multi-tile");
  }
}

// MXFP4 rows with E8M0 block scales above 2^1 are packed relative to a row exponent (formats.hpp)
// that the kernels multiply back: weights of 0.05 give scales near 2^-6 (exponent 0), the odd
// experts' x 400 give scales near 2^3 (exponents > 0), both in one launch.
// BF16 output only: with the rows' 2^±3 spread these products reach ~10^5, past f16's 65504
// (H100, 2026-11-23: the f16 specs stored inf there while every bf16 spec passed).
TEST_CASE("w4: block scales above 2^1 next to small ones (MXFP4 row exponents)", "[gpu][w4]") {
  if (!has_sm90a()) return skip_without_sm90a("4-bit weight-only");
  std::mt19937 rng(4105);
  for (const KernelSpec& spec : w4_candidates(runtime().arch())) {
    if (spec.layout != GroupLayout::contiguous || spec.c != DType::bf16) continue;
    auto p = w4_problem(spec.layout, spec.b, spec.c, {5, 130, 0, 64, 200, 1}, 256, 640, rng, 400.f);
    run_spec(spec, p, "large scales");
  }
}

TEST_CASE("w4: every portable variant (4-bit B widened before mma.sync), mixed groups, ragged N, partial K", "[gpu][w4]") {
  std::mt19937 rng(4104);
  for (const KernelSpec& spec : w4_candidates(runtime().arch(), KernelFamily::portable)) {
    auto p = w4_problem(spec.layout, spec.b, spec.c, {0, 1, spec.tile.m + 1, spec.tile.m - 1, 0, 300, 129}, 200, 416, rng);
    run_spec(spec, p, "portable mixed");
  }
}

TEST_CASE("w4: 16- and 32-token tiles (two CTAs per SM)", "[gpu][w4]") {
  if (!has_sm90a()) return skip_without_sm90a("4-bit weight-only");
  std::mt19937 rng(4102);
  for (int tokens : {16, 32})
    for (DType b : {DType::mxfp4, DType::nvfp4}) {
      KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,b={},tile={}x128x64", to_text(b), tokens));
      spec.arch = runtime().arch();
      auto p = w4_problem(spec.layout, b, spec.c, {0, 1, tokens + 1, 3, 40, 0, 17}, 384, 512, rng);
      run_spec(spec, p, "small tiles");
    }
}

// split=tail on the 16- and 32-token tiles (two CTAs per SM, so the plan counts 2 x SMs): the last
// round's tiles in pieces of K that meet in split_reduce, MXFP4 row exponents and the NVFP4 tensor
// scale applied per piece. Beyond one round in 4 pieces (K = 4096), one short round in 3 (K = 3136, a
// partial last K block of 64), twice each so the flags must be back at zero; groups empty, of one
// row and one past a tile.
TEST_CASE("w4: split=tail on the 16- and 32-token tiles, both layouts, flags reset", "[gpu][w4][split]") {
  if (!has_sm90a()) return skip_without_sm90a("4-bit weight-only");
  const int ctas = 2 * runtime().sm_count();
  constexpr int kN = 384;
  std::mt19937 rng(4107);
  for (int tokens : {16, 32})
    for (DType b : {DType::mxfp4, DType::nvfp4})
      for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {
        KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,b={},tile={}x128x64,stages=8,split=tail", to_text(b), tokens));
        spec.layout = layout;
        spec.arch = runtime().arch();
        spec.validate();
        const int n_tiles = kN / 128;
        struct Shape {
          std::vector<int> tail_groups;
          int target_tiles, k, pieces;
        };
        // The third: 5.4 rounds and K = 2048, 2 pieces of 16 K blocks (the 4-bit limits, v46).
        for (Shape shape : {Shape{{0, 1, tokens + 1, 3, 0, 2 * tokens}, ctas + ctas / 4, 4096, 4},
                            Shape{{tokens + 1, 0, 1, 5 * tokens, 0}, ctas / 3, 3136, 3},
                            Shape{{1, 2 * tokens + 3, 0, tokens}, 5 * ctas + ctas * 2 / 5, 2048, 2}}) {
          const std::vector<int> rows = rows_for_tile_count(shape.tail_groups, shape.target_tiles, tokens, n_tiles);
          const long long tiles = tile_count(rows, tokens, n_tiles);
          const SplitTailPlan plan = plan_split_tail(spec, tiles, ctas, shape.k);
          INFO(fmt::format("{}: {} tiles on {} CTAs: {} tiles from {} in {} pieces", spec.to_text(), tiles, ctas, plan.tiles,
                           plan.from, plan.count));
          CHECK(plan.count == shape.pieces);
          auto p = w4_problem(spec.layout, b, spec.c, rows, kN, shape.k, rng);
          for (int launch = 0; launch < 2; ++launch) run_spec(spec, p, fmt::format("w4 split-tail launch {}", launch));
        }
      }
}

// The prefill tiles: 256 tokens per tile (the wgmma's N = 256, 128 accumulators per consumer
// thread), and 256 weight rows per tile (two pre-arranged blocks per stage, two accumulator sets
// per consumer; N = 200 and 640: a ragged last tile whose second block is loaded twice).
TEST_CASE("w4: 256-token and 256-row tiles, mixed groups, ragged N, partial K, several tiles per CTA", "[gpu][w4]") {
  if (!has_sm90a()) return skip_without_sm90a("4-bit weight-only");
  std::mt19937 rng(4106);
  for (const char* tile : {"tile=256x128x64,stages=4", "tile=64x256x64,stages=8"})
  for (DType b : {DType::mxfp4, DType::nvfp4})
    for (const char* variant : {"layout=contiguous,c=bf16", "layout=masked,c=f16"}) {
      KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,b={},{},{}", to_text(b), tile, variant));
      spec.arch = runtime().arch();
      auto p = w4_problem(spec.layout, b, spec.c, {0, 1, 257, 255, 0, 600, 129, 3}, 200, 416, rng);
      run_spec(spec, p, "256-token mixed");
      auto q = w4_problem(spec.layout, b, spec.c, {700, 0, 1024, 513, 64, 9, 300}, 640, 2880, rng);
      run_spec(spec, q, "256-token multi-tile");
    }
}

TEST_CASE("w4: tile bands (band=N) on the 128- and 256-token tiles", "[gpu][w4][band]") {
  if (!has_sm90a()) return skip_without_sm90a("4-bit weight-only");
  std::mt19937 rng(4117);
  for (DType b : {DType::mxfp4, DType::nvfp4})
    // The heuristic's banded prefill tiles (static, v43), and a dynamic masked one.
    for (const char* variant : {"tile=256x128x64,stages=4,band=2", "tile=128x128x64,stages=8,band=2",
                                "tile=128x128x64,stages=8,sched=dynamic,band=3,layout=masked"}) {
      KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,b={},{}", to_text(b), variant));
      spec.arch = runtime().arch();
      auto p = w4_problem(spec.layout, b, spec.c, {1000, 0, 490, 534, 1, 129, 2100, 383}, 640, 704, rng);
      run_spec(spec, p, "bands");
    }
}

// The 128- and 256-token tiles stage C in shared memory and bulk-copy each token row's slice:
// N = 328 leaves the last slice 8 columns (16 bytes), N = 8 has one slice of 8 and one past N.
TEST_CASE("w4: prefill tiles' C row copies at N's end, partial groups", "[gpu][w4]") {
  if (!has_sm90a()) return skip_without_sm90a("4-bit weight-only");
  std::mt19937 rng(4107);
  for (const char* tile : {"tile=128x128x64,stages=8", "tile=256x128x64,stages=4"})
    for (DType b : {DType::mxfp4, DType::nvfp4})
      for (int n : {328, 8}) {
        KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,b={},{}", to_text(b), tile));
        spec.arch = runtime().arch();
        auto p = w4_problem(spec.layout, b, spec.c, {0, 129, 1, 383, 256, 0, 511}, n, 320, rng);
        run_spec(spec, p, fmt::format("C stores, N = {}", n));
      }
}

// A group's last 128-token tile holding at most 32 of its rows runs the narrow wgmma (m64n32k16) when
// K <= 4096, one stage at a time; the 48-token tile's (static scheduler) double-buffered: groups
// ending 1, 16, 31, 32 rows into a tile take it, 33 does not (32 and 33 rows: the group's only
// tile), over 7 k-blocks (8 on the 48-token tile: the other parity of its unrolled loop), both
// formats, both layouts; the 256-token tile (the wide wgmma for every tile) on the same groups.
TEST_CASE("w4: short last tiles (<= 32 rows): the narrow wgmma on 128- and 48-token tiles", "[gpu][w4]") {
  if (!has_sm90a()) return skip_without_sm90a("4-bit weight-only");
  std::mt19937 rng(4108);
  for (const char* tile : {"tile=128x128x64,stages=8", "tile=256x128x64,stages=4", "tile=48x128x64,stages=8"})
    for (DType b : {DType::mxfp4, DType::nvfp4})
      for (const char* variant : {"layout=contiguous,c=bf16", "layout=masked,c=f16"}) {
        KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,b={},{},{}", to_text(b), tile, variant));
        spec.arch = runtime().arch();
        const int t = spec.tile.m;
        auto p = w4_problem(spec.layout, b, spec.c, {t + 32, t + 33, 2 * t + 31, t + 16, 32, 33, 0, 1, t + 1}, 200,
                            t == 48 ? 512 : 448, rng);
        run_spec(spec, p, "short last tiles");
      }
}

TEST_CASE("w4: a group's last <= 24 rows absorbed into its last 128- or 256-token tile (tail rows)", "[gpu][w4]") {
  if (!has_sm90a()) return skip_without_sm90a("4-bit weight-only");
  std::mt19937 rng(4110);
  // 129..152 rows: one tile with a tail; 153: a tile and a 25-row short tail; 280 / 281: two tiles,
  // the second with 24 tail rows / a third tile; 408: three tiles, the last with 24; the rest:
  // empty, single-row, short and exactly whole groups beside them. The dynamic scheduler has no
  // tail rows (w4_sm90_tail_rows): the same groups on it as a check of the plain path.
  const std::vector<int> groups = {152, 153, 129, 280, 281, 0, 408, 1, 150, 128, 256, 100, 140};
  // The 256-token tile (its tail loop one stage at a time): 257..280 rows one tile with a tail, 281
  // two tiles, 536 two with 24 tail rows, 537 three.
  const std::vector<int> groups_256 = {280, 281, 257, 536, 537, 0, 1, 300, 256, 512, 270};
  for (const char* tile : {"tile=128x128x64,stages=8", "tile=256x128x64,stages=4"})
    for (DType b : {DType::mxfp4, DType::nvfp4})
      for (const char* variant : {"layout=contiguous,c=bf16", "layout=masked,c=f16", "layout=contiguous,c=bf16,sched=dynamic"})
        for (int k : {448, 416}) {  // 416: a half K block (MXFP4 needs K % 32 == 0)
          KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,b={},{},{}", to_text(b), tile, variant));
          spec.arch = runtime().arch();
          auto p = w4_problem(spec.layout, b, spec.c, spec.tile.m == 256 ? groups_256 : groups, 200, k, rng);
          run_spec(spec, p, fmt::format("tail rows, K = {}", k));
        }
}

TEST_CASE("w4: high-level call picks a 4-bit config and is correct (decode and prefill sizes)", "[gpu][w4]") {
  if (!has_sm90a()) return skip_without_sm90a("4-bit weight-only");
  std::mt19937 rng(4103);
  for (DType b : {DType::mxfp4, DType::nvfp4})
    for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked})
      for (int rows : {2, 300}) {
        auto p = w4_problem(layout, b, DType::bf16, std::vector<int>(8, rows), 512, 1024, rng);
        p.poison();
        GroupedGemmArgs args = p.args();
        KernelSpec chosen = runtime().choose_spec(args);
        CHECK(chosen.b == b);
        args.host_groups = {};
        runtime().grouped_gemm(args, nullptr);
        MOEJIT_CU(driver().cuCtxSynchronize());
        check_result(p, fmt::format("grouped_gemm {} {} rows {} chose {}", to_text(b), to_text(layout), rows, chosen.to_text()));
      }
  // One round that fills the GPU (8 groups x 128-row blocks = the 2 x SMs CTA slots): the 16- and
  // 48-token tiles at 6 stages (heuristics/config.cpp, w4_one_full_round).
  const int n_full_round = 128 * (2 * runtime().sm_count() / 8);
  for (DType b : {DType::mxfp4, DType::nvfp4})
    for (int rows : {4, 32}) {
      auto p = w4_problem(GroupLayout::contiguous, b, DType::bf16, std::vector<int>(8, rows), n_full_round, 768, rng);
      p.poison();
      GroupedGemmArgs args = p.args();
      KernelSpec chosen = runtime().choose_spec(args);
      CHECK(chosen.stages == 6);
      runtime().grouped_gemm(args, nullptr);
      MOEJIT_CU(driver().cuCtxSynchronize());
      check_result(p, fmt::format("grouped_gemm {} one full round, rows {} chose {}", to_text(b), rows, chosen.to_text()));
    }
  auto p = w4_problem(GroupLayout::contiguous, DType::nvfp4, DType::bf16, {4, 4}, 128, 128, rng);
  GroupedGemmArgs args = p.args();
  args.b_tensor_scales = nullptr;
  CHECK_THROWS_WITH(runtime().grouped_gemm(args, nullptr), Catch::Contains("b_tensor_scales"));
}

// A chain of 4-bit GEMMs, each reading the previous one's C, back to back on one stream with no
// sync between: a long 16-token kernel (K = 4096, launched with the programmatic attribute), then a
// 48-token one (launched plainly: KernelSpec::grid_dependency), then a 16-token one again. Each must
// wait for the one ahead (the plain launch by stream order, the programmatic ones at their
// griddepcontrol.wait); otherwise it reads poisoned (NaN) rows.
TEST_CASE("w4: a chain of 16- and 48-token GEMMs (programmatic and plain launches) reading each other's C", "[gpu][w4][pdl]") {
  if (!has_sm90a()) return skip_without_sm90a("4-bit weight-only");
  INFO(fmt::format("programmatic launch {}", runtime().programmatic_launch() ? "on" : "off (MOEJIT_PDL=0)"));
  std::mt19937 rng(4120);
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  const std::vector<int> rows = {30, 0, 33, 17, 48, 1, 32, 40};
  for (DType format : {DType::mxfp4, DType::nvfp4}) {
    auto spec_of = [&](int tokens) {
      KernelSpec spec = KernelSpec::parse(fmt::format("family=hopper,b={},tile={}x128x64,stages=8", to_text(format), tokens));
      spec.arch = runtime().arch();
      return spec;
    };
    const KernelSpec specs[3] = {spec_of(16), spec_of(48), spec_of(16)};
    CHECK(specs[0].grid_dependency());
    CHECK_FALSE(specs[1].grid_dependency());
    const int n[3] = {256, 192, 128}, k[3] = {4096, 256, 192};
    std::vector<QuantProblem> problems;
    for (int i = 0; i < 3; ++i) problems.push_back(w4_problem(GroupLayout::contiguous, format, DType::bf16, rows, n[i], k[i], rng));
    for (auto& p : problems) {
      REQUIRE(p.total_rows == problems[0].total_rows);
      p.poison();
    }
    MOEJIT_CU(driver().cuCtxSynchronize());
    for (int i = 0; i < 3; ++i) {
      GroupedGemmArgs args = problems[i].args();
      if (i > 0) args.a = problems[i - 1].d_c.get();
      runtime().kernel(specs[i]).launch(args, reinterpret_cast<Stream>(stream));
    }
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    for (int i = 0; i < 3; ++i) {
      // A GEMM's reference A is the previous one's actual output (rows outside the groups stay NaN
      // and are not read by the reference).
      if (i > 0) {
        std::vector<std::uint16_t> c_bits((std::size_t)problems[i - 1].total_rows * problems[i - 1].n);
        problems[i - 1].d_c.download(c_bits.data(), c_bits.size() * 2);
        for (std::size_t j = 0; j < c_bits.size(); ++j) problems[i].a_ref[j] = bf16_to_float(c_bits[j]);
      }
      check_result(problems[i], fmt::format("{} GEMM {} of the chain, {}", to_text(format), i, specs[i].to_text()));
    }
  }
  cudaStreamDestroy(stream);
}
