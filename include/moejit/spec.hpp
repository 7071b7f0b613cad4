// KernelSpec: everything that decides a kernel binary, with one canonical text form.
//
//   family=portable,arch=sm_90a,layout=contiguous,a=bf16,b=bf16,c=bf16,acc=f32,
//   tile=128x128x32,stages=4,warps=2x4,cluster=1x1,sched=static,fuse=none,act=none
//
// A GLU activation adds ",glu=interleaved|split" after act (printed only then, or when split);
// ",b_scales=", ",split=", ",band=", ",tail=", ",mix=" and ",pair_order=" follow when not their defaults.
//
// to_text() prints every field in that order; parse() accepts the fields in any order,
// fills omitted ones with defaults, and rejects unknown fields or values with a SpecError
// naming the field and the allowed values. validate() rejects combinations that cannot
// build (tile too large for shared memory, BK not a multiple of the MMA's K, ...).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace moejit {

enum class KernelFamily { portable, hopper };   // mma.sync + cp.async (sm_80+) | TMA + wgmma (sm_90a)
enum class GroupLayout { contiguous, masked };  // values match kLayout* in kernel_templates
// Values match kBF16/kF16/kF32/kE4M3/kMXFP4/kNVFP4 in kernel_templates. a = b = e4m3 is FP8 with
// block scales (DeepSeek-V3 recipe: one fp32 scale per row per 128 K for A, per 128x128 block for
// B). a = bf16 with b = mxfp4 | nvfp4 is weight-only 4-bit (B pre-arranged by pack_w4_sm90, its
// block scales inside; NVFP4 adds an fp32 scale per expert). Formats: include/moejit/formats.hpp.
enum class DType { bf16, f16, f32, e4m3, mxfp4, nvfp4 };
enum class Scheduler { static_persistent, dynamic };
enum class Activation { none, silu, gelu, swiglu, swiglu_oai };
// Where a GLU activation (swiglu, swiglu_oai) finds its gate/up pairs among the GEMM's N columns:
// interleaved: gate = column 2i, up = 2i + 1 (gpt-oss gate_up_proj); split: gate = i, up = N/2 + i.
enum class GluLayout { interleaved, split };
// How a Hopper kernel with fuse=gather loads the routed rows of A: the producer warpgroup's cp.async
// copies (16 bytes each, one barrier arrival per thread), or one TMA copy per row (a 1-row box into
// the row's swizzled place; one expect_tx per stage). Printed as ",gather_by=tma" when not the default.
enum class GatherLoad { cp_async, tma };
// FP8 (a = b = e4m3) weight scales: one per 128x128 block of each expert (DeepSeek-V3), or one per
// output channel of each expert (the row-wise recipe: [E][N], constant along K; the Hopper FP8
// kernel applies it to the promoted sum before the epilogue). Printed as ",b_scales=channels" when
// not the default.
enum class ScaleB { blocks, channels };
// Split-K of the last, partial wave (Hopper bf16/f16 and FP8, unfused, cluster 1x1): when the last round of
// a persistent launch would leave at least half the CTAs idle, its tiles run as pieces of K on
// otherwise idle CTAs and the last piece adds the others' partial sums (through a workspace the
// runtime owns) before it stores C (kernel_templates/moejit/common/split_tail.cuh). The launch
// decides from the exact tile count whether and how far to split. Printed as ",split=tail" when on.
enum class SplitK { none, tail };
// Tile order inside a group (Hopper families): band = 0 sweeps all of a group's M tiles for one N
// tile after another; band = b walks bands of b M tiles, N sweeping inside each band, so that a
// group's A larger than L2 is read from DRAM about once instead of once per few N tiles
// (kernel_templates/moejit/common/scheduler.cuh; opt-in: no gain measured on the suite, docs/perf.md
// v31). Printed as ",band=b" when not 0.
// Absorbed tail rows (Hopper bf16/f16, tile 128x256x64, cluster 1x1, 1x2 or 2x1, no split; any fusion but
// fuse=atomic: unfused, an MoE layer's gathered GEMM1 (v42) or its GEMM2 (v41)): tail = t
// lets a group's last whole 128-row tile also multiply the up to t rows past it (roles swapped, on the
// tile's own B stages), instead of a tile of its own that would load the whole B tile for a few rows
// (docs/perf.md v40). The stages then hold t more A rows and the C staging one chunk per consumer.
// 0 or 24; printed as ",tail=t" when not 0.
// Mixed tile order (Hopper bf16/f16/e4m3, no split, not 2x1 pairs with tail rows): mix = R interleaves the tiles of groups of at least R
// rows with the others' in proportion to their counts, instead of group by group, so that under
// skewed routing the hot experts' compute-bound tiles run beside the other experts' DRAM-bound ones
// rather than in rounds of their own (kernel_templates/moejit/common/scheduler.cuh, MixedTileCursor;
// docs/perf.md v43). A multiple of 64 up to 4032; 0 = off. Printed as ",mix=R" when not 0.
// Order of a group's units on 2x1 CTA pairs (Hopper bf16/f16/e4m3, cluster=2x1, sched=dynamic, band=0,
// mix=0): plain numbers a group's pair units (M tiles 2i, 2i + 1 at one N tile) over all its N tiles
// and then, when its M-tile count is odd, its last M tile's units; interleaved puts each of those
// units right after the pair units of its two N tiles, which so still hold their B tiles in L2
// (common/scheduler.cuh; docs/perf.md v49: where many groups end in a short odd M tile). Printed as
// ",pair_order=interleaved" when not plain.
enum class PairOrder { plain, interleaved };
inline bool is_glu(Activation a) { return a == Activation::swiglu || a == Activation::swiglu_oai; }

