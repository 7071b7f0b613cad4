// Routing helpers on the CPU: the reference definitions (hand-checked cases), the spec text, and
// argument validation of route() and combine() (which throws before anything needs a GPU).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <numeric>
#include <random>

#include "codegen/routing_codegen.hpp"
#include "moejit/errors.hpp"
#include "moejit/routing.hpp"

using namespace moejit;

namespace {

RoutingArgs shape(int tokens, int experts, int top_k, RoutingMethod method = RoutingMethod::mixtral()) {
  RoutingArgs a;
  a.num_tokens = tokens;
  a.num_experts = experts;
  a.top_k = top_k;
  a.method = method;
  return a;
}

// Device-looking pointers for validation tests: never dereferenced (validation throws first, or an
// offline runtime refuses to launch).
template <typename T>
T* fake(std::uintptr_t address = 0x10000) {
  return reinterpret_cast<T*>(address);
}

RoutingArgs valid_args() {
  RoutingArgs a = shape(64, 128, 4);
  a.logits = fake<void>();
  a.topk_ids = fake<int>();
  a.topk_weights = fake<float>();
  a.group_offsets = fake<int>();
  a.gather_rows = fake<int>();
  a.scatter_rows = fake<int>();
  a.routing_weights = fake<float>();
  a.workspace = fake<void>();
  a.workspace_bytes = routing_workspace_bytes(a);
  return a;
}

std::string route_error(const RoutingArgs& a) {
  auto rt = Runtime::offline(Arch{9, 0, true});
  try {
    route(*rt, a, nullptr);
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (const DriverError&) {
    return "valid";  // passed validation; the offline runtime cannot launch
  }
  return "no exception";
}

}  // namespace

TEST_CASE("reference route: top-k then softmax, ties to the lower expert, rows sorted by token", "[routing]") {
  // 3 tokens, 4 experts, top-2. Token 1 has a three-way tie.
  RoutingArgs a = shape(3, 4, 2, RoutingMethod::gpt_oss());
  std::vector<float> logits = {0.f, 2.f, 1.f, -1.f,   // -> 1, 2
                               1.f, 1.f, 0.f, 1.f,    // tie -> 0, 1
                               5.f, -3.f, 4.f, 5.f};  // tie at the top -> 0, 3
  auto r = reference::route(a, logits);
  CHECK(r.topk_ids == std::vector<int>{1, 2, 0, 1, 0, 3});
  double e1 = std::exp(-1.0);
  CHECK(r.topk_weights[0] == Approx(1 / (1 + e1)));
  CHECK(r.topk_weights[1] == Approx(e1 / (1 + e1)));
  CHECK(r.topk_weights[2] == Approx(0.5));
  CHECK(r.topk_weights[5] == Approx(0.5));
  CHECK(r.group_counts == std::vector<int>{2, 2, 1, 1});
  CHECK(r.group_offsets == std::vector<int>{0, 2, 4, 5, 6});
  // expert 0: (t1,s0)=2, (t2,s0)=4; expert 1: (t0,s0)=0, (t1,s1)=3; expert 2: (t0,s1)=1; expert 3: (t2,s1)=5
  CHECK(r.scatter_rows == std::vector<int>{2, 4, 0, 3, 1, 5});
  CHECK(r.gather_rows == std::vector<int>{1, 2, 0, 1, 0, 2});
  CHECK(r.routing_weights[0] == r.topk_weights[2]);
  CHECK(r.row_of_slot == std::vector<int>{2, 4, 0, 3, 1, 5});
}

TEST_CASE("reference route: padded offsets and padding rows", "[routing]") {
  RoutingArgs a = shape(3, 4, 2, RoutingMethod::gpt_oss());
  a.row_alignment = 4;
  std::vector<float> logits = {0.f, 2.f, 1.f, -1.f, 1.f, 1.f, 0.f, 1.f, 5.f, -3.f, 4.f, 5.f};
  auto r = reference::route(a, logits);
  CHECK(routed_rows(a) == 6 + 4 * 3);
  CHECK(r.group_offsets == std::vector<int>{0, 4, 8, 12, 16});
  CHECK(r.gather_rows[0] == 1);
  CHECK(r.scatter_rows[2] == -1);  // padding: written nowhere
  CHECK(r.routing_weights[2] == 0.f);
  CHECK(r.gather_rows[2] == 0);
  CHECK(r.scatter_rows[8] == 1);   // expert 2 starts at 8
  CHECK(r.scatter_rows[16] == -2);  // past offsets[E]: never written
}

TEST_CASE("reference route: masked layout drops pairs past the capacity", "[routing]") {
  RoutingArgs a = shape(4, 4, 1, RoutingMethod::gpt_oss());
  a.layout = GroupLayout::masked;
  a.capacity = 2;
  std::vector<float> logits(16, 0.f);
  for (int t = 0; t < 4; ++t) logits[t * 4 + 3] = 1.f;  // every token to expert 3
  auto r = reference::route(a, logits);
  CHECK(r.group_counts == std::vector<int>{0, 0, 0, 2});
  CHECK(r.row_of_slot == std::vector<int>{6, 7, -1, -1});
  CHECK(r.gather_rows[6] == 0);
  CHECK(r.gather_rows[7] == 1);
  CHECK(r.topk_weights[0] == 1.f);
}

TEST_CASE("reference route: softmax then top-k, renormalized or not", "[routing]") {
  std::vector<float> logits = {1.f, 2.f, 3.f, 0.f};
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + 1.0;
  RoutingArgs a = shape(1, 4, 2, RoutingMethod{RoutingScore::softmax_topk, false});
  auto r = reference::route(a, logits);
  CHECK(r.topk_ids == std::vector<int>{2, 1});
  CHECK(r.topk_weights[0] == Approx(std::exp(3.0) / z));
  a.method = RoutingMethod::qwen3_moe();
  r = reference::route(a, logits);
  CHECK(r.topk_weights[0] + r.topk_weights[1] == Approx(1.0));
  CHECK(r.topk_weights[0] == Approx(std::exp(3.0) / (std::exp(3.0) + std::exp(2.0))));
}

TEST_CASE("reference route: DeepSeek-V3 sigmoid, correction bias, group-limited top-k, scaling", "[routing]") {
  // 8 experts in 4 groups of 2, 2 groups kept, top-2.
  RoutingArgs a = shape(1, 8, 2, RoutingMethod{RoutingScore::sigmoid_topk, true, 4, 2, 2.5f});
  std::vector<float> logits = {3.f, -3.f,   // group 0: one strong expert, sum of two is low
                               1.f, 1.f,    // group 1
                               0.5f, 0.5f,  // group 2
                               2.f, 0.f};   // group 3
  std::vector<float> bias = {0, 0, 0, 0, 0, 0, 0, 0};
  auto s = [](double x) { return 1 / (1 + std::exp(-x)); };
  // group sums: g0 s(3)+s(-3)=1.0, g1 2s(1)=1.46, g2 2s(.5)=1.245, g3 s(2)+s(0)=1.38 -> keep g1, g3
  auto r = reference::route(a, logits, bias);
  CHECK(r.topk_ids == std::vector<int>{6, 2});  // expert 0 (s(3)) is in a dropped group
  double total = s(2) + s(1);
  CHECK(r.topk_weights[0] == Approx(2.5 * s(2) / total));
  CHECK(r.topk_weights[1] == Approx(2.5 * s(1) / total));
  // The bias steers the choice but not the weight.
  bias[3] = 1.f;
  r = reference::route(a, logits, bias);
  CHECK(r.topk_ids == std::vector<int>{3, 6});
  CHECK(r.topk_weights[0] == Approx(2.5 * s(1) / (s(1) + s(2))));
}

TEST_CASE("reference combine sums the slots in order, weighted or not, skipping dropped slots", "[routing]") {
  std::vector<float> in = {1, 2, 10, 20, 3, 4, 30, 40};  // 2 tokens, top-2, n = 2
  CHECK(reference::combine(2, 2, 2, in) == std::vector<double>{11, 22, 33, 44});
  std::vector<float> w = {0.5f, 2.f, 1.f, 0.f};
  CHECK(reference::combine(2, 2, 2, in, w) == std::vector<double>{20.5, 41, 3, 4});
  CHECK(reference::combine(2, 2, 2, in, {}, {0, -1, 2, 3}) == std::vector<double>{1, 2, 33, 44});
}

TEST_CASE("routing spec: canonical text, key and validation", "[routing]") {
  RoutingArgs a = shape(16, 256, 8, RoutingMethod::deepseek_v3());
  a.logits_type = DType::bf16;
  RoutingSpec s = RoutingSpec::for_route(a, Arch{9, 0, true});
  CHECK(s.to_text() == "routing:op=route,arch=sm_90a,logits=bf16,experts=256,topk=8,score=sigmoid_topk,renorm=1,groups=8x4");
  CHECK(s.key() == RoutingSpec::for_route(a, Arch{9, 0, true}).key());
  CHECK_NOTHROW(s.validate());
  // Token count, layout and alignment are launch arguments, not part of the binary.
  RoutingArgs b = a;
  b.num_tokens = 16384;
  b.row_alignment = 128;
  CHECK(RoutingSpec::for_route(b, Arch{9, 0, true}) == s);
  CombineArgs c;
  c.top_k = 4;
  CHECK(RoutingSpec::for_combine(c, Arch{8, 0, false}).to_text() == "routing:op=combine,arch=sm_80,in=bf16,out=bf16,topk=4");
  s.topk_groups = 9;
  CHECK_THROWS_AS(s.validate(), SpecError);
  s = RoutingSpec::for_route(shape(1, 2048, 8), Arch{9, 0, true});
  CHECK_THROWS_WITH(s.validate(), Catch::Contains("experts=2048"));
  // topk_softmax is normalized already: renormalize does not make a second binary.
  RoutingArgs m = shape(1, 8, 2, RoutingMethod{RoutingScore::topk_softmax, true});
  CHECK(!RoutingSpec::for_route(m, Arch{9, 0, true}).renormalize);
}

TEST_CASE("quantize_activations_fp8: spec text and argument checks", "[routing][validate]") {
  QuantizeFp8Args q;
  q.input_type = DType::f16;
  CHECK(RoutingSpec::for_quantize_fp8(q, Arch{9, 0, true}).to_text() == "routing:op=quantize_fp8,arch=sm_90a,in=f16");
  q.input_type = DType::e4m3;
  CHECK_THROWS_WITH(RoutingSpec::for_quantize_fp8(q, Arch{9, 0, true}).validate(), Catch::Contains("in=e4m3"));
  auto src = generate_routing_source(RoutingSpec::for_quantize_fp8(QuantizeFp8Args{}, Arch{9, 0, true}), TemplateStore::from_embedded());
  CHECK(src.source.find("quantize_fp8<moejit::kBF16>") != std::string::npos);
  // Arguments: checked before anything runs (no GPU needed), each failure naming the argument.
  auto rt = Runtime::offline(Arch{9, 0, true});
  alignas(16) static unsigned char buffer[4096];
  auto valid = [] {
    QuantizeFp8Args a;
    a.input = buffer;
    a.output = buffer + 1024;
    a.scales = reinterpret_cast<float*>(buffer + 2048);
    a.rows = 4;
    a.k = 128;
    return a;
  };
  auto error = [&](QuantizeFp8Args a) {
    try {
      quantize_activations_fp8(*rt, a, nullptr);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    } catch (const DriverError&) {
      return std::string("valid");  // passed validation; the offline runtime cannot launch
    }
    return std::string("no exception");
  };
  auto expect = [&](const char* what, auto mutate) {
    QuantizeFp8Args a = valid();
    mutate(a);
    INFO(what);
    CHECK_THAT(error(a), Catch::Contains(what));
  };
  expect("input_type=e4m3", [](QuantizeFp8Args& a) { a.input_type = DType::e4m3; });
  expect("input", [](QuantizeFp8Args& a) { a.input = nullptr; });
  expect("output", [](QuantizeFp8Args& a) { a.output = buffer + 1025; });
  expect("scales", [](QuantizeFp8Args& a) { a.scales = reinterpret_cast<float*>(buffer + 2049); });
  expect("rows=-1", [](QuantizeFp8Args& a) { a.rows = -1; });
  expect("k=24", [](QuantizeFp8Args& a) { a.k = 24; });
  expect("k=0", [](QuantizeFp8Args& a) { a.k = 0; });
  expect("gather_rows", [](QuantizeFp8Args& a) { a.gather_rows = reinterpret_cast<const int*>(buffer + 3073); });
  expect("num_tokens=-1", [](QuantizeFp8Args& a) { a.gather_rows = reinterpret_cast<const int*>(buffer + 3072), a.num_tokens = -1; });
  expect("num_tokens=5 without gather_rows", [](QuantizeFp8Args& a) { a.num_tokens = 5; });
  expect("valid", [](QuantizeFp8Args& a) { a.gather_rows = reinterpret_cast<const int*>(buffer + 3072), a.num_tokens = 5; });
  auto slots = [](QuantizeFp8Args& a) { a.row_of_slot = reinterpret_cast<const int*>(buffer + 3072), a.top_k = 2, a.out_rows = 8; };
  expect("valid", slots);
  expect("row_of_slot", [&](QuantizeFp8Args& a) { slots(a), a.row_of_slot = reinterpret_cast<const int*>(buffer + 3074); });
  expect("top_k=0 with row_of_slot", [&](QuantizeFp8Args& a) { slots(a), a.top_k = 0; });
  expect("out_rows=-1 with row_of_slot", [&](QuantizeFp8Args& a) { slots(a), a.out_rows = -1; });
  expect("gather_rows and row_of_slot both set",
         [&](QuantizeFp8Args& a) { slots(a), a.gather_rows = reinterpret_cast<const int*>(buffer + 3072), a.num_tokens = 5; });
  expect("without row_of_slot", [](QuantizeFp8Args& a) { a.top_k = 2; });
}

TEST_CASE("routing codegen renders both instantiations", "[routing]") {
  const TemplateStore& templates = TemplateStore::from_embedded();
  RoutingSpec s = RoutingSpec::for_route(shape(1, 128, 4), Arch{9, 0, true});
  auto src = generate_routing_source(s, templates);
  CHECK(src.source.find("moejit_route_fused") != std::string::npos);
  CHECK(src.source.find("moejit::kScoreTopkSoftmax") != std::string::npos);
  CHECK(src.file_name == fmt::format("moejit_routing_{}.cu", s.key().hex()));
  CombineArgs c;
  c.top_k = 8;
  c.output_type = DType::f32;
  auto comb = generate_routing_source(RoutingSpec::for_combine(c, Arch{9, 0, true}), templates);
  CHECK(comb.source.find("combine<moejit::kBF16, moejit::kF32, 8>") != std::string::npos);
}

TEST_CASE("route validates its arguments and names the one that is wrong", "[routing][validate]") {
  CHECK(route_error(valid_args()) == "valid");
  auto expect = [](const char* what, auto mutate) {
    RoutingArgs a = valid_args();
    mutate(a);
    INFO(what);
    CHECK_THAT(route_error(a), Catch::Contains(what));
  };
  expect("logits is null", [](RoutingArgs& a) { a.logits = nullptr; });
  expect("logits=", [](RoutingArgs& a) { a.logits = fake<void>(0x10002); });
  expect("logits_type=e4m3", [](RoutingArgs& a) { a.logits_type = DType::e4m3; });
  expect("num_tokens=-1", [](RoutingArgs& a) { a.num_tokens = -1; });
  expect("num_experts=0", [](RoutingArgs& a) { a.num_experts = 0; });
  expect("num_experts=1025", [](RoutingArgs& a) { a.num_experts = 1025; });
  expect("top_k=33", [](RoutingArgs& a) { a.top_k = 33; });
  expect("top_k=0", [](RoutingArgs& a) { a.top_k = 0; });
  expect("top_k=5", [](RoutingArgs& a) { a.num_experts = 4, a.top_k = 5; });
  expect("method.scaling_factor=", [](RoutingArgs& a) { a.method.scaling_factor = 0; });
  expect("method.expert_groups=8", [](RoutingArgs& a) { a.method.expert_groups = 8; });
  expect("correction_bias is given", [](RoutingArgs& a) { a.correction_bias = fake<float>(); });
  expect("method.expert_groups=3", [](RoutingArgs& a) { a.method = RoutingMethod::deepseek_v3(), a.method.expert_groups = 3; });
  expect("method.topk_groups=9", [](RoutingArgs& a) { a.method = RoutingMethod::deepseek_v3(), a.method.topk_groups = 9; });
  expect("top_k=20 exceeds", [](RoutingArgs& a) {
    a.method = RoutingMethod::deepseek_v3(), a.method.topk_groups = 1, a.top_k = 20;
  });
  expect("row_alignment=0", [](RoutingArgs& a) { a.row_alignment = 0; });
  expect("group_offsets is null", [](RoutingArgs& a) { a.group_offsets = nullptr; });
  expect("capacity=0", [](RoutingArgs& a) { a.layout = GroupLayout::masked; });
  expect("group_counts is null", [](RoutingArgs& a) { a.layout = GroupLayout::masked, a.capacity = 8; });
  expect("topk_ids is null", [](RoutingArgs& a) { a.topk_ids = nullptr; });
  expect("topk_weights is null", [](RoutingArgs& a) { a.topk_weights = nullptr; });
  expect("gather_rows is null", [](RoutingArgs& a) { a.gather_rows = nullptr; });
  expect("scatter_rows is null", [](RoutingArgs& a) { a.scatter_rows = nullptr; });
  expect("routing_weights is null", [](RoutingArgs& a) { a.routing_weights = nullptr; });
  expect("row_of_slot=", [](RoutingArgs& a) { a.row_of_slot = fake<int>(0x10001); });
  expect("workspace_bytes=", [](RoutingArgs& a) { a.workspace_bytes -= 4; });
  expect("workspace is null", [](RoutingArgs& a) { a.workspace = nullptr; });
  expect("routed rows", [](RoutingArgs& a) { a.layout = GroupLayout::masked, a.capacity = 1 << 30, a.group_counts = fake<int>(); });
  // The messages start with the call.
  RoutingArgs a = valid_args();
  a.top_k = 0;
  CHECK_THAT(route_error(a), Catch::StartsWith("route: top_k=0"));
}

TEST_CASE("combine validates its arguments and names the one that is wrong", "[routing][validate]") {
  auto rt = Runtime::offline(Arch{9, 0, true});
  auto error = [&](auto mutate) -> std::string {
    CombineArgs c;
    c.input = fake<void>();
    c.output = fake<void>();
    c.num_tokens = 16;
    c.top_k = 4;
    c.n = 2880;
    mutate(c);
    try {
      combine(*rt, c, nullptr);
    } catch (const InvalidArgument& e) {
      return e.what();
    } catch (const DriverError&) {
      return "valid";
    }
    return "no exception";
  };
  CHECK(error([](CombineArgs&) {}) == "valid");
  CHECK_THAT(error([](CombineArgs& c) { c.input = nullptr; }), Catch::Contains("input is null"));
  CHECK_THAT(error([](CombineArgs& c) { c.output = fake<void>(0x10008); }), Catch::Contains("output=0x10008 is not 16-byte aligned"));
  CHECK_THAT(error([](CombineArgs& c) { c.n = 12; }), Catch::Contains("n=12"));
  CHECK_THAT(error([](CombineArgs& c) { c.top_k = 0; }), Catch::Contains("top_k=0"));
  CHECK_THAT(error([](CombineArgs& c) { c.num_tokens = -2; }), Catch::Contains("num_tokens=-2"));
  CHECK_THAT(error([](CombineArgs& c) { c.input_type = DType::e4m3; }), Catch::Contains("input_type=e4m3"));
  CHECK_THAT(error([](CombineArgs& c) { c.output_type = DType::e4m3; }), Catch::Contains("output_type=e4m3"));
  CHECK_THAT(error([](CombineArgs& c) { c.topk_weights = fake<float>(0x10002); }), Catch::Contains("topk_weights="));
}

TEST_CASE("routing kernels compile through the runtime's cache, offline", "[routing][compile]") {
  auto rt = Runtime::offline(Arch{9, 0, true});
  RoutingSpec s = RoutingSpec::for_route(shape(1, 8, 2), Arch{9, 0, true});
  CacheOutcome first, second;
  auto k1 = compile_routing(*rt, s, &first);
  auto k2 = compile_routing(*rt, s, &second);
  CHECK(k1->cubin.substr(1, 3) == "ELF");
  CHECK(second == CacheOutcome::memory_hit);
  CHECK(k1->cache_key == k2->cache_key);
  // A second runtime reads it from disk (or rebuilds it when the disk cache is off): same bytes.
  auto rt2 = Runtime::offline(Arch{9, 0, true});
  CacheOutcome third;
  auto k3 = compile_routing(*rt2, s, &third);
  CHECK(third != CacheOutcome::memory_hit);
  CHECK(k3->cubin == k1->cubin);
  CHECK(k3->cache_key == k1->cache_key);
  // The combine kernel has its own entry.
  CombineArgs c;
  c.top_k = 2;
  auto k4 = compile_routing(*rt, RoutingSpec::for_combine(c, Arch{9, 0, true}));
  CHECK(!(k4->cache_key == k1->cache_key));
}

TEST_CASE("the routing sigmoid is within 2e-7 of 1/(1+exp(-x)) and saturates at the ends", "[routing]") {
  double worst = 0;
  for (double x = -85; x <= 90; x += 0.0137) {  // below -87 the result is subnormal
    float xf = static_cast<float>(x);
    double want = 1 / (1 + std::exp(-(double)xf));
    double got = reference::sigmoid_for_routing(xf);
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  CHECK(worst < 2e-7);
  CHECK(reference::sigmoid_for_routing(100.f) == 1.f);
  CHECK(reference::sigmoid_for_routing(-100.f) == 0.f);
  CHECK(reference::sigmoid_for_routing(0.f) == 0.5f);
  CHECK(std::isnan(reference::sigmoid_for_routing(NAN)));
}
