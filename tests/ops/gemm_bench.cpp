// CPU gemm benchmark (hidden: run with `test_ops "[.bench]"`): GFLOP/s of the MLP's backprop shapes for 1 and 2
// threads and every float kernel this CPU supports, plus the double path. Prints only; asserts nothing on speed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/gemm_blocked.h"

namespace trctl {
namespace {

struct BenchShape {
  const char* name;
  Trans ta, tb;
  int64_t M, N, K;
};

// Best-of-reps seconds for one product (after one warm-up call).
template <class T, class Fn>
double best_seconds(int reps, Fn&& fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

template <class T>
std::vector<T> random_vector(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = static_cast<T>(u(rng));
  return v;
}

void bench_shape(const BenchShape& s, std::mt19937& rng) {
  const auto a = random_vector<float>(s.M * s.K, rng), b = random_vector<float>(s.K * s.N, rng);
  std::vector<float> c(static_cast<size_t>(s.M * s.N));
  const int64_t lda = s.ta == Trans::N ? s.K : s.M, ldb = s.tb == Trans::N ? s.N : s.K;
  const double gflop = 2e-9 * static_cast<double>(s.M * s.N * s.K);
  for (GemmIsa isa : {GemmIsa::Avx512, GemmIsa::Avx2Fma, GemmIsa::Generic}) {
    if (!gemm_isa_supported(isa)) continue;
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      const GemmArgs<float> g{s.ta, s.tb, s.M, s.N, s.K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.N};
      const double t = best_seconds<float>(20, [&] { gemm_f32_isa(isa, g, &pool); });
      std::printf("%-34s float %-9s %d thread(s): %7.1f GFLOP/s (%.3f ms)\n", s.name, gemm_isa_name(isa), threads,
                  gflop / t, t * 1e3);
    }
  }
  const auto ad = random_vector<double>(s.M * s.K, rng), bd = random_vector<double>(s.K * s.N, rng);
  std::vector<double> cd(static_cast<size_t>(s.M * s.N));
  ThreadPool one(1);
  const double t = best_seconds<double>(3, [&] {
    gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0, ad.data(), lda, bd.data(), ldb, 0.0, cd.data(), s.N, &one);
  });
  std::printf("%-34s double generic   1 thread(s): %7.1f GFLOP/s (%.3f ms)\n", s.name, gflop / t, t * 1e3);
}

}  // namespace

TEST_CASE("gemm benchmark: GFLOP/s of the MLP layer-1 shapes", "[.bench]") {
  const BenchShape shapes[] = {
      {"fwd Y=X*W^T [N,T] 200x1024x784", Trans::N, Trans::T, 200, 1024, 784},
      {"dX=dY*W [N,N] 200x784x1024", Trans::N, Trans::N, 200, 784, 1024},
      {"dW=dY^T*X [T,N] 1024x784x200", Trans::T, Trans::N, 1024, 784, 200},
  };
  std::mt19937 rng(3);
  std::printf("best float kernel on this CPU: %s\n", gemm_isa_name(gemm_isa_best()));
  for (const BenchShape& s : shapes) bench_shape(s, rng);
}

}  // namespace trctl
