// ReLU kernels: one 16-byte vector per thread in a grid-stride loop, scalar fallback for misaligned views.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/relu/relu_cuda.h"

namespace trctl {

namespace {

template <class T>
__device__ __forceinline__ T relu1(T x) {
  const float f = to_f32(x);
  return (f > 0.0f || f != f) ? x : from_f32<T>(0.0f);  // keeps NaN, maps -0 and negatives to +0
}

// Chunks of V elements; only the last chunk may be partial and takes the scalar path.
template <class T, int V>
__global__ void relu_fwd_kernel(const T* x, T* y, int64_t n) {
  const int64_t chunks = (n + V - 1) / V;
  for (int64_t c = grid_thread_index(); c < chunks; c += grid_thread_count()) {
    const int64_t base = c * V;
    if (base + V <= n) {
      Pack<T, V> p = pack_load<V>(x + base);
#pragma unroll
      for (int j = 0; j < V; ++j) p.v[j] = relu1(p.v[j]);
      pack_store<V>(y + base, p);
    } else {
      for (int64_t i = base; i < n; ++i) y[i] = relu1(x[i]);
    }
  }
}

template <class T, int V>
__global__ void relu_bwd_kernel(const T* __restrict__ y, const T* dy, T* dx, int64_t n) {
  const int64_t chunks = (n + V - 1) / V;
  const T zero = from_f32<T>(0.0f);
  for (int64_t c = grid_thread_index(); c < chunks; c += grid_thread_count()) {
    const int64_t base = c * V;
    if (base + V <= n) {
      const Pack<T, V> py = pack_load<V>(y + base);
      Pack<T, V> pg = pack_load<V>(dy + base);
#pragma unroll
      for (int j = 0; j < V; ++j) pg.v[j] = to_f32(py.v[j]) > 0.0f ? pg.v[j] : zero;
      pack_store<V>(dx + base, pg);
    } else {
      for (int64_t i = base; i < n; ++i) dx[i] = to_f32(y[i]) > 0.0f ? dy[i] : zero;
    }
  }
}

}  // namespace

Status relu_fwd_cuda(cudaStream_t stream, const void* x, void* y, int64_t n, GpuDType dtype) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "relu_fwd_cuda: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(x && y, "relu_fwd_cuda: null pointer");
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = kVec16<T>;
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    if (gpu_aligned(16, x, y)) {
      relu_fwd_kernel<T, V><<<elementwise_grid((n + V - 1) / V), kElementwiseBlock, 0, stream>>>(xs, ys, n);
    } else {
      relu_fwd_kernel<T, 1><<<elementwise_grid(n), kElementwiseBlock, 0, stream>>>(xs, ys, n);
    }
    return TRCTL_CUDA_LAUNCH_STATUS("relu_fwd_kernel");
  });
}

Status relu_bwd_cuda(cudaStream_t stream, const void* y, const void* dy, void* dx, int64_t n, GpuDType dtype) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "relu_bwd_cuda: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(y && dy && dx, "relu_bwd_cuda: null pointer");
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = kVec16<T>;
    const T* ys = static_cast<const T*>(y);
    const T* gs = static_cast<const T*>(dy);
    T* out = static_cast<T*>(dx);
    if (gpu_aligned(16, y, dy, dx)) {
      relu_bwd_kernel<T, V><<<elementwise_grid((n + V - 1) / V), kElementwiseBlock, 0, stream>>>(ys, gs, out, n);
    } else {
      relu_bwd_kernel<T, 1><<<elementwise_grid(n), kElementwiseBlock, 0, stream>>>(ys, gs, out, n);
    }
    return TRCTL_CUDA_LAUNCH_STATUS("relu_bwd_kernel");
  });
}

}  // namespace trctl
