// Argument validation of the launch paths: each bad argument gets an InvalidArgument naming it.
#include <catch2/catch.hpp>

#include <functional>

#include "moejit/errors.hpp"
#include "moejit/runtime.hpp"
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
  auto fp8 = good_args();
  fp8.ab_type = DType::e4m3;
  fp8.a_scales = reinterpret_cast<const float*>(0x50010);
  fp8.b_scales = reinterpret_cast<const void*>(0x60004);
  fp8.k = 400;  // not a multiple of 128: the last K block is partial (TMA reads zeros past K)
  CHECK_NOTHROW(validate_args(fp8));
  auto w4 = good_args();
  w4.b_type = DType::mxfp4;
  w4.k = 2880;  // gpt-oss: 45 stages of 64
  CHECK_NOTHROW(validate_args(w4));
  w4.b_type = DType::nvfp4;
  w4.b_tensor_scales = reinterpret_cast<const float*>(0x50000);
  w4.k = 400;
  CHECK_NOTHROW(validate_args(w4));
  auto same = good_args();
  same.b_type = DType::bf16;  // equal to ab_type: an ordinary bf16 GEMM
  CHECK_NOTHROW(validate_args(same));
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

namespace {
struct BadArgs {
  const char* what;
  std::function<void(GroupedGemmArgs&)> change;
  const char* names;  // the message must contain this: the argument, usually with its value
};
}  // namespace

