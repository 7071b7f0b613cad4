// The moejit command line: inspect, compile, prewarm and manage the kernel cache.
// Exit codes: 0 success, 1 a kernel failed or the cache holds bad entries, 2 bad usage.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <iostream>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "cache/kernel_cache.hpp"
#include "cli/presets.hpp"
#include "driver/driver_api.hpp"
#include "moejit/moejit.hpp"

using namespace moejit;

namespace {

constexpr int kOk = 0, kFailed = 1, kUsage = 2;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* kMainHelp = R"(moejit — runtime-JIT grouped GEMM kernels for Mixture-of-Experts

usage: moejit <command> [options]

commands:
  inspect SPEC      print the generated CUDA source of a kernel (--ptx, --resources)
  choose            print the config the runtime's heuristic picks for a grouped GEMM shape
  compile SPEC...   compile kernels into the cache and report each outcome
  prewarm           compile every kernel a model preset (or a file of specs) will use
  tune              time the candidate configs of a model preset's GEMMs on this GPU and
                    store the fastest per shape bucket for later processes
  cache ls|verify|clear|path
                    list, check, empty or locate the on-disk kernel cache

SPEC is the canonical text form, e.g.
  family=portable,arch=sm_90a,layout=contiguous,a=bf16,b=bf16,c=bf16,tile=128x128x32,stages=4,warps=2x4
(omitted fields take defaults). 'moejit <command> --help' describes each command.

environment: MOEJIT_CACHE_DIR, MOEJIT_CACHE=off, MOEJIT_CACHE_MAX_BYTES, MOEJIT_AUTOTUNE=1, MOEJIT_TEMPLATE_DIR, MOEJIT_PRESET_DIR, CUDA_HOME, MOEJIT_LOG=quiet|debug
)";

const char* kInspectHelp = R"(usage: moejit inspect SPEC [--ptx] [--resources] [--formats]

Prints the translation unit moejit generates for SPEC (its first line holds the
canonical spec). --ptx prints the PTX instead; --resources compiles it and prints the
ptxas report (registers, spills, shared memory) and the cache key; --formats prints the
operand formats the kernel takes (element types, scale arrays and their layouts).
)";
const char* kChooseHelp = R"help(usage: moejit choose --groups E --n N --k K (--rows R | --counts C0,C1,...)
                     [--layout contiguous|masked] [--capacity C] [--dtype bf16|f16|e4m3]
                     [--weights mxfp4|nvfp4] [--c bf16|f16|f32|e4m3] [--fuse FIELDS]
                     [--arch sm_90a] [--sms 132]

Prints the spec Runtime::grouped_gemm's heuristic picks for this grouped GEMM (no GPU needed),
then on stderr what it was picked from. --counts: the E groups' valid rows, as the runtime sees
them with host_groups. --rows: R rows in all, spread as random top-k routing spreads them, as
the runtime assumes where only the device holds the groups (trust_device_groups, with
expected_rows = R). masked takes --capacity (default: the largest group, or R). --fuse takes
spec fields (e.g. "fuse=gather+bias,act=swiglu"). A stored tuning result, where there is one,
takes precedence in the runtime. To read the kernel: moejit inspect "$(moejit choose ...)".
)help";
const char* kCompileHelp = R"(usage: moejit compile SPEC...

Compiles each spec (or loads it from the cache) and prints one line per spec:
outcome, milliseconds, cache key and spec. Exit code 1 if any fails.
)";
const char* kPrewarmHelp = R"(usage: moejit prewarm (--model NAME | --file FILE) [--arch sm_XX] [--sms N] [--jobs N]

Compiles, in parallel, every kernel the runtime will request:
  --model NAME   a preset from cache/presets (NAME.preset) or a path to a .preset file;
                 the runtime's heuristic (Runtime::choose_spec) is run for each layer GEMM,
                 token count, dtype and layout, with the layer's fusions (up_fusion=,
                 down_fusion=) and/or plain; plus the route kernel of routing=, the
                 combine kernel of a scattering down GEMM, and the FP8 activation quantizer
                 where dtypes= has e4m3. Keys: cache/README.md, "Presets".
  --file FILE    one spec per line ('#' starts a comment)
  --arch         target (default sm_90a); --sms: SM count the heuristic assumes (default 132)
  --jobs         compile threads (default: the number of cores)
Prints a progress line and how many kernels were built, hit in the cache or failed.
Exit code 1 if any failed.
)";
const char* kTuneHelp = R"(usage: moejit tune --model NAME [--tokens 16,128,...] [--ms MS] [--jobs N] [--warm-l2]

