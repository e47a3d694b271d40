// Gradient accumulation kernel: 16-byte vectors (4 floats) per thread in a grid-stride loop when both pointers are
// aligned (the plan's regions always are), scalar otherwise.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/grad_accum/grad_accum_cuda.h"

namespace trctl {

namespace {

template <int V, bool Flush>
__global__ void grad_accum_kernel(float* __restrict__ g, float* __restrict__ acc, int64_t n) {
  const int64_t chunks = (n + V - 1) / V;
  for (int64_t c = grid_thread_index(); c < chunks; c += grid_thread_count()) {
    const int64_t base = c * V;
    if (base + V <= n) {
      Pack<float, V> pg = pack_load<V>(g + base), pa = pack_load<V>(acc + base);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float s = pg.v[j] + pa.v[j];
        if (Flush) {
          pg.v[j] = s;
          pa.v[j] = 0.0f;
        } else {
          pa.v[j] = s;
        }
      }
      if (Flush) pack_store<V>(g + base, pg);
      pack_store<V>(acc + base, pa);
    } else {
      for (int64_t i = base; i < n; ++i) {
        const float s = g[i] + acc[i];
        if (Flush) {
          g[i] = s;
          acc[i] = 0.0f;
        } else {
          acc[i] = s;
        }
      }
    }
  }
}

template <int V>
Status grad_accum_launch(cudaStream_t stream, float* g, float* acc, int64_t n, bool flush) {
  const unsigned grid = elementwise_grid((n + V - 1) / V);
  if (flush) {
    grad_accum_kernel<V, true><<<grid, kElementwiseBlock, 0, stream>>>(g, acc, n);
  } else {
    grad_accum_kernel<V, false><<<grid, kElementwiseBlock, 0, stream>>>(g, acc, n);
  }
  return TRCTL_CUDA_LAUNCH_STATUS("grad_accum_kernel");
}

}  // namespace

Status grad_accumulate_cuda(cudaStream_t stream, float* g, float* acc, int64_t n, bool flush) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "grad_accumulate_cuda: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(g && acc, "grad_accumulate_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(g + n <= acc || acc + n <= g, "grad_accumulate_cuda: gradients and accumulators overlap");
  if (gpu_aligned(16, g, acc)) return grad_accum_launch<kVec16<float>>(stream, g, acc, n, flush);
  return grad_accum_launch<1>(stream, g, acc, n, flush);
}

}  // namespace trctl