// Compute capability, e.g. {9, 0, true} is sm_90a (arch-specific features: wgmma, setmaxnreg).
struct Arch {
  int major = 9;
  int minor = 0;
  bool arch_specific = false;
  int sm() const { return major * 10 + minor; }
  std::string to_text() const;                 // "sm_90a"
  static Arch parse(std::string_view text);    // throws SpecError
  bool operator==(const Arch&) const = default;
};

struct TileShape {
  int m = 128, n = 128, k = 32;
  bool operator==(const TileShape&) const = default;
};

// Epilogue and gather fusions (docs/design.md, "Fusions"; the pointers are GroupedGemmArgs'
// gather_rows, scatter_rows, routing_weights, bias). Epilogue order:
//   acc (+ bias[g]) -> activation -> (* routing_weights[r]) -> convert to c -> store | scatter | atomic add
struct Fusion {
  bool gather_a = false;        // A rows read through a row-index array (permute_x)
  bool scatter_c = false;       // C rows written through a row-index array (permute_y)
  bool routing_weight = false;  // multiply each output row by its routing weight
  bool bias = false;            // per-expert bias along N
  bool atomic = false;          // with scatter: accumulate into C with atomic adds (c=f32; non-deterministic)
  Activation activation = Activation::none;
  GluLayout glu = GluLayout::interleaved;  // meaningful for GLU activations only
  GatherLoad gather_by = GatherLoad::cp_async;  // meaningful with gather_a on the Hopper family only
  bool operator==(const Fusion&) const = default;
  // Fusions applied in the epilogue (all but gather_a); Fuse::epilogue in kernel_templates/moejit/common/fusion.cuh.
  bool epilogue() const { return scatter_c || routing_weight || bias || atomic || activation != Activation::none; }
  bool any() const { return gather_a || epilogue(); }
  bool glu_activation() const { return is_glu(activation); }
  // Rows written through scatter_c, at most weighted and biased (an MoE layer's GEMM2 without
  // atomics): the heuristic's tail-row bound for them is its own (heuristics/config.cpp).
  bool linear_scatter() const { return scatter_c && !gather_a && !atomic && activation == Activation::none; }
};

// 128-bit content key (XXH3-128); hex() is 32 lowercase hex digits.
struct Key128 {
  std::uint64_t hi = 0, lo = 0;
  std::string hex() const;
  bool operator==(const Key128&) const = default;
};

