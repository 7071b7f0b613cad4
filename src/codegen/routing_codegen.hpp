// Stage 2 for the routing kernels: RoutingSpec -> translation unit (routing.cu.in / combine.cu.in).
#pragma once
#include "codegen/codegen.hpp"
#include "moejit/routing.hpp"

namespace moejit {

// The spec must be valid (validate() is called and throws SpecError otherwise).
GeneratedSource generate_routing_source(const RoutingSpec& spec, const TemplateStore& templates);

}  // namespace moejit
