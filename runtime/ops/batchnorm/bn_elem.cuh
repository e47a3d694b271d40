// Per-element batch-norm arithmetic that the batch-norm kernels (batchnorm_kernels.cuh) and kernels fusing a batch
// norm's step into another op share (runtime/ops/conv2d/fewc_wgrad.cu computes the backward's dx while staging its
// dy; the wgmma conv's ring kernels apply its input's batch norm while staging it): ApplyConsts / apply_affine (the
// apply pass's affine), apply_relu, relu_kept (the fused ReLU's mask recomputed from x; relu_kept_range and
// in_range2: the same mask as a range of x, tested on packed pairs), relu_grad_in (the backward's masked incoming
// gradient), BnBwdConsts / bn_bwd_dx / bn_bwd_dx_f32 (the backward's dx of one element).
// One definition each, so that a fused step's values are bitwise the batch norm's own. Internal linkage (an
// anonymous namespace), device code only.
#pragma once
#include <cstdint>
#include <type_traits>

#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/batchnorm/relu_kept_range.h"

namespace trctl {
namespace {

// The per-channel constants of the apply pass, y = relu?((x - m) * scale + shift [+ res]): train: m = mean,
// scale = gamma * invstd; eval (var_not_invstd): inv = 1/sqrt(running_var + eps), m = running_mean - mean_shift
// (nullable: a folded conv bias). One definition for the apply, the fused apply + pool and the recomputed ReLU
// mask, so that their values are bitwise the same.
struct ApplyConsts {
  float m, scale, shift;
};
__device__ __forceinline__ ApplyConsts apply_consts(int64_t ch, const float* __restrict__ gamma,
                                                    const float* __restrict__ beta, const float* __restrict__ mean,
                                                    const float* __restrict__ inv_or_var, bool var_not_invstd,
                                                    float eps, const float* __restrict__ mean_shift) {
  const float inv = var_not_invstd ? 1.0f / sqrtf(inv_or_var[ch] + eps) : inv_or_var[ch];
  return {mean_shift ? mean[ch] - mean_shift[ch] : mean[ch], gamma[ch] * inv, beta[ch]};
}
// (x - m) * scale + shift with one rounding (fmaf), before a residual, the ReLU and the rounding to T.
__device__ __forceinline__ float apply_affine(float xf, const ApplyConsts& k) {
  return fmaf(xf - k.m, k.scale, k.shift);
}

// The apply pass's ReLU: v, or 0 where v <= 0; NaN propagates, as torch.relu.
__device__ __forceinline__ float apply_relu(float v) { return (v > 0.0f || v != v) ? v : 0.0f; }

// The fused ReLU's mask without reading its output: y > 0 for the y that bn_fwd_apply_kernel stored from x (no
// residual), recomputed with the same float operations (x - mean, one fmaf with gamma * invstd and beta, rounding to
// T), so it is bitwise the mask of the stored y: a value that rounds to 0 or is NaN gives no gradient there too.
// f16 without the round trip: v rounds (to nearest even) to a positive half exactly when v > 2^-25, half the
// smallest positive subnormal (2^-25 itself ties to 0; NaN compares false; a normal f32 threshold, so flushing
// f32 subnormals changes nothing).
template <class T>
__device__ __forceinline__ bool relu_kept(float xf, float m, float scale, float beta) {
  const float v = apply_affine(xf, ApplyConsts{m, scale, beta});
  if constexpr (std::is_same_v<T, __half>) return v > 0x1p-25f;
  return to_f32(from_f32<T>(v)) > 0.0f;
}

// relu_kept of one channel as a range of x (relu_kept_range.h: the kept x of T are exactly lo <= x <= hi), found by
// searching relu_kept<T> itself -- 16 evaluations, once per channel, for kernels that then test packed pairs.
template <class T>
__device__ __forceinline__ KeptRange relu_kept_range(float m, float scale, float beta) {
  constexpr uint16_t kInfBits = std::is_same_v<T, __half> ? 0x7c00 : 0x7f80;
  return kept_range_search(kInfBits, scale, [&](uint16_t b) { return relu_kept<T>(f32_of(b, T{}), m, scale, beta); });
}

// Both halves of the packed pair x (two T) inside their ranges [lo, hi] (packed the same way): 0xffff per half
// where inside, else 0 (NaN never inside).
template <class T>
__device__ __forceinline__ uint32_t in_range2(uint32_t x, uint32_t lo, uint32_t hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 xv = *reinterpret_cast<const __half2*>(&x), l = *reinterpret_cast<const __half2*>(&lo),
                  h = *reinterpret_cast<const __half2*>(&hi);
    return __hge2_mask(xv, l) & __hle2_mask(xv, h);
  } else {
    const __nv_bfloat162 xv = *reinterpret_cast<const __nv_bfloat162*>(&x),
                         l = *reinterpret_cast<const __nv_bfloat162*>(&lo),
                         h = *reinterpret_cast<const __nv_bfloat162*>(&hi);
    return __hge2_mask(xv, l) & __hle2_mask(xv, h);
  }
}

// The incoming gradient g of one element, for both backward passes: dy, or 0 where the fused ReLU cut it (the mask
// recomputed from x when relu_beta is given, else relu_y > 0 when relu_y is given; y is that element of relu_y).
template <class T>
__device__ __forceinline__ float relu_grad_in(T dy, T x, T y, bool recompute, bool stored, float m, float scale,
                                              float beta) {
  const bool masked = recompute ? !relu_kept<T>(to_f32(x), m, scale, beta) : (stored && !(to_f32(y) > 0.0f));
  return masked ? 0.0f : to_f32(dy);
}

// The backward's per-channel constants (training batch norm over n rows): m = mean, a = gamma * invstd (also the
// recomputed mask's scale), mg = dbeta / n, k = invstd * dgamma / n, b = the forward's beta for the recomputed
// ReLU mask (0 when relu_beta is null); inv_n = 1.0f / n as a float division on the device.
struct BnBwdConsts {
  float m, a, mg, k, b;
};
__device__ __forceinline__ BnBwdConsts bn_bwd_consts(int64_t ch, const float* __restrict__ gamma,
                                                     const float* __restrict__ mean, const float* __restrict__ invstd,
                                                     const float* __restrict__ dgamma,
                                                     const float* __restrict__ dbeta,
                                                     const float* __restrict__ relu_beta, float inv_n) {
  return {mean[ch], gamma[ch] * invstd[ch], dbeta[ch] * inv_n, invstd[ch] * (dgamma[ch] * inv_n),
          relu_beta ? relu_beta[ch] : 0.0f};
}
// dx = gamma * invstd * (g - dbeta / n - (x - mean) * invstd * dgamma / n) of one element, g the masked incoming
// gradient (relu_grad_in), x as f32, before the rounding to T (bn_bwd_dx; a caller that rounds two at once).
__device__ __forceinline__ float bn_bwd_dx_f32(float g, float xf, const BnBwdConsts& k) {
  return k.a * fmaf(-(xf - k.m), k.k, g - k.mg);
}
// The same rounded once to T.
template <class T>
__device__ __forceinline__ T bn_bwd_dx(float g, T x, const BnBwdConsts& k) {
  return from_f32<T>(bn_bwd_dx_f32(g, to_f32(x), k));
}

}  // namespace
}  // namespace trctl