struct KernelSpec {
  KernelFamily family = KernelFamily::portable;
  Arch arch{};
  GroupLayout layout = GroupLayout::contiguous;
  DType a = DType::bf16, b = DType::bf16, c = DType::bf16, acc = DType::f32;
  TileShape tile{};
  int stages = 4;
  int warps_m = 2, warps_n = 4;  // portable only: warp grid over the tile
  int cluster_m = 1, cluster_n = 1;
  Scheduler scheduler = Scheduler::static_persistent;
  Fusion fusion{};
  ScaleB b_scales = ScaleB::blocks;  // a = b = e4m3 only
  SplitK split = SplitK::none;       // hopper bf16/f16/e4m3, unfused, cluster 1x1 only
  int band = 0;                      // hopper only: M tiles per band of the tile order (0 = off)
  int tail = 0;                      // hopper 16-bit only: rows a group's last 128-row tile absorbs (0 or 24)
  int mix = 0;                       // hopper 16-bit or FP8: row bound of the mixed tile order's heavy groups (0 = off)
  PairOrder pair_order = PairOrder::plain;  // hopper 16-bit or FP8, cluster=2x1, sched=dynamic only

  std::string to_text() const;
  static KernelSpec parse(std::string_view text);  // throws SpecError
  void validate() const;                           // throws SpecError
  Key128 key() const;                              // XXH3-128 of to_text(); stable across versions

  // a = bf16 with b = mxfp4 | nvfp4 (the weight-only 4-bit kernel).
  bool is_weight_only_4bit() const { return a == DType::bf16 && (b == DType::mxfp4 || b == DType::nvfp4); }
  int threads_per_cta() const;
  int dynamic_smem_bytes() const;  // mirrors smem_bytes<...>() of the kernel template
  // Hopper kernels whose C goes out through shared memory and TMA stores (the launch passes a
  // tensor map of C): bf16/f16 and FP8 where 32 KB of staging fit beside the stages; 4-bit
  // weight-only tiles of 128 and 256 tokens without epilogue fusions. Others store from registers
  // or copy C out with their threads.
  bool stages_c() const;
  // Hopper FP8: the stages with their scales, barriers and tile ring (fp8_stage_bytes<>()).
  int fp8_stage_bytes() const;
  // The kernel waits for the grid ahead of it in the stream at its entry (griddepcontrol, sm_90),
  // so the Runtime may launch it early (RuntimeOptions::programmatic_launch). All but the Hopper
  // 4-bit 48-token tile, whose wgmmas ptxas then serializes (C7511) within its 80 registers.
  bool grid_dependency() const;
  int min_ctas_per_sm() const;     // __launch_bounds__ minimum blocks (register budget)
  bool operator==(const KernelSpec&) const = default;
};

// What the kernel of a spec reads and writes: element format of A, B and C, and the scale arrays
// it needs with their layouts (the layouts are defined in include/moejit/formats.hpp). One line
// per operand, e.g. "B  e4m3 [E][N][K]; b_scales fp32 [E][ceil(N/128)][ceil(K/128)] (128x128 blocks)".
std::string operand_formats(const KernelSpec& spec);

// Shared memory a CTA may opt into on this arch (cudaDevAttrMaxSharedMemoryPerBlockOptin).
int max_dynamic_smem_bytes(const Arch& arch);

std::string_view to_text(KernelFamily);
std::string_view to_text(GroupLayout);
std::string_view to_text(DType);
std::string_view to_text(Scheduler);
std::string_view to_text(Activation);
std::string_view to_text(GluLayout);
std::string_view to_text(GatherLoad);
std::string_view to_text(ScaleB);
std::string_view to_text(SplitK);
std::string_view to_text(PairOrder);
// "fuse=...,act=..." (+ ",glu=...", ",gather_by=tma" as in KernelSpec::to_text); KernelSpec::parse reads it back.
std::string to_text(const Fusion&);
int element_bytes(DType);  // bytes per element; 4-bit formats: 1 (two elements per byte, see pack_w4_sm90)

}  // namespace moejit
