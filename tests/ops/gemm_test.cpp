// Tests for the CPU gemm (runtime/cpu/gemm.h): values vs a naive double triple loop for all transposes, edge
// shapes, padded leading dimensions and alpha/beta combinations (every float kernel this CPU supports), NaN
// handling for beta == 0, zero-size dimensions, and bitwise identical results for 1..4 threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/gemm_blocked.h"

namespace trctl {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A row-major (rows, cols) matrix with leading dimension ld >= cols; the padding columns hold NaN so that any
// read of them poisons the result and any write to them is visible.
template <class T>
struct Mat {
  int64_t rows = 0, cols = 0, ld = 1;
  std::vector<T> v;
  Mat(int64_t r, int64_t c, int64_t pad, std::mt19937& rng) : rows(r), cols(c), ld(std::max<int64_t>(1, c + pad)) {
    v.assign(static_cast<size_t>(std::max<int64_t>(1, rows * ld)), static_cast<T>(kNaN));
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) at(i, j) = static_cast<T>(u(rng));
  }
  T& at(int64_t i, int64_t j) { return v[static_cast<size_t>(i * ld + j)]; }
  T at(int64_t i, int64_t j) const { return v[static_cast<size_t>(i * ld + j)]; }
};

struct Case {
  Trans ta, tb;
  int64_t M, N, K;
  double alpha, beta;
  int64_t pad;  // extra columns in A, B and C
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "ta=" << (c.ta == Trans::N ? 'N' : 'T') << " tb=" << (c.tb == Trans::N ? 'N' : 'T') << " M=" << c.M
    << " N=" << c.N << " K=" << c.K << " alpha=" << c.alpha << " beta=" << c.beta << " pad=" << c.pad;
  return s.str();
}

// Operands for one case: A stored (M,K) or (K,M), B (K,N) or (N,K), C (M,N), all random.
template <class T>
struct Operands {
  Mat<T> A, B, C;
  Operands(const Case& c, std::mt19937& rng)
      : A(c.ta == Trans::N ? c.M : c.K, c.ta == Trans::N ? c.K : c.M, c.pad, rng),
        B(c.tb == Trans::N ? c.K : c.N, c.tb == Trans::N ? c.N : c.K, c.pad, rng),
        C(c.M, c.N, c.pad, rng) {}
};

// ref = alpha * op(A) * op(B) + beta * C0 in double, dense (M, N); mag = |alpha| |op(A)| |op(B)| + |beta C0|,
// the size of the terms summed (used to floor the error denominator, see check_against).
struct Reference {
  std::vector<double> ref, mag;
};

template <class T>
Reference reference(const Case& c, const Operands<T>& op) {
  const auto size = static_cast<size_t>(c.M * c.N);
  Reference r{std::vector<double>(size), std::vector<double>(size)};
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double s = 0, m = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double a = c.ta == Trans::N ? op.A.at(i, k) : op.A.at(k, i);
        const double b = c.tb == Trans::N ? op.B.at(k, j) : op.B.at(j, k);
        s += a * b;
        m += std::fabs(a * b);
      }
      const double c0 = c.beta == 0 ? 0.0 : c.beta * static_cast<double>(op.C.at(i, j));
      r.ref[static_cast<size_t>(i * c.N + j)] = c.alpha * s + c0;
      r.mag[static_cast<size_t>(i * c.N + j)] = std::fabs(c.alpha) * m + std::fabs(c0);
    }
  return r;
}

// Norm-wise relative error ||C - ref|| / ||ref|| (Frobenius) must be <= tol; reports the max abs difference and
// where it is, and checks that the padding of C was not written. The denominator is floored at
// ||mag|| / sqrt(K), the typical size of a sum of K random-sign terms, so that a result that merely cancels to
// near zero (e.g. a single 1x1 dot product) is not held to an ill-conditioned relative bound.
template <class T>
void check_against(const Case& c, const Mat<T>& C, const Reference& r, double tol) {
  double err2 = 0, ref2 = 0, mag2 = 0, max_abs = 0;
  int64_t max_i = 0, max_j = 0, pad_written = 0;
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c.N; ++j) {
      const size_t at = static_cast<size_t>(i * c.N + j);
      const double d = std::fabs(static_cast<double>(C.at(i, j)) - r.ref[at]);
      err2 += d * d;
      ref2 += r.ref[at] * r.ref[at];
      mag2 += r.mag[at] * r.mag[at];
      if (!(d <= max_abs)) max_abs = d, max_i = i, max_j = j;  // also catches NaN
    }
    for (int64_t j = c.N; j < C.ld; ++j) pad_written += std::isnan(C.at(i, j)) ? 0 : 1;
  }
  const double denom = std::max({std::sqrt(ref2), std::sqrt(mag2 / std::max<double>(1, c.K)), 1e-300});
  const double rel = std::sqrt(err2) / denom;
  INFO(describe(c) << ": rel err " << rel << ", max abs diff " << max_abs << " at (" << max_i << ", " << max_j
                   << ")");
  CHECK(rel <= tol);
  CHECK(pad_written == 0);
}

