// A KernelSpec packed into 128 bits: the key of the hot-path tables in front of the
// content-hash cache. Packing and comparing it allocate nothing and format no text, so a
// repeated request costs two word compares and a short hash (docs/perf.md, "JIT latency").
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "moejit/spec.hpp"

namespace moejit {

struct SpecKey {
  std::uint64_t lo = 0, hi = 0;
  bool operator==(const SpecKey&) const = default;
};

struct SpecKeyHash {
  std::size_t operator()(const SpecKey& k) const noexcept {
    // Two rounds of a 64-bit multiply-xorshift mix (splitmix64's finalizer) over both words.
    auto mix = [](std::uint64_t x) {
      x ^= x >> 30;
      x *= 0xbf58476d1ce4e5b9ull;
      x ^= x >> 27;
      x *= 0x94d049bb133111ebull;
      return x ^ (x >> 31);
    };
    return static_cast<std::size_t>(mix(k.lo ^ mix(k.hi)));
  }
};

// Every field of KernelSpec goes into the key: a field left out makes two specs share one entry
// (band did until 2026-11-27). A new field changes these sizes; pack it, then update them.
static_assert(sizeof(KernelSpec) == 116 && sizeof(Fusion) == 20, "KernelSpec changed: pack the new field in pack_spec");

// nullopt when a field does not fit its bits (such a spec never validates); callers then take
// the text-keyed path, so packing can never make two different specs share an entry.
inline std::optional<SpecKey> pack_spec(const KernelSpec& s) {
  std::uint64_t lo = 0, hi = 0;
  int shift = 0;
  bool fits = true;
  auto put = [&](std::uint64_t& word, long long value, int bits) {
    if (value < 0 || value >= (1ll << bits)) fits = false;
    word |= (static_cast<std::uint64_t>(value) & ((1ull << bits) - 1)) << shift;
    shift += bits;
  };
  put(lo, static_cast<int>(s.family), 2);
  put(lo, s.arch.major, 8);
  put(lo, s.arch.minor, 8);
  put(lo, s.arch.arch_specific, 1);
  put(lo, static_cast<int>(s.layout), 2);
  put(lo, static_cast<int>(s.a), 3);  // 3 bits: room for the low-precision formats coming in
  put(lo, static_cast<int>(s.b), 3);
  put(lo, static_cast<int>(s.c), 3);
  put(lo, static_cast<int>(s.acc), 3);
  put(lo, static_cast<int>(s.scheduler), 2);
  put(lo, s.fusion.gather_a, 1);
  put(lo, s.fusion.scatter_c, 1);
  put(lo, s.fusion.routing_weight, 1);
  put(lo, s.fusion.bias, 1);
  put(lo, static_cast<int>(s.fusion.activation), 4);
  put(lo, s.warps_m, 5);
  put(lo, s.warps_n, 5);
  put(lo, s.cluster_m, 4);
  put(lo, s.fusion.atomic, 1);
  put(lo, static_cast<int>(s.fusion.glu), 1);
  put(lo, static_cast<int>(s.fusion.gather_by), 1);
  put(lo, static_cast<int>(s.pair_order), 1);  // 61 bits
  shift = 0;
  put(hi, s.cluster_n, 4);
  put(hi, s.stages, 8);
  put(hi, s.tile.m, 9);  // validate() allows at most 256 on a side, K at most 128
  put(hi, s.tile.n, 9);
  put(hi, s.tile.k, 9);
  put(hi, static_cast<int>(s.b_scales), 1);
  put(hi, static_cast<int>(s.split), 1);
  put(hi, s.band, 11);  // 0..1024; until 2026-11-27 left out, so band=b shared band=0's entry
  put(hi, s.tail, 6);
  put(hi, s.mix % 64 == 0 ? s.mix / 64 : -1, 6);  // validate(): a multiple of 64 up to 4032
  // 64 bits
  if (!fits) return std::nullopt;
  return SpecKey{lo, hi};
}

}  // namespace moejit
