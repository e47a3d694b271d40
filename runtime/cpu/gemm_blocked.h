// gemm_blocked: the Goto/BLIS-style blocked GEMM driver behind gemm() (internal to runtime/cpu): argument
// bundle, packing of op(A)/op(B) panels, the macro-kernel around a register micro-kernel, and the split of C over
// threads. Also declares the per-ISA float entry points (gemm_x86.cpp) and the ISA selection (gemm.cpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/util/thread_pool.h"
#include "runtime/cpu/gemm.h"

namespace trctl {

template <class T>
struct GemmArgs {
  Trans ta, tb;
  int64_t M, N, K;
  T alpha;
  const T* A;
  int64_t lda;
  const T* B;
  int64_t ldb;
  T beta;
  T* C;
  int64_t ldc;
};

// Cache blocks: an (mc, kc) block of op(A) is packed once per (kc, nc) block of op(B) and is meant to stay in L2;
// one (kc, NR) micro-panel of op(B) stays in L1 while the micro-kernel walks down the A block.
struct GemmBlocking {
  int64_t mc, kc, nc;
};

// c(MR,NR) = alpha * a(MR,kc) * b(kc,NR) + beta * c; beta == 0: c is not read. a[k*MR + i] and b[k*NR + j] are
// packed panels; c is row-major with leading dimension ldc. Sums over k in increasing order, one accumulator
// per element.
template <class T>
using GemmMicroKernel = void (*)(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, T alpha, T beta);

// Float kernels by instruction set; tests and benchmarks may run any supported one.
enum class GemmIsa { Generic, Avx2Fma, Avx512 };
GemmIsa gemm_isa_best();  // CPU feature check, done once
bool gemm_isa_supported(GemmIsa isa);
const char* gemm_isa_name(GemmIsa isa);
// gemm() for float with the given kernel (isa must be supported); gemm() itself uses gemm_isa_best().
void gemm_f32_isa(GemmIsa isa, const GemmArgs<float>& g, ThreadPool* pool);
// Blocked drivers with the x86 kernels (gemm_x86.cpp); g must be non-trivial (M, N, K > 0, alpha != 0).
void gemm_f32_avx2(const GemmArgs<float>& g, ThreadPool* pool);
void gemm_f32_avx512(const GemmArgs<float>& g, ThreadPool* pool);

namespace gemm_detail {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Splits n into ceil(n / max_step) near-equal steps, rounded up to a multiple of `multiple`.
inline int64_t even_step(int64_t n, int64_t max_step, int64_t multiple) {
  int64_t steps = ceil_div(n, max_step);
  return round_up(ceil_div(n, steps), multiple);
}

// dst[k*W + i] = src[k*stride + i] for i < w, 0 for w <= i < W: a panel whose W lines run along memory.
template <int W, class T>
void pack_contiguous(const T* src, int64_t stride, int64_t kc, int64_t w, T* dst) {
  if (w == W) {
    for (int64_t k = 0; k < kc; ++k)
      for (int i = 0; i < W; ++i) dst[k * W + i] = src[k * stride + i];
    return;
  }
  for (int64_t k = 0; k < kc; ++k)
    for (int i = 0; i < W; ++i) dst[k * W + i] = i < w ? src[k * stride + i] : T(0);
}

// dst[k*W + i] = src[i*stride + k] for i < w, 0 for w <= i < W: a panel whose W lines are rows of src (a
// transpose). Walks k in blocks so that each row is read a cache line at a time.
template <int W, class T>
void pack_strided(const T* src, int64_t stride, int64_t kc, int64_t w, T* dst) {
  constexpr int64_t kBlock = 64 / sizeof(T);
  for (int64_t k0 = 0; k0 < kc; k0 += kBlock) {
    const int64_t k1 = std::min(kc, k0 + kBlock);
    for (int64_t i = 0; i < w; ++i) {
      const T* s = src + i * stride;
      for (int64_t k = k0; k < k1; ++k) dst[k * W + i] = s[k];
    }
    for (int64_t i = w; i < W; ++i)
      for (int64_t k = k0; k < k1; ++k) dst[k * W + i] = T(0);
  }
}

// Packs rows [i0, i0+mc) x k [k0, k0+kc) of op(A) into MR-row panels, each (kc, MR) k-major, zero-padded.
template <int MR, class T>
void pack_a(const GemmArgs<T>& g, int64_t i0, int64_t mc, int64_t k0, int64_t kc, T* dst) {
  for (int64_t r = 0; r < mc; r += MR, dst += MR * kc) {
    const int64_t w = std::min<int64_t>(MR, mc - r);
    if (g.ta == Trans::N)
      pack_strided<MR>(g.A + (i0 + r) * g.lda + k0, g.lda, kc, w, dst);
    else
      pack_contiguous<MR>(g.A + k0 * g.lda + i0 + r, g.lda, kc, w, dst);
  }
}

// Packs k [k0, k0+kc) x columns [j0, j0+nc) of op(B) into NR-column panels, each (kc, NR), zero-padded.
template <int NR, class T>
void pack_b(const GemmArgs<T>& g, int64_t k0, int64_t kc, int64_t j0, int64_t nc, T* dst) {
  for (int64_t c = 0; c < nc; c += NR, dst += NR * kc) {
    const int64_t w = std::min<int64_t>(NR, nc - c);
    if (g.tb == Trans::N)
      pack_contiguous<NR>(g.B + k0 * g.ldb + j0 + c, g.ldb, kc, w, dst);
    else
      pack_strided<NR>(g.B + (j0 + c) * g.ldb + k0, g.ldb, kc, w, dst);
  }
}

// A partial (m < MR or n < NR) tile goes through a full-size scratch tile, so it sees the same arithmetic.
template <int MR, int NR, class T>
void edge_tile(GemmMicroKernel<T> ukr, int64_t kc, const T* a, const T* b, T* c, int64_t ldc, int64_t m,
               int64_t n, T alpha, T beta) {
  T tile[MR * NR] = {};
  if (beta != T(0))
    for (int64_t i = 0; i < m; ++i) std::copy(c + i * ldc, c + i * ldc + n, tile + i * NR);
  ukr(kc, a, b, tile, NR, alpha, beta);
  for (int64_t i = 0; i < m; ++i) std::copy(tile + i * NR, tile + i * NR + n, c + i * ldc);
}

// C[i0:i0+mc, j0:j0+nc] (+)= alpha * Apacked * Bpacked over one k block, tile by tile.
template <int MR, int NR, class T>
void macro_kernel(const GemmArgs<T>& g, GemmMicroKernel<T> ukr, const T* ap, const T* bp, int64_t i0, int64_t mc,
                  int64_t j0, int64_t nc, int64_t kc, T beta) {
  for (int64_t jr = 0; jr < nc; jr += NR) {
    const int64_t n = std::min<int64_t>(NR, nc - jr);
    const T* b = bp + jr * kc;
    for (int64_t ir = 0; ir < mc; ir += MR) {
      const int64_t m = std::min<int64_t>(MR, mc - ir);
      const T* a = ap + ir * kc;
      T* c = g.C + (i0 + ir) * g.ldc + j0 + jr;
      if (m == MR && n == NR)
        ukr(kc, a, b, c, g.ldc, g.alpha, beta);
      else
        edge_tile<MR, NR>(ukr, kc, a, b, c, g.ldc, m, n, g.alpha, beta);
    }
  }
}

// A 64-byte aligned scratch buffer of n elements.
template <class T>
class PackBuffer {
 public:
  explicit PackBuffer(int64_t n) : v_(static_cast<size_t>(n) + 64 / sizeof(T)) {}
  T* data() {
    auto p = reinterpret_cast<uintptr_t>(v_.data());
    return reinterpret_cast<T*>((p + 63) & ~uintptr_t(63));
  }

