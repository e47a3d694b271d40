// Gradient accumulation (train.accumulate_steps), CPU reference: a micro-batch step adds its gradients into the
// accumulators, the optimizer step's last micro-batch adds the accumulators into its gradients and clears them.
// Both are one pass over the whole gradient layout (the accumulators are a second copy of it, in the Grads region).
#pragma once
#include <cstdint>

namespace trctl {

// acc[i] = acc[i] + g[i]. g, acc (n).
template <class T>
void grad_accum_add_cpu(const T* g, T* acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] + g[i];
}

// g[i] = g[i] + acc[i]; acc[i] = 0. g, acc (n).
template <class T>
void grad_accum_flush_cpu(T* g, T* acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    g[i] = g[i] + acc[i];
    acc[i] = T(0);
  }
}

}  // namespace trctl
