// Test helper: the relative 2-norm difference of two weight vectors, |a - b| / |b| (in double), which the
// backend-comparison tests (GPU vs CPU, accumulated vs full batch) hold to a tolerance.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace trctl::testing {

// a, b: the same layout (the comparisons REQUIRE equal sizes first); extra elements of the longer one are ignored.
inline double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace trctl::testing
