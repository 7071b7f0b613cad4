// The hot-path keys (packed spec, shape bucket), the tuner's candidate list and its file, and the
// entry points that need a GPU failing clearly without one.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "cache/kernel_cache.hpp"
#include "cache/spec_key.hpp"
#include "cache/tuning_table.hpp"
#include "driver/driver_api.hpp"
#include "heuristics/config.hpp"
#include "heuristics/tuning.hpp"
#include "moejit/moejit.hpp"
#include "test_support.hpp"

using namespace moejit;
using namespace moejit::test;

namespace {
const Arch kHopper{9, 0, true};
const Arch kAmpere{8, 0, false};
}  // namespace

TEST_CASE("packed spec keys: equal specs equal keys, every field changes the key", "[tuning][hot]") {
  KernelSpec base = KernelSpec::parse("family=portable,arch=sm_80,tile=64x128x32,stages=4,warps=2x4");
  REQUIRE(pack_spec(base));
  CHECK(*pack_spec(base) == *pack_spec(KernelSpec::parse(base.to_text())));
  std::vector<KernelSpec> variants;
  auto vary = [&](auto change) {
    KernelSpec s = base;
    change(s);
    variants.push_back(s);
  };
  vary([](KernelSpec& s) { s.family = KernelFamily::hopper; });
  vary([](KernelSpec& s) { s.arch.major = 9; });
  vary([](KernelSpec& s) { s.arch.minor = 6; });
  vary([](KernelSpec& s) { s.arch.arch_specific = true; });
  vary([](KernelSpec& s) { s.layout = GroupLayout::masked; });
  vary([](KernelSpec& s) { s.a = DType::f16; });
  vary([](KernelSpec& s) { s.b = DType::f16; });
  vary([](KernelSpec& s) { s.c = DType::f32; });
  vary([](KernelSpec& s) { s.acc = DType::f16; });
  vary([](KernelSpec& s) { s.a = s.b = DType::e4m3; });
  vary([](KernelSpec& s) { s.tile.m = 128; });
  vary([](KernelSpec& s) { s.tile.n = 64; });
  vary([](KernelSpec& s) { s.tile.k = 64; });
  vary([](KernelSpec& s) { s.stages = 5; });
  vary([](KernelSpec& s) { s.warps_m = 4; });
  vary([](KernelSpec& s) { s.warps_n = 2; });
  vary([](KernelSpec& s) { s.cluster_m = 2; });
  vary([](KernelSpec& s) { s.cluster_n = 2; });
  vary([](KernelSpec& s) { s.scheduler = Scheduler::dynamic; });
  vary([](KernelSpec& s) { s.fusion.gather_a = true; });
  vary([](KernelSpec& s) { s.fusion.scatter_c = true; });
  vary([](KernelSpec& s) { s.fusion.routing_weight = true; });
  vary([](KernelSpec& s) { s.fusion.bias = true; });
  vary([](KernelSpec& s) { s.fusion.activation = Activation::swiglu_oai; });
  vary([](KernelSpec& s) { s.fusion.atomic = true; });
  vary([](KernelSpec& s) { s.fusion.glu = GluLayout::split; });
  vary([](KernelSpec& s) { s.fusion.gather_by = GatherLoad::tma; });
  vary([](KernelSpec& s) { s.b_scales = ScaleB::channels; });
  vary([](KernelSpec& s) { s.split = SplitK::tail; });
  vary([](KernelSpec& s) { s.band = 4; });  // a tile order is another kernel (was missing from the key)
  vary([](KernelSpec& s) { s.tail = 24; });
  vary([](KernelSpec& s) { s.mix = 256; });  // the mixed tile order (v43)
  vary([](KernelSpec& s) { s.pair_order = PairOrder::interleaved; });  // v49
  std::set<std::pair<std::uint64_t, std::uint64_t>> keys;
  keys.insert({pack_spec(base)->lo, pack_spec(base)->hi});
  for (auto& v : variants) {
    auto k = pack_spec(v);
    REQUIRE(k);
    CHECK(keys.insert({k->lo, k->hi}).second);
  }
  // Fields out of their bits: no key (the text-keyed path serves them).
  KernelSpec wide = base;
  wide.tile.m = 1 << 9;
  CHECK_FALSE(pack_spec(wide));
  wide = base;
  wide.stages = -1;
  CHECK_FALSE(pack_spec(wide));
}

TEST_CASE("kernel cache hot path: repeated gets return the same kernel as memory hits", "[tuning][hot][cache]") {
  TempDir dir;
  TemplateStore templates = fast_template_store(dir);
  KernelCache cache(templates, NvrtcCompiler(), DiskCache((dir.path() / "cache").string()));
  KernelSpec spec = KernelSpec::parse("family=portable,arch=sm_80,tile=64x64x32,stages=2,warps=2x2");
  CacheOutcome outcome;
  auto first = cache.get(spec, &outcome);
  CHECK(outcome == CacheOutcome::compiled);
  for (int i = 0; i < 3; ++i) {
    auto again = cache.get(spec, &outcome);
    CHECK(outcome == CacheOutcome::memory_hit);
    CHECK(again.get() == first.get());
  }
  // An unpackable spec still goes through the text-keyed path (and fails validation there).
  KernelSpec wide = spec;
  wide.tile.m = 1 << 9;
  CHECK_THROWS_AS(cache.get(wide), SpecError);
}

TEST_CASE("shape buckets: rounding, text round trip, rejects other text", "[tuning]") {
  auto b = ShapeBucket::of(GroupLayout::contiguous, DType::bf16, DType::bf16, 128, 5760, 2880, 65536, 128);
  CHECK(b.to_text() == "layout=contiguous,ab=bf16,c=bf16,groups=128,n=5760,k=2880,rows<=512,active<=128");
  CHECK(ShapeBucket::parse(b.to_text()) == b);
  // 513 rows per group rounds up to 1024; 65 rows per group is past the heuristic's 64.
  CHECK(ShapeBucket::of(GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 64, 64, 513 * 8, 8).rows_log2 == 10);
  auto small = ShapeBucket::of(GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 64, 64, 64 * 5, 5);
  auto large = ShapeBucket::of(GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 64, 64, 65 * 5, 5);
  CHECK(small.rows_log2 == 6);
  CHECK(large.rows_log2 == 7);
  CHECK_FALSE(small == large);
  CHECK(ShapeBucketHash()(small) != ShapeBucketHash()(large));
  auto one = ShapeBucket::of(GroupLayout::masked, DType::f16, DType::f32, 4, 64, 64, 0, 0);
  CHECK(ShapeBucket::parse(one.to_text()) == one);
  // Weight-only 4-bit and FP8 problems get buckets of their own; 16-bit buckets keep their text.
  // A skewed routing's hot experts at a small mean: a bucket of its own (",hot").
  auto hot = ShapeBucket::of(GroupLayout::contiguous, DType::bf16, DType::bf16, 256, 4096, 7168, 8192, 224, std::nullopt, true);
  CHECK(hot.to_text() == "layout=contiguous,ab=bf16,c=bf16,groups=256,n=4096,k=7168,rows<=64,active<=256,hot");
  CHECK(ShapeBucket::parse(hot.to_text()) == hot);
  CHECK_FALSE(ShapeBucket::of(GroupLayout::contiguous, DType::bf16, DType::bf16, 256, 4096, 7168, 8192, 224) == hot);
  auto hot_w4 = ShapeBucket::of(GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 4096, 14336, 2048, 7, DType::mxfp4, true);
  CHECK(ShapeBucket::parse(hot_w4.to_text()) == hot_w4);
  CHECK_FALSE(ShapeBucket::parse("layout=masked,ab=bf16,c=bf16,groups=1,n=8,k=8,rows<=1,active<=1,hotter"));
  // Hot groups beside small ones at a larger mean (the mixed order's rule, v44): ",mixed".
  auto mixed = ShapeBucket::of(GroupLayout::contiguous, DType::bf16, DType::bf16, 256, 7168, 2048, 32768, 224, std::nullopt,
                               false, true);
  CHECK(mixed.to_text() == "layout=contiguous,ab=bf16,c=bf16,groups=256,n=7168,k=2048,rows<=256,active<=256,mixed");
  CHECK(ShapeBucket::parse(mixed.to_text()) == mixed);
  CHECK_FALSE(ShapeBucket::of(GroupLayout::contiguous, DType::bf16, DType::bf16, 256, 7168, 2048, 32768, 224) == mixed);
  auto both = ShapeBucket::of(GroupLayout::masked, DType::f16, DType::f16, 8, 4096, 1024, 512, 8, std::nullopt, true, true);
  CHECK(both.to_text().ends_with(",hot,mixed"));
  CHECK(ShapeBucket::parse(both.to_text()) == both);
  CHECK_FALSE(ShapeBucket::parse("layout=masked,ab=bf16,c=bf16,groups=1,n=8,k=8,rows<=1,active<=1,mixed,hot"));
  // Few large groups whose sizes may take the 64x256 tile (v54): ",few", after ",mixed".
  auto few = ShapeBucket::of(GroupLayout::contiguous, DType::e4m3, DType::bf16, 8, 32768, 6144, 1408, 8, std::nullopt,
                             false, false, true);
  CHECK(few.to_text() == "layout=contiguous,ab=e4m3,c=bf16,groups=8,n=32768,k=6144,rows<=256,active<=8,few");
  CHECK(ShapeBucket::parse(few.to_text()) == few);
  CHECK_FALSE(ShapeBucket::of(GroupLayout::contiguous, DType::e4m3, DType::bf16, 8, 32768, 6144, 1408, 8) == few);
  auto all3 = ShapeBucket::of(GroupLayout::masked, DType::bf16, DType::bf16, 8, 4096, 14336, 512, 8, std::nullopt, true, true, true);
  CHECK(all3.to_text().ends_with(",hot,mixed,few"));
  CHECK(ShapeBucket::parse(all3.to_text()) == all3);
  CHECK_FALSE(ShapeBucket::parse("layout=masked,ab=bf16,c=bf16,groups=1,n=8,k=8,rows<=1,active<=1,few,hot"));
  // 20 groups of 7 M tiles beside 200 of 1 (41% heavy), and the like.
  CHECK(mixed_order_pays(7168, 2048, MixClasses{140, 200, 20, 200}));
  CHECK_FALSE(mixed_order_pays(7168, 2048, MixClasses{0, 340, 0, 256}));    // random routing: no hot group
  CHECK_FALSE(mixed_order_pays(7168, 2048, MixClasses{340, 0, 100, 0}));    // every group hot
  CHECK_FALSE(mixed_order_pays(4096, 7168, MixClasses{140, 200, 20, 200}));  // K long
  // An even routing around 256 rows: the classes hold 3 and 2 M tiles a group, no skew.
  CHECK_FALSE(mixed_order_pays(7168, 2048, MixClasses{384, 256, 128, 128}));
  std::vector<int> around_256(256);
  for (int g = 0; g < 256; ++g) around_256[g] = 230 + (g * 37) % 53;  // 230-282 rows
  CHECK_FALSE(mixed_order_pays(7168, 2048, around_256));
  CHECK(hot_groups_dominate(std::vector<int>{972, 739, 557, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10,
                                             10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10}));
  CHECK_FALSE(hot_groups_dominate(std::vector<int>(256, 32)));   // even routing at 1024 tokens
  CHECK_FALSE(hot_groups_dominate(std::vector<int>(256, 512)));  // prefill: the mean is over 128
  auto w4 = ShapeBucket::of(GroupLayout::contiguous, DType::bf16, DType::bf16, 128, 5760, 2880, 64, 16, DType::mxfp4);
  CHECK(w4.to_text() == "layout=contiguous,ab=bf16,c=bf16,groups=128,n=5760,k=2880,rows<=4,active<=16,b=mxfp4");
  CHECK(ShapeBucket::parse(w4.to_text()) == w4);
  auto same = ShapeBucket::of(GroupLayout::contiguous, DType::bf16, DType::bf16, 128, 5760, 2880, 64, 16);
  CHECK_FALSE(w4 == same);
  CHECK(ShapeBucketHash()(w4) != ShapeBucketHash()(same));
  auto fp8 = ShapeBucket::of(GroupLayout::masked, DType::e4m3, DType::bf16, 256, 4096, 7168, 1024, 256);
  CHECK(ShapeBucket::parse(fp8.to_text()) == fp8);
  auto channels = fp8;  // per-channel weight scales: a bucket of their own
  channels.b_scales = ScaleB::channels;
  CHECK(channels.to_text().find(",b_scales=channels") != std::string::npos);
  CHECK(ShapeBucket::parse(channels.to_text()) == channels);
  CHECK_FALSE(channels == fp8);
  CHECK_FALSE(ShapeBucket::parse("layout=masked,ab=bf16,c=bf16,groups=1,n=8,k=8,rows<=1,active<=1,b_scales=channels"));
  for (const char* bad : {"layout=masked,ab=bf16,c=bf16,groups=1,n=8,k=8,rows<=1,active<=1,b=f16",
                          "layout=masked,ab=f16,c=bf16,groups=1,n=8,k=8,rows<=1,active<=1,b=nvfp4",
                          "layout=masked,ab=bf16,c=bf16,groups=1,n=8,k=8,rows<=1,active<=1,b=nvfp4,x=1"})
    CHECK_FALSE(ShapeBucket::parse(bad));
  for (const char* bad : {"", "layout=contiguous", "layout=other,ab=bf16,c=bf16,groups=1,n=8,k=8,rows<=1,active<=1",
                          "layout=masked,ab=bf16,c=bf16,groups=1,n=8,k=8,rows<=3,active<=1",
                          "layout=masked,ab=bf16,c=bf16,groups=0,n=8,k=8,rows<=1,active<=1",
                          "layout=masked,ab=bf16,c=bf16,groups=1,n=8,k=8,rows<=1,active<=1,extra=1"})
    CHECK_FALSE(ShapeBucket::parse(bad));
}

