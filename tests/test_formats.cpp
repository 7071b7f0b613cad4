// Host quantize/pack and dequantize (include/moejit/formats.hpp): element conversions pinned bit
// for bit against brute-force nearest-value search, scale selection, layouts, special values,
// round trips, argument checks, and each format's error against unquantized random data.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "moejit/errors.hpp"
#include "moejit/common/w4_layout.cuh"
#include "moejit/formats.hpp"

using namespace moejit;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float pow2(int e) { return std::ldexp(1.0f, e); }

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The definition the encoders must meet: the nearest representable magnitude, on a tie the code
// whose last mantissa bit is 0, saturating at the largest finite. `codes` lists the finite
// non-negative codes in increasing value.
std::uint8_t nearest_even(float value, const std::vector<std::uint8_t>& codes, float (*decode)(std::uint8_t),
                          std::uint8_t sign_bit) {
  const double a = std::fabs(static_cast<double>(value));
  std::uint8_t best = codes.front();
  double best_distance = INFINITY;
  for (std::uint8_t code : codes) {
    const double distance = std::fabs(a - decode(code));
    if (distance < best_distance || (distance == best_distance && (code & 1) == 0)) {
      best = code;
      best_distance = distance;
    }
  }
  return std::signbit(value) ? (best | sign_bit) : best;
}

std::vector<std::uint8_t> e4m3_finite_codes() {
  std::vector<std::uint8_t> codes;
  for (int c = 0; c <= 0x7E; ++c) codes.push_back(static_cast<std::uint8_t>(c));
  return codes;
}

std::vector<std::uint8_t> e2m1_codes() { return {0, 1, 2, 3, 4, 5, 6, 7}; }

// Probe points: every representable value, every midpoint and the floats on either side of each.
std::vector<float> probes(const std::vector<std::uint8_t>& codes, float (*decode)(std::uint8_t), float past_max) {
  std::vector<float> out;
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const float v = decode(codes[i]);
    const float next = i + 1 < codes.size() ? decode(codes[i + 1]) : past_max;
    const float mid = (v + next) / 2;  // exact: both are short binary fractions
    for (float p : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), std::nextafter(v, INFINITY)})
      for (float s : {1.0f, -1.0f}) out.push_back(s * p);
  }
  return out;
}

double relative_frobenius_error(const std::vector<float>& x, const std::vector<float>& y) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    diff += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    norm += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(diff / norm);
}

std::vector<float> normal_values(std::int64_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(static_cast<std::size_t>(count));
  for (auto& v : out) v = normal(rng);
  return out;
}

// N(0,1) with each row scaled by 2^u, u uniform in [-8, 8]: tokens and channels of different
// magnitude, where coarse scales lose the small rows.
std::vector<float> uneven_rows(QuantShape shape, unsigned seed) {
  std::vector<float> out = normal_values(shape.elements(), seed);
  std::mt19937 rng(seed + 1);
  std::uniform_real_distribution<float> exponent(-8.0f, 8.0f);
  for (std::int64_t row = 0; row < shape.batches * shape.rows; ++row) {
    const float scale = std::exp2(exponent(rng));
    for (std::int64_t c = 0; c < shape.k; ++c) out[row * shape.k + c] *= scale;
  }
  return out;
}

template <typename F>
void require_invalid_argument(F&& call, const std::string& names) {
  try {
    call();
    FAIL("expected InvalidArgument naming " << names);
  } catch (const InvalidArgument& e) {
    INFO(e.what());
    CHECK_THAT(e.what(), Catch::Contains(names));
  }
}

// Logical code byte `code` (W4Offsets::code) of the packed block at `block`: pair code % 4 of the
// stored, bit-interleaved word holding it (kernel_templates/moejit/common/w4_layout.cuh).
std::uint8_t w4_code_pair(const std::vector<std::uint8_t>& packed, std::size_t block, int code) {
  const std::uint8_t* w = packed.data() + block + (code & ~3);
  const unsigned word = w[0] | (w[1] << 8) | (w[2] << 16) | (static_cast<unsigned>(w[3]) << 24);
  return static_cast<std::uint8_t>(w4_sm90_code_pair(word, code & 3));
}

}  // namespace

// ---- E4M3 ----

TEST_CASE("e4m3 decodes every code", "[formats]") {
  CHECK(same_bits(e4m3_to_float(0x00), 0.0f));
  CHECK(same_bits(e4m3_to_float(0x80), -0.0f));
  CHECK(e4m3_to_float(0x01) == pow2(-9));  // smallest subnormal
  CHECK(e4m3_to_float(0x07) == 7 * pow2(-9));
  CHECK(e4m3_to_float(0x08) == pow2(-6));  // smallest normal
  CHECK(e4m3_to_float(0x38) == 1.0f);
  CHECK(e4m3_to_float(0x39) == 1.125f);
  CHECK(e4m3_to_float(0x7E) == 448.0f);
  CHECK(e4m3_to_float(0xFE) == -448.0f);
  CHECK(std::isnan(e4m3_to_float(0x7F)));
  CHECK(std::isnan(e4m3_to_float(0xFF)));
  CHECK(std::signbit(e4m3_to_float(0xFF)));
  // No infinities: 0x78 (exponent all ones, mantissa 0) is an ordinary 256.
  CHECK(e4m3_to_float(0x78) == 256.0f);
  for (int c = 0; c < 256; ++c) {
    INFO("code " << c);
    CHECK(float_to_e4m3(e4m3_to_float(static_cast<std::uint8_t>(c))) == c);  // NaN keeps its sign too
  }
}

TEST_CASE("e4m3 rounds to nearest even, saturates, keeps NaN and -0", "[formats]") {
  CHECK(float_to_e4m3(1.0625f) == 0x38);      // tie between 1 and 1.125: even mantissa 000
  CHECK(float_to_e4m3(1.1875f) == 0x3A);      // tie between 1.125 and 1.25: even mantissa 010
  CHECK(float_to_e4m3(std::nextafter(1.0625f, 2.0f)) == 0x39);
  CHECK(float_to_e4m3(0.5f * pow2(-9)) == 0x00);  // tie between 0 and the smallest subnormal
  CHECK(float_to_e4m3(std::nextafter(0.5f * pow2(-9), 1.0f)) == 0x01);
  CHECK(float_to_e4m3(1.5f * pow2(-9)) == 0x02);  // subnormal tie: 1 vs 2 steps -> 2
  CHECK(float_to_e4m3(2.5f * pow2(-9)) == 0x02);
  CHECK(float_to_e4m3(7.5f * pow2(-9)) == 0x08);  // tie from the largest subnormal to the smallest normal
  CHECK(float_to_e4m3(std::numeric_limits<float>::denorm_min()) == 0x00);
  CHECK(float_to_e4m3(-std::numeric_limits<float>::denorm_min()) == 0x80);
  CHECK(float_to_e4m3(-0.0f) == 0x80);
  CHECK(float_to_e4m3(400.0f) == 0x7C);   // tie between 384 (mantissa 100) and 416 (101)
  CHECK(float_to_e4m3(432.0f) == 0x7E);   // tie between 416 and 448 (110)
  CHECK(float_to_e4m3(std::nextafter(432.0f, 0.0f)) == 0x7D);
  // Saturation: everything past 448, infinities included; 464 would round to 0x7F (NaN) unsaturated.
  for (float v : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(), kInf}) {
    INFO(v);
    CHECK(float_to_e4m3(v) == 0x7E);
    CHECK(float_to_e4m3(-v) == 0xFE);
  }
  CHECK(float_to_e4m3(kNaN) == 0x7F);
  CHECK(float_to_e4m3(-kNaN) == 0xFF);
}

