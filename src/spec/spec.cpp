// Canonical text form, parser, validation and key of KernelSpec.
#include "moejit/spec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <vector>

#include "moejit/common/w4_layout.cuh"  // the pre-arranged 4-bit block size
#include "moejit/errors.hpp"
#include "moejit/formats.hpp"  // kW4Sm90LayoutVersion
#include "util/hash.hpp"

namespace moejit {
namespace {

// The Hopper TMA-store epilogue's C staging: two 8 KB chunk buffers per consumer warpgroup
// (kCStageBytesPerConsumer in hopper/epilogue.cuh).
constexpr int kCStagingBytes = 32768;

template <typename Enum, std::size_t N>
struct EnumNames {
  std::array<std::pair<Enum, std::string_view>, N> names;

  std::string_view text(Enum value) const {
    for (auto& [e, s] : names)
      if (e == value) return s;
    return "?";
  }
  std::string allowed() const {
    std::string out;
    for (auto& [e, s] : names) out += (out.empty() ? "" : "|") + std::string(s);
    return out;
  }
  Enum parse(std::string_view field, std::string_view value) const {
    for (auto& [e, s] : names)
      if (s == value) return e;
    throw SpecError(fmt::format("spec field '{}': unknown value '{}' (allowed: {})", field, value, allowed()));
  }
};

constexpr EnumNames<KernelFamily, 2> kFamilies{{{{KernelFamily::portable, "portable"}, {KernelFamily::hopper, "hopper"}}}};
constexpr EnumNames<GroupLayout, 2> kLayouts{{{{GroupLayout::contiguous, "contiguous"}, {GroupLayout::masked, "masked"}}}};
constexpr EnumNames<DType, 6> kDTypes{{{{DType::bf16, "bf16"},
                                         {DType::f16, "f16"},
                                         {DType::f32, "f32"},
                                         {DType::e4m3, "e4m3"},
                                         {DType::mxfp4, "mxfp4"},
                                         {DType::nvfp4, "nvfp4"}}}};
constexpr EnumNames<Scheduler, 2> kSchedulers{{{{Scheduler::static_persistent, "static"}, {Scheduler::dynamic, "dynamic"}}}};
constexpr EnumNames<Activation, 5> kActivations{{{{Activation::none, "none"},
                                                  {Activation::silu, "silu"},
                                                  {Activation::gelu, "gelu"},
                                                  {Activation::swiglu, "swiglu"},
                                                  {Activation::swiglu_oai, "swiglu_oai"}}}};

constexpr EnumNames<GluLayout, 2> kGluLayouts{{{{GluLayout::interleaved, "interleaved"}, {GluLayout::split, "split"}}}};
constexpr EnumNames<GatherLoad, 2> kGatherLoads{{{{GatherLoad::cp_async, "cp_async"}, {GatherLoad::tma, "tma"}}}};
constexpr EnumNames<ScaleB, 2> kScaleBs{{{{ScaleB::blocks, "blocks"}, {ScaleB::channels, "channels"}}}};
constexpr EnumNames<SplitK, 2> kSplitKs{{{{SplitK::none, "none"}, {SplitK::tail, "tail"}}}};
constexpr EnumNames<PairOrder, 2> kPairOrders{{{{PairOrder::plain, "plain"}, {PairOrder::interleaved, "interleaved"}}}};

int parse_int(std::string_view field, std::string_view text) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty())
    throw SpecError(fmt::format("spec field '{}': '{}' is not an integer", field, text));
  return value;
}

// "128x64x32" -> {128, 64, 32}; `count` parts expected.
std::vector<int> parse_dims(std::string_view field, std::string_view text, std::size_t count, std::string_view form) {
  std::vector<int> dims;
  std::size_t start = 0;
  while (true) {
    auto x = text.find('x', start);
    dims.push_back(parse_int(field, text.substr(start, x == std::string_view::npos ? x : x - start)));
    if (x == std::string_view::npos) break;
    start = x + 1;
  }
  if (dims.size() != count) throw SpecError(fmt::format("spec field '{}': '{}' is not of the form {}", field, text, form));
  return dims;
}

std::string fusion_text(const Fusion& f) {
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!out.empty()) out += '+';
    out += name;
  };
  add(f.gather_a, "gather");
  add(f.scatter_c, "scatter");
  add(f.routing_weight, "weight");
  add(f.bias, "bias");
  add(f.atomic, "atomic");
  return out.empty() ? "none" : out;
}

void parse_fusion(std::string_view value, Fusion& f) {
  f.gather_a = f.scatter_c = f.routing_weight = f.bias = f.atomic = false;
  if (value == "none") return;
  std::size_t start = 0;
  while (start <= value.size()) {
    auto plus = value.find('+', start);
    auto item = value.substr(start, plus == std::string_view::npos ? plus : plus - start);
    if (item == "gather") f.gather_a = true;
    else if (item == "scatter") f.scatter_c = true;
    else if (item == "weight") f.routing_weight = true;
    else if (item == "bias") f.bias = true;
    else if (item == "atomic") f.atomic = true;
    else throw SpecError(fmt::format("spec field 'fuse': unknown fusion '{}' (allowed: none or a '+'-joined set of gather|scatter|weight|bias|atomic)", item));
    if (plus == std::string_view::npos) break;
    start = plus + 1;
  }
}

}  // namespace

