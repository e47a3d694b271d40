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
// and GPU code so that both scan windows in the same order.
struct PoolWindow {
  int64_t h0, h1, w0, w1;
};
#if defined(__CUDACC__)
__host__ __device__
#endif
inline PoolWindow pool2d_window(const Pool2dGeom& g, int64_t p, int64_t q) {
  const int64_t hs = p * g.sh - g.ph, ws = q * g.sw - g.pw;
  PoolWindow r;
  r.h0 = hs < 0 ? 0 : hs;
  r.w0 = ws < 0 ? 0 : ws;
  r.h1 = hs + g.kh < g.h ? hs + g.kh : g.h;
  r.w1 = ws + g.kw < g.w ? ws + g.kw : g.w;
  return r;
}

// The output windows [p0, p1) x [q0, q1) that contain input element (h, w): the gather form of the backward.
struct PoolCover {
  int64_t p0, p1, q0, q1;
};
#if defined(__CUDACC__)
__host__ __device__
#endif
inline PoolCover pool2d_cover(const Pool2dGeom& g, int64_t h, int64_t w) {
  // Window p spans padded rows [p*sh, p*sh + kh); padded row of h is h + ph.
  const int64_t hp = h + g.ph, wp = w + g.pw;
  PoolCover r;
  r.p0 = hp < g.kh ? 0 : (hp - g.kh) / g.sh + 1;
  r.q0 = wp < g.kw ? 0 : (wp - g.kw) / g.sw + 1;
  r.p1 = hp / g.sh + 1 < g.p ? hp / g.sh + 1 : g.p;
  r.q1 = wp / g.sw + 1 < g.q ? wp / g.sw + 1 : g.q;
  return r;
}

}  // namespace trctl