TEST_CASE("public entry points name every bad argument (table)", "[validate]") {
  const std::vector<BadArgs> table = {
      {"a null", [](auto& a) { a.a = nullptr; }, "a is null"},
      {"b null", [](auto& a) { a.b = nullptr; }, "b is null"},
      {"c null", [](auto& a) { a.c = nullptr; }, "c is null"},
      {"offsets null", [](auto& a) { a.group_offsets = nullptr; }, "group_offsets is null"},
      {"a misaligned by 2", [](auto& a) { a.a = reinterpret_cast<const void*>(0x10002); }, "a=0x10002 is not 16-byte aligned"},
      {"b misaligned by 8", [](auto& a) { a.b = reinterpret_cast<const void*>(0x20008); }, "b=0x20008 is not 16-byte aligned"},
      {"c misaligned by 1", [](auto& a) { a.c = reinterpret_cast<void*>(0x30001); }, "c=0x30001 is not 16-byte aligned"},
      {"offsets misaligned", [](auto& a) { a.group_offsets = reinterpret_cast<const int*>(0x40001); }, "group_offsets=0x40001"},
      {"k not a multiple of 8", [](auto& a) { a.k = 4100; }, "k=4100"},
      {"k = 8m + 4", [](auto& a) { a.k = 12; }, "k=12"},
      {"k negative", [](auto& a) { a.k = -8; }, "k=-8"},
      {"n not a multiple of 8", [](auto& a) { a.n = 257; }, "n=257"},
      {"0 groups", [](auto& a) { a.num_groups = 0; }, "num_groups=0"},
      {"groups past the limit", [](auto& a) { a.num_groups = (1 << 20) + 1; }, "num_groups=1048577"},
      {"groups x n past int32", [](auto& a) { a.num_groups = 1 << 20; a.n = 4096; }, "num_groups × n"},
      {"negative total_rows", [](auto& a) { a.total_rows = -5; }, "total_rows=-5"},
      {"f32 inputs", [](auto& a) { a.ab_type = DType::f32; }, "ab_type=f32"},
      {"fp8 without a_scales", [](auto& a) { a.ab_type = DType::e4m3; }, "a_scales (ab_type=e4m3: fp32 [ceil(K/128)][rows of A]) is null"},
      {"fp8 without b_scales",
       [](auto& a) { a.ab_type = DType::e4m3; a.a_scales = reinterpret_cast<const float*>(0x50000); }, "b_scales (ab_type=e4m3: fp32 [num_groups][ceil(N/128)][ceil(K/128)]) is null"},
      {"fp8 a_scales misaligned",
       [](auto& a) {
         a.ab_type = DType::e4m3;
         a.a_scales = reinterpret_cast<const float*>(0x50004);
         a.b_scales = reinterpret_cast<const void*>(0x60000);
       },
       "a_scales (ab_type=e4m3: fp32 [ceil(K/128)][rows of A])=0x50004 is not 16-byte aligned"},
      {"fp8 k not a multiple of 16",
       [](auto& a) {
         a.ab_type = DType::e4m3;
         a.a_scales = reinterpret_cast<const float*>(0x50000);
         a.b_scales = reinterpret_cast<const void*>(0x60000);
         a.k = 520;
       },
       "k=520 (ab_type=e4m3: expected a multiple of 16"},
      {"scales for 16-bit inputs", [](auto& a) { a.a_scales = reinterpret_cast<const float*>(0x50000); },
       "ab_type=bf16 takes no scales"},
      {"e4m3 output", [](auto& a) { a.c_type = DType::e4m3; }, "c_type=e4m3"},
      {"4-bit B with f16 A", [](auto& a) { a.ab_type = DType::f16; a.b_type = DType::mxfp4; }, "ab_type=f16 with b_type=mxfp4"},
      {"b_type f32", [](auto& a) { a.b_type = DType::f32; }, "b_type=f32 with ab_type=bf16"},
      {"mxfp4 k not a multiple of 32", [](auto& a) { a.b_type = DType::mxfp4; a.k = 528; }, "k=528 (b_type=mxfp4: expected a multiple of 32"},
      {"per-channel weight scales on bf16", [](auto& a) { a.b_scale_layout = ScaleB::channels; },
       "b_scale_layout=channels but ab_type=bf16"},
      {"fp8 per-channel without b_scales",
       [](auto& a) {
         a.ab_type = DType::e4m3;
         a.a_scales = reinterpret_cast<const float*>(0x50000);
         a.b_scale_layout = ScaleB::channels;
       },
       "b_scales (ab_type=e4m3, b_scale_layout=channels: fp32 [num_groups][N]) is null"},
      {"nvfp4 without tensor scales", [](auto& a) { a.b_type = DType::nvfp4; }, "b_tensor_scales (b_type=nvfp4: fp32 [num_groups]) is null"},
      {"mxfp4 with tensor scales",
       [](auto& a) { a.b_type = DType::mxfp4; a.b_tensor_scales = reinterpret_cast<const float*>(0x50000); },
       "b_tensor_scales=0x50000 but b_type=mxfp4 has none"},
      {"mxfp4 with b_scales",
       [](auto& a) { a.b_type = DType::mxfp4; a.b_scales = reinterpret_cast<const void*>(0x50000); },
       "scales are inside the packed blocks"},
      {"masked, counts null", [](auto& a) { a.layout = GroupLayout::masked; a.capacity = 8; }, "group_counts is null"},
      {"masked, capacity 0",
       [](auto& a) { a.layout = GroupLayout::masked; a.group_counts = a.group_offsets; a.capacity = 0; }, "capacity=0"},
      {"masked, rows past int32",
       [](auto& a) { a.layout = GroupLayout::masked; a.group_counts = a.group_offsets; a.capacity = 1 << 30; },
       "capacity × num_groups"},
      {"expected_rows negative", [](auto& a) { a.expected_rows = -1; }, "expected_rows=-1 (expected 0, or 1..100"},
      {"expected_group_rows, too few", [](auto& a) { static const int r[3] = {1, 2, 3}; a.expected_group_rows = r; },
       "expected_group_rows has 3 entries (expected num_groups = 4 row counts)"},
      {"expected_group_rows, negative", [](auto& a) { static const int r[4] = {1, -2, 3, 4}; a.expected_group_rows = r; },
       "expected_group_rows[1]=-2 (expected 0..100)"},
      {"expected_group_rows, past total_rows", [](auto& a) { static const int r[4] = {50, 50, 1, 0}; a.expected_group_rows = r; },
       "expected_group_rows sum to 101 rows, past the 100 the layout holds"},
      {"masked, expected_group_rows past the capacity",
       [](auto& a) {
         static const int r[4] = {1, 9, 0, 0};
         a.layout = GroupLayout::masked, a.group_counts = a.group_offsets, a.capacity = 8, a.expected_group_rows = r;
       },
       "expected_group_rows[1]=9 (expected 0..8)"},
      {"expected_rows past total_rows", [](auto& a) { a.expected_rows = 101; }, "expected_rows=101 (expected 0, or 1..100"},
      {"masked, expected_rows past the capacity",
       [](auto& a) { a.layout = GroupLayout::masked; a.group_counts = a.group_offsets; a.capacity = 8; a.expected_rows = 33; },
       "expected_rows=33 (expected 0, or 1..32: the rows the groups can hold, capacity × num_groups)"},
  };
  auto offline = Runtime::offline(Arch{8, 0, false});
  for (auto& row : table) {
    INFO(row.what);
    auto a = good_args();
    row.change(a);
    require_invalid(a, row.names);
    // The high-level call checks its arguments before it needs a device.
    CHECK_THROWS_AS(offline->grouped_gemm(a, nullptr), InvalidArgument);
    CHECK_THROWS_WITH(offline->grouped_gemm(a, nullptr), Catch::Contains(row.names));
  }
  // Good arguments get past validation and stop at the missing device.
  CHECK_THROWS_AS(offline->grouped_gemm(good_args(), nullptr), DriverError);
}

