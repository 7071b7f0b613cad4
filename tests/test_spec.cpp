// KernelSpec: canonical text round trip, every rejection path, pinned key.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "moejit/errors.hpp"
#include "moejit/spec.hpp"

#include <set>

using namespace moejit;

namespace {
// Checks that parsing `text` throws SpecError whose message contains every fragment.
void require_rejected(const std::string& text, std::initializer_list<const char*> fragments) {
  INFO("spec text: " << text);
  try {
    KernelSpec::parse(text).validate();
    FAIL("accepted");
  } catch (const SpecError& e) {
    std::string msg = e.what();
    for (auto f : fragments) {
      INFO("message: " << msg);
      CHECK(msg.find(f) != std::string::npos);
    }
  }
}
}  // namespace

TEST_CASE("default spec prints every field in canonical order", "[spec]") {
  KernelSpec spec;
  CHECK(spec.to_text() ==
        "family=portable,arch=sm_90,layout=contiguous,a=bf16,b=bf16,c=bf16,acc=f32,tile=128x128x32,stages=4,"
        "warps=2x4,cluster=1x1,sched=static,fuse=none,act=none");
}

TEST_CASE("canonical text round-trips for many specs", "[spec]") {
  for (auto family : {"portable", "hopper"})
    for (auto layout : {"contiguous", "masked"})
      for (auto sched : {"static", "dynamic"})
        for (auto c : {"bf16", "f16", "f32"}) {
          std::string text = std::string("family=") + family + ",layout=" + layout + ",sched=" + sched + ",c=" + c;
          if (std::string(family) == "hopper") text += ",tile=128x256x64,stages=4";
          KernelSpec spec = KernelSpec::parse(text);
          KernelSpec again = KernelSpec::parse(spec.to_text());
          CHECK(again == spec);
          CHECK(again.to_text() == spec.to_text());
          CHECK(again.key() == spec.key());
        }
}

TEST_CASE("parser accepts any order, spaces and commas", "[spec]") {
  auto a = KernelSpec::parse("tile=64x128x32 stages=3, layout=masked,arch=sm_80");
  auto b = KernelSpec::parse("arch=sm_80,layout=masked,stages=3,tile=64x128x32");
  CHECK(a == b);
  CHECK(a.tile == TileShape{64, 128, 32});
  CHECK(a.arch.to_text() == "sm_80");
}

TEST_CASE("parser rejections name the field and the allowed values", "[spec]") {
  require_rejected("", {"empty"});
  require_rejected("family=cutlass", {"'family'", "cutlass", "portable|hopper"});
  require_rejected("arch=sm_75", {"'arch'", "sm_75", "sm_80"});
  require_rejected("layout=ragged", {"'layout'", "contiguous|masked"});
  require_rejected("a=int8", {"'a'", "bf16|f16|f32|e4m3"});
  require_rejected("c=fp64", {"'c'"});
  require_rejected("tile=128x128", {"'tile'", "MxNxK"});
  require_rejected("tile=128xAx32", {"'tile'", "not an integer"});
  require_rejected("stages=four", {"'stages'", "not an integer"});
  require_rejected("sched=random", {"'sched'", "static|dynamic"});
  require_rejected("fuse=softmax", {"'fuse'", "gather|scatter|weight|bias|atomic"});
  require_rejected("act=swiglu,glu=halves", {"'glu'", "interleaved|split"});
  require_rejected("act=relu", {"'act'", "silu"});
  require_rejected("color=blue", {"unknown field 'color'"});
  require_rejected("tile", {"field=value"});
  require_rejected("stages=3,stages=4", {"'stages' is given twice"});
  require_rejected("family=hopper,warps=2x4", {"'warps'", "portable only"});
  require_rejected("cluster=2", {"'cluster'", "MxN"});
}

