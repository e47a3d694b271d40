// Column sums: a block owns 32 adjacent columns; its 32 x 16 threads read rows in a coalesced pattern (a warp reads
// 32 consecutive columns of one row), each thread sums the rows r = ty, ty + 16, ... in order, and thread row 0
// adds the 16 partials in index order.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/bias_grad/bias_grad_cuda.h"

#include <algorithm>

namespace trctl {

namespace {

constexpr int kCols = 32, kRowGroups = 16;
// Two-pass sums (bias_grad_large_cuda): at most this many row blocks, each of at least this many rows.
constexpr int64_t kMaxSplitBlocks = 2048, kMinSplitRows = 512;

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

// Rows per block of the first pass of the two-pass sum, so that the partials stay a small (blocks, cols) matrix.
int64_t split_rows_per_block(int64_t rows) {
  const int64_t blocks = std::min<int64_t>(kMaxSplitBlocks, (rows + kMinSplitRows - 1) / kMinSplitRows);
  return (rows + blocks - 1) / blocks;
}

// Pass 1: block (x, y) sums rows [y * rpb, (y + 1) * rpb) of columns [32 x, 32 x + 32) in the same fixed order as
// bias_grad_kernel, into part (blocks, cols) f32.
template <class T>
__global__ void __launch_bounds__(kCols * kRowGroups)
    bias_grad_split_kernel(const T* __restrict__ dy, int64_t rows, int64_t cols, int64_t rpb,
                           float* __restrict__ part) {
  __shared__ float partial[kRowGroups][kCols + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kCols + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rpb, r1 = min(rows, r0 + rpb);
  float s = 0.0f;
  if (col < cols) {
    for (int64_t r = r0 + ty; r < r1; r += kRowGroups) s += to_f32(dy[r * cols + col]);
  }
  partial[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && col < cols) {
    float t = partial[0][tx];
#pragma unroll
    for (int k = 1; k < kRowGroups; ++k) t += partial[k][tx];
    part[static_cast<int64_t>(blockIdx.y) * cols + col] = t;
  }
}

}  // namespace

size_t bias_grad_workspace_bytes(int64_t rows, int64_t cols) {
  if (rows <= kMinSplitRows * 2) return 0;
  const int64_t rpb = split_rows_per_block(rows);
  return static_cast<size_t>((rows + rpb - 1) / rpb * cols) * sizeof(float);
}

Status bias_grad_large_cuda(cudaStream_t stream, const void* dy, GpuDType dy_type, int64_t rows, int64_t cols,
                            float* db, void* workspace, size_t workspace_bytes) {
  const size_t need = bias_grad_workspace_bytes(rows, cols);
  if (need == 0) return bias_grad_cuda(stream, dy, dy_type, rows, cols, 0, db, false);
  TRCTL_CUDA_ARG_CHECK(cols >= 1 && dy && db, "bias_grad_large_cuda: cols < 1 or null pointer");
  TRCTL_CUDA_ARG_CHECK(workspace && workspace_bytes >= need, "bias_grad_large_cuda: workspace too small");
  const int64_t rpb = split_rows_per_block(rows), blocks = (rows + rpb - 1) / rpb;
  float* part = static_cast<float*>(workspace);
  const dim3 block(kCols, kRowGroups);
  const dim3 grid(static_cast<unsigned>((cols + kCols - 1) / kCols), static_cast<unsigned>(blocks));
  Status st = dispatch_dtype(dy_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_grad_split_kernel<T><<<grid, block, 0, stream>>>(static_cast<const T*>(dy), rows, cols, rpb, part);
    return TRCTL_CUDA_LAUNCH_STATUS("bias_grad_split_kernel");
  });
  if (!st.ok()) return st;
  return bias_grad_cuda(stream, part, GpuDType::F32, blocks, cols, 0, db, false);  // pass 2: the partials
}

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
