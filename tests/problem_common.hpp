// What the GPU test fixtures (gpu_problem.hpp, fusion_problem.hpp, test_gpu_formats.cpp) share
// besides the FP64 arithmetic (reference_gemm.hpp): the group description of the arguments, and
// reading one element of a downloaded C.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "driver/driver_api.hpp"
#include "moejit/formats.hpp"
#include "moejit/runtime.hpp"

namespace moejit::test {

// Contiguous: offsets (groups + 1) and the rows of A and C; masked: counts per group and the
// capacity. d_groups holds the device copy of whichever of the two the layout uses.
inline void set_group_args(GroupedGemmArgs& x, GroupLayout layout, const DeviceBuffer& d_groups, int total_rows,
                           int capacity, const std::vector<int>& offsets, const std::vector<int>& rows_of) {
  if (layout == GroupLayout::contiguous) {
    x.group_offsets = static_cast<const int*>(d_groups.get());
    x.total_rows = total_rows;
    x.host_groups = offsets;
  } else {
    x.group_counts = static_cast<const int*>(d_groups.get());
    x.capacity = capacity;
    x.host_groups = rows_of;
  }
}

// Element i of C (type c) as downloaded; poison: still all one bits (the 0xFF poison, NaN in
// every float type), so nothing wrote it.
struct OutputElement {
  double value;
  bool poison;
};
inline OutputElement read_output(DType c, const std::vector<char>& raw, std::size_t i) {
  if (c == DType::f32) {
    std::uint32_t bits;
    std::memcpy(&bits, &raw[i * 4], 4);
    float f;
    std::memcpy(&f, &bits, 4);
    return {f, bits == 0xFFFFFFFFu};
  }
  std::uint16_t h;
  std::memcpy(&h, &raw[i * 2], 2);
  return {c == DType::bf16 ? bf16_to_float(h) : f16_to_float(h), h == 0xFFFF};
}

}  // namespace moejit::test
