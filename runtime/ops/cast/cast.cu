// Cast kernel: 4 elements per thread (16-byte f32 loads, 8-byte f16/bf16 stores), scalar fallback when misaligned.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/cast/cast_cuda.h"

namespace trctl {

namespace {

template <class TS, class TD, bool kVec>
__global__ void cast_kernel(const TS* __restrict__ src, TD* __restrict__ dst, int64_t n) {
  const int64_t chunks = (n + 3) / 4;
  for (int64_t c = grid_thread_index(); c < chunks; c += grid_thread_count()) {
    const int64_t base = c * 4;
    if (kVec && base + 4 <= n) {
      const Pack<TS, 4> s = pack_load<4>(src + base);
      Pack<TD, 4> d;
#pragma unroll
      for (int j = 0; j < 4; ++j) d.v[j] = from_f32<TD>(to_f32(s.v[j]));
      pack_store<4>(dst + base, d);
    } else {
      for (int64_t i = base; i < n && i < base + 4; ++i) dst[i] = from_f32<TD>(to_f32(src[i]));
    }
  }
}

}  // namespace

Status cast_cuda(cudaStream_t stream, const void* src, GpuDType src_type, void* dst, GpuDType dst_type, int64_t n) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "cast_cuda: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(src && dst, "cast_cuda: null pointer");
  return dispatch_dtype(src_type, [&](auto ts) {
    using TS = typename decltype(ts)::type;
    return dispatch_dtype(dst_type, [&](auto td) {
      using TD = typename decltype(td)::type;
      const unsigned grid = elementwise_grid((n + 3) / 4);
      const TS* s = static_cast<const TS*>(src);
      TD* d = static_cast<TD*>(dst);
      if (gpu_aligned(4 * sizeof(TS), src) && gpu_aligned(4 * sizeof(TD), dst)) {
        cast_kernel<TS, TD, true><<<grid, kElementwiseBlock, 0, stream>>>(s, d, n);
      } else {
        cast_kernel<TS, TD, false><<<grid, kElementwiseBlock, 0, stream>>>(s, d, n);
      }
      return TRCTL_CUDA_LAUNCH_STATUS("cast_kernel");
    });
  });
}

}  // namespace trctl
