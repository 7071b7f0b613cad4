// XXH3 hashing (header-only build of Debian's xxHash) behind two small functions.
#pragma once
#include <cstdint>
#include <string_view>

#include "moejit/spec.hpp"

namespace moejit {

Key128 xxh3_128(std::string_view bytes);
std::uint64_t xxh3_64(std::string_view bytes);

// Incremental 128-bit hash over several fields; each field is length-prefixed so that
// ("ab","c") and ("a","bc") hash differently.
class KeyBuilder {
 public:
  KeyBuilder();
  ~KeyBuilder();
  KeyBuilder& add(std::string_view field_name, std::string_view value);
  Key128 finish();

 private:
  void* state_;
};

}  // namespace moejit
