// Model presets: the file format (old files still parse, the layer keys, errors naming the key)
// and prewarm-vs-runtime agreement: the kernels `moejit prewarm --model X` builds are exactly the
// ones the serving layer requests (Runtime::choose_spec of the layer's GEMM arguments, and the
// RoutingSpecs route() and combine() derive from their arguments).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <random>

#include "cli/presets.hpp"
#include "heuristics/config.hpp"
#include "moejit/moejit.hpp"
#include "test_support.hpp"

using namespace moejit;
using namespace moejit::test;

namespace {

ModelPreset preset_from(const std::string& text) {
  static int n = 0;
  TempDir dir;
  auto path = dir.path() / fmt::format("p{}.preset", n++);
  write_bytes(path, text);
  return load_preset(path.string());
}

const char* kTiny = "experts=8\ntopk=2\nhidden=256\nintermediate=128\ntokens=16,1024\n";

template <typename T>
bool same_set(std::vector<T> a, std::vector<T> b) {
  auto has_all = [](const std::vector<T>& x, const std::vector<T>& y) {
    return std::all_of(y.begin(), y.end(), [&](const T& v) { return std::find(x.begin(), x.end(), v) != x.end(); });
  };
  return a.size() == b.size() && has_all(a, b) && has_all(b, a);
}

// The serving layer's GEMM arguments, written out independently of layer_gemm_call (the way
// examples/moe_layer's layer_gemms builds them), with group sizes `counts` per expert.
GroupedGemmArgs layer_args(const ModelPreset& p, bool up, DType ab, std::optional<DType> b, GroupLayout layout, int tokens,
                           const Fusion& fusion, const std::vector<int>& counts, std::vector<int>& groups) {
  GroupedGemmArgs x;
  x.layout = layout;
  x.ab_type = ab;
  x.b_type = b;
  x.c_type = ab == DType::e4m3 ? DType::bf16 : ab;
  x.num_groups = p.experts;
  x.n = up ? p.up_n : p.hidden;
  x.k = up ? p.hidden : p.intermediate;
  int rows = tokens * p.topk;
  if (layout == GroupLayout::contiguous) {
    groups = {0};
    for (int c : counts) groups.push_back(groups.back() + c);
    x.total_rows = rows;
  } else {
    groups = counts;
    int fullest = *std::max_element(counts.begin(), counts.end());
    x.capacity = std::max(64, (fullest + 63) / 64 * 64);
  }
  x.host_groups = groups;
  x.fusion = fusion;
  if (fusion.gather_a) x.num_tokens = tokens;
  if (fusion.scatter_c) x.num_out_rows = rows;
  return x;
}

std::vector<int> balanced_counts(const ModelPreset& p, int tokens) {
  std::vector<int> counts(p.experts, 0);
  int rows = tokens * p.topk;
  for (int r = 0; r < rows; ++r) counts[r % std::min(p.experts, rows)]++;
  return counts;
}

// Per-expert rows of the library's routing definition on random logits (memoized: the CPU routing
// of 16384 tokens over 256 experts is the slow part of these tests).
std::vector<int> routed_counts(const ModelPreset& p, int tokens) {
  static std::map<std::pair<std::string, int>, std::vector<int>> memo;
  auto& hit = memo[{p.name, tokens}];
  if (!hit.empty()) return hit;
  RoutingArgs r;
  r.num_tokens = tokens;
  r.num_experts = p.experts;
  r.top_k = p.topk;
  r.method = *p.routing;
  std::mt19937 rng(tokens);
  std::normal_distribution<float> normal;
  std::vector<float> logits((std::size_t)tokens * p.experts);
  for (auto& v : logits) v = normal(rng);
  auto routing = reference::route(r, logits);
  std::vector<int> counts(p.experts);
  for (int e = 0; e < p.experts; ++e) counts[e] = routing.group_offsets[e + 1] - routing.group_offsets[e];
  return hit = counts;
}

struct Expected {
  std::vector<KernelSpec> gemms;
  std::vector<RoutingSpec> routing;
  int unavailable = 0;
};

// What the serving code requests, through the runtime's own entry points.
Expected what_the_layer_requests(const ModelPreset& p, const Arch& arch, int sms,
                                 std::vector<int> (*counts_of)(const ModelPreset&, int)) {
  RuntimeOptions options;
  options.offline_sm_count = sms;
  auto rt = Runtime::offline(arch, options);
  Expected e;
  std::vector<std::pair<DType, std::optional<DType>>> formats;
  for (DType d : p.dtypes) formats.push_back({d, std::nullopt});
  for (DType w : p.weights) formats.push_back({DType::bf16, w});
  std::vector<std::pair<Fusion, Fusion>> variants;
  if (p.layer()) variants.push_back({p.up_fusion.value_or(Fusion{}), p.down_fusion.value_or(Fusion{})});
  if (p.plain) variants.push_back({});
  auto add = [](auto& list, const auto& v) {
    if (std::find(list.begin(), list.end(), v) == list.end()) list.push_back(v);
  };
  for (auto [up_f, down_f] : variants)
    for (auto [ab, b] : formats)
      for (GroupLayout layout : p.layouts)
        for (int tokens : p.tokens)
          for (bool up : {true, false}) {
            std::vector<int> groups;
            GroupedGemmArgs args = layer_args(p, up, ab, b, layout, tokens, up ? up_f : down_f, counts_of(p, tokens), groups);
            try {
              KernelSpec spec = rt->choose_spec(args);
              // split=tail depends on the exact tile count: a layer may request either twin.
              for (const KernelSpec& s : routing_variants(spec, args.n, args.k, tokens, args.num_groups)) add(e.gemms, s);
              if (args.num_groups <= kFewLargeGroupsMax) {  // and on a typical routing (the few-groups rules)
                GroupedGemmArgs typical = args;
                typical.host_groups = {};
                typical.expected_rows = (long long)tokens * p.topk;
                for (const KernelSpec& s : routing_variants(rt->choose_spec(typical), args.n, args.k, tokens, args.num_groups))
                  add(e.gemms, s);
              }
              if (!up && down_f.scatter_c) {
                CombineArgs c;
                c.num_tokens = tokens;
                c.top_k = p.topk;
                c.n = p.hidden;
                c.input_type = c.output_type = spec.c;
                add(e.routing, RoutingSpec::for_combine(c, arch));
              }
            } catch (const SpecError&) {
              ++e.unavailable;  // the runtime cannot launch it either
            }
          }
  // An FP8 layer's GEMM1 with a GLU writes h quantized (c=e4m3), gathering x's rows itself or after
  // quantize_activations_fp8 permuted them (examples/moe_layer --weights e4m3, --fp8-gather).
  const bool fp8 = std::find(p.dtypes.begin(), p.dtypes.end(), DType::e4m3) != p.dtypes.end();
  if (fp8 && p.up_fusion && p.up_fusion->glu_activation())
    for (bool gather : {true, false})
      for (GroupLayout layout : p.layouts)
        for (int tokens : p.tokens) {
          Fusion f = *p.up_fusion;
          f.gather_a = f.gather_a && gather;
          std::vector<int> groups;
          GroupedGemmArgs args = layer_args(p, true, DType::e4m3, std::nullopt, layout, tokens, f, counts_of(p, tokens), groups);
          args.c_type = DType::e4m3;
          try {
            add(e.gemms, rt->choose_spec(args));
          } catch (const SpecError&) {
            ++e.unavailable;
          }
        }
  // An FP8 layer quantizes x and h (bf16) on the GPU before its GEMMs (examples/moe_layer --weights e4m3).
  if (fp8) {
    QuantizeFp8Args q;
    q.input_type = DType::bf16;
    add(e.routing, RoutingSpec::for_quantize_fp8(q, arch));
  }
  if (p.routing)
    for (DType logits : p.logits)
      for (int tokens : p.tokens) {
        RoutingArgs r;
        r.logits_type = logits;
        r.num_tokens = tokens;
        r.num_experts = p.experts;
        r.top_k = p.topk;
        r.method = *p.routing;
        add(e.routing, RoutingSpec::for_route(r, arch));
      }
  return e;
}

}  // namespace

