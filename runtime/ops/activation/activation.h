// Activation op (ActKind, core/graph/act_loss.h): the scalar formulas, shared by the CPU reference below and the CUDA
// kernels (activation.cu, which compute in f32 whatever the storage), with PyTorch's forward and backward,
// boundary conventions included (aten/src/ATen/native/cpu/Activation.cpp and its CUDA twins, derivatives.yaml):
//
//   relu6       y = min(max(x, 0), 6)                 (hardtanh(x, 0, 6))
//               dx = (x <= 0 || x >= 6) ? 0 : dy       (hardtanh_backward: 0 at x = 0 and at x = 6)
//   leaky_relu  y = x > 0 ? x : s * x                  (s = negative_slope, default 0.01)
//               dx = x > 0 ? dy : s * dy               (slope s at x = 0)
//   elu         y = x <= 0 ? a * expm1(x) : x          (a = alpha, default 1.0)
//               dx = x <= 0 ? dy * a * exp(x) : dy     (elu_backward(is_result=false): a at x = 0)
//   silu        y = x / (1 + exp(-x))
//               dx = dy * s * (1 + x * (1 - s)),  s = 1 / (1 + exp(-x))
//   hardswish   y = x * min(max(x + 3, 0), 6) / 6
//               dx = x <= -3 ? 0 : x < 3 ? dy * (x / 3 + 0.5) : dy   (0 at x = -3, dy at x = 3: the outer
//               pieces' slopes, as torch 2.11 computes it -- checked by benchmarks/torch_check_ops.py; older
//               ATen kernels used x < -3 / x <= 3, i.e. -0.5 dy at -3 and 1.5 dy at 3)
//   sigmoid     y = 1 / (1 + exp(-x));   dx = dy * (1 - y) * y     (sigmoid_backward, from the output)
//   tanh        y = tanh(x);             dx = dy * (1 - y * y)     (tanh_backward, from the output)
//
// The backward reads the forward's OUTPUT for sigmoid and tanh, its INPUT for the others (act_grad_uses_output),
// as PyTorch's out-of-place rules do (nn.ELU(inplace=False) differentiates from the input too). pass_autodiff
// passes that value to ActivationGrad, so the memory planner keeps it live until the backward.
// NaN propagates through every forward. Fusion: cuBLASLt's GEMM epilogues cover ReLU and GELU (and their
// backward) only and cuDNN's fused convolution graphs are not used here, so these run as standalone elementwise
// kernels after the GEMM / convolution; no fusion pass touches them (the ReLU fusions are unchanged).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/graph/act_loss.h"

#if defined(__CUDACC__)
#define TRCTL_ACT_HD __host__ __device__ __forceinline__
#else
#define TRCTL_ACT_HD inline
#endif

namespace trctl {

// y = act(x); a = Attrs::act_param (negative_slope, alpha; ignored by the others).
template <class T>
TRCTL_ACT_HD T act_forward(ActKind k, T x, T a) {
  const T zero = T(0), one = T(1), three = T(3), six = T(6);
  switch (k) {
    case ActKind::Relu6: return x < zero ? zero : (x > six ? six : x);  // keeps NaN and -0 (as clamp)
    case ActKind::LeakyRelu: return x > zero ? x : x * a;
    case ActKind::Elu: return x <= zero ? a * std::expm1(x) : x;
    case ActKind::Silu: return x / (one + std::exp(-x));
    case ActKind::Hardswish: {
      T r = x + three;  // min(max(x + 3, 0), 6), NaN kept
      r = r < zero ? zero : (r > six ? six : r);
      return x * r / six;
    }
    case ActKind::Sigmoid: return one / (one + std::exp(-x));
    case ActKind::Tanh: return std::tanh(x);
  }
  return x;
}

// dx from dy and `saved`: the forward's output y for sigmoid and tanh, its input x for the others.
template <class T>
TRCTL_ACT_HD T act_backward(ActKind k, T dy, T saved, T a) {
  const T zero = T(0), one = T(1), three = T(3), six = T(6), half = T(0.5);
  const T x = saved, y = saved;
  switch (k) {
    case ActKind::Relu6: return (x <= zero || x >= six) ? zero : dy;
    case ActKind::LeakyRelu: return x > zero ? dy : dy * a;
    case ActKind::Elu: return x <= zero ? dy * a * std::exp(x) : dy;
    case ActKind::Silu: {
      const T s = one / (one + std::exp(-x));
      return dy * s * (one + x * (one - s));
    }
    case ActKind::Hardswish: return x <= -three ? zero : (x < three ? dy * (x / three + half) : dy);
    case ActKind::Sigmoid: return dy * (one - y) * y;
    case ActKind::Tanh: return dy * (one - y * y);
  }
  return dy;
}

// CPU reference over n elements in T (float for training, double for gradient checks). x may alias y.
template <class T>
void activation_fwd_cpu(ActKind k, double param, const T* x, T* y, int64_t n) {
  const T a = static_cast<T>(param);
  for (int64_t i = 0; i < n; ++i) y[i] = act_forward<T>(k, x[i], a);
}

// dx[i] = act'(...) dy[i]; saved = y for sigmoid/tanh, x otherwise (act_grad_uses_output). dy may alias dx.
template <class T>
void activation_grad_cpu(ActKind k, double param, const T* dy, const T* saved, T* dx, int64_t n) {
  const T a = static_cast<T>(param);
  for (int64_t i = 0; i < n; ++i) dx[i] = act_backward<T>(k, dy[i], saved[i], a);
}

}  // namespace trctl