TEST_CASE("shape buckets with fusions: own bucket, text round trip", "[tuning][fusion]") {
  auto plain = ShapeBucket::of(GroupLayout::contiguous, DType::bf16, DType::bf16, 128, 5760, 2880, 65536, 128);
  auto fused = plain;
  fused.fusion = KernelSpec::parse("fuse=gather+bias,act=swiglu_oai,glu=split").fusion;
  CHECK(fused.to_text() == plain.to_text() + ",fuse=gather+bias,act=swiglu_oai,glu=split");
  CHECK(ShapeBucket::parse(fused.to_text()) == fused);
  CHECK_FALSE(fused == plain);
  CHECK(ShapeBucketHash()(fused) != ShapeBucketHash()(plain));
  for (const char* tail : {",fuse=none,act=none", ",act=silu", ",fuse=gather,act=none,tile=1x1x1", ",fuse=bias"})
    CHECK_FALSE(ShapeBucket::parse(plain.to_text() + tail));
}

TEST_CASE("heuristic and tuner keep the fusions; gathered pairs share B", "[tuning][fusion]") {
  std::vector<int> group_rows(8, 4096);  // long compute-bound launch: the heuristic takes CTA pairs
  GemmProblem problem{GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 28672, 4096, 8 * 4096, group_rows};
  CHECK(choose_spec(problem, kHopper, 132).cluster_n == 2);
  problem.fusion = KernelSpec::parse("fuse=gather+bias,act=swiglu").fusion;
  KernelSpec s = choose_spec(problem, kHopper, 132);
  CHECK(s.fusion == problem.fusion);
  CHECK(s.cluster_n == 1);  // gathered A is not multicast: the pair shares B
  CHECK(s.cluster_m == 2);
  bool tuner_pairs = false;
  for (auto& c : tuning_candidates(problem, kHopper, 132)) {
    CHECK(c.fusion == problem.fusion);  // gather_by=tma stays opt-in (slower, docs/perf.md v7)
    CHECK(c.cluster_n == 1);
    tuner_pairs = tuner_pairs || c.cluster_m == 2;
    CHECK_NOTHROW(c.validate());
  }
  CHECK(tuner_pairs);
  problem.fusion = KernelSpec::parse("fuse=scatter+weight").fusion;
  CHECK(choose_spec(problem, kHopper, 132).cluster_n == 2);  // only gather rules pairs out
  CHECK(choose_spec(problem, kAmpere, 108).fusion == problem.fusion);
}

TEST_CASE("tuning candidates: 2x1 CTA pairs (B shared) from 128 rows per group; the heuristic's at 160-255 rows with long K or large experts (bf16)", "[tuning]") {
  auto count_pair_m = [](const std::vector<KernelSpec>& specs) {
    int n = 0;
    for (auto& s : specs) {
      if (s.cluster_m != 2) continue;
      ++n;
      CHECK(s.cluster_n == 1);
      CHECK(s.tile == TileShape{128, 256, 64});
      CHECK(s.stages == 4);
      CHECK_NOTHROW(s.validate());
    }
    return n;
  };
  struct Case {
    int groups, rows_per_group, n, k;
    int expected;  // 2x1 candidates: static and dynamic, each with and without tail rows (v42), or none
    int heuristic_m = 1;  // the heuristic's cluster_m
  };
  for (Case c : {Case{256, 512, 4096, 7168, 5, 2},  // DeepSeek-V3 up 16384 tokens (2x1 interleaved, v49; and its plain twins)
                 Case{256, 512, 7168, 2048, 4},    // DeepSeek-V3 down 16384
                 Case{8, 4096, 4096, 14336, 4},    // Mixtral down 16384
                 Case{8, 256, 28672, 4096, 4},     // 2 M tiles per group
                 Case{256, 128, 4096, 7168, 4},    // DeepSeek-V3 up 4096: one full M tile per expert, the threshold
                 Case{384, 171, 4096, 7168, 4, 2},  // long K at 160-255 rows: the heuristic's (v39: 0.83-0.92x)
                 Case{256, 192, 4096, 4096, 4, 2},  // shorter K, large experts: N x K = 16.8 M (v45)
                 Case{160, 204, 3072, 5120, 4, 2},  // GLM-4.5 up 4096 tokens (v45: 0.91x in turns)
                 Case{160, 204, 5120, 1536, 4},     // GLM-4.5 down: 7.9 M weights per expert, single (v45: 0.99-1.00x)
                 Case{160, 204, 2880, 2880, 4},     // 8.3 M: single (v45: 0.97-1.01x)
                 Case{160, 204, 3072, 2048, 4},     // 6.3 M: single (v45: 0.995-1.00x)
                 Case{256, 127, 4096, 7168, 0},    // below it: every unit a split one, nothing shared
                 Case{128, 1, 2048, 768, 0}}) {    // decode
    std::vector<int> sizes(c.groups, c.rows_per_group);
    GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, c.groups, c.n, c.k,
                  (long long)c.groups * c.rows_per_group, sizes};
    INFO(c.groups << " groups of " << c.rows_per_group << " rows, N " << c.n << " K " << c.k);
    const KernelSpec chosen = choose_spec(p, kHopper, 132);
    CHECK(chosen.cluster_m == c.heuristic_m);
    if (c.heuristic_m == 2) CHECK(chosen.scheduler == Scheduler::dynamic);
    CHECK(count_pair_m(tuning_candidates(p, kHopper, 132)) == c.expected);
    CHECK(count_pair_m(tuning_candidates(p, kAmpere, 108)) == 0);  // portable: no clusters
    p.layout = GroupLayout::masked;
    CHECK(count_pair_m(tuning_candidates(p, kHopper, 132)) == c.expected);
  }
  {  // long K below 256 rows: not where the single CTAs' last round splits along K (Mixtral down, K = 14336)
    std::vector<int> ragged = {250, 120, 250, 120, 250, 120, 250, 120};  // 185 rows: 12 M tiles, 1.45 rounds
    GemmProblem down{GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 4096, 14336, 1480, ragged};
    KernelSpec s = choose_spec(down, kHopper, 132);
    CHECK((s.cluster_m == 1 && s.split == SplitK::tail));
    std::vector<int> even(8, 192);  // 768 tokens: 1.94 rounds, no split: 2x1 (v39: 0.90-0.91x) until v54,
    GemmProblem down768{GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 4096, 14336, 8 * 192, even};
    s = choose_spec(down768, kHopper, 132);  // now 64x256 static: 3 rounds of half tiles against 2 (0.82-0.87x)
    CHECK((s.tile.m == 64 && s.tile.n == 256 && s.scheduler == Scheduler::static_persistent && s.cluster_m == 1));
    even.assign(8, 200);  // a fourth 64-row tile per group: 4 rounds, pairs stay
    down768.group_rows = even;
    down768.total_rows = 8 * 200;
    s = choose_spec(down768, kHopper, 132);
    CHECK((s.cluster_m == 2 && s.split == SplitK::none));
  }
  {  // Many groups: 2x1 in the interleaved pair order where many groups end in a short odd M tile, or
     // (unfused) where a group's weights fill most of L2 (v49); otherwise as before: ragged N 2x1 in the
     // plain order, whole N 1x2.
    auto choose = [](int groups, int rows_per_group, int n, int k, const char* fuse = "") {
      std::vector<int> rows(groups, rows_per_group);
      GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, groups, n, k, (long long)groups * rows_per_group, rows};
      if (*fuse) p.fusion = KernelSpec::parse(fuse).fusion;
      return choose_spec(p, kHopper, 132);
    };
    struct Want {
      int groups, rows, n, k;
      const char* fuse;
      int cluster_m;
      PairOrder order;
    };
    for (Want w : {Want{128, 512, 5760, 2880, "", 2, PairOrder::interleaved},     // gpt-oss up 16384: 33 MB per expert
                   Want{128, 320, 5760, 2880, "", 2, PairOrder::interleaved},     // a short odd third tile (64 rows)
                   Want{128, 512, 2880, 2880, "", 2, PairOrder::plain},           // gpt-oss down 16384: 16 MB
                   Want{256, 512, 4096, 7168, "", 2, PairOrder::interleaved},     // DeepSeek-V3 up 16384: 58 MB
                   Want{256, 512, 7168, 2048, "", 1, PairOrder::plain},           // DeepSeek-V3 down 16384: 28 MB, 1x2
                   Want{256, 320, 7168, 2048, "", 2, PairOrder::interleaved},     // ... at 320 rows: short odd tiles
                   Want{256, 320, 7168, 2048, "fuse=scatter+weight", 2, PairOrder::interleaved},  // its GEMM2 too
                   Want{256, 512, 7168, 2048, "fuse=scatter+weight", 1, PairOrder::plain},
                   Want{256, 380, 7168, 2048, "", 1, PairOrder::plain},           // a long odd third tile (124 rows)
                   Want{128, 640, 3072, 4096, "", 1, PairOrder::plain},           // Qwen3-235B up: 24 MB
                   Want{8, 4096, 28672, 4096, "", 1, PairOrder::plain},           // Mixtral up 16384: 8 groups, 1x2
                   // a layer's gathered GEMM1 (2x1 whatever the N): by the same two tests
                   Want{256, 512, 4096, 7168, "fuse=gather,act=swiglu,glu=split", 2, PairOrder::interleaved},
                   Want{128, 640, 3072, 4096, "fuse=gather,act=swiglu,glu=split", 2, PairOrder::plain}}) {
      INFO(w.groups << " groups of " << w.rows << " rows, N " << w.n << " K " << w.k << " " << w.fuse);
      const KernelSpec s = choose(w.groups, w.rows, w.n, w.k, w.fuse);
      CHECK(s.cluster_m == w.cluster_m);
      CHECK(s.cluster_m * s.cluster_n == 2);
      CHECK(s.scheduler == Scheduler::dynamic);
      CHECK(s.pair_order == w.order);
      if (s.cluster_m != 2) continue;
      // Another routing may want the other order: prewarm builds both.
      KernelSpec other = s;
      other.pair_order = s.pair_order == PairOrder::plain ? PairOrder::interleaved : PairOrder::plain;
      const auto variants = routing_variants(s, w.n, w.k, (long long)w.groups * w.rows);
      CHECK(std::find(variants.begin(), variants.end(), other) != variants.end());
    }
  }
  {  // K >= 8192, unfused: pairs from 136 rows, without tail rows (v47: Mixtral down at 544-608 tokens)
    auto choose = [](std::vector<int> rows, int n, int k, const char* fuse = "") {
      long long total = 0;
      for (int r : rows) total += r;
      GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, (int)rows.size(), n, k, total, rows};
      if (*fuse) p.fusion = KernelSpec::parse(fuse).fusion;
      return choose_spec(p, kHopper, 132);
    };
    const std::vector<int> mixtral_22b = {130, 140, 136, 141, 139, 133, 137, 132};  // 136 rows; tail rows: 1.45 rounds
    // Both now take 64x256 static (v54: 5 / 3 rounds of half tiles against 3 / 2 of pairs; 0.82-0.93x measured)
    KernelSpec s = choose(mixtral_22b, 6144, 16384);
    CHECK((s.tile.m == 64 && s.cluster_m == 1 && s.tail == 0 && s.split == SplitK::none));
    const std::vector<int> mixtral_608 = {145, 160, 150, 155, 148, 158, 149, 153};  // 152 rows; tail rows: 1.45 rounds
    s = choose(mixtral_608, 4096, 14336);
    CHECK((s.tile.m == 64 && s.cluster_m == 1 && s.tail == 0));
    s = choose(mixtral_608, 4096, 6144);  // K under 10240: 128-row tiles (64x256 lost at K = 4096-6144)
    CHECK(s.tile.m == 128);
    // Tail rows that fit the launch in one round come first (8 x 16 tiles).
    s = choose({140, 150, 145, 138, 152, 147, 139, 149}, 4096, 14336);
    CHECK((s.cluster_m == 1 && s.tail == 24));
    // Not below K = 8192 (Mixtral-8x22B up, K = 6144): as before (tail rows, single CTAs).
    s = choose(mixtral_22b, 32768, 6144);
    CHECK(s.cluster_m == 1);
    // A layer's GEMM2 (scatter + weight) too (v48: 0.84-0.95x the time), but after tail rows wherever
    // those pay (Mixtral-8x22B down 552 tokens: pairs 1.06-1.085x of them in one routing), and not with
    // a GLU or atomics.
    s = choose(mixtral_608, 4096, 14336, "fuse=scatter+weight");  // 64x256 static since v54 (0.82-0.85x)
    CHECK((s.tile.m == 64 && s.cluster_m == 1 && s.tail == 0));
    s = choose(mixtral_608, 4096, 8192, "fuse=scatter+weight");  // under K = 10240: the pairs
    CHECK((s.cluster_m == 2 && s.tail == 0));
    s = choose({157, 137, 128, 132, 152, 132, 123, 143}, 6144, 16384, "fuse=scatter+weight");
    CHECK((s.cluster_m == 1 && s.tail == 24));
    s = choose(mixtral_608, 4096, 14336, "fuse=gather,act=silu");
    CHECK(s.cluster_m == 1);
  }
  // Empty groups do not count: 4 experts of 1024 rows among 256 keep the 2x1 candidates.
  std::vector<int> sparse(256, 0);
  for (int g = 0; g < 4; ++g) sparse[g * 64] = 1024;  // (the mean over active experts: 1024)
  GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, 256, 4096, 7168, 4096, sparse};
  CHECK(count_pair_m(tuning_candidates(p, kHopper, 132)) == 4);
  // Fusions keep them, fuse=gather too (each CTA of the pair gathers its own rows), with tail rows
  // but for atomics.
  p.fusion = KernelSpec::parse("fuse=gather+bias,act=swiglu").fusion;
  CHECK(count_pair_m(tuning_candidates(p, kHopper, 132)) == 4);
  p.fusion = KernelSpec::parse("fuse=scatter+weight").fusion;
  CHECK(count_pair_m(tuning_candidates(p, kHopper, 132)) == 4);
  p.fusion = KernelSpec::parse("fuse=scatter+weight+atomic").fusion;
  p.c_type = DType::f32;
  CHECK(count_pair_m(tuning_candidates(p, kHopper, 132)) == 2);
}

