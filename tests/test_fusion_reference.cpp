// CPU checks of the fused-epilogue reference that the GPU fusion tests compare against
// (tests/fusion_problem.hpp): activation values, GLU layouts and the combine agree with
// independent computations.
#include <catch2/catch.hpp>

#include <atomic>
#include <random>

#include "fusion_problem.hpp"

using namespace moejit;
using namespace moejit::test;

TEST_CASE("reference activations", "[fusion]") {
  CHECK(ref_activate(Activation::silu, 2.0) == Approx(2.0 / (1.0 + std::exp(-2.0))));
  CHECK(ref_activate(Activation::gelu, 1.0) == Approx(0.8411919906));  // tanh-approximate GELU(1)
  CHECK(ref_glu(Activation::swiglu, 1.5, -2.0) == Approx(1.5 / (1.0 + std::exp(-1.5)) * -2.0));
  // gpt-oss: gate clamped to max 7, up to [-7, 7]
  CHECK(ref_glu(Activation::swiglu_oai, 10.0, 10.0) == Approx(7.0 / (1.0 + std::exp(-1.702 * 7.0)) * 8.0));
  CHECK(ref_glu(Activation::swiglu_oai, -3.0, -9.0) == Approx(-3.0 / (1.0 + std::exp(1.702 * 3.0)) * -6.0));
  // NaN is not clamped away (torch.clamp keeps it; the kernels compare so that it stays NaN).
  CHECK(std::isnan(ref_glu(Activation::swiglu_oai, std::nan(""), 1.0)));
  CHECK(std::isnan(ref_glu(Activation::swiglu_oai, 1.0, std::nan(""))));
}

namespace {
FusedProblem host_problem(const char* text, std::vector<std::uint16_t>* b = nullptr) {
  std::mt19937 rng(3);
  FusedProblem p;
  p.spec = KernelSpec::parse(text);
  p.tokens = 9, p.top_k = 2, p.groups = 3, p.n = 16, p.k = 8;
  p.route(random_routing(p.tokens, p.top_k, p.groups, {}, rng), rng);
  p.fill_host(rng);
  if (b) p.b = *b;
  return p;
}
}  // namespace

TEST_CASE("reference: split and interleaved GLU agree on permuted weights", "[fusion]") {
  FusedProblem inter = host_problem("fuse=bias,act=swiglu_oai,glu=interleaved");
  // Split weights: gate row i = interleaved row 2i, up row n/2 + i = interleaved row 2i + 1.
  FusedProblem split = host_problem("fuse=bias,act=swiglu_oai,glu=split");
  const int n = inter.n, k = inter.k;
  for (int g = 0; g < inter.groups; ++g)
    for (int i = 0; i < n / 2; ++i)
      for (int half = 0; half < 2; ++half) {
        for (int q = 0; q < k; ++q)
          split.b[((std::size_t)g * n + half * n / 2 + i) * k + q] = inter.b[((std::size_t)g * n + 2 * i + half) * k + q];
        split.bias[(std::size_t)g * n + half * n / 2 + i] = inter.bias[(std::size_t)g * n + 2 * i + half];
      }
  auto a = inter.reference(), b = split.reference();
  REQUIRE(a.size() == b.size());
  REQUIRE(a.size() == (std::size_t)inter.total_rows * n / 2);
  long compared = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(std::isnan(a[i]) == std::isnan(b[i]));
    if (std::isnan(a[i])) continue;
    CHECK(a[i] == Approx(b[i]));
    ++compared;
  }
  CHECK(compared == (long)inter.tokens * inter.top_k * n / 2);
}

TEST_CASE("reference: atomic combine is the sum of the scattered rows, weights applied", "[fusion]") {
  FusedProblem scattered = host_problem("c=f32,fuse=scatter+weight");
  FusedProblem combined = host_problem("c=f32,fuse=scatter+weight+atomic");
  auto s = scattered.reference(), c = combined.reference();
  const int n = scattered.n;
  for (int t = 0; t < scattered.tokens; ++t)
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int slot = 0; slot < scattered.top_k; ++slot) sum += s[((std::size_t)t * scattered.top_k + slot) * n + j];
      CHECK(c[(std::size_t)t * n + j] == Approx(sum));
    }
  // The extra rows past every destination are nobody's.
  for (int r = 0; r < FusedProblem::kExtraOutRows; ++r) CHECK(std::isnan(c[((std::size_t)scattered.tokens + r) * n]));
  // Weighted: the same problem unweighted differs.
  FusedProblem plain = host_problem("c=f32,fuse=scatter");
  CHECK_FALSE(plain.reference()[0] == Approx(s[0]));
}