TEST_CASE("group counts: 0 is rejected, 100000 is within the 2^20 limit", "[validate]") {
  auto a = good_args();
  a.num_groups = 0;
  CHECK_THROWS_WITH(validate_args(a), Catch::Contains("num_groups=0 (expected at least 1)"));
  a.num_groups = 100000;  // num_groups × n = 25.6M rows of B, within int32
  CHECK_NOTHROW(validate_args(a));
  std::vector<int> offsets(100001);
  for (int g = 0; g <= 100000; ++g) offsets[g] = g / 1000;  // 100 rows, most groups empty
  CHECK_NOTHROW(validate_groups(a, offsets));
  offsets[50000] = 1000;
  CHECK_THROWS_WITH(validate_groups(a, offsets), Catch::Contains("group_offsets[50001]=50 < group_offsets[50000]=1000"));
  a.num_groups = 1 << 20;
  a.n = 8;
  CHECK_NOTHROW(validate_args(a));
}

TEST_CASE("offsets: non-monotonic, past the end, negative (table)", "[validate]") {
  struct Row {
    std::vector<int> offsets;
    const char* names;
  };
  const std::vector<Row> table = {
      {{0, 10, 9, 60, 100}, "group_offsets[2]=9 < group_offsets[1]=10"},
      {{0, 10, 20, 60, 59}, "group_offsets[4]=59 < group_offsets[3]=60"},
      {{0, 10, 20, 60, 101}, "group_offsets[4]=101 is past the end of A (total_rows=100)"},
      {{0, 10, 20, 200, 200}, "group_offsets[4]=200 is past the end"},
      {{-1, 10, 20, 60, 100}, "group_offsets[0]=-1 is negative"},
      {{-100, -50, 20, 60, 100}, "group_offsets[0]=-100 is negative"},
      {{0, 10, 20, 100}, "host_groups has 4 entries (expected num_groups + 1 = 5 offsets)"},
      {{}, "host_groups has 0 entries"},
  };
  for (auto& row : table) {
    INFO(row.names);
    CHECK_THROWS_AS(validate_groups(good_args(), row.offsets), InvalidArgument);
    CHECK_THROWS_WITH(validate_groups(good_args(), row.offsets), Catch::Contains(row.names));
  }
  auto masked = good_args();
  masked.layout = GroupLayout::masked;
  masked.capacity = 16;
  CHECK_THROWS_WITH(validate_groups(masked, {1, 2, 3}), Catch::Contains("host_groups has 3 entries (expected num_groups = 4 counts)"));
  CHECK_THROWS_WITH(validate_groups(masked, {1, 2, 17, 0}), Catch::Contains("group_counts[2]=17 (expected 0..capacity=16)"));
}