TEST_CASE("e4m3 matches nearest-even search at every value, midpoint and neighbour", "[formats]") {
  const auto codes = e4m3_finite_codes();
  for (float p : probes(codes, e4m3_to_float, 512.0f)) {  // 512 = the next binade: probes past 448
    INFO(p);
    const std::uint8_t expected = std::fabs(p) >= 448.0f ? (std::signbit(p) ? 0xFE : 0x7E)
                                                         : nearest_even(p, codes, e4m3_to_float, 0x80);
    CHECK(float_to_e4m3(p) == expected);
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) {
    const float p = std::exp2(exponent(rng)) * (i % 2 ? -1.0f : 1.0f);
    const std::uint8_t expected = std::fabs(p) >= 448.0f ? (std::signbit(p) ? 0xFE : 0x7E)
                                                         : nearest_even(p, codes, e4m3_to_float, 0x80);
    if (float_to_e4m3(p) != expected) FAIL_CHECK("value " << p);
  }
}

// ---- E2M1 and E8M0 ----

TEST_CASE("e2m1 decodes its 16 codes", "[formats]") {
  const float expected[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    INFO("code " << c);
    CHECK(same_bits(e2m1_to_float(static_cast<std::uint8_t>(c)), expected[c]));
    CHECK(float_to_e2m1(expected[c]) == c);
    CHECK(e2m1_to_float(static_cast<std::uint8_t>(c | 0xF0)) == e2m1_to_float(static_cast<std::uint8_t>(c)));
  }
}

TEST_CASE("e2m1 rounds to nearest even and saturates at 6", "[formats]") {
  CHECK(float_to_e2m1(0.25f) == 0x0);  // 0 vs 0.5 (the only subnormal): even is 0
  CHECK(float_to_e2m1(std::nextafter(0.25f, 1.0f)) == 0x1);
  CHECK(float_to_e2m1(0.75f) == 0x2);  // 0.5 vs 1
  CHECK(float_to_e2m1(1.25f) == 0x2);  // 1 vs 1.5
  CHECK(float_to_e2m1(1.75f) == 0x4);  // 1.5 vs 2
  CHECK(float_to_e2m1(2.5f) == 0x4);   // 2 vs 3
  CHECK(float_to_e2m1(3.5f) == 0x6);   // 3 vs 4
  CHECK(float_to_e2m1(5.0f) == 0x6);   // 4 vs 6
  CHECK(float_to_e2m1(std::nextafter(5.0f, 6.0f)) == 0x7);
  CHECK(float_to_e2m1(-2.5f) == 0xC);
  CHECK(float_to_e2m1(-0.0f) == 0x8);
  CHECK(float_to_e2m1(-0.1f) == 0x8);  // rounds to -0: the sign survives
  for (float v : {6.0f, 6.5f, 7.0f, 8.0f, 1e30f, kInf}) {
    INFO(v);
    CHECK(float_to_e2m1(v) == 0x7);
    CHECK(float_to_e2m1(-v) == 0xF);
  }
  require_invalid_argument([] { float_to_e2m1(kNaN); }, "NaN");
  const auto codes = e2m1_codes();
  for (float p : probes(codes, e2m1_to_float, 8.0f)) {
    INFO(p);
    const std::uint8_t expected =
        std::fabs(p) >= 6.0f ? (std::signbit(p) ? 0xF : 0x7) : nearest_even(p, codes, e2m1_to_float, 0x8);
    CHECK(float_to_e2m1(p) == expected);
  }
}

TEST_CASE("e8m0 is a power of two, 0xFF is NaN", "[formats]") {
  CHECK(e8m0_to_float(127) == 1.0f);
  CHECK(e8m0_to_float(128) == 2.0f);
  CHECK(e8m0_to_float(0) == pow2(-127));
  CHECK(e8m0_to_float(254) == pow2(127));
  CHECK(std::isnan(e8m0_to_float(0xFF)));
}

// ---- FP8 with scales ----

TEST_CASE("fp8 scale arrays: shapes, partial blocks, order", "[formats]") {
  const QuantShape shape{2, 130, 200};
  CHECK(fp8_scale_shape(shape, Fp8Scaling::per_tensor) == ScaleShape{1, 1});
  CHECK(fp8_scale_shape(shape, Fp8Scaling::per_row) == ScaleShape{130, 1});
  CHECK(fp8_scale_shape(shape, Fp8Scaling::block_1x128) == ScaleShape{130, 2});
  CHECK(fp8_scale_shape(shape, Fp8Scaling::block_128x128) == ScaleShape{2, 2});
  CHECK(fp8_scale_shape({1, 5760, 2880}, Fp8Scaling::block_128x128) == ScaleShape{45, 23});  // gpt-oss up

  // Each 128x128 block gets amax = 448 * 2^j for a distinct j, so every scale is exactly 2^j and
  // its position in the array says which block it came from.
  std::vector<float> x(static_cast<std::size_t>(shape.elements()), 0.0f);
  auto block_exp = [](std::int64_t b, std::int64_t sr, std::int64_t sc) { return static_cast<int>(b * 4 + sr * 2 + sc) - 3; };
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t sr = 0; sr < 2; ++sr)
      for (std::int64_t sc = 0; sc < 2; ++sc) {
        const std::int64_t r = std::min<std::int64_t>(sr * 128 + 1, 129), c = std::min<std::int64_t>(sc * 128 + 5, 199);
        x[(b * 130 + r) * 200 + c] = -448.0f * pow2(block_exp(b, sr, sc));
      }
  const Fp8Tensor q = quantize_fp8(x.data(), shape, Fp8Scaling::block_128x128);
  REQUIRE(q.scales.size() == 8);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t sr = 0; sr < 2; ++sr)
      for (std::int64_t sc = 0; sc < 2; ++sc) CHECK(q.scales[(b * 2 + sr) * 2 + sc] == pow2(block_exp(b, sr, sc)));
  CHECK(q.data[(0 * 130 + 1) * 200 + 5] == 0xFE);
  CHECK(q.data[(1 * 130 + 129) * 200 + 133] == 0xFE);
  CHECK(dequantize(q) == x);  // every value is exactly representable

  // 1x128: one scale per row per 128 columns, the second block covers the 72 columns left;
  // K-block-major over the rows of both batches: [k block][batch * 130 + row].
  std::vector<float> y(static_cast<std::size_t>(shape.elements()), 1.0f);
  y[(1 * 130 + 7) * 200 + 150] = 896.0f;
  const Fp8Tensor a = quantize_fp8(y.data(), shape, Fp8Scaling::block_1x128);
  REQUIRE(a.scales.size() == 2 * 260);
  CHECK(a.scales[1 * 260 + 1 * 130 + 7] == 2.0f);
  CHECK(a.scales[0 * 260 + 1 * 130 + 7] == 1.0f / 448.0f);
  CHECK(a.scales[1 * 260 + 1 * 130 + 6] == 1.0f / 448.0f);
  CHECK(fp8_kernel_scales_a(a) == a.scales);
  CHECK(a.data[(1 * 130 + 7) * 200 + 150] == 0x7E);
}

