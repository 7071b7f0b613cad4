// The disk cache under faults: damaged files, writers killed before rename, folders that cannot
// be written, many processes and threads at once, and the size bound's eviction.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <atomic>
#include <csignal>
#include <ctime>
#include <optional>
#include <thread>

#include "cache/kernel_cache.hpp"
#include "moejit/moejit.hpp"
#include "test_support.hpp"

using namespace moejit;
using namespace moejit::test;

namespace {

const KernelSpec kSpec = KernelSpec::parse("family=portable,arch=sm_80,tile=64x64x32,stages=2,warps=2x2");

KernelSpec small_spec(int stages, const char* tile = "64x64x32") {
  return KernelSpec::parse(fmt::format("family=portable,arch=sm_80,tile={},stages={},warps=2x2", tile, stages));
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto& f : fs::directory_iterator(dir, ec)) out.push_back(f.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<fs::path> sorted(std::vector<fs::path> paths) {
  std::sort(paths.begin(), paths.end());
  return paths;
}

bool is_temp_file(const fs::path& p) { return p.filename().string().find(".cubin.mjk.tmp.") != std::string::npos; }

void set_mtime_seconds_ago(const fs::path& p, long seconds) {
  struct timespec times[2];
  times[0].tv_sec = times[1].tv_sec = std::time(nullptr) - seconds;
  times[0].tv_nsec = times[1].tv_nsec = 0;
  REQUIRE(::utimensat(AT_FDCWD, p.c_str(), times, 0) == 0);
}

std::time_t mtime_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mtime;
}

std::uint64_t bytes_of_entries(const fs::path& dir) {
  std::uint64_t total = 0;
  for (auto& f : files_in(dir))
    if (f.filename().string().ends_with(".cubin.mjk")) total += fs::file_size(f);
  return total;
}

CacheEntry fake_entry(std::uint64_t id, std::size_t cubin_bytes = 1000) {
  CacheEntry e;
  e.key = {id, ~id};
  e.spec_text = kSpec.to_text();
  e.resources = "ptxas info    : Used 32 registers";
  e.cubin = std::string("\x7f" "ELF", 4) + std::string(cubin_bytes, static_cast<char>('a' + id % 26));
  return e;
}

// The cubin NVRTC makes for a spec, without any disk cache.
std::string reference_cubin(const TemplateStore& templates, const KernelSpec& spec) {
  KernelCache cache(templates, NvrtcCompiler(), DiskCache("", 0));
  return cache.get(spec)->cubin;
}

std::string cli_in(const std::string& cache_dir, const std::string& args, int* code) {
  auto r = run_command(fmt::format("MOEJIT_CACHE_DIR='{}' '{}' {}", cache_dir, MOEJIT_CLI_PATH, args));
  *code = r.code;
  return r.out;
}

}  // namespace

