// Space-to-depth kernels (s2d_cuda.h; index math in s2d.h). The input transform dominates (z is about 1.4x x with
// C = 3, Cz = 16: ResNet-50's at batch 256 in f16 writes 108 MB): thread t handles z pixel t / G and its channels
// [8 (t % G), 8 (t % G) + 8), G = Cz / 8, so consecutive threads write consecutive 16-byte pieces (coalesced) and
// read the 2x2 input blocks of neighbouring pixels (contiguous along a row). The channel decode (block, c) is done
// once per thread, then stepped. The filter transforms are a few thousand elements: one thread per output element.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/conv2d/store8.cuh"
#include "runtime/ops/conv2d/s2d.h"
#include "runtime/ops/conv2d/s2d_cuda.h"

namespace trctl {
namespace {

template <class I>
struct S2dInputArgs {
  I h, w, c;             // input height, width, channels
  I hz, wz, cz;          // z height, width, channels
  I pad_h, pad_w;
  I c4, groups, total;   // real channels 4C; channel groups of 8 per pixel (Cz / 8); threads (pixels * groups)
};

template <class T, class I, bool kVecStore>
__global__ void s2d_input_kernel(const T* __restrict__ x, T* __restrict__ z, S2dInputArgs<I> a) {
  const I stride = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I t = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); t < a.total;
       t += stride) {
    const I pix = t / a.groups, j0 = (t - pix * a.groups) * 8;
    const I uv = pix / a.wz, v = pix - uv * a.wz;
    const I n = uv / a.hz, u = uv - n * a.hz;
    const T* xn = x + n * a.h * a.w * a.c;
    I blk = j0 / a.c;  // 2 bh + bw
    I c = j0 - blk * a.c;
    T vals[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      vals[e] = from_f32<T>(0.0f);
      if (j0 + e < a.c4) {
        const I ih = 2 * u + (blk >> 1) - a.pad_h, iw = 2 * v + (blk & 1) - a.pad_w;
        if (ih >= 0 && ih < a.h && iw >= 0 && iw < a.w) vals[e] = xn[(ih * a.w + iw) * a.c + c];
        if (++c == a.c) c = 0, ++blk;
      }
    }
    T* out = z + pix * a.cz + j0;
    store_run8<kVecStore>(out, vals);
  }
}

struct S2dFilterArgs {
  int64_t k, r, s, c;  // the original filter (K, R, S, C)
  int64_t r2, s2, cz;  // w2 (K, R2, S2, Cz)
};

// w2 (K, R2, S2, Cz) <- w (K, R, S, C): zero for taps past R, S and channels past 4C.
template <class T>
__global__ void s2d_filter_kernel(const T* __restrict__ w, T* __restrict__ w2, S2dFilterArgs a) {
  const int64_t total = a.k * a.r2 * a.s2 * a.cz;
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    const int64_t j = i % a.cz, kae = i / a.cz;
    const int64_t e = kae % a.s2, ka = kae / a.s2;
    const int64_t aa = ka % a.r2, k = ka / a.r2;
    T v = from_f32<T>(0.0f);
    if (j < 4 * a.c) {
      const int64_t blk = j / a.c, c = j - blk * a.c;
      const int64_t r = 2 * aa + (blk >> 1), s = 2 * e + (blk & 1);
      if (r < a.r && s < a.s) v = w[((k * a.r + r) * a.s + s) * a.c + c];
    }
    w2[i] = v;
  }
}

// dw (K, R, S, C) fp32 <- dw2 (K, R2, S2, Cz) of type T: the gather, widened (exact).
template <class T>
__global__ void s2d_filter_grad_kernel(const T* __restrict__ dw2, float* __restrict__ dw, S2dFilterArgs a) {
  const int64_t total = a.k * a.r * a.s * a.c;
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    const int64_t c = i % a.c, krs = i / a.c;
    const int64_t s = krs % a.s, kr = krs / a.s;
    const int64_t r = kr % a.r, k = kr / a.r;
    dw[i] = to_f32(dw2[((k * a.r2 + r / 2) * a.s2 + s / 2) * a.cz + (2 * (r % 2) + s % 2) * a.c + c]);
  }
}