Needs a GPU. For each of the preset's GEMMs (up and down), token counts, dtypes and layouts:
routes the tokens to experts (random top-k, fixed seed), fills the operands with random
numbers, compiles every candidate config (--jobs threads), times each on this GPU (--ms
milliseconds per candidate, default 20; L2 cleared before each timed launch, as the model's
other layers would leave it, unless --warm-l2) and stores the fastest for the problem's shape bucket
in the cache folder (tuning/, one file per device name, driver, moejit version and kernel
templates). Runtime::grouped_gemm in later processes uses the stored choice for that bucket.
Prints one line per problem: the heuristic's time, the best time and the best config.
)";
const char* kCacheHelp = R"(usage: moejit cache ls|verify|clear|path

  path    print the cache folder (MOEJIT_CACHE_DIR, $XDG_CACHE_HOME/moejit or ~/.cache/moejit)
  ls      list entries: size, validity and spec
  verify  check every entry (header, key, checksum); exit code 1 if any is bad
  clear   delete every entry, and temporary files of writers that died (older than 10 minutes)
)";

bool wants_help(const std::vector<std::string>& args) {
  for (auto& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

std::unique_ptr<Runtime> offline_runtime(const Arch& arch) { return Runtime::offline(arch); }

const char* outcome_text(CacheOutcome o) {
  switch (o) {
    case CacheOutcome::memory_hit: return "memory-hit";
    case CacheOutcome::disk_hit: return "disk-hit";
    case CacheOutcome::compiled: return "compiled";
  }
  return "?";
}

int cmd_inspect(const std::vector<std::string>& args) {
  if (wants_help(args)) return fmt::print("{}", kInspectHelp), kOk;
  std::string spec_text;
  bool ptx = false, resources = false, formats = false;
  for (auto& a : args) {
    if (a == "--ptx") ptx = true;
    else if (a == "--formats") formats = true;
    else if (a == "--resources") resources = true;
    else if (a.starts_with("--")) throw UsageError(fmt::format("inspect: unknown option '{}'", a));
    else if (spec_text.empty()) spec_text = a;
    else throw UsageError("inspect: give one SPEC (quote it if it holds spaces)");
  }
  if (spec_text.empty()) throw UsageError("inspect: missing SPEC");
  KernelSpec spec = KernelSpec::parse(spec_text);
  if (formats) {
    spec.validate();
    fmt::print("spec: {}\n{}", spec.to_text(), operand_formats(spec));
    return kOk;
  }
  const TemplateStore& templates = TemplateStore::current();
  GeneratedSource source = generate_source(spec, templates);
  if (ptx) {
    fmt::print("{}", NvrtcCompiler().ptx(spec, source, templates));
  } else if (resources) {
    auto rt = offline_runtime(spec.arch);
    auto k = rt->compile(spec);
    fmt::print("spec: {}\n{}cache key: {}\ncubin: {} bytes\n{}", spec.to_text(), operand_formats(spec), k->cache_key.hex(),
               k->cubin.size(), k->resources);
  } else {
    fmt::print("{}", source.source);
  }
  return kOk;
}

// One kernel to build: a grouped GEMM or a routing kernel (route, combine).
struct BuildItem {
  std::optional<KernelSpec> gemm;
  std::optional<RoutingSpec> routing;
  Arch arch() const { return gemm ? gemm->arch : routing->arch; }
  std::string text() const { return gemm ? gemm->to_text() : routing->to_text(); }
};

std::vector<BuildItem> gemm_items(const std::vector<KernelSpec>& specs) {
  std::vector<BuildItem> items;
  for (auto& s : specs) items.push_back({s, std::nullopt});
  return items;
}

// Compiles items on `jobs` threads; prints a progress line, then a summary. Returns failures.
int compile_all(const std::vector<BuildItem>& specs, int jobs, bool per_spec_lines, std::size_t unavailable = 0) {
  if (specs.empty()) return fmt::print("nothing to compile\n"), 0;
  std::map<std::string, std::unique_ptr<Runtime>> runtimes;  // one per arch, shared by threads
  for (auto& s : specs)
    if (!runtimes.count(s.arch().to_text())) runtimes[s.arch().to_text()] = offline_runtime(s.arch());
  std::atomic<std::size_t> next{0};
  std::atomic<int> built{0}, hit{0}, failed{0};
  std::mutex print_mutex;
  auto start = std::chrono::steady_clock::now();
  auto worker = [&] {
    for (std::size_t i; (i = next++) < specs.size();) {
      auto t0 = std::chrono::steady_clock::now();
      std::string line;
      try {
        CacheOutcome outcome;
        Runtime& rt = *runtimes.at(specs[i].arch().to_text());
        Key128 key = specs[i].gemm ? rt.compile(*specs[i].gemm, &outcome)->cache_key
                                   : compile_routing(rt, *specs[i].routing, &outcome)->cache_key;
        (outcome == CacheOutcome::compiled ? built : hit)++;
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        line = fmt::format("{:<10} {:8.1f} ms  {}  {}", outcome_text(outcome), ms, key.hex(), specs[i].text());
      } catch (const std::exception& e) {
        failed++;
        line = fmt::format("FAILED  {}\n{}", specs[i].text(), e.what());
      }
      std::lock_guard lock(print_mutex);
      if (per_spec_lines || line.starts_with("FAILED")) fmt::print("\r{}\n", line);
      fmt::print(stderr, "\r[{}/{}] built {} hit {} failed {}", built + hit + failed, specs.size(), built.load(),
                 hit.load(), failed.load());
      std::fflush(stderr);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, std::min<int>(jobs, (int)specs.size())); ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stderr, "\n");
  fmt::print("{} kernels: {} built, {} hit, {} failed in {:.2f} s (cache: {}){}\n", specs.size(), built.load(), hit.load(),
             failed.load(), s, DiskCache(DiskCache::default_dir()).enabled() ? DiskCache::default_dir() : "off",
             unavailable ? fmt::format("; {} not available in this build (listed above)", unavailable) : std::string());
  return failed;
}

int cmd_compile(const std::vector<std::string>& args) {
  if (wants_help(args)) return fmt::print("{}", kCompileHelp), kOk;
  if (args.empty()) throw UsageError("compile: missing SPEC");
  std::vector<KernelSpec> specs;
  for (auto& a : args) {
    if (a.starts_with("--")) throw UsageError(fmt::format("compile: unknown option '{}'", a));
    specs.push_back(KernelSpec::parse(a));
    specs.back().validate();
  }
  return compile_all(gemm_items(specs), (int)std::thread::hardware_concurrency(), true) ? kFailed : kOk;
}

int cmd_prewarm(const std::vector<std::string>& args) {
  if (wants_help(args)) return fmt::print("{}", kPrewarmHelp), kOk;
  std::string model, file;
  Arch arch{9, 0, true};
  int sms = 132, jobs = (int)std::max(1u, std::thread::hardware_concurrency());
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(fmt::format("prewarm: {} needs a value", args[i]));
      return args[++i];
    };
    auto number = [&](const std::string& v) {
      try {
        return std::stoi(v);
      } catch (...) {
        throw UsageError(fmt::format("prewarm: '{}' is not a number", v));
      }
    };
    if (args[i] == "--model" || args[i] == "--preset") model = value();
    else if (args[i] == "--file") file = value();
    else if (args[i] == "--arch") arch = Arch::parse(value());
    else if (args[i] == "--sms") sms = number(value());
    else if (args[i] == "--jobs") jobs = number(value());
    else throw UsageError(fmt::format("prewarm: unknown argument '{}'", args[i]));
  }
  if (model.empty() == file.empty()) throw UsageError("prewarm: give exactly one of --model NAME or --file FILE");
  std::vector<KernelSpec> specs;
  if (!model.empty()) {
    PrewarmPlan plan = preset_plan(load_preset(model), arch, sms);
    std::vector<BuildItem> items;
    for (auto& r : plan.routing) items.push_back({std::nullopt, r});
    for (auto& g : plan.gemms) items.push_back({g, std::nullopt});
    for (auto& line : plan.unavailable) fmt::print("not available in this build: {}\n", line);
    return compile_all(items, jobs, false, plan.unavailable.size()) ? kFailed : kOk;
  } else {
    std::ifstream in(file);
    if (!in) throw UsageError(fmt::format("prewarm: cannot read '{}'", file));
    for (std::string line; std::getline(in, line);) {
      if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      specs.push_back(KernelSpec::parse(line));
      specs.back().validate();
    }
  }
  return compile_all(gemm_items(specs), jobs, false) ? kFailed : kOk;
}