TEST_CASE("tuning candidates: gathered FP8 on Hopper, dynamic only on 64-column slices, no 128x192 s5", "[tuning][fusion]") {
  Fusion gemm1;
  gemm1.gather_a = gemm1.bias = true;
  gemm1.activation = Activation::swiglu;
  for (int rows_per_group : {2, 64, 1024}) {
    std::vector<int> group_rows(64, rows_per_group);
    GemmProblem problem{GroupLayout::contiguous, DType::e4m3, DType::bf16, 64, 4096, 7168, 64LL * rows_per_group, group_rows,
                        std::nullopt, gemm1};
    auto specs = tuning_candidates(problem, kHopper, 132);
    INFO("rows per group " << rows_per_group);
    REQUIRE(specs.size() >= 4);
    for (auto& s : specs) {
      INFO(s.to_text());
      CHECK((s.family == KernelFamily::hopper && s.fusion == gemm1));
      if (s.scheduler == Scheduler::dynamic) CHECK((s.tile.n == 128 || (s.tile.m == 64 && s.stages == 4)));  // 232 registers
      CHECK(!(s.tile.n == 192 && s.stages == 5));
    }
  }
}

TEST_CASE("tuning candidates: heuristic first, all valid and distinct, both schedulers", "[tuning]") {
  for (const Arch& arch : {kHopper, kAmpere, Arch{8, 9, false}}) {
    for (long long rows : {16ll, 4096ll, 131072ll}) {
      std::vector<int> group_rows(128, (int)(rows / 128));
      GemmProblem problem{GroupLayout::contiguous, DType::bf16, DType::bf16, 128, 4096, 7168, rows, group_rows};
      auto specs = tuning_candidates(problem, arch, 132);
      INFO(arch.to_text() << " rows " << rows);
      REQUIRE(specs.size() >= 4);
      CHECK(specs[0] == choose_spec(problem, arch, 132));
      std::set<std::string> texts;
      bool has_static = false, has_dynamic = false;
      for (auto& s : specs) {
        CHECK_NOTHROW(s.validate());
        CHECK(s.layout == problem.layout);
        CHECK(texts.insert(s.to_text()).second);
        has_static |= s.scheduler == Scheduler::static_persistent;
        has_dynamic |= s.scheduler == Scheduler::dynamic;
      }
      CHECK(has_static);
      CHECK(has_dynamic);
    }
  }
}

TEST_CASE("tuning candidates for quantized formats: their own tiles, both schedulers", "[tuning]") {
  std::vector<int> group_rows(128, 4);
  GemmProblem fp8{GroupLayout::contiguous, DType::e4m3, DType::bf16, 128, 4096, 7168, 512, group_rows};
  auto specs = tuning_candidates(fp8, kHopper, 132);
  CHECK(specs.size() == 24);  // 64x256 and 128x192 (4 and 5 stages each), 128x128, 128x256, each static and dynamic, each whole and split=tail (K >= 2048)
  int dynamic = 0, split = 0;
  for (auto& s : specs) {
    CHECK((s.a == DType::e4m3 && s.tile.k == 128));
    dynamic += s.scheduler == Scheduler::dynamic;
    split += s.split == SplitK::tail;
  }
  CHECK(dynamic == 12);
  CHECK(split == 12);
  auto portable = tuning_candidates(fp8, kAmpere, 108);  // the portable family's tiles and schedulers
  CHECK(portable.size() >= 4);
  for (auto& s : portable) CHECK((s.a == DType::e4m3 && s.family == KernelFamily::portable && s.tile.n <= 128));
  for (DType b : {DType::mxfp4, DType::nvfp4}) {
    GemmProblem w4{GroupLayout::masked, DType::bf16, DType::bf16, 128, 5760, 2880, 512, group_rows, b};
    auto w4_specs = tuning_candidates(w4, kHopper, 132);
    // 16 (8, 6 stages), 32, 48 (8, 6), 64, 128 and 256 tokens x 128 rows; 64 x 256; x 2 schedulers; and
    // the static 16- and 32-token tiles with split=tail (v45)
    CHECK(w4_specs.size() == 21);
    int w4_split = 0;
    for (auto& s : w4_specs) w4_split += s.split == SplitK::tail;
    CHECK(w4_split == 3);
    CHECK(w4_specs[0].tile.m == 16);  // 4 rows per expert: the 16-token tile
    for (auto& s : w4_specs) CHECK((s.b == b && s.is_weight_only_4bit() && s.layout == GroupLayout::masked));
    std::vector<int> prefill(128, 512);
    GemmProblem big{GroupLayout::masked, DType::bf16, DType::bf16, 128, 5760, 2880, 65536, prefill, b};
    // 512 rows per expert: MXFP4 takes the 128-token tile (since v17), NVFP4 256 (since v24; 128 in v20-v23)
    CHECK(choose_spec(big, kHopper, 132).tile.m == (b == DType::nvfp4 ? 256 : 128));
    std::vector<int> rows256(8, 256), rows2048(8, 2048), rows4096(8, 4096);
    GemmProblem r256{GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 4096, 14336, 2048, rows256, b};
    CHECK(choose_spec(r256, kHopper, 132).tile.m == 128);  // both formats: 128 tokens at 256 rows
    GemmProblem r2048{GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 4096, 14336, 16384, rows2048, b};
    CHECK(choose_spec(r2048, kHopper, 132).tile.m == (b == DType::nvfp4 ? 256 : 128));
    std::vector<int> rows1024(128, 1024), rows512(128, 512);  // Qwen3 down at 16384 / 8192 tokens: K = 768
    GemmProblem short_k{GroupLayout::contiguous, DType::bf16, DType::bf16, 128, 2048, 768, 131072, rows1024, b};
    CHECK(choose_spec(short_k, kHopper, 132).tile.m == 256);  // both formats: 256 tokens at 1024 rows with K <= 1024 (v19)
    GemmProblem short_k512{GroupLayout::contiguous, DType::bf16, DType::bf16, 128, 2048, 768, 65536, rows512, b};
    CHECK(choose_spec(short_k512, kHopper, 132).tile.m == (b == DType::nvfp4 ? 256 : 128));
    std::vector<int> rows256_short(128, 256);  // Qwen3 down at 4096 tokens: NVFP4 takes 256 tokens at short K (v24)
    GemmProblem short_k256{GroupLayout::contiguous, DType::bf16, DType::bf16, 128, 2048, 768, 32768, rows256_short, b};
    CHECK(choose_spec(short_k256, kHopper, 132).tile.m == (b == DType::nvfp4 ? 256 : 128));
    GemmProblem r4096{GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 4096, 14336, 32768, rows4096, b};
    CHECK(choose_spec(r4096, kHopper, 132).tile.m == 256);  // Mixtral at 16384 tokens: 256 for both
    std::vector<int> decode32(8, 32);  // Mixtral at 128 tokens: 32 rows per expert, the 48-token tile
    GemmProblem rows32{GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 28672, 4096, 256, decode32, b};
    CHECK(choose_spec(rows32, kHopper, 132).tile.m == 48);
    std::vector<int> rows40(8, 40);  // over 36 rows per expert: 64 tokens (a group past 48 rows would read its weights twice)
    GemmProblem forty{GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 28672, 4096, 320, rows40, b};
    CHECK(choose_spec(forty, kHopper, 132).tile.m == 64);
    std::vector<int> mid(128, 200);
    GemmProblem mid_rows{GroupLayout::masked, DType::bf16, DType::bf16, 128, 5760, 2880, 25600, mid, b};
    CHECK(choose_spec(mid_rows, kHopper, 132).tile.m == 128);
    GemmProblem gathered = big;
    gathered.fusion.gather_a = true;  // gathered rows take the prefill tile from 256 rows, both formats (v10)
    CHECK((choose_spec(gathered, kHopper, 132).tile.m == 256 && choose_spec(gathered, kHopper, 132).tile.n == 128));
    // Fused 4-bit candidates: the 7 tiles on the static scheduler only (their dynamic variants
    // serialize their wgmmas or spill; test_compile.cpp checks every one of these instead).
    for (const char* fusion : {"fuse=gather+bias,act=swiglu_oai", "fuse=scatter+weight+bias"}) {
      GemmProblem fused = w4;
      fused.fusion = KernelSpec::parse(fusion).fusion;
      auto fused_specs = tuning_candidates(fused, kHopper, 132);
      CHECK(fused_specs.size() == 7);
      for (auto& s : fused_specs) CHECK((s.scheduler == Scheduler::static_persistent && s.fusion == fused.fusion));
    }
    GemmProblem f32 = big;
    f32.c_type = DType::f32;  // the Hopper 4-bit kernel writes 16-bit C: portable on sm_90a too
    CHECK(choose_spec(f32, kHopper, 132).family == KernelFamily::portable);
    KernelSpec ampere = choose_spec(big, kAmpere, 108);  // the portable family widens 4-bit B
    CHECK((ampere.family == KernelFamily::portable && ampere.b == b && ampere.a == DType::bf16));
  }
}

