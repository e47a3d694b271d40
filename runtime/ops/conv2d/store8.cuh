// Internal to runtime/ops/conv2d/*.cu (the im2col and space-to-depth gathers): store_run8 writes a thread's run of
// 8 gathered elements to out[0..8), as 16-byte vector stores when VecStore (out 16-byte aligned), else element by
// element. The bits written are the same either way.
#pragma once
#include "runtime/cuda/device_utils.cuh"

namespace trctl {

template <bool VecStore, class T>
__device__ __forceinline__ void store_run8(T* out, const T (&vals)[8]) {
  if constexpr (VecStore) {
    constexpr int V = kVec16<T>;
#pragma unroll
    for (int b = 0; b < 8; b += V) {
      Pack<T, V> pk;
#pragma unroll
      for (int u = 0; u < V; ++u) pk.v[u] = vals[b + u];
      pack_store<V>(out + b, pk);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = vals[e];
  }
}

}  // namespace trctl
