#include "cache/disk_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "util/hash.hpp"
#include "util/log.hpp"

namespace moejit {
namespace fs = std::filesystem;

namespace {

constexpr const char* kEntrySuffix = ".cubin.mjk";
// magic, version, reserved, key hi, key lo, spec len, resources len, cubin len
constexpr std::size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8 + 8 + 8;
constexpr std::size_t kChecksumBytes = 8;
// Bounds a header may claim, so that a corrupt length never drives a huge allocation.
constexpr std::uint64_t kMaxFieldBytes = 1ull << 30;

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}
template <typename T>
T get(const std::string& in, std::size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof value);
  return value;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream text;
  text << in.rdbuf();
  out = text.str();
  return true;
}

}  // namespace

std::string encode_cache_entry(const CacheEntry& e) {
  std::string out;
  out.reserve(kHeaderBytes + e.spec_text.size() + e.resources.size() + e.cubin.size() + kChecksumBytes);
  out.append(kCacheMagic, sizeof kCacheMagic);
  put<std::uint32_t>(out, kCacheFormatVersion);
  put<std::uint32_t>(out, 0);
  put<std::uint64_t>(out, e.key.hi);
  put<std::uint64_t>(out, e.key.lo);
  put<std::uint64_t>(out, e.spec_text.size());
  put<std::uint64_t>(out, e.resources.size());
  put<std::uint64_t>(out, e.cubin.size());
  out += e.spec_text;
  out += e.resources;
  out += e.cubin;
  put<std::uint64_t>(out, xxh3_64(out));
  return out;
}

std::optional<CacheEntry> decode_cache_entry(const std::string& bytes, const Key128& expected, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<CacheEntry> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (bytes.size() < kHeaderBytes + kChecksumBytes)
    return fail(fmt::format("truncated ({} bytes, header alone is {})", bytes.size(), kHeaderBytes + kChecksumBytes));
  if (std::memcmp(bytes.data(), kCacheMagic, sizeof kCacheMagic) != 0) return fail("not a moejit cache entry (bad magic)");
  auto version = get<std::uint32_t>(bytes, 8);
  if (version != kCacheFormatVersion)
    return fail(fmt::format("format version {} (this build reads {})", version, kCacheFormatVersion));
  Key128 key{get<std::uint64_t>(bytes, 16), get<std::uint64_t>(bytes, 24)};
  if (!(key == expected)) return fail(fmt::format("holds key {} instead of {}", key.hex(), expected.hex()));
  auto spec_len = get<std::uint64_t>(bytes, 32), res_len = get<std::uint64_t>(bytes, 40), cubin_len = get<std::uint64_t>(bytes, 48);
  if (spec_len > kMaxFieldBytes || res_len > kMaxFieldBytes || cubin_len > kMaxFieldBytes ||
      kHeaderBytes + spec_len + res_len + cubin_len + kChecksumBytes != bytes.size())
    return fail(fmt::format("sizes in header do not match the file ({} bytes)", bytes.size()));
  std::size_t body = bytes.size() - kChecksumBytes;
  if (xxh3_64(std::string_view(bytes.data(), body)) != get<std::uint64_t>(bytes, body)) return fail("checksum mismatch");
  CacheEntry e;
  e.key = key;
  e.spec_text = bytes.substr(kHeaderBytes, spec_len);
  e.resources = bytes.substr(kHeaderBytes + spec_len, res_len);
  e.cubin = bytes.substr(kHeaderBytes + spec_len + res_len, cubin_len);
  return e;
}

DiskCache::DiskCache(std::string dir) : dir_(std::move(dir)) {}

std::string DiskCache::default_dir() {
  const char* off = std::getenv("MOEJIT_CACHE");
  if (off && (!std::strcmp(off, "off") || !std::strcmp(off, "0"))) return "";
  if (const char* dir = std::getenv("MOEJIT_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return (fs::path(xdg) / "moejit").string();
  if (const char* home = std::getenv("HOME"); home && *home) return (fs::path(home) / ".cache" / "moejit").string();
  return "";
}

std::string DiskCache::path_for(const Key128& key) const { return (fs::path(dir_) / (key.hex() + kEntrySuffix)).string(); }

std::optional<CacheEntry> DiskCache::load(const Key128& key) const {
  if (!enabled()) return std::nullopt;
  std::string path = path_for(key), bytes;
  if (!read_file(path, bytes)) return std::nullopt;
  std::string why;
  auto entry = decode_cache_entry(bytes, key, &why);
  if (!entry) log_warning_once("corrupt:" + path, fmt::format("cache entry {} is unusable ({}); rebuilding it", path, why));
  return entry;
}

void DiskCache::store(const CacheEntry& entry) const {
  if (!enabled()) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  // Unique temporary name in the same folder (rename is atomic only within a filesystem).
  static std::atomic<unsigned> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string final_path = path_for(entry.key);
  std::string tmp = fmt::format("{}.tmp.{}.{}.{:x}", final_path, getpid(), counter++, rng());
  std::string bytes = encode_cache_entry(entry);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (std::size_t done = 0; ok && done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) ok = false;
    else done += static_cast<std::size_t>(n);
  }
  if (fd >= 0 && ::close(fd) != 0) ok = false;
  if (ok && ::rename(tmp.c_str(), final_path.c_str()) != 0) ok = false;
  if (!ok) {
    int err = errno;
    ::unlink(tmp.c_str());
    log_warning_once("store:" + dir_, fmt::format("cannot write the kernel cache in {} ({}); kernels are kept in memory only",
                                                  dir_, std::strerror(err)));
  }
}

std::vector<DiskCache::Listing> DiskCache::list() const {
  std::vector<Listing> out;
  std::error_code ec;
  if (!enabled() || !fs::is_directory(dir_, ec)) return out;
  for (auto& file : fs::directory_iterator(dir_, ec)) {
    auto name = file.path().filename().string();
    if (!name.ends_with(kEntrySuffix)) continue;
    Listing item;
    item.path = file.path().string();
    item.bytes = file.file_size(ec);
    std::string bytes, why;
    Key128 key;
    auto hex = name.substr(0, name.size() - std::strlen(kEntrySuffix));
    bool hex_ok = hex.size() == 32;
    if (hex_ok) {
      key.hi = std::strtoull(hex.substr(0, 16).c_str(), nullptr, 16);
      key.lo = std::strtoull(hex.substr(16).c_str(), nullptr, 16);
      hex_ok = key.hex() == hex;
    }
    if (!hex_ok) item.problem = "file name is not a cache key";
    else if (!read_file(item.path, bytes)) item.problem = "unreadable";
    else if (auto e = decode_cache_entry(bytes, key, &why)) {
      item.valid = true;
      item.spec_text = e->spec_text;
    } else item.problem = why;
    out.push_back(std::move(item));
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.path < b.path; });
  return out;
}

std::size_t DiskCache::clear() const {
  std::size_t removed = 0;
  std::error_code ec;
  if (!enabled() || !fs::is_directory(dir_, ec)) return 0;
  for (auto& file : fs::directory_iterator(dir_, ec)) {
    auto name = file.path().filename().string();
    if (name.find(kEntrySuffix) != std::string::npos && fs::remove(file.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace moejit
