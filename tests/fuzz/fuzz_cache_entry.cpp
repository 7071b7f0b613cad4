// libFuzzer target: decode_cache_entry on arbitrary bytes.
//
// Properties: decoding never crashes, reads out of bounds or allocates from an unchecked
// length; a rejection always says why; an accepted file is exactly what encode_cache_entry
// writes for the decoded entry (so a reader accepts nothing but whole, canonical entries).
// Each input is decoded twice: as given (against the key its header claims, so that the key
// check does not stop every input), and with its last 8 bytes replaced by the right checksum,
// so that mutations also reach the checks after the checksum.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cache/disk_cache.hpp"
#include "util/hash.hpp"

using namespace moejit;

namespace {
void decode_and_check(const std::string& bytes) {
  Key128 key;
  if (bytes.size() >= 32) {
    std::memcpy(&key.hi, bytes.data() + 16, 8);
    std::memcpy(&key.lo, bytes.data() + 24, 8);
  }
  std::string why;
  auto entry = decode_cache_entry(bytes, key, &why);
  if (!entry) {
    if (why.empty()) std::fprintf(stderr, "fuzz_cache_entry: rejected without a reason\n"), std::abort();
    return;
  }
  if (!(entry->key == key)) std::fprintf(stderr, "fuzz_cache_entry: accepted another key\n"), std::abort();
  if (encode_cache_entry(*entry) != bytes)
    std::fprintf(stderr, "fuzz_cache_entry: accepted a file that encode would not write\n"), std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  decode_and_check(bytes);
  if (size >= 8) {
    std::uint64_t sum = xxh3_64(std::string_view(bytes.data(), size - 8));
    std::memcpy(bytes.data() + size - 8, &sum, 8);
    decode_and_check(bytes);
  }
  return 0;
}