TEST_CASE("FP8 prefill tiles: 128x256 where N pads little to 256 (static on large groups), 128x192 (4 stages, C staged) on ragged N; static from 512 rows at K <= 3072; CTA pairs from K = 6144 and on static 128x192", "[tuning]") {
  auto fp8_tile = [](int experts, int rows_per_expert, int n, int k) {
    std::vector<int> rows(experts, rows_per_expert);
    GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, experts, n, k, (long long)experts * rows_per_expert, rows};
    KernelSpec s = choose_spec(p, kHopper, 132);
    return fmt::format("{}x{} s{} {}{}", s.tile.m, s.tile.n, s.stages, to_text(s.scheduler), s.cluster_m == 2 ? " 2x1" : "");
  };
  // DeepSeek-V3 up (K = 7168), 16384 and 4096 tokens: where the rules leave dynamic 128x256, CTA
  // pairs on the static scheduler (v32); 1024 tokens stays on 64x256.
  CHECK(fp8_tile(256, 512, 4096, 7168) == "128x256 s4 static 2x1");
  CHECK(fp8_tile(256, 128, 4096, 7168) == "128x256 s4 static 2x1");
  CHECK(fp8_tile(256, 32, 4096, 7168) == "64x256 s4 dynamic");
  CHECK(fp8_tile(8, 256, 28672, 4096) == "128x256 s4 dynamic");    // Mixtral up, 1024 tokens: K = 4096, no pairs (1.07x)
  // Not static where many groups end in a short odd M tile (v48: DeepSeek-V3 / Kimi-K2 up at 320 rows 1.2x
  // on pairs): below 336 rows pairs on the dynamic scheduler, interleaved (v49), else single CTAs.
  CHECK(fp8_tile(256, 320, 4096, 7168) == "128x256 s4 dynamic 2x1");
  CHECK(fp8_tile(256, 272, 4096, 7168) == "128x256 s4 dynamic 2x1");
  CHECK(fp8_tile(256, 336, 4096, 7168) == "128x256 s4 dynamic");    // a third tile of 80 rows: 0.89-0.93x on singles
  {
    std::vector<int> rows(256, 320);
    GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, 256, 4096, 7168, 256 * 320LL, rows};
    CHECK(choose_spec(p, kHopper, 132).pair_order == PairOrder::interleaved);
    p.fusion = KernelSpec::parse("fuse=scatter+weight").fusion;  // fused: single CTAs there, as before
    CHECK(choose_spec(p, kHopper, 132).cluster_m == 1);
  }
  CHECK(fp8_tile(256, 384, 4096, 7168) == "128x256 s4 static 2x1");  // odd but whole third tiles
  CHECK(fp8_tile(8, 320, 4096, 14336) != "128x256 s4 dynamic");     // few groups: not affected
  {  // DeepSeek-V3 up 16384's spread (512 +- 22): half the groups end in a short fifth tile, 11% of the units
    std::vector<int> rows(256);
    for (int g = 0; g < 256; ++g) rows[g] = g % 2 ? 530 : 494;
    GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, 256, 4096, 7168, 256 * 512LL, rows};
    KernelSpec s = choose_spec(p, kHopper, 132);
    CHECK((s.cluster_m == 2 && s.tile.n == 256));
  }
  // 144-255 rows with K >= 6144, under 4 rounds of tiles: 128x256 pairs too (v47, Mixtral down at 600-832
  // tokens), unless 64x256's rounds cost less (v54, below): uniform 192 / 150 rows take 3 / 5 rounds of
  // 64x256 against 2 / 3 of pairs (Mixtral-8x7B / 8x22B down at 576-768 tokens: 0.887-0.941x the pairs' time).
  CHECK(fp8_tile(8, 192, 4096, 14336) == "64x256 s4 static");
  CHECK(fp8_tile(8, 150, 6144, 16384) == "64x256 s4 static");
  CHECK(fp8_tile(8, 128, 4096, 14336) != "128x256 s4 static 2x1");   // below 144
  CHECK(fp8_tile(8, 192, 28672, 4096) == "64x256 s4 static");        // K = 4096 (was 128x256 dynamic: 0.928-0.985x)
  {  // 64x256 by rounds (v54): few groups, from 96 rows, where its rounds cost <= 0.93 of the choice's
    auto fp8_counts = [](std::vector<int> rows, int n, int k) {
      long long total = 0;
      for (int r : rows) total += r;
      GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, (int)rows.size(), n, k, total, rows};
      KernelSpec s = choose_spec(p, kHopper, 132);
      return fmt::format("{}x{} {}{}", s.tile.m, s.tile.n, to_text(s.scheduler), s.cluster_m == 2 ? " 2x1" : "");
    };
    // Mixtral-8x22B up 704 tokens: 25 rounds of 64x256 against 16 of pairs (0.838x measured)
    CHECK(fp8_counts({196, 168, 163, 174, 174, 183, 177, 173}, 32768, 6144) == "64x256 static");
    // Mixtral-8x7B down 704 tokens: two groups past 192 rows make a fourth 64x256 round (1.112x): pairs stay
    CHECK(fp8_counts({194, 163, 161, 201, 175, 164, 191, 159}, 4096, 14336) == "128x256 static 2x1");
    // Grok-1 up 1024 tokens (0.923x)
    CHECK(fp8_counts({271, 253, 254, 263, 226, 258, 265, 258}, 65536, 6144) == "64x256 static");
    // Jamba-shaped down (16 experts, K = 14336) at 768 / 1024 tokens: 96 rows, under the floor of 112
    // (64x256 1.061x the best 128-row config's time), and 128 rows (0.799x)
    CHECK(fp8_counts({110, 91, 91, 105, 101, 78, 99, 110, 80, 88, 96, 94, 107, 91, 94, 101}, 4096, 14336) != "64x256 static");
    CHECK(fp8_counts({127, 142, 130, 122, 134, 109, 119, 143, 121, 137, 116, 114, 132, 135, 131, 136}, 4096, 14336) ==
          "64x256 static");
    // DBRX down 256 tokens, 47-74 rows: under the floor (64x256 measured 1.020x)
    CHECK(fp8_counts({72, 67, 68, 66, 74, 61, 74, 69, 65, 67, 66, 56, 49, 65, 58, 47}, 6144, 10752) != "64x256 static");
    // The same rows over 32 groups: many groups are left to the rules above
    std::vector<int> many(32, 180);
    CHECK(fp8_counts(many, 32768, 6144) != "64x256 static");
    std::vector<int> few(8, 180);
    CHECK(fp8_counts(few, 32768, 6144) == "64x256 static");
  }
  {  // pairs take the tile whose rounds cost less, 128x192 counted as 0.75 (v47, two Mixtral down routings)
    auto pair_tile = [](std::vector<int> rows) {
      long long total = 0;
      for (int r : rows) total += r;
      GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, 8, 4096, 14336, total, rows};
      KernelSpec s = choose_spec(p, kHopper, 132);
      CHECK((s.cluster_m == 2 && s.scheduler == Scheduler::static_persistent));
      return s.tile.n;
    };
    CHECK(pair_tile({534, 488, 487, 572, 504, 524, 492, 495}) == 192);  // 2048 tokens: 5.83 against 4.24 rounds, 0.90
    CHECK(pair_tile({467, 453, 421, 456, 431, 405, 474, 477}) == 256);  // 1792 tokens: 1.125
  }
  {  // A layer's GEMM2 (scatter + weight, v48): pairs by their rounds against the single CTAs' from 144
     // rows, and from 256 rows the pairs' tile by the round model; below 512 rows (then pairable_fused).
    auto gemm2 = [](std::vector<int> rows, int n, int k) {
      long long total = 0;
      for (int r : rows) total += r;
      GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, (int)rows.size(), n, k, total, rows};
      p.fusion = KernelSpec::parse("fuse=scatter+weight").fusion;
      KernelSpec s = choose_spec(p, kHopper, 132);
      return fmt::format("{}x{} {}{}", s.tile.m, s.tile.n, to_text(s.scheduler), s.cluster_m == 2 ? " 2x1" : "");
    };
    // Since v54 64x256 static where its rounds cost less (few groups; as a GEMM2 0.877-0.977x measured):
    CHECK(gemm2(std::vector<int>(8, 192), 4096, 14336) == "64x256 static");        // was 2x1: 3 x 0.525 against 2 rounds
    CHECK(gemm2({240, 237, 230, 241, 230, 259, 229, 254}, 4096, 14336) == "64x256 static");  // was 128x192 dynamic
    CHECK(gemm2({267, 268, 276, 272, 272, 277, 276, 268}, 4096, 14336) == "64x256 static");  // 1088 tokens, was 2x1
    CHECK(gemm2(std::vector<int>(8, 200), 4096, 14336) == "128x256 static 2x1");   // a fourth 64-row tile: 2 against 4 x 0.525
    CHECK(gemm2({427, 392, 369, 451, 410, 381, 375, 395}, 4096, 14336) == "128x192 static 2x1");      // 1600 tokens
    CHECK(gemm2({365, 329, 332, 331, 330, 344, 327, 330}, 6144, 16384) == "128x192 static 2x1");      // 8x22B, 1344 tokens
    CHECK(gemm2(std::vector<int>(8, 192), 4096, 2048) == "128x192 dynamic");                          // K = 2048: not measured (nor 64x256)
    // Many groups (Llama 4 Maverick down, 128 experts): pairs below 256 rows (0.94-0.96x), not from 256 (1.04-1.10x)
    CHECK(gemm2(std::vector<int>(128, 192), 5120, 8192) == "128x256 static 2x1");
    CHECK(gemm2(std::vector<int>(128, 320), 5120, 8192) == "128x256 dynamic");
  }
  {  // Unfused Mixtral down by the round model where the single CTAs would not split their last round (v50)
    auto unfused = [](std::vector<int> rows) {
      long long total = 0;
      for (int r : rows) total += r;
      GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, 8, 4096, 14336, total, rows};
      KernelSpec s = choose_spec(p, kHopper, 132);
      return fmt::format("{}x{} {}{}{}", s.tile.m, s.tile.n, to_text(s.scheduler), s.cluster_m == 2 ? " 2x1" : "",
                         s.split == SplitK::tail ? " split" : "");
    };
    // From 256 rows, the GEMM2's rule where the pairs keep 128x256 (1064-1416 tokens: 0.885-0.955x on 23 launches)
    CHECK(unfused({296, 306, 317, 336, 316, 329, 350, 310}) == "128x256 static 2x1");  // 1280 tokens: 3 against 4 x 0.75 rounds
    // 1536 tokens: the model would take 128x192 pairs (0.96-1.04x measured): the singles stay
    CHECK(unfused({384, 389, 402, 376, 371, 385, 395, 370}) == "128x192 dynamic");
    // 1024 tokens, 4 of 8 groups with a third M tile: 440 tiles, the singles would split their last round
    // (pairs 1.03x); 64x256 static since v54 (the suite's routing: tuner 0.885-0.889x; another 0.930x)
    CHECK(unfused({232, 250, 267, 272, 245, 277, 247, 258}) == "64x256 static");
    // 144-255 rows: 128x256 pairs where they cost at most 1.1x the singles' rounds, else 128x192 pairs where
    // those cost no more. 2 of 8 groups with three M tiles (v47: 128x256 pairs 1.00-1.15x): 128x192 pairs
    CHECK(unfused({250, 240, 245, 262, 270, 238, 248, 244}) == "128x192 static 2x1");
    // One group of three M tiles passed v47's share test, but its 8 units make 136 for 66 pairs: a third
    // round (0.80-0.83x the time on 128x192 singles or pairs). 128x192 pairs then, until v54: 64x256's 4
    // rounds cost 0.933 of their 3 x 0.75 (Mixtral-8x7B down 960 tokens, the same 0.933: 0.959x measured)
    CHECK(unfused({240, 240, 240, 240, 240, 240, 240, 270}) == "64x256 static");
    CHECK(unfused(std::vector<int>(8, 240)) == "128x256 static 2x1");  // two rounds of pair units
  }
  {  // the tuner times the FP8 pairs too (128x256 and, since v33, 128x192 2x1), static and, since v49,
     // dynamic in both pair orders (600 rows: five M tiles, odd)
    std::vector<int> rows(8, 600);
    GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, 8, 4096, 2048, 8 * 600LL, rows};
    int pairs = 0, dynamic = 0, interleaved = 0;
    for (const KernelSpec& s : tuning_candidates(p, kHopper, 132))
      if (s.cluster_m == 2) {
        ++pairs;
        dynamic += s.scheduler == Scheduler::dynamic;
        interleaved += s.pair_order == PairOrder::interleaved;
        CHECK((s.scheduler == Scheduler::dynamic || s.pair_order == PairOrder::plain));
        CHECK((s.tile == TileShape{128, 256, 128} || s.tile == TileShape{128, 192, 128}));
      }
    CHECK(pairs == 6);
    CHECK(dynamic == 4);
    CHECK(interleaved == 2);
  }
  {  // fused or E4M3-writing launches pair from 512 rows per expert (v38: the FP8 layer's GEMM1); gathered ones below
    std::vector<int> rows(256, 512);
    GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, 256, 4096, 7168, 256 * 512LL, rows};
    p.fusion = KernelSpec::parse("act=swiglu,glu=split").fusion;
    p.c_type = DType::e4m3;
    KernelSpec s = choose_spec(p, kHopper, 132);
    CHECK(s.cluster_m == 2);
    CHECK(s.scheduler == Scheduler::static_persistent);
    CHECK_NOTHROW(s.validate());
    std::vector<int> fewer(256, 128);  // 4096 tokens: 1.09x the time fused (v39)
    GemmProblem q{GroupLayout::contiguous, DType::e4m3, DType::bf16, 256, 4096, 7168, 256 * 128LL, fewer};
    q.fusion = KernelSpec::parse("act=silu").fusion;
    CHECK(choose_spec(q, kHopper, 132).cluster_m == 1);
  }
  {  // gathered A: CTA pairs from 128 rows per expert and K >= 2048 (v39), the rule's 128-row tile or 128x256
    auto gathered = [](int experts, int rows_per_expert, int n, int k, const char* fusion, DType c = DType::bf16) {
      std::vector<int> rows(experts, rows_per_expert);
      GemmProblem p{GroupLayout::contiguous, DType::e4m3, c, experts, n, k, (long long)experts * rows_per_expert, rows};
      p.fusion = KernelSpec::parse(fusion).fusion;
      KernelSpec s = choose_spec(p, kHopper, 132);
      CHECK_NOTHROW(s.validate());
      return fmt::format("{}x{} s{} {}{}", s.tile.m, s.tile.n, s.stages, to_text(s.scheduler), s.cluster_m == 2 ? " 2x1" : "");
    };
    CHECK(gathered(256, 512, 4096, 7168, "fuse=gather") == "128x256 s4 static 2x1");  // DeepSeek-V3 up 16384: 0.51x
    CHECK(gathered(256, 128, 4096, 7168, "fuse=gather") == "128x256 s4 static 2x1");  // was 64x256 dynamic: 0.88x
    CHECK(gathered(128, 512, 2880, 2880, "fuse=gather") == "128x192 s4 static 2x1");  // gpt-oss down 16384: the rule's tile
    CHECK(gathered(256, 512, 4096, 7168, "fuse=gather+bias,act=swiglu,glu=split", DType::e4m3) == "128x256 s4 static 2x1");
    CHECK(gathered(256, 32, 4096, 7168, "fuse=gather") == "64x256 s4 dynamic");        // 1024 tokens: 1.02x on pairs
    CHECK(gathered(128, 1024, 2048, 768, "fuse=gather") == "128x256 s4 static");       // Qwen3 down: K = 768, 1.04x
    std::vector<int> rows(256, 512);
    GemmProblem channels{GroupLayout::contiguous, DType::e4m3, DType::bf16, 256, 4096, 7168, 256 * 512LL, rows};
    channels.fusion = KernelSpec::parse("fuse=gather").fusion;
    channels.b_scales = ScaleB::channels;  // not timed on pairs
    CHECK(choose_spec(channels, kHopper, 132).cluster_m == 1);
  }
  CHECK(fp8_tile(256, 512, 7168, 2048) == "128x256 s4 static");   // DeepSeek-V3 down: 512 rows, K <= 3072 (v24)
  CHECK(fp8_tile(256, 128, 7168, 2048) == "128x256 s4 dynamic");  // DeepSeek-V3 down, 4096 tokens: 128 rows
  CHECK(fp8_tile(128, 1024, 2048, 768) == "128x256 s4 static");   // Qwen3 down, 16384 tokens: K short
  CHECK(fp8_tile(8, 4096, 28672, 4096) == "128x192 s4 static 2x1");  // Mixtral up, 16384 tokens: 128x192 pairs' rounds (v58)
  CHECK(fp8_tile(8, 1024, 4096, 14336) == "128x256 s4 static");   // Mixtral down, 4096 tokens
  CHECK(fp8_tile(8, 1024, 2880, 4096) == "128x192 s4 static 2x1");  // N pads 6.7% more to 256; 128x192 pairs (v58)
  CHECK(fp8_tile(128, 512, 2880, 2880) == "128x192 s4 static 2x1");  // gpt-oss down: N pads 6.7% more to 256; pairs (v33)
  CHECK(fp8_tile(128, 16, 2880, 2880) == "64x256 s4 dynamic");    // decode (C staged since v24)
}

