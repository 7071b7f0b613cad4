// Block-scaled quantizers and their inverses; the layouts and the rounding policy are defined in
// include/moejit/formats.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "moejit/errors.hpp"
#include "moejit/formats.hpp"
#include "moejit/common/w4_layout.cuh"  // the W4 SM90 byte layout, shared with the kernels

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

// Where the scale of block (batch b, block row sr, block column sc) lives (formats.hpp): 1x128
// activation scales are K-block-major over all rows of all batches, the others row-major per batch.
std::size_t fp8_scale_index(QuantShape shape, ScaleShape scale_shape, Fp8Scaling scaling, std::int64_t b,
                            std::int64_t sr, std::int64_t sc) {
  if (scaling == Fp8Scaling::block_1x128) return static_cast<std::size_t>(sc * shape.batches * shape.rows + b * shape.rows + sr);
  return static_cast<std::size_t>((b * scale_shape.rows + sr) * scale_shape.cols + sc);
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
  for (std::int64_t b = 0; b < shape.batches; ++b) {
    for (std::int64_t r0 = 0; r0 < shape.rows; r0 += block.rows) {
      const std::int64_t r1 = std::min(shape.rows, r0 + block.rows);
      for (std::int64_t c0 = 0; c0 < shape.k; c0 += block.cols) {
        const std::int64_t c1 = std::min(shape.k, c0 + block.cols);
        float amax = 0.0f;
        for (std::int64_t r = r0; r < r1; ++r)
          amax = std::max(amax, block_amax(values + (b * shape.rows + r) * shape.k + c0, c1 - c0).amax);
        const float scale = fp8_scale(amax);
        out.scales[fp8_scale_index(shape, scale_shape, scaling, b, r0 / block.rows, c0 / block.cols)] = scale;
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
        const float scale =
            tensor.scales[fp8_scale_index(shape, scale_shape, tensor.scaling, b, r / block.rows, c / block.cols)];
        out[i] = e4m3_to_float(tensor.data[i]) * scale;
      }
  return out;
}

std::vector<float> fp8_kernel_scales_a(const Fp8Tensor& tensor) {
  const char* function = "fp8_kernel_scales_a";
  const QuantShape shape = tensor.shape;
  const ScaleShape scale_shape = fp8_scale_shape(function, shape, tensor.scaling);
  check_size(function, "tensor.scales", tensor.scales, shape.batches * scale_shape.rows * scale_shape.cols, shape);
  if (tensor.scaling == Fp8Scaling::block_128x128)
    bad(function, "tensor.scaling=128x128 (activations take tensor, row or 1x128 scales)");
  if (tensor.scaling == Fp8Scaling::block_1x128) return tensor.scales;
  const std::int64_t rows = shape.batches * shape.rows, k_blocks = ceil_div(shape.k, kFp8ScaleBlock);
  std::vector<float> out(static_cast<std::size_t>(k_blocks * rows));
  for (std::int64_t kb = 0; kb < k_blocks; ++kb)
    for (std::int64_t row = 0; row < rows; ++row)
      out[kb * rows + row] =
          tensor.scaling == Fp8Scaling::per_row ? tensor.scales[row] : tensor.scales[row / shape.rows];
  return out;
}

std::vector<float> fp8_kernel_scales_b(const Fp8Tensor& tensor) {
  const char* function = "fp8_kernel_scales_b";
  const QuantShape shape = tensor.shape;
  const ScaleShape scale_shape = fp8_scale_shape(function, shape, tensor.scaling);
  check_size(function, "tensor.scales", tensor.scales, shape.batches * scale_shape.rows * scale_shape.cols, shape);
  if (tensor.scaling == Fp8Scaling::block_1x128)
    bad(function, "tensor.scaling={} (weights take tensor, per-row (one per output channel) or 128x128 scales)",
        scaling_name(tensor.scaling));
  // per_row: [batches][rows][1] is already the per-channel layout (GroupedGemmArgs::b_scale_layout = channels).
  if (tensor.scaling == Fp8Scaling::block_128x128 || tensor.scaling == Fp8Scaling::per_row) return tensor.scales;
  const std::int64_t n_blocks = ceil_div(shape.rows, kFp8ScaleBlock), k_blocks = ceil_div(shape.k, kFp8ScaleBlock);
  std::vector<float> out(static_cast<std::size_t>(shape.batches * n_blocks * k_blocks));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = tensor.scales[i / (n_blocks * k_blocks)];
  return out;
}

ScaleB fp8_kernel_scale_layout_b(const Fp8Tensor& tensor) {
  return tensor.scaling == Fp8Scaling::per_row ? ScaleB::channels : ScaleB::blocks;
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

// ---- W4 SM90: pre-arranged 4-bit weights (layout in formats.hpp) ----
namespace moejit {
namespace {

struct W4Layout {
  int scale_block;        // K elements per scale: 32 (MXFP4) or 16 (NVFP4)
  std::uint8_t pad_scale; // scale of rows past N / K past the end
  bool nvfp4;
  int quad_scale_bytes() const { return w4_sm90_quad_scale_bytes(nvfp4); }
  std::int64_t block_bytes() const { return w4_sm90_block_bytes(nvfp4); }
  std::int64_t header_bytes() const { return w4_sm90_header_bytes(nvfp4); }
  std::int64_t run_bytes(std::int64_t k_blocks) const { return header_bytes() + k_blocks * block_bytes(); }
};

W4Layout w4_layout(const char* function, QuantFormat format) {
  if (format == QuantFormat::mxfp4) return {kMxfp4Block, 127, false};
  if (format == QuantFormat::nvfp4) return {kNvfp4Block, 0, true};
  bad(function, "format={} (expected mxfp4 or nvfp4)", format_name(format));
}

// MXFP4 in the W4 SM90 layout (formats.hpp): each row's block scales are stored relative to a
// row exponent e = max(0, largest scale of a nonzero finite block - 128), so that every stored
// scale is <= 128 and the Hopper kernel widens each code pair with one multiply (2^(s - 1) must be
// a BF16 number); the kernels multiply the row's sums by 2^e. A NaN block (scale 0xFF) is stored
// as scale 129 with zero codes (the kernel's factor is then infinity, and 0 x inf is NaN). Blocks
// more than 2^128 below their row's largest are flushed to zero (scale 0, zero codes); all-zero
// blocks keep any scale in range.
constexpr std::uint8_t kW4NanScale = 129;

struct RebasedMxfp4 {
  Mxfp4Tensor tensor;                    // stored codes and scales
  std::vector<std::uint8_t> exponents;   // [batches][rows]
};

RebasedMxfp4 rebase_mxfp4_rows(const Mxfp4Tensor& in) {
  RebasedMxfp4 out{in, std::vector<std::uint8_t>(static_cast<std::size_t>(in.shape.batches * in.shape.rows), 0)};
  const std::int64_t blocks_per_row = in.shape.k / kMxfp4Block, bytes_per_block = kMxfp4Block / 2;
  auto zero_codes = [](const std::uint8_t* codes, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i)
      if ((codes[i] & 0x77) != 0) return false;  // a code of magnitude 0 is +-0
    return true;
  };
  std::vector<char> zero;  // per block of the row: all codes +-0
  for (std::int64_t row = 0; row < in.shape.batches * in.shape.rows; ++row) {
    const std::uint8_t* scales = in.scales.data() + row * blocks_per_row;
    const std::uint8_t* codes = in.data.data() + row * blocks_per_row * bytes_per_block;
    zero.resize(static_cast<std::size_t>(blocks_per_row));
    int largest = -1;
    for (std::int64_t b = 0; b < blocks_per_row; ++b) {
      zero[b] = zero_codes(codes + b * bytes_per_block, bytes_per_block);
      if (scales[b] != 0xFF && !zero[b]) largest = std::max(largest, static_cast<int>(scales[b]));
    }
    const int e = std::max(0, largest - 128);
    out.exponents[row] = static_cast<std::uint8_t>(e);
    for (std::int64_t b = 0; b < blocks_per_row; ++b) {
      std::uint8_t& stored = out.tensor.scales[row * blocks_per_row + b];
      std::uint8_t* stored_codes = out.tensor.data.data() + (row * blocks_per_row + b) * bytes_per_block;
      const int scale = scales[b];
      if (scale == 0xFF || (scale < e && !zero[b])) {  // NaN, or flushed
        stored = scale == 0xFF ? kW4NanScale : 0;
        std::fill(stored_codes, stored_codes + bytes_per_block, 0);
      } else {
        stored = static_cast<std::uint8_t>(std::clamp(scale - e, 0, 128));  // exact unless all-zero
      }
    }
  }
  return out;
}

// NVFP4 in the W4 SM90 layout (formats.hpp; w4_layout.cuh, w4_sm90_nvfp4_stored_scale): every
// block scale in the stored encoding the kernels widen in two instructions per pair of rows. The
// encoding holds nonzero magnitudes and NaN; the block's codes take the rest: a negative scale's
// sign flips every code's sign bit (exact), a zero scale zeroes the codes (the block is zero either
// way), so the packed tensor means exactly what the input does.
Nvfp4Tensor encode_nvfp4_scales(const Nvfp4Tensor& in) {
  Nvfp4Tensor out = in;
  constexpr std::int64_t kBlockBytes = kNvfp4Block / 2;
  for (std::size_t b = 0; b < in.scales.size(); ++b) {
    const unsigned scale = in.scales[b], magnitude = scale & 0x7Fu;
    std::uint8_t* codes = out.data.data() + b * kBlockBytes;
    if (magnitude == 0x7F) {
      out.scales[b] = static_cast<std::uint8_t>(kW4Sm90Nvfp4NanScale);
    } else if (magnitude == 0) {
      out.scales[b] = 0;
      std::fill(codes, codes + kBlockBytes, 0);
    } else {
      out.scales[b] = static_cast<std::uint8_t>(w4_sm90_nvfp4_stored_scale(magnitude));
      if (scale & 0x80u)
        for (std::int64_t i = 0; i < kBlockBytes; ++i) codes[i] ^= 0x88;  // both codes' sign bits
    }
  }
  return out;
}

// Calls visit(code_byte_offset, group, row, k) for each code byte (k = the lower of its two K),
// visit_scale(scale_byte_offset, group, row, scale_block) for each scale byte and (MXFP4)
// visit_exponent(byte_offset, group, row) for each row-exponent byte of the packed layout.
template <typename Code, typename Scale, typename Exponent>
void for_each_w4_byte(QuantShape shape, const W4Layout& layout, Code&& visit, Scale&& visit_scale,
                      Exponent&& visit_exponent) {
  const std::int64_t n_blocks = ceil_div(shape.rows, 128), k_blocks = ceil_div(shape.k, 64);
  const std::int64_t block_bytes = layout.block_bytes(), run_bytes = layout.run_bytes(k_blocks);
  for (std::int64_t g = 0; g < shape.batches; ++g)
    for (std::int64_t nb = 0; nb < n_blocks; ++nb) {
      const std::int64_t run = (g * n_blocks + nb) * run_bytes;
      for (std::int64_t i = 0; i < layout.header_bytes(); ++i) visit_exponent(run + i, g, nb * 128 + i);
      for (std::int64_t kb = 0; kb < k_blocks; ++kb) {
        const std::int64_t base = run + layout.header_bytes() + kb * block_bytes;
        for (int w = 0; w < 2; ++w)
          for (int t = 0; t < 128; ++t) {
            const int warp = t / 32, lane = t % 32, c = lane % 4;
            const std::int64_t r0 = nb * 128 + w * 64 + warp * 16 + lane / 4, rows[2] = {r0, r0 + 8};
            for (int kk = 0; kk < 4; ++kk)
              for (int i = 0; i < 4; ++i)
                visit(base + (w * 128 + t) * 16 + kk * 4 + i, g, rows[i & 1], kb * 64 + kk * 16 + 2 * c + (i >= 2 ? 8 : 0));
            // The four threads of a quad (c = 0..3) share one copy of their scales: visited by c = 0.
            if (c == 0)
              for (int j = 0; j < layout.quad_scale_bytes(); ++j)
                visit_scale(base + w4_sm90_scale_offset(w * 128 + t, layout.nvfp4) + j, g, rows[j & 1],
                            kb * (64 / layout.scale_block) + j / 2);
          }
      }
    }
}

// Rewrites every 32-bit code word of every block (bytes [0, 4096) of each): to_stored = true turns
// logical words (byte p = code pair p) into the stored bit-scattered ones (w4_layout.cuh,
// w4_sm90_interleave_codes), false turns stored words back into logical ones.
void convert_code_words(std::vector<std::uint8_t>& bytes, QuantShape shape, const W4Layout& layout, bool to_stored) {
  const std::int64_t n_blocks = ceil_div(shape.rows, 128), k_blocks = ceil_div(shape.k, 64);
  const std::int64_t run_bytes = layout.run_bytes(k_blocks);
  for (std::int64_t run = 0; run < shape.batches * n_blocks; ++run)
    for (std::int64_t kb = 0; kb < k_blocks; ++kb) {
      std::uint8_t* codes = bytes.data() + run * run_bytes + layout.header_bytes() + kb * layout.block_bytes();
      for (int at = 0; at < 4096; at += 4) {
        std::uint8_t* b = codes + at;
        const unsigned word = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<unsigned>(b[3]) << 24);
        const unsigned stored = to_stored ? w4_sm90_interleave_codes(word) : 0;
        for (int p = 0; p < 4; ++p)
          b[p] = static_cast<std::uint8_t>(to_stored ? stored >> (8 * p) : w4_sm90_code_pair(word, p));
      }
    }
}

// The packed bytes of checked `tensor`; exponents: MXFP4's row exponents ([batches][rows]; rows
// past N get 0), empty for NVFP4.
template <typename Tensor>
std::vector<std::uint8_t> write_w4(const Tensor& tensor, QuantFormat format, const W4Layout& layout,
                                   const std::vector<std::uint8_t>& exponents) {
  const QuantShape shape = tensor.shape;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(w4_sm90_packed_bytes(shape, format)));
  const std::int64_t scale_cols = shape.k / layout.scale_block;
  for_each_w4_byte(
      shape, layout,
      [&](std::int64_t at, std::int64_t g, std::int64_t r, std::int64_t k) {
        if (r < shape.rows && k < shape.k) out[at] = tensor.data[((g * shape.rows + r) * shape.k + k) / 2];
      },
      [&](std::int64_t at, std::int64_t g, std::int64_t r, std::int64_t blk) {
        out[at] = r < shape.rows && blk < scale_cols ? tensor.scales[(g * shape.rows + r) * scale_cols + blk]
                                                     : layout.pad_scale;
      },
      [&](std::int64_t at, std::int64_t g, std::int64_t r) {
        out[at] = r < shape.rows ? exponents[g * shape.rows + r] : 0;
      });
  convert_code_words(out, shape, layout, true);
  return out;
}

// MXFP4 tensors are rebased on their row exponents first (rebase_mxfp4_rows).
template <typename Tensor>
std::vector<std::uint8_t> pack_w4(const char* function, const Tensor& tensor, QuantFormat format) {
  const QuantShape shape = tensor.shape;
  const W4Layout layout = w4_layout(function, format);
  check_shape(function, shape, layout.scale_block, format_name(format));
  check_size(function, "weights.data", tensor.data, shape.elements() / 2, shape);
  check_size(function, "weights.scales", tensor.scales, shape.elements() / layout.scale_block, shape);
  if constexpr (std::is_same_v<Tensor, Mxfp4Tensor>) {
    const RebasedMxfp4 rebased = rebase_mxfp4_rows(tensor);
    return write_w4(rebased.tensor, format, layout, rebased.exponents);
  } else {
    return write_w4(encode_nvfp4_scales(tensor), format, layout, {});
  }
}

template <typename Tensor>
Tensor unpack_w4(const char* function, const std::vector<std::uint8_t>& packed, QuantShape shape, QuantFormat format) {
  const W4Layout layout = w4_layout(function, format);
  check_shape(function, shape, layout.scale_block, format_name(format));
  check_size(function, "packed", packed, w4_sm90_packed_bytes(shape, format), shape);
  std::vector<std::uint8_t> logical = packed;
  convert_code_words(logical, shape, layout, false);
  Tensor out;
  out.shape = shape;
  out.data.resize(static_cast<std::size_t>(shape.elements() / 2));
  out.scales.resize(static_cast<std::size_t>(shape.elements() / layout.scale_block));
  const std::int64_t scale_cols = shape.k / layout.scale_block;
  std::vector<std::uint8_t> exponents(layout.nvfp4 ? 0 : static_cast<std::size_t>(shape.batches * shape.rows));
  for_each_w4_byte(
      shape, layout,
      [&](std::int64_t at, std::int64_t g, std::int64_t r, std::int64_t k) {
        if (r < shape.rows && k < shape.k) out.data[((g * shape.rows + r) * shape.k + k) / 2] = logical[at];
      },
      [&](std::int64_t at, std::int64_t g, std::int64_t r, std::int64_t blk) {
        if (r < shape.rows && blk < scale_cols) out.scales[(g * shape.rows + r) * scale_cols + blk] = packed[at];
      },
      [&](std::int64_t at, std::int64_t g, std::int64_t r) {
        if (r < shape.rows) exponents[g * shape.rows + r] = packed[at];
      });
  if (layout.nvfp4) {  // stored scales back to E4M3
    for (std::uint8_t& scale : out.scales) scale = static_cast<std::uint8_t>(w4_sm90_nvfp4_scale_e4m3(scale));
  } else {  // MXFP4: stored scales back to E8M0 (row exponent added; 129 marks a NaN block)
    for (std::size_t i = 0; i < out.scales.size(); ++i) {
      const std::uint8_t stored = out.scales[i];
      const int scale = stored == kW4NanScale ? 0xFF : stored + exponents[i / scale_cols];
      out.scales[i] = static_cast<std::uint8_t>(std::min(scale, 0xFF));
    }
  }
  return out;
}

}  // namespace

std::int64_t w4_sm90_packed_bytes(QuantShape shape, QuantFormat format) {
  const char* function = "w4_sm90_packed_bytes";
  const W4Layout layout = w4_layout(function, format);
  check_shape(function, shape, layout.scale_block, format_name(format));
  return shape.batches * ceil_div(shape.rows, 128) * layout.run_bytes(ceil_div(shape.k, 64));
}

std::vector<std::uint8_t> pack_w4_sm90(const Mxfp4Tensor& weights) {
  return pack_w4("pack_w4_sm90(Mxfp4Tensor)", weights, QuantFormat::mxfp4);
}

std::vector<std::uint8_t> pack_w4_sm90(const Nvfp4Tensor& weights) {
  check_size("pack_w4_sm90(Nvfp4Tensor)", "weights.tensor_scales", weights.tensor_scales, weights.shape.batches,
             weights.shape);
  return pack_w4("pack_w4_sm90(Nvfp4Tensor)", weights, QuantFormat::nvfp4);
}

Mxfp4Tensor unpack_mxfp4_w4_sm90(const std::vector<std::uint8_t>& packed, QuantShape shape) {
  return unpack_w4<Mxfp4Tensor>("unpack_mxfp4_w4_sm90", packed, shape, QuantFormat::mxfp4);
}

Nvfp4Tensor unpack_nvfp4_w4_sm90(const std::vector<std::uint8_t>& packed, QuantShape shape,
                                 const std::vector<float>& tensor_scales) {
  const char* function = "unpack_nvfp4_w4_sm90";
  check_size(function, "tensor_scales", tensor_scales, shape.batches, shape);
  Nvfp4Tensor out = unpack_w4<Nvfp4Tensor>(function, packed, shape, QuantFormat::nvfp4);
  out.tensor_scales = tensor_scales;
  return out;
}

}  // namespace moejit
