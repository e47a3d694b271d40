// gemm() entry points: argument checks, the trivial cases (empty C, K == 0, alpha == 0), the float kernel choice
// by CPU features, and the portable micro-kernel used for double and for float on CPUs without AVX2/FMA.
#include "runtime/cpu/gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "runtime/cpu/gemm_blocked.h"

namespace trctl {
namespace {

// Plain loops; the compiler vectorizes over j for the baseline ISA. Sizes keep acc within 16 SSE registers.
template <class T, int MR, int NR>
void ukr_generic(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, T alpha, T beta) {
  T acc[MR][NR] = {};
  for (int64_t k = 0; k < kc; ++k, a += MR, b += NR)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += a[i] * b[j];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      T& out = c[i * ldc + j];
      out = beta == T(0) ? alpha * acc[i][j] : alpha * acc[i][j] + beta * out;
    }
}

[[noreturn]] void gemm_invalid(const char* what) {
  std::fprintf(stderr, "trctl gemm: invalid arguments: %s\n", what);
  std::abort();
}

template <class T>
void gemm_check(const GemmArgs<T>& g) {
  if (g.M < 0 || g.N < 0 || g.K < 0) gemm_invalid("negative size");
  if (g.lda < std::max<int64_t>(1, g.ta == Trans::N ? g.K : g.M)) gemm_invalid("lda too small");
  if (g.ldb < std::max<int64_t>(1, g.tb == Trans::N ? g.N : g.K)) gemm_invalid("ldb too small");
  if (g.ldc < std::max<int64_t>(1, g.N)) gemm_invalid("ldc too small");
}

// C = beta * C (beta == 0: C = 0 without reading it). For K == 0 or alpha == 0.
template <class T>
void gemm_scale_c(const GemmArgs<T>& g) {
  for (int64_t i = 0; i < g.M; ++i) {
    T* row = g.C + i * g.ldc;
    for (int64_t j = 0; j < g.N; ++j) row[j] = g.beta == T(0) ? T(0) : g.beta * row[j];
  }
}

// Handles the checks and trivial cases; returns true when g still needs a real product.
template <class T>
bool gemm_prepare(const GemmArgs<T>& g) {
  gemm_check(g);
  if (g.M == 0 || g.N == 0) return false;
  if (g.K == 0 || g.alpha == T(0)) {
    gemm_scale_c(g);
    return false;
  }
  return true;
}

}  // namespace

namespace {
struct CpuFeatures {
  bool avx2_fma = false, avx512f = false;
};

// Read once; immutable afterwards.
const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    f.avx512f = f.avx2_fma && __builtin_cpu_supports("avx512f");
#endif
    return f;
  }();
  return features;
}
}  // namespace

GemmIsa gemm_isa_best() {
  if (cpu_features().avx512f) return GemmIsa::Avx512;
  if (cpu_features().avx2_fma) return GemmIsa::Avx2Fma;
  return GemmIsa::Generic;
}

bool gemm_isa_supported(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::Avx512: return cpu_features().avx512f;
    case GemmIsa::Avx2Fma: return cpu_features().avx2_fma;
    case GemmIsa::Generic: break;
  }
  return true;
}

const char* gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::Avx512: return "avx512f";
    case GemmIsa::Avx2Fma: return "avx2+fma";
    case GemmIsa::Generic: break;
  }
  return "generic";
}

void gemm_f32_isa(GemmIsa isa, const GemmArgs<float>& g, ThreadPool* pool) {
  if (!gemm_prepare(g)) return;
  switch (isa) {
    case GemmIsa::Avx512: return gemm_f32_avx512(g, pool);
    case GemmIsa::Avx2Fma: return gemm_f32_avx2(g, pool);
    case GemmIsa::Generic: break;
  }
  gemm_blocked<4, 8>(g, GemmBlocking{128, 256, 1024}, &ukr_generic<float, 4, 8>, pool);
}

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, ThreadPool* pool) {
  const GemmArgs<float> g{ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  gemm_f32_isa(gemm_isa_best(), g, pool);
}

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc, ThreadPool* pool) {
  const GemmArgs<double> g{ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  if (gemm_prepare(g)) gemm_blocked<4, 4>(g, GemmBlocking{128, 256, 1024}, &ukr_generic<double, 4, 4>, pool);
}

}  // namespace trctl