TEST_CASE("FP8 128x192 pairs over single CTAs: K >= 2880, host group sizes, no short odd tiles, rounds, dynamic singles from 512 rows (v58)", "[tuning][heuristic][fp8]") {
  auto choice = [](std::vector<int> rows, int n, int k, bool host_sizes = true) {
    long long total = 0;
    for (int r : rows) total += r;
    const std::vector<int> given = host_sizes ? rows : std::vector<int>{};  // outlives the problem's view
    GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, (int)rows.size(), n, k, total, given};
    const KernelSpec s = choose_spec(p, kHopper, 132);
    return fmt::format("{}x{} {}{}", s.tile.m, s.tile.n, to_text(s.scheduler), s.cluster_m == 2 ? " 2x1" : "");
  };
  // gpt-oss-20b up at 8192 tokens (1024 rows, static 128x256 singles): 0.943x on the pairs
  CHECK(choice(std::vector<int>(32, 1024), 5760, 2880) == "128x192 static 2x1");
  // gpt-oss-120b down at 6144 tokens (192 rows, dynamic 128x192 singles, K <= 3072): 0.955x
  CHECK(choice(std::vector<int>(128, 192), 2880, 2880) == "128x192 static 2x1");
  // Qwen3-235B up at 6144 tokens: dynamic singles, K = 4096, 384 rows: the pairs took 1.015x
  CHECK(choice(std::vector<int>(128, 384), 3072, 4096) == "128x256 dynamic");
  // ... from 512 rows they win (0.986-0.991x at 12288-14336 tokens)
  CHECK(choice(std::vector<int>(128, 768), 3072, 4096) == "128x192 static 2x1");
  // K = 2048 (DeepSeek-V3 down at 12288 tokens): the pairs took 1.018x
  CHECK(choice(std::vector<int>(256, 384), 7168, 2048) == "128x256 dynamic");
  // Short odd tiles (Llama 4 Maverick up, 112 rows per expert): 1.037x
  CHECK(choice(std::vector<int>(128, 112), 16384, 5120) == "128x256 dynamic");
  // Without the host's group sizes the singles stay, and routing_variants gives prewarm the pair twin.
  const std::vector<int> rows(32, 1024);
  const std::string without = choice(rows, 5760, 2880, false);
  CHECK(without.find("2x1") == std::string::npos);
  GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, 32, 5760, 2880, 32 * 1024LL, {}};
  bool twin = false;
  for (const KernelSpec& s : routing_variants(choose_spec(p, kHopper, 132), 5760, 2880, 32 * 1024LL, 32))
    twin |= s.tile.n == 192 && s.cluster_m == 2 && s.scheduler == Scheduler::static_persistent;
  CHECK(twin);
}

TEST_CASE("bf16 tile: 64x128 up to 32 rows per group (v45; 64 before, 48 where K >= 6144 since v39)", "[tuning][heuristic]") {
  auto tile_m = [](int groups, int rows_per_group, int n, int k) {
    std::vector<int> rows(groups, rows_per_group);
    GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, groups, n, k, (long long)groups * rows_per_group, rows};
    return choose_spec(p, kHopper, 132).tile.m;
  };
  CHECK(tile_m(128, 64, 1536, 2048) == 128);  // Qwen3 up 1024 tokens: 0.989x on 128x256 (v45)
  CHECK(tile_m(8, 64, 28672, 4096) == 128);   // Mixtral up 256 tokens: 0.905x (v45)
  CHECK(tile_m(256, 64, 4096, 7168) == 128);  // DeepSeek-V3 up 2048 tokens: 0.948x on 128x256 (v39)
  CHECK(tile_m(256, 48, 4096, 7168) == 128);  // DeepSeek-V3 up 1536 tokens: level
  CHECK(tile_m(128, 36, 2048, 768) == 128);   // Qwen3 down 576 tokens: 1.016x, the rule's one loss (v45)
  CHECK(tile_m(256, 32, 4096, 7168) == 64);   // DeepSeek-V3 up 1024 tokens
  CHECK(tile_m(128, 32, 1536, 2048) == 64);   // Qwen3 up 512 tokens
}

TEST_CASE("bf16 decode: 64x256 where one 64-row tile per group needs two rounds at 128 columns and one at 256, for the whole bucket (v51)", "[tuning][heuristic]") {
  auto tile = [](std::vector<int> rows, int n, const char* fuse = "") {
    GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, (int)rows.size(), n, 14336,
                  std::accumulate(rows.begin(), rows.end(), 0LL), rows};
    if (*fuse) p.fusion = KernelSpec::parse(fmt::format("family=hopper,arch=sm_90a,{}", fuse)).fusion;
    const KernelSpec s = choose_spec(p, kHopper, 132);
    return fmt::format("{}x{}s{}", s.tile.m, s.tile.n, s.stages);
  };
  // Mixtral down (N = 4096): 16 tokens on 7-8 experts, 128 tokens on 8 (0.955 / 0.981x on the H200).
  CHECK(tile({5, 4, 0, 6, 3, 8, 2, 4}, 4096) == "64x256s5");
  CHECK(tile({40, 29, 35, 33, 27, 30, 31, 31}, 4096) == "64x256s5");
  // Five active groups sit in the bucket of 5-8, which takes it; three or four in that of 3-4,
  // where 64x128 is one round already (4 x 32 tiles).
  CHECK(tile({5, 4, 0, 6, 0, 8, 0, 1}, 4096) == "64x256s5");
  CHECK(tile({5, 4, 0, 6, 0, 8, 0, 0}, 4096) == "64x128s8");
  CHECK(tile({5, 4, 0, 6, 0, 0, 0, 0}, 4096) == "64x128s8");
  // Many experts: 64x256 takes two rounds as well (gpt-oss down, 57 of 128 active at 16 tokens).
  std::vector<int> many(128, 0);
  for (int g = 0; g < 57; ++g) many[g * 2] = 1;
  CHECK(tile(many, 2880) == "64x128s8");
  // Fused launches keep 64x128 (not measured).
  CHECK(tile({5, 4, 0, 6, 3, 8, 2, 4}, 4096, "fuse=scatter+weight") == "64x128s8");
}