TEST_CASE("fp8 kernel scales: per-tensor and per-row scalings expanded exactly", "[formats]") {
  const QuantShape shape{2, 3, 300};  // k blocks: 128, 128, 44
  std::vector<float> x(static_cast<std::size_t>(shape.elements()));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i)) * float(1 + i / 300);
  const Fp8Tensor row = quantize_fp8(x.data(), shape, Fp8Scaling::per_row);
  const std::vector<float> a = fp8_kernel_scales_a(row);
  REQUIRE(a.size() == 3 * 6);
  for (int kb = 0; kb < 3; ++kb)
    for (int r = 0; r < 6; ++r) CHECK(a[kb * 6 + r] == row.scales[r]);
  const Fp8Tensor tensor = quantize_fp8(x.data(), shape, Fp8Scaling::per_tensor);
  const std::vector<float> at = fp8_kernel_scales_a(tensor);
  for (int kb = 0; kb < 3; ++kb)
    for (int r = 0; r < 6; ++r) CHECK(at[kb * 6 + r] == tensor.scales[r / 3]);
  const std::vector<float> bt = fp8_kernel_scales_b(tensor);  // 1 x 3 blocks per expert
  REQUIRE(bt.size() == 2 * 3);
  for (int i = 0; i < 6; ++i) CHECK(bt[i] == tensor.scales[i / 3]);
  const Fp8Tensor blocks = quantize_fp8(x.data(), shape, Fp8Scaling::block_128x128);
  CHECK(fp8_kernel_scales_b(blocks) == blocks.scales);
  // Per-row weights: one scale per output channel, [E][N] as stored (b_scale_layout = channels).
  CHECK(fp8_kernel_scales_b(row) == row.scales);
  CHECK(fp8_kernel_scale_layout_b(row) == ScaleB::channels);
  CHECK(fp8_kernel_scale_layout_b(blocks) == ScaleB::blocks);
  CHECK(fp8_kernel_scale_layout_b(tensor) == ScaleB::blocks);
  const Fp8Tensor act = quantize_fp8(x.data(), shape, Fp8Scaling::block_1x128);
  require_invalid_argument([&] { fp8_kernel_scales_b(act); }, "fp8_kernel_scales_b: tensor.scaling=1x128");
  require_invalid_argument([&] { fp8_kernel_scales_a(blocks); }, "fp8_kernel_scales_a: tensor.scaling=128x128");
}

TEST_CASE("fp8 scales: amax / 448, zero regions, NaN and infinity", "[formats]") {
  const QuantShape shape{1, 3, 4};
  std::vector<float> x = {1.0f, -2.0f, 0.5f, 0.25f,  // amax 2
                          0.0f, -0.0f, 0.0f, 0.0f,   // all zero
                          kNaN, 3.0f,  kInf, -kInf};  // NaN and inf do not count toward amax
  const Fp8Tensor row = quantize_fp8(x.data(), shape, Fp8Scaling::per_row);
  CHECK(row.scales == std::vector<float>{2.0f / 448.0f, 1.0f, 3.0f / 448.0f});
  CHECK(row.data[1] == 0xFE);                             // -amax -> -448
  CHECK(row.data[4] == 0x00);
  CHECK(row.data[5] == 0x80);                             // -0 stays -0
  CHECK(row.data[8] == 0x7F);                             // NaN stays NaN
  CHECK(row.data[9] == 0x7E);
  CHECK(row.data[10] == 0x7E);                            // infinities saturate
  CHECK(row.data[11] == 0xFE);
  const std::vector<float> back = dequantize(row);
  CHECK(back[1] == Approx(-2.0f));
  CHECK(same_bits(back[5], -0.0f));
  CHECK(std::isnan(back[8]));
  CHECK(back[10] == Approx(3.0f));

  const Fp8Tensor tensor = quantize_fp8(x.data(), shape, Fp8Scaling::per_tensor);
  CHECK(tensor.scales == std::vector<float>{3.0f / 448.0f});
  std::vector<float> zeros(12, 0.0f);
  CHECK(quantize_fp8(zeros.data(), shape, Fp8Scaling::per_tensor).scales == std::vector<float>{1.0f});
}

TEST_CASE("fp8 round trip: dequantize then quantize gives the same codes", "[formats]") {
  const QuantShape shape{3, 70, 300};
  const std::vector<float> x = uneven_rows(shape, 11);
  for (Fp8Scaling s : {Fp8Scaling::per_tensor, Fp8Scaling::per_row, Fp8Scaling::block_1x128, Fp8Scaling::block_128x128}) {
    INFO(scaling_name(s));
    const Fp8Tensor q = quantize_fp8(x.data(), shape, s);
    const std::vector<float> back = dequantize(q);
    const Fp8Tensor again = quantize_fp8(back.data(), shape, s);
    REQUIRE(again.scales.size() == q.scales.size());
    for (std::size_t i = 0; i < q.scales.size(); ++i) CHECK(again.scales[i] == Approx(q.scales[i]).epsilon(1e-6));
    CHECK(again.data == q.data);
  }
}

// ---- MXFP4 ----

