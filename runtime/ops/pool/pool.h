// 2-D pooling on NHWC tensors (max, average, global average): window geometry and the CPU references, with
// PyTorch's semantics (nn.MaxPool2d; nn.AvgPool2d with count_include_pad=True, ceil_mode=False;
// AdaptiveAvgPool2d(1)). Plain C++ so that the CUDA launchers, the graph and the tests share one geometry.
#pragma once
#include <cstdint>

namespace trctl {

struct Pool2dGeom {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input (N, H, W, C)
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  int64_t p = 0, q = 0;  // output (N, P, Q, C): P = (H + 2ph - kh)/sh + 1, Q likewise
};

// Fills p, q; returns false (and leaves them 0) when the output would be empty, a size is not positive, or the
// padding exceeds half the kernel (PyTorch's rule, which also guarantees that every window holds at least one
// real input element, so a max window never consists of padding only).
bool pool2d_geom_finish(Pool2dGeom& g);

// True when the windows tile the input exactly (stride = kernel, no padding, H = P kh, W = Q kw): the CUDA max-pool
// backward then runs its one-thread-per-window kernel, and the fused batch norm + pool kernels their tiling variants
// (which must match it bit for bit, so both ask this one function).
inline bool pool2d_windows_tile(const Pool2dGeom& g) {
  return g.sh == g.kh && g.sw == g.kw && g.ph == 0 && g.pw == 0 && g.h == g.p * g.kh && g.w == g.q * g.kw;
}

// Max over each window; padded positions never win (they count as -inf). A NaN in the window makes the output NaN,
// as in PyTorch. x (N, H, W, C), y (N, P, Q, C).
template <class T>
void maxpool2d_fwd_cpu(const Pool2dGeom& g, const T* x, T* y);

// dx (N, H, W, C) is overwritten; dy (N, P, Q, C), x (N, H, W, C) the forward input. Each window's gradient goes
// to its FIRST maximal element in window scan order (row-major over (kh, kw)); overlapping windows add up.
// With NaNs in a window the gradient goes to the last NaN, as PyTorch's update rule `v > max || isnan(v)` does; an
// all -inf window gives it to its first real element. (Checked against torch 2.11, CPU and CUDA, NCHW and
// channels_last; only torch's CUDA channels_last kernel differs, sending an all -inf window's gradient to (0, 0).)
template <class T>
void maxpool2d_grad_cpu(const Pool2dGeom& g, const T* dy, const T* x, T* dx);

// The argmax of every window as its offset inside the nominal (padded) window, (ih - (p sh - ph)) * kw +
// (iw - (q sw - pw)), with maxpool2d_grad_cpu's rule; idx (N, P, Q, C) u8 (kh * kw <= 256). The CUDA backend's
// max-pool backward reads these instead of searching every covering window again.
template <class T>
void maxpool2d_argmax_cpu(const Pool2dGeom& g, const T* x, uint8_t* idx);

// Average with count_include_pad=True: every window divides by kh*kw. x (N, H, W, C), y (N, P, Q, C).
template <class T>
void avgpool2d_fwd_cpu(const Pool2dGeom& g, const T* x, T* y);
// dx (N, H, W, C) overwritten from dy (N, P, Q, C).
template <class T>
void avgpool2d_grad_cpu(const Pool2dGeom& g, const T* dy, T* dx);

// Global average: x (N, HW, C) -> y (N, C), the mean over HW; grad: dx (N, HW, C) = dy / HW broadcast.
template <class T>
void global_avgpool_fwd_cpu(const T* x, T* y, int64_t n, int64_t hw, int64_t c);
template <class T>
void global_avgpool_grad_cpu(const T* dy, T* dx, int64_t n, int64_t hw, int64_t c);

// The valid input rows [h0, h1) x cols [w0, w1) of output window (p, q), padding clipped away; shared by the CPU
// and GPU code so that both scan windows in the same order. I: the index type (int64_t; the CUDA kernels use
// int32_t when every flat index fits, since 64-bit division dominates their time).
template <class I>
struct PoolWindowT {
  I h0, h1, w0, w1;
};
using PoolWindow = PoolWindowT<int64_t>;
template <class I>
#if defined(__CUDACC__)
__host__ __device__
#endif
inline PoolWindowT<I> pool2d_window(const Pool2dGeom& g, I p, I q) {
  const I hs = p * static_cast<I>(g.sh) - static_cast<I>(g.ph), ws = q * static_cast<I>(g.sw) - static_cast<I>(g.pw);
  const I kh = static_cast<I>(g.kh), kw = static_cast<I>(g.kw), h = static_cast<I>(g.h), w = static_cast<I>(g.w);
  PoolWindowT<I> r;
  r.h0 = hs < 0 ? 0 : hs;
  r.w0 = ws < 0 ? 0 : ws;
  r.h1 = hs + kh < h ? hs + kh : h;
  r.w1 = ws + kw < w ? ws + kw : w;
  return r;
}

// The output windows [p0, p1) x [q0, q1) that contain input element (h, w): the gather form of the backward.
template <class I>
struct PoolCoverT {
  I p0, p1, q0, q1;
};
using PoolCover = PoolCoverT<int64_t>;
template <class I>
#if defined(__CUDACC__)
__host__ __device__
#endif
inline PoolCoverT<I> pool2d_cover(const Pool2dGeom& g, I h, I w) {
  // Window p spans padded rows [p*sh, p*sh + kh); padded row of h is h + ph.
  const I kh = static_cast<I>(g.kh), kw = static_cast<I>(g.kw), sh = static_cast<I>(g.sh), sw = static_cast<I>(g.sw);
  const I np = static_cast<I>(g.p), nq = static_cast<I>(g.q);
  const I hp = h + static_cast<I>(g.ph), wp = w + static_cast<I>(g.pw);
  PoolCoverT<I> r;
  r.p0 = hp < kh ? 0 : (hp - kh) / sh + 1;
  r.q0 = wp < kw ? 0 : (wp - kw) / sw + 1;
  r.p1 = hp / sh + 1 < np ? hp / sh + 1 : np;
  r.q1 = wp / sw + 1 < nq ? wp / sw + 1 : nq;
  return r;
}

}  // namespace trctl