TEST_CASE("groups on the device only: expected_rows chooses as the exact counts do, the upper bound a prefill tile", "[tuning][heuristic]") {
  CHECK(expected_active_groups(128, 128) == 81);  // 16 tokens x top-8 over 128 experts
  CHECK(expected_active_groups(256, 128) == 101);
  CHECK(expected_active_groups(8, 32) == 8);
  CHECK(expected_active_groups(1000, 1) == 1);
  CHECK(expected_active_groups(1, 5) == 1);
  CHECK(expected_active_groups(128, 0) == 0);
  CHECK(expected_active_groups(128, 131072) == 128);
  // Typical group sizes: Binomial(rows, 1 / groups) quantiles, ascending, about `rows` in all.
  for (auto [groups, rows] : {std::pair{128, 128LL}, {256, 32768LL}, {8, 131072LL}, {256, 8LL}, {1, 77LL}}) {
    const std::vector<int> typical = typical_group_rows(groups, rows);
    REQUIRE(typical.size() == (std::size_t)groups);
    CHECK(std::is_sorted(typical.begin(), typical.end()));
    const long long sum = std::accumulate(typical.begin(), typical.end(), 0LL);
    INFO(groups << " groups, " << rows << " rows: " << sum);
    CHECK(std::abs(sum - rows) <= std::max(4LL, rows / 50));
  }
  const std::vector<int> decode = typical_group_rows(128, 128);  // 16 tokens x top-8 over 128 experts
  CHECK(std::count(decode.begin(), decode.end(), 0) == 47);       // e^-1 of them empty
  CHECK(decode.back() == 4);
  // Without the host's counts no split=tail (the launch cannot plan it): Mixtral down 1024.
  GemmProblem mixtral_down{GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 4096, 14336, 2048, {}};
  CHECK(choose_spec(mixtral_down, kHopper, 132).split == SplitK::none);
  RuntimeOptions options;
  options.offline_sm_count = 132;
  auto rt = Runtime::offline(kHopper, options);
  std::mt19937 rng(5);
  struct Case {
    int experts, topk, tokens, n, k;
  };
  // Qwen3 up / DeepSeek-V3 down / gpt-oss up at decode, masked with room for 1024 rows per expert.
  for (const Case& c : {Case{128, 8, 16, 1536, 2048}, Case{256, 8, 128, 7168, 2048}, Case{128, 4, 128, 5760, 2880}})
    for (std::optional<DType> b : {std::optional<DType>(), std::optional<DType>(DType::mxfp4)}) {
      std::vector<int> counts(c.experts, 0);
      for (int t = 0; t < c.tokens; ++t) {
        std::vector<int> experts(c.experts);
        std::iota(experts.begin(), experts.end(), 0);
        std::shuffle(experts.begin(), experts.end(), rng);
        for (int j = 0; j < c.topk; ++j) ++counts[experts[j]];
      }
      GroupedGemmArgs a;
      a.layout = GroupLayout::masked;
      a.b_type = b;
      a.num_groups = c.experts, a.n = c.n, a.k = c.k, a.capacity = 1024;
      a.host_groups = counts;
      KernelSpec exact = rt->choose_spec(a);
      exact.split = SplitK::none;  // split=tail is planned from the host's counts only (above)
      a.host_groups = {};
      a.trust_device_groups = true;
      const KernelSpec bound = rt->choose_spec(a);
      a.expected_rows = (long long)c.tokens * c.topk;
      const KernelSpec hinted = rt->choose_spec(a);
      INFO(c.tokens << " tokens, " << c.experts << " experts, b=" << (b ? to_text(*b) : "bf16"));
      CHECK(hinted == exact);
      CHECK(exact.tile.m <= 64);
      CHECK(bound.tile.m == 128);
    }
}

namespace {
// The heuristic's mix field for a contiguous launch of these group sizes (A and B of `ab`, bf16 C).
int mix_chosen(DType ab, const std::vector<int>& rows, int n, int k, const char* fuse) {
  long long total = 0;
  for (int r : rows) total += r;
  GemmProblem p{GroupLayout::contiguous, ab, DType::bf16, (int)rows.size(), n, k, total, rows};
  if (*fuse) p.fusion = KernelSpec::parse(fuse).fusion;
  return choose_spec(p, kHopper, 132).mix;
}
}  // namespace

TEST_CASE("bf16 mixed tile order under skew where K is short and N wide (v44)", "[tuning][heuristic]") {
  auto mix = [](const std::vector<int>& rows, int n, int k, const char* fuse = "") { return mix_chosen(DType::bf16, rows, n, k, fuse); };
  // 20 hot groups of 800 rows (7 M tiles each) beside 200 of 40: 41% of the tiles heavy.
  std::vector<int> skewed(20, 800);
  skewed.resize(220, 40);
  CHECK(mix(skewed, 7168, 2048) == 256);  // DeepSeek-V3 down
  CHECK(mix(skewed, 5760, 2880) == 256);  // gpt-oss up
  CHECK(mix(skewed, 4096, 7168) == 0);    // DeepSeek-V3 up: K long (1.09x)
  CHECK(mix(skewed, 2048, 768) == 0);     // Qwen3 down: N narrow (1.07x)
  CHECK(mix(skewed, 2880, 2880) == 0);    // gpt-oss down
  CHECK(mix(skewed, 7168, 2048, "fuse=scatter+weight+bias") == 256);           // a layer's GEMM2: 0.96x
  CHECK(mix(skewed, 5760, 2880, "fuse=gather+bias,act=swiglu_oai") == 256);    // its gathered GEMM1: 0.94x
  GemmProblem atomic{GroupLayout::contiguous, DType::bf16, DType::f32, (int)skewed.size(), 7168, 2048, 24000, skewed};
  atomic.fusion = KernelSpec::parse("fuse=scatter+weight+atomic").fusion;
  CHECK(choose_spec(atomic, kHopper, 132).mix == 0);  // atomics: not measured
  // One class only (random routing), or nearly: the plain order.
  CHECK(mix(std::vector<int>(256, 128), 7168, 2048) == 0);
  CHECK(mix(std::vector<int>(256, 512), 7168, 2048) == 0);
  std::vector<int> mostly_light(2, 800);
  mostly_light.resize(220, 40);  // 14 of 232 tiles heavy
  CHECK(mix(mostly_light, 7168, 2048) == 0);
  // Without host counts the routing is taken as random: no mix; with the caller's expected group
  // sizes (GroupedGemmArgs::expected_group_rows) the skew shows again.
  GemmProblem unknown{GroupLayout::contiguous, DType::bf16, DType::bf16, 220, 7168, 2048, 24000, {}};
  CHECK(choose_spec(unknown, kHopper, 132).mix == 0);
  RuntimeOptions options;
  options.offline_sm_count = 132;
  auto rt = Runtime::offline(kHopper, options);
  GroupedGemmArgs captured;
  captured.num_groups = (int)skewed.size(), captured.n = 7168, captured.k = 2048, captured.total_rows = 40000;
  captured.trust_device_groups = true;
  captured.expected_rows = 24000;
  CHECK(rt->choose_spec(captured).mix == 0);
  captured.expected_group_rows = skewed;
  const KernelSpec from_loads = rt->choose_spec(captured);
  CHECK(from_loads.mix == 256);
  CHECK(from_loads.split == SplitK::none);
  // Prewarm builds the twin where one group can reach 256 rows.
  KernelSpec large = KernelSpec::parse("family=hopper,arch=sm_90a,tile=128x256x64,stages=4,sched=dynamic");
  auto has_mix = [](const std::vector<KernelSpec>& list) {
    return std::any_of(list.begin(), list.end(), [](const KernelSpec& s) { return s.mix == 256; });
  };
  CHECK(has_mix(routing_variants(large, 7168, 2048, 4096)));
  CHECK_FALSE(has_mix(routing_variants(large, 7168, 2048, 128)));
  CHECK_FALSE(has_mix(routing_variants(large, 4096, 7168, 4096)));
  for (const KernelSpec& s : routing_variants(large, 7168, 2048, 4096)) CHECK_NOTHROW(s.validate());
  // The tuner times each config with and without it there, and only there.
  GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, (int)skewed.size(), 7168, 2048, 24000, skewed};
  const auto candidates = tuning_candidates(p, kHopper, 132);
  CHECK(candidates[0].mix == 256);
  CHECK(std::any_of(candidates.begin(), candidates.end(), [&](const KernelSpec& s) {
    KernelSpec plain = candidates[0];
    plain.mix = 0;
    return s == plain;
  }));
  std::vector<int> even(256, 128);
  GemmProblem random{GroupLayout::contiguous, DType::bf16, DType::bf16, 256, 7168, 2048, 32768, even};
  CHECK_FALSE(has_mix(tuning_candidates(random, kHopper, 132)));
}

TEST_CASE("FP8 mixed tile order under skew: 30-90% of the tiles heavy, 60% unfused (v44)", "[tuning][heuristic][fp8]") {
  auto mix = [](const std::vector<int>& rows, int n, int k, const char* fuse = "") { return mix_chosen(DType::e4m3, rows, n, k, fuse); };
  std::vector<int> skewed(20, 800);  // 140 of 340 M tiles heavy (41%)
  skewed.resize(220, 40);
  CHECK(mix(skewed, 7168, 2048) == 256);  // DeepSeek-V3 down 4096: 0.90x
  CHECK(mix(skewed, 5760, 2880) == 256);  // gpt-oss up 4096: 0.93x
  CHECK(mix(skewed, 4096, 7168) == 0);    // K long
  CHECK(mix(skewed, 7168, 2048, "fuse=scatter+weight") == 256);  // a layer's GEMM2: 0.88x
  std::vector<int> mostly_heavy(40, 1000);  // 320 of 360 M tiles heavy (89%)
  mostly_heavy.resize(80, 40);
  CHECK(mix(mostly_heavy, 5760, 2880) == 0);  // unfused past 60%: gpt-oss up 16384 took 1.04x
  CHECK(mix(mostly_heavy, 7168, 2048, "fuse=scatter+weight") == 256);  // GEMM2 DeepSeek-V3 down 16384: 0.86x
  CHECK(mix(std::vector<int>(256, 128), 7168, 2048) == 0);  // random routing
  CHECK_FALSE(mixed_order_pays(7168, 2048, MixClasses{300, 140, 30, 140}, true));  // 68%: unfused FP8 stops at 60%
  CHECK(mixed_order_pays(7168, 2048, MixClasses{300, 140, 30, 140}));               // 16-bit takes it to 90%
  KernelSpec fp8 = KernelSpec::parse("family=hopper,arch=sm_90a,a=e4m3,b=e4m3,tile=128x256x128,stages=4,sched=dynamic");
  auto variants = routing_variants(fp8, 7168, 2048, 4096);
  CHECK(std::any_of(variants.begin(), variants.end(), [](const KernelSpec& s) { return s.mix == 256; }));
  for (const KernelSpec& s : variants) CHECK_NOTHROW(s.validate());
}

TEST_CASE("shape buckets: the few-groups flag follows the rules' verdict on measured launches (v54)", "[tuning][heuristic]") {
  // The flag judges against plain 128x256 tiles; choose_spec against its own choice. On the measured
  // launches below both say the same.
  auto verdicts = [](std::vector<int> rows, DType ab, int n, int k, const char* fuse = "") {
    long long total = 0, m128 = 0, m64 = 0, active = 0;
    for (int r : rows) total += r, m128 += (r + 127) / 128, m64 += (r + 63) / 64, active += r > 0;
    const Fusion fusion = *fuse ? KernelSpec::parse(fuse).fusion : Fusion{};
    const bool flag = few_groups_small_tile_may_pay(ab, DType::bf16, n, k, fusion, ScaleB::blocks, active, total, m128, m64, 132);
    GemmProblem p{GroupLayout::contiguous, ab, DType::bf16, (int)rows.size(), n, k, total, rows};
    p.fusion = fusion;
    const KernelSpec s = choose_spec(p, kHopper, 132);
    return std::pair{flag, s.tile.m == 64 && s.scheduler == Scheduler::static_persistent};
  };
  for (auto [rows, ab, n, k] : {
           std::tuple{std::vector<int>{196, 168, 163, 174, 174, 183, 177, 173}, DType::e4m3, 32768, 6144},  // 8x22B up 704: 0.838x
           std::tuple{std::vector<int>{194, 163, 161, 201, 175, 164, 191, 159}, DType::e4m3, 4096, 14336},  // 8x7B down 704: 1.112x
           std::tuple{std::vector<int>{271, 253, 254, 263, 226, 258, 265, 258}, DType::e4m3, 65536, 6144},  // Grok-1 up 1024: 0.923x
           std::tuple{std::vector<int>{194, 163, 161, 201, 175, 164, 191, 159}, DType::bf16, 4096, 14336},  // bf16 8x7B down 704: pairs
           std::tuple{std::vector<int>(8, 160), DType::bf16, 4096, 14336},                                  // bf16 8x7B down 640: 0.82x
           std::tuple{std::vector<int>(8, 160), DType::bf16, 28672, 4096}}) {                               // bf16 up, K = 4096: no
    INFO(to_text(ab) << " n " << n << " k " << k << " rows " << rows[0]);
    auto [flag, small] = verdicts(rows, ab, n, k);
    CHECK(flag == small);
  }
  // A layer's GEMM1 (gather, activation): no flag; many groups: no flag.
  CHECK_FALSE(verdicts(std::vector<int>(8, 160), DType::bf16, 4096, 14336, "fuse=gather,act=silu").first);
  CHECK_FALSE(verdicts(std::vector<int>(32, 160), DType::bf16, 4096, 14336).first);
  CHECK(verdicts(std::vector<int>(8, 160), DType::bf16, 4096, 14336, "fuse=scatter+weight").first);
}

