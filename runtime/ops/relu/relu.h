// ReLU op, CPU reference: y = max(x, 0); backward dx = dy * (y > 0).
#pragma once
#include <cstdint>

namespace trctl {

template <class T>
void relu_fwd_cpu(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}

template <class T>
void relu_grad_cpu(const T* dy, const T* y, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
}

}  // namespace trctl