TEST_CASE("unsupported arch is named", "[validate][spec]") {
  CHECK_THROWS_AS(Arch::parse("sm_75"), SpecError);
  CHECK_THROWS_WITH(Arch::parse("sm_75"), Catch::Contains("'arch'") && Catch::Contains("sm_75"));
  CHECK_THROWS_WITH(Arch::parse(""), Catch::Contains("'arch'"));
  CHECK_THROWS_WITH(KernelSpec::parse("arch=sm_100"), Catch::Contains("'arch'") && Catch::Contains("sm_100"));
  // A spec for sm_80 with the Hopper family: rejected by validate() and by every path that
  // builds it, before NVRTC runs.
  KernelSpec hopper_on_ampere = KernelSpec::parse("family=hopper,arch=sm_80");
  CHECK_THROWS_WITH(hopper_on_ampere.validate(), Catch::Contains("arch=sm_80") && Catch::Contains("needs sm_90a"));
  auto offline = Runtime::offline(Arch{8, 0, false});
  CHECK_THROWS_AS(offline->compile(hopper_on_ampere), SpecError);
  CHECK_THROWS_WITH(offline->compile(hopper_on_ampere), Catch::Contains("arch=sm_80"));
  // Launching needs a device; an offline runtime says so, naming the arch.
  CHECK_THROWS_AS(offline->kernel(KernelSpec::parse("arch=sm_80")), DriverError);
}

namespace {
// A spec with fusions and args that carry exactly their pointers.
struct FusedCase {
  KernelSpec spec;
  GroupedGemmArgs args = good_args();
  explicit FusedCase(const char* fuse_text) : spec(KernelSpec::parse(fuse_text)) {
    spec.validate();
    const Fusion& f = spec.fusion;
    args.c_type = spec.c;
    if (f.gather_a) args.gather_rows = reinterpret_cast<const int*>(0x50000), args.num_tokens = 40;
    if (f.scatter_c) args.scatter_rows = reinterpret_cast<const int*>(0x60000), args.num_out_rows = 200;
    if (f.routing_weight) args.routing_weights = reinterpret_cast<const float*>(0x70000);
    if (f.bias) args.bias = reinterpret_cast<const float*>(0x80000);
  }
};
void require_spec_mismatch(const GroupedGemmArgs& a, const KernelSpec& spec, const char* fragment) {
  INFO("expected message containing: " << fragment);
  CHECK_THROWS_WITH(validate_args_match_spec(a, spec), Catch::Contains(fragment));
  CHECK_THROWS_AS(validate_args_match_spec(a, spec), InvalidArgument);
}
}  // namespace