TEST_CASE("every kind of damaged entry on disk is rebuilt, reported once, and replaced whole", "[cache][faults]") {
  TempDir dir;
  TemplateStore templates = fast_template_store(dir);
  std::string cache_dir = (dir.path() / "cache").string();
  KernelSpec other = small_spec(3);
  std::string path, other_path, good_cubin;
  Key128 key;
  {
    KernelCache cache(templates, NvrtcCompiler(), DiskCache(cache_dir, 0));
    auto k = cache.get(kSpec);
    key = k->cache_key;
    path = cache.disk().path_for(key);
    good_cubin = k->cubin;
    other_path = cache.disk().path_for(cache.get(other)->cache_key);
  }
  const std::string good = read_bytes(path);
  const std::size_t spec_at = 56, checksum_at = good.size() - 8, cubin_at = spec_at + kSpec.to_text().size() + 40;
  auto flipped = [&](std::size_t at) {
    std::string b = good;
    b[at] ^= 0x10;
    return b;
  };
  auto with_version = [&](std::uint32_t v) {
    std::string b = good;
    std::memcpy(b.data() + 8, &v, 4);
    return b;
  };
  CacheEntry wrong_spec{key, other.to_text(), "r", good_cubin};  // valid file, this key, another spec
  std::vector<std::pair<std::string, std::string>> damages = {
      {"empty", ""},
      {"header only", good.substr(0, 56)},
      {"truncated by one byte", good.substr(0, good.size() - 1)},
      {"truncated to half", good.substr(0, good.size() / 2)},
      {"one byte appended", good + "x"},
      {"zeros", std::string(good.size(), '\0')},
      {"bit flip in magic", flipped(2)},
      {"bit flip in key", flipped(20)},
      {"bit flip in spec length", flipped(33)},
      {"bit flip in cubin length", flipped(50)},
      {"bit flip in spec text", flipped(spec_at + 5)},
      {"bit flip in cubin", flipped(cubin_at + 100)},
      {"bit flip in checksum", flipped(checksum_at + 3)},
      {"format version 0", with_version(0)},
      {"format version 2", with_version(2)},
      {"another key's entry under this key's name", read_bytes(other_path)},
      {"this key, checksum fine, another spec", encode_cache_entry(wrong_spec)},
  };
  for (auto& [what, bytes] : damages) {
    INFO(what);
    write_bytes(path, bytes);
    std::string err = (dir.path() / "stderr.txt").string();
    // In a child, so that the once-per-process warning is counted afresh for each damage.
    int status = run_in_child(
        [&] {
          DiskCache disk(cache_dir, 0);
          disk.load(key);  // the same damaged file read twice in one process: one warning
          if (disk.load(key) && what != "this key, checksum fine, another spec") return 1;
          KernelCache cache(templates, NvrtcCompiler(), DiskCache(cache_dir, 0));
          CacheOutcome outcome;
          auto k = cache.get(kSpec, &outcome);
          if (outcome != CacheOutcome::compiled) return 2;
          if (k->cubin != good_cubin) return 3;
          return 0;
        },
        err);
    CHECK(exited_with(status, 0));
    CHECK(count_occurrences(read_bytes(err), "moejit: warning:") == 1);
    CHECK(read_bytes(path) == good);
    CHECK(files_in(cache_dir).size() == 2);  // no temporary file left behind
  }
}

TEST_CASE("a writer killed between write and rename leaves a temporary file that nothing reads", "[cache][faults]") {
  TempDir dir;
  TemplateStore templates = fast_template_store(dir);
  const std::string good_cubin = reference_cubin(templates, kSpec);
  for (const char* hook : {"1", "half"}) {
    INFO("MOEJIT_TEST_CRASH_BEFORE_RENAME=" << hook);
    fs::path cache_dir = dir.path() / fmt::format("cache_{}", hook);
    int status = run_in_child([&] {
      setenv("MOEJIT_TEST_CRASH_BEFORE_RENAME", hook, 1);
      KernelCache cache(templates, NvrtcCompiler(), DiskCache(cache_dir.string(), 0));
      cache.get(kSpec);
      return 0;  // not reached: store() kills the process
    });
    REQUIRE(status >= 0);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    auto files = files_in(cache_dir);
    REQUIRE(files.size() == 1);
    fs::path temp = files[0];
    CHECK(is_temp_file(temp));
    std::string partial = read_bytes(temp);
    CHECK_FALSE(partial.empty());

    DiskCache disk(cache_dir.string(), 0);
    CHECK(disk.list().empty());  // a temporary file is not an entry
    int code = 0;
    std::string ls = cli_in(cache_dir.string(), "cache verify", &code);
    CHECK(code == 0);
    CHECK(ls.find("0 entries, 0 bad") != std::string::npos);

    // A reader afterwards: a clean miss (no warning), a rebuild, a whole entry.
    std::string err = (dir.path() / "stderr.txt").string();
    status = run_in_child(
        [&] {
          KernelCache cache(templates, NvrtcCompiler(), DiskCache(cache_dir.string(), 0));
          CacheOutcome outcome;
          auto k = cache.get(kSpec, &outcome);
          return outcome == CacheOutcome::compiled && k->cubin == good_cubin ? 0 : 1;
        },
        err);
    CHECK(exited_with(status, 0));
    CHECK(read_bytes(err).empty());
    auto listing = disk.list();
    REQUIRE(listing.size() == 1);
    CHECK(listing[0].valid);
    KernelCache again(templates, NvrtcCompiler(), DiskCache(cache_dir.string(), 0));
    CacheOutcome outcome;
    CHECK(again.get(kSpec, &outcome)->cubin == good_cubin);
    CHECK(outcome == CacheOutcome::disk_hit);

    // clear(): the entry goes; a young temporary file may be a live writer's and stays; one
    // older than ten minutes is a dead writer's and goes.
    CHECK(disk.clear() == 1);
    CHECK(files_in(cache_dir) == std::vector<fs::path>{temp});
    set_mtime_seconds_ago(temp, 11 * 60);
    CHECK(disk.clear() == 1);
    CHECK(files_in(cache_dir).empty());
  }
}

