// Test helpers: random tensors, central finite differences in float64, and error norms with the worst index.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace trctl::testing {

inline std::vector<double> random_vec(size_t n, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// d f / d x[i] for every i, by (f(x + h) - f(x - h)) / 2h.
inline std::vector<double> numeric_grad(const std::function<double()>& f, std::vector<double>& x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double fp = f();
    x[i] = keep - h;
    const double fm = f();
    x[i] = keep;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

struct Diff {
  double rel = 0;      // ||a - b|| / max(||b||, 1e-30)
  double max_abs = 0;
  size_t at = 0;
  std::string str() const {
    std::ostringstream os;
    os << "rel err " << rel << ", max abs diff " << max_abs << " at index " << at;
    return os.str();
  }
};

template <class A, class B>
Diff diff(const std::vector<A>& a, const std::vector<B>& b) {
  Diff d;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double e = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += e * e;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
    if (std::abs(e) > d.max_abs || std::isnan(e)) {
      d.max_abs = std::isnan(e) ? INFINITY : std::abs(e);
      d.at = i;
    }
  }
  d.rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
  if (a.size() != b.size()) d.rel = INFINITY;
  return d;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace trctl::testing
