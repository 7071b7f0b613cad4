#include "driver/tensor_map.hpp"

#include <algorithm>
#include <cstring>

#include "driver/driver_api.hpp"

namespace moejit {

static_assert(sizeof(TmaDescriptor) == sizeof(CUtensorMap), "TmaDescriptor must mirror CUtensorMap");

TmaDescriptor make_tma_2d_swizzled(const void* base, DType type, std::uint64_t rows, std::uint64_t cols,
                                   std::uint32_t box_rows, std::uint32_t box_cols) {
  CUtensorMap map;
  cuuint64_t dims[2] = {cols, rows};
  cuuint64_t strides[1] = {cols * static_cast<cuuint64_t>(element_bytes(type))};
  cuuint32_t box[2] = {box_cols, box_rows};
  cuuint32_t element_strides[2] = {1, 1};
  // E4M3 travels as plain bytes: TMA only copies, the wgmma reads them as e4m3.
  CUtensorMapDataType data_type = type == DType::bf16   ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                  : type == DType::f16  ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                  : type == DType::e4m3 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                                        : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  // The swizzle spans a box row: 128 bytes (every operand box and most C boxes), or 64 (the 4-bit
  // fused GEMM1's 32 GLU output columns of bf16, w4_fused_store_staged).
  const std::uint32_t row_bytes = box_cols * element_bytes(type);
  const CUtensorMapSwizzle swizzle = row_bytes == 64   ? CU_TENSOR_MAP_SWIZZLE_64B
                                     : row_bytes == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                       : CU_TENSOR_MAP_SWIZZLE_128B;
  MOEJIT_CU(driver().cuTensorMapEncodeTiled(&map, data_type, 2, const_cast<void*>(base), dims, strides, box,
                                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  TmaDescriptor out;
  std::memcpy(&out, &map, sizeof out);
  return out;
}

TmaDescriptor make_tma_f32_quads(const float* base, std::uint64_t elements, std::uint32_t box_quads) {
  CUtensorMap map;
  cuuint64_t dims[2] = {4, std::max<std::uint64_t>((elements + 3) / 4, 1)};
  cuuint64_t strides[1] = {16};
  cuuint32_t box_dim[2] = {4, box_quads};
  cuuint32_t element_strides[2] = {1, 1};
  MOEJIT_CU(driver().cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(base), dims, strides,
                                            box_dim, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                            CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  TmaDescriptor out;
  std::memcpy(&out, &map, sizeof out);
  return out;
}

}  // namespace moejit
