// Host-side number formats: element conversions for preparing operands and checking results, and
// the quantize/pack and dequantize functions that convert weights and activations offline into the
// byte layouts moejit's kernels read. Facts about the formats: docs/formats.md of the project
// (OCP MX v1.0, NVIDIA's NVFP4 and FP8); the layouts below are moejit's own and are defined here only.
//
// 16-bit conversions (bf16, f16): round to nearest even; NaN stays NaN; overflow becomes infinity
// (as the hardware does).
//
// ---------------------------------------------------------------------------------------------
// Layouts (all arrays row-major, nothing padded unless said; "batches" below is QuantShape::batches)
//
//   Tensors are [batches][rows][k] with k contiguous:
//     weights      E x N x K       batches = E experts, rows = N
//     activations  M x K           batches = 1, rows = M (contiguous layout)
//                  E x cap x K     batches = E, rows = capacity (masked layout)
//
//   FP8 E4M3 (Fp8Tensor): data[b][r][c], one byte per element, k any positive size.
//     Value = e4m3_to_float(data) * scale, scale = amax / 448 over the scale's region.
//     scales (fp32) by Fp8Scaling; fp8_scale_shape gives the per-batch extent {scale_rows, scale_cols}:
//       per_tensor     [batches][1][1]                       one scale per expert / tensor
//       per_row        [batches][rows][1]                    per token (A) or per output channel (B)
//       block_1x128    [ceil(k/128)][batches * rows]         activations (DeepSeek-V3), K-BLOCK-MAJOR:
//                      scale of row r of batch b, k block kb at [kb * batches * rows + b * rows + r]
//       block_128x128  [batches][ceil(rows/128)][ceil(k/128)] weights (DeepSeek-V3)
//     block_1x128 is K-block-major (DeepGEMM's MN-major scales) because that is what the Hopper FP8
//     kernel reads: per K block, a warp's 8 rows are 8 consecutive floats. With batches = E and
//     rows = capacity (masked layout) it is [ceil(k/128)][E * capacity], the same form.
//     These two (1x128 for A, 128x128 for B) are exactly GroupedGemmArgs::a_scales / b_scales for
//     ab_type = e4m3; fp8_kernel_scales_a/b convert per-tensor and per-row scalings to them.
//     A partial last block (k or rows not a multiple of 128, e.g. gpt-oss's K = 2880) has its
//     own scale over the elements present; kernels treat elements past the tensor as zero.
//
//   MXFP4 (Mxfp4Tensor): k must be a multiple of 32.
//     data[b][r][k/2]: two E2M1 codes per byte, the lower k index in the low nibble
//       (byte j of a row holds k = 2j in bits 0-3 and k = 2j+1 in bits 4-7).
//     scales[b][r][k/32]: E8M0, block i covers k in [32i, 32i+32). Value = e2m1 * 2^(scale-127).
//
//   NVFP4 (Nvfp4Tensor): k must be a multiple of 16.
//     data[b][r][k/2]: as MXFP4 (lower k index in the low nibble).
//     scales[b][r][k/16]: E4M3 (positive), block i covers k in [16i, 16i+16).
//     tensor_scales[b]: fp32, one per batch (per expert for weights, one for M x K activations).
//     Value = e2m1 * e4m3_to_float(scale) * tensor_scale.
//
//   Kernels that want another arrangement (shuffled FP4 weights, transposed or TMA-aligned scale
//   arrays) get it from a separate pack step; these plain layouts stay the interchange form.
//
//   W4 SM90 (pack_w4_sm90): MXFP4 / NVFP4 weights [E][N][K] pre-arranged for the Hopper weight-only
//   kernel (GroupedGemmArgs::b with b_type = mxfp4 | nvfp4; spec b=mxfp4|nvfp4); the portable
//   family reads the same layout. Per expert, per 128 weight rows (ceil(N/128) runs, experts one
//   after another, so experts packed one by one concatenate into the whole tensor): a header of
//   header_bytes = 128 (MXFP4: byte i is the exponent e of row 128 nb + i, 0 past N) or 0 (NVFP4),
//   then ceil(K/64) blocks of 128 weight rows x 64 K, each one contiguous run of block_bytes =
//   4096 + 256 (MXFP4) or 4096 + 512 (NVFP4) bytes, one bulk copy per stage:
//     bytes [0, 4096):   [w 0..1][t 0..127][16 bytes of codes]
//     bytes [4096, ...): [w 0..1][quad t / 4: 0..31][4 (MXFP4) or 8 (NVFP4) bytes of scales]
//   (the four threads of a quad multiply the same rows and read one copy of their scales; until
//   2026-11-25, docs/perf.md v13, each thread had its own: blocks of 5120 / 6144 bytes, which the
//   kernels of this version no longer read: weights packed before must be packed again)
//   with warp = t / 32, lane = t % 32, r0 = 128 nb + 64 w + 16 warp + lane / 4, r1 = r0 + 8,
//   c = lane % 4 (the m64k16 register fragment of wgmma's A operand, so each thread widens exactly
//   the elements it multiplies): code pair 4 kk + i (kk = 0..3) holds the E2M1 codes (A = lower K,
//   B = the next) of row {r0, r1, r0, r1}[i] at K = 64 kb + 16 kk + 2c + {0, 0, 8, 8}[i] and the
//   next K. The four pairs of word kk are stored bit-scattered, not one per byte: bits m, e0, e1,
//   sign of code A of pair i = 0..2 at bits 6, 7, 8, 15 (B: 22, 23, 24, 31) of the little-endian
//   word plus 3 i, mod 32; pair 3's A at bits 3, 4, 0, 1 (B: 19, 20, 16, 17), so that the kernel
//   widens a pair with a rotate and an AND (w4_sm90_code_bit / w4_sm90_interleave_codes /
//   w4_sm90_code_pair in kernel_templates/moejit/common/w4_layout.cuh). Layout history, each a
//   breaking change (weights packed by an earlier pack_w4_sm90 must be packed again; nothing in
//   the bytes tells the layouts apart): one pair per byte until v12 (2026-11-25), 2-bit fields
//   for a table-lookup byte permute in v12-v14, the scattered bits since v15, NVFP4's scales
//   re-encoded since v20 (docs/perf.md).
//   Scale byte j: row {r0, r1}[j % 2]; MXFP4: 32-block 2 kb + j / 2 (j = 0..3); NVFP4: 16-block
//   4 kb + j / 2 (j = 0..7). Rows past N and K past the end: code 0, scale 127 (MXFP4) / 0
//   (NVFP4). NVFP4's per-expert fp32 tensor scales are not in the blocks: they are
//   GroupedGemmArgs::b_tensor_scales (Nvfp4Tensor::tensor_scales as they are).
//   NVFP4 scales are stored re-encoded (since layout 4), one byte each still: b = (E << 3) | M for
//   2^(E - 10) (1 + M / 8), which holds every E4M3 magnitude but 0 and NaN (E4M3 subnormals as
//   E = 1..3, normals as E = e + 3), so that the kernels widen a scale with a shift and an add
//   (w4_sm90_nvfp4_stored_scale / w4_sm90_nvfp4_factor_bits in common/w4_layout.cuh). A negative
//   scale is stored as its magnitude with the block's code signs flipped; a zero scale as 0 with
//   zero codes; a NaN scale as 172 (NaN out). unpack_nvfp4_w4_sm90 returns E4M3 scales and codes
//   that dequantize to the same values: the original ones but for those three kinds of blocks.
//   MXFP4 scales are stored relative to their row's exponent e = max(0, largest E8M0 scale of the
//   row's nonzero finite blocks - 128): stored s' = s - e in 0..128, so that the Hopper kernel
//   widens each code pair with one exact BF16 multiply by 2^(s' - 1); the kernels multiply each
//   row's sums by 2^e (e = 0 for any realistic weights: a block scale above 2^1 needs |w| > 8).
//   A NaN block (E8M0 0xFF) is stored as s' = 129 with zero codes (NaN out, as the format says).
//   A nonzero block more than 2^128 below its row's largest is flushed to zero (s' = 0, codes 0):
//   the one case where the layout does not hold the tensor exactly. All-zero blocks keep any s'.
//   unpack_mxfp4_w4_sm90 returns s' + e (0xFF for a NaN block): the original codes and scales but
//   for NaN blocks' codes, flushed blocks and the scales of all-zero blocks.
//
// Rounding and special values, the same in every quantizer:
//   - elements round to nearest, ties to even;
//   - finite values past the largest finite element saturate (E4M3: +-448, E2M1: +-6), and so do
//     infinities (as PTX cvt.satfinite does);
//   - amax (for scales) is taken over finite elements only;
//   - NaN: E4M3 keeps it (0x7F with the sign); FP4 has no NaN code, so a NaN element makes its
//     block's scale NaN (MXFP4: E8M0 0xFF, NVFP4: E4M3 0x7F) and its codes 0;
//   - an all-zero region gets FP8 scale 1.0, MXFP4 scale 2^-127 (E8M0 0x00, the smallest, as the
//     OCP spec says), NVFP4 block scale 0 (and tensor scale 1.0 for an all-zero tensor).
// Every function checks its arguments and throws InvalidArgument naming the bad one.
// ---------------------------------------------------------------------------------------------
#pragma once
#include <cstdint>
#include <vector>
#include "moejit/spec.hpp"

