// Argument checks for every public launch path. Each failure throws InvalidArgument
// naming the argument, its value and what was expected; nothing is launched.
#pragma once
#include <span>
#include <vector>

#include "moejit/runtime.hpp"

namespace moejit {

// Shape, pointer and type checks that need no device access.
void validate_args(const GroupedGemmArgs& args);
// Checks that the spec was built for these args (layout, dtypes).
void validate_args_match_spec(const GroupedGemmArgs& args, const KernelSpec& spec);
// Checks the per-group row description (offsets or counts); `groups` is its host copy.
void validate_groups(const GroupedGemmArgs& args, std::span<const int> groups);
inline void validate_groups(const GroupedGemmArgs& args, const std::vector<int>& groups) {
  validate_groups(args, std::span<const int>(groups));
}
// Per-group valid rows from the host copy of offsets/counts.
std::vector<int> group_rows_from(const GroupedGemmArgs& args, const std::vector<int>& groups);

}  // namespace moejit
