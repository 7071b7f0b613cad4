#include "util/hash.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace moejit {

Key128 xxh3_128(std::string_view bytes) {
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return {h.high64, h.low64};
}

std::uint64_t xxh3_64(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

KeyBuilder::KeyBuilder() : state_(XXH3_createState()) { XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_)); }
KeyBuilder::~KeyBuilder() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

KeyBuilder& KeyBuilder::add(std::string_view field_name, std::string_view value) {
  auto* s = static_cast<XXH3_state_t*>(state_);
  for (std::string_view part : {field_name, value}) {
    std::uint64_t size = part.size();
    XXH3_128bits_update(s, &size, sizeof size);
    XXH3_128bits_update(s, part.data(), part.size());
  }
  return *this;
}

Key128 KeyBuilder::finish() {
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return {h.high64, h.low64};
}

}  // namespace moejit
