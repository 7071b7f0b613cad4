#include "codegen/routing_codegen.hpp"

#include <fmt/format.h>

namespace moejit {
namespace {

const char* dtype_code(DType t) {
  switch (t) {
    case DType::bf16: return "moejit::kBF16";
    case DType::f16: return "moejit::kF16";
    case DType::f32: return "moejit::kF32";
    case DType::e4m3: return "moejit::kE4M3";
    case DType::mxfp4:
    case DType::nvfp4: break;  // never routing data: RoutingSpec::validate takes f32, bf16 or f16
  }
  return "?";
}

const char* score_code(RoutingScore s) {
  switch (s) {
    case RoutingScore::softmax_topk: return "moejit::kScoreSoftmaxTopk";
    case RoutingScore::topk_softmax: return "moejit::kScoreTopkSoftmax";
    case RoutingScore::sigmoid_topk: return "moejit::kScoreSigmoidTopk";
  }
  return "?";
}

}  // namespace

GeneratedSource generate_routing_source(const RoutingSpec& spec, const TemplateStore& templates) {
  spec.validate();
  GeneratedSource out;
  out.file_name = fmt::format("moejit_routing_{}.cu", spec.key().hex());
  if (spec.op == RoutingSpec::Op::quantize_fp8) {
    out.source = fmt::format(fmt::runtime(templates.file("quantize_fp8.cu.in")), fmt::arg("spec", spec.to_text()),
                             fmt::arg("type_in", dtype_code(spec.input)));
    return out;
  }
  if (spec.op == RoutingSpec::Op::combine) {
    out.source = fmt::format(fmt::runtime(templates.file("combine.cu.in")), fmt::arg("spec", spec.to_text()),
                             fmt::arg("type_in", dtype_code(spec.input)), fmt::arg("type_out", dtype_code(spec.output)),
                             fmt::arg("top_k", spec.top_k));
    return out;
  }
  out.source = fmt::format(fmt::runtime(templates.file("routing.cu.in")), fmt::arg("spec", spec.to_text()),
                           fmt::arg("logits", dtype_code(spec.logits)), fmt::arg("experts", spec.experts),
                           fmt::arg("top_k", spec.top_k), fmt::arg("score", score_code(spec.score)),
                           fmt::arg("renormalize", spec.renormalize ? "true" : "false"),
                           fmt::arg("groups", spec.expert_groups), fmt::arg("topk_groups", spec.topk_groups));
  return out;
}

}  // namespace moejit
