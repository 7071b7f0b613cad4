// Disk and memory cache: hits, misses, key completeness, corruption, concurrency.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstring>
#include <thread>

#include "cache/kernel_cache.hpp"
#include "moejit/moejit.hpp"
#include "test_support.hpp"
#include "util/hash.hpp"

using namespace moejit;
using namespace moejit::test;

namespace {
const KernelSpec kSpec = KernelSpec::parse("family=portable,arch=sm_80,tile=64x64x32,stages=2,warps=2x2");

CacheEntry sample_entry() {
  CacheEntry e;
  e.key = {0x0123456789abcdefull, 0xfedcba9876543210ull};
  e.spec_text = kSpec.to_text();
  e.resources = "ptxas info    : Used 128 registers";
  e.cubin = std::string("\x7f" "ELF", 4) + std::string(1000, '\x5a');
  return e;
}
}  // namespace

TEST_CASE("cache entry encodes and decodes", "[cache]") {
  CacheEntry e = sample_entry();
  std::string bytes = encode_cache_entry(e);
  std::string why;
  auto back = decode_cache_entry(bytes, e.key, &why);
  REQUIRE(back);
  CHECK(back->spec_text == e.spec_text);
  CHECK(back->resources == e.resources);
  CHECK(back->cubin == e.cubin);
}

TEST_CASE("every corruption of an entry is detected", "[cache][corruption]") {
  CacheEntry e = sample_entry();
  const std::string good = encode_cache_entry(e);
  std::string why;
  SECTION("truncated at every length") {
    for (std::size_t n = 0; n < good.size(); n += 7) CHECK_FALSE(decode_cache_entry(good.substr(0, n), e.key, &why));
  }
  SECTION("any single flipped bit") {
    for (std::size_t i = 0; i < good.size(); i += 3) {
      std::string bad = good;
      bad[i] ^= static_cast<char>(1 << (i % 8));
      CHECK_FALSE(decode_cache_entry(bad, e.key, &why));
    }
  }
  SECTION("wrong magic") {
    std::string bad = good;
    bad[0] = 'X';
    CHECK_FALSE(decode_cache_entry(bad, e.key, &why));
    CHECK(why.find("magic") != std::string::npos);
  }
  SECTION("another format version") {
    std::string bad = good;
    bad[8] = 99;
    CHECK_FALSE(decode_cache_entry(bad, e.key, &why));
    CHECK(why.find("version") != std::string::npos);
  }
  SECTION("another key's entry") {
    CHECK_FALSE(decode_cache_entry(good, Key128{1, 2}, &why));
    CHECK(why.find("key") != std::string::npos);
  }
  SECTION("reserved field set, checksum recomputed") {
    // Found with tests/fuzz/fuzz_cache_entry: a reader accepted a file encode never writes.
    std::string bad = good;
    bad[12] = 1;
    std::uint64_t sum = xxh3_64(std::string_view(bad.data(), bad.size() - 8));
    std::memcpy(bad.data() + bad.size() - 8, &sum, 8);
    CHECK_FALSE(decode_cache_entry(bad, e.key, &why));
    CHECK(why.find("reserved") != std::string::npos);
  }
  SECTION("all zeros and extra bytes") {
    CHECK_FALSE(decode_cache_entry(std::string(good.size(), '\0'), e.key, &why));
    CHECK_FALSE(decode_cache_entry(good + "x", e.key, &why));
  }
}

TEST_CASE("kernel cache: miss compiles, same process hits memory, new cache hits disk", "[cache]") {
  TempDir dir;
  TemplateStore templates = fast_template_store(dir);
  std::string cache_dir = (dir.path() / "cache").string();
  CacheOutcome outcome;
  {
    KernelCache cache(templates, NvrtcCompiler(), DiskCache(cache_dir));
    auto k = cache.get(kSpec, &outcome);
    CHECK(outcome == CacheOutcome::compiled);
    CHECK(k->cubin.substr(1, 3) == "ELF");
    CHECK(fs::exists(cache.disk().path_for(k->cache_key)));
    cache.get(kSpec, &outcome);
    CHECK(outcome == CacheOutcome::memory_hit);
  }
  KernelCache fresh(templates, NvrtcCompiler(), DiskCache(cache_dir));
  auto k = fresh.get(kSpec, &outcome);
  CHECK(outcome == CacheOutcome::disk_hit);
  CHECK(k->spec == kSpec);
}