TEST_CASE("mxfp4 shared exponent: floor(log2(amax)) - 2, clamped, zero and NaN blocks", "[formats]") {
  const QuantShape shape{1, 1, 32};
  auto scale_of = [&](float amax) {
    std::vector<float> x(32, 0.0f);
    x[3] = amax;
    return quantize_mxfp4(x.data(), shape).scales[0];
  };
  CHECK(scale_of(6.0f) == 127);        // 6 = 1.5 * 2^2: shared exponent 0, the element is 6
  CHECK(scale_of(4.0f) == 127);
  CHECK(scale_of(7.99f) == 127);       // the top binade's values past 6 saturate (OCP recipe)
  CHECK(scale_of(8.0f) == 128);
  CHECK(scale_of(1.0f) == 125);
  CHECK(scale_of(-1.0f) == 125);
  CHECK(scale_of(pow2(-125)) == 0);    // shared exponent -127: the smallest scale
  CHECK(scale_of(pow2(-140)) == 0);    // below E8M0's range: clamped
  CHECK(scale_of(std::numeric_limits<float>::max()) == 252);
  CHECK(scale_of(0.0f) == 0);          // all-zero block: the smallest scale

  std::vector<float> x(32, 0.0f);
  x[0] = 7.99f;
  x[1] = 0.25f;   // tie 0 vs 0.5 at scale 1 -> 0
  x[2] = 0.75f;   // tie -> 1
  x[3] = -0.5f;   // the subnormal
  x[4] = -0.0f;
  x[5] = 2.5f;    // tie -> 2
  x[6] = kInf;    // saturates, does not set the scale
  const Mxfp4Tensor q = quantize_mxfp4(x.data(), shape);
  CHECK(q.scales[0] == 127);
  // Lower k in the low nibble.
  CHECK(q.data[0] == 0x07);  // k0 = 6 (0x7), k1 = 0 (0x0)
  CHECK(q.data[1] == 0x92);  // k2 = 1 (0x2), k3 = -0.5 (0x9)
  CHECK(q.data[2] == 0x48);  // k4 = -0 (0x8), k5 = 2 (0x4)
  CHECK(q.data[3] == 0x07);  // k6 = inf -> 6
  const std::vector<float> back = dequantize(q);
  CHECK(back[0] == 6.0f);
  CHECK(same_bits(back[4], -0.0f));
  CHECK(back[6] == 6.0f);

  x[9] = kNaN;  // E2M1 has no NaN: the scale says it for the block
  const Mxfp4Tensor n = quantize_mxfp4(x.data(), shape);
  CHECK(n.scales[0] == 0xFF);
  CHECK(n.data == std::vector<std::uint8_t>(16, 0));
  for (float v : dequantize(n)) CHECK(std::isnan(v));

  const std::vector<float> zeros(32, 0.0f);
  const Mxfp4Tensor z = quantize_mxfp4(zeros.data(), shape);
  CHECK(z.scales[0] == 0);
  CHECK(z.data == std::vector<std::uint8_t>(16, 0));
  CHECK(dequantize(z) == zeros);
}

TEST_CASE("mxfp4 layout: one scale per 32 along k, rows and experts in order; exact round trip", "[formats]") {
  const QuantShape shape{2, 3, 64};
  // Block (b, r, i) holds E2M1 values times 2^e with amax 4 * 2^e: all exactly representable.
  std::vector<float> x(static_cast<std::size_t>(shape.elements()));
  for (std::int64_t blk = 0; blk < 12; ++blk)
    for (int j = 0; j < 32; ++j) {
      const int code = (j % 16 & 7) == 7 ? j % 16 - 1 : j % 16;  // no +-6: the block's amax is 4
      const float e2m1 = e2m1_to_float(static_cast<std::uint8_t>(code));
      x[blk * 32 + j] = e2m1 * pow2(static_cast<int>(blk) - 6);
    }
  const Mxfp4Tensor q = quantize_mxfp4(x.data(), shape);
  REQUIRE(q.scales.size() == 12);
  REQUIRE(q.data.size() == 192);
  for (int blk = 0; blk < 12; ++blk) CHECK(q.scales[blk] == 127 + blk - 6);
  CHECK(dequantize(q) == x);
  CHECK(quantize_mxfp4(dequantize(q).data(), shape).data == q.data);
}

// ---- NVFP4 ----

TEST_CASE("nvfp4 scales: tensor amax / 2688, block scale rounded to e4m3", "[formats]") {
  const QuantShape shape{1, 1, 48};
  std::vector<float> x(48, 0.0f);
  x[0] = 2688.0f;   // block 0: amax = tensor amax -> tensor scale 1, block scale 448
  x[16] = 6.0f;     // block 1: 6 / 6 / 1 = 1 -> 0x38
  x[17] = 3.0f;
  x[18] = 1.5f;     // 1.5 / 1 = 1.5: exact
  x[19] = -kInf;    // saturates to -6
  // block 2 (k 32..47) all zero
  const Nvfp4Tensor q = quantize_nvfp4(x.data(), shape);
  CHECK(q.tensor_scales == std::vector<float>{1.0f});
  CHECK(q.scales == std::vector<std::uint8_t>{0x7E, 0x38, 0x00});
  CHECK(q.data[0] == 0x07);
  CHECK(q.data[8] == 0x57);   // k16 = 6, k17 = 3
  CHECK(q.data[9] == 0xF3);   // k18 = 1.5, k19 = -inf -> -6
  CHECK(q.data[16] == 0x00);
  const std::vector<float> back = dequantize(q);
  CHECK(back[0] == 2688.0f);
  CHECK(back[17] == 3.0f);
  CHECK(back[19] == -6.0f);
  CHECK(back[40] == 0.0f);

  // Block scale rounding: amax 6 * 1.0625 -> block scale 1.0625 ties to 1.0 (0x38); then 6.375
  // saturates to 6 and 2.125 rounds to 2.
  std::vector<float> y(16, 0.0f);
  y[0] = 6.375f;
  y[1] = 2.125f;
  const Nvfp4Tensor r = quantize_nvfp4(y.data(), {1, 1, 16});
  CHECK(r.tensor_scales[0] == 6.375f / 2688.0f);
  CHECK(r.scales[0] == 0x7E);  // the tensor's only block always gets 448 (up to rounding)
  std::vector<float> z(32, 0.0f);
  z[0] = 6.0f * 448.0f;        // block 0 sets the tensor scale to 1
  z[16] = 6.375f;              // block 1: 1.0625 -> 0x38 (tie to even)
  z[17] = 2.125f;
  const Nvfp4Tensor t = quantize_nvfp4(z.data(), {1, 1, 32});
  CHECK(t.tensor_scales[0] == 1.0f);
  CHECK(t.scales[1] == 0x38);
  CHECK(t.data[8] == 0x47);    // k16 = 6 (saturated), k17 = 2
}

TEST_CASE("nvfp4: per-expert tensor scales, NaN and zero tensors", "[formats]") {
  const QuantShape shape{3, 2, 16};
  std::vector<float> x(96, 0.0f);
  for (int i = 0; i < 32; ++i) x[i] = (i % 7) * 0.5f;        // expert 0: amax 3
  x[32 + 5] = -5376.0f;                                        // expert 1: amax 5376
  x[32 + 20] = kNaN;                                           // expert 1, row 1: NaN block
  // expert 2 all zero
  const Nvfp4Tensor q = quantize_nvfp4(x.data(), shape);
  CHECK(q.tensor_scales == std::vector<float>{3.0f / 2688.0f, 2.0f, 1.0f});
  CHECK(q.scales[2] == 0x7E);
  CHECK(q.scales[3] == 0x7F);
  CHECK(q.scales[4] == 0x00);
  CHECK(q.scales[5] == 0x00);
  const std::vector<float> back = dequantize(q);
  CHECK(back[37] == -5376.0f);
  for (int i = 48; i < 64; ++i) CHECK(std::isnan(back[i]));
  for (int i = 64; i < 96; ++i) CHECK(back[i] == 0.0f);
  CHECK(quantize_nvfp4(back.data() + 64, {1, 2, 16}).tensor_scales[0] == 1.0f);
}