TEST_CASE("presets: old files parse as before (plain GEMMs, no routing)", "[presets]") {
  ModelPreset p = preset_from(kTiny);
  CHECK(p.plain);
  CHECK_FALSE(p.layer());
  CHECK_FALSE(p.routing);
  CHECK(p.up_n == 256);
  PrewarmPlan plan = preset_plan(p, Arch{9, 0, true}, 132);
  CHECK(plan.routing.empty());
  CHECK(plan.unavailable.empty());
  CHECK(plan.gemms == preset_specs(p, Arch{9, 0, true}, 132));
  for (auto& s : plan.gemms) CHECK_FALSE(s.fusion.any());
}

TEST_CASE("presets: layer keys", "[presets]") {
  ModelPreset p = preset_from(std::string(kTiny) +
                              "routing=sigmoid_topk,renormalize,groups=4x2,scale=2.5\nlogits=f32,bf16\n"
                              "up_fusion=fuse=gather+bias,act=swiglu_oai,glu=interleaved\ndown_fusion=fuse=scatter+weight\n");
  REQUIRE(p.routing);
  CHECK(p.routing->score == RoutingScore::sigmoid_topk);
  CHECK(p.routing->renormalize);
  CHECK(p.routing->expert_groups == 4);
  CHECK(p.routing->topk_groups == 2);
  CHECK(p.routing->scaling_factor == 2.5f);
  CHECK(p.logits == std::vector<DType>{DType::f32, DType::bf16});
  REQUIRE(p.up_fusion);
  CHECK(p.up_fusion->gather_a);
  CHECK(p.up_fusion->bias);
  CHECK(p.up_fusion->activation == Activation::swiglu_oai);
  REQUIRE(p.down_fusion);
  CHECK(p.down_fusion->scatter_c);
  CHECK(p.down_fusion->routing_weight);
  CHECK_FALSE(p.plain);  // fusions given: plain only when asked
  CHECK(preset_from(std::string(kTiny) + "up_fusion=fuse=gather\nplain=yes\n").plain);
  CHECK(preset_from(std::string(kTiny) + "plain=no\n").plain == false);
  // Named methods are the library's RoutingMethod presets.
  auto ds = preset_from("experts=256\ntopk=8\nhidden=256\nintermediate=128\ntokens=16\nrouting=deepseek_v3\n");
  REQUIRE(ds.routing);
  CHECK(ds.routing->expert_groups == RoutingMethod::deepseek_v3().expert_groups);
  CHECK(ds.routing->scaling_factor == RoutingMethod::deepseek_v3().scaling_factor);
}