TEST_CASE("fusion pointers: each one exactly with its flag", "[validate][fusion]") {
  FusedCase all("fuse=gather+scatter+weight+bias,act=swiglu");
  CHECK_NOTHROW(validate_args(all.args));
  CHECK_NOTHROW(validate_args_match_spec(all.args, all.spec));
  // args.fusion left at none or equal to the spec's
  all.args.fusion = all.spec.fusion;
  CHECK_NOTHROW(validate_args_match_spec(all.args, all.spec));
  auto a = all.args;
  a.fusion.activation = Activation::silu;
  require_spec_mismatch(a, all.spec, "differs from the kernel's");

  // Each missing pointer (or count) is named.
  a = all.args; a.gather_rows = nullptr; require_spec_mismatch(a, all.spec, "gather_rows (fuse=gather) is null");
  a = all.args; a.num_tokens = 0; require_spec_mismatch(a, all.spec, "num_tokens=0");
  a = all.args; a.num_tokens = 1 << 30; require_spec_mismatch(a, all.spec, "at most 2^35 - 16 elements of A");
  a = all.args; a.scatter_rows = nullptr; require_spec_mismatch(a, all.spec, "scatter_rows (fuse=scatter) is null");
  a = all.args; a.num_out_rows = 0; require_spec_mismatch(a, all.spec, "num_out_rows=0 with fuse=scatter");
  a = all.args; a.routing_weights = nullptr; require_spec_mismatch(a, all.spec, "routing_weights (fuse=weight) is null");
  a = all.args; a.bias = nullptr; require_spec_mismatch(a, all.spec, "bias (fuse=bias) is null");
  a = all.args; a.bias = reinterpret_cast<const float*>(0x80002); require_spec_mismatch(a, all.spec, "4-byte aligned");
  a = all.args; a.gather_rows = reinterpret_cast<const int*>(0x50001); require_spec_mismatch(a, all.spec, "gather_rows");

  // Each extra pointer (or count) without its flag is named.
  FusedCase none("fuse=none");
  CHECK_NOTHROW(validate_args_match_spec(none.args, none.spec));
  a = none.args; a.gather_rows = all.args.gather_rows; require_spec_mismatch(a, none.spec, "gather_rows is set");
  a = none.args; a.num_tokens = 5; require_spec_mismatch(a, none.spec, "num_tokens=5 is set");
  a = none.args; a.scatter_rows = all.args.scatter_rows; require_spec_mismatch(a, none.spec, "scatter_rows is set");
  a = none.args; a.num_out_rows = 7; require_spec_mismatch(a, none.spec, "num_out_rows=7 is set");
  a = none.args; a.routing_weights = all.args.routing_weights; require_spec_mismatch(a, none.spec, "routing_weights is set");
  a = none.args; a.bias = all.args.bias; require_spec_mismatch(a, none.spec, "bias is set");
}

TEST_CASE("fusion shapes: GLU needs n % 16 == 0, atomic needs f32", "[validate][fusion]") {
  FusedCase glu("act=swiglu_oai,glu=split");
  CHECK_NOTHROW(validate_args_match_spec(glu.args, glu.spec));
  auto a = glu.args;
  a.n = 264;  // a multiple of 8, but n/2 = 132 is not
  CHECK_NOTHROW(validate_args(a));
  require_spec_mismatch(a, glu.spec, "n=264 with act=swiglu_oai");
  FusedCase silu("act=silu");
  a = silu.args;
  a.n = 264;
  CHECK_NOTHROW(validate_args_match_spec(a, silu.spec));

  FusedCase atomic("fuse=scatter+weight+atomic,c=f32");
  CHECK_NOTHROW(validate_args_match_spec(atomic.args, atomic.spec));
  // The high-level path checks args.fusion itself (no spec yet).
  a = atomic.args;
  a.c_type = DType::bf16;
  CHECK_THROWS_WITH(validate_fusion_args(a, atomic.spec.fusion), Catch::Contains("c_type=bf16 with fuse=atomic"));
  Fusion bad_atomic;
  bad_atomic.atomic = true;
  CHECK_THROWS_WITH(validate_fusion_args(good_args(), bad_atomic), Catch::Contains("fuse=atomic needs fuse=scatter"));
}

