// RoutingSpec: what decides a routing kernel binary, and its canonical text.
#include <fmt/format.h>

#include "moejit/errors.hpp"
#include "moejit/routing.hpp"
#include "util/hash.hpp"

namespace moejit {
namespace {

std::string_view score_text(RoutingScore s) {
  switch (s) {
    case RoutingScore::softmax_topk: return "softmax_topk";
    case RoutingScore::topk_softmax: return "topk_softmax";
    case RoutingScore::sigmoid_topk: return "sigmoid_topk";
  }
  return "?";
}

[[noreturn]] void fail(const RoutingSpec& s, const std::string& why) {
  throw SpecError(fmt::format("routing spec '{}': {}", s.to_text(), why));
}

}  // namespace

RoutingSpec RoutingSpec::for_route(const RoutingArgs& a, const Arch& arch) {
  RoutingSpec s;
  s.op = Op::route;
  s.arch = arch;
  s.logits = a.logits_type;
  s.experts = a.num_experts;
  s.top_k = a.top_k;
  s.score = a.method.score;
  // topk_softmax weights sum to one: renormalizing them again would be a second binary for nothing.
  s.renormalize = a.method.renormalize && a.method.score != RoutingScore::topk_softmax;
  s.expert_groups = a.method.expert_groups;
  s.topk_groups = a.method.topk_groups;
  return s;
}

RoutingSpec RoutingSpec::for_combine(const CombineArgs& a, const Arch& arch) {
  RoutingSpec s;
  s.op = Op::combine;
  s.arch = arch;
  s.top_k = a.top_k;
  s.input = a.input_type;
  s.output = a.output_type;
  return s;
}

RoutingSpec RoutingSpec::for_quantize_fp8(const QuantizeFp8Args& a, const Arch& arch) {
  RoutingSpec s;
  s.op = Op::quantize_fp8;
  s.arch = arch;
  s.top_k = 1;  // unused; 1 keeps validate()'s range check meaningful for the other ops
  s.input = a.input_type;
  return s;
}

std::string RoutingSpec::to_text() const {
  if (op == Op::quantize_fp8) return fmt::format("routing:op=quantize_fp8,arch={},in={}", arch.to_text(), moejit::to_text(input));
  if (op == Op::combine)
    return fmt::format("routing:op=combine,arch={},in={},out={},topk={}", arch.to_text(), moejit::to_text(input),
                       moejit::to_text(output), top_k);
  return fmt::format("routing:op=route,arch={},logits={},experts={},topk={},score={},renorm={},groups={}x{}",
                     arch.to_text(), moejit::to_text(logits), experts, top_k, score_text(score), renormalize ? 1 : 0,
                     expert_groups, topk_groups);
}

Key128 RoutingSpec::key() const { return xxh3_128(to_text()); }

void RoutingSpec::validate() const {
  if (arch.sm() < 80) fail(*this, fmt::format("arch={} (routing kernels need sm_80 or newer)", arch.to_text()));
  if (top_k < 1 || top_k > 32) fail(*this, fmt::format("topk={} (expected 1..32)", top_k));
  auto storable = [](DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; };
  if (op == Op::quantize_fp8) {
    if (!storable(input)) fail(*this, fmt::format("in={} (expected bf16, f16 or f32)", moejit::to_text(input)));
    return;
  }
  if (op == Op::combine) {
    if (!storable(input)) fail(*this, fmt::format("in={} (expected bf16, f16 or f32)", moejit::to_text(input)));
    if (!storable(output)) fail(*this, fmt::format("out={} (expected bf16, f16 or f32)", moejit::to_text(output)));
    return;
  }
  if (!storable(logits)) fail(*this, fmt::format("logits={} (expected f32, bf16 or f16)", moejit::to_text(logits)));
  // One warp holds a token's scores in registers (32 per lane at most); the sort's shared
  // memory (9 ints per expert) stays under the 48 KiB a CTA gets without opting in.
  if (experts < 1 || experts > 1024) fail(*this, fmt::format("experts={} (expected 1..1024)", experts));
  if (top_k > experts) fail(*this, fmt::format("topk={} exceeds experts={}", top_k, experts));
  if (expert_groups == 1 && topk_groups == 1) return;
  if (score != RoutingScore::sigmoid_topk)
    fail(*this, fmt::format("groups={}x{}: group-limited top-k is implemented for score=sigmoid_topk only (expected 1x1)",
                            expert_groups, topk_groups));
  if (expert_groups < 1 || expert_groups > 32 || experts % expert_groups || experts / expert_groups < 2)
    fail(*this, fmt::format("groups={}: expected 1..32 groups that divide experts={} into groups of 2 or more",
                            expert_groups, experts));
  if (topk_groups < 1 || topk_groups > expert_groups)
    fail(*this, fmt::format("topk_groups={} (expected 1..expert_groups={})", topk_groups, expert_groups));
  if (top_k > topk_groups * (experts / expert_groups))
    fail(*this, fmt::format("topk={} exceeds the {} experts of the {} chosen groups", top_k,
                            topk_groups * (experts / expert_groups), topk_groups));
}

}  // namespace moejit