TEST_CASE("corrupt files on disk are rebuilt, never loaded", "[cache][corruption]") {
  TempDir dir;
  TemplateStore templates = fast_template_store(dir);
  std::string cache_dir = (dir.path() / "cache").string();
  std::string path, good_cubin;
  {
    KernelCache cache(templates, NvrtcCompiler(), DiskCache(cache_dir));
    auto k = cache.get(kSpec);
    path = cache.disk().path_for(k->cache_key);
    good_cubin = k->cubin;
  }
  const std::string good = read_bytes(path);
  std::vector<std::pair<const char*, std::string>> damages = {
      {"truncated", good.substr(0, good.size() / 2)},
      {"empty", ""},
      {"flipped byte in cubin", [&] { auto b = good; b[b.size() - 20] ^= 0x40; return b; }()},
      {"wrong magic", [&] { auto b = good; b[1] = 'X'; return b; }()},
      {"wrong version", [&] { auto b = good; b[8] = 2; return b; }()},
      {"zeros", std::string(good.size(), '\0')},
  };
  for (auto& [what, bytes] : damages) {
    INFO(what);
    write_bytes(path, bytes);
    KernelCache cache(templates, NvrtcCompiler(), DiskCache(cache_dir));
    CacheOutcome outcome;
    auto k = cache.get(kSpec, &outcome);
    CHECK(outcome == CacheOutcome::compiled);
    bool same_cubin = k->cubin == good_cubin, rewritten_whole = read_bytes(path) == good;
    CHECK(same_cubin);
    CHECK(rewritten_whole);
  }
  SECTION("another key's entry under this key's name") {
    KernelCache cache(templates, NvrtcCompiler(), DiskCache(cache_dir));
    KernelSpec other = kSpec;
    other.stages = 3;
    auto k2 = cache.get(other);
    fs::copy_file(cache.disk().path_for(k2->cache_key), path, fs::copy_options::overwrite_existing);
    KernelCache again(templates, NvrtcCompiler(), DiskCache(cache_dir));
    CacheOutcome outcome;
    auto k = again.get(kSpec, &outcome);
    CHECK(outcome == CacheOutcome::compiled);
    CHECK(k->spec == kSpec);
  }
}

TEST_CASE("cache key covers every input", "[cache][key]") {
  TempDir dir;
  TemplateStore templates = fast_template_store(dir);
  KernelCache cache(templates, NvrtcCompiler(), DiskCache(""));
  CacheKeyInputs base = cache.key_inputs(kSpec, "source");
  Key128 k0 = base.key();
  auto changed = [&](auto mutate) {
    CacheKeyInputs in = base;
    mutate(in);
    return !(in.key() == k0);
  };
  CHECK(changed([](auto& in) { in.moejit_version += "+1"; }));
  CHECK(changed([](auto& in) { in.templates_digest.lo ^= 1; }));
  CHECK(changed([](auto& in) { in.source += " "; }));
  CHECK(changed([](auto& in) { in.nvrtc_version = "99.9"; }));
  CHECK(changed([](auto& in) { in.options += "-lineinfo\n"; }));
  CHECK(changed([](auto& in) { in.arch = "sm_90a"; }));
  // Field boundaries matter: moving bytes between fields changes the key.
  CHECK(changed([](auto& in) { in.source = "sourc"; in.nvrtc_version = "e" + in.nvrtc_version; }));
  // And each real input reaches the key: options differ with -lineinfo, templates with content.
  KernelCache lineinfo(templates, NvrtcCompiler({true}), DiskCache(""));
  CHECK_FALSE(lineinfo.key_inputs(kSpec, "source").key() == k0);
  CHECK_FALSE(cache.key_inputs(KernelSpec::parse("arch=sm_90a"), "source").key() == k0);
  write_bytes(dir.path() / "tpl/moejit/params.cuh", read_bytes(dir.path() / "tpl/moejit/params.cuh") + "\n// changed\n");
  TemplateStore edited = TemplateStore::from_directory((dir.path() / "tpl").string());
  CHECK_FALSE(edited.digest() == templates.digest());
}

TEST_CASE("two threads asking for one kernel compile it once", "[cache][threads]") {
  TempDir dir;
  TemplateStore templates = fast_template_store(dir);
  KernelCache cache(templates, NvrtcCompiler(), DiskCache((dir.path() / "cache").string()));
  std::vector<CacheOutcome> outcomes(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) threads.emplace_back([&, i] { cache.get(kSpec, &outcomes[i]); });
  for (auto& t : threads) t.join();
  CHECK(std::count(outcomes.begin(), outcomes.end(), CacheOutcome::compiled) == 1);
  CHECK(std::count(outcomes.begin(), outcomes.end(), CacheOutcome::memory_hit) == 7);
}

TEST_CASE("unwritable cache folder degrades to memory only", "[cache]") {
  TempDir dir;
  TemplateStore templates = fast_template_store(dir);
  // A path below a regular file can never be created, even by root.
  write_bytes(dir.path() / "not_a_dir", "x");
  KernelCache cache(templates, NvrtcCompiler(), DiskCache((dir.path() / "not_a_dir" / "cache").string()));
  CacheOutcome outcome;
  REQUIRE_NOTHROW(cache.get(kSpec, &outcome));
  CHECK(outcome == CacheOutcome::compiled);
  KernelCache again(templates, NvrtcCompiler(), DiskCache((dir.path() / "not_a_dir" / "cache").string()));
  REQUIRE_NOTHROW(again.get(kSpec, &outcome));
  CHECK(outcome == CacheOutcome::compiled);
}
