// Linear op on the CPU through the blocked GEMM (runtime/cpu/gemm.h).
#include <algorithm>

#include "runtime/cpu/gemm.h"
#include "runtime/ops/linear/linear.h"

namespace trctl {

template <class T>
void linear_fwd_cpu(const T* x, const T* w, const T* b, T* y, int64_t n, int64_t k, int64_t m, bool relu,
                    ThreadPool* pool) {
  gemm(Trans::N, Trans::T, n, m, k, T(1), x, k, w, k, T(0), y, m, pool);
  if (!b && !relu) return;
  auto epilogue = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* row = y + r * m;
      if (b)
        for (int64_t j = 0; j < m; ++j) row[j] += b[j];
      if (relu)
        for (int64_t j = 0; j < m; ++j) row[j] = row[j] > T(0) ? row[j] : T(0);
    }
  };
  if (pool) pool->parallel_for(n, 16, epilogue);
  else epilogue(0, n);
}

template <class T>
void linear_grad_input_cpu(const T* dy, const T* w, T* dx, int64_t n, int64_t k, int64_t m, ThreadPool* pool) {
  gemm(Trans::N, Trans::N, n, k, m, T(1), dy, m, w, k, T(0), dx, k, pool);
}

template <class T>
void linear_grad_weight_cpu(const T* dy, const T* x, T* dw, int64_t n, int64_t k, int64_t m, ThreadPool* pool) {
  gemm(Trans::T, Trans::N, m, k, n, T(1), dy, m, x, k, T(0), dw, k, pool);
}

template <class T>
void linear_grad_bias_cpu(const T* dy, T* db, int64_t n, int64_t m, ThreadPool* pool) {
  auto cols = [&](int64_t c0, int64_t c1) {
    for (int64_t j = c0; j < c1; ++j) db[j] = T(0);
    for (int64_t r = 0; r < n; ++r) {
      const T* row = dy + r * m;
      for (int64_t j = c0; j < c1; ++j) db[j] += row[j];
    }
  };
  if (pool) pool->parallel_for(m, 64, cols);
  else cols(0, m);
}

#define TRCTL_INSTANTIATE_LINEAR(T)                                                                        \
  template void linear_fwd_cpu<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t, bool,       \
                                  ThreadPool*);                                                            \
  template void linear_grad_input_cpu<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, ThreadPool*);  \
  template void linear_grad_weight_cpu<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, ThreadPool*); \
  template void linear_grad_bias_cpu<T>(const T*, T*, int64_t, int64_t, ThreadPool*);
TRCTL_INSTANTIATE_LINEAR(float)
TRCTL_INSTANTIATE_LINEAR(double)
#undef TRCTL_INSTANTIATE_LINEAR

}  // namespace trctl