TEST_CASE("presets: bad layer keys name the key and the value", "[presets]") {
  auto fails_with = [](const std::string& extra, const std::string& words) {
    INFO(extra);
    try {
      preset_from(std::string(kTiny) + extra);
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      CHECK_THAT(e.what(), Catch::Contains(words));
    }
  };
  fails_with("routing=argmax\n", "routing method 'argmax'");
  fails_with("routing=softmax_topk,sorted\n", "routing option 'sorted'");
  fails_with("routing=sigmoid_topk,groups=3x1\n", "routing groups=3x1");
  fails_with("logits=e4m3\n", "logits='e4m3'");
  fails_with("up_fusion=fuse=permute\n", "up_fusion");
  fails_with("down_fusion=tile=64x64x32\n", "down_fusion='tile=64x64x32' (expected only fuse=, act= and glu= fields)");
  fails_with("plain=maybe\n", "plain='maybe'");
  fails_with("routes=gpt_oss\n", "unknown key 'routes'");
}

TEST_CASE("presets: every shipped preset parses and describes a whole layer", "[presets]") {
  for (auto& name : preset_names()) {
    INFO(name);
    ModelPreset p = load_preset(name);
    CHECK(p.routing);
    CHECK(p.layer());
    CHECK(p.down_fusion);
  }
  CHECK(preset_names().size() >= 4);
}

TEST_CASE("presets: prewarm builds exactly what the layer requests (runtime choose_spec, route, combine)", "[presets]") {
  const Arch arch{9, 0, true};
  for (const char* name : {"gpt-oss-120b", "deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b"})
    for (int sms : {132, 114}) {
      INFO(name << " sms=" << sms);
      ModelPreset p = load_preset(name);
      PrewarmPlan plan = preset_plan(p, arch, sms);
      Expected e = what_the_layer_requests(p, arch, sms, balanced_counts);
      CHECK(same_set(plan.gemms, e.gemms));
      CHECK(same_set(plan.routing, e.routing));
      CHECK((e.unavailable == 0) == plan.unavailable.empty());
      // Routed by the library's own routing of random logits, the runtime asks for nothing prewarm left out.
      Expected routed = what_the_layer_requests(p, arch, sms, routed_counts);
      for (auto& s : routed.gemms) {
        INFO(s.to_text());
        CHECK(std::find(plan.gemms.begin(), plan.gemms.end(), s) != plan.gemms.end());
      }
      CHECK(same_set(plan.routing, routed.routing));
    }
}

TEST_CASE("presets: quantized fused GEMMs the kernels cannot take yet are listed, not failed", "[presets][formats]") {
  ModelPreset p = preset_from(std::string(kTiny) + "dtypes=bf16\nweights=mxfp4\nrouting=gpt_oss\n"
                                                   "up_fusion=fuse=gather+bias,act=swiglu_oai\n"
                                                   "down_fusion=fuse=scatter+weight+bias\nplain=yes\n");
  PrewarmPlan plan = preset_plan(p, Arch{9, 0, true}, 132);
  bool fused_bf16 = false, plain_mxfp4 = false, fused_mxfp4 = false;
  for (auto& s : plan.gemms) {
    fused_bf16 |= s.b == DType::bf16 && s.fusion.gather_a;
    plain_mxfp4 |= s.b == DType::mxfp4 && !s.fusion.any();
    fused_mxfp4 |= s.b == DType::mxfp4 && s.fusion.any();
  }
  CHECK(fused_bf16);
  CHECK(plain_mxfp4);
  // Until fused 4-bit kernels exist (branch quant-fusion) the runtime cannot launch them: listed.
  bool mxfp4_listed = std::any_of(plan.unavailable.begin(), plan.unavailable.end(),
                                  [](const std::string& l) { return l.find("b=mxfp4") != std::string::npos; });
  CHECK(fused_mxfp4 != mxfp4_listed);
  REQUIRE(plan.routing.size() == 2);
  CHECK(plan.routing[0].op == RoutingSpec::Op::route);
  CHECK(plan.routing[0].score == RoutingScore::topk_softmax);
  CHECK(plan.routing[1].op == RoutingSpec::Op::combine);
  CHECK(plan.routing[1].top_k == 2);
}