TEST_CASE("validation rejects impossible combinations", "[spec]") {
  require_rejected("tile=256x256x64,stages=8", {"shared memory", "allows"});
  require_rejected("arch=sm_89,tile=128x128x64,stages=4", {"shared memory"});
  require_rejected("tile=128x128x48", {"tile K=48", "MMA"});
  require_rejected("tile=100x128x32", {"tile M=100"});
  require_rejected("tile=128x120x32", {"tile N=120"});
  require_rejected("stages=1", {"stages=1"});
  require_rejected("stages=9", {"stages=9"});
  require_rejected("a=f32,b=f32", {"a=f32"});
  require_rejected("a=bf16,b=f16", {"b=f16 with a=bf16", "b=mxfp4|nvfp4"});
  require_rejected("acc=bf16", {"acc=bf16"});
  require_rejected("warps=0x4", {"warps=0x4"});
  // Found with tests/fuzz/fuzz_spec: the product overflowed int, and tiles <= 0 passed the
  // divisibility checks (-128 % 32 == 0) with a shared-memory size that "fit".
  require_rejected("warps=65536x65536", {"warps=65536x65536"});
  require_rejected("warps=17x1,tile=272x128x32", {"warps=17x1"});
  require_rejected("tile=-128x-128x32,stages=3", {"tile M=-128", "positive multiple"});
  require_rejected("tile=128x-64x32", {"tile N=-64", "positive multiple"});
  require_rejected("tile=0x128x32", {"tile M=0"});
  require_rejected("cluster=2x1", {"cluster=2x1"});
  // Fusions: what the kernels implement (docs/design.md, "Fusions").
  require_rejected("fuse=atomic,c=f32", {"fuse=atomic needs fuse=scatter"});
  require_rejected("fuse=scatter+atomic,c=bf16", {"c=bf16", "c=f32"});
  require_rejected("act=silu,glu=split", {"glu=split", "act=silu"});
  require_rejected("glu=split", {"glu=split", "act=none"});
  require_rejected("family=hopper,tile=128x256x64,stages=4,cluster=1x2,fuse=gather", {"fuse=gather", "cluster=1x1"});
  // A 2x1 pair shares B and gathers its own rows on each CTA.
  CHECK_NOTHROW(KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,cluster=2x1,fuse=gather").validate());
  // Quantized operands: the portable family has every fusion; the Hopper FP8 / 4-bit kernels all but
  // gather by TMA (FP8) and split GLU (both).
  require_rejected("family=hopper,a=e4m3,b=e4m3,fuse=gather+bias,gather_by=tma", {"fuse=gather", "gather_by=tma", "a=e4m3", "cp.async"});
  CHECK_NOTHROW(KernelSpec::parse("family=hopper,a=e4m3,b=e4m3,fuse=gather+bias,act=swiglu").validate());
  require_rejected("family=hopper,a=e4m3,b=e4m3,tile=128x192x128,stages=4,act=swiglu,glu=split", {"glu=split", "a=e4m3", "tile=128x192x128", "128x256x128"});
  require_rejected("family=hopper,a=e4m3,b=e4m3,tile=128x256x128,stages=4,b_scales=channels,act=swiglu,glu=split",
                   {"glu=split", "b_scales=channels"});
  for (const char* tile : {"tile=128x128x128,stages=6", "tile=64x256x128,stages=4", "tile=128x256x128,stages=4"})
    CHECK_NOTHROW(KernelSpec::parse(std::string("family=hopper,a=e4m3,b=e4m3,") + tile + ",fuse=gather+bias,act=swiglu,glu=split").validate());
  require_rejected("family=hopper,b=mxfp4,fuse=bias,act=swiglu,glu=split", {"glu=split", "b=mxfp4", "family=hopper", "interleaved"});
  require_rejected("family=hopper,b=nvfp4,c=f32,fuse=scatter+atomic", {"c=f32"});
  require_rejected("family=portable,a=e4m3,b=e4m3,tile=128x128x32,fuse=scatter+atomic,c=bf16", {"c=f32"});
  for (const char* text : {"family=portable,a=e4m3,b=e4m3,tile=128x128x32,act=silu",
                           "family=portable,a=e4m3,b=e4m3,tile=128x128x32,fuse=gather+bias,act=swiglu,glu=split",
                           "family=portable,a=e4m3,b=e4m3,tile=64x128x64,fuse=scatter+weight+atomic,act=gelu,c=f32",
                           "family=portable,b=nvfp4,fuse=scatter+weight",
                           "family=portable,b=mxfp4,fuse=gather+bias,act=swiglu_oai",
                           "family=portable,b=mxfp4,fuse=scatter+weight+bias,c=f32",
                           "family=portable,b=nvfp4,fuse=gather,act=swiglu,glu=split",
                           "family=hopper,b=mxfp4,fuse=gather+bias,act=swiglu_oai",
                           "family=hopper,a=e4m3,b=e4m3,fuse=bias,act=swiglu",
                           "family=hopper,a=e4m3,b=e4m3,tile=64x256x128,stages=5,c=f32,fuse=scatter+weight+atomic,act=gelu",
                           "family=hopper,b=mxfp4,tile=128x128x64,fuse=scatter+weight+bias",
                           "family=hopper,layout=masked,b=nvfp4,c=f16,tile=16x128x64,fuse=gather+scatter+weight,act=gelu"}) {
    INFO(text);
    const KernelSpec s = KernelSpec::parse(text);
    CHECK_NOTHROW(s.validate());
    CHECK(KernelSpec::parse(s.to_text()) == s);
  }
  require_rejected("family=hopper,arch=sm_90", {"needs sm_90a"});
  require_rejected("family=hopper,tile=96x128x64", {"tile M=96"});
  require_rejected("family=hopper,tile=128x96x64", {"tile N=96"});
  require_rejected("family=hopper,tile=128x128x32", {"tile K=32"});
  require_rejected("family=hopper,tile=128x256x64,stages=6", {"shared memory"});
  // FP8 (a = b = e4m3, block scales): what the hopper_fp8 kernel implements so far.
  require_rejected("a=e4m3,b=e4m3,tile=128x256x32,warps=2x4", {"portable FP8: N at most 128"});
  require_rejected("a=e4m3,b=e4m3,tile=26x56x0", {"portable FP8"});  // K = 0: no division by zero (fuzz_spec, v45)
  require_rejected("family=hopper,a=e4m3,b=bf16", {"b=bf16 with a=e4m3"});
  require_rejected("family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=128x192x128,stages=5", {"c=e4m3"});  // slices of 192 columns
  require_rejected("family=hopper,a=e4m3,b=e4m3,tile=256x128x128", {"128x128x128|128x192x128|128x256x128|64x256x128"});
  require_rejected("family=hopper,a=e4m3,b=e4m3,tile=128x256x128,stages=5", {"shared memory"});
  require_rejected("family=hopper,a=e4m3,b=e4m3,tile=128x128x64", {"tile 128x128x64"});
  require_rejected("family=hopper,a=e4m3,b=e4m3,cluster=1x2", {"cluster=1x2"});
  require_rejected("family=hopper,a=e4m3,b=e4m3,stages=8", {"shared memory"});
  // Weight-only 4-bit (a = bf16, b = mxfp4 | nvfp4): the hopper_w4 register-A kernel.
  require_rejected("b=mxfp4,a=f16", {"b=mxfp4 with a=f16"});
  require_rejected("family=hopper,a=f16,b=mxfp4", {"b=mxfp4 with a=f16"});
  require_rejected("family=hopper,a=e4m3,b=nvfp4", {"b=nvfp4 with a=e4m3"});
  require_rejected("family=hopper,b=mxfp4,tile=256x256x64", {"16|32|48|64|128|256 tokens"});
  require_rejected("family=hopper,tile=64x64x64", {"64-row tiles need N >= 128"});
  require_rejected("family=hopper,b=nvfp4,tile=40x128x64", {"tile 40x128x64"});
  require_rejected("family=hopper,b=mxfp4,c=f32", {"c=f32"});
  require_rejected("family=hopper,b=mxfp4,a=mxfp4", {"a=mxfp4"});
  require_rejected("family=hopper,b=nvfp4,c=mxfp4", {"c=mxfp4"});
}

TEST_CASE("4-bit weight-only hopper spec: defaults, canonical text, shared memory", "[spec]") {
  auto s = KernelSpec::parse("family=hopper,b=mxfp4");
  s.validate();
  CHECK(s.is_weight_only_4bit());
  CHECK(s.tile == TileShape{64, 128, 64});
  CHECK(s.stages == 8);
  CHECK(s.to_text() ==
        "family=hopper,arch=sm_90a,layout=contiguous,a=bf16,b=mxfp4,c=bf16,acc=f32,tile=64x128x64,stages=8,"
        "cluster=1x1,sched=static,fuse=none,act=none");
  CHECK(KernelSpec::parse(s.to_text()) == s);
  CHECK(s.dynamic_smem_bytes() == 8 * (64 * 128 + 4352) + 2048);  // w4rs_smem_bytes<64, 8, kMXFP4>()
  auto nv = KernelSpec::parse("family=hopper,b=nvfp4,tile=128x128x64,layout=masked,c=f16");
  nv.validate();
  // + 24 absorbed tail rows per stage (static, unfused 128-token tiles) and the staged epilogue's C
  // rows with 1024 bytes to align them (the swizzle atom of the TMA stores, v24): exactly 227 KB.
  CHECK(nv.dynamic_smem_bytes() == 8 * ((128 + 24) * 128 + 4608) + 2048 + 2 * 128 * 144 + 1024);
  CHECK(nv.dynamic_smem_bytes() <= 227 * 1024);
  CHECK(KernelSpec::parse(nv.to_text()) == nv);
  auto nv_dynamic = nv;  // no tail rows with the dynamic scheduler
  nv_dynamic.scheduler = Scheduler::dynamic;
  CHECK(nv_dynamic.dynamic_smem_bytes() == 8 * (128 * 128 + 4608) + 2048 + 2 * 128 * 144 + 1024);
  auto nv_gathered = nv;  // gathered token rows: 16 tail rows (whole gather steps)
  nv_gathered.fusion.gather_a = true;
  CHECK(nv_gathered.dynamic_smem_bytes() == 8 * ((128 + 16) * 128 + 4608) + 2048 + 2 * 128 * 144 + 1024);
  auto nv_scattered = nv;
  nv_scattered.fusion.scatter_c = nv_scattered.fusion.routing_weight = true;
  CHECK(nv_scattered.dynamic_smem_bytes() == nv.dynamic_smem_bytes());
  // The unfused 256-token tile double-buffers its C staging (two 16 KB buffers per consumer, v35);
  // with epilogue fusions it keeps one 144-byte-row staging per consumer. Both fit 227 KB.
  auto nv256 = KernelSpec::parse("family=hopper,b=nvfp4,tile=256x128x64,stages=4");
  nv256.validate();
  CHECK(nv256.dynamic_smem_bytes() == 4 * ((256 + 24) * 128 + 4608) + 2048 + 2 * 2 * 128 * 128 + 1024);
  CHECK(nv256.dynamic_smem_bytes() <= 227 * 1024);
  auto nv256_gathered = nv256;  // gathered, no epilogue fusion: still double-buffered
  nv256_gathered.fusion.gather_a = true;
  CHECK(nv256_gathered.dynamic_smem_bytes() == 4 * ((256 + 16) * 128 + 4608) + 2048 + 2 * 2 * 128 * 128 + 1024);
  auto nv256_weighted = nv256;
  nv256_weighted.fusion.routing_weight = true;
  CHECK(nv256_weighted.dynamic_smem_bytes() == 4 * ((256 + 24) * 128 + 4608) + 2048 + 2 * 128 * 144 + 1024);
  CHECK_FALSE(KernelSpec::parse("family=hopper").is_weight_only_4bit());
  auto portable = KernelSpec::parse("family=portable,arch=sm_80,b=nvfp4,c=f32");  // the 16-bit tile defaults
  portable.validate();
  CHECK(portable.tile == TileShape{128, 128, 32});
  CHECK(portable.dynamic_smem_bytes() == KernelSpec::parse("family=portable,arch=sm_80,c=f32").dynamic_smem_bytes());
  // C by TMA stores: unfused 128/256-token tiles and a GLU without scatter (the fused GEMM1, v25).
  CHECK(nv.stages_c());
  CHECK_FALSE(nv_scattered.stages_c());
  auto glu = nv_gathered;
  glu.fusion.bias = true;
  glu.fusion.activation = Activation::swiglu_oai;
  CHECK(glu.stages_c());
  glu.fusion.scatter_c = true;
  CHECK_FALSE(glu.stages_c());
  CHECK_FALSE(s.stages_c());  // 64 tokens: register stores
  // Programmatic launch: every kernel but the 48-token tile waits for the grid ahead (v25).
  CHECK(s.grid_dependency());
  CHECK(nv.grid_dependency());
  CHECK(portable.grid_dependency());
  CHECK_FALSE(KernelSpec::parse("family=hopper,b=mxfp4,tile=48x128x64").grid_dependency());
}

TEST_CASE("hopper CTA pairs: 1x2 (A shared) and 2x1 (B shared) with 128-row tiles only", "[spec]") {
  for (const char* text : {"family=hopper,tile=128x256x64,stages=4,cluster=2x1",
                           "family=hopper,tile=128x128x64,stages=6,cluster=2x1,layout=masked,sched=dynamic,c=f32",
                           "family=hopper,tile=128x192x64,stages=5,cluster=2x1,a=f16,b=f16,c=f16",
                           "family=hopper,tile=128x256x64,stages=4,cluster=2x1,fuse=scatter+weight+bias",
                           "family=hopper,tile=128x256x64,stages=4,cluster=2x1,fuse=bias,act=swiglu,glu=split",
                           "family=hopper,tile=128x256x64,stages=4,cluster=1x2"}) {
    INFO(text);
    KernelSpec s = KernelSpec::parse(text);
    CHECK_NOTHROW(s.validate());
    CHECK(KernelSpec::parse(s.to_text()) == s);
  }
  KernelSpec a = KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,cluster=2x1");
  KernelSpec b = KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,cluster=1x2");
  CHECK(a.to_text().find("cluster=2x1") != std::string::npos);
  CHECK(a.key() != b.key());
  CHECK(a.dynamic_smem_bytes() == b.dynamic_smem_bytes());  // same stages, same C staging
  require_rejected("family=hopper,tile=64x256x64,stages=5,cluster=2x1", {"cluster=2x1", "128-row tiles"});
  require_rejected("family=hopper,tile=128x256x64,stages=4,cluster=2x2", {"cluster=2x2"});
  require_rejected("family=hopper,tile=128x256x64,stages=4,cluster=4x1", {"cluster=4x1"});
  require_rejected("family=hopper,tile=128x256x64,stages=4,cluster=0x2", {"cluster=0x2"});
  // FP8 (v30): 2x1 on the static scheduler (fused and c=e4m3 too since v38), ungathered on the
  // dynamic one too (v49); not 1x2.
  CHECK_NOTHROW(KernelSpec::parse("family=hopper,a=e4m3,b=e4m3,tile=128x256x128,stages=4,cluster=2x1").validate());
  CHECK_NOTHROW(KernelSpec::parse("family=hopper,a=e4m3,b=e4m3,tile=128x256x128,stages=4,cluster=2x1,sched=dynamic").validate());
  CHECK_NOTHROW(KernelSpec::parse("family=hopper,a=e4m3,b=e4m3,tile=128x192x128,stages=4,cluster=2x1,sched=dynamic,"
                                  "fuse=scatter+weight").validate());
  CHECK_NOTHROW(KernelSpec::parse("family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=128x256x128,stages=4,cluster=2x1,"
                                  "fuse=gather+bias,act=swiglu,glu=split").validate());
  require_rejected("family=hopper,a=e4m3,b=e4m3,cluster=1x2", {"cluster=1x2", "2x1"});
  require_rejected("family=hopper,a=e4m3,b=e4m3,tile=128x256x128,stages=4,cluster=2x1,sched=dynamic,fuse=gather",
                   {"cluster=2x1", "sched=static"});
  require_rejected("family=hopper,a=e4m3,b=e4m3,tile=64x256x128,stages=4,cluster=2x1", {"cluster=2x1", "128-row tiles"});
  require_rejected("family=portable,arch=sm_90a,tile=128x128x32,cluster=2x1", {"cluster=2x1"});
}

TEST_CASE("FP8 hopper spec: defaults, canonical text, shared memory", "[spec]") {
  auto s = KernelSpec::parse("family=hopper,a=e4m3,b=e4m3");
  s.validate();
  CHECK(s.tile == TileShape{128, 128, 128});
  CHECK(s.stages == 6);
  CHECK(s.to_text() ==
        "family=hopper,arch=sm_90a,layout=contiguous,a=e4m3,b=e4m3,c=bf16,acc=f32,tile=128x128x128,stages=6,"
        "cluster=1x1,sched=static,fuse=none,act=none");
  CHECK(KernelSpec::parse(s.to_text()) == s);
  // fp8_smem_bytes<128, 128, 6>(): per stage 128 bytes per tile row and the scales (128 A rows x 4
  // + a 128-byte B slot area, v33), + 512 of barriers; no C staging (fp8_c_staged: it misses by 1280 bytes).
  CHECK_FALSE(s.stages_c());
  CHECK(s.dynamic_smem_bytes() == 6 * (256 * 128 + 640) + 512);
  CHECK(element_bytes(DType::e4m3) == 1);
}

TEST_CASE("spec key is pinned", "[spec][hash]") {
  // If this changes, every user's cache key for this spec changes: do it on purpose only.
  KernelSpec spec = KernelSpec::parse("family=portable,arch=sm_80,tile=128x128x32,stages=4,warps=2x4");
  CHECK(spec.key().hex() == "83d90f94cf2236f8842ab446d19bceb2");
  CHECK(KernelSpec::parse(spec.to_text()).key() == spec.key());
  KernelSpec other = spec;
  other.stages = 3;
  CHECK_FALSE(other.key() == spec.key());
}

TEST_CASE("FP8 hopper shared memory: C staging only where it fits beside the stages", "[spec]") {
  // Mirrors fp8_smem_bytes<>() of kernel_templates/moejit/hopper_fp8/grouped_gemm_sm90_fp8.cuh.
  const auto fp8 = [](const char* rest) { return KernelSpec::parse(std::string("family=hopper,a=e4m3,b=e4m3,") + rest); };
  // Per stage: 128 bytes per tile row of A and B, 4 per A row and 128 of B scale slots (the A scales
  // come by TMA, 128-byte aligned; v33); 512 of barriers.
  CHECK(fp8("tile=128x256x128,stages=4").stages_c());
  CHECK(fp8("tile=128x256x128,stages=4").dynamic_smem_bytes() == 4 * (384 * 128 + 640) + 512 + 32768);  // 0 bytes spare (227 KB)
  CHECK(fp8("tile=128x192x128,stages=4").stages_c());
  CHECK(fp8("tile=128x128x128,stages=5").stages_c());
  CHECK_FALSE(fp8("tile=128x128x128,stages=6").stages_c());
  CHECK_FALSE(fp8("tile=128x192x128,stages=5").stages_c());
  CHECK(fp8("tile=128x192x128,stages=5").dynamic_smem_bytes() == 5 * (320 * 128 + 640) + 512);
  CHECK(fp8("tile=64x256x128,stages=4").stages_c());
  CHECK_FALSE(fp8("tile=64x256x128,stages=5").stages_c());
  CHECK(fp8("tile=64x256x128,stages=5").dynamic_smem_bytes() == 5 * (320 * 128 + 384) + 512);
  // 4-bit weight-only: 128- and 256-token tiles without epilogue fusions (TMA stores of C, v24).
  CHECK(KernelSpec::parse("family=hopper,a=bf16,b=mxfp4,tile=128x128x64,stages=8").stages_c());
  CHECK(KernelSpec::parse("family=hopper,a=bf16,b=nvfp4,tile=256x128x64,stages=4,fuse=gather").stages_c());
  CHECK_FALSE(KernelSpec::parse("family=hopper,a=bf16,b=mxfp4,tile=128x128x64,stages=8,fuse=scatter").stages_c());
  CHECK_FALSE(KernelSpec::parse("family=hopper,a=bf16,b=mxfp4,tile=64x128x64,stages=8").stages_c());
  CHECK_FALSE(KernelSpec::parse("family=portable,arch=sm_80").stages_c());
}

TEST_CASE("hopper shared memory: C staging only where it fits", "[spec]") {
  // Mirrors smem_bytes<>() of kernel_templates/moejit/hopper/grouped_gemm_sm90.cuh (the generated
  // source static_asserts equality): stages + 2048, + 32 KB of C staging when that fits in 227 KB.
  CHECK(KernelSpec::parse("family=hopper,tile=128x256x64,stages=4").dynamic_smem_bytes() == 4 * 384 * 128 + 2048 + 32768);
  CHECK(KernelSpec::parse("family=hopper,tile=128x256x64,stages=3").dynamic_smem_bytes() == 3 * 384 * 128 + 2048 + 32768);
  CHECK(KernelSpec::parse("family=hopper,tile=64x256x64,stages=5").dynamic_smem_bytes() == 5 * 320 * 128 + 2048);
  CHECK(KernelSpec::parse("family=hopper,tile=64x256x64,stages=4").dynamic_smem_bytes() == 4 * 320 * 128 + 2048 + 32768);
}

TEST_CASE("fusion fields: canonical text, round trip, key", "[spec][fusion]") {
  KernelSpec plain = KernelSpec::parse("family=hopper,tile=128x256x64,stages=4");
  // Unfused specs keep their text (and so their cache keys): no glu field.
  CHECK(plain.to_text().find("glu") == std::string::npos);
  auto s = KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,fuse=bias+gather+weight,act=swiglu");
  s.validate();
  CHECK(s.fusion.gather_a);
  CHECK(s.fusion.bias);
  CHECK(s.fusion.routing_weight);
  CHECK_FALSE(s.fusion.scatter_c);
  CHECK(s.fusion.glu == GluLayout::interleaved);
  CHECK(s.to_text() ==
        "family=hopper,arch=sm_90a,layout=contiguous,a=bf16,b=bf16,c=bf16,acc=f32,tile=128x256x64,stages=4,"
        "cluster=1x1,sched=static,fuse=gather+weight+bias,act=swiglu,glu=interleaved");
  CHECK_THROWS_AS(KernelSpec::parse(s.to_text() + ",glu=split"), SpecError);  // glu given twice
  auto split = KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,act=swiglu_oai,glu=split");
  CHECK(split.fusion.glu == GluLayout::split);
  CHECK(split.to_text().find(",act=swiglu_oai,glu=split") != std::string::npos);
  CHECK_FALSE(split.key() == KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,act=swiglu_oai").key());
  // gather_by: printed only when not cp_async; its own key, packed key and canonical round trip.
  CHECK(s.to_text().find("gather_by") == std::string::npos);
  auto tma = KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,fuse=gather+bias,act=swiglu_oai,gather_by=tma");
  tma.validate();
  CHECK(tma.fusion.gather_by == GatherLoad::tma);
  CHECK(tma.to_text().find(",glu=interleaved,gather_by=tma") != std::string::npos);
  CHECK(KernelSpec::parse(tma.to_text()) == tma);
  auto by_copies = tma;
  by_copies.fusion.gather_by = GatherLoad::cp_async;
  CHECK_FALSE(tma.key() == by_copies.key());
  CHECK(KernelSpec::parse(by_copies.to_text() + ",gather_by=cp_async") == by_copies);
  for (const char* bad : {"family=hopper,fuse=bias,gather_by=tma", "family=portable,fuse=gather,gather_by=tma"}) {
    INFO(bad);
    CHECK_THROWS_WITH(KernelSpec::parse(bad).validate(), Catch::Matchers::Contains("gather_by=tma"));
  }
  CHECK_THROWS_WITH(KernelSpec::parse("gather_by=dma"), Catch::Matchers::Contains("cp_async|tma"));
}

TEST_CASE("FP8 per-channel weight scales: b_scales=channels", "[spec]") {
  auto blocks = KernelSpec::parse("family=hopper,a=e4m3,b=e4m3");
  CHECK(blocks.b_scales == ScaleB::blocks);
  CHECK(blocks.to_text().find("b_scales") == std::string::npos);  // earlier texts and keys unchanged
  auto channels = KernelSpec::parse("family=hopper,a=e4m3,b=e4m3,b_scales=channels");
  channels.validate();
  CHECK(channels.b_scales == ScaleB::channels);
  CHECK(channels.to_text().ends_with(",b_scales=channels"));
  CHECK(KernelSpec::parse(channels.to_text()) == channels);
  CHECK_FALSE(channels.key() == blocks.key());
  CHECK(operand_formats(channels).find("b_scales fp32 [E][N]") != std::string::npos);
  for (const char* bad : {"family=hopper,b_scales=channels", "family=portable,arch=sm_80,a=e4m3,b=e4m3,b_scales=channels",
                          "family=hopper,b=mxfp4,b_scales=channels"}) {
    INFO(bad);
    CHECK_THROWS_WITH(KernelSpec::parse(bad).validate(), Catch::Matchers::Contains("b_scales=channels"));
  }
  CHECK_THROWS_WITH(KernelSpec::parse("b_scales=rows"), Catch::Matchers::Contains("blocks|channels"));
}

TEST_CASE("FP8 quantized C: c=e4m3 on Hopper FP8 tiles whose consumer slices are whole 128-column blocks", "[spec]") {
  for (const char* good : {"family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=128x256x128,stages=4,fuse=gather+bias,act=swiglu,glu=split",
                           "family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=128x256x128,stages=4,sched=dynamic,act=swiglu_oai",
                           "family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=128x256x128,stages=4",
                           "family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=128x128x128,stages=6,fuse=bias,act=silu",
                           "family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=64x256x128,stages=4,layout=masked,fuse=weight",
                           "family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=64x256x128,stages=4,fuse=gather,act=swiglu,glu=split"}) {
    INFO(good);
    auto s = KernelSpec::parse(good);
    CHECK_NOTHROW(s.validate());
    CHECK(KernelSpec::parse(s.to_text()) == s);
    CHECK(operand_formats(s).find("c_scales fp32 [ceil(N_out/128)]") != std::string::npos);
  }
  const std::pair<const char*, const char*> bad[] = {
      {"family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=128x128x128,stages=6,act=swiglu", "not whole 128-column scale blocks"},
      {"family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=64x256x128,stages=5,act=swiglu,glu=split", "fits beside 4 stages"},
      {"family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=128x192x128,stages=5", "not whole 128-column scale blocks"},
      {"family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=128x256x128,stages=4,fuse=scatter+weight", "no scatter or atomic"},
      {"family=hopper,a=e4m3,b=e4m3,c=e4m3,tile=128x192x128,stages=5,split=tail", "split=tail"},
      {"family=hopper,c=e4m3", "the Hopper FP8 kernel"},
      {"family=portable,arch=sm_80,a=e4m3,b=e4m3,c=e4m3,tile=128x128x32", "the Hopper FP8 kernel"},
      {"family=hopper,b=mxfp4,c=e4m3,tile=128x128x64,stages=8", "the Hopper FP8 kernel"},
  };
  for (auto [text, fragment] : bad) {
    INFO(text);
    CHECK_THROWS_WITH(KernelSpec::parse(text).validate(), Catch::Matchers::Contains(fragment));
  }
}

TEST_CASE("split-K tail: split=tail on the unfused single-CTA 16-bit and FP8 Hopper kernels only", "[spec]") {
  auto whole = KernelSpec::parse("family=hopper,tile=128x256x64,stages=4");
  CHECK(whole.split == SplitK::none);
  CHECK(whole.to_text().find("split") == std::string::npos);  // earlier texts and keys unchanged
  auto split = KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,split=tail");
  split.validate();
  CHECK(split.split == SplitK::tail);
  CHECK(split.to_text().ends_with(",split=tail"));
  CHECK(KernelSpec::parse(split.to_text()) == split);
  CHECK_FALSE(split.key() == whole.key());
  KernelSpec::parse("family=hopper,a=f16,b=f16,c=f32,layout=masked,sched=dynamic,tile=64x128x64,stages=8,split=tail").validate();
  KernelSpec::parse("family=hopper,a=e4m3,b=e4m3,tile=128x192x128,stages=5,b_scales=channels,split=tail").validate();
  for (const char* bad : {"family=portable,arch=sm_80,split=tail", "family=hopper,tile=128x256x64,stages=4,cluster=1x2,split=tail",
                          "family=hopper,tile=128x256x64,stages=4,cluster=2x1,split=tail",
                          "family=hopper,tile=128x256x64,stages=4,fuse=bias,split=tail",
                          "family=hopper,tile=128x256x64,stages=4,act=silu,split=tail",
                          "family=hopper,a=e4m3,b=e4m3,tile=128x192x128,stages=5,act=silu,split=tail",
                          "family=portable,arch=sm_80,a=e4m3,b=e4m3,split=tail",
                          "family=hopper,b=mxfp4,tile=128x128x64,stages=8,split=tail"}) {
    INFO(bad);
    CHECK_THROWS_WITH(KernelSpec::parse(bad).validate(), Catch::Matchers::Contains("split=tail"));
  }
  CHECK_THROWS_WITH(KernelSpec::parse("split=stream"), Catch::Matchers::Contains("none|tail"));
}

TEST_CASE("tile bands: band=N on the Hopper families, printed only when set", "[spec]") {
  auto plain = KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,cluster=1x2,sched=dynamic");
  CHECK(plain.band == 0);
  CHECK(plain.to_text().find("band") == std::string::npos);  // earlier texts and keys unchanged
  for (const char* text : {"family=hopper,tile=128x256x64,stages=4,cluster=1x2,sched=dynamic,band=8",
                           "family=hopper,a=e4m3,b=e4m3,tile=128x256x128,stages=4,band=16",
                           "family=hopper,b=nvfp4,tile=256x128x64,stages=4,band=4",
                           "family=hopper,tile=128x256x64,stages=4,split=tail,band=1"}) {
    INFO(text);
    auto s = KernelSpec::parse(text);
    s.validate();
    CHECK(s.band > 0);
    CHECK(s.to_text().ends_with(fmt::format(",band={}", s.band)));
    CHECK(KernelSpec::parse(s.to_text()) == s);
  }
  auto banded = KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,cluster=1x2,sched=dynamic,band=8");
  CHECK_FALSE(banded.key() == plain.key());
  for (const char* bad : {"family=portable,arch=sm_80,band=8", "family=hopper,band=-1", "family=hopper,band=2000"}) {
    INFO(bad);
    CHECK_THROWS_WITH(KernelSpec::parse(bad).validate(), Catch::Matchers::Contains("band="));
  }
  CHECK_THROWS_WITH(KernelSpec::parse("family=hopper,band=wide"), Catch::Matchers::Contains("'band'"));
}

TEST_CASE("pair order: pair_order=interleaved on 16-bit and FP8 2x1 pairs on the dynamic scheduler, printed only when set", "[spec]") {
  auto plain = KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,cluster=2x1,sched=dynamic");
  CHECK(plain.pair_order == PairOrder::plain);
  CHECK(plain.to_text().find("pair_order") == std::string::npos);  // earlier texts and keys unchanged
  CHECK(KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,pair_order=plain") == plain);
  for (const char* text : {"family=hopper,tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,pair_order=interleaved",
                           "family=hopper,tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,tail=24,pair_order=interleaved",
                           "family=hopper,a=f16,b=f16,c=f32,layout=masked,tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,pair_order=interleaved",
                           "family=hopper,tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,fuse=scatter+weight+bias,tail=24,pair_order=interleaved",
                           // FP8 pairs on the dynamic scheduler (v49)
                           "family=hopper,a=e4m3,b=e4m3,tile=128x256x128,stages=4,cluster=2x1,sched=dynamic,pair_order=interleaved"}) {
    INFO(text);
    auto s = KernelSpec::parse(text);
    s.validate();
    CHECK(s.to_text().ends_with(",pair_order=interleaved"));
    CHECK(KernelSpec::parse(s.to_text()) == s);
  }
  CHECK_FALSE(KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,pair_order=interleaved").key() ==
              plain.key());
  for (const char* bad : {"family=hopper,tile=128x256x64,stages=4,cluster=2x1,sched=static,pair_order=interleaved",
                          "family=hopper,tile=128x256x64,stages=4,cluster=1x2,sched=dynamic,pair_order=interleaved",
                          "family=hopper,tile=128x256x64,stages=4,sched=dynamic,pair_order=interleaved",
                          "family=hopper,tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,band=4,pair_order=interleaved",
                          "family=hopper,tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,mix=256,pair_order=interleaved",
                          "family=hopper,a=e4m3,b=e4m3,tile=128x256x128,stages=4,cluster=2x1,sched=static,pair_order=interleaved",
                          "family=portable,arch=sm_80,pair_order=interleaved"}) {
    INFO(bad);
    CHECK_THROWS_WITH(KernelSpec::parse(bad).validate(), Catch::Matchers::Contains("pair_order="));
  }
  CHECK_THROWS_WITH(KernelSpec::parse("family=hopper,pair_order=zigzag"), Catch::Matchers::Contains("'pair_order'"));
}

TEST_CASE("absorbed tail rows: tail=24 on the 16-bit 128x256 Hopper kernel, single CTAs or pairs, any fusion but atomic", "[spec]") {
  auto plain = KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,cluster=1x2,sched=dynamic");
  CHECK(plain.tail == 0);
  CHECK(plain.to_text().find("tail") == std::string::npos);  // earlier texts and keys unchanged
  for (const char* text : {"family=hopper,tile=128x256x64,stages=4,cluster=1x2,sched=dynamic,tail=24",
                           "family=hopper,tile=128x256x64,stages=4,sched=static,layout=masked,c=f32,tail=24",
                           "family=hopper,a=f16,b=f16,c=f16,tile=128x256x64,stages=4,tail=24",
                           // an MoE layer's GEMM2 (v41): scattered rows, weighted and biased
                           "family=hopper,tile=128x256x64,stages=4,cluster=1x2,sched=dynamic,fuse=scatter+weight+bias,tail=24",
                           "family=hopper,tile=128x256x64,stages=4,c=f32,fuse=scatter,tail=24",
                           // a layer's gathered GEMM1 (v42), both GLU layouts, rows by cp.async or TMA
                           "family=hopper,tile=128x256x64,stages=4,sched=dynamic,fuse=gather+bias,act=swiglu_oai,tail=24",
                           "family=hopper,tile=128x256x64,stages=4,fuse=gather,act=swiglu,glu=split,gather_by=tma,tail=24",
                           "family=hopper,tile=128x256x64,stages=4,fuse=bias,tail=24",
                           "family=hopper,tile=128x256x64,stages=4,fuse=gather+scatter+weight,act=gelu,tail=24",
                           // on pairs sharing B (v42)
                           "family=hopper,tile=128x256x64,stages=4,cluster=2x1,sched=dynamic,tail=24",
                           "family=hopper,tile=128x256x64,stages=4,cluster=2x1,fuse=gather,act=swiglu,glu=split,tail=24"}) {
    INFO(text);
    auto s = KernelSpec::parse(text);
    s.validate();
    CHECK(s.to_text().ends_with(",tail=24"));
    CHECK(KernelSpec::parse(s.to_text()) == s);
    // 24 more A rows per stage, one 8 KB C chunk per consumer: the same 227 KB budget as without.
    CHECK(s.dynamic_smem_bytes() == 4 * (128 + 256 + 24) * 128 + 2048 + 16384);
    CHECK(s.dynamic_smem_bytes() <= 227 * 1024);
    CHECK(s.stages_c());
  }
  CHECK_FALSE(KernelSpec::parse("family=hopper,tile=128x256x64,stages=4,cluster=1x2,sched=dynamic,tail=24").key() ==
              plain.key());
  for (const char* bad : {"family=hopper,tile=128x256x64,stages=4,tail=16", "family=hopper,tile=128x128x64,stages=6,tail=24",
                          "family=hopper,tile=128x256x64,stages=4,split=tail,tail=24",
                          "family=hopper,tile=128x256x64,stages=4,c=f32,fuse=scatter+weight+atomic,tail=24",
                          "family=hopper,tile=128x192x64,stages=4,cluster=2x1,fuse=gather,act=swiglu,tail=24",
                          "family=hopper,a=e4m3,b=e4m3,tile=128x256x128,stages=4,tail=24",
                          "family=portable,arch=sm_80,tail=24"}) {
    INFO(bad);
    CHECK_THROWS_WITH(KernelSpec::parse(bad).validate(), Catch::Matchers::Contains("tail="));
  }
  CHECK_THROWS_WITH(KernelSpec::parse("family=hopper,tail=some"), Catch::Matchers::Contains("'tail'"));
}

TEST_CASE("fusion specs round-trip for every flag, activation and layout", "[spec][fusion]") {
  std::set<std::string> texts;
  std::set<std::string> keys;
  for (auto family : {"portable", "hopper"})
    for (auto fuse : {"none", "gather", "scatter", "weight", "bias", "gather+scatter+weight+bias", "scatter+atomic",
                      "scatter+weight+atomic"})
      for (auto act : {"none", "silu", "gelu", "swiglu", "swiglu_oai"})
        for (auto glu : {"", "interleaved", "split"}) {
          bool glu_act = std::string(act).rfind("swiglu", 0) == 0;
          if (*glu && !glu_act && std::string(glu) == "split") continue;  // rejected (checked above)
          std::string text = std::string("family=") + family + ",c=f32,fuse=" + fuse + ",act=" + act;
          if (*glu) text += std::string(",glu=") + glu;
          if (std::string(family) == "hopper") text += ",tile=128x128x64,stages=5";
          INFO(text);
          KernelSpec spec = KernelSpec::parse(text);
          REQUIRE_NOTHROW(spec.validate());
          KernelSpec again = KernelSpec::parse(spec.to_text());
          CHECK(again == spec);
          CHECK(again.to_text() == spec.to_text());
          CHECK(again.key() == spec.key());
          texts.insert(spec.to_text());
          keys.insert(spec.key().hex());
        }
  CHECK(texts.size() == keys.size());
}