TEST_CASE("nvfp4 round trip: dequantize then quantize gives the same codes", "[formats]") {
  const QuantShape shape{2, 33, 96};
  const std::vector<float> x = normal_values(shape.elements(), 5);
  const Nvfp4Tensor q = quantize_nvfp4(x.data(), shape);
  const Nvfp4Tensor again = quantize_nvfp4(dequantize(q).data(), shape);
  CHECK(again.tensor_scales[0] == Approx(q.tensor_scales[0]).epsilon(1e-6));
  CHECK(again.tensor_scales[1] == Approx(q.tensor_scales[1]).epsilon(1e-6));
  CHECK(again.scales == q.scales);
  CHECK(again.data == q.data);
}

// ---- Argument checks ----

TEST_CASE("quantizers and dequantizers name every bad argument", "[formats][validate]") {
  const std::vector<float> x(4096, 1.0f);
  require_invalid_argument([&] { quantize_fp8(nullptr, {1, 2, 128}, Fp8Scaling::per_row); }, "quantize_fp8: values is null");
  require_invalid_argument([&] { quantize_mxfp4(nullptr, {1, 2, 32}); }, "quantize_mxfp4: values is null");
  require_invalid_argument([&] { quantize_nvfp4(nullptr, {1, 2, 16}); }, "quantize_nvfp4: values is null");
  require_invalid_argument([&] { quantize_fp8(x.data(), {0, 2, 128}, Fp8Scaling::per_row); }, "quantize_fp8: shape.batches=0");
  require_invalid_argument([&] { quantize_fp8(x.data(), {1, 0, 128}, Fp8Scaling::per_row); }, "shape.rows=0");
  require_invalid_argument([&] { quantize_fp8(x.data(), {1, 2, -1}, Fp8Scaling::per_row); }, "shape.k=-1");
  require_invalid_argument([&] { quantize_fp8(x.data(), {1 << 20, 1 << 20, 1 << 20}, Fp8Scaling::per_row); }, "2^48");
  require_invalid_argument([&] { quantize_fp8(x.data(), {1, 2, 8}, static_cast<Fp8Scaling>(9)); }, "quantize_fp8: scaling=9");
  require_invalid_argument([&] { fp8_scale_shape({1, 2, 8}, static_cast<Fp8Scaling>(9)); }, "fp8_scale_shape: scaling=9");
  require_invalid_argument([&] { quantize_mxfp4(x.data(), {1, 2, 48}); }, "quantize_mxfp4: shape.k=48 (expected a multiple of 32");
  require_invalid_argument([&] { quantize_nvfp4(x.data(), {1, 2, 24}); }, "quantize_nvfp4: shape.k=24 (expected a multiple of 16");

  Fp8Tensor f = quantize_fp8(x.data(), {2, 4, 256}, Fp8Scaling::block_1x128);
  f.scales.pop_back();
  require_invalid_argument([&] { dequantize(f); }, "dequantize(Fp8Tensor): tensor.scales has 15 entries (expected 16");
  f.data.resize(10);
  require_invalid_argument([&] { dequantize(f); }, "tensor.data has 10 entries");
  Mxfp4Tensor m = quantize_mxfp4(x.data(), {1, 4, 64});
  m.shape.k = 96;
  require_invalid_argument([&] { dequantize(m); }, "tensor.data has 128 entries (expected 192");
  m.shape.k = 80;
  require_invalid_argument([&] { dequantize(m); }, "shape.k=80");
  Nvfp4Tensor n = quantize_nvfp4(x.data(), {2, 4, 64});
  n.tensor_scales.resize(1);
  require_invalid_argument([&] { dequantize(n); }, "tensor.tensor_scales has 1 entries (expected 2");
  CHECK(std::string(format_name(QuantFormat::mxfp4)) == "mxfp4");
  CHECK(std::string(scaling_name(Fp8Scaling::block_128x128)) == "128x128");
}

// ---- W4 SM90: 4-bit weights pre-arranged for the Hopper weight-only kernel ----

// The stored code words scatter their four pairs' bits (w4_layout.cuh): pinned by hand.
TEST_CASE("w4 sm90 pack: code words are bit-interleaved", "[formats][w4]") {
  // Pairs 0x21, 0x43, 0x65, 0x87 (A = low nibble; code bits m, e0, e1, sign). Pairs 0-2 at BF16
  // bits (A: 6, 7, 8, 15; B: 22, 23, 24, 31) + 3p mod 32: pair 0: A = 1 (m) -> bit 6, B = 2 (e0) ->
  // 23; pair 1: A = 3 (m, e0) -> 9, 10, B = 4 (e1) -> 27; pair 2: A = 5 (m, e1) -> 12, 14, B = 6
  // (e0, e1) -> 29, 30. Pair 3 at (A: 3, 4, 0, 1; B: + 16): A = 7 (m, e0, e1) -> 3, 4, 0, B = 8
  // (sign) -> 17.
  CHECK(w4_sm90_interleave_codes(0x87654321u) == 0x68825659u);
  // A layout change fails the line above: it must also bump the version users keep beside stored
  // packed weights (formats.hpp).
  STATIC_REQUIRE(kW4Sm90LayoutVersion == 4);
  for (unsigned byte = 0; byte < 256; ++byte)
    for (int p = 0; p < 4; ++p) {
      const unsigned logical = (0x5Au * 0x01010101u & ~(0xFFu << (8 * p))) | (byte << (8 * p));
      REQUIRE(w4_sm90_code_pair(w4_sm90_interleave_codes(logical), p) == byte);
    }
}

// The kernels' first widening step (w4_sm90_pair_bf16_bits, shared with hopper_w4/e2m1.cuh): every
// pair of every word, read as a BF16 pair and multiplied by 2^126, is the two codes' E2M1 values.
TEST_CASE("w4 sm90 pack: each stored pair widens to its codes' BF16 bits", "[formats][w4]") {
  const auto bf16_times_2pow126 = [](unsigned half) {
    float f;
    const std::uint32_t bits = (half & 0xFFFFu) << 16;
    std::memcpy(&f, &bits, 4);
    return std::ldexp(f, 126);
  };
  std::mt19937 rng(7);
  for (unsigned byte = 0; byte < 256; ++byte)
    for (int p = 0; p < 4; ++p)
      for (int trial = 0; trial < 4; ++trial) {  // the other pairs random: their bits must not leak in
        const unsigned logical = (rng() & ~(0xFFu << (8 * p))) | (byte << (8 * p));
        const unsigned bits = w4_sm90_pair_bf16_bits(w4_sm90_interleave_codes(logical), p);
        REQUIRE((bits & ~kW4Sm90PairMask) == 0u);
        REQUIRE(same_bits(bf16_times_2pow126(bits), e2m1_to_float(static_cast<std::uint8_t>(byte & 0xF))));
        REQUIRE(same_bits(bf16_times_2pow126(bits >> 16), e2m1_to_float(static_cast<std::uint8_t>(byte >> 4))));
      }
}

