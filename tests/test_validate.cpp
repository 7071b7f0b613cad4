// Argument validation of the launch paths: each bad argument gets an InvalidArgument naming it.
#include <catch2/catch.hpp>

#include "moejit/errors.hpp"
#include "runtime/validate.hpp"

using namespace moejit;

namespace {
GroupedGemmArgs good_args() {
  GroupedGemmArgs a;
  a.a = reinterpret_cast<const void*>(0x10000);
  a.b = reinterpret_cast<const void*>(0x20000);
  a.c = reinterpret_cast<void*>(0x30000);
  a.group_offsets = reinterpret_cast<const int*>(0x40000);
  a.num_groups = 4;
  a.n = 256;
  a.k = 512;
  a.total_rows = 100;
  return a;
}
void require_invalid(const GroupedGemmArgs& a, const char* fragment) {
  INFO("expected message containing: " << fragment);
  CHECK_THROWS_WITH(validate_args(a), Catch::Contains(fragment));
  CHECK_THROWS_AS(validate_args(a), InvalidArgument);
}
}  // namespace

TEST_CASE("good arguments pass", "[validate]") {
  CHECK_NOTHROW(validate_args(good_args()));
  CHECK_NOTHROW(validate_groups(good_args(), {0, 10, 10, 60, 100}));
}

TEST_CASE("every bad argument is named", "[validate]") {
  auto a = good_args(); a.a = nullptr; require_invalid(a, "a is null");
  a = good_args(); a.b = nullptr; require_invalid(a, "b is null");
  a = good_args(); a.c = nullptr; require_invalid(a, "c is null");
  a = good_args(); a.a = reinterpret_cast<const void*>(0x10008); require_invalid(a, "16-byte aligned");
  a = good_args(); a.c = reinterpret_cast<void*>(0x30002); require_invalid(a, "c=");
  a = good_args(); a.group_offsets = nullptr; require_invalid(a, "group_offsets is null");
  a = good_args(); a.group_offsets = reinterpret_cast<const int*>(0x40002); require_invalid(a, "group_offsets=");
  a = good_args(); a.num_groups = 0; require_invalid(a, "num_groups=0");
  a = good_args(); a.num_groups = -3; require_invalid(a, "num_groups=-3");
  a = good_args(); a.num_groups = 2000000; require_invalid(a, "num_groups=2000000");
  a = good_args(); a.n = 0; require_invalid(a, "n=0");
  a = good_args(); a.n = 100; require_invalid(a, "n=100");
  a = good_args(); a.k = 1001; require_invalid(a, "k=1001");
  a = good_args(); a.total_rows = -1; require_invalid(a, "total_rows=-1");
  a = good_args(); a.ab_type = DType::f32; require_invalid(a, "ab_type=f32");
  a = good_args(); a.layout = GroupLayout::masked; a.group_counts = nullptr; require_invalid(a, "group_counts is null");
  a = good_args(); a.layout = GroupLayout::masked; a.group_counts = a.group_offsets; a.capacity = 0;
  require_invalid(a, "capacity=0");
}

TEST_CASE("group descriptions are checked", "[validate]") {
  auto a = good_args();
  CHECK_THROWS_WITH(validate_groups(a, {0, 10, 5, 60, 100}), Catch::Contains("not monotonic"));
  CHECK_THROWS_WITH(validate_groups(a, {0, 10, 20, 60, 101}), Catch::Contains("past the end"));
  CHECK_THROWS_WITH(validate_groups(a, {-1, 10, 20, 60, 100}), Catch::Contains("negative"));
  CHECK_THROWS_WITH(validate_groups(a, {0, 10, 20, 100}), Catch::Contains("expected num_groups + 1"));
  a.layout = GroupLayout::masked;
  a.capacity = 64;
  CHECK_NOTHROW(validate_groups(a, {0, 64, 3, 1}));
  CHECK_THROWS_WITH(validate_groups(a, {0, 65, 3, 1}), Catch::Contains("group_counts[1]=65"));
  CHECK_THROWS_WITH(validate_groups(a, {0, -1, 3, 1}), Catch::Contains("group_counts[1]=-1"));
}

TEST_CASE("args must match the kernel's spec", "[validate]") {
  auto a = good_args();
  KernelSpec spec;
  CHECK_NOTHROW(validate_args_match_spec(a, spec));
  spec.c = DType::f32;
  CHECK_THROWS_WITH(validate_args_match_spec(a, spec), Catch::Contains("c=f32"));
  spec = KernelSpec();
  spec.layout = GroupLayout::masked;
  CHECK_THROWS_WITH(validate_args_match_spec(a, spec), Catch::Contains("layout=masked"));
}
