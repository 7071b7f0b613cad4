#include "compiler/nvrtc_compiler.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <algorithm>
#include <regex>
#include <sstream>

#include "moejit/errors.hpp"

#ifndef MOEJIT_BUILD_CUDA_INCLUDE
#define MOEJIT_BUILD_CUDA_INCLUDE "/usr/local/cuda/include"
#endif

namespace moejit {
namespace {

void check(nvrtcResult result, const char* call) {
  if (result != NVRTC_SUCCESS) throw CompileError(fmt::format("{} failed: {}", call, nvrtcGetErrorString(result)));
}

// RAII for nvrtcProgram.
struct Program {
  nvrtcProgram handle = nullptr;
  Program() = default;
  Program(Program&& other) noexcept : handle(other.handle) { other.handle = nullptr; }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() {
    if (handle) nvrtcDestroyProgram(&handle);
  }
};

std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  nvrtcGetProgramLogSize(prog, &size);
  std::string log(size, '\0');
  if (size) nvrtcGetProgramLog(prog, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// For each "file(line): error" in the log, the source lines around it.
std::string error_excerpts(const std::string& log, const GeneratedSource& source, const TemplateStore& templates) {
  std::string out;
  std::regex pattern(R"(([^\s:()]+)\((\d+)\): error)");
  std::vector<std::string> shown;
  for (std::sregex_iterator it(log.begin(), log.end(), pattern), end; it != end && shown.size() < 5; ++it) {
    std::string file = (*it)[1];
    int line = std::stoi((*it)[2]);
    std::string where = fmt::format("{}:{}", file, line);
    if (std::find(shown.begin(), shown.end(), where) != shown.end()) continue;
    shown.push_back(where);
    const std::string* text = nullptr;
    if (file == source.file_name) text = &source.source;
    for (auto& t : templates.files())
      if (t.path == file) text = &t.contents;
    if (!text) continue;
    std::istringstream lines(*text);
    std::string l;
    out += fmt::format("--- {}:{}\n", file, line);
    for (int n = 1; std::getline(lines, l); ++n)
      if (n >= line - 2 && n <= line + 2) out += fmt::format("{}{:5} | {}\n", n == line ? ">" : " ", n, l);
  }
  return out;
}

std::string ptxas_lines(const std::string& log) {
  std::istringstream in(log);
  std::string line, out;
  bool in_report = false;  // "Function properties" is followed by indented lines (stack, spills)
  while (std::getline(in, line)) {
    if (line.find("ptxas") != std::string::npos) in_report = true;
    else if (line.empty() || (line[0] != ' ' && line[0] != '\t')) in_report = false;
    // "Compile time = x ms" differs run to run; the report must be deterministic (cache bytes).
    if (in_report && line.find("Compile time") == std::string::npos) out += line + "\n";
  }
  return out;
}

}  // namespace

NvrtcCompiler::NvrtcCompiler(CompileOptions options) : options_(options) {}

std::string NvrtcCompiler::nvrtc_version() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return fmt::format("{}.{}", major, minor);
}

std::string NvrtcCompiler::cuda_include_dir() {
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const char* root = std::getenv(var);
    if (root && *root && std::filesystem::exists(std::filesystem::path(root) / "include" / "cuda.h"))
      return (std::filesystem::path(root) / "include").string();
  }
  return MOEJIT_BUILD_CUDA_INCLUDE;
}

