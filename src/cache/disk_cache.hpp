// Stage 3b: cubins on disk, one file per cache key.
//
// File = header (magic, format version, key, sizes) + spec text + resource report + cubin
// + XXH3-64 checksum of everything before it. Written to a temporary file in the same
// folder and renamed into place, so a reader sees a whole file or none. A file that fails
// any check (size, magic, version, key, checksum) is reported once and treated as a miss;
// the rebuilt entry replaces it. With a size bound, a store evicts the least recently used
// entries (mtime, refreshed on every hit) by unlink. Format and the concurrency argument:
// cache/README.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moejit/spec.hpp"

namespace moejit {

inline constexpr char kCacheMagic[8] = {'M', 'O', 'E', 'J', 'I', 'T', 'C', 'B'};
inline constexpr std::uint32_t kCacheFormatVersion = 1;

struct CacheEntry {
  Key128 key;
  std::string spec_text;
  std::string resources;
  std::string cubin;
};

// Serialization, separate from the filesystem so that tests can corrupt bytes directly.
std::string encode_cache_entry(const CacheEntry& entry);
// Returns nullopt (with the reason in *why) for anything but a whole, matching entry.
std::optional<CacheEntry> decode_cache_entry(const std::string& bytes, const Key128& expected, std::string* why);

class DiskCache {
 public:
  // dir empty: disabled. Otherwise the folder is created on first store. max_bytes 0: unbounded.
  explicit DiskCache(std::string dir, std::uint64_t max_bytes = default_max_bytes());
  static std::string default_dir();  // MOEJIT_CACHE_DIR, $XDG_CACHE_HOME/moejit, ~/.cache/moejit; "" if MOEJIT_CACHE=off
  // MOEJIT_CACHE_MAX_BYTES: bytes, or with a K, M or G suffix (powers of 1024); unset or 0: unbounded.
  static std::uint64_t default_max_bytes();

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  std::uint64_t max_bytes() const { return max_bytes_; }
  std::string path_for(const Key128& key) const;

  std::optional<CacheEntry> load(const Key128& key) const;  // corrupt -> nullopt, logged once
  void store(const CacheEntry& entry) const;                 // failures degrade to memory-only, logged once

  struct Listing {
    std::string path;
    std::uint64_t bytes = 0;
    bool valid = false;
    std::string spec_text;  // valid entries
    std::string problem;    // invalid entries
  };
  std::vector<Listing> list() const;  // entries only: temporary files of writers are not listed
  // Removes every entry and the temporary files of writers that died (older than ten minutes;
  // younger ones may belong to a live writer). Returns how many files it removed.
  std::size_t clear() const;

 private:
  void evict_to_bound(const std::string& keep) const;

  std::string dir_;
  std::uint64_t max_bytes_ = 0;
  // Test hook, read once per DiskCache from MOEJIT_TEST_CRASH_BEFORE_RENAME: store() kills the
  // process with SIGKILL after writing its temporary file ("half": after writing half of it).
  enum class CrashHook { none, after_write, half_written } crash_hook_ = CrashHook::none;
};

}  // namespace moejit
