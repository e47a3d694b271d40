// The data gradient of a stride-1 convolution as a forward convolution (train.conv_dgrad_fwd): the rule, the
// geometry it becomes and the CPU reference of its filter transform, which the CUDA kernel (dgrad_fwd_cuda.h)
// reproduces bitwise. cuDNN's data-gradient kernels run VGG's 3x3 layers slower than its forward kernels on the same
// shapes (RESULTS.md run 65: conv2_2's forward at 85 % of the tensor peak, its data gradient at 63 %); the forward
// over flipped, transposed filters computes the same sums.
//
// With stride 1 (x zero outside the image):
//   dx[n,h,w,c] = sum_{k, r<R, s<S} dy[n, h + pad_h - dil_h r, w + pad_w - dil_w s, k] * w[k,r,s,c]
// Write r = R-1-r', s = S-1-s': the row h + pad_h - dil_h (R-1) + dil_h r' = h - pad'_h + dil_h r' with
// pad'_h = dil_h (R-1) - pad_h (columns alike), so with
//   wf[c,r',s',k] = w[k, R-1-r', S-1-s', c]                                              wf (C, R, S, K)
//   dx = conv(dy (N, P, Q, K), wf): C filters over K channels, R x S, stride 1, dilation dil, padding pad'
// whose output is H x W (P + 2 pad' - dil (R-1) = H). The same products, summed in the forward kernel's order.
#pragma once
#include <cstdint>

#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

// The rule: stride 1 in both dims, groups 1, and pad_h <= dil_h, pad_w <= dil_w (S-1) (pad' >= 0). g finished.
bool dgrad_fwd_eligible(const Conv2dGeom& g);

// The forward geometry of g's data gradient: input (N, P, Q, K), C filters of R x S over K channels, stride 1,
// dilation as g's, padding pad' above; finished, its output (N, H, W, C). g finished and eligible.
Conv2dGeom dgrad_fwd_geom(const Conv2dGeom& g);

// wf (C, R, S, K) from w (K, R, S, C), g's sizes. T: float, double, or uint16_t (f16/bf16 bits): a copy.
template <class T>
void dgrad_fwd_filter_cpu(const Conv2dGeom& g, const T* w, T* wf);

}  // namespace trctl