int cmd_choose(const std::vector<std::string>& args) {
  if (wants_help(args)) return fmt::print("{}", kChooseHelp), kOk;
  GroupedGemmArgs x;
  Arch arch{9, 0, true};
  int sms = 132;
  long long rows = -1;
  std::vector<int> counts;
  bool has_counts = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(fmt::format("choose: {} needs a value", args[i]));
      return args[++i];
    };
    auto number = [&](const std::string& v) -> long long {
      std::size_t used = 0;
      long long n = -1;
      try {
        n = std::stoll(v, &used);
      } catch (...) {
      }
      if (used != v.size() || n < 0) throw UsageError(fmt::format("choose: {} '{}' is not a non-negative number", args[i - 1], v));
      return n;
    };
    auto dtype = [&](const std::string& v) { return KernelSpec::parse("a=" + v).a; };  // a SpecError names a bad one
    const std::string& flag = args[i];
    if (flag == "--groups") x.num_groups = (int)number(value());
    else if (flag == "--n") x.n = (int)number(value());
    else if (flag == "--k") x.k = (int)number(value());
    else if (flag == "--rows") rows = number(value());
    else if (flag == "--capacity") x.capacity = (int)number(value());
    else if (flag == "--sms") sms = (int)number(value());
    else if (flag == "--arch") arch = Arch::parse(value());
    else if (flag == "--dtype") x.ab_type = dtype(value());
    else if (flag == "--weights") x.b_type = dtype(value());
    else if (flag == "--c") x.c_type = dtype(value());
    else if (flag == "--fuse") x.fusion = KernelSpec::parse(value()).fusion;
    else if (flag == "--layout") {
      const std::string v = value();
      if (v != "contiguous" && v != "masked") throw UsageError(fmt::format("choose: --layout '{}' (expected contiguous or masked)", v));
      x.layout = v == "masked" ? GroupLayout::masked : GroupLayout::contiguous;
    } else if (flag == "--counts") {
      has_counts = true;
      std::stringstream list(value());
      for (std::string c; std::getline(list, c, ',');) counts.push_back((int)number(c));
    } else {
      throw UsageError(fmt::format("choose: unknown argument '{}'", flag));
    }
  }
  if (x.num_groups < 1 || x.n < 1 || x.k < 1) throw UsageError("choose: --groups, --n and --k are required (positive)");
  if ((rows >= 0) == has_counts) throw UsageError("choose: give exactly one of --rows R or --counts C0,C1,...");
  if (has_counts && (int)counts.size() != x.num_groups)
    throw UsageError(fmt::format("choose: --counts has {} values for --groups {}", counts.size(), x.num_groups));
  if (x.c_type == DType::bf16 && x.ab_type == DType::f16) x.c_type = DType::f16;  // C follows 16-bit A by default
  const long long total = has_counts ? std::accumulate(counts.begin(), counts.end(), 0LL) : rows;
  if (total > INT32_MAX) throw UsageError(fmt::format("choose: {} rows (at most {})", total, INT32_MAX));
  std::vector<int> offsets(1, 0);
  if (x.layout == GroupLayout::masked) {
    if (x.capacity == 0) x.capacity = (int)std::max<long long>(1, has_counts ? *std::max_element(counts.begin(), counts.end()) : rows);
    if ((long long)x.capacity * x.num_groups < total)
      throw UsageError(fmt::format("choose: {} rows do not fit {} groups of capacity {}", total, x.num_groups, x.capacity));
    if (has_counts) x.host_groups = counts;
  } else {
    x.total_rows = (int)total;
    for (int c : counts) offsets.push_back(offsets.back() + c);
    if (has_counts) x.host_groups = offsets;
  }
  if (!has_counts) x.trust_device_groups = true, x.expected_rows = rows;
  RuntimeOptions options;
  options.offline_sm_count = sms;
  const KernelSpec spec = Runtime::offline(arch, options)->choose_spec(x);
  fmt::print("{}\n", spec.to_text());
  std::fflush(stdout);  // the spec first, then the note on stderr
  fmt::print(stderr, "chosen for {} on {} with {} SMs from {}\n", has_counts ? "these group sizes" : fmt::format("{} rows", rows),
             arch.to_text(), sms, has_counts ? "the counts" : "a typical random routing of the rows (expected_rows)");
  return kOk;
}

