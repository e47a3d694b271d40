// im2col kernel (im2col_cuda.h). Thread t of the chunk handles row t / G and columns [8 (t % G), 8 (t % G) + 8),
// G = kc / 8: consecutive threads write consecutive 16-byte pieces of the output (coalesced), and read the input
// pixels of neighbouring windows (cached: with C = 3 the whole window of a row is a few hundred bytes). The column
// decode (r, s, c) is done once per thread, then stepped. Index type I: int32_t when every element index of x and
// of the full cols matrix is below 2^31 (64-bit division costs several times more instructions), else int64_t.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/conv2d/store8.cuh"
#include "runtime/ops/conv2d/im2col_cuda.h"

namespace trctl {
namespace {

template <class I>
struct Im2colArgs {
  I h, w, c, p, q, s;                    // input height, width, channels; output height, width; kernel width
  I stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  I crs, kc, groups;                     // real columns, columns, column groups of 8 per row (kc / 8)
  I row0, total;                         // first row of the chunk; threads of the chunk (rows * groups)
};

template <class T, class I, bool kVecStore>
__global__ void im2col_kernel(const T* __restrict__ x, T* __restrict__ cols, Im2colArgs<I> a) {
  const I stride = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I t = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); t < a.total;
       t += stride) {
    const I row = t / a.groups, j0 = (t - row * a.groups) * 8;
    const I grow = a.row0 + row;
    const I pq = grow / a.q, oq = grow - pq * a.q;
    const I n = pq / a.p, op = pq - n * a.p;
    const I h0 = op * a.stride_h - a.pad_h, w0 = oq * a.stride_w - a.pad_w;
    const T* xn = x + n * a.h * a.w * a.c;
    const I sc = a.s * a.c;
    I r = j0 / sc;
    I s = (j0 - r * sc) / a.c;
    I c = j0 - r * sc - s * a.c;
    T v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      v[e] = from_f32<T>(0.0f);
      if (j0 + e < a.crs) {
        const I ih = h0 + r * a.dil_h, iw = w0 + s * a.dil_w;
        if (ih >= 0 && ih < a.h && iw >= 0 && iw < a.w) v[e] = xn[(ih * a.w + iw) * a.c + c];
        if (++c == a.c) {
          c = 0;
          if (++s == a.s) s = 0, ++r;
        }
      }
    }
    T* out = cols + row * a.kc + j0;
    store_run8<kVecStore>(out, v);
  }
}

template <class T, class I>
Status im2col_launch(cudaStream_t stream, const Conv2dGeom& g, const void* x, int64_t row0, int64_t rows, int64_t kc,
                     void* cols) {
  Im2colArgs<I> a;
  a.h = static_cast<I>(g.h), a.w = static_cast<I>(g.w), a.c = static_cast<I>(g.c);
  a.p = static_cast<I>(g.p), a.q = static_cast<I>(g.q), a.s = static_cast<I>(g.s);
  a.stride_h = static_cast<I>(g.stride_h), a.stride_w = static_cast<I>(g.stride_w);
  a.pad_h = static_cast<I>(g.pad_h), a.pad_w = static_cast<I>(g.pad_w);
  a.dil_h = static_cast<I>(g.dil_h), a.dil_w = static_cast<I>(g.dil_w);
  a.crs = static_cast<I>(g.c * g.r * g.s), a.kc = static_cast<I>(kc), a.groups = static_cast<I>(kc / 8);
  a.row0 = static_cast<I>(row0), a.total = static_cast<I>(rows * (kc / 8));
  const unsigned grid = elementwise_grid(rows * (kc / 8));
  const T* xs = static_cast<const T*>(x);
  T* cs = static_cast<T*>(cols);
  if (gpu_aligned(16, cols)) im2col_kernel<T, I, true><<<grid, kElementwiseBlock, 0, stream>>>(xs, cs, a);
  else im2col_kernel<T, I, false><<<grid, kElementwiseBlock, 0, stream>>>(xs, cs, a);
  return TRCTL_CUDA_LAUNCH_STATUS("im2col_kernel");
}

}  // namespace

Status im2col_cuda(cudaStream_t stream, const Conv2dGeom& g, GpuDType t, const void* x, int64_t row0, int64_t rows,
                   int64_t kc, void* cols) {
  const int64_t all_rows = g.n * g.p * g.q, crs = g.c * g.r * g.s;
  TRCTL_CUDA_ARG_CHECK(g.groups == 1 && g.p > 0 && g.q > 0, "im2col_cuda: needs a finished geometry, groups 1");
  TRCTL_CUDA_ARG_CHECK(kc % 8 == 0 && kc >= crs, "im2col_cuda: kc must be a multiple of 8 and >= C*R*S");
  TRCTL_CUDA_ARG_CHECK(row0 >= 0 && rows >= 0 && row0 + rows <= all_rows, "im2col_cuda: rows outside N*P*Q");
  if (rows == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(x && cols, "im2col_cuda: null pointer");
  // Every value the kernel forms is at most max(x's element count, the whole cols matrix's) plus small terms.
  const int64_t limit = int64_t{1} << 30;
  const bool small = g.n * g.h * g.w * g.c < limit && all_rows * kc < limit && g.h + g.pad_h + g.r * g.dil_h < limit &&
                     g.w + g.pad_w + g.s * g.dil_w < limit;
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return small ? im2col_launch<T, int32_t>(stream, g, x, row0, rows, kc, cols)
                 : im2col_launch<T, int64_t>(stream, g, x, row0, rows, kc, cols);
  });
}

}  // namespace trctl
