// Elementwise add (+ optional ReLU): one 16-byte vector per thread in a grid-stride loop when all three pointers
// are aligned, scalar otherwise. No __restrict__: y may alias a or b, which is safe because each element is read
// before it is written by the same thread.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/add/add_cuda.h"

namespace trctl {

namespace {

template <class T, bool Relu>
__device__ __forceinline__ T add1(T a, T b) {
  const float s = to_f32(a) + to_f32(b);
  if (Relu) return from_f32<T>((s > 0.0f || s != s) ? s : 0.0f);  // keeps NaN, maps -0 and negatives to +0
  return from_f32<T>(s);
}

// Chunks of V elements; only the last chunk may be partial and takes the scalar path.
template <class T, int V, bool Relu>
__global__ void add_kernel(const T* a, const T* b, T* y, int64_t n) {
  const int64_t chunks = (n + V - 1) / V;
  for (int64_t c = grid_thread_index(); c < chunks; c += grid_thread_count()) {
    const int64_t base = c * V;
    if (base + V <= n) {
      const Pack<T, V> pa = pack_load<V>(a + base), pb = pack_load<V>(b + base);
      Pack<T, V> py;
#pragma unroll
      for (int j = 0; j < V; ++j) py.v[j] = add1<T, Relu>(pa.v[j], pb.v[j]);
      pack_store<V>(y + base, py);
    } else {
      for (int64_t i = base; i < n; ++i) y[i] = add1<T, Relu>(a[i], b[i]);
    }
  }
}

template <class T, int V>
Status add_launch(cudaStream_t s, const T* a, const T* b, T* y, int64_t n, bool relu) {
  const unsigned grid = elementwise_grid((n + V - 1) / V);
  if (relu) {
    add_kernel<T, V, true><<<grid, kElementwiseBlock, 0, s>>>(a, b, y, n);
  } else {
    add_kernel<T, V, false><<<grid, kElementwiseBlock, 0, s>>>(a, b, y, n);
  }
  return TRCTL_CUDA_LAUNCH_STATUS("add_kernel");
}

}  // namespace

Status add_cuda(cudaStream_t s, const void* a, const void* b, void* y, int64_t n, GpuDType t, bool relu) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "add_cuda: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(a && b && y, "add_cuda: null pointer");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* as = static_cast<const T*>(a);
    const T* bs = static_cast<const T*>(b);
    T* ys = static_cast<T*>(y);
    if (gpu_aligned(16, a, b, y)) return add_launch<T, kVec16<T>>(s, as, bs, ys, n, relu);
    return add_launch<T, 1>(s, as, bs, ys, n, relu);
  });
}

}  // namespace trctl
