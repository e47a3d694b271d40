// Linear (fully connected) op, CPU reference: Y = X W^T + b [ReLU], and its three backward pieces.
// Row-major; float (training) and double (finite-difference checks) instantiations.
#pragma once
#include <cstdint>

#include "core/util/thread_pool.h"

namespace trctl {

// X (N,K), W (M,K), b (M) or nullptr -> Y (N,M); relu: Y = max(Y, 0).
template <class T>
void linear_fwd_cpu(const T* x, const T* w, const T* b, T* y, int64_t n, int64_t k, int64_t m, bool relu,
                    ThreadPool* pool);
// dY (N,M), W (M,K) -> dX (N,K) = dY W
template <class T>
void linear_grad_input_cpu(const T* dy, const T* w, T* dx, int64_t n, int64_t k, int64_t m, ThreadPool* pool);
// dY (N,M), X (N,K) -> dW (M,K) = dY^T X
template <class T>
void linear_grad_weight_cpu(const T* dy, const T* x, T* dw, int64_t n, int64_t k, int64_t m, ThreadPool* pool);
// dY (N,M) -> db (M) = column sums of dY, summed over rows in order 0..N-1 (deterministic).
template <class T>
void linear_grad_bias_cpu(const T* dy, T* db, int64_t n, int64_t m, ThreadPool* pool);

}  // namespace trctl