std::string_view to_text(KernelFamily v) { return kFamilies.text(v); }
std::string_view to_text(GroupLayout v) { return kLayouts.text(v); }
std::string_view to_text(DType v) { return kDTypes.text(v); }
std::string_view to_text(Scheduler v) { return kSchedulers.text(v); }
std::string_view to_text(Activation v) { return kActivations.text(v); }
std::string_view to_text(GluLayout v) { return kGluLayouts.text(v); }
std::string_view to_text(GatherLoad v) { return kGatherLoads.text(v); }
std::string_view to_text(ScaleB v) { return kScaleBs.text(v); }
std::string_view to_text(SplitK v) { return kSplitKs.text(v); }
std::string_view to_text(PairOrder v) { return kPairOrders.text(v); }
int element_bytes(DType t) { return t == DType::f32 ? 4 : t == DType::bf16 || t == DType::f16 ? 2 : 1; }

std::string to_text(const Fusion& f) {
  std::string out = fmt::format("fuse={},act={}", fusion_text(f), moejit::to_text(f.activation));
  if (f.glu_activation() || f.glu != GluLayout::interleaved) out += fmt::format(",glu={}", moejit::to_text(f.glu));
  if (f.gather_by != GatherLoad::cp_async) out += fmt::format(",gather_by={}", moejit::to_text(f.gather_by));
  return out;
}

std::string Arch::to_text() const { return fmt::format("sm_{}{}{}", major, minor, arch_specific ? "a" : ""); }

Arch Arch::parse(std::string_view text) {
  static constexpr std::string_view kAllowed = "sm_80|sm_86|sm_89|sm_90|sm_90a";
  if (text == "sm_80") return {8, 0, false};
  if (text == "sm_86") return {8, 6, false};
  if (text == "sm_89") return {8, 9, false};
  if (text == "sm_90") return {9, 0, false};
  if (text == "sm_90a") return {9, 0, true};
  throw SpecError(fmt::format("spec field 'arch': unknown value '{}' (allowed: {})", text, kAllowed));
}

int max_dynamic_smem_bytes(const Arch& arch) {
  // cudaDevAttrMaxSharedMemoryPerBlockOptin per compute capability (CUDA programming guide).
  switch (arch.sm()) {
    case 80: return 163 * 1024;
    case 86:
    case 89: return 99 * 1024;
    case 90: return 227 * 1024;
    default: return 48 * 1024;
  }
}

std::string Key128::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

std::string KernelSpec::to_text() const {
  std::string out = fmt::format("family={},arch={},layout={},a={},b={},c={},acc={},tile={}x{}x{},stages={}",
                                moejit::to_text(family), arch.to_text(), moejit::to_text(layout), moejit::to_text(a),
                                moejit::to_text(b), moejit::to_text(c), moejit::to_text(acc), tile.m, tile.n, tile.k, stages);
  if (family == KernelFamily::portable) out += fmt::format(",warps={}x{}", warps_m, warps_n);
  // glu= is printed only where it means something (or was set), so that unfused specs keep their text and key.
  out += fmt::format(",cluster={}x{},sched={},{}", cluster_m, cluster_n, moejit::to_text(scheduler), moejit::to_text(fusion));
  if (b_scales != ScaleB::blocks) out += fmt::format(",b_scales={}", moejit::to_text(b_scales));  // earlier texts and keys unchanged
  if (split != SplitK::none) out += fmt::format(",split={}", moejit::to_text(split));
  if (band != 0) out += fmt::format(",band={}", band);
  if (tail != 0) out += fmt::format(",tail={}", tail);
  if (mix != 0) out += fmt::format(",mix={}", mix);
  if (pair_order != PairOrder::plain) out += fmt::format(",pair_order={}", moejit::to_text(pair_order));
  return out;
}

