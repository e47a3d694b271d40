// Dropout op, CPU reference. The mask is never stored: element i of op `op_id` at training step `step` keeps its
// value when philox_uniform(philox4x32(i >> 2, step, op_id, RngPurpose::Dropout, seed).v[i & 3]) >= p, and the
// backward pass regenerates the same mask. Kept values are scaled by 1 / (1 - p) (computed in float).
#pragma once
#include <cstdint>

#include "core/util/philox.h"

namespace trctl {

inline bool dropout_keep(uint64_t seed, uint32_t op_id, uint32_t step, uint64_t i, float p) {
  Philox4 r = philox4x32(static_cast<uint32_t>(i >> 2), step, op_id, static_cast<uint32_t>(RngPurpose::Dropout),
                         static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return philox_uniform(r.v[i & 3]) >= p;
}

// x, y (n elements); dy, dx likewise.
template <class T>
void dropout_fwd_cpu(const T* x, T* y, int64_t n, float p, uint64_t seed, uint32_t op_id, uint32_t step) {
  const T scale = static_cast<T>(1.0f / (1.0f - p));
  for (int64_t i = 0; i < n; ++i) y[i] = dropout_keep(seed, op_id, step, i, p) ? x[i] * scale : T(0);
}

template <class T>
void dropout_grad_cpu(const T* dy, T* dx, int64_t n, float p, uint64_t seed, uint32_t op_id, uint32_t step) {
  dropout_fwd_cpu(dy, dx, n, p, seed, op_id, step);
}

}  // namespace trctl