TEST_CASE("reference: the GPU tests' comparison catches one wrong element that the norm misses", "[fusion]") {
  FusedProblem p = host_problem("fuse=bias,act=swiglu_oai,glu=split");
  const std::vector<double> ref = p.reference();
  std::vector<char> raw(p.c_bytes());
  std::vector<std::uint16_t> c(raw.size() / 2, 0xFFFF);  // poison where nothing may be written
  double ref2 = 0;
  long count = 0;
  std::size_t smallest = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i])) continue;
    c[i] = float_to_bf16((float)ref[i]);
    ref2 += ref[i] * ref[i], ++count;
    if (std::isnan(ref[smallest]) || std::abs(ref[i]) < std::abs(ref[smallest])) smallest = i;
  }
  const double rms = std::sqrt(ref2 / count);
  std::memcpy(raw.data(), c.data(), raw.size());
  auto good = p.compare(ref, raw, 1.0 / 64, 1e-2);
  CHECK(good.checked == count);
  CHECK(good.elements_off == 0);
  CHECK(good.nan_where_written == 0);
  CHECK(good.written_outside == 0);
  CHECK(good.rel_err < 4e-3);
  // One element off by 5% of the output's rms: the norm-wise error stays under the bf16 bound
  // (1e-2), the per-element check fires.
  c[smallest] = float_to_bf16((float)(ref[smallest] + 0.05 * rms));
  std::memcpy(raw.data(), c.data(), raw.size());
  auto bad = p.compare(ref, raw, 1.0 / 64, 1e-2);
  CHECK(bad.elements_off == 1);
  CHECK(bad.worst == smallest);
  CHECK(bad.rel_err < 1e-2);
}

TEST_CASE("reference: padding rows of padded groups are computed from token 0 and scattered nowhere", "[fusion]") {
  for (const char* text : {"fuse=gather+scatter+weight", "fuse=gather+bias,act=silu", "c=f32,fuse=scatter+weight+atomic"}) {
    std::mt19937 rng(5);
    FusedProblem p;
    p.spec = KernelSpec::parse(text);
    p.tokens = 9, p.top_k = 2, p.groups = 3, p.n = 16, p.k = 8;
    p.route(random_routing(p.tokens, p.top_k, p.groups, {}, rng), rng, 8);
    p.fill_host(rng);
    INFO(text);
    long padding = 0;
    for (int g = 0; g < p.groups; ++g) {
      CHECK(p.rows_of[g] % 8 == 0);
      for (int i = 0; i < p.rows_of[g]; ++i) {
        const int r = p.row_begin(g) + i;
        if (p.token_of[r] >= 0) continue;
        ++padding;
        CHECK(p.gather_rows[r] == 0);
        CHECK(p.scatter_rows[r] == -1);
        CHECK(p.weights[r] == 0.f);
      }
    }
    long group_rows = 0;
    for (int g = 0; g < p.groups; ++g) group_rows += p.rows_of[g];
    CHECK(padding == group_rows - (long)p.tokens * p.top_k);
    CHECK(padding > 0);  // 18 routed rows in 3 groups of multiples of 8
    auto ref = p.reference();
    const int no = p.n_out();
    if (p.spec.fusion.scatter_c) {
      // Every destination row written exactly by its routed row; the extra rows by nobody.
      for (int row = 0; row < p.out_rows; ++row)
        CHECK(std::isnan(ref[(std::size_t)row * no]) == (row >= p.out_rows - FusedProblem::kExtraOutRows));
    } else {
      // Without scatter, padding rows are rows of C like any other: written.
      for (int g = 0; g < p.groups; ++g)
        for (int i = 0; i < p.rows_of[g]; ++i) CHECK_FALSE(std::isnan(ref[(std::size_t)(p.row_begin(g) + i) * no]));
    }
  }
}