TEST_CASE("routing variants: the 64x256 static twin of few large groups' 128-row launches (v54)", "[tuning][heuristic]") {
  auto has_small_static = [](const std::vector<KernelSpec>& variants) {
    return std::any_of(variants.begin(), variants.end(), [](const KernelSpec& s) {
      return s.tile.m == 64 && s.tile.n == 256 && s.scheduler == Scheduler::static_persistent && s.cluster_m == 1;
    });
  };
  const KernelSpec fp8 = KernelSpec::parse("family=hopper,arch=sm_90a,a=e4m3,b=e4m3,tile=128x256x128,stages=4,cluster=2x1,sched=static");
  CHECK(has_small_static(routing_variants(fp8, 4096, 14336, 1024, 8)));
  CHECK(has_small_static(routing_variants(fp8, 4096, 14336, 1024)));  // groups not known
  CHECK_FALSE(has_small_static(routing_variants(fp8, 7168, 2048, 4096, 256)));
  const KernelSpec bf16 = KernelSpec::parse("family=hopper,arch=sm_90a,a=bf16,b=bf16,tile=128x256x64,stages=4,cluster=2x1,sched=dynamic");
  CHECK(has_small_static(routing_variants(bf16, 4096, 14336, 1024, 8)));
  CHECK_FALSE(has_small_static(routing_variants(bf16, 28672, 4096, 1024, 8)));  // K under 10240
  KernelSpec fused = bf16;
  fused.fusion = KernelSpec::parse("fuse=scatter+weight").fusion;  // a layer's GEMM2 takes the rule too
  CHECK(has_small_static(routing_variants(fused, 4096, 14336, 1024, 8)));
  fused.fusion = KernelSpec::parse("fuse=gather,act=silu").fusion;  // its GEMM1 does not
  CHECK_FALSE(has_small_static(routing_variants(fused, 4096, 14336, 1024, 8)));
  CHECK_FALSE(has_small_static(routing_variants(fp8, 4096, 2048, 1024, 8)));  // FP8 under K = 4096
  // Whatever the routing picks among these, prewarm has built it: the rule's choice on host counts is one of them.
  std::vector<int> rows = {196, 168, 163, 174, 174, 183, 177, 173};
  GemmProblem p{GroupLayout::contiguous, DType::e4m3, DType::bf16, 8, 32768, 6144, 1408, rows};
  const KernelSpec on_counts = choose_spec(p, kHopper, 132);
  GemmProblem expected = p;
  expected.group_rows = {};
  const auto variants = routing_variants(choose_spec(expected, kHopper, 132), 32768, 6144, 1408, 8);
  CHECK(std::find(variants.begin(), variants.end(), on_counts) != variants.end());
  for (const KernelSpec& s : variants) CHECK_NOTHROW(s.validate());
}

TEST_CASE("4-bit prefill: tile bands where a group's A outgrows L2 (v43)", "[tuning][heuristic]") {
  auto band = [](const std::vector<int>& rows, int n, int k, DType b, const char* fuse = "") {
    long long total = 0;
    for (int r : rows) total += r;
    GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, (int)rows.size(), n, k, total, rows, b};
    if (*fuse) p.fusion = KernelSpec::parse(fuse).fusion;
    return choose_spec(p, kHopper, 132).band;
  };
  // Mixtral down 16384, skewed: 11821 rows x 14336 x 2 bytes = 339 MB in the largest group.
  const std::vector<int> mixtral_skewed = {11821, 6846, 4480, 3310, 2519, 2000, 1792, 0};
  for (DType b : {DType::mxfp4, DType::nvfp4}) {
    CHECK(band(mixtral_skewed, 4096, 14336, b) == 2);
    CHECK(band(std::vector<int>(8, 4096), 4096, 14336, b) == 2);  // random routing: 117 MB
    CHECK(band(std::vector<int>(8, 4096), 28672, 4096, b) == 0);  // Mixtral up: 34 MB
    CHECK(band({15584, 12472, 9631, 500, 100}, 2048, 768, b) == 0);  // Qwen3 down skewed: 24 MB
    CHECK(band(std::vector<int>(8, 2), 4096, 14336, b) == 0);        // decode
    CHECK(band(mixtral_skewed, 4096, 14336, b, "fuse=scatter+weight") == 2);  // a layer's GEMM2: 0.594x
    CHECK(band(mixtral_skewed, 28672, 4096, b, "fuse=gather+bias,act=swiglu_oai") == 0);  // gathered GEMM1: 0.97-1.01x
  }
  CHECK(band(mixtral_skewed, 4096, 14336, DType::bf16) == 0);  // bf16 took 1.00-1.12x with bands
}

TEST_CASE("routing variants: a skewed routing's twins where one group can outgrow 128 rows (v43)", "[tuning][heuristic]") {
  auto has = [](const std::vector<KernelSpec>& list, auto pred) { return std::any_of(list.begin(), list.end(), pred); };
  // bf16 at a decode-sized mean: 128x256 too, unless no group can pass 128 rows (16 tokens).
  KernelSpec small = KernelSpec::parse("family=hopper,arch=sm_90a,tile=64x128x64,stages=8,sched=dynamic");
  auto large_tile = [](const KernelSpec& s) { return s.tile.m == 128 && s.tile.n == 256 && s.stages == 4; };
  CHECK(has(routing_variants(small, 4096, 7168, 1024), large_tile));
  CHECK_FALSE(has(routing_variants(small, 4096, 7168, 16), large_tile));
  CHECK_FALSE(has(routing_variants(small, 4096, 7168), large_tile));
  // 4-bit prefill tiles with and without bands where a group's A may reach 48 MB.
  KernelSpec w4 = KernelSpec::parse("family=hopper,arch=sm_90a,b=mxfp4,tile=256x128x64,stages=4");
  auto banded = [](const KernelSpec& s) { return s.band == 2; };
  CHECK(has(routing_variants(w4, 4096, 14336, 16384), banded));  // Mixtral down 16384: up to 470 MB
  CHECK_FALSE(has(routing_variants(w4, 4096, 14336, 1024), banded));  // 29 MB at most
  KernelSpec gathered = w4;
  gathered.fusion = KernelSpec::parse("fuse=gather+bias,act=swiglu_oai").fusion;
  CHECK_FALSE(has(routing_variants(gathered, 28672, 4096, 16384), banded));
  KernelSpec with_band = w4;
  with_band.band = 2;
  CHECK(has(routing_variants(with_band, 4096, 14336, 16384), [](const KernelSpec& s) { return s.band == 0; }));
}

TEST_CASE("bf16 tile: 128x256 where half the rows sit in groups of over 128 rows, whatever the mean (skewed routing, v43)", "[tuning][heuristic]") {
  auto tile_m = [](const std::vector<int>& rows, int n, int k) {
    long long total = 0;
    for (int r : rows) total += r;
    GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, (int)rows.size(), n, k, total, rows};
    return choose_spec(p, kHopper, 132).tile.m;
  };
  // DeepSeek-V3 at 1024 tokens: 8192 rows, mean 32; hot experts of 972, 739, 557, ... rows.
  std::vector<int> skewed = {972, 739, 557, 453, 324, 300, 260, 200, 160, 140};
  int rest = 8192;
  for (int r : skewed) rest -= r;
  while (rest > 0) skewed.push_back(std::min(rest, 17)), rest -= 17;  // 214 groups of up to 17 rows
  CHECK(tile_m(skewed, 4096, 7168) == 128);
  CHECK(tile_m(skewed, 7168, 2048) == 128);
  // Under half the rows in big groups: the mean decides, as before.
  std::vector<int> few_hot(256, 26);
  few_hot[0] = 1000;  // 1000 of 7630 rows (mean 29.8: under the small tile's 32 since v45)
  CHECK(tile_m(few_hot, 7168, 2048) == 64);
  CHECK(tile_m(std::vector<int>(256, 32), 7168, 2048) == 64);  // random routing at 1024 tokens
}