TEST_CASE("w4 sm90 pack: sizes, one byte placed by hand, round trip, padding", "[formats][w4]") {
  // 2 experts, N = 200 (second 128-row block partial), K = 96 (second 64-K block partial).
  const QuantShape shape{2, 200, 96};
  const std::vector<float> x = uneven_rows(shape, 21);
  const Mxfp4Tensor mx = quantize_mxfp4(x.data(), shape);
  const Nvfp4Tensor nv = quantize_nvfp4(x.data(), shape);
  // MXFP4: 2 experts x 2 runs of (128-byte row-exponent header + 2 blocks); NVFP4 has no header.
  constexpr std::size_t kMxRun = 128 + 2 * 4352;
  CHECK(w4_sm90_packed_bytes(shape, QuantFormat::mxfp4) == 2 * 2 * kMxRun);
  CHECK(w4_sm90_packed_bytes(shape, QuantFormat::nvfp4) == 2 * 2 * 2 * 4608);
  const std::vector<std::uint8_t> pm = pack_w4_sm90(mx), pn = pack_w4_sm90(nv);
  REQUIRE(pm.size() == 2 * 2 * kMxRun);
  REQUIRE(pn.size() == 2 * 2 * 2 * 4608);
  // Rows scaled by up to 2^8 have block scales above 2^1: their scales are stored relative to the
  // row's exponent (checked for every element below), here for some rows.
  int rows_with_exponent = 0;
  for (std::size_t run = 0; run < 4; ++run)
    for (int i = 0; i < 128; ++i) rows_with_exponent += pm[run * kMxRun + i] != 0;
  CHECK(rows_with_exponent > 0);
  auto mx_exponent = [&](int g, int r) { return pm[(std::size_t)g * 2 * kMxRun + (r / 128) * kMxRun + r % 128]; };

  // Expert 1, row block 0, K block 1; consumer w = 1, thread t = 37 (warp 1, lane 5: r0 = 64 + 16 + 1
  // = 81, c = 1); code byte kk = 1, i = 3: row r1 = 89, K = 64 + 16 + 2 + 8 = 90 (and 91).
  const std::size_t mx_block = (1 * 2 + 0) * kMxRun + 128 + 1 * 4352;
  CHECK(w4_code_pair(pm, mx_block, (128 + 37) * 16 + 1 * 4 + 3) == mx.data[((1 * 200 + 89) * 96 + 90) / 2]);
  // MXFP4 scale byte j = 3: row r1 = 89, 32-block 2 * 1 + 1 = 3 (past K = 96: padding 127).
  // The scales sit once per quad: thread 128 + 37 reads quad (128 + 37) / 4 = 41.
  CHECK(pm[mx_block + 4096 + 41 * 4 + 3] == 127);
  // j = 1: row 89, 32-block 2 (K 64..95).
  CHECK(pm[mx_block + 4096 + 41 * 4 + 1] + mx_exponent(1, 89) == mx.scales[(1 * 200 + 89) * 3 + 2]);
  // NVFP4 scale byte j = 2: row r0 = 81, 16-block 4 * 1 + 1 = 5 (K 80..95).
  const std::size_t nv_block = ((1 * 2 + 0) * 2 + 1) * 4608;
  CHECK(pn[nv_block + 4096 + 41 * 8 + 2] == w4_sm90_nvfp4_stored_scale(nv.scales[(1 * 200 + 81) * 6 + 5]));
  CHECK(pn[nv_block + 4096 + 41 * 8 + 7] == 0);  // 16-block 7: past K, scale 0
  // Rows past N = 200 in the second row block: zero codes.
  const std::size_t last = (0 * 2 + 1) * kMxRun + 128;
  CHECK(pm[last + (128 + 127) * 16] == 0);  // w = 1, t = 127: r0 = 128 + 64 + 48 + 7 = 247

  // The offsets the portable kernel reads through (kernel_templates/moejit/common/w4_layout.cuh)
  // find every code pair and scale that pack_w4_sm90 wrote.
  const int k_blocks64 = 2, n_blocks = 2;
  for (int g = 0; g < 2; ++g)
    for (int r = 0; r < 200; ++r)
      for (int k = 0; k < 96; k += 2) {
        const W4Offsets m = w4_sm90_offsets(r, k, k_blocks64, false), v = w4_sm90_offsets(r, k, k_blocks64, true);
        const std::size_t mx_at = (std::size_t)g * n_blocks * kMxRun + m.block;
        const std::size_t nv_at = (std::size_t)g * n_blocks * k_blocks64 * 4608 + v.block;
        REQUIRE(v.exponent == -1);
        REQUIRE(m.exponent == (r / 128) * (std::int64_t)kMxRun + r % 128);
        const std::size_t element = ((std::size_t)g * 200 + r) * 96 + k;
        REQUIRE(w4_code_pair(pm, mx_at, m.code) == mx.data[element / 2]);
        REQUIRE(pm[mx_at + m.scale] + pm[(std::size_t)g * n_blocks * kMxRun + m.exponent] == mx.scales[element / 32]);
        REQUIRE(w4_code_pair(pn, nv_at, v.code) == nv.data[element / 2]);
        REQUIRE(w4_sm90_nvfp4_scale_e4m3(pn[nv_at + v.scale]) == nv.scales[element / 16]);
        if (k % 8 == 0)
          for (int c = 1; c < 4; ++c) REQUIRE(w4_sm90_offsets(r, k + 2 * c, k_blocks64, false).code == m.code + 16 * c);
      }

  const Mxfp4Tensor mx_back = unpack_mxfp4_w4_sm90(pm, shape);
  CHECK(mx_back.data == mx.data);
  CHECK(mx_back.scales == mx.scales);
  const Nvfp4Tensor nv_back = unpack_nvfp4_w4_sm90(pn, shape, nv.tensor_scales);
  CHECK(nv_back.data == nv.data);
  CHECK(nv_back.scales == nv.scales);
  CHECK(dequantize(nv_back) == dequantize(nv));

  require_invalid_argument([&] { w4_sm90_packed_bytes(shape, QuantFormat::fp8_e4m3); }, "format=fp8_e4m3");
  require_invalid_argument([&] { w4_sm90_packed_bytes({1, 8, 48}, QuantFormat::mxfp4); }, "shape.k=48");
  std::vector<std::uint8_t> short_packed(pm.begin(), pm.end() - 1);
  require_invalid_argument([&] { unpack_mxfp4_w4_sm90(short_packed, shape); }, "packed has 35327 entries");
  Nvfp4Tensor no_scales = nv;
  no_scales.tensor_scales.clear();
  require_invalid_argument([&] { pack_w4_sm90(no_scales); }, "weights.tensor_scales has 0 entries");
}

