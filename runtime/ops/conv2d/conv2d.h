// 2-D convolution op, CPU reference: PyTorch nn.Conv2d semantics (cross-correlation, zero padding, stride,
// dilation, groups) on NHWC activations and KRSC weights; float (training) and double (finite-difference checks).
//
// Layouts (row-major):  x (N, H, W, C)   w (K, R, S, C/groups)   bias (K)   y (N, P, Q, K)
// Group g uses input channels [g*C/G, (g+1)*C/G) and produces output channels [g*K/G, (g+1)*K/G) with filters
// w[g*K/G .. (g+1)*K/G).  KRSC is cuDNN's NHWC filter format, so the CPU and CUDA backends share weight buffers.
#pragma once
#include <cstdint>
#include <string>

#include "core/util/thread_pool.h"

namespace trctl {

struct Conv2dGeom {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input (N, H, W, C)
  int64_t k = 0, r = 1, s = 1;         // out channels, kernel height, width
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1;
  int64_t p = 0, q = 0;                // output height, width (filled by conv2d_geom_finish)
};

// Fills p, q: P = (H + 2 pad_h - dil_h (R-1) - 1) / stride_h + 1 (likewise Q). False (with a reason in *why, which
// may be nullptr) for non-positive sizes, strides or dilations, negative padding, an empty output, or c/k not
// divisible by groups.
bool conv2d_geom_finish(Conv2dGeom& g, std::string* why);

// One line, e.g. "N=8 56x56 C=64 -> K=256 3x3 stride 1x1 pad 1x1 dil 1x1 groups 1 -> 56x56", for errors and logs.
std::string conv2d_geom_str(const Conv2dGeom& g);

// The CPU functions below require a finished geometry (conv2d_geom_finish true). All are deterministic: every
// output element is summed in one fixed order by one thread, whatever the pool size (pool may be nullptr). They
// must not be called from inside pool->parallel_for (the pool is not re-entrant).

// y (N,P,Q,K) = conv(x (N,H,W,C), w (K,R,S,C/G)) + bias (K) when bias != nullptr.
template <class T>
void conv2d_fwd_cpu(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y, ThreadPool* pool);
// dx (N,H,W,C) = d(sum y*dy)/dx from dy (N,P,Q,K) and w (K,R,S,C/G); dx is overwritten.
template <class T>
void conv2d_grad_input_cpu(const Conv2dGeom& g, const T* dy, const T* w, T* dx, ThreadPool* pool);
// dw (K,R,S,C/G) = d(sum y*dy)/dw from dy (N,P,Q,K) and x (N,H,W,C); dw is overwritten.
template <class T>
void conv2d_grad_weight_cpu(const Conv2dGeom& g, const T* dy, const T* x, T* dw, ThreadPool* pool);

}  // namespace trctl
