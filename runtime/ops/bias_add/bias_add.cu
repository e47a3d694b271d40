// Bias add kernel: each thread owns V adjacent columns (16-byte vectors when cols % V == 0 and y is aligned) of
// one row; the bias vector is read through the cache.
#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/bias_add/bias_add_cuda.h"

namespace trctl {
namespace {

template <class T, int V>
__global__ void bias_add_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t rows, int64_t cols) {
  const int64_t cv = cols / V, total = rows * cv;
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    const int64_t c0 = (i % cv) * V;
    Pack<T, V> v = pack_load<V>(y + i * V);
#pragma unroll
    for (int j = 0; j < V; ++j) v.v[j] = from_f32<T>(to_f32(v.v[j]) + to_f32(b[c0 + j]));
    pack_store<V>(y + i * V, v);
  }
}

}  // namespace

Status bias_add_cuda(cudaStream_t stream, void* y, const void* b, int64_t rows, int64_t cols, GpuDType t) {
  TRCTL_CUDA_ARG_CHECK(rows >= 0 && cols >= 1, "bias_add_cuda: bad sizes");
  if (rows == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(y && b, "bias_add_cuda: null pointer");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V16 = kVec16<T>;
    auto launch = [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      bias_add_kernel<T, V><<<elementwise_grid(rows * (cols / V)), kElementwiseBlock, 0, stream>>>(
          static_cast<T*>(y), static_cast<const T*>(b), rows, cols);
      return TRCTL_CUDA_LAUNCH_STATUS("bias_add_kernel");
    };
    if (cols % V16 == 0 && gpu_aligned(16, y)) return launch(std::integral_constant<int, V16>{});
    return launch(std::integral_constant<int, 1>{});
  });
}

}  // namespace trctl
