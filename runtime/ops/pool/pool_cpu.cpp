// CPU references of the pooling ops (see pool.h), instantiated for float and double.
#include <cmath>
#include <limits>

#include "runtime/ops/pool/pool.h"

namespace trctl {

namespace {

// PyTorch's pooling_output_shape with ceil_mode=False: floor((in + 2 pad - k) / s) + 1, invalid when negative.
int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t pad) {
  const int64_t span = in + 2 * pad - k;
  return span < 0 ? 0 : span / s + 1;
}

// Index (row-major in the unpadded input plane) of the window's maximum, with PyTorch's update rule: a strictly
// greater value or any NaN takes over, so equal values keep the first and the last NaN wins.
template <class T>
int64_t window_argmax(const Pool2dGeom& g, const T* plane, int64_t p, int64_t q) {
  const PoolWindow win = pool2d_window(g, p, q);
  int64_t best = win.h0 * g.w + win.w0;
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    for (int64_t iw = win.w0; iw < win.w1; ++iw) {
      const T v = plane[(ih * g.w + iw) * g.c];
      if (v > m || std::isnan(v)) {
        m = v;
        best = ih * g.w + iw;
      }
    }
  }
  return best;
}

}  // namespace

bool pool2d_geom_finish(Pool2dGeom& g) {
  g.p = g.q = 0;
  if (g.n < 1 || g.h < 1 || g.w < 1 || g.c < 1) return false;
  if (g.kh < 1 || g.kw < 1 || g.sh < 1 || g.sw < 1 || g.ph < 0 || g.pw < 0) return false;
  if (g.ph > g.kh / 2 || g.pw > g.kw / 2) return false;
  const int64_t p = pool_out_size(g.h, g.kh, g.sh, g.ph), q = pool_out_size(g.w, g.kw, g.sw, g.pw);
  if (p < 1 || q < 1) return false;
  g.p = p;
  g.q = q;
  return true;
}

template <class T>
void maxpool2d_fwd_cpu(const Pool2dGeom& g, const T* x, T* y) {
  for (int64_t n = 0; n < g.n; ++n) {
    const T* xn = x + n * g.h * g.w * g.c;  // (H, W, C)
    for (int64_t p = 0; p < g.p; ++p) {
      for (int64_t q = 0; q < g.q; ++q) {
        T* yo = y + ((n * g.p + p) * g.q + q) * g.c;
        for (int64_t c = 0; c < g.c; ++c) yo[c] = xn[window_argmax(g, xn + c, p, q) * g.c + c];
      }
    }
  }
}

template <class T>
void maxpool2d_grad_cpu(const Pool2dGeom& g, const T* dy, const T* x, T* dx) {
  const int64_t plane = g.h * g.w * g.c;
  for (int64_t i = 0; i < g.n * plane; ++i) dx[i] = T(0);
  // Scatter in (p, q) order: each dx element receives its terms in the same order as the GPU's gather adds them.
  for (int64_t n = 0; n < g.n; ++n) {
    const T* xn = x + n * plane;
    T* dxn = dx + n * plane;
    for (int64_t p = 0; p < g.p; ++p) {
      for (int64_t q = 0; q < g.q; ++q) {
        const T* g_o = dy + ((n * g.p + p) * g.q + q) * g.c;
        for (int64_t c = 0; c < g.c; ++c) dxn[window_argmax(g, xn + c, p, q) * g.c + c] += g_o[c];
      }
    }
  }
}

template <class T>
void maxpool2d_argmax_cpu(const Pool2dGeom& g, const T* x, uint8_t* idx) {
  const int64_t plane = g.h * g.w * g.c;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t p = 0; p < g.p; ++p)
      for (int64_t q = 0; q < g.q; ++q) {
        uint8_t* out = idx + ((n * g.p + p) * g.q + q) * g.c;
        for (int64_t c = 0; c < g.c; ++c) {
          const int64_t flat = window_argmax(g, x + n * plane + c, p, q);  // ih * W + iw
          const int64_t ih = flat / g.w, iw = flat % g.w;
          out[c] = static_cast<uint8_t>((ih - (p * g.sh - g.ph)) * g.kw + (iw - (q * g.sw - g.pw)));
        }
      }
}

template <class T>
void avgpool2d_fwd_cpu(const Pool2dGeom& g, const T* x, T* y) {
  const T div = static_cast<T>(g.kh * g.kw);  // count_include_pad=True
  for (int64_t n = 0; n < g.n; ++n) {
    const T* xn = x + n * g.h * g.w * g.c;
    for (int64_t p = 0; p < g.p; ++p) {
      for (int64_t q = 0; q < g.q; ++q) {
        const PoolWindow win = pool2d_window(g, p, q);
        T* yo = y + ((n * g.p + p) * g.q + q) * g.c;
        for (int64_t c = 0; c < g.c; ++c) {
          T s = T(0);
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw) s += xn[(ih * g.w + iw) * g.c + c];
          yo[c] = s / div;
        }
      }
    }
  }
}

template <class T>
void avgpool2d_grad_cpu(const Pool2dGeom& g, const T* dy, T* dx) {
  const T div = static_cast<T>(g.kh * g.kw);
  const int64_t plane = g.h * g.w * g.c;
  for (int64_t i = 0; i < g.n * plane; ++i) dx[i] = T(0);
  for (int64_t n = 0; n < g.n; ++n) {
    T* dxn = dx + n * plane;
    for (int64_t p = 0; p < g.p; ++p) {
      for (int64_t q = 0; q < g.q; ++q) {
        const PoolWindow win = pool2d_window(g, p, q);
        const T* g_o = dy + ((n * g.p + p) * g.q + q) * g.c;
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw)
            for (int64_t c = 0; c < g.c; ++c) dxn[(ih * g.w + iw) * g.c + c] += g_o[c] / div;
      }
    }
  }
}

template <class T>
void global_avgpool_fwd_cpu(const T* x, T* y, int64_t n, int64_t hw, int64_t c) {
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t k = 0; k < c; ++k) {
      T s = T(0);
      for (int64_t i = 0; i < hw; ++i) s += x[(b * hw + i) * c + k];
      y[b * c + k] = s / static_cast<T>(hw);
    }
  }
}

template <class T>
void global_avgpool_grad_cpu(const T* dy, T* dx, int64_t n, int64_t hw, int64_t c) {
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < hw; ++i)
      for (int64_t k = 0; k < c; ++k) dx[(b * hw + i) * c + k] = dy[b * c + k] / static_cast<T>(hw);
}

#define TRCTL_POOL_INSTANTIATE(T)                                                              \
  template void maxpool2d_fwd_cpu<T>(const Pool2dGeom&, const T*, T*);                         \
  template void maxpool2d_grad_cpu<T>(const Pool2dGeom&, const T*, const T*, T*);              \
  template void maxpool2d_argmax_cpu<T>(const Pool2dGeom&, const T*, uint8_t*);                \
  template void avgpool2d_fwd_cpu<T>(const Pool2dGeom&, const T*, T*);                         \
  template void avgpool2d_grad_cpu<T>(const Pool2dGeom&, const T*, T*);                        \
  template void global_avgpool_fwd_cpu<T>(const T*, T*, int64_t, int64_t, int64_t);            \
  template void global_avgpool_grad_cpu<T>(const T*, T*, int64_t, int64_t, int64_t);
TRCTL_POOL_INSTANTIATE(float)
TRCTL_POOL_INSTANTIATE(double)
#undef TRCTL_POOL_INSTANTIATE

}  // namespace trctl
