// Argument checks for every public launch path. Each failure throws InvalidArgument
// naming the argument, its value and what was expected; nothing is launched.
#pragma once
#include <span>
#include <vector>

#include "moejit/runtime.hpp"

namespace moejit {

// Shape, pointer and type checks that need no device access.
void validate_args(const GroupedGemmArgs& args);
// Fusion pointers and counts against the fusions `f` (required exactly when the flag is set).
// Index ranges (gather_rows, scatter_rows) live on the device and are not checked.
void validate_fusion_args(const GroupedGemmArgs& args, const Fusion& f);
// Checks that the spec was built for these args (layout, dtypes, fusions and their pointers).
void validate_args_match_spec(const GroupedGemmArgs& args, const KernelSpec& spec);
// Checks the per-group row description (offsets or counts); `groups` is its host copy.
void validate_groups(const GroupedGemmArgs& args, std::span<const int> groups);
inline void validate_groups(const GroupedGemmArgs& args, const std::vector<int>& groups) {
  validate_groups(args, std::span<const int>(groups));
}
// Per-group valid rows from the host copy of offsets/counts.
std::vector<int> group_rows_from(const GroupedGemmArgs& args, const std::vector<int>& groups);

}  // namespace moejit