std::vector<std::string> NvrtcCompiler::options_for(const Arch& arch) const {
  std::string inc = cuda_include_dir();
  std::vector<std::string> opts = {
      fmt::format("-arch=sm_{}{}", arch.sm(), arch.arch_specific ? "a" : ""),
      "-std=c++17",
      "-default-device",
      // Leaves the runtime-API declarations, textures and cudaDeviceProp out of NVRTC's implicit
      // header, which the kernels never use: front end 61-73 -> 43-55 ms of a ~770 ms Hopper
      // compile, byte-identical cubins (docs/perf.md, JIT latency).
      "-minimal",
      "--ptxas-options=-v",
      "-I" + inc,
      "-I" + inc + "/cccl",
  };
  if (options_.line_info) opts.push_back("-lineinfo");
  // Extra NVRTC options for experiments (e.g. "-Ofast-compile=min"), space-separated. They are
  // options, so they enter the cache key like the ones above: a cubin built with them is never
  // served to a process without them.
  if (const char* extra = std::getenv("MOEJIT_NVRTC_OPTIONS")) {
    std::string_view rest = extra;
    while (!rest.empty()) {
      const size_t begin = rest.find_first_not_of(' ');
      if (begin == std::string_view::npos) break;
      rest.remove_prefix(begin);
      const size_t end = std::min(rest.find(' '), rest.size());
      opts.emplace_back(rest.substr(0, end));
      rest.remove_prefix(end);
    }
  }
  return opts;
}

static Program create_program(const GeneratedSource& source, const TemplateStore& templates) {
  std::vector<const char*> names, contents;
  for (auto& t : templates.files()) {
    if (!t.path.ends_with(".cuh")) continue;
    names.push_back(t.path.c_str());
    contents.push_back(t.contents.c_str());
  }
  Program prog;
  check(nvrtcCreateProgram(&prog.handle, source.source.c_str(), source.file_name.c_str(), (int)names.size(),
                           contents.data(), names.data()),
        "nvrtcCreateProgram");
  return prog;
}

static void compile_or_throw(nvrtcProgram prog, const std::vector<std::string>& opts, std::string_view what,
                             const GeneratedSource& source, const TemplateStore& templates) {
  std::vector<const char*> argv;
  for (auto& o : opts) argv.push_back(o.c_str());
  nvrtcResult result = nvrtcCompileProgram(prog, (int)argv.size(), argv.data());
  if (result != NVRTC_SUCCESS) {
    std::string log = program_log(prog);
    throw CompileError(fmt::format("NVRTC could not compile kernel\n  spec: {}\n  templates: {}\n  result: {}\n--- log\n{}\n{}",
                                   what, templates.origin(), nvrtcGetErrorString(result), log,
                                   error_excerpts(log, source, templates)));
  }
}

CompileResult NvrtcCompiler::compile(const KernelSpec& spec, const GeneratedSource& source,
                                     const TemplateStore& templates) const {
  return compile(spec.to_text(), spec.arch, source, templates);
}

CompileResult NvrtcCompiler::compile(std::string_view what, const Arch& arch, const GeneratedSource& source,
                                     const TemplateStore& templates) const {
  auto start = std::chrono::steady_clock::now();
  Program prog = create_program(source, templates);
  compile_or_throw(prog.handle, options_for(arch), what, source, templates);
  CompileResult out;
  size_t size = 0;
  check(nvrtcGetCUBINSize(prog.handle, &size), "nvrtcGetCUBINSize");
  out.cubin.resize(size);
  check(nvrtcGetCUBIN(prog.handle, out.cubin.data()), "nvrtcGetCUBIN");
  out.log = program_log(prog.handle);
  out.resources = ptxas_lines(out.log);
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string NvrtcCompiler::ptx(const KernelSpec& spec, const GeneratedSource& source, const TemplateStore& templates) const {
  Program prog = create_program(source, templates);
  auto opts = options_for(spec.arch);
  opts[0] = fmt::format("-arch=compute_{}{}", spec.arch.sm(), spec.arch.arch_specific ? "a" : "");
  std::erase(opts, std::string("--ptxas-options=-v"));
  compile_or_throw(prog.handle, opts, spec.to_text(), source, templates);
  size_t size = 0;
  check(nvrtcGetPTXSize(prog.handle, &size), "nvrtcGetPTXSize");
  std::string ptx(size, '\0');
  check(nvrtcGetPTX(prog.handle, ptx.data()), "nvrtcGetPTX");
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}

}  // namespace moejit