KernelSpec KernelSpec::parse(std::string_view text) {
  // Split on ',' and whitespace into key=value items.
  std::map<std::string, std::string, std::less<>> fields;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ',' || std::isspace(static_cast<unsigned char>(text[i])))) ++i;
    std::size_t j = i;
    while (j < text.size() && text[j] != ',' && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i) {
      auto item = text.substr(i, j - i);
      auto eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0)
        throw SpecError(fmt::format("spec: '{}' is not a field=value pair", item));
      std::string name(item.substr(0, eq));
      if (!fields.emplace(name, std::string(item.substr(eq + 1))).second)
        throw SpecError(fmt::format("spec field '{}' is given twice", name));
    }
    i = j;
  }
  if (fields.empty()) throw SpecError("spec: empty text (expected field=value pairs, e.g. family=portable,arch=sm_80)");

  KernelSpec s;
  auto take = [&](std::string_view name) -> const std::string* {
    auto it = fields.find(name);
    return it == fields.end() ? nullptr : &it->second;
  };
  if (auto v = take("family")) s.family = kFamilies.parse("family", *v);
  if (auto v = take("arch")) s.arch = Arch::parse(*v);
  if (s.family == KernelFamily::hopper) {
    // Defaults that make a bare "family=hopper" a valid spec.
    if (!take("arch")) s.arch = {9, 0, true};
    s.tile = {128, 128, 64};
  }
  if (auto v = take("layout")) s.layout = kLayouts.parse("layout", *v);
  if (auto v = take("a")) s.a = kDTypes.parse("a", *v);
  if (auto v = take("b")) s.b = kDTypes.parse("b", *v);
  if (auto v = take("c")) s.c = kDTypes.parse("c", *v);
  if (auto v = take("acc")) s.acc = kDTypes.parse("acc", *v);
  if (s.family == KernelFamily::hopper && s.a == DType::e4m3) {
    // FP8 defaults: one stage is a 128-wide K block (one 128-byte swizzle row, one scale block).
    s.tile = {128, 128, 128};
    s.stages = 6;
  }
  if (s.family == KernelFamily::hopper && s.is_weight_only_4bit()) {
    // 4-bit weight-only defaults: 64 tokens x 128 weight rows x 64 K per stage (hopper_w4/).
    s.tile = {64, 128, 64};
    s.stages = 8;
  }
  if (auto v = take("tile")) {
    auto d = parse_dims("tile", *v, 3, "MxNxK, e.g. 128x128x32");
    s.tile = {d[0], d[1], d[2]};
  }
  if (auto v = take("stages")) s.stages = parse_int("stages", *v);
  if (auto v = take("warps")) {
    if (s.family != KernelFamily::portable)
      throw SpecError("spec field 'warps' applies to family=portable only (hopper uses one producer and two consumer warpgroups)");
    auto d = parse_dims("warps", *v, 2, "MxN, e.g. 2x4");
    s.warps_m = d[0];
    s.warps_n = d[1];
  }
  if (auto v = take("cluster")) {
    auto d = parse_dims("cluster", *v, 2, "MxN, e.g. 1x1");
    s.cluster_m = d[0];
    s.cluster_n = d[1];
  }
  if (auto v = take("sched")) s.scheduler = kSchedulers.parse("sched", *v);
  if (auto v = take("fuse")) parse_fusion(*v, s.fusion);
  if (auto v = take("act")) s.fusion.activation = kActivations.parse("act", *v);
  if (auto v = take("glu")) s.fusion.glu = kGluLayouts.parse("glu", *v);
  if (auto v = take("gather_by")) s.fusion.gather_by = kGatherLoads.parse("gather_by", *v);
  if (auto v = take("b_scales")) s.b_scales = kScaleBs.parse("b_scales", *v);
  if (auto v = take("split")) s.split = kSplitKs.parse("split", *v);
  if (auto v = take("band")) s.band = parse_int("band", *v);
  if (auto v = take("tail")) s.tail = parse_int("tail", *v);
  if (auto v = take("mix")) s.mix = parse_int("mix", *v);
  if (auto v = take("pair_order")) s.pair_order = kPairOrders.parse("pair_order", *v);

  static constexpr std::array<std::string_view, 22> kKnown = {"family", "arch",  "layout",  "a",     "b",    "c",    "acc",
                                                              "tile",   "stages", "warps", "cluster", "sched", "fuse", "act",
                                                              "glu",    "gather_by", "b_scales", "split", "band", "tail", "mix",
                                                              "pair_order"};
  for (auto& [name, value] : fields)
    if (std::find(kKnown.begin(), kKnown.end(), name) == kKnown.end())
      throw SpecError(fmt::format("spec: unknown field '{}' (known: family, arch, layout, a, b, c, acc, tile, stages, warps, cluster, sched, fuse, act, glu, gather_by, b_scales, split, band, tail, mix, pair_order)", name));
  return s;
}

int KernelSpec::threads_per_cta() const {
  return family == KernelFamily::hopper ? 384 : 32 * warps_m * warps_n;
}

int KernelSpec::fp8_stage_bytes() const {
  // fp8_stage_bytes<>() (hopper_fp8/): per stage 128 bytes per tile row of A and B plus the K
  // block's scales (fp8_scale_stage_bytes: A's TMA box of tile.m / 4 + 1 16-byte rows, then 16
  // bytes of B slots, rounded up to 128 bytes, the TMA destination's alignment), then 512 bytes of
  // barriers and tile ring (the base is 1024-byte aligned: no slack).
  return stages * ((tile.m + tile.n) * 128 + ((tile.m + 4) * 4 + 16 + 127) / 128 * 128) + 512;
}

