#include "cache/disk_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <thread>

#include "util/hash.hpp"
#include "util/log.hpp"

namespace moejit {
namespace fs = std::filesystem;

namespace {

constexpr const char* kEntrySuffix = ".cubin.mjk";
constexpr const char* kTempMarker = ".cubin.mjk.tmp.";
// A live writer holds its temporary file for the milliseconds between open and rename; one
// ten minutes old belongs to a writer that died (SIGKILL, power loss) and is never renamed.
constexpr std::time_t kStaleTempSeconds = 10 * 60;
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

// Reads the whole file into memory before anything decodes it. Entries are never modified in
// place (only replaced by rename or removed by unlink), and an open descriptor keeps the bytes
// of an unlinked or replaced file, so `out` is always one whole version of the file. A read
// error is a miss, never a partial entry.
bool read_file(const std::string& path, std::string& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  out.clear();
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  bool ok = true;
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) out.append(buf, static_cast<std::size_t>(n));
    else if (n == 0) break;
    else if (errno != EINTR) {
      ok = false;
      break;
    }
  }
  ::close(fd);
  return ok;
}

bool is_entry_name(const std::string& name) { return name.ends_with(kEntrySuffix); }
bool is_temp_name(const std::string& name) { return name.find(kTempMarker) != std::string::npos; }

bool is_stale_temp(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && std::time(nullptr) - st.st_mtime > kStaleTempSeconds;
}

// "1048576", "512K", "64M", "2G" -> bytes; nullopt if malformed.
std::optional<std::uint64_t> parse_bytes(std::string_view text) {
  std::uint64_t value = 0;
  std::size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (value > (UINT64_MAX - 9) / 10) return std::nullopt;
    value = value * 10 + static_cast<std::uint64_t>(text[i] - '0');
  }
  if (i == 0) return std::nullopt;
  int shift = 0;
  if (i + 1 == text.size()) {
    switch (text[i]) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: return std::nullopt;
    }
  } else if (i != text.size()) {
    return std::nullopt;
  }
  if (shift && value > (UINT64_MAX >> shift)) return std::nullopt;
  return value << shift;
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
  // Must be 0: then the reader accepts exactly the bytes encode_cache_entry writes, nothing else.
  if (auto reserved = get<std::uint32_t>(bytes, 12); reserved != 0)
    return fail(fmt::format("reserved header field is {:#x} (expected 0)", reserved));
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

DiskCache::DiskCache(std::string dir, std::uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {
  if (const char* crash = std::getenv("MOEJIT_TEST_CRASH_BEFORE_RENAME"); crash && *crash && std::strcmp(crash, "0"))
    crash_hook_ = std::strcmp(crash, "half") ? CrashHook::after_write : CrashHook::half_written;
}

std::uint64_t DiskCache::default_max_bytes() {
  const char* text = std::getenv("MOEJIT_CACHE_MAX_BYTES");
  if (!text || !*text) return 0;
  if (auto bytes = parse_bytes(text)) return *bytes;
  log_warning_once(std::string("max_bytes:") + text,
                   fmt::format("MOEJIT_CACHE_MAX_BYTES='{}' is not a size (expected bytes, or a number with K, M or G); "
                               "the cache is unbounded",
                               text));
  return 0;
}

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
  // A hit makes the entry the most recently used one for eviction. Failure (read-only folder,
  // another user's file, the entry evicted meanwhile) only costs LRU accuracy.
  else ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
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
  int err = ok ? 0 : errno;
  std::size_t length = crash_hook_ == CrashHook::half_written ? bytes.size() / 2 : bytes.size();
  for (std::size_t done = 0; ok && done < length;) {
    ssize_t n = ::write(fd, bytes.data() + done, length - done);
    if (n > 0) done += static_cast<std::size_t>(n);
    else if (n < 0 && errno == EINTR) continue;
    else {
      err = n < 0 ? errno : ENOSPC;
      ok = false;
    }
  }
  if (fd >= 0 && ::close(fd) != 0 && ok) {
    err = errno;
    ok = false;
  }
  if (ok && crash_hook_ != CrashHook::none) ::raise(SIGKILL);
  if (ok && ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    err = errno;
    ok = false;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    log_warning_once("store:" + dir_, fmt::format("cannot write the kernel cache in {} ({}); kernels are kept in memory only",
                                                  dir_, std::strerror(err)));
    return;
  }
  if (max_bytes_) evict_to_bound(final_path);
}

// Least recently used first (mtime: set by the write, refreshed by every hit; atime is not
// used because noatime/relatime mounts do not keep it). Never the entry just written, never a
// temporary file a live writer may still rename. Removal is unlink: a reader that has the file
// open keeps reading the whole entry (see cache/README.md).
void DiskCache::evict_to_bound(const std::string& keep) const {
  struct Item {
    std::string path;
    std::uint64_t bytes;
    struct timespec mtime;
  };
  std::vector<Item> items;
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string(), path = it->path().string();
    if (is_temp_name(name)) {
      if (is_stale_temp(path)) ::unlink(path.c_str());
      continue;
    }
    struct stat st {};
    if (!is_entry_name(name) || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    items.push_back({path, static_cast<std::uint64_t>(st.st_size), st.st_mtim});
    total += static_cast<std::uint64_t>(st.st_size);
  }
  if (total <= max_bytes_) return;
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec < b.mtime.tv_sec;
    if (a.mtime.tv_nsec != b.mtime.tv_nsec) return a.mtime.tv_nsec < b.mtime.tv_nsec;
    return a.path < b.path;
  });
  for (const Item& item : items) {
    if (total <= max_bytes_) break;
    if (item.path == keep) continue;
    // ENOENT: another process evicted it first; either way its bytes are gone.
    if (::unlink(item.path.c_str()) == 0 || errno == ENOENT) {
      total -= item.bytes;
      log_debug(fmt::format("cache: evicted {} ({} bytes) to stay within MOEJIT_CACHE_MAX_BYTES={}", item.path, item.bytes,
                            max_bytes_));
    }
  }
}

std::vector<DiskCache::Listing> DiskCache::list() const {
  std::vector<Listing> out;
  std::error_code ec;
  if (!enabled() || !fs::is_directory(dir_, ec)) return out;
  for (auto& file : fs::directory_iterator(dir_, ec)) {
    auto name = file.path().filename().string();
    if (!is_entry_name(name)) continue;
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
    auto name = file.path().filename().string(), path = file.path().string();
    bool remove = is_entry_name(name) || (is_temp_name(name) && is_stale_temp(path));
    if (remove && ::unlink(path.c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace moejit
