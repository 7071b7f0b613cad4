// Block-scaled quantizers and their inverses; the layouts and the rounding policy are defined in
// include/moejit/formats.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "moejit/errors.hpp"
#include "moejit/formats.hpp"

namespace moejit {
namespace {

template <typename... Args>
[[noreturn]] void bad(const char* function, fmt::format_string<Args...> format, Args&&... args) {
  throw InvalidArgument(fmt::format("{}: ", function) + fmt::format(format, std::forward<Args>(args)...));
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Bounds the element count so that the index products below cannot overflow 64 bits (no host
// buffer comes near it).
constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;

void check_shape(const char* function, QuantShape shape, int k_block, const char* format) {
  if (shape.batches < 1) bad(function, "shape.batches={} (expected >= 1)", shape.batches);
  if (shape.rows < 1) bad(function, "shape.rows={} (expected >= 1)", shape.rows);
  if (shape.k < 1) bad(function, "shape.k={} (expected >= 1)", shape.k);
  if (shape.batches > kMaxElements / shape.rows || shape.batches * shape.rows > kMaxElements / shape.k)
    bad(function, "shape={}x{}x{} has more than 2^48 elements", shape.batches, shape.rows, shape.k);
  if (shape.k % k_block)
    bad(function, "shape.k={} (expected a multiple of {}: {} scales blocks of {} along k)", shape.k, k_block, format,
        k_block);
}

void check_values(const char* function, const float* values) {
  if (!values) bad(function, "values is null");
}

template <typename T>
void check_size(const char* function, const char* name, const std::vector<T>& array, std::int64_t expected,
                QuantShape shape) {
  if (static_cast<std::int64_t>(array.size()) != expected)
    bad(function, "{} has {} entries (expected {} for shape {}x{}x{})", name, array.size(), expected, shape.batches,
        shape.rows, shape.k);
}

struct BlockAmax {
  float amax = 0.0f;  // over finite elements: one infinity must not wipe out the block's scale
  bool has_nan = false;
};

BlockAmax block_amax(const float* values, std::int64_t count) {
  BlockAmax out;
  for (std::int64_t i = 0; i < count; ++i) {
    if (std::isnan(values[i])) out.has_nan = true;
    else if (std::isfinite(values[i])) out.amax = std::max(out.amax, std::fabs(values[i]));
  }
  return out;
}

std::uint8_t pack_nibbles(std::uint8_t lower_k, std::uint8_t upper_k) {
  return static_cast<std::uint8_t>((lower_k & 0xF) | (upper_k << 4));
}

std::uint8_t nibble(const std::vector<std::uint8_t>& packed, std::int64_t element) {
  const std::uint8_t byte = packed[static_cast<std::size_t>(element / 2)];
  return element % 2 ? byte >> 4 : byte & 0xF;
}

// Rows and columns one FP8 scale covers; partial blocks at the edges are cut by the shape.
struct Fp8Block {
  std::int64_t rows, cols;
};

Fp8Block fp8_block(const char* function, QuantShape shape, Fp8Scaling scaling) {
  switch (scaling) {
    case Fp8Scaling::per_tensor: return {shape.rows, shape.k};
    case Fp8Scaling::per_row: return {1, shape.k};
    case Fp8Scaling::block_1x128: return {1, kFp8ScaleBlock};
    case Fp8Scaling::block_128x128: return {kFp8ScaleBlock, kFp8ScaleBlock};
  }
  bad(function, "scaling={} (not an Fp8Scaling)", static_cast<int>(scaling));
}

ScaleShape fp8_scale_shape(const char* function, QuantShape shape, Fp8Scaling scaling) {
  check_shape(function, shape, 1, "FP8");
  const Fp8Block block = fp8_block(function, shape, scaling);
  return {ceil_div(shape.rows, block.rows), ceil_div(shape.k, block.cols)};
}

// The largest E4M3 maps to the region's amax (DeepSeek-V3's scale = amax / 448). An all-zero
// region gets 1.0 rather than 0 so that dividing by the scale stays defined.
float fp8_scale(float amax) { return amax > 0.0f ? amax / 448.0f : 1.0f; }

// OCP MX: shared exponent = floor(log2(amax)) - emax(E2M1), emax = 2, so that amax / 2^shared lies
// in [4, 8) and the block's largest element lands on E2M1's top binade (values past 6 saturate).
// Clamped to E8M0's range; an all-zero block gets the smallest scale, as the spec says.
std::uint8_t mx_scale_bits(float amax) {
  if (amax == 0.0f) return 0;
  const int shared_exp = std::ilogb(amax) - 2;
  return static_cast<std::uint8_t>(std::clamp(shared_exp + 127, 0, 254));
}

// NVFP4 tensor scale: the largest E2M1 (6) times the largest E4M3 block scale (448) reaches amax.
float nvfp4_tensor_scale(float amax) { return amax > 0.0f ? amax / (6.0f * 448.0f) : 1.0f; }

}  // namespace

const char* format_name(QuantFormat format) {
  switch (format) {
    case QuantFormat::fp8_e4m3: return "fp8_e4m3";
    case QuantFormat::mxfp4: return "mxfp4";
    case QuantFormat::nvfp4: return "nvfp4";
  }
  bad("format_name", "format={} (not a QuantFormat)", static_cast<int>(format));
}

const char* scaling_name(Fp8Scaling scaling) {
  switch (scaling) {
    case Fp8Scaling::per_tensor: return "tensor";
    case Fp8Scaling::per_row: return "row";
    case Fp8Scaling::block_1x128: return "1x128";
    case Fp8Scaling::block_128x128: return "128x128";
  }
  bad("scaling_name", "scaling={} (not an Fp8Scaling)", static_cast<int>(scaling));
}

ScaleShape fp8_scale_shape(QuantShape shape, Fp8Scaling scaling) {
  return fp8_scale_shape("fp8_scale_shape", shape, scaling);
}

Fp8Tensor quantize_fp8(const float* values, QuantShape shape, Fp8Scaling scaling) {
  check_values("quantize_fp8", values);
  const ScaleShape scale_shape = fp8_scale_shape("quantize_fp8", shape, scaling);
  const Fp8Block block = fp8_block("quantize_fp8", shape, scaling);
  Fp8Tensor out{shape, scaling, std::vector<std::uint8_t>(static_cast<std::size_t>(shape.elements())),
                std::vector<float>(static_cast<std::size_t>(shape.batches * scale_shape.rows * scale_shape.cols))};
  std::size_t scale_index = 0;
  for (std::int64_t b = 0; b < shape.batches; ++b) {
    for (std::int64_t r0 = 0; r0 < shape.rows; r0 += block.rows) {
      const std::int64_t r1 = std::min(shape.rows, r0 + block.rows);
      for (std::int64_t c0 = 0; c0 < shape.k; c0 += block.cols) {
        const std::int64_t c1 = std::min(shape.k, c0 + block.cols);
        float amax = 0.0f;
        for (std::int64_t r = r0; r < r1; ++r)
          amax = std::max(amax, block_amax(values + (b * shape.rows + r) * shape.k + c0, c1 - c0).amax);
        const float scale = fp8_scale(amax);
        out.scales[scale_index++] = scale;
        for (std::int64_t r = r0; r < r1; ++r) {
          const std::int64_t row = (b * shape.rows + r) * shape.k;
          for (std::int64_t c = c0; c < c1; ++c) out.data[row + c] = float_to_e4m3(values[row + c] / scale);
        }
      }
    }
  }
  return out;
}

std::vector<float> dequantize(const Fp8Tensor& tensor) {
  const char* function = "dequantize(Fp8Tensor)";
  const QuantShape shape = tensor.shape;
  const ScaleShape scale_shape = fp8_scale_shape(function, shape, tensor.scaling);
  const Fp8Block block = fp8_block(function, shape, tensor.scaling);
  check_size(function, "tensor.data", tensor.data, shape.elements(), shape);
  check_size(function, "tensor.scales", tensor.scales, shape.batches * scale_shape.rows * scale_shape.cols, shape);
  std::vector<float> out(static_cast<std::size_t>(shape.elements()));
  for (std::int64_t b = 0; b < shape.batches; ++b)
    for (std::int64_t r = 0; r < shape.rows; ++r)
      for (std::int64_t c = 0; c < shape.k; ++c) {
        const std::int64_t i = (b * shape.rows + r) * shape.k + c;
        const float scale = tensor.scales[(b * scale_shape.rows + r / block.rows) * scale_shape.cols + c / block.cols];
        out[i] = e4m3_to_float(tensor.data[i]) * scale;
      }
  return out;
}

Mxfp4Tensor quantize_mxfp4(const float* values, QuantShape shape) {
  check_values("quantize_mxfp4", values);
  check_shape("quantize_mxfp4", shape, kMxfp4Block, "MXFP4");
  const std::int64_t blocks = shape.elements() / kMxfp4Block;
  Mxfp4Tensor out{shape, std::vector<std::uint8_t>(static_cast<std::size_t>(shape.elements() / 2)),
                  std::vector<std::uint8_t>(static_cast<std::size_t>(blocks))};
  // Blocks never straddle rows (k is a multiple of 32), so the tensor is a flat run of blocks.
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const float* x = values + blk * kMxfp4Block;
    std::uint8_t* packed = out.data.data() + blk * kMxfp4Block / 2;
    const BlockAmax stats = block_amax(x, kMxfp4Block);
    if (stats.has_nan) {
      out.scales[blk] = 0xFF;  // E2M1 has no NaN: the whole block reads back as NaN
      continue;                // codes stay 0
    }
    const std::uint8_t scale = mx_scale_bits(stats.amax);
    out.scales[blk] = scale;
    const int shift = 127 - scale;  // x / 2^(scale-127), exact (a power-of-two scaling)
    for (int i = 0; i < kMxfp4Block; i += 2)
      packed[i / 2] = pack_nibbles(float_to_e2m1(std::ldexp(x[i], shift)), float_to_e2m1(std::ldexp(x[i + 1], shift)));
  }
  return out;
}

std::vector<float> dequantize(const Mxfp4Tensor& tensor) {
  const char* function = "dequantize(Mxfp4Tensor)";
  const QuantShape shape = tensor.shape;
  check_shape(function, shape, kMxfp4Block, "MXFP4");
  check_size(function, "tensor.data", tensor.data, shape.elements() / 2, shape);
  check_size(function, "tensor.scales", tensor.scales, shape.elements() / kMxfp4Block, shape);
  std::vector<float> out(static_cast<std::size_t>(shape.elements()));
  for (std::int64_t i = 0; i < shape.elements(); ++i)
    out[i] = e2m1_to_float(nibble(tensor.data, i)) * e8m0_to_float(tensor.scales[i / kMxfp4Block]);
  return out;
}

Nvfp4Tensor quantize_nvfp4(const float* values, QuantShape shape) {
  check_values("quantize_nvfp4", values);
  check_shape("quantize_nvfp4", shape, kNvfp4Block, "NVFP4");
  const std::int64_t per_batch = shape.rows * shape.k;
  const std::int64_t blocks_per_batch = per_batch / kNvfp4Block;
  Nvfp4Tensor out{shape, std::vector<std::uint8_t>(static_cast<std::size_t>(shape.elements() / 2)),
                  std::vector<std::uint8_t>(static_cast<std::size_t>(shape.batches * blocks_per_batch)),
                  std::vector<float>(static_cast<std::size_t>(shape.batches))};
  for (std::int64_t b = 0; b < shape.batches; ++b) {
    const float tensor_scale = nvfp4_tensor_scale(block_amax(values + b * per_batch, per_batch).amax);
    out.tensor_scales[b] = tensor_scale;
    for (std::int64_t blk = b * blocks_per_batch; blk < (b + 1) * blocks_per_batch; ++blk) {
      const float* x = values + blk * kNvfp4Block;
      std::uint8_t* packed = out.data.data() + blk * kNvfp4Block / 2;
      const BlockAmax stats = block_amax(x, kNvfp4Block);
      if (stats.has_nan) {
        out.scales[blk] = 0x7F;  // E4M3 NaN: E2M1 has no NaN, the block reads back as NaN
        continue;
      }
      // The block's amax maps to E2M1's 6; the scale itself is rounded (to nearest even) to E4M3.
      const std::uint8_t scale = float_to_e4m3(stats.amax / 6.0f / tensor_scale);
      out.scales[blk] = scale;
      const float divisor = e4m3_to_float(scale) * tensor_scale;
      if (divisor == 0.0f) continue;  // zero block (or one below E4M3's smallest scale): codes 0
      for (int i = 0; i < kNvfp4Block; i += 2)
        packed[i / 2] = pack_nibbles(float_to_e2m1(x[i] / divisor), float_to_e2m1(x[i + 1] / divisor));
    }
  }
  return out;
}

std::vector<float> dequantize(const Nvfp4Tensor& tensor) {
  const char* function = "dequantize(Nvfp4Tensor)";
  const QuantShape shape = tensor.shape;
  check_shape(function, shape, kNvfp4Block, "NVFP4");
  check_size(function, "tensor.data", tensor.data, shape.elements() / 2, shape);
  check_size(function, "tensor.scales", tensor.scales, shape.elements() / kNvfp4Block, shape);
  check_size(function, "tensor.tensor_scales", tensor.tensor_scales, shape.batches, shape);
  const std::int64_t per_batch = shape.rows * shape.k;
  std::vector<float> out(static_cast<std::size_t>(shape.elements()));
  for (std::int64_t i = 0; i < shape.elements(); ++i)
    out[i] = e2m1_to_float(nibble(tensor.data, i)) * e4m3_to_float(tensor.scales[i / kNvfp4Block]) *
             tensor.tensor_scales[i / per_batch];
  return out;
}

}  // namespace moejit
