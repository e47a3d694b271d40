// Elementwise add (sums gradient contributions), CPU reference: out = a + b.
#pragma once
#include <cstdint>

namespace trctl {

template <class T>
void add_cpu(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace trctl
