// Channel copy kernel: one thread per output element (grid-stride); the source row is read in order, so reads
// are coalesced along channels (the channel counts here are small: 3 <-> 8).
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/channel_copy/channel_copy_cuda.h"

namespace trctl {
namespace {

template <class TS, class TD>
__global__ void channel_copy_kernel(const TS* __restrict__ src, int64_t c_src, TD* __restrict__ dst, int64_t c_dst,
                                    int64_t rows) {
  const int64_t total = rows * c_dst;
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    const int64_t r = i / c_dst, j = i - r * c_dst;
    dst[i] = j < c_src ? from_f32<TD>(to_f32(src[r * c_src + j])) : from_f32<TD>(0.0f);
  }
}

}  // namespace

Status channel_copy_cuda(cudaStream_t stream, const void* src, GpuDType src_type, int64_t c_src, void* dst,
                         GpuDType dst_type, int64_t c_dst, int64_t rows) {
  TRCTL_CUDA_ARG_CHECK(rows >= 0 && c_src >= 1 && c_dst >= 1, "channel_copy_cuda: bad sizes");
  if (rows == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(src && dst, "channel_copy_cuda: null pointer");
  return dispatch_dtype(src_type, [&](auto ts) {
    using TS = typename decltype(ts)::type;
    return dispatch_dtype(dst_type, [&](auto td) {
      using TD = typename decltype(td)::type;
      channel_copy_kernel<TS, TD><<<elementwise_grid(rows * c_dst), kElementwiseBlock, 0, stream>>>(
          static_cast<const TS*>(src), c_src, static_cast<TD*>(dst), c_dst, rows);
      return TRCTL_CUDA_LAUNCH_STATUS("channel_copy_kernel");
    });
  });
}

}  // namespace trctl