// Fills device memory with random 16-bit numbers (bf16 and f16 alike: normal values in either
// reading), uploading a 16 MiB host pattern piece by piece. Times on zeros would be too kind.
void fill_random(const DeviceBuffer& buffer, std::mt19937& rng) {
  static std::vector<std::uint16_t> pattern;
  if (pattern.empty()) {
    pattern.resize(8 << 20);
    std::uniform_int_distribution<int> mantissa(0, 127);
    std::bernoulli_distribution sign;
    // Exponent of 2^-1 .. 2^0 in bf16 (0x3F00-0x3F7F); read as f16 it is ~1.9-2.0: finite either way.
    for (auto& v : pattern) v = static_cast<std::uint16_t>((sign(rng) ? 0x8000 : 0) | 0x3F00 | mantissa(rng));
  }
  const std::size_t piece = pattern.size() * 2;
  for (std::size_t done = 0; done < buffer.bytes(); done += piece)
    MOEJIT_CU(driver().cuMemcpyHtoD(buffer.ptr() + done, pattern.data(), std::min(piece, buffer.bytes() - done)));
}

// Rows per expert for `tokens` tokens each sent to `topk` distinct experts, uniformly at random.
std::vector<int> route(int tokens, int experts, int topk, std::mt19937& rng) {
  std::vector<int> counts(experts, 0), order(experts);
  for (int t = 0; t < tokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    for (int j = 0; j < topk; ++j) {
      std::uniform_int_distribution<int> pick(j, experts - 1);
      std::swap(order[j], order[pick(rng)]);
      counts[order[j]]++;
    }
  }
  return counts;
}

