// x86-64 float micro-kernels for gemm: AVX-512F (MR x 32) and AVX2+FMA (MR x 16), each compiled for its own
// target with function attributes (the rest of the binary stays baseline x86-64), plus their blocked drivers.
#include "runtime/cpu/gemm_blocked.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace trctl {
namespace {

// Accumulators acc[i][v] hold row i, columns 16v..16v+15 of the tile; the loops over i and v are unrolled so they
// live in zmm registers. One FMA per (k, i, v): each element is summed over k in order.
template <int MR>
__attribute__((target("avx512f,avx2,fma"))) void ukr_avx512(int64_t kc, const float* a, const float* b, float* c,
                                                            int64_t ldc, float alpha, float beta) {
  constexpr int NV = 2;
  __m512 acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k, a += MR, b += 16 * NV) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) {
      float* out = c + i * ldc + 16 * v;
      const __m512 r = beta == 0.f ? _mm512_mul_ps(va, acc[i][v])
                                   : _mm512_fmadd_ps(va, acc[i][v], _mm512_mul_ps(vb, _mm512_loadu_ps(out)));
      _mm512_storeu_ps(out, r);
    }
}

template <int MR>
__attribute__((target("avx2,fma"))) void ukr_avx2(int64_t kc, const float* a, const float* b, float* c,
                                                  int64_t ldc, float alpha, float beta) {
  constexpr int NV = 2;
  __m256 acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k, a += MR, b += 8 * NV) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) {
      float* out = c + i * ldc + 8 * v;
      const __m256 r = beta == 0.f ? _mm256_mul_ps(va, acc[i][v])
                                   : _mm256_fmadd_ps(va, acc[i][v], _mm256_mul_ps(vb, _mm256_loadu_ps(out)));
      _mm256_storeu_ps(out, r);
    }
}

}  // namespace

void gemm_f32_avx512(const GemmArgs<float>& g, ThreadPool* pool) {
  constexpr int MR = 12, NR = 32;
  gemm_blocked<MR, NR>(g, GemmBlocking{240, 256, 2048}, &ukr_avx512<MR>, pool);
}

void gemm_f32_avx2(const GemmArgs<float>& g, ThreadPool* pool) {
  constexpr int MR = 6, NR = 16;
  gemm_blocked<MR, NR>(g, GemmBlocking{144, 256, 2048}, &ukr_avx2<MR>, pool);
}

}  // namespace trctl

#else  // not x86: gemm_isa_best() never selects these.
#include <cstdlib>

namespace trctl {
void gemm_f32_avx512(const GemmArgs<float>&, ThreadPool*) { std::abort(); }
void gemm_f32_avx2(const GemmArgs<float>&, ThreadPool*) { std::abort(); }
}  // namespace trctl
#endif
