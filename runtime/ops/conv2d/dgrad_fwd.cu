// The data gradient's filter transform (dgrad_fwd_cuda.h; index math in dgrad_fwd.h): per tap, a K x C block of w
// (rows strided by R S C) transposed into a C x K block of wf (rows strided by R S K), through a 32 x 32 shared
// tile so that both the reads (along C) and the writes (along K) are coalesced. The values are copied as bits.
#include "runtime/cuda/cuda_check.h"
#include "runtime/ops/conv2d/dgrad_fwd.h"
#include "runtime/ops/conv2d/dgrad_fwd_cuda.h"

namespace trctl {
namespace {

constexpr int kTile = 32, kRows = 8;  // a block: 32 x 8 threads, each moving 4 elements of a 32 x 32 tile

// Block (x, y, z) = (C tile, K tile, tap of wf): wf[c][tap][k] = w[k][taps - 1 - tap][c] (tap = r S + s, so
// taps - 1 - tap is (R-1-r) S + (S-1-s)).
template <class B>
__global__ void dgrad_fwd_filter_kernel(const B* __restrict__ w, B* __restrict__ wf, int k, int c, int taps) {
  __shared__ B tile[kTile][kTile + 1];  // [k - k0][c - c0]
  const int tap = static_cast<int>(blockIdx.z), src = taps - 1 - tap;
  const int c0 = static_cast<int>(blockIdx.x) * kTile, k0 = static_cast<int>(blockIdx.y) * kTile;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (int j = ty; j < kTile; j += kRows) {
    const int kk = k0 + j, cc = c0 + tx;
    if (kk < k && cc < c) tile[j][tx] = w[(static_cast<int64_t>(kk) * taps + src) * c + cc];
  }
  __syncthreads();
  for (int j = ty; j < kTile; j += kRows) {
    const int cc = c0 + j, kk = k0 + tx;
    if (kk < k && cc < c) wf[(static_cast<int64_t>(cc) * taps + tap) * k + kk] = tile[tx][j];
  }
}

template <class B>
Status launch(cudaStream_t stream, const Conv2dGeom& g, const void* w, void* wf) {
  const dim3 block(kTile, kRows);
  const dim3 grid(static_cast<unsigned>((g.c + kTile - 1) / kTile), static_cast<unsigned>((g.k + kTile - 1) / kTile),
                  static_cast<unsigned>(g.r * g.s));
  dgrad_fwd_filter_kernel<B><<<grid, block, 0, stream>>>(static_cast<const B*>(w), static_cast<B*>(wf),
                                                         static_cast<int>(g.k), static_cast<int>(g.c),
                                                         static_cast<int>(g.r * g.s));
  return TRCTL_CUDA_LAUNCH_STATUS("dgrad_fwd_filter_kernel");
}

}  // namespace

Status dgrad_fwd_filter_cuda(cudaStream_t stream, const Conv2dGeom& g, GpuDType t, const void* w, void* wf) {
  TRCTL_CUDA_ARG_CHECK(g.p > 0 && g.q > 0 && dgrad_fwd_eligible(g),
                       "dgrad_fwd_filter_cuda: needs a finished geometry that dgrad_fwd_eligible accepts");
  TRCTL_CUDA_ARG_CHECK(w && wf, "dgrad_fwd_filter_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(g.r * g.s <= 65535 && (g.k + kTile - 1) / kTile <= 65535 && g.c < (int64_t{1} << 31),
                       "dgrad_fwd_filter_cuda: filter too large");
  return gpu_dtype_size(t) == 2 ? launch<uint16_t>(stream, g, w, wf) : launch<uint32_t>(stream, g, w, wf);
}

}  // namespace trctl