int masked_capacity(int fullest) { return std::max(64, (fullest + 63) / 64 * 64); }

int cmd_tune(const std::vector<std::string>& args) {
  if (wants_help(args)) return fmt::print("{}", kTuneHelp), kOk;
  std::string model;
  std::vector<int> tokens;
  TuneOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(fmt::format("tune: {} needs a value", args[i]));
      return args[++i];
    };
    auto number = [&](const std::string& v, const char* what) {
      try {
        std::size_t used = 0;
        double x = std::stod(v, &used);
        if (used != v.size() || !(x > 0)) throw std::invalid_argument(v);
        return x;
      } catch (const std::exception&) {
        throw UsageError(fmt::format("tune: {} '{}' is not a positive number", what, v));
      }
    };
    if (args[i] == "--model" || args[i] == "--preset") model = value();
    else if (args[i] == "--ms") options.ms_per_candidate = number(value(), "--ms");
    else if (args[i] == "--warm-l2") options.clear_l2 = false;
    else if (args[i] == "--jobs") options.compile_threads = (int)number(value(), "--jobs");
    else if (args[i] == "--tokens") {
      std::stringstream list(value());
      for (std::string t; std::getline(list, t, ',');) tokens.push_back((int)number(t, "--tokens"));
    } else throw UsageError(fmt::format("tune: unknown argument '{}'", args[i]));
  }
  if (model.empty()) throw UsageError("tune: missing --model NAME");
  ModelPreset preset = load_preset(model);
  if (tokens.empty()) tokens = preset.tokens;
  if (!driver_has_device())
    throw DriverError("tune: no CUDA driver or GPU on this machine; tuning times kernels on the GPU it is for",
                      CUDA_ERROR_NO_DEVICE);
  Runtime rt;
  fmt::print("device {} ({}, {} SMs); results go to {}\n", rt.device_name(), rt.arch().to_text(), rt.sm_count(),
             rt.tuning_file().empty() ? "(nowhere: the disk cache is off)" : rt.tuning_file());
  fmt::print("{:<5} {:>6} {:<10} {:<5} {:>10} {:>10} {:>6}  {}\n", "gemm", "tokens", "layout", "dtype", "heur ms", "best ms",
             "ratio", "best config");
  std::mt19937 rng(2026);
  // One routing per token count, shared by both GEMMs, dtypes and layouts; operands are sized for
  // the largest problem (masked: capacity = the fullest expert's rows rounded up to 64).
  std::vector<std::vector<int>> routings;
  std::size_t max_rows = 0;
  for (int t : tokens) {
    routings.push_back(route(t, preset.experts, preset.topk, rng));
    int fullest = *std::max_element(routings.back().begin(), routings.back().end());
    max_rows = std::max({max_rows, (std::size_t)t * preset.topk, (std::size_t)masked_capacity(fullest) * preset.experts});
  }
  for (auto [gemm, n, k] : {std::tuple{"up", preset.up_n, preset.hidden}, std::tuple{"down", preset.hidden, preset.intermediate}}) {
    DeviceBuffer a(max_rows * k * 2), b((std::size_t)preset.experts * n * k * 2), c(max_rows * n * 4),
        groups((preset.experts + 1) * sizeof(int));
    fill_random(a, rng);
    fill_random(b, rng);
    for (DType dtype : preset.dtypes) {
      if (dtype != DType::bf16 && dtype != DType::f16) {
        // The tuner fills operands with random 16-bit numbers; FP8 needs scales it does not make yet.
        fmt::print("{:<5} skipping dtype {}: tune times 16-bit problems only so far\n", gemm, to_text(dtype));
        continue;
      }
      for (GroupLayout layout : preset.layouts)
        for (std::size_t ti = 0; ti < tokens.size(); ++ti) {
          int t = tokens[ti];
          const std::vector<int>& counts = routings[ti];
          std::vector<int> host;
          GroupedGemmArgs x;
          x.layout = layout;
          x.ab_type = x.c_type = dtype;
          x.a = a.get();
          x.b = b.get();
          x.c = c.get();
          x.num_groups = preset.experts;
          x.n = n;
          x.k = k;
          if (layout == GroupLayout::contiguous) {
            host.assign(1, 0);
            for (int r : counts) host.push_back(host.back() + r);
            x.total_rows = host.back();
            x.group_offsets = static_cast<const int*>(groups.get());
          } else {
            host = counts;
            x.capacity = masked_capacity(*std::max_element(counts.begin(), counts.end()));
            x.group_counts = static_cast<const int*>(groups.get());
          }
          groups.upload(host.data(), host.size() * sizeof(int));
          x.host_groups = host;
          TuneResult r = rt.tune(x, nullptr, options);
          fmt::print("{:<5} {:>6} {:<10} {:<5} {:>10.4f} {:>10.4f} {:>6.3f}  {}\n", gemm, t, to_text(layout), to_text(dtype),
                     r.heuristic_ms, r.best_ms, r.best_ms > 0 ? r.heuristic_ms / r.best_ms : 0.0, r.best.to_text());
          std::fflush(stdout);
        }
    }
  }
  return kOk;
}