 private:
  std::vector<T> v_;
};

// Single-threaded blocked GEMM on rows [m0, m1) x columns [n0, n1) of C. m0 and n0 are multiples of MR and NR,
// and the k blocks depend on K only, so no element's arithmetic depends on how C was split.
template <int MR, int NR, class T>
void gemm_range(const GemmArgs<T>& g, const GemmBlocking& bl, GemmMicroKernel<T> ukr, int64_t m0, int64_t m1,
                int64_t n0, int64_t n1) {
  const int64_t kc_step = even_step(g.K, bl.kc, 1);
  const int64_t mc_step = even_step(m1 - m0, bl.mc, MR);
  const int64_t nc_step = even_step(n1 - n0, bl.nc, NR);
  PackBuffer<T> abuf(mc_step * kc_step), bbuf(nc_step * kc_step);
  for (int64_t jc = n0; jc < n1; jc += nc_step) {
    const int64_t nc = std::min(nc_step, n1 - jc);
    for (int64_t pc = 0; pc < g.K; pc += kc_step) {
      const int64_t kc = std::min(kc_step, g.K - pc);
      const T beta = pc == 0 ? g.beta : T(1);
      pack_b<NR>(g, pc, kc, jc, nc, bbuf.data());
      for (int64_t ic = m0; ic < m1; ic += mc_step) {
        const int64_t mc = std::min(mc_step, m1 - ic);
        pack_a<MR>(g, ic, mc, pc, kc, abuf.data());
        macro_kernel<MR, NR>(g, ukr, abuf.data(), bbuf.data(), ic, mc, jc, nc, kc, beta);
      }
    }
  }
}

}  // namespace gemm_detail

// Blocked GEMM with micro-kernel ukr (MR x NR tiles). Threads get contiguous ranges of whole MR rows or NR
// columns of C (the longer side), each packing its own panels; K is never split.
template <int MR, int NR, class T>
void gemm_blocked(const GemmArgs<T>& g, const GemmBlocking& bl, GemmMicroKernel<T> ukr, ThreadPool* pool) {
  using namespace gemm_detail;
  constexpr double kMinFlopsPerThread = 2e6;  // below this, waking a worker costs more than it saves
  const double flops = 2.0 * static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K);
  if (pool == nullptr || pool->size() == 1 || flops < 2 * kMinFlopsPerThread) {
    gemm_range<MR, NR>(g, bl, ukr, 0, g.M, 0, g.N);
    return;
  }
  const bool split_n = g.N >= g.M;
  const int64_t unit = split_n ? NR : MR;
  const int64_t extent = split_n ? g.N : g.M;
  const int64_t units = ceil_div(extent, unit);
  const auto grain = static_cast<int64_t>(kMinFlopsPerThread / (flops / static_cast<double>(units))) + 1;
  pool->parallel_for(units, grain, [&](int64_t b, int64_t e) {
    const int64_t lo = b * unit, hi = std::min(e * unit, extent);
    if (split_n)
      gemm_range<MR, NR>(g, bl, ukr, 0, g.M, lo, hi);
    else
      gemm_range<MR, NR>(g, bl, ukr, lo, hi, 0, g.N);
  });
}

}  // namespace trctl