template <class T>
void run_case(const Case& c, std::mt19937& rng, double tol, GemmIsa isa, ThreadPool* pool) {
  Operands<T> op(c, rng);
  const Reference ref = reference(c, op);
  const auto alpha = static_cast<T>(c.alpha), beta = static_cast<T>(c.beta);
  if constexpr (std::is_same_v<T, float>) {
    const GemmArgs<float> g{c.ta, c.tb, c.M, c.N, c.K, alpha, op.A.v.data(), op.A.ld, op.B.v.data(), op.B.ld,
                            beta, op.C.v.data(), op.C.ld};
    gemm_f32_isa(isa, g, pool);
  } else {
    gemm(c.ta, c.tb, c.M, c.N, c.K, alpha, op.A.v.data(), op.A.ld, op.B.v.data(), op.B.ld, beta, op.C.v.data(),
         op.C.ld, pool);
  }
  INFO("kernel " << (std::is_same_v<T, float> ? gemm_isa_name(isa) : "double"));
  check_against(c, op.C, ref, tol);
}

struct Shape {
  int64_t M, N, K;
};

// Edge sizes: ones, primes, K == 1, sizes around and beyond the micro-tile and cache block sizes.
const std::vector<Shape>& edge_shapes() {
  static const std::vector<Shape> shapes = {
      {1, 1, 1},    {1, 7, 13},    {7, 1, 13},   {13, 7, 1},    {1, 1, 300},   {7, 13, 257},
      {257, 13, 7}, {12, 32, 256}, {13, 33, 257}, {6, 16, 64},  {37, 100, 300}, {250, 70, 530},
      {3, 2100, 5}, {241, 17, 513}, {64, 64, 1},  {100, 1, 100}, {1, 100, 100}, {49, 95, 17}};
  return shapes;
}

template <class T>
void run_all_shapes(double tol, GemmIsa isa, ThreadPool* pool) {
  std::mt19937 rng(1234);
  const double alpha_beta[][2] = {{1.0, 0.0}, {0.5, 1.0}, {-1.5, 0.25}};
  for (const Shape& s : edge_shapes())
    for (Trans ta : {Trans::N, Trans::T})
      for (Trans tb : {Trans::N, Trans::T})
        for (const auto& ab : alpha_beta)
          for (int64_t pad : {0, 3}) run_case<T>({ta, tb, s.M, s.N, s.K, ab[0], ab[1], pad}, rng, tol, isa, pool);
}

std::vector<GemmIsa> supported_isas() {
  std::vector<GemmIsa> out;
  for (GemmIsa isa : {GemmIsa::Generic, GemmIsa::Avx2Fma, GemmIsa::Avx512})
    if (gemm_isa_supported(isa)) out.push_back(isa);
  return out;
}

// Runs one product with pools of 1..4 threads (and no pool) and requires bitwise identical C.
template <class T>
void check_thread_determinism(const Case& c, GemmIsa isa) {
  std::mt19937 rng(42);
  const Operands<T> op(c, rng);
  std::vector<std::vector<T>> results;
  for (int threads = 0; threads <= 4; ++threads) {
    ThreadPool pool(std::max(1, threads));
    std::vector<T> C = op.C.v;
    const auto alpha = static_cast<T>(c.alpha), beta = static_cast<T>(c.beta);
    ThreadPool* p = threads == 0 ? nullptr : &pool;
    if constexpr (std::is_same_v<T, float>)
      gemm_f32_isa(isa, {c.ta, c.tb, c.M, c.N, c.K, alpha, op.A.v.data(), op.A.ld, op.B.v.data(), op.B.ld, beta,
                         C.data(), op.C.ld}, p);
    else
      gemm(c.ta, c.tb, c.M, c.N, c.K, alpha, op.A.v.data(), op.A.ld, op.B.v.data(), op.B.ld, beta, C.data(),
           op.C.ld, p);
    results.push_back(std::move(C));
  }
  for (size_t t = 1; t < results.size(); ++t) {
    INFO(describe(c) << " kernel " << gemm_isa_name(isa) << ": " << t << " threads vs no pool");
    CHECK(std::memcmp(results[t].data(), results[0].data(), results[0].size() * sizeof(T)) == 0);
  }
}

}  // namespace

TEST_CASE("gemm float matches a double reference for all transposes, edge shapes and leading dimensions",
          "[gemm]") {
  for (GemmIsa isa : supported_isas()) run_all_shapes<float>(1e-5, isa, nullptr);
}

TEST_CASE("gemm float matches the reference when split over threads", "[gemm]") {
  ThreadPool pool(3);
  std::mt19937 rng(99);
  for (GemmIsa isa : supported_isas())
    for (Trans ta : {Trans::N, Trans::T})
      for (Trans tb : {Trans::N, Trans::T}) {
        run_case<float>({ta, tb, 131, 257, 200, 1.0, 0.0, 5}, rng, 1e-5, isa, &pool);
        run_case<float>({ta, tb, 301, 45, 190, 0.75, 1.0, 2}, rng, 1e-5, isa, &pool);
      }
}

