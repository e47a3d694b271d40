// AMP kernels: vectorised non-finite scan with a block vote, and the single-thread loss scale update.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/amp/amp_cuda.h"
#include "runtime/ops/amp/grad_scaler_device.cuh"

namespace trctl {

namespace {

template <class T>
__device__ __forceinline__ bool nonfinite(T x) {
  return !isfinite(to_f32(x));  // f16/bf16 inf and NaN stay inf and NaN in f32
}

template <class T, int V>
__global__ void nonfinite_kernel(const T* __restrict__ g, int64_t n, int32_t* found_inf) {
  // Already set for this step: nothing can change the result. The vote keeps the exit uniform per block (another
  // block may set the flag while this block's threads read it), as the barrier below requires.
  if (__syncthreads_or(*found_inf != 0)) return;
  bool bad = false;
  const int64_t chunks = (n + V - 1) / V;
  for (int64_t c = grid_thread_index(); c < chunks; c += grid_thread_count()) {
    const int64_t base = c * V;
    if (base + V <= n) {
      const Pack<T, V> p = pack_load<V>(g + base);
#pragma unroll
      for (int j = 0; j < V; ++j) bad |= nonfinite(p.v[j]);
    } else {
      for (int64_t i = base; i < n; ++i) bad |= nonfinite(g[i]);
    }
  }
  // Every thread reaches the vote (no early exit after the first check). Same value from any writer: no race.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1;
}

__global__ void grad_scaler_update_kernel(GradScalerState* s) { grad_scaler_update_device(s); }

__global__ void inject_nonfinite_kernel(const uint32_t* step, const int64_t* steps, int32_t count, float* g) {
  const int64_t now = static_cast<int64_t>(*step);
  for (int32_t i = 0; i < count; ++i)
    if (steps[i] == now) {
      g[0] = __int_as_float(0x7fc00000);  // quiet NaN
      return;
    }
}

}  // namespace

Status grad_check_nonfinite_cuda(cudaStream_t stream, const void* g, GpuDType dtype, int64_t n, int32_t* found_inf) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "grad_check_nonfinite_cuda: n < 0");
  TRCTL_CUDA_ARG_CHECK(found_inf != nullptr, "grad_check_nonfinite_cuda: null flag");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(g != nullptr, "grad_check_nonfinite_cuda: null gradient pointer");
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = kVec16<T>;
    const T* p = static_cast<const T*>(g);
    if (gpu_aligned(16, g)) {
      nonfinite_kernel<T, V><<<elementwise_grid((n + V - 1) / V), kElementwiseBlock, 0, stream>>>(p, n, found_inf);
    } else {
      nonfinite_kernel<T, 1><<<elementwise_grid(n), kElementwiseBlock, 0, stream>>>(p, n, found_inf);
    }
    return TRCTL_CUDA_LAUNCH_STATUS("nonfinite_kernel");
  });
}

Status grad_inject_nonfinite_cuda(cudaStream_t stream, const uint32_t* step, const int64_t* steps, int32_t count,
                                  float* g) {
  TRCTL_CUDA_ARG_CHECK(step != nullptr && g != nullptr && (count == 0 || steps != nullptr) && count >= 0,
                       "grad_inject_nonfinite_cuda: null pointer or negative count");
  inject_nonfinite_kernel<<<1, 1, 0, stream>>>(step, steps, count, g);
  return TRCTL_CUDA_LAUNCH_STATUS("inject_nonfinite_kernel");
}

Status grad_scaler_update_cuda(cudaStream_t stream, GradScalerState* s) {
  TRCTL_CUDA_ARG_CHECK(s != nullptr, "grad_scaler_update_cuda: null state");
  grad_scaler_update_kernel<<<1, 1, 0, stream>>>(s);
  return TRCTL_CUDA_LAUNCH_STATUS("grad_scaler_update_kernel");
}

}  // namespace trctl
