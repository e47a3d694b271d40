// Fill kernels (16-byte stores when aligned) and the step counter.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/fill/fill_cuda.h"

namespace trctl {

namespace {

template <class T, int V>
__global__ void fill_kernel(T* __restrict__ p, int64_t n, T value) {
  const int64_t chunks = (n + V - 1) / V;
  for (int64_t c = grid_thread_index(); c < chunks; c += grid_thread_count()) {
    const int64_t base = c * V;
    if (base + V <= n) {
      Pack<T, V> v;
#pragma unroll
      for (int j = 0; j < V; ++j) v.v[j] = value;
      pack_store<V>(p + base, v);
    } else {
      for (int64_t i = base; i < n; ++i) p[i] = value;
    }
  }
}

__global__ void counter_add_kernel(uint32_t* counter, uint32_t delta) { *counter += delta; }

template <class T>
Status fill_launch(cudaStream_t stream, T* p, int64_t n, T value) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "fill: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(p != nullptr, "fill: null pointer");
  if (gpu_aligned(16, p)) {
    fill_kernel<T, 4><<<elementwise_grid((n + 3) / 4), kElementwiseBlock, 0, stream>>>(p, n, value);
  } else {
    fill_kernel<T, 1><<<elementwise_grid(n), kElementwiseBlock, 0, stream>>>(p, n, value);
  }
  return TRCTL_CUDA_LAUNCH_STATUS("fill_kernel");
}

}  // namespace

Status fill_f32_cuda(cudaStream_t stream, float* p, int64_t n, float value) { return fill_launch(stream, p, n, value); }
Status fill_i32_cuda(cudaStream_t stream, int32_t* p, int64_t n, int32_t value) {
  return fill_launch(stream, p, n, value);
}

Status zero_cuda(cudaStream_t stream, void* p, size_t bytes) {
  if (bytes == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(p != nullptr, "zero_cuda: null pointer");
  TRCTL_CUDA_TRY(cudaMemsetAsync(p, 0, bytes, stream));
  return ok_status();
}

Status counter_add_u32_cuda(cudaStream_t stream, uint32_t* counter, uint32_t delta) {
  TRCTL_CUDA_ARG_CHECK(counter != nullptr, "counter_add_u32_cuda: null counter");
  counter_add_kernel<<<1, 1, 0, stream>>>(counter, delta);
  return TRCTL_CUDA_LAUNCH_STATUS("counter_add_kernel");
}

}  // namespace trctl