// NVFP4 scales as stored (layout 4, formats.hpp): every E4M3 magnitude, subnormals included, widens
// to exactly scale x 2^117 by the kernels' shift and add, and comes back; NaN widens to NaN.
TEST_CASE("w4 sm90 pack: NVFP4 stored scales widen to scale x 2^117, every E4M3 value", "[formats][w4]") {
  const auto bf16_value = [](unsigned bits) {
    float f;
    const std::uint32_t word = (bits & 0xFFFFu) << 16;
    std::memcpy(&f, &word, 4);
    return f;
  };
  for (unsigned magnitude = 1; magnitude < 0x7F; ++magnitude) {
    const unsigned stored = w4_sm90_nvfp4_stored_scale(magnitude);
    INFO("E4M3 0x" << std::hex << magnitude << " stored 0x" << stored);
    REQUIRE(stored > 0);
    REQUIRE(stored < 256);
    REQUIRE(stored != kW4Sm90Nvfp4NanScale);
    REQUIRE(w4_sm90_nvfp4_scale_e4m3(stored) == magnitude);
    const float factor = bf16_value(w4_sm90_nvfp4_factor_bits(stored));
    REQUIRE(same_bits(factor, std::ldexp(e4m3_to_float(static_cast<std::uint8_t>(magnitude)), 117)));
    // The kernels widen two rows in one word: the two halves' sums never carry into each other.
    REQUIRE(w4_sm90_nvfp4_factor_bits(stored) < 0x10000u);
  }
  CHECK(w4_sm90_nvfp4_stored_scale(0x01) == ((1u << 3) | 0));  // 2^-9
  CHECK(w4_sm90_nvfp4_stored_scale(0x07) == ((3u << 3) | 6));  // 7 x 2^-9 = 1.75 x 2^-7
  CHECK(w4_sm90_nvfp4_stored_scale(0x08) == ((4u << 3) | 0));  // 2^-6, the smallest normal
  CHECK(w4_sm90_nvfp4_stored_scale(0x7E) == ((18u << 3) | 6)); // 448
  CHECK(std::isnan(bf16_value(w4_sm90_nvfp4_factor_bits(kW4Sm90Nvfp4NanScale))));
  CHECK(w4_sm90_nvfp4_scale_e4m3(kW4Sm90Nvfp4NanScale) == 0x7Fu);
  CHECK(w4_sm90_nvfp4_scale_e4m3(0) == 0u);

  // Blocks whose scale the encoding does not hold: a negative scale (its sign moves to the codes), a
  // zero scale with nonzero codes (zeroed), NaN of either sign, a subnormal. They dequantize the same.
  const QuantShape shape{1, 128, 64};  // one block of 128 rows x 64 K: 4 scale blocks per row
  const std::vector<float> x = normal_values(shape.elements(), 11);
  Nvfp4Tensor nv = quantize_nvfp4(x.data(), shape);
  nv.scales[0 * 4 + 1] |= 0x80;  // row 0, block 1 negative
  nv.scales[1 * 4 + 0] = 0x00;   // row 1, block 0 zero (its codes stay nonzero)
  nv.scales[2 * 4 + 2] = 0x80;   // -0
  nv.scales[3 * 4 + 3] = 0xFF;   // NaN with the sign
  nv.scales[4 * 4 + 0] = 0x03;   // subnormal 3 x 2^-9
  REQUIRE(nv.data[(1 * 64 + 0) / 2] != 0);
  const std::vector<std::uint8_t> packed = pack_w4_sm90(nv);
  const Nvfp4Tensor back = unpack_nvfp4_w4_sm90(packed, shape, nv.tensor_scales);
  const std::vector<float> want = dequantize(nv), got = dequantize(back);
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    REQUIRE((std::isnan(want[i]) ? std::isnan(got[i]) : want[i] == got[i]));
  }
  CHECK(back.scales[0 * 4 + 1] == (nv.scales[0 * 4 + 1] & 0x7F));
  CHECK(back.data[(0 * 64 + 16) / 2] == (nv.data[(0 * 64 + 16) / 2] ^ 0x88));
  CHECK(back.scales[1 * 4 + 0] == 0);
  CHECK(back.data[(1 * 64 + 0) / 2] == 0);
  CHECK(back.scales[3 * 4 + 3] == 0x7F);
  CHECK(back.scales[4 * 4 + 0] == 0x03);
}

