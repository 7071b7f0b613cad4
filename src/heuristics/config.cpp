#include "heuristics/config.hpp"

#include <algorithm>

namespace moejit {

KernelSpec choose_spec(const GemmProblem& problem, const Arch& arch, int sm_count) {
  KernelSpec spec;
  spec.arch = arch;
  spec.layout = problem.layout;
  spec.a = spec.b = problem.ab_type;
  spec.c = problem.c_type;

  // Mean rows per non-empty group decides whether 128-row tiles are mostly filled.
  long long active = 0, rows = 0;
  for (int r : problem.group_rows)
    if (r > 0) ++active, rows += r;
  if (problem.group_rows.empty()) active = problem.num_groups, rows = problem.total_rows;
  double mean_rows = active ? double(rows) / double(active) : 0.0;

  spec.family = KernelFamily::portable;
  spec.tile = {mean_rows <= 64 ? 64 : 128, 128, 32};
  spec.warps_m = spec.tile.m == 64 ? 2 : 2;
  spec.warps_n = 4;
  spec.stages = arch.sm() == 86 || arch.sm() == 89 ? 3 : 4;
  // Many small, uneven groups: tiles vary in cost, so hand them out dynamically.
  long long tiles_estimate = (rows / spec.tile.m + active) * ((problem.n + spec.tile.n - 1) / spec.tile.n);
  spec.scheduler = tiles_estimate > 4LL * std::max(sm_count, 1) && problem.num_groups > 1 ? Scheduler::dynamic
                                                                                          : Scheduler::static_persistent;
  spec.validate();
  return spec;
}

}  // namespace moejit

namespace moejit {

std::vector<KernelSpec> heuristic_candidates(const Arch& arch) {
  std::vector<KernelSpec> out;
  for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked})
    for (DType ab : {DType::bf16, DType::f16})
      for (DType c : {DType::bf16, DType::f16, DType::f32})
        for (long long mean_rows : {8LL, 1024LL})
          for (int groups : {1, 64}) {
            std::vector<int> rows(groups, (int)mean_rows);
            GemmProblem p{layout, ab, c, groups, 4096, 4096, mean_rows * groups, rows};
            KernelSpec spec = choose_spec(p, arch, 132);
            if (std::find(out.begin(), out.end(), spec) == out.end()) out.push_back(spec);
          }
  return out;
}

}  // namespace moejit