bool KernelSpec::stages_c() const {
  // c_staged<>() (hopper/) and fp8_c_staged<>() (hopper_fp8/): the stages (64-wide K slices of
  // 16-bit A and B, or 128-wide of e4m3: 128 bytes per tile row either way), 2048 bytes of
  // alignment and barriers, and the C staging must fit in 227 KB.
  if (family != KernelFamily::hopper) return false;
  // hopper_w4/: w4_store_staged, and w4_fused_store_staged for a GLU without scatter (the layers'
  // GEMM1: w4_fused_tma_store); its staging is counted in w4_sm90_c_staging_bytes.
  if (is_weight_only_4bit()) return tile.m >= 128 && (!fusion.epilogue() || (fusion.glu_activation() && !fusion.scatter_c));
  if (a == DType::e4m3) return fp8_stage_bytes() + kCStagingBytes <= 227 * 1024;
  if (tail != 0) return true;  // validate() checks that the stages with the tail rows and one chunk per consumer fit
  return stages * (tile.m + tile.n) * 128 + 2048 + kCStagingBytes <= 227 * 1024;
}

bool KernelSpec::grid_dependency() const {
  // The 48-token 4-bit tile (two CTAs per SM, 80 registers): with griddepcontrol at its entry
  // ptxas serialized the wgmmas of two variants (C7511; MXFP4 unfused, NVFP4 with scatter).
  return !(family == KernelFamily::hopper && is_weight_only_4bit() && tile.m == 48);
}

int KernelSpec::dynamic_smem_bytes() const {
  // Must equal smem_bytes<...>() in the kernel template; the generated source static_asserts it.
  // Hopper: the TMA ring (64-wide K slices of A and B, 16-bit) + 1024 to align it for the
  // 128-byte swizzle + barriers and the dynamic scheduler's tile ring, + 32 KB of C staging for
  // the TMA-store epilogue where that still fits in 227 KB (c_staged<>() in the template).
  if (family == KernelFamily::hopper && a == DType::e4m3) {
    // FP8 (hopper_fp8/): fp8_smem_bytes<>(): fp8_stage_bytes(), + 32 KB of C staging where it
    // fits (fp8_c_staged<>()).
    return fp8_stage_bytes() + (stages_c() ? kCStagingBytes : 0);
  }
  if (family == KernelFamily::hopper && is_weight_only_4bit()) {
    // hopper_w4/ w4rs_smem_bytes<>(): per stage 64 K of BF16 per token + one pre-arranged weight
    // block (common/w4_layout.cuh: 4096 bytes of codes + 256 (MXFP4) or 512 (NVFP4) of scales).
    // 256 weight rows per tile: two blocks per stage. Tiles of 128 and 256 tokens add the C
    // staging of their epilogue (w4_sm90_c_staging_bytes: double-buffered on unfused 256-token tiles).
    // Static 128- and 256-token tiles hold a group's absorbed last rows too (w4_sm90_tail_rows).
    const int tail = w4_sm90_tail_rows(tile.m, fusion.gather_a, scheduler == Scheduler::dynamic);
    return stages * ((tile.m + tail) * 128 + (tile.n / 128) * w4_sm90_block_bytes(b == DType::nvfp4)) + 2048 +
           w4_sm90_c_staging_bytes(tile.m, fusion.epilogue());
  }
  // Absorbed tail rows (tail=t): t more A rows per stage, and one 8 KB C chunk per consumer.
  if (family == KernelFamily::hopper && tail != 0) return stages * (tile.m + tile.n + tail) * 128 + 2048 + kCStagingBytes / 2;
  if (family == KernelFamily::hopper) return stages * (tile.m + tile.n) * 64 * 2 + 2048 + (stages_c() ? kCStagingBytes : 0);
  // Portable: the cp.async ring (rows padded by 16 bytes against bank conflicts), reused by
  // the epilogue to stage C for 16-byte stores.
  int ring = stages * (tile.m + tile.n) * (tile.k + 8) * 2;
  // Fused kernels with a bias or routing weights keep them (fp32) after the staging tile.
  int staging = tile.m * (tile.n + 8) * element_bytes(c) + (fusion.bias || fusion.routing_weight ? (tile.m + tile.n) * 4 : 0);
  return std::max(ring, staging);
}

int KernelSpec::min_ctas_per_sm() const {
  // Measured on the H100 (docs/perf.md): 128x128 tiles with 8 warps run 10-30% faster with
  // two CTAs per SM (registers capped at 128, no spills at BK=32 with 16-bit C; fp32 C spills).
  // FP8 keeps a second accumulator (the promoted sum): one CTA per SM, no spills.
  // Fused portable kernels on sm_90 (where the heuristic takes the hopper family) keep one CTA:
  // at two, ptxas spilled a register in a few of them (e.g. fuse=weight, 128x128 dynamic).
  if (family == KernelFamily::portable && threads_per_cta() == 256 && tile.k == 32 && c != DType::f32 && a != DType::e4m3 &&
      !(fusion.any() && arch.sm() >= 90))
    return 2;
  // Hopper 4-bit tiles of 16, 32 and 64 tokens: two CTAs per SM (hopper_w4/grouped_gemm_sm90_w4_rs.cuh,
  // w4rs_ctas_per_sm, which the instantiating .cu checks against this).
  if (family == KernelFamily::hopper && is_weight_only_4bit() && tile.m <= 64 && tile.n == 128) return 2;
  return 1;
}

