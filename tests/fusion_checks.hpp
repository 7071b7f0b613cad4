// The checks every fused-kernel GPU test makes on a finished launch (test_gpu_fusion.cpp,
// test_gpu_quant_fusion.cpp): no NaN or poison where a result belongs, nothing written where no
// row may write, ||out - ref|| / ||ref|| under the spec's bound, and no single element outside
// its own tolerance (elem.first |ref| + elem.second rms(ref)).
#pragma once

#include <utility>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "fusion_problem.hpp"

namespace moejit::test {

inline void check_fused_output(const FusedProblem& p, const char* what, double rel_bound, std::pair<double, double> elem) {
  const auto r = p.check(elem.first, elem.second);
  const int n_out = p.n_out();
  INFO(fmt::format("{} spec {} (n {} k {}): rel_err {:.2e} (bound {:.0e}) nan {} written_outside {} checked {} "
                   "elements_off {} (worst: row {} col {} got {} ref {}) scales_off {}",
                   what, p.spec.to_text(), p.n, p.k, r.rel_err, rel_bound, r.nan_where_written, r.written_outside,
                   r.checked, r.elements_off, r.worst / n_out, r.worst % n_out, r.worst_got, r.worst_ref, r.scales_off));
  CHECK(r.nan_where_written == 0);
  CHECK(r.written_outside == 0);
  CHECK(r.checked > 0);
  CHECK(r.rel_err < rel_bound);
  CHECK(r.elements_off == 0);
  CHECK(r.scales_off == 0);
}

}  // namespace moejit::test