TEST_CASE("fusions with FP8 or 4-bit operands: args checks", "[validate][fusion]") {
  // Which kernels have them is the spec's business (KernelSpec::validate); the args checks apply as
  // for 16-bit operands, plus FP8 split GLU's n/2 % 128 == 0 (the up half's B scale blocks).
  FusedCase gather("fuse=gather+bias,act=swiglu_oai");
  auto a = gather.args;
  a.ab_type = DType::e4m3;
  CHECK_NOTHROW(validate_fusion_args(a, gather.spec.fusion));
  a = gather.args;
  a.b_type = DType::nvfp4;
  CHECK_NOTHROW(validate_fusion_args(a, gather.spec.fusion));
  a.gather_rows = nullptr;
  CHECK_THROWS_WITH(validate_fusion_args(a, gather.spec.fusion), Catch::Contains("gather_rows (fuse=gather)"));

  FusedCase split("fuse=bias,act=swiglu,glu=split");
  a = split.args;
  a.ab_type = DType::e4m3;
  a.n = 512;  // n/2 = 256
  CHECK_NOTHROW(validate_fusion_args(a, split.spec.fusion));
  a.n = 320;  // n/2 = 160: the up half starts inside a 128-row scale block
  CHECK_THROWS_AS(validate_fusion_args(a, split.spec.fusion), InvalidArgument);
  CHECK_THROWS_WITH(validate_fusion_args(a, split.spec.fusion),
                    Catch::Contains("n=320 with ab_type=e4m3") && Catch::Contains("glu=split") && Catch::Contains("multiple of 128"));
  a.ab_type = DType::bf16;  // 16-bit and 4-bit operands have no such constraint
  CHECK_NOTHROW(validate_fusion_args(a, split.spec.fusion));
  a.b_type = DType::mxfp4;
  CHECK_NOTHROW(validate_fusion_args(a, split.spec.fusion));
  FusedCase inter("fuse=bias,act=swiglu");
  a = inter.args;
  a.ab_type = DType::e4m3;
  a.n = 320;
  CHECK_NOTHROW(validate_fusion_args(a, inter.spec.fusion));
  CHECK_NOTHROW(validate_fusion_args(good_args(), Fusion{}));
}

TEST_CASE("c_type=e4m3: FP8 operands, c_scales, N_out a multiple of 16, no scatter", "[validate][fusion]") {
  GroupedGemmArgs a = good_args();
  a.ab_type = a.c_type = DType::e4m3;
  a.a_scales = reinterpret_cast<const float*>(0x50000);
  a.b_scales = reinterpret_cast<const void*>(0x60000);
  a.c_scales = reinterpret_cast<float*>(0x70000);
  CHECK_NOTHROW(validate_args(a));
  auto with = [&](auto mutate) {
    GroupedGemmArgs b = a;
    mutate(b);
    return b;
  };
  require_invalid(with([](GroupedGemmArgs& b) { b.c_scales = nullptr; }), "c_scales (c_type=e4m3");
  require_invalid(with([](GroupedGemmArgs& b) { b.c_scales = reinterpret_cast<float*>(0x70002); }), "c_scales (c_type=e4m3");
  require_invalid(with([](GroupedGemmArgs& b) {
                    b.ab_type = DType::bf16, b.a_scales = nullptr, b.b_scales = nullptr;
                  }),
                  "c_type=e4m3 with ab_type=bf16");
  require_invalid(with([](GroupedGemmArgs& b) { b.c_type = DType::bf16; }), "c_scales=");
  Fusion glu;
  glu.activation = Activation::swiglu;
  GroupedGemmArgs narrow = a;
  narrow.n = 48;  // n_out = 24
  CHECK_THROWS_WITH(validate_fusion_args(narrow, glu), Catch::Contains("multiple of 16"));
  narrow.n = 64;  // n_out = 32
  CHECK_NOTHROW(validate_fusion_args(narrow, glu));
  Fusion scatter;
  scatter.scatter_c = true;
  GroupedGemmArgs scattered = a;
  scattered.scatter_rows = reinterpret_cast<const int*>(0x80000);
  scattered.num_out_rows = 10;
  CHECK_THROWS_WITH(validate_fusion_args(scattered, scatter), Catch::Contains("c_type=e4m3 with fuse=scatter"));
}