TEST_CASE("a cache folder that cannot be written degrades to memory only with one warning", "[cache][faults]") {
  TempDir dir;
  TemplateStore templates = fast_template_store(dir);
  std::string cache_dir = (dir.path() / "cache").string();
  std::string err = (dir.path() / "stderr.txt").string();
  const char* kWarning = "cannot write the kernel cache";

  SECTION("read-only folder: existing entries are still read") {
    {
      KernelCache cache(templates, NvrtcCompiler(), DiskCache(cache_dir, 0));
      cache.get(kSpec);
    }
    fs::permissions(cache_dir, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                   fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
    // Root ignores permissions: the check then runs in a child that drops to nobody (65534).
    const bool root = geteuid() == 0;
    int status = run_in_child(
        [&] {
          if (root && (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) return 77;
          if (::access(cache_dir.c_str(), W_OK) == 0) return 76;
          KernelCache cache(templates, NvrtcCompiler(), DiskCache(cache_dir, 0));
          CacheOutcome a, b, c;
          cache.get(kSpec, &a);
          cache.get(small_spec(3), &b);
          cache.get(small_spec(4), &c);
          if (a != CacheOutcome::disk_hit) return 1;
          if (b != CacheOutcome::compiled || c != CacheOutcome::compiled) return 2;
          return 0;
        },
        err);
    if (exited_with(status, 77) || exited_with(status, 76)) {
      WARN("SKIPPED read-only cache check: running as root and could not drop to uid 65534 (root ignores permissions)");
      return;
    }
    if (root) WARN("read-only cache check ran as uid 65534 in a child (this test process runs as root)");
    CHECK(exited_with(status, 0));
    CHECK(count_occurrences(read_bytes(err), kWarning) == 1);
    CHECK(count_occurrences(read_bytes(err), "moejit: warning:") == 1);
    CHECK(files_in(cache_dir).size() == 1);
  }

  SECTION("full disk (writes fail part way, as with ENOSPC): no partial file is left") {
    // RLIMIT_FSIZE makes write() fail with EFBIG after `limit` bytes, the way a full disk
    // fails with ENOSPC; it needs no privileges and no special filesystem.
    const rlim_t limit = 1024;
    std::string entry = encode_cache_entry({Key128{}, kSpec.to_text(), "", reference_cubin(templates, kSpec)});
    REQUIRE(entry.size() > limit);
    int status = run_in_child(
        [&] {
          std::signal(SIGXFSZ, SIG_IGN);
          struct rlimit lim {limit, limit};
          if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return 77;
          KernelCache cache(templates, NvrtcCompiler(), DiskCache(cache_dir, 0));
          CacheOutcome a, b;
          cache.get(kSpec, &a);
          cache.get(small_spec(3), &b);
          cache.get(kSpec);
          return a == CacheOutcome::compiled && b == CacheOutcome::compiled ? 0 : 1;
        },
        err);
    CHECK(exited_with(status, 0));
    CHECK(count_occurrences(read_bytes(err), kWarning) == 1);
    CHECK(read_bytes(err).find("too large") != std::string::npos);  // strerror(EFBIG)
    CHECK(files_in(cache_dir).empty());
  }
}

TEST_CASE("8 processes x 4 threads on overlapping keys in one folder", "[cache][faults][stress]") {
  TempDir dir;
  TemplateStore templates = fast_template_store(dir);
  std::vector<KernelSpec> specs;
  for (int stages : {2, 3, 4})
    for (const char* tile : {"64x64x32", "64x128x32"}) specs.push_back(small_spec(stages, tile));
  std::vector<std::string> reference;
  for (auto& s : specs) reference.push_back(reference_cubin(templates, s));
  const std::uint64_t entry_bytes = encode_cache_entry({Key128{}, specs[0].to_text(), "", reference[0]}).size();
  constexpr int kProcesses = 8, kThreads = 4;

  // bound 0: every entry stays; bound of three entries: stores evict while others read.
  for (std::uint64_t bound : {std::uint64_t{0}, 4 * entry_bytes}) {
    INFO("MOEJIT_CACHE_MAX_BYTES=" << bound);
    fs::path cache_dir = dir.path() / fmt::format("cache_{}", bound);
    int start[2];
    REQUIRE(pipe(start) == 0);
    std::vector<pid_t> children;
    for (int p = 0; p < kProcesses; ++p)
      children.push_back(spawn_child(
          [&, p] {
            ::close(start[1]);
            char c;
            while (::read(start[0], &c, 1) < 0 && errno == EINTR) {
            }  // EOF: every process starts together
            std::atomic<int> bad{0};
            std::vector<std::thread> threads;
            // Pass 0: the process's threads share one cache, as a server's threads do (so one
            // compile per key and process: eight writers race per key). Pass 1: one fresh cache
            // per thread, so every get reads the disk while other processes may write or evict.
            KernelCache shared(templates, NvrtcCompiler(), DiskCache(cache_dir.string(), bound));
            for (int t = 0; t < kThreads; ++t)
              threads.emplace_back([&, t] {
                for (int pass = 0; pass < 2; ++pass) {
                  std::optional<KernelCache> own;
                  if (pass == 1) own.emplace(templates, NvrtcCompiler(), DiskCache(cache_dir.string(), bound));
                  KernelCache& cache = pass == 0 ? shared : *own;
                  // Bounded, a cycle over all keys misses every time (LRU): two keys are
                  // enough to have stores evict while other processes read.
                  std::size_t gets = pass == 1 && bound ? 2 : specs.size();
                  for (std::size_t i = 0; i < gets; ++i) {
                    std::size_t s = (p * kThreads + t + i) % specs.size();
                    try {
                      CacheOutcome outcome;
                      auto k = cache.get(specs[s], &outcome);
                      if (!(k->spec == specs[s]) || k->cubin != reference[s]) ++bad;
                      // Unbounded, pass 1 must find what pass 0 wrote or read.
                      if (pass == 1 && bound == 0 && outcome != CacheOutcome::disk_hit) ++bad;
                    } catch (...) {
                      ++bad;
                    }
                  }
                }
              });
            for (auto& t : threads) t.join();
            return bad.load() == 0 ? 0 : 1;
          },
          (dir.path() / fmt::format("stderr_{}_{}.txt", bound, p)).string()));
    ::close(start[0]);
    ::close(start[1]);
    for (int p = 0; p < kProcesses; ++p) {
      INFO("process " << p << ": " << read_bytes(dir.path() / fmt::format("stderr_{}_{}.txt", bound, p)));
      CHECK(exited_with(wait_child(children[p]), 0));
      CHECK(read_bytes(dir.path() / fmt::format("stderr_{}_{}.txt", bound, p)).empty());  // no bad file seen, no failed store
    }

    auto files = files_in(cache_dir);
    CHECK(std::none_of(files.begin(), files.end(), is_temp_file));
    DiskCache disk(cache_dir.string(), 0);
    auto listing = disk.list();
    CHECK(listing.size() == files.size());
    for (auto& item : listing) {
      INFO(item.path << ": " << item.problem);
      CHECK(item.valid);
    }
    int code = 0;
    std::string verify = cli_in(cache_dir.string(), "cache verify", &code);
    CHECK(code == 0);
    CHECK(verify.find(fmt::format("{} entries, 0 bad", listing.size())) != std::string::npos);
    KernelCache fresh(templates, NvrtcCompiler(), DiskCache(cache_dir.string(), 0));
    if (bound == 0) {
      CHECK(listing.size() == specs.size());
      for (std::size_t s = 0; s < specs.size(); ++s) {
        CacheOutcome outcome;
        CHECK(fresh.get(specs[s], &outcome)->cubin == reference[s]);
        CHECK(outcome == CacheOutcome::disk_hit);
      }
    } else {
      // Every entry left loads (a disk hit, not a rebuild) and holds the right cubin.
      std::size_t hits = 0;
      for (std::size_t s = 0; s < specs.size(); ++s) {
        CacheOutcome outcome;
        CHECK(fresh.get(specs[s], &outcome)->cubin == reference[s]);
        hits += outcome == CacheOutcome::disk_hit;
      }
      CHECK(hits == listing.size());
      // Quiet again, one bounded store brings the folder back within the bound.
      DiskCache(cache_dir.string(), bound).store(fake_entry(99));
      CHECK(bytes_of_entries(cache_dir) <= bound);
    }
  }
}

TEST_CASE("size bound: least recently used entries go first, never the one just written", "[cache][evict]") {
  TempDir dir;
  fs::path cache_dir = dir.path() / "cache";
  const std::uint64_t entry = encode_cache_entry(fake_entry(1)).size();
  DiskCache disk(cache_dir.string(), 3 * entry);
  auto path = [&](int id) { return fs::path(disk.path_for(fake_entry(id).key)); };
  for (int id : {1, 2, 3}) {
    disk.store(fake_entry(id));
    set_mtime_seconds_ago(path(id), 400 - 100 * id);  // 1 oldest, 3 newest
  }
  CHECK(files_in(cache_dir).size() == 3);  // exactly at the bound: nothing evicted
  REQUIRE(disk.load(fake_entry(1).key));   // a hit makes 1 the most recently used
  CHECK(mtime_of(path(1)) >= std::time(nullptr) - 5);

  disk.store(fake_entry(4));
  CHECK(files_in(cache_dir) == sorted({path(1), path(3), path(4)}));  // 2 was least recently used
  CHECK(bytes_of_entries(cache_dir) <= 3 * entry);

  // Temporary files: a dead writer's (old) goes with the eviction scan, a live writer's stays
  // and is not counted as an entry.
  fs::path dead = cache_dir / "0123.cubin.mjk.tmp.1.2.ab", live = cache_dir / "0123.cubin.mjk.tmp.1.3.cd";
  write_bytes(dead, std::string(entry, 'x'));
  write_bytes(live, std::string(entry, 'x'));
  set_mtime_seconds_ago(dead, 3600);
  set_mtime_seconds_ago(path(1), 200);  // now the least recently used
  disk.store(fake_entry(5));
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));
  CHECK(files_in(cache_dir) == sorted({live, path(3), path(4), path(5)}));

  // A bound smaller than one entry: everything else goes, the entry just written stays.
  DiskCache tiny(cache_dir.string(), 1);
  tiny.store(fake_entry(6));
  CHECK(files_in(cache_dir) == sorted({live, path(6)}));
  CHECK(tiny.load(fake_entry(6).key));
}

