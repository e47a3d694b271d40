// Column sums: a block owns 32 adjacent columns; its 32 x 16 threads read rows in a coalesced pattern (a warp reads
// 32 consecutive columns of one row), each thread sums the rows r = ty, ty + 16, ... in order, and thread row 0
// adds the 16 partials in index order.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/bias_grad/bias_grad_cuda.h"

namespace trctl {

namespace {

constexpr int kCols = 32, kRowGroups = 16;

template <class T>
__global__ void __launch_bounds__(kCols * kRowGroups)
    bias_grad_kernel(const T* __restrict__ dy, int64_t rows, int64_t cols, int64_t ld, float* __restrict__ db,
                     bool accumulate) {
  __shared__ float partial[kRowGroups][kCols + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kCols + tx;
  float s = 0.0f;
  if (col < cols) {
    for (int64_t r = ty; r < rows; r += kRowGroups) s += to_f32(dy[r * ld + col]);
  }
  partial[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && col < cols) {
    float t = partial[0][tx];
#pragma unroll
    for (int k = 1; k < kRowGroups; ++k) t += partial[k][tx];
    db[col] = accumulate ? db[col] + t : t;
  }
}

}  // namespace

Status bias_grad_cuda(cudaStream_t stream, const void* dy, GpuDType dy_type, int64_t rows, int64_t cols, int64_t ld,
                      float* db, bool accumulate) {
  TRCTL_CUDA_ARG_CHECK(rows >= 0 && cols >= 1, "bias_grad_cuda: rows < 0 or cols < 1");
  if (ld == 0) ld = cols;
  TRCTL_CUDA_ARG_CHECK(ld >= cols, "bias_grad_cuda: ld < cols");
  TRCTL_CUDA_ARG_CHECK(db && (dy || rows == 0), "bias_grad_cuda: null pointer");
  const dim3 block(kCols, kRowGroups);
  const unsigned grid = static_cast<unsigned>((cols + kCols - 1) / kCols);
  return dispatch_dtype(dy_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_grad_kernel<T><<<grid, block, 0, stream>>>(static_cast<const T*>(dy), rows, cols, ld, db, accumulate);
    return TRCTL_CUDA_LAUNCH_STATUS("bias_grad_kernel");
  });
}

}  // namespace trctl
