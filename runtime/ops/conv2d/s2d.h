// Space-to-depth for stride-2 convolutions over few input channels (the ResNet stem, 7x7/2 over C = 3): the rule
// that selects them, the stride-1 geometry they become, and the CPU references of the three transforms (input,
// filter, filter gradient) that the CUDA kernels (s2d_cuda.h) reproduce bitwise. cuDNN runs a C = 3 conv far
// from its roofline; over Cz = 16 channels with stride 1 it uses tensor cores (the MLPerf ResNet trick).
//
// The direct conv (x zero outside the image; R2 = ceil(R/2), S2 = ceil(S/2)):
//   y[n,p,q,k] = sum_{r<R, s<S, c<C} x[n, 2p - pad_h + r, 2q - pad_w + s, c] * w[k,r,s,c]
// Write r = 2a + bh, s = 2e + bw (a < R2, e < S2, bh, bw in {0,1}): every (r, s) is one (a, bh, e, bw), and the
// input row 2p - pad_h + 2a + bh = 2(p+a) + bh - pad_h depends on p and a only through u = p + a (columns alike).
// So with the blocked input z and filter w2, channel j = (2 bh + bw) C + c of Cz = round_up(4C, 8):
//   z[n,u,v,j]  = x[n, 2u + bh - pad_h, 2v + bw - pad_w, c]  (0 outside the image, 0 for j >= 4C)
//                 u < Hz = P + R2 - 1, v < Wz = Q + S2 - 1                                   z  (N, Hz, Wz, Cz)
//   w2[k,a,e,j] = w[k, 2a + bh, 2e + bw, c]  (0 where 2a + bh >= R or 2e + bw >= S, 0 for j >= 4C)
//                                                                                            w2 (K, R2, S2, Cz)
//   y[n,p,q,k]  = sum_{a<R2, e<S2, j<Cz} z[n, p+a, q+e, j] * w2[k,a,e,j]   (stride 1, no padding: output P x Q,
//                 since Hz - R2 + 1 = P; the added (a, bh) and (e, bw) taps have w2 = 0, the channels j >= 4C z = 0)
// and the weight gradient of the direct conv is that of the stride-1 conv over z, regathered:
//   dw[k,r,s,c] = sum_{n,p,q} dy[n,p,q,k] x[n, 2p-pad_h+r, 2q-pad_w+s, c] = dw2[k, r/2, s/2, (2 (r%2) + s%2) C + c]
// (dw2 (K, R2, S2, Cz) = the stride-1 conv's wgrad from z and dy). The data gradient is not transformed (a stem's
// input is data). Every transform is a copy: no arithmetic on the values, so CPU and GPU agree bitwise.
#pragma once
#include <cstdint>

#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

// The rule: stride 2 in both dims, dilation 1, groups 1, 4C <= 16 (so Cz <= 16: C = 1, 2 -> 8; C = 3, 4 -> 16),
// R, S >= 2 (a 1x1/2 conv is a strided GEMM, nothing to block), K % 8 == 0 (16-byte rows of y, dy and the filter).
bool s2d_conv_eligible(const Conv2dGeom& g);

// Cz = round_up(4C, 8): the channels of z and w2.
int64_t s2d_channels(const Conv2dGeom& g);

// The stride-1 geometry (N, Hz, Wz, Cz) -> K, R2 x S2, pad 0, stride 1, dilation 1, groups 1, finished: its output
// is exactly (N, P, Q, K) of g. g finished and eligible.
Conv2dGeom s2d_conv_geom(const Conv2dGeom& g);

// CPU references (g finished and eligible). T: float, double, or uint16_t (f16/bf16 bits: a pure copy, zero =
// bits 0). Outputs are overwritten, padding included.
// z (N, Hz, Wz, Cz) from x (N, H, W, C).
template <class T>
void s2d_input_cpu(const Conv2dGeom& g, const T* x, T* z);
// w2 (K, R2, S2, Cz) from w (K, R, S, C).
template <class T>
void s2d_filter_cpu(const Conv2dGeom& g, const T* w, T* w2);
// dw (K, R, S, C) from dw2 (K, R2, S2, Cz): the gather above (w2's zero taps and channels are dropped).
template <class T>
void s2d_filter_grad_cpu(const Conv2dGeom& g, const T* dw2, T* dw);

}  // namespace trctl