template <class T, class I>
Status s2d_input_launch(cudaStream_t stream, const Conv2dGeom& g, const Conv2dGeom& zg, const void* x, void* z) {
  S2dInputArgs<I> a;
  a.h = static_cast<I>(g.h), a.w = static_cast<I>(g.w), a.c = static_cast<I>(g.c);
  a.hz = static_cast<I>(zg.h), a.wz = static_cast<I>(zg.w), a.cz = static_cast<I>(zg.c);
  a.pad_h = static_cast<I>(g.pad_h), a.pad_w = static_cast<I>(g.pad_w);
  a.c4 = static_cast<I>(4 * g.c), a.groups = static_cast<I>(zg.c / 8);
  const int64_t total = zg.n * zg.h * zg.w * (zg.c / 8);
  a.total = static_cast<I>(total);
  const unsigned grid = elementwise_grid(total);
  const T* xs = static_cast<const T*>(x);
  T* zs = static_cast<T*>(z);
  if (gpu_aligned(16, z)) s2d_input_kernel<T, I, true><<<grid, kElementwiseBlock, 0, stream>>>(xs, zs, a);
  else s2d_input_kernel<T, I, false><<<grid, kElementwiseBlock, 0, stream>>>(xs, zs, a);
  return TRCTL_CUDA_LAUNCH_STATUS("s2d_input_kernel");
}

S2dFilterArgs filter_args(const Conv2dGeom& g) {
  const Conv2dGeom zg = s2d_conv_geom(g);
  return S2dFilterArgs{g.k, g.r, g.s, g.c, zg.r, zg.s, zg.c};
}

}  // namespace

Status s2d_input_cuda(cudaStream_t stream, const Conv2dGeom& g, GpuDType t, const void* x, void* z) {
  TRCTL_CUDA_ARG_CHECK(g.p > 0 && g.q > 0 && s2d_conv_eligible(g),
                       "s2d_input_cuda: needs a finished geometry that s2d_conv_eligible accepts");
  TRCTL_CUDA_ARG_CHECK(x && z, "s2d_input_cuda: null pointer");
  const Conv2dGeom zg = s2d_conv_geom(g);
  // Every value the kernel forms is at most max(x's, z's element count) plus small terms.
  const int64_t limit = int64_t{1} << 30;
  const bool small = g.n * g.h * g.w * g.c < limit && zg.n * zg.h * zg.w * zg.c < limit &&
                     2 * zg.h + g.h < limit && 2 * zg.w + g.w < limit;
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return small ? s2d_input_launch<T, int32_t>(stream, g, zg, x, z)
                 : s2d_input_launch<T, int64_t>(stream, g, zg, x, z);
  });
}

Status s2d_filter_cuda(cudaStream_t stream, const Conv2dGeom& g, GpuDType t, const void* w, void* w2) {
  TRCTL_CUDA_ARG_CHECK(g.p > 0 && g.q > 0 && s2d_conv_eligible(g),
                       "s2d_filter_cuda: needs a finished geometry that s2d_conv_eligible accepts");
  TRCTL_CUDA_ARG_CHECK(w && w2, "s2d_filter_cuda: null pointer");
  const S2dFilterArgs a = filter_args(g);
  const unsigned grid = elementwise_grid(a.k * a.r2 * a.s2 * a.cz);
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    s2d_filter_kernel<T><<<grid, kElementwiseBlock, 0, stream>>>(static_cast<const T*>(w), static_cast<T*>(w2), a);
    return TRCTL_CUDA_LAUNCH_STATUS("s2d_filter_kernel");
  });
}

Status s2d_filter_grad_cuda(cudaStream_t stream, const Conv2dGeom& g, GpuDType t, const void* dw2, float* dw) {
  TRCTL_CUDA_ARG_CHECK(g.p > 0 && g.q > 0 && s2d_conv_eligible(g),
                       "s2d_filter_grad_cuda: needs a finished geometry that s2d_conv_eligible accepts");
  TRCTL_CUDA_ARG_CHECK(dw2 && dw, "s2d_filter_grad_cuda: null pointer");
  const S2dFilterArgs a = filter_args(g);
  const unsigned grid = elementwise_grid(a.k * a.r * a.s * a.c);
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    s2d_filter_grad_kernel<T><<<grid, kElementwiseBlock, 0, stream>>>(static_cast<const T*>(dw2), dw, a);
    return TRCTL_CUDA_LAUNCH_STATUS("s2d_filter_grad_kernel");
  });
}

}  // namespace trctl
