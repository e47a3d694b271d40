// A stride-2 few-channel convolution (the ResNet stem; rule s2d_conv_eligible, index math in
// runtime/ops/conv2d/s2d.h) as space-to-depth + a stride-1 cuDNN convolution, forward and weight gradient, as
// the CUDA backend runs it under AMP (train.conv_s2d) and `trctl bench kernels` times it:
//   forward  x -> z (scratch), w -> w2 (scratch), y = cudnn_conv_fwd(plan on s2d_conv_geom(g), z, w2) [+ bias]
//   wgrad    x -> z (scratch, recomputed), dw2 = cudnn_conv_wgrad(plan, dy, z) (io dtype, scratch),
//            dw (K, R, S, C) fp32 = dw2 regathered and widened
// The plan is an ordinary CudnnConvPlan of the stride-1 geometry (io f16/bf16, heuristic or autotuned), so cuDNN
// runs tensor-core kernels over Cz = 16 channels instead of its CUDA-core kernels over C = 3. The calls neither
// allocate nor synchronize: capturable into a CUDA graph.
#pragma once
#include <cudnn.h>

#include <cstddef>

#include "core/util/error.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/cuda/gpu_dtype.h"
#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

// Bytes of z (N, Hz, Wz, Cz) and of w2 / dw2 (K, R2, S2, Cz) in dtype t; g finished and eligible.
size_t s2d_conv_input_bytes(const Conv2dGeom& g, GpuDType t);
size_t s2d_conv_filter_bytes(const Conv2dGeom& g, GpuDType t);

// y (N,P,Q,K) = conv(x (N,H,W,C), w (K,R,S,C)) [+ bias (K)], all of plan.desc.io; g the original geometry
// (finished, eligible), plan planned on s2d_conv_geom(g). z and w2: scratch of s2d_conv_input_bytes /
// s2d_conv_filter_bytes, 16-byte aligned (cuDNN's tensor-core kernels want it); ws: cuDNN's workspace.
Status s2d_conv_fwd(cudnnHandle_t h, cudaStream_t s, const Conv2dGeom& g, const CudnnConvPlan& plan, const void* x,
                    const void* w, const void* bias, void* y, void* z, void* w2, void* ws, size_t ws_bytes);
// dw (K,R,S,C) fp32 = d(sum y*dy)/dw from dy (N,P,Q,K) and x (N,H,W,C) of plan.desc.io; dw overwritten. z and
// dw2 scratch as above (dw2: s2d_conv_filter_bytes).
Status s2d_conv_wgrad(cudnnHandle_t h, cudaStream_t s, const Conv2dGeom& g, const CudnnConvPlan& plan,
                      const void* dy, const void* x, float* dw, void* z, void* dw2, void* ws, size_t ws_bytes);

}  // namespace trctl
