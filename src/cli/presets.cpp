#include "cli/presets.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "heuristics/config.hpp"
#include "moejit/errors.hpp"

#ifndef MOEJIT_PRESET_DIR
#define MOEJIT_PRESET_DIR "cache/presets"
#endif

namespace moejit {
namespace fs = std::filesystem;

namespace {
std::vector<std::string> preset_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("MOEJIT_PRESET_DIR"); env && *env) dirs.push_back(env);
  dirs.push_back(MOEJIT_PRESET_DIR);
  return dirs;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}
// routing=SCORE[,renormalize][,groups=GxT][,scale=F] or a model's method (gpt_oss, mixtral,
// qwen3_moe, deepseek_v3): include/moejit/routing.hpp, RoutingMethod.
RoutingMethod parse_routing(const std::string& value, const std::string& where) {
  auto items = split(value, ',');
  if (items.empty()) throw InvalidArgument(fmt::format("{}: routing is empty", where));
  RoutingMethod m;
  const std::string& first = items[0];
  if (first == "gpt_oss") m = RoutingMethod::gpt_oss();
  else if (first == "mixtral") m = RoutingMethod::mixtral();
  else if (first == "qwen3_moe") m = RoutingMethod::qwen3_moe();
  else if (first == "deepseek_v3") m = RoutingMethod::deepseek_v3();
  else if (first == "softmax_topk") m.score = RoutingScore::softmax_topk;
  else if (first == "topk_softmax") m.score = RoutingScore::topk_softmax;
  else if (first == "sigmoid_topk") m.score = RoutingScore::sigmoid_topk;
  else
    throw InvalidArgument(fmt::format("{}: routing method '{}' (expected softmax_topk, topk_softmax, sigmoid_topk, gpt_oss, "
                                      "mixtral, qwen3_moe or deepseek_v3)", where, first));
  for (std::size_t i = 1; i < items.size(); ++i) {
    const std::string& item = items[i];
    int g = 0, t = 0;
    char x = 0;
    if (item == "renormalize") m.renormalize = true;
    else if (item.starts_with("groups=") && std::sscanf(item.c_str() + 7, "%d%c%d", &g, &x, &t) == 3 && x == 'x')
      m.expert_groups = g, m.topk_groups = t;
    else if (item.starts_with("scale=")) {
      try {
        m.scaling_factor = std::stof(item.substr(6));
      } catch (...) {
        throw InvalidArgument(fmt::format("{}: routing {} is not a number", where, item));
      }
    } else
      throw InvalidArgument(fmt::format("{}: routing option '{}' (expected renormalize, groups=GxT or scale=F)", where, item));
  }
  return m;
}
}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (auto& dir : preset_dirs()) {
    std::error_code ec;
    for (auto& f : fs::directory_iterator(dir, ec))
      if (f.path().extension() == ".preset") names.push_back(f.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

ModelPreset load_preset(const std::string& name_or_path) {
  std::string path;
  if (fs::is_regular_file(name_or_path)) path = name_or_path;
  for (auto& dir : preset_dirs())
    if (path.empty() && fs::is_regular_file(fs::path(dir) / (name_or_path + ".preset")))
      path = (fs::path(dir) / (name_or_path + ".preset")).string();
  if (path.empty())
    throw InvalidArgument(fmt::format("preset '{}' not found (known: {})", name_or_path, fmt::join(preset_names(), ", ")));
  ModelPreset p;
  std::optional<bool> plain;
  p.name = fs::path(path).stem().string();
  std::ifstream in(path);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line.erase(0, line.find_first_not_of(" \t"));
    line.erase(line.find_last_not_of(" \t\r") + 1);
    if (line.empty()) continue;
    auto eq = line.find('=');
    if (eq == std::string::npos) throw InvalidArgument(fmt::format("{}:{}: expected key=value", path, line_no));
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    auto as_int = [&] {
      try {
        return std::stoi(value);
      } catch (...) {
        throw InvalidArgument(fmt::format("{}:{}: {}='{}' is not an integer", path, line_no, key, value));
      }
    };
    if (key == "experts") p.experts = as_int();
    else if (key == "topk") p.topk = as_int();
    else if (key == "hidden") p.hidden = as_int();
    else if (key == "intermediate") p.intermediate = as_int();
    else if (key == "up_n") p.up_n = as_int();
    else if (key == "tokens") {
      p.tokens.clear();
      for (auto& t : split(value, ',')) p.tokens.push_back(std::stoi(t));
    } else if (key == "dtypes") {
      p.dtypes.clear();
      for (auto& t : split(value, ','))
        p.dtypes.push_back(KernelSpec::parse("a=" + t).a);
    } else if (key == "weights") {
      p.weights.clear();
      for (auto& t : split(value, ',')) {
        DType w = KernelSpec::parse("b=" + t).b;
        if (w != DType::mxfp4 && w != DType::nvfp4)
          throw InvalidArgument(fmt::format("{}:{}: weights='{}' (expected mxfp4 and/or nvfp4)", path, line_no, t));
        p.weights.push_back(w);
      }
    } else if (key == "layouts") {
      p.layouts.clear();
      for (auto& t : split(value, ',')) p.layouts.push_back(KernelSpec::parse("layout=" + t).layout);
    } else if (key == "routing") {
      p.routing = parse_routing(value, fmt::format("{}:{}", path, line_no));
    } else if (key == "logits") {
      p.logits.clear();
      for (auto& t : split(value, ',')) {
        DType l = KernelSpec::parse("a=" + t).a;
        if (l != DType::f32 && l != DType::bf16 && l != DType::f16)
          throw InvalidArgument(fmt::format("{}:{}: logits='{}' (expected f32, bf16 or f16)", path, line_no, t));
        p.logits.push_back(l);
      }
    } else if (key == "up_fusion" || key == "down_fusion") {
      // The spec's own fusion fields: fuse=gather+bias,act=swiglu_oai,glu=interleaved.
      KernelSpec fields;
      try {
        fields = KernelSpec::parse(value);
      } catch (const SpecError& e) {
        throw InvalidArgument(fmt::format("{}:{}: {}: {}", path, line_no, key, e.what()));
      }
      if (!(KernelSpec::parse(to_text(fields.fusion)) == fields))
        throw InvalidArgument(fmt::format("{}:{}: {}='{}' (expected only fuse=, act= and glu= fields)", path, line_no, key, value));
      (key == "up_fusion" ? p.up_fusion : p.down_fusion) = fields.fusion;
    } else if (key == "plain") {
      if (value != "yes" && value != "no")
        throw InvalidArgument(fmt::format("{}:{}: plain='{}' (expected yes or no)", path, line_no, value));
      plain = value == "yes";
    } else
      throw InvalidArgument(fmt::format("{}:{}: unknown key '{}' (known: experts, topk, hidden, intermediate, up_n, tokens, "
                                        "dtypes, weights, layouts, routing, logits, up_fusion, down_fusion, plain)",
                                        path, line_no, key));
  }
  p.plain = plain.value_or(!p.layer());
  if (p.experts < 1 || p.topk < 1 || p.hidden < 1 || p.intermediate < 1 || p.tokens.empty())
    throw InvalidArgument(fmt::format("{}: experts, topk, hidden, intermediate and tokens are required", path));
  if (p.up_n == 0) p.up_n = 2 * p.intermediate;
  if (p.routing && p.routing->score == RoutingScore::sigmoid_topk &&
      (p.routing->expert_groups < 1 || p.experts % p.routing->expert_groups != 0 ||
       p.routing->topk_groups < 1 || p.routing->topk_groups > p.routing->expert_groups))
    throw InvalidArgument(fmt::format("{}: routing groups={}x{} (expected experts={} split into equal groups, top groups <= groups)",
                                      path, p.routing->expert_groups, p.routing->topk_groups, p.experts));
  return p;
}

LayerGemmCall layer_gemm_call(const ModelPreset& p, LayerGemm gemm, DType ab_type, std::optional<DType> b_type,
                              GroupLayout layout, int tokens, const Fusion& fusion) {
  LayerGemmCall call;
  GroupedGemmArgs& x = call.args;
  const long long rows = (long long)tokens * p.topk;
  const int active = (int)std::min<long long>(p.experts, rows);
  std::vector<int> counts(p.experts, 0);
  for (int e = 0; e < active; ++e) counts[e] = (int)(rows / active + (e < rows % active ? 1 : 0));
  x.layout = layout;
  x.ab_type = ab_type;
  x.b_type = b_type;
  // FP8 writes bf16 (the C type the FP8 kernels are measured with and the layer keeps).
  x.c_type = ab_type == DType::e4m3 ? DType::bf16 : ab_type;
  x.num_groups = p.experts;
  x.n = gemm == LayerGemm::up ? p.up_n : p.hidden;
  x.k = gemm == LayerGemm::up ? p.hidden : p.intermediate;
  if (layout == GroupLayout::contiguous) {
    call.groups.assign(1, 0);
    for (int c : counts) call.groups.push_back(call.groups.back() + c);
    x.total_rows = (int)rows;
  } else {
    call.groups = counts;
    x.capacity = std::max(64, (*std::max_element(counts.begin(), counts.end()) + 63) / 64 * 64);
  }
  x.host_groups = call.groups;
  x.fusion = fusion;
  if (fusion.gather_a) x.num_tokens = tokens;
  if (fusion.scatter_c) x.num_out_rows = (int)rows;  // [tokens, top_k, N_out] for combine
  return call;
}

PrewarmPlan preset_plan(const ModelPreset& p, const Arch& arch, int sm_count) {
  PrewarmPlan plan;
  RuntimeOptions options;
  options.offline_sm_count = sm_count;
  auto rt = Runtime::offline(arch, options);
  // (A/B type, B's type when it differs): each dtype, then bf16 activations with each 4-bit format.
  std::vector<std::pair<DType, std::optional<DType>>> formats;
  for (DType dtype : p.dtypes) formats.push_back({dtype, std::nullopt});
  for (DType w : p.weights) formats.push_back({DType::bf16, w});
  // The fusions each GEMM is served with: the layer's, then none when plain kernels are kept.
  std::vector<std::pair<Fusion, Fusion>> variants;
  if (p.layer()) variants.push_back({p.up_fusion.value_or(Fusion{}), p.down_fusion.value_or(Fusion{})});
  if (p.plain) variants.push_back({Fusion{}, Fusion{}});
  std::vector<DType> combine_inputs;
  auto add_gemm = [&](const LayerGemmCall& call, LayerGemm gemm, int tokens) {
    try {
      // Another routing may pick the spec's split=tail twin, tail rows or not, the other CTA pair, or
      // (a group holds at most every token) a skewed routing's twins (heuristics/config.hpp).
      auto add_variants = [&](const KernelSpec& chosen) {
        for (const KernelSpec& s : routing_variants(chosen, call.args.n, call.args.k, tokens, call.args.num_groups))
          if (std::find(plan.gemms.begin(), plan.gemms.end(), s) == plan.gemms.end()) plan.gemms.push_back(s);
      };
      KernelSpec spec = rt->choose_spec(call.args);
      add_variants(spec);
      // The few-large-groups rules (64x256 static) read the exact group sizes, for which these balanced
      // counts stand in: also the choice on a typical routing, which they leave to the other rules.
      if (call.args.num_groups <= kFewLargeGroupsMax) {
        GroupedGemmArgs typical = call.args;
        typical.host_groups = {};
        typical.expected_rows = (long long)tokens * p.topk;
        add_variants(rt->choose_spec(typical));
      }
      return std::optional<KernelSpec>(spec);
    } catch (const SpecError& e) {
      std::string line = fmt::format("{}: {}", gemm == LayerGemm::up ? "up" : "down", e.what());
      if (std::find(plan.unavailable.begin(), plan.unavailable.end(), line) == plan.unavailable.end())
        plan.unavailable.push_back(line);
      return std::optional<KernelSpec>();
    }
  };
  for (auto [up_fusion, down_fusion] : variants)
    for (auto [dtype, b_type] : formats)
      for (GroupLayout layout : p.layouts)
        for (int tokens : p.tokens)
          for (auto [gemm, fusion] : {std::pair{LayerGemm::up, up_fusion}, std::pair{LayerGemm::down, down_fusion}}) {
            LayerGemmCall call = layer_gemm_call(p, gemm, dtype, b_type, layout, tokens, fusion);
            std::optional<KernelSpec> spec = add_gemm(call, gemm, tokens);
            if (spec && gemm == LayerGemm::down && fusion.scatter_c && !fusion.atomic &&
                std::find(combine_inputs.begin(), combine_inputs.end(), spec->c) == combine_inputs.end())
              combine_inputs.push_back(spec->c);
          }
  // FP8 layers whose up GEMM ends in a GLU: that GEMM writing its output quantized (c=e4m3, the down
  // GEMM's A and scales: examples/moe_layer's FP8 layer), gathered, and without the gather for
  // engines that permute x as they quantize it (quantize_activations_fp8 with gather_rows).
  if (p.up_fusion && p.up_fusion->glu_activation() && std::find(p.dtypes.begin(), p.dtypes.end(), DType::e4m3) != p.dtypes.end()) {
    Fusion permuted = *p.up_fusion;
    permuted.gather_a = false;
    for (const Fusion& fusion : {*p.up_fusion, permuted})
      for (GroupLayout layout : p.layouts)
        for (int tokens : p.tokens) {
          LayerGemmCall call = layer_gemm_call(p, LayerGemm::up, DType::e4m3, std::nullopt, layout, tokens, fusion);
          call.args.c_type = DType::e4m3;
          add_gemm(call, LayerGemm::up, tokens);
        }
  }
  if (p.routing) {
    for (DType logits : p.logits) {
      RoutingArgs r;
      r.logits_type = logits;
      r.num_experts = p.experts;
      r.top_k = p.topk;
      r.method = *p.routing;
      RoutingSpec spec = RoutingSpec::for_route(r, arch);
      spec.validate();
      if (std::find(plan.routing.begin(), plan.routing.end(), spec) == plan.routing.end()) plan.routing.push_back(spec);
    }
  }
  // FP8 layers quantize their activations (x before GEMM1, the bf16 GLU output before GEMM2) on the
  // GPU: quantize_activations_fp8 from bf16.
  if (std::find(p.dtypes.begin(), p.dtypes.end(), DType::e4m3) != p.dtypes.end()) {
    RoutingSpec spec = RoutingSpec::for_quantize_fp8(QuantizeFp8Args{}, arch);
    spec.validate();
    if (std::find(plan.routing.begin(), plan.routing.end(), spec) == plan.routing.end()) plan.routing.push_back(spec);
  }
  // The scattered [tokens, top_k, N] rows of the down GEMM, summed per token into its C type.
  for (DType in : combine_inputs) {
    CombineArgs c;
    c.top_k = p.topk;
    c.n = p.hidden;
    c.input_type = c.output_type = in;
    RoutingSpec spec = RoutingSpec::for_combine(c, arch);
    spec.validate();
    if (std::find(plan.routing.begin(), plan.routing.end(), spec) == plan.routing.end()) plan.routing.push_back(spec);
  }
  return plan;
}

std::vector<KernelSpec> preset_specs(const ModelPreset& p, const Arch& arch, int sm_count) {
  return preset_plan(p, arch, sm_count).gemms;
}

}  // namespace moejit