TEST_CASE("gemm double matches a double reference to 1e-12 for all transposes and leading dimensions", "[gemm]") {
  run_all_shapes<double>(1e-12, GemmIsa::Generic, nullptr);
  ThreadPool pool(2);
  std::mt19937 rng(7);
  run_case<double>({Trans::T, Trans::N, 150, 170, 190, 1.0, 0.5, 1}, rng, 1e-12, GemmIsa::Generic, &pool);
}

TEST_CASE("gemm with beta == 0 never reads C: NaN in C does not propagate", "[gemm]") {
  std::mt19937 rng(5);
  for (int64_t K : {29, 530})  // one and several k blocks
    for (Trans ta : {Trans::N, Trans::T})
      for (Trans tb : {Trans::N, Trans::T}) {
        Operands<float> op({ta, tb, 37, 45, K, 1, 0, 2}, rng);
        for (float& x : op.C.v) x = std::numeric_limits<float>::quiet_NaN();
        gemm(ta, tb, 37, 45, K, 1.0f, op.A.v.data(), op.A.ld, op.B.v.data(), op.B.ld, 0.0f, op.C.v.data(),
             op.C.ld, nullptr);
        int64_t nans = 0;
        for (int64_t i = 0; i < 37; ++i)
          for (int64_t j = 0; j < 45; ++j) nans += std::isnan(op.C.at(i, j)) ? 1 : 0;
        CHECK(nans == 0);
      }
}

TEST_CASE("gemm with beta == 1 accumulates into C", "[gemm]") {
  std::mt19937 rng(6);
  Operands<float> op({Trans::N, Trans::N, 20, 30, 40, 1, 1, 0}, rng);
  const std::vector<float> c0 = op.C.v;
  std::vector<float> ab(op.C.v.size(), 0.0f);
  gemm(Trans::N, Trans::N, 20, 30, 40, 1.0f, op.A.v.data(), op.A.ld, op.B.v.data(), op.B.ld, 0.0f, ab.data(), 30,
       nullptr);
  gemm(Trans::N, Trans::N, 20, 30, 40, 1.0f, op.A.v.data(), op.A.ld, op.B.v.data(), op.B.ld, 1.0f, op.C.v.data(),
       30, nullptr);
  double max_abs = 0;
  for (size_t i = 0; i < c0.size(); ++i) max_abs = std::max(max_abs, std::fabs(double(op.C.v[i]) - (c0[i] + ab[i])));
  INFO("max abs diff vs C0 + A*B: " << max_abs);
  CHECK(max_abs <= 1e-5);
}

TEST_CASE("gemm with zero-size dimensions: empty C untouched, K == 0 gives beta * C", "[gemm]") {
  std::vector<float> C(12, 2.0f);
  const float one = 1.0f;
  gemm(Trans::N, Trans::N, 0, 4, 5, 1.0f, &one, 5, &one, 4, 0.0f, C.data(), 4, nullptr);
  gemm(Trans::T, Trans::N, 3, 0, 5, 1.0f, &one, 3, &one, 1, 0.0f, C.data(), 4, nullptr);
  for (float x : C) CHECK(x == 2.0f);
  gemm(Trans::N, Trans::T, 3, 4, 0, 1.0f, nullptr, 1, nullptr, 1, 0.5f, C.data(), 4, nullptr);
  for (float x : C) CHECK(x == 1.0f);
  std::vector<double> D(12, std::numeric_limits<double>::quiet_NaN());
  gemm(Trans::N, Trans::N, 3, 4, 0, 1.0, nullptr, 1, nullptr, 4, 0.0, D.data(), 4, nullptr);
  for (double x : D) CHECK(x == 0.0);
}

TEST_CASE("gemm with alpha == 0 reads neither A nor B", "[gemm]") {
  std::vector<float> A(6, std::numeric_limits<float>::quiet_NaN()), B(6, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> C(4, 3.0f);
  gemm(Trans::N, Trans::N, 2, 2, 3, 0.0f, A.data(), 3, B.data(), 2, 2.0f, C.data(), 2, nullptr);
  for (float x : C) CHECK(x == 6.0f);
}

TEST_CASE("gemm results are bitwise identical for 1, 2, 3 and 4 threads", "[gemm]") {
  const Shape shapes[] = {{200, 1024, 784}, {203, 517, 300}, {517, 203, 300}, {1024, 784, 200}};
  for (GemmIsa isa : supported_isas())
    for (const Shape& s : shapes)
      for (Trans ta : {Trans::N, Trans::T})
        for (Trans tb : {Trans::N, Trans::T})
          check_thread_determinism<float>({ta, tb, s.M, s.N, s.K, 1.0, 0.5, 1}, isa);
  for (Trans ta : {Trans::N, Trans::T})
    for (Trans tb : {Trans::N, Trans::T})
      check_thread_determinism<double>({ta, tb, 203, 157, 190, 1.0, 0.5, 1}, GemmIsa::Generic);
}

}  // namespace trctl