void KernelSpec::validate() const {
  auto fail = [&](const char* format, auto&&... args) {
    throw SpecError(fmt::format("invalid spec {}: {}", to_text(), fmt::format(fmt::runtime(format), args...)));
  };
  if (a != DType::bf16 && a != DType::f16 && a != DType::e4m3) fail("a={} (allowed: bf16|f16|e4m3)", moejit::to_text(a));
  if (c != DType::bf16 && c != DType::f16 && c != DType::f32 && c != DType::e4m3)
    fail("c={} (allowed: bf16|f16|f32, or e4m3 from the Hopper FP8 kernel)", moejit::to_text(c));
  if (c == DType::e4m3) {
    // C quantized in the epilogue (1x128 blocks, the next FP8 GEMM's A): each consumer warpgroup
    // quantizes its own output slice, so the slice must hold whole 128-column blocks.
    if (!(family == KernelFamily::hopper && a == DType::e4m3 && b == DType::e4m3))
      fail("c=e4m3 with a={}, b={} on family={} (a quantized C comes from the Hopper FP8 kernel: family=hopper, a=b=e4m3)",
           moejit::to_text(a), moejit::to_text(b), moejit::to_text(family));
    if (fusion.scatter_c || fusion.atomic)
      fail("c=e4m3 with fuse={} (a quantized C is written in routed order: no scatter or atomic)", fusion_text(fusion));
    if (split != SplitK::none) fail("c=e4m3 with split={} (split=tail is for bf16/f16/f32 C)", moejit::to_text(split));
    // Or, on 64x256 with a GLU, the two consumers' 64-column halves of one block (same rows): they
    // exchange their row maxima through the C staging, so the spec must have it (stages_c: 4 stages).
    const int slice = tile.m == 64 ? tile.n / 2 : tile.n;
    const int out = fusion.glu_activation() ? slice / 2 : slice;
    const bool paired_halves = tile.m == 64 && out == 64;
    if (out % 128 && !paired_halves)
      fail("c=e4m3 on tile={}x{}x{}{}: a consumer's {} output columns are not whole 128-column scale blocks "
           "(tile=128x256x128 or 64x256x128; without a GLU also 128x128x128)",
           tile.m, tile.n, tile.k, fusion.glu_activation() ? " with a GLU" : "", out);
    if (paired_halves && !stages_c())
      fail("c=e4m3 on tile={}x{}x{} with {} stages and a GLU: the consumers exchange row maxima through the C staging, "
           "which fits beside 4 stages (stages=4)",
           tile.m, tile.n, tile.k, stages);
  }
  if (b != a && !is_weight_only_4bit())
    fail("b={} with a={} (allowed: b equal to a, or a=bf16 with b=mxfp4|nvfp4)", moejit::to_text(b), moejit::to_text(a));
  if (acc != DType::f32) fail("acc={} (allowed: f32)", moejit::to_text(acc));
  if (stages < 2 || stages > 8) fail("stages={} (allowed: 2..8)", stages);
  if (fusion.any()) {
    // Fusions (docs/design.md, "Fusions"): the 16-bit kernels of both families and the portable
    // family's FP8 and 4-bit kernels have them all. The Hopper FP8 kernel has the epilogue fusions
    // and gather by cp.async, but not gather by TMA nor split GLU (B and its scale blocks in halves).
    if (family == KernelFamily::hopper && a == DType::e4m3 && fusion.gather_a && fusion.gather_by == GatherLoad::tma)
      fail("fuse=gather with gather_by=tma and a=e4m3 on family=hopper: the Hopper FP8 kernel gathers rows by cp.async "
           "(gather_by=cp_async)");
    // Split GLU in the FP8 kernel: each half of a consumer slice must lie in one 128-row scale block
    // of B, which 128x192's 96-row halves do not; per-channel B scales would need the split's
    // column map in the scaling.
    if (family == KernelFamily::hopper && a == DType::e4m3 && fusion.glu_activation() && fusion.glu == GluLayout::split) {
      if (tile.n == 192)
        fail("glu=split with a=e4m3 on tile={}x{}x{}: the Hopper FP8 kernel's split GLU needs slices whose gate and up "
             "halves each lie in one 128-row scale block (tile=128x128x128, 64x256x128 or 128x256x128)",
             tile.m, tile.n, tile.k);
      if (b_scales == ScaleB::channels)
        fail("glu=split with a=e4m3 and b_scales=channels on family=hopper (split GLU takes block scales; "
             "use glu=interleaved or b_scales=blocks)");
    }
    // The Hopper 4-bit kernel (roles swapped) has gather and the epilogue fusions but not split GLU
    // (a tile's 128 weight rows are one packed block; gate and up halves would need two) nor
    // atomic (its C is 16-bit: c=f32 is rejected below).
    if (family == KernelFamily::hopper && is_weight_only_4bit() && fusion.glu_activation() && fusion.glu == GluLayout::split)
      fail("glu=split with b={} on family=hopper: the Hopper 4-bit kernel has interleaved GLU only (gpt-oss's layout; "
           "family=portable has split)",
           moejit::to_text(b));
    if (fusion.atomic && !fusion.scatter_c) fail("fuse=atomic needs fuse=scatter (atomics accumulate scattered rows)");
    if (fusion.atomic && c != DType::f32) fail("fuse=atomic with c={} (atomic accumulation needs c=f32)", moejit::to_text(c));
    // A 2x1 pair shares B and each CTA gathers its own rows; a 1x2 pair would multicast A.
    if (fusion.gather_a && family == KernelFamily::hopper && cluster_n != 1)
      fail("fuse=gather with cluster={}x{} (gathered A rows are not multicast: use cluster=1x1 or 2x1)", cluster_m, cluster_n);
  }
  if (fusion.gather_by != GatherLoad::cp_async && !(fusion.gather_a && family == KernelFamily::hopper))
    fail("gather_by={} with fuse={} on family={} (gather_by chooses how the Hopper family loads gathered rows: "
         "it needs fuse=gather and family=hopper)",
         moejit::to_text(fusion.gather_by), fusion_text(fusion), moejit::to_text(family));
  if (b_scales != ScaleB::blocks && !(a == DType::e4m3 && family == KernelFamily::hopper))
    fail("b_scales={} with a={} on family={} (per-channel weight scales: the Hopper FP8 kernel only; "
         "family=portable takes 128x128 blocks)",
         moejit::to_text(b_scales), moejit::to_text(a), moejit::to_text(family));
  // The 4-bit decode tiles of 16 and 32 tokens x 128 weight rows on the static scheduler split too (v45;
  // with 48 or 64 tokens ptxas serialized the wgmmas, C7512).
  const bool w4_split = family == KernelFamily::hopper && is_weight_only_4bit() && tile.m <= 32 && tile.n == 128 &&
                        scheduler == Scheduler::static_persistent;
  if (split != SplitK::none &&
      !(family == KernelFamily::hopper && (((a == DType::bf16 || a == DType::f16 || a == DType::e4m3) && b == a) || w4_split) &&
        !fusion.any() && cluster_m == 1 && cluster_n == 1))
    fail("split={} needs family=hopper, fuse=none, act=none, cluster=1x1 and a=b=bf16|f16|e4m3, or b=mxfp4|nvfp4 on a "
         "16- or 32-token tile with sched=static (the split-K tail is built for the unfused single-CTA 16-bit and FP8 "
         "kernels and the 4-bit decode tiles)",
         moejit::to_text(split));
  // A band longer than any group's M-tile count is the plain order (one band); 1024 bounds it.
  if (band < 0 || band > 1024) fail("band={} (M tiles per band of the tile order: 0 = off, at most 1024)", band);
  if (band != 0 && family != KernelFamily::hopper)
    fail("band={} on family={} (tile bands are built for the Hopper families)", band, moejit::to_text(family));
  if (tail != 0) {
    if (tail != 24) fail("tail={} (rows a group's last 128-row tile absorbs: 0 or 24)", tail);
    if (!(family == KernelFamily::hopper && (a == DType::bf16 || a == DType::f16) && b == a &&
          !fusion.atomic && split == SplitK::none && tile.m == 128 && tile.n == 256 && tile.k == 64 && c != DType::e4m3))
      fail("tail={} needs family=hopper, a=b=bf16|f16, no fuse=atomic, split=none and tile=128x256x64 (absorbed tail "
           "rows are built for the 16-bit 128x256 kernel, on single CTAs or either CTA pair)",
           tail);
    if (stages * (tile.m + tile.n + tail) * 128 + 2048 + kCStagingBytes / 2 > 227 * 1024)
      fail("tail={} with stages={}: the stages with the tail rows do not fit in 227 KB (stages=4)", tail, stages);
  }
  if (mix != 0) {
    if (mix < 0 || mix % 64 != 0 || mix > 4032)
      fail("mix={} (row bound of the mixed tile order's heavy groups: 0 = off, or a multiple of 64 up to 4032)", mix);
    if (!(family == KernelFamily::hopper && (a == DType::bf16 || a == DType::f16 || a == DType::e4m3) && b == a &&
          split == SplitK::none))
      fail("mix={} needs family=hopper, a=b=bf16|f16|e4m3 and split=none (the mixed tile order is built for the "
           "16-bit and FP8 Hopper kernels)",
           mix);
    // The two cursors' state beside 2x1 pairs' tail rows spilled 8 bytes (ptxas, static scheduler).
    if (cluster_m == 2 && tail != 0) fail("mix={} with cluster=2x1 and tail={} (its consumers spill: not built)", mix, tail);
  }
  if (pair_order != PairOrder::plain &&
      !(family == KernelFamily::hopper && (a == DType::bf16 || a == DType::f16 || a == DType::e4m3) && b == a &&
        cluster_m == 2 && cluster_n == 1 && scheduler == Scheduler::dynamic && band == 0 && mix == 0))
    fail("pair_order={} needs family=hopper, a=b=bf16|f16|e4m3, cluster=2x1, sched=dynamic, band=0 and mix=0 (the "
         "order of a group's odd last M tile's units is built for the 16-bit and FP8 kernels' CTA pairs on the "
         "dynamic scheduler)",
         moejit::to_text(pair_order));
  if (fusion.glu != GluLayout::interleaved && !fusion.glu_activation())
    fail("glu={} with act={} (glu applies to act=swiglu|swiglu_oai)", moejit::to_text(fusion.glu), moejit::to_text(fusion.activation));
  if (cluster_m != 1 || cluster_n != 1) {
    // Hopper: pairs of CTAs on neighbouring N tiles share A (1x2), on neighbouring M tiles share B
    // (2x1, opt-in: the heuristic does not pick it), through TMA multicast.
    bool hopper_pair = family == KernelFamily::hopper && ((cluster_m == 1 && cluster_n == 2) || (cluster_m == 2 && cluster_n == 1)) &&
                       tile.m == 128;
    if (!hopper_pair) fail("cluster={}x{} (implemented: 1x1; hopper with 128-row tiles: 1x2, 2x1)", cluster_m, cluster_n);
  }

  if (family == KernelFamily::portable) {
    // (tile.k <= 0 first: 128 % 0 was a division by zero, found by fuzz_spec in v45's CI.)
    if (a == DType::e4m3 && (tile.n > 128 || tile.k <= 0 || 128 % tile.k != 0))
      fail("tile {}x{}x{} (portable FP8: N at most 128, one B scale per tile; K dividing the 128-wide scale block)",
           tile.m, tile.n, tile.k);
    if (arch.sm() < 80) fail("arch={} (portable family needs sm_80 or newer)", arch.to_text());
    // Each factor is bounded before the product, which could otherwise overflow int.
    if (warps_m < 1 || warps_n < 1 || warps_m > 16 || warps_n > 16 || warps_m * warps_n > 16)
      fail("warps={}x{} (each at least 1, at most 16 warps in all)", warps_m, warps_n);
    if (tile.k != 32 && tile.k != 64) fail("tile K={} (allowed: 32|64, multiples of the MMA's K=16)", tile.k);
    if (tile.m < 16 * warps_m || tile.m % (16 * warps_m) != 0)
      fail("tile M={} is not a positive multiple of 16 × warps_m={}", tile.m, warps_m);
    if (tile.n < 16 * warps_n || tile.n % (16 * warps_n) != 0)
      fail("tile N={} is not a positive multiple of 16 × warps_n={}", tile.n, warps_n);
    if (tile.m > 256 || tile.n > 256) fail("tile {}x{} larger than 256 on a side", tile.m, tile.n);
  } else if (a == DType::e4m3) {
    // FP8 block-scaled kernel (kernel_templates/moejit/hopper_fp8/): what it implements so far.
    if (!(arch.sm() == 90 && arch.arch_specific)) fail("arch={} (hopper family needs sm_90a)", arch.to_text());
    // 128x192x128: chosen for long K and full groups (docs/perf.md v7). 128x256x128: its consumers
    // multiply their 256 columns in two halves (docs/perf.md v22).
    const bool fp8_tile_ok = tile.k == 128 && ((tile.m == 128 && (tile.n == 128 || tile.n == 192 || tile.n == 256)) ||
                                               (tile.m == 64 && tile.n == 256));
    if (!fp8_tile_ok)
      fail("tile {}x{}x{} (FP8 allows: 128x128x128|128x192x128|128x256x128|64x256x128; K = one 128-wide scale block)",
           tile.m, tile.n, tile.k);
    // CTA pairs sharing B (2x1, kernel_templates/moejit/hopper_fp8/; fused and c=e4m3 since v38, a
    // gathering pair's CTAs each copying their own rows on the static scheduler; ungathered pairs on
    // the dynamic one too since v49).
    if (cluster_n != 1 || (cluster_m == 2 && scheduler != Scheduler::static_persistent && fusion.gather_a))
      fail("cluster={}x{} with sched={} (FP8: 1x1, or 2x1; gathered 2x1 with sched=static)", cluster_m, cluster_n,
           moejit::to_text(scheduler));
  } else if (is_weight_only_4bit()) {
    // 4-bit weight-only kernel (kernel_templates/moejit/hopper_w4/grouped_gemm_sm90_w4_rs.cuh):
    // tile M = tokens per tile (the wgmma's N), N = weight rows (128, or 256 with 64 tokens: with
    // 128 tokens ptxas spills 96 bytes once the MXFP4 widening lost its second path, docs/perf.md v10),
    // 64 K per stage.
    if (!(arch.sm() == 90 && arch.arch_specific)) fail("arch={} (hopper family needs sm_90a)", arch.to_text());
    const bool tokens_ok =
        tile.m == 16 || tile.m == 32 || tile.m == 48 || tile.m == 64 || tile.m == 128 || tile.m == 256;
    if (!tokens_ok || !(tile.n == 128 || (tile.n == 256 && tile.m == 64)) || tile.k != 64)
      fail("tile {}x{}x{} (4-bit weights allow: 16|32|48|64|128|256 tokens x 128 weight rows, or 64 tokens x 256 "
           "weight rows, x 64 K)", tile.m, tile.n, tile.k);
    if (c == DType::f32) fail("c=f32 (the 4-bit kernel writes 16-bit C so far: bf16|f16)");
    if (cluster_m != 1 || cluster_n != 1) fail("cluster={}x{} (4-bit: 1x1)", cluster_m, cluster_n);
  } else {
    if (!(arch.sm() == 90 && arch.arch_specific)) fail("arch={} (hopper family needs sm_90a)", arch.to_text());
    if (tile.m != 64 && tile.m != 128) fail("tile M={} (allowed: 64|128)", tile.m);
    if (tile.n % 64 != 0 || tile.n < 64 || tile.n > 256) fail("tile N={} (allowed: 64|128|192|256)", tile.n);
    if (tile.k != 64) fail("tile K={} (allowed: 64, one 128-byte swizzle row of 16-bit elements)", tile.k);
    // 64-row tiles split N between the two consumers: 32-column slices, narrower than the TMA-store
    // epilogue's 64-column chunks (hopper/epilogue.cuh; NVRTC failed its static_assert).
    if (tile.m == 64 && tile.n == 64) fail("tile 64x64 (64-row tiles need N >= 128: each consumer stores 64-column chunks)");
  }
  int smem = dynamic_smem_bytes();
  if (smem > max_dynamic_smem_bytes(arch))
    fail("needs {} bytes of shared memory; {} allows {} per block (fewer stages or a smaller tile)", smem, arch.to_text(),
         max_dynamic_smem_bytes(arch));
}