TEST_CASE("absorbed tail rows (tail=24) below 320 rows per group (768 on a layer's GEMM2) where 1/8 of the groups end 1-24 rows past a whole tile (v40-v42)", "[tuning][heuristic]") {
  auto choose = [](const std::vector<int>& rows, int n, int k) {
    long long total = 0;
    for (int r : rows) total += r;
    GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, (int)rows.size(), n, k, total, rows};
    return choose_spec(p, kHopper, 132);
  };
  // DeepSeek-V3 at 4096 tokens, 128 +- 11 rows: about half the groups end a few rows into a second tile.
  std::mt19937 rng(7);
  std::vector<int> deepseek(256);
  for (int& r : deepseek) r = 117 + (int)(rng() % 23);
  KernelSpec s = choose(deepseek, 4096, 7168);
  CHECK(s.tail == 24);
  CHECK(s.cluster_m * s.cluster_n == 1);
  CHECK(choose(deepseek, 7168, 2048).tail == 24);  // down
  // Whole tiles everywhere, or ends more than 24 rows in: none.
  CHECK(choose(std::vector<int>(256, 128), 7168, 2048).tail == 0);
  CHECK(choose(std::vector<int>(256, 128 + 40), 7168, 2048).tail == 0);
  // From 320 rows per group (long, compute-bound launches: 1.01-1.03x at 512+ rows): none.
  std::vector<int> large(256);
  for (int& r : large) r = 490 + (int)(rng() % 45);
  CHECK(choose(large, 7168, 2048).tail == 0);
  // 1 of 8 groups is enough, 1 of 9 is not.
  std::vector<int> one_in_8(8, 256), one_in_9(9, 256);
  one_in_8[3] = 256 + 5;
  one_in_9[3] = 256 + 5;
  CHECK(choose(one_in_8, 4096, 2048).tail == 24);
  CHECK(choose(one_in_9, 4096, 2048).tail == 0);
  // Without the host's group sizes a typical random routing of the rows decides (v44): 128 rows per
  // group, half of the groups ending 1-24 rows past a whole tile.
  GemmProblem unknown{GroupLayout::contiguous, DType::bf16, DType::bf16, 256, 7168, 2048, 32768, {}};
  CHECK(choose_spec(unknown, kHopper, 132).tail == 24);
  // On a tile that has none: none.
  CHECK(choose(std::vector<int>(256, 40), 4096, 7168).tail == 0);  // 64x128
  // Prewarm builds the twin.
  auto variants = routing_variants(s, 4096, 7168);
  CHECK(std::find_if(variants.begin(), variants.end(), [](const KernelSpec& v) { return v.tail == 0; }) != variants.end());
  // A layer's GEMM2 (scattered rows, weighted, biased) takes them too (v41), and its gathered GEMM1
  // (v42); atomic combines do not.
  auto choose_fused = [&](const char* fuse, const char* act) {
    long long total = 0;
    for (int r : deepseek) total += r;
    GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, (int)deepseek.size(), 7168, 2048, total, deepseek};
    p.fusion = KernelSpec::parse(fmt::format("fuse={},act={}", fuse, act)).fusion;
    if (p.fusion.atomic) p.c_type = DType::f32;
    return choose_spec(p, kHopper, 132);
  };
  KernelSpec gemm2 = choose_fused("scatter+weight+bias", "none");
  CHECK(gemm2.tail == 24);
  auto gemm2_variants = routing_variants(gemm2, 7168, 2048);
  CHECK(std::find_if(gemm2_variants.begin(), gemm2_variants.end(), [](const KernelSpec& v) { return v.tail == 0; }) !=
        gemm2_variants.end());
  KernelSpec gemm1 = choose_fused("gather+bias", "swiglu_oai");
  CHECK(gemm1.tail == 24);
  auto gemm1_variants = routing_variants(gemm1, 7168, 2048);
  CHECK(std::find_if(gemm1_variants.begin(), gemm1_variants.end(), [](const KernelSpec& v) { return v.tail == 0; }) !=
        gemm1_variants.end());
  // Up to 768 rows per group (no C staging to give up): DeepSeek-V3 at 16384 tokens takes them.
  {
    long long total = 0;
    for (int r : large) total += r;
    GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, (int)large.size(), 7168, 2048, total, large};
    p.fusion = KernelSpec::parse("fuse=scatter+weight").fusion;
    CHECK(choose_spec(p, kHopper, 132).tail == 24);
    p.fusion = KernelSpec::parse("fuse=gather,act=swiglu,glu=split").fusion;  // a GEMM1 keeps the 320-row bound
    CHECK(choose_spec(p, kHopper, 132).tail == 0);
    std::vector<int> qwen_16384(128);
    for (int& r : qwen_16384) r = 990 + (int)(rng() % 70);
    total = 0;
    for (int r : qwen_16384) total += r;
    GemmProblem q{GroupLayout::contiguous, DType::bf16, DType::bf16, 128, 2048, 768, total, qwen_16384};
    q.fusion = p.fusion;
    CHECK(choose_spec(q, kHopper, 132).tail == 0);
  }
  // Launches of up to 12 rounds take them exactly where they save a round (Mixtral's GEMM2 at 1024
  // tokens: 8 groups, 16 N tiles; from 256 rows, below which long K pairs them). 20 M tiles (3 rounds)
  // -> 16 (2 rounds): taken; 20 -> 19 (3): not. At 4096 tokens (~1024 rows, above the 768-row bound):
  // 70 M tiles (9 rounds) -> 66 (8): taken; 69 -> 67 (9): not.
  {
    auto mixtral_down = [&](std::vector<int> rows) {
      long long total = 0;
      for (int r : rows) total += r;
      GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, 8, 4096, 14336, total, rows};
      p.fusion = KernelSpec::parse("fuse=scatter+weight").fusion;
      return choose_spec(p, kHopper, 132).tail;
    };
    CHECK(mixtral_down({270, 270, 270, 270, 250, 250, 250, 250}) == 24);
    CHECK(mixtral_down({300, 300, 300, 260, 250, 250, 250, 250}) == 0);
    CHECK(mixtral_down({1030, 1040, 1045, 1030, 1070, 1060, 960, 957}) == 24);
    CHECK(mixtral_down({1054, 1024, 1031, 1049, 1051, 976, 970, 1037}) == 0);
  }
  CHECK(choose_fused("scatter+weight+atomic", "none").tail == 0);
  CHECK(choose_fused("scatter+weight", "silu").tail == 24);
  // Tail rows before the split where they fit the launch in one round (v47; Mixtral down at 512 tokens).
  {
    std::vector<int> rows = {120, 131, 125, 140, 118, 127, 135, 128};  // plain: 11 M tiles x 16 N tiles, 1.33 rounds
    KernelSpec one_round = choose(rows, 4096, 14336);                    // tail rows: 8 x 16 = 128 tiles
    CHECK(one_round.tail == 24);
    CHECK(one_round.split == SplitK::none);
    CHECK(one_round.cluster_m * one_round.cluster_n == 1);
    rows[3] = 160;  // ends 32 rows in: 9 M tiles with tail rows, two rounds; the split keeps the launch
    KernelSpec two_rounds = choose(rows, 4096, 14336);
    CHECK(two_rounds.split == SplitK::tail);
    CHECK(two_rounds.tail == 0);
    // Mixtral-8x22B down at 512 tokens: 12 M tiles x 24 (2.18 rounds, the last cut in 4) against 8 x 24
    // with tail rows (1.45 rounds): split, until v54; now 64x256 static, whose 4 rounds of half tiles cost
    // 0.667 of the split's 3 (0.833-0.863x measured on three such launches).
    KernelSpec wide = choose({130, 140, 129, 150, 120, 110, 125, 127}, 6144, 16384);
    CHECK((wide.tile.m == 64 && wide.split == SplitK::none && wide.tail == 0));
    wide = choose({130, 140, 129, 150, 120, 110, 125, 127}, 6144, 8192);  // K under 10240: the split
    CHECK(wide.split == SplitK::tail);
  }
}

TEST_CASE("pairs sharing A (1x2) with tail rows become pairs sharing B (2x1) where the tail rows leave nearly every group an even M-tile count (v42)", "[tuning][heuristic]") {
  auto choose = [](const std::vector<int>& rows) {
    long long total = 0;
    for (int r : rows) total += r;
    // K = 3072: 24 MB of weights per group, under kInterleavedPairMinGroupBytes (from there many groups
    // take 2x1 in the interleaved order whatever their M-tile counts, v49).
    GemmProblem p{GroupLayout::contiguous, DType::bf16, DType::bf16, (int)rows.size(), 4096, 3072, total, rows};
    return choose_spec(p, kHopper, 132);
  };
  // DeepSeek-V3 up 8192's groups (256 +- 16 rows): groups of 257-280 rows are 2 M tiles with tail rows.
  std::vector<int> even(256);
  for (int g = 0; g < 256; ++g) even[g] = g % 2 ? 248 : 264;
  KernelSpec s = choose(even);
  CHECK(s.tail == 24);
  CHECK((s.cluster_m == 2 && s.cluster_n == 1));
  // One group in 8 left odd (3 M tiles) still moves; more than that stays on 1x2.
  std::vector<int> some_odd = even;
  for (int g = 0; g < 32; ++g) some_odd[8 * g] = 300;
  CHECK(choose(some_odd).cluster_m == 2);
  some_odd[1] = 300;
  s = choose(some_odd);
  CHECK(s.tail == 24);
  CHECK((s.cluster_m == 1 && s.cluster_n == 2));
  // Without tail rows (no group ending 1-24 rows past a tile) the first pair rule's 1x2 stays.
  s = choose(std::vector<int>(256, 256));
  CHECK(s.tail == 0);
  CHECK(s.cluster_n == 2);
  // Prewarm builds the other pair for other routings: 1x2's 2x1 twin with tail rows, and back.
  auto has = [](const std::vector<KernelSpec>& v, int cluster_m, int tail) {
    return std::find_if(v.begin(), v.end(), [&](const KernelSpec& x) { return x.cluster_m == cluster_m && x.tail == tail; }) !=
           v.end();
  };
  CHECK(has(routing_variants(s, 4096, 3072), 2, 24));
  const auto back = routing_variants(choose(even), 4096, 3072);
  CHECK(has(back, 1, 0));
  CHECK(has(back, 1, 24));
  // Ragged N (gpt-oss: 2880) shares B whatever the routing: no 1x2 twin.
  KernelSpec ragged = choose(even);
  for (const KernelSpec& v : routing_variants(ragged, 2880, 3072)) CHECK(v.cluster_n == 1);
}

TEST_CASE("tuning table: stores, merges, survives garbage lines, disabled without a folder", "[tuning]") {
  TempDir dir;
  TuningTable table(dir.str(), "NVIDIA H100 80GB HBM3", 13000, "0.1.0", "0123456789abcdef0123456789abcdef");
  REQUIRE(table.enabled());
  CHECK(table.path().find("NVIDIA-H100-80GB-HBM3_driver13000_moejit0.1.0_tune2_0123456789ab.tsv") != std::string::npos);
  // Results of the first timing protocol (back to back, no L2 clears) are another file, not read.
  const std::filesystem::path old_protocol =
      std::filesystem::path(dir.str()) / "tuning" / "NVIDIA-H100-80GB-HBM3_driver13000_moejit0.1.0_0123456789ab.tsv";
  std::filesystem::create_directories(old_protocol.parent_path());
  write_bytes(old_protocol.string(), "bucket-a\tfamily=hopper,tile=64x128x64\t0.5\t0.75\n");
  CHECK(table.load().empty());
  table.store("bucket-a", {"family=hopper,tile=128x256x64", 1.5, 1.75});
  table.store("bucket-b", {"family=hopper,tile=64x256x64", 0.25, 0.25});
  table.store("bucket-a", {"family=hopper,tile=128x128x64", 1.25, 1.75});
  auto entries = table.load();
  REQUIRE(entries.size() == 2);
  CHECK(entries["bucket-a"].spec_text == "family=hopper,tile=128x128x64");
  CHECK(entries["bucket-a"].best_ms == Approx(1.25));
  CHECK(entries["bucket-b"].heuristic_ms == Approx(0.25));
  write_bytes(table.path(), read_bytes(table.path()) + "garbage\nx\ty\tnot-a-number\t1\n");
  CHECK(table.load().size() == 2);
  // Another device's table is another file.
  TuningTable other(dir.str(), "NVIDIA H200", 13000, "0.1.0", "0123456789abcdef0123456789abcdef");
  CHECK(other.load().empty());
  TuningTable off;
  CHECK_FALSE(off.enabled());
  CHECK_NOTHROW(off.store("bucket", {"x", 1, 1}));
  CHECK(off.load().empty());
}

TEST_CASE("tune and tuned_spec without a GPU", "[tuning]") {
  auto rt = Runtime::offline(kHopper);
  GroupedGemmArgs args;
  alignas(16) static char buffer[4096];
  static int offsets[3] = {0, 8, 16};
  args.a = args.b = args.c = buffer;
  args.num_groups = 2;
  args.n = 64;
  args.k = 64;
  args.group_offsets = offsets;
  args.total_rows = 16;
  args.host_groups = offsets;
  CHECK_THROWS_AS(rt->tune(args, nullptr), DriverError);
  CHECK_FALSE(rt->tuned_spec(args).has_value());
  CHECK(rt->tuning_file().empty());
  args.n = 7;
  CHECK_THROWS_AS(rt->tune(args, nullptr), InvalidArgument);
}

TEST_CASE("moejit tune: usage errors and no GPU", "[tuning][cli]") {
  const std::string cli = MOEJIT_CLI_PATH;
  auto help = run_command(cli + " tune --help");
  CHECK(help.code == 0);
  CHECK(help.out.find("--model NAME") != std::string::npos);
  CHECK(help.out.find("--warm-l2") != std::string::npos);
  CHECK(run_command(cli + " tune").code == 2);
  CHECK(run_command(cli + " tune --model gpt-oss-120b --ms -3").code == 2);
  CHECK(run_command(cli + " tune --model gpt-oss-120b --tokens 16,x").code == 2);
  CHECK(run_command(cli + " tune --model no-such-model").code == 2);
  if (!driver_has_device()) {
    auto r = run_command(cli + " tune --model gpt-oss-120b --tokens 16");
    CHECK(r.code == 1);
    CHECK(r.out.find("no CUDA driver or GPU") != std::string::npos);
    CHECK(run_command(cli + " tune --model gpt-oss-120b --tokens 16 --warm-l2").code == 1);
  }
}

TEST_CASE("one shape bucket, one heuristic tile (the claim the bucket rounding rests on)", "[tuning]") {
  std::mt19937 rng(6);
  for (const Arch& arch : {kHopper, kAmpere}) {
    std::map<std::string, std::pair<TileShape, std::string>> seen;
    for (int trial = 0; trial < 3000; ++trial) {
      int groups = 1 + (int)(rng() % 64);
      std::vector<int> rows(groups);
      int scale = 1 << (rng() % 11);  // 1 .. 1024 rows per group
      for (auto& r : rows) r = rng() % 4 == 0 ? 0 : (int)(rng() % (2 * scale + 1));
      // Every third trial skewed: one to three hot groups of up to 4096 rows among small ones.
      if (trial % 3 == 0)
        for (int h = 0, hot_groups = 1 + (int)(rng() % 3); h < hot_groups; ++h) rows[rng() % groups] = 129 + (int)(rng() % 3968);
      long long total = 0, active = 0;
      for (int r : rows) total += r, active += r > 0;
      GemmProblem problem{GroupLayout::contiguous, DType::bf16, DType::bf16, groups, 512, 256, total, rows};
      KernelSpec spec = choose_spec(problem, arch, 132);
      auto bucket = ShapeBucket::of(problem.layout, DType::bf16, DType::bf16, groups, 512, 256, total, active, std::nullopt,
                                    hot_groups_dominate(rows));
      std::string text = bucket.to_text();
      auto [it, inserted] = seen.try_emplace(text, spec.tile, spec.to_text());
      INFO(text << "\nfirst: " << it->second.second << "\nnow:   " << spec.to_text());
      CHECK(it->second.first == spec.tile);
    }
  }
}
