// libFuzzer target: KernelSpec text -> parse -> to_text -> parse, and validate.
//
// Properties: parse() either returns a spec or throws SpecError (nothing else, no crash, no UB);
// a parsed spec prints a canonical text that parses back to the same spec, prints the same
// text and has the same key; validate() either throws SpecError or accepts a spec whose
// derived numbers (threads, shared memory, CTAs per SM) are in range for its arch, and packs
// into the hot path's 128-bit key (equal specs, equal keys).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "cache/spec_key.hpp"
#include "moejit/errors.hpp"
#include "moejit/spec.hpp"

using namespace moejit;

namespace {
void check(bool ok, const char* what, const KernelSpec& spec) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_spec: property failed: %s\nspec: %s\n", what, spec.to_text().c_str());
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  KernelSpec spec;
  try {
    spec = KernelSpec::parse(text);
  } catch (const SpecError&) {
    return 0;
  }
  const std::string canonical = spec.to_text();
  KernelSpec again = KernelSpec::parse(canonical);  // throws (and fails the run) if not
  check(again == spec, "parse(to_text(s)) == s", spec);
  check(again.to_text() == canonical, "to_text is a fixed point", spec);
  check(again.key() == spec.key(), "key is a function of the text", spec);
  check(pack_spec(again) == pack_spec(spec), "packed key is a function of the spec", spec);

  bool valid = true;
  try {
    spec.validate();
  } catch (const SpecError&) {
    valid = false;
  }
  bool valid_again = true;
  try {
    again.validate();
  } catch (const SpecError&) {
    valid_again = false;
  }
  check(valid == valid_again, "validate() agrees on equal specs", spec);
  if (!valid) return 0;
  check(spec.tile.m > 0 && spec.tile.n > 0 && spec.tile.k > 0, "valid tile is positive", spec);
  int threads = spec.threads_per_cta();
  check(threads >= 32 && threads <= 1024 && threads % 32 == 0, "valid threads per CTA in 32..1024", spec);
  int smem = spec.dynamic_smem_bytes();
  check(smem > 0 && smem <= max_dynamic_smem_bytes(spec.arch), "valid shared memory fits the arch", spec);
  check(spec.min_ctas_per_sm() >= 1, "at least one CTA per SM", spec);
  check(pack_spec(spec).has_value(), "a valid spec packs into the hot-path key", spec);
  return 0;
}