int cmd_cache(const std::vector<std::string>& args) {
  if (args.empty() || wants_help(args)) return fmt::print("{}", kCacheHelp), args.empty() ? kUsage : kOk;
  DiskCache cache(DiskCache::default_dir());
  if (args.size() > 1) throw UsageError("cache: takes one subcommand");
  const std::string& sub = args[0];
  if (sub == "path") {
    fmt::print("{}\n", cache.enabled() ? cache.dir() : "(disabled: MOEJIT_CACHE=off)");
    return kOk;
  }
  if (sub == "ls" || sub == "verify") {
    int bad = 0;
    auto entries = cache.list();
    for (auto& e : entries) {
      bad += !e.valid;
      if (sub == "ls" || !e.valid)
        fmt::print("{:>9}  {:<5}  {}  {}\n", e.bytes, e.valid ? "ok" : "BAD", e.path, e.valid ? e.spec_text : e.problem);
    }
    fmt::print("{} entries, {} bad, in {}\n", entries.size(), bad, cache.dir());
    return bad && sub == "verify" ? kFailed : kOk;
  }
  if (sub == "clear") {
    fmt::print("removed {} files from {}\n", cache.clear(), cache.dir());
    return kOk;
  }
  throw UsageError(fmt::format("cache: unknown subcommand '{}' (ls|verify|clear|path)", sub));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return fmt::print(stderr, "{}", kMainHelp), kUsage;
  std::string command = args[0];
  args.erase(args.begin());
  try {
    if (command == "--help" || command == "-h" || command == "help") return fmt::print("{}", kMainHelp), kOk;
    if (command == "inspect") return cmd_inspect(args);
    if (command == "choose") return cmd_choose(args);
    if (command == "compile") return cmd_compile(args);
    if (command == "prewarm") return cmd_prewarm(args);
    if (command == "cache") return cmd_cache(args);
    if (command == "tune") return cmd_tune(args);
    throw UsageError(fmt::format("unknown command '{}'", command));
  } catch (const UsageError& e) {
    fmt::print(stderr, "moejit: {}\nrun 'moejit --help' for usage\n", e.what());
    return kUsage;
  } catch (const SpecError& e) {
    fmt::print(stderr, "moejit: {}\n", e.what());
    return kUsage;
  } catch (const InvalidArgument& e) {
    fmt::print(stderr, "moejit: {}\n", e.what());
    return kUsage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "moejit: {}\n", e.what());
    return kFailed;
  }
}