TEST_CASE("reference with quantized operands: the dequantized values, in the kernels' layouts", "[fusion][fp8][w4]") {
  // FP8 gathered: A quantized in token order (1x128 scales per token, [K blocks][tokens]); 4-bit:
  // B packed by pack_w4_sm90. The reference then multiplies the dequantized operands: close to the
  // unquantized reference (quantization error only), and exactly the dequantized dot products.
  for (const char* text : {"family=portable,a=e4m3,b=e4m3,tile=128x128x32,fuse=gather+bias,act=swiglu,glu=split",
                           "family=portable,a=e4m3,b=e4m3,tile=128x128x32,fuse=scatter+weight",
                           "family=portable,b=mxfp4,fuse=gather+bias,act=swiglu_oai",
                           "family=portable,b=nvfp4,fuse=scatter+weight+bias"}) {
    INFO(text);
    std::mt19937 rng(7);
    FusedProblem p;
    p.spec = KernelSpec::parse(text);
    p.tokens = 21, p.top_k = 2, p.groups = 3, p.n = 256, p.k = 160;
    p.route(random_routing(p.tokens, p.top_k, p.groups, {}, rng), rng);
    p.fill_host(rng);
    const int a_rows = p.spec.fusion.gather_a ? p.tokens : p.total_rows;
    if (p.spec.a == DType::e4m3) {
      CHECK(p.qa.size() == (std::size_t)a_rows * p.k);
      CHECK(p.a_scales.size() == (std::size_t)((p.k + 127) / 128) * a_rows);
      CHECK(p.b_scales.size() == (std::size_t)p.groups * ((p.n + 127) / 128) * ((p.k + 127) / 128));
      // Element (row, q) of A = code x a_scales[q / 128][row] (the kernel's K-block-major layout).
      for (int row : {0, a_rows - 1})
        for (int q : {0, 130})
          CHECK(p.a_deq[(std::size_t)row * p.k + q] ==
                e4m3_to_float(p.qa[(std::size_t)row * p.k + q]) * p.a_scales[(std::size_t)(q / 128) * a_rows + row]);
    } else {
      const QuantFormat f = p.spec.b == DType::mxfp4 ? QuantFormat::mxfp4 : QuantFormat::nvfp4;
      CHECK((std::int64_t)p.qb.size() == w4_sm90_packed_bytes(QuantShape{p.groups, p.n, p.k}, f));
      CHECK(p.b_tensor_scales.size() == (p.spec.b == DType::nvfp4 ? (std::size_t)p.groups : 0u));
    }
    const std::vector<double> quantized = p.reference();
    p.a_deq.clear(), p.b_deq.clear();  // the unquantized (16-bit) operands
    const std::vector<double> exact = p.reference();
    double err2 = 0, ref2 = 0;
    long rows = 0;
    for (std::size_t i = 0; i < exact.size(); ++i) {
      CHECK(std::isnan(exact[i]) == std::isnan(quantized[i]));
      if (std::isnan(exact[i])) continue;
      err2 += (quantized[i] - exact[i]) * (quantized[i] - exact[i]), ref2 += exact[i] * exact[i], ++rows;
    }
    CHECK(rows > 0);
    const double rel = std::sqrt(err2 / ref2);
    // FP8 ~2^-4 relative per element, FP4 ~2^-2: well inside these, and nonzero (the quantized
    // operands are what the reference used).
    CHECK(rel > 1e-4);
    CHECK(rel < (p.spec.a == DType::e4m3 ? 0.1 : 0.3));
  }
}

TEST_CASE("reference GEMM helpers: every row of every group once, FP64 dot of any length", "[fusion]") {
  // Empty groups first, last and between; one group far larger than the others; a group of 1.
  const std::vector<int> rows_of = {0, 4096, 0, 1, 77, 0, 3, 0};
  std::vector<std::atomic<int>> seen(4096 + 1 + 77 + 3);
  std::vector<int> group_of(seen.size(), -1), row_of(seen.size(), -1);
  for_each_group_row(rows_of, [&](int g, int r, long flat) {
    seen[flat]++;
    group_of[flat] = g, row_of[flat] = r;
  });
  long flat = 0;
  for (int g = 0; g < (int)rows_of.size(); ++g)
    for (int r = 0; r < rows_of[g]; ++r, ++flat) {
      REQUIRE(seen[flat] == 1);
      REQUIRE(group_of[flat] == g);
      REQUIRE(row_of[flat] == r);
    }
  REQUIRE(flat == (long)seen.size());
  for_each_group_row({}, [&](int, int, long) { FAIL("no rows"); });
  for_each_group_row({0, 0}, [&](int, int, long) { FAIL("no rows"); });

  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (int k : {0, 1, 3, 4, 5, 64, 137}) {
    std::vector<float> a(k), b(k);
    for (auto& v : a) v = normal(rng);
    for (auto& v : b) v = normal(rng);
    double naive = 0;
    for (int q = 0; q < k; ++q) naive += (double)a[q] * b[q];
    CHECK(std::abs(dot_f64(a.data(), b.data(), k) - naive) <= 1e-12 * (1 + std::abs(naive)));
  }
}

TEST_CASE("reference helpers: fill_normal depends on the generator's state only, and is not constant", "[fusion]") {
  std::vector<float> x(300000), y(300000);
  std::mt19937 r1(7), r2(7);
  fill_normal(x, r1, [](float v) { return v; });
  fill_normal(y, r2, [](float v) { return v; });
  CHECK(x == y);
  CHECK(r1() == r2());  // both generators advanced alike
  double sum = 0, sum2 = 0;
  for (float v : x) sum += v, sum2 += (double)v * v;
  CHECK(std::abs(sum / x.size()) < 0.01);            // mean ~0
  CHECK(std::abs(sum2 / x.size() - 1.0) < 0.02);     // variance ~1
  CHECK(x[0] != x[1 << 16]);                          // chunks differ
}