// MXFP4 rows whose block scales exceed 2^1 are stored relative to a row exponent (formats.hpp), so
// that the Hopper kernel widens every code pair with one multiply; NaN blocks and the flush of
// blocks more than 2^128 below their row's largest, pinned byte for byte.
TEST_CASE("w4 sm90 pack: MXFP4 row exponents, NaN blocks, flushed blocks, experts packed one by one", "[formats][w4]") {
  const QuantShape shape{2, 130, 128};  // 4 scale blocks per row; rows 128, 129 in a second run
  const std::vector<float> x = normal_values(shape.elements(), 7);  // N(0, 1): block scales <= 2^0
  Mxfp4Tensor mx = quantize_mxfp4(x.data(), shape);
  auto scale = [&](int g, int r, int blk) -> std::uint8_t& { return mx.scales[(g * 130 + r) * 4 + blk]; };
  auto set_codes = [&](int g, int r, int blk, std::uint8_t byte) {
    for (int i = 0; i < 16; ++i) mx.data[((g * 130 + r) * 128 + blk * 32) / 2 + i] = byte;
  };
  for (int g = 0; g < 2; ++g)
    for (int r = 0; r < 130; ++r)
      for (int blk = 0; blk < 4; ++blk) set_codes(g, r, blk, 0x21);  // nonzero codes everywhere
  scale(0, 3, 1) = 200;                          // row 3: largest 200 -> exponent 72
  scale(0, 3, 0) = 72;                           // stored 0 (exactly at the window's bottom)
  scale(0, 3, 2) = 71, scale(0, 3, 3) = 0xFF;    // below the window: flushed; NaN
  scale(1, 129, 0) = 254, scale(1, 129, 2) = 0;  // expert 1, row 129: exponent 126; block 2 flushed
  set_codes(1, 129, 3, 0x00), scale(1, 129, 3) = 3;  // an all-zero block below the window: kept, s' = 0
  scale(1, 5, 2) = 0xFF;                         // a NaN block in a row of small scales

  const std::vector<std::uint8_t> packed = pack_w4_sm90(mx);
  constexpr std::size_t kRun = 128 + 2 * 4352, kExpert = 2 * kRun;
  auto stored_scale = [&](int g, int r, int k) {
    const W4Offsets at = w4_sm90_offsets(r, k, 2, false);
    return packed[g * kExpert + at.block + at.scale];
  };
  auto stored_code = [&](int g, int r, int k) {
    const W4Offsets at = w4_sm90_offsets(r, k, 2, false);
    return w4_code_pair(packed, g * kExpert + at.block, at.code);
  };
  auto exponent = [&](int g, int r) { return packed[g * kExpert + w4_sm90_offsets(r, 0, 2, false).exponent]; };
  CHECK(exponent(0, 3) == 72);
  CHECK(stored_scale(0, 3, 32) == 128);
  CHECK(stored_scale(0, 3, 0) == 0);
  CHECK((stored_scale(0, 3, 64) == 0 && stored_code(0, 3, 64) == 0));    // flushed
  CHECK((stored_scale(0, 3, 96) == 129 && stored_code(0, 3, 96) == 0));  // NaN marker, zero codes
  CHECK(exponent(1, 129) == 126);
  CHECK(stored_scale(1, 129, 0) == 128);
  CHECK((stored_scale(1, 129, 64) == 0 && stored_code(1, 129, 64) == 0));
  CHECK(stored_scale(1, 129, 96) == 0);
  CHECK(exponent(1, 5) == 0);
  CHECK((stored_scale(1, 5, 64) == 129 && stored_code(1, 5, 64) == 0));
  CHECK(exponent(0, 4) == 0);
  CHECK(stored_scale(0, 4, 0) == scale(0, 4, 0));
  CHECK(packed[1 * kExpert + kRun + 2] == 0);  // expert 1, second run, row 130: past N

  // Every stored scale is at most 129 (the Hopper kernel's one-multiply range, plus the NaN marker).
  for (int g = 0; g < 2; ++g)
    for (int r = 0; r < 130; ++r)
      for (int k = 0; k < 128; k += 32) REQUIRE(stored_scale(g, r, k) <= 129);

  // Unpacked: the same values but for the flushed blocks; NaN blocks NaN.
  const Mxfp4Tensor back = unpack_mxfp4_w4_sm90(packed, shape);
  const std::vector<float> want = dequantize(mx), got = dequantize(back);
  for (std::size_t i = 0; i < want.size(); ++i) {
    const std::int64_t row = (std::int64_t)i / 128, blk = ((std::int64_t)i % 128) / 32;
    const bool flushed = (row == 3 && blk == 2) || (row == 130 + 129 && blk == 2);
    if (std::isnan(want[i])) REQUIRE(std::isnan(got[i]));
    else REQUIRE(got[i] == (flushed ? 0.f : want[i]));
  }
  CHECK(back.scales[(0 * 130 + 3) * 4 + 1] == 200);
  CHECK(back.scales[(0 * 130 + 3) * 4 + 3] == 0xFF);

  // Experts packed one by one concatenate into the whole tensor's packing.
  std::vector<std::uint8_t> concatenated;
  for (int g = 0; g < 2; ++g) {
    Mxfp4Tensor one;
    one.shape = {1, 130, 128};
    one.data.assign(mx.data.begin() + g * 130 * 64, mx.data.begin() + (g + 1) * 130 * 64);
    one.scales.assign(mx.scales.begin() + g * 130 * 4, mx.scales.begin() + (g + 1) * 130 * 4);
    const std::vector<std::uint8_t> part = pack_w4_sm90(one);
    concatenated.insert(concatenated.end(), part.begin(), part.end());
  }
  CHECK(concatenated == packed);
}

// ---- Quantizer error (docs/perf.md, "Quantizer error") ----

// Largest ||row error|| / ||row|| over the rows: what coarse scales do to small tokens/channels,
// which the whole tensor's Frobenius error (dominated by the large rows) does not show.
double worst_row_error(const std::vector<float>& x, const std::vector<float>& y, std::int64_t k) {
  double worst = 0;
  for (std::size_t row = 0; row < x.size() / k; ++row) {
    const std::vector<float> xr(x.begin() + row * k, x.begin() + (row + 1) * k);
    const std::vector<float> yr(y.begin() + row * k, y.begin() + (row + 1) * k);
    worst = std::max(worst, relative_frobenius_error(xr, yr));
  }
  return worst;
}

TEST_CASE("quantizer error against unquantized random data", "[formats][error]") {
  // Four experts of 256 x 2048. Bounds sit 10-25% above the errors measured with these seeds.
  const QuantShape shape{4, 256, 2048};
  const std::vector<float> normal = normal_values(shape.elements(), 1);
  const std::vector<float> uneven = uneven_rows(shape, 2);
  struct Case {
    const char* name;
    double normal_bound, uneven_bound, uneven_worst_row_bound;
    std::vector<float> (*run)(const std::vector<float>&, QuantShape);
  };
  const Case cases[] = {
      {"fp8 per-tensor", 0.030, 0.030, 0.40,
       [](const std::vector<float>& x, QuantShape s) { return dequantize(quantize_fp8(x.data(), s, Fp8Scaling::per_tensor)); }},
      {"fp8 per-row", 0.030, 0.030, 0.035,
       [](const std::vector<float>& x, QuantShape s) { return dequantize(quantize_fp8(x.data(), s, Fp8Scaling::per_row)); }},
      {"fp8 1x128", 0.030, 0.030, 0.035,
       [](const std::vector<float>& x, QuantShape s) { return dequantize(quantize_fp8(x.data(), s, Fp8Scaling::block_1x128)); }},
      {"fp8 128x128", 0.030, 0.030, 0.30,
       [](const std::vector<float>& x, QuantShape s) { return dequantize(quantize_fp8(x.data(), s, Fp8Scaling::block_128x128)); }},
      {"mxfp4", 0.13, 0.13, 0.14,
       [](const std::vector<float>& x, QuantShape s) { return dequantize(quantize_mxfp4(x.data(), s)); }},
      {"nvfp4", 0.11, 0.11, 0.145,
       [](const std::vector<float>& x, QuantShape s) { return dequantize(quantize_nvfp4(x.data(), s)); }},
  };
  std::printf("quantizer error, %lldx%lldx%lld; N(0,1) | rows N(0,1) * 2^U(-8,8): Frobenius, worst row\n",
              static_cast<long long>(shape.batches), static_cast<long long>(shape.rows), static_cast<long long>(shape.k));
  for (const Case& c : cases) {
    const double normal_error = relative_frobenius_error(normal, c.run(normal, shape));
    const std::vector<float> uneven_back = c.run(uneven, shape);
    const double uneven_error = relative_frobenius_error(uneven, uneven_back);
    const double uneven_worst = worst_row_error(uneven, uneven_back, shape.k);
    std::printf("  %-16s %.4f | %.4f %.4f\n", c.name, normal_error, uneven_error, uneven_worst);
    INFO(c.name << ": " << normal_error << " | " << uneven_error << " " << uneven_worst);
    CHECK(normal_error < c.normal_bound);
    CHECK(uneven_error < c.uneven_bound);
    CHECK(uneven_worst < c.uneven_worst_row_bound);
  }
}