namespace moejit {

std::uint16_t float_to_bf16(float value);
float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_f16(float value);
float f16_to_float(std::uint16_t bits);

// ---- 8- and 4-bit elements ----

// FP8 E4M3 (OCP e4m3fn): bias 7, no infinities, largest finite 448, NaN = S.1111.111.
std::uint8_t float_to_e4m3(float value);  // nearest even; past 448 (and inf) -> +-448; NaN -> NaN
float e4m3_to_float(std::uint8_t bits);

// FP4 E2M1: codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign. Only the low nibble is read.
std::uint8_t float_to_e2m1(float value);  // nearest even; past 6 (and inf) -> +-6; NaN throws
float e2m1_to_float(std::uint8_t code);

// E8M0 scale: 2^(bits - 127); 0xFF is NaN; there is no zero.
float e8m0_to_float(std::uint8_t bits);

// ---- Block-scaled tensors ----

enum class QuantFormat { fp8_e4m3, mxfp4, nvfp4 };
enum class Fp8Scaling { per_tensor, per_row, block_1x128, block_128x128 };
const char* format_name(QuantFormat format);     // "fp8_e4m3", "mxfp4", "nvfp4"
const char* scaling_name(Fp8Scaling scaling);    // "tensor", "row", "1x128", "128x128"

inline constexpr int kFp8ScaleBlock = 128;  // DeepSeek-V3: 1x128 activations, 128x128 weights
inline constexpr int kMxfp4Block = 32;      // OCP MX block size
inline constexpr int kNvfp4Block = 16;      // NVFP4 block size

// [batches][rows][k], k contiguous (see the layouts above).
struct QuantShape {
  std::int64_t batches = 1;
  std::int64_t rows = 0;
  std::int64_t k = 0;
  std::int64_t elements() const { return batches * rows * k; }
  bool operator==(const QuantShape&) const = default;
};

// Per-batch extent of an FP8 scale array: scales hold batches * rows * cols floats.
struct ScaleShape {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  bool operator==(const ScaleShape&) const = default;
};
ScaleShape fp8_scale_shape(QuantShape shape, Fp8Scaling scaling);

struct Fp8Tensor {
  QuantShape shape;
  Fp8Scaling scaling = Fp8Scaling::per_tensor;
  std::vector<std::uint8_t> data;  // E4M3 codes [batches][rows][k]
  std::vector<float> scales;       // see Layouts: per scaling (block_1x128 is K-block-major)
};

struct Mxfp4Tensor {
  QuantShape shape;
  std::vector<std::uint8_t> data;    // [batches][rows][k/2], lower k in the low nibble
  std::vector<std::uint8_t> scales;  // E8M0 [batches][rows][k/32]
};

struct Nvfp4Tensor {
  QuantShape shape;
  std::vector<std::uint8_t> data;    // [batches][rows][k/2], lower k in the low nibble
  std::vector<std::uint8_t> scales;  // E4M3 [batches][rows][k/16]
  std::vector<float> tensor_scales;  // [batches]
};

// values: shape.elements() floats, [batches][rows][k].
Fp8Tensor quantize_fp8(const float* values, QuantShape shape, Fp8Scaling scaling);
Mxfp4Tensor quantize_mxfp4(const float* values, QuantShape shape);
Nvfp4Tensor quantize_nvfp4(const float* values, QuantShape shape);

// FP8 scales as the FP8 grouped GEMM takes them (GroupedGemmArgs::a_scales and b_scales):
//   a: [ceil(k/128)][batches * rows] from per_tensor, per_row or block_1x128 scaling (the latter: a copy);
//   b: [batches][ceil(rows/128)][ceil(k/128)] from per_tensor or block_128x128 (the latter: a copy),
//      or [batches][rows] from per_row (one per output channel; a copy): that layout is
//      GroupedGemmArgs::b_scale_layout = ScaleB::channels (fp8_kernel_scale_layout_b says which).
// Exact (each element keeps its scale). fp8_kernel_scales_b throws InvalidArgument for block_1x128
// weights, fp8_kernel_scales_a for block_128x128 activations.
std::vector<float> fp8_kernel_scales_a(const Fp8Tensor& activations);
std::vector<float> fp8_kernel_scales_b(const Fp8Tensor& weights);
ScaleB fp8_kernel_scale_layout_b(const Fp8Tensor& weights);  // channels for per_row, else blocks

// 4-bit weights pre-arranged for the Hopper weight-only kernel (layout "W4 SM90" above); the
// tensor's batches are the experts, rows = N. Sizes are checked against the shape.
// The layout's version: 1 one pair per byte, 2 (v12) the 2-bit-field interleave, 3 (v15) the
// scattered bits, 4 (v20) NVFP4's scales re-encoded (MXFP4 bytes as in 3). The packed bytes do not carry it and the kernels cannot tell the layouts apart:
// whoever stores packed weights (a converted checkpoint) keeps this number beside them and packs
// again when it differs.
inline constexpr int kW4Sm90LayoutVersion = 4;
std::int64_t w4_sm90_packed_bytes(QuantShape shape, QuantFormat format);  // format: mxfp4 | nvfp4
std::vector<std::uint8_t> pack_w4_sm90(const Mxfp4Tensor& weights);
std::vector<std::uint8_t> pack_w4_sm90(const Nvfp4Tensor& weights);
// The inverse, for checks: the interchange codes and block scales back from the packed blocks
// (NVFP4: tensor_scales are copied from `tensor_scales`, which must hold shape.batches entries).
Mxfp4Tensor unpack_mxfp4_w4_sm90(const std::vector<std::uint8_t>& packed, QuantShape shape);
Nvfp4Tensor unpack_nvfp4_w4_sm90(const std::vector<std::uint8_t>& packed, QuantShape shape,
                                 const std::vector<float>& tensor_scales);

// Back to [batches][rows][k] floats. The tensor's array sizes are checked against its shape, so
// tensors assembled from a checkpoint can be dequantized as well.
std::vector<float> dequantize(const Fp8Tensor& tensor);
std::vector<float> dequantize(const Mxfp4Tensor& tensor);
std::vector<float> dequantize(const Nvfp4Tensor& tensor);

}  // namespace moejit