TEST_CASE("size bound: an evicted kernel is a clean miss and is rebuilt", "[cache][evict]") {
  TempDir dir;
  TemplateStore templates = fast_template_store(dir);
  std::string cache_dir = (dir.path() / "cache").string();
  const std::string good_cubin = reference_cubin(templates, kSpec);
  std::string err = (dir.path() / "stderr.txt").string();
  int status = run_in_child(
      [&] {
        {
          KernelCache bounded(templates, NvrtcCompiler(), DiskCache(cache_dir, 1));
          bounded.get(kSpec);
          bounded.get(small_spec(3));  // its store evicts kSpec's entry
        }
        if (files_in(cache_dir).size() != 1) return 1;
    KernelCache fresh(templates, NvrtcCompiler(), DiskCache(cache_dir, 0));
        CacheOutcome a, b;
        if (fresh.get(kSpec, &a)->cubin != good_cubin || a != CacheOutcome::compiled) return 2;
        fresh.get(small_spec(3), &b);
        return b == CacheOutcome::disk_hit ? 0 : 3;
      },
      err);
  CHECK(exited_with(status, 0));
  CHECK(read_bytes(err).empty());  // a miss, not a damaged file
}

TEST_CASE("size bound: eviction never tears an entry a reader is reading", "[cache][evict]") {
  TempDir dir;
  fs::path cache_dir = dir.path() / "cache";
  DiskCache unbounded(cache_dir.string(), 0);
  CacheEntry big = fake_entry(1, 4 << 20);
  unbounded.store(big);

  SECTION("a reader that opened the file before the unlink reads the whole entry") {
    std::ifstream reader(unbounded.path_for(big.key), std::ios::binary);
    REQUIRE(reader);
    char first[8];
    reader.read(first, sizeof first);  // part way through when the entry is evicted
    DiskCache(cache_dir.string(), 1).store(fake_entry(2));
    CHECK_FALSE(fs::exists(unbounded.path_for(big.key)));
    std::ostringstream rest;
    rest << reader.rdbuf();
    std::string bytes = std::string(first, sizeof first) + rest.str();
    std::string why;
    auto back = decode_cache_entry(bytes, big.key, &why);
    INFO(why);
    REQUIRE(back);
    CHECK(back->cubin == big.cubin);
  }

  SECTION("readers and an evicting writer at once: every load is a miss or the whole entry") {
    std::string err = (dir.path() / "stderr.txt").string();
    int status = run_in_child(
        [&] {
          std::vector<CacheEntry> entries;
          for (int id = 11; id <= 16; ++id) entries.push_back(fake_entry(id, 1 << 20));
          const std::uint64_t entry = encode_cache_entry(entries[0]).size();
          std::atomic<bool> stop{false};
          std::atomic<int> hits{0}, torn{0};
          std::vector<std::thread> readers;
          for (int r = 0; r < 3; ++r)
            readers.emplace_back([&, r] {
              DiskCache disk(cache_dir.string(), 0);
              for (int i = r; !stop; ++i) {
                const CacheEntry& want = entries[i % entries.size()];
                if (auto got = disk.load(want.key)) {
                  ++hits;
                  if (got->cubin != want.cubin) ++torn;
                }
              }
            });
          DiskCache writer(cache_dir.string(), 2 * entry);  // room for two of six
          for (int round = 0; round < 200; ++round) writer.store(entries[round % entries.size()]);
          stop = true;
          for (auto& t : readers) t.join();
          if (torn) return 1;
          return hits > 0 ? 0 : 2;
        },
        err);
    INFO("child exit status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -status));
    CHECK(exited_with(status, 0));
    CHECK(read_bytes(err).empty());  // no reader ever saw a damaged file
  }
}

TEST_CASE("MOEJIT_CACHE_MAX_BYTES is read as a size", "[cache][evict]") {
  TempDir dir;
  std::string err = (dir.path() / "stderr.txt").string();
  int status = run_in_child(
      [] {
        auto bound = [](const char* text) {
          setenv("MOEJIT_CACHE_MAX_BYTES", text, 1);
          return DiskCache::default_max_bytes();
        };
        std::vector<std::pair<const char*, std::uint64_t>> table = {
            {"", 0}, {"0", 0}, {"4096", 4096}, {"64K", 64 << 10}, {"512m", 512ull << 20}, {"2G", 2ull << 30},
            // Not a size: warned about, unbounded.
            {"lots", 0}, {"12X", 0}, {"-5", 0}, {"1.5G", 0}, {"99999999999999999999", 0}, {"99999999999G", 0}};
        for (std::size_t i = 0; i < table.size(); ++i)
          if (bound(table[i].first) != table[i].second) return 1 + static_cast<int>(i);
        unsetenv("MOEJIT_CACHE_MAX_BYTES");
        return DiskCache::default_max_bytes() == 0 && DiskCache("dir").max_bytes() == 0 ? 0 : 50;
      },
      err);
  CHECK(exited_with(status, 0));
  std::string warnings = read_bytes(err);
  CHECK(count_occurrences(warnings, "is not a size") == 6);
  CHECK(warnings.find("MOEJIT_CACHE_MAX_BYTES='1.5G'") != std::string::npos);
}