Key128 KernelSpec::key() const { return xxh3_128(to_text()); }

std::string operand_formats(const KernelSpec& spec) {
  const std::string_view rows = spec.layout == GroupLayout::contiguous ? "[total_rows]" : "[E][capacity]";
  std::string out;
  if (spec.a == DType::e4m3) {
    out += fmt::format("A  e4m3 {}[K]; a_scales fp32 [ceil(K/128)][rows of A] (1x128 blocks, K-block-major)\n", rows);
    out += spec.b_scales == ScaleB::channels ? "B  e4m3 [E][N][K]; b_scales fp32 [E][N] (one per output channel)\n"
                                             : "B  e4m3 [E][N][K]; b_scales fp32 [E][ceil(N/128)][ceil(K/128)] (128x128 blocks)\n";
  } else if (spec.is_weight_only_4bit()) {
    out += fmt::format("A  {} {}[K]\n", moejit::to_text(spec.a), rows);
    if (spec.b == DType::mxfp4)
      out += fmt::format(
          "B  mxfp4 (E2M1 + E8M0 scale per 32 K) pre-arranged by pack_w4_sm90 (layout {}): [E][ceil(N/128)] runs "
          "of a 128-byte row-exponent header and ceil(K/64) blocks of 4352 bytes (fragment-order codes, then scales "
          "relative to the row exponent)\n",
          kW4Sm90LayoutVersion);
    else
      out += fmt::format(
          "B  nvfp4 (E2M1 + E4M3 scale per 16 K) pre-arranged by pack_w4_sm90 (layout {}): [E][ceil(N/128)][ceil(K/64)] "
          "blocks of 4608 bytes (fragment-order codes, then scales); b_tensor_scales fp32 [E]\n",
          kW4Sm90LayoutVersion);
  } else {
    out += fmt::format("A  {} {}[K]\n", moejit::to_text(spec.a), rows);
    out += fmt::format("B  {} [E][N][K]\n", moejit::to_text(spec.b));
  }
  if (spec.c == DType::e4m3)
    out += fmt::format("C  e4m3 {}[N_out]; c_scales fp32 [ceil(N_out/128)][rows of C] (written: 1x128 blocks, K-block-major as the "
                       "next FP8 GEMM's a_scales)\n", rows);
  else
    out += fmt::format("C  {} {}[N]\n", moejit::to_text(spec.c), rows);
  return out;
}

}  // namespace moejit
